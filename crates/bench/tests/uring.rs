//! The io_uring engine end to end on 127.0.0.1: every pairing of engines at both ends, long
//! frames that need several sends and receives, spinning, a server that stops answering
//! (the unanswered requests are counted, not dropped: closed loop, pipelined, open loop with
//! its intended send times), a server closing one of a ring's connections mid-batch,
//! attribution, connect-per-request, and a hostile client. Where
//! the kernel has no io_uring the tests say so (SKIPPED on stderr) and pass.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use tcptail_bench::client;
use tcptail_bench::config::{BenchConfig, Engine, Load, StopAfter, TxMode};
use tcptail_bench::pacer::Spacing;
use tcptail_bench::run::{RawRun, RunControl};
use tcptail_bench::server::{RejectReason, Server, ServerConfig, ServerEvent, ServerPolicy};
use tcptail_bench::wire::{self, FrameKind, Header, Welcome};
use tcptail_sock::Profile;

mod common;
use common::uring_available;

const URING: Engine = Engine::IoUring { sqpoll: false };

fn server(engine: Engine) -> tcptail_bench::server::RunningServer {
    let config = ServerConfig {
        policy: ServerPolicy::trusting(),
        engine,
        ..ServerConfig::new("127.0.0.1:0".parse().unwrap())
    };
    Server::bind(config).expect("bind 127.0.0.1:0").spawn()
}

fn bench(addr: SocketAddr, engine: Engine, connections: usize, count: u64) -> BenchConfig {
    let mut config = BenchConfig::new(addr, Profile::default());
    config.engine = engine;
    config.connections = connections;
    config.stop = StopAfter::Count(count);
    config.warmup = StopAfter::Count(50);
    config
}

fn run(config: &BenchConfig) -> RawRun {
    client::run_raw(config, &RunControl::new()).expect("the run succeeds")
}

fn assert_clean(raw: &RawRun, count: u64) {
    assert_eq!((raw.requests, raw.sent, raw.unanswered), (count, count, 0));
    assert_eq!(raw.latency.len(), count);
    assert!(raw.warnings.is_empty(), "{:?}", raw.warnings);
    assert!(raw.elapsed > Duration::ZERO);
}

#[test]
fn every_pairing_of_engines_answers_every_request() {
    if !uring_available("every_pairing_of_engines_answers_every_request") {
        return;
    }
    for (client_engine, server_engine) in
        [(URING, URING), (URING, Engine::Default), (Engine::Default, URING)]
    {
        let running = server(server_engine);
        for connections in [1, 4] {
            let mut config = bench(running.addr(), client_engine, connections, 2000);
            config.keep_samples = true;
            let raw = run(&config);
            assert_clean(&raw, 2000);
            assert_eq!(raw.samples.len(), 2000, "every sample kept");
            assert!(raw.samples.iter().all(|s| s.answered && s.service_ns == Some(s.latency_ns)));
            assert!(raw.samples.windows(2).all(|w| w[0].intended_ns <= w[1].intended_ns));
            assert_eq!(raw.connections.len(), connections);
            assert!(raw.connections.iter().all(|c| !c.client_cpus_seen.is_empty()));
        }
        running.stop();
    }
}

#[test]
fn threads_share_the_connections_and_the_count() {
    if !uring_available("threads_share_the_connections_and_the_count") {
        return;
    }
    let running = server(URING);
    let mut config = bench(running.addr(), URING, 5, 1001);
    config.threads = 2;
    config.keep_samples = true;
    let raw = run(&config);
    assert_clean(&raw, 1001);
    let mut per_conn = [0u64; 5];
    for s in &raw.samples {
        per_conn[s.connection] += 1;
    }
    assert_eq!(per_conn, [201, 200, 200, 200, 200], "each connection its share, by its number");
    running.stop();
}

#[test]
fn long_frames_go_out_in_several_sends_and_arrive_whole() {
    if !uring_available("long_frames_go_out_in_several_sends_and_arrive_whole") {
        return;
    }
    let running = server(URING);
    let mut config = bench(running.addr(), URING, 2, 40);
    // Longer than a send slot (64 KiB) and than a provided buffer (16 KiB).
    config.request_len = 150_000;
    config.reply_len = 300_000;
    assert_clean(&run(&config), 40);
    running.stop();
}

#[test]
fn spinning_and_sqpoll_answer_every_request() {
    if !uring_available("spinning_and_sqpoll_answer_every_request") {
        return;
    }
    // Few requests, and spinning ends on CPUs of their own: spinning threads (and SQPOLL's
    // kernel threads) share two CPUs here, and two on one CPU wait for each other's slices.
    let allowed = tcptail_bench::sys::allowed_cpus().unwrap();
    for (engine, spin) in [(URING, true), (Engine::IoUring { sqpoll: true }, false)] {
        let running = server(engine);
        let mut config = bench(running.addr(), engine, 1, 200);
        config.spin = spin;
        if let (Some(&a), Some(&b)) = (allowed.first(), allowed.last())
            && spin
            && a != b
        {
            (config.client_cpu, config.server_cpu) = (Some(a), Some(b));
        }
        assert_clean(&run(&config), 200);
        running.stop();
    }
}

#[test]
fn a_server_that_stops_answering_leaves_the_request_unanswered_not_dropped() {
    if !uring_available("a_server_that_stops_answering_leaves_the_request_unanswered") {
        return;
    }
    // Answers the warm-up's and the first 9 measured requests, then reads without answering.
    let (addr, silent) = falls_silent_after(59);
    let mut config = bench(addr, URING, 1, 100);
    config.response_timeout = Duration::from_millis(300);
    let raw = run(&config);
    assert_eq!((raw.requests, raw.unanswered, raw.sent), (9, 1, 10));
    assert_eq!(raw.latency.len(), 10, "the unanswered request is in the histogram");
    assert!(raw.latency.quantile_nanos(1.0) >= 300_000_000, "kept at the time it waited");
    assert!(
        raw.warnings[0].contains("request 9 got no response within 300ms"),
        "{:?}",
        raw.warnings
    );
    silent.join().unwrap();
}

#[test]
fn a_hostile_client_loses_its_connection_on_the_uring_server() {
    if !uring_available("a_hostile_client_loses_its_connection_on_the_uring_server") {
        return;
    }
    let (tx, rx) = mpsc::channel();
    let config =
        ServerConfig { engine: URING, ..ServerConfig::new("127.0.0.1:0".parse().unwrap()) };
    let running = Server::bind(config).unwrap().spawn_with_events(move |e| {
        let _ = tx.send(e);
    });
    let mut s = TcpStream::connect(running.addr()).unwrap();
    let hello = wire::HelloConfig {
        profile: Profile::default(),
        server_cpu: None,
        spin: false,
        request_len: 64,
        reply_len: 64,
    };
    wire::write_hello(&mut s, &hello).unwrap();
    wire::read_welcome(&mut s).unwrap();
    // A request asking for more than the Hello negotiated.
    let mut frame = vec![0u8; 64];
    wire::encode_request(&mut frame, 0, 1000);
    s.write_all(&frame).unwrap();
    let reason = loop {
        match rx.recv_timeout(Duration::from_secs(10)).expect("the server reports the reject") {
            ServerEvent::Rejected { reason, .. } => break reason,
            _ => continue,
        }
    };
    assert!(matches!(reason, RejectReason::Wire(_)), "{reason}");
    running.stop();
}

#[test]
fn open_loop_keeps_its_schedule_and_the_requests_a_silent_server_never_answers() {
    if !uring_available("open_loop_keeps_its_schedule_and_the_requests_a_silent_server") {
        return;
    }
    // 50 warm-up requests and 50 measured ones answered, then silence; 300 due at 1000/s.
    let (addr, silent) = falls_silent_after(100);
    let mut config = bench(addr, URING, 1, 300);
    config.load = Load::Open { rate: 1000.0, spacing: Spacing::Constant };
    config.keep_samples = true;
    config.response_timeout = Duration::from_millis(300);
    let raw = run(&config);
    silent.join().unwrap();
    assert_eq!((raw.requests, raw.sent, raw.unanswered), (50, 300, 250));
    let summary = raw.latency.summary().unwrap();
    assert_eq!(summary.count, 300, "every request is in the histogram");
    assert!(summary.max >= 300_000.0, "the first unanswered waited the whole timeout");
    assert!(raw.warnings.iter().any(|w| w.contains("no response within 300ms")), "{:?}", raw);
    // Intended send times are the schedule's, 1 ms apart, whatever the answers did.
    let mut intended: Vec<u64> = raw.samples.iter().map(|s| s.intended_ns).collect();
    intended.sort_unstable();
    assert_eq!(intended.len(), 300);
    assert!(intended.windows(2).all(|w| w[1] - w[0] == 1_000_000), "constant spacing");
    assert!(raw.samples.iter().filter(|s| !s.answered).all(|s| s.service_ns.is_some()));
    assert!(raw.send_lateness.len() == 300, "each send's lateness is recorded");
}

#[test]
fn pipelined_requests_a_silent_server_never_answers_are_all_kept() {
    if !uring_available("pipelined_requests_a_silent_server_never_answers_are_all_kept") {
        return;
    }
    // Warm-up (48 requests at depth 4) and 20 measured answered, then silence.
    let (addr, silent) = falls_silent_after(68);
    let mut config = bench(addr, URING, 1, 400);
    config.warmup = StopAfter::Count(48);
    config.depth = 4;
    config.response_timeout = Duration::from_millis(300);
    let raw = run(&config);
    silent.join().unwrap();
    assert_eq!((raw.requests, raw.unanswered), (20, 4), "the whole pipeline is kept");
    assert_eq!(raw.sent, 24);
    assert_eq!(raw.latency.len(), 24);
}

#[test]
fn attribution_samples_every_request_on_io_uring() {
    if !uring_available("attribution_samples_every_request_on_io_uring") {
        return;
    }
    let running = server(URING);
    for load in [Load::Closed, Load::Open { rate: 4000.0, spacing: Spacing::Poisson }] {
        let mut config = bench(running.addr(), URING, 2, 400);
        config.attribute = true;
        config.load = load;
        let raw = run(&config);
        assert_clean(&raw, 400);
        assert_eq!(raw.attributed.len(), 400, "{load:?}: a before and after per request");
        assert!(raw.attributed.iter().all(|a| a.latency_ns > 0));
        assert!(!raw.snapshot_costs_ns.is_empty());
    }
    running.stop();
}

#[test]
fn connect_per_request_on_io_uring_times_each_connect() {
    if !uring_available("connect_per_request_on_io_uring_times_each_connect") {
        return;
    }
    for server_engine in [URING, Engine::Default] {
        let running = server(server_engine);
        let mut config = bench(running.addr(), URING, 3, 300);
        config.mode = TxMode::Crr;
        let raw = run(&config);
        assert_clean(&raw, 300);
        assert_eq!(raw.connect.len(), 300, "one connect per transaction, timed apart");
        running.stop();
    }
}

#[test]
fn a_peer_closing_mid_batch_ends_the_run_naming_its_connection() {
    if !uring_available("a_peer_closing_mid_batch_ends_the_run_naming_its_connection") {
        return;
    }
    // Eight connections on one ring; the server answers them in lockstep rounds, writing the
    // round's answers back to back, and in round 30 it closes connection 3 where its answer was
    // due, between the answers to the three before it and the four after it: the client's
    // wait typically reaps answers and the end-of-file together, and whatever it reaps first,
    // the run ends with the close, named.
    let (addr, lockstep) = lockstep_server(8, 3, 30, false);
    let mut config = bench(addr, URING, 8, 1_000_000);
    config.warmup = StopAfter::Count(8);
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || tx.send(client::run_raw(&config, &RunControl::new())).unwrap());
    // Not a speed bound: a client that missed the end-of-file would wait here for ever.
    let result = rx.recv_timeout(Duration::from_secs(60)).expect("the run ends");
    match result {
        Err(e) => {
            let message = e.to_string();
            assert!(
                message.contains("connection 3") && message.contains("server closed"),
                "{message}"
            );
        }
        Ok(raw) => panic!("the run went on past the close: {} requests", raw.requests),
    }
    let answered = lockstep.join().unwrap();
    assert_eq!(answered[3], 29, "connection 3 got 29 answers, then the close");
    assert!(answered.iter().all(|&n| n >= 29), "every other connection was answered: {answered:?}");
}

#[test]
fn a_lone_connection_on_one_cpu_is_answered_in_order_and_hears_its_peer_go() {
    if !uring_available("a_lone_connection_on_one_cpu_is_answered_in_order_and_hears_its_peer_go") {
        return;
    }
    // One connection on the client's ring, both ends on one CPU (the shape of the README's
    // one-connection comparison): every response matches its request, against either server
    // engine, and a server that closes or resets the connection while the client waits for
    // an answer ends the run, naming the connection.
    let cpu = *tcptail_bench::sys::allowed_cpus().unwrap().last().unwrap();
    for server_engine in [URING, Engine::Default] {
        let running = server(server_engine);
        let mut config = bench(running.addr(), URING, 1, 5000);
        (config.client_cpu, config.server_cpu) = (Some(cpu), Some(cpu));
        config.keep_samples = true;
        let raw = run(&config);
        assert_clean(&raw, 5000);
        assert!(raw.samples.iter().zip(0..).all(|(s, seq)| s.answered && s.seq == seq));
        running.stop();
    }
    for reset in [false, true] {
        let (addr, lockstep) = lockstep_server(1, 0, 30, reset);
        let mut config = bench(addr, URING, 1, 1_000_000);
        config.warmup = StopAfter::Count(8);
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || tx.send(client::run_raw(&config, &RunControl::new())).unwrap());
        // Not a speed bound: a client that missed the close would wait here for ever.
        let message = match rx.recv_timeout(Duration::from_secs(60)).expect("the run ends") {
            Err(e) => e.to_string(),
            Ok(raw) => panic!("the run went on past the close: {} requests", raw.requests),
        };
        let why = if reset { "reset" } else { "server closed" };
        assert!(message.contains("connection 0") && message.contains(why), "{message}");
        assert_eq!(lockstep.join().unwrap(), [29], "29 answers, then the close");
    }
}

/// A server for `connections` connections on one thread: each round it reads one request
/// from every connection, then writes every answer, except that in round `close_round`
/// (counted from 1, warm-up included) it closes connection `closer` in its turn instead of
/// answering it (with `reset`, abortively: a RST). Serves the others until the client goes
/// away; returns the answers each connection got.
fn lockstep_server(
    connections: usize,
    closer: usize,
    close_round: u64,
    reset: bool,
) -> (SocketAddr, thread::JoinHandle<Vec<u64>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let server = thread::spawn(move || {
        let mut socks: Vec<Option<(TcpStream, usize)>> = Vec::new();
        for _ in 0..connections {
            let (mut s, _) = listener.accept().unwrap();
            s.set_nodelay(true).unwrap();
            let hello = handshake(&mut s);
            socks.push(Some((s, hello.request_len as usize)));
        }
        let mut answered = vec![0u64; connections];
        for round in 1.. {
            if socks.iter().all(Option::is_none) {
                return answered;
            }
            let mut heads = Vec::with_capacity(connections);
            for sock in &mut socks {
                let Some((s, len)) = sock else {
                    heads.push(None);
                    continue;
                };
                let mut frame = vec![0u8; *len];
                if s.read_exact(&mut frame).is_err() {
                    // The client went away (the run ended): done.
                    return answered;
                }
                heads.push(Some(Header::decode(frame[..24].try_into().unwrap()).unwrap()));
            }
            for (i, head) in heads.into_iter().enumerate() {
                let Some(h) = head else { continue };
                if i == closer && round == close_round {
                    if let Some((s, _)) = socks[i].take()
                        && reset
                    {
                        socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO)).unwrap();
                    }
                    continue;
                }
                let (s, _) = socks[i].as_mut().unwrap();
                let mut resp = vec![0u8; h.reply_len as usize];
                wire::encode_response(&mut resp, h.seq);
                if s.write_all(&resp).is_err() {
                    return answered;
                }
                answered[i] += 1;
            }
        }
        answered
    });
    (addr, server)
}

/// The server's side of the handshake with a test welcome; returns the client's hello.
fn handshake(s: &mut TcpStream) -> wire::HelloConfig {
    let hello = wire::read_hello(s).unwrap();
    let welcome: Welcome = serde_json::from_value(serde_json::json!({
        "apply": {"profile": "test", "options": []},
        "congestion": null, "server_cpu": null, "requested_cpu": null, "pinned": null,
        "spin": false, "kernel": "test", "version": "test"
    }))
    .unwrap();
    wire::write_welcome(s, &welcome).unwrap();
    hello
}

/// A server that answers the first `answered` requests (warm-up included), then reads
/// without answering; returns its address and thread.
fn falls_silent_after(answered: u64) -> (SocketAddr, thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let silent = thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let hello = handshake(&mut s);
        let mut frame = vec![0u8; hello.request_len as usize];
        let mut done = 0;
        while s.read_exact(&mut frame).is_ok() {
            if done < answered {
                let h = Header::decode(frame[..24].try_into().unwrap()).unwrap();
                assert_eq!(h.kind, FrameKind::Request);
                let mut resp = vec![0u8; h.reply_len as usize];
                wire::encode_response(&mut resp, h.seq);
                s.write_all(&resp).unwrap();
                done += 1;
            }
        }
    });
    (addr, silent)
}
