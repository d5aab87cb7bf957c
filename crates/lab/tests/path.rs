//! `tcptail_lab::path` as a library, as root: per-namespace TCP buffers set for the path (and
//! the host's left alone), the report, a plain veth run, netem on the router (or, without
//! netem, teardown when setup fails), a report that cannot be written kept apart from the
//! command's exit code, and teardown when the server command fails and when the caller panics
//! mid-run.
//!
//! Namespaces are named after this test process's pid; the tests take one lock so that each
//! can tell its own namespaces from the others'.

use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::Value;
use tcptail_lab::netem::NetemError;
use tcptail_lab::path::{EmulatorKind, LabError, LabRun, PathFlags, ReadyArg};

static LOCK: Mutex<()> = Mutex::new(());

fn lock() -> MutexGuard<'static, ()> {
    let guard = LOCK.lock().unwrap_or_else(PoisonError::into_inner);
    if let Err(e) = tcptail_netns::ensure_root() {
        panic!("these tests need root with CAP_NET_ADMIN + CAP_SYS_ADMIN: {e}");
    }
    guard
}

/// This process's lab namespaces.
fn my_lab_namespaces() -> Vec<String> {
    let prefix = format!("tcptail-{}-lab-", std::process::id());
    let mut names: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    names.retain(|n| n.starts_with(&prefix));
    names
}

/// Deletes this process's lab namespaces if a failed test left any.
struct Sweep;

impl Drop for Sweep {
    fn drop(&mut self) {
        for ns in my_lab_namespaces() {
            let _ = Command::new("ip").args(["netns", "del", &ns]).status();
        }
    }
}

fn flags(out: &Path, command: &[&str]) -> PathFlags {
    PathFlags {
        rate: Some("30mbit".parse().unwrap()),
        rtt: Some(Duration::from_millis(10)),
        out: Some(out.to_owned()),
        seed: Some(3),
        command: command.iter().map(|s| (*s).to_owned()).collect(),
        ..PathFlags::default()
    }
}

fn sysctl_in(ns: &str, key: &str) -> String {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    let out = Command::new("ip").args(["netns", "exec", ns, "cat", &path]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).split_whitespace().collect::<Vec<_>>().join(" ")
}

fn host_sysctl(key: &str) -> String {
    let path = format!("/proc/sys/{}", key.replace('.', "/"));
    std::fs::read_to_string(path).unwrap().split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn tcp_buffers_are_raised_for_the_path_inside_the_lab_only() {
    let _lock = lock();
    let _sweep = Sweep;
    let out = tempfile::tempdir().unwrap();
    let host_before = (host_sysctl("net.ipv4.tcp_rmem"), host_sysctl("net.ipv4.tcp_wmem"));
    let spec = PathFlags {
        rate: Some("1gbit".parse().unwrap()),
        rtt: Some(Duration::from_millis(50)),
        buffer: Some("2bdp".parse().unwrap()),
        ..flags(out.path(), &["true"])
    }
    .check()
    .unwrap();
    let run = LabRun::start(&spec).unwrap();
    let (client, server) = (run.client_netns().to_owned(), run.server_netns().to_owned());
    assert!(run.banner().contains(&client) && run.banner().contains("10.77.0.2"));
    // 1 Gbit/s x 50 ms = 6.25 MB in flight + a 12.5 MB buffer, twice: 37.5 MB.
    for ns in [&client, &server] {
        for key in ["net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"] {
            let value = sysctl_in(ns, key);
            assert!(value.ends_with(" 37500000"), "{key} in {ns}: {value}");
        }
    }
    assert_eq!((host_sysctl("net.ipv4.tcp_rmem"), host_sysctl("net.ipv4.tcp_wmem")), host_before);

    let outcome = run.run().unwrap();
    assert_eq!(outcome.exit_code, 0);
    assert!(my_lab_namespaces().is_empty(), "{:?}", my_lab_namespaces());
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&outcome.report_path).unwrap()).unwrap();
    assert_eq!(report["tcp_buffers"]["wanted_max_bytes"], 37_500_000);
    assert!(
        report["sysctls"]["client"]["net.ipv4.tcp_wmem"].as_str().unwrap().ends_with(" 37500000")
    );
    assert_eq!(report["namespaces"]["server"], server);
    assert_eq!(report["seed"], 3);
    assert!(report["emulator_report"]["up"]["stats"].is_object());
    assert!(out.path().join("up.log").exists() && out.path().join("down.log").exists());
}

#[test]
fn plain_veth_run_carries_traffic_without_an_emulator() {
    let _lock = lock();
    let _sweep = Sweep;
    let out = tempfile::tempdir().unwrap();
    let spec = PathFlags {
        rate: None,
        rtt: None,
        emulator: EmulatorKind::None,
        server_cmd: Some("iperf3 -s -1".into()),
        server_ready: Some(ReadyArg::Port(5201)),
        ..flags(out.path(), &["sh", "-c", "iperf3 -c $TCPTAIL_SERVER_ADDR -t 1 >/dev/null"])
    }
    .check()
    .unwrap();
    let outcome = LabRun::start(&spec).unwrap().run().unwrap();
    assert_eq!(outcome.exit_code, 0);
    assert!(outcome.lateness_flag.is_none());
    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(&outcome.report_path).unwrap()).unwrap();
    assert_eq!(report["emulator"], "none");
    assert!(report["emulator_report"].is_null() && report["up"].is_null());
    assert_eq!(report["server"]["exit_code"], 0);
    assert!(my_lab_namespaces().is_empty());
}

/// Whether this kernel can create a netem qdisc, probed on `lo` of a scratch namespace named
/// after this process (so [`Sweep`] would remove it too).
fn kernel_has_netem() -> bool {
    let ns = format!("tcptail-{}-lab-netemprobe", std::process::id());
    assert!(Command::new("ip").args(["netns", "add", &ns]).status().unwrap().success());
    let added = Command::new("tc")
        .args(["-n", &ns, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"])
        .output()
        .unwrap();
    let _ = Command::new("ip").args(["netns", "del", &ns]).status();
    added.status.success()
}

/// `--emulator netem`: on a kernel without netem, setup fails with the typed error and leaves
/// nothing; on one with netem, the qdiscs sit on the router's egresses with the path's limit
/// and carry traffic.
#[test]
fn netem_runs_on_the_router_or_a_failed_setup_leaves_nothing() {
    let _lock = lock();
    let _sweep = Sweep;
    let out = tempfile::tempdir().unwrap();
    let has_netem = kernel_has_netem();
    let spec = PathFlags {
        emulator: EmulatorKind::Netem,
        server_cmd: Some("iperf3 -s -1".into()),
        server_ready: Some(ReadyArg::Port(5201)),
        ..flags(out.path(), &["sh", "-c", "iperf3 -c $TCPTAIL_SERVER_ADDR -t 2 -C bbr >/dev/null"])
    }
    .check()
    .unwrap();
    match LabRun::start(&spec) {
        Err(LabError::Netem(NetemError::Unavailable { stderr, .. })) => {
            assert!(!has_netem, "the probe created a netem qdisc, the lab could not: {stderr}");
            assert!(stderr.contains("qdisc kind is unknown"), "{stderr}");
        }
        Err(other) => panic!("unexpected error: {other}"),
        Ok(run) => {
            assert!(has_netem, "netem set up on a kernel the probe found without it");
            assert!(run.banner().contains("netem on router"));
            let router = my_lab_namespaces()
                .into_iter()
                .find(|n| n.contains("lab-router"))
                .expect("a router namespace");
            let show = Command::new("tc").args(["-n", &router, "qdisc", "show"]).output().unwrap();
            let show = String::from_utf8_lossy(&show.stdout).into_owned();
            // 30 Mbit/s x 10 ms: a one-BDP buffer of 25 packets plus twice the BDP.
            for ifname in ["tcptail-s", "tcptail-c"] {
                assert!(
                    show.lines().any(|l| l.contains("netem") && l.contains(ifname)),
                    "no netem on {ifname}: {show}"
                );
            }
            assert!(show.contains("limit 75"), "{show}");
            for end in [run.client_netns().to_owned(), run.server_netns().to_owned()] {
                let q = Command::new("tc").args(["-n", &end, "qdisc", "show"]).output().unwrap();
                assert!(!String::from_utf8_lossy(&q.stdout).contains("netem"), "netem in {end}");
            }
            let outcome = run.run().unwrap();
            assert_eq!(outcome.exit_code, 0, "iperf3 through netem failed");
            assert!(outcome.lab_errors.is_empty(), "{:?}", outcome.lab_errors);
        }
    }
    assert!(my_lab_namespaces().is_empty(), "{:?}", my_lab_namespaces());
}

#[test]
fn a_report_that_cannot_be_written_does_not_replace_the_exit_code() {
    let _lock = lock();
    let _sweep = Sweep;
    let out = tempfile::tempdir().unwrap();
    let script = format!("mkdir {}/lab-report.json; exit 5", out.path().display());
    let spec = PathFlags {
        emulator: EmulatorKind::None,
        rate: None,
        rtt: None,
        ..flags(out.path(), &["sh", "-c", &script])
    }
    .check()
    .unwrap();
    let outcome = LabRun::start(&spec).unwrap().run().expect("the command ran: an outcome");
    assert_eq!(outcome.exit_code, 5);
    assert_eq!(outcome.lab_errors.len(), 1, "{:?}", outcome.lab_errors);
    let text = outcome.lab_errors[0].to_string();
    assert!(text.contains("lab-report.json") && text.contains("write"), "{text}");
    assert!(my_lab_namespaces().is_empty(), "teardown still ran: {:?}", my_lab_namespaces());
}

#[test]
fn a_server_that_fails_is_reported_and_cleaned_up() {
    let _lock = lock();
    let _sweep = Sweep;
    let out = tempfile::tempdir().unwrap();
    let spec = PathFlags {
        server_cmd: Some("echo no such server >&2; exit 4".into()),
        ..flags(out.path(), &["true"])
    }
    .check()
    .unwrap();
    let err = LabRun::start(&spec).unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, LabError::ServerExited { .. }), "{text}");
    assert!(text.contains("exit status: 4") && text.contains("server.log"), "{text}");
    let log = std::fs::read_to_string(out.path().join("server.log")).unwrap();
    assert!(log.contains("no such server"));
    assert!(my_lab_namespaces().is_empty(), "{:?}", my_lab_namespaces());
}

#[test]
fn a_panic_mid_run_removes_everything() {
    let _lock = lock();
    let _sweep = Sweep;
    let out = tempfile::tempdir().unwrap();
    let spec = PathFlags {
        server_cmd: Some("exec sleep 59.75".into()),
        server_ready: Some(ReadyArg::After(Duration::from_millis(100))),
        ..flags(out.path(), &["true"])
    }
    .check()
    .unwrap();
    let seen = Mutex::new(Vec::new());
    let result = std::panic::catch_unwind(|| {
        let _run = LabRun::start(&spec).unwrap();
        *seen.lock().unwrap() = my_lab_namespaces();
        panic!("caller bug");
    });
    assert!(result.is_err());
    let seen = seen.into_inner().unwrap();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert!(my_lab_namespaces().is_empty(), "{:?}", my_lab_namespaces());
    let sleeping = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(Result::ok)
        .any(|e| std::fs::read(e.path().join("cmdline")).is_ok_and(|c| c == b"sleep\x0059.75\x00"));
    assert!(!sleeping, "the server command outlived the run");
}
