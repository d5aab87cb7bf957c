//! The real `tcptail` binary against real loopback sockets: `bench local`, `bench server` +
//! `bench client`, open-loop rate accuracy, profile verification, hostile input, matrix runs,
//! argument errors and Ctrl-C.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command as StdCommand, Stdio};
use std::time::{Duration, Instant};

use assert_cmd::Command;
use serde_json::Value;

fn tcptail() -> Command {
    Command::cargo_bin("tcptail").expect("tcptail binary")
}

fn run_json(args: &[&str]) -> Value {
    let out = tcptail().args(args).arg("--json").output().expect("run tcptail");
    assert!(
        out.status.success(),
        "tcptail {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

fn f(v: &Value, path: &[&str]) -> f64 {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    cur.as_f64().unwrap_or_else(|| panic!("{path:?} missing in {v}"))
}

#[test]
fn local_run_reports_every_percentile_for_each_congestion_control() {
    for cc in ["cubic", "bbr", "reno"] {
        let v = run_json(&["bench", "local", "--cc", cc, "--count", "2000", "--warmup", "200"]);
        assert_eq!(v["mode"], "closed");
        assert_eq!(v["requests"], 2000);
        let keys = ["min", "mean", "stddev", "p50", "p90", "p95", "p99", "p999", "p9999", "max"];
        for k in keys {
            assert!(f(&v, &["latency_us", k]) >= 0.0, "{k}");
        }
        assert!(f(&v, &["latency_us", "min"]) <= f(&v, &["latency_us", "p50"]));
        assert!(f(&v, &["latency_us", "p50"]) <= f(&v, &["latency_us", "p99"]));
        assert!(f(&v, &["latency_us", "p99"]) <= f(&v, &["latency_us", "max"]));
        assert!(f(&v, &["transactions_per_second"]) > 100.0);
        // Read back from both sockets, not assumed.
        assert_eq!(v["context"]["congestion_client"], cc, "{cc}");
        assert_eq!(v["context"]["congestion_server"], cc, "{cc}");
        assert!(v["context"]["kernel"].as_str().is_some_and(|k| !k.is_empty()));
    }
}

#[test]
fn open_loop_hits_the_asked_rate_within_one_percent() {
    let v = run_json(&[
        "bench",
        "local",
        "--rate",
        "2000/s",
        "--duration",
        "3s",
        "--warmup",
        "100",
        "--nodelay",
    ]);
    assert_eq!(v["mode"], "open");
    let asked = f(&v, &["rate_per_second", "asked"]);
    let achieved = f(&v, &["rate_per_second", "achieved"]);
    assert_eq!(asked, 2000.0);
    assert!((achieved - asked).abs() / asked < 0.01, "achieved {achieved}");
    // Open loop reports service time beside latency from the intended send time.
    assert!(f(&v, &["service_us", "p50"]) > 0.0);
    assert!(f(&v, &["latency_us", "p50"]) >= f(&v, &["service_us", "p50"]) * 0.9);
    let requests = f(&v, &["requests"]);
    assert!((requests - 6000.0).abs() < 120.0, "requests {requests}");
}

#[test]
fn capped_buffers_are_reported_not_hidden() {
    // The throughput profile asks for 16 MiB buffers; this host's rmem_max/wmem_max are lower
    // unless someone raised them to 16 MiB or more.
    let wmem_max: u64 =
        std::fs::read_to_string("/proc/sys/net/core/wmem_max").unwrap().trim().parse().unwrap();
    let v = run_json(&["bench", "local", "--profile", "throughput", "--count", "200"]);
    let options = v["client_apply"]["options"].as_array().expect("client report");
    let sndbuf = options.iter().find(|o| o["option"] == "SO_SNDBUF").expect("SO_SNDBUF row");
    if wmem_max < 16 << 20 {
        let outcome = serde_json::to_string(&sndbuf["outcome"]).unwrap();
        assert!(outcome.contains("capped"), "{sndbuf}");
        assert!(outcome.contains("wmem_max"), "{sndbuf}");
    }
    assert!(v["server_apply"]["options"].as_array().is_some_and(|o| !o.is_empty()));
}

#[test]
fn matrix_interleaves_and_reports_ratios() {
    let v = run_json(&[
        "bench",
        "local",
        "--matrix",
        "cc=cubic,bbr quickack=off,rearm",
        "--count",
        "800",
        "--rounds",
        "2",
        "--warmup",
        "50",
    ]);
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 4);
    assert_eq!(rows[0]["config"]["cc"], "cubic");
    assert_eq!(rows[0]["config"]["quickack"], "off");
    assert_eq!(rows[3]["config"]["cc"], "bbr");
    assert_eq!(rows[3]["config"]["quickack"], "rearm");
    assert_eq!(f(&rows[0], &["p50_ratio"]), 1.0);
    for row in rows {
        assert_eq!(row["requests"], 800);
        assert!(f(row, &["latency_us", "p99"]) > 0.0);
        assert_eq!(row["context"]["congestion_client"], row["config"]["cc"]);
    }
}

#[test]
fn attribution_explains_the_tail() {
    let v = run_json(&["bench", "local", "--cc", "bbr", "--count", "3000", "--attribute"]);
    let a = &v["attribution"];
    assert!(f(a, &["snapshot_cost_ns"]) > 0.0);
    assert_eq!(a["requests"], 3000);
    assert!(f(a, &["slow_requests"]) >= 1.0);
    assert!(a["statements"].as_array().is_some_and(|s| !s.is_empty()), "{a}");
    // A BBR socket's phase is part of what is compared.
    let features = a["features"].as_array().unwrap();
    assert!(features.iter().any(|f| f["feature"] == "BBR phase at send"), "{a}");
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct ServerProcess(Child);

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_server(port: u16) -> ServerProcess {
    let bin = assert_cmd::cargo::cargo_bin("tcptail");
    let child = StdCommand::new(bin)
        .args(["bench", "server", "--listen", &format!("127.0.0.1:{port}")])
        .stderr(Stdio::piped())
        .spawn()
        .expect("start server");
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    ServerProcess(child)
}

#[test]
fn server_survives_hostile_peers_and_keeps_serving() {
    let port = free_port();
    let mut server = start_server(port);
    let addr = format!("127.0.0.1:{port}");
    for garbage in [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        vec![0x54, 0x54, 9, 1, 0, 0, 0, 24, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        vec![0x54, 0x54, 1, 3, 0x40, 0, 0, 0, 0, 0, 0, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    ] {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(&garbage).unwrap();
        let mut rest = Vec::new();
        // The server closes the connection (after a best-effort error frame).
        let _ = s.read_to_end(&mut rest);
    }
    let v = run_json(&["bench", "client", &addr, "--count", "500", "--warmup", "10"]);
    assert_eq!(v["requests"], 500);
    let _ = server.0.kill();
    let _ = server.0.wait();
    let mut log = String::new();
    server.0.stderr.take().unwrap().read_to_string(&mut log).unwrap();
    assert!(log.to_lowercase().contains("magic"), "server log: {log}");
    assert!(log.to_lowercase().contains("version"), "server log: {log}");
}

#[test]
fn bad_arguments_name_the_flag() {
    let out = tcptail().args(["bench", "local", "--size", "8"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--size 8"));
    let out = tcptail().args(["bench", "local", "--rate", "0/s"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--rate"));
    let out = tcptail().args(["bench", "local", "--duration", "10"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing unit"));
    let out = tcptail().args(["bench", "local", "--profile", "nosuchprofile"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nosuchprofile"));
    let out = tcptail().args(["bench", "local", "--matrix", "colour=red"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("colour"));
    let out = tcptail().args(["bench", "client", "127.0.0.1:1", "--count", "10"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("connecting"));
}

#[test]
fn interrupt_prints_the_partial_result() {
    let bin = assert_cmd::cargo::cargo_bin("tcptail");
    let child = StdCommand::new(bin)
        .args(["bench", "local", "--duration", "60s", "--json", "--warmup", "10"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let pid = child.id() as i32;
    StdCommand::new("kill").args(["-INT", &pid.to_string()]).status().unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("partial JSON");
    assert_eq!(v["interrupted"], true);
    assert!(f(&v, &["requests"]) > 0.0);
}

#[test]
fn samples_file_has_every_request() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.csv");
    let v = run_json(&[
        "bench",
        "local",
        "--count",
        "300",
        "--samples",
        path.to_str().unwrap(),
        "--warmup",
        "10",
    ]);
    assert_eq!(v["requests"], 300);
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "intended_ns,connection,seq,latency_ns,service_ns");
    assert_eq!(lines.len(), 301);
}
