//! Which file descriptors are TCP sockets this library applied the profile to, and which of
//! them re-arm `TCP_QUICKACK` after receives: one byte of flags per fd, for fds below
//! [`MAX_FDS`], in a static array of atomics (64 KiB of zero pages until touched).
//!
//! This is what keeps the receive hooks cheap: a receive on any fd costs one relaxed atomic
//! load here, and only a tracked socket goes on to a `setsockopt`. Flags are set by the
//! `socket`/`connect`/`accept` hooks, copied by `dup`/`dup2`/`dup3` (the copy is the same
//! socket; a descriptor replaced by `dup2`/`dup3` takes the flags of what replaced it),
//! cleared by `close`, `close_range` and `closefrom` and by a `socket` or `accept` that reuses
//! the number for something else, and cleared when a re-arm fails (the fd was closed behind
//! the library's back, by a raw system call, and now names a file), so a stale entry costs at
//! most one failed system call.
//!
//! Invariants: never allocates, never blocks, never panics (out-of-range fds read as 0 and
//! writes to them are ignored). Relaxed ordering is enough: each entry is independent, and a
//! receive racing with the socket's own creation on another thread cannot have data yet.

use std::sync::atomic::{AtomicU8, Ordering};

/// File descriptors at or above this are not tracked (the profile is still applied to them at
/// `socket`/`connect`/`accept`, but receives do not re-arm).
pub const MAX_FDS: usize = 65536;

/// The profile was applied to this socket.
pub const APPLIED: u8 = 1;
/// Receives on this socket re-arm `TCP_QUICKACK`.
pub const REARM: u8 = 2;

static FLAGS: [AtomicU8; MAX_FDS] = [const { AtomicU8::new(0) }; MAX_FDS];

fn slot(fd: i32) -> Option<&'static AtomicU8> {
    usize::try_from(fd).ok().and_then(|i| FLAGS.get(i))
}

/// The flags of `fd` (0 for untracked or out-of-range fds).
#[inline]
pub fn get(fd: i32) -> u8 {
    slot(fd).map_or(0, |s| s.load(Ordering::Relaxed))
}

/// Sets the flags of `fd`, replacing what was there. Returns false when `fd` is out of range.
pub fn set(fd: i32, flags: u8) -> bool {
    slot(fd).map(|s| s.store(flags, Ordering::Relaxed)).is_some()
}

/// Forgets `fd`.
#[inline]
pub fn clear(fd: i32) {
    if let Some(s) = slot(fd)
        && s.load(Ordering::Relaxed) != 0
    {
        s.store(0, Ordering::Relaxed);
    }
}

/// Gives `to` the flags of `from` (after `dup2(from, to)` and friends: both numbers now name
/// the same open file).
pub fn copy(from: i32, to: i32) {
    let flags = get(from);
    if flags == 0 {
        clear(to);
    } else {
        set(to, flags);
    }
}

/// Forgets every fd from `first` to `last` inclusive (`close_range`, `closefrom`).
pub fn clear_range(first: u32, last: u32) {
    let end = (last as usize).min(MAX_FDS - 1);
    if let Some(range) = FLAGS.get(first as usize..=end) {
        for slot in range {
            slot.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_get_clear() {
        assert_eq!(get(40_000), 0);
        assert!(set(40_000, APPLIED | REARM));
        assert_eq!(get(40_000), APPLIED | REARM);
        clear(40_000);
        assert_eq!(get(40_000), 0);
    }

    #[test]
    fn copies_and_ranges() {
        set(41_000, APPLIED | REARM);
        set(41_002, APPLIED);
        copy(41_000, 41_001);
        assert_eq!(get(41_001), APPLIED | REARM, "a dup is the same socket");
        copy(41_003, 41_002);
        assert_eq!(get(41_002), 0, "replaced by an untracked file");
        copy(41_000, MAX_FDS as i32);
        copy(-1, 41_000);
        assert_eq!(get(41_000), 0);
        set(41_000, REARM);
        set(41_005, REARM);
        clear_range(41_001, 41_004);
        assert_eq!((get(41_000), get(41_001), get(41_005)), (REARM, 0, REARM));
        clear_range(41_000, u32::MAX);
        assert_eq!((get(41_000), get(41_005), get(MAX_FDS as i32 - 1)), (0, 0, 0));
        clear_range(5, 4);
    }

    #[test]
    fn out_of_range_is_untracked() {
        for fd in [-1, i32::MIN, MAX_FDS as i32, i32::MAX] {
            assert!(!set(fd, REARM));
            assert_eq!(get(fd), 0);
            clear(fd);
        }
        assert!(set(MAX_FDS as i32 - 1, APPLIED));
        clear(MAX_FDS as i32 - 1);
    }
}
