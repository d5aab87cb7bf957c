//! Send schedules for open-loop load, and a pacer that hits them.
//!
//! [`Schedule`] is pure: it yields the *intended* send time of each request as an offset from
//! the start of the run (constant spacing, or Poisson arrivals from a seeded RNG). Latency in
//! open loop is measured from these intended times, so a sender that falls behind its
//! schedule is charged for it (no coordinated omission).
//!
//! Timer wake-ups on this kind of virtual machine arrive 50-800 µs late, so [`wait_until`]
//! sleeps only until `spin_window` before the deadline and spins for the rest.

use std::time::{Duration, Instant};

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use tcptail_units::MessageRate;

/// How requests are spaced in open-loop mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum Spacing {
    /// Exactly `1/rate` apart.
    #[default]
    Constant,
    /// Exponentially distributed gaps with mean `1/rate` (Poisson arrivals).
    Poisson,
}

impl std::str::FromStr for Spacing {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "constant" => Ok(Spacing::Constant),
            "poisson" => Ok(Spacing::Poisson),
            _ => Err(format!("unknown spacing '{s}' (use constant or poisson)")),
        }
    }
}

/// Intended send times of an open-loop run, as offsets from its start.
#[derive(Debug, Clone)]
pub struct Schedule {
    interval_nanos: f64,
    spacing: Spacing,
    rng: SmallRng,
    next_nanos: f64,
}

impl Schedule {
    /// A schedule at `rate`, first send at `offset` from the start (used to stagger
    /// connections sharing one rate). `seed` makes Poisson spacing reproducible.
    pub fn new(rate: MessageRate, spacing: Spacing, offset: Duration, seed: u64) -> Schedule {
        Schedule {
            interval_nanos: 1e9 / rate.as_per_second(),
            spacing,
            rng: SmallRng::seed_from_u64(seed),
            next_nanos: offset.as_nanos() as f64,
        }
    }

    /// The next intended send time. Offsets are accumulated in floating point nanoseconds
    /// so rates that do not divide a second (e.g. 3/s) do not drift.
    pub fn next_offset(&mut self) -> Duration {
        let at = self.next_nanos;
        let gap = match self.spacing {
            Spacing::Constant => self.interval_nanos,
            Spacing::Poisson => {
                // Inverse-CDF sampling; 1 - u is in (0, 1], so ln never sees zero.
                let u: f64 = self.rng.random();
                -(1.0 - u).ln() * self.interval_nanos
            }
        };
        self.next_nanos += gap;
        Duration::from_nanos(at as u64)
    }
}

/// Waits until `deadline`: sleeps until `spin_window` before it, then busy-waits. Returns how
/// late it returned (zero if on time).
pub fn wait_until(deadline: Instant, spin_window: Duration) -> Duration {
    let now = Instant::now();
    if deadline > now + spin_window {
        std::thread::sleep(deadline - now - spin_window);
    }
    loop {
        let now = Instant::now();
        if now >= deadline {
            return now - deadline;
        }
        std::hint::spin_loop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(r: f64) -> MessageRate {
        MessageRate::per_second(r).unwrap()
    }

    #[test]
    fn constant_spacing_is_exact_and_does_not_drift() {
        let mut s = Schedule::new(rate(3.0), Spacing::Constant, Duration::ZERO, 1);
        let offsets: Vec<Duration> = (0..3001).map(|_| s.next_offset()).collect();
        assert_eq!(offsets[0], Duration::ZERO);
        assert_eq!(offsets[3000], Duration::from_secs(1000));
        assert!(offsets.windows(2).all(|w| w[1] > w[0]));
    }

    #[test]
    fn offset_staggers_the_start() {
        let mut s = Schedule::new(rate(1000.0), Spacing::Constant, Duration::from_micros(500), 1);
        assert_eq!(s.next_offset(), Duration::from_micros(500));
        assert_eq!(s.next_offset(), Duration::from_micros(1500));
    }

    #[test]
    fn poisson_mean_rate_and_reproducibility() {
        let n = 200_000;
        let mut a = Schedule::new(rate(1000.0), Spacing::Poisson, Duration::ZERO, 42);
        let mut b = Schedule::new(rate(1000.0), Spacing::Poisson, Duration::ZERO, 42);
        let mut last = Duration::ZERO;
        for _ in 0..n {
            last = a.next_offset();
            assert_eq!(last, b.next_offset());
        }
        // n exponential gaps of mean 1 ms: the total is within 1 % of n ms with overwhelming
        // probability (std dev of the mean is 1/sqrt(n) = 0.22 %), and the seed is fixed.
        let achieved = n as f64 / last.as_secs_f64();
        assert!((achieved - 1000.0).abs() < 10.0, "achieved {achieved}");
    }

    #[test]
    fn spacing_parses() {
        assert_eq!("poisson".parse::<Spacing>().unwrap(), Spacing::Poisson);
        assert!("bursty".parse::<Spacing>().is_err());
    }
}
