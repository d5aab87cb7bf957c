use super::*;
use crate::cc;
use crate::fixture::FakeRoot;
use crate::profile::{load, parse_str};
use crate::revert::revert;

fn plan_for(profile: &HostProfile, f: &FakeRoot) -> Plan {
    let snap =
        Snapshot::collect(&HostView::at(f.path()), profile.settings.iter().map(|s| s.key.as_str()));
    plan(profile, &snap)
}

#[test]
fn dry_run_file_and_diff() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    let p = load("trading-latency").unwrap();
    let plan = plan_for(&p, &f);
    assert_eq!(plan.entries.len(), p.settings.len());
    let ssai = plan.entries.iter().find(|e| e.key == "net.ipv4.tcp_slow_start_after_idle").unwrap();
    assert!(ssai.changes);
    assert_eq!((ssai.current.as_deref(), ssai.value.as_str()), (Some("1"), "0"));
    let rmem = plan.entries.iter().find(|e| e.key == "net.ipv4.tcp_rmem").unwrap();
    assert!(!rmem.changes, "the 6.18 cap already satisfies the bound");
    let file = render_file(&plan);
    let body: Vec<&str> = file.lines().skip(1).collect();
    assert_eq!(body.len(), 2 * plan.entries.len(), "one rationale comment per key");
    for pair in body.chunks(2) {
        assert!(pair[0].starts_with("# ") && pair[1].contains(" = "), "{pair:?}");
    }
    let diff = plan.diff();
    assert!(diff.contains(
        "-net.ipv4.tcp_slow_start_after_idle = 1\n+net.ipv4.tcp_slow_start_after_idle = 0\n"
    ));
    assert!(
        diff.contains("-net.ipv4.tcp_keepalive_time = 7200\n+net.ipv4.tcp_keepalive_time = 30\n")
    );
    assert!(diff.contains(" net.ipv4.tcp_timestamps = 1\n"));
    assert_eq!(file_name("trading-latency"), "99-tcptail-trading-latency.conf");
    // Nothing was written.
    assert!(!f.path().join("etc").exists());
}

#[test]
fn child_namespace_plan_skips_host_keys() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    f.child_netns();
    f.remove_sysctl("net.ipv4.tcp_keepalive_probes");
    let plan = plan_for(&load("trading-latency").unwrap(), &f);
    assert!(plan.entries.iter().all(|e| e.scope == Scope::Netns));
    let skipped = |key: &str| plan.skipped.iter().find(|(k, _)| k == key).map(|(_, w)| w.clone());
    // Readable in a child namespace but the host's: not ours to write, and the plan says so.
    let numa = skipped("kernel.numa_balancing").unwrap();
    assert!(
        numa.starts_with("host scope: not changeable here (child network namespace)"),
        "{numa}"
    );
    assert!(numa.contains("on the host"), "{numa}");
    let busy = skipped("net.core.busy_read").unwrap();
    assert_eq!(busy, "host scope: not visible here (child network namespace)");
    assert!(plan.diff().contains("# skipped kernel.numa_balancing: host scope: not changeable"));
    assert!(
        plan.skipped.contains(&(
            "net.ipv4.tcp_keepalive_probes".into(),
            "no such key on this kernel".into()
        ))
    );
}

#[test]
fn apply_verify_revert_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    let before: Vec<(String, Option<String>)> = crate::fixture::LINUX_6_18
        .iter()
        .map(|(k, _)| (k.to_string(), HostView::at(f.path()).sysctl(k)))
        .collect();
    let p = load("trading-latency").unwrap();
    let plan = plan_for(&p, &f);
    let validated = std::cell::Cell::new(false);
    let validate = |_: &Plan| {
        validated.set(true);
        Ok(())
    };
    let view = HostView::at(f.path());
    let applied = apply(&plan, &view, f.path(), Some(&validate)).unwrap();
    assert!(validated.get());
    assert_eq!(applied.file, f.path().join("etc/sysctl.d/99-tcptail-trading-latency.conf"));
    assert_eq!(std::fs::read_to_string(&applied.file).unwrap(), render_file(&plan));
    assert_eq!(applied.changed.len(), plan.changes().count());
    for e in &plan.entries {
        assert_eq!(view.sysctl(&e.key).as_deref(), Some(e.value.as_str()), "{}", e.key);
    }
    // The audit now passes every setting.
    let snap = Snapshot::collect(&view, p.settings.iter().map(|s| s.key.as_str()));
    assert_eq!(plan_for(&p, &f).changes().count(), 0);
    assert!(
        crate::audit(&p, &snap)
            .findings
            .iter()
            .filter(|x| x.id.starts_with("sysctl:"))
            .all(|x| x.status == crate::Status::Ok)
    );
    // A second apply is refused until reverted.
    assert!(matches!(apply(&plan, &view, f.path(), None), Err(Error::AlreadyApplied { .. })));
    assert_eq!(applied_profiles(f.path()), vec!["trading-latency".to_owned()]);
    let reverted = revert(&view, f.path(), "trading-latency", false).unwrap();
    assert_eq!(reverted.restored.len(), applied.changed.len());
    assert!(reverted.unchanged.is_empty() && reverted.forced.is_empty(), "{reverted:?}");
    let after: Vec<(String, Option<String>)> =
        crate::fixture::LINUX_6_18.iter().map(|(k, _)| (k.to_string(), view.sysctl(k))).collect();
    assert_eq!(before, after, "revert restores every value exactly");
    assert!(!applied.file.exists() && !applied.state.exists());
    assert!(matches!(
        revert(&view, f.path(), "trading-latency", false),
        Err(Error::NoState { profile: Some(p) }) if p == "trading-latency"
    ));
}

const BROKEN: &str = r#"name = "broken"
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
key = "net.ipv4.tcp_keepalive_time"
value = 30
scope = "netns"
rationale = "r"
"#;

/// A kernel that refuses `key = value` (without changing it) and writes everything else.
fn refusing<'a>(
    refuse: &'a [(&'a str, &'a str)],
) -> impl Fn(&HostView, &str, &str) -> Result<(), Error> + 'a {
    move |view, key, value| {
        if refuse.contains(&(key, value)) {
            return Err(Error::Rejected {
                key: key.to_owned(),
                value: value.to_owned(),
                context: String::new(),
                source: std::io::Error::from_raw_os_error(libc_einval()),
            });
        }
        write_sysctl(view, key, value)
    }
}

fn libc_einval() -> i32 {
    22
}

#[test]
fn a_failing_key_rolls_back_what_was_applied() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    let plan = plan_for(&parse_str("broken.toml", BROKEN).unwrap(), &f);
    assert_eq!(plan.changes().count(), 3);
    let view = HostView::at(f.path());
    let refuse = [("net.ipv4.tcp_keepalive_time", "30")];
    let err = apply_with(&plan, &view, f.path(), None, &refusing(&refuse)).unwrap_err();
    let Error::RolledBack { restored, not_restored, kept_state, cause } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(*restored, 3, "two written and restored, the refused one unchanged: {err}");
    assert!(not_restored.is_empty() && kept_state.is_none(), "{err}");
    assert!(matches!(**cause, Error::Rejected { .. }), "{cause:?}");
    // The message says what happened; the cause follows once, in the chain.
    let chain = crate::error::with_causes(&err);
    assert!(!err.to_string().contains("net.ipv4.tcp_keepalive_time"), "{err}");
    assert_eq!(chain.matches("net.ipv4.tcp_keepalive_time = 30").count(), 1, "{chain}");
    assert_eq!(chain.matches("Invalid argument").count(), 1, "{chain}");
    assert!(err.next_step().unwrap().starts_with("nothing is left changed"), "{err:?}");
    assert_eq!(view.sysctl("net.ipv4.tcp_slow_start_after_idle").as_deref(), Some("1"));
    assert_eq!(view.sysctl("net.ipv4.tcp_tw_reuse").as_deref(), Some("2"));
    assert_eq!(view.sysctl("net.ipv4.tcp_keepalive_time").as_deref(), Some("7200"));
    assert!(!conf_path(f.path(), "broken").exists());
    assert!(!state_path(f.path(), "broken").exists());
}

#[test]
fn a_restore_that_fails_keeps_the_previous_values_and_names_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    let plan = plan_for(&parse_str("broken.toml", BROKEN).unwrap(), &f);
    let view = HostView::at(f.path());
    // keepalive_time = 30 fails the apply; restoring tcp_tw_reuse to its previous 2 fails too.
    let refuse = [("net.ipv4.tcp_keepalive_time", "30"), ("net.ipv4.tcp_tw_reuse", "2")];
    let err = apply_with(&plan, &view, f.path(), None, &refusing(&refuse)).unwrap_err();
    let Error::RolledBack { restored, not_restored, kept_state, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(*restored, 2, "{err}");
    assert_eq!(not_restored.len(), 1, "{err}");
    assert_eq!(
        (not_restored[0].0.as_str(), not_restored[0].1.as_str()),
        ("net.ipv4.tcp_tw_reuse", "2")
    );
    let state_file = state_path(f.path(), "broken");
    assert_eq!(kept_state.as_deref(), Some(state_file.as_path()));
    let msg = err.to_string();
    assert!(msg.contains("NOT restored: net.ipv4.tcp_tw_reuse (previous value \"2\")"), "{msg}");
    let next = err.next_step().unwrap();
    assert!(next.contains(&state_file.display().to_string()), "{next}");
    assert!(next.contains("tcptail tune --revert"), "{next}");
    // The only record of the previous values survives; the boot file does not.
    let state: State =
        serde_json::from_str(&std::fs::read_to_string(&state_file).unwrap()).unwrap();
    assert!(state.changed.contains(&("net.ipv4.tcp_tw_reuse".into(), "2".into(), "1".into())));
    assert!(!conf_path(f.path(), "broken").exists());
    assert_eq!(view.sysctl("net.ipv4.tcp_tw_reuse").as_deref(), Some("1"), "left changed");
    assert_eq!(view.sysctl("net.ipv4.tcp_slow_start_after_idle").as_deref(), Some("1"));
    // A later revert (the kernel accepting it now) restores the rest and removes the state.
    revert(&view, f.path(), "broken", false).unwrap();
    assert_eq!(view.sysctl("net.ipv4.tcp_tw_reuse").as_deref(), Some("2"));
    assert!(!state_file.exists());
}

#[test]
fn missing_key_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    let p = load("trading-latency").unwrap();
    let plan = plan_for(&p, &f);
    f.remove_sysctl("net.ipv4.tcp_tw_reuse");
    let err = apply(&plan, &HostView::at(f.path()), f.path(), None).unwrap_err();
    assert!(
        matches!(&err, Error::NoSuchKey { key, .. } if key == "net.ipv4.tcp_tw_reuse"),
        "{err:?}"
    );
    assert!(!f.path().join("etc/sysctl.d").exists());
    assert_eq!(
        HostView::at(f.path()).sysctl("net.ipv4.tcp_slow_start_after_idle").as_deref(),
        Some("1")
    );
    // A validator's refusal also stops everything.
    f.sysctl("net.ipv4.tcp_tw_reuse", "2");
    let refuse = |_: &Plan| Err(Error::NoSuchKey { key: "x".into(), path: "/x".into() });
    assert!(apply(&plan, &HostView::at(f.path()), f.path(), Some(&refuse)).is_err());
    assert!(!state_path(f.path(), "trading-latency").exists());
}

#[test]
fn later_files_that_override_refuse_the_apply() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    f.file("etc/sysctl.d/99-zzz-local.conf", "net.ipv4.tcp_slow_start_after_idle = 1\n");
    f.file("etc/sysctl.d/10-early.conf", "net.ipv4.tcp_tw_reuse = 0\n");
    // A later file that agrees with the profile is no conflict.
    f.file("run/sysctl.d/99-zzz-same.conf", "net.ipv4.tcp_keepalive_intvl = 5\n");
    f.file("etc/sysctl.conf", "# stock\nnet.ipv4.tcp_keepalive_time = 600\n");
    let plan = plan_for(&load("trading-latency").unwrap(), &f);
    let expected = [
        "/etc/sysctl.d/99-zzz-local.conf:1: net.ipv4.tcp_slow_start_after_idle = 1 (profile: 0)",
        "/etc/sysctl.conf:2: net.ipv4.tcp_keepalive_time = 600 (profile: 30)",
    ];
    assert_eq!(overridden_by(f.path(), &plan), expected);
    let view = HostView::at(f.path());
    let err = apply(&plan, &view, f.path(), None).unwrap_err();
    let Error::Overridden { file, lines } = &err else { panic!("{err:?}") };
    assert_eq!(file, &conf_path(f.path(), "trading-latency"));
    assert_eq!(lines, &expected);
    assert!(err.to_string().contains("99-zzz-local.conf:1"), "{err}");
    assert!(!file.exists() && !state_path(f.path(), "trading-latency").exists());
    assert_eq!(view.sysctl("net.ipv4.tcp_slow_start_after_idle").as_deref(), Some("1"));
    // Without the conflicts it applies.
    std::fs::remove_file(f.path().join("etc/sysctl.d/99-zzz-local.conf")).unwrap();
    std::fs::remove_file(f.path().join("etc/sysctl.conf")).unwrap();
    apply(&plan, &view, f.path(), None).unwrap();
}

#[test]
fn in_a_container_the_plan_never_writes_host_scope_keys() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    f.container();
    let plan = plan_for(&load("trading-latency").unwrap(), &f);
    assert!(plan.entries.iter().all(|e| e.scope == Scope::Netns), "{:?}", plan.entries);
    for key in ["net.core.busy_read", "net.core.rmem_max", "kernel.numa_balancing"] {
        let (_, why) = plan.skipped.iter().find(|(k, _)| k == key).unwrap();
        assert!(
            why.starts_with("host scope: not changeable here (container: /.dockerenv"),
            "{why}"
        );
    }
    let file = render_file(&plan);
    for key in ["busy_read", "busy_poll", "rmem_max", "wmem_max", "numa_balancing"] {
        assert!(!file.contains(key), "{key} in {file}");
    }
}

#[test]
fn apply_refuses_a_plan_whose_text_would_add_a_line() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    let mut plan = plan_for(&parse_str("broken.toml", BROKEN).unwrap(), &f);
    // A plan built by hand (not parsed from a profile) with a newline in a rationale.
    plan.entries[0].rationale = "ok\nnet.ipv4.tcp_ecn = 0".into();
    let view = HostView::at(f.path());
    let err = apply(&plan, &view, f.path(), None).unwrap_err();
    let Error::UnsafeText { what, problem, .. } = &err else { panic!("{err:?}") };
    assert_eq!(what, "the rationale of net.ipv4.tcp_slow_start_after_idle");
    assert_eq!(problem, "contains a newline");
    assert!(!f.path().join("etc/sysctl.d").exists() && !state_path(f.path(), "broken").exists());
    assert_eq!(view.sysctl("net.ipv4.tcp_slow_start_after_idle").as_deref(), Some("1"));
    plan.entries[0].rationale = "r".into();
    plan.entries[1].value = "1 = 2".into();
    assert!(matches!(apply(&plan, &view, f.path(), None), Err(Error::UnsafeText { .. })));
    plan.entries[1].value = "1".into();
    plan.profile = "b\nroken".into();
    assert!(matches!(apply(&plan, &view, f.path(), None), Err(Error::UnsafeText { .. })));
}

/// This machine's congestion-control lists: cubic registered but not allowed.
fn restricted_cubic(f: &FakeRoot) {
    f.sysctl(cc::DEFAULT, "bbr")
        .sysctl(cc::AVAILABLE, "reno bbr cubic")
        .sysctl(cc::ALLOWED, "reno bbr");
}

/// The kernel's rules for the default congestion control over a fixture tree: ENOENT for an
/// unregistered algorithm, EPERM for a restricted one in a child namespace, and in the initial
/// namespace the new default joins the allowed list (in registration order).
fn kernel(view: &HostView, key: &str, value: &str) -> Result<(), Error> {
    if key == cc::DEFAULT {
        let facts = cc::Facts::read(view);
        let errno = match cc::assess(value, &facts) {
            cc::Assessment::Unavailable => Some(2),
            cc::Assessment::RestrictedHere => Some(1),
            _ => None,
        };
        if let Some(errno) = errno {
            return Err(Error::Rejected {
                key: key.to_owned(),
                value: value.to_owned(),
                context: String::new(),
                source: std::io::Error::from_raw_os_error(errno),
            });
        }
        let allowed: Vec<&str> = facts
            .available
            .iter()
            .map(String::as_str)
            .filter(|a| *a == value || facts.allowed.iter().any(|x| x == a))
            .collect();
        write_sysctl(view, key, value)?;
        return write_sysctl(view, cc::ALLOWED, &allowed.join(" "));
    }
    write_sysctl(view, key, value)
}

fn cc_values(view: &HostView) -> Vec<Option<String>> {
    [cc::DEFAULT, cc::AVAILABLE, cc::ALLOWED].iter().map(|k| view.sysctl(k)).collect()
}

#[test]
fn a_restricted_default_applies_on_the_host_and_revert_restores_the_allowed_list() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    restricted_cubic(&f);
    let view = HostView::at(f.path());
    let before = cc_values(&view);
    let plan = plan_for(&load("trading-latency").unwrap(), &f);
    let e = plan.entries.iter().find(|e| e.key == cc::DEFAULT).unwrap();
    assert!(e.changes && e.value == "cubic", "{e:?}");
    assert!(plan.skipped.iter().all(|(k, _)| k != cc::DEFAULT), "{:?}", plan.skipped);
    assert!(
        plan.diff().contains(
            "# the kernel also changes net.ipv4.tcp_allowed_congestion_control: reno bbr -> \
             reno bbr cubic (the kernel allows the initial namespace's default in every \
             namespace; revert restores the list)\n"
        ),
        "{}",
        plan.diff()
    );
    let applied = apply_with(&plan, &view, f.path(), None, &kernel).unwrap();
    assert_eq!(view.sysctl(cc::DEFAULT).as_deref(), Some("cubic"));
    assert_eq!(view.sysctl(cc::ALLOWED).as_deref(), Some("reno bbr cubic"));
    let effects: Vec<(&str, &str, &str)> = applied
        .side_effects
        .iter()
        .map(|s| (s.key.as_str(), s.before.as_str(), s.after.as_str()))
        .collect();
    assert_eq!(effects, [(cc::ALLOWED, "reno bbr", "reno bbr cubic")]);
    let state: State =
        serde_json::from_str(&std::fs::read_to_string(&applied.state).unwrap()).unwrap();
    assert_eq!(
        state.side_effects,
        [(cc::ALLOWED.to_owned(), "reno bbr".to_owned(), "reno bbr cubic".to_owned())]
    );
    let reverted = revert(&view, f.path(), "trading-latency", false).unwrap();
    assert_eq!(
        reverted.restored.last(),
        Some(&(cc::ALLOWED.to_owned(), "reno bbr".to_owned())),
        "the list is restored last, after the default"
    );
    assert_eq!(cc_values(&view), before, "the host's lists are exactly as before");
}

#[test]
fn a_restricted_default_is_skipped_in_a_child_namespace_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    restricted_cubic(&f);
    f.child_netns();
    let view = HostView::at(f.path());
    let plan = plan_for(&load("trading-latency").unwrap(), &f);
    let (_, why) = plan.skipped.iter().find(|(k, _)| k == cc::DEFAULT).unwrap();
    assert!(why.starts_with("restricted here: cubic is not in tcp_allowed_congestion_control"));
    assert!(why.contains("(the kernel answers EPERM); apply it on the host"), "{why}");
    assert!(plan.side_effects.is_empty());
    assert!(!render_file(&plan).contains(cc::DEFAULT));
    // The kernel model refuses cubic here (EPERM), so writing it would fail the apply: the
    // plan never writes it, and the other keys apply.
    assert!(kernel(&view, cc::DEFAULT, "cubic").is_err());
    let applied = apply_with(&plan, &view, f.path(), None, &kernel).unwrap();
    assert!(applied.changed.iter().all(|(k, _, _)| k != cc::DEFAULT));
    assert_eq!(view.sysctl("net.ipv4.tcp_slow_start_after_idle").as_deref(), Some("0"));
    assert_eq!(view.sysctl(cc::DEFAULT).as_deref(), Some("bbr"));
    // An algorithm that is neither registered nor loadable is refused before any write.
    let p = parse_str(
        "x.toml",
        "name = \"x\"\n[[setting]]\nkey = \"net.ipv4.tcp_congestion_control\"\nvalue = \"vegas\"\nscope = \"netns\"\nrationale = \"r\"\n",
    )
    .unwrap();
    let dir2 = tempfile::tempdir().unwrap();
    let g = FakeRoot::linux_6_18(dir2.path());
    let err = apply(&plan_for(&p, &g), &HostView::at(g.path()), g.path(), None).unwrap_err();
    assert!(matches!(&err, Error::CongestionControl { value, .. } if value == "vegas"), "{err}");
    assert!(!state_path(g.path(), "x").exists());
}

#[test]
fn revert_refuses_to_clobber_a_later_change_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    let view = HostView::at(f.path());
    let plan = plan_for(&parse_str("broken.toml", BROKEN).unwrap(), &f);
    apply(&plan, &view, f.path(), None).unwrap();
    // An operator changes two keys after tune.
    f.sysctl("net.ipv4.tcp_tw_reuse", "0").remove_sysctl("net.ipv4.tcp_keepalive_time");
    let err = revert(&view, f.path(), "broken", false).unwrap_err();
    let Error::ChangedSince { changed, .. } = &err else { panic!("{err:?}") };
    assert_eq!(
        changed,
        &[
            ("net.ipv4.tcp_keepalive_time".into(), "30".into(), "(no such key)".into()),
            ("net.ipv4.tcp_tw_reuse".into(), "1".into(), "0".into()),
        ]
    );
    let msg = err.to_string();
    assert!(
        msg.contains(
            "2 keys changed since tune applied them: net.ipv4.tcp_keepalive_time (tune wrote \
             \"30\", now \"(no such key)\"), net.ipv4.tcp_tw_reuse (tune wrote \"1\", now \"0\")"
        ),
        "{msg}"
    );
    assert!(msg.contains("nothing was reverted") && msg.contains("--force"), "{msg}");
    assert_eq!(view.sysctl("net.ipv4.tcp_slow_start_after_idle").as_deref(), Some("0"), "kept");
    assert!(state_path(f.path(), "broken").exists() && conf_path(f.path(), "broken").exists());
    // --force restores the saved values over the later ones.
    f.sysctl("net.ipv4.tcp_keepalive_time", "45");
    let reverted = revert(&view, f.path(), "broken", true).unwrap();
    assert_eq!(
        reverted.forced,
        [
            ("net.ipv4.tcp_keepalive_time".to_owned(), "45".to_owned()),
            ("net.ipv4.tcp_tw_reuse".to_owned(), "0".to_owned())
        ]
    );
    for (key, value) in [
        ("net.ipv4.tcp_slow_start_after_idle", "1"),
        ("net.ipv4.tcp_tw_reuse", "2"),
        ("net.ipv4.tcp_keepalive_time", "7200"),
    ] {
        assert_eq!(view.sysctl(key).as_deref(), Some(value), "{key}");
    }
    assert!(!state_path(f.path(), "broken").exists() && !conf_path(f.path(), "broken").exists());
}

#[test]
fn revert_after_an_apply_that_stopped_part_way_restores_what_changed() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    let view = HostView::at(f.path());
    let plan = plan_for(&parse_str("broken.toml", BROKEN).unwrap(), &f);
    apply(&plan, &view, f.path(), None).unwrap();
    // As if the apply had died after its first key: the others still have their old values.
    f.sysctl("net.ipv4.tcp_tw_reuse", "2").sysctl("net.ipv4.tcp_keepalive_time", "7200");
    let reverted = revert(&view, f.path(), "broken", false).unwrap();
    assert_eq!(
        reverted.restored,
        [("net.ipv4.tcp_slow_start_after_idle".to_owned(), "1".to_owned())]
    );
    assert_eq!(reverted.unchanged.len(), 2, "{reverted:?}");
    assert_eq!(view.sysctl("net.ipv4.tcp_slow_start_after_idle").as_deref(), Some("1"));
}

#[test]
fn one_tune_at_a_time() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    let view = HostView::at(f.path());
    let plan = plan_for(&parse_str("broken.toml", BROKEN).unwrap(), &f);
    let held = crate::lock::TuneLock::acquire(f.path()).unwrap();
    let me = Some(std::process::id());
    let err = apply(&plan, &view, f.path(), None).unwrap_err();
    assert!(matches!(err, Error::Locked { pid, .. } if pid == me), "{err:?}");
    assert!(!state_path(f.path(), "broken").exists());
    assert_eq!(view.sysctl("net.ipv4.tcp_tw_reuse").as_deref(), Some("2"));
    drop(held);
    apply(&plan, &view, f.path(), None).unwrap();
    let held = crate::lock::TuneLock::acquire(f.path()).unwrap();
    let err = revert(&view, f.path(), "broken", false).unwrap_err();
    assert!(matches!(err, Error::Locked { pid, .. } if pid == me), "{err:?}");
    drop(held);
    revert(&view, f.path(), "broken", false).unwrap();
}
