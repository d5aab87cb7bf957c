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

fn at_rate(notsent: u64, rate: u64) -> Inputs {
    Inputs {
        notsent_bytes: u32::try_from(notsent).unwrap(),
        delivery_rate: Some(rate),
        app_limited: Some(false),
        ..Inputs::default()
    }
}

/// A governor in `mode` that has observed `i` at time zero (and applied any LOWAT it asked).
fn observed(mode: GovernorMode, i: &Inputs) -> Governor {
    let mut g = Governor::new(GovernorConfig::new(mode));
    if let Some(l) = g.observe(Duration::ZERO, i).set_lowat {
        g.lowat_applied(l);
    }
    g
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
fn threshold_caps_writes_to_the_room_and_waits_for_half_the_bound() {
    // 10 ms at 3.75 MB/s: a bound of 37,500 bytes.
    let mut g = observed(GovernorMode::Threshold(10 * MS), &inputs(30_000));
    assert_eq!(g.bound(), Some(37_500));
    // 7,500 bytes of room: a small message goes at once...
    assert_eq!(g.admit(Duration::ZERO, 64), Admission::Admit(64));
    // ...a chunk waits until half the bound is free: 11,250 bytes too many = 3 ms.
    assert_eq!(g.admit(Duration::ZERO, 51_200), Admission::Wait(3 * MS));
    // The wait spent the observation.
    assert_eq!(g.admit(Duration::ZERO, 51_200), Admission::Refresh);
    g.observe(3 * MS, &inputs(10_000));
    assert_eq!(g.admit(3 * MS, 51_200), Admission::Admit(27_500));
    g.on_written(27_500);
    // At the bound: the cached upper bound cannot admit and asks for a fresh read.
    assert_eq!(g.admit(3 * MS, 64), Admission::Refresh);
    // 100 ms queued: the wait is capped so the writer re-checks.
    g.observe(4 * MS, &inputs(375_000));
    assert_eq!(g.admit(4 * MS, 1), Admission::Wait(5 * MS));
}

#[test]
fn threshold_without_a_rate_admits_rather_than_wedging() {
    let none = Inputs { notsent_bytes: 1 << 30, ..Inputs::default() };
    let mut g = observed(GovernorMode::Threshold(MS), &none);
    assert_eq!(g.bound(), None);
    assert_eq!(g.admit(Duration::ZERO, 1 << 20), Admission::Admit(1 << 20));
}

#[test]
fn cached_fast_path_counts_what_was_written_and_expires() {
    let mut g = observed(GovernorMode::Threshold(10 * MS), &inputs(18_750)); // 5 ms
    assert_eq!(g.admit(MS, 18_750), Admission::Admit(18_750));
    g.on_written(18_750); // now at most 10 ms
    assert_eq!(g.admit(MS, 1), Admission::Refresh, "no room under the upper bound");
    g.observe(2 * MS, &inputs(0));
    assert_eq!(g.admit(4 * MS, 100), Admission::Admit(100));
    assert_eq!(g.admit(4 * MS + Duration::from_nanos(1), 100), Admission::Refresh, "stale");
}

#[test]
fn a_fresh_observation_is_used_whatever_its_age() {
    // `refresh` zero: every decision wants a new read, yet the one just made always decides
    // (a read takes time, so an age check alone would never let the writer through).
    let mut config = GovernorConfig::new(GovernorMode::Threshold(10 * MS));
    config.refresh = Duration::ZERO;
    let mut g = Governor::new(config);
    assert_eq!(g.admit(Duration::ZERO, 64), Admission::Refresh);
    g.observe(Duration::ZERO, &inputs(0));
    assert_eq!(g.admit(MS, 64), Admission::Admit(64));
    assert_eq!(g.admit(MS, 64), Admission::Refresh);
}

#[test]
fn static_lowat_is_set_once_and_observations_stay_fresh() {
    let mut g = Governor::new(GovernorConfig::new(GovernorMode::StaticLowat(16_384)));
    assert_eq!(g.admit(Duration::ZERO, 10), Admission::Refresh);
    let o = g.observe(Duration::ZERO, &inputs(0));
    assert_eq!(o.set_lowat, Some(16_384));
    assert_eq!(g.admit(Duration::ZERO, 10), Admission::Refresh, "LOWAT not applied yet");
    g.lowat_applied(16_384);
    assert_eq!(g.admit(MS, 1 << 20), Admission::Admit(1 << 20), "the kernel decides");
    assert_eq!(g.admit(3 * MS, 10), Admission::Refresh, "the estimate is refreshed");
    let o = g.observe(3 * MS, &inputs(75_000));
    assert_eq!(o.set_lowat, None);
    assert_eq!(g.last_estimate().unwrap().delay, 20 * MS);
}

#[test]
fn no_control_never_holds_back_but_keeps_its_estimate_fresh() {
    let mut g = Governor::new(GovernorConfig::new(GovernorMode::NoControl));
    assert_eq!(g.admit(Duration::ZERO, 64), Admission::Refresh);
    let o = g.observe(Duration::ZERO, &inputs(u32::MAX));
    assert_eq!(o.set_lowat, None);
    assert_eq!(g.admit(Duration::ZERO, 64), Admission::Admit(64));
    g.on_written(u64::MAX);
    assert_eq!(g.admit(2 * MS, 64), Admission::Admit(64));
    assert_eq!(g.admit(3 * MS, 64), Admission::Refresh);
    assert!(g.last_estimate().is_some());
}

#[test]
fn adaptive_lowat_tracks_the_rate_with_hysteresis() {
    let mut g = Governor::new(GovernorConfig::new(GovernorMode::AdaptiveLowat(10 * MS)));
    // No rate yet: the floor.
    assert_eq!(g.observe(Duration::ZERO, &Inputs::default()).set_lowat, Some(4096));
    g.lowat_applied(4096);
    assert_eq!(g.bound(), Some(4096));
    // 3.75 MB/s × 10 ms = 37.5 KB.
    assert_eq!(g.observe(MS, &inputs(0)).set_lowat, Some(37_500));
    g.lowat_applied(37_500);
    let mut slower = inputs(0);
    slower.delivery_rate = Some(3_500_000); // -6.7 %: within hysteresis
    assert_eq!(g.observe(2 * MS, &slower).set_lowat, None);
    assert_eq!(g.bound(), Some(37_500), "the bound is the LOWAT on the socket");
    slower.delivery_rate = Some(2_000_000);
    assert_eq!(g.observe(3 * MS, &slower).set_lowat, Some(20_000));
}

#[test]
fn adaptive_waits_for_the_kernel_exactly_when_it_withholds_pollout() {
    let mut g = observed(GovernorMode::AdaptiveLowat(10 * MS), &inputs(18_750));
    assert_eq!(g.lowat(), Some(37_500));
    // 2 × 18,750 = LOWAT: the kernel withholds POLLOUT, but exactly half the bound is free,
    // which is admitted.
    assert_eq!(g.admit(Duration::ZERO, 51_200), Admission::Admit(18_750));
    g.observe(MS, &inputs(18_751));
    assert_eq!(g.admit(MS, 51_200), Admission::WaitWritable);
    assert_eq!(g.admit(MS, 51_200), Admission::Refresh);
    // What POLLOUT reports (2 × notsent < LOWAT) is admitted.
    g.observe(2 * MS, &inputs(18_749));
    assert_eq!(g.admit(2 * MS, 51_200), Admission::Admit(18_751));
}

fn arb_inputs() -> impl Strategy<Value = Inputs> {
    (
        // Mostly queues near the bounds that matter, sometimes anything.
        prop_oneof![3 => 0u32..1 << 20, 1 => any::<u32>()],
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

fn arb_bounded_mode() -> impl Strategy<Value = GovernorMode> {
    (any::<bool>(), 1u64..100_000).prop_map(|(adaptive, t_us)| {
        let t = Duration::from_micros(t_us);
        if adaptive { GovernorMode::AdaptiveLowat(t) } else { GovernorMode::Threshold(t) }
    })
}

proptest! {
    /// Every admitted write fits under the bound: with the queue draining by any amount
    /// between writes (the kernel only sends), the true `notsent` after each write is at most
    /// the bound, and nothing is admitted while the queue is at or above it.
    #[test]
    fn admitted_writes_never_exceed_the_bound(
        mode in arb_bounded_mode(), i in arb_inputs(),
        steps in proptest::collection::vec((1u64..200_000, 0u64..100_000), 1..20),
    ) {
        let mut g = observed(mode, &i);
        let mut notsent = u64::from(i.notsent_bytes);
        let mut seen = notsent;
        for (want, drained) in steps {
            notsent = notsent.saturating_sub(drained);
            match g.admit(Duration::ZERO, want) {
                Admission::Admit(n) => {
                    prop_assert!(n >= 1 && n <= want);
                    if let Some(bound) = g.bound() {
                        notsent += n;
                        prop_assert!(notsent <= bound, "{notsent} > {bound}");
                    }
                    g.on_written(n);
                }
                Admission::Refresh => {
                    seen = notsent;
                    g.observe(Duration::ZERO, &Inputs {
                        notsent_bytes: u32::try_from(notsent).unwrap_or(u32::MAX),
                        ..i
                    });
                }
                Admission::Wait(w) => {
                    prop_assert!(matches!(mode, GovernorMode::Threshold(_)));
                    prop_assert!(w >= g.config().min_wait && w <= g.config().max_wait);
                }
                Admission::WaitWritable => {
                    prop_assert!(matches!(mode, GovernorMode::AdaptiveLowat(_)));
                    // Asked on an exact observation: the kernel withheld POLLOUT when it was
                    // made.
                    prop_assert!(2 * seen >= u64::from(g.lowat().unwrap()));
                }
            }
        }
    }

    /// Waits are only asked on exact observations with too little room, and spend them; an
    /// exact observation with at least half the bound free (or all that is wanted) is admitted.
    #[test]
    fn waits_only_when_needed_and_never_twice_on_one_observation(
        mode in arb_bounded_mode(), i in arb_inputs(), want in 1u64..1 << 24,
    ) {
        let mut g = observed(mode, &i);
        let bound = g.bound();
        let notsent = u64::from(i.notsent_bytes);
        let first = g.admit(Duration::ZERO, want);
        match bound {
            None => prop_assert_eq!(first, Admission::Admit(want)),
            Some(b) => {
                let need = want.min(b / 2).max(1);
                if notsent + need <= b {
                    prop_assert_eq!(first, Admission::Admit(want.min(b - notsent)));
                } else {
                    prop_assert!(matches!(first, Admission::Wait(_) | Admission::WaitWritable));
                    prop_assert_eq!(g.admit(Duration::ZERO, want), Admission::Refresh);
                }
            }
        }
    }

    /// The cached fast path never admits more than fits when the queue has drained by any
    /// amount and the caller wrote `written` since the observation.
    #[test]
    fn cached_path_is_an_upper_bound(
        mode in arb_bounded_mode(), i in arb_inputs(), written in 0u64..1 << 32,
        drained in 0u32..=u32::MAX, age_us in 0u64..10_000, want in 1u64..1 << 20,
    ) {
        let mut g = observed(mode, &i);
        g.on_written(written);
        if let (Admission::Admit(n), Some(bound)) =
            (g.admit(Duration::from_micros(age_us), want), g.bound())
        {
            let now_queued = u64::from(i.notsent_bytes.saturating_sub(drained)) + written;
            prop_assert!(now_queued + n <= bound);
        }
    }

    /// A queue that drains is admitted within a bounded number of virtual-clock steps: the
    /// writer sleeps each `Wait`, the link drains at the true rate meanwhile.
    #[test]
    fn never_blocks_forever_when_the_queue_drains(
        notsent in 0u32..50_000_000, rate in 1_000u64..1_000_000_000, t_us in 100u64..100_000,
        want in 1u64..1 << 20,
    ) {
        let mode = GovernorMode::Threshold(Duration::from_micros(t_us));
        let mut g = Governor::new(GovernorConfig::new(mode));
        let mut now = Duration::ZERO;
        let mut queued = u64::from(notsent);
        let mut waits = 0u32;
        loop {
            match g.admit(now, want) {
                Admission::Admit(_) => break,
                Admission::Refresh => { g.observe(now, &at_rate(queued, rate)); }
                Admission::Wait(w) => {
                    now += w;
                    let drained = u64::try_from(u128::from(rate) * w.as_nanos() / 1_000_000_000).unwrap();
                    queued = queued.saturating_sub(drained);
                    waits += 1;
                }
                Admission::WaitWritable => prop_assert!(false, "threshold mode polls tcp_info"),
            }
            // Drain time / min_wait, plus slack.
            let bound = delay_of(u64::from(notsent), rate).as_micros() / 100 + 2;
            prop_assert!(u128::from(waits) <= bound, "{waits} waits");
        }
        prop_assert!(queued <= g.bound().unwrap());
    }

    /// `threshold × rate`, clamped to `[min_bound, max_bound]`.
    #[test]
    fn bound_within_limits(rate in any::<u64>(), t_us in 0u64..1_000_000) {
        let g = Governor::new(GovernorConfig::new(GovernorMode::AdaptiveLowat(Duration::ZERO)));
        let l = g.bound_for(Duration::from_micros(t_us), rate);
        prop_assert!(l >= g.config().min_bound && l <= g.config().max_bound);
        let exact = u128::from(rate) * u128::from(t_us) / 1_000_000;
        if exact >= u128::from(g.config().min_bound) && exact <= u128::from(g.config().max_bound) {
            prop_assert_eq!(u128::from(l), exact);
        }
    }
}

/// One simulated second of a writer that always has `chunk`-byte messages to send, through the
/// governor, into a link that drains the socket at `rate` (a rate that moves by up to ±`jitter`
/// per observation). Waits are served as the kernel would: `Wait` by sleeping, `WaitWritable`
/// by sleeping until `2 × notsent < LOWAT`. Checks at every step that `notsent` stays within
/// the bound and that the link never idles while the writer has data; returns bytes written.
fn closed_loop(
    mode: GovernorMode,
    rate: u64,
    chunk: u64,
    jitter: &[i8],
) -> Result<u64, TestCaseError> {
    let mut g = Governor::new(GovernorConfig::new(mode));
    let (mut now, mut queued, mut written) = (Duration::ZERO, 0u64, 0u64);
    let mut left_in_chunk = chunk;
    let mut observations = 0usize;
    let drain = |queued: &mut u64, d: Duration| -> Result<(), TestCaseError> {
        let drained = u64::try_from(u128::from(rate) * d.as_nanos() / 1_000_000_000).unwrap();
        // 1 byte of slack: `delay_of` rounds down.
        prop_assert!(drained <= *queued + 1, "the link idled: {drained} > {queued}");
        *queued = queued.saturating_sub(drained);
        Ok(())
    };
    while now < Duration::from_secs(1) {
        match g.admit(now, left_in_chunk) {
            Admission::Admit(n) => {
                queued += n;
                written += n;
                g.on_written(n);
                if let Some(bound) = g.bound() {
                    prop_assert!(queued <= bound, "{queued} > {bound}");
                }
                left_in_chunk -= n;
                if left_in_chunk == 0 {
                    left_in_chunk = chunk;
                }
            }
            Admission::Refresh => {
                let j = i64::from(jitter[observations % jitter.len()]);
                observations += 1;
                let seen = u64::try_from(i64::try_from(rate).unwrap() * (100 + j) / 100).unwrap();
                if let Some(l) = g.observe(now, &at_rate(queued, seen)).set_lowat {
                    g.lowat_applied(l);
                }
            }
            Admission::Wait(w) => {
                drain(&mut queued, w)?;
                now += w;
            }
            Admission::WaitWritable => {
                let lowat = u64::from(g.lowat().unwrap());
                prop_assert!(2 * queued >= lowat, "the kernel would not withhold POLLOUT");
                // Sleep until POLLOUT: 2 × notsent < LOWAT.
                let target = (lowat - 1) / 2;
                let w = delay_of(queued - target, rate) + Duration::from_nanos(1);
                drain(&mut queued, w.min(g.config().max_wait))?;
                now += w.min(g.config().max_wait);
            }
        }
    }
    Ok(written)
}

proptest! {
    /// Closed loop on a virtual clock, both threshold modes: the queue never exceeds the bound
    /// (not the bound plus a chunk) and the link never idles, so throughput is not lost.
    #[test]
    fn closed_loop_bounds_the_queue_without_idling_the_link(
        mode in arb_bounded_mode().prop_filter("at least 1 ms", |m| m.threshold().unwrap() >= MS),
        rate in 100_000u64..100_000_000,
        chunk in 64u64..200_000,
        jitter in proptest::collection::vec(-5i8..=5, 1..8),
    ) {
        let written = closed_loop(mode, rate, chunk, &jitter)?;
        // The link ran the whole second, minus the first round trip of decisions.
        prop_assert!(written + 2 * chunk >= rate * 95 / 100, "{written} bytes in 1 s at {rate} B/s");
    }
}
