//! CoDel (RFC 8289), the dequeue-time state machine, written from the RFC's pseudocode and
//! checked against Linux's `include/net/codel_impl.h` (same re-entry rule: resume at the previous
//! drop count when dropping restarts within 16 intervals).
//!
//! At each dequeue the head's sojourn time (`now - arrival`) is compared with `target`. Once it
//! has stayed at or above target for a whole `interval` (and more than one MTU is queued), CoDel
//! enters the dropping state: it drops the head, then keeps dropping at the control-law times
//! `drop_next += interval / sqrt(count)` while the sojourn stays above target, and leaves the
//! dropping state as soon as a dequeued packet's sojourn falls below target.
//!
//! With `ecn`, a packet CoDel would drop is marked CE instead if it is ECN-capable, exactly where
//! Linux's `codel_dequeue` does: on entering the dropping state the head is marked and sent;
//! in the dropping state a due "drop" marks the head, schedules the next one by the control law
//! and ends the loop (one mark per dequeue, where drops may come several at once).
//!
//! Differences from Linux, all deliberate: time is the virtual dequeue time given by the caller
//! (nanoseconds, no 1024 ns `codel_time_t` quantum); `interval / sqrt(count)` is computed in
//! floating point instead of Newton's reciprocal square root. The MTU threshold is
//! [`CODEL_MTU`]. One CoDel serves a plain queue or, in fq_codel, one flow; the backlog it
//! compares with the MTU is the whole queue's, as in Linux's fq_codel.

use std::time::Duration;

use crate::fifo::{Fifo, Queued};
use crate::headers::Headers;
use crate::time::{Nanos, duration_nanos};
use crate::trace::OPPORTUNITY_BYTES;

/// CoDel does not drop while at most this many bytes remain queued (Linux uses the device MTU,
/// Mahimahi its 1504-byte packet size).
pub const CODEL_MTU: u64 = OPPORTUNITY_BYTES as u64;

/// CoDel's state, per queue.
#[derive(Debug, Clone)]
pub(crate) struct Codel {
    target: Duration,
    interval_ns: u64,
    /// When the sojourn time will have been above target for a whole interval.
    first_above: Option<Nanos>,
    /// When the next drop is due, in the dropping state.
    drop_next: Nanos,
    /// Drops in the current dropping episode (sets the control-law spacing).
    count: u32,
    /// `count` when the last dropping episode began.
    lastcount: u32,
    dropping: bool,
    /// Mark ECN-capable packets instead of dropping them.
    ecn: bool,
}

/// Where CoDel takes packets from: a plain queue, or one flow of fq_codel.
pub(crate) trait CodelSource<T> {
    /// Takes the head packet.
    fn pop(&mut self) -> Option<Queued<T>>;
    /// Bytes still queued in the whole queue (all flows), after the pops so far.
    fn backlog(&self) -> u64;
}

/// A plain queue under CoDel: the backlog is the FIFO's own.
impl<T> CodelSource<T> for Fifo<T> {
    fn pop(&mut self) -> Option<Queued<T>> {
        Fifo::pop(self)
    }
    fn backlog(&self) -> u64 {
        self.bytes()
    }
}

/// What CoDel did to a packet other than sending it.
#[derive(Debug)]
pub(crate) enum Verdict<'a, T> {
    /// Dropped (the payload goes with it).
    Dropped(Queued<T>),
    /// Marked CE and sent on.
    Marked(&'a Queued<T>),
}

impl Codel {
    pub(crate) fn new(target: Duration, interval: Duration, ecn: bool) -> Codel {
        Codel {
            ecn,
            target,
            interval_ns: duration_nanos(interval),
            first_above: None,
            drop_next: Nanos::ZERO,
            count: 0,
            lastcount: 0,
            dropping: false,
        }
    }

    /// `t + interval / sqrt(count)`.
    fn control_law(&self, t: Nanos, count: u32) -> Nanos {
        let spacing = self.interval_ns as f64 / f64::from(count.max(1)).sqrt();
        Nanos(t.0.saturating_add(spacing as u64))
    }

    /// RFC 8289 `dodequeue`'s decision for the packet just taken (`None` if the queue was
    /// empty); `backlog` is what remains queued after taking it.
    fn ok_to_drop<T>(&mut self, item: Option<&Queued<T>>, backlog: u64, now: Nanos) -> bool {
        let Some(q) = item else {
            self.first_above = None;
            return false;
        };
        if now - q.arrival < self.target || backlog <= CODEL_MTU {
            self.first_above = None;
            return false;
        }
        match self.first_above {
            None => {
                self.first_above = Some(Nanos(now.0.saturating_add(self.interval_ns)));
                false
            }
            Some(t) => now >= t,
        }
    }

    /// A dequeue found the queue empty.
    pub(crate) fn found_empty(&mut self) {
        self.dropping = false;
    }

    /// Marks `item` CE if marking is on and it is ECN-capable; reports the mark.
    fn try_mark<T: Headers>(
        &self,
        item: &mut Option<Queued<T>>,
        verdict: &mut impl FnMut(Verdict<'_, T>),
    ) -> bool {
        let Some(q) = item.as_mut().filter(|_| self.ecn) else { return false };
        if !q.packet.payload.mark_ce() {
            return false;
        }
        verdict(Verdict::Marked(q));
        true
    }

    /// Takes the next packet to send at `now`, dropping (or, with ECN, marking) heads as the
    /// control law says.
    pub(crate) fn dequeue<T: Headers>(
        &mut self,
        now: Nanos,
        source: &mut impl CodelSource<T>,
        verdict: &mut impl FnMut(Verdict<'_, T>),
    ) -> Option<Queued<T>> {
        let mut item = source.pop();
        if item.is_none() {
            self.found_empty();
            return None;
        }
        let ok = self.ok_to_drop(item.as_ref(), source.backlog(), now);
        if self.dropping {
            if !ok {
                // Sojourn went below target: leave the dropping state.
                self.dropping = false;
            } else {
                // Several drops may be due at once when the backlog is large.
                while self.dropping && now >= self.drop_next {
                    self.count = self.count.wrapping_add(1);
                    if self.try_mark(&mut item, verdict) {
                        self.drop_next = self.control_law(self.drop_next, self.count);
                        break;
                    }
                    if let Some(victim) = item.take() {
                        verdict(Verdict::Dropped(victim));
                    }
                    item = source.pop();
                    if self.ok_to_drop(item.as_ref(), source.backlog(), now) {
                        self.drop_next = self.control_law(self.drop_next, self.count);
                    } else {
                        self.dropping = false;
                    }
                }
            }
        } else if ok {
            if !self.try_mark(&mut item, verdict) {
                if let Some(victim) = item.take() {
                    verdict(Verdict::Dropped(victim));
                }
                item = source.pop();
                self.ok_to_drop(item.as_ref(), source.backlog(), now);
            }
            self.dropping = true;
            // If we were dropping recently, resume at the drop rate that controlled the queue
            // then instead of starting over (Linux and RFC 8289 section 5.5).
            let delta = self.count.wrapping_sub(self.lastcount);
            let since_drop_next = i128::from(now.0) - i128::from(self.drop_next.0);
            self.count = if delta > 1 && since_drop_next < 16 * i128::from(self.interval_ns) {
                delta
            } else {
                1
            };
            self.lastcount = self.count;
            self.drop_next = self.control_law(now, self.count);
        }
        item
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fifo::Fifo;
    use crate::packet::Packet;

    fn fifo_with(arrivals_ms: &[u64]) -> Fifo<()> {
        let mut fifo = Fifo::new();
        for (i, &ms) in arrivals_ms.iter().enumerate() {
            let packet = Packet { id: i as u64, len: 1500, payload: () };
            fifo.push(Queued { packet, arrival: Nanos::from_millis(ms) });
        }
        fifo
    }

    #[test]
    fn no_drop_before_a_full_interval_above_target() {
        let mut codel = Codel::new(Duration::from_millis(5), Duration::from_millis(100), false);
        let mut fifo = fifo_with(&[0; 50]);
        let mut dropped = 0;
        // Dequeue one every 3 ms from t=10ms: sojourn >= target from the start, but the first
        // drop may only come once it has stayed there for 100 ms.
        for i in 0..45 {
            let now = Nanos::from_millis(10 + 3 * i);
            codel.dequeue(now, &mut fifo, &mut |_: Verdict<'_, ()>| dropped += 1);
            if now < Nanos::from_millis(110) {
                assert_eq!(dropped, 0, "dropped at {now}");
            }
        }
        assert!(dropped >= 1);
    }

    #[test]
    fn an_empty_queue_ends_the_dropping_state() {
        let mut codel = Codel::new(Duration::from_millis(5), Duration::from_millis(100), false);
        let mut fifo = fifo_with(&[0; 200]);
        let mut dropped = 0;
        let mut now = Nanos::from_millis(10);
        while !codel.dropping {
            now += Duration::from_millis(1);
            codel.dequeue(now, &mut fifo, &mut |_: Verdict<'_, ()>| dropped += 1);
        }
        assert!(dropped > 0);
        codel.found_empty();
        assert!(!codel.dropping);
    }

    #[test]
    fn control_law_spacing() {
        let codel = Codel::new(Duration::from_millis(5), Duration::from_millis(100), false);
        let t = Nanos::from_millis(1000);
        assert_eq!(codel.control_law(t, 1), Nanos::from_millis(1100));
        assert_eq!(codel.control_law(t, 4), Nanos::from_millis(1050));
    }

    #[test]
    fn never_drops_the_last_mtu() {
        let mut codel = Codel::new(Duration::from_millis(5), Duration::from_millis(100), false);
        let mut fifo = fifo_with(&[0, 0]);
        let mut dropped = 0;
        // One packet remains after the first dequeue: not more than one MTU, so no drop state.
        assert!(
            codel
                .dequeue(Nanos::from_millis(500), &mut fifo, &mut |_: Verdict<'_, ()>| dropped += 1)
                .is_some()
        );
        assert!(
            codel
                .dequeue(Nanos::from_millis(900), &mut fifo, &mut |_: Verdict<'_, ()>| dropped += 1)
                .is_some()
        );
        assert_eq!(dropped, 0);
    }
}
