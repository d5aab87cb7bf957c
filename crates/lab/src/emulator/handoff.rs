//! The hand-off between a reader thread and a releaser thread of one direction
//! ([`super::Threads::Split`], [`super::Threads::Pipeline`]).
//!
//! The reader stamps each packet when it reads it, parses it once and sends `(stamp, packet)`
//! down a lock-free single-producer channel (`std::sync::mpsc`); the releaser, which owns the
//! model, admits them in order at their stamps before it asks the model for releases. Buffers
//! come back the other way on a second channel once their last segment is written, so the
//! reader's pool keeps circulating the same 64 KiB buffers (no allocation, no zeroing per
//! packet).
//!
//! # Waking the releaser
//!
//! A releaser that has nothing due sleeps in `ppoll`; it must not sleep through a new arrival
//! (an idle link releases it after its serialisation and delay). Before sleeping it sets
//! `sleeping` and then looks at `pending`; the reader adds to `pending` after each send and
//! then, if `sleeping` was set, clears it and writes the eventfd the releaser polls. Both
//! sides use sequentially consistent operations, so either the releaser sees the new packet
//! before it sleeps or the reader sees it sleeping and wakes it: no arrival is missed, and a
//! busy releaser costs the reader no system call.
//!
//! # Invariants
//!
//! - Packets reach the model in the order they were read, with the stamp taken right after
//!   the read. The model never goes back in time: a stamp older than what it has already
//!   processed counts as that time (only possible when the reader was delayed between its
//!   read and its send, by microseconds).
//! - Nothing is lost: packets still in the channel when the threads stop are counted as held.
//! - The releaser never waits for the reader: it takes only completed sends
//!   ([`Receiving::try_recv`]), so the two can share a CPU at different `SCHED_FIFO`
//!   priorities.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, Sender, TryRecvError};

use rustix::fd::OwnedFd;
use tcptail_emu::Nanos;
use tcptail_emu::segment::GsoPacket;

/// A packet buffer.
pub(crate) type Buf = Box<[u8]>;

/// A parsed packet and when it was read.
pub(crate) type Arrival = (Nanos, Arc<GsoPacket>);

/// What both ends share besides the channels.
#[derive(Debug)]
struct Signal {
    /// Packets sent and not yet received.
    pending: AtomicUsize,
    /// The releaser is about to sleep (or sleeps) and wants an eventfd write on a new packet.
    sleeping: AtomicBool,
    /// Polled by the releaser.
    wake: OwnedFd,
}

/// The reader's end.
#[derive(Debug)]
pub(crate) struct Sending {
    packets: Sender<Arrival>,
    signal: Arc<Signal>,
}

/// The releaser's end.
#[derive(Debug)]
pub(crate) struct Receiving {
    packets: Receiver<Arrival>,
    signal: Arc<Signal>,
}

/// Creates a hand-off: the packet channel's two ends.
pub(crate) fn channel() -> std::io::Result<(Sending, Receiving)> {
    let flags = rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK;
    let wake = rustix::event::eventfd(0, flags)?;
    let signal =
        Arc::new(Signal { pending: AtomicUsize::new(0), sleeping: AtomicBool::new(false), wake });
    let (tx, rx) = mpsc::channel();
    Ok((Sending { packets: tx, signal: signal.clone() }, Receiving { packets: rx, signal }))
}

impl Sending {
    /// Sends one packet; `false` if the releaser is gone.
    #[inline]
    pub(crate) fn send(&self, arrival: Arrival) -> bool {
        if self.packets.send(arrival).is_err() {
            return false;
        }
        self.signal.pending.fetch_add(1, Ordering::SeqCst);
        true
    }

    /// Wakes the releaser if it sleeps (call after a batch of sends).
    #[inline]
    pub(crate) fn notify(&self) {
        let signal = &self.signal;
        if signal.sleeping.load(Ordering::SeqCst) && signal.sleeping.swap(false, Ordering::SeqCst) {
            // A full eventfd counter (2^64 - 2 writes) cannot happen; a failed write could only
            // delay the releaser until its next timer or MAX_SLEEP.
            let _ = rustix::io::write(&signal.wake, &1u64.to_ne_bytes());
        }
    }
}

impl Receiving {
    /// The next packet, if one is there. Never waits for a send in progress: `std`'s channel
    /// would spin (yielding) until the sender finishes writing its slot, and a releaser that
    /// preempted its reader on the same CPU (one `SCHED_FIFO` priority above it, e.g. both
    /// pinned to one CPU) would spin forever, since yielding never lets a lower priority run.
    /// `pending` counts only completed sends, and a single sender completes them in order, so
    /// while it is above zero the channel's next slot is written.
    #[inline]
    pub(crate) fn try_recv(&self) -> Option<Arrival> {
        if self.signal.pending.load(Ordering::SeqCst) == 0 {
            return None;
        }
        match self.packets.try_recv() {
            Ok(arrival) => {
                self.signal.pending.fetch_sub(1, Ordering::SeqCst);
                Some(arrival)
            }
            Err(TryRecvError::Empty | TryRecvError::Disconnected) => None,
        }
    }

    /// Announces that the releaser is about to sleep; `false` (do not sleep) if a packet is
    /// already waiting.
    pub(crate) fn prepare_sleep(&self) -> bool {
        self.signal.sleeping.store(true, Ordering::SeqCst);
        if self.signal.pending.load(Ordering::SeqCst) > 0 {
            self.signal.sleeping.store(false, Ordering::SeqCst);
            return false;
        }
        true
    }

    /// After a sleep: stop asking for wake-ups and clear the eventfd.
    pub(crate) fn woke(&self, signalled: bool) {
        self.signal.sleeping.store(false, Ordering::SeqCst);
        if signalled {
            let mut counter = [0u8; 8];
            let _ = rustix::io::read(&self.signal.wake, &mut counter);
        }
    }

    /// The descriptor to poll while sleeping.
    pub(crate) fn wake_fd(&self) -> &OwnedFd {
        &self.signal.wake
    }
}

/// Where written packets' buffers go: back to the reader's pool.
#[derive(Debug, Clone)]
pub(crate) struct Recycler(Sender<Buf>);

/// Where the reader's pool takes them back from.
#[derive(Debug)]
pub(crate) struct Returns(Receiver<Buf>);

/// A buffer return channel.
pub(crate) fn returns() -> (Recycler, Returns) {
    let (tx, rx) = mpsc::channel();
    (Recycler(tx), Returns(rx))
}

impl Recycler {
    /// Hands back the buffer of a packet nothing else refers to any more (otherwise the last
    /// segment to go hands it back).
    #[inline]
    pub(crate) fn reclaim(&self, packet: Arc<GsoPacket>) {
        if let Ok(packet) = Arc::try_unwrap(packet) {
            self.put(packet.into_buffer());
        }
    }

    /// Hands back a buffer (dropped if the reader is gone).
    #[inline]
    pub(crate) fn put(&self, buf: Buf) {
        let _ = self.0.send(buf);
    }
}

impl Returns {
    /// A returned buffer, if any.
    #[inline]
    pub(crate) fn take(&self) -> Option<Buf> {
        self.0.try_recv().ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sleeping_releaser_is_woken_once_and_a_busy_one_never() {
        let (tx, rx) = channel().unwrap();
        let readable = |rx: &Receiving| {
            let mut fds = [rustix::event::PollFd::new(rx.wake_fd(), rustix::event::PollFlags::IN)];
            let zero = rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 };
            rustix::event::poll(&mut fds, Some(&zero)).unwrap() == 1
        };
        // Busy (not sleeping): no eventfd write.
        let packet = || Arc::new(GsoPacket::from_vec(vec![0; 20], false).unwrap());
        assert!(tx.send((Nanos(1), packet())));
        tx.notify();
        assert!(!readable(&rx));
        // A packet waits: the releaser must not sleep.
        assert!(!rx.prepare_sleep());
        assert_eq!(rx.try_recv().map(|a| a.0), Some(Nanos(1)));
        assert!(rx.try_recv().is_none());
        // Sleeping: the next batch wakes it, once.
        assert!(rx.prepare_sleep());
        assert!(tx.send((Nanos(2), packet())));
        tx.notify();
        tx.notify();
        assert!(readable(&rx));
        rx.woke(true);
        assert!(!readable(&rx));
        assert_eq!(rx.try_recv().map(|a| a.0), Some(Nanos(2)));
    }

    #[test]
    fn buffers_come_back_once_their_last_holder_is_gone() {
        let (recycler, returns) = returns();
        let packet = Arc::new(GsoPacket::from_vec(vec![7; 64], false).unwrap());
        let other = packet.clone();
        recycler.reclaim(packet);
        assert!(returns.take().is_none(), "still referenced");
        recycler.reclaim(other);
        assert_eq!(returns.take().map(|b| b.len()), Some(64));
    }
}
