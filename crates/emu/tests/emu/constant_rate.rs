//! Constant-rate link and propagation delay, with a virtual clock.

use std::time::Duration;

use tcptail_emu::{Direction, Event, Jitter, Nanos, Packet, Stats};

use crate::util::{Lateness, assert_close, cbr, constant, drive};

const MS: Duration = Duration::from_millis(1);

#[test]
fn back_to_back_mtu_packets_leave_exactly_len_times_8_over_rate_apart() {
    // 1500 B at 30 Mbit/s = 400 us.
    let mut dir = Direction::<u64>::new(constant(30_000_000), 1);
    let arrivals = cbr(Nanos::from_millis(1), Duration::ZERO, 1000, 1500);
    let run = drive(&mut dir, &arrivals, Lateness::None, Nanos::MAX);
    assert_eq!(run.released.len(), 1000);
    for (k, (info, _)) in run.released.iter().enumerate() {
        let k = k as u64;
        assert_eq!(info.start, Nanos(1_000_000 + 400_000 * k));
        assert_eq!(info.departure, Nanos(1_000_000 + 400_000 * (k + 1)));
        assert_eq!(info.scheduled, info.departure);
    }
}

fn long_run_throughput(bits_per_second: u64, gap: Duration, count: usize) -> f64 {
    let mut dir = Direction::<u64>::new(constant(bits_per_second), 1);
    let arrivals = cbr(Nanos::ZERO, gap, count, 1500);
    let run = drive(&mut dir, &arrivals, Lateness::None, Nanos::MAX);
    let first = run.released.first().unwrap().0.start;
    let last = run.released.last().unwrap().0.departure;
    let bits = run.released.len() as f64 * 1500.0 * 8.0;
    bits / (last - first).as_secs_f64()
}

#[test]
fn long_run_throughput_equals_the_rate() {
    // Rates whose per-packet time is not a whole number of nanoseconds, offered slightly
    // above the rate so the link never idles.
    for (rate, gap_ns) in
        [(7_000_000u64, 1_700_000u64), (29_999_999, 399_000), (999_999_937, 11_000)]
    {
        let got = long_run_throughput(rate, Duration::from_nanos(gap_ns), 50_000);
        assert_close(got, rate as f64, 0.001);
        // In fact the carried remainder makes it exact to a nanosecond over the run.
        assert_close(got, rate as f64, 1e-6);
    }
}

#[test]
fn late_polling_changes_neither_schedule_nor_throughput() {
    let arrivals = cbr(Nanos::ZERO, Duration::from_micros(300), 20_000, 1500);
    let mut spec = constant(30_000_000);
    spec.delay = 5 * MS;
    spec.queue.limit = tcptail_emu::QueueLimit::Bytes(tcptail_units::ByteSize(375_000));
    let on_time =
        drive(&mut Direction::new(spec.clone(), 7), &arrivals, Lateness::None, Nanos::MAX);
    let late = drive(
        &mut Direction::new(spec.clone(), 7),
        &arrivals,
        Lateness::Fixed(Duration::from_micros(300)),
        Nanos::MAX,
    );
    let jittery = drive(
        &mut Direction::new(spec, 7),
        &arrivals,
        Lateness::Random { max: Duration::from_millis(2), seed: 99 },
        Nanos::MAX,
    );
    assert_eq!(on_time.infos(), late.infos());
    assert_eq!(on_time.infos(), jittery.infos());
    assert_eq!(on_time.dropped, late.dropped);
    // The adapter sees its own lateness, and only there.
    // (Polls at arrival times pick some releases up earlier than the late timer would.)
    let lateness: Vec<Duration> = late.released.iter().map(|(i, at)| i.lateness(*at)).collect();
    assert!(lateness.iter().all(|&l| l <= Duration::from_micros(300)));
    assert_eq!(lateness.iter().max(), Some(&Duration::from_micros(300)));
    assert!(on_time.released.iter().all(|(i, polled)| i.lateness(*polled).is_zero()));
}

#[test]
fn a_lone_packet_is_released_exactly_delay_after_its_serialisation() {
    let mut spec = constant(30_000_000);
    spec.delay = 10 * MS;
    let mut dir = Direction::<u64>::new(spec, 1);
    let _ = dir.enqueue(Nanos::from_millis(1), Packet { id: 9, len: 1500, payload: 9 });
    let due = Nanos(1_000_000 + 400_000 + 10_000_000);
    assert_eq!(dir.next_wakeup(), Some(due));
    assert!(dir.poll_release(Nanos(due.0 - 1)).is_none());
    let (payload, info) = dir.poll_release(due).unwrap();
    assert_eq!(payload, 9);
    assert_eq!(info.departure, Nanos(1_400_000));
    assert_eq!(info.scheduled, due);
    assert_eq!(info.queue_delay(), Duration::ZERO);
    assert_eq!(dir.next_wakeup(), None);
}

#[test]
fn an_idle_link_starts_the_next_packet_at_its_arrival() {
    let mut dir = Direction::<u64>::new(constant(10_000_000), 1);
    let arrivals = [(Nanos::ZERO, 1250), (Nanos::from_millis(50), 1250)];
    let run = drive(&mut dir, &arrivals, Lateness::None, Nanos::MAX);
    assert_eq!(run.released[1].0.start, Nanos::from_millis(50));
    assert_eq!(run.released[1].0.departure, Nanos::from_millis(51));
}

fn jitter_run(jitter: Jitter) -> Vec<tcptail_emu::ReleaseInfo> {
    let mut spec = constant(30_000_000);
    spec.delay = 10 * MS;
    spec.jitter = Some(jitter);
    let mut dir = Direction::<u64>::new(spec, 3);
    let arrivals = cbr(Nanos::ZERO, Duration::from_micros(500), 10_000, 1500);
    drive(&mut dir, &arrivals, Lateness::None, Nanos::MAX).infos()
}

#[test]
fn jitter_never_reorders_and_stays_in_bounds() {
    for jitter in
        [Jitter::Uniform { max: 5 * MS }, Jitter::Normal { sigma: Duration::from_micros(1500) }]
    {
        let infos = jitter_run(jitter);
        assert_eq!(infos.len(), 10_000);
        for pair in infos.windows(2) {
            assert!(pair[0].id < pair[1].id);
            assert!(pair[0].scheduled <= pair[1].scheduled);
        }
        // Holding a packet behind the previous release never pushes it past delay + bound,
        // because the previous packet departed earlier.
        for info in &infos {
            let one_way = info.scheduled - info.departure;
            assert!((5 * MS..=15 * MS).contains(&one_way), "{one_way:?}");
        }
        // It does vary.
        let distinct: std::collections::HashSet<_> =
            infos.iter().map(|i| i.scheduled - i.departure).collect();
        assert!(distinct.len() > 1000, "{jitter:?}");
    }
}

#[test]
fn jitter_is_reproducible_from_the_seed() {
    let a = jitter_run(Jitter::Uniform { max: 5 * MS });
    let b = jitter_run(Jitter::Uniform { max: 5 * MS });
    assert_eq!(a, b);
}

#[test]
fn stats_match_the_schedule() {
    let mut dir = Direction::<u64>::new(constant(30_000_000), 1).with_observer(Stats::default());
    let arrivals = cbr(Nanos::ZERO, Duration::ZERO, 100, 1500);
    let run = drive(&mut dir, &arrivals, Lateness::None, Nanos::MAX);
    let stats = dir.observer();
    assert_eq!(stats.arrivals().packets, 100);
    assert_eq!(stats.departures().bytes, 150_000);
    // Packet k waited k * 400 us.
    let max = run.released[99].0.queue_delay().as_secs_f64();
    assert_close(stats.queue_delay_max().as_secs_f64(), max, 0.001);
    assert_close(stats.queue_delay_quantile(0.5).as_secs_f64(), 0.0198, 0.01);
}

#[test]
fn departure_events_carry_the_queueing_delay() {
    let mut dir = Direction::<u64>::new(constant(30_000_000), 1).with_observer(Vec::<Event>::new());
    drive(&mut dir, &cbr(Nanos::ZERO, Duration::ZERO, 3, 1500), Lateness::None, Nanos::MAX);
    let delays: Vec<_> = dir.observer().iter().filter_map(Event::queue_delay).collect();
    assert_eq!(delays, [Duration::ZERO, Duration::from_micros(400), Duration::from_micros(800)]);
}
