//! The bottleneck link's service schedule: constant bit rate or a looping delivery trace.
//!
//! Both links compute times from the **virtual schedule** only. A constant-rate link starts a
//! packet at `max(arrival, link free time)` and finishes it `len * 8 / rate` later; the division
//! remainder is carried from packet to packet while the link stays busy, so back-to-back packets
//! drain at exactly the configured rate however the quotient rounds. A trace link is a cursor over
//! the trace's delivery opportunities; the direction spends each opportunity's 1504 bytes on
//! queued packets the way Mahimahi's `LinkQueue::rationalize` does.
//!
//! Neither link reads a clock or holds packets.

use tcptail_units::BitRate;

use crate::time::Nanos;
use crate::trace::{DeliveryTrace, OPPORTUNITY_BYTES};

const NANOS_PER_SEC: u128 = 1_000_000_000;

/// A constant-rate link.
#[derive(Debug, Clone)]
pub(crate) struct ConstantLink {
    bits_per_second: u64,
    /// When the last started packet finishes serialisation.
    free_at: Nanos,
    /// Remainder of `bits * 1e9 / rate` not yet turned into a whole nanosecond.
    remainder: u64,
}

impl ConstantLink {
    pub(crate) fn new(rate: BitRate) -> ConstantLink {
        // Validated specs never hold a zero rate; `max(1)` keeps this total anyway.
        ConstantLink {
            bits_per_second: rate.bits_per_second().max(1),
            free_at: Nanos::ZERO,
            remainder: 0,
        }
    }

    /// A new rate for packets that start from now on (the one in service keeps its end).
    pub(crate) fn set_rate(&mut self, rate: BitRate) {
        self.bits_per_second = rate.bits_per_second().max(1);
        self.remainder = 0;
    }

    /// When the link is free for the next packet.
    pub(crate) fn free_at(&self) -> Nanos {
        self.free_at
    }

    /// Serialises `len` bytes starting at `start` (`>= free_at()`); returns the finish time.
    pub(crate) fn serve(&mut self, start: Nanos, len: u32) -> Nanos {
        debug_assert!(start >= self.free_at);
        if start > self.free_at {
            // The link idled: no fraction of a nanosecond is owed any more.
            self.remainder = 0;
        }
        let (duration, remainder) = self.split(u64::from(len), self.remainder);
        self.remainder = remainder;
        self.free_at = Nanos(start.0.saturating_add(duration));
        self.free_at
    }

    /// `(bytes * 8 * 1e9 + carry) / rate` as (whole nanoseconds, remainder).
    fn split(&self, bytes: u64, carry: u64) -> (u64, u64) {
        let numerator = u128::from(bytes) * 8 * NANOS_PER_SEC + u128::from(carry);
        let rate = u128::from(self.bits_per_second);
        let whole = (numerator / rate).min(u128::from(u64::MAX)) as u64;
        (whole, (numerator % rate) as u64)
    }

    /// When a packet arriving at `now` would start serialisation if `bytes_ahead` bytes are
    /// queued before it (the packet in service already counted in `free_at`).
    pub(crate) fn predicted_start(&self, now: Nanos, bytes_ahead: u64) -> Nanos {
        if self.free_at <= now {
            if bytes_ahead == 0 {
                return now;
            }
            let (d, _) = self.split(bytes_ahead, 0);
            return Nanos(now.0.saturating_add(d));
        }
        let (d, _) = self.split(bytes_ahead, self.remainder);
        Nanos(self.free_at.0.saturating_add(d))
    }
}

/// A trace-driven link: a cursor over delivery opportunities.
#[derive(Debug, Clone)]
pub(crate) struct TraceLink {
    trace: DeliveryTrace,
    epoch: Nanos,
    /// Index (counting across loops) of the first opportunity not yet spent.
    next: u64,
}

impl TraceLink {
    pub(crate) fn new(trace: DeliveryTrace, epoch: Nanos) -> TraceLink {
        TraceLink { trace, epoch, next: 0 }
    }

    /// Time of opportunity `k` (absolute index).
    fn time_of(&self, k: u64) -> Nanos {
        self.epoch + self.trace.opportunity_offset(k)
    }

    /// Time of the next unspent opportunity.
    pub(crate) fn next_time(&self) -> Nanos {
        self.time_of(self.next)
    }

    /// Marks the next opportunity as spent.
    pub(crate) fn step(&mut self) {
        self.next += 1;
    }

    /// Time of the future opportunity that will carry byte number `byte` (0-based) of the bytes
    /// still to send, every future opportunity being fully available.
    pub(crate) fn time_of_byte(&self, byte: u64) -> Nanos {
        self.time_of(self.next.saturating_add(byte / u64::from(OPPORTUNITY_BYTES)))
    }

    /// Resets the epoch (only meaningful before the first opportunity is spent).
    pub(crate) fn set_epoch(&mut self, epoch: Nanos) {
        self.epoch = epoch;
    }
}

/// The link of one direction.
#[derive(Debug, Clone)]
pub(crate) enum Link {
    Constant(ConstantLink),
    Trace(TraceLink),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn remainder_keeps_long_run_rate_exact() {
        // 1500 bytes at 7 Mbit/s = 1_714_285.714... ns: rounding per packet would drift.
        let mut link = ConstantLink::new(BitRate(7_000_000));
        let mut t = Nanos::ZERO;
        for _ in 0..7_000 {
            t = link.serve(t, 1500);
        }
        // 7000 * 12000 bits / 7e6 = 12 s exactly.
        assert_eq!(t, Nanos(12_000_000_000));
    }

    #[test]
    fn idle_link_starts_at_arrival() {
        let mut link = ConstantLink::new(BitRate(30_000_000));
        assert_eq!(link.serve(Nanos(1_000_000), 1500), Nanos(1_400_000));
        assert_eq!(link.predicted_start(Nanos(1_100_000), 1500), Nanos(1_800_000));
        assert_eq!(link.predicted_start(Nanos(5_000_000), 0), Nanos(5_000_000));
    }

    #[test]
    fn trace_byte_positions() {
        let trace = DeliveryTrace::from_timestamps(vec![1], "one").unwrap();
        let link = TraceLink::new(trace, Nanos::from_millis(100));
        assert_eq!(link.next_time(), Nanos::from_millis(101));
        assert_eq!(link.time_of_byte(0), Nanos::from_millis(101));
        assert_eq!(link.time_of_byte(1503), Nanos::from_millis(101));
        assert_eq!(link.time_of_byte(1504), Nanos::from_millis(102));
    }
}
