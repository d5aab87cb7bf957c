//! The bottleneck queue: a byte-counting FIFO, its admission limit and its dequeue discipline.
//!
//! Invariants: `bytes` is always the sum of the lengths of the packets held; packets leave in
//! arrival order (CoDel drops from the head, never reorders); the packet being serialised has
//! left the queue and does not count against the limit (as in Linux qdiscs and Mahimahi).
//!
//! Admission (tail drop) is decided at arrival from the limit alone; discipline drops happen at
//! dequeue. The queue never looks at time except through the `now` it is given.

use std::time::Duration;

use crate::codel::Codel;
use crate::fifo::{Fifo, Queued};
use crate::packet::Packet;
use crate::spec::{Discipline, QueueLimit, QueueSpec};
use crate::time::Nanos;

/// The bottleneck queue of one direction.
#[derive(Debug)]
pub(crate) struct BottleneckQueue<T> {
    fifo: Fifo<T>,
    limit: QueueLimit,
    codel: Option<Codel>,
}

impl<T> BottleneckQueue<T> {
    pub(crate) fn new(spec: QueueSpec) -> BottleneckQueue<T> {
        let codel = match spec.discipline {
            Discipline::Fifo => None,
            Discipline::Codel { target, interval } => Some(Codel::new(target, interval)),
        };
        BottleneckQueue { fifo: Fifo::new(), limit: spec.limit, codel }
    }

    /// Whether a packet of `len` bytes fits. `wait_if_admitted` is asked, for time limits only,
    /// how long the packet would wait before its serialisation starts.
    pub(crate) fn admits(&self, len: u32, wait_if_admitted: impl FnOnce() -> Duration) -> bool {
        match self.limit {
            QueueLimit::Bytes(max) => self.fifo.bytes() + u64::from(len) <= max.bytes(),
            QueueLimit::Packets(max) => (self.fifo.len() as u64) < max,
            QueueLimit::Time(max) => wait_if_admitted() <= max,
        }
    }

    pub(crate) fn push(&mut self, packet: Packet<T>, arrival: Nanos) {
        self.fifo.push(Queued { packet, arrival });
    }

    /// Takes the next packet to serialise at virtual time `now`; `drop` receives every packet
    /// the discipline discards on the way (CoDel head drops), in order.
    pub(crate) fn dequeue(
        &mut self,
        now: Nanos,
        drop: &mut impl FnMut(Queued<T>),
    ) -> Option<Queued<T>> {
        match &mut self.codel {
            None => self.fifo.pop(),
            Some(codel) => codel.dequeue(now, &mut self.fifo, drop),
        }
    }

    /// The link asked for a packet and the queue was empty: CoDel leaves its dropping state,
    /// as Linux's does on a dequeue that finds nothing.
    pub(crate) fn found_empty(&mut self) {
        if let Some(codel) = &mut self.codel {
            codel.found_empty();
        }
    }

    pub(crate) fn head(&self) -> Option<&Queued<T>> {
        self.fifo.front()
    }

    pub(crate) fn packets(&self) -> usize {
        self.fifo.len()
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.fifo.bytes()
    }
}
