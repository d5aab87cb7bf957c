//! fq_codel (RFC 8290), written from Linux's `net/sched/sch_fq_codel.c` and checked against its
//! behaviour: flow queueing with deficit round robin, CoDel per flow.
//!
//! - **Classify**: a packet's 5-tuple ([`Headers::flow_key`]) is hashed with a per-direction
//!   perturbation (drawn from the direction's seed) and scaled to one of `flows` queues, as
//!   Linux's `reciprocal_scale(skb_get_hash_perturb(...))`. Colliding flows share a queue;
//!   packets without a 5-tuple share one.
//! - **New and old flows**: a queue that becomes active joins the tail of `new_flows` with a
//!   deficit of one `quantum`. Dequeue serves the head of `new_flows`, else of `old_flows`. A
//!   queue whose deficit is used up gets another quantum and moves to the tail of `old_flows`.
//!   A queue found empty leaves its list, except that an empty *new* queue moves to
//!   `old_flows` if that is not empty (Linux: "force a pass through old_flows to prevent
//!   starvation"). So a sparse flow, whose queue empties after each packet, re-enters as new
//!   and is served ahead of the bulk flows.
//! - **CoDel per flow**, with the whole qdisc's backlog as the "more than one MTU queued" test
//!   (Linux passes `sch->qstats.backlog`).
//! - **Over the limit**, the arrival is queued and then packets are dropped from the head of
//!   the fattest queue (by bytes) until half of its backlog or 64 packets are gone (Linux's
//!   `fq_codel_drop` with `drop_batch_size` 64): a bulk flow pays for the overflow it causes,
//!   not the sparse flow that arrives at the wrong moment.
//!
//! Differences from Linux: the limit is the queue's [`crate::QueueLimit`] (bytes, packets or
//! time; Linux counts packets and `memory_limit`), and time is the caller's virtual time.

use std::collections::VecDeque;
use std::net::IpAddr;

use crate::codel::{Codel, CodelSource, Verdict};
use crate::fifo::{Fifo, Queued};
use crate::headers::Headers;
use crate::seed::splitmix64;
use crate::time::Nanos;
use crate::wire::FlowKey;

/// Packets dropped from the fattest flow at most per overflow (Linux's `drop_batch_size`).
pub(crate) const DROP_BATCH: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum List {
    None,
    New,
    Old,
}

#[derive(Debug)]
struct Flow<T> {
    fifo: Fifo<T>,
    codel: Codel,
    deficit: i64,
    list: List,
}

/// fq_codel's state; see the [module docs](self).
#[derive(Debug)]
pub(crate) struct FqCodel<T> {
    flows: Vec<Flow<T>>,
    new_flows: VecDeque<u32>,
    old_flows: VecDeque<u32>,
    quantum: i64,
    perturbation: u64,
    bytes: u64,
    packets: usize,
}

/// One flow's queue as CoDel sees it: pops update the qdisc's totals.
struct FlowSource<'a, T> {
    fifo: &'a mut Fifo<T>,
    bytes: &'a mut u64,
    packets: &'a mut usize,
}

impl<T> CodelSource<T> for FlowSource<'_, T> {
    fn pop(&mut self) -> Option<Queued<T>> {
        let q = self.fifo.pop()?;
        *self.bytes -= u64::from(q.packet.len);
        *self.packets -= 1;
        Some(q)
    }
    fn backlog(&self) -> u64 {
        *self.bytes
    }
}

impl<T: Headers> FqCodel<T> {
    /// `codel` is copied to every flow; `flows` is at least 1.
    pub(crate) fn new(codel: Codel, quantum: u32, flows: u32, perturbation: u64) -> FqCodel<T> {
        let flows = (0..flows.max(1))
            .map(|_| Flow { fifo: Fifo::new(), codel: codel.clone(), deficit: 0, list: List::None })
            .collect();
        FqCodel {
            flows,
            new_flows: VecDeque::new(),
            old_flows: VecDeque::new(),
            quantum: i64::from(quantum),
            perturbation,
            bytes: 0,
            packets: 0,
        }
    }

    /// The queue a payload belongs to.
    pub(crate) fn classify(&self, payload: &T) -> usize {
        let hash = flow_hash(payload.flow_key(), self.perturbation);
        // Linux's reciprocal_scale: a 32-bit hash scaled to [0, flows).
        ((u64::from(hash) * self.flows.len() as u64) >> 32) as usize
    }

    /// Queues a packet in its flow; returns the flow's index.
    pub(crate) fn push(&mut self, q: Queued<T>) -> usize {
        let index = self.classify(&q.packet.payload);
        self.bytes += u64::from(q.packet.len);
        self.packets += 1;
        let flow = &mut self.flows[index];
        flow.fifo.push(q);
        if flow.list == List::None {
            flow.list = List::New;
            flow.deficit = self.quantum;
            self.new_flows.push_back(index as u32);
        }
        index
    }

    /// Queues a packet, then drops from the head of the fattest flow (see the module docs).
    /// Returns the new packet if it was itself dropped (it is the tail of its flow, so only
    /// when that flow was the fattest and emptied), without passing it to `drop`.
    pub(crate) fn push_and_drop_fattest(
        &mut self,
        q: Queued<T>,
        drop: &mut impl FnMut(Queued<T>),
    ) -> Option<Queued<T>> {
        let own = self.push(q);
        // The first of the fattest, as Linux's strict `>` scan finds it.
        let mut fattest = 0;
        for (i, flow) in self.flows.iter().enumerate() {
            if flow.fifo.bytes() > self.flows[fattest].fifo.bytes() {
                fattest = i;
            }
        }
        let threshold = self.flows[fattest].fifo.bytes() / 2;
        let (mut dropped_bytes, mut dropped) = (0, 0);
        let mut own_packet = None;
        while let Some(victim) = self.flows[fattest].fifo.pop() {
            let len = u64::from(victim.packet.len);
            self.bytes -= len;
            self.packets -= 1;
            dropped_bytes += len;
            dropped += 1;
            if fattest == own && self.flows[fattest].fifo.len() == 0 {
                own_packet = Some(victim);
            } else {
                drop(victim);
            }
            if dropped >= DROP_BATCH || dropped_bytes >= threshold {
                break;
            }
        }
        own_packet
    }

    /// The next packet to send at `now` (DRR over new then old flows, CoDel per flow).
    pub(crate) fn dequeue(
        &mut self,
        now: Nanos,
        verdict: &mut impl FnMut(Verdict<'_, T>),
    ) -> Option<Queued<T>> {
        let FqCodel { flows, new_flows, old_flows, quantum, bytes, packets, .. } = self;
        loop {
            let (from_new, index) = match (new_flows.front(), old_flows.front()) {
                (Some(&i), _) => (true, i),
                (None, Some(&i)) => (false, i),
                (None, None) => return None,
            };
            let list = if from_new { &mut *new_flows } else { &mut *old_flows };
            let flow = &mut flows[index as usize];
            if flow.deficit <= 0 {
                flow.deficit += *quantum;
                list.pop_front();
                old_flows.push_back(index);
                flow.list = List::Old;
                continue;
            }
            let Flow { fifo, codel, deficit, list: on } = flow;
            let mut source = FlowSource { fifo, bytes: &mut *bytes, packets: &mut *packets };
            match codel.dequeue(now, &mut source, verdict) {
                Some(q) => {
                    *deficit -= i64::from(q.packet.len);
                    return Some(q);
                }
                None => {
                    list.pop_front();
                    if from_new && !old_flows.is_empty() {
                        old_flows.push_back(index);
                        *on = List::Old;
                    } else {
                        *on = List::None;
                    }
                }
            }
        }
    }

    /// Takes every packet out; the flows stay listed and leave their lists when next found
    /// empty, as after CoDel drops.
    pub(crate) fn drain(&mut self, drop: &mut impl FnMut(Queued<T>)) {
        for flow in &mut self.flows {
            while let Some(q) = flow.fifo.pop() {
                drop(q);
            }
        }
        self.bytes = 0;
        self.packets = 0;
    }

    /// The head of the first flow with packets, in service order.
    pub(crate) fn head(&self) -> Option<&Queued<T>> {
        self.new_flows
            .iter()
            .chain(&self.old_flows)
            .find_map(|&i| self.flows[i as usize].fifo.front())
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    pub(crate) fn packets(&self) -> usize {
        self.packets
    }
}

/// A 32-bit hash of a flow's 5-tuple under `perturbation` (splitmix64 rounds).
fn flow_hash(key: Option<FlowKey>, perturbation: u64) -> u32 {
    let mut h = perturbation;
    let mut mix = |v: u64| h = splitmix64(h ^ v);
    match key {
        None => mix(0),
        Some(k) => {
            for addr in [k.src, k.dst] {
                let bits = match addr {
                    IpAddr::V4(a) => u128::from(u32::from(a)),
                    IpAddr::V6(a) => u128::from(a),
                };
                mix(bits as u64);
                mix((bits >> 64) as u64);
            }
            mix(u64::from(k.protocol) << 32 | u64::from(k.src_port) << 16 | u64::from(k.dst_port));
        }
    }
    (h >> 32) as u32
}

#[cfg(test)]
mod tests;
