//! What each hook does after the real call succeeded, in safe code over borrowed fds: decide
//! whether a socket is TCP, apply the profile with [`tcptail_sock::apply_profile`], record it
//! in the [`table`], log it, and re-arm `TCP_QUICKACK` after receives.
//!
//! The configuration is decided once, at the first TCP socket, so a process that never makes
//! one (a shell between `tcptail run` and the real program, say) never reads the profile. It
//! is published without a lock ([`LockFreeOnce`]): a child forked while another thread was
//! still reading the profile decides its own instead of waiting forever.
//!
//! Invariants: nothing here returns an error to the hook or changes a socket that is not an
//! `AF_INET`/`AF_INET6` TCP socket; callers ([`crate::sys`]) hold the re-entrancy guard,
//! preserve `errno` and catch panics around every function of this module.

use std::os::fd::{AsRawFd, BorrowedFd};

use socket2::{Domain, Protocol, SockRef};
use tcptail_sock::apply_profile;

use crate::config::{Config, Settings};
use crate::sys::LockFreeOnce;
use crate::{log, table};

static CONFIG: LockFreeOnce<Config> = LockFreeOnce::new();

/// The process's configuration, read from the environment on first use (printing the startup
/// line for a profile that does not load, once).
pub fn config() -> &'static Config {
    let (config, first) = CONFIG.get_or_publish(Config::from_env);
    if first {
        log::set_enabled(config.log());
        if let Some(message) = config.startup_message() {
            log::emit(&log::notice_line(std::process::id(), &message));
        }
    }
    config
}

/// True for what `socket(domain, type, protocol)` creates as an IPv4/IPv6 TCP socket (type
/// flags such as `SOCK_NONBLOCK` ignored; SCTP and MPTCP stream sockets excluded).
pub fn is_tcp_request(domain: i32, ty: i32, protocol: i32) -> bool {
    const SOCK_TYPE_MASK: i32 = 0xf;
    matches!(domain, libc::AF_INET | libc::AF_INET6)
        && ty & SOCK_TYPE_MASK == libc::SOCK_STREAM
        && matches!(protocol, 0 | libc::IPPROTO_TCP)
}

/// A new socket from `socket()`: apply the whole profile if it is TCP, else forget the fd.
pub fn on_socket(fd: BorrowedFd<'_>, domain: i32, ty: i32, protocol: i32) {
    if !is_tcp_request(domain, ty, protocol) {
        table::clear(fd.as_raw_fd());
        return;
    }
    if let Some(settings) = config().active() {
        apply(fd, settings, || format!("socket {}", family_name(domain)));
    }
}

/// A `connect()` that succeeded or is in progress (`EINPROGRESS`). `family` is the address
/// family of the destination, when the address was readable.
pub fn on_connect(fd: BorrowedFd<'_>, family: Option<i32>) {
    let flags = table::get(fd.as_raw_fd());
    if flags & table::APPLIED != 0 {
        if let Some(settings) = config().active()
            && settings.quickack_after_connect()
        {
            let _ = SockRef::from(&fd).set_tcp_quickack(true);
        }
        return;
    }
    // A socket this library did not see created: only IPv4/IPv6 destinations can be TCP, and
    // only those are worth the system calls to find out.
    if !matches!(family, Some(libc::AF_INET | libc::AF_INET6)) || !is_tcp(fd) {
        return;
    }
    if let Some(settings) = config().active() {
        apply(fd, settings, || format!("connect{} (socket made elsewhere)", peer(fd, "to")));
    }
}

/// A socket returned by `accept()`/`accept4()`: apply the whole profile if it is TCP.
pub fn on_accept(fd: BorrowedFd<'_>) {
    if !is_tcp(fd) {
        table::clear(fd.as_raw_fd());
        return;
    }
    if let Some(settings) = config().active() {
        apply(fd, settings, || format!("accept{}", peer(fd, "from")));
    }
}

/// After a receive that returned bytes on a socket flagged [`table::REARM`]: set
/// `TCP_QUICKACK` again. A failure means the fd is no longer a TCP socket (closed behind the
/// library's back and reused), so it is forgotten.
#[inline]
pub fn rearm(fd: BorrowedFd<'_>) {
    if SockRef::from(&fd).set_tcp_quickack(true).is_err() {
        table::clear(fd.as_raw_fd());
    }
}

/// Applies the profile and flags the fd; `event` describes it for the log, and is built (with
/// its extra system calls, such as the peer's address) only when logging is on.
fn apply(fd: BorrowedFd<'_>, settings: &Settings, event: impl FnOnce() -> String) {
    if settings.test_panic {
        panic!("{} is set", crate::config::TEST_PANIC_ENV);
    }
    let report = apply_profile(fd, &settings.profile);
    let flags = table::APPLIED | if settings.rearm() { table::REARM } else { 0 };
    table::set(fd.as_raw_fd(), flags);
    if settings.log {
        log::emit(&log::socket_line(std::process::id(), fd.as_raw_fd(), &event(), &report));
    }
}

/// ` to 10.0.0.5:443` (with `preposition`), or nothing when the peer cannot be read.
fn peer(fd: BorrowedFd<'_>, preposition: &str) -> String {
    SockRef::from(&fd)
        .peer_addr()
        .ok()
        .and_then(|a| a.as_socket())
        .map(|a| format!(" {preposition} {a}"))
        .unwrap_or_default()
}

/// Whether `fd` is an IPv4/IPv6 TCP socket, asked of the kernel (`SO_PROTOCOL`, `SO_DOMAIN`).
fn is_tcp(fd: BorrowedFd<'_>) -> bool {
    let sock = SockRef::from(&fd);
    sock.protocol().ok().flatten() == Some(Protocol::TCP)
        && sock.domain().is_ok_and(|d| d == Domain::IPV4 || d == Domain::IPV6)
}

fn family_name(domain: i32) -> &'static str {
    match domain {
        libc::AF_INET => "AF_INET",
        libc::AF_INET6 => "AF_INET6",
        _ => "other",
    }
}

#[cfg(test)]
mod tests {
    use std::net::{TcpListener, TcpStream, UdpSocket};
    use std::os::fd::AsFd;

    use super::*;

    #[test]
    fn tcp_requests() {
        use libc::{AF_INET, AF_INET6, AF_UNIX, SOCK_CLOEXEC, SOCK_DGRAM, SOCK_NONBLOCK};
        use libc::{IPPROTO_SCTP, IPPROTO_TCP, SOCK_STREAM};
        assert!(is_tcp_request(AF_INET, SOCK_STREAM, 0));
        assert!(is_tcp_request(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, IPPROTO_TCP));
        assert!(!is_tcp_request(AF_INET, SOCK_DGRAM, 0));
        assert!(!is_tcp_request(AF_UNIX, SOCK_STREAM, 0));
        assert!(!is_tcp_request(AF_INET, SOCK_STREAM, IPPROTO_SCTP));
        assert!(!is_tcp_request(AF_INET, SOCK_STREAM, 262)); // IPPROTO_MPTCP
    }

    #[test]
    fn kernel_says_what_is_tcp() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        assert!(is_tcp(listener.as_fd()));
        assert!(is_tcp(stream.as_fd()));
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(!is_tcp(udp.as_fd()));
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert!(!is_tcp(a.as_fd()));
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        assert!(!is_tcp(file.as_fd()));
    }

    #[test]
    fn failed_rearm_forgets_the_fd() {
        let file = std::fs::File::open("/proc/self/stat").unwrap();
        let fd = file.as_fd();
        table::set(fd.as_raw_fd(), table::APPLIED | table::REARM);
        rearm(fd);
        assert_eq!(table::get(fd.as_raw_fd()), 0);
    }
}
