use super::*;
use crate::HostView;
use crate::fixture::FakeRoot;
use crate::profile::load;

fn run(profile: &str, f: &FakeRoot) -> Report {
    let p = load(profile).unwrap();
    let snap = Snapshot::collect(
        &HostView::at(f.path()),
        p.settings.iter().map(|s| s.key.as_str()).chain(p.known_bad.iter().map(|k| k.key.as_str())),
    );
    audit(&p, &snap)
}

fn status(r: &Report, id: &str) -> Status {
    r.get(id).unwrap_or_else(|| panic!("no finding {id}: {:#?}", r.findings)).status
}

fn evidence<'a>(r: &'a Report, id: &str) -> &'a str {
    r.get(id).and_then(|f| f.evidence.as_deref()).unwrap_or("")
}

#[test]
fn stock_host_against_trading() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    let r = run("trading-latency", &f);
    assert_eq!(status(&r, "sysctl:net.ipv4.tcp_slow_start_after_idle"), Status::Fail);
    assert_eq!(status(&r, "fm6-slow-start-after-idle"), Status::Fail);
    assert_eq!(r.exit_code(), 1);
    assert_eq!(status(&r, "sysctl:net.ipv4.tcp_timestamps"), Status::Ok);
    assert_eq!(status(&r, "sysctl:net.ipv4.tcp_keepalive_time"), Status::Warn);
    assert_eq!(status(&r, "sysctl:net.ipv4.tcp_rmem"), Status::Ok, "6.18's 32 MiB cap is kept");
    assert_eq!(status(&r, "cc-available"), Status::Ok);
    assert_eq!(status(&r, "bbr-pacing"), Status::Ok);
    assert_eq!(status(&r, "fm1-bbr-probe-in-burst"), Status::Ok);
    assert_eq!(status(&r, "fm2-nagle-on-reconnect"), Status::NotApplicable);
    assert_eq!(status(&r, "fm3-quickack-disarms"), Status::NotApplicable);
    assert!(evidence(&r, "fm2-nagle-on-reconnect").contains("tcptail bench"));
    assert_eq!(status(&r, "fm4-rcvbuf-silently-capped"), Status::Warn);
    assert_eq!(status(&r, "fm5-time-wait-exhaustion"), Status::Warn, "28232 ports, tw_reuse 2");
    assert_eq!(status(&r, "cpu-governor"), Status::Warn);
    assert_eq!(status(&r, "irqbalance"), Status::Ok);
    assert_eq!(status(&r, "isolated-cpus"), Status::Warn);
    assert_eq!(status(&r, "transparent-hugepages"), Status::Warn);
    assert_eq!(status(&r, "nic"), Status::NotApplicable);
    assert_eq!(evidence(&r, "nic"), "ethtool not available");
    for k in r.findings.iter().filter(|f| f.id.starts_with("known-bad:")) {
        assert_eq!(k.status, Status::Ok, "{k:?}");
    }
    assert!(!r.child_netns);
}

#[test]
fn a_tuned_host_passes() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    let p = load("trading-latency").unwrap();
    let view = HostView::at(f.path());
    let plan =
        crate::tune::plan(&p, &Snapshot::collect(&view, p.settings.iter().map(|s| s.key.as_str())));
    for e in &plan.entries {
        f.sysctl(&e.key, &e.value);
    }
    for cpu in ["cpu0", "cpu1"] {
        f.file(&format!("sys/devices/system/cpu/{cpu}/cpufreq/scaling_governor"), "performance\n");
    }
    f.file("proc/cmdline", "root=/dev/vda1 isolcpus=1 nohz_full=1\n");
    f.file("sys/kernel/mm/transparent_hugepage/enabled", "always madvise [never]\n");
    let r = run("trading-latency", &f);
    let not_ok: Vec<_> =
        r.findings.iter().filter(|f| matches!(f.status, Status::Warn | Status::Fail)).collect();
    assert!(not_ok.is_empty(), "{not_ok:#?}");
    assert_eq!(r.exit_code(), 0);
    assert_eq!(status(&r, "fm5-time-wait-exhaustion"), Status::Ok);
    assert_eq!(status(&r, "isolated-cpus"), Status::Ok);
    assert_eq!(r.get("isolated-cpus").unwrap().current, "isolcpus=1 nohz_full=1");
}

#[test]
fn seed_configs_copied_from_blogs_are_flagged() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    let seed000 = include_str!("../../tests/fixtures/99-trading.conf");
    let seed002 = include_str!("../../tests/fixtures/99-bbr.conf");
    f.file("etc/sysctl.d/99-trading.conf", seed000);
    f.file("etc/sysctl.d/99-bbr.conf", seed002);
    f.sysctl("net.ipv4.tcp_frto", "0");
    f.sysctl("net.ipv4.tcp_rmem", "4096\t262144\t16777216");
    let r = run("bulk-throughput", &f);
    assert_eq!(status(&r, "known-bad:net.ipv4.tcp_frto=0"), Status::Fail);
    let frto = evidence(&r, "known-bad:net.ipv4.tcp_frto=0");
    assert!(
        frto.contains("/etc/sysctl.d/99-bbr.conf:") && frto.contains("live /proc/sys value is 0"),
        "{frto}"
    );
    assert_eq!(status(&r, "known-bad:net.ipv4.tcp_fallback_to_cubic"), Status::Warn);
    assert_eq!(status(&r, "known-bad:net.ipv4.tcp_rmem=4096,262144,16777216"), Status::Warn);
    assert!(
        evidence(&r, "known-bad:net.ipv4.tcp_rmem=4096,262144,16777216")
            .contains("99-trading.conf:16")
    );
    assert_eq!(status(&r, "known-bad:net.core.rmem_default"), Status::Warn);
    // 99-trading.conf sets tcp_rmem along with rmem_max.
    assert_eq!(status(&r, "known-bad:net.core.rmem_max"), Status::Ok);
    assert_eq!(status(&r, "sysctl:net.ipv4.tcp_rmem"), Status::Warn, "16 MiB < 64 MiB");
    assert_eq!(r.exit_code(), 1);
    let tw = "net.ipv4.tcp_tw_recycle = 1\nnet.ipv4.tcp_low_latency = 1\n";
    f.file("etc/sysctl.d/50-old.conf", tw);
    let r = run("trading-latency", &f);
    assert_eq!(status(&r, "known-bad:net.ipv4.tcp_tw_recycle"), Status::Warn);
    assert!(
        evidence(&r, "known-bad:net.ipv4.tcp_tw_recycle")
            .starts_with("/etc/sysctl.d/50-old.conf:1:")
    );
    assert_eq!(status(&r, "known-bad:net.ipv4.tcp_low_latency"), Status::Warn);
}

#[test]
fn rmem_max_without_tcp_rmem() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    f.file("usr/lib/sysctl.d/60-buffers.conf", "net.core.rmem_max = 134217728\n");
    let r = run("bulk-throughput", &f);
    assert_eq!(status(&r, "known-bad:net.core.rmem_max"), Status::Warn);
    assert!(
        evidence(&r, "known-bad:net.core.rmem_max").contains("/usr/lib/sysctl.d/60-buffers.conf:1")
    );
    f.file("etc/sysctl.d/61-tcp.conf", "net.ipv4.tcp_rmem = 4096 131072 134217728\n");
    let r = run("bulk-throughput", &f);
    assert_eq!(status(&r, "known-bad:net.core.rmem_max"), Status::Ok);
}

#[test]
fn bbr_without_fq_is_internal_pacing() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    f.sysctl("net.ipv4.tcp_congestion_control", "bbr");
    // No qdisc information: default_qdisc decides.
    let r = run("bulk-throughput", &f);
    assert_eq!(status(&r, "bbr-pacing"), Status::Warn);
    assert!(evidence(&r, "bbr-pacing").contains("default_qdisc = fq_codel"));
    f.qdiscs(&[("lo", "noqueue"), ("eth0", "pfifo_fast")]);
    let r = run("bulk-throughput", &f);
    assert_eq!(status(&r, "bbr-pacing"), Status::Warn);
    assert_eq!(evidence(&r, "bbr-pacing"), "BBR without fq: internal pacing on eth0: pfifo_fast");
    assert_eq!(status(&r, "fm1-bbr-probe-in-burst"), Status::Ok, "bulk wants BBR");
    f.qdiscs(&[("lo", "noqueue"), ("eth0", "fq")]);
    assert_eq!(status(&run("bulk-throughput", &f), "bbr-pacing"), Status::Ok);
    f.qdiscs(&[("eth0", "mq")]).sysctl("net.core.default_qdisc", "fq");
    assert_eq!(status(&run("bulk-throughput", &f), "bbr-pacing"), Status::Ok);
    // The trading profile warns about BBR's probing on bursts.
    let r = run("trading-latency", &f);
    assert_eq!(status(&r, "fm1-bbr-probe-in-burst"), Status::Warn);
    assert_eq!(status(&r, "sysctl:net.ipv4.tcp_congestion_control"), Status::Warn);
}

#[test]
fn missing_congestion_control_fails() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    f.sysctl("net.ipv4.tcp_available_congestion_control", "reno cubic");
    let r = run("bulk-throughput", &f);
    assert_eq!(status(&r, "cc-available"), Status::Fail);
    assert!(evidence(&r, "cc-available").contains("modprobe tcp_bbr"));
}

#[test]
fn time_wait_against_the_port_range() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    f.sockstat(20_000);
    let r = run("trading-latency", &f);
    assert_eq!(status(&r, "fm5-time-wait-exhaustion"), Status::Fail);
    assert_eq!(r.get("fm5-time-wait-exhaustion").unwrap().current, "20000 TIME_WAIT / 28232 ports");
    f.sockstat(5_000);
    assert_eq!(status(&run("trading-latency", &f), "fm5-time-wait-exhaustion"), Status::Warn);
    f.sockstat(100)
        .sysctl("net.ipv4.ip_local_port_range", "1024\t65535")
        .sysctl("net.ipv4.tcp_tw_reuse", "1");
    assert_eq!(status(&run("trading-latency", &f), "fm5-time-wait-exhaustion"), Status::Ok);
    std::fs::remove_file(f.path().join("proc/net/sockstat")).unwrap();
    assert_eq!(
        status(&run("trading-latency", &f), "fm5-time-wait-exhaustion"),
        Status::NotApplicable
    );
}

#[test]
fn host_scope_in_a_child_namespace_is_not_a_failure() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    f.child_netns();
    let r = run("trading-latency", &f);
    assert!(r.child_netns);
    // Absent in a child namespace: not visible.
    for key in ["net.core.busy_read", "net.core.busy_poll"] {
        let id = format!("sysctl:{key}");
        assert_eq!(status(&r, &id), Status::NotApplicable, "{key}");
        assert_eq!(evidence(&r, &id), "host scope: not visible here (child network namespace)");
    }
    // Readable there (rmem_max read-only, numa_balancing the host's): the value is reported,
    // only the changeability is marked.
    for (key, value, verdict) in [
        ("net.core.rmem_max", "212992", "misses the recommendation"),
        ("kernel.numa_balancing", "1", "misses the recommendation"),
    ] {
        let id = format!("sysctl:{key}");
        let x = r.get(&id).unwrap();
        assert_eq!((x.status, x.current.as_str()), (Status::NotApplicable, value), "{key}");
        let ev = evidence(&r, &id);
        assert!(
            ev.starts_with("host scope: not changeable here (child network namespace)"),
            "{ev}"
        );
        assert!(ev.contains(verdict), "{ev}");
    }
    let fm4 = r.get("fm4-rcvbuf-silently-capped").unwrap();
    assert_eq!((fm4.status, fm4.current.as_str()), (Status::NotApplicable, "212992"));
    assert!(evidence(&r, "fm4-rcvbuf-silently-capped").contains("SO_RCVBUF above 212992"));
    // Per-namespace keys are still checked.
    assert_eq!(status(&r, "sysctl:net.ipv4.tcp_slow_start_after_idle"), Status::Fail);
    let r = run("bulk-throughput", &f);
    assert_eq!(status(&r, "sysctl:net.core.default_qdisc"), Status::NotApplicable);
    assert!(render_table(&r).contains("child network namespace"));
}

#[test]
fn in_a_container_host_scope_is_not_changeable_and_irqbalance_not_visible() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    f.container();
    // irqbalance runs on the host; inside the container's PID namespace nobody could tell.
    f.process(812, "irqbalance");
    let r = run("trading-latency", &f);
    let place = "container: /.dockerenv exists; PID 1 is sh, not an init system";
    assert_eq!(r.container.as_deref(), Some(&place["container: ".len()..]));
    assert!(r.own_pid_namespace && !r.child_netns);
    for key in [
        "net.core.busy_read",
        "net.core.busy_poll",
        "net.core.rmem_max",
        "net.core.wmem_max",
        "kernel.numa_balancing",
    ] {
        let id = format!("sysctl:{key}");
        let x = r.get(&id).unwrap();
        assert_eq!(x.status, Status::NotApplicable, "{key} must not WARN in a container");
        assert_ne!(x.current, "-", "{key}: the value is readable and reported");
        let ev = evidence(&r, &id);
        assert!(ev.starts_with(&format!("host scope: not changeable here ({place})")), "{ev}");
    }
    let irq = r.get("irqbalance").unwrap();
    assert_eq!(irq.status, Status::NotApplicable);
    assert!(irq.evidence.as_deref().unwrap().contains("PID namespace are not visible"), "{irq:?}");
    for id in
        ["cpu-governor", "isolated-cpus", "transparent-hugepages", "fm4-rcvbuf-silently-capped"]
    {
        assert_eq!(status(&r, id), Status::NotApplicable, "{id}");
    }
    assert_eq!(r.get("transparent-hugepages").unwrap().current, "madvise");
    // Per-namespace settings are still judged.
    assert_eq!(status(&r, "sysctl:net.ipv4.tcp_slow_start_after_idle"), Status::Fail);
    assert!(
        r.findings
            .iter()
            .filter(|x| matches!(x.status, Status::Warn | Status::Fail))
            .all(|x| !x.id.contains("net.core") && !x.id.contains("kernel.")),
        "{:#?}",
        r.findings
    );
    assert!(render_table(&r).contains("(container: /.dockerenv exists"));
    // A missing module cannot be loaded from a container either.
    f.sysctl("net.ipv4.tcp_available_congestion_control", "reno cubic");
    let r = run("bulk-throughput", &f);
    assert_eq!(status(&r, "cc-available"), Status::NotApplicable);
    assert!(evidence(&r, "cc-available").contains("modprobe tcp_bbr on the host"));
}

#[test]
fn a_pid_namespace_of_our_own_hides_irqbalance() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    std::fs::remove_dir_all(f.path().join("proc/2")).unwrap();
    let r = run("trading-latency", &f);
    assert!(r.own_pid_namespace && r.container.is_none());
    assert_eq!(status(&r, "irqbalance"), Status::NotApplicable);
    assert!(evidence(&r, "irqbalance").contains("kthreadd is not visible"));
    // The host view with kthreadd: irqbalance is judged.
    f.process(2, "kthreadd");
    assert_eq!(status(&run("trading-latency", &f), "irqbalance"), Status::Ok);
}

#[test]
fn every_container_signal_is_recognised() {
    use crate::host::detect_container;
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    assert_eq!(detect_container(&HostView::at(f.path())), None, "a stock host");
    let cases: [(&str, &str, &str); 5] = [
        (".dockerenv", "", "/.dockerenv exists"),
        ("run/.containerenv", "engine=\"podman\"\n", "/run/.containerenv exists"),
        ("proc/1/environ", "PATH=/bin\0container=lxc\0", "PID 1 has container=lxc"),
        ("proc/1/cgroup", "0::/kubepods/burstable/pod1/abc\n", "PID 1's cgroup names kubepods"),
        ("proc/1/comm", "tini\n", "PID 1 is tini, not an init system"),
    ];
    for (file, text, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        let f = FakeRoot::linux_6_18(dir.path());
        f.file(file, text);
        let found = detect_container(&HostView::at(f.path()));
        assert_eq!(found.as_deref(), Some(want), "{file}");
    }
    for init in crate::host::INIT_NAMES {
        f.file("proc/1/comm", &format!("{init}\n"));
        assert_eq!(detect_container(&HostView::at(f.path())), None, "{init}");
    }
}

#[test]
fn the_baseline_audit_reports_the_whole_read_list() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    f.file(".commands/ethtool-k-eth0.txt", "Features for eth0:\ntcp-segmentation-offload: on\n");
    f.file(".commands/ethtool-c-eth0.txt", "Coalesce parameters for eth0:\nrx-usecs: 50\n");
    let r = run("baseline", &f);
    let no_rec = "(no recommendation in baseline)";
    for (id, current) in [
        ("cpu-governor", "schedutil"),
        ("irqbalance", "not running"),
        ("isolated-cpus", "none"),
        ("transparent-hugepages", "madvise"),
        ("sysctl:net.core.busy_read", "0"),
        ("sysctl:net.core.busy_poll", "0"),
        ("sysctl:kernel.numa_balancing", "1"),
        ("sysctl:net.core.default_qdisc", "fq_codel"),
        ("sysctl:net.ipv4.tcp_congestion_control", "cubic"),
        ("sysctl:net.core.rmem_max", "212992"),
        ("sysctl:net.ipv4.tcp_rmem", "4096 131072 33554432"),
    ] {
        let x = r.get(id).unwrap_or_else(|| panic!("no row {id}: {:#?}", r.findings));
        assert_eq!((x.status, x.current.as_str()), (Status::Ok, current), "{id}");
        assert_eq!(x.recommended, no_rec, "{id}");
        assert!(!x.rationale.is_empty(), "{id}");
    }
    let nic = r.get("nic:eth0").unwrap();
    assert_eq!(nic.status, Status::Ok);
    assert_eq!(nic.current, "tcp-segmentation-offload on, rx-usecs 50");
    // A row the profile recommends appears once, as the profile's.
    let r = run("trading-latency", &f);
    let busy: Vec<_> = r.findings.iter().filter(|x| x.id == "sysctl:net.core.busy_read").collect();
    assert_eq!(busy.len(), 1);
    assert_eq!((busy[0].status, busy[0].recommended.as_str()), (Status::Warn, "50"));
    // What cannot be read is N/A, still listed.
    f.remove_sysctl("net.core.busy_poll");
    std::fs::remove_file(f.path().join("sys/kernel/mm/transparent_hugepage/enabled")).unwrap();
    let r = run("baseline", &f);
    assert_eq!(status(&r, "sysctl:net.core.busy_poll"), Status::NotApplicable);
    assert_eq!(status(&r, "transparent-hugepages"), Status::NotApplicable);
}

#[test]
fn missing_keys_and_tools_are_not_applicable() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    f.remove_sysctl("net.ipv4.tcp_keepalive_time");
    std::fs::remove_dir_all(f.path().join("sys/devices/system/cpu")).unwrap();
    let r = run("trading-latency", &f);
    assert_eq!(status(&r, "sysctl:net.ipv4.tcp_keepalive_time"), Status::NotApplicable);
    assert_eq!(status(&r, "cpu-governor"), Status::NotApplicable);
}

#[test]
fn irqbalance_and_nic_coalescing() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    f.process(812, "irqbalance");
    f.file(".commands/ethtool-k-eth0.txt", "Features for eth0:\ntcp-segmentation-offload: on\ngeneric-receive-offload: on\nlarge-receive-offload: off [fixed]\n");
    f.file(
        ".commands/ethtool-c-eth0.txt",
        "Coalesce parameters for eth0:\nAdaptive RX: on  TX: on\nadaptive-rx: on\nrx-usecs: 50\n",
    );
    let r = run("trading-latency", &f);
    assert_eq!(status(&r, "irqbalance"), Status::Warn);
    assert_eq!(status(&r, "nic:eth0"), Status::Warn);
    assert!(r.get("nic:eth0").unwrap().current.contains("rx-usecs 50"));
    let r = run("bulk-throughput", &f);
    assert_eq!(status(&r, "irqbalance"), Status::Ok);
    assert_eq!(status(&r, "nic:eth0"), Status::Ok);
}

#[test]
fn output_forms() {
    let dir = tempfile::tempdir().unwrap();
    let r = run("trading-latency", &FakeRoot::linux_6_18(dir.path()));
    let table = render_table(&r);
    assert!(table.starts_with("tcptail audit: profile trading-latency\nSTATUS CHECK"));
    assert!(table.contains("FAIL   sysctl:net.ipv4.tcp_slow_start_after_idle"));
    assert!(table.trim_end().ends_with("N/A"));
    let json = serde_json::to_value(&r).unwrap();
    let statuses: Vec<&str> = json["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["status"].as_str().unwrap())
        .collect();
    assert!(statuses.contains(&"FAIL") && statuses.contains(&"N/A") && statuses.contains(&"OK"));
}

#[test]
fn a_default_this_namespace_may_not_select_is_the_hosts_call() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    f.sysctl("net.ipv4.tcp_congestion_control", "bbr")
        .sysctl("net.ipv4.tcp_available_congestion_control", "reno bbr cubic")
        .sysctl("net.ipv4.tcp_allowed_congestion_control", "reno bbr");
    // On the host cubic can be the default: the deviation is reported as usual.
    let r = run("trading-latency", &f);
    assert_eq!(status(&r, "sysctl:net.ipv4.tcp_congestion_control"), Status::Warn);
    // In a child namespace the kernel refuses it (EPERM): N/A with the reason, as tune skips it.
    f.child_netns();
    let r = run("trading-latency", &f);
    assert_eq!(status(&r, "sysctl:net.ipv4.tcp_congestion_control"), Status::NotApplicable);
    let why = evidence(&r, "sysctl:net.ipv4.tcp_congestion_control");
    assert!(why.starts_with("restricted here: cubic is not in"), "{why}");
}
