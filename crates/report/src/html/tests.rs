//! Dates, durations, ordering, anchors and variant labels of the report.

use super::*;

#[test]
fn utc_dates() {
    assert_eq!(iso_utc(0), "unknown");
    assert_eq!(iso_utc(1), "1970-01-01T00:00:01Z");
    assert_eq!(iso_utc(951_782_400), "2000-02-29T00:00:00Z");
    assert_eq!(iso_utc(1_700_000_000), "2023-11-14T22:13:20Z");
    assert_eq!(iso_utc(4_102_444_799), "2099-12-31T23:59:59Z");
}

#[test]
fn durations() {
    assert_eq!(fmt_duration(12.34), "12.3 s");
    assert_eq!(fmt_duration(245.0), "4 min 05 s");
    assert_eq!(fmt_duration(3720.0), "1 h 02 min");
    assert_eq!(fmt_duration(f64::NAN), "unknown");
}

#[test]
fn metric_names_sort_naturally() {
    let mut names = vec!["p999_us", "goodput_mbps", "p99_us", "p50_us", "p9_us", "a", ""];
    names.sort_by(|a, b| natural_cmp(a, b));
    assert_eq!(names, ["", "a", "goodput_mbps", "p9_us", "p50_us", "p99_us", "p999_us"]);
}

#[test]
fn anchors_are_safe_and_unique() {
    let exp = |name: &str| ExperimentResult {
        name: name.into(),
        title: String::new(),
        seed: String::new(),
        claim: String::new(),
        setup: String::new(),
        verdict: Verdict::Partly,
        verdict_reason: String::new(),
        verdict_rule: String::new(),
        rules: vec![],
        findings: vec![],
        rounds: 0,
        variants: vec![],
        plots: vec![],
        table: vec![],
        notes: vec![],
        error: None,
        lateness: None,
        duration_s: 0.0,
        conditions: vec![],
        decidability: None,
    };
    assert_eq!(anchor(0, &exp("a\"b <c>")), "exp-1-a-b--c-");
    assert_ne!(anchor(0, &exp("x")), anchor(1, &exp("x")));

    // Variant labels from the experiment file stand under the name, escaped.
    let variant = |name: &str, label: &str| crate::VariantResult {
        name: name.into(),
        config: [("label".to_string(), serde_json::Value::from(label))].into(),
        metrics: [("p99_us".to_string(), crate::Metric::from_rounds("p99_us", &[1.0]).unwrap())]
            .into(),
        series: vec![],
        notes: vec![],
        not_applicable: None,
        expected_metrics: vec![],
        rounds: vec![],
    };
    let mut e = exp("x");
    e.variants = vec![variant("cubic_x", "CUBIC <1 Gbit/s>"), variant("plain", "plain")];
    let mut h = String::new();
    metrics_table(&mut h, &e);
    assert!(h.contains(r#"cubic_x<span class="vlabel">CUBIC &lt;1 Gbit/s&gt;</span>"#), "{h}");
    assert!(!h.contains(r#"plain<span class="vlabel">"#), "{h}");
}
