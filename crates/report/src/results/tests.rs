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
        }],
    };
    let path = dir.path().join(RESULTS_FILE);
    results.write(&path).unwrap();
    assert_eq!(Results::read(&path).unwrap(), results);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"verdict\": \"partly\""), "{text}");
    assert!(text.contains("\"kind\": \"bars\""), "{text}");
}

#[test]
fn a_foreign_file_is_named_in_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("results.json");
    std::fs::write(&path, "{\"hello\": 1}").unwrap();
    let err = Results::read(&path).unwrap_err().to_string();
    assert!(err.contains("results.json") && err.contains("not a tcptail results file"), "{err}");
}
