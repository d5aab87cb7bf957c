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
const NANOS_PER_SEC_U64: u64 = 1_000_000_000;

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
        // A segment's numerator (1500 bytes: 1.2e13) fits 64 bits: a 64-bit division is several
        // times cheaper than the 128-bit one, and it runs once per segment on the link.
        if let Some(numerator) =
            bytes.checked_mul(8 * NANOS_PER_SEC_U64).and_then(|n| n.checked_add(carry))
        {
            return (numerator / self.bits_per_second, numerator % self.bits_per_second);
        }
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
///
/// A rate event ([`TraceLink::scale_to`]) scales the trace instead of replacing it: from the
/// next unspent opportunity on, recorded opportunity `k` (counted from there) carries
/// `floor((k+1)·s) - floor(k·s)` opportunities, `s` being the new mean rate over the trace's
/// own. Below 1 that keeps an evenly spread `s` of the opportunities, above 1 it repeats them
/// (several opportunities in one millisecond, as trace files allow); each still carries 1504
/// bytes at its recorded time, so the trace's shape (its fades and bursts, and when they
/// happen) is kept and its long-run mean becomes the new rate exactly.
#[derive(Debug, Clone)]
pub(crate) struct TraceLink {
    trace: DeliveryTrace,
    epoch: Nanos,
    /// Index (counting across loops) of the recorded opportunity where the current scale
    /// began.
    base: u64,
    /// The scale `num / den` (both non-zero, in lowest terms; `1 / 1` as recorded).
    num: u128,
    den: u128,
    /// Index, from `base`, of the first scaled opportunity not yet spent.
    next: u64,
}

impl TraceLink {
    pub(crate) fn new(trace: DeliveryTrace, epoch: Nanos) -> TraceLink {
        TraceLink { trace, epoch, base: 0, num: 1, den: 1, next: 0 }
    }

    /// The recorded opportunity (offset from `base`) that carries scaled opportunity `j`:
    /// `ceil((j + 1) / s) - 1`.
    fn recorded(&self, j: u64) -> u64 {
        if self.num == self.den {
            return j;
        }
        let k = (u128::from(j) + 1) * self.den;
        (k.div_ceil(self.num) - 1).min(u128::from(u64::MAX)) as u64
    }

    /// Time of scaled opportunity `j` (from `base`).
    fn time_of(&self, j: u64) -> Nanos {
        let k = self.base.saturating_add(self.recorded(j));
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

    /// From the next unspent opportunity on, scales the trace so that its long-run mean is
    /// `rate` (relative to the trace as recorded, whatever earlier steps did). The new scale
    /// starts at the recorded opportunity after the last one spent: one a thinned trace
    /// skipped but whose time has not come is used, one whose repeats were partly spent is
    /// not reused.
    pub(crate) fn scale_to(&mut self, rate: BitRate) {
        if self.next > 0 {
            self.base = self.base.saturating_add(self.recorded(self.next - 1) + 1);
        }
        self.next = 0;
        // s = rate / mean = rate x period / (opportunities x 1504 x 8 x 1000 ms/s).
        let period_ms = self.trace.timestamps_ms().last().copied().unwrap_or(1);
        let num = u128::from(rate.bits_per_second().max(1)) * u128::from(period_ms);
        let den = self.trace.opportunities_per_period() as u128
            * u128::from(OPPORTUNITY_BYTES)
            * 8
            * 1000;
        let g = gcd(num, den);
        (self.num, self.den) = (num / g, den / g);
    }
}

fn gcd(mut a: u128, mut b: u128) -> u128 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
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
    fn the_64_bit_division_agrees_with_the_128_bit_one() {
        let wide = |link: &ConstantLink, bytes: u64, carry: u64| {
            let n = u128::from(bytes) * 8 * NANOS_PER_SEC + u128::from(carry);
            let r = u128::from(link.bits_per_second);
            ((n / r).min(u128::from(u64::MAX)) as u64, (n % r) as u64)
        };
        for bps in [1, 7_000_000, 10_000_000_000, 99_999_999_999, u64::MAX / 3, u64::MAX] {
            let link = ConstantLink::new(BitRate(bps));
            for bytes in [0, 1, 40, 1500, 65_535, 2_305_843_009, 2_305_843_010, u64::MAX / 8] {
                for carry in [0, 1, bps / 2, bps - 1] {
                    assert_eq!(
                        link.split(bytes, carry),
                        wide(&link, bytes, carry),
                        "{bps} {bytes} {carry}"
                    );
                }
            }
        }
    }

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

    /// Opportunity times (ms from the epoch) of the next `n` opportunities, spending them.
    fn spend(link: &mut TraceLink, n: usize) -> Vec<u64> {
        (0..n)
            .map(|_| {
                let t = link.next_time().as_nanos() / 1_000_000;
                link.step();
                t
            })
            .collect()
    }

    #[test]
    fn a_scaled_trace_keeps_its_times_and_reaches_the_new_mean() {
        // One opportunity per ms: 12.032 Mbit/s.
        let trace = DeliveryTrace::from_timestamps(vec![1], "one").unwrap();
        let mut link = TraceLink::new(trace.clone(), Nanos::ZERO);
        assert_eq!(spend(&mut link, 3), [1, 2, 3]);
        // Half the mean: every second recorded opportunity, from the next one on.
        link.scale_to(BitRate(6_016_000));
        assert_eq!(spend(&mut link, 4), [5, 7, 9, 11]);
        // Twice the mean, relative to the trace as recorded: each millisecond twice.
        link.scale_to(BitRate(24_064_000));
        assert_eq!(spend(&mut link, 5), [12, 12, 13, 13, 14]);
        // Back to the recorded mean; the half-spent 14 ms is not reused.
        link.scale_to(trace.mean_rate());
        assert_eq!(spend(&mut link, 3), [15, 16, 17]);
        // A quarter over 4000 ms: exactly 1000 opportunities, evenly spread.
        let mut quarter = TraceLink::new(trace.clone(), Nanos::ZERO);
        quarter.scale_to(BitRate(12_032_000 / 4));
        let times = spend(&mut quarter, 1000);
        assert_eq!(times[..3], [4, 8, 12]);
        assert_eq!(*times.last().unwrap(), 4000);
        // Byte positions follow the scaled opportunities.
        assert_eq!(quarter.time_of_byte(0), Nanos::from_millis(4004));
        assert_eq!(quarter.time_of_byte(1504), Nanos::from_millis(4008));
        // A rate that is not a whole fraction of the mean still averages to it.
        let mut third = TraceLink::new(trace, Nanos::ZERO);
        third.scale_to(BitRate(12_032_000 / 3));
        let times = spend(&mut third, 10_000);
        let last = *times.last().unwrap() as f64;
        assert!((last / 30_000.0 - 1.0).abs() < 1e-4, "{last}");
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
