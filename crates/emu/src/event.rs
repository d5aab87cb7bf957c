//! Measurement events and the [`Observer`] sink that receives them.
//!
//! A [`crate::Direction`] reports every arrival, drop, departure from the link and (trace mode)
//! delivery opportunity to its observer, stamped with the **virtual** time at which it happened
//! in the emulated schedule, not the time the adapter happened to call. Events reach the observer
//! in non-decreasing time order.
//!
//! Observers are a type parameter of the direction, so the default `()` observer costs nothing:
//! its method is an empty inline function. [`crate::Stats`], [`crate::MahimahiLog`] and
//! `Vec<Event>` are observers; a pair `(A, B)` feeds both. Observers cannot fail: sinks that do
//! I/O keep their first error for the caller to collect. They never influence the emulation.

use std::time::Duration;

use serde::Serialize;

use crate::time::Nanos;

/// Why a packet was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// The loss model lost it on arrival.
    Loss,
    /// The queue was at its limit when it arrived (tail drop).
    QueueFull,
    /// CoDel (or fq_codel's per-flow CoDel) dropped it at dequeue.
    Codel,
    /// An ECN blackhole dropped it on arrival for carrying ECT or CE.
    EcnBlackhole,
    /// A blackhole event ([`crate::PathChange::Blackhole`]) dropped it: on arrival, or held in
    /// the direction when the outage began.
    Blackhole,
}

impl DropReason {
    /// All reasons, in a fixed order (used for per-reason counters).
    pub const ALL: [DropReason; 5] = [
        DropReason::Loss,
        DropReason::QueueFull,
        DropReason::Codel,
        DropReason::EcnBlackhole,
        DropReason::Blackhole,
    ];

    /// Short name: `loss`, `queue_full`, `codel`, `ecn_blackhole`, `blackhole`.
    pub fn as_str(self) -> &'static str {
        match self {
            DropReason::Loss => "loss",
            DropReason::QueueFull => "queue_full",
            DropReason::Codel => "codel",
            DropReason::EcnBlackhole => "ecn_blackhole",
            DropReason::Blackhole => "blackhole",
        }
    }

    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// Something that happened to a packet or to the link, at virtual time `at`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A packet entered the direction (before the loss stage).
    Arrival {
        /// When it arrived.
        at: Nanos,
        /// The adapter's packet id.
        id: u64,
        /// Its length in bytes.
        len: u32,
    },
    /// A packet was dropped.
    Drop {
        /// When: the arrival time for loss and tail drops, the dequeue time for CoDel.
        at: Nanos,
        /// The adapter's packet id.
        id: u64,
        /// Its length in bytes.
        len: u32,
        /// Which stage dropped it.
        reason: DropReason,
        /// When it arrived.
        arrival: Nanos,
    },
    /// A queue with ECN marking marked a packet CE instead of dropping it (at dequeue; the
    /// packet then departs as usual).
    Mark {
        /// When (the dequeue time).
        at: Nanos,
        /// The adapter's packet id.
        id: u64,
        /// Its length in bytes.
        len: u32,
        /// When it arrived.
        arrival: Nanos,
    },
    /// A scheduled [`crate::PathEvent`] took effect.
    PathChange {
        /// Its virtual time: when it took effect in the schedule.
        at: Nanos,
        /// The `now` of the call that applied it (how late the adapter noticed it).
        applied: Nanos,
        /// Its position in the list given to [`crate::Direction::schedule`].
        index: u32,
    },
    /// A packet finished serialisation on the bottleneck link (it now enters the delay line).
    Departure {
        /// When its last bit left the link.
        at: Nanos,
        /// The adapter's packet id.
        id: u64,
        /// Its length in bytes.
        len: u32,
        /// When it arrived.
        arrival: Nanos,
        /// When it left the queue and started serialisation (constant rate) or got its first
        /// delivery opportunity (trace).
        start: Nanos,
    },
    /// Trace mode: a delivery opportunity passed. Reported after the departures it carried.
    Opportunity {
        /// The opportunity's time.
        at: Nanos,
        /// Bytes it could carry (1504).
        capacity: u32,
        /// Bytes it did carry; `0` means unused, less than `capacity` partly unused.
        used: u32,
    },
}

impl Event {
    /// The virtual time of the event.
    pub fn at(&self) -> Nanos {
        match *self {
            Event::Arrival { at, .. }
            | Event::Drop { at, .. }
            | Event::Mark { at, .. }
            | Event::PathChange { at, .. }
            | Event::Departure { at, .. }
            | Event::Opportunity { at, .. } => at,
        }
    }

    /// For a departure, the time spent waiting in the queue (`start - arrival`).
    pub fn queue_delay(&self) -> Option<Duration> {
        match *self {
            Event::Departure { arrival, start, .. } => Some(start - arrival),
            _ => None,
        }
    }
}

/// Receives [`Event`]s from a direction.
pub trait Observer {
    /// Called once per event, in non-decreasing `event.at()` order.
    fn on_event(&mut self, event: &Event);
}

/// The no-op observer: events are optimised away.
impl Observer for () {
    #[inline(always)]
    fn on_event(&mut self, _: &Event) {}
}

/// Records every event (tests, small runs).
impl Observer for Vec<Event> {
    fn on_event(&mut self, event: &Event) {
        self.push(*event);
    }
}

/// Feeds both observers, first `A` then `B`.
impl<A: Observer, B: Observer> Observer for (A, B) {
    #[inline]
    fn on_event(&mut self, event: &Event) {
        self.0.on_event(event);
        self.1.on_event(event);
    }
}

impl<O: Observer + ?Sized> Observer for &mut O {
    #[inline]
    fn on_event(&mut self, event: &Event) {
        (**self).on_event(event);
    }
}

impl<O: Observer + ?Sized> Observer for Box<O> {
    #[inline]
    fn on_event(&mut self, event: &Event) {
        (**self).on_event(event);
    }
}

/// Calls the closure for every event.
#[derive(Debug, Clone, Copy)]
pub struct FnObserver<F>(pub F);

impl<F: FnMut(&Event)> Observer for FnObserver<F> {
    #[inline]
    fn on_event(&mut self, event: &Event) {
        (self.0)(event);
    }
}
