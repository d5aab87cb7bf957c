//! `tcptail tune`: the change a profile implies, applied atomically, verified, reversible.
//!
//! [`plan`] turns a profile and the current values into [`Entry`]s (the value to write, and
//! whether it differs from today's). [`apply`] then:
//!
//! 1. checks every key exists under the view's root;
//! 2. refuses ([`Error::Overridden`], nothing written) when a configuration file applied
//!    after ours at boot sets one of our keys to another value: `99-tcptail-` sorts after the
//!    stock `99-sysctl.conf`, but a local `99-z*.conf` or `/etc/sysctl.conf` (read last by
//!    procps) would still win, so such a conflict is a failure, not a warning; then runs the
//!    caller's validator (the CLI validates per-namespace keys in a throwaway network
//!    namespace: [`validate_in_netns`]);
//! 3. saves the previous values to `var/lib/tcptail/tune-NAME.json` and writes
//!    `etc/sysctl.d/99-tcptail-NAME.conf` (both temp file + rename, under the config root);
//! 4. writes each changed value and reads it back; a failure half-way restores what was
//!    written (in reverse order) and removes the file ([`Error::RolledBack`]). The state is
//!    removed too when every value is back; when a restore fails it is kept (the only record
//!    of the previous values) and the error names each key left changed;
//! 5. re-reads every key from `/proc/sys` to verify.
//!
//! [`revert`] writes the saved previous values back exactly, verifies them, and removes the
//! file and the state.
//!
//! Invariants: nothing is written outside the view's root and the config root; host-scope
//! keys are skipped (not written, with the reason) inside a child network namespace or a
//! container; a key's file is opened for writing without `O_CREAT`, so a missing key is an
//! error, never a new file.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::Error;
use crate::checks::{HOST_NOT_CHANGEABLE, HOST_NOT_VISIBLE};
use crate::host::{HostView, Snapshot, config_files, parse_config};
use crate::profile::{
    Profile, Scope, line_problem, normalize, valid_key, valid_name, value_problem,
};

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
    for e in &plan.entries {
        let path = view.sysctl_path(&e.key);
        if !path.exists() {
            return Err(Error::NoSuchKey { key: e.key.clone(), path });
        }
    }
    plan.check_text()?;
    let state_file = state_path(config_root, &plan.profile);
    if state_file.exists() {
        return Err(Error::AlreadyApplied { state: state_file });
    }
    let file = conf_path(config_root, &plan.profile);
    let lines = overridden_by(config_root, plan);
    if !lines.is_empty() {
        return Err(Error::Overridden { file, lines });
    }
    if let Some(validate) = validate {
        validate(plan)?;
    }
    let mut changed = Vec::new();
    for e in plan.changes() {
        let before = view.sysctl(&e.key).unwrap_or_default();
        changed.push((e.key.clone(), before, normalize(&e.value)));
    }
    let state = State { profile: plan.profile.clone(), file: file.clone(), changed };
    let json = serde_json::to_string_pretty(&state).expect("state serialises");
    write_atomic(&state_file, &json)?;
    if let Err(e) = write_atomic(&file, &render_file(plan)) {
        let _ = fs::remove_file(&file);
        let _ = fs::remove_file(&state_file);
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
    }
    if failure.is_none() {
        failure = state.changed.iter().find_map(|c| verify(view, &c.0, &c.2).err());
    }
    if let Some(cause) = failure {
        return Err(roll_back(&done, view, &file, &state_file, write, cause));
    }
    Ok(Applied { file, state: state_file, changed: state.changed })
}

/// Restores `done` in reverse order. The sysctl.d file always goes (it must not apply the
/// half-failed profile at boot); the state goes only when every value is back, since it is
/// then the only record of the previous values.
fn roll_back(
    done: &[&(String, String, String)],
    view: &HostView,
    file: &Path,
    state_file: &Path,
    write: SysctlWriter<'_>,
    cause: Error,
) -> Error {
    let mut restored = 0;
    let mut not_restored = Vec::new();
    for (key, before, _) in done.iter().rev().copied() {
        if view.sysctl(key).as_deref() == Some(before.as_str()) {
            restored += 1;
            continue;
        }
        match write(view, key, before) {
            Ok(()) => restored += 1,
            Err(e) => not_restored.push((key.clone(), before.clone(), e.to_string())),
        }
    }
    let _ = fs::remove_file(file);
    let kept_state = if not_restored.is_empty() {
        let _ = fs::remove_file(state_file);
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
