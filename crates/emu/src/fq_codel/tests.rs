//! The scheduler step by step, against Linux's `fq_codel_dequeue` order.

use std::time::Duration;

use super::*;
use crate::packet::Packet;
use crate::wire::Ecn;

/// A payload whose flow key is its source port.
#[derive(Debug, Clone, Copy)]
struct Port(u16);

impl Headers for Port {
    fn ecn(&self) -> Option<Ecn> {
        None
    }
    fn mark_ce(&mut self) -> bool {
        false
    }
    fn flow_key(&self) -> Option<FlowKey> {
        Some(FlowKey {
            src: IpAddr::from([10, 0, 0, 1]),
            dst: IpAddr::from([10, 0, 0, 2]),
            protocol: 17,
            src_port: self.0,
            dst_port: 9,
        })
    }
    fn tcp_flags(&self) -> Option<crate::wire::TcpFlags> {
        None
    }
}

fn fq(quantum: u32) -> FqCodel<Port> {
    // CoDel that never acts within these tests (sojourn stays below an hour's target).
    let codel = Codel::new(Duration::from_secs(3000), Duration::from_secs(3600), false);
    FqCodel::new(codel, quantum, 1024, 42)
}

fn push(fq: &mut FqCodel<Port>, id: u64, port: u16, len: u32) {
    fq.push(Queued { packet: Packet { id, len, payload: Port(port) }, arrival: Nanos::ZERO });
}

fn order(fq: &mut FqCodel<Port>) -> Vec<u64> {
    let mut out = Vec::new();
    while let Some(q) = fq.dequeue(Nanos::from_millis(1), &mut |_| unreachable!("no verdicts")) {
        out.push(q.packet.id);
    }
    out
}

#[test]
fn ports_land_in_distinct_queues() {
    let f = fq(1514);
    let a = f.classify(&Port(1));
    let b = f.classify(&Port(2));
    assert_ne!(a, b, "a collision here would make the order tests meaningless");
    assert_eq!(a, f.classify(&Port(1)));
    assert!(a < 1024 && b < 1024);
}

#[test]
fn deficit_round_robin_by_bytes() {
    // Flow 1: four 1500 B packets; flow 2: twelve 300 B packets; quantum 1514.
    let mut f = fq(1514);
    for i in 0..4 {
        push(&mut f, i, 1, 1500);
    }
    for i in 0..12 {
        push(&mut f, 100 + i, 2, 300);
    }
    // Both start as new flows with one quantum. Flow 1 sends 1500 (deficit 14 > 0) and again
    // (-1486), then goes to old_flows with +1514 (28); flow 2 sends 300 B packets until its
    // deficit is spent: 1514 / 300 -> 6 packets (deficit -286), to old_flows (+1514 = 1228);
    // then flow 1 (28 > 0) sends one (-1472 -> +1514 = 42 next time), flow 2 sends 5 (-272)...
    assert_eq!(
        order(&mut f),
        vec![0, 1, 100, 101, 102, 103, 104, 105, 2, 106, 107, 108, 109, 110, 3, 111]
    );
}

#[test]
fn a_flow_that_becomes_active_is_served_before_old_flows() {
    let mut f = fq(1514);
    for i in 0..10 {
        push(&mut f, i, 1, 1500);
    }
    // Flow 1 uses up its first quantum and becomes old.
    let first = |f: &mut FqCodel<Port>| f.dequeue(Nanos::ZERO, &mut |_| {}).map(|q| q.packet.id);
    assert_eq!(first(&mut f), Some(0));
    assert_eq!(first(&mut f), Some(1));
    assert_eq!(first(&mut f), Some(2));
    // A packet of a new flow jumps ahead of flow 1's backlog.
    push(&mut f, 50, 2, 100);
    assert_eq!(first(&mut f), Some(50));
    assert_eq!(first(&mut f), Some(3));
}

#[test]
fn an_emptied_new_flow_passes_through_old_flows_before_it_is_new_again() {
    let mut f = fq(1514);
    for i in 0..6 {
        push(&mut f, i, 1, 1500);
    }
    let list = |f: &FqCodel<Port>, port| f.flows[f.classify(&Port(port))].list;
    let first = |f: &mut FqCodel<Port>| f.dequeue(Nanos::ZERO, &mut |_| {}).map(|q| q.packet.id);
    assert_eq!(first(&mut f), Some(0));
    assert_eq!(first(&mut f), Some(1));
    push(&mut f, 50, 2, 100);
    // Flow 1's deficit is spent: it moves to old_flows, and new flow 2 goes first.
    assert_eq!(first(&mut f), Some(50));
    assert_eq!((list(&f, 1), list(&f, 2)), (List::Old, List::New));
    // Flow 2 is empty but first in new_flows: the next dequeue finds it empty and, old_flows
    // not being empty, moves it there behind flow 1 (Linux: "force a pass through old_flows").
    assert_eq!(first(&mut f), Some(2));
    assert_eq!(list(&f, 2), List::Old);
    // A packet arriving now does not make it new again: it waits for its turn in old_flows.
    push(&mut f, 51, 2, 100);
    assert_eq!(list(&f, 2), List::Old);
    // Flow 1's deficit is spent again: it goes behind flow 2, which sends 51; flow 2 is then
    // found empty in old_flows and leaves the lists; its next packet is new again.
    assert_eq!(first(&mut f), Some(51));
    assert_eq!(first(&mut f), Some(3));
    assert_eq!(list(&f, 2), List::None);
    push(&mut f, 52, 2, 100);
    assert_eq!(list(&f, 2), List::New);
    assert_eq!(first(&mut f), Some(52));
}

#[test]
fn overflow_drops_half_the_fattest_flow_from_its_head() {
    let mut f = fq(1514);
    for i in 0..10 {
        push(&mut f, i, 1, 1000);
    }
    push(&mut f, 20, 2, 1000);
    let mut dropped = Vec::new();
    let own = f.push_and_drop_fattest(
        Queued { packet: Packet { id: 21, len: 1000, payload: Port(2) }, arrival: Nanos::ZERO },
        &mut |q| dropped.push(q.packet.id),
    );
    assert!(own.is_none());
    // Flow 1 holds 10 000 B: drop from its head until 5000 B are gone.
    assert_eq!(dropped, vec![0, 1, 2, 3, 4]);
    assert_eq!((f.packets(), f.bytes()), (7, 7000));
    // At most 64 packets per overflow, even when half the flow is more.
    let mut f = fq(1514);
    for i in 0..200 {
        push(&mut f, i, 1, 100);
    }
    let mut n = 0;
    let own = f.push_and_drop_fattest(
        Queued { packet: Packet { id: 999, len: 100, payload: Port(1) }, arrival: Nanos::ZERO },
        &mut |_| n += 1,
    );
    assert!(own.is_none());
    assert_eq!(n, DROP_BATCH);
    // A lone flow of one packet that overflows drops that packet: it comes back.
    let mut f = fq(1514);
    let own = f.push_and_drop_fattest(
        Queued { packet: Packet { id: 7, len: 100, payload: Port(3) }, arrival: Nanos::ZERO },
        &mut |_| panic!("the arrival is handed back, not dropped in place"),
    );
    assert_eq!(own.map(|q| q.packet.id), Some(7));
    assert_eq!(f.packets(), 0);
}
