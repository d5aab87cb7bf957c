//! The real `tcptail audit` and `tcptail tune` binaries: against fake root trees (exit codes,
//! JSON, host scope, dry run, emitted sysctl and Ansible parsed as YAML, apply/revert), and as
//! root inside throwaway network namespaces (apply, verify, revert for real; a value the kernel
//! rejects caught by validation). The host's own settings are read before and after and must
//! not change.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{bin, in_netns, tcptail, text, tree};
use serde_json::Value;
use tcptail_audit::fixture::FakeRoot;
use tcptail_netns::{Cleanup, Netns, ensure_root};

fn root_arg(f: &FakeRoot) -> &str {
    f.path().to_str().expect("utf-8 path")
}

#[test]
fn audit_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    // Stock host: no FAIL against the baseline, FAIL against trading (slow start after idle).
    let out = tcptail(&["audit", "--root", root_arg(&f)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stdout));
    let out = tcptail(&["audit", "--root", root_arg(&f), "--profile", "trading-latency"]);
    assert_eq!(out.status.code(), Some(1));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("FAIL   sysctl:net.ipv4.tcp_slow_start_after_idle"), "{stdout}");
    assert!(stdout.contains("STATUS CHECK"), "{stdout}");
    // A known-bad live value fails the baseline.
    f.sysctl("net.ipv4.tcp_frto", "0");
    let out = tcptail(&["audit", "--root", root_arg(&f)]);
    assert_eq!(out.status.code(), Some(1));
    // Errors: 2.
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "name = \"bad\"\nextends = \"trading-latency\"\n[[setting]]\nkey = \"net.core.busy_poll\"\nvalue = 50\nscope = \"netns\"\nrationale = \"x\"\n").unwrap();
    let out = tcptail(&["audit", "--root", root_arg(&f), "--profile", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out.stderr);
    assert!(err.contains("bad.toml:4: net.core.busy_poll: is host-wide"), "{err}");
    let out = tcptail(&["audit", "--root", "/nonexistent-tcptail-root"]);
    assert_eq!(out.status.code(), Some(2));
    let out = tcptail(&["audit", "--root", root_arg(&f), "--profile", "nope"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("unknown profile \"nope\""));
}

#[test]
fn audit_reads_this_host_without_error() {
    // Read-only: the live host, with tc/ethtool where installed.
    let out = tcptail(&["audit", "--profile", "trading-latency", "--json"]);
    assert!(matches!(out.status.code(), Some(0 | 1)), "{}", text(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    let ids: Vec<&str> =
        v["findings"].as_array().unwrap().iter().map(|x| x["id"].as_str().unwrap()).collect();
    for id in ["fm1-bbr-probe-in-burst", "fm5-time-wait-exhaustion", "bbr-pacing", "cpu-governor"] {
        assert!(ids.contains(&id), "{id}: {ids:?}");
    }
    // This project's machines are containers: the audit must know it and judge no host-scope
    // setting there.
    if Path::new("/.dockerenv").exists() {
        assert!(v["container"].as_str().unwrap_or("").contains("/.dockerenv exists"), "{v:#}");
        for x in v["findings"].as_array().unwrap() {
            let id = x["id"].as_str().unwrap();
            if id.starts_with("sysctl:net.core.busy") || id.starts_with("sysctl:net.core.rmem") {
                assert_eq!(x["status"], "N/A", "{x}");
                let ev = x["evidence"].as_str().unwrap();
                assert!(ev.starts_with("host scope: not changeable here (container:"), "{x}");
            }
        }
    }
}

#[test]
fn the_default_audit_lists_the_whole_read_list() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    let out = tcptail(&["audit", "--root", root_arg(&f)]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    for row in [
        "cpu-governor",
        "irqbalance",
        "isolated-cpus",
        "transparent-hugepages",
        "sysctl:net.core.busy_read",
        "sysctl:net.core.busy_poll",
        "sysctl:kernel.numa_balancing",
        "nic ",
    ] {
        assert!(table.lines().any(|l| l.contains(row)), "{row} missing:\n{table}");
    }
}

#[test]
fn a_container_fixture_skips_host_scope_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    f.container();
    let out = tcptail(&["audit", "--root", root_arg(&f), "--profile", "trading-latency"]);
    let table = text(&out.stdout);
    let busy = table.lines().find(|l| l.contains("sysctl:net.core.busy_read")).unwrap();
    assert!(busy.starts_with("N/A "), "{table}");
    assert!(table.contains("evidence: host scope: not changeable here (container:"), "{table}");
    let out = tcptail(&["tune", "--root", root_arg(&f), "--profile", "trading-latency"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let dry = text(&out.stdout);
    assert!(!dry.contains("+net.core.busy_read"), "{dry}");
    assert!(
        dry.contains("# skipped net.core.busy_read: host scope: not changeable here (container:"),
        "{dry}"
    );
}

#[test]
fn audit_json_and_host_scope() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    f.child_netns();
    let out = tcptail(&["audit", "--root", root_arg(&f), "--profile", "trading-latency", "--json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON report");
    assert_eq!(v["profile"], "trading-latency");
    assert_eq!(v["child_netns"], true);
    let findings = v["findings"].as_array().unwrap();
    let get = |id: &str| findings.iter().find(|x| x["id"] == id).unwrap_or_else(|| panic!("{id}"));
    assert_eq!(get("sysctl:net.core.busy_poll")["status"], "N/A");
    assert_eq!(
        get("sysctl:net.core.busy_poll")["evidence"],
        "host scope: not visible here (child network namespace)"
    );
    let rmem = get("sysctl:net.core.rmem_max");
    assert_eq!((rmem["status"].as_str(), rmem["current"].as_str()), (Some("N/A"), Some("212992")));
    assert_eq!(get("sysctl:net.ipv4.tcp_slow_start_after_idle")["status"], "FAIL");
    for x in findings {
        for field in ["id", "status", "current", "recommended", "rationale"] {
            assert!(x[field].is_string(), "{x}");
        }
    }
    let fails: Vec<&Value> = findings.iter().filter(|x| x["status"] == "FAIL").collect();
    assert!(fails.iter().all(|x| !x["id"].as_str().unwrap().contains("net.core")), "{fails:?}");
}

#[test]
fn tune_dry_run_and_emit() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    let before = tree(f.path());
    let out = tcptail(&["tune", "--root", root_arg(&f), "--profile", "trading-latency"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(s.contains("# dry run: nothing written. Would write "), "{s}");
    assert!(s.contains("99-tcptail-trading-latency.conf"), "{s}");
    assert!(s.contains("# keep cwnd across quiet periods"), "{s}");
    assert!(
        s.contains(
            "-net.ipv4.tcp_slow_start_after_idle = 1\n+net.ipv4.tcp_slow_start_after_idle = 0"
        ),
        "{s}"
    );
    assert_eq!(tree(f.path()), before, "a dry run writes nothing");
    let out = tcptail(&[
        "tune",
        "--root",
        root_arg(&f),
        "--profile",
        "trading-latency",
        "--emit",
        "sysctl",
    ]);
    let conf = text(&out.stdout);
    assert!(conf.lines().any(|l| l == "net.ipv4.tcp_keepalive_time = 30"), "{conf}");
    assert!(conf.lines().any(|l| l == "kernel.numa_balancing = 0"), "{conf}");
    assert_eq!(tree(f.path()), before);
}

/// Renders the emitted tasks as Ansible would for two fleet hosts (Jinja2: the file content
/// from each host's current values, and the verify task's `failed_when`), printing JSON.
const ANSIBLE_CHECK: &str = r#"
import json, sys, yaml, jinja2
tasks = yaml.safe_load(open(sys.argv[1]))
hosts = json.loads(sys.argv[2])
env = jinja2.Environment()
read = tasks[0]
copy = next(t for t in tasks if "ansible.builtin.copy" in t)
verify = tasks[-1]
out = {"tasks": tasks, "files": [], "verdicts": []}
for host in hosts:
    current = {"results": [{"item": k, "stdout": host[k]} for k in read["loop"]]}
    out["files"].append(env.from_string(copy["ansible.builtin.copy"]["content"]).render(
        tcptail_sysctl_current=current))
    failed = env.compile_expression(verify["failed_when"])
    out["verdicts"].append([
        bool(failed(item=item, tcptail_sysctl_verify={"stdout": host.get(item["key"], "")}))
        for item in verify["loop"]
    ])
print(json.dumps(out))
"#;

#[test]
fn tune_emit_ansible_is_yaml_and_resolves_bounds_per_host() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    let out = tcptail(&[
        "tune",
        "--root",
        root_arg(&f),
        "--profile",
        "bulk-throughput",
        "--emit",
        "ansible",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let yaml = dir.path().join("tasks.yml");
    std::fs::write(&yaml, &out.stdout).unwrap();
    // Two fleet hosts: one below every bound, one above (it must keep its larger values).
    let low = r#"{"net.ipv4.tcp_rmem": "4096 131072 6291456", "net.ipv4.tcp_wmem": "4096 16384 4194304",
        "net.core.rmem_max": "212992", "net.core.wmem_max": "212992"}"#;
    let high = r#"{"net.ipv4.tcp_rmem": "8192\t262144\t134217728", "net.ipv4.tcp_wmem": "4096 65536 134217728",
        "net.core.rmem_max": "268435456", "net.core.wmem_max": "268435456",
        "net.ipv4.tcp_congestion_control": "bbr", "net.core.default_qdisc": "fq",
        "net.ipv4.tcp_slow_start_after_idle": "0", "net.ipv4.tcp_no_metrics_save": "1",
        "net.ipv4.tcp_timestamps": "1"}"#;
    let hosts = format!("[{low}, {high}]");
    let py = Command::new("python3")
        .args(["-c", ANSIBLE_CHECK, yaml.to_str().unwrap(), &hosts])
        .output()
        .expect("python3 with PyYAML and Jinja2 (Ansible's template engine) checks the output");
    assert!(py.status.success(), "not YAML/Jinja: {}\n{}", text(&py.stderr), text(&out.stdout));
    let v: Value = serde_json::from_slice(&py.stdout).unwrap();
    let tasks = v["tasks"].as_array().expect("a task list");
    assert_eq!(tasks.len(), 4, "read bounded keys, copy, load, verify");
    let read: Vec<&str> =
        tasks[0]["loop"].as_array().unwrap().iter().map(|k| k.as_str().unwrap()).collect();
    assert_eq!(
        read,
        ["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem", "net.core.rmem_max", "net.core.wmem_max"]
    );
    let copy = &tasks[1]["ansible.builtin.copy"];
    assert_eq!(copy["dest"], "/etc/sysctl.d/99-tcptail-bulk-throughput.conf");
    assert_eq!(copy["mode"], "0644");
    assert_eq!(tasks[2]["ansible.builtin.command"]["argv"][1], "-p");
    assert_eq!(tasks[2]["when"], "tcptail_sysctl_file.changed");
    let line = |file: &str, key: &str| -> String {
        file.lines()
            .find_map(|l| l.strip_prefix(&format!("{key} = ")))
            .unwrap_or_else(|| panic!("{key} not in {file}"))
            .to_owned()
    };
    let (low_file, high_file) = (v["files"][0].as_str().unwrap(), v["files"][1].as_str().unwrap());
    // Exact values are the profile's, on every host.
    assert_eq!(line(low_file, "net.ipv4.tcp_congestion_control"), "bbr");
    assert_eq!(line(low_file, "net.core.default_qdisc"), "fq");
    // Bounds: raised where below, a larger value kept, other fields the host's own.
    assert_eq!(line(low_file, "net.ipv4.tcp_rmem"), "4096 131072 67108864");
    assert_eq!(line(low_file, "net.core.rmem_max"), "67108864");
    assert_eq!(line(high_file, "net.ipv4.tcp_rmem"), "8192 262144 134217728");
    assert_eq!(line(high_file, "net.core.rmem_max"), "268435456");
    // Nothing of the machine that generated it (the fixture's 33554432 tcp_rmem cap).
    assert!(!text(&out.stdout).contains("33554432"));
    // Verify: the low host (still at its old values) fails every key, the high one none.
    let keys: Vec<&str> =
        tasks[3]["loop"].as_array().unwrap().iter().map(|i| i["key"].as_str().unwrap()).collect();
    assert_eq!(keys.len(), 9, "the baseline's tcp_timestamps and bulk-throughput's eight");
    let low_v: Vec<bool> = serde_json::from_value(v["verdicts"][0].clone()).unwrap();
    let high_v: Vec<bool> = serde_json::from_value(v["verdicts"][1].clone()).unwrap();
    assert!(high_v.iter().all(|failed| !failed), "{keys:?} {high_v:?}");
    assert!(low_v.iter().all(|failed| *failed), "{keys:?} {low_v:?}");
}

#[test]
fn tune_apply_refuses_when_a_later_file_overrides() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    f.file("etc/sysctl.d/99-zzz-local.conf", "net.ipv4.tcp_slow_start_after_idle = 1\n");
    let before = tree(f.path());
    let r = root_arg(&f);
    let out = tcptail(&["tune", "--root", r, "--profile", "trading-latency"]);
    assert!(out.status.success());
    let dry = text(&out.stdout);
    assert!(dry.contains("# conflict: /etc/sysctl.d/99-zzz-local.conf:1:"), "{dry}");
    let out = tcptail(&["tune", "--root", r, "--profile", "trading-latency", "--apply"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let err = text(&out.stderr);
    assert!(
        err.contains("/etc/sysctl.d/99-zzz-local.conf:1: net.ipv4.tcp_slow_start_after_idle = 1"),
        "{err}"
    );
    assert_eq!(tree(f.path()), before, "nothing written");
}

#[test]
fn tune_apply_and_revert_in_a_fake_root() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    let before = tree(f.path());
    let r = root_arg(&f);
    let out = tcptail(&["tune", "--root", r, "--profile", "trading-latency", "--apply"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let s = text(&out.stdout);
    assert!(s.contains("net.ipv4.tcp_slow_start_after_idle: 1 -> 0"), "{s}");
    assert!(s.contains("verified by re-reading /proc/sys"), "{s}");
    assert!(f.path().join("etc/sysctl.d/99-tcptail-trading-latency.conf").is_file());
    // Every profile setting now passes.
    let out = tcptail(&["audit", "--root", r, "--profile", "trading-latency", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    for x in v["findings"].as_array().unwrap() {
        if x["id"].as_str().unwrap().starts_with("sysctl:") {
            assert_eq!(x["status"], "OK", "{x}");
        }
    }
    // Applying twice is refused.
    let out = tcptail(&["tune", "--root", r, "--profile", "trading-latency", "--apply"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("already applied"), "{}", text(&out.stderr));
    let out = tcptail(&["tune", "--root", r, "--revert"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("reverted profile trading-latency"));
    // The kernel prints multi-value sysctls tab-separated; a fake file keeps what was written.
    let normalized = |t: Vec<(PathBuf, String)>| -> Vec<(PathBuf, String)> {
        t.into_iter()
            .map(|(p, c)| (p, c.split_whitespace().collect::<Vec<_>>().join(" ")))
            .collect()
    };
    assert_eq!(
        normalized(tree(f.path())),
        normalized(before),
        "revert restores every value exactly and removes the file"
    );
    let out = tcptail(&["tune", "--root", r, "--revert"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("nothing to revert"));
}

// ---- Real namespaces (root) ----

fn require_root() {
    if let Err(e) = ensure_root() {
        panic!("these tests need root with CAP_NET_ADMIN + CAP_SYS_ADMIN: {e}");
    }
}

const NETNS_PROFILE: &str = r#"name = "nstest"
[[setting]]
key = "net.ipv4.tcp_slow_start_after_idle"
value = 0
scope = "netns"
rationale = "failure mode 6"
[[setting]]
key = "net.ipv4.tcp_keepalive_time"
at_most = 30
scope = "netns"
rationale = "keepalives"
[[setting]]
key = "net.ipv4.tcp_rmem"
field = 2
at_least = 67108864
scope = "netns"
rationale = "autotuning cap"
"#;

const KEYS: [&str; 3] =
    ["net.ipv4.tcp_slow_start_after_idle", "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_rmem"];

fn values(ns: Option<&Netns>) -> Vec<String> {
    KEYS.iter()
        .map(|k| match ns {
            Some(ns) => ns.sysctl(k).unwrap(),
            None => tcptail_netns::sysctl::host_sysctl(k).unwrap(),
        })
        .collect()
}

#[test]
fn apply_verify_revert_in_a_network_namespace() {
    require_root();
    let cleanup = Cleanup::new();
    let ns = Netns::create(&cleanup, "tune").unwrap();
    let host_before = values(None);
    let ns_before = values(Some(&ns));
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("nstest.toml");
    std::fs::write(&profile, NETNS_PROFILE).unwrap();
    let cfg = dir.path().join("cfg");
    let (p, c) = (profile.to_str().unwrap(), cfg.to_str().unwrap());
    let out = in_netns(&ns, &["tune", "--profile", p, "--apply", "--config-root", c]);
    assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
    let applied = values(Some(&ns));
    assert_eq!(applied[0], "0");
    assert_eq!(applied[1], "30");
    assert!(applied[2].ends_with(" 67108864"), "{applied:?}");
    assert_eq!(values(None), host_before, "the host is untouched");
    assert!(cfg.join("etc/sysctl.d/99-tcptail-nstest.conf").is_file());
    // The audit inside the namespace knows it is in a child namespace.
    let out = in_netns(&ns, &["audit", "--profile", "trading-latency", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["child_netns"], true);
    let busy = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["id"] == "sysctl:net.core.busy_poll")
        .cloned();
    assert_eq!(busy.unwrap()["status"], "N/A");
    let out = in_netns(&ns, &["tune", "--revert", "--profile", p, "--config-root", c]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(values(Some(&ns)), ns_before, "reverted exactly");
    assert!(!cfg.join("etc/sysctl.d/99-tcptail-nstest.conf").exists());
    assert_eq!(values(None), host_before);
    ns.delete().unwrap();
}

#[test]
fn a_rejected_value_is_caught_before_anything_is_applied() {
    require_root();
    let cleanup = Cleanup::new();
    let ns = Netns::create(&cleanup, "tunebad").unwrap();
    let ns_before = values(Some(&ns));
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("bad.toml");
    let text_ = format!(
        "{NETNS_PROFILE}[[setting]]\nkey = \"net.ipv4.tcp_ecn\"\nvalue = 9\nscope = \"netns\"\nrationale = \"out of range\"\n"
    );
    std::fs::write(&profile, text_).unwrap();
    let cfg = dir.path().join("cfg");
    let out = in_netns(
        &ns,
        &[
            "tune",
            "--profile",
            profile.to_str().unwrap(),
            "--apply",
            "--config-root",
            cfg.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("net.ipv4.tcp_ecn"), "{err}");
    // One line: what failed once, the kernel's answer once.
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(err.matches("cannot write").count(), 1, "{err}");
    assert_eq!(err.matches("Invalid argument").count(), 1, "{err}");
    assert_eq!(values(Some(&ns)), ns_before, "nothing applied");
    assert!(!cfg.join("etc/sysctl.d/99-tcptail-nstest.conf").exists());
    ns.delete().unwrap();
}

#[test]
fn verify_with_measures_each_change_in_a_lab() {
    require_root();
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("vw.toml");
    std::fs::write(&profile, NETNS_PROFILE).unwrap();
    let host_before = values(None);
    let child = Command::new(bin())
        .args(["tune", "--profile", profile.to_str().unwrap(), "--runs", "2"])
        .args(["--verify-with", "--duration 200ms --warmup 50ms"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let child = child.wait_with_output().unwrap();
    let stdout = text(&child.stdout);
    assert!(child.status.success(), "{stdout}{}", text(&child.stderr));
    let mut lines = stdout.lines();
    let header = lines.next().unwrap();
    assert!(header.starts_with("KEY") && header.contains("p99 BEFORE"), "{stdout}");
    for key in KEYS {
        let row = stdout.lines().find(|l| l.starts_with(key)).unwrap_or_else(|| panic!("{stdout}"));
        assert!(row.ends_with("kept") || row.contains("reverted"), "{row}");
    }
    assert!(stdout.contains("change(s) kept; the host was not changed."), "{stdout}");
    assert_eq!(values(None), host_before, "the host is untouched");
    // The lab's namespaces are gone.
    let prefix = format!("tcptail-{pid}-");
    let left: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    assert!(!left.iter().any(|n| n.starts_with(&prefix)), "{left:?}");
}

#[test]
fn verify_with_refuses_bad_bench_flags_before_building_a_lab() {
    for (flags, says) in [
        ("--duration 200ms --bogus", "unexpected argument '--bogus'"),
        ("--duration 2furlongs", "invalid value '2furlongs' for '--duration"),
        ("--matrix cc=bbr,reno", "--matrix compares settings itself"),
    ] {
        let out = Command::new(bin())
            .args(["tune", "--profile", "trading-latency", "--verify-with", flags])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{flags}");
        let err = text(&out.stderr);
        assert!(err.contains(&format!("--verify-with \"{flags}\"")) && err.contains(says), "{err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
    }
}
