//! Open-loop connect-per-request (`tcptail bench client --mode crr --rate`) on the real
//! binary: the rate kept against `tcptail bench server` on 127.0.0.1, with interim lines and
//! the HdrHistogram log; a server stall seen from each transaction's due time (the ones
//! queued behind it included, so nothing is coordinated away); transactions the server never
//! answers, or cannot take once it is gone, counted and the run carried on.
//!
//! Every bound comes from what the run itself measured (its latencies, its schedule), never
//! from this host's speed.
//!
//! Each test runs on the default engine and on io_uring: the same schedule, the same
//! accounting, the same JSON.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::Value;

use common::{BenchServer, bin, text};

static RUNS: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    RUNS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Runs `tcptail bench client ADDR --engine ENGINE ARGS --json`; the interim JSON lines and
/// the result.
fn client(addr: &str, engine: &str, args: &[&str]) -> (Vec<Value>, Value) {
    let out = Command::new(bin())
        .args(["bench", "client", addr, "--engine", engine])
        .args(args)
        .arg("--json")
        .output()
        .expect("run tcptail bench client");
    assert!(out.status.success(), "{args:?}: {}\n{}", text(&out.stderr), text(&out.stdout));
    let stdout = text(&out.stdout);
    let mut lines: Vec<Value> = match serde_json::from_str(&stdout) {
        Ok(one) => vec![one],
        Err(_) => stdout.lines().map(|l| serde_json::from_str(l).expect("JSON line")).collect(),
    };
    let result = lines.pop().expect("a result");
    (lines, result)
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn open_loop_crr_keeps_its_rate_against_the_bench_server() {
    keeps_its_rate_on("default");
}

#[test]
fn open_loop_crr_keeps_its_rate_against_the_bench_server_on_io_uring() {
    keeps_its_rate_on("io_uring");
}

fn keeps_its_rate_on(engine: &str) {
    let _serial = one_at_a_time();
    let server = BenchServer::start(&[]);
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("crr.hlog");
    let (rate, count) = (400.0, 800u64);
    let (interim, v) = client(
        &server.addr,
        engine,
        &[
            "--mode",
            "crr",
            "--rate",
            "400/s",
            "--connections",
            "4",
            "--threads",
            "2",
            "--count",
            "800",
            "--warmup",
            "20",
            "--interval",
            "500ms",
            "--hdr-log",
            log.to_str().unwrap(),
        ],
    );
    assert_eq!(v["mode"], "open");
    assert_eq!(v["run_config"]["mode"], "crr");
    assert_eq!((&v["requests"], &v["unanswered"]), (&count.into(), &0.into()), "{v}");
    let crr = &v["crr"];
    assert_eq!((&crr["not_started"], &crr["response_timeout"]), (&0.into(), &0.into()), "{crr}");
    // The schedule is the rate's: the last of the 800 transactions was due 799/400 s after
    // the start, and every one was answered within the run's worst latency of its due time.
    let span = (count - 1) as f64 / rate;
    let latency_max = f(&v["latency_us"]["max"]) / 1e6;
    let elapsed = f(&v["duration_seconds"]);
    assert!(elapsed >= span, "finished in {elapsed} s, before the last one was due ({span} s)");
    assert!(elapsed <= span + latency_max + 0.001, "{elapsed} s vs {span} s + {latency_max} s");
    // The achieved rate, from the first to the last request sent: each request left between
    // its due time and its response, so within the worst latency of the schedule's.
    let achieved = f(&v["rate_per_second"]["achieved"]);
    assert!(achieved >= (count - 1) as f64 / (span + latency_max), "achieved {achieved}/s");
    if latency_max < span {
        assert!(achieved <= (count - 1) as f64 / (span - latency_max), "achieved {achieved}/s");
    }
    // Connect time apart, one per transaction; the request's own time (service) never above
    // the transaction's (latency, from its due time, connect included).
    assert_eq!(v["connect_us"]["count"], count);
    for p in ["p50", "p99", "max"] {
        assert!(f(&v["service_us"][p]) <= f(&v["latency_us"][p]), "{p}: {v}");
    }
    // Interim lines while it ran, holding every transaction between them.
    assert!(!interim.is_empty());
    let recorded: u64 = interim.iter().map(|l| l["interval"]["requests"].as_u64().unwrap()).sum();
    assert_eq!(recorded, count);
    // And the HdrHistogram log has its interval histograms (V2 compressed, base64 "HISTF").
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(log.lines().filter(|l| l.contains("HISTF")).count() >= 1, "{log}");
}

/// What the hand-written server does with the measured transaction it accepts `n`-th.
#[derive(Clone, Copy, PartialEq)]
enum Act {
    Answer,
    /// Answers after this long.
    Stall(Duration),
    /// Reads the request and never answers.
    Ignore,
    /// Stops listening (every later connect is refused).
    Vanish,
}

/// A bench-protocol server on loopback for a connect-per-request client with `connections`
/// slots and a warm-up of `warmup` transactions: each connection's Hello is welcomed and its
/// requests answered, but the measured transaction it accepts `n`-th gets `act(n)`.
fn scripted_server(
    connections: usize,
    warmup: usize,
    act: fn(usize) -> Act,
) -> (String, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    // The handshake connection of each slot, then the warm-up (each slot's share rounded up),
    // come before any measured transaction: the client drains its warm-up first.
    let before_measured = connections + warmup.div_ceil(connections) * connections;
    let thread = std::thread::spawn(move || {
        for (i, stream) in listener.incoming().enumerate() {
            let Ok(stream) = stream else { continue };
            let what = i.checked_sub(before_measured).map_or(Act::Answer, act);
            if what == Act::Vanish {
                return;
            }
            std::thread::spawn(move || serve(stream, what));
        }
    });
    (addr, thread)
}

fn serve(mut s: TcpStream, what: Act) {
    use tcptail_bench::wire;
    let hello = common::welcome_bench_client(&mut s, "scripted");
    let mut request = vec![0u8; hello.request_len as usize];
    while s.read_exact(&mut request).is_ok() {
        let header = wire::Header::decode(request[..wire::HEADER_LEN].try_into().unwrap()).unwrap();
        match what {
            Act::Ignore => continue,
            Act::Stall(d) => std::thread::sleep(d),
            Act::Answer | Act::Vanish => {}
        }
        let mut response = vec![0u8; header.reply_len as usize];
        wire::encode_response(&mut response, header.seq);
        if s.write_all(&response).is_err() {
            return;
        }
    }
}

const STALL: Duration = Duration::from_millis(300);

#[test]
fn a_server_stall_counts_from_each_transactions_due_time() {
    a_stall_counts_from_the_due_time_on("default");
}

#[test]
fn a_server_stall_counts_from_each_transactions_due_time_on_io_uring() {
    a_stall_counts_from_the_due_time_on("io_uring");
}

fn a_stall_counts_from_the_due_time_on(engine: &str) {
    let _serial = one_at_a_time();
    let (addr, _server) = scripted_server(2, 20, |n| match n {
        40 => Act::Stall(STALL),
        100 | 101 => Act::Ignore,
        _ => Act::Answer,
    });
    let dir = tempfile::tempdir().unwrap();
    let samples = dir.path().join("s.csv");
    let (_, v) = client(
        &addr,
        engine,
        &[
            "--mode",
            "crr",
            "--rate",
            "200/s",
            "--connections",
            "2",
            "--threads",
            "1",
            "--count",
            "300",
            "--warmup",
            "20",
            "--response-timeout",
            "1s",
            "--samples",
            samples.to_str().unwrap(),
        ],
    );
    // The two transactions never answered: counted by cause, kept as unanswered; the run went
    // on without them.
    let crr = &v["crr"];
    assert_eq!((&v["requests"], &v["unanswered"]), (&298.into(), &2.into()), "{v}");
    assert_eq!(crr["response_timeout"], 2, "{crr}");
    assert_eq!(v["connect_us"]["count"], 300, "each transaction connected once");
    let warnings = v["warnings"].to_string();
    assert!(warnings.contains("2 no response within --response-timeout"), "{warnings}");
    let stall_us = STALL.as_secs_f64() * 1e6;
    // Its slot's next transactions fell due during the stall and waited for the slot: their
    // latency (from when they were due) holds that wait, their own request does not. Those
    // due in the first half of the stall waited at least half of it, whatever this host's
    // speed (10 ms apart on the slot: about 15 of them).
    let text = std::fs::read_to_string(&samples).unwrap();
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
    let (lat, svc, ans) = (col("latency_ns"), col("service_ns"), col("answered"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 300);
    // The stalled transaction's own request took the stall.
    let answered_service_max = rows
        .iter()
        .filter(|r| r[ans] == "true")
        .map(|r| r[svc].parse::<f64>().unwrap())
        .fold(0.0, f64::max);
    assert!(answered_service_max >= stall_us * 1e3, "{answered_service_max} ns");
    let waited = rows
        .iter()
        .filter(|r| r[ans] == "true")
        .filter(|r| {
            let (l, s): (f64, f64) = (r[lat].parse().unwrap(), r[svc].parse().unwrap());
            l - s >= stall_us * 1e3 / 2.0
        })
        .count();
    assert!(waited >= 5, "{waited} transactions waited half the stall for their slot");
    assert!(f(&crr["queued"]) >= waited as f64, "{crr}");
    // The unanswered ones: each at least the response timeout, from its due time.
    let unanswered: Vec<f64> =
        rows.iter().filter(|r| r[ans] == "false").map(|r| r[lat].parse().unwrap()).collect();
    assert_eq!(unanswered.len(), 2);
    assert!(unanswered.iter().all(|&l| l >= 1e9), "{unanswered:?}");
}

#[test]
fn transactions_a_vanished_server_cannot_take_are_counted_and_the_run_ends() {
    a_vanished_server_is_accounted_for_on("default");
}

#[test]
fn transactions_a_vanished_server_cannot_take_are_counted_on_io_uring() {
    a_vanished_server_is_accounted_for_on("io_uring");
}

fn a_vanished_server_is_accounted_for_on(engine: &str) {
    let _serial = one_at_a_time();
    let (addr, server) =
        scripted_server(2, 20, |n| if n == 50 { Act::Vanish } else { Act::Answer });
    let (_, v) = client(
        &addr,
        engine,
        &[
            "--mode",
            "crr",
            "--rate",
            "500/s",
            "--connections",
            "2",
            "--threads",
            "1",
            "--count",
            "200",
            "--warmup",
            "20",
            "--response-timeout",
            "1s",
        ],
    );
    server.join().unwrap();
    // Every transaction is accounted for: the first 50 (and any the listener still held)
    // answered, every later one failed by cause, none lost.
    let crr = &v["crr"];
    let (requests, unanswered) =
        (v["requests"].as_u64().unwrap(), v["unanswered"].as_u64().unwrap());
    assert_eq!(requests + unanswered, 200, "{v}");
    assert!(requests >= 50, "{v}");
    let failed: u64 = ["connect_refused", "closed_by_server", "response_timeout", "connect_failed"]
        .iter()
        .map(|k| crr[*k].as_u64().unwrap())
        .sum();
    assert_eq!(failed, unanswered, "{crr}");
    assert!(crr["connect_refused"].as_u64().unwrap() >= 1, "{crr}");
    assert!(v["warnings"].to_string().contains("connect refused"), "{v}");
}
