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
    assert!(
        m.notes.iter().any(|n| n
            == "the order socket's BBR phase at send: probe-bw-cruise 82.5 %, probe-bw-up 17.5 %"),
        "{:?}",
        m.notes
    );
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
/// every declared metric or its reason, the bulk flow beside them.
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
    // The bulk flow ran beside the orders, no faster than the 100 Mbit/s link less headers;
    // how much of it this host let one flow fill is not this test's business (the tenant
    // test below checks rates against a reference measured in the same run).
    let bulk = m.metrics["bulk_mbps"];
    assert!(bulk > 0.0 && bulk < 100.0 * 1448.0 / 1500.0 * 1.02, "{:?}", m.metrics);
    assert!(m.series.iter().any(|s| s.name == "bulk_gain" && !s.points.is_empty()));
}

fn tbf(pairs: &[(&str, toml::Value)]) -> Params {
    let mut all = vec![
        ("path", toml::Value::from("tbf")),
        ("rate", "100mbit".into()),
        ("buffer", "64KB".into()),
        ("order_tos", 184.into()),
    ];
    all.extend(pairs.iter().cloned());
    Params::from_pairs(all)
}

#[test]
fn tenant_classes_are_checked_and_written_as_tc_commands() {
    let err = |p: Params| workload::plan(&OrderBursts, &p).err().expect("refused");
    assert_eq!(err(tbf(&[("htb_latency", "50mbit".into())])).key, "htb_bulk");
    assert_eq!(err(tbf(&[("htb_bulk", "30mbit".into())])).key, "htb_latency");
    assert_eq!(err(tbf(&[("htb_borrow", true.into())])).key, "htb_borrow");
    let too_much = [("htb_latency", "80mbit".into()), ("htb_bulk", "30mbit".into())];
    assert_eq!(err(tbf(&too_much)).key, "htb_bulk");
    let untagged = tbf(&[
        ("htb_latency", "50mbit".into()),
        ("htb_bulk", "30mbit".into()),
        ("order_tos", 0.into()),
    ]);
    assert_eq!(err(untagged).key, "order_tos");
    let emulated = params(&[("htb_latency", "50mbit".into()), ("htb_bulk", "30mbit".into())]);
    assert_eq!(err(emulated).key, "htb_latency");
    let classes = TenantClasses {
        link: BitRate(100_000_000),
        latency: BitRate(50_000_000),
        bulk: BitRate(30_000_000),
        borrow: false,
        buffer_bytes: 65536,
        order_tos: 0xb8,
    };
    let lines: Vec<String> = classes.commands("eth9").iter().map(|a| a.join(" ")).collect();
    assert_eq!(lines[0], "qdisc replace dev eth9 root handle 1: htb default 20");
    assert_eq!(
        lines[3],
        "class add dev eth9 parent 1:1 classid 1:20 htb rate 30000000bit ceil 30000000bit \
         burst 65536 cburst 65536"
    );
    assert_eq!(lines[5], "qdisc add dev eth9 parent 1:20 handle 20: bfifo limit 65536");
    assert_eq!(
        lines[6],
        "filter add dev eth9 parent 1: protocol ip prio 1 u32 match ip tos 0xb8 0xfc flowid 1:10"
    );
    let borrowing = TenantClasses { borrow: true, ..classes };
    assert!(borrowing.commands("d")[2].join(" ").contains("ceil 100000000bit"));
}

/// A real round (root, namespaces, htb): a bulk BBR tenant capped at 30 Mbit/s by its class,
/// the order tenant beside it in its own. The reference is the same round with borrowing (the
/// bulk class's ceil is the 100 Mbit/s link), run just before it: what this host can push
/// through the path right now, so that neither bound depends on the host's speed.
#[test]
fn a_round_with_tenant_classes() {
    let round = |borrow: bool| {
        let plan = workload::plan(
            &OrderBursts,
            &tbf(&[
                ("cc", "bbr".into()),
                ("burst", 1.into()),
                ("burst_interval", "2ms".into()),
                ("duration", "1s".into()),
                ("warmup", "200ms".into()),
                ("resamples", 50.into()),
                ("htb_latency", "50mbit".into()),
                ("htb_bulk", "30mbit".into()),
                ("htb_borrow", borrow.into()),
            ]),
        )
        .unwrap();
        let text = plan.describe();
        assert!(text.contains("latency tenant (TOS 0xb8) 50 Mbit/s"), "{text}");
        let m = test_support::run_once(plan.as_ref(), 6);
        assert!(m.metrics["orders_count"] >= 300.0, "{:?}", m.metrics);
        m.metrics["bulk_mbps"]
    };
    // Above the cap: htb lets a class run ahead of its rate by one burst (64 KiB, 0.5 Mbit over
    // the >= 1.2 s window) and the window's ends count up to one BDP in flight (~0.3 Mbit): 32
    // leaves room for both and still fails when the class does not cap the flow at 30 Mbit/s,
    // provided the host can push more than that now, which the borrowing round shows. A host
    // too busy to push 36 Mbit/s through an open class cannot tell the cap from its own limit:
    // try again, up to three pairs, then fail saying so.
    let mut reference = Vec::new();
    for _ in 0..3 {
        let open = round(true);
        let capped = round(false);
        assert!(capped < 32.0, "capped at 30 Mbit/s, got {capped:.1} (open class: {open:.1})");
        reference.push((open, capped));
        if open > 36.0 {
            // Below: the capped flow gets the rate this host could push, up to the cap. The two
            // rounds are seconds apart on a shared machine whose share for the flow swings by
            // up to 2x between them (19.7 vs 28 Mbit/s seen in CI under load), so half of it;
            // that still catches what would break the class: a rate in bytes (1/8 of it), a
            // class that never gets its rate, bulk traffic filed under the wrong class.
            let floor = 0.5 * open.min(30.0);
            assert!(capped > floor, "capped {capped:.1} < {floor:.1} (open class: {open:.1})");
            return;
        }
    }
    panic!(
        "the open class never carried more than the 30 Mbit/s cap: (open, capped) {reference:?}"
    );
}
