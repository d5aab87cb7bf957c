//! What travels through the model: a [`Packet`] handed to a direction, and the
//! [`ReleaseInfo`] schedule it comes back with.
//!
//! These sit below [`crate::direction`] and the stages it drives (queue, CoDel, delay line),
//! which all carry packets; none of them is needed to describe one.

use std::time::Duration;

use serde::Serialize;

use crate::time::Nanos;

/// A packet handed to the emulator: the adapter's id, its length on the wire and a payload the
/// core carries without looking at (a buffer, or an index into the adapter's buffer pool).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T> {
    /// Identifier chosen by the adapter (reported in events and in [`ReleaseInfo`]).
    pub id: u64,
    /// Length in bytes as it occupies the link (the IP packet's length for a TUN adapter).
    pub len: u32,
    /// Carried through unchanged.
    pub payload: T,
}

/// The schedule of a released packet, all in virtual time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct ReleaseInfo {
    /// The adapter's packet id.
    pub id: u64,
    /// Length in bytes.
    pub len: u32,
    /// When it was enqueued.
    pub arrival: Nanos,
    /// When it left the queue (serialisation start, or its first delivery opportunity).
    pub start: Nanos,
    /// When it left the link.
    pub departure: Nanos,
    /// When it was due to be released to the far end.
    pub scheduled: Nanos,
}

impl ReleaseInfo {
    /// Time spent waiting in the bottleneck queue.
    pub fn queue_delay(&self) -> Duration {
        self.start - self.arrival
    }

    /// How late the adapter is if it delivers the packet at `now` (`now - scheduled`, zero if
    /// early).
    pub fn lateness(&self, now: Nanos) -> Duration {
        now - self.scheduled
    }
}
