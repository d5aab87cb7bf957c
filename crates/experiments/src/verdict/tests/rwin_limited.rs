//! rwin-limited's rules on synthetic rounds: on the slides' 10 Gbit/s path the verdict is
//! `reproduced` only when the lifted flow shows the path was held (at least half the link);
//! a lifted round the emulator starved (faithful by its lateness, far below the link) leaves
//! the 1 Gbit/s rules to decide, at most `partly`.

use super::reconnect_storm::variant;
use super::*;

fn rules() -> Vec<Rule> {
    let e = Experiment::builtin("rwin-limited").unwrap();
    let variants: Vec<&str> = e.variants.iter().map(|v| v.name.as_str()).collect();
    e.rules.iter().map(|r| Rule::compile(r, &variants).unwrap()).collect()
}

/// Three rounds of every full-mode variant: the 1 Gbit/s ones as measured in the full-mode
/// run of 2026-11-26 (docs/full-mode.md), the lifted 10 Gbit/s flow at `lifted_10g` Mbit/s.
fn rounds(lifted_10g: [f64; 3]) -> Vec<VariantResult> {
    let bulk = |name: &str, mbps: [f64; 3], link: f64, rwnd: f64| {
        let pct = mbps.map(|m| 100.0 * m / link);
        variant(
            name,
            &[("goodput_mbps", &mbps), ("link_pct", &pct), ("rwnd_limited_pct", &[rwnd; 3])],
        )
    };
    vec![
        bulk("bbr_8mb", [427.0, 431.0, 425.0], 1000.0, 26.0),
        bulk("bbr_128mb", [927.0, 930.0, 921.0], 1000.0, 0.0),
        bulk("cubic_8mb", [433.0, 430.0, 436.0], 1000.0, 100.0),
        bulk("bbr_128mb_loss", [904.0, 899.0, 910.0], 1000.0, 0.0),
        bulk("cubic_128mb_loss", [1.5, 1.7, 1.4], 1000.0, 0.0),
        bulk("bbr_8mb_10g", [428.0, 426.0, 431.0], 10_000.0, 28.0),
        bulk("bbr_128mb_10g", lifted_10g, 10_000.0, 0.0),
    ]
}

#[test]
fn a_lifted_window_that_fills_the_10_gbit_path_reproduces() {
    let d = decide(&rules(), &rounds([7400.0, 7900.0, 7100.0]));
    assert_eq!(d.verdict, Verdict::Reproduced, "{}", d.reason);
    assert!(d.reason.contains("against 7400 Mbit/s lifted"), "{}", d.reason);
}

#[test]
fn a_starved_10_gbit_path_decides_at_most_partly() {
    // Faithful by the emulator's lateness, but carrying a fifth of the link: the emulator,
    // not the window, limited the lifted flow.
    let d = decide(&rules(), &rounds([2100.0, 1900.0, 2000.0]));
    assert_eq!(d.verdict, Verdict::Partly, "{} ({})", d.reason, d.rule);
    assert!(d.reason.contains("not held faithfully"), "{}", d.reason);
}
