//! Virtual time: [`Nanos`], an instant in nanoseconds since an epoch the caller chooses.
//!
//! The emulator core never reads a clock. The adapter maps `CLOCK_MONOTONIC` to `Nanos` (usually
//! "nanoseconds since the emulator started") and passes it in; tests pass a virtual clock.
//!
//! Invariants: arithmetic saturates instead of wrapping or panicking, so a corrupt timestamp can
//! produce a wrong schedule but never a crash. `Nanos` is a plain `u64`: about 584 years of range.

use std::fmt;
use std::ops::{Add, AddAssign, Sub};
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// An instant: nanoseconds since an arbitrary epoch chosen by the caller.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Nanos(pub u64);

impl Nanos {
    /// The epoch itself.
    pub const ZERO: Nanos = Nanos(0);
    /// The last representable instant; used as "never".
    pub const MAX: Nanos = Nanos(u64::MAX);

    /// The instant `ns` nanoseconds after the epoch.
    pub const fn from_nanos(ns: u64) -> Nanos {
        Nanos(ns)
    }

    /// The instant `us` microseconds after the epoch (saturating).
    pub const fn from_micros(us: u64) -> Nanos {
        Nanos(us.saturating_mul(1_000))
    }

    /// The instant `ms` milliseconds after the epoch (saturating).
    pub const fn from_millis(ms: u64) -> Nanos {
        Nanos(ms.saturating_mul(1_000_000))
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// Whole milliseconds since the epoch (rounded down), as Mahimahi logs them.
    pub const fn as_millis(self) -> u64 {
        self.0 / 1_000_000
    }

    /// Time elapsed from `earlier` to `self`, zero if `earlier` is later.
    pub fn saturating_since(self, earlier: Nanos) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }

    /// `self - d`, clamped at the epoch.
    pub fn saturating_sub(self, d: Duration) -> Nanos {
        Nanos(self.0.saturating_sub(duration_nanos(d)))
    }
}

/// A duration in nanoseconds, saturating at `u64::MAX` (584 years).
pub(crate) fn duration_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Add<Duration> for Nanos {
    type Output = Nanos;
    fn add(self, d: Duration) -> Nanos {
        Nanos(self.0.saturating_add(duration_nanos(d)))
    }
}

impl AddAssign<Duration> for Nanos {
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

/// `later - earlier` as a duration, saturating at zero (use [`Nanos::saturating_since`] to say
/// so explicitly).
impl Sub for Nanos {
    type Output = Duration;
    fn sub(self, earlier: Nanos) -> Duration {
        self.saturating_since(earlier)
    }
}

/// `self - d`, clamped at the epoch.
impl Sub<Duration> for Nanos {
    type Output = Nanos;
    fn sub(self, d: Duration) -> Nanos {
        self.saturating_sub(d)
    }
}

impl fmt::Display for Nanos {
    /// Seconds with nanosecond precision: `12.000400000s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{:09}s", self.0 / 1_000_000_000, self.0 % 1_000_000_000)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        assert_eq!(Nanos::MAX + Duration::from_secs(1), Nanos::MAX);
        assert_eq!(Nanos(5) - Nanos(9), Duration::ZERO);
        assert_eq!(Nanos(5).saturating_sub(Duration::from_nanos(9)), Nanos::ZERO);
        assert_eq!(Nanos(5) - Duration::from_nanos(2), Nanos(3));
        assert_eq!(Nanos(10) + Duration::MAX, Nanos::MAX);
        assert_eq!(Nanos::from_millis(3) - Nanos::from_micros(500), Duration::from_micros(2_500));
    }

    #[test]
    fn display_and_millis() {
        assert_eq!(Nanos(12_000_400_000).to_string(), "12.000400000s");
        assert_eq!(Nanos(2_999_999).as_millis(), 2);
    }
}
