//! `tune::apply` and `tune::revert` for real, from a thread inside a throwaway network
//! namespace (where `/proc/sys/net` is that namespace's): the kernel rejecting a value half-way
//! rolls back what was applied; a full apply/revert restores every value exactly. The host's
//! values are read before and after and must not change. Needs root; fails with a reason
//! without it.

use tcptail_audit::profile::parse_str;
use tcptail_audit::tune::{self, Plan};
use tcptail_audit::{Error, HostView, Snapshot};
use tcptail_netns::{Cleanup, Netns, ensure_root};

const KEYS: [&str; 3] =
    ["net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_tw_reuse", "net.ipv4.tcp_ecn"];

fn profile(ecn: u32) -> String {
    format!(
        r#"name = "lib-ns"
[[setting]]
key = "net.ipv4.tcp_slow_start_after_idle"
value = 0
scope = "netns"
rationale = "r"
[[setting]]
key = "net.ipv4.tcp_tw_reuse"
value = 1
scope = "netns"
rationale = "r"
[[setting]]
key = "net.ipv4.tcp_ecn"
value = {ecn}
scope = "netns"
rationale = "r"
"#
    )
}

fn host_values() -> Vec<String> {
    KEYS.iter().map(|k| tcptail_netns::sysctl::host_sysctl(k).unwrap()).collect()
}

fn ns_values(ns: &Netns) -> Vec<String> {
    KEYS.iter().map(|k| ns.sysctl(k).unwrap()).collect()
}

fn plan_inside(ns: &Netns, text: &str) -> Plan {
    let p = parse_str("lib-ns.toml", text).unwrap();
    ns.run(move || {
        let view = HostView::at("/");
        let snap = Snapshot::collect(&view, p.settings.iter().map(|s| s.key.as_str()));
        assert!(snap.child_netns, "a thread inside the namespace sees a child namespace");
        tune::plan(&p, &snap)
    })
    .unwrap()
}

#[test]
fn a_rejected_value_half_way_rolls_back_for_real() {
    if let Err(e) = ensure_root() {
        panic!("needs root with CAP_NET_ADMIN + CAP_SYS_ADMIN: {e}");
    }
    let host = host_values();
    let cleanup = Cleanup::new();
    let ns = Netns::create(&cleanup, "rollback").unwrap();
    let before = ns_values(&ns);
    let plan = plan_inside(&ns, &profile(9));
    assert_eq!(plan.changes().count(), 3);
    let cfg = tempfile::tempdir().unwrap();
    let cfg_path = cfg.path().to_owned();
    // No validator: the kernel itself refuses tcp_ecn = 9 on the third write.
    let result = ns.run(|| tune::apply(&plan, &HostView::at("/"), &cfg_path, None)).unwrap();
    let err = result.unwrap_err();
    let Error::RolledBack { restored, not_restored, kept_state, cause } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(*restored, 3, "two restored, the refused one unchanged: {err}");
    assert!(not_restored.is_empty() && kept_state.is_none(), "{err}");
    assert!(
        matches!(**cause, Error::Rejected { ref key, .. } if key == "net.ipv4.tcp_ecn"),
        "{cause:?}"
    );
    assert_eq!(ns_values(&ns), before, "rolled back");
    assert!(!tune::conf_path(cfg.path(), "lib-ns").exists());
    assert!(!tune::state_path(cfg.path(), "lib-ns").exists());
    // The same plan validated in a throwaway namespace is refused before anything is written.
    assert!(tune::validate_in_netns(&plan).is_err());
    assert_eq!(host_values(), host, "the host is untouched");
    ns.delete().unwrap();
}

#[test]
fn apply_and_revert_for_real() {
    if let Err(e) = ensure_root() {
        panic!("needs root with CAP_NET_ADMIN + CAP_SYS_ADMIN: {e}");
    }
    let host = host_values();
    let cleanup = Cleanup::new();
    let ns = Netns::create(&cleanup, "roundtrip").unwrap();
    let before = ns_values(&ns);
    let plan = plan_inside(&ns, &profile(1));
    tune::validate_in_netns(&plan).unwrap();
    let cfg = tempfile::tempdir().unwrap();
    let cfg_path = cfg.path().to_owned();
    let applied =
        ns.run(|| tune::apply(&plan, &HostView::at("/"), &cfg_path, None)).unwrap().unwrap();
    assert_eq!(applied.changed.len(), 3);
    assert_eq!(ns_values(&ns), ["0", "1", "1"]);
    assert_eq!(host_values(), host, "the host is untouched");
    let restored =
        ns.run(|| tune::revert(&HostView::at("/"), &cfg_path, "lib-ns")).unwrap().unwrap();
    assert_eq!(restored.len(), 3);
    assert_eq!(ns_values(&ns), before);
    assert_eq!(host_values(), host);
    ns.delete().unwrap();
}
