//! tenant-isolation's rules on synthetic rounds: classes that cut the latency tenant's p99
//! to a fraction decide `reproduced`, classes that change nothing `not-reproduced`, rounds
//! that disagree `inconclusive`.

use super::reconnect_storm::variant;
use super::*;

fn rules() -> Vec<Rule> {
    let e = Experiment::builtin("tenant-isolation").unwrap();
    let variants: Vec<&str> = e.variants.iter().map(|v| v.name.as_str()).collect();
    e.rules.iter().map(|r| Rule::compile(r, &variants).unwrap()).collect()
}

/// The latency tenant's p99 per round in one FIFO and with capped classes.
fn rounds(fifo: &[f64], htb: &[f64]) -> Vec<VariantResult> {
    let same = |x: f64| vec![x; fifo.len()];
    vec![
        variant("fifo", &[("p99_us", fifo), ("p50_us", &same(60.0)), ("bulk_mbps", &same(92.0))]),
        variant("htb", &[("p99_us", htb), ("p50_us", &same(35.0)), ("bulk_mbps", &same(28.5))]),
        variant(
            "htb_borrow",
            &[("p99_us", htb), ("p50_us", &same(35.0)), ("bulk_mbps", &same(85.0))],
        ),
    ]
}

#[test]
fn classes_that_protect_the_latency_tenant_reproduce() {
    let d = decide(&rules(), &rounds(&[9000.0, 9600.0, 6800.0], &[84.0, 80.0, 95.0]));
    assert_eq!(d.verdict, Verdict::Reproduced, "{}", d.reason);
    assert!(d.reason.contains("p99 is 84 µs against 9000 µs"), "{}", d.reason);
    assert!(d.reason.contains("gets 28.5 Mbit/s against 92 Mbit/s"), "{}", d.reason);
}

#[test]
fn classes_that_change_nothing_do_not_reproduce() {
    let d = decide(&rules(), &rounds(&[90.0, 96.0, 88.0], &[95.0, 100.0, 92.0]));
    assert_eq!((d.verdict, d.rule.as_str()), (Verdict::NotReproduced, "otherwise"), "{}", d.reason);
}

#[test]
fn rounds_that_disagree_are_inconclusive() {
    // The shared machine's stalls: one class round as slow as the FIFO's.
    let d = decide(&rules(), &rounds(&[9600.0, 5200.0, 9400.0], &[13800.0, 4000.0, 480.0]));
    assert_eq!(d.verdict, Verdict::Inconclusive, "{} ({})", d.reason, d.rule);
}
