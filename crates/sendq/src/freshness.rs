//! A freshness queue in front of the socket: conflation by key and drop-stale, on a clock the
//! caller supplies.
//!
//! Bounding the socket's send queue only moves the wait into the application: data produced
//! faster than the path drains still ages somewhere. A sender of market data or video wants
//! the *freshest* value, so this queue
//!
//! - **conflates**: a message pushed for a key that already has an unsent message replaces it
//!   in place (it keeps the older one's position, so a busy key is not starved, and carries the
//!   newer timestamp); the replaced message is counted as merged;
//! - **drops stale** messages: one whose (latest) enqueue time is older than `max_age` when it
//!   would be popped, or when [`FreshnessQueue::expire`] runs, is dropped and counted.
//!
//! It never reads the clock: every call takes `now` (a monotonic [`Duration`]).
//!
//! Invariant (property-tested): `pushed = merged + dropped_stale + popped + len()`, and
//! [`FreshnessQueue::pop`] never returns a message older than `max_age`.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// What the queue does to keep data fresh.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FreshnessPolicy {
    /// Replace an unsent message by a newer one with the same key.
    pub conflate: bool,
    /// Drop messages older than this instead of sending them.
    pub max_age: Option<Duration>,
}

/// Counters of a [`FreshnessQueue`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct FreshnessStats {
    /// Messages pushed.
    pub pushed: u64,
    /// Messages replaced by a newer one for the same key before being sent.
    pub merged: u64,
    /// Messages dropped because they were older than `max_age`.
    pub dropped_stale: u64,
    /// Messages handed out by `pop`.
    pub popped: u64,
}

/// A queued message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Queued<K, M> {
    /// Its key.
    pub key: K,
    /// The latest message for the key.
    pub message: M,
    /// When the latest message was pushed.
    pub enqueued_at: Duration,
    /// How many older messages it replaced.
    pub merged: u64,
}

/// The queue; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct FreshnessQueue<K, M> {
    policy: FreshnessPolicy,
    slots: VecDeque<Option<Queued<K, M>>>,
    /// Sequence number of `slots[0]`.
    head_seq: u64,
    /// Key to sequence number of its unsent slot (only with conflation).
    index: HashMap<K, u64>,
    len: usize,
    stats: FreshnessStats,
}

impl<K: Eq + Hash + Clone, M> FreshnessQueue<K, M> {
    /// An empty queue with `policy`.
    pub fn new(policy: FreshnessPolicy) -> FreshnessQueue<K, M> {
        FreshnessQueue {
            policy,
            slots: VecDeque::new(),
            head_seq: 0,
            index: HashMap::new(),
            len: 0,
            stats: FreshnessStats::default(),
        }
    }

    /// The policy.
    pub fn policy(&self) -> FreshnessPolicy {
        self.policy
    }

    /// Messages waiting.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The counters.
    pub fn stats(&self) -> FreshnessStats {
        self.stats
    }

    /// Queues `message` for `key` at `now`; returns `true` when it replaced an unsent one.
    pub fn push(&mut self, now: Duration, key: K, message: M) -> bool {
        self.stats.pushed += 1;
        if self.policy.conflate
            && let Some(&seq) = self.index.get(&key)
            && let Some(Some(slot)) = self.slots.get_mut(Self::offset(self.head_seq, seq))
        {
            slot.message = message;
            slot.enqueued_at = now;
            slot.merged += 1;
            self.stats.merged += 1;
            return true;
        }
        let seq = self.head_seq + self.slots.len() as u64;
        if self.policy.conflate {
            self.index.insert(key.clone(), seq);
        }
        self.slots.push_back(Some(Queued { key, message, enqueued_at: now, merged: 0 }));
        self.len += 1;
        false
    }

    fn offset(head: u64, seq: u64) -> usize {
        usize::try_from(seq - head).unwrap_or(usize::MAX)
    }

    fn is_stale(&self, now: Duration, q: &Queued<K, M>) -> bool {
        self.policy.max_age.is_some_and(|age| now.saturating_sub(q.enqueued_at) > age)
    }

    /// The oldest-positioned fresh message, dropping stale ones on the way.
    pub fn pop(&mut self, now: Duration) -> Option<Queued<K, M>> {
        while let Some(slot) = self.slots.pop_front() {
            self.head_seq += 1;
            let Some(q) = slot else { continue };
            self.len -= 1;
            if self.policy.conflate {
                self.index.remove(&q.key);
            }
            if self.is_stale(now, &q) {
                self.stats.dropped_stale += 1;
                continue;
            }
            self.stats.popped += 1;
            return Some(q);
        }
        None
    }

    /// Drops every stale message now; returns how many.
    pub fn expire(&mut self, now: Duration) -> u64 {
        let Some(age) = self.policy.max_age else { return 0 };
        let mut dropped = 0;
        for slot in &mut self.slots {
            if slot.as_ref().is_some_and(|q| now.saturating_sub(q.enqueued_at) > age) {
                let q = slot.take().expect("checked");
                self.index.remove(&q.key);
                dropped += 1;
            }
        }
        while matches!(self.slots.front(), Some(None)) {
            self.slots.pop_front();
            self.head_seq += 1;
        }
        self.len -= usize::try_from(dropped).unwrap_or(0);
        self.stats.dropped_stale += dropped;
        dropped
    }
}

#[cfg(test)]
mod tests;
