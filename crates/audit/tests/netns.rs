//! `tune::apply` and `revert` for real, from a thread inside a throwaway network namespace
//! (where `/proc/sys/net` is that namespace's): the kernel rejecting a value half-way rolls
//! back what was applied; a full apply/revert restores every value exactly; a default
//! congestion control the child namespace may not select (EPERM) is skipped there and judged
//! from the lists for the host. The host's values are read before and after and must not
//! change. Needs root; fails with a reason without it.

use tcptail_audit::cc;
use tcptail_audit::fixture::FakeRoot;
use tcptail_audit::profile::parse_str;
use tcptail_audit::revert::revert;
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
    let reverted =
        ns.run(|| revert(&HostView::at("/"), &cfg_path, "lib-ns", false)).unwrap().unwrap();
    assert_eq!(reverted.restored.len(), 3);
    assert_eq!(ns_values(&ns), before);
    assert_eq!(host_values(), host);
    ns.delete().unwrap();
}

/// An algorithm this host has registered but not allowed (cubic on the project's machine).
fn restricted_algorithm() -> Option<String> {
    cc::Facts::read(&HostView::live()).restricted().first().map(|a| (*a).to_owned())
}

fn cc_profile(algorithm: &str) -> String {
    format!(
        "name = \"cc-ns\"\n[[setting]]\nkey = \"net.ipv4.tcp_congestion_control\"\nvalue = \
         \"{algorithm}\"\nscope = \"netns\"\nrationale = \"r\"\n[[setting]]\nkey = \
         \"net.ipv4.tcp_slow_start_after_idle\"\nvalue = 0\nscope = \"netns\"\nrationale = \
         \"r\"\n"
    )
}

/// The restriction for real: in a child namespace the kernel refuses a restricted default
/// with EPERM, which is why validating the host's default by a trial write there refused
/// `tune --apply` on a host that could take it. Tune now judges it from the lists: for the
/// host (here a fixture tree with this host's lists, so the host is not changed) the apply
/// goes ahead, and inside the child namespace the key is skipped with the reason.
#[test]
fn a_restricted_default_is_judged_from_the_lists_not_by_a_trial_write() {
    if let Err(e) = ensure_root() {
        panic!("needs root with CAP_NET_ADMIN + CAP_SYS_ADMIN: {e}");
    }
    let Some(algorithm) = restricted_algorithm() else {
        eprintln!(
            "note: every registered congestion control is allowed on this host \
             (tcp_allowed_congestion_control), so no child namespace refuses one; the fixture \
             tests in tune/tests.rs cover the rule"
        );
        return;
    };
    let host = host_values();
    let host_cc: Vec<String> = [cc::DEFAULT, cc::AVAILABLE, cc::ALLOWED]
        .iter()
        .map(|k| tcptail_netns::sysctl::host_sysctl(k).unwrap())
        .collect();
    let cleanup = Cleanup::new();
    let ns = Netns::create(&cleanup, "ccrestrict").unwrap();
    // The fixture reproduces the restriction: the kernel answers EPERM in the child.
    let err = ns.set_sysctl(cc::DEFAULT, &algorithm).unwrap_err();
    let io = std::error::Error::source(&err)
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .unwrap_or_else(|| panic!("{err:?}"));
    assert_eq!(io.raw_os_error(), Some(1), "EPERM: {err}");
    let text = cc_profile(&algorithm);
    // On the host (a fixture tree carrying this host's lists, initial namespace): validated
    // and applied, with the allowed list named as what the kernel changes too.
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    f.sysctl(cc::DEFAULT, &host_cc[0]).sysctl(cc::AVAILABLE, &host_cc[1]);
    f.sysctl(cc::ALLOWED, &host_cc[2]);
    let p = parse_str("cc-ns.toml", &text).unwrap();
    let view = HostView::at(f.path());
    let plan = tune::plan(&p, &Snapshot::collect(&view, p.settings.iter().map(|s| s.key.as_str())));
    assert_eq!(plan.changes().count(), 2, "{plan:?}");
    assert_eq!(plan.side_effects.len(), 1, "{plan:?}");
    tune::validate_in_netns(&plan).expect("the throwaway namespace no longer tries the default");
    let validate = |p: &Plan| tune::validate_in_netns(p);
    tune::apply(&plan, &view, f.path(), Some(&validate)).unwrap();
    assert_eq!(view.sysctl(cc::DEFAULT), Some(algorithm.clone()));
    // Inside the child namespace: skipped with the reason, the rest applied and reverted.
    let plan = plan_inside(&ns, &text);
    let (_, why) = plan.skipped.iter().find(|(k, _)| k == cc::DEFAULT).expect("skipped");
    assert!(why.starts_with("restricted here") && why.contains("EPERM"), "{why}");
    let cfg = tempfile::tempdir().unwrap();
    let cfg_path = cfg.path().to_owned();
    let before = ns_values(&ns);
    let applied =
        ns.run(|| tune::apply(&plan, &HostView::at("/"), &cfg_path, None)).unwrap().unwrap();
    assert_eq!(applied.changed.len(), 1, "{applied:?}");
    ns.run(|| revert(&HostView::at("/"), &cfg_path, "cc-ns", false)).unwrap().unwrap();
    assert_eq!(ns_values(&ns), before);
    assert_eq!(host_values(), host, "the host is untouched");
    let host_cc_after: Vec<String> = [cc::DEFAULT, cc::AVAILABLE, cc::ALLOWED]
        .iter()
        .map(|k| tcptail_netns::sysctl::host_sysctl(k).unwrap())
        .collect();
    assert_eq!(host_cc_after, host_cc, "the host's congestion control is untouched");
    ns.delete().unwrap();
}
