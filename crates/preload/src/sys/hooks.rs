//! The exported functions that `LD_PRELOAD` puts in front of libc's: `socket`, `connect`,
//! `accept`, `accept4`, `close`, the descriptor calls that keep the fd table right (`dup`,
//! `dup2`, `dup3`, `close_range`, `closefrom`), and the receives `recv`, `recvfrom`, `recvmsg`, `recvmmsg`,
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
//! call itself ([`raw`]), which has the same result and errno contract.
//!
//! At load, the library's constructor resolves every real function, installs the library's
//! panic hook (silent unless `TCPTAIL_LOG` is on: the program's stderr is not the library's
//! to write backtraces to) and, in a secure-execution program (`AT_SECURE`: setuid, setgid,
//! file capabilities), prints one warning and turns the library's work off.
//!
//! The hooks are not compiled into this crate's own unit tests, where they would replace the
//! test harness's libc functions.

use std::ffi::{c_int, c_void};
use std::mem::{size_of, transmute};

use libc::{
    c_uint, iovec, mmsghdr, msghdr, sa_family_t, size_t, sockaddr, socklen_t, ssize_t, timespec,
};

use super::{Real, after_receive, borrow, errno, outside_call, raw};
use crate::config::Config;
use crate::{engine, log, table};

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
static DUP: Real = Real::new(c"dup");
static DUP2: Real = Real::new(c"dup2");
static DUP3: Real = Real::new(c"dup3");
static CLOSE_RANGE: Real = Real::new(c"close_range");
static CLOSEFROM: Real = Real::new(c"closefrom");

/// Every real function, resolved together before `main`.
static ALL: [&Real; 19] = [
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
    &DUP,
    &DUP2,
    &DUP3,
    &CLOSE_RANGE,
    &CLOSEFROM,
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
type DupFn = unsafe extern "C" fn(c_int) -> c_int;
type Dup2Fn = unsafe extern "C" fn(c_int, c_int) -> c_int;
type Dup3Fn = unsafe extern "C" fn(c_int, c_int, c_int) -> c_int;
type CloseRangeFn = unsafe extern "C" fn(c_uint, c_uint, c_int) -> c_int;
type ClosefromFn = unsafe extern "C" fn(c_int);

unsafe extern "C" {
    /// glibc's "buffer overflow detected" abort, what the real `__*_chk` functions call when
    /// the length exceeds the buffer. Used only by the raw-system-call fallbacks below.
    fn __chk_fail() -> !;
}

/// Runs [`on_load`] when the library is loaded, before `main`.
#[used]
#[unsafe(link_section = ".init_array")]
static AT_LOAD: extern "C" fn() = on_load;

/// Resolves every real function while nothing else runs, so that hooks never call `dlsym`
/// (which may allocate) in the middle of the program; installs the panic hook; and in a
/// secure-execution program warns once and turns the library off.
extern "C" fn on_load() {
    for real in ALL {
        let _ = real.get();
    }
    if super::kernel_says_secure() {
        // Before anything reads the environment: in a setuid program it belongs to whoever
        // ran it, and a profile path from there must not be opened with the program's rights.
        super::disable();
        log::emit(&log::notice_line(
            std::process::id(),
            "loaded into a setuid/setgid or file-capability program (AT_SECURE); doing nothing \
             in this process (remove the library from its LD_PRELOAD or /etc/ld.so.preload)",
        ));
        return;
    }
    log::set_enabled(Config::log_from_env());
    let _ = std::panic::catch_unwind(|| std::panic::set_hook(Box::new(panic_hook)));
}

/// The library's panic hook (its own copy of the Rust runtime's; a Rust host program keeps
/// its own). Every panic is caught at the hook that ran the work, so this only decides what
/// the program's stderr sees: nothing, unless logging is on, then one line.
fn panic_hook(info: &std::panic::PanicHookInfo<'_>) {
    if !log::enabled() {
        return;
    }
    let message = info
        .payload()
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| info.payload().downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)");
    let location = info.location().map(|l| format!("{}:{}:{}", l.file(), l.line(), l.column()));
    log::emit(&log::panic_line(std::process::id(), location.as_deref(), message));
}

/// Calls the real function through `$ty`, or its system call (`$fallback`, from [`raw`]) when
/// it is not resolvable. The caller's `unsafe` block states why the arguments are valid for
/// both.
macro_rules! real_call {
    ($real:expr, $ty:ty, ($($arg:expr),*), $fallback:expr) => {
        match $real.get() {
            Some(addr) => {
                // SAFETY (of the transmute): `addr` is what dlsym returned for this function's
                // name, the libc function whose C type `$ty` spells out exactly.
                let f = transmute::<*mut c_void, $ty>(addr);
                f($($arg),*)
            }
            None => $fallback,
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
        real_call!(SOCKET, SocketFn, (domain, ty, protocol), raw::socket(domain, ty, protocol))
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
    let ret =
        unsafe { real_call!(CONNECT, ConnectFn, (fd, addr, len), raw::connect(fd, addr, len)) };
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
    let new = unsafe { real_call!(ACCEPT, AcceptFn, (fd, addr, len), raw::accept(fd, addr, len)) };
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
        real_call!(ACCEPT4, Accept4Fn, (fd, addr, len, flags), raw::accept4(fd, addr, len, flags))
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
    unsafe { real_call!(CLOSE, CloseFn, (fd), raw::close(fd)) }
}

/// `dup(2)`: the real call, then the copy takes the original's flags in the fd table.
///
/// # Safety
/// The caller's contract is libc's `dup`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: an integer passed through unchanged.
    let new = unsafe { real_call!(DUP, DupFn, (fd), raw::dup(fd)) };
    if new >= 0 {
        table::copy(fd, new);
    }
    new
}

/// `dup2(2)`: the real call, then `new` takes `old`'s flags (a tracked socket's copy re-arms;
/// a tracked number replaced by a file or an unseen socket is forgotten).
///
/// # Safety
/// The caller's contract is libc's `dup2`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    // SAFETY: integers passed through unchanged.
    let ret = unsafe { real_call!(DUP2, Dup2Fn, (old, new), raw::dup2(old, new)) };
    if ret >= 0 && old != new {
        table::copy(old, new);
    }
    ret
}

/// `dup3(2)`: as [`dup2`].
///
/// # Safety
/// The caller's contract is libc's `dup3`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    // SAFETY: integers passed through unchanged.
    let ret = unsafe { real_call!(DUP3, Dup3Fn, (old, new, flags), raw::dup3(old, new, flags)) };
    if ret >= 0 {
        table::copy(old, new);
    }
    ret
}

/// `close_range(2)`: forgets the range (unless it only sets close-on-exec), then the real call.
///
/// # Safety
/// The caller's contract is libc's `close_range`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn close_range(first: c_uint, last: c_uint, flags: c_int) -> c_int {
    // Forget first, as `close` does (the numbers are free for other threads as soon as the
    // call returns), but only for a call that will close: CLOSE_RANGE_CLOEXEC closes nothing,
    // and first > last is refused with EINVAL.
    if flags & libc::CLOSE_RANGE_CLOEXEC as c_int == 0 && first <= last {
        table::clear_range(first, last);
    }
    // SAFETY: integers passed through unchanged.
    unsafe {
        real_call!(
            CLOSE_RANGE,
            CloseRangeFn,
            (first, last, flags),
            raw::close_range(first, last, flags)
        )
    }
}

/// `closefrom(3)` (glibc 2.34): forgets every fd from `low`, then the real call, which closes
/// them with its internal `close_range` that no preload sees.
///
/// # Safety
/// The caller's contract is glibc's `closefrom`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn closefrom(low: c_int) {
    table::clear_range(low.max(0) as c_uint, c_uint::MAX);
    match CLOSEFROM.get() {
        // SAFETY: the address dlsym returned for `closefrom`, whose C type is `ClosefromFn`;
        // the integer is passed through unchanged.
        Some(addr) => unsafe { transmute::<*mut c_void, ClosefromFn>(addr)(low) },
        // SAFETY: what glibc's closefrom does first (it falls back to /proc only for kernels
        // without close_range).
        None => unsafe {
            raw::close_range(low.max(0) as c_uint, c_uint::MAX, 0);
        },
    }
}

/// `recv(2)`: the real call, then a `TCP_QUICKACK` re-arm if bytes arrived on a tracked socket.
///
/// # Safety
/// The caller's contract is libc's `recv`: `buf` is writable for `len` bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, len: size_t, flags: c_int) -> ssize_t {
    // SAFETY: the caller's buffer and length are passed through unchanged; recv is recvfrom
    // without an address.
    let n =
        unsafe { real_call!(RECV, RecvFn, (fd, buf, len, flags), raw::recv(fd, buf, len, flags)) };
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
            raw::recvfrom(fd, buf, len, flags, addr, addr_len)
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
    let n =
        unsafe { real_call!(RECVMSG, RecvmsgFn, (fd, msg, flags), raw::recvmsg(fd, msg, flags)) };
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
    let n = unsafe { real_call!(READ, ReadFn, (fd, buf, count), raw::read(fd, buf, count)) };
    after_receive(fd, n)
}

/// `readv(2)`: as [`read`].
///
/// # Safety
/// The caller's contract is libc's `readv`: `iov` points to `iovcnt` valid `iovec`s.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, iovcnt: c_int) -> ssize_t {
    // SAFETY: the caller's vector and count are passed through unchanged.
    let n = unsafe { real_call!(READV, ReadvFn, (fd, iov, iovcnt), raw::readv(fd, iov, iovcnt)) };
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
            raw::recvmmsg(fd, msgs, vlen, flags, timeout)
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
            raw::recv(fd, buf, fortify_len(len, buflen), flags)
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
            raw::recvfrom(fd, buf, fortify_len(len, buflen), flags, addr, addr_len)
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
            raw::read(fd, buf, fortify_len(count, buflen))
        )
    };
    after_receive(fd, n)
}
