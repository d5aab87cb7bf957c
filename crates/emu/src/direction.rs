//! One direction of the emulated path: loss, bottleneck queue, link rate, propagation delay.
//!
//! [`Direction`] is a sans-IO state machine. The adapter hands it packets with
//! [`Direction::enqueue`], takes them back with [`Direction::poll_release`] once their release
//! time has come, and sleeps until [`Direction::next_wakeup`]. Every call carries `now`; the
//! direction never reads a clock, never blocks and never touches a socket. It looks inside a
//! payload only through [`Headers`], and only when the spec asks for it: the ECN codepoint (an
//! ECN blackhole, marking queues) and the flow (fq_codel).
//!
//! # The virtual schedule
//!
//! Each call first *advances* the model to `now`: every link event due at or before `now` is
//! processed at its own scheduled time, not at `now`. A constant-rate link starts the head of
//! the queue at `t_start = max(arrival, link free time)` and finishes it at
//! `t_start + len * 8 / rate`; a trace link spends each delivery opportunity on queued packets
//! as Mahimahi does. CoDel decides at `t_start`. A departed packet is released at
//! `max(previous release, departure + delay + jitter)`. Calling late therefore changes *when the
//! adapter sees* a release, never the schedule itself: a timer that fires 300 µs late does not
//! turn into rate error or extra queueing. [`ReleaseInfo::scheduled`] lets the adapter measure
//! its own lateness.
//!
//! Trace opportunities that pass while the link is idle are processed lazily, at the next call
//! (which is when they reach the observer): the cost of a call is proportional to the
//! opportunities it catches up on, as in Mahimahi.
//!
//! # Invariants
//!
//! - Time never goes backwards: a `now` earlier than one already seen is treated as the latest.
//! - Packets are released in arrival order (FIFO everywhere; drops only remove), except across
//!   fq_codel's flows (each flow stays in order) and for packets [`crate::Reorder`] holds back.
//! - Conservation: every enqueued packet is exactly one of dropped (reported, payload returned
//!   or, for CoDel and fq_codel's overflow, dropped in place), queued, in service, in the delay
//!   line, or released. A CE mark is reported and changes nothing else.
//! - Events reach the observer in non-decreasing virtual time.

use std::collections::VecDeque;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use crate::codel::Verdict;
use crate::delay::DelayLine;
use crate::event::{DropReason, Event, Observer};
use crate::fifo::Queued;
use crate::headers::Headers;
use crate::link::{ConstantLink, Link, TraceLink};
use crate::loss::Loss;
use crate::packet::{Packet, ReleaseInfo};
use crate::queue::BottleneckQueue;
use crate::seed::splitmix64;
use crate::spec::{DirectionSpec, PathSpec, Rate, SpecError};
use crate::time::Nanos;
use crate::time::duration_nanos;
use crate::timeline::{PathChange, PathEvent, validate_events};
use crate::trace::OPPORTUNITY_BYTES;

/// What [`Direction::enqueue`] did with a packet.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a dropped packet's payload is handed back"]
pub enum Admission<T> {
    /// Accepted into the bottleneck queue.
    Queued,
    /// Dropped on arrival; the payload is returned so the adapter can reuse its buffer.
    Dropped {
        /// The packet's payload.
        payload: T,
        /// [`DropReason::Loss`], [`DropReason::QueueFull`] or [`DropReason::EcnBlackhole`].
        reason: DropReason,
    },
}

/// Where packets currently are inside a direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub struct Backlog {
    /// Packets waiting in the bottleneck queue.
    pub queued_packets: usize,
    /// Bytes waiting in the bottleneck queue.
    pub queued_bytes: u64,
    /// Whether a packet is being serialised (constant rate) or partly delivered (trace).
    pub in_service: bool,
    /// Packets that left the link and wait for their release time.
    pub in_delay_line: usize,
}

impl Backlog {
    /// Every packet held, wherever it is.
    pub fn packets(&self) -> usize {
        self.queued_packets + usize::from(self.in_service) + self.in_delay_line
    }
}

#[derive(Debug)]
struct InService<T> {
    queued: Queued<T>,
    start: Nanos,
    /// Constant rate: when serialisation ends.
    end: Nanos,
    /// Trace: bytes not yet carried by an opportunity.
    remaining: u64,
}

/// One direction of an emulated path, carrying payloads of type `T` and reporting events to an
/// [`Observer`] `O` (none by default).
#[derive(Debug)]
pub struct Direction<T, O = ()> {
    spec: DirectionSpec,
    rng: StdRng,
    loss: Loss,
    queue: BottleneckQueue<T>,
    link: Link,
    in_service: Option<InService<T>>,
    delay: DelayLine<T>,
    observer: O,
    now: Nanos,
    timeline: Timeline,
}

/// Scheduled path events and the state they set.
#[derive(Debug, Default)]
struct Timeline {
    /// Events not yet applied, by time (then by index).
    pending: VecDeque<(Nanos, u32, PathChange)>,
    /// A blackhole is in effect.
    blackhole: bool,
    /// A loss burst: until when, and its probability.
    loss_burst: Option<(Nanos, f64)>,
}

impl<T: Headers> Direction<T, ()> {
    /// Builds a direction from a spec and an RNG seed (loss and jitter draws). A trace starts at
    /// `Nanos::ZERO` (see [`Direction::starting_at`]).
    ///
    /// # Panics
    ///
    /// If `spec.validate()` fails: validate specs where they are built, or use
    /// [`Direction::try_new`].
    pub fn new(spec: DirectionSpec, seed: u64) -> Direction<T, ()> {
        match Self::try_new(spec, seed) {
            Ok(d) => d,
            Err(e) => panic!("Direction::new with an invalid spec: {e}"),
        }
    }

    /// Like [`Direction::new`], returning the validation error instead of panicking.
    pub fn try_new(spec: DirectionSpec, seed: u64) -> Result<Direction<T, ()>, SpecError> {
        spec.validate()?;
        let link = match &spec.rate {
            Rate::Constant(rate) => Link::Constant(ConstantLink::new(*rate)),
            Rate::Trace(trace) => Link::Trace(TraceLink::new(trace.clone(), Nanos::ZERO)),
        };
        Ok(Direction {
            rng: StdRng::seed_from_u64(seed),
            loss: Loss::new(spec.loss),
            // fq_codel's hash perturbation: derived from the seed without drawing from the RNG,
            // so the loss and jitter streams are the same whatever the queue.
            queue: BottleneckQueue::new(spec.queue, splitmix64(seed ^ FLOW_HASH_SALT)),
            link,
            in_service: None,
            delay: DelayLine::new(spec.delay, spec.jitter, spec.reorder),
            observer: (),
            now: Nanos::ZERO,
            timeline: Timeline::default(),
            spec,
        })
    }
}

impl<T: Headers, O: Observer> Direction<T, O> {
    /// Replaces the observer (normally right after construction).
    pub fn with_observer<P: Observer>(self, observer: P) -> Direction<T, P> {
        Direction {
            spec: self.spec,
            rng: self.rng,
            loss: self.loss,
            queue: self.queue,
            link: self.link,
            in_service: self.in_service,
            delay: self.delay,
            observer,
            now: self.now,
            timeline: self.timeline,
        }
    }

    /// Schedules path events (times from [`Nanos::ZERO`]); they take effect at their virtual
    /// times, each reported as [`Event::PathChange`] with its index in `events`. Replaces
    /// events scheduled before that have not taken effect.
    pub fn schedule(&mut self, events: &[PathEvent]) -> Result<(), SpecError> {
        validate_events(&self.spec, events)?;
        let mut pending: Vec<(Nanos, u32, PathChange)> = events
            .iter()
            .enumerate()
            .map(|(i, e)| (Nanos(duration_nanos(e.at)), i as u32, e.change))
            .collect();
        pending.sort_by_key(|&(at, i, _)| (at, i));
        self.timeline.pending = pending.into();
        Ok(())
    }

    /// Anchors a trace's time zero at `epoch` instead of `Nanos::ZERO` (no effect on a
    /// constant-rate link). Call before the first packet.
    pub fn starting_at(mut self, epoch: Nanos) -> Direction<T, O> {
        if let Link::Trace(link) = &mut self.link {
            link.set_epoch(epoch);
        }
        self.now = self.now.max(epoch);
        self
    }

    /// The spec this direction was built from.
    pub fn spec(&self) -> &DirectionSpec {
        &self.spec
    }

    /// The observer.
    pub fn observer(&self) -> &O {
        &self.observer
    }

    /// The observer, mutably (e.g. to flush a log).
    pub fn observer_mut(&mut self) -> &mut O {
        &mut self.observer
    }

    /// Consumes the direction, returning its observer; packets still held are dropped.
    pub fn into_observer(self) -> O {
        self.observer
    }

    /// Where packets currently are.
    pub fn backlog(&self) -> Backlog {
        Backlog {
            queued_packets: self.queue.packets(),
            queued_bytes: self.queue.bytes(),
            in_service: self.in_service.is_some(),
            in_delay_line: self.delay.len(),
        }
    }

    /// A packet arrives at `now`. It goes through the ECN blackhole, the loss stage and the
    /// queue's admission limit; if dropped, the payload comes back in [`Admission::Dropped`].
    /// (fq_codel over its limit drops from its fattest flow instead, in place, and reports
    /// those drops; the arrival comes back only if it was among them.)
    pub fn enqueue(&mut self, now: Nanos, packet: Packet<T>) -> Admission<T> {
        let now = self.clock(now);
        self.advance(now);
        self.admit(now, packet)
    }

    /// Packets that arrive together at `now`, in order (the segments of one GSO packet):
    /// exactly what [`Direction::enqueue`] of each in turn does (the same decisions, events,
    /// RNG draws and schedule), in one step where no segment can be treated differently from
    /// the next. The model is advanced to `now` once; then, while nothing is drawn per packet
    /// (no loss model that draws, no loss burst, no outage, no ECN blackhole) and the queue is
    /// a FIFO limited in bytes or packets, each packet costs only its arrival event and the
    /// limit check. Otherwise each takes the full path of [`Direction::enqueue`]. Each
    /// dropped packet's payload goes to `dropped` with the reason; returns how many were
    /// queued.
    pub fn enqueue_burst(
        &mut self,
        now: Nanos,
        packets: impl IntoIterator<Item = Packet<T>>,
        mut dropped: impl FnMut(T, DropReason),
    ) -> usize {
        let now = self.clock(now);
        self.advance(now);
        let alike = self.treats_alike(now);
        let mut queued = 0;
        for packet in packets {
            let admission =
                if alike { self.admit_alike(now, packet) } else { self.admit(now, packet) };
            match admission {
                Admission::Queued => queued += 1,
                Admission::Dropped { payload, reason } => dropped(payload, reason),
            }
        }
        queued
    }

    /// Whether every packet arriving at `now` gets the same treatment but for the queue's
    /// limit: no random draw, no outage, no header inspection, a FIFO limit in bytes or
    /// packets (fq_codel's overflow and time limits take the full path).
    fn treats_alike(&self, now: Nanos) -> bool {
        let burst = self.timeline.loss_burst.filter(|&(until, _)| now < until);
        let loss_draws = match burst {
            Some((_, p)) => p > 0.0,
            None => self.loss.draws(),
        };
        !self.timeline.blackhole
            && !loss_draws
            && self.spec.ecn_blackhole.is_none()
            && !self.queue.drops_from_fattest_flow()
            && self.queue.limit_is_counted()
    }

    /// [`Direction::admit`] where [`Direction::treats_alike`] holds (the model advanced to
    /// `now`): the same events and decisions without the checks that cannot apply.
    fn admit_alike(&mut self, now: Nanos, packet: Packet<T>) -> Admission<T> {
        let (id, len) = (packet.id, packet.len);
        self.observer.on_event(&Event::Arrival { at: now, id, len });
        if !self.queue.admits(len, || Duration::ZERO) {
            let reason = DropReason::QueueFull;
            self.observer.on_event(&Event::Drop { at: now, id, len, reason, arrival: now });
            return Admission::Dropped { payload: packet.payload, reason };
        }
        self.queue.push(packet, now);
        // Advanced to `now` already: only an idle link has anything to do (start the packet).
        if self.in_service.is_none() {
            self.advance_link(now);
        }
        Admission::Queued
    }

    /// A packet arrives at `now`, the model advanced to `now`: the body of
    /// [`Direction::enqueue`].
    fn admit(&mut self, now: Nanos, packet: Packet<T>) -> Admission<T> {
        let (id, len) = (packet.id, packet.len);
        self.observer.on_event(&Event::Arrival { at: now, id, len });
        let ecn_blackholed = self.spec.ecn_blackhole.is_some_and(|b| b.drops(&packet.payload));
        let burst = self.timeline.loss_burst.filter(|&(until, _)| now < until);
        let reason = if self.timeline.blackhole {
            Some(DropReason::Blackhole)
        } else if ecn_blackholed {
            Some(DropReason::EcnBlackhole)
        } else if match burst {
            // A loss burst replaces the path's loss model while it lasts.
            Some((_, p)) => p > 0.0 && self.rng.random::<f64>() < p,
            None => self.loss.lose(&mut self.rng),
        } {
            Some(DropReason::Loss)
        } else if !self.queue.admits(len, || self.wait_if_admitted(now)) {
            if self.queue.drops_from_fattest_flow() {
                let observer = &mut self.observer;
                let own = self.queue.push_over_limit(packet, now, &mut |victim| {
                    report_drop(&victim, now, DropReason::QueueFull, observer)
                });
                if let Some(own) = own {
                    report_drop(&own, now, DropReason::QueueFull, observer);
                    let reason = DropReason::QueueFull;
                    return Admission::Dropped { payload: own.packet.payload, reason };
                }
                self.advance(now);
                return Admission::Queued;
            }
            Some(DropReason::QueueFull)
        } else {
            None
        };
        if let Some(reason) = reason {
            let event = Event::Drop { at: now, id, len, reason, arrival: now };
            self.observer.on_event(&event);
            return Admission::Dropped { payload: packet.payload, reason };
        }
        self.queue.push(packet, now);
        // An idle constant-rate link starts serialising at once.
        self.advance(now);
        Admission::Queued
    }

    /// Takes the next packet whose release time is at or before `now`, if any. Call until it
    /// returns `None`, then sleep until [`Direction::next_wakeup`].
    pub fn poll_release(&mut self, now: Nanos) -> Option<(T, ReleaseInfo)> {
        let now = self.clock(now);
        self.advance(now);
        self.delay.pop_due(now)
    }

    /// [`Direction::poll_release`] without advancing the model: for an adapter that has just
    /// called [`Direction::advance`] with the same `now` and takes several releases in a row
    /// (nothing can have left the link in between).
    pub(crate) fn pop_release(&mut self, now: Nanos) -> Option<(T, ReleaseInfo)> {
        debug_assert!(now <= self.now, "pop_release before advancing to {now:?}");
        self.delay.pop_due(now.min(self.now))
    }

    /// The next packet to be released and its scheduled release time, without taking it
    /// (only packets that have left the link are known; call after [`Direction::advance`] to
    /// see those due by then). Lets an adapter decide whether to wait for it.
    pub fn peek_release(&self) -> Option<(Nanos, &T)> {
        self.delay.front()
    }

    /// The earliest time at which [`Direction::poll_release`] may have something to return;
    /// `None` if nothing is in flight. Waking at this time may find nothing due yet (it is a
    /// lower bound when jitter or CoDel can still move the next release later): just poll and
    /// ask again.
    pub fn next_wakeup(&self) -> Option<Nanos> {
        let release = self.next_release();
        match (release, self.timeline.pending.front().map(|e| e.0)) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The earliest release [`Direction::next_wakeup`] knows of, without path events.
    fn next_release(&self) -> Option<Nanos> {
        if let Some(release) = self.delay.front_release() {
            return Some(release);
        }
        let min_delay = self.delay.min_delay();
        let departure = match &self.link {
            Link::Constant(link) => match (&self.in_service, self.queue.head()) {
                (Some(s), _) => s.end,
                // Not reached after advancing (an idle link starts the head at once), kept so
                // the answer stays safe whatever the state.
                (None, Some(head)) => link.free_at().max(head.arrival),
                (None, None) => return None,
            },
            Link::Trace(link) => {
                let bytes = match (&self.in_service, self.queue.next_len_at_least()) {
                    (Some(s), _) => s.remaining,
                    (None, Some(len)) => u64::from(len),
                    (None, None) => return None,
                };
                link.time_of_byte(bytes.saturating_sub(1))
            }
        };
        Some((departure + min_delay).max(self.delay.last_release()))
    }

    /// Processes every link event due at or before `now` without releasing anything; useful at
    /// the end of a run so that trailing delivery opportunities reach the observer.
    pub fn advance(&mut self, now: Nanos) {
        let now = self.clock(now);
        while let Some(&(at, index, change)) = self.timeline.pending.front()
            && at <= now
        {
            self.timeline.pending.pop_front();
            self.advance_link(at);
            self.apply(at, index, change, now);
        }
        self.advance_link(now);
    }

    /// A path event takes effect at `at` (the link has been advanced to it).
    fn apply(&mut self, at: Nanos, index: u32, change: PathChange, applied: Nanos) {
        self.observer.on_event(&Event::PathChange { at, applied, index });
        match change {
            PathChange::Blackhole => {
                self.timeline.blackhole = true;
                let observer = &mut self.observer;
                let drop = &mut |q: Queued<T>| report_drop(&q, at, DropReason::Blackhole, observer);
                if let Some(s) = self.in_service.take() {
                    drop(s.queued);
                }
                self.queue.drain(drop);
                self.delay.drain_after(at, drop);
            }
            PathChange::Restore => self.timeline.blackhole = false,
            PathChange::Rate(rate) => match &mut self.link {
                Link::Constant(link) => link.set_rate(rate),
                Link::Trace(link) => link.scale_to(rate),
            },
            PathChange::LossBurst { p, duration } => {
                self.timeline.loss_burst = Some((at + duration, p));
            }
            PathChange::DelayBy(ns) => {
                let d = i128::from(duration_nanos(self.delay.delay())) + i128::from(ns);
                self.delay.set_delay(Duration::from_nanos(d.max(0) as u64));
            }
            PathChange::DelayTo(d) => self.delay.set_delay(d),
        }
    }

    /// Processes the link's events due at or before `now`.
    fn advance_link(&mut self, now: Nanos) {
        let Direction { queue, link, in_service, delay, observer, rng, .. } = self;
        match link {
            Link::Constant(link) => loop {
                if let Some(s) = in_service.as_ref() {
                    if s.end > now {
                        return;
                    }
                    if let Some(s) = in_service.take() {
                        let end = s.end;
                        depart(s, end, delay, observer, rng);
                    }
                }
                let Some(head) = queue.head() else {
                    queue.found_empty();
                    return;
                };
                let t = link.free_at().max(head.arrival);
                if t > now {
                    return;
                }
                let Some(queued) = queue.dequeue(t, &mut |v| verdict(v, t, observer)) else {
                    return;
                };
                let end = link.serve(t, queued.packet.len);
                *in_service = Some(InService { queued, start: t, end, remaining: 0 });
            },
            Link::Trace(link) => loop {
                let t = link.next_time();
                if t > now {
                    return;
                }
                let capacity = u64::from(OPPORTUNITY_BYTES);
                let mut budget = capacity;
                loop {
                    if in_service.is_none() {
                        if budget == 0 {
                            break;
                        }
                        let Some(queued) = queue.dequeue(t, &mut |v| verdict(v, t, observer))
                        else {
                            break;
                        };
                        let remaining = u64::from(queued.packet.len);
                        *in_service = Some(InService { queued, start: t, end: t, remaining });
                    }
                    let Some(s) = in_service.as_mut() else { break };
                    let used = budget.min(s.remaining);
                    budget -= used;
                    s.remaining -= used;
                    if s.remaining > 0 {
                        break;
                    }
                    if let Some(s) = in_service.take() {
                        depart(s, t, delay, observer, rng);
                    }
                }
                let used = (capacity - budget) as u32;
                observer.on_event(&Event::Opportunity { at: t, capacity: OPPORTUNITY_BYTES, used });
                link.step();
            },
        }
    }

    /// Records `now` as the latest time seen and returns the effective (monotonic) time.
    fn clock(&mut self, now: Nanos) -> Nanos {
        self.now = self.now.max(now);
        self.now
    }

    /// How long a packet arriving now would wait before leaving the queue, if admitted and if
    /// the discipline drops nothing ahead of it.
    fn wait_if_admitted(&self, now: Nanos) -> Duration {
        let ahead = self.queue.bytes();
        let start = match &self.link {
            Link::Constant(link) => link.predicted_start(now, ahead),
            Link::Trace(link) => {
                let in_service = self.in_service.as_ref().map_or(0, |s| s.remaining);
                link.time_of_byte(ahead + in_service)
            }
        };
        start - now
    }
}

/// A packet finished on the link at `at`: report it and hand it to the delay line.
fn depart<T, O: Observer>(
    s: InService<T>,
    at: Nanos,
    delay: &mut DelayLine<T>,
    observer: &mut O,
    rng: &mut StdRng,
) {
    let Queued { packet, arrival } = s.queued;
    observer.on_event(&Event::Departure {
        at,
        id: packet.id,
        len: packet.len,
        arrival,
        start: s.start,
    });
    delay.push(packet, arrival, s.start, at, rng);
}

/// CoDel dropped or marked a packet at `at`: report it (a dropped payload is dropped here).
fn verdict<T, O: Observer>(verdict: Verdict<'_, T>, at: Nanos, observer: &mut O) {
    match verdict {
        Verdict::Dropped(victim) => report_drop(&victim, at, DropReason::Codel, observer),
        Verdict::Marked(q) => observer.on_event(&Event::Mark {
            at,
            id: q.packet.id,
            len: q.packet.len,
            arrival: q.arrival,
        }),
    }
}

fn report_drop<T, O: Observer>(
    victim: &Queued<T>,
    at: Nanos,
    reason: DropReason,
    observer: &mut O,
) {
    observer.on_event(&Event::Drop {
        at,
        id: victim.packet.id,
        len: victim.packet.len,
        reason,
        arrival: victim.arrival,
    });
}

/// Mixed into the seed for fq_codel's flow hash perturbation.
const FLOW_HASH_SALT: u64 = 0x6671_5f63_6f64_656c;

/// Both directions of a path, each with its own RNG stream.
#[derive(Debug)]
pub struct Path<T, O = ()> {
    /// Client to server.
    pub up: Direction<T, O>,
    /// Server to client.
    pub down: Direction<T, O>,
}

impl<T: Headers> Path<T, ()> {
    /// Builds both directions; `down` gets a seed derived from `seed` (splitmix64), so the two
    /// loss/jitter streams are independent but reproducible.
    pub fn try_new(spec: PathSpec, seed: u64) -> Result<Path<T, ()>, SpecError> {
        spec.validate()?;
        Ok(Path {
            up: Direction::try_new(spec.up, seed)?,
            down: Direction::try_new(spec.down, splitmix64(seed))?,
        })
    }
}

impl<T: Headers, O: Observer> Path<T, O> {
    /// Replaces both observers.
    pub fn with_observers<P: Observer>(self, up: P, down: P) -> Path<T, P> {
        Path { up: self.up.with_observer(up), down: self.down.with_observer(down) }
    }

    /// Schedules the same path events on both directions (see [`Direction::schedule`]).
    pub fn schedule(&mut self, events: &[PathEvent]) -> Result<(), SpecError> {
        let prefix = |name: &'static str| {
            move |e: SpecError| SpecError { field: format!("{name}.{}", e.field), ..e }
        };
        self.up.schedule(events).map_err(prefix("up"))?;
        self.down.schedule(events).map_err(prefix("down"))
    }

    /// The earliest wakeup either direction needs.
    pub fn next_wakeup(&self) -> Option<Nanos> {
        match (self.up.next_wakeup(), self.down.next_wakeup()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests;
