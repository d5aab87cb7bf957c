//! The emulator's clock: `CLOCK_MONOTONIC` mapped to the model's [`Nanos`].
//!
//! [`MonoClock::now`] is nanoseconds since the emulator started (its epoch), read through the
//! vDSO (no syscall, a few tens of nanoseconds), so it is cheap enough to read once per packet.
//! [`MonoClock::absolute`] turns a `Nanos` back into a `CLOCK_MONOTONIC` timespec for a
//! `TFD_TIMER_ABSTIME` timer.
//!
//! Invariants: `now()` never goes backwards (the kernel clock is monotonic and the mapping is a
//! fixed offset); this module never sleeps and never touches anything but the clock.

use std::time::Duration;

use rustix::time::{ClockId, Timespec, clock_gettime};
use tcptail_emu::Nanos;

const NS_PER_S: u64 = 1_000_000_000;

/// `CLOCK_MONOTONIC` with its zero at the emulator's start.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MonoClock {
    epoch_ns: u64,
}

impl MonoClock {
    /// A clock whose zero is now.
    pub(crate) fn start() -> MonoClock {
        MonoClock { epoch_ns: raw_now() }
    }

    /// Nanoseconds since the epoch.
    #[inline]
    pub(crate) fn now(&self) -> Nanos {
        Nanos(raw_now().saturating_sub(self.epoch_ns))
    }

    /// The `CLOCK_MONOTONIC` instant of `t`.
    pub(crate) fn absolute(&self, t: Nanos) -> Timespec {
        to_timespec(self.epoch_ns.saturating_add(t.as_nanos()))
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds.
#[inline]
fn raw_now() -> u64 {
    let ts = clock_gettime(ClockId::Monotonic);
    // The monotonic clock is never negative.
    (ts.tv_sec as u64).saturating_mul(NS_PER_S).saturating_add(ts.tv_nsec as u64)
}

fn to_timespec(ns: u64) -> Timespec {
    Timespec { tv_sec: (ns / NS_PER_S) as i64, tv_nsec: (ns % NS_PER_S) as i64 }
}

/// A relative timeout for `ppoll`.
pub(crate) fn timeout(d: Duration) -> Timespec {
    Timespec { tv_sec: d.as_secs() as i64, tv_nsec: i64::from(d.subsec_nanos()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_is_monotonic_and_starts_near_zero() {
        let clock = MonoClock::start();
        let a = clock.now();
        let b = clock.now();
        assert!(b >= a);
        assert!(a < Nanos::from_millis(100), "{a}");
    }

    #[test]
    fn absolute_adds_the_epoch() {
        let clock = MonoClock { epoch_ns: 5 * NS_PER_S + 999_999_999 };
        let ts = clock.absolute(Nanos(2));
        assert_eq!((ts.tv_sec, ts.tv_nsec), (6, 1));
        let t = timeout(Duration::from_micros(1_500_000));
        assert_eq!((t.tv_sec, t.tv_nsec), (1, 500_000_000));
    }
}
