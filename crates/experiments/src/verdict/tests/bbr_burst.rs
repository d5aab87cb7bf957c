//! bbr-burst's rules on synthetic rounds: a slow cluster at the seed's 1.5-2x, sent in
//! PROBE_BW up, with CUBIC unimodal decides `reproduced`; unimodal BBR `not-reproduced`;
//! rounds that disagree `inconclusive`.

use super::reconnect_storm::variant;
use super::*;

fn rules() -> Vec<Rule> {
    let e = Experiment::builtin("bbr-burst").unwrap();
    let variants: Vec<&str> = e.variants.iter().map(|v| v.name.as_str()).collect();
    e.rules.iter().map(|r| Rule::compile(r, &variants).unwrap()).collect()
}

/// BBR's and CUBIC's rounds: BBR's unimodality p-values, slow ratios and slow / all shares in
/// PROBE_BW up; CUBIC's p-values.
fn rounds(
    p: &[f64],
    ratio: &[f64],
    slow_up: &[f64],
    all_up: &[f64],
    cubic_p: &[f64],
) -> Vec<VariantResult> {
    let same = |x: f64| vec![x; p.len()];
    vec![
        variant(
            "bbr",
            &[
                ("unimodal_p", p),
                ("slow_ratio", ratio),
                ("slow_own_up_pct", slow_up),
                ("all_own_up_pct", all_up),
                ("slow_share_pct", &same(3.0)),
                ("antimode_us", &same(3000.0)),
                ("p50_us", &same(2000.0)),
                ("p99_us", &same(3500.0)),
                ("slow_bulk_up_pct", &same(12.0)),
                ("all_bulk_up_pct", &same(12.0)),
            ],
        ),
        variant(
            "cubic",
            &[
                ("unimodal_p", cubic_p),
                ("p50_us", &same(2000.0)),
                ("p99_us", &same(2600.0)),
                ("slow_ratio", &same(1.2)),
            ],
        ),
    ]
}

#[test]
fn the_seeds_slow_cluster_in_probe_bw_up_reproduces() {
    let d = decide(
        &rules(),
        &rounds(
            &[0.005, 0.005, 0.01],
            &[1.7, 1.75, 1.65],
            &[60.0, 70.0, 65.0],
            &[12.0, 12.5, 12.2],
            &[0.6, 0.4, 0.8],
        ),
    );
    assert_eq!(d.verdict, Verdict::Reproduced, "{}", d.reason);
    assert!(d.reason.contains("at 1.7x the p50 of 2000 µs"), "{}", d.reason);
    // Bimodal at the seed's ratio but not in PROBE_BW up: only part of the account.
    let d = decide(
        &rules(),
        &rounds(
            &[0.005, 0.005, 0.01],
            &[1.7, 1.75, 1.65],
            &[12.0, 11.0, 13.0],
            &[12.0, 12.5, 12.2],
            &[0.6, 0.4, 0.8],
        ),
    );
    assert_eq!(d.verdict, Verdict::Partly, "{}", d.reason);
}

#[test]
fn a_unimodal_bbr_does_not_reproduce() {
    let d = decide(
        &rules(),
        &rounds(
            &[0.6, 0.5, 0.7],
            &[1.1, 1.2, 1.15],
            &[12.0, 11.0, 13.0],
            &[12.0, 12.5, 12.2],
            &[0.6, 0.4, 0.8],
        ),
    );
    assert_eq!((d.verdict, d.rule.as_str()), (Verdict::NotReproduced, "otherwise"), "{}", d.reason);
}

#[test]
fn rounds_that_disagree_are_inconclusive() {
    // One round bimodal at 1.7x, one not: two rounds cannot tell.
    let d = decide(
        &rules(),
        &rounds(&[0.005, 0.04], &[1.7, 1.9], &[60.0, 14.0], &[12.0, 12.0], &[0.6, 0.4]),
    );
    assert_eq!(d.verdict, Verdict::Inconclusive, "{} ({})", d.reason, d.rule);
}
