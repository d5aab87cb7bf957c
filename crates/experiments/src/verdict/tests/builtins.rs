//! The built-in experiments' rules: they compile, and give the verdicts their files intend on
//! synthetic results (reproduced, partly, not reproduced, not applicable).

use super::*;

#[test]
fn every_builtin_rule_compiles() {
    let experiments = Experiment::builtins();
    assert!(experiments.len() >= 9);
    for e in &experiments {
        let variants: Vec<&str> = e.variants.iter().map(|v| v.name.as_str()).collect();
        assert!(!e.rules.is_empty(), "{}", e.name);
        for rule in &e.rules {
            let compiled = Rule::compile(rule, &variants).unwrap_or_else(|err| {
                panic!("{} line {}: `{}`: {err}", e.file, rule.line, err.key)
            });
            assert_eq!(compiled.when(), rule.when.as_deref());
            assert!(compiled.references().iter().all(|r| variants.contains(&r.variant.as_str())));
        }
        assert!(e.rules.last().unwrap().when.is_none(), "{}: final rule has a `when`", e.name);
    }
}

fn builtin(name: &str) -> (Experiment, Vec<Rule>) {
    let e = Experiment::builtin(name).unwrap();
    let variants: Vec<&str> = e.variants.iter().map(|v| v.name.as_str()).collect();
    let rules = e.rules.iter().map(|r| Rule::compile(r, &variants).unwrap()).collect();
    (e, rules)
}

/// Results where every listed variant has the given medians, with a ±5 % spread.
fn results(values: &[(&str, &[(&str, f64)])]) -> Vec<VariantResult> {
    values
        .iter()
        .map(|(name, metrics)| {
            let m: Vec<_> = metrics.iter().map(|&(m, x)| (m, x, 0.95 * x, 1.05 * x)).collect();
            result(name, &m)
        })
        .collect()
}

#[test]
fn nagle_delack() {
    let (e, rules) = builtin("nagle-delack");
    let run = |nagle: f64, nodelay: f64| {
        let delack = [("p50_us", nagle), ("server_ato_us", 40000.0)];
        let nodelay = [("p50_us", nodelay)];
        let vs: Vec<(&str, &[(&str, f64)])> = e
            .variants
            .iter()
            .map(|v| match v.name.as_str() {
                "nagle_delack" => ("nagle_delack", &delack[..]),
                "nodelay" => ("nodelay", &nodelay[..]),
                name => (name, &[("p50_us", 60.0)][..]),
            })
            .collect();
        decide(&rules, &results(&vs))
    };
    let d = run(40123.0, 52.0);
    assert_eq!(d.verdict, Verdict::Reproduced);
    assert!(d.reason.contains("takes 40100 µs at p50 against 52 µs"), "{}", d.reason);
    assert!(d.missing.is_empty(), "{:?}", d.missing);
    assert_eq!(run(150.0, 52.0).verdict, Verdict::Partly);
    let d = run(55.0, 52.0);
    assert_eq!((d.verdict, d.rule.as_str()), (Verdict::NotReproduced, "otherwise"));
    assert!(d.reason.contains("55 µs with Nagle on, 52 µs with TCP_NODELAY"), "{}", d.reason);
    // Smoke mode runs only two variants; those decide the rules on their own.
    let smoke =
        results(&[("nagle_delack", &[("p50_us", 40000.0)]), ("nodelay", &[("p50_us", 50.0)])]);
    let d = decide(&rules, &smoke);
    assert_eq!(d.verdict, Verdict::Reproduced);
    assert!(d.reason.contains("(server ato n/a µs)"), "{}", d.reason);
    assert!(d.missing.contains(&"nagle_delack.server_ato_us".to_string()));
}

#[test]
fn loss() {
    let (_, rules) = builtin("loss");
    let run = |bbr5: f64, link_pct: f64| {
        let bbr5 = [("goodput_mbps", bbr5), ("link_pct", link_pct)];
        results(&[
            ("cubic_0", &[("goodput_mbps", 95.0)]),
            ("bbr_0", &[("goodput_mbps", 94.0)]),
            ("cubic_1", &[("goodput_mbps", 30.0)]),
            ("bbr_1", &[("goodput_mbps", 90.0)]),
            ("cubic_2", &[("goodput_mbps", 20.0)]),
            ("bbr_2", &[("goodput_mbps", 88.0)]),
            ("cubic_5", &[("goodput_mbps", 10.0)]),
            ("bbr_5", &bbr5),
        ])
    };
    let d = decide(&rules, &run(85.0, 89.0));
    assert_eq!(d.verdict, Verdict::Reproduced);
    assert!(
        d.reason.starts_with("At 5 % loss BBR keeps 85 Mbit/s (89 % of the link)"),
        "{}",
        d.reason
    );
    assert_eq!(decide(&rules, &run(25.0, 26.0)).verdict, Verdict::Partly);
    let d = decide(&rules, &run(9.0, 9.5));
    assert_eq!(d.verdict, Verdict::NotReproduced);
    assert!(d.reason.contains("5 % 9 vs 10 Mbit/s"), "{}", d.reason);
    // Smoke mode runs cubic_1 and bbr_1 only: the first rule cannot be decided.
    let smoke =
        results(&[("cubic_1", &[("goodput_mbps", 30.0)]), ("bbr_1", &[("goodput_mbps", 90.0)])]);
    let d = decide(&rules, &smoke);
    assert_eq!(d.verdict, Verdict::NotApplicable);
    assert_eq!(d.missing, ["bbr_5.link_pct", "bbr_5.goodput_mbps", "cubic_5.goodput_mbps"]);
    assert!(
        d.reason.starts_with("the rule at line 114 (`bbr_5.link_pct >= 80 and"),
        "{}",
        d.reason
    );
    assert!(
        d.reason.ends_with(
            "needs bbr_5.link_pct, bbr_5.goodput_mbps and cubic_5.goodput_mbps which this run did \
             not measure"
        ),
        "{}",
        d.reason
    );
}

#[test]
fn bloat_guards_full_mode_variants_with_has() {
    let (_, rules) = builtin("bloat");
    let vs = results(&[
        ("cubic_tail_10m", &[("probe_p50_ms", 900.0), ("goodput_mbps", 9.5)]),
        ("bbr_tail_10m", &[("probe_p50_ms", 40.0), ("goodput_mbps", 9.4)]),
        ("cubic_codel_10m", &[("probe_p50_ms", 20.0)]),
    ]);
    let d = decide(&rules, &vs);
    assert_eq!(d.verdict, Verdict::Reproduced);
    assert!(d.rule.starts_with("when: not has(bbr_tail_128k.probe_p50_ms)"), "{}", d.rule);
}

/// Full-mode results for a built-in experiment: every (variant, metric) any of its rules
/// references gets `default` (with a ±5 % spread) unless `set` gives (median, min, max).
fn synthetic(
    e: &Experiment,
    rules: &[Rule],
    default: f64,
    set: &[(&str, &str, f64, f64, f64)],
) -> Vec<VariantResult> {
    let refs: Vec<Ref> = rules.iter().flat_map(Rule::references).collect();
    e.variants
        .iter()
        .map(|v| {
            let mut metrics: Vec<(&str, f64, f64, f64)> = Vec::new();
            for r in refs.iter().filter(|r| r.variant == v.name) {
                if metrics.iter().any(|m| m.0 == r.metric) {
                    continue;
                }
                let given = set.iter().find(|s| s.0 == v.name && s.1 == r.metric);
                metrics.push(match given {
                    Some(&(_, m, median, min, max)) => (m, median, min, max),
                    None => (r.metric.as_str(), default, 0.95 * default, 1.05 * default),
                });
            }
            result(&v.name, &metrics)
        })
        .collect()
}

/// Every built-in experiment not covered above gives `reproduced` on data that shows its
/// claim, and falls to its final `not-reproduced` rule on data where every variant measured
/// the same (a claim about a difference must not hold without one).
#[test]
fn every_builtin_reproduces_on_a_difference_and_not_without_one() {
    type Case = (&'static str, &'static [(&'static str, &'static str, f64, f64, f64)]);
    let cases: [Case; 7] = [
        (
            "trading-cc",
            &[("bbr_x", "p99_us", 200.0, 190.0, 210.0), ("cubic_x", "p99_us", 100.0, 95.0, 105.0)],
        ),
        (
            "idle-restart",
            &[
                ("cubic_ssai1", "burst_ms", 50.0, 48.0, 52.0),
                ("cubic_ssai0", "burst_ms", 30.0, 29.0, 31.0),
            ],
        ),
        (
            "tuning-ladder",
            &[
                ("baseline", "p99_us", 100.0, 80.0, 150.0),
                ("same_cpu", "p99_us", 60.0, 55.0, 70.0),
                ("spin", "p99_us", 50.0, 49.0, 51.0),
            ],
        ),
        (
            "sendq",
            &[
                ("cubic_t10", "start_p50_ms", 35.0, 34.0, 36.0),
                ("cubic_unbounded", "start_p50_ms", 233.0, 230.0, 236.0),
            ],
        ),
        (
            "bloat",
            &[
                ("cubic_tail_10m", "probe_p50_ms", 1000.0, 950.0, 1050.0),
                ("bbr_tail_10m", "probe_p50_ms", 190.0, 180.0, 200.0),
                ("cubic_tail_128k", "probe_p50_ms", 3000.0, 2900.0, 3100.0),
                ("bbr_tail_128k", "probe_p50_ms", 400.0, 390.0, 410.0),
            ],
        ),
        (
            "wan",
            &[
                ("bbr_loss", "goodput_mbps", 280.0, 270.0, 290.0),
                ("cubic_loss", "goodput_mbps", 50.0, 45.0, 55.0),
                ("bbr_loss", "rtt_p95_ms", 110.0, 105.0, 115.0),
                ("cubic_loss", "rtt_p95_ms", 150.0, 140.0, 160.0),
            ],
        ),
        (
            "rwin-limited",
            &[
                ("rmem_8mb", "goodput_mbps", 140.0, 135.0, 145.0),
                ("rmem_64mb", "goodput_mbps", 300.0, 295.0, 305.0),
                ("rmem_8mb", "rwnd_limited_pct", 45.0, 40.0, 50.0),
                ("rmem_64mb", "rwnd_limited_pct", 0.0, 0.0, 0.0),
            ],
        ),
    ];
    for (name, set) in cases {
        let (e, rules) = builtin(name);
        assert_eq!(rules.last().map(Rule::verdict), Some(Verdict::NotReproduced), "{name}");
        let d = decide(&rules, &synthetic(&e, &rules, 100.0, set));
        assert_eq!(d.verdict, Verdict::Reproduced, "{name}: {} ({})", d.reason, d.rule);
        assert!(!d.reason.contains("n/a"), "{name}: {}", d.reason);
        let d = decide(&rules, &synthetic(&e, &rules, 100.0, &[]));
        assert_eq!(d.verdict, Verdict::NotReproduced, "{name}: {} ({})", d.reason, d.rule);
        assert_eq!(d.rule, "otherwise", "{name}");
    }
}
