//! The run assembler on a virtual clock: how segments of GSO packets leave a direction at
//! different link rates, with gaps, ECN rewrites and trace links.

use std::time::Duration;

use tcptail_units::{BitRate, ByteSize};

use super::*;
use crate::direction::Admission;
use crate::packet::Packet;
use crate::spec::{DirectionSpec, QueueLimit, QueueSpec};
use crate::trace::DeliveryTrace;

/// A TCP/IPv4 GSO packet of `segments` segments of 1460 payload bytes (1500 on the wire).
fn gso_packet(segments: u16) -> Arc<GsoPacket> {
    crate::segment::test_packets::tcp_v4(segments, 1460, 0, 40000)
}

fn direction(rate: Rate, delay_us: u64, limit: QueueLimit) -> Direction<Segment> {
    let spec = DirectionSpec {
        rate,
        delay: Duration::from_micros(delay_us),
        jitter: None,
        loss: None,
        queue: QueueSpec::drop_tail(limit),
        ecn_blackhole: None,
        reorder: None,
    };
    Direction::new(spec, 1)
}

fn constant(bps: u64) -> Rate {
    Rate::Constant(BitRate(bps))
}

fn enqueue(dir: &mut Direction<Segment>, now: Nanos, packet: &Arc<GsoPacket>) -> usize {
    let mut dropped = 0;
    for (id, seg) in Segment::all(packet).enumerate() {
        let len = seg.len();
        if let Admission::Dropped { .. } =
            dir.enqueue(now, Packet { id: id as u64, len, payload: seg })
        {
            dropped += 1;
        }
    }
    dropped
}

/// Polls at every wakeup the assembler asks for until nothing is in flight; returns each run
/// with the time it was handed out.
fn drain(
    asm: &mut RunAssembler,
    dir: &mut Direction<Segment>,
    mut now: Nanos,
) -> Vec<(Nanos, Run)> {
    let mut out = Vec::new();
    for _ in 0..100_000 {
        while let Some(run) = asm.poll(now, dir) {
            out.push((now, run));
        }
        match asm.next_wakeup(dir) {
            Some(w) => now = w.max(now),
            None => return out,
        }
    }
    panic!("the assembler never ran dry");
}

#[test]
fn policy_bytes_are_100_us_at_the_link_rate() {
    assert_eq!(RunPolicy::for_rate(&constant(10_000_000_000)).max_bytes, 125_000);
    assert_eq!(RunPolicy::for_rate(&constant(1_000_000_000)).max_bytes, 12_500);
    assert_eq!(RunPolicy::for_rate(&constant(30_000_000)).max_bytes, 375);
    let trace = DeliveryTrace::from_timestamps(vec![1], "t").unwrap();
    assert_eq!(RunPolicy::for_rate(&Rate::Trace(trace)), RunPolicy::one_by_one());
}

#[test]
fn at_10_gbit_a_64k_packet_leaves_whole_when_its_last_segment_is_due() {
    let rate = constant(10_000_000_000);
    let mut dir = direction(rate.clone(), 1_000, QueueLimit::Bytes(ByteSize(1 << 20)));
    let mut asm = RunAssembler::new(RunPolicy::for_rate(&rate));
    let packet = gso_packet(44);
    assert_eq!(enqueue(&mut dir, Nanos::ZERO, &packet), 0);
    drop(packet);
    let runs = drain(&mut asm, &mut dir, Nanos::ZERO);
    assert_eq!(runs.len(), 1);
    let (at, run) = &runs[0];
    assert!(run.is_whole() && run.segments() == 44 && run.releases().len() == 44);
    // 44 x 1500 bytes at 10 Gbit/s = 52.8 µs after the first bit, plus 1 ms.
    let last = run.releases()[43].scheduled;
    assert_eq!(last, Nanos(1_000_000 + 52_800));
    assert_eq!(*at, last, "handed out when the last segment is due, not before");
    assert_eq!(run.releases()[0].scheduled, Nanos(1_000_000 + 1_200));
    let mut scratch = [0u8; MAX_FRAME_HEADER];
    let frame = run.frame(&mut scratch);
    assert_eq!(frame.head, run.packet().frame(), "a whole run is written as read");
    assert!(frame.payload.is_empty());
}

#[test]
fn at_1_gbit_runs_are_eight_segments() {
    let rate = constant(1_000_000_000);
    let mut dir = direction(rate.clone(), 5_000, QueueLimit::Bytes(ByteSize(1 << 20)));
    let mut asm = RunAssembler::new(RunPolicy::for_rate(&rate));
    enqueue(&mut dir, Nanos::ZERO, &gso_packet(20));
    let runs = drain(&mut asm, &mut dir, Nanos::ZERO);
    let sizes: Vec<u16> = runs.iter().map(|(_, r)| r.segments()).collect();
    assert_eq!(sizes, [8, 8, 4]);
    for (at, run) in &runs {
        assert_eq!(*at, run.releases().last().unwrap().scheduled);
        let first = run.releases()[0].scheduled;
        assert!(*at - first <= MAX_RUN_SERIALIZATION, "held {:?}", *at - first);
        assert!(!run.is_whole());
        let mut scratch = [0u8; MAX_FRAME_HEADER];
        let frame = run.frame(&mut scratch);
        assert_eq!(frame.len(), VNET_HDR_LEN + 40 + usize::from(run.segments()) * 1460);
    }
}

#[test]
fn at_30_mbit_segments_leave_one_by_one_on_time() {
    let rate = constant(30_000_000);
    let mut dir = direction(rate.clone(), 5_000, QueueLimit::Bytes(ByteSize(1 << 20)));
    let mut asm = RunAssembler::new(RunPolicy::for_rate(&rate));
    enqueue(&mut dir, Nanos::ZERO, &gso_packet(5));
    let runs = drain(&mut asm, &mut dir, Nanos::ZERO);
    assert_eq!(runs.len(), 5);
    for (k, (at, run)) in runs.iter().enumerate() {
        assert_eq!(run.range(), k as u16..k as u16 + 1);
        // 1500 bytes at 30 Mbit/s: 400 µs each, then 5 ms.
        assert_eq!(*at, Nanos(5_000_000 + 400_000 * (k as u64 + 1)));
        assert_eq!(*at, run.releases()[0].scheduled);
    }
}

#[test]
fn a_dropped_segment_ends_the_run() {
    let rate = constant(10_000_000_000);
    // Room for one segment on the link and nine queued: the other 34 are tail-dropped.
    let mut dir = direction(rate.clone(), 100, QueueLimit::Packets(9));
    let mut asm = RunAssembler::new(RunPolicy::for_rate(&rate));
    let first = gso_packet(44);
    assert_eq!(enqueue(&mut dir, Nanos::ZERO, &first), 34);
    let second = gso_packet(3);
    let runs = drain(&mut asm, &mut dir, Nanos::ZERO);
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].1.range(), 0..10);
    // It was not held waiting for segment 10, which will never come.
    assert_eq!(runs[0].0, runs[0].1.releases()[9].scheduled);
    drop(runs);
    assert_eq!(Arc::strong_count(&first), 1, "dropped segments released their reference");
    let _ = second;
}

#[test]
fn the_next_packet_ends_the_run_and_ecn_rewrites_split_runs() {
    let rate = constant(10_000_000_000);
    let mut dir = direction(rate.clone(), 50, QueueLimit::Bytes(ByteSize(1 << 20)));
    let mut asm = RunAssembler::new(RunPolicy::for_rate(&rate));
    let (a, b) = (gso_packet(4), gso_packet(6));
    enqueue(&mut dir, Nanos::ZERO, &a);
    for (id, mut seg) in Segment::all(&b).enumerate() {
        if id == 2 {
            seg.set_ecn(crate::wire::Ecn::Ce);
        }
        let len = seg.len();
        let _ = dir.enqueue(Nanos::ZERO, Packet { id: 100 + id as u64, len, payload: seg });
    }
    let runs = drain(&mut asm, &mut dir, Nanos::ZERO);
    let shape: Vec<(bool, Range<u16>)> =
        runs.iter().map(|(_, r)| (Arc::ptr_eq(r.packet(), &a), r.range())).collect();
    assert_eq!(shape, [(true, 0..4), (false, 0..2), (false, 2..3), (false, 3..6)]);
    let mut scratch = [0u8; MAX_FRAME_HEADER];
    let frame = runs[2].1.frame(&mut scratch);
    assert_eq!(frame.head[VNET_HDR_LEN + 1] & 3, 3, "the marked segment carries CE");
}

#[test]
fn without_delay_the_run_waits_for_segments_still_on_the_link() {
    let rate = constant(10_000_000_000);
    let mut dir = direction(rate.clone(), 0, QueueLimit::Bytes(ByteSize(1 << 20)));
    let mut asm = RunAssembler::new(RunPolicy::for_rate(&rate));
    enqueue(&mut dir, Nanos::ZERO, &gso_packet(10));
    // The first segment is due at 1.2 µs; the others are still being serialised.
    assert!(asm.poll(Nanos(1_200), &mut dir).is_none());
    assert_eq!(asm.held(), 1);
    assert_eq!(asm.next_wakeup(&dir), Some(Nanos(2_400)));
    let runs = drain(&mut asm, &mut dir, Nanos(1_200));
    assert_eq!(runs.len(), 1);
    assert!(runs[0].1.is_whole());
    assert_eq!(runs[0].0, Nanos(12_000));
}

#[test]
fn a_held_run_goes_at_its_deadline_if_its_continuation_never_comes() {
    let rate = constant(10_000_000_000);
    let mut dir = direction(rate.clone(), 0, QueueLimit::Bytes(ByteSize(1 << 20)));
    let mut asm = RunAssembler::new(RunPolicy::for_rate(&rate));
    let packet = gso_packet(3);
    // Only the first segment enters; the model still holds an unrelated long packet.
    let mut segs = Segment::all(&packet);
    let first = segs.next().unwrap();
    let _ = dir.enqueue(Nanos::ZERO, Packet { id: 0, len: first.len(), payload: first });
    let other = gso_packet(1);
    let big = Segment::all(&other).next().unwrap();
    // 200 kB claimed on the wire: 160 µs of serialisation, past the hold deadline.
    let _ = dir.enqueue(Nanos::ZERO, Packet { id: 1, len: 200_000, payload: big });
    assert!(asm.poll(Nanos(1_200), &mut dir).is_none(), "held: something is still on the link");
    assert_eq!(asm.next_wakeup(&dir), Some(Nanos(1_200) + MAX_RUN_SERIALIZATION));
    let run = asm.poll(Nanos(101_200), &mut dir).expect("released at the deadline");
    assert_eq!(run.range(), 0..1);
}

#[test]
fn a_trace_link_joins_segments_of_the_same_opportunity() {
    let trace = DeliveryTrace::from_timestamps(vec![1, 1, 1, 2], "t").unwrap();
    let rate = Rate::Trace(trace);
    let mut dir = direction(rate.clone(), 0, QueueLimit::Bytes(ByteSize(1 << 20)));
    let mut asm = RunAssembler::new(RunPolicy::for_rate(&rate));
    enqueue(&mut dir, Nanos::ZERO, &gso_packet(5));
    let runs = drain(&mut asm, &mut dir, Nanos::ZERO);
    let shape: Vec<(Nanos, Range<u16>)> = runs.iter().map(|(t, r)| (*t, r.range())).collect();
    // Three 1504-byte opportunities at 1 ms carry three 1500-byte segments (and 12 bytes of
    // the fourth, which completes at 2 ms with the fifth finishing in the next loop).
    assert_eq!(shape[0], (Nanos::from_millis(1), 0..3));
    assert_eq!(runs.iter().map(|(_, r)| r.segments()).sum::<u16>(), 5);
}
