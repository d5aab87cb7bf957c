//! The only code in this crate that uses `unsafe`: finding the real libc functions with
//! `dlsym(RTLD_NEXT, ..)`, saving and restoring `errno`, the thread-local re-entrancy guard,
//! the lock-free once-cell the configuration lives in, the stderr write, the secure-mode
//! check, the raw-system-call fallbacks ([`raw`]) and (in [`hooks`]) the exported functions
//! themselves.
//!
//! Invariants:
//! - A real function is looked up once (eagerly from the library's constructor, lazily if a
//!   hook runs before it) and cached in an atomic; a hook never calls `dlsym` again after that.
//!   `dlsym` may allocate, and an allocator may read a file: a hook entered *while* this thread
//!   resolves a symbol makes the system call directly with `syscall(2)` instead of recursing.
//! - [`outside_call`] runs the library's own work after a real call: at most once per thread
//!   at a time (the guard), with `errno` restored afterwards and panics caught, so the
//!   program sees exactly what the real call returned.
//! - **Fork-safe**: nothing here or in the library's work takes a lock that a `fork` on another
//!   thread could leave held in the child. The configuration is published through a
//!   compare-and-swap ([`LockFreeOnce`]) rather than a `OnceLock` (whose initialisation a child
//!   forked mid-way would wait for forever), log lines go out with one `write(2)` rather than
//!   through `std::io::stderr()`'s lock, and the fd table is atomics.
//! - **Inert in a secure-execution program** (setuid/setgid or file capabilities, `AT_SECURE`):
//!   [`outside_call`] does nothing there, so the environment of whoever ran the program never
//!   makes a privileged process read a file or change a socket.

#![allow(unsafe_code)]

use std::cell::Cell;
use std::ffi::{CStr, c_int, c_void};
use std::os::fd::BorrowedFd;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicBool, AtomicPtr, Ordering};

use libc::ssize_t;

use crate::{engine, table};

// Not in this crate's unit tests, where the hooks would replace the test harness's libc calls.
#[cfg(not(test))]
pub mod hooks;
pub mod raw;

/// Set (once, at load) when the process runs in secure-execution mode.
static SECURE: AtomicBool = AtomicBool::new(false);

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

/// Whether the kernel started this process in secure-execution mode (`AT_SECURE` in the
/// auxiliary vector: a setuid/setgid program, or one that gained file capabilities).
pub fn kernel_says_secure() -> bool {
    // SAFETY: getauxval reads the process's auxiliary vector and returns 0 for a missing key.
    unsafe { libc::getauxval(libc::AT_SECURE) != 0 }
}

/// Turns the library's work off for the rest of the process (secure-execution mode).
pub fn disable() {
    SECURE.store(true, Ordering::Relaxed);
}

/// Whether [`disable`] was called.
pub fn disabled() -> bool {
    SECURE.load(Ordering::Relaxed)
}

/// Writes `bytes` to fd 2 with one `write(2)` (retried on `EINTR`), keeping `errno`. No lock
/// is taken, unlike `std::io::stderr()`, whose lock a thread blocked on a full stderr pipe
/// would hold across a `fork`, deadlocking the child's next log line. Errors are dropped.
pub fn write_stderr(bytes: &[u8]) {
    let saved = errno();
    loop {
        // SAFETY: `bytes` is a valid readable buffer of `bytes.len()` bytes for the call.
        let n = unsafe { libc::write(2, bytes.as_ptr().cast(), bytes.len()) };
        if n >= 0 || errno() != libc::EINTR {
            break;
        }
    }
    set_errno(saved);
}

/// A value computed on first use and then shared for the life of the process, without a lock:
/// threads that race each compute one, a compare-and-swap publishes the first, and the others
/// drop theirs. A `fork` in the middle of a computation leaves the child with nothing
/// published, so the child computes its own instead of waiting on a thread it does not have.
pub struct LockFreeOnce<T> {
    value: AtomicPtr<T>,
}

impl<T> Default for LockFreeOnce<T> {
    fn default() -> LockFreeOnce<T> {
        LockFreeOnce::new()
    }
}

impl<T> LockFreeOnce<T> {
    /// Nothing published yet.
    pub const fn new() -> LockFreeOnce<T> {
        LockFreeOnce { value: AtomicPtr::new(std::ptr::null_mut()) }
    }

    /// The published value, if any.
    pub fn get(&'static self) -> Option<&'static T> {
        let ptr = self.value.load(Ordering::Acquire);
        // SAFETY: a non-null pointer here came from `Box::into_raw` in `get_or_publish`, was
        // published with Release (so the value is initialised for an Acquire reader) and is
        // never freed or replaced: a shared reference to it is valid for 'static.
        (!ptr.is_null()).then(|| unsafe { &*ptr })
    }

    /// The published value, computing it with `make` first if there is none; the flag is
    /// true for the one call whose value was published (so one-time side effects, such as a
    /// message, happen once).
    pub fn get_or_publish(&'static self, make: impl FnOnce() -> T) -> (&'static T, bool) {
        if let Some(value) = self.get() {
            return (value, false);
        }
        let mine = Box::into_raw(Box::new(make()));
        match self.value.compare_exchange(
            std::ptr::null_mut(),
            mine,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            // SAFETY: `mine` is now the published pointer: never freed, so valid for 'static.
            Ok(_) => (unsafe { &*mine }, true),
            Err(theirs) => {
                // SAFETY: `mine` came from Box::into_raw above and was never shared; `theirs`
                // is a published value, valid for 'static as in `get`.
                unsafe {
                    drop(Box::from_raw(mine));
                    (&*theirs, false)
                }
            }
        }
    }
}

/// Runs `work` (the library's own part of a hook) unless this thread is already inside it or
/// the library is [`disabled`], with `errno` saved before and restored after, and any panic
/// caught and dropped.
pub fn outside_call(work: impl FnOnce()) {
    if disabled() {
        return;
    }
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
    if disabled() {
        return;
    }
    let saved = errno();
    let _ = catch_unwind(|| {
        if let Some(fd) = borrow(fd) {
            engine::rearm(fd);
        }
    });
    set_errno(saved);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hook_inside_dlsym_gets_no_function_and_falls_back() {
        let real = Real::new(c"read");
        RESOLVING.with(|r| r.set(true));
        assert_eq!(real.get(), None, "re-entered from dlsym: the hook must use raw::read");
        RESOLVING.with(|r| r.set(false));
        let addr = real.get().expect("libc defines read");
        assert_eq!(real.get(), Some(addr), "cached");
        assert_eq!(Real::new(c"no_such_function_in_libc").get(), None);
    }

    #[test]
    fn lock_free_once_publishes_the_first_value() {
        static CELL: LockFreeOnce<String> = LockFreeOnce::new();
        assert!(CELL.get().is_none());
        let (first, won) = CELL.get_or_publish(|| "a".into());
        assert_eq!((first.as_str(), won), ("a", true));
        let (again, won) = CELL.get_or_publish(|| unreachable!("computed once published"));
        assert_eq!((again.as_str(), won), ("a", false));
    }

    #[test]
    fn racing_threads_agree_and_one_wins() {
        static CELL: LockFreeOnce<usize> = LockFreeOnce::new();
        let barrier = std::sync::Barrier::new(8);
        let results: Vec<(usize, bool)> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..8)
                .map(|i| {
                    let barrier = &barrier;
                    s.spawn(move || {
                        barrier.wait();
                        let (v, won) = CELL.get_or_publish(|| i);
                        (*v, won)
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let published = results[0].0;
        assert!(results.iter().all(|(v, _)| *v == published), "{results:?}");
        assert_eq!(results.iter().filter(|(_, won)| *won).count(), 1, "{results:?}");
    }

    #[test]
    fn outside_call_keeps_errno_and_swallows_panics() {
        set_errno(libc::EXDEV);
        let mut ran = false;
        outside_call(|| {
            ran = true;
            set_errno(libc::EBADF);
        });
        assert!(ran);
        assert_eq!(errno(), libc::EXDEV);
        // A panic stays inside (the panic hook of the library is installed by the cdylib only,
        // so the test harness prints this one).
        outside_call(|| panic!("inside"));
        assert_eq!(errno(), libc::EXDEV);
    }
}
