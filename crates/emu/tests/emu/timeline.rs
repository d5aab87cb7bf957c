//! Path events on the virtual clock: each takes effect at its own time, whenever the driver
//! happens to call.

use std::time::Duration;

use tcptail_emu::{Direction, DropReason, Event, Nanos, PathEvent};

use crate::util::{Lateness, cbr, constant, drive};

const MS: Duration = Duration::from_millis(1);

fn events(list: &[&str]) -> Vec<PathEvent> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

#[test]
fn a_blackhole_stops_delivery_at_its_time_and_restore_resumes_it() {
    let mut spec = constant(100_000_000);
    spec.delay = 10 * MS;
    // A late driver (300 us behind every wakeup) must not change what is delivered.
    for lateness in [Lateness::None, Lateness::Fixed(Duration::from_micros(300))] {
        let mut dir = Direction::<u64>::new(spec.clone(), 1).with_observer(Vec::new());
        dir.schedule(&events(&["100ms:blackhole", "200ms:restore"])).unwrap();
        // 1500 B every 1 ms for 400 ms.
        let arrivals = cbr(Nanos::ZERO, MS, 400, 1500);
        let run = drive(&mut dir, &arrivals, lateness, Nanos::MAX);
        let (t0, t1) = (Nanos::from_millis(100), Nanos::from_millis(200));
        for (info, _) in &run.released {
            // Delivered before the outage, or sent after it ended.
            assert!(info.scheduled <= t0 || info.arrival >= t1, "{info:?} {lateness:?}");
        }
        // Packets arriving at 0..=89 ms were due by 100.12 ms: those due up to 100 ms leave,
        // the rest of what was in flight and every arrival in [100, 200) ms is dropped.
        let delivered = run.released.len();
        let dropped = dir
            .observer()
            .iter()
            .filter(|e| matches!(e, Event::Drop { reason: DropReason::Blackhole, .. }))
            .count();
        assert_eq!(delivered + dropped, 400, "conservation");
        assert_eq!(dropped, 100 + 10, "{lateness:?}");
        let changes: Vec<(Nanos, Nanos)> = dir
            .observer()
            .iter()
            .filter_map(|e| match *e {
                Event::PathChange { at, applied, .. } => Some((at, applied)),
                _ => None,
            })
            .collect();
        assert_eq!(changes.len(), 2);
        assert_eq!((changes[0].0, changes[1].0), (t0, t1));
        let late = match lateness {
            Lateness::Fixed(d) => d,
            _ => Duration::ZERO,
        };
        assert!(changes[0].1 - changes[0].0 <= late, "applied {:?}", changes[0]);
    }
}

#[test]
fn a_rate_step_changes_the_departure_spacing_at_its_time() {
    let mut dir = Direction::<u64>::new(constant(10_000_000), 1);
    dir.schedule(&events(&["1s:rate=20mbit"])).unwrap();
    // Overload: 1500 B every 0.5 ms (24 Mbit/s) for 2 s.
    let arrivals = cbr(Nanos::ZERO, Duration::from_micros(500), 4000, 1500);
    let run = drive(&mut dir, &arrivals, Lateness::None, Nanos::MAX);
    let deps: Vec<Nanos> = run.released.iter().map(|(i, _)| i.departure).collect();
    let spacing = |from: Nanos| {
        let w: Vec<&Nanos> = deps.iter().filter(|&&d| d > from).take(2).collect();
        *w[1] - *w[0]
    };
    assert_eq!(spacing(Nanos::from_millis(500)), Duration::from_micros(1200));
    assert_eq!(spacing(Nanos::from_millis(1500)), Duration::from_micros(600));
}

#[test]
fn a_loss_burst_loses_only_while_it_lasts() {
    let mut dir = Direction::<u64>::new(constant(100_000_000), 1);
    dir.schedule(&events(&["100ms:loss=100%,for=50ms"])).unwrap();
    let arrivals = cbr(Nanos::ZERO, MS, 300, 1000);
    let run = drive(&mut dir, &arrivals, Lateness::None, Nanos::MAX);
    let lost: Vec<u64> =
        run.dropped.iter().filter(|(_, r)| *r == DropReason::Loss).map(|(id, _)| *id).collect();
    assert_eq!(lost, (100..150).collect::<Vec<u64>>());
}

#[test]
fn a_delay_change_applies_to_packets_departing_after_it() {
    let mut spec = constant(100_000_000);
    spec.delay = 10 * MS;
    let mut dir = Direction::<u64>::new(spec, 1);
    dir.schedule(&events(&["100ms:delay=+50ms", "300ms:delay=-55ms"])).unwrap();
    let arrivals = cbr(Nanos::ZERO, MS, 400, 1500);
    let run = drive(&mut dir, &arrivals, Lateness::None, Nanos::MAX);
    for (info, _) in &run.released {
        let one_way = info.scheduled - info.departure;
        let expected = match info.departure {
            d if d < Nanos::from_millis(100) => 10 * MS,
            d if d < Nanos::from_millis(300) => 60 * MS,
            _ => 5 * MS,
        };
        // Releases never go backwards: right after the cut, packets wait for the earlier ones.
        assert!(one_way >= expected, "{info:?}");
        if info.departure > Nanos::from_millis(360) || info.departure < Nanos::from_millis(300) {
            assert_eq!(one_way, expected, "{info:?}");
        }
    }
    assert_eq!(run.released.len(), 400);
}

#[test]
fn invalid_timelines_are_refused() {
    let mut dir = Direction::<u64>::new(constant(1_000_000), 1);
    let e = dir.schedule(&events(&["1s:delay=-1ms"])).unwrap_err();
    assert_eq!(e.field, "event[0]");
}

#[test]
fn a_rate_step_on_a_trace_scales_it_from_its_time() {
    // A 10 ms trace with a fade: opportunities at 1-5 ms, none at 6-9 ms, one at 10 ms
    // (6 x 1504 B per 10 ms: 7.2192 Mbit/s).
    let trace = tcptail_emu::DeliveryTrace::parse("1\n2\n3\n4\n5\n10\n", "fade.trace").unwrap();
    let mut spec = constant(1);
    spec.rate = tcptail_emu::Rate::Trace(trace.clone());
    let mean = trace.mean_rate().bits_per_second();
    let mut dir = Direction::<u64>::new(spec.clone(), 1).with_observer(Vec::new());
    let half = format!("1s:rate={}bit", mean / 2);
    let restore = format!("2s:rate={mean}bit");
    dir.schedule(&events(&[&half, &restore])).unwrap();
    dir.advance(Nanos::from_millis(3000));
    let times: Vec<u64> = dir
        .observer()
        .iter()
        .filter_map(|e| match *e {
            Event::Opportunity { at, .. } => Some(at.as_millis()),
            _ => None,
        })
        .collect();
    let count = |from: u64, to: u64| times.iter().filter(|&&t| t > from && t <= to).count();
    // As recorded, at half the mean, as recorded again: 600, 300 and 600 opportunities.
    assert_eq!((count(0, 1000), count(1000, 2000), count(2000, 3000)), (600, 300, 600));
    // The fade stays where it was: no opportunity at 6-9 ms of any period.
    assert!(times.iter().all(|t| !(6..=9).contains(&(t % 10))), "{times:?}");

    // Above the mean each opportunity repeats within its millisecond.
    let mut dir = Direction::<u64>::new(spec.clone(), 1).with_observer(Vec::new());
    dir.schedule(&events(&[&format!("0s:rate={}bit", mean * 3)])).unwrap();
    dir.advance(Nanos::from_millis(10));
    let n = dir.observer().iter().filter(|e| matches!(e, Event::Opportunity { .. })).count();
    assert_eq!(n, 18);

    // Far beyond the trace is refused, naming the trace.
    let e = tcptail_emu::validate_events(&spec, &events(&["1s:rate=100gbit"])).unwrap_err();
    assert!(e.problem.contains("fade.trace") && e.problem.contains("scales a trace"), "{e}");
}
