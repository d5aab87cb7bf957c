//! The results schema: medians, units, series thinning, and the file round trip.
use super::*;

#[test]
fn metric_median_and_spread() {
    let m = Metric::from_rounds("p99_us", &[30.0, 10.0, f64::NAN, 20.0, 40.0]).unwrap();
    assert_eq!((m.median, m.min, m.max), (25.0, 10.0, 40.0));
    assert_eq!(m.values, vec![30.0, 10.0, 20.0, 40.0]);
    assert_eq!(m.unit, "µs");
    assert!(Metric::from_rounds("x", &[f64::NAN]).is_none());
}

#[test]
fn metric_intervals_state_their_confidence() {
    // Six rounds: the exact 95 % order-statistic interval of the median, [min, max] at 96.9 %.
    let m = Metric::from_rounds("p99_us", &[5.0, 1.0, 3.0, 4.0, 2.0, 6.0]).unwrap();
    assert_eq!(m.ci, Some([1.0, 6.0]));
    assert!((m.confidence.unwrap() - (1.0 - 2.0 / 64.0)).abs() < 1e-12);
    // Three rounds cannot support 95 %: their range, with the 75 % it has.
    let m = Metric::from_rounds("p99_us", &[3.0, 1.0, 2.0]).unwrap();
    assert_eq!((m.ci, m.confidence), (Some([1.0, 3.0]), Some(0.75)));
    // Nine rounds: a narrower interval than the range.
    let nine: Vec<f64> = (1..=9).map(f64::from).collect();
    let m = Metric::from_rounds("x", &nine).unwrap();
    assert_eq!(m.ci, Some([2.0, 8.0]));
    assert!(m.confidence.unwrap() >= 0.95);
    // One round: no interval.
    let m = Metric::from_rounds("x", &[1.0]).unwrap();
    assert_eq!((m.ci, m.confidence), (None, None));
}

#[test]
fn units_from_suffixes() {
    assert_eq!(unit_of("goodput_mbps"), "Mbit/s");
    assert_eq!(unit_of("burst_ms"), "ms");
    assert_eq!(unit_of("retrans_pct"), "%");
    assert_eq!(unit_of("count"), "");
}

#[test]
fn cdf_leaves_out_values_json_cannot_hold() {
    let mut samples = [3.0, f64::NAN, 1.0, f64::INFINITY, 2.0];
    let s = Series::cdf("x_us", &mut samples);
    assert_eq!(s.points, [[1.0, 1.0 / 3.0], [2.0, 2.0 / 3.0], [3.0, 1.0]]);
    assert!(serde_json::to_string(&s).is_ok_and(|j| !j.contains("null")));
}

#[test]
fn cdf_keeps_extremes_and_the_tail() {
    let mut samples: Vec<f64> = (1..=100_000).map(f64::from).collect();
    let s = Series::cdf("latency_us", &mut samples);
    assert!(s.points.len() <= MAX_POINTS + 1, "{}", s.points.len());
    assert_eq!(s.points[0][0], 1.0);
    assert_eq!(*s.points.last().unwrap(), [100_000.0, 1.0]);
    assert!(s.points.windows(2).all(|w| w[0][0] <= w[1][0] && w[0][1] <= w[1][1]));
    // The tail is dense: every one of the slowest 100 samples is a point.
    assert!((99_901..=100_000).all(|v| s.points.iter().any(|p| p[0] == f64::from(v))));
}

#[test]
fn time_series_is_thinned_by_averaging() {
    let pairs: Vec<[f64; 2]> = (0..10_000).map(|i| [f64::from(i) * 0.01, 5.0]).collect();
    let s = Series::time("goodput_mbps", pairs);
    assert!(s.points.len() <= MAX_POINTS);
    assert!(s.points.iter().all(|p| p[1] == 5.0));
}

#[test]
fn results_round_trip_through_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let results = Results {
        run: RunInfo { mode: "smoke".into(), ..RunInfo::default() },
        environment: Environment::default(),
        experiments: vec![ExperimentResult {
            name: "x".into(),
            title: "t".into(),
            seed: "000.txt".into(),
            claim: "c".into(),
            setup: "s".into(),
            verdict: Verdict::Partly,
            verdict_reason: "r".into(),
            verdict_rule: "rule".into(),
            rules: vec![RuleResult {
                verdict: Verdict::Partly,
                when: Some("a.x_us > 2".into()),
                evaluated: Some("3 > 2 ✓".into()),
                outcome: Outcome::Holds,
                fired: true,
                line: 9,
            }],
            findings: vec![],
            rounds: 1,
            variants: vec![],
            plots: vec![PlotSpec::Bars {
                metrics: vec!["p99_us".into()],
                title: "b".into(),
                log_y: false,
            }],
            table: vec![],
            notes: vec![],
            error: None,
            lateness: None,
            duration_s: 1.0,
            conditions: vec![SeedCondition {
                name: "rate".into(),
                seed: "10 Gbit/s".into(),
                run: "300 Mbit/s".into(),
                matches: false,
                reason: Some("the emulator holds 300 Mbit/s here".into()),
            }],
            decidability: Some(Decidability {
                quick: QuickDecides::Partly,
                reason: "the seed's rate runs in full mode only".into(),
            }),
        }],
    };
    let path = dir.path().join(RESULTS_FILE);
    results.write(&path).unwrap();
    assert_eq!(Results::read(&path).unwrap(), results);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"verdict\": \"partly\""), "{text}");
    assert!(text.contains("\"kind\": \"bars\""), "{text}");
    assert!(text.contains("\"quick\": \"partly\""), "{text}");
}

#[test]
fn a_foreign_file_is_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("results.json");
    std::fs::write(&path, "{\"hello\": 1}").unwrap();
    let err = Results::read(&path).unwrap_err().to_string();
    assert!(err.contains("results.json") && err.contains("not a tcptail results file"), "{err}");
}

#[test]
fn pooled_cdfs_weigh_points_by_the_samples_they_stand_for() {
    // Two rounds of 10,000 samples: 99.8 % near 10 µs, 0.2 % at 8000 µs. Each round's CDF
    // keeps every rank of its last 1 %, so the slow samples are over-represented among its
    // points; pooling must still put 99.8 % of the weight near 10 µs.
    let round = |jitter: f64| {
        let mut v: Vec<f64> = (0..10_000)
            .map(|i| if i < 9_980 { 10.0 + jitter * f64::from(i % 7) } else { 8000.0 })
            .collect();
        Series::cdf("latency_us", &mut v)
    };
    let (a, b) = (round(0.01), round(0.02));
    let tail_points = a.points.iter().filter(|p| p[0] >= 8000.0).count();
    // Counted as points, the tail would look ten times (here 25 times) heavier than it is.
    let share = tail_points as f64 / a.points.len() as f64;
    assert!(share > 10.0 * 0.002, "the thinning keeps a dense tail: {share}");
    let pooled = Series::pool_cdfs("latency_us", &[&a, &b]);
    let below =
        |x: f64| pooled.points.iter().filter(|p| p[0] <= x).map(|p| p[1]).fold(0.0, f64::max);
    assert!((below(11.0) - 0.998).abs() < 1e-9, "share at or below 11 µs: {}", below(11.0));
    assert_eq!(pooled.points.last(), Some(&[8000.0, 1.0]));
    assert!(pooled.points.windows(2).all(|w| w[0][0] < w[1][0] && w[0][1] <= w[1][1]));
    assert!(pooled.points.len() <= MAX_POINTS + 1, "{}", pooled.points.len());
    // What results.json holds reads back exactly.
    let json = serde_json::to_string(&pooled).unwrap();
    assert_eq!(serde_json::from_str::<Series>(&json).unwrap(), pooled);
    // One round pools to itself: at each value, the round's share at or below it.
    let alone = Series::pool_cdfs("latency_us", &[&a]);
    for p in &alone.points {
        let own = a.points.iter().filter(|q| q[0] == p[0]).map(|q| q[1]).fold(0.0, f64::max);
        assert!((own - p[1]).abs() < 1e-9, "{p:?} vs {own}");
    }
}

#[test]
fn pooling_thins_many_points_keeping_the_tail() {
    let rounds: Vec<Series> = (0..8)
        .map(|r| {
            let mut v: Vec<f64> = (0..20_000).map(|i| f64::from(i) + f64::from(r) * 0.5).collect();
            Series::cdf("x_us", &mut v)
        })
        .collect();
    let refs: Vec<&Series> = rounds.iter().collect();
    let pooled = Series::pool_cdfs("x_us", &refs);
    assert!(pooled.points.len() <= MAX_POINTS + 1, "{}", pooled.points.len());
    assert_eq!(pooled.points[0][0], 0.0);
    assert_eq!(pooled.points.last().unwrap()[1], 1.0);
    // The median of the pool is the median of the rounds (~10,000).
    let median = pooled.points.iter().find(|p| p[1] >= 0.5).unwrap()[0];
    assert!((median - 10_000.0).abs() < 200.0, "{median}");
    assert!(pooled.points.iter().filter(|p| p[1] > 0.99).count() >= 50);
}
