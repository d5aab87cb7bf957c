//! [`Direction::enqueue_burst`] against [`Direction::enqueue`] segment by segment: for any
//! spec (rates, limits, loss, CoDel, fq_codel, ECN blackholes, jitter, reordering, path
//! events) and any sequence of GSO packets, the two give the same admissions, the same event
//! stream (arrivals, drops, marks, departures, path changes, at the same virtual times) and
//! the same release schedule, per MTU-sized segment.

use std::time::Duration;

use proptest::prelude::*;
use tcptail_units::{BitRate, ByteSize};

use super::*;
use crate::segment::Segment;
use crate::segment::test_packets::tcp_v4 as gso_packet;
use crate::spec::{Discipline, EcnBlackhole, Jitter, LossModel, QueueLimit, QueueSpec, Reorder};

/// One GSO packet arriving `gap_us` after the previous one.
#[derive(Debug, Clone)]
struct Arrival {
    gap_us: u64,
    segments: u16,
    last: u16,
    ecn: u8,
    port: u16,
}

fn arrival() -> impl Strategy<Value = Arrival> {
    (0u64..400, 1u16..=44, 1u16..=1460, 0u8..=3, 1u16..=4).prop_map(
        |(gap_us, segments, last, ecn, port)| Arrival { gap_us, segments, last, ecn, port },
    )
}

fn loss() -> impl Strategy<Value = Option<LossModel>> {
    prop_oneof![
        Just(None),
        Just(Some(LossModel::Bernoulli { p: 0.0 })),
        (0.001f64..0.3).prop_map(|p| Some(LossModel::Bernoulli { p })),
        Just(Some(LossModel::GilbertElliott { p: 0.05, r: 0.3, h: 0.2, k: 0.99 })),
    ]
}

fn limit() -> impl Strategy<Value = QueueLimit> {
    prop_oneof![
        (3_000u64..400_000).prop_map(|b| QueueLimit::Bytes(ByteSize(b))),
        (1u64..300).prop_map(QueueLimit::Packets),
        (0u64..20).prop_map(|ms| QueueLimit::Time(Duration::from_millis(ms))),
    ]
}

fn discipline() -> impl Strategy<Value = Discipline> {
    prop_oneof![
        3 => Just(Discipline::Fifo),
        1 => any::<bool>().prop_map(|ecn| Discipline::Codel {
            target: Duration::from_micros(500),
            interval: Duration::from_millis(10),
            ecn,
        }),
        1 => any::<bool>().prop_map(|ecn| Discipline::FqCodel {
            target: Duration::from_micros(500),
            interval: Duration::from_millis(10),
            quantum: 1514,
            flows: 16,
            ecn,
        }),
    ]
}

fn spec() -> impl Strategy<Value = DirectionSpec> {
    let rate = prop_oneof![
        Just(30_000_000u64),
        Just(1_000_000_000),
        Just(10_000_000_000),
        1_000_000u64..100_000_000_000
    ];
    let blackhole = prop_oneof![
        4 => Just(None),
        1 => Just(Some(EcnBlackhole::Data)),
        1 => Just(Some(EcnBlackhole::All)),
    ];
    let jitter = prop_oneof![3 => Just(None), 1 => Just(Some(Jitter::Uniform { max: Duration::from_micros(300) }))];
    let reorder = prop_oneof![
        3 => Just(None),
        1 => Just(Some(Reorder { p: 0.05, gap: Duration::from_micros(500) })),
    ];
    (rate, 0u64..5_000, jitter, loss(), limit(), discipline(), blackhole, reorder).prop_map(
        |(bps, delay_us, jitter, loss, limit, discipline, ecn_blackhole, reorder)| DirectionSpec {
            rate: Rate::Constant(BitRate(bps)),
            delay: Duration::from_micros(delay_us.max(if jitter.is_some() { 300 } else { 0 })),
            jitter,
            loss,
            queue: QueueSpec { limit, discipline },
            ecn_blackhole,
            reorder,
        },
    )
}

fn events() -> impl Strategy<Value = Vec<PathEvent>> {
    let event = (0u64..30, 0u8..5).prop_map(|(ms, kind)| PathEvent {
        at: Duration::from_millis(ms),
        change: match kind {
            0 => PathChange::Blackhole,
            1 => PathChange::Restore,
            2 => PathChange::LossBurst { p: 0.5, duration: Duration::from_millis(3) },
            3 => PathChange::Rate(BitRate(500_000_000)),
            _ => PathChange::DelayBy(1_000_000),
        },
    });
    prop::collection::vec(event, 0..4)
}

/// What one way of admitting produced: drops in order, releases in order (segment and
/// schedule), and every event.
#[derive(Debug, PartialEq)]
struct Outcome {
    dropped: Vec<(u64, DropReason)>,
    released: Vec<(u64, u16, Option<crate::wire::Ecn>, ReleaseInfo)>,
    events: Vec<Event>,
}

fn run(spec: &DirectionSpec, schedule: &[PathEvent], arrivals: &[Arrival], burst: bool) -> Outcome {
    let mut dir = Direction::<Segment>::new(spec.clone(), 7).with_observer(Vec::<Event>::new());
    dir.schedule(schedule).expect("valid events");
    let mut out = Outcome { dropped: Vec::new(), released: Vec::new(), events: Vec::new() };
    let (mut now, mut id) = (Nanos::ZERO, 0u64);
    let release = |dir: &mut Direction<Segment, Vec<Event>>, now, out: &mut Outcome| {
        while let Some((seg, info)) = dir.poll_release(now) {
            out.released.push((info.id, seg.index(), seg.ecn_override(), info));
        }
    };
    for a in arrivals {
        now += Duration::from_micros(a.gap_us);
        release(&mut dir, now, &mut out);
        let packet = gso_packet(a.segments, a.last, a.ecn, a.port);
        let segments: Vec<Packet<Segment>> = Segment::all(&packet)
            .map(|s| {
                id += 1;
                Packet { id, len: s.len(), payload: s }
            })
            .collect();
        if burst {
            let mut dropped = Vec::new();
            dir.enqueue_burst(now, segments, |seg, reason| dropped.push((seg, reason)));
            // The payload handed back is the dropped segment's own.
            for (seg, reason) in dropped {
                let id = id - u64::from(a.segments) + 1 + u64::from(seg.index());
                out.dropped.push((id, reason));
            }
        } else {
            for p in segments {
                let pid = p.id;
                if let Admission::Dropped { reason, .. } = dir.enqueue(now, p) {
                    out.dropped.push((pid, reason));
                }
            }
        }
    }
    for _ in 0..100_000 {
        let Some(next) = dir.next_wakeup() else { break };
        now = next.max(now);
        release(&mut dir, now, &mut out);
    }
    out.events = dir.into_observer();
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn a_burst_is_admitted_exactly_as_its_segments_one_by_one(
        spec in spec(),
        schedule in events(),
        arrivals in prop::collection::vec(arrival(), 1..60),
    ) {
        prop_assume!(spec.validate().is_ok());
        prop_assume!(validate_events(&spec, &schedule).is_ok());
        let one_by_one = run(&spec, &schedule, &arrivals, false);
        let burst = run(&spec, &schedule, &arrivals, true);
        prop_assert_eq!(&one_by_one, &burst);
        // Conservation: every segment is released or dropped (reported) exactly once.
        let segments: u64 = arrivals.iter().map(|a| u64::from(a.segments)).sum();
        let accounted = burst.released.len() as u64
            + burst.events.iter().filter(|e| matches!(e, Event::Drop { .. })).count() as u64;
        prop_assert_eq!(accounted, segments);
    }
}

#[test]
fn the_fast_path_is_taken_where_segments_are_alike_and_not_elsewhere() {
    let queue = QueueSpec::drop_tail(QueueLimit::Bytes(ByteSize(150_000_000)));
    let plain = DirectionSpec::constant(BitRate(10_000_000_000), Duration::from_millis(60), queue);
    let dir = Direction::<Segment>::new(plain.clone(), 1);
    assert!(dir.treats_alike(Nanos::ZERO));
    let lossy = DirectionSpec { loss: Some(LossModel::Bernoulli { p: 0.01 }), ..plain.clone() };
    assert!(!Direction::<Segment>::new(lossy, 1).treats_alike(Nanos::ZERO));
    let blackholed = DirectionSpec { ecn_blackhole: Some(EcnBlackhole::Data), ..plain.clone() };
    assert!(!Direction::<Segment>::new(blackholed, 1).treats_alike(Nanos::ZERO));
    let timed = QueueSpec::drop_tail(QueueLimit::Time(Duration::from_millis(5)));
    let timed = DirectionSpec { queue: timed, ..plain.clone() };
    assert!(!Direction::<Segment>::new(timed, 1).treats_alike(Nanos::ZERO));
    // A loss burst makes segments differ while it lasts.
    let mut dir = Direction::<Segment>::new(plain, 1);
    let burst = PathChange::LossBurst { p: 0.2, duration: Duration::from_millis(2) };
    dir.schedule(&[PathEvent { at: Duration::from_millis(1), change: burst }]).unwrap();
    dir.advance(Nanos::from_millis(1));
    assert!(!dir.treats_alike(Nanos::from_millis(1)));
    assert!(dir.treats_alike(Nanos::from_millis(3)));
}

#[test]
fn a_burst_that_crosses_the_byte_limit_keeps_the_segments_that_fit() {
    // 10 full segments (1500 bytes) and a 540-byte last one into room for 3 of them behind the
    // one in service: as on a wire, the first goes into service, three queue, six are tail
    // dropped, and the short last segment still fits.
    let queue = QueueSpec::drop_tail(QueueLimit::Bytes(ByteSize(3 * 1500 + 600)));
    let spec = DirectionSpec::constant(BitRate(1_000_000), Duration::ZERO, queue);
    let mut dir = Direction::<Segment>::new(spec, 1);
    let packet = gso_packet(11, 500, 0, 1);
    let segments =
        Segment::all(&packet).zip(0..).map(|(s, id)| Packet { id, len: s.len(), payload: s });
    let mut dropped = Vec::new();
    let queued = dir.enqueue_burst(Nanos::ZERO, segments, |s, r| dropped.push((s.index(), r)));
    assert_eq!(queued, 5);
    let expect: Vec<(u16, DropReason)> = (4..10).map(|i| (i, DropReason::QueueFull)).collect();
    assert_eq!(dropped, expect);
    let backlog = dir.backlog();
    assert!(backlog.in_service);
    assert_eq!((backlog.queued_packets, backlog.queued_bytes), (4, 3 * 1500 + 540));
}
