//! The exported functions that `LD_PRELOAD` puts in front of libc's: `socket`, `connect`,
//! `accept`, `accept4`, `close`, and the receives `recv`, `recvfrom`, `recvmsg`, `recvmmsg`,
//! `read`, `readv`, and the `_FORTIFY_SOURCE` variants `__recv_chk`, `__recvfrom_chk` and
//! `__read_chk` (a program compiled with `-D_FORTIFY_SOURCE` calls those instead of `recv`,
//! `recvfrom` and `read` whenever the buffer's size is known at compile time but the length is
//! not; glibc's own implementations call its internal receive, never our `recv`, so without
//! these hooks such a program would never re-arm).
//!
//! Every hook has the C signature of the libc function it replaces, calls the real one first
//! and returns its result unchanged; the library's work happens afterwards through
//! [`outside_call`] (errno preserved, panics caught, no re-entry) or, on the receive path,
//! [`after_receive`] (one atomic load unless the socket is tracked). When the real function is
//! not resolved yet and cannot be (this thread is inside `dlsym`), the hook makes the system
//! call itself with `syscall(2)`, which has the same result and errno contract.
//!
//! The hooks are not compiled into this crate's own unit tests, where they would replace the
//! test harness's libc functions.

use std::ffi::{c_int, c_long, c_void};
use std::mem::{size_of, transmute};
use std::ptr::null_mut;

use libc::{
    c_uint, iovec, mmsghdr, msghdr, sa_family_t, size_t, sockaddr, socklen_t, ssize_t, timespec,
};

use super::{Real, after_receive, borrow, errno, outside_call};
use crate::{engine, table};

static SOCKET: Real = Real::new(c"socket");
static CONNECT: Real = Real::new(c"connect");
static ACCEPT: Real = Real::new(c"accept");
static ACCEPT4: Real = Real::new(c"accept4");
static CLOSE: Real = Real::new(c"close");
static RECV: Real = Real::new(c"recv");
static RECVFROM: Real = Real::new(c"recvfrom");
static RECVMSG: Real = Real::new(c"recvmsg");
static READ: Real = Real::new(c"read");
static READV: Real = Real::new(c"readv");
static RECVMMSG: Real = Real::new(c"recvmmsg");
static RECV_CHK: Real = Real::new(c"__recv_chk");
static RECVFROM_CHK: Real = Real::new(c"__recvfrom_chk");
static READ_CHK: Real = Real::new(c"__read_chk");

/// Every real function, resolved together before `main`.
static ALL: [&Real; 14] = [
    &SOCKET,
    &CONNECT,
    &ACCEPT,
    &ACCEPT4,
    &CLOSE,
    &RECV,
    &RECVFROM,
    &RECVMSG,
    &READ,
    &READV,
    &RECVMMSG,
    &RECV_CHK,
    &RECVFROM_CHK,
    &READ_CHK,
];

type SocketFn = unsafe extern "C" fn(c_int, c_int, c_int) -> c_int;
type ConnectFn = unsafe extern "C" fn(c_int, *const sockaddr, socklen_t) -> c_int;
type AcceptFn = unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int;
type Accept4Fn = unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t, c_int) -> c_int;
type CloseFn = unsafe extern "C" fn(c_int) -> c_int;
type RecvFn = unsafe extern "C" fn(c_int, *mut c_void, size_t, c_int) -> ssize_t;
type RecvfromFn = unsafe extern "C" fn(
    c_int,
    *mut c_void,
    size_t,
    c_int,
    *mut sockaddr,
    *mut socklen_t,
) -> ssize_t;
type RecvmsgFn = unsafe extern "C" fn(c_int, *mut msghdr, c_int) -> ssize_t;
type ReadFn = unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t;
type ReadvFn = unsafe extern "C" fn(c_int, *const iovec, c_int) -> ssize_t;
type RecvmmsgFn = unsafe extern "C" fn(c_int, *mut mmsghdr, c_uint, c_int, *mut timespec) -> c_int;
type RecvChkFn = unsafe extern "C" fn(c_int, *mut c_void, size_t, size_t, c_int) -> ssize_t;
type RecvfromChkFn = unsafe extern "C" fn(
    c_int,
    *mut c_void,
    size_t,
    size_t,
    c_int,
    *mut sockaddr,
    *mut socklen_t,
) -> ssize_t;
type ReadChkFn = unsafe extern "C" fn(c_int, *mut c_void, size_t, size_t) -> ssize_t;

unsafe extern "C" {
    /// glibc's "buffer overflow detected" abort, what the real `__*_chk` functions call when
    /// the length exceeds the buffer. Used only by the raw-system-call fallbacks below.
    fn __chk_fail() -> !;
}

/// Resolves every real function before `main`, while nothing else runs, so that hooks never
/// call `dlsym` (which may allocate) in the middle of the program.
#[used]
#[unsafe(link_section = ".init_array")]
static RESOLVE_AT_LOAD: extern "C" fn() = resolve_all;

extern "C" fn resolve_all() {
    for real in ALL {
        let _ = real.get();
    }
}

/// Calls the real function through `$ty`, or makes system call `$nr` when it is not
/// resolvable. The caller's `unsafe` block states why the arguments are valid for both.
macro_rules! real_call {
    ($real:expr, $ty:ty, ($($arg:expr),*), $nr:expr, ($($sarg:expr),*), $ret:ty) => {
        match $real.get() {
            Some(addr) => {
                // SAFETY (of the transmute): `addr` is what dlsym returned for this function's
                // name, the libc function whose C type `$ty` spells out exactly.
                let f = transmute::<*mut c_void, $ty>(addr);
                f($($arg),*)
            }
            None => libc::syscall($nr, $($sarg as c_long),*) as $ret,
        }
    };
}

/// `socket(2)`: the real call, then the whole profile on a new IPv4/IPv6 TCP socket.
///
/// # Safety
/// The caller's contract is libc's `socket`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    // SAFETY: the arguments are integers passed through unchanged to the real function or
    // the raw system call with the same meaning.
    let fd = unsafe {
        real_call!(
            SOCKET,
            SocketFn,
            (domain, ty, protocol),
            libc::SYS_socket,
            (domain, ty, protocol),
            c_int
        )
    };
    if let Some(sock) = borrow(fd) {
        outside_call(|| engine::on_socket(sock, domain, ty, protocol));
    }
    fd
}

/// `connect(2)`: the real call, then (on success or `EINPROGRESS`) the post-connect part of
/// the profile, or the whole profile for a TCP socket the library did not see created.
///
/// # Safety
/// The caller's contract is libc's `connect`: `addr` points to `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    // SAFETY: `addr` and `len` come from the caller, who guarantees them to libc's connect;
    // they are passed through unchanged.
    let ret = unsafe {
        real_call!(CONNECT, ConnectFn, (fd, addr, len), libc::SYS_connect, (fd, addr, len), c_int)
    };
    if ret == 0 || errno() == libc::EINPROGRESS {
        let family = if !addr.is_null() && len as usize >= size_of::<sa_family_t>() {
            // SAFETY: the caller guarantees `len` readable bytes at `addr`, and we checked
            // that covers the leading `sa_family_t`; read unaligned as callers may pass any
            // byte buffer.
            Some(c_int::from(unsafe { addr.cast::<sa_family_t>().read_unaligned() }))
        } else {
            None
        };
        if let Some(sock) = borrow(fd) {
            outside_call(|| engine::on_connect(sock, family));
        }
    }
    ret
}

/// `accept(2)`: the real call, then the whole profile on an accepted TCP socket.
///
/// # Safety
/// The caller's contract is libc's `accept`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    // SAFETY: the caller's pointers are passed through unchanged; `accept4` with flags 0 is
    // the same system call as `accept` (and the only one on some architectures).
    let new = unsafe {
        real_call!(ACCEPT, AcceptFn, (fd, addr, len), libc::SYS_accept4, (fd, addr, len, 0), c_int)
    };
    if let Some(sock) = borrow(new) {
        outside_call(|| engine::on_accept(sock));
    }
    new
}

/// `accept4(2)`: as [`accept`], with flags.
///
/// # Safety
/// The caller's contract is libc's `accept4`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn accept4(
    fd: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
    flags: c_int,
) -> c_int {
    // SAFETY: the caller's pointers and flags are passed through unchanged.
    let new = unsafe {
        real_call!(
            ACCEPT4,
            Accept4Fn,
            (fd, addr, len, flags),
            libc::SYS_accept4,
            (fd, addr, len, flags),
            c_int
        )
    };
    if let Some(sock) = borrow(new) {
        outside_call(|| engine::on_accept(sock));
    }
    new
}

/// `close(2)`: forgets the fd, then the real call.
///
/// # Safety
/// The caller's contract is libc's `close`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    // Forget first: once the real close returns, another thread may get the same number.
    table::clear(fd);
    // SAFETY: an integer passed through unchanged.
    unsafe { real_call!(CLOSE, CloseFn, (fd), libc::SYS_close, (fd), c_int) }
}

/// `recv(2)`: the real call, then a `TCP_QUICKACK` re-arm if bytes arrived on a tracked socket.
///
/// # Safety
/// The caller's contract is libc's `recv`: `buf` is writable for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t {
    // SAFETY: the caller's buffer and length are passed through unchanged; recv is recvfrom
    // without an address.
    let n = unsafe {
        real_call!(
            RECV,
            RecvFn,
            (fd, buf, len, flags),
            libc::SYS_recvfrom,
            (fd, buf, len, flags, null_mut::<sockaddr>(), null_mut::<socklen_t>()),
            ssize_t
        )
    };
    after_receive(fd, n)
}

/// `recvfrom(2)`: as [`recv`].
///
/// # Safety
/// The caller's contract is libc's `recvfrom`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    addr_len: *mut socklen_t,
) -> ssize_t {
    // SAFETY: the caller's pointers and lengths are passed through unchanged.
    let n = unsafe {
        real_call!(
            RECVFROM,
            RecvfromFn,
            (fd, buf, len, flags, addr, addr_len),
            libc::SYS_recvfrom,
            (fd, buf, len, flags, addr, addr_len),
            ssize_t
        )
    };
    after_receive(fd, n)
}

/// `recvmsg(2)`: as [`recv`].
///
/// # Safety
/// The caller's contract is libc's `recvmsg`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    // SAFETY: the caller's message header is passed through unchanged.
    let n = unsafe {
        real_call!(
            RECVMSG,
            RecvmsgFn,
            (fd, msg, flags),
            libc::SYS_recvmsg,
            (fd, msg, flags),
            ssize_t
        )
    };
    after_receive(fd, n)
}

/// `read(2)`: as [`recv`]; on anything but a tracked TCP socket the added work is one atomic
/// load.
///
/// # Safety
/// The caller's contract is libc's `read`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, count: size_t) -> ssize_t {
    // SAFETY: the caller's buffer and count are passed through unchanged.
    let n = unsafe {
        real_call!(READ, ReadFn, (fd, buf, count), libc::SYS_read, (fd, buf, count), ssize_t)
    };
    after_receive(fd, n)
}

/// `readv(2)`: as [`read`].
///
/// # Safety
/// The caller's contract is libc's `readv`: `iov` points to `iovcnt` valid `iovec`s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    // SAFETY: the caller's vector and count are passed through unchanged.
    let n = unsafe {
        real_call!(READV, ReadvFn, (fd, iov, iovcnt), libc::SYS_readv, (fd, iov, iovcnt), ssize_t)
    };
    after_receive(fd, n)
}

/// `recvmmsg(2)`: as [`recv`], "bytes arrived" being at least one message received (on a TCP
/// socket each message is a `recvmsg`, so one re-arm covers the call).
///
/// # Safety
/// The caller's contract is libc's `recvmmsg`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvmmsg(
    fd: c_int,
    msgs: *mut mmsghdr,
    vlen: c_uint,
    flags: c_int,
    timeout: *mut timespec,
) -> c_int {
    // SAFETY: the caller's message vector, count, flags and timeout pointer are passed through
    // unchanged; glibc's `struct timespec` on this 64-bit target is the kernel's.
    let n = unsafe {
        real_call!(
            RECVMMSG,
            RecvmmsgFn,
            (fd, msgs, vlen, flags, timeout),
            libc::SYS_recvmmsg,
            (fd, msgs, vlen, flags, timeout),
            c_int
        )
    };
    // A message count, widened losslessly (ssize_t is at least as wide as int on Linux).
    after_receive(fd, n as ssize_t);
    n
}

/// The length a raw-system-call fallback of a `__*_chk` function may use: `len` when it fits
/// the buffer, else glibc's "buffer overflow detected" abort, exactly as the real function.
fn fortify_len(len: size_t, buflen: size_t) -> size_t {
    if len > buflen {
        // SAFETY: glibc's abort for a detected overflow, called with no arguments; it does
        // not return.
        unsafe { __chk_fail() }
    }
    len
}

/// `__recv_chk`: the `_FORTIFY_SOURCE` form of [`recv`] (`buflen` is the buffer's size as the
/// compiler knew it).
///
/// # Safety
/// The caller's contract is glibc's `__recv_chk`: `buf` is writable for `buflen` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __recv_chk(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    buflen: size_t,
    flags: c_int,
) -> ssize_t {
    // SAFETY: the caller's buffer and sizes are passed through unchanged to the real function,
    // which checks them; the fallback system call gets a length checked against the buffer.
    let n = unsafe {
        real_call!(
            RECV_CHK,
            RecvChkFn,
            (fd, buf, len, buflen, flags),
            libc::SYS_recvfrom,
            (
                fd,
                buf,
                fortify_len(len, buflen),
                flags,
                null_mut::<sockaddr>(),
                null_mut::<socklen_t>()
            ),
            ssize_t
        )
    };
    after_receive(fd, n)
}

/// `__recvfrom_chk`: the `_FORTIFY_SOURCE` form of [`recvfrom`].
///
/// # Safety
/// The caller's contract is glibc's `__recvfrom_chk`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __recvfrom_chk(
    fd: c_int,
    buf: *mut c_void,
    len: size_t,
    buflen: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    addr_len: *mut socklen_t,
) -> ssize_t {
    // SAFETY: as in `__recv_chk`; the address pointers are the caller's, unchanged.
    let n = unsafe {
        real_call!(
            RECVFROM_CHK,
            RecvfromChkFn,
            (fd, buf, len, buflen, flags, addr, addr_len),
            libc::SYS_recvfrom,
            (fd, buf, fortify_len(len, buflen), flags, addr, addr_len),
            ssize_t
        )
    };
    after_receive(fd, n)
}

/// `__read_chk`: the `_FORTIFY_SOURCE` form of [`read`].
///
/// # Safety
/// The caller's contract is glibc's `__read_chk`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn __read_chk(
    fd: c_int,
    buf: *mut c_void,
    count: size_t,
    buflen: size_t,
) -> ssize_t {
    // SAFETY: as in `__recv_chk`.
    let n = unsafe {
        real_call!(
            READ_CHK,
            ReadChkFn,
            (fd, buf, count, buflen),
            libc::SYS_read,
            (fd, buf, fortify_len(count, buflen)),
            ssize_t
        )
    };
    after_receive(fd, n)
}
