//! A virtual-clock driver: plays an arrival schedule into a [`Direction`] and polls it the way
//! an adapter would (at `next_wakeup`, optionally late), recording everything.

use std::time::Duration;

use tcptail_emu::{
    Admission, Direction, DirectionSpec, Discipline, DropReason, Nanos, Observer, Packet,
    QueueLimit, QueueSpec, Rate, ReleaseInfo,
};
use tcptail_units::{BitRate, ByteSize};

/// A spec with a constant rate, no delay, and a queue that never fills.
pub fn constant(bits_per_second: u64) -> DirectionSpec {
    DirectionSpec {
        rate: Rate::Constant(BitRate(bits_per_second)),
        delay: Duration::ZERO,
        jitter: None,
        loss: None,
        queue: QueueSpec { limit: QueueLimit::Packets(u64::MAX), discipline: Discipline::Fifo },
        ecn_blackhole: None,
        reorder: None,
    }
}

/// Same, with a byte-limited drop-tail queue.
pub fn constant_bytes(bits_per_second: u64, limit: u64) -> DirectionSpec {
    let mut s = constant(bits_per_second);
    s.queue.limit = QueueLimit::Bytes(ByteSize(limit));
    s
}

/// `count` arrivals of `len` bytes every `gap`, from `start`.
pub fn cbr(start: Nanos, gap: Duration, count: usize, len: u32) -> Vec<(Nanos, u32)> {
    (0..count).map(|i| (start + gap * i as u32, len)).collect()
}

/// How the driver is late when it wakes up for releases.
#[derive(Debug, Clone, Copy)]
pub enum Lateness {
    /// Polls exactly at `next_wakeup`.
    None,
    /// Always this late.
    Fixed(Duration),
    /// A pseudo-random lateness in `[0, max]` (xorshift from the seed).
    Random { max: Duration, seed: u64 },
}

/// What a run produced.
#[derive(Debug, Default)]
pub struct Run {
    /// Released packets with the time they were polled.
    pub released: Vec<(ReleaseInfo, Nanos)>,
    /// Packets dropped at enqueue.
    pub dropped: Vec<(u64, DropReason)>,
    /// Time of the last call.
    pub end: Nanos,
}

impl Run {
    /// Just the release schedules.
    pub fn infos(&self) -> Vec<ReleaseInfo> {
        self.released.iter().map(|(i, _)| *i).collect()
    }
}

/// Plays `arrivals` (sorted by time) into `dir`, polling at its wakeups (late as told) until
/// nothing is left or `until` is reached. Checks the progress guarantee on every wakeup: after
/// draining, `next_wakeup()` is `None` or in the future.
pub fn drive<O: Observer>(
    dir: &mut Direction<u64, O>,
    arrivals: &[(Nanos, u32)],
    lateness: Lateness,
    until: Nanos,
) -> Run {
    drive_with(dir, arrivals, lateness, until, |_, _, _| {})
}

/// [`drive`], calling `check(direction, run so far, packets enqueued so far)` after every call
/// into the direction.
pub fn drive_with<O: Observer>(
    dir: &mut Direction<u64, O>,
    arrivals: &[(Nanos, u32)],
    lateness: Lateness,
    until: Nanos,
    mut check: impl FnMut(&Direction<u64, O>, &Run, usize),
) -> Run {
    let mut run = Run::default();
    let mut next = 0;
    let mut now = Nanos::ZERO;
    let mut rng = match lateness {
        Lateness::Random { seed, .. } => seed | 1,
        _ => 1,
    };
    loop {
        let arrival = arrivals.get(next).map(|a| a.0);
        let wake = dir.next_wakeup().map(|w| {
            let late = match lateness {
                Lateness::None => Duration::ZERO,
                Lateness::Fixed(d) => d,
                Lateness::Random { max, .. } => {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    Duration::from_nanos(rng % (max.as_nanos() as u64 + 1))
                }
            };
            w.max(now) + late
        });
        let t = match (arrival, wake) {
            (Some(a), Some(w)) => a.min(w),
            (a, w) => match a.or(w) {
                Some(t) => t,
                None => break,
            },
        };
        if t > until {
            break;
        }
        now = t;
        while let Some(&(at, len)) = arrivals.get(next)
            && at <= now
        {
            let id = next as u64;
            if let Admission::Dropped { payload, reason } =
                dir.enqueue(at, Packet { id, len, payload: id })
            {
                assert_eq!(payload, id);
                run.dropped.push((id, reason));
            }
            next += 1;
            check(dir, &run, next);
        }
        while let Some((payload, info)) = dir.poll_release(now) {
            assert_eq!(payload, info.id);
            run.released.push((info, now));
            check(dir, &run, next);
        }
        if let Some(w) = dir.next_wakeup() {
            assert!(w > now, "next_wakeup {w} not after {now} once drained");
        }
    }
    run.end = now;
    run
}

/// Asserts `a` is within `tolerance` (a fraction) of `b`.
#[track_caller]
pub fn assert_close(a: f64, b: f64, tolerance: f64) {
    assert!((a - b).abs() <= tolerance * b.abs(), "{a} not within {tolerance} of {b}");
}

/// The earlier of two optional times, `None` when neither is set: when a driver must next
/// act, from the direction's `next_wakeup` and one of its own (an ACK due).
pub fn earliest(a: Option<Nanos>, b: Option<Nanos>) -> Option<Nanos> {
    a.into_iter().chain(b).min()
}

/// The window of a bulk sender with Reno's rules (slow start, +1 packet per window, halve at
/// most once per window), for the closed-loop AQM tests: which packets are in flight, and
/// the window that bounds them. What counts as a congestion signal, and what a timeout does
/// to `ssthresh`, stay with each sender.
#[derive(Debug)]
pub struct RenoWindow {
    /// Congestion window, packets.
    pub cwnd: f64,
    /// Slow-start threshold, packets.
    pub ssthresh: f64,
    /// The id of the next packet sent.
    pub next_id: u64,
    /// No halving for a signal about a packet below this id (sent before the last halving).
    pub recovery_until: u64,
    /// Ids sent and neither acknowledged nor given up as lost.
    pub outstanding: std::collections::BTreeSet<u64>,
}

impl RenoWindow {
    /// A window of 10 packets in slow start.
    pub fn new() -> RenoWindow {
        RenoWindow {
            cwnd: 10.0,
            ssthresh: f64::INFINITY,
            next_id: 0,
            recovery_until: 0,
            outstanding: std::collections::BTreeSet::new(),
        }
    }

    /// Sends 1500-byte packets (payload `payload(id)`) into `dir` at `now` until the window
    /// is full. A drop at the queue is noticed like any other loss, from later ACKs.
    pub fn fill<T: tcptail_emu::Headers, O: Observer>(
        &mut self,
        dir: &mut Direction<T, O>,
        now: Nanos,
        payload: impl Fn(u64) -> T,
    ) {
        while (self.outstanding.len() as f64) < self.cwnd.floor() {
            let id = self.next_id;
            self.next_id += 1;
            self.outstanding.insert(id);
            let _: Admission<T> = dir.enqueue(now, Packet { id, len: 1500, payload: payload(id) });
        }
    }

    /// Takes `id` out of flight as acknowledged, and with it, as lost, every packet still in
    /// flight three or more below it (returned in order).
    pub fn ack(&mut self, id: u64) -> Vec<u64> {
        self.outstanding.remove(&id);
        let lost: Vec<u64> = self.outstanding.range(..id.saturating_sub(3)).copied().collect();
        for l in &lost {
            self.outstanding.remove(l);
        }
        lost
    }

    /// Halves the window (at least 2 packets) and starts a recovery period.
    pub fn halve(&mut self) {
        self.cwnd = (self.cwnd / 2.0).max(2.0);
        self.ssthresh = self.cwnd;
        self.recovery_until = self.next_id;
    }

    /// Grows the window for one ACK: +1 in slow start, +1/cwnd after.
    pub fn grow(&mut self) {
        self.cwnd += if self.cwnd < self.ssthresh { 1.0 } else { 1.0 / self.cwnd };
    }

    /// A retransmission timeout: everything in flight is lost, the window restarts at one
    /// packet and a recovery period starts (`ssthresh` is the caller's).
    pub fn timeout(&mut self) {
        self.outstanding.clear();
        self.cwnd = 1.0;
        self.recovery_until = self.next_id;
    }
}
