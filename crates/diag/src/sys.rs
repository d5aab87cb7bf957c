//! The only code in this crate that calls `libc`: a `NETLINK_SOCK_DIAG` socket, opened in the
//! current network namespace or in a named one.
//!
//! A netlink socket belongs to the namespace of the thread that created it, for its whole life.
//! [`NetlinkSocket::open_in_netns`] therefore creates it on a short-lived thread that first
//! `setns`'d into the namespace; the calling thread never changes namespace.

#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

/// `NETLINK_SOCK_DIAG` from `linux/netlink.h`.
const NETLINK_SOCK_DIAG: libc::c_int = 4;

/// A bound `AF_NETLINK`/`NETLINK_SOCK_DIAG` socket.
#[derive(Debug)]
pub struct NetlinkSocket {
    fd: OwnedFd,
    portid: u32,
}

impl NetlinkSocket {
    /// Opens a sock_diag socket in the calling thread's network namespace.
    pub fn open() -> io::Result<NetlinkSocket> {
        // SAFETY: plain socket(2) call with constant arguments; the result is checked.
        let fd = unsafe {
            libc::socket(libc::AF_NETLINK, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, NETLINK_SOCK_DIAG)
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a fresh descriptor we own exclusively.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // Bind with port id 0: the kernel picks a unique one, which replies carry in
        // `nlmsg_pid`; reading it back lets the client ignore messages not meant for it.
        // SAFETY: an all-zero sockaddr_nl is valid; we then set the family.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        let len = size_of::<libc::sockaddr_nl>() as libc::socklen_t;
        // SAFETY: `addr` is a valid sockaddr_nl of `len` bytes.
        if unsafe { libc::bind(fd.as_raw_fd(), (&raw const addr).cast(), len) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let mut bound_len = len;
        // SAFETY: `addr` is writable for `bound_len` bytes, which getsockname updates.
        let rc = unsafe {
            libc::getsockname(fd.as_raw_fd(), (&raw mut addr).cast(), &raw mut bound_len)
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        let sock = NetlinkSocket { fd, portid: addr.nl_pid };
        // A larger receive buffer lets the kernel fill bigger dump batches (fewer recv calls).
        let size: libc::c_int = 1 << 20;
        // SAFETY: `size` outlives the call and its length is passed; errors are ignored on
        // purpose (the default buffer works, only slower).
        unsafe {
            libc::setsockopt(
                sock.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVBUF,
                (&raw const size).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
        Ok(sock)
    }

    /// Opens a sock_diag socket inside the network namespace bound at `path`
    /// (`/run/netns/NAME`), from a helper thread that joined it.
    pub fn open_in_netns(path: &Path) -> io::Result<NetlinkSocket> {
        let ns = File::open(path)?;
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    // SAFETY: `ns` is an open namespace file for the duration of the call; setns
                    // only changes this helper thread's namespace, which exits right after.
                    let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
                    if rc != 0 {
                        return Err(io::Error::last_os_error());
                    }
                    NetlinkSocket::open()
                })
                .join()
                .unwrap_or_else(|_| Err(io::Error::other("netns helper thread panicked")))
        })
    }

    /// The port id the kernel gave this socket (replies to it carry it in `nlmsg_pid`).
    pub fn portid(&self) -> u32 {
        self.portid
    }

    /// Sends one datagram to the kernel (netlink port 0).
    pub fn send(&self, buf: &[u8]) -> io::Result<()> {
        // SAFETY: an all-zero sockaddr_nl is valid; we then set the family.
        let mut addr: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        // SAFETY: `buf` and `addr` are valid for the lengths passed.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                buf.as_ptr().cast(),
                buf.len(),
                0,
                (&raw const addr).cast(),
                size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Joins netlink multicast group `group` (sock_diag's destroy notifications need
    /// CAP_NET_ADMIN in the namespace).
    pub fn join_group(&self, group: u32) -> io::Result<()> {
        // SAFETY: `group` outlives the call and its length is passed.
        let rc = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_NETLINK,
                libc::NETLINK_ADD_MEMBERSHIP,
                (&raw const group).cast(),
                size_of::<u32>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Receives one queued datagram into `buf` without waiting: `Ok(None)` when none is queued.
    pub fn recv_nowait(&self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        loop {
            // SAFETY: `buf` is valid for writes of `buf.len()` bytes.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if n >= 0 {
                return Ok(Some(n as usize));
            }
            let err = io::Error::last_os_error();
            match err.kind() {
                io::ErrorKind::Interrupted => {}
                io::ErrorKind::WouldBlock => return Ok(None),
                _ => return Err(err),
            }
        }
    }

    /// Receives one datagram (one batch of netlink messages) into `buf`, retrying on EINTR.
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            // SAFETY: `buf` is valid for writes of `buf.len()` bytes.
            let n =
                unsafe { libc::recv(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
            if n >= 0 {
                return Ok(n as usize);
            }
            let err = io::Error::last_os_error();
            if err.kind() != io::ErrorKind::Interrupted {
                return Err(err);
            }
        }
    }
}

fn rusage(who: libc::c_int) -> libc::rusage {
    // SAFETY: an all-zero rusage is valid and getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable rusage.
    unsafe { libc::getrusage(who, &mut ru) };
    ru
}

/// Peak resident set size of this process, KiB.
pub fn peak_rss_kib() -> u64 {
    rusage(libc::RUSAGE_SELF).ru_maxrss as u64
}

/// CPU time (user + system) of this process's waited-for children so far.
pub fn children_cpu_time() -> std::time::Duration {
    cpu(rusage(libc::RUSAGE_CHILDREN))
}

/// CPU time (user + system) consumed by this process so far, for self-measurement.
pub fn process_cpu_time() -> std::time::Duration {
    cpu(rusage(libc::RUSAGE_SELF))
}

fn cpu(ru: libc::rusage) -> std::time::Duration {
    let tv = |t: libc::timeval| {
        std::time::Duration::from_micros(t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64)
    };
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// `CLOCK_MONOTONIC` in nanoseconds: the flight recorder's timestamps (std's `Instant` has no
/// value that can be written to a file).
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &raw mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}
