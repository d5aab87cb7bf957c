//! The one line per socket that `TCPTAIL_LOG=1` writes to stderr, and the startup line for a
//! profile that does not load.
//!
//! A line reads
//! `tcptail-preload[PID]: fd 5 socket AF_INET: profile "exchange": all 3 applied:
//! TCP_CONGESTION=reno, TCP_NODELAY=on, SO_SNDBUF=256KiB (kernel: 512KiB)` and names each
//! option not applied as requested with its outcome (`capped at net.core.wmem_max = ...`,
//! `unsupported ...`) and the value the socket kept. Each line goes out in one `write(2)` so
//! lines from concurrent threads and processes do not interleave.
//!
//! A panic inside the library (caught at the hook, the program never sees it) prints nothing
//! unless logging is on, and then one line ([`panic_line`]); the library's panic hook, set by
//! the loaded library, asks [`enabled`].
//!
//! Invariants: formatting never fails; a closed or full stderr loses the line silently (the
//! program's behaviour never depends on the log); writing takes no lock (see [`emit`]).

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};

use tcptail_sock::{ApplyReport, OptionOutcome};

/// Formats the log line for one socket (without the trailing newline). `event` says where the
/// profile was applied (`socket AF_INET`, `accept from 127.0.0.1:5000`).
pub fn socket_line(pid: u32, fd: i32, event: &str, report: &ApplyReport) -> String {
    let mut line =
        format!("tcptail-preload[{pid}]: fd {fd} {event}: profile \"{}\": ", report.profile);
    let total = report.options.len();
    let problems = report.problems().count();
    match (total, problems) {
        (0, _) => line.push_str("no options set (kernel defaults)"),
        (n, 0) => {
            let _ = write!(line, "all {n} applied: ");
        }
        (n, p) => {
            let _ = write!(line, "{} of {n} applied, {p} not as requested: ", n - p);
        }
    }
    for (i, o) in report.options.iter().enumerate() {
        if i > 0 {
            line.push_str(", ");
        }
        let _ = write!(line, "{}={}", o.option, o.requested);
        let actual = o.actual.as_deref();
        match &o.outcome {
            OptionOutcome::Applied => {
                if let Some(a) = actual.filter(|a| !o.requested.starts_with(a)) {
                    let _ = write!(line, " (kernel: {a})");
                }
            }
            outcome => {
                let _ = write!(line, " [{outcome}; kernel: {}]", actual.unwrap_or("unknown"));
            }
        }
    }
    line
}

/// The line for a configuration problem or notice, e.g. a profile that does not load.
pub fn notice_line(pid: u32, message: &str) -> String {
    format!("tcptail-preload[{pid}]: {message}")
}

/// The line a panic inside the library prints when logging is on: where and what, and that
/// the program's call was not affected.
pub fn panic_line(pid: u32, location: Option<&str>, message: &str) -> String {
    let at = location.map(|l| format!(" at {l}")).unwrap_or_default();
    notice_line(
        pid,
        &format!(
            "internal error{at}: {message}; caught, the program's call returned unchanged \
             (please report it)"
        ),
    )
}

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Records whether `TCPTAIL_LOG` turned logging on, for the panic hook.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
}

/// Whether logging is on (as last recorded by [`set_enabled`]).
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Writes `line` and a newline to stderr in one `write(2)`; errors are dropped. No lock is
/// taken ([`crate::sys::write_stderr`]), so a `fork` while another thread logs cannot leave
/// the child's log blocked.
pub fn emit(line: &str) {
    let mut buf = String::with_capacity(line.len() + 1);
    buf.push_str(line);
    buf.push('\n');
    crate::sys::write_stderr(buf.as_bytes());
}

#[cfg(test)]
mod tests {
    use tcptail_sock::OptionReport;

    use super::*;

    fn row(option: &str, requested: &str, actual: &str, outcome: OptionOutcome) -> OptionReport {
        OptionReport {
            option: option.into(),
            requested: requested.into(),
            actual: Some(actual.into()),
            outcome,
            note: None,
        }
    }

    #[test]
    fn applied_line() {
        let report = ApplyReport {
            profile: "t".into(),
            options: vec![
                row("TCP_CONGESTION", "reno", "reno", OptionOutcome::Applied),
                row("TCP_NODELAY", "on", "on", OptionOutcome::Applied),
                row("SO_SNDBUF", "256KiB", "512KiB", OptionOutcome::Applied),
            ],
        };
        assert_eq!(
            socket_line(7, 5, "socket AF_INET", &report),
            "tcptail-preload[7]: fd 5 socket AF_INET: profile \"t\": all 3 applied: \
             TCP_CONGESTION=reno, TCP_NODELAY=on, SO_SNDBUF=256KiB (kernel: 512KiB)"
        );
    }

    #[test]
    fn problems_are_named() {
        let capped = OptionOutcome::Capped {
            limit_name: "net.core.rmem_max".into(),
            limit: 212992,
            note: String::new(),
        };
        let report = ApplyReport {
            profile: "big".into(),
            options: vec![
                row("SO_RCVBUF", "16MiB", "416KiB", capped),
                row("TCP_NOTSENT_LOWAT", "16KiB", "0B", OptionOutcome::Unsupported),
            ],
        };
        let line = socket_line(1, 3, "accept from 127.0.0.1:9", &report);
        assert!(line.contains("0 of 2 applied, 2 not as requested"), "{line}");
        assert!(
            line.contains("SO_RCVBUF=16MiB [capped at net.core.rmem_max = 212992; kernel: 416KiB]"),
            "{line}"
        );
        assert!(line.contains("TCP_NOTSENT_LOWAT=16KiB [unsupported"), "{line}");
    }

    #[test]
    fn empty_profile() {
        let report = ApplyReport { profile: "kernel-default".into(), options: vec![] };
        assert!(socket_line(1, 3, "socket AF_INET6", &report).ends_with("(kernel defaults)"));
        assert_eq!(notice_line(9, "x"), "tcptail-preload[9]: x");
    }

    #[test]
    fn panic_lines() {
        assert_eq!(
            panic_line(3, Some("src/engine.rs:9:5"), "boom"),
            "tcptail-preload[3]: internal error at src/engine.rs:9:5: boom; caught, the \
             program's call returned unchanged (please report it)"
        );
        assert!(panic_line(3, None, "x").starts_with("tcptail-preload[3]: internal error: x;"));
    }
}
