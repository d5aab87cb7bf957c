//! The exported functions that `LD_PRELOAD` puts in front of libc's: `socket`, `connect`,
//! `accept`, `accept4`, `close`, `recv`, `recvfrom`, `recvmsg` and `read`.
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

use libc::{msghdr, sa_family_t, size_t, sockaddr, socklen_t, ssize_t};

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

/// Resolves every real function before `main`, while nothing else runs, so that hooks never
/// call `dlsym` (which may allocate) in the middle of the program.
#[used]
#[unsafe(link_section = ".init_array")]
static RESOLVE_AT_LOAD: extern "C" fn() = resolve_all;

extern "C" fn resolve_all() {
    for real in [&SOCKET, &CONNECT, &ACCEPT, &ACCEPT4, &CLOSE, &RECV, &RECVFROM, &RECVMSG, &READ] {
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
