//! Parameter checks of the `request-response` engine, and real rounds on lab paths (root:
//! these fail with the reason when it is missing, they never skip).

use super::*;
use crate::workload;
use crate::workload::test_support::run_once;

fn params(pairs: &[(&str, toml::Value)]) -> Params {
    Params::from_pairs(pairs.iter().cloned())
}

fn refused(pairs: &[(&str, toml::Value)]) -> ParamError {
    workload::plan(&RequestResponse, &params(pairs)).err().expect("refused")
}

#[test]
fn bad_parameters_are_named_by_key() {
    assert_eq!(refused(&[("cc", "vegas".into())]).key, "cc");
    assert_eq!(refused(&[("load", "open".into())]).key, "request_rate");
    assert_eq!(refused(&[("request_rate", 1000.into())]).key, "request_rate");
    assert_eq!(refused(&[("spacing", "poisson".into())]).key, "spacing");
    assert_eq!(refused(&[("size", "8B".into())]).key, "size");
    assert_eq!(refused(&[("response_size", "64MB".into())]).key, "response_size");
    assert_eq!(refused(&[("duration", "1ms".into())]).key, "duration");
    assert_eq!(refused(&[("quickack", "always".into())]).key, "quickack");
    assert_eq!(refused(&[("placement", "numa".into())]).key, "placement");
    assert_eq!(refused(&[("cpu", 4000.into())]).key, "cpu");
    assert_eq!(refused(&[("placement", "free".into()), ("cpu", 0.into())]).key, "cpu");
    assert_eq!(refused(&[("spin", true.into())]).key, "spin");
    assert_eq!(refused(&[("competing_flows", 100.into())]).key, "competing_flows");
    assert_eq!(refused(&[("rate", "1gbit".into())]).key, "rate");
    assert_eq!(refused(&[("colour", "red".into())]).key, "colour");
}

#[test]
fn a_full_variant_is_accepted_and_described() {
    let p = params(&[
        ("path", "tbf".into()),
        ("rate", "1gbit".into()),
        ("cc", "bbr".into()),
        ("load", "open".into()),
        ("request_rate", 1000.into()),
        ("competing_flows", 1.into()),
        ("duration", "2s".into()),
    ]);
    let plan = workload::plan(&RequestResponse, &p).unwrap();
    let d = plan.describe();
    assert!(d.contains("open loop 1000/s") && d.contains("cc bbr"), "{d}");
    assert!(d.contains("1 competing bulk flow"), "{d}");
}

/// The sanity every latency round must pass.
pub(crate) fn assert_sane(m: &Measurement) {
    let get = |k: &str| *m.metrics.get(k).unwrap_or_else(|| panic!("no {k}: {m:?}"));
    // A short round on a loaded machine may have too few samples for a p99 (or, with two
    // spinning ends on two shared vCPUs, even a p50): then it is reported as not measurable,
    // with the count it would need, and not as a number.
    match (m.metrics.get("p50_us"), m.metrics.get("p99_us")) {
        (Some(&p50), Some(&p99)) => {
            assert!(0.0 < p50 && p50 <= p99, "{:?}", m.metrics);
            assert!(p99 <= get("max_us"), "{:?}", m.metrics);
        }
        (Some(&p50), None) => {
            assert!(p50 > 0.0, "{:?}", m.metrics);
            assert!(m.not_measurable["p99_us"].contains("needs 368"), "{m:?}");
        }
        (None, _) => {
            assert!(m.not_measurable["p50_us"].contains("needs"), "{m:?}");
            assert!(!m.metrics.contains_key("p99_us"), "{m:?}");
        }
    }
    assert!(get("samples_count") > 0.0, "{:?}", m.metrics);
    assert!(get("tx_per_s") > 0.0, "{:?}", m.metrics);
    let cdf = m.series.iter().find(|s| s.name == "latency_us").expect("latency_us series");
    assert!(!cdf.points.is_empty());
    assert!(m.notes.iter().any(|n| n.starts_with("placement:")), "{:?}", m.notes);
}

#[test]
fn open_loop_bbr_round_on_a_tbf_bottleneck_with_a_competing_flow() {
    let p = params(&[
        ("path", "tbf".into()),
        ("rate", "1gbit".into()),
        ("cc", "bbr".into()),
        ("load", "open".into()),
        ("request_rate", 1000.into()),
        ("competing_flows", 1.into()),
        ("duration", "700ms".into()),
        ("warmup", "100ms".into()),
    ]);
    let m = run_once(workload::plan(&RequestResponse, &p).unwrap().as_ref(), 3);
    assert_sane(&m);
    let get = |k: &str| m.metrics[k];
    // ~700 requests at 1000/s.
    assert!(get("samples_count") > 400.0 && get("samples_count") < 900.0, "{:?}", m.metrics);
    assert!(get("sched_p99_us") >= get("p50_us"), "{:?}", m.metrics);
    // The competing flow carried data while the requests ran, and no more than the tbf lets
    // through (1 Gbit/s less headers, 2 % for the bucket): how much of the link it gets beside
    // the requests is this host's speed, not the path's.
    let competing = get("competing_mbps");
    assert!(competing > 0.0 && competing < 1000.0 * 1448.0 / 1500.0 * 1.02, "{:?}", m.metrics);
    let phases: f64 = m
        .metrics
        .iter()
        .filter(|(k, _)| k.starts_with("all_") && k.ends_with("_pct"))
        .map(|(_, v)| v)
        .sum();
    assert!((phases - 100.0).abs() < 0.01, "{:?}", m.metrics);
    assert!(m.notes.iter().any(|n| n.contains("client bbr, server bbr")), "{:?}", m.notes);
}

#[test]
fn closed_loop_round_on_veth() {
    let p = params(&[("duration", "300ms".into()), ("warmup", "50ms".into())]);
    let m = run_once(workload::plan(&RequestResponse, &p).unwrap().as_ref(), 3);
    assert_sane(&m);
    assert!(!m.metrics.contains_key("sched_p99_us"));
}
