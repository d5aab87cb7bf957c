//! Mahimahi trace mode: capacity, looping, opportunity sharing, unused opportunities.

use std::time::Duration;

use tcptail_emu::{DeliveryTrace, Direction, DirectionSpec, Event, Nanos, Packet, Rate, Stats};

use crate::util::{Lateness, assert_close, cbr, constant, drive};

fn trace_spec(text: &str) -> DirectionSpec {
    let mut spec = constant(1);
    spec.rate = Rate::Trace(DeliveryTrace::parse(text, "test.trace").unwrap());
    spec
}

fn opportunities(events: &[Event]) -> Vec<(u64, u32)> {
    events
        .iter()
        .filter_map(|e| match *e {
            Event::Opportunity { at, used, .. } => Some((at.as_millis(), used)),
            _ => None,
        })
        .collect()
}

#[test]
fn one_line_per_ms_carries_12_032_mbit() {
    let text: String = (1..=1000).map(|t| format!("{t}\n")).collect();
    let mut dir = Direction::<u64>::new(trace_spec(&text), 1);
    // Offer 1500-byte packets at 16 Mbit/s for 10 s: the link is always busy.
    let arrivals = cbr(Nanos::ZERO, Duration::from_micros(750), 13_334, 1500);
    let run = drive(&mut dir, &arrivals, Lateness::None, Nanos::from_millis(10_000));
    // Whole-byte accounting: every opportunity carries exactly 1504 bytes, so after n
    // opportunities at most one packet is partly sent.
    let bytes: u64 = run.released.iter().map(|(i, _)| u64::from(i.len)).sum();
    let opportunities = 10_000u64; // 1 ms .. 10 s
    assert!(bytes <= opportunities * 1504 && bytes + 1500 > opportunities * 1504, "{bytes}");
    assert_close(bytes as f64 * 8.0 / 10.0, 12_032_000.0, 0.001);
}

#[test]
fn the_trace_loops_with_its_last_timestamp_as_period() {
    let mut dir = Direction::<u64>::new(trace_spec("0\n0\n3\n"), 1).with_observer(Vec::new());
    dir.advance(Nanos::from_millis(9));
    let times: Vec<u64> = opportunities(dir.observer()).iter().map(|o| o.0).collect();
    assert_eq!(times, [0, 0, 3, 3, 3, 6, 6, 6, 9, 9, 9]);

    let mut dir = Direction::<u64>::new(trace_spec("5\n10\n"), 1).with_observer(Vec::new());
    dir.advance(Nanos::from_millis(40));
    let times: Vec<u64> = opportunities(dir.observer()).iter().map(|o| o.0).collect();
    assert_eq!(times, [5, 10, 15, 20, 25, 30, 35, 40]);
}

#[test]
fn several_small_packets_share_one_opportunity() {
    let mut dir = Direction::<u64>::new(trace_spec("1\n"), 1).with_observer(Vec::new());
    let arrivals = [
        (Nanos::from_micros(100), 500),
        (Nanos::from_micros(200), 500),
        (Nanos::from_micros(300), 500),
        (Nanos::from_micros(400), 500),
    ];
    let run = drive(&mut dir, &arrivals, Lateness::None, Nanos::MAX);
    let deps: Vec<u64> = run.released.iter().map(|(i, _)| i.departure.as_millis()).collect();
    // 3 x 500 = 1500 <= 1504 fit the 1 ms opportunity; the fourth needs 496 more bytes of
    // the 2 ms one after using the last 4 bytes of the first.
    assert_eq!(deps, [1, 1, 1, 2]);
    assert_eq!(run.released[3].0.start, Nanos::from_millis(1));
    assert_eq!(opportunities(dir.observer())[..2], [(1, 1504), (2, 496)]);
}

#[test]
fn a_packet_arriving_at_an_opportunity_waits_for_the_next() {
    let mut dir = Direction::<u64>::new(trace_spec("1\n"), 1);
    let run = drive(&mut dir, &[(Nanos::from_millis(3), 100)], Lateness::None, Nanos::MAX);
    assert_eq!(run.released[0].0.departure, Nanos::from_millis(4));
}

#[test]
fn unused_opportunities_are_reported() {
    let mut dir =
        Direction::<u64>::new(trace_spec("1\n"), 1).with_observer((Vec::new(), Stats::default()));
    let _ = dir.enqueue(Nanos::from_micros(4500), Packet { id: 0, len: 1000, payload: 0 });
    // Nothing to wake up for after the packet is gone; the adapter flushes at the end.
    while dir.poll_release(Nanos::from_millis(5)).is_some() {}
    assert_eq!(dir.next_wakeup(), None);
    dir.advance(Nanos::from_millis(10));
    let (events, stats) = dir.observer();
    assert_eq!(
        opportunities(events),
        [(1, 0), (2, 0), (3, 0), (4, 0), (5, 1000), (6, 0), (7, 0), (8, 0), (9, 0), (10, 0)]
    );
    let summary = stats.summary();
    let opp = summary.opportunities.unwrap();
    assert_eq!((opp.total, opp.unused, opp.unused_bytes), (10, 9, 10 * 1504 - 1000));
}

#[test]
fn delay_and_wakeups_in_trace_mode() {
    let mut spec = trace_spec("10\n");
    spec.delay = Duration::from_millis(20);
    let mut dir = Direction::<u64>::new(spec, 1);
    let _ = dir.enqueue(Nanos::from_millis(2), Packet { id: 0, len: 3000, payload: 0 });
    // 3000 bytes need the opportunities at 10 and 20 ms; release 20 ms later.
    assert_eq!(dir.next_wakeup(), Some(Nanos::from_millis(40)));
    assert!(dir.poll_release(Nanos::from_millis(39)).is_none());
    let (_, info) = dir.poll_release(Nanos::from_millis(40)).unwrap();
    assert_eq!((info.start, info.departure), (Nanos::from_millis(10), Nanos::from_millis(20)));
}

#[test]
fn starting_at_moves_the_trace_epoch() {
    let mut dir = Direction::<u64>::new(trace_spec("5\n"), 1)
        .starting_at(Nanos::from_millis(1000))
        .with_observer(Vec::new());
    dir.advance(Nanos::from_millis(1012));
    let times: Vec<u64> = opportunities(dir.observer()).iter().map(|o| o.0).collect();
    assert_eq!(times, [1005, 1010]);
}

#[test]
fn late_polling_does_not_change_a_trace_schedule() {
    let text: String = (1..=100).filter(|t| t % 3 != 0).map(|t| format!("{t}\n")).collect();
    let mut spec = trace_spec(&text);
    spec.queue.discipline = tcptail_emu::Discipline::codel();
    spec.delay = Duration::from_millis(7);
    let arrivals = cbr(Nanos::ZERO, Duration::from_micros(700), 20_000, 1200);
    let a = drive(&mut Direction::new(spec.clone(), 1), &arrivals, Lateness::None, Nanos::MAX);
    let b = drive(
        &mut Direction::new(spec, 1),
        &arrivals,
        Lateness::Random { max: Duration::from_millis(3), seed: 5 },
        Nanos::MAX,
    );
    assert_eq!(a.infos(), b.infos());
}
