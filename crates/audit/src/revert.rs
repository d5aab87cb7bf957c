//! `tcptail tune --revert`: the values saved by [`apply`](crate::tune::apply) written back,
//! without clobbering a change made since.
//!
//! [`revert`] takes the tune lock, reads the saved state and compares each key's current value
//! with the two it knows:
//!
//! - what tune wrote: the key is restored to its previous value;
//! - the previous value: nothing to do (the apply was killed before it got there, or the
//!   kernel never changed it);
//! - anything else: someone changed it after tune. Like sysctl.d and tuned users expect, that
//!   change is not overwritten: the revert refuses as a whole ([`Error::ChangedSince`], naming
//!   each key with both values) and writes nothing, unless `force` is given.
//!
//! Keys are restored in reverse order of application, then the side effects (the allowed
//! congestion controls, which setting the old default again may itself change). Every restored
//! value is read back. When one cannot be restored the state is kept for a retry
//! ([`Error::NotReverted`]); otherwise the `sysctl.d` file and the state are removed durably.
//! A profile's `--profile` argument, state and file are matched by name, so a revert only
//! ever removes `99-tcptail-NAME.conf` and `tune-NAME.json`.

use std::fs;
use std::path::Path;

use serde::Serialize;

use crate::Error;
use crate::error::with_causes;
use crate::files::remove_durably;
use crate::lock::TuneLock;
use crate::tune::{State, conf_path, state_path, write_sysctl};
use crate::view::HostView;

/// What [`revert`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Reverted {
    /// `(key, value)` written back, in the order written.
    pub restored: Vec<(String, String)>,
    /// `(key, value)` already at the previous value (never changed, e.g. by a killed apply).
    pub unchanged: Vec<(String, String)>,
    /// `(key, value found)` for keys changed since the apply and overwritten by `force`.
    pub forced: Vec<(String, String)>,
    /// The pid recorded in a lock file left by a tune that died, when this one took it over.
    pub took_over_lock: Option<u32>,
}

/// Restores the values saved when `profile` was applied under `view` with files under
/// `config_root`, refusing to overwrite a key changed since unless `force`.
pub fn revert(
    view: &HostView,
    config_root: &Path,
    profile: &str,
    force: bool,
) -> Result<Reverted, Error> {
    let lock = TuneLock::acquire(config_root)?;
    let path = state_path(config_root, profile);
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::NoState { profile: Some(profile.to_owned()) });
        }
        Err(source) => return Err(Error::Read { path, source }),
    };
    let state: State = serde_json::from_str(&text)
        .map_err(|e| Error::BadState { path: path.clone(), message: e.to_string() })?;
    let mut done = Reverted { took_over_lock: lock.taken_over(), ..Reverted::default() };
    let mut to_restore = Vec::new();
    let mut changed_since = Vec::new();
    // Applied keys newest first, then what the kernel changed by itself.
    for (key, before, wrote) in state.changed.iter().rev().chain(&state.side_effects) {
        match view.sysctl(key) {
            Some(now) if now == *before => done.unchanged.push((key.clone(), before.clone())),
            Some(now) if now == *wrote => to_restore.push((key, before)),
            now => {
                let now = now.unwrap_or_else(|| "(no such key)".to_owned());
                changed_since.push((key.clone(), wrote.clone(), now.clone()));
                if force {
                    done.forced.push((key.clone(), now));
                    to_restore.push((key, before));
                }
            }
        }
    }
    if !changed_since.is_empty() && !force {
        return Err(Error::ChangedSince { profile: state.profile, changed: changed_since });
    }
    let mut not_restored = Vec::new();
    for (key, before) in to_restore {
        match write_sysctl(view, key, before) {
            Ok(()) => done.restored.push((key.clone(), before.clone())),
            Err(e) => not_restored.push((key.clone(), before.clone(), with_causes(&e))),
        }
    }
    if !not_restored.is_empty() {
        // The state stays: it is the only record of the values still to restore.
        return Err(Error::NotReverted {
            profile: state.profile,
            restored: done.restored.len(),
            not_restored,
            state: path,
        });
    }
    // The file this profile's apply wrote (not a path read from the state: revert removes
    // nothing but tcptail's own files).
    remove_durably(&conf_path(config_root, profile))?;
    remove_durably(&path)?;
    Ok(done)
}
