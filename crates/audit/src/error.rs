//! The crate's error type: one variant per actionable failure, naming the file, line or key.
//!
//! A message never repeats its cause: a variant with a `source` (an I/O error, the kernel's
//! answer, the failure a rollback undid) says what was being done, and the cause follows in
//! the error chain, which front ends print once (`outer: inner: cause`). A variant without a
//! source ends with the next step to take. [`Error::next_step`] gives the next step of a
//! variant whose cause is printed after it.

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
    #[error("reading {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file could not be written, renamed or removed.
    #[error("writing {}", path.display())]
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
    #[error("{key} = {value}: refused by the kernel{}", context_suffix(context))]
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
        "applying failed and was rolled back ({restored} value(s) restored{})",
        not_restored_suffix(not_restored)
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
        #[source]
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
    /// `tune --revert` without a saved state: `tune --apply` has not run (for this profile).
    #[error(
        "nothing to revert: tune --apply {}has not run on this host",
        profile.as_ref().map_or(String::new(), |p| format!("--profile {p} "))
    )]
    NoState {
        /// The profile asked for (`None`: any profile).
        profile: Option<String>,
    },
    /// The profile is applied (or its apply was interrupted): its state exists.
    #[error(
        "profile {profile} is already applied, or its apply was interrupted (previous values \
         saved in {}): run `tcptail tune --revert --profile {profile}` first",
        state.display()
    )]
    AlreadyApplied {
        /// The profile.
        profile: String,
        /// The existing state file.
        state: PathBuf,
    },
    /// Another `tcptail tune --apply`/`--revert` holds the lock.
    #[error(
        "another tcptail tune is running ({} holds {}): wait for it to finish",
        pid.map_or("a process whose pid is not recorded yet".to_owned(), |p| format!("pid {p}")),
        path.display()
    )]
    Locked {
        /// The lock file.
        path: PathBuf,
        /// The holder's pid, as it recorded it.
        pid: Option<u32>,
    },
    /// Keys were changed after tune applied them: reverting would clobber those changes.
    #[error(
        "not reverting profile {profile}: {} changed since tune applied them: {}; nothing was \
         reverted. Keep them by setting them again after the revert, or run `tcptail tune \
         --revert --profile {profile} --force` to restore the saved values anyway",
        count(changed.len(), "key"),
        changed
            .iter()
            .map(|(key, wrote, now)| format!("{key} (tune wrote {wrote:?}, now {now:?})"))
            .collect::<Vec<_>>()
            .join(", ")
    )]
    ChangedSince {
        /// The profile.
        profile: String,
        /// `(key, value tune wrote, value now)` for every key changed since.
        changed: Vec<(String, String, String)>,
    },
    /// Some saved values could not be restored; the state is kept for a retry.
    #[error(
        "reverting profile {profile}: {restored} value(s) restored, NOT restored: {}; the saved \
         values are kept in {}: fix the cause and run `tcptail tune --revert --profile \
         {profile}` again",
        not_restored
            .iter()
            .map(|(key, before, why)| format!("{key} (previous value {before:?}): {why}"))
            .collect::<Vec<_>>()
            .join("; "),
        state.display()
    )]
    NotReverted {
        /// The profile.
        profile: String,
        /// How many values are back.
        restored: usize,
        /// `(key, previous value, why the restore failed)`.
        not_restored: Vec<(String, String, String)>,
        /// The state file, kept.
        state: PathBuf,
    },
    /// A congestion control the kernel would refuse as this namespace's default.
    #[error("{key} = {value}: {problem} (nothing was written)")]
    CongestionControl {
        /// The key (`net.ipv4.tcp_congestion_control` or the allowed list).
        key: String,
        /// The value.
        value: String,
        /// Why, and what to do instead.
        problem: String,
    },
    /// The saved state file is corrupt.
    #[error(
        "{}: corrupt tune state: {message}; restore the values it lists by hand (see `sysctl \
         -a`) and remove it",
        path.display()
    )]
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
    #[error("validating in a throwaway network namespace")]
    Netns(#[from] tcptail_netns::Error),
}

impl Error {
    /// The next step after this error's cause, for a variant whose cause is printed after it
    /// (a variant without a cause says its next step in its own message).
    pub fn next_step(&self) -> Option<String> {
        match self {
            Error::RolledBack { kept_state: Some(state), .. } => Some(format!(
                "previous values kept in {}: fix the cause, then run `tcptail tune --revert`",
                state.display()
            )),
            Error::RolledBack { kept_state: None, cause, .. } => Some(format!(
                "nothing is left changed and nothing was written; {}",
                cause.next_step().unwrap_or_else(|| "fix the cause and apply again".to_owned())
            )),
            Error::Rejected { source, .. } => match source.kind() {
                std::io::ErrorKind::InvalidInput | std::io::ErrorKind::NotFound => {
                    Some("this kernel does not take the profile's value: change it".to_owned())
                }
                std::io::ErrorKind::PermissionDenied => Some(
                    "the key is not writable here: run as root, on the host rather than in a \
                     container"
                        .to_owned(),
                ),
                _ => None,
            },
            _ => None,
        }
    }
}

/// An error and its causes, `outer: inner: cause`, for messages that carry another error's
/// text (a value left changed by a rollback).
pub(crate) fn with_causes(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut cause = err.source();
    while let Some(c) = cause {
        text.push_str(": ");
        text.push_str(&c.to_string());
        cause = c.source();
    }
    text
}

fn count(n: usize, what: &str) -> String {
    if n == 1 { format!("1 {what}") } else { format!("{n} {what}s") }
}

fn not_restored_suffix(not_restored: &[(String, String, String)]) -> String {
    if not_restored.is_empty() {
        return String::new();
    }
    let keys: Vec<String> = not_restored
        .iter()
        .map(|(key, before, why)| format!("{key} (previous value {before:?}): {why}"))
        .collect();
    format!("; NOT restored: {}", keys.join("; "))
}

fn context_suffix(context: &str) -> String {
    if context.is_empty() { String::new() } else { format!(" ({context})") }
}
