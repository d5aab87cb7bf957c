//! The only code in this crate that uses `unsafe`: finding the real libc functions with
//! `dlsym(RTLD_NEXT, ..)`, saving and restoring `errno`, the thread-local re-entrancy guard,
//! and (in [`hooks`]) the exported functions themselves.
//!
//! Invariants:
//! - A real function is looked up once (eagerly from the library's constructor, lazily if a
//!   hook runs before it) and cached in an atomic; a hook never calls `dlsym` again after that.
//!   `dlsym` may allocate, and an allocator may read a file: a hook entered *while* this thread
//!   resolves a symbol makes the system call directly with `syscall(2)` instead of recursing.
//! - [`outside_call`] runs the library's own work after a real call: at most once per thread
//!   at a time (the guard), with `errno` restored afterwards and panics caught, so the
//!   program sees exactly what the real call returned.

#![allow(unsafe_code)]

use std::cell::Cell;
use std::ffi::{CStr, c_int, c_void};
use std::os::fd::BorrowedFd;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicPtr, Ordering};

use libc::ssize_t;

use crate::{engine, table};

// Not in this crate's unit tests, where the hooks would replace the test harness's libc calls.
#[cfg(not(test))]
pub mod hooks;

thread_local! {
    /// Set while this thread runs the library's own work after a hook.
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
    /// Set while this thread is inside `dlsym`.
    static RESOLVING: Cell<bool> = const { Cell::new(false) };
}

/// A real libc function, looked up by name with `dlsym(RTLD_NEXT, name)` and cached.
pub struct Real {
    name: &'static CStr,
    addr: AtomicPtr<c_void>,
}

impl Real {
    /// A function to look up on first use.
    pub const fn new(name: &'static CStr) -> Real {
        Real { name, addr: AtomicPtr::new(std::ptr::null_mut()) }
    }

    /// The function's address, or `None` while this thread is already inside `dlsym` (the
    /// caller then makes the system call directly) or when no later object defines it.
    #[inline]
    pub fn get(&self) -> Option<*mut c_void> {
        let addr = self.addr.load(Ordering::Acquire);
        if !addr.is_null() {
            return Some(addr);
        }
        self.resolve()
    }

    #[cold]
    fn resolve(&self) -> Option<*mut c_void> {
        let entered = RESOLVING.try_with(|r| !r.replace(true)).unwrap_or(false);
        if !entered {
            return None;
        }
        // SAFETY: `name` is a NUL-terminated string that lives for the whole program, and
        // RTLD_NEXT is a valid pseudo-handle for a library loaded by the dynamic linker. The
        // result is only an address; it is called through the function type its libc
        // declaration has, in `hooks`.
        let addr = unsafe { libc::dlsym(libc::RTLD_NEXT, self.name.as_ptr()) };
        let _ = RESOLVING.try_with(|r| r.set(false));
        if addr.is_null() {
            return None;
        }
        self.addr.store(addr, Ordering::Release);
        Some(addr)
    }
}

/// The calling thread's `errno`.
#[inline]
pub fn errno() -> c_int {
    // SAFETY: `__errno_location` returns a valid pointer to this thread's errno for the life
    // of the thread.
    unsafe { *libc::__errno_location() }
}

/// Sets the calling thread's `errno`.
#[inline]
pub fn set_errno(value: c_int) {
    // SAFETY: as in `errno`; the pointer is valid and only this thread writes through it.
    unsafe { *libc::__errno_location() = value }
}

/// Runs `work` (the library's own part of a hook) unless this thread is already inside it,
/// with `errno` saved before and restored after, and any panic caught and dropped.
pub fn outside_call(work: impl FnOnce()) {
    let entered = IN_HOOK.try_with(|g| !g.replace(true)).unwrap_or(false);
    if !entered {
        return;
    }
    let saved = errno();
    let _ = catch_unwind(AssertUnwindSafe(work));
    set_errno(saved);
    let _ = IN_HOOK.try_with(|g| g.set(false));
}

/// Borrows a descriptor a real call just returned or used successfully, for the duration of
/// the library's work on it. `None` for negative values.
pub fn borrow(fd: c_int) -> Option<BorrowedFd<'static>> {
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` is non-negative and was just accepted by the kernel in the real call, so it
    // is open now. BorrowedFd is a plain integer: if the program closes it on another thread
    // while the library works on it (a race the program has with itself), the library's
    // system calls fail with EBADF or touch whatever reused the number, and every such call is
    // a getsockopt/setsockopt whose failure is ignored. The 'static lifetime never outlives
    // the hook that created it: callers use it inside `outside_call` only.
    Some(unsafe { BorrowedFd::borrow_raw(fd) })
}

/// After a receive on `fd` that returned `n`: when it returned bytes, re-arm `TCP_QUICKACK`
/// if `fd` is tracked for it. Returns `n`, the receive's own result. The untracked case is
/// one atomic load.
#[inline]
pub fn after_receive(fd: c_int, n: ssize_t) -> ssize_t {
    if n > 0 && table::get(fd) & table::REARM != 0 {
        rearm(fd);
    }
    n
}

fn rearm(fd: c_int) {
    let saved = errno();
    let _ = catch_unwind(|| {
        if let Some(fd) = borrow(fd) {
            engine::rearm(fd);
        }
    });
    set_errno(saved);
}
