//! The socket-option and receive calls `socket2` does not cover in the shape this crate needs:
//! `recv(2)` into an initialised `&mut [u8]` with flags (socket2 wants `MaybeUninit` buffers),
//! and the errno classification `apply` uses to tell "the kernel lacks this option" from "not
//! permitted" from "not found".
//!
//! Invariants: no function here allocates, retries, or changes a socket's state beyond the one
//! system call it names; errors are passed through as the kernel gave them (`EAGAIN` stays
//! `io::ErrorKind::WouldBlock`, `EINTR` stays `Interrupted`).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// One `recv(2)` into `buf`, optionally with `MSG_DONTWAIT`. Returns the byte count (0 at end
/// of stream) or the kernel's error unchanged.
pub(crate) fn recv(fd: BorrowedFd<'_>, buf: &mut [u8], dont_wait: bool) -> io::Result<usize> {
    let flags = if dont_wait { libc::MSG_DONTWAIT } else { 0 };
    // SAFETY: `buf` is a valid, initialised, writable region of `buf.len()` bytes that we hold
    // exclusively for the duration of the call, and `fd` is an open descriptor borrowed for at
    // least that long. `recv` writes at most `buf.len()` bytes into it.
    let n = unsafe { libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), flags) };
    if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
}

/// What a failed `setsockopt` means for a report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// `ENOENT`: the named thing (a congestion control) is not loaded.
    NotFound,
    /// `EPERM`/`EACCES`: the process lacks a capability for this value.
    NotPermitted,
    /// `ENOPROTOOPT`, `EOPNOTSUPP` or `EINVAL` for a value already validated: the kernel (or
    /// this socket type) does not have the option.
    Unsupported,
    /// Anything else.
    Other,
}

/// Classifies a `setsockopt` error by errno.
pub(crate) fn classify(e: &io::Error) -> Refusal {
    match e.raw_os_error() {
        Some(libc::ENOENT) => Refusal::NotFound,
        Some(libc::EPERM | libc::EACCES) => Refusal::NotPermitted,
        Some(libc::ENOPROTOOPT | libc::EOPNOTSUPP | libc::EINVAL) => Refusal::Unsupported,
        _ => Refusal::Other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_classes() {
        let e = |n| io::Error::from_raw_os_error(n);
        assert_eq!(classify(&e(libc::ENOENT)), Refusal::NotFound);
        assert_eq!(classify(&e(libc::EPERM)), Refusal::NotPermitted);
        assert_eq!(classify(&e(libc::ENOPROTOOPT)), Refusal::Unsupported);
        assert_eq!(classify(&e(libc::EOPNOTSUPP)), Refusal::Unsupported);
        assert_eq!(classify(&e(libc::EINVAL)), Refusal::Unsupported);
        assert_eq!(classify(&e(libc::EBUSY)), Refusal::Other);
        assert_eq!(classify(&io::Error::other("x")), Refusal::Other);
    }

    #[test]
    fn recv_passes_eagain_through() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        use std::os::fd::AsFd;
        let mut buf = [0u8; 8];
        let e = recv(server.as_fd(), &mut buf, true).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
        assert_eq!(e.raw_os_error(), Some(libc::EAGAIN));
        use std::io::Write;
        (&client).write_all(b"hi").unwrap();
        assert_eq!(recv(server.as_fd(), &mut buf, false).unwrap(), 2);
        assert_eq!(&buf[..2], b"hi");
        drop(client);
        assert_eq!(recv(server.as_fd(), &mut buf, false).unwrap(), 0);
    }
}
