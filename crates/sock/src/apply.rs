//! Applies a [`Profile`] to a socket and **verifies** it: every option the profile names is set
//! with `setsockopt` and then read back with `getsockopt`, and the report says, per option,
//! what was requested, what the kernel holds, and why they differ.
//!
//! This is where the seed's silent failures become visible: a `SO_RCVBUF` above
//! `net.core.rmem_max` is capped without an error ([`OptionOutcome::Capped`]); a congestion
//! control that is not loaded, or not in `net.ipv4.tcp_allowed_congestion_control` for an
//! unprivileged process, is refused ([`OptionOutcome::NotAvailable`],
//! [`OptionOutcome::NotAllowed`]); an option this kernel lacks degrades to
//! [`OptionOutcome::Unsupported`] instead of failing the whole profile. Apply it to every
//! socket, reconnects included: the seed's "Nagle delay on reconnect" is a new socket that
//! never went through here.
//!
//! Invariants: [`apply_profile`] never fails and never panics; it returns one row per option
//! (four for keepalive) in a fixed order, and only `Applied` rows count as clean. A value that
//! [`Profile::validate`] rejects is reported as `Failed` and never reaches the kernel. It does
//! not touch sysctls; it only reads `/proc/sys` to explain a refusal. Note that, as root,
//! asking for a congestion control that is not loaded lets the kernel try to load
//! `tcp_<name>` as a module.
//!
//! The report is plain data (serde) because a server applies the profile its client asked for
//! and sends the report back over the wire.

use std::fmt;
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::{Mutex, TryLockError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use socket2::{SockRef, TcpKeepalive};
use tcptail_units::{ByteSize, HumanDuration};

use crate::profile::{self, BufferSize, InvalidValue, Profile, QuickAck};
use crate::sys::opts::{Refusal, classify};

/// Requested-vs-actual for every option a profile set on one socket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApplyReport {
    /// The profile's name.
    pub profile: String,
    /// One row per option, in a fixed order (congestion, nodelay, quickack, buffers,
    /// keepalive, user timeout, reuse, busy poll, notsent lowat, priority).
    pub options: Vec<OptionReport>,
}

/// One option: what was asked, what the kernel reports, and the verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OptionReport {
    /// The socket option, e.g. `TCP_CONGESTION`, `SO_RCVBUF`.
    pub option: String,
    /// The requested value, human-readable (`cubic`, `on`, `16MiB`, `10s`).
    pub requested: String,
    /// The value read back with `getsockopt`, when it could be read (also after a refusal: the
    /// value the socket kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actual: Option<String>,
    /// The verdict.
    pub outcome: OptionOutcome,
    /// What a reader should know about this option whatever the outcome (e.g. that an explicit
    /// buffer size turns off autotuning).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// The verdict on one option.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum OptionOutcome {
    /// Set, and read back as requested.
    Applied,
    /// Accepted without error but limited by a sysctl: the kernel stores
    /// `min(requested, limit) * 2` for `SO_SNDBUF`/`SO_RCVBUF`.
    Capped {
        /// The sysctl that capped it, e.g. `net.core.wmem_max`.
        limit_name: String,
        /// Its value in bytes.
        limit: u64,
        /// What happened and how to lift the cap.
        note: String,
    },
    /// The congestion control is not loaded (`ENOENT`).
    NotAvailable {
        /// `net.ipv4.tcp_available_congestion_control`.
        available: Vec<String>,
    },
    /// The process may not choose this value (`EPERM`): a congestion control outside
    /// `net.ipv4.tcp_allowed_congestion_control` without `CAP_NET_ADMIN`, or a priority
    /// above 6.
    NotAllowed {
        /// The values this process may choose (empty when unknown).
        allowed: Vec<String>,
    },
    /// The kernel or this socket type lacks the option (`ENOPROTOOPT`, `EOPNOTSUPP`, `EINVAL`).
    Unsupported,
    /// Any other error, or a value the profile itself gets wrong.
    Failed {
        /// The error.
        error: String,
    },
    /// `setsockopt` succeeded but `getsockopt` reads back something else.
    Mismatch,
    /// Not attempted: the side that applies the profile (a bench server serving a remote
    /// client) does not let its peer change this. The row's note says how to allow it.
    RefusedByPolicy,
}

impl OptionOutcome {
    /// True for [`OptionOutcome::RefusedByPolicy`].
    pub fn is_policy_refusal(&self) -> bool {
        matches!(self, OptionOutcome::RefusedByPolicy)
    }
}

impl ApplyReport {
    /// True when every option was applied exactly as requested.
    pub fn is_clean(&self) -> bool {
        self.problems().next().is_none()
    }

    /// The options that were not applied exactly as requested.
    pub fn problems(&self) -> impl Iterator<Item = &OptionReport> {
        self.options.iter().filter(|o| o.outcome != OptionOutcome::Applied)
    }

    /// The row for a socket option (`"SO_RCVBUF"`), if the profile set it.
    pub fn option(&self, option: &str) -> Option<&OptionReport> {
        self.options.iter().find(|o| o.option == option)
    }
}

/// Sets every option `profile` names on `fd`, reads each back, and reports requested vs actual.
///
/// Apply before `connect` (or `listen`) where it matters: buffer sizes fix the window scale
/// offered in the SYN. Never fails: each problem is a row in the report.
pub fn apply_profile(fd: BorrowedFd<'_>, profile: &Profile) -> ApplyReport {
    let sock = SockRef::from(&fd);
    let mut rows = Vec::new();
    if let Some(name) = &profile.congestion {
        rows.push(apply_congestion(&sock, name));
    }
    if let Some(on) = profile.nodelay {
        rows.push(bool_row("TCP_NODELAY", on, sock.set_tcp_nodelay(on), sock.tcp_nodelay()));
    }
    if profile.quickack != QuickAck::Off {
        rows.push(apply_quickack(&sock, profile.quickack));
    }
    if let Some(size) = &profile.send_buffer {
        rows.push(apply_buffer(&sock, Direction::Send, size));
    }
    if let Some(size) = &profile.receive_buffer {
        rows.push(apply_buffer(&sock, Direction::Receive, size));
    }
    if let Some(k) = &profile.keepalive {
        apply_keepalive(&sock, k, &mut rows);
    }
    if let Some(d) = profile.user_timeout {
        rows.push(match profile::user_timeout_ms(d) {
            Err(e) => invalid_row("TCP_USER_TIMEOUT", duration(d), e),
            Ok(ms) => verify(
                "TCP_USER_TIMEOUT",
                duration(d),
                sock.set_tcp_user_timeout((ms > 0).then_some(d)),
                || sock.tcp_user_timeout().map(|t| t.unwrap_or_default()),
                |&t| t == d,
                |&t| duration(t),
            ),
        });
    }
    if let Some(on) = profile.reuse_address {
        rows.push(bool_row("SO_REUSEADDR", on, sock.set_reuse_address(on), sock.reuse_address()));
    }
    if let Some(on) = profile.reuse_port {
        rows.push(bool_row("SO_REUSEPORT", on, sock.set_reuse_port(on), sock.reuse_port()));
    }
    if let Some(d) = profile.busy_poll {
        rows.push(apply_busy_poll(&sock, d));
    }
    if let Some(b) = profile.notsent_lowat {
        rows.push(match profile::notsent_lowat_bytes(b) {
            Err(e) => invalid_row("TCP_NOTSENT_LOWAT", b.to_string(), e),
            Ok(bytes) => verify(
                "TCP_NOTSENT_LOWAT",
                b.to_string(),
                sock.set_tcp_notsent_lowat(bytes),
                || sock.tcp_notsent_lowat(),
                |&v| v == bytes,
                |&v| ByteSize(v.into()).to_string(),
            ),
        });
    }
    if let Some(p) = profile.priority {
        let set = sock.set_priority(p);
        let refusal = set.as_ref().err().map(classify);
        let mut row = verify(
            "SO_PRIORITY",
            p.to_string(),
            set,
            || sock.priority(),
            |&v| v == p,
            u32::to_string,
        );
        if refusal == Some(Refusal::NotPermitted) {
            row.outcome = OptionOutcome::NotAllowed {
                allowed: (0..=6).map(|n: u32| n.to_string()).collect(),
            };
            row.note = Some("priorities above 6 need CAP_NET_ADMIN or CAP_NET_RAW".into());
        }
        rows.push(row);
    }
    ApplyReport { profile: profile.name.clone(), options: rows }
}

/// The congestion control a socket uses (`TCP_CONGESTION` read back), e.g. `"cubic"`.
pub fn congestion_control(fd: BorrowedFd<'_>) -> io::Result<String> {
    current_congestion(&SockRef::from(&fd))
}

/// `net.ipv4.tcp_available_congestion_control`: the algorithms loaded in the kernel. Empty
/// when it cannot be read.
pub fn available_congestion_controls() -> Vec<String> {
    sysctl_words("net.ipv4.tcp_available_congestion_control")
}

/// `net.ipv4.tcp_allowed_congestion_control`: what a process without `CAP_NET_ADMIN` may
/// choose (with `CAP_NET_ADMIN`, any available one). Empty when it cannot be read.
pub fn allowed_congestion_controls() -> Vec<String> {
    sysctl_words("net.ipv4.tcp_allowed_congestion_control")
}

fn current_congestion(sock: &SockRef<'_>) -> io::Result<String> {
    let raw = sock.tcp_congestion()?;
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    Ok(String::from_utf8_lossy(&raw[..end]).into_owned())
}

fn apply_congestion(sock: &SockRef<'_>, name: &str) -> OptionReport {
    const OPTION: &str = "TCP_CONGESTION";
    if let Err(e) = profile::check_congestion(name) {
        return invalid_row(OPTION, name.to_string(), e);
    }
    let set = sock.set_tcp_congestion(name.as_bytes());
    let refusal = set.as_ref().err().map(classify);
    let mut row = verify(
        OPTION,
        name.to_string(),
        set,
        || current_congestion(sock),
        |v| v == name,
        String::clone,
    );
    match refusal {
        Some(Refusal::NotFound) => {
            row.outcome =
                OptionOutcome::NotAvailable { available: available_congestion_controls() };
            row.note = Some(format!(
                "'{name}' is not loaded (net.ipv4.tcp_available_congestion_control); it may be \
                 the module tcp_{name}"
            ));
        }
        Some(Refusal::NotPermitted) => {
            row.outcome = OptionOutcome::NotAllowed { allowed: allowed_congestion_controls() };
            row.note = Some(
                "without CAP_NET_ADMIN a process may only choose from \
                 net.ipv4.tcp_allowed_congestion_control"
                    .into(),
            );
        }
        _ => {}
    }
    row
}

fn apply_quickack(sock: &SockRef<'_>, policy: QuickAck) -> OptionReport {
    let mut row = verify(
        "TCP_QUICKACK",
        format!("on ({policy})"),
        sock.set_tcp_quickack(true),
        || sock.tcp_quickack(),
        |_| true, // Either reading is honest: see below.
        |&v| on_off(v),
    );
    if row.outcome == OptionOutcome::Applied {
        let base = "the kernel reports the current state, not a setting: it goes back to delayed \
                    ACKs on its own once the connection looks interactive (replies sent soon \
                    after receives)";
        let policy_note = match policy {
            QuickAck::Rearm => "; policy rearm sets it again after every tcptail_sock::recv",
            _ => "; policy once does not set it again",
        };
        let already = if row.actual.as_deref() == Some("off") {
            "read back off: already back in delayed-ACK mode, which is expected; "
        } else {
            ""
        };
        row.note = Some(format!("{already}{base}{policy_note}"));
    }
    row
}

#[derive(Clone, Copy)]
enum Direction {
    Send,
    Receive,
}

fn apply_buffer(sock: &SockRef<'_>, direction: Direction, size: &BufferSize) -> OptionReport {
    let (option, key, limit_name, autotune) = match direction {
        Direction::Send => ("SO_SNDBUF", "send_buffer", "net.core.wmem_max", "net.ipv4.tcp_wmem"),
        Direction::Receive => {
            ("SO_RCVBUF", "receive_buffer", "net.core.rmem_max", "net.ipv4.tcp_rmem")
        }
    };
    let requested = size.to_string();
    let bytes = match profile::buffer_bytes(key, size) {
        Ok(b) => b as usize,
        Err(e) => return invalid_row(option, requested, e),
    };
    let set = match direction {
        Direction::Send => sock.set_send_buffer_size(bytes),
        Direction::Receive => sock.set_recv_buffer_size(bytes),
    };
    let mut read_back = None;
    let read = || {
        let r = sock_buffer(sock, direction);
        read_back = r.as_ref().ok().copied();
        r
    };
    let mut row =
        verify(option, requested, set, read, |_| true, |&v| ByteSize(v as u64).to_string());
    let autotune_max = autotune_max(autotune);
    row.note = Some(buffer_note(option, autotune, autotune_max.as_deref()));
    if row.outcome == OptionOutcome::Applied
        && let Some(actual) = read_back
    {
        // The limit is read only when the kernel stored less than it does for an uncapped
        // request: applying a profile sits on every connect of a preloaded program.
        let limit = if actual as u64 >= (bytes as u64).saturating_mul(2) {
            None
        } else {
            sysctl_words(limit_name).first().and_then(|w| w.parse().ok())
        };
        row.outcome = buffer_outcome(option, bytes as u64, actual as u64, limit_name, limit);
    }
    row
}

fn sock_buffer(sock: &SockRef<'_>, direction: Direction) -> io::Result<usize> {
    match direction {
        Direction::Send => sock.send_buffer_size(),
        Direction::Receive => sock.recv_buffer_size(),
    }
}

/// The verdict on a buffer size read back after a successful `setsockopt`. The kernel stores
/// `max(min(requested, limit) * 2, minimum)`, so anything below twice the request was capped.
pub(crate) fn buffer_outcome(
    option: &str,
    requested: u64,
    actual: u64,
    limit_name: &str,
    limit: Option<u64>,
) -> OptionOutcome {
    if actual >= requested.saturating_mul(2) {
        return OptionOutcome::Applied;
    }
    match limit {
        Some(limit) if actual == limit.saturating_mul(2) => OptionOutcome::Capped {
            limit_name: limit_name.to_string(),
            limit,
            note: format!(
                "requested {requested} bytes but {limit_name} = {limit} caps {option} without an \
                 error (the kernel stores 2 x {limit} = {actual}); raise {limit_name}, or use \
                 {option}FORCE with CAP_NET_ADMIN"
            ),
        },
        Some(_) => OptionOutcome::Mismatch,
        None => OptionOutcome::Capped {
            limit_name: limit_name.to_string(),
            limit: actual / 2,
            note: format!(
                "requested {requested} bytes but the kernel stores {actual}, i.e. capped at \
                 {}; {limit_name} could not be read to confirm",
                actual / 2
            ),
        },
    }
}

fn buffer_note(option: &str, autotune: &str, autotune_max: Option<&str>) -> String {
    let max = autotune_max
        .map(|m| format!(" (autotuning could grow it to {autotune} max = {m})"))
        .unwrap_or_default();
    format!(
        "setting {option} turns off the kernel's buffer autotuning for this socket{max}; the \
         kernel reports twice the request, the extra being bookkeeping overhead, not room for \
         data"
    )
}

fn apply_keepalive(sock: &SockRef<'_>, k: &profile::Keepalive, rows: &mut Vec<OptionReport>) {
    let (idle, interval, count) = match profile::keepalive_values(k) {
        Ok(v) => v,
        Err(e) => {
            let (option, requested) = match e.key {
                "keepalive.idle" => ("TCP_KEEPIDLE", duration(k.idle)),
                "keepalive.interval" => ("TCP_KEEPINTVL", duration(k.interval)),
                _ => ("TCP_KEEPCNT", k.count.to_string()),
            };
            rows.push(invalid_row(option, requested, e));
            return;
        }
    };
    rows.push(bool_row("SO_KEEPALIVE", true, sock.set_keepalive(true), sock.keepalive()));
    let secs = |s: u32| Duration::from_secs(s.into());
    rows.push(verify(
        "TCP_KEEPIDLE",
        duration(k.idle),
        sock.set_tcp_keepalive(&TcpKeepalive::new().with_time(secs(idle))),
        || sock.tcp_keepalive_time(),
        |&d| d == secs(idle),
        |&d| duration(d),
    ));
    rows.push(verify(
        "TCP_KEEPINTVL",
        duration(k.interval),
        sock.set_tcp_keepalive(&TcpKeepalive::new().with_interval(secs(interval))),
        || sock.tcp_keepalive_interval(),
        |&d| d == secs(interval),
        |&d| duration(d),
    ));
    rows.push(verify(
        "TCP_KEEPCNT",
        count.to_string(),
        sock.set_tcp_keepalive(&TcpKeepalive::new().with_retries(count)),
        || sock.tcp_keepalive_retries(),
        |&n| n == count,
        |n| n.to_string(),
    ));
}

fn apply_busy_poll(sock: &SockRef<'_>, d: Duration) -> OptionReport {
    const OPTION: &str = "SO_BUSY_POLL";
    let us = match profile::busy_poll_us(d) {
        Ok(us) => us,
        Err(e) => return invalid_row(OPTION, duration(d), e),
    };
    let mut row = verify(
        OPTION,
        duration(d),
        sock.set_busy_poll(us),
        || sock.busy_poll(),
        |&v| v == us,
        |&v| duration(Duration::from_micros(v.into())),
    );
    row.note = Some(match row.outcome {
        OptionOutcome::NotAllowed { .. } => {
            "this kernel needs CAP_NET_ADMIN to raise SO_BUSY_POLL (Linux 6.18 does not)".into()
        }
        _ => "busy polling needs a NIC driver with NAPI; it has no effect on loopback".into(),
    });
    row
}

/// The common shape of a row: the result of the `setsockopt`, then a read-back compared with
/// `matches`. A refused set still reads back the value the socket kept.
fn verify<T>(
    option: &str,
    requested: String,
    set: io::Result<()>,
    get: impl FnOnce() -> io::Result<T>,
    matches: impl Fn(&T) -> bool,
    show: impl Fn(&T) -> String,
) -> OptionReport {
    let read = get();
    let actual = read.as_ref().ok().map(&show);
    let (outcome, note) = match (set, read) {
        (Err(e), _) => match classify(&e) {
            Refusal::NotPermitted => (OptionOutcome::NotAllowed { allowed: Vec::new() }, None),
            Refusal::Unsupported => {
                (OptionOutcome::Unsupported, Some(format!("the kernel refused the option: {e}")))
            }
            Refusal::NotFound | Refusal::Other => {
                (OptionOutcome::Failed { error: e.to_string() }, None)
            }
        },
        (Ok(()), Err(e)) => {
            (OptionOutcome::Failed { error: format!("set, but reading it back failed: {e}") }, None)
        }
        (Ok(()), Ok(v)) if matches(&v) => (OptionOutcome::Applied, None),
        (Ok(()), Ok(_)) => (OptionOutcome::Mismatch, None),
    };
    OptionReport { option: option.to_string(), requested, actual, outcome, note }
}

/// A boolean option's row. Callers pass `set` before `get`, and Rust evaluates arguments in
/// order, so the read-back happens after the write.
fn bool_row(option: &str, on: bool, set: io::Result<()>, get: io::Result<bool>) -> OptionReport {
    verify(option, on_off(on), set, || get, |&v| v == on, |&v| on_off(v))
}

fn invalid_row(option: &str, requested: String, e: InvalidValue) -> OptionReport {
    OptionReport {
        option: option.to_string(),
        requested,
        actual: None,
        outcome: OptionOutcome::Failed { error: format!("not applied: {e}") },
        note: None,
    }
}

fn on_off(on: bool) -> String {
    if on { "on" } else { "off" }.to_string()
}

fn duration(d: Duration) -> String {
    HumanDuration(d).to_string()
}

/// The cache of [`autotune_max`]: key, when read, value.
static AUTOTUNE_CACHE: Mutex<Vec<(&str, Instant, Option<String>)>> = Mutex::new(Vec::new());

/// The third word (the autotuning maximum) of `net.ipv4.tcp_wmem` or `tcp_rmem`, for a
/// buffer row's note. Read at most once a second per key: a preloaded program applies its
/// profile on every connect and accept, and two `/proc` reads per socket were a large share of
/// that cost, for a note that only informs.
///
/// The cache is only ever `try_lock`ed: when another thread holds it, or a `fork` copied it
/// locked into a child whose holder does not exist there (the preload library runs inside
/// programs that fork), the value is read without the cache instead of waiting forever.
fn autotune_max(name: &'static str) -> Option<String> {
    const FRESH: Duration = Duration::from_secs(1);
    let mut cache = match AUTOTUNE_CACHE.try_lock() {
        Ok(cache) => cache,
        Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
        Err(TryLockError::WouldBlock) => return sysctl_words(name).get(2).cloned(),
    };
    if let Some((_, read_at, value)) = cache.iter().find(|(key, _, _)| *key == name)
        && read_at.elapsed() < FRESH
    {
        return value.clone();
    }
    let value = sysctl_words(name).get(2).cloned();
    cache.retain(|(key, _, _)| *key != name);
    cache.push((name, Instant::now(), value.clone()));
    value
}

/// The whitespace-separated words of a sysctl, empty when it cannot be read.
fn sysctl_words(name: &str) -> Vec<String> {
    let path = format!("/proc/sys/{}", name.replace('.', "/"));
    std::fs::read_to_string(path)
        .map(|s| s.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default()
}

impl fmt::Display for OptionOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OptionOutcome::Applied => f.write_str("applied"),
            OptionOutcome::Capped { limit_name, limit, .. } => {
                write!(f, "capped at {limit_name} = {limit}")
            }
            OptionOutcome::NotAvailable { available } => {
                write!(f, "not available (loaded: {})", list(available))
            }
            OptionOutcome::NotAllowed { allowed } => {
                write!(f, "not allowed (allowed: {})", list(allowed))
            }
            OptionOutcome::Unsupported => f.write_str("unsupported by this kernel or socket"),
            OptionOutcome::Failed { error } => write!(f, "failed: {error}"),
            OptionOutcome::Mismatch => f.write_str("mismatch: read back differs"),
            OptionOutcome::RefusedByPolicy => f.write_str("refused: server policy"),
        }
    }
}

fn list(items: &[String]) -> String {
    if items.is_empty() { "unknown".to_string() } else { items.join(", ") }
}

impl fmt::Display for ApplyReport {
    /// An aligned table (option, requested, actual, outcome) with notes under their rows.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let problems = self.problems().count();
        if self.options.is_empty() {
            return writeln!(f, "profile {}: no options set (kernel defaults)", self.profile);
        }
        writeln!(
            f,
            "profile {}: {} option(s), {}",
            self.profile,
            self.options.len(),
            match problems {
                0 => "all applied".to_string(),
                n => format!("{n} not as requested"),
            }
        )?;
        let header = ["OPTION", "REQUESTED", "ACTUAL"];
        let cells: Vec<[&str; 3]> = self
            .options
            .iter()
            .map(|o| [o.option.as_str(), o.requested.as_str(), o.actual.as_deref().unwrap_or("-")])
            .collect();
        let mut width = header.map(str::len);
        for row in &cells {
            for (w, cell) in width.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let [w0, w1, w2] = width;
        writeln!(f, "  {:w0$}  {:w1$}  {:w2$}  OUTCOME", header[0], header[1], header[2])?;
        for (o, [c0, c1, c2]) in self.options.iter().zip(&cells) {
            writeln!(f, "  {c0:w0$}  {c1:w1$}  {c2:w2$}  {}", o.outcome)?;
            let capped = match &o.outcome {
                OptionOutcome::Capped { note, .. } => Some(note.as_str()),
                _ => None,
            };
            for note in capped.into_iter().chain(o.note.as_deref()) {
                writeln!(f, "  {:w0$}  note: {note}", "")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
