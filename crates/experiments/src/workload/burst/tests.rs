use super::*;
use crate::workload::{self, test_support};

fn params(pairs: &[(&str, toml::Value)]) -> Params {
    test_support::emulated("100mbit", "2ms", pairs)
}

#[test]
fn bad_parameters_are_named() {
    let err = |p: Params| workload::plan(&OrderBursts, &p).err().expect("refused");
    assert_eq!(err(Params::from_pairs([("cc", "bbr".into())])).key, "path");
    assert_eq!(err(params(&[("cc", "vegas".into())])).key, "cc");
    assert_eq!(err(params(&[("bulk_cc", "vegas".into())])).key, "bulk_cc");
    assert_eq!(err(params(&[("bulk_flows", 9.into())])).key, "bulk_flows");
    assert_eq!(err(params(&[("burst", 0.into())])).key, "burst");
    assert_eq!(err(params(&[("burst_interval", "10us".into())])).key, "burst_interval");
    assert_eq!(err(params(&[("size", "4B".into())])).key, "size");
    assert_eq!(err(params(&[("resamples", 5.into())])).key, "resamples");
    assert_eq!(err(params(&[("colour", "red".into())])).key, "colour");
    let plan = workload::plan(&OrderBursts, &params(&[("cc", "bbr".into())])).unwrap();
    let text = plan.describe();
    assert!(text.contains("bursts of 16 x 64 B orders every 10.0 ms on one bbr connection"));
    assert!(plan.metrics().contains(&"slow_bulk_up_pct".to_owned()));
    let cubic = workload::plan(&OrderBursts, &params(&[("bulk_flows", 0.into())])).unwrap();
    assert!(!cubic.metrics().iter().any(|m| m.contains("up_pct") || m == "bulk_mbps"));
}

fn gain(pacing_gain: u32) -> Option<BbrInfo> {
    // 256 = 1.0; PROBE_BW keeps cwnd_gain 2 (512).
    Some(BbrInfo { bw_bytes_per_sec: 1 << 20, min_rtt_us: 2000, pacing_gain, cwnd_gain: 512 })
}

/// Deterministic, roughly normal spread around `centre` (sum of three uniforms).
fn spread(i: usize, centre: f64, width: f64) -> f64 {
    let u = |k: usize| ((i * 7919 + k * 104_729) % 1000) as f64 / 1000.0;
    centre + width * (u(1) + u(2) + u(3) - 1.5)
}

#[test]
fn a_slow_cluster_sent_in_probe_bw_up_is_found_and_attributed() {
    // 95 % fast orders around 2 ms, 5 % at 3.4 ms (1.7x), the slow ones sent in PROBE_BW up
    // (gain 1.25 = 320/256) where 1 in 8 of the others is too.
    let orders: Vec<Order> = (0..4000)
        .map(|i| {
            let slow = i % 20 == 0;
            let in_up = slow || i % 8 == 1;
            Order {
                t: i as f64 * 1e-3,
                latency_us: if slow { spread(i, 3400.0, 200.0) } else { spread(i, 2000.0, 150.0) },
                own: gain(if in_up { 320 } else { 256 }),
                bulk: gain(256),
            }
        })
        .collect();
    let m = summarise(&orders, 100);
    let get = |k: &str| m.metrics[k];
    assert!(get("unimodal_p") < 0.05, "{m:?}");
    assert!((get("slow_ratio") - 1.7).abs() < 0.1, "{m:?}");
    assert!((get("slow_share_pct") - 5.0).abs() < 1.0, "{m:?}");
    assert!(get("slow_own_up_pct") > 95.0, "{m:?}");
    assert!(get("all_own_up_pct") > 15.0 && get("all_own_up_pct") < 20.0, "{m:?}");
    assert_eq!(get("slow_bulk_up_pct"), 0.0);
    assert_eq!(get("orders_count"), 4000.0);
    // One cluster only: unimodal; no slow cluster of any size.
    let one: Vec<Order> = orders
        .iter()
        .enumerate()
        .map(|(i, o)| Order { latency_us: spread(i, 2000.0, 150.0), ..*o })
        .collect();
    let m = summarise(&one, 100);
    assert!(m.metrics["unimodal_p"] > 0.05, "{m:?}");
}

/// A real round (root, namespaces, TUN): bursts beside a BBR bulk flow on an emulated path;
/// every declared metric or its reason, the bulk flow filling most of the link.
#[test]
fn a_round_beside_a_bbr_bulk_flow() {
    let plan = workload::plan(
        &OrderBursts,
        &params(&[
            ("cc", "bbr".into()),
            ("duration", "1s".into()),
            ("warmup", "200ms".into()),
            ("resamples", 50.into()),
        ]),
    )
    .unwrap();
    let m = test_support::run_once(plan.as_ref(), 5);
    for name in plan.metrics() {
        assert!(
            m.metrics.contains_key(&name) || m.not_measurable.contains_key(&name),
            "{name}: {m:?}"
        );
    }
    assert!(m.metrics["orders_count"] >= 1000.0, "{:?}", m.metrics);
    assert!(m.metrics["p50_us"] >= 2000.0, "a 2 ms path: {:?}", m.metrics);
    assert!(m.metrics["bulk_mbps"] > 50.0, "{:?}", m.metrics);
    assert!(m.series.iter().any(|s| s.name == "bulk_gain" && !s.points.is_empty()));
}
