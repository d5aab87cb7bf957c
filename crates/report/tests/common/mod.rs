//! A synthetic run for the report's tests and `examples/sample_report.rs`: every verdict, every
//! plot kind, plots whose data is missing, an error, a lateness-flagged experiment, more
//! variants than the palette has colours, and hostile strings in every user-text field.
//!
//! The numbers are finite, so the run survives a trip through `results.json` (JSON has no
//! NaN); tests that need non-finite values add them in memory.

#![allow(dead_code)] // Each includer uses part of it.

use std::collections::BTreeMap;

use tcptail_report::{
    Decidability, Environment, ExperimentResult, FindingResult, LATENESS_METRIC, Lateness, Metric,
    Outcome, PathEventRecord, PlotSpec, QuickDecides, Results, RoundRecord, RuleResult, RunInfo,
    SeedCondition, Series, VariantResult, Verdict,
};

/// Markup that runs a script if any field is not escaped.
pub const HOSTILE: &str = r#"</script><img src=x onerror=alert(1)>"#;
/// [`HOSTILE`] as it must appear in the HTML.
pub const HOSTILE_ESCAPED: &str = "&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;";
/// Quotes and an ampersand, for attributes.
pub const QUOTES: &str = r#"a "quoted" & 'single' value"#;

/// A deterministic generator (64-bit LCG) so the sample is the same on every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f64 {
        self.0 =
            self.0.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

fn variant(name: &str, scale: f64, seed: u64, notes: Vec<String>) -> VariantResult {
    let mut rng = Rng(seed);
    // Heavy-tailed latency: mostly around `scale`, a tail up to ~50x.
    let mut samples: Vec<f64> = (0..5000)
        .map(|_| {
            let u = rng.next();
            scale * (1.0 + 0.3 * rng.next()) / (1.0 - 0.98 * u).powf(0.8)
        })
        .collect();
    let latency = Series::cdf("latency_us", &mut samples);
    let goodput = Series::time(
        "goodput_mbps",
        (0..300)
            .map(|i| [f64::from(i) * 0.1, 80.0 / (scale / 100.0).sqrt() + 10.0 * rng.next()])
            .collect(),
    );
    let mut metrics = BTreeMap::new();
    for (metric, base) in [
        ("p50_us", scale),
        ("p99_us", scale * 8.0),
        ("p999_us", scale * 30.0),
        ("goodput_mbps", 90.0),
    ] {
        let rounds: Vec<f64> = (0..5).map(|_| base * (0.8 + 0.4 * rng.next())).collect();
        metrics.insert(metric.to_owned(), Metric::from_rounds(metric, &rounds).expect("finite"));
    }
    let mut config = BTreeMap::new();
    config.insert("cc".to_owned(), serde_json::Value::String(name.to_owned()));
    config.insert("rtt_ms".to_owned(), serde_json::json!(20));
    VariantResult {
        name: name.to_owned(),
        config,
        metrics,
        series: vec![latency, goodput],
        notes,
        not_applicable: None,
        expected_metrics: vec![],
        rounds: (1..=5)
            .map(|index| RoundRecord {
                index,
                faithful: true,
                excluded_reason: None,
                path_events: Vec::new(),
                placement: None,
            })
            .collect(),
    }
}

fn experiment(name: &str, verdict: Verdict) -> ExperimentResult {
    ExperimentResult {
        name: name.to_owned(),
        title: format!("Experiment {name}"),
        seed: format!("000_{name}.txt"),
        claim: "Tail latency grows when the send queue is deep.".into(),
        setup: "20 ms RTT, 50 Mbit/s bottleneck,\n5 rounds, variants interleaved.".into(),
        verdict,
        verdict_reason: "p99 of bbr is 0.42× cubic's (rule: < 0.8×)".into(),
        verdict_rule: "when: bbr.p99_us < 0.8 * cubic.p99_us".into(),
        rules: vec![
            RuleResult {
                verdict,
                when: Some("bbr.p99_us < 0.8 * cubic.p99_us".into()),
                evaluated: Some("640 < 1280 ✓".into()),
                outcome: Outcome::Holds,
                fired: true,
                line: 40,
            },
            RuleResult {
                verdict: Verdict::NotReproduced,
                when: None,
                evaluated: None,
                outcome: Outcome::Holds,
                fired: false,
                line: 44,
            },
        ],
        findings: vec![],
        rounds: 5,
        variants: vec![],
        plots: vec![],
        table: vec![],
        notes: vec![],
        error: None,
        lateness: None,
        duration_s: 75.5,
        conditions: vec![],
        decidability: None,
    }
}

/// The synthetic run.
pub fn sample() -> Results {
    let mut notes = BTreeMap::new();
    notes.insert("cpu_governor".to_owned(), "performance".to_owned());
    notes.insert("virtualisation".to_owned(), HOSTILE.to_owned());

    let mut cc = experiment("trading-cc", Verdict::Reproduced);
    cc.variants = vec![
        variant("cubic", 200.0, 1, vec![]),
        variant("bbr", 80.0, 2, vec!["round 3 was lateness-flagged".into()]),
        variant("reno", 260.0, 3, vec![]),
    ];
    cc.plots = vec![
        PlotSpec::Ecdf {
            series: "latency_us".into(),
            title: "Latency ECDF (log)".into(),
            log_x: true,
        },
        PlotSpec::Timeseries { series: "goodput_mbps".into(), title: "Goodput over time".into() },
        PlotSpec::Bars {
            metrics: vec!["p50_us".into(), "p99_us".into(), "p999_us".into()],
            title: "Latency percentiles".into(),
            log_y: true,
        },
    ];
    cc.table = vec!["p50_us".into(), "p99_us".into(), "goodput_mbps".into()];
    // The emulator ran late in bbr's second round; reno's rounds were all on time.
    let lateness = |rounds: &[f64]| Metric::from_rounds(LATENESS_METRIC, rounds).expect("finite");
    cc.variants[1].metrics.insert(LATENESS_METRIC.into(), lateness(&[60.0, 350.0, 80.0]));
    cc.variants[2].metrics.insert(LATENESS_METRIC.into(), lateness(&[50.0, 70.0, 90.0]));
    // A step this host cannot take.
    let mut isolcpus = variant("isolcpus", 100.0, 4, vec![]);
    isolcpus.metrics.clear();
    isolcpus.series.clear();
    isolcpus.not_applicable =
        Some("no CPU is isolated on this host (/sys/devices/system/cpu/isolated is empty)".into());
    cc.variants.push(isolcpus);
    cc.findings = vec![FindingResult {
        title: "BBR phase of slow requests".into(),
        when: "bbr.slow_probe_bw_up_pct.min > 2 * bbr.all_probe_bw_up_pct.max".into(),
        evaluated: "9 > 25 ✗".into(),
        outcome: Outcome::Fails,
        text: "PROBE_BW up is not over-represented among slow requests".into(),
    }];
    // bbr's sixth round ran on a late emulator and is left out of its numbers.
    cc.variants[1].rounds.push(RoundRecord {
        index: 6,
        faithful: false,
        excluded_reason: Some(
            "emulator lateness p99 350 µs, over the experiment tolerance of 200 µs".into(),
        ),
        path_events: vec![PathEventRecord {
            event: "5s:blackhole".into(),
            at_s: 5.0,
            applied_s: Some(5.000_04),
        }],
        placement: None,
    });
    cc.conditions = vec![
        SeedCondition {
            name: "rate".into(),
            seed: "1 Gbit/s".into(),
            run: "1 Gbit/s".into(),
            matches: true,
            reason: None,
        },
        SeedCondition {
            name: "duration".into(),
            seed: "30 min".into(),
            run: "3 s x 5 rounds".into(),
            matches: false,
            reason: Some("quick mode; the full mode runs 60 s rounds".into()),
        },
    ];
    cc.decidability = Some(Decidability {
        quick: QuickDecides::Partly,
        reason: "the seed's 30-minute average needs full mode & more".into(),
    });
    cc.lateness = Some(Lateness {
        worst_p99_us: 350.0,
        max_us: 900.0,
        bound_us: 200.0,
        flagged_paths: 1,
        paths: 2,
    });

    // More variants than colours, a linear ECDF, plots with missing data.
    let mut nagle = experiment("nagle-delack", Verdict::Partly);
    nagle.variants = (0..10)
        .map(|i| {
            variant(
                &format!("variant-{i}"),
                100.0 + 25.0 * f64::from(i),
                10 + u64::from(i as u8),
                vec![],
            )
        })
        .collect();
    nagle.plots = vec![
        PlotSpec::Ecdf { series: "latency_us".into(), title: "Latency ECDF".into(), log_x: false },
        PlotSpec::Ecdf {
            series: "missing_us".into(),
            title: "Nothing recorded".into(),
            log_x: true,
        },
        PlotSpec::Bars {
            metrics: vec!["ghost_us".into(), "goodput_mbps".into()],
            title: "Goodput".into(),
            log_y: false,
        },
        PlotSpec::Bars { metrics: vec!["ghost_us".into()], title: "Ghost".into(), log_y: false },
        // The series exists, but as a CDF, not a time series.
        PlotSpec::Timeseries { series: "latency_us".into(), title: "Wrong kind".into() },
    ];
    nagle.notes = vec!["TCP_QUICKACK is not available here; step 3 was skipped.".into()];
    nagle.lateness = Some(Lateness {
        worst_p99_us: 350.0,
        max_us: 5000.0,
        bound_us: 200.0,
        flagged_paths: 2,
        paths: 3,
    });

    // Hostile strings everywhere a user can write.
    let mut hostile = experiment(HOSTILE, Verdict::NotReproduced);
    hostile.title = format!("Hostile {HOSTILE}");
    hostile.seed = HOSTILE.into();
    hostile.claim = format!("{HOSTILE} {QUOTES}");
    hostile.setup = HOSTILE.into();
    hostile.verdict_reason = HOSTILE.into();
    hostile.verdict_rule = HOSTILE.into();
    hostile.rules[0].when = Some(HOSTILE.into());
    hostile.rules[0].evaluated = Some(QUOTES.into());
    hostile.findings = vec![FindingResult {
        title: HOSTILE.into(),
        when: HOSTILE.into(),
        evaluated: HOSTILE.into(),
        outcome: Outcome::Unknown,
        text: QUOTES.into(),
    }];
    hostile.notes = vec![HOSTILE.into(), QUOTES.into()];
    hostile.variants =
        vec![variant(HOSTILE, 150.0, 99, vec![HOSTILE.into()]), variant(QUOTES, 120.0, 98, vec![])];
    hostile.plots = vec![
        PlotSpec::Ecdf { series: "latency_us".into(), title: HOSTILE.into(), log_x: true },
        PlotSpec::Bars {
            metrics: vec!["p99_us".into(), HOSTILE.into()],
            title: QUOTES.into(),
            log_y: false,
        },
    ];

    // Too few faithful rounds to decide.
    let mut undecided = experiment("undecided", Verdict::Inconclusive);
    undecided.verdict_reason = "needs about 6 rounds per variant (has 2): the rank test over \
                                2 and 2 rounds cannot reach 95 %"
        .into();
    undecided.rules[0].outcome = Outcome::Undecided;
    undecided.variants = vec![variant("cubic", 200.0, 5, vec![]), variant("bbr", 190.0, 6, vec![])];
    for v in &mut undecided.variants {
        v.rounds[2] = RoundRecord {
            index: 3,
            faithful: false,
            excluded_reason: Some("round 3: the workload failed: bench client timed out".into()),
            path_events: Vec::new(),
            placement: None,
        };
    }

    let mut broken = experiment("broken", Verdict::NotApplicable);
    broken.error = Some(format!("bench client exited with status 1: {HOSTILE}"));
    broken.rounds = 0;
    broken.plots =
        vec![PlotSpec::Timeseries { series: "goodput_mbps".into(), title: "Goodput".into() }];

    Results {
        run: RunInfo {
            tool_version: "0.1.0".into(),
            mode: "quick".into(),
            started_unix_s: 1_793_000_000,
            duration_s: 3725.0,
            interrupted: true,
            command: format!("tcptail lab run --mode quick --note '{HOSTILE}'"),
        },
        environment: Environment {
            kernel: "6.1.0-test".into(),
            cpus: 2,
            cpu_model: "Synthetic CPU @ 2.0GHz".into(),
            congestion_controls_available: vec!["reno".into(), "cubic".into(), "bbr".into()],
            congestion_controls_allowed: vec!["reno".into(), "cubic".into()],
            default_congestion_control: "cubic".into(),
            qdiscs: vec!["fq".into(), "fq_codel".into(), "netem".into()],
            emulator: "builtin".into(),
            emulator_lateness: Some(Lateness {
                worst_p99_us: 350.0,
                max_us: 5000.0,
                bound_us: 200.0,
                flagged_paths: 2,
                paths: 5,
            }),
            notes,
        },
        experiments: vec![cc, nagle, hostile, broken, undecided],
    }
}

/// How many plots of `results` have something to draw, decided from the data alone (not by the
/// renderer): a CDF or time series with a finite point (positive x on a log axis) in some
/// variant, or a bar metric with a finite median (positive on a log axis) in some variant.
pub fn plots_with_data(results: &Results) -> usize {
    plots_with_data_per_experiment(results).iter().sum()
}

/// [`plots_with_data`] for each experiment, in order: the `<svg>` each section must hold.
pub fn plots_with_data_per_experiment(results: &Results) -> Vec<usize> {
    use tcptail_report::SeriesKind;
    let drawable = |exp: &ExperimentResult, name: &str, kind: SeriesKind, log_x: bool| {
        exp.variants.iter().filter_map(|v| v.series(name)).filter(|s| s.kind == kind).any(|s| {
            s.points.iter().any(|p| p[0].is_finite() && p[1].is_finite() && (!log_x || p[0] > 0.0))
        })
    };
    results
        .experiments
        .iter()
        .map(|exp| {
            exp.plots
                .iter()
                .filter(|plot| match plot {
                    PlotSpec::Ecdf { series, log_x, .. } => {
                        drawable(exp, series, SeriesKind::Cdf, *log_x)
                    }
                    PlotSpec::Timeseries { series, .. } => {
                        drawable(exp, series, SeriesKind::Time, false)
                    }
                    PlotSpec::Bars { metrics, log_y, .. } => exp.variants.iter().any(|v| {
                        metrics
                            .iter()
                            .filter_map(|m| v.metric_median(m))
                            .any(|m| m.is_finite() && (!log_y || m > 0.0))
                    }),
                })
                .count()
        })
        .collect()
}
