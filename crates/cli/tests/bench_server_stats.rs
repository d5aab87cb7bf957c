//! The real `tcptail` binary reporting the server's own account of a run (issue 16 §2, the
//! final JSON's `server`): CPU time, service time per request, socket state at the end; one
//! connection and 16 over 2 threads; the text line; each pairing of the default and io_uring
//! engines; and a server from before the stats frames, which makes the run warn and still
//! succeed.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use serde_json::Value;

use common::{BenchServer, bin, text};

static RUNS: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    RUNS.lock().unwrap_or_else(PoisonError::into_inner)
}

fn run_json(args: &[&str]) -> Value {
    let _serial = one_at_a_time();
    let out = Command::new(bin()).args(args).arg("--json").output().unwrap();
    assert!(out.status.success(), "tcptail {args:?}: {}\n{}", text(&out.stderr), text(&out.stdout));
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

/// Checks `server` against the run it belongs to: every request the client counted was
/// served, the service time is part of the round trip, each connection's socket is listed.
fn check_server(v: &Value, connections: u64, request_len: u64) {
    let server = &v["server"];
    assert_eq!(server["connections"], connections, "{server}");
    let requests = v["requests"].as_u64().unwrap();
    assert_eq!(server["requests"], requests, "the server answered what the client counted");
    assert!(num(&server["cpu_seconds"]) > 0.0, "{server}");
    let cpu = num(&server["cpu_user_seconds"]) + num(&server["cpu_system_seconds"]);
    assert!((cpu - num(&server["cpu_seconds"])).abs() < 1e-9, "{server}");
    // The server's threads cannot have used more than all the CPUs over the window.
    let cpus = std::thread::available_parallelism().unwrap().get() as f64;
    assert!(num(&server["cpus_busy"]) <= cpus * 1.05, "{server}");
    let per_request = num(&server["cpu_us_per_request"]);
    assert!((per_request - cpu * 1e6 / requests as f64).abs() < 1e-6 * per_request.max(1.0));
    let service = &server["service_us"];
    assert_eq!(service["count"], requests, "{service}");
    assert!(num(&service["p50"]) > 0.0, "{service}");
    // Service is the server's share of each round trip: its median is below the client's.
    assert!(
        num(&service["p50"]) < num(&v["latency_us"]["p50"]),
        "{service} vs {}",
        v["latency_us"]
    );
    assert!(num(&service["p99"]) >= num(&service["p50"]));
    let sockets = server["sockets"].as_array().expect("sockets");
    assert_eq!(sockets.len() as u64, connections);
    let mut seen: Vec<u64> = sockets.iter().map(|s| s["connection"].as_u64().unwrap()).collect();
    seen.dedup();
    assert_eq!(seen, (0..connections).collect::<Vec<_>>(), "one row per connection, in order");
    let received: u64 = sockets.iter().map(|s| s["bytes_received"].as_u64().unwrap()).sum();
    assert!(received >= requests * request_len, "{received} bytes for {requests} requests");
    for s in sockets {
        assert!(s["cwnd_segs"].as_u64().unwrap() > 0, "{s}");
        assert!(s["rtt_us"].as_u64().unwrap() > 0, "{s}");
        assert!(s["total_retrans_segs"].is_u64() && s["ca_state"].is_string(), "{s}");
    }
}

#[test]
fn one_connection_reports_the_servers_side_of_the_run() {
    let v = run_json(&["bench", "local", "--count", "3000", "--warmup", "500"]);
    assert_eq!(v["requests"], 3000);
    check_server(&v, 1, v["run_config"]["request_len"].as_u64().unwrap());
    // The warm-up's requests are in no window the client reports.
    assert_eq!(v["server"]["requests"], 3000);
}

#[test]
fn sixteen_connections_over_two_threads_each_report_their_own() {
    let args = ["bench", "local", "--connections", "16", "--threads", "2", "--depth", "2"];
    let v = run_json(&[&args[..], &["--count", "8000", "--warmup", "800"]].concat());
    assert_eq!(v["requests"], 8000);
    check_server(&v, 16, v["run_config"]["request_len"].as_u64().unwrap());
}

#[test]
fn the_text_output_prints_one_server_line() {
    let _serial = one_at_a_time();
    let out = Command::new(bin())
        .args(["bench", "local", "--count", "1000", "--warmup", "100"])
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with("server: ")).collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    let line = lines[0];
    for part in ["CPU s", "µs/request", "service p50", "p99", "socket cwnd", "retrans"] {
        assert!(line.contains(part), "no {part:?} in {line:?}");
    }
}

#[test]
fn every_pairing_of_engines_reports_the_servers_side() {
    for (client, server) in
        [("io_uring", "default"), ("default", "io_uring"), ("io_uring", "io_uring")]
    {
        let server_process = BenchServer::start(&["--engine", server]);
        let v = run_json(&[
            "bench",
            "client",
            &server_process.addr,
            "--engine",
            client,
            "--count",
            "3000",
            "--warmup",
            "500",
        ]);
        let case = format!("client {client}, server {server}");
        assert_eq!(v["requests"], 3000, "{case}");
        assert!(v["warnings"].as_array().unwrap().is_empty(), "{case}: {}", v["warnings"]);
        check_server(&v, 1, v["run_config"]["request_len"].as_u64().unwrap());
        // The warm-up's requests are in no window the client reports.
        assert_eq!(v["server"]["requests"], 3000, "{case}");
    }
}

#[test]
fn io_uring_at_sixteen_connections_over_two_threads_each_report_their_own() {
    let args = ["bench", "local", "--engine", "io_uring", "--connections", "16", "--threads", "2"];
    let more = ["--depth", "2", "--count", "8000", "--warmup", "800"];
    let v = run_json(&[&args[..], &more[..]].concat());
    assert_eq!(v["requests"], 8000);
    check_server(&v, 16, v["run_config"]["request_len"].as_u64().unwrap());
}

/// A server from before the stats frames: it answers requests, and anything else with the
/// Error frame its frame decoder produced then ("unknown frame kind 6"), then closes.
fn old_server() -> (u16, std::thread::JoinHandle<Vec<u8>>) {
    use tcptail_bench::wire;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let thread = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let hello = common::welcome_bench_client(&mut s, "old");
        let mut header = [0u8; wire::HEADER_LEN];
        let mut payload = vec![0u8; hello.request_len as usize];
        while s.read_exact(&mut header).is_ok() {
            if header[3] != 3 {
                let reason = format!("unknown frame kind {}", header[3]);
                wire::write_error(&mut s, &reason).unwrap();
                return header.to_vec();
            }
            let h = wire::Header::decode(&header).unwrap();
            s.read_exact(&mut payload[..h.payload_len()]).unwrap();
            let mut response = vec![0u8; h.reply_len as usize];
            wire::encode_response(&mut response, h.seq);
            s.write_all(&response).unwrap();
        }
        Vec::new()
    });
    (port, thread)
}

#[test]
fn a_server_without_stats_makes_a_warning_and_the_run_succeeds() {
    for json in [true, false] {
        let (port, server) = old_server();
        let addr = format!("127.0.0.1:{port}");
        let _serial = one_at_a_time();
        let started = Instant::now();
        let out = Command::new(bin())
            .args(["bench", "client", &addr, "--count", "200", "--warmup", "20"])
            .args(json.then_some("--json"))
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        let asked = server.join().unwrap();
        assert!(out.status.success(), "{}{}", text(&out.stdout), text(&out.stderr));
        // It was asked once, at the end (not after the warm-up, which would have cut the run).
        assert_eq!(asked.get(3), Some(&6), "the stats request reached the server");
        assert!(started.elapsed() < Duration::from_secs(30));
        let expected = "server does not report stats: upgrade it (server test answered the \
                        stats request with: the peer closed the connection: unknown frame kind 6)";
        let stdout = text(&out.stdout);
        if json {
            let v: Value = serde_json::from_str(&stdout).unwrap();
            assert_eq!(v["requests"], 200);
            assert!(v["server"].is_null(), "{}", v["server"]);
            let warnings: Vec<&str> =
                v["warnings"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
            assert_eq!(warnings, [expected], "{v}");
        } else {
            assert!(stdout.contains(&format!("warning: {expected}")), "{stdout}");
            assert!(!stdout.contains("\nserver: "), "{stdout}");
        }
    }
}
