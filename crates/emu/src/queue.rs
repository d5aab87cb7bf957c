//! The bottleneck queue: a byte-counting FIFO or fq_codel's flow queues, its admission limit and
//! its dequeue discipline.
//!
//! Invariants: `bytes` is always the sum of the lengths of the packets held; a FIFO releases in
//! arrival order (CoDel drops or marks at the head, never reorders), fq_codel in arrival order
//! within each flow; the packet being serialised has left the queue and does not count against
//! the limit (as in Linux qdiscs and Mahimahi).
//!
//! Admission is decided at arrival from the limit: a FIFO (with or without CoDel) drops the
//! arrival at the tail, fq_codel takes it and drops from the head of its fattest flow instead
//! ([`crate::fq_codel`]). Discipline drops and marks happen at dequeue. The queue never looks
//! at time except through the `now` it is given.

use std::time::Duration;

use crate::codel::{Codel, Verdict};
use crate::fifo::{Fifo, Queued};
use crate::fq_codel::FqCodel;
use crate::headers::Headers;
use crate::packet::Packet;
use crate::spec::{Discipline, QueueLimit, QueueSpec};
use crate::time::Nanos;

#[derive(Debug)]
enum Kind<T> {
    /// Drop-tail FIFO, optionally under CoDel.
    Single { fifo: Fifo<T>, codel: Option<Codel> },
    /// fq_codel.
    Flows(Box<FqCodel<T>>),
}

/// The bottleneck queue of one direction.
#[derive(Debug)]
pub(crate) struct BottleneckQueue<T> {
    kind: Kind<T>,
    limit: QueueLimit,
}

impl<T: Headers> BottleneckQueue<T> {
    /// `perturbation` seeds fq_codel's flow hash (unused otherwise).
    pub(crate) fn new(spec: QueueSpec, perturbation: u64) -> BottleneckQueue<T> {
        let kind = match spec.discipline {
            Discipline::Fifo => Kind::Single { fifo: Fifo::new(), codel: None },
            Discipline::Codel { target, interval, ecn } => {
                Kind::Single { fifo: Fifo::new(), codel: Some(Codel::new(target, interval, ecn)) }
            }
            Discipline::FqCodel { target, interval, quantum, flows, ecn } => {
                let codel = Codel::new(target, interval, ecn);
                Kind::Flows(Box::new(FqCodel::new(codel, quantum, flows, perturbation)))
            }
        };
        BottleneckQueue { kind, limit: spec.limit }
    }

    /// Whether a packet of `len` bytes fits. `wait_if_admitted` is asked, for time limits only,
    /// how long the packet would wait before its serialisation starts.
    pub(crate) fn admits(&self, len: u32, wait_if_admitted: impl FnOnce() -> Duration) -> bool {
        match self.limit {
            QueueLimit::Bytes(max) => self.bytes() + u64::from(len) <= max.bytes(),
            QueueLimit::Packets(max) => (self.packets() as u64) < max,
            QueueLimit::Time(max) => wait_if_admitted() <= max,
        }
    }

    /// Whether the limit counts bytes or packets (not time), so [`BottleneckQueue::admits`]
    /// never asks for the wait.
    pub(crate) fn limit_is_counted(&self) -> bool {
        matches!(self.limit, QueueLimit::Bytes(_) | QueueLimit::Packets(_))
    }

    /// Whether a packet that does not fit is taken anyway, room being made by dropping from
    /// the fattest flow ([`BottleneckQueue::push_over_limit`]), instead of being dropped.
    pub(crate) fn drops_from_fattest_flow(&self) -> bool {
        matches!(self.kind, Kind::Flows(_))
    }

    pub(crate) fn push(&mut self, packet: Packet<T>, arrival: Nanos) {
        let q = Queued { packet, arrival };
        match &mut self.kind {
            Kind::Single { fifo, .. } => fifo.push(q),
            Kind::Flows(fq) => {
                fq.push(q);
            }
        }
    }

    /// fq_codel over its limit: takes the packet, then drops from the head of the fattest flow
    /// (`drop` gets each victim). Returns the new packet itself if it was among them.
    pub(crate) fn push_over_limit(
        &mut self,
        packet: Packet<T>,
        arrival: Nanos,
        drop: &mut impl FnMut(Queued<T>),
    ) -> Option<Queued<T>> {
        let q = Queued { packet, arrival };
        match &mut self.kind {
            Kind::Single { .. } => Some(q),
            Kind::Flows(fq) => fq.push_and_drop_fattest(q, drop),
        }
    }

    /// Takes the next packet to serialise at virtual time `now`; `verdict` receives every
    /// packet the discipline drops or marks on the way, in order.
    pub(crate) fn dequeue(
        &mut self,
        now: Nanos,
        verdict: &mut impl FnMut(Verdict<'_, T>),
    ) -> Option<Queued<T>> {
        match &mut self.kind {
            Kind::Single { fifo, codel: None } => fifo.pop(),
            Kind::Single { fifo, codel: Some(codel) } => codel.dequeue(now, fifo, verdict),
            Kind::Flows(fq) => fq.dequeue(now, verdict),
        }
    }

    /// Takes every packet out (an outage), in no particular order.
    pub(crate) fn drain(&mut self, drop: &mut impl FnMut(Queued<T>)) {
        match &mut self.kind {
            Kind::Single { fifo, codel } => {
                while let Some(q) = fifo.pop() {
                    drop(q);
                }
                if let Some(codel) = codel {
                    codel.found_empty();
                }
            }
            Kind::Flows(fq) => fq.drain(drop),
        }
    }

    /// The link asked for a packet and the queue was empty: CoDel leaves its dropping state,
    /// as Linux's does on a dequeue that finds nothing (fq_codel's flows do so themselves).
    pub(crate) fn found_empty(&mut self) {
        if let Kind::Single { codel: Some(codel), .. } = &mut self.kind {
            codel.found_empty();
        }
    }

    /// A queued packet: the next to leave for a FIFO, the head of the next flow for fq_codel.
    pub(crate) fn head(&self) -> Option<&Queued<T>> {
        match &self.kind {
            Kind::Single { fifo, .. } => fifo.front(),
            Kind::Flows(fq) => fq.head(),
        }
    }

    /// A lower bound on the length of the next packet to leave (the scheduler and CoDel decide
    /// which it is only at dequeue), `None` if the queue is empty.
    pub(crate) fn next_len_at_least(&self) -> Option<u32> {
        match &self.kind {
            Kind::Single { fifo, .. } => fifo.front().map(|q| q.packet.len),
            Kind::Flows(fq) => fq.head().map(|_| 1),
        }
    }

    pub(crate) fn packets(&self) -> usize {
        match &self.kind {
            Kind::Single { fifo, .. } => fifo.len(),
            Kind::Flows(fq) => fq.packets(),
        }
    }

    pub(crate) fn bytes(&self) -> u64 {
        match &self.kind {
            Kind::Single { fifo, .. } => fifo.bytes(),
            Kind::Flows(fq) => fq.bytes(),
        }
    }
}
