use proptest::prelude::*;

use super::*;

const MS: Duration = Duration::from_millis(1);

/// 30 Mbit/s = 3.75 MB/s, not app-limited.
fn inputs(notsent: u32) -> Inputs {
    Inputs {
        notsent_bytes: notsent,
        delivery_rate: Some(3_750_000),
        app_limited: Some(false),
        pacing_rate: Some(4_000_000),
        cwnd_segs: 30,
        mss_bytes: 1448,
        srtt: 10 * MS,
        min_rtt: Some(10 * MS),
    }
}

#[test]
fn estimate_is_notsent_over_delivery_rate() {
    let e = inputs(37_500).estimate().unwrap();
    assert_eq!(e.delay, 10 * MS);
    assert_eq!(e.source, RateSource::DeliveryRate);
}

#[test]
fn app_limited_falls_back_to_min_of_pacing_and_cwnd_per_srtt() {
    let mut i = inputs(43_440);
    i.app_limited = Some(true);
    // cwnd/srtt = 30 × 1448 / 10 ms = 4.344 MB/s > pacing 4 MB/s.
    assert_eq!(i.rate(), Some((4_000_000, RateSource::PacingRate)));
    i.pacing_rate = Some(u64::MAX);
    assert_eq!(i.rate(), Some((4_344_000, RateSource::CwndPerSrtt)));
    assert_eq!(i.estimate().unwrap().delay, 10 * MS);
    i.srtt = Duration::ZERO;
    i.min_rtt = Some(20 * MS);
    assert_eq!(i.rate(), Some((2_172_000, RateSource::CwndPerSrtt)));
    i.min_rtt = None;
    assert_eq!(i.estimate(), None);
}

#[test]
fn threshold_admits_below_and_waits_the_excess_above() {
    let mut g = Governor::new(GovernorConfig::new(Mode::Threshold(10 * MS)));
    assert_eq!(g.observe(Duration::ZERO, &inputs(30_000)).admission, Admission::Admit);
    // 15 ms queued: wait the 5 ms excess.
    let v = g.observe(MS, &inputs(56_250));
    assert_eq!(v.admission, Admission::Wait(5 * MS));
    // 100 ms queued: the wait is capped so the writer re-checks.
    assert_eq!(g.observe(2 * MS, &inputs(375_000)).admission, Admission::Wait(5 * MS));
}

#[test]
fn no_rate_admits_rather_than_wedging() {
    let mut g = Governor::new(GovernorConfig::new(Mode::Threshold(MS)));
    let none = Inputs { notsent_bytes: 1 << 30, ..Inputs::default() };
    assert_eq!(g.observe(Duration::ZERO, &none).admission, Admission::Admit);
}

#[test]
fn cached_fast_path_counts_what_was_written_and_expires() {
    let mut g = Governor::new(GovernorConfig::new(Mode::Threshold(10 * MS)));
    g.observe(Duration::ZERO, &inputs(18_750)); // 5 ms
    assert!(g.admit_cached(MS));
    g.on_written(18_750); // now at most 10 ms
    assert!(g.admit_cached(MS));
    g.on_written(1);
    assert!(!g.admit_cached(MS), "the upper bound exceeds the threshold");
    g.observe(2 * MS, &inputs(0));
    assert!(g.admit_cached(4 * MS));
    assert!(!g.admit_cached(5 * MS), "snapshot older than refresh");
}

#[test]
fn static_lowat_is_set_once() {
    let mut g = Governor::new(GovernorConfig::new(Mode::StaticLowat(16_384)));
    assert!(!g.admit_cached(Duration::ZERO));
    let v = g.observe(Duration::ZERO, &inputs(0));
    assert_eq!((v.admission, v.set_lowat), (Admission::Admit, Some(16_384)));
    g.lowat_applied(16_384);
    assert_eq!(g.observe(MS, &inputs(0)).set_lowat, None);
    assert!(g.admit_cached(100 * MS));
}

#[test]
fn adaptive_lowat_tracks_the_rate_with_hysteresis() {
    let mut g = Governor::new(GovernorConfig::new(Mode::AdaptiveLowat(10 * MS)));
    // No rate yet: the floor.
    let v = g.observe(Duration::ZERO, &Inputs::default());
    assert_eq!(v.set_lowat, Some(4096));
    g.lowat_applied(4096);
    // 3.75 MB/s × 10 ms × 2 = 75 KB.
    let v = g.observe(MS, &inputs(0));
    assert_eq!((v.admission, v.set_lowat), (Admission::Admit, Some(75_000)));
    g.lowat_applied(75_000);
    let mut slower = inputs(0);
    slower.delivery_rate = Some(3_500_000); // -6.7 %: within hysteresis
    assert_eq!(g.observe(2 * MS, &slower).set_lowat, None);
    slower.delivery_rate = Some(2_000_000);
    assert_eq!(g.observe(3 * MS, &slower).set_lowat, Some(40_000));
}

#[test]
fn no_control_always_admits_and_sets_nothing() {
    let mut g = Governor::new(GovernorConfig::new(Mode::NoControl));
    let v = g.observe(Duration::ZERO, &inputs(u32::MAX));
    assert_eq!((v.admission, v.set_lowat), (Admission::Admit, None));
    assert!(g.admit_cached(Duration::ZERO));
}

fn arb_inputs() -> impl Strategy<Value = Inputs> {
    (
        any::<u32>(),
        proptest::option::of(0u64..10_000_000_000),
        proptest::option::of(any::<bool>()),
        proptest::option::of(prop_oneof![Just(u64::MAX), 0u64..10_000_000_000]),
        0u32..10_000,
        0u32..65_536,
        0u64..2_000_000,
        proptest::option::of(0u64..2_000_000),
    )
        .prop_map(|(n, d, a, p, c, m, s, r)| Inputs {
            notsent_bytes: n,
            delivery_rate: d,
            app_limited: a,
            pacing_rate: p,
            cwnd_segs: c,
            mss_bytes: m,
            srtt: Duration::from_micros(s),
            min_rtt: r.map(Duration::from_micros),
        })
}

proptest! {
    /// Threshold mode never admits when the estimate is above the threshold, and every wait is
    /// finite and bounded.
    #[test]
    fn never_admits_above_threshold(i in arb_inputs(), t_us in 1u64..100_000, now_us in 0u64..1u64 << 40) {
        let t = Duration::from_micros(t_us);
        let mut g = Governor::new(GovernorConfig::new(Mode::Threshold(t)));
        let v = g.observe(Duration::from_micros(now_us), &i);
        match (v.admission, i.estimate()) {
            (Admission::Admit, Some(e)) => prop_assert!(e.delay <= t),
            (Admission::Admit, None) => {}
            (Admission::Wait(w), e) => {
                prop_assert!(e.is_some_and(|e| e.delay > t));
                prop_assert!(w >= g.config().min_wait && w <= g.config().max_wait);
            }
        }
    }

    /// The cached fast path never admits when the true estimate (the queue having drained by
    /// any amount, plus what was written since) exceeds the threshold.
    #[test]
    fn cached_path_is_an_upper_bound(
        i in arb_inputs(), t_us in 1u64..100_000, written in 0u64..1 << 32,
        drained in 0u32..=u32::MAX, age_us in 0u64..10_000,
    ) {
        let t = Duration::from_micros(t_us);
        let mut g = Governor::new(GovernorConfig::new(Mode::Threshold(t)));
        g.observe(Duration::ZERO, &i);
        g.on_written(written);
        if g.admit_cached(Duration::from_micros(age_us)) {
            let rate = i.rate().unwrap().0;
            let now_queued = u64::from(i.notsent_bytes.saturating_sub(drained)) + written;
            prop_assert!(delay_of(now_queued, rate) <= t);
        }
    }

    /// A queue that drains is admitted within a bounded number of virtual-clock steps: the
    /// writer sleeps each `Wait`, the link drains at the true rate meanwhile.
    #[test]
    fn never_blocks_forever_when_the_queue_drains(
        notsent in 0u32..50_000_000, rate in 1_000u64..1_000_000_000, t_us in 100u64..100_000,
    ) {
        let t = Duration::from_micros(t_us);
        let mut g = Governor::new(GovernorConfig::new(Mode::Threshold(t)));
        let mut now = Duration::ZERO;
        let mut queued = u64::from(notsent);
        let mut steps = 0u32;
        loop {
            let i = Inputs {
                notsent_bytes: u32::try_from(queued).unwrap(),
                delivery_rate: Some(rate),
                app_limited: Some(false),
                ..Inputs::default()
            };
            match g.observe(now, &i).admission {
                Admission::Admit => break,
                Admission::Wait(w) => {
                    now += w;
                    let drained = u64::try_from(u128::from(rate) * w.as_nanos() / 1_000_000_000).unwrap();
                    queued = queued.saturating_sub(drained);
                }
            }
            steps += 1;
            // Drain time / min_wait, plus slack.
            let bound = delay_of(u64::from(notsent), rate).as_micros() / 100 + 2;
            prop_assert!(u128::from(steps) <= bound, "{steps} steps");
        }
        prop_assert!(delay_of(queued, rate) <= t);
    }

    /// The adaptive LOWAT stays within its bounds and is `2 × threshold × rate` inside them.
    #[test]
    fn adaptive_lowat_within_bounds(rate in any::<u64>(), t_us in 0u64..1_000_000) {
        let g = Governor::new(GovernorConfig::new(Mode::AdaptiveLowat(Duration::ZERO)));
        let t = Duration::from_micros(t_us);
        let l = g.adaptive_lowat(t, rate);
        prop_assert!(l >= g.config().min_lowat && l <= g.config().max_lowat);
        let exact = 2 * u128::from(rate) * u128::from(t_us) / 1_000_000;
        if exact >= u128::from(g.config().min_lowat) && exact <= u128::from(g.config().max_lowat) {
            prop_assert_eq!(u128::from(l), exact);
        }
    }
}

proptest! {
    /// Closed loop on a virtual clock: a writer that always has chunks to send, a link that
    /// drains the socket at a constant rate. The governor admits a write only at or below the
    /// threshold (so the queue never exceeds threshold + one chunk), and never lets the link
    /// idle while the writer has data (throughput is not lost).
    #[test]
    fn closed_loop_bounds_the_queue_without_idling_the_link(
        rate in 100_000u64..100_000_000,
        t_ms in 1u64..50,
        chunk in 64u64..200_000,
    ) {
        let t = Duration::from_millis(t_ms);
        let mut g = Governor::new(GovernorConfig::new(Mode::Threshold(t)));
        let (mut now, mut queued, mut idle) = (Duration::ZERO, 0u64, Duration::ZERO);
        let mut written = 0u64;
        while now < Duration::from_secs(2) {
            let i = Inputs {
                notsent_bytes: u32::try_from(queued).unwrap(),
                delivery_rate: Some(rate),
                app_limited: Some(false),
                ..Inputs::default()
            };
            match g.observe(now, &i).admission {
                Admission::Admit => {
                    prop_assert!(delay_of(queued, rate) <= t);
                    queued += chunk;
                    written += chunk;
                    // 1 ns of slack: each `delay_of` rounds down.
                    let bound = t + delay_of(chunk, rate) + Duration::from_nanos(1);
                    prop_assert!(delay_of(queued, rate) <= bound);
                }
                Admission::Wait(w) => {
                    let drained = u64::try_from(u128::from(rate) * w.as_nanos() / 1_000_000_000).unwrap();
                    if drained > queued {
                        idle += w - delay_of(queued, rate);
                    }
                    queued = queued.saturating_sub(drained);
                    now += w;
                }
            }
        }
        prop_assert_eq!(idle, Duration::ZERO);
        prop_assert!(written > 0);
    }
}
