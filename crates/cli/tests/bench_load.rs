//! The real `tcptail` binary at the load shapes of issue 16: many connections spread over
//! threads, pipelined requests matched to their responses (and a server that answers out of
//! order, which is a protocol error), and connect-per-request with its ports reused; each on
//! the default engine and on io_uring.

mod common;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde_json::Value;
use tcptail_netns::{Cleanup, Netns};

use common::{bin, in_netns, text};

static RUNS: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    RUNS.lock().unwrap_or_else(PoisonError::into_inner)
}

fn run_json(args: &[&str]) -> Value {
    let _serial = one_at_a_time();
    let out = std::process::Command::new(bin()).args(args).arg("--json").output().unwrap();
    assert!(out.status.success(), "tcptail {args:?}: {}\n{}", text(&out.stderr), text(&out.stdout));
    // One JSON document, or JSON lines (with --interval) whose last line is the result.
    serde_json::from_slice(&out.stdout).unwrap_or_else(|_| {
        let stdout = text(&out.stdout);
        serde_json::from_str(stdout.lines().last().expect("output")).expect("JSON on stdout")
    })
}

/// (connection, seq, answered) of every row of a `--samples` CSV.
fn read_samples(path: &std::path::Path) -> Vec<(u64, u64, bool)> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (c, s, a) = (col("connection"), col("seq"), col("answered"));
    lines
        .map(|line| {
            let cols: Vec<&str> = line.split(',').collect();
            (cols[c].parse().unwrap(), cols[s].parse().unwrap(), cols[a] == "true")
        })
        .collect()
}

#[test]
fn pipelined_requests_are_each_matched_to_their_response() {
    pipelined_requests_are_matched_on("default");
}

#[test]
fn pipelined_requests_are_each_matched_to_their_response_on_io_uring() {
    pipelined_requests_are_matched_on("io_uring");
}

fn pipelined_requests_are_matched_on(engine: &str) {
    let dir = tempfile::tempdir().unwrap();
    let samples = dir.path().join("s.csv");
    let v = run_json(&[
        "bench",
        "local",
        "--engine",
        engine,
        "--connections",
        "4",
        "--threads",
        "2",
        "--depth",
        "8",
        "--count",
        "4000",
        "--warmup",
        "400",
        "--samples",
        samples.to_str().unwrap(),
    ]);
    assert_eq!(
        (&v["requests"], &v["sent"], &v["unanswered"]),
        (&4000.into(), &4000.into(), &0.into())
    );
    assert_eq!(v["run_config"]["depth"], 8);
    assert_eq!(v["context"]["connections"].as_array().map(Vec::len), Some(4));
    // Every request of every connection answered exactly once, in sequence from 0.
    let mut rows = read_samples(&samples);
    assert_eq!(rows.len(), 4000);
    rows.sort();
    for conn in 0..4u64 {
        let seqs: Vec<u64> = rows.iter().filter(|r| r.0 == conn).map(|r| r.1).collect();
        assert_eq!(seqs.len(), 1000, "connection {conn}");
        let wrong = seqs.iter().enumerate().find(|(i, s)| *i as u64 != **s);
        assert_eq!(wrong, None, "connection {conn}: (position, seq) out of sequence");
    }
    assert!(rows.iter().all(|r| r.2));
    // Pipelining keeps several requests in flight: with 8 outstanding, a request waits for
    // the ones ahead of it, so the median is well above the minimum.
    let p50 = v["latency_us"]["p50"].as_f64().unwrap();
    let min = v["latency_us"]["min"].as_f64().unwrap();
    assert!(p50 > min, "p50 {p50} min {min}");
    // Each percentile comes with its interval from the 4000 samples; p99.99 cannot have one.
    let ci = &v["latency_us_ci"];
    assert!(
        ci["p50"]["low"].as_f64().unwrap() <= p50 && p50 <= ci["p50"]["high"].as_f64().unwrap()
    );
    assert_eq!(ci["samples"], 4000);
    assert!(ci["p9999"].is_null());
    assert!(ci["unsupported"]["p9999"].as_str().unwrap().contains("4000 samples cannot"), "{ci}");
}

/// A server that completes the handshake, then answers each pair of requests in swapped
/// order.
fn out_of_order_server() -> (u16, std::thread::JoinHandle<()>) {
    use tcptail_bench::wire;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let thread = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let hello = common::welcome_bench_client(&mut s, "swapping");
        let mut request = vec![0u8; hello.request_len as usize];
        let mut pending = Vec::new();
        while s.read_exact(&mut request).is_ok() {
            let header =
                wire::Header::decode(request[..wire::HEADER_LEN].try_into().unwrap()).unwrap();
            pending.push(header.seq);
            if pending.len() == 2 {
                for seq in pending.drain(..).rev() {
                    let mut response = vec![0u8; header.reply_len as usize];
                    wire::encode_response(&mut response, seq);
                    if s.write_all(&response).is_err() {
                        return;
                    }
                }
            }
        }
    });
    (port, thread)
}

#[test]
fn a_server_answering_out_of_order_is_a_protocol_error() {
    answering_out_of_order_is_an_error_on("default");
}

#[test]
fn a_server_answering_out_of_order_is_a_protocol_error_on_io_uring() {
    answering_out_of_order_is_an_error_on("io_uring");
}

fn answering_out_of_order_is_an_error_on(engine: &str) {
    let _serial = one_at_a_time();
    let (port, server) = out_of_order_server();
    let addr = format!("127.0.0.1:{port}");
    let out = std::process::Command::new(bin())
        .args(["bench", "client", &addr, "--engine", engine])
        .args(["--depth", "2", "--count", "100", "--warmup", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}{}", text(&out.stdout), text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("connection 0"), "{err}");
    assert!(
        err.contains("the server answered out of order: response 1 arrived while request 0"),
        "{err}"
    );
    assert_eq!(err.matches("out of order").count(), 1, "said once: {err}");
    server.join().unwrap();
}

#[test]
fn connect_per_request_reuses_its_ports() {
    connect_per_request_reuses_its_ports_on("default");
}

#[test]
fn connect_per_request_reuses_its_ports_on_io_uring() {
    connect_per_request_reuses_its_ports_on("io_uring");
}

fn connect_per_request_reuses_its_ports_on(engine: &str) {
    let _serial = one_at_a_time();
    tcptail_netns::ensure_root().expect("the CRR port test needs root (a throwaway namespace)");
    let cleanup = Cleanup::new();
    let ns = Netns::create(&cleanup, "crr").unwrap();
    ns.ip(["link", "set", "lo", "up"]).unwrap();
    // Ten local ports for 500 connections: only a client that leaves no TIME_WAIT behind
    // (or reuses it) gets through; one that closes with a FIN would run out after ten.
    ns.set_sysctl("net.ipv4.ip_local_port_range", "40000 40009").unwrap();
    // And no TIME_WAIT reuse by the kernel (its default allows it on loopback).
    ns.set_sysctl("net.ipv4.tcp_tw_reuse", "0").unwrap();
    let out = in_netns(
        &ns,
        &[
            "bench",
            "local",
            "--engine",
            engine,
            "--mode",
            "crr",
            "--connections",
            "2",
            "--threads",
            "1",
            "--count",
            "500",
            "--warmup",
            "20",
            "--json",
        ],
    );
    assert!(out.status.success(), "{}\n{}", text(&out.stderr), text(&out.stdout));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((&v["requests"], &v["unanswered"]), (&500.into(), &0.into()));
    assert_eq!(v["run_config"]["mode"], "crr");
    // Connect time is its own summary, apart from the request's latency.
    let connect = &v["connect_us"];
    assert_eq!(connect["count"], 500, "{v}");
    assert!(connect["p50"].as_f64().unwrap() > 0.0);
    assert!(v["latency_us"]["p50"].as_f64().unwrap() > 0.0);
    ns.delete().unwrap();
}

/// Reads an HdrHistogram log with the `hdrhistogram` package from PyPI (HdrHistogram's own
/// Python implementation): per interval its count, p50 (ns), start and end (ms since the
/// epoch) and tag, as JSON lines; then the log's StartTime.
const READ_LOG: &str = r#"
import json, sys
from hdrh.histogram import HdrHistogram
from hdrh.log import HistogramLogReader
reader = HistogramLogReader(sys.argv[1], HdrHistogram(1, 3600 * 10**9, 3))
while True:
    h = reader.get_next_interval_histogram()
    if h is None:
        break
    print(json.dumps({"count": h.get_total_count(), "p50": h.get_value_at_percentile(50),
                      "start": h.get_start_time_stamp(), "end": h.get_end_time_stamp(),
                      "tag": h.get_tag()}))
print(json.dumps({"start_time": reader.start_time_sec}))
"#;

fn read_hdr_log(path: &std::path::Path) -> Vec<Value> {
    let out = std::process::Command::new("python3")
        .args(["-c", READ_LOG, path.to_str().unwrap()])
        .output()
        .expect("python3 (scripts/install-deps installs it and the hdrhistogram package)");
    assert!(
        out.status.success(),
        "reading the log with the hdrhistogram package failed (scripts/install-deps installs \
         it): {}",
        text(&out.stderr)
    );
    text(&out.stdout).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn the_hdr_log_reads_back_with_hdrhistograms_own_python_package() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("run.hlog");
    let v = run_json(&[
        "bench",
        "local",
        "--duration",
        "1500ms",
        "--warmup",
        "100",
        "--hdr-log",
        log.to_str().unwrap(),
        "--interval",
        "300ms",
    ]);
    let entries = read_hdr_log(&log);
    let (intervals, header) = entries.split_at(entries.len() - 1);
    assert!(intervals.len() >= 4, "{entries:?}");
    // Every measured request is in exactly one interval.
    let total: u64 = intervals.iter().map(|e| e["count"].as_u64().unwrap()).sum();
    assert_eq!(total, v["requests"].as_u64().unwrap());
    // Consecutive intervals without gaps (the format keeps milliseconds: 3 decimals of both
    // start and length), inside the run's wall-clock time.
    for pair in intervals.windows(2) {
        assert!(
            (pair[0]["end"].as_f64().unwrap() - pair[1]["start"].as_f64().unwrap()).abs() <= 2.0,
            "{pair:?}"
        );
    }
    let start_ms = header[0]["start_time"].as_f64().unwrap() * 1000.0;
    assert!(intervals[0]["start"].as_f64().unwrap() >= start_ms);
    // Values are nanoseconds: the median of an interval is within the run's latency range.
    let p50_ns = intervals[1]["p50"].as_f64().unwrap();
    let (min, max) =
        (v["latency_us"]["min"].as_f64().unwrap(), v["latency_us"]["max"].as_f64().unwrap());
    assert!(p50_ns >= min * 1000.0 * 0.99 && p50_ns <= max * 1000.0 * 1.01, "{p50_ns} ns");
}

#[test]
fn matrix_rows_are_tagged_in_the_hdr_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("matrix.hlog");
    let _ = run_json(&[
        "bench",
        "local",
        "--matrix",
        "cc=bbr,reno",
        "--rounds",
        "2",
        "--count",
        "2000",
        "--warmup",
        "100",
        "--hdr-log",
        log.to_str().unwrap(),
    ]);
    let entries = read_hdr_log(&log);
    let tags: std::collections::BTreeSet<String> =
        entries.iter().filter_map(|e| e["tag"].as_str().map(String::from)).collect();
    assert_eq!(tags, ["cc=bbr", "cc=reno"].map(String::from).into(), "{entries:?}");
    let total: u64 = entries.iter().filter_map(|e| e["count"].as_u64()).sum();
    assert_eq!(total, 4000);
}

#[test]
fn interim_lines_survive_ctrl_c_and_the_final_result_follows() {
    use std::process::{Command, Stdio};
    let _serial = one_at_a_time();
    use std::io::BufRead;
    let mut child = Command::new(bin())
        .args(["bench", "local", "--duration", "60s", "--warmup", "10", "--json"])
        .args(["--interval", "200ms", "--connections", "2", "--threads", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Ctrl-C once four interim lines are out (not after a guessed delay, which a loaded host
    // can spend starting up).
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut printed = String::new();
    for _ in 0..4 {
        assert!(stdout.read_line(&mut printed).unwrap() > 0, "output ended: {printed}");
    }
    let pid = child.id().to_string();
    Command::new("kill").args(["-INT", &pid]).status().unwrap();
    stdout.read_to_string(&mut printed).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", text(&out.stderr));
    let lines: Vec<Value> = printed
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let (last, interim) = lines.split_last().expect("output");
    assert!(interim.len() >= 4, "{} interim lines", interim.len());
    assert!(interim.iter().all(|l| l["interval"]["latency_us"]["p50"].as_f64().is_some()));
    assert_eq!(last["interrupted"], true);
    // The interim lines add up to the final count: nothing lost at the interruption.
    let sum: u64 = interim.iter().map(|l| l["interval"]["requests"].as_u64().unwrap()).sum();
    let final_count = last["requests"].as_u64().unwrap() + last["unanswered"].as_u64().unwrap();
    assert_eq!(sum, final_count);
}

#[test]
fn tcp_info_is_sampled_per_connection_on_the_requests_clock() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("tcp_info.csv");
    let samples = dir.path().join("s.csv");
    let v = run_json(&[
        "bench",
        "local",
        "--duration",
        "1s",
        "--connections",
        "2",
        "--tcp-info-interval",
        "10ms",
        "--tcp-info-csv",
        csv.to_str().unwrap(),
        "--samples",
        samples.to_str().unwrap(),
    ]);
    let info = v["tcp_info"].as_array().expect("tcp_info samples");
    for conn in 0..2 {
        let times: Vec<u64> = info
            .iter()
            .filter(|s| s["connection"] == conn)
            .map(|s| s["t_ns"].as_u64().unwrap())
            .collect();
        // About one per 10 ms over the 1 s run (a loaded machine wakes the sampler late).
        assert!(times.len() >= 30 && times.len() <= 110, "connection {conn}: {}", times.len());
        assert!(times.windows(2).all(|w| w[0] < w[1]));
        assert!(*times.last().unwrap() < 1_600_000_000);
    }
    assert!(info.iter().all(|s| s["cwnd"].as_u64().unwrap() > 0 && s["srtt_us"].is_u64()));
    // Same clock as the requests: both start at the measured start and cover the same second.
    let requests = std::fs::read_to_string(&samples).unwrap();
    let first_request: u64 =
        requests.lines().nth(1).unwrap().split(',').next().unwrap().parse().unwrap();
    assert!(first_request < 50_000_000, "{first_request}");
    assert!(info[0]["t_ns"].as_u64().unwrap() < 50_000_000);
    // The attribution reads the timeline when no per-request snapshots were taken.
    assert!(v["attribution"].is_object(), "{}", v["attribution"]);
    let rows = std::fs::read_to_string(&csv).unwrap();
    assert!(rows.starts_with("t_ns,connection,cwnd,"));
    assert_eq!(rows.lines().count(), info.len() + 1);
    // Connect per request has no connection to follow.
    let out = std::process::Command::new(bin())
        .args(["bench", "local", "--mode", "crr", "--tcp-info-interval", "10ms", "--count", "10"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("--tcp-info-interval: needs connections"));
}
