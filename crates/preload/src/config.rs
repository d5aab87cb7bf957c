//! What the library does in this process, decided once from the environment: the profile from
//! `TCPTAIL_PROFILE` (loaded by [`tcptail_sock::Profile::load`], so a built-in name or a TOML
//! file means exactly what it means to `tcptail bench` or the Python package) and whether to
//! log (`TCPTAIL_LOG`).
//!
//! Invariants: [`Config::from_vars`] never panics and never touches a socket; a profile that
//! does not load becomes [`Config::Invalid`] with the one line to print, and the library then
//! passes everything through.

use std::ffi::OsStr;

use tcptail_sock::{Profile, QuickAck};

/// The environment variable naming the profile: a built-in name or a path to a TOML file.
pub const PROFILE_ENV: &str = "TCPTAIL_PROFILE";
/// The environment variable that turns on one log line per socket (`1`; empty or `0` is off).
pub const LOG_ENV: &str = "TCPTAIL_LOG";
/// Set to `1`, the library panics inside its own work at every TCP socket it would apply the
/// profile to: a test hook showing that a panic stays inside the library (caught at the hook,
/// silent unless logging is on) and the program's calls are unaffected.
pub const TEST_PANIC_ENV: &str = "TCPTAIL_PRELOAD_TEST_PANIC";
/// The file name of the preload library that `tcptail run` looks for.
pub const LIB_FILE_NAME: &str = "libtcptail_preload.so";

/// The library's configuration for this process.
#[derive(Debug, Clone, PartialEq)]
pub enum Config {
    /// A profile to apply.
    Active(Settings),
    /// No `TCPTAIL_PROFILE`: pass everything through (the library was inherited by a process
    /// that is not meant to be tuned). `log` says whether to say so.
    Inactive {
        /// Whether `TCPTAIL_LOG` asked for logging.
        log: bool,
    },
    /// The profile did not load: pass everything through; the message names the problem.
    Invalid(String),
}

/// An active configuration: the profile and what it means for the hooks.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The loaded, validated profile.
    pub profile: Profile,
    /// Log one line per socket to stderr.
    pub log: bool,
    /// Panic instead of applying ([`TEST_PANIC_ENV`]).
    pub test_panic: bool,
}

impl Settings {
    /// True when receives should re-arm `TCP_QUICKACK` (policy `rearm`).
    pub fn rearm(&self) -> bool {
        self.profile.quickack == QuickAck::Rearm
    }

    /// True when `TCP_QUICKACK` should be set again once the socket connects (`once`, `rearm`).
    pub fn quickack_after_connect(&self) -> bool {
        self.profile.quickack != QuickAck::Off
    }
}

impl Config {
    /// Reads [`PROFILE_ENV`] and [`LOG_ENV`] from the process environment.
    pub fn from_env() -> Config {
        let mut config = Config::from_vars(
            std::env::var_os(PROFILE_ENV).as_deref(),
            std::env::var_os(LOG_ENV).as_deref(),
        );
        if let Config::Active(settings) = &mut config {
            settings.test_panic = std::env::var_os(TEST_PANIC_ENV).is_some_and(|v| v == "1");
        }
        config
    }

    /// Whether `TCPTAIL_LOG` in the process environment turns logging on.
    pub fn log_from_env() -> bool {
        std::env::var_os(LOG_ENV).is_some_and(|v| log_enabled(&v))
    }

    /// The configuration for these variable values (`None`: unset).
    pub fn from_vars(profile: Option<&OsStr>, log: Option<&OsStr>) -> Config {
        let log = log.is_some_and(log_enabled);
        let Some(raw) = profile.filter(|p| !p.is_empty()) else {
            return Config::Inactive { log };
        };
        let Some(name) = raw.to_str() else {
            return Config::Invalid(format!(
                "{PROFILE_ENV}={}: not valid UTF-8",
                raw.to_string_lossy()
            ));
        };
        let profile = match Profile::load(name) {
            Ok(p) => p,
            Err(e) => return Config::Invalid(format!("{PROFILE_ENV}={name}: {e}")),
        };
        // Files are validated by the loader and built-ins are valid; this is a backstop.
        if let Err(e) = profile.validate() {
            return Config::Invalid(format!("{PROFILE_ENV}={name}: {e}"));
        }
        Config::Active(Settings { profile, log, test_panic: false })
    }

    /// Whether logging is on.
    pub fn log(&self) -> bool {
        match self {
            Config::Active(s) => s.log,
            Config::Inactive { log } => *log,
            Config::Invalid(_) => false,
        }
    }

    /// The settings to apply, if any.
    pub fn active(&self) -> Option<&Settings> {
        match self {
            Config::Active(s) => Some(s),
            _ => None,
        }
    }

    /// The one line to print to stderr when the configuration is decided, if any: always for
    /// an invalid profile, and for a missing one when logging is on.
    pub fn startup_message(&self) -> Option<String> {
        match self {
            Config::Active(_) | Config::Inactive { log: false } => None,
            Config::Inactive { log: true } => {
                Some(format!("{PROFILE_ENV} is not set; passing every socket through untouched"))
            }
            Config::Invalid(why) => Some(format!("{why}; passing every socket through untouched")),
        }
    }
}

fn log_enabled(v: &OsStr) -> bool {
    !(v.is_empty() || v == "0")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(s: &str) -> Option<&OsStr> {
        Some(OsStr::new(s))
    }

    #[test]
    fn builtin_profile_and_log() {
        let c = Config::from_vars(os("trading"), os("1"));
        let s = c.active().expect("active");
        assert_eq!(s.profile.name, "trading");
        assert!(s.log && s.rearm() && s.quickack_after_connect());
        assert_eq!(c.startup_message(), None);
    }

    #[test]
    fn log_values() {
        for (v, on) in [("1", true), ("yes", true), ("0", false), ("", false)] {
            let c = Config::from_vars(os("throughput"), os(v));
            assert_eq!(c.active().unwrap().log, on, "{v:?}");
        }
        let s = Config::from_vars(os("throughput"), None);
        let s = s.active().unwrap();
        assert!(!s.log && !s.rearm() && !s.quickack_after_connect());
    }

    #[test]
    fn unset_is_inactive_and_silent_unless_logging() {
        assert_eq!(Config::from_vars(None, None), Config::Inactive { log: false });
        assert_eq!(Config::from_vars(os(""), None).startup_message(), None);
        let msg = Config::from_vars(None, os("1")).startup_message().unwrap();
        assert!(msg.contains("TCPTAIL_PROFILE is not set"), "{msg}");
    }

    #[test]
    fn bad_profiles_name_the_problem() {
        let c = Config::from_vars(os("no-such-profile"), None);
        let msg = c.startup_message().expect("message");
        assert!(msg.starts_with("TCPTAIL_PROFILE=no-such-profile: unknown built-in"), "{msg}");
        assert!(msg.ends_with("passing every socket through untouched"), "{msg}");

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, "congestion = \"CUBIC\"\n").unwrap();
        let c = Config::from_vars(Some(path.as_os_str()), None);
        let msg = c.startup_message().unwrap();
        assert!(msg.contains("bad.toml:1:") && msg.contains("congestion"), "{msg}");
    }

    #[test]
    fn file_profile_loads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.toml");
        std::fs::write(&path, "congestion = \"reno\"\nnodelay = true\nquickack = \"once\"\n")
            .unwrap();
        let c = Config::from_vars(Some(path.as_os_str()), None);
        let s = c.active().expect("active");
        assert_eq!(s.profile.congestion.as_deref(), Some("reno"));
        assert!(!s.rearm() && s.quickack_after_connect());
    }
}
