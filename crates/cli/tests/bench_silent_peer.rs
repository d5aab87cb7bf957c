//! The real `tcptail bench client` against a peer that completes the handshake and never
//! answers: unanswered requests are counted and kept in the percentiles as lower bounds, in
//! open loop (non-blocking sockets) and closed loop (blocking receives whose deadline the
//! watchdog keeps), and Ctrl-C while a request waits still ends the run with its result.

mod common;

use std::io::Read;
use std::net::TcpListener;
use std::process::{Command as StdCommand, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError, mpsc};
use std::time::{Duration, Instant};

use assert_cmd::Command;
use serde_json::Value;

static RUNS: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    RUNS.lock().unwrap_or_else(PoisonError::into_inner)
}

fn tcptail() -> Command {
    Command::cargo_bin("tcptail").expect("tcptail binary")
}

fn f(v: &Value, path: &[&str]) -> f64 {
    v.pointer(&format!("/{}", path.join("/")))
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("{path:?} missing in {v}"))
}

/// A peer that completes the handshake, reads requests, and never answers one; the receiver
/// gets one message when the first request's bytes arrive.
fn silent_peer() -> (u16, std::thread::JoinHandle<()>, mpsc::Receiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (first_request, requested) = mpsc::channel();
    let thread = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        common::welcome_bench_client(&mut s, "silent");
        let mut sink = [0u8; 4096];
        while let Ok(1..) = s.read(&mut sink) {
            let _ = first_request.send(());
        }
    });
    (port, thread, requested)
}

#[test]
fn requests_a_peer_never_answers_are_counted_and_warned_about() {
    for json in [true, false] {
        let (port, peer, _) = silent_peer();
        let addr = format!("127.0.0.1:{port}");
        let mut args = vec!["bench", "client", &addr, "--rate", "500/s", "--count", "100"];
        args.extend(["--warmup", "0", "--response-timeout", "300ms"]);
        let _serial = one_at_a_time();
        let mut cmd = tcptail();
        cmd.args(&args);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.output().unwrap();
        peer.join().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8(out.stdout).unwrap();
        if json {
            let v: Value = serde_json::from_str(&stdout).unwrap();
            assert_eq!((&v["requests"], &v["sent"]), (&0.into(), &100.into()));
            assert_eq!(v["unanswered"], 100);
            assert_eq!(v["latency_us"]["count"], 100);
            // The first request waited the whole timeout; the last, sent ~200 ms after it, ~100 ms.
            assert!(f(&v, &["latency_us", "max"]) >= 300_000.0, "{}", v["latency_us"]);
            assert!(f(&v, &["latency_us", "min"]) >= 90_000.0, "{}", v["latency_us"]);
            assert!(v["warnings"].to_string().contains("no response within 300ms"), "{v}");
        } else {
            assert!(stdout.contains("WARNING: 100 of 100 requests got no response"), "{stdout}");
            assert!(stdout.contains("lower bound"), "{stdout}");
        }
    }
}

/// Closed loop receives block without a timeout; the watchdog gives up on the request.
#[test]
fn a_closed_loop_request_never_answered_is_given_up_at_the_response_timeout() {
    let (port, peer, _) = silent_peer();
    let addr = format!("127.0.0.1:{port}");
    let _serial = one_at_a_time();
    let out = tcptail()
        .args(["bench", "client", &addr, "--count", "5", "--warmup", "0"])
        .args(["--response-timeout", "300ms", "--json"])
        .timeout(Duration::from_secs(20))
        .output()
        .unwrap();
    peer.join().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((&v["requests"], &v["sent"], &v["unanswered"]), (&0.into(), &1.into(), &1.into()));
    // Given up no earlier than the timeout; the watchdog looks every 30 ms.
    assert!(f(&v, &["latency_us", "max"]) >= 300_000.0, "{}", v["latency_us"]);
    assert!(v["warnings"].to_string().contains("no response within 300ms"), "{v}");
}

/// Ctrl-C while a closed-loop request waits on a peer that never answers: the request is
/// waited for the stop grace (500 ms), then counted, and the partial result printed.
#[test]
fn interrupt_while_a_closed_loop_request_waits() {
    let (port, peer, requested) = silent_peer();
    let _serial = one_at_a_time();
    let bin = assert_cmd::cargo::cargo_bin("tcptail");
    let mut child = StdCommand::new(bin)
        .args(["bench", "client", &format!("127.0.0.1:{port}"), "--duration", "60s"])
        .args(["--warmup", "0", "--response-timeout", "60s", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Interrupt once the request is out and waiting (not after a guessed sleep).
    requested.recv_timeout(Duration::from_secs(30)).expect("the client never sent a request");
    let asked = Instant::now();
    StdCommand::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    while child.try_wait().unwrap().is_none() {
        if asked.elapsed() > Duration::from_secs(10) {
            child.kill().unwrap();
            panic!("a closed-loop wait ignored Ctrl-C for 10 s");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = asked.elapsed();
    let out = child.wait_with_output().unwrap();
    peer.join().unwrap();
    assert!(took >= Duration::from_millis(500) && took < Duration::from_secs(5), "took {took:?}");
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("partial JSON");
    assert_eq!((&v["interrupted"], &v["unanswered"]), (&true.into(), &1.into()));
}
