//! The keepalive engine's arithmetic, parameters, and one short joint round.

use super::*;
use crate::workload::{self, test_support};

fn params(pairs: &[(&str, toml::Value)]) -> Params {
    let mut all = vec![("event", toml::Value::from("1s:blackhole"))];
    all.extend(pairs.iter().cloned());
    test_support::emulated("10mbit", "10ms", &all)
}

#[test]
fn the_seeds_figures() {
    let seed = KeepaliveTimes::parse("10s/5s/3").unwrap();
    let (at, timers) = expected(Some(seed), None, None, 15);
    assert_eq!(at, Duration::from_secs(25));
    assert_eq!(timers.len(), 4);
    let (at, _) = expected(Some(KERNEL_KEEPALIVE), None, None, 15);
    assert_eq!(at, Duration::from_secs(7875), "2 h 11 min 15 s");
    // TCP_USER_TIMEOUT 12 s: the probe at 10 s is out, the timer at 15 s drops it.
    let (at, _) = expected(Some(seed), Some(Duration::from_secs(12)), None, 15);
    assert_eq!(at, Duration::from_secs(15));
    // Below the idle time: still one probe, one interval later.
    let (at, _) = expected(Some(seed), Some(Duration::from_secs(3)), None, 15);
    assert_eq!(at, Duration::from_secs(15));
}

#[test]
fn retries2_model() {
    assert_eq!(retries_timeout(15), Duration::from_millis(924_600));
    assert_eq!(retries_timeout(5), Duration::from_millis(12_600));
    assert_eq!(retries_timeout(8), Duration::from_millis(102_200));
    // The abort falls on the first timeout at or after the model's time, counted from the
    // first retransmission timeout.
    let first = FirstRto { at: Duration::from_millis(430), next: Duration::from_millis(420) };
    let (at, timers) = expected(None, None, Some(first), 5);
    // 0.42 + 0.84 + 1.68 + 3.36 + 6.72 = 13.02 s >= 12.6 s
    assert_eq!(at, Duration::from_millis(430 + 13_020));
    assert_eq!(timers.len(), 6);
    let (at, timers) = expected(None, Some(Duration::from_secs(5)), Some(first), 15);
    assert_eq!(at, Duration::from_millis(5430));
    assert_eq!(timers.iter().sum::<Duration>(), Duration::from_millis(5430));
}

#[test]
fn timer_wheel_granularity() {
    let tick = Duration::from_millis(4); // HZ=250
    assert_eq!(timer_granularity(Duration::from_millis(100), tick), Duration::from_millis(8));
    assert_eq!(timer_granularity(Duration::from_millis(200), tick), Duration::from_millis(8));
    assert_eq!(timer_granularity(Duration::from_secs(1), tick), Duration::from_millis(36));
    assert_eq!(timer_granularity(Duration::from_secs(5), tick), Duration::from_millis(260));
    assert_eq!(timer_granularity(Duration::from_secs(30), tick), Duration::from_millis(2052));
}

#[test]
fn bad_parameters_are_named() {
    let err = |p: Params| workload::plan(&KeepaliveEngine, &p).err().expect("refused");
    assert_eq!(err(params(&[])).key, "keepalive");
    assert_eq!(err(params(&[("keepalive", "10s/5s".into())])).key, "keepalive");
    assert_eq!(err(params(&[("keepalive", "10ms/5s/3".into())])).key, "keepalive");
    assert_eq!(err(params(&[("inflight", true.into()), ("side", "server".into())])).key, "side");
    assert_eq!(
        err(params(&[("keepalive", "sysctl".into()), ("retries2_unscaled", 15.into())])).key,
        "retries2_unscaled"
    );
    let no_event = test_support::emulated("10mbit", "10ms", &[("keepalive", "1s/1s/1".into())]);
    assert_eq!(err(no_event).key, "event");
    let restore = params(&[
        ("keepalive", "1s/1s/1".into()),
        ("event", toml::Value::Array(vec!["1s:blackhole".into(), "9s:restore".into()])),
    ]);
    assert_eq!(err(restore).key, "event");
    assert!(workload::plan(&KeepaliveEngine, &params(&[("keepalive", "sysctl".into())])).is_ok());
}

#[test]
fn variants_must_share_the_path() {
    let a = params(&[("keepalive", "1s/1s/1".into())]);
    let b = test_support::emulated(
        "10mbit",
        "20ms",
        &[("event", "1s:blackhole".into()), ("keepalive", "1s/1s/1".into())],
    );
    let err = KeepaliveEngine.joint(&[("a", &a), ("b", &b)]).err().expect("refused");
    assert_eq!(err.0, 1);
    assert_eq!(err.1.key, "path");
    assert!(KeepaliveEngine.joint(&[("a", &a), ("b", &a)]).unwrap().is_some());
}

/// One joint round with scaled values (needs root, /dev/net/tun and iproute2): a per-socket
/// 2/1/1 keepalive (3 s), the server's sysctls at 2/1/1 (3 s), and an order in flight with a
/// 1 s user timeout, each detected within its bounds (this is also what the rules check).
#[test]
fn a_blackhole_is_detected_within_the_bounds() {
    let shared = [
        ("server_sysctl", {
            let mut t = toml::map::Map::new();
            t.insert("net.ipv4.tcp_keepalive_time".into(), "2".into());
            t.insert("net.ipv4.tcp_keepalive_intvl".into(), "1".into());
            t.insert("net.ipv4.tcp_keepalive_probes".into(), "1".into());
            toml::Value::Table(t)
        }),
        ("connections", 2.into()),
    ];
    let with = |extra: &[(&str, toml::Value)]| {
        let mut all: Vec<(&str, toml::Value)> = shared.to_vec();
        all.extend(extra.iter().cloned());
        params(&all)
    };
    let socket = with(&[("keepalive", "2s/1s/1".into())]);
    let sysctl = with(&[("keepalive", "sysctl".into()), ("side", "server".into())]);
    let uto = with(&[("inflight", true.into()), ("user_timeout", "1s".into())]);
    let joint = KeepaliveEngine
        .joint(&[("socket", &socket), ("sysctl", &sysctl), ("uto", &uto)])
        .unwrap()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let ctx = RoundContext {
        round: 0,
        seed: 1,
        scratch: dir.path(),
        stop_requested: &|| false,
        progress: &|_| {},
        path_events: &std::sync::Mutex::default(),
        placement: &std::sync::Mutex::default(),
    };
    let out = joint.run(&ctx).expect("a real round needs root, namespaces and TUN");
    assert_eq!(out.len(), 3);
    // The user timeout counts from the first retransmission timeout (at least 200 ms).
    for (case, expected_s) in out.iter().zip([3.0..3.01, 3.0..3.01, 1.2..2.0]) {
        assert_eq!(case.len(), 2);
        for m in case {
            let get = |k: &str| m.metrics.get(k).copied().unwrap_or(f64::NAN);
            assert!(expected_s.contains(&get("expected_s")), "{m:?}");
            assert!(get("detect_s") >= get("floor_s"), "{m:?}");
            assert!(get("detect_s") <= get("bound_s"), "{m:?}");
            assert!(m.notes.iter().any(|n| n.contains("timed out")), "{m:?}");
        }
    }
}
