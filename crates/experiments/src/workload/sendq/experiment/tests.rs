use super::*;
use tcptail_sendq::sender::SenderStats;

#[test]
fn full_config_has_every_variant_of_the_issue() {
    let full = SendqConfig::full();
    // (no control, never blocks, 2 static, 4 threshold, 4 adaptive) x fresh x CC.
    assert_eq!(full.variants.len(), 12 * 2 * 2);
    let names: std::collections::HashSet<_> = full.variants.iter().map(|v| &v.name).collect();
    assert_eq!(names.len(), full.variants.len(), "names are unique");
    for n in ["cubic/lowat-16k", "bbr/lowat-64k+fresh", "cubic/adaptive-30ms", "bbr/threshold-5ms"]
    {
        assert!(names.contains(&n.to_owned()), "{n}");
    }
    // 10-50 Mbit/s with the main 30 Mbit/s run: both baselines and both 10 ms modes, both CCs.
    assert_eq!(full.sweep_rates.len(), 4);
    assert_eq!(full.sweep_variants.len(), 8);
    assert!(full.sweep_variants.iter().any(|v| v.name == "bbr/no-control-never-blocks"));
    full.validate().unwrap();
    let quick = SendqConfig::quick();
    quick.validate().unwrap();
    for cc in ["cubic", "bbr"] {
        for rest in CONTROLLED.iter().chain(&BASELINES) {
            assert!(quick.variants.iter().any(|v| v.name == format!("{cc}/{rest}")), "{rest}");
        }
    }
}

#[test]
fn invalid_configs_are_rejected() {
    let mut c = SendqConfig::quick();
    c.chunk_bytes = 16;
    assert!(matches!(c.validate(), Err(ExperimentError::Config(_))));
    let mut c = SendqConfig::quick();
    c.rate = BitRate(0);
    assert!(c.validate().is_err());
    let mut c = SendqConfig::quick();
    c.rounds = 0;
    assert!(c.validate().is_err());
}

#[test]
fn path_is_symmetric_with_half_the_rtt_each_way() {
    let p = SendqConfig::quick().path(BitRate(20_000_000));
    assert_eq!(p.up, p.down);
    assert_eq!(p.up.delay, Duration::from_millis(5));
}

/// A one-round result with the given medians; srtt 25 ms over a min_rtt of 10 ms.
fn result(name: &str, start_p50: f64, sched_p50: f64, goodput: f64) -> VariantSummary {
    let summary = |p50| ChunkLatency { count: 1, p50, p90: p50, p99: p50, max: p50 };
    let run = SendqRound {
        name: name.to_owned(),
        variant: Variant::new(Control::Governed(GovernorMode::NoControl), false, Cc::Cubic),
        chunks_offered: 1,
        chunks_delivered: 1,
        merged: 0,
        dropped_stale: 0,
        fraction_merged_or_dropped: 0.0,
        from_start_ms: summary(start_p50),
        from_schedule_ms: summary(sched_p50),
        goodput_mbps: goodput,
        sending_ms: 1000.0,
        srtt_p50_ms: 25.0,
        min_rtt_ms: 10.0,
        sender: SenderStats::default(),
        chunks: Vec::new(),
    };
    let mut v = run.variant.clone();
    v.name = name.to_owned();
    VariantSummary::of(&v, vec![run])
}

#[test]
fn rounds_fold_into_medians_with_their_spread() {
    // The per-round figures fold with the shared median (mean of the middle two for an even
    // count) and the shared spread (median, min, max).
    let rounds = |p50s: &[f64]| -> VariantSummary {
        let runs = p50s.iter().map(|&p| result("cubic/no-control", p, p, p).runs[0].clone());
        let v = Variant::new(Control::Governed(GovernorMode::NoControl), false, Cc::Cubic);
        VariantSummary::of(&v, runs.collect())
    };
    let odd = rounds(&[3.0, 1.0, 2.0]);
    assert_eq!(odd.from_start_ms.p50, 2.0);
    assert_eq!((odd.from_start_p50_spread.min, odd.from_start_p50_spread.max), (1.0, 3.0));
    assert_eq!(odd.from_start_p50_spread.median, 2.0);
    let even = rounds(&[4.0, 1.0, 2.0, 3.0]);
    assert_eq!((even.goodput_mbps, even.rounds), (2.5, 4));
    assert_eq!(even.goodput_spread.min, 1.0);
    assert_eq!(even.goodput_spread.max, 4.0);
    let none = rounds(&[]);
    assert!(none.from_start_ms.p50.is_nan() && none.goodput_spread.min.is_nan());
    assert_eq!(ChunkLatency::of(&[2.0, 5.0, 1.0]).max, 5.0);
}

fn report(variants: Vec<VariantSummary>) -> SendqReport {
    SendqReport {
        config: SendqConfig::quick(),
        main: RateResults {
            rate_bps: 30_000_000,
            variants,
            emulator_lateness_p99_us: 10.0,
            emulator_lateness_flag: None,
        },
        sweep: Vec::new(),
    }
}

#[test]
fn targets_compare_against_both_baselines_and_name_the_floor() {
    let report = report(vec![
        result("cubic/no-control", 65.0, 230.0, 28.7),
        result("cubic/no-control-never-blocks", 230.0, 230.0, 28.7),
        result("cubic/threshold-10ms", 35.0, 230.0, 28.6),
        result("cubic/threshold-10ms+fresh", 35.0, 40.0, 28.5),
    ]);
    let checks = report.targets(Cc::Cubic);
    let pass: Vec<bool> = checks.iter().map(|c| c.pass).collect();
    // 46 % cut against autotuned fails; 85 % against never-blocks passes; goodput 99.7 %;
    // fresh 40 ms < 43.7 ms; both baselines > 100 ms from schedule.
    assert_eq!(pass, [false, true, true, true, true, true, true], "{checks:#?}");
    // 19.5 ms asked; floor 13.65 + 5 + 15 ms of standing queue: out of reach, with numbers.
    let why = checks[0].out_of_reach.as_deref().expect("out of reach");
    assert!(why.starts_with("19.5 ms is below the floor") && why.contains("33.7 ms"), "{why}");
    assert!(checks[0].target.contains("<= 19.5 ms"), "{}", checks[0].target);
    assert!(checks[1..].iter().all(|c| c.out_of_reach.is_none()));
    assert!(report.targets(Cc::Bbr).is_empty());
}

#[test]
fn targets_fail_when_the_data_shows_no_effect() {
    let report = report(vec![
        result("bbr/no-control", 130.0, 230.0, 28.7),
        result("bbr/no-control-never-blocks", 230.0, 230.0, 28.7),
        result("bbr/adaptive-10ms", 120.0, 230.0, 20.0),
        result("bbr/adaptive-10ms+fresh", 120.0, 120.0, 28.5),
    ]);
    let checks = report.targets(Cc::Bbr);
    assert_eq!(checks.len(), 7);
    // Cuts of 8 % and 48 %, 70 % goodput, 120 ms from schedule: only the baselines' > 100 ms.
    let pass: Vec<bool> = checks.iter().map(|c| c.pass).collect();
    assert_eq!(pass, [false, false, false, false, false, true, true], "{checks:#?}");
    // 39 ms asked is above the floor (33.7 ms): a plain failure, not out of reach.
    assert!(checks.iter().all(|c| c.out_of_reach.is_none()), "{checks:#?}");
}

#[test]
fn plots_are_standalone_report_charts() {
    let at = |rate_bps, p50| RateResults {
        rate_bps,
        variants: vec![result("cubic/no-control", p50, p50 * 2.0, 9.0)],
        emulator_lateness_p99_us: 10.0,
        emulator_lateness_flag: None,
    };
    let s = plot::sweep_svg("sweep", &[at(10_000_000, 80.0), at(20_000_000, 40.0)]);
    assert!(s.starts_with(r#"<svg xmlns="http://www.w3.org/2000/svg" "#), "{s}");
    assert!(s.contains("cubic/no-control from schedule") && s.contains("stroke-dasharray"));
    assert!(s.ends_with("</svg>\n"));

    let mut v = result("bbr/threshold-10ms", 20.0, 20.0, 9.0);
    v.runs[0].chunks = (0..50)
        .map(|i| ChunkRecord {
            seq: i,
            scheduled_ms: f64::from(i) * 10.0,
            start_ms: f64::from(i) * 10.0,
            complete_ms: f64::from(i) * 10.0 + 5.0 + f64::from(i % 7),
        })
        .collect();
    let s = plot::ecdf_svg("ecdf", &[v], VariantSummary::from_start_samples);
    assert!(s.starts_with(r#"<svg xmlns="#) && s.contains("bbr/threshold-10ms"), "{s}");
    assert!(s.contains("<path d=\"M") && !s.contains("no data"), "{s}");
}
