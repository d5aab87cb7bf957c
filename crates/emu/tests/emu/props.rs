//! Property tests: conservation, FIFO order, release bounds, schedule independent of polling,
//! and the trace parser.

use std::time::Duration;

use proptest::prelude::*;
use tcptail_emu::{
    DeliveryTrace, Direction, DirectionSpec, Discipline, DropReason, Event, Jitter, LossModel,
    Nanos, QueueLimit, QueueSpec, Rate, TraceError,
};
use tcptail_units::{BitRate, ByteSize};

use crate::util::{Lateness, drive, drive_with};

fn trace() -> impl Strategy<Value = DeliveryTrace> {
    prop::collection::vec(0u64..40, 1..30).prop_map(|mut v| {
        v.sort_unstable();
        let last = *v.last().unwrap_or(&0);
        v.push(last + 1);
        DeliveryTrace::from_timestamps(v, "prop").unwrap()
    })
}

fn spec() -> impl Strategy<Value = DirectionSpec> {
    let rate = prop_oneof![
        (500_000u64..200_000_000).prop_map(|r| Rate::Constant(BitRate(r))),
        trace().prop_map(Rate::Trace),
    ];
    let limit = prop_oneof![
        (1504u64..100_000).prop_map(|b| QueueLimit::Bytes(ByteSize(b))),
        (1u64..100).prop_map(QueueLimit::Packets),
        (1u64..40_000).prop_map(|us| QueueLimit::Time(Duration::from_micros(us))),
    ];
    let discipline = prop_oneof![
        Just(Discipline::Fifo),
        (1u64..10, 11u64..150).prop_map(|(t, i)| Discipline::Codel {
            target: Duration::from_millis(t),
            interval: Duration::from_millis(i),
            ecn: false,
        }),
    ];
    let loss = prop_oneof![
        Just(None),
        (0.0f64..0.3).prop_map(|p| Some(LossModel::Bernoulli { p })),
        (0.0f64..0.2, 0.05f64..1.0).prop_map(|(p, r)| Some(LossModel::GilbertElliott {
            p,
            r,
            h: 0.2,
            k: 0.99
        })),
    ];
    (rate, 0u64..20_000, prop::option::of(0.0f64..=1.0), loss, limit, discipline).prop_map(
        |(rate, delay_us, jitter, loss, limit, discipline)| {
            let delay = Duration::from_micros(delay_us);
            DirectionSpec {
                rate,
                delay,
                jitter: jitter.map(|f| Jitter::Uniform { max: delay.mul_f64(f) }),
                loss,
                queue: QueueSpec { limit, discipline },
                ecn_blackhole: None,
                reorder: None,
            }
        },
    )
}

fn arrivals() -> impl Strategy<Value = Vec<(Nanos, u32)>> {
    prop::collection::vec((0u64..1500, 1u32..=1500), 1..250).prop_map(|v| {
        let mut t = Nanos::ZERO;
        v.into_iter()
            .map(|(gap_us, len)| {
                t += Duration::from_micros(gap_us);
                (t, len)
            })
            .collect()
    })
}

fn codel_drops(events: &[Event]) -> usize {
    events.iter().filter(|e| matches!(e, Event::Drop { reason: DropReason::Codel, .. })).count()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, ..ProptestConfig::default() })]

    #[test]
    fn conservation_order_and_bounds(spec in spec(), arrivals in arrivals(), seed: u64, late_seed: u64) {
        let mut dir = Direction::<u64>::new(spec.clone(), seed).with_observer(Vec::new());
        let lateness = Lateness::Random { max: Duration::from_millis(3), seed: late_seed };
        let run = drive_with(&mut dir, &arrivals, lateness, Nanos::MAX, |d, run, enqueued| {
            // Conservation at every step: in = out + dropped + held.
            let held = d.backlog().packets();
            let dropped = run.dropped.len() + codel_drops(d.observer());
            assert_eq!(enqueued, run.released.len() + dropped + held);
        });
        // Everything comes out eventually.
        prop_assert_eq!(dir.backlog().packets(), 0);
        let events = dir.into_observer();
        prop_assert_eq!(arrivals.len(), run.released.len() + run.dropped.len() + codel_drops(&events));

        // FIFO: released in arrival order; releases never decrease.
        for pair in run.released.windows(2) {
            prop_assert!(pair[0].0.id < pair[1].0.id);
            prop_assert!(pair[0].0.scheduled <= pair[1].0.scheduled);
        }
        // Causality and delay bounds.
        let jitter = spec.jitter.map_or(Duration::ZERO, Jitter::bound);
        for (info, polled) in &run.released {
            prop_assert_eq!(info.arrival, arrivals[info.id as usize].0);
            prop_assert!(info.arrival <= info.start && info.start <= info.departure);
            prop_assert!(info.scheduled >= info.departure + spec.delay - jitter);
            prop_assert!(info.scheduled >= info.arrival + spec.delay - jitter);
            prop_assert!(*polled >= info.scheduled);
            if spec.jitter.is_none() {
                prop_assert!(info.scheduled >= info.arrival + spec.delay);
            }
        }
        // Events come in virtual-time order.
        for pair in events.windows(2) {
            prop_assert!(pair[0].at() <= pair[1].at(), "{:?} then {:?}", pair[0], pair[1]);
        }
    }

    #[test]
    fn schedule_does_not_depend_on_when_the_adapter_polls(
        spec in spec(), arrivals in arrivals(), seed: u64, late_seed: u64,
    ) {
        let mut exact = Direction::<u64>::new(spec.clone(), seed).with_observer(Vec::new());
        let mut late = Direction::<u64>::new(spec, seed).with_observer(Vec::new());
        let a = drive(&mut exact, &arrivals, Lateness::None, Nanos::MAX);
        let lateness = Lateness::Random { max: Duration::from_millis(5), seed: late_seed };
        let b = drive(&mut late, &arrivals, lateness, Nanos::MAX);
        prop_assert_eq!(a.infos(), b.infos());
        prop_assert_eq!(a.dropped, b.dropped);
        // Same events, except trailing trace opportunities the late driver advanced over.
        let end = a.end.min(b.end);
        let trim = |e: Vec<Event>| e.into_iter().filter(|e| e.at() <= end).collect::<Vec<_>>();
        prop_assert_eq!(trim(exact.into_observer()), trim(late.into_observer()));
    }

    #[test]
    fn trace_text_round_trips(mut stamps in prop::collection::vec(0u64..100_000, 1..200)) {
        stamps.sort_unstable();
        let last = *stamps.last().unwrap();
        stamps.push(last + 1);
        let trace = DeliveryTrace::from_timestamps(stamps.clone(), "p").unwrap();
        let parsed = DeliveryTrace::parse(&trace.to_string(), "p").unwrap();
        prop_assert_eq!(parsed.timestamps_ms(), &stamps[..]);
    }

    #[test]
    fn trace_parse_never_panics_and_ok_means_valid(text in "(?s).{0,300}") {
        if let Ok(t) = DeliveryTrace::parse(&text, "p") {
            let s = t.timestamps_ms();
            prop_assert!(!s.is_empty());
            prop_assert!(s.windows(2).all(|w| w[0] <= w[1]));
            prop_assert!(*s.last().unwrap() > 0);
        }
    }

    #[test]
    fn trace_errors_name_the_bad_line(
        mut stamps in prop::collection::vec(1u64..1000, 1..50),
        at in any::<prop::sample::Index>(),
        junk in "[a-z.+-][0-9a-z]{0,5}",
    ) {
        stamps.sort_unstable();
        let mut lines: Vec<String> = stamps.iter().map(u64::to_string).collect();
        let i = at.index(lines.len() + 1);
        lines.insert(i, junk);
        match DeliveryTrace::parse(&lines.join("\n"), "f.trace") {
            Err(TraceError::NotAnInteger { line, source_name, .. }) => {
                prop_assert_eq!(line, i + 1);
                prop_assert_eq!(source_name, "f.trace");
            }
            other => prop_assert!(false, "{:?}", other),
        }
    }

    #[test]
    fn decreasing_timestamps_name_the_line(
        mut stamps in prop::collection::vec(1u64..1000, 2..50),
        at in any::<prop::sample::Index>(),
    ) {
        stamps.sort_unstable();
        stamps.dedup();
        prop_assume!(stamps.len() >= 2);
        let i = 1 + at.index(stamps.len() - 1);
        stamps[i] = stamps[i - 1] - 1;
        let text: String = stamps.iter().map(|t| format!("{t}\n")).collect();
        match DeliveryTrace::parse(&text, "f.trace") {
            Err(TraceError::Decreasing { line, .. }) => prop_assert_eq!(line, i + 1),
            other => prop_assert!(false, "{:?}", other),
        }
    }
}
