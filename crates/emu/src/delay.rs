//! The propagation stage: a delay line that holds departed packets until their release time.
//!
//! Release time = `max(previous release, departure + delay + jitter sample)`. Because of the
//! `max`, releases never decrease and packets leave in the order they departed: jitter varies
//! the delay but never reorders. One jitter sample is drawn per departing packet, in departure
//! order, from the direction's seeded RNG. With a validated spec `delay + sample >= 0`; a sample
//! that would still go negative is clamped to the departure time.

use std::collections::VecDeque;
use std::time::Duration;

use rand::Rng;

use crate::packet::{Packet, ReleaseInfo};
use crate::spec::Jitter;
use crate::time::{Nanos, duration_nanos};

#[derive(Debug)]
struct InFlight<T> {
    packet: Packet<T>,
    arrival: Nanos,
    start: Nanos,
    departure: Nanos,
    release: Nanos,
}

/// Packets between the link and the far end, in release order.
#[derive(Debug)]
pub(crate) struct DelayLine<T> {
    delay: Duration,
    jitter: Option<Jitter>,
    last_release: Nanos,
    items: VecDeque<InFlight<T>>,
}

impl<T> DelayLine<T> {
    pub(crate) fn new(delay: Duration, jitter: Option<Jitter>) -> DelayLine<T> {
        DelayLine { delay, jitter, last_release: Nanos::ZERO, items: VecDeque::new() }
    }

    /// The smallest delay any packet can get (delay minus the jitter bound).
    pub(crate) fn min_delay(&self) -> Duration {
        self.delay.saturating_sub(self.jitter.map_or(Duration::ZERO, Jitter::bound))
    }

    /// The latest release time scheduled so far (later releases are never earlier).
    pub(crate) fn last_release(&self) -> Nanos {
        self.last_release
    }

    /// A packet left the link at `departure`: schedule its release.
    pub(crate) fn push(
        &mut self,
        packet: Packet<T>,
        arrival: Nanos,
        start: Nanos,
        departure: Nanos,
        rng: &mut impl Rng,
    ) {
        let sample = self.sample(rng);
        let delay = i128::from(duration_nanos(self.delay)) + i128::from(sample);
        let target = (i128::from(departure.0) + delay.max(0)).min(i128::from(u64::MAX)) as u64;
        let release = Nanos(target).max(self.last_release);
        self.last_release = release;
        self.items.push_back(InFlight { packet, arrival, start, departure, release });
    }

    /// Jitter sample in nanoseconds.
    fn sample(&self, rng: &mut impl Rng) -> i64 {
        match self.jitter {
            None => 0,
            Some(Jitter::Uniform { max }) => {
                // Validated specs bound jitter by one hour, well inside i64.
                let m = i64::try_from(duration_nanos(max)).unwrap_or(i64::MAX / 2);
                if m == 0 { 0 } else { rng.random_range(-m..=m) }
            }
            Some(Jitter::Normal { sigma }) => {
                let s = duration_nanos(sigma) as f64;
                // Box-Muller; 1 - u keeps the logarithm finite.
                let u1: f64 = 1.0 - rng.random::<f64>();
                let u2: f64 = rng.random::<f64>();
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                (z.clamp(-3.0, 3.0) * s) as i64
            }
        }
    }

    /// Release time of the next packet, if any.
    pub(crate) fn front_release(&self) -> Option<Nanos> {
        self.items.front().map(|f| f.release)
    }

    /// The next packet's release time and payload, if any.
    pub(crate) fn front(&self) -> Option<(Nanos, &T)> {
        self.items.front().map(|f| (f.release, &f.packet.payload))
    }

    /// Takes the next packet if its release time is at or before `now`.
    pub(crate) fn pop_due(&mut self, now: Nanos) -> Option<(T, ReleaseInfo)> {
        if self.items.front()?.release > now {
            return None;
        }
        let f = self.items.pop_front()?;
        let info = ReleaseInfo {
            id: f.packet.id,
            len: f.packet.len,
            arrival: f.arrival,
            start: f.start,
            departure: f.departure,
            scheduled: f.release,
        };
        Some((f.packet.payload, info))
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }
}
