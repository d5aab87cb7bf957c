//! The system calls a hook makes itself, with `syscall(2)`, when the real libc function cannot
//! be used: this thread is inside `dlsym` resolving it (an allocator that reads a file while
//! `dlsym` allocates would otherwise recurse), or no later object defines it.
//!
//! Each function has the contract of the libc function of the same name: the same arguments,
//! the same return value, `-1` and `errno` on failure (glibc's `syscall` sets `errno`). They
//! are compiled into the unit tests, which check each one against the kernel on real sockets,
//! pipes and files, so the path a hook takes only in rare moments is not an untested one.

#![allow(unsafe_code)]

use std::ffi::{c_int, c_long, c_uint, c_void};
use std::ptr::null_mut;

use libc::{iovec, mmsghdr, msghdr, size_t, sockaddr, socklen_t, ssize_t, timespec};

/// `syscall(nr, args..)` with every argument widened to the `long` that glibc's `syscall`
/// reads for each (a 32-bit `int` passed through `...` would leave the upper half undefined).
macro_rules! syscall {
    ($nr:expr $(, $arg:expr)*) => {
        libc::syscall($nr $(, $arg as c_long)*)
    };
}

/// `socket(2)`.
///
/// # Safety
/// Always safe (integers only); `unsafe` for symmetry with the libc function it replaces.
pub unsafe fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    // SAFETY: integer arguments with socket(2)'s meaning.
    unsafe { syscall!(libc::SYS_socket, domain, ty, protocol) as c_int }
}

/// `connect(2)`.
///
/// # Safety
/// `addr` points to `len` readable bytes (libc's contract for `connect`).
pub unsafe fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    // SAFETY: the caller guarantees `addr`/`len`; the kernel only reads them.
    unsafe { syscall!(libc::SYS_connect, fd, addr, len) as c_int }
}

/// `accept(2)`, as `accept4(fd, addr, len, 0)` (the same call, and the only one some
/// architectures have).
///
/// # Safety
/// `addr` and `len` are null or valid as for libc's `accept`.
pub unsafe fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    // SAFETY: as `accept4` with no flags.
    unsafe { accept4(fd, addr, len, 0) }
}

/// `accept4(2)`.
///
/// # Safety
/// `addr` and `len` are null or valid as for libc's `accept4`.
pub unsafe fn accept4(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t, flags: c_int) -> c_int {
    // SAFETY: the caller guarantees the pointers; the kernel writes at most `*len` bytes.
    unsafe { syscall!(libc::SYS_accept4, fd, addr, len, flags) as c_int }
}

/// `close(2)`.
///
/// # Safety
/// Closing a descriptor something else still owns is the caller's business, as with libc's.
pub unsafe fn close(fd: c_int) -> c_int {
    // SAFETY: an integer argument.
    unsafe { syscall!(libc::SYS_close, fd) as c_int }
}

/// `dup(2)`.
///
/// # Safety
/// Always safe; `unsafe` for symmetry.
pub unsafe fn dup(fd: c_int) -> c_int {
    // SAFETY: an integer argument.
    unsafe { syscall!(libc::SYS_dup, fd) as c_int }
}

/// `dup2(2)`, as `dup3` (which has no `dup2` on some architectures) except that equal
/// descriptors are returned unchanged when valid, as `dup2` does.
///
/// # Safety
/// Replacing `new` is the caller's business, as with libc's `dup2`.
pub unsafe fn dup2(old: c_int, new: c_int) -> c_int {
    if old == new {
        // dup2 checks that `old` is valid and returns it; dup3 would fail with EINVAL.
        // SAFETY: F_GETFD only reads the descriptor's flags.
        let valid = unsafe { syscall!(libc::SYS_fcntl, old, libc::F_GETFD) };
        return if valid < 0 { -1 } else { new };
    }
    // SAFETY: as `dup3` with no flags.
    unsafe { dup3(old, new, 0) }
}

/// `dup3(2)`.
///
/// # Safety
/// Replacing `new` is the caller's business, as with libc's `dup3`.
pub unsafe fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    // SAFETY: integer arguments.
    unsafe { syscall!(libc::SYS_dup3, old, new, flags) as c_int }
}

/// `close_range(2)`.
///
/// # Safety
/// Closing descriptors something else still owns is the caller's business.
pub unsafe fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    // SAFETY: integer arguments.
    unsafe { syscall!(libc::SYS_close_range, first, last, flags) as c_int }
}

/// `recv(2)`, as `recvfrom` without an address.
///
/// # Safety
/// `buf` is writable for `len` bytes.
pub unsafe fn recv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t {
    // SAFETY: the caller guarantees the buffer; null address pointers ask for no address.
    unsafe { recvfrom(fd, buf, len, flags, null_mut(), null_mut()) }
}

/// `recvfrom(2)`.
///
/// # Safety
/// `buf` is writable for `len` bytes; `addr`/`addr_len` are null or valid.
pub unsafe fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    addr_len: *mut socklen_t,
) -> ssize_t {
    // SAFETY: the caller guarantees every pointer for the sizes given with it.
    unsafe { syscall!(libc::SYS_recvfrom, fd, buf, len, flags, addr, addr_len) as ssize_t }
}

/// `recvmsg(2)`.
///
/// # Safety
/// `msg` is a valid message header whose buffers are writable.
pub unsafe fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    // SAFETY: the caller guarantees the header and the buffers it points to.
    unsafe { syscall!(libc::SYS_recvmsg, fd, msg, flags) as ssize_t }
}

/// `recvmmsg(2)`.
///
/// # Safety
/// `msgs` holds `vlen` valid headers; `timeout` is null or valid. glibc's `struct timespec`
/// on this 64-bit target is the kernel's.
pub unsafe fn recvmmsg(
    fd: c_int,
    msgs: *mut mmsghdr,
    vlen: c_uint,
    flags: c_int,
    timeout: *mut timespec,
) -> c_int {
    // SAFETY: the caller guarantees the vector and the timeout.
    unsafe { syscall!(libc::SYS_recvmmsg, fd, msgs, vlen, flags, timeout) as c_int }
}

/// `read(2)`.
///
/// # Safety
/// `buf` is writable for `count` bytes.
pub unsafe fn read(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    // SAFETY: the caller guarantees the buffer.
    unsafe { syscall!(libc::SYS_read, fd, buf, count) as ssize_t }
}

/// `readv(2)`.
///
/// # Safety
/// `iov` points to `iovcnt` valid `iovec`s whose buffers are writable.
pub unsafe fn readv(fd: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    // SAFETY: the caller guarantees the vector.
    unsafe { syscall!(libc::SYS_readv, fd, iov, iovcnt) as ssize_t }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

    use super::*;
    use crate::sys::errno;

    /// A connected loopback pair: (client, server side).
    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    }

    /// `-1` and this errno, as libc's function returns them.
    fn failed_with(ret: i64, expected: c_int) {
        let got = errno();
        assert_eq!((ret, got), (-1, expected), "wanted -1/{expected}, got {ret}/{got}");
    }

    fn owned(fd: c_int) -> OwnedFd {
        assert!(fd >= 0, "errno {}", errno());
        // SAFETY: a descriptor the call under test just created and nothing else owns.
        unsafe { OwnedFd::from_raw_fd(fd) }
    }

    #[test]
    fn socket_connect_accept() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let std::net::SocketAddr::V4(addr) = listener.local_addr().unwrap() else { panic!() };
        // SAFETY: integer arguments.
        let fd = owned(unsafe { socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) });
        let sin = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: addr.port().to_be(),
            sin_addr: libc::in_addr { s_addr: u32::from(*addr.ip()).to_be() },
            sin_zero: [0; 8],
        };
        let len = size_of::<libc::sockaddr_in>() as socklen_t;
        // SAFETY: `sin` is a valid sockaddr_in of `len` bytes.
        let ret = unsafe { connect(fd.as_raw_fd(), (&raw const sin).cast(), len) };
        assert_eq!(ret, 0, "errno {}", errno());
        let mut peer: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        let mut peer_len = len;
        // SAFETY: `peer` is writable for `peer_len` bytes.
        let accepted = owned(unsafe {
            accept4(listener.as_raw_fd(), (&raw mut peer).cast(), &mut peer_len, libc::SOCK_CLOEXEC)
        });
        assert_eq!(peer_len, len);
        assert_eq!(peer.sin_family, libc::AF_INET as libc::sa_family_t);
        // SAFETY: F_GETFD reads flags.
        let fd_flags = unsafe { libc::fcntl(accepted.as_raw_fd(), libc::F_GETFD) };
        assert_eq!(fd_flags & libc::FD_CLOEXEC, libc::FD_CLOEXEC, "accept4 flags passed on");

        // A refused connection keeps connect's errno; `accept` without a pending one too.
        let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let refused = libc::sockaddr_in { sin_port: port.to_be(), ..sin };
        // SAFETY: integer arguments.
        let fd2 = owned(unsafe { socket(libc::AF_INET, libc::SOCK_STREAM, 0) });
        // SAFETY: as above.
        let ret = unsafe { connect(fd2.as_raw_fd(), (&raw const refused).cast(), len) };
        failed_with(ret.into(), libc::ECONNREFUSED);
        listener.set_nonblocking(true).unwrap();
        // SAFETY: null address pointers ask for no address.
        let ret = unsafe { accept(listener.as_raw_fd(), null_mut(), null_mut()) };
        failed_with(ret.into(), libc::EAGAIN);
        // SAFETY: integer arguments.
        let ret = unsafe { socket(libc::AF_INET, 999, 0) };
        failed_with(ret.into(), libc::EINVAL);
    }

    #[test]
    fn receives_return_the_bytes_and_the_errno() {
        let (client, mut server) = pair();
        let fd = client.as_raw_fd();
        let mut buf = [0u8; 8];
        server.write_all(b"abcdefg").unwrap();
        // Blocking receives: each returns what the next one would have.
        // SAFETY: `buf` is writable for 1 byte in each call below.
        unsafe {
            assert_eq!(recv(fd, buf.as_mut_ptr().cast(), 1, 0), 1);
            assert_eq!(read(fd, buf[1..].as_mut_ptr().cast(), 1), 1);
            let mut from: libc::sockaddr_in = std::mem::zeroed();
            let mut from_len = size_of::<libc::sockaddr_in>() as socklen_t;
            let n = recvfrom(
                fd,
                buf[2..].as_mut_ptr().cast(),
                1,
                0,
                (&raw mut from).cast(),
                &mut from_len,
            );
            assert_eq!(n, 1);
            let mut iov = iovec { iov_base: buf[3..].as_mut_ptr().cast(), iov_len: 1 };
            assert_eq!(readv(fd, &iov, 1), 1);
            iov.iov_base = buf[4..].as_mut_ptr().cast();
            let mut msg: msghdr = std::mem::zeroed();
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            assert_eq!(recvmsg(fd, &mut msg, 0), 1);
            iov.iov_base = buf[5..].as_mut_ptr().cast();
            let mut mm: mmsghdr = std::mem::zeroed();
            mm.msg_hdr.msg_iov = &mut iov;
            mm.msg_hdr.msg_iovlen = 1;
            assert_eq!(recvmmsg(fd, &mut mm, 1, 0, null_mut()), 1);
            assert_eq!(mm.msg_len, 1);
        }
        assert_eq!(&buf[..6], b"abcdef");
        // Nothing left but one byte: a non-blocking receive of two gets it, then EAGAIN.
        // SAFETY: `buf` is writable for 8 bytes.
        unsafe {
            assert_eq!(recv(fd, buf.as_mut_ptr().cast(), 8, libc::MSG_DONTWAIT), 1);
            failed_with(
                recv(fd, buf.as_mut_ptr().cast(), 8, libc::MSG_DONTWAIT) as i64,
                libc::EAGAIN,
            );
            failed_with(read(-1, buf.as_mut_ptr().cast(), 8) as i64, libc::EBADF);
        }
        assert_eq!(buf[0], b'g');
    }

    #[test]
    fn descriptor_calls() {
        let (client, _server) = pair();
        let fd = client.as_raw_fd();
        // SAFETY: each call duplicates or closes descriptors this test owns.
        unsafe {
            let copy = dup(fd);
            assert!(copy >= 0 && copy != fd);
            assert_eq!(dup2(copy, copy), copy, "dup2 onto itself returns it");
            // High numbers no other test thread's descriptors reach.
            let target = 900;
            assert_eq!(dup2(fd, target), target);
            assert_eq!(dup3(fd, target + 1, libc::O_CLOEXEC), target + 1);
            assert_eq!(libc::fcntl(target + 1, libc::F_GETFD) & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
            failed_with(dup3(fd, fd, 0).into(), libc::EINVAL);
            failed_with(dup2(-5, -5).into(), libc::EBADF);
            assert_eq!(close_range(target as c_uint, (target + 1) as c_uint, 0), 0);
            failed_with(close(target).into(), libc::EBADF);
            failed_with(close(target + 1).into(), libc::EBADF);
            assert_eq!(close(copy), 0);
            failed_with(close(copy).into(), libc::EBADF);
            failed_with(close_range(5, 4, 0).into(), libc::EINVAL);
        }
    }
}
