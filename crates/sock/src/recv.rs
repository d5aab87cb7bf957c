//! Receiving with a QUICKACK policy: one `recv`, then, under [`QuickAck::Rearm`], one
//! `setsockopt(TCP_QUICKACK, 1)` — the seed's fix for "QUICKACK silently disarms".
//!
//! What the kernel actually does (checked on Linux 6.18): `TCP_QUICKACK = 1` takes the socket
//! out of delayed-ACK "pingpong" mode and, if an ACK is pending, sends it at once.
//! `getsockopt(TCP_QUICKACK)` reports 1 while the socket is *not* in pingpong mode, so a fresh
//! socket reads 1 without anyone setting it. The socket re-enters pingpong mode whenever it
//! sends data soon after receiving (`net.ipv4.tcp_pingpong_thresh` exchanges, 1 by default),
//! i.e. on every request/response connection; from then on ACKs wait for a reply to ride on or
//! for the delayed-ACK timer. Re-arming after each receive undoes that, so the ACK for what was
//! just read leaves immediately. The seed says every `recv()` clears the flag; in our checks a
//! receive did not, but sending a reply soon after one did.
//!
//! Invariants: [`recv_with_policy`] and [`recv_with_policy_flags`] make exactly one `recv`
//! and at most one `setsockopt`, never allocate, and return the kernel's error unchanged
//! (`EAGAIN` as [`io::ErrorKind::WouldBlock`], `EINTR` as `Interrupted`), so they fit a
//! non-blocking spin loop. The re-arm happens only when bytes were received. A failed re-arm
//! never loses received bytes: the count is returned and the re-arm error is dropped, because
//! on a TCP socket it cannot fail (and `apply_profile` already reports a socket that lacks
//! the option). [`QuickAck::Once`] and [`QuickAck::Off`] receive plainly: `once` is applied
//! with the profile.

use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd};

use socket2::SockRef;

use crate::profile::QuickAck;
use crate::sys::opts;

/// Flags for [`recv_with_policy_flags`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecvFlags {
    dont_wait: bool,
}

impl RecvFlags {
    /// No flags: block according to the socket's own mode.
    pub const NONE: RecvFlags = RecvFlags { dont_wait: false };
    /// `MSG_DONTWAIT`: never block, whatever the socket's mode; `WouldBlock` when empty.
    pub const DONT_WAIT: RecvFlags = RecvFlags { dont_wait: true };
}

/// One `recv` into `buf`; then, when `policy` is [`QuickAck::Rearm`] and bytes arrived, one
/// `setsockopt(TCP_QUICKACK, 1)`. Returns the byte count (0 at end of stream).
pub fn recv_with_policy(fd: BorrowedFd<'_>, buf: &mut [u8], policy: QuickAck) -> io::Result<usize> {
    recv_with_policy_flags(fd, buf, policy, RecvFlags::NONE)
}

/// [`recv_with_policy`] with flags, e.g. [`RecvFlags::DONT_WAIT`] for a busy-polling loop on a
/// blocking socket. Allocation-free; `EAGAIN` comes back as [`io::ErrorKind::WouldBlock`].
pub fn recv_with_policy_flags(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
    policy: QuickAck,
    flags: RecvFlags,
) -> io::Result<usize> {
    let n = opts::recv(fd, buf, flags.dont_wait)?;
    if n > 0 && policy == QuickAck::Rearm {
        rearm(fd);
    }
    Ok(n)
}

/// Sets `TCP_QUICKACK` again; see the module docs for why an error is dropped.
fn rearm(fd: BorrowedFd<'_>) {
    let _ = SockRef::from(&fd).set_tcp_quickack(true);
}

/// A reader (usually a `TcpStream`) that re-arms `TCP_QUICKACK` after every read that
/// returned bytes, when its policy is [`QuickAck::Rearm`]. Writes pass straight through.
#[derive(Debug)]
pub struct QuickAckStream<S> {
    inner: S,
    policy: QuickAck,
}

impl<S: AsFd + Read> QuickAckStream<S> {
    /// Wraps `inner`; makes no system call.
    pub fn new(inner: S, policy: QuickAck) -> Self {
        QuickAckStream { inner, policy }
    }

    /// The policy in force.
    pub fn policy(&self) -> QuickAck {
        self.policy
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The wrapped stream, mutably. Reading from it directly skips the re-arm.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the stream.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S: AsFd + Read> Read for QuickAckStream<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n > 0 && self.policy == QuickAck::Rearm {
            rearm(self.inner.as_fd());
        }
        Ok(n)
    }
}

impl<S: AsFd + Read + Write> Write for QuickAckStream<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<S: AsFd> AsFd for QuickAckStream<S> {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.inner.as_fd()
    }
}

#[cfg(test)]
mod tests;
