//! `tcptail tune`: the change a profile implies, applied atomically, verified, reversible.
//!
//! [`plan`] turns a profile and the current values into [`Entry`]s (the value to write, and
//! whether it differs from today's). [`apply`] then:
//!
//! 1. checks every key exists under the view's root, and runs the caller's validator (the CLI
//!    validates per-namespace keys in a throwaway network namespace: [`validate_in_netns`]);
//! 2. saves the previous values to `var/lib/tcptail/tune-NAME.json` and writes
//!    `etc/sysctl.d/99-tcptail-NAME.conf` (both temp file + rename, under the config root).
//!    `99-tcptail-` sorts after `99-sysctl.conf`, so no stock file overrides it; files that
//!    sort later and set the same keys are reported;
//! 3. writes each changed value and reads it back; a failure half-way restores what was
//!    written (in reverse order) and removes both files ([`Error::RolledBack`]);
//! 4. re-reads every key from `/proc/sys` to verify.
//!
//! [`revert`] writes the saved previous values back exactly, verifies them, and removes the
//! file and the state.
//!
//! Invariants: nothing is written outside the view's root and the config root; host-scope
//! keys are skipped (not written) inside a child network namespace; a key's file is opened
//! for writing without `O_CREAT`, so a missing key is an error, never a new file.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::host::{HostView, Snapshot, config_files, parse_config};
use crate::profile::{Profile, Scope, normalize};

/// One key of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Entry {
    /// Dotted key.
    pub key: String,
    /// Its scope.
    pub scope: Scope,
    /// Today's value (`None`: no such key).
    pub current: Option<String>,
    /// The value the file sets.
    pub value: String,
    /// Whether `value` differs from `current`.
    pub changes: bool,
    /// One line: why.
    pub rationale: String,
    /// Where the recommendation comes from.
    pub source: String,
}

/// What a profile implies for this host.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    /// The profile's name.
    pub profile: String,
    /// Keys the file sets, in profile order.
    pub entries: Vec<Entry>,
    /// Keys left out, with the reason.
    pub skipped: Vec<(String, String)>,
}

/// `99-tcptail-NAME.conf` (the name reduced to `[a-z0-9-]`).
pub fn file_name(profile: &str) -> String {
    format!("99-tcptail-{}.conf", slug(profile))
}

fn slug(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c.to_ascii_lowercase() } else { '-' })
        .collect()
}

/// The plan for `profile` against the values in `snap`.
pub fn plan(profile: &Profile, snap: &Snapshot) -> Plan {
    let mut entries = Vec::new();
    let mut skipped = Vec::new();
    for s in &profile.settings {
        if s.scope == Scope::Host && snap.host_hidden() {
            skipped.push((s.key.clone(), "host scope: not visible here".to_owned()));
            continue;
        }
        let current = snap.sysctl(&s.key).map(str::to_owned);
        if current.is_none() {
            skipped.push((s.key.clone(), "no such key on this kernel".to_owned()));
            continue;
        }
        let target = s.want.target(current.as_deref());
        let value = target.clone().or_else(|| current.clone()).unwrap_or_default();
        entries.push(Entry {
            key: s.key.clone(),
            scope: s.scope,
            current,
            value,
            changes: target.is_some(),
            rationale: s.rationale.clone(),
            source: s.source.clone(),
        });
    }
    Plan { profile: profile.name.clone(), entries, skipped }
}

impl Plan {
    /// The entries that change something.
    pub fn changes(&self) -> impl Iterator<Item = &Entry> {
        self.entries.iter().filter(|e| e.changes)
    }

    /// The diff against current values: `-key = old` / `+key = new` per changed key.
    pub fn diff(&self) -> String {
        let mut out = String::new();
        for e in &self.entries {
            if e.changes {
                let cur = e.current.as_deref().unwrap_or("(unset)");
                out.push_str(&format!("-{} = {cur}\n+{} = {}\n", e.key, e.key, e.value));
            } else {
                out.push_str(&format!(" {} = {}\n", e.key, e.value));
            }
        }
        for (key, why) in &self.skipped {
            out.push_str(&format!("# skipped {key}: {why}\n"));
        }
        out
    }
}

/// Saved by [`apply`], read by [`revert`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// The profile applied.
    pub profile: String,
    /// The sysctl.d file written (absolute, under the config root).
    pub file: PathBuf,
    /// `(key, value before, value applied)` for every key that was changed.
    pub changed: Vec<(String, String, String)>,
}

/// What [`apply`] did.
#[derive(Debug, Clone, Serialize)]
pub struct Applied {
    /// The file written.
    pub file: PathBuf,
    /// The state saved for revert.
    pub state: PathBuf,
    /// `(key, before, after)` for every changed key, all verified by re-reading.
    pub changed: Vec<(String, String, String)>,
    /// Later configuration files that set the same keys (`file:line: key`): they would win at
    /// boot.
    pub overridden_by: Vec<String>,
}

/// The state file of `profile` under `config_root`.
pub fn state_path(config_root: &Path, profile: &str) -> PathBuf {
    config_root.join(format!("var/lib/tcptail/tune-{}.json", slug(profile)))
}

/// The sysctl.d file of `profile` under `config_root`.
pub fn conf_path(config_root: &Path, profile: &str) -> PathBuf {
    config_root.join("etc/sysctl.d").join(file_name(profile))
}

/// Writes `text` to `path` atomically: a temp file in the same directory, then rename.
pub fn write_atomic(path: &Path, text: &str) -> Result<(), Error> {
    let err = |source| Error::Write { path: path.to_owned(), source };
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(err)?;
    let tmp = dir.join(format!(
        ".{}.tmp{}",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("tcptail"),
        std::process::id()
    ));
    let result = (|| {
        let mut f = fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result.map_err(err)
}

/// Writes one sysctl under `view` and reads it back (no `O_CREAT`).
pub fn write_sysctl(view: &HostView, key: &str, value: &str) -> Result<(), Error> {
    let path = view.sysctl_path(key);
    if !path.exists() {
        return Err(Error::NoSuchKey { key: key.to_owned(), path });
    }
    let rejected = |source| Error::Rejected {
        key: key.to_owned(),
        value: value.to_owned(),
        context: String::new(),
        source,
    };
    let mut f = OpenOptions::new().write(true).truncate(true).open(&path).map_err(rejected)?;
    f.write_all(format!("{value}\n").as_bytes()).map_err(rejected)?;
    drop(f);
    verify(view, key, value)
}

fn verify(view: &HostView, key: &str, wanted: &str) -> Result<(), Error> {
    let actual = view.sysctl(key).unwrap_or_default();
    if actual == normalize(wanted) {
        Ok(())
    } else {
        Err(Error::NotApplied {
            key: key.to_owned(),
            wanted: normalize(wanted),
            actual,
            context: String::new(),
        })
    }
}

/// Validates per-namespace changes in a throwaway network namespace (needs root): catches
/// keys that do not exist and values the kernel rejects, without touching the host.
pub fn validate_in_netns(plan: &Plan) -> Result<(), Error> {
    use tcptail_netns::{Cleanup, Netns, ensure_root};
    let keys: Vec<&Entry> = plan.changes().filter(|e| e.scope == Scope::Netns).collect();
    if keys.is_empty() {
        return Ok(());
    }
    ensure_root()?;
    let cleanup = Cleanup::new();
    let ns = Netns::create(&cleanup, "validate")?;
    for e in keys {
        ns.set_sysctl(&e.key, &e.value)?;
    }
    ns.delete()?;
    Ok(())
}

/// Renders the `sysctl.d` file: a header, one rationale comment line per key.
pub fn render_file(plan: &Plan) -> String {
    let mut out = format!(
        "# Written by tcptail tune --profile {}. Revert with: tcptail tune --revert --profile {}\n",
        plan.profile, plan.profile
    );
    for e in &plan.entries {
        out.push_str(&format!("# {} [{}]\n{} = {}\n", e.rationale, e.source, e.key, e.value));
    }
    out
}

/// A check run on the plan before anything is written (e.g. [`validate_in_netns`]).
pub type Validator<'a> = &'a dyn Fn(&Plan) -> Result<(), Error>;

/// Applies `plan` under `view` (the `/proc/sys` root) with files under `config_root`.
/// `validate` runs after the existence check and before anything is written.
pub fn apply(
    plan: &Plan,
    view: &HostView,
    config_root: &Path,
    validate: Option<Validator<'_>>,
) -> Result<Applied, Error> {
    for e in &plan.entries {
        let path = view.sysctl_path(&e.key);
        if !path.exists() {
            return Err(Error::NoSuchKey { key: e.key.clone(), path });
        }
    }
    let state_file = state_path(config_root, &plan.profile);
    if state_file.exists() {
        return Err(Error::AlreadyApplied { state: state_file });
    }
    if let Some(validate) = validate {
        validate(plan)?;
    }
    let file = conf_path(config_root, &plan.profile);
    let mut changed = Vec::new();
    for e in plan.changes() {
        let before = view.sysctl(&e.key).unwrap_or_default();
        changed.push((e.key.clone(), before, normalize(&e.value)));
    }
    let state = State { profile: plan.profile.clone(), file: file.clone(), changed };
    let json = serde_json::to_string_pretty(&state).expect("state serialises");
    write_atomic(&state_file, &json)?;
    let cleanup_files = || {
        let _ = fs::remove_file(&file);
        let _ = fs::remove_file(&state_file);
    };
    if let Err(e) = write_atomic(&file, &render_file(plan)) {
        cleanup_files();
        return Err(e);
    }
    let mut done: Vec<&(String, String, String)> = Vec::new();
    let mut failure = None;
    for c in &state.changed {
        match write_sysctl(view, &c.0, &c.2) {
            Ok(()) => done.push(c),
            Err(e) => {
                // The failed write may have half-applied (e.g. a partial multi-value write).
                done.push(c);
                failure = Some(e);
                break;
            }
        }
    }
    if failure.is_none() {
        failure = state.changed.iter().find_map(|c| verify(view, &c.0, &c.2).err());
    }
    if let Some(cause) = failure {
        let restored = done.iter().rev().filter(|c| write_sysctl(view, &c.0, &c.1).is_ok()).count();
        cleanup_files();
        return Err(Error::RolledBack { restored, cause: Box::new(cause) });
    }
    Ok(Applied {
        overridden_by: overridden_by(
            config_root,
            &plan.profile,
            state.changed.iter().map(|c| c.0.as_str()),
        ),
        file,
        state: state_file,
        changed: state.changed,
    })
}

/// Lines in configuration files under `config_root` that are applied after `profile`'s own
/// file and set one of `keys` (`file:line: key`): they would override it at boot. systemd-sysctl
/// orders files by name across directories; `/etc/sysctl.conf` is read last by procps.
pub fn overridden_by<'a>(
    config_root: &Path,
    profile: &str,
    keys: impl IntoIterator<Item = &'a str>,
) -> Vec<String> {
    let keys: Vec<&str> = keys.into_iter().collect();
    let cfg = HostView::at(config_root);
    let ours = file_name(profile);
    config_files(&cfg)
        .into_iter()
        .filter(|f| {
            let name = f.rsplit('/').next().unwrap_or_default();
            f == "/etc/sysctl.conf" || name > ours.as_str()
        })
        .filter_map(|f| Some((cfg.read(&f)?, f)))
        .flat_map(|(text, f)| parse_config(&f, &text))
        .filter(|l| keys.contains(&l.key.as_str()))
        .map(|l| format!("{}:{}: {}", l.file, l.line, l.key))
        .collect()
}

/// Restores the values saved when `profile` was applied, verifies them, and removes the
/// sysctl.d file and the state. Returns the `(key, restored value)` pairs.
pub fn revert(
    view: &HostView,
    config_root: &Path,
    profile: &str,
) -> Result<Vec<(String, String)>, Error> {
    let path = state_path(config_root, profile);
    let text = match fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::NoState { path });
        }
        Err(source) => return Err(Error::Read { path, source }),
    };
    let state: State = serde_json::from_str(&text)
        .map_err(|e| Error::BadState { path: path.clone(), message: e.to_string() })?;
    let mut restored = Vec::new();
    let mut first_err = None;
    for (key, before, _) in state.changed.iter().rev() {
        match write_sysctl(view, key, before) {
            Ok(()) => restored.push((key.clone(), before.clone())),
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_err {
        // Keep the state so that a second `--revert` can retry.
        return Err(e);
    }
    if state.file.exists() {
        fs::remove_file(&state.file)
            .map_err(|source| Error::Write { path: state.file.clone(), source })?;
    }
    fs::remove_file(&path).map_err(|source| Error::Write { path: path.clone(), source })?;
    restored.reverse();
    Ok(restored)
}

/// Profiles with saved state under `config_root`.
pub fn applied_profiles(config_root: &Path) -> Vec<String> {
    HostView::at(config_root)
        .list("var/lib/tcptail")
        .into_iter()
        .filter_map(|n| n.strip_prefix("tune-")?.strip_suffix(".json").map(str::to_owned))
        .collect()
}

#[cfg(test)]
#[path = "tune_tests.rs"]
mod tests;
