//! Drop-tail limits in bytes, packets and time hold exactly.

use std::time::Duration;

use tcptail_emu::{
    Admission, DeliveryTrace, Direction, DropReason, Nanos, Packet, QueueLimit, Rate,
};
use tcptail_units::ByteSize;

use crate::util::{Lateness, cbr, constant, constant_bytes, drive};

/// Enqueues `lens` all at `now`, returning which were accepted.
fn burst(dir: &mut Direction<u64>, now: Nanos, lens: &[u32]) -> Vec<bool> {
    lens.iter()
        .enumerate()
        .map(|(i, &len)| {
            matches!(
                dir.enqueue(now, Packet { id: i as u64, len, payload: i as u64 }),
                Admission::Queued
            )
        })
        .collect()
}

#[test]
fn byte_limit_holds_exactly() {
    let mut dir = Direction::<u64>::new(constant_bytes(30_000_000, 15_000), 1);
    let accepted = burst(&mut dir, Nanos::ZERO, &[1500; 400]);
    // One in service (not in the queue) + exactly 10 x 1500 queued.
    assert_eq!(accepted.iter().filter(|&&a| a).count(), 11);
    assert!(accepted[..11].iter().all(|&a| a));
    assert_eq!(dir.backlog().queued_bytes, 15_000);
}

#[test]
fn byte_limit_admits_a_small_packet_that_still_fits() {
    let mut dir = Direction::<u64>::new(constant_bytes(30_000_000, 4_000), 1);
    // First goes into service; 1500 + 1500 queued = 3000; 1500 more would be 4500 > 4000; 1000
    // fits exactly.
    let accepted = burst(&mut dir, Nanos::ZERO, &[1500, 1500, 1500, 1500, 1000, 1]);
    assert_eq!(accepted, [true, true, true, false, true, false]);
    assert_eq!(dir.backlog().queued_bytes, 4_000);
}

#[test]
fn byte_limit_never_exceeded_under_sustained_overload() {
    let mut dir = Direction::<u64>::new(constant_bytes(30_000_000, 375_000), 1);
    let mut max_seen = 0;
    for (i, (at, len)) in
        cbr(Nanos::ZERO, Duration::from_micros(300), 30_000, 1500).into_iter().enumerate()
    {
        let _ = dir.enqueue(at, Packet { id: i as u64, len, payload: i as u64 });
        while dir.poll_release(at).is_some() {}
        max_seen = max_seen.max(dir.backlog().queued_bytes);
    }
    assert_eq!(max_seen, 375_000);
}

#[test]
fn packet_limit_holds_exactly() {
    let mut spec = constant(30_000_000);
    spec.queue.limit = QueueLimit::Packets(5);
    let mut dir = Direction::<u64>::new(spec, 1);
    let accepted = burst(&mut dir, Nanos::ZERO, &[40; 50]);
    assert_eq!(accepted.iter().filter(|&&a| a).count(), 6);
    assert_eq!(dir.backlog().queued_packets, 5);
    assert!(dir.backlog().in_service);
}

#[test]
fn time_limit_holds_exactly_at_constant_rate() {
    let mut spec = constant(30_000_000);
    spec.queue.limit = QueueLimit::Time(Duration::from_millis(10));
    // Burst: packet k would wait k * 400 us; admitted while that is <= 10 ms: k = 0..=25.
    let mut dir = Direction::<u64>::new(spec.clone(), 1);
    let accepted = burst(&mut dir, Nanos::ZERO, &[1500; 100]);
    assert_eq!(accepted.iter().filter(|&&a| a).count(), 26);

    // Sustained overload: no departing packet ever waited longer than the limit, and the limit
    // is what binds.
    let mut dir = Direction::<u64>::new(spec, 1);
    let arrivals = cbr(Nanos::ZERO, Duration::from_micros(300), 20_000, 1500);
    let run = drive(&mut dir, &arrivals, Lateness::None, Nanos::MAX);
    let max = run.released.iter().map(|(i, _)| i.queue_delay()).max().unwrap();
    assert!(max <= Duration::from_millis(10), "{max:?}");
    assert!(max > Duration::from_millis(10) - Duration::from_micros(400), "{max:?}");
    assert!(run.dropped.iter().all(|&(_, r)| r == DropReason::QueueFull));
    assert!(!run.dropped.is_empty());
}

#[test]
fn time_limit_holds_exactly_on_a_trace() {
    let mut spec = constant(1);
    spec.rate = Rate::Trace(DeliveryTrace::parse("1\n", "1ms").unwrap());
    spec.queue.limit = QueueLimit::Time(Duration::from_millis(20));
    let mut dir = Direction::<u64>::new(spec, 1);
    // 1504-byte packets, two per ms offered into one opportunity per ms.
    let arrivals = cbr(Nanos::from_micros(100), Duration::from_micros(500), 10_000, 1504);
    let run = drive(&mut dir, &arrivals, Lateness::None, Nanos::MAX);
    let max = run.released.iter().map(|(i, _)| i.queue_delay()).max().unwrap();
    assert!(max <= Duration::from_millis(20), "{max:?}");
    assert!(max > Duration::from_millis(19), "{max:?}");
    assert!(run.dropped.len() > 4_000);
}

#[test]
fn bytes_limit_from_bdp_is_usable() {
    let bdp = tcptail_units::Bdp {
        rate: tcptail_units::BitRate(30_000_000),
        rtt: Duration::from_millis(10),
    };
    let mut spec = constant(30_000_000);
    spec.queue.limit = QueueLimit::from_bdp(bdp, 10.0);
    assert_eq!(spec.queue.limit, QueueLimit::Bytes(ByteSize(375_000)));
    Direction::<u64>::try_new(spec, 0).unwrap();
}
