//! The propagation stage: a delay line that holds departed packets until their release time.
//!
//! Release time = `max(previous release, departure + delay + jitter sample)`. Because of the
//! `max`, releases never decrease and packets leave in the order they departed: jitter varies
//! the delay but never reorders. One jitter sample is drawn per departing packet, in departure
//! order, from the direction's seeded RNG. With a validated spec `delay + sample >= 0`; a sample
//! that would still go negative is clamped to the departure time.
//!
//! Reordering is separate and explicit ([`Reorder`]): after its in-order release time is
//! computed, a packet is chosen with probability `p` (one more draw per packet, only when
//! reordering is on) and then held `gap` longer, outside the ordered line, which does not wait
//! for it: packets released within the gap overtake it. Held packets leave in release order
//! (ties in departure order).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use std::time::Duration;

use rand::Rng;

use crate::fifo::Queued;
use crate::jitter::Sampler;
use crate::packet::{Packet, ReleaseInfo};
use crate::spec::{Jitter, Reorder};
use crate::time::{Nanos, duration_nanos};

#[derive(Debug)]
struct InFlight<T> {
    packet: Packet<T>,
    arrival: Nanos,
    start: Nanos,
    departure: Nanos,
    release: Nanos,
}

/// A packet held back by reordering, ordered by release time, then by departure order.
#[derive(Debug)]
struct Held<T> {
    seq: u64,
    flight: InFlight<T>,
}

impl<T> Held<T> {
    fn key(&self) -> (Nanos, u64) {
        (self.flight.release, self.seq)
    }
}

impl<T> PartialEq for Held<T> {
    fn eq(&self, other: &Self) -> bool {
        self.key() == other.key()
    }
}

impl<T> Eq for Held<T> {}

impl<T> PartialOrd for Held<T> {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Held<T> {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

/// Packets between the link and the far end: the ordered line, and those held back.
#[derive(Debug)]
pub(crate) struct DelayLine<T> {
    delay: Duration,
    jitter: Option<Jitter>,
    sampler: Sampler,
    reorder: Option<Reorder>,
    last_release: Nanos,
    items: VecDeque<InFlight<T>>,
    held: BinaryHeap<Reverse<Held<T>>>,
    /// Packets pushed so far (orders held packets with equal release times).
    pushed: u64,
}

impl<T> DelayLine<T> {
    pub(crate) fn new(
        delay: Duration,
        jitter: Option<Jitter>,
        reorder: Option<Reorder>,
    ) -> DelayLine<T> {
        DelayLine {
            delay,
            jitter,
            sampler: Sampler::new(jitter),
            reorder,
            last_release: Nanos::ZERO,
            items: VecDeque::new(),
            held: BinaryHeap::new(),
            pushed: 0,
        }
    }

    /// The fixed delay.
    pub(crate) fn delay(&self) -> Duration {
        self.delay
    }

    /// Changes the fixed delay for packets that depart from now on (those in flight keep
    /// theirs; releases still never go backwards in the ordered line).
    pub(crate) fn set_delay(&mut self, delay: Duration) {
        self.delay = delay;
    }

    /// Takes out every packet due after `at` (an outage), in release order.
    pub(crate) fn drain_after(&mut self, at: Nanos, drop: &mut impl FnMut(Queued<T>)) {
        let keep = self.items.iter().take_while(|f| f.release <= at).count();
        for f in self.items.drain(keep..) {
            drop(Queued { packet: f.packet, arrival: f.arrival });
        }
        let held = std::mem::take(&mut self.held).into_sorted_vec();
        for Reverse(h) in held.into_iter().rev() {
            if h.flight.release <= at {
                self.held.push(Reverse(h));
            } else {
                drop(Queued { packet: h.flight.packet, arrival: h.flight.arrival });
            }
        }
        // Later packets may leave as early as their own schedule says.
        self.last_release = self.last_release.min(at);
    }

    /// The smallest delay any packet can get (delay minus the jitter bound).
    pub(crate) fn min_delay(&self) -> Duration {
        self.delay.saturating_sub(self.jitter.map_or(Duration::ZERO, Jitter::below))
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
        let sample = self.sampler.sample(rng);
        let delay = i128::from(duration_nanos(self.delay)) + i128::from(sample);
        let target = (i128::from(departure.0) + delay.max(0)).min(i128::from(u64::MAX)) as u64;
        let release = Nanos(target).max(self.last_release);
        let seq = self.pushed;
        self.pushed += 1;
        if let Some(Reorder { p, gap }) = self.reorder
            && p > 0.0
            && rng.random::<f64>() < p
        {
            // Held back: the ordered line does not wait for it.
            let release = release + gap;
            let flight = InFlight { packet, arrival, start, departure, release };
            self.held.push(Reverse(Held { seq, flight }));
            return;
        }
        self.last_release = release;
        self.items.push_back(InFlight { packet, arrival, start, departure, release });
    }

    /// Whether the next packet out is a held one.
    fn held_first(&self) -> bool {
        match (self.items.front(), self.held.peek()) {
            (Some(f), Some(Reverse(h))) => h.flight.release < f.release,
            (None, Some(_)) => true,
            _ => false,
        }
    }

    fn front_flight(&self) -> Option<&InFlight<T>> {
        if self.held_first() {
            self.held.peek().map(|Reverse(h)| &h.flight)
        } else {
            self.items.front()
        }
    }

    /// Release time of the next packet, if any.
    pub(crate) fn front_release(&self) -> Option<Nanos> {
        self.front_flight().map(|f| f.release)
    }

    /// The next packet's release time and payload, if any.
    pub(crate) fn front(&self) -> Option<(Nanos, &T)> {
        self.front_flight().map(|f| (f.release, &f.packet.payload))
    }

    /// Takes the next packet if its release time is at or before `now`.
    pub(crate) fn pop_due(&mut self, now: Nanos) -> Option<(T, ReleaseInfo)> {
        if self.front_release()? > now {
            return None;
        }
        let f = if self.held_first() {
            self.held.pop().map(|Reverse(h)| h.flight)?
        } else {
            self.items.pop_front()?
        };
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
        self.items.len() + self.held.len()
    }
}
