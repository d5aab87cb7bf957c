//! `tcptail tune`: the change a profile implies, applied atomically, verified, reversible.
//!
//! [`plan`] turns a profile and the current values into [`Entry`]s (the value to write, and
//! whether it differs from today's) and the [`SideEffect`]s the kernel will add by itself.
//! [`apply`] then, holding the tune lock ([`TuneLock`]: one tune at a time):
//!
//! 1. checks the plan's text ([`Plan::check_text`]) and that every key exists under the
//!    view's root;
//! 2. refuses ([`Error::Overridden`], nothing written) when a configuration file applied
//!    after ours at boot sets one of our keys to another value: `99-tcptail-` sorts after the
//!    stock `99-sysctl.conf`, but a local `99-z*.conf` or `/etc/sysctl.conf` (read last by
//!    procps) would still win, so such a conflict is a failure, not a warning;
//! 3. checks congestion-control settings from the kernel's lists ([`cc::check`]), never by a
//!    trial write, then runs the caller's validator (the CLI tries the other per-namespace
//!    keys in a throwaway network namespace: [`validate_in_netns`]);
//! 4. saves the previous values to `var/lib/tcptail/tune-NAME.json`, then writes
//!    `etc/sysctl.d/99-tcptail-NAME.conf` (both durably: temp file, fsync, rename, fsync of
//!    the directory), so the previous values are on disk before the first key changes;
//! 5. writes each changed value and reads it back; a failure half-way restores what was
//!    written (in reverse order) and removes the file ([`Error::RolledBack`]). The state is
//!    removed too when every value is back; when a restore fails it is kept (the only record
//!    of the previous values) and the error names each key left changed;
//! 6. re-reads every key from `/proc/sys` to verify, and records what the kernel changed by
//!    itself (the allowed congestion controls) so that revert restores it too.
//!
//! A run killed after step 4 leaves the state and the file: `tcptail tune --revert`
//! ([`crate::revert`]) then restores every key it finds changed, and a new apply is refused
//! until it has.
//!
//! Invariants: nothing is written outside the view's root and the config root; host-scope
//! keys are skipped (not written, with the reason) inside a child network namespace or a
//! container, and so is a restricted default congestion control in a child namespace; a key's
//! file is opened for writing without `O_CREAT`, so a missing key is an error, never a new
//! file.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::cc::{self, SideEffect};
use crate::checks::{HOST_NOT_CHANGEABLE, HOST_NOT_VISIBLE};
use crate::error::with_causes;
use crate::files::{remove_durably, write_durably};
use crate::host::{Snapshot, config_files, parse_config};
use crate::lock::TuneLock;
use crate::profile::{
    HostProfile, Scope, line_problem, normalize, valid_key, valid_name, value_problem,
};
use crate::view::HostView;

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
    /// What the kernel will change by itself when the entries are written.
    pub side_effects: Vec<SideEffect>,
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
pub fn plan(profile: &HostProfile, snap: &Snapshot) -> Plan {
    let mut entries = Vec::new();
    let mut skipped = Vec::new();
    for s in &profile.settings {
        if s.scope == Scope::Host
            && let Some(place) = snap.confinement()
        {
            let why = match snap.sysctl(&s.key) {
                Some(_) => format!(
                    "{HOST_NOT_CHANGEABLE} ({place}): it is the host's, set it with tcptail \
                     tune on the host"
                ),
                None => format!("{HOST_NOT_VISIBLE} ({place})"),
            };
            skipped.push((s.key.clone(), why));
            continue;
        }
        let current = snap.sysctl(&s.key).map(str::to_owned);
        if current.is_none() {
            skipped.push((s.key.clone(), "no such key on this kernel".to_owned()));
            continue;
        }
        let target = s.want.target(current.as_deref());
        if let (cc::DEFAULT, Some(name)) = (s.key.as_str(), &target)
            && cc::assess(name, &snap.cc) == cc::Assessment::RestrictedHere
        {
            skipped.push((s.key.clone(), cc::restricted_here(name, &snap.cc)));
            continue;
        }
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
    let side_effects = entries
        .iter()
        .find(|e| e.key == cc::DEFAULT && e.changes)
        .map(|e| cc::side_effects(&e.value, &snap.cc))
        .unwrap_or_default();
    Plan { profile: profile.name.clone(), entries, skipped, side_effects }
}

impl Plan {
    /// The entries that change something.
    pub fn changes(&self) -> impl Iterator<Item = &Entry> + Clone {
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
        for s in &self.side_effects {
            out.push_str(&format!(
                "# the kernel also changes {}: {} -> {} ({})\n",
                s.key, s.before, s.after, s.why
            ));
        }
        out
    }

    /// The `(key, value)` pairs the apply writes.
    fn writes(&self) -> impl Iterator<Item = (&str, &str)> + Clone {
        self.changes().map(|e| (e.key.as_str(), e.value.as_str()))
    }
}

/// Saved by [`apply`], read by [`revert`](crate::revert::revert).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// The profile applied.
    pub profile: String,
    /// The sysctl.d file written (absolute, under the config root).
    pub file: PathBuf,
    /// `(key, value before, value applied)` for every key that was changed.
    pub changed: Vec<(String, String, String)>,
    /// `(key, value before, value after)` for every key the kernel changed by itself and
    /// revert restores (after the changed keys).
    #[serde(default)]
    pub side_effects: Vec<(String, String, String)>,
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
    /// What the kernel changed by itself, as read back.
    pub side_effects: Vec<SideEffect>,
    /// The pid recorded in a lock file left by a tune that died, when this one took it over.
    pub took_over_lock: Option<u32>,
}

/// The state file of `profile` under `config_root`.
pub fn state_path(config_root: &Path, profile: &str) -> PathBuf {
    config_root.join(format!("var/lib/tcptail/tune-{}.json", slug(profile)))
}

/// The sysctl.d file of `profile` under `config_root`.
pub fn conf_path(config_root: &Path, profile: &str) -> PathBuf {
    config_root.join("etc/sysctl.d").join(file_name(profile))
}

/// Saves `state` durably (temp file, fsync, rename, fsync of the directory).
pub fn save_state(path: &Path, state: &State) -> Result<(), Error> {
    let json = serde_json::to_string_pretty(state).expect("state serialises");
    write_durably(path, &json, 0o644)
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
///
/// The default congestion control is not tried there: a child namespace may only select
/// algorithms in the host's allowed list, so a trial would refuse what the host itself can
/// take; [`cc::check`] judges it from the kernel's lists instead.
pub fn validate_in_netns(plan: &Plan) -> Result<(), Error> {
    use tcptail_netns::{Cleanup, Netns, ensure_root};
    let keys: Vec<&Entry> =
        plan.changes().filter(|e| e.scope == Scope::Netns && e.key != cc::DEFAULT).collect();
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

impl Plan {
    /// Checks that every piece of text the `sysctl.d` file carries is one line (the profile
    /// parser refuses such text with its file and line; this catches a [`Plan`] built any
    /// other way), and that the rendered file sets exactly the plan's keys to its values:
    /// nothing the dry run did not show.
    pub fn check_text(&self) -> Result<(), Error> {
        let unsafe_text = |what: String, problem: String| Error::UnsafeText {
            profile: self.profile.clone(),
            what,
            problem,
        };
        if !valid_name(&self.profile) {
            return Err(unsafe_text(
                "the profile name".into(),
                "use 1 to 64 characters from [A-Za-z0-9._-]".into(),
            ));
        }
        for e in &self.entries {
            if !valid_key(&e.key) {
                return Err(unsafe_text(format!("key {:?}", e.key), "not a sysctl key".into()));
            }
            if let Some(p) = value_problem(&e.value) {
                return Err(unsafe_text(format!("the value of {}", e.key), p));
            }
            for (field, text) in [("rationale", &e.rationale), ("source", &e.source)] {
                if let Some(p) = line_problem(text) {
                    return Err(unsafe_text(
                        format!("the {field} of {}", e.key),
                        format!("contains {p}"),
                    ));
                }
            }
        }
        let file = render_file(self);
        let set: Vec<(String, String)> =
            parse_config("", &file).into_iter().map(|l| (l.key, l.value)).collect();
        let want: Vec<(String, String)> =
            self.entries.iter().map(|e| (e.key.clone(), normalize(&e.value))).collect();
        if set != want || file.lines().count() != 1 + 2 * self.entries.len() {
            return Err(unsafe_text(
                "the rendered file".into(),
                "it does not read back as exactly the plan's settings".into(),
            ));
        }
        Ok(())
    }
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

/// Writes one sysctl under a view and verifies it ([`write_sysctl`]; tests substitute a
/// kernel that refuses chosen writes).
pub type SysctlWriter<'a> = &'a dyn Fn(&HostView, &str, &str) -> Result<(), Error>;

/// Applies `plan` under `view` (the `/proc/sys` root) with files under `config_root`.
/// `validate` runs after the existence and override checks and before anything is written.
pub fn apply(
    plan: &Plan,
    view: &HostView,
    config_root: &Path,
    validate: Option<Validator<'_>>,
) -> Result<Applied, Error> {
    apply_with(plan, view, config_root, validate, &write_sysctl)
}

/// [`apply`] with the sysctl writes going through `write`.
pub fn apply_with(
    plan: &Plan,
    view: &HostView,
    config_root: &Path,
    validate: Option<Validator<'_>>,
    write: SysctlWriter<'_>,
) -> Result<Applied, Error> {
    plan.check_text()?;
    let lock = TuneLock::acquire(config_root)?;
    for e in &plan.entries {
        let path = view.sysctl_path(&e.key);
        if !path.exists() {
            return Err(Error::NoSuchKey { key: e.key.clone(), path });
        }
    }
    let state_file = state_path(config_root, &plan.profile);
    if state_file.exists() {
        return Err(Error::AlreadyApplied { profile: plan.profile.clone(), state: state_file });
    }
    let file = conf_path(config_root, &plan.profile);
    let lines = overridden_by(config_root, plan);
    if !lines.is_empty() {
        return Err(Error::Overridden { file, lines });
    }
    let facts = cc::Facts::read(view);
    cc::check(plan.writes(), &facts)?;
    if let Some(validate) = validate {
        validate(plan)?;
    }
    let mut changed = Vec::new();
    for e in plan.changes() {
        let before = view.sysctl(&e.key).unwrap_or_default();
        changed.push((e.key.clone(), before, normalize(&e.value)));
    }
    // What the kernel will change by itself, predicted now so that a revert after a killed
    // apply restores it too; replaced by what reads back once the apply is done.
    let predicted: Vec<SideEffect> = plan
        .writes()
        .find(|(k, _)| *k == cc::DEFAULT)
        .map(|(_, name)| cc::side_effects(name, &facts))
        .unwrap_or_default();
    let mut state = State {
        profile: plan.profile.clone(),
        file: file.clone(),
        changed,
        side_effects: restorable(&predicted),
    };
    save_state(&state_file, &state)?;
    if let Err(e) = write_durably(&file, &render_file(plan), 0o644) {
        let _ = remove_durably(&file);
        let _ = remove_durably(&state_file);
        return Err(e);
    }
    let mut done: Vec<&(String, String, String)> = Vec::new();
    let mut failure = None;
    for c in &state.changed {
        // A failed write stays in `done`: a multi-value write can fail after storing its
        // first values, so it is checked (and restored) like the others.
        done.push(c);
        if let Err(e) = write(view, &c.0, &c.2) {
            failure = Some(e);
            break;
        }
        if done.len() == 1 {
            crate::fixture::run_hook(view, AFTER_FIRST_KEY);
        }
    }
    if failure.is_none() {
        failure = state.changed.iter().find_map(|c| verify(view, &c.0, &c.2).err());
    }
    if let Some(cause) = failure {
        return Err(roll_back(&done, &state.side_effects, view, &file, &state_file, write, cause));
    }
    let side_effects: Vec<SideEffect> = predicted
        .into_iter()
        .filter_map(|s| {
            let after = view.sysctl(&s.key)?;
            (after != s.before).then_some(SideEffect { after, ..s })
        })
        .collect();
    if restorable(&side_effects) != state.side_effects {
        state.side_effects = restorable(&side_effects);
        save_state(&state_file, &state)?;
    }
    Ok(Applied {
        file,
        state: state_file,
        changed: state.changed,
        side_effects,
        took_over_lock: lock.taken_over(),
    })
}

/// The fixture hook [`apply`] runs after writing its first key (see
/// [`FakeRoot::hook`](crate::fixture::FakeRoot::hook)).
pub const AFTER_FIRST_KEY: &str = "tune-after-first-key";

/// The side effects revert can undo, as saved in the state: the allowed list (the available
/// list only grows by a module load, which revert does not undo).
fn restorable(effects: &[SideEffect]) -> Vec<(String, String, String)> {
    effects
        .iter()
        .filter(|s| s.key == cc::ALLOWED)
        .map(|s| (s.key.clone(), s.before.clone(), s.after.clone()))
        .collect()
}

/// Restores `done` in reverse order, then the side effects. The sysctl.d file always goes (it
/// must not apply the half-failed profile at boot); the state goes only when every value is
/// back, since it is then the only record of the previous values.
fn roll_back(
    done: &[&(String, String, String)],
    side_effects: &[(String, String, String)],
    view: &HostView,
    file: &Path,
    state_file: &Path,
    write: SysctlWriter<'_>,
    cause: Error,
) -> Error {
    let mut restored = 0;
    let mut not_restored = Vec::new();
    let effects = side_effects.iter().filter(|(k, b, _)| view.sysctl(k).as_ref() != Some(b));
    for (key, before, _) in done.iter().rev().copied().chain(effects) {
        if view.sysctl(key).as_deref() == Some(before.as_str()) {
            restored += 1;
            continue;
        }
        match write(view, key, before) {
            Ok(()) => restored += 1,
            Err(e) => not_restored.push((key.clone(), before.clone(), with_causes(&e))),
        }
    }
    let _ = remove_durably(file);
    let kept_state = if not_restored.is_empty() {
        let _ = remove_durably(state_file);
        None
    } else {
        Some(state_file.to_owned())
    };
    Error::RolledBack { restored, not_restored, kept_state, cause: Box::new(cause) }
}

/// Lines in configuration files under `config_root` that are applied after `plan`'s own file
/// and set one of its keys to a different value (`file:line: key = value (profile: value)`):
/// they would win at boot. systemd-sysctl orders files by name across directories; procps'
/// `sysctl --system` reads `/etc/sysctl.conf` last, so no file name of ours can come after it.
pub fn overridden_by(config_root: &Path, plan: &Plan) -> Vec<String> {
    let cfg = HostView::at(config_root);
    let ours = file_name(&plan.profile);
    config_files(&cfg)
        .into_iter()
        .filter(|f| {
            let name = f.rsplit('/').next().unwrap_or_default();
            f == "/etc/sysctl.conf" || name > ours.as_str()
        })
        .filter_map(|f| Some((cfg.read(&f)?, f)))
        .flat_map(|(text, f)| parse_config(&f, &text))
        .filter_map(|l| {
            let e = plan.entries.iter().find(|e| e.key == l.key)?;
            let value = normalize(&e.value);
            (l.value != value).then(|| {
                format!("{}:{}: {} = {} (profile: {value})", l.file, l.line, l.key, l.value)
            })
        })
        .collect()
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
mod tests;
