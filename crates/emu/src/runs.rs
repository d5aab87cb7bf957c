//! Releasing segments as runs: consecutive segments of one GSO packet written as one packet.
//!
//! The model releases [`Segment`]s one by one, each at its own scheduled time, exactly as MTU
//! packets leave a wire. Writing each to the far TUN device separately would cost a system
//! call (and the receiving stack a packet) per 1500 bytes; [`RunAssembler`] instead gathers
//! the segments of one packet that leave close together into a [`Run`], written as one GSO
//! packet (the original bytes when the whole packet goes at once).
//!
//! # How much may travel together
//!
//! A run never carries more than [`RunPolicy::max_bytes`]: the bytes the link serialises in
//! [`MAX_RUN_SERIALIZATION`] (100 µs). At 10 Gbit/s that is 125 kB, so a 64 KiB packet leaves
//! whole; at 1 Gbit/s runs of eight segments; at 30 Mbit/s less than one segment, so segments
//! leave one by one as on a wire. A run is written when its last segment is due: its first
//! segment may wait for the others, never longer than [`RunPolicy::max_hold`] (100 µs) after
//! its own release time. Segments scheduled for the very same instant may always travel
//! together (a trace link's delivery opportunity releases several at once).
//!
//! A run also ends where segments differ: another packet, a gap (a segment dropped or held
//! back), a different ECN codepoint. Lateness stays honest: every segment's
//! [`ReleaseInfo`] is kept, so the adapter measures each segment's lateness at the write.
//!
//! Sans-IO like the model: [`RunAssembler::poll`] takes `now`, reads and drains a
//! [`Direction`], and returns what to write; [`RunAssembler::next_wakeup`] says when to call
//! again.

use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use crate::direction::Direction;
use crate::event::Observer;
use crate::packet::ReleaseInfo;
use crate::segment::{GsoPacket, MAX_FRAME_HEADER, Segment, VNET_HDR_LEN};
use crate::spec::Rate;
use crate::time::Nanos;
use crate::wire::Ecn;

/// The longest a run may take to serialise at the link's rate: 100 µs.
pub const MAX_RUN_SERIALIZATION: Duration = Duration::from_micros(100);

/// How far runs may grow and how long their first segment may wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunPolicy {
    /// Most bytes (on the wire, headers of every segment included) a run may carry; a single
    /// segment always goes, whatever its size.
    pub max_bytes: u64,
    /// Longest a run's first segment may be held after its release time waiting for the
    /// rest of the run.
    pub max_hold: Duration,
}

impl RunPolicy {
    /// The policy for a link: [`MAX_RUN_SERIALIZATION`] worth of bytes at a constant rate; for
    /// a trace link, only segments released at the same instant travel together.
    pub fn for_rate(rate: &Rate) -> RunPolicy {
        match rate {
            Rate::Constant(r) => {
                let bits = u128::from(r.bits_per_second()) * MAX_RUN_SERIALIZATION.as_nanos();
                let max_bytes = u64::try_from(bits / 8 / 1_000_000_000).unwrap_or(u64::MAX);
                RunPolicy { max_bytes, max_hold: MAX_RUN_SERIALIZATION }
            }
            Rate::Trace(_) => RunPolicy::one_by_one(),
        }
    }

    /// Every segment alone (except segments released at the same instant).
    pub fn one_by_one() -> RunPolicy {
        RunPolicy { max_bytes: 0, max_hold: Duration::ZERO }
    }
}

/// Consecutive segments of one packet, released together.
#[derive(Debug)]
pub struct Run {
    packet: Arc<GsoPacket>,
    range: Range<u16>,
    ecn: Option<Ecn>,
    releases: Vec<ReleaseInfo>,
}

/// What to write for a [`Run`]: `head` then `payload`, in one `writev`.
#[derive(Debug, Clone, Copy)]
pub struct Frame<'a> {
    /// `virtio_net_hdr` and headers (or the whole packet when `payload` is empty).
    pub head: &'a [u8],
    /// The rest of the packet.
    pub payload: &'a [u8],
}

impl Frame<'_> {
    /// Bytes written.
    pub fn len(&self) -> usize {
        self.head.len() + self.payload.len()
    }

    /// Whether nothing is written (never for a run).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl Run {
    fn start(segment: Segment, info: ReleaseInfo) -> Run {
        let index = segment.index();
        let ecn = segment.ecn_override();
        // Room for the rest of the packet: runs usually take it whole.
        let mut releases =
            Vec::with_capacity(usize::from(segment.packet().layout().segments() - index));
        releases.push(info);
        Run { packet: segment.packet().clone(), range: index..index + 1, ecn, releases }
    }

    /// Whether `segment` continues this run: the next segment of the same packet, with the
    /// same ECN rewrite.
    fn continued_by(&self, segment: &Segment) -> bool {
        Arc::ptr_eq(&self.packet, segment.packet())
            && segment.index() == self.range.end
            && segment.ecn_override() == self.ecn
    }

    fn push(&mut self, segment: Segment, info: ReleaseInfo) {
        self.range.end = segment.index() + 1;
        self.releases.push(info);
    }

    /// The packet the segments belong to.
    pub fn packet(&self) -> &Arc<GsoPacket> {
        &self.packet
    }

    /// Which segments of it.
    pub fn range(&self) -> Range<u16> {
        self.range.clone()
    }

    /// How many segments.
    pub fn segments(&self) -> u16 {
        self.range.end - self.range.start
    }

    /// Bytes on the wire of all its segments.
    pub fn wire_bytes(&self) -> u32 {
        self.packet.layout().run_len(self.range.clone())
    }

    /// The model's schedule of each segment, in order.
    pub fn releases(&self) -> &[ReleaseInfo] {
        &self.releases
    }

    /// Whether the run is its whole packet, unchanged: written as read.
    pub fn is_whole(&self) -> bool {
        self.range.start == 0
            && self.range.end == self.packet.layout().segments()
            && self.ecn.is_none()
    }

    /// The bytes to write to the far device (which has `virtio_net_hdr`s exactly when the
    /// packet was read with one). `scratch` holds rewritten headers.
    pub fn frame<'a>(&'a self, scratch: &'a mut [u8; MAX_FRAME_HEADER]) -> Frame<'a> {
        if self.is_whole() {
            return Frame { head: self.packet.frame(), payload: &[] };
        }
        let original = self.packet.vnet_header().copied().unwrap_or_default();
        let ip = self.packet.ip_packet();
        let layout = self.packet.layout();
        let (len, payload) =
            layout.write_run_header(ip, &original, self.range.clone(), self.ecn, scratch);
        let skip = if self.packet.vnet_header().is_some() { 0 } else { VNET_HDR_LEN };
        Frame { head: &scratch[skip..len], payload: &ip[payload] }
    }

    /// The packet, for reclaiming its buffer once no segment refers to it.
    pub fn into_packet(self) -> Arc<GsoPacket> {
        self.packet
    }
}

/// Drains a `Direction<Segment>` into [`Run`]s; see the [module docs](self).
#[derive(Debug)]
pub struct RunAssembler {
    policy: RunPolicy,
    run: Option<Run>,
}

impl RunAssembler {
    /// An assembler with `policy` (usually [`RunPolicy::for_rate`] of the direction's rate).
    pub fn new(policy: RunPolicy) -> RunAssembler {
        RunAssembler { policy, run: None }
    }

    /// The policy.
    pub fn policy(&self) -> RunPolicy {
        self.policy
    }

    /// Takes the segments of `direction` due at `now` and returns the next run to write, if
    /// one is ready. Call until it returns `None`, then wait until
    /// [`RunAssembler::next_wakeup`].
    pub fn poll<O: Observer>(
        &mut self,
        now: Nanos,
        direction: &mut Direction<Segment, O>,
    ) -> Option<Run> {
        direction.advance(now);
        while let Some((release, next)) = direction.peek_release() {
            if release > now {
                break;
            }
            if let Some(run) = &self.run
                && !self.joins(run, next, release)
            {
                // `next` stays in the direction and starts the following run.
                return self.run.take();
            }
            // Advanced to `now` above: popping needs no further advance.
            let (segment, info) = direction.pop_release(now)?;
            match &mut self.run {
                Some(run) => run.push(segment, info),
                None => self.run = Some(Run::start(segment, info)),
            }
        }
        let run = self.run.as_ref()?;
        if self.holds(run, now, direction) { None } else { self.run.take() }
    }

    /// When [`RunAssembler::poll`] may next return a run: the direction's next release, or
    /// the moment a held run must go.
    pub fn next_wakeup<O: Observer>(&self, direction: &Direction<Segment, O>) -> Option<Nanos> {
        let model = direction.next_wakeup();
        match &self.run {
            None => model,
            Some(run) => {
                let deadline = self.deadline(run);
                Some(model.map_or(deadline, |m| m.min(deadline)))
            }
        }
    }

    /// Segments held back waiting for the rest of their run.
    pub fn held(&self) -> usize {
        self.run.as_ref().map_or(0, |r| usize::from(r.segments()))
    }

    /// The held run, if any, whatever its state (when stopping).
    pub fn take(&mut self) -> Option<Run> {
        self.run.take()
    }

    fn deadline(&self, run: &Run) -> Nanos {
        let first = run.releases.first().map_or(Nanos::ZERO, |r| r.scheduled);
        first + self.policy.max_hold
    }

    fn fits(&self, run: &Run, more: u32) -> bool {
        u64::from(run.wire_bytes()) + u64::from(more) <= self.policy.max_bytes
    }

    /// Whether `next`, due at `release`, joins `run`.
    fn joins(&self, run: &Run, next: &Segment, release: Nanos) -> bool {
        if !run.continued_by(next) {
            return false;
        }
        let same_instant = run.releases.first().is_some_and(|r| r.scheduled == release);
        same_instant || self.fits(run, next.len())
    }

    /// Whether to keep `run` (nothing more due) in the hope that its next segment joins it.
    fn holds<O: Observer>(&self, run: &Run, now: Nanos, direction: &Direction<Segment, O>) -> bool {
        let layout = run.packet.layout();
        if run.range.end >= layout.segments() {
            return false;
        }
        let deadline = self.deadline(run);
        if now >= deadline || !self.fits(run, layout.segment_len(run.range.end)) {
            return false;
        }
        match direction.peek_release() {
            Some((release, next)) => run.continued_by(next) && release <= deadline,
            // The next segment may still be queued or on the link.
            None => direction.backlog().packets() > 0,
        }
    }
}

#[cfg(test)]
mod tests;
