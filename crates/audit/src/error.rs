//! The crate's error type: one variant per actionable failure, naming the file, line or key.

use std::path::PathBuf;

/// Everything that can go wrong loading profiles, reading the host, or tuning it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A profile file is not valid TOML, or has an unknown or mistyped field.
    #[error("{}:{line}: {message}", file.display())]
    ProfileSyntax {
        /// The profile file.
        file: PathBuf,
        /// 1-based line (0 when unknown).
        line: usize,
        /// The parser's message.
        message: String,
    },
    /// A profile entry is well-formed TOML but not a valid setting.
    #[error("{}:{line}: {key}: {message}", file.display())]
    Profile {
        /// The profile file.
        file: PathBuf,
        /// 1-based line.
        line: usize,
        /// The sysctl key (or field) at fault.
        key: String,
        /// What is wrong.
        message: String,
    },
    /// `--profile NAME` is neither a built-in nor a file.
    #[error("unknown profile {name:?} (built-in: {known}; or give a path to a .toml file)")]
    UnknownProfile {
        /// The name asked for.
        name: String,
        /// The built-in names.
        known: String,
    },
    /// A file could not be read.
    #[error("reading {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file could not be written, renamed or removed.
    #[error("writing {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A sysctl key does not exist on this kernel (or in this namespace).
    #[error("{key}: no such sysctl ({})", path.display())]
    NoSuchKey {
        /// The key.
        key: String,
        /// Where it was looked for.
        path: PathBuf,
    },
    /// The kernel refused a value (out of range, unknown algorithm, read-only).
    #[error("{key} = {value}: rejected{}: {source}", context_suffix(context))]
    Rejected {
        /// The key.
        key: String,
        /// The value written.
        value: String,
        /// Where (e.g. "in throwaway namespace tcptail-...").
        context: String,
        /// The kernel's answer.
        source: std::io::Error,
    },
    /// A value was written but reads back differently.
    #[error("{key}: wrote {wanted:?} but /proc/sys reads {actual:?}{}", context_suffix(context))]
    NotApplied {
        /// The key.
        key: String,
        /// What was written.
        wanted: String,
        /// What reads back.
        actual: String,
        /// Where.
        context: String,
    },
    /// Applying failed half-way; what had been applied was rolled back. When a value could
    /// not be restored, the saved state (the only record of the previous values) is kept so
    /// that `tcptail tune --revert` can retry.
    #[error(
        "applying failed, {restored} value(s) rolled back: {cause}{}",
        not_restored_suffix(not_restored, kept_state.as_deref())
    )]
    RolledBack {
        /// How many values were restored (or found already at their previous value).
        restored: usize,
        /// `(key, previous value, why the restore failed)` for every value left changed.
        not_restored: Vec<(String, String, String)>,
        /// The state file kept because of `not_restored` (`None` when everything was
        /// restored and the state removed).
        kept_state: Option<PathBuf>,
        /// The first failure.
        cause: Box<Error>,
    },
    /// A configuration file applied after ours at boot sets the same keys to other values:
    /// ours would silently lose. Nothing was written.
    #[error(
        "{} would be overridden at boot by later configuration: {}; remove those lines or \
         give them the profile's values (nothing was written)",
        file.display(),
        lines.join("; ")
    )]
    Overridden {
        /// The file tune would write.
        file: PathBuf,
        /// The winning lines (`file:line: key = value (profile: value)`).
        lines: Vec<String>,
    },
    /// A plan carries text that would not stay on its own line of the `sysctl.d` file.
    #[error(
        "profile {profile}: {what} cannot be written to sysctl.d: {problem} (nothing was written)"
    )]
    UnsafeText {
        /// The profile.
        profile: String,
        /// Which text.
        what: String,
        /// What is wrong with it.
        problem: String,
    },
    /// `tune --revert` without a saved state.
    #[error("nothing to revert: no state file {}", path.display())]
    NoState {
        /// The missing state file.
        path: PathBuf,
    },
    /// The profile is already applied (its state exists): revert it first.
    #[error("already applied (state {}): run `tcptail tune --revert` first", state.display())]
    AlreadyApplied {
        /// The existing state file.
        state: PathBuf,
    },
    /// The saved state file is corrupt.
    #[error("{}: corrupt tune state: {message}", path.display())]
    BadState {
        /// The state file.
        path: PathBuf,
        /// The parser's message.
        message: String,
    },
    /// A latency measurement in the lab failed.
    #[error("measurement failed: {message}")]
    Measure {
        /// What went wrong (the benchmark's error output).
        message: String,
    },
    /// A throwaway namespace could not be created or used.
    #[error("validation namespace: {0}")]
    Netns(#[from] tcptail_netns::Error),
}

fn not_restored_suffix(
    not_restored: &[(String, String, String)],
    state: Option<&std::path::Path>,
) -> String {
    if not_restored.is_empty() {
        return String::new();
    }
    let keys: Vec<String> = not_restored
        .iter()
        .map(|(key, before, why)| format!("{key} (previous value {before:?}): {why}"))
        .collect();
    let state = state.map_or(String::new(), |s| {
        format!("; previous values kept in {}: retry with `tcptail tune --revert`", s.display())
    });
    format!("; NOT restored: {}{state}", keys.join("; "))
}

fn context_suffix(context: &str) -> String {
    if context.is_empty() { String::new() } else { format!(" ({context})") }
}
