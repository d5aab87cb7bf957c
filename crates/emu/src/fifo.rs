//! The byte-counting FIFO under the bottleneck queue: [`Queued`] packets with their arrival
//! times, in arrival order. [`crate::queue`] admits into it, CoDel ([`crate::codel`]) drops
//! from its head and fq_codel ([`crate::fq_codel`]) keeps one per flow; all build on this
//! module, which uses none of them.

use std::collections::VecDeque;

use crate::packet::Packet;
use crate::time::Nanos;

/// A packet waiting in the queue, with its arrival time.
#[derive(Debug)]
pub(crate) struct Queued<T> {
    pub(crate) packet: Packet<T>,
    pub(crate) arrival: Nanos,
}

/// FIFO of queued packets that tracks its byte count.
#[derive(Debug)]
pub(crate) struct Fifo<T> {
    items: VecDeque<Queued<T>>,
    bytes: u64,
}

impl<T> Fifo<T> {
    pub(crate) fn new() -> Fifo<T> {
        Fifo { items: VecDeque::new(), bytes: 0 }
    }

    pub(crate) fn pop(&mut self) -> Option<Queued<T>> {
        let q = self.items.pop_front()?;
        self.bytes -= u64::from(q.packet.len);
        Some(q)
    }

    pub(crate) fn push(&mut self, q: Queued<T>) {
        self.bytes += u64::from(q.packet.len);
        self.items.push_back(q);
    }

    /// Bytes currently held.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Packets currently held.
    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    /// The oldest packet, next to leave.
    pub(crate) fn front(&self) -> Option<&Queued<T>> {
        self.items.front()
    }
}
