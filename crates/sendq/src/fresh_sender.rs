//! [`FreshSender`]: a [`FreshnessQueue`] in front of a [`BoundedSender`], so the wait the bound
//! imposes is spent merging and dropping stale messages rather than ageing them.
//!
//! The application [`offer`](FreshSender::offer)s messages (by key) whenever it has them and
//! calls [`pump`](FreshSender::pump) whenever the socket may take more (for a non-blocking
//! socket: when `pump` returned early and `POLLOUT` or
//! [`retry_after`](FreshSender::retry_after) says so). A message is popped only once the
//! bound leaves room ([`BoundedSender::ready`]), so the one that goes is the freshest at that
//! moment, and then written through [`BoundedSender::send`] in pieces that each fit the bound.
//! A message once started is finished before anything else (also across `WouldBlock` on a
//! non-blocking socket), and is never merged or dropped. [`FreshSender::stats`] reports the estimate, time blocked,
//! bytes written and the messages merged or dropped.

use std::hash::Hash;
use std::io;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::freshness::{FreshnessPolicy, FreshnessQueue, FreshnessStats};
use crate::governor::GovernorConfig;
use crate::sender::{BoundedSender, SenderStats};

/// Counters of a [`FreshSender`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FreshSenderStats {
    /// The socket side: estimate, time blocked, bytes written.
    pub sender: SenderStats,
    /// The queue side: pushed, merged, dropped as stale, popped.
    pub queue: FreshnessStats,
    /// Messages waiting in the queue.
    pub queued: usize,
    /// Messages written whole.
    pub messages_sent: u64,
}

/// See the [module docs](self).
#[derive(Debug)]
pub struct FreshSender<K, S> {
    queue: FreshnessQueue<K, Vec<u8>>,
    sender: BoundedSender<S>,
    epoch: Instant,
    /// A message the socket took part of, and how much.
    partial: Option<(Vec<u8>, usize)>,
    messages_sent: u64,
}

impl<K: Eq + Hash + Clone, S: AsFd> FreshSender<K, S> {
    /// Wraps `stream` with the bound `config` and the queue `policy`.
    pub fn new(stream: S, config: GovernorConfig, policy: FreshnessPolicy) -> io::Result<Self> {
        Ok(FreshSender {
            queue: FreshnessQueue::new(policy),
            sender: BoundedSender::new(stream, config)?,
            epoch: Instant::now(),
            partial: None,
            messages_sent: 0,
        })
    }

    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    /// Queues `message` for `key`; `true` when it replaced an unsent message for that key.
    pub fn offer(&mut self, key: K, message: Vec<u8>) -> bool {
        let now = self.now();
        self.queue.push(now, key, message)
    }

    /// Writes queued messages while the bound admits them; returns how many were completed.
    ///
    /// A blocking socket waits on the bound before each message and returns when the queue is
    /// empty. A non-blocking socket returns as soon as the bound or the kernel says
    /// `WouldBlock` (which is not an error here); other errors are returned.
    pub fn pump(&mut self) -> io::Result<usize> {
        let mut done = 0;
        loop {
            if let Some((msg, mut off)) = self.partial.take() {
                while off < msg.len() {
                    match self.sender.send(&msg[off..]) {
                        Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                        Ok(n) => off += n,
                        Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                            self.partial = Some((msg, off));
                            return Ok(done);
                        }
                        Err(e) => {
                            self.partial = Some((msg, off));
                            return Err(e);
                        }
                    }
                }
                done += 1;
                self.messages_sent += 1;
            }
            // Drop what went stale while we waited, so we never wait for a message we will
            // not send.
            let now = self.now();
            self.queue.expire(now);
            if self.queue.is_empty() {
                return Ok(done);
            }
            // Pick the message only once the socket can take it, so it is the freshest.
            match self.sender.ready() {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(done),
                Err(e) => return Err(e),
            }
            let now = self.now();
            match self.queue.pop(now) {
                Some(q) => self.partial = Some((q.message, 0)),
                None => return Ok(done),
            }
        }
    }

    /// After `pump` stopped on the threshold: when to try again (`None`: wait for `POLLOUT`).
    pub fn retry_after(&self) -> Option<Duration> {
        self.sender.retry_after()
    }

    /// The counters.
    pub fn stats(&self) -> FreshSenderStats {
        FreshSenderStats {
            sender: self.sender.stats(),
            queue: self.queue.stats(),
            queued: self.queue.len(),
            messages_sent: self.messages_sent,
        }
    }

    /// The socket wrapper.
    pub fn sender(&self) -> &BoundedSender<S> {
        &self.sender
    }

    /// Unwraps the socket (queued and partly written messages are discarded).
    pub fn into_inner(self) -> S {
        self.sender.into_inner()
    }
}
