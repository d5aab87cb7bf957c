//! The io_uring server's ring threads over real sockets on 127.0.0.1: many connections served
//! from a few rings, and the server's behaviour kept where connections share a ring thread
//! (limits, per-peer limit, pinning, spin cap, idle and write timeouts, a peer that resets
//! mid-batch, prompt shutdown). Where the kernel has no io_uring the tests say so (SKIPPED on
//! stderr) and pass.

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use socket2::SockRef;
use tcptail_bench::client;
use tcptail_bench::config::{BenchConfig, Engine, StopAfter};
use tcptail_bench::run::RunControl;
use tcptail_bench::server::{RejectReason, Server, ServerConfig, ServerEvent, ServerPolicy};
use tcptail_bench::wire::{self, FrameError, FrameKind, HelloConfig};
use tcptail_sock::Profile;

mod common;
use common::{WAIT, connect_from, handshake, shutdown_promptly, start, uring_available, wait_for};

const URING: Engine = Engine::IoUring { sqpoll: false };

/// The tests of this file run one at a time: they count the process's ring threads.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

fn config(policy: ServerPolicy) -> ServerConfig {
    ServerConfig { policy, engine: URING, ..ServerConfig::new("127.0.0.1:0".parse().unwrap()) }
}

fn hello() -> HelloConfig {
    HelloConfig {
        profile: Profile::named("ring"),
        server_cpu: None,
        spin: false,
        request_len: 64,
        reply_len: 64,
    }
}

fn send_request(stream: &mut TcpStream, seq: u64, reply_len: u32) {
    let mut frame = vec![0u8; 64];
    wire::encode_request(&mut frame, seq, reply_len);
    stream.write_all(&frame).unwrap();
}

fn round_trip(stream: &mut TcpStream, seq: u64) {
    send_request(stream, seq, 64);
    let mut payload = Vec::new();
    let header = wire::read_frame(stream, &mut payload).expect("a response");
    assert_eq!((header.kind, header.seq, header.frame_len), (FrameKind::Response, seq, 64));
}

/// The connection must bring an Error frame, then end; returns its text.
fn expect_rejection(stream: &mut TcpStream) -> String {
    let mut payload = Vec::new();
    // Responses owed before the rejection may come first.
    loop {
        let header = wire::read_frame(stream, &mut payload).expect("an Error frame");
        if header.kind == FrameKind::Error {
            break;
        }
    }
    let mut rest = [0u8; 64];
    assert!(matches!(stream.read(&mut rest), Ok(0) | Err(_)), "data after the Error frame");
    String::from_utf8(payload).expect("UTF-8 reason")
}

fn ended(rx: &Receiver<ServerEvent>, who: SocketAddr) -> ServerEvent {
    wait_for(rx, |e| match &e {
        ServerEvent::Closed { peer, .. } | ServerEvent::Rejected { peer, .. } if *peer == who => {
            Some(e)
        }
        _ => None,
    })
}

/// Thread ids of this process's ring threads.
fn ring_threads() -> BTreeSet<u32> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|tid: &u32| {
            std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
                .is_ok_and(|c| c.starts_with("tcptail-ring-"))
        })
        .collect()
}

/// utime + stime of one thread, in clock ticks (10 ms).
fn cpu_ticks(tid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
    tcptail_netns::procfs::parse_task_stat(&stat).expect("a task's stat line").cpu_ticks()
}

fn bench(addr: SocketAddr, connections: usize, threads: usize, count: u64) -> BenchConfig {
    let mut config = BenchConfig::new(addr, Profile::default());
    config.connections = connections;
    config.threads = threads;
    config.stop = StopAfter::Count(count);
    // One warm-up request per connection.
    config.warmup = StopAfter::Count(connections as u64);
    config
}

#[test]
fn many_connections_are_served_by_a_ring_thread_per_cpu_at_most() {
    let _serial = serial();
    if !uring_available("many_connections_are_served_by_a_ring_thread_per_cpu_at_most") {
        return;
    }
    let before = ring_threads();
    let (server, rx) = start(ServerConfig {
        max_connections: 100,
        ..config(ServerPolicy { max_per_peer: 100, ..ServerPolicy::default() })
    });
    for engine in [Engine::Default, URING] {
        let mut config = bench(server.addr(), 48, 4, 4800);
        config.engine = engine;
        let raw = client::run_raw(&config, &RunControl::new()).expect("the run succeeds");
        assert_eq!((raw.requests, raw.sent, raw.unanswered), (4800, 4800, 0), "{engine:?}");
        assert!(raw.warnings.is_empty(), "{:?}", raw.warnings);
    }
    let lanes = thread::available_parallelism().map_or(1, usize::from);
    let rings = ring_threads().difference(&before).count();
    assert!((1..=lanes).contains(&rings), "{rings} ring threads for 96 connections, {lanes} CPUs");
    // Every connection ended as a close, with its requests counted.
    let mut answered = 0;
    for _ in 0..96 {
        answered += wait_for(&rx, |e| match e {
            ServerEvent::Closed { requests, .. } => Some(requests),
            ServerEvent::Rejected { peer, reason, .. } => panic!("{peer} rejected: {reason}"),
            _ => None,
        });
    }
    // Two runs' warm-up and measured requests (the stats requests are not counted).
    assert_eq!(answered, 2 * (48 + 4800));
    server.stop();
    assert!(ring_threads().difference(&before).next().is_none(), "ring threads left after stop");
}

#[test]
fn a_peer_resetting_mid_batch_costs_only_its_own_connection() {
    let _serial = serial();
    if !uring_available("a_peer_resetting_mid_batch_costs_only_its_own_connection") {
        return;
    }
    // One pinned ring thread for everyone, so the reset lands on the ring serving the others.
    let cpu = tcptail_bench::sys::allowed_cpus().unwrap()[0];
    let (server, rx) = start(ServerConfig { cpu: Some(cpu), ..config(ServerPolicy::trusting()) });
    let addr = server.addr();
    let others = thread::spawn(move || {
        let mut config = bench(addr, 8, 2, 20_000);
        config.engine = URING;
        client::run_raw(&config, &RunControl::new()).expect("the others' run succeeds")
    });
    for round in 0..5 {
        let greedy = HelloConfig { reply_len: 1 << 20, ..hello() };
        let (mut peer, _) = handshake(addr, &greedy);
        round_trip(&mut peer, 0);
        // A batch of requests for long responses, then a reset while they are being sent.
        for seq in 1..=32 {
            send_request(&mut peer, seq, if seq % 2 == 0 { 1 << 20 } else { 64 });
        }
        let mut some = [0u8; 4096];
        peer.read_exact(&mut some).unwrap();
        SockRef::from(&peer).set_linger(Some(Duration::ZERO)).unwrap();
        let who = peer.local_addr().unwrap();
        drop(peer);
        match ended(&rx, who) {
            ServerEvent::Closed { requests, .. } => {
                assert!((1..=33).contains(&requests), "round {round}: {requests} requests")
            }
            other => panic!("round {round}: a reset peer is a close, not {other}"),
        }
    }
    let raw = others.join().unwrap();
    assert_eq!((raw.requests, raw.unanswered), (20_000, 0));
    assert!(raw.warnings.is_empty(), "{:?}", raw.warnings);
}

#[test]
fn connections_beyond_the_limits_are_refused_and_places_are_reused() {
    let _serial = serial();
    if !uring_available("connections_beyond_the_limits_are_refused_and_places_are_reused") {
        return;
    }
    let policy = ServerPolicy { max_per_peer: 2, ..ServerPolicy::default() };
    let (server, rx) = start(ServerConfig { max_connections: 3, ..config(policy) });
    let (mut a, _) = handshake(server.addr(), &hello());
    let (b, _) = handshake(server.addr(), &hello());
    let mut third = connect_from([127, 0, 0, 1], server.addr());
    wire::write_hello(&mut third, &hello()).unwrap();
    match wire::read_welcome(&mut third) {
        Err(FrameError::Peer(reason)) => {
            assert!(reason.contains("127.0.0.1 already holds 2 connections"), "{reason}")
        }
        other => panic!("expected a per-peer refusal, got {other:?}"),
    }
    let (mut c, _) = {
        let mut s = connect_from([127, 0, 0, 2], server.addr());
        wire::write_hello(&mut s, &hello()).unwrap();
        let welcome = wire::read_welcome(&mut s).expect("another peer is served");
        (s, welcome)
    };
    let mut fourth = connect_from([127, 0, 0, 3], server.addr());
    wire::write_hello(&mut fourth, &hello()).unwrap();
    match wire::read_welcome(&mut fourth) {
        Err(FrameError::Peer(reason)) => assert!(reason.contains("server busy: 3"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    round_trip(&mut a, 1);
    round_trip(&mut c, 1);
    // A place freed on the ring is taken by the next connection, many times over.
    let who = b.local_addr().unwrap();
    drop(b);
    assert!(matches!(ended(&rx, who), ServerEvent::Closed { .. }));
    for seq in 0..20 {
        let (mut next, _) = handshake(server.addr(), &hello());
        round_trip(&mut next, seq);
        round_trip(&mut a, seq + 100);
        let who = next.local_addr().unwrap();
        drop(next);
        assert_eq!(ended(&rx, who), ServerEvent::Closed { peer: who, requests: 1 });
    }
    round_trip(&mut c, 2);
}

#[test]
fn the_ring_thread_is_pinned_where_asked_and_says_so() {
    let _serial = serial();
    if !uring_available("the_ring_thread_is_pinned_where_asked_and_says_so") {
        return;
    }
    let allowed = tcptail_bench::sys::allowed_cpus().unwrap();
    let target = *allowed.last().unwrap();
    let (server, _rx) =
        start(ServerConfig { cpu: Some(allowed[0]), ..config(ServerPolicy::trusting()) });
    let asked = HelloConfig { server_cpu: Some(target), ..hello() };
    let (mut one, welcome) = handshake(server.addr(), &asked);
    assert_eq!(
        (welcome.requested_cpu, welcome.server_cpu, welcome.pinned),
        (Some(target), Some(target), None)
    );
    let (mut two, welcome) = handshake(server.addr(), &hello());
    assert_eq!((welcome.requested_cpu, welcome.server_cpu), (Some(allowed[0]), Some(allowed[0])));
    let asked = HelloConfig { server_cpu: Some(100_000), ..hello() };
    let (mut three, welcome) = handshake(server.addr(), &asked);
    let pinned = welcome.pinned.expect("pinning to CPU 100000 must fail");
    assert!(pinned.contains("CPU 100000"), "{pinned}");
    for seq in 0..3 {
        round_trip(&mut one, seq);
        round_trip(&mut two, seq);
        round_trip(&mut three, seq);
    }
}

#[test]
fn idle_and_deaf_connections_are_dropped_while_their_ring_serves_others() {
    let _serial = serial();
    if !uring_available("idle_and_deaf_connections_are_dropped_while_their_ring_serves_others") {
        return;
    }
    // A deaf peer also waits for nothing while its responses stall: it must stall for its
    // write timeout before it counts as idle.
    let idle_timeout = Duration::from_millis(600);
    let write_timeout = Duration::from_millis(300);
    let cpu = tcptail_bench::sys::allowed_cpus().unwrap()[0];
    let (server, rx) = start(ServerConfig {
        cpu: Some(cpu),
        idle_timeout,
        write_timeout,
        ..config(ServerPolicy::trusting())
    });
    for spin in [false, true] {
        let asked = HelloConfig { spin, ..hello() };
        let (mut good, _) = handshake(server.addr(), &asked);
        let (mut idle, _) = handshake(server.addr(), &asked);
        let greedy = HelloConfig { reply_len: 1 << 20, ..asked.clone() };
        let (deaf, _) = handshake(server.addr(), &greedy);
        round_trip(&mut idle, 1);
        let mut deaf_writer = deaf.try_clone().unwrap();
        for seq in 0..64 {
            send_request(&mut deaf_writer, seq, 1 << 20);
        }
        let quiet_since = Instant::now();
        let (idle_at, deaf_at) = (idle.local_addr().unwrap(), deaf.local_addr().unwrap());
        let (mut idle_reason, mut deaf_reason) = (None, None);
        let mut seq = 0;
        while idle_reason.is_none() || deaf_reason.is_none() {
            round_trip(&mut good, seq);
            seq += 1;
            match rx.recv_timeout(Duration::from_millis(20)) {
                Ok(ServerEvent::Rejected { peer, reason, .. }) if peer == idle_at => {
                    idle_reason = Some((reason, quiet_since.elapsed()))
                }
                Ok(ServerEvent::Rejected { peer, reason, .. }) if peer == deaf_at => {
                    deaf_reason = Some(reason)
                }
                Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(e) => panic!("server events ended: {e}"),
            }
            assert!(quiet_since.elapsed() < WAIT, "spin {spin}: not dropped in time");
        }
        let (reason, waited) = idle_reason.unwrap();
        assert_eq!(reason, RejectReason::IdleTimeout(idle_timeout), "spin {spin}");
        assert!(waited >= idle_timeout && waited < idle_timeout + Duration::from_secs(3));
        assert_eq!(deaf_reason.unwrap(), RejectReason::WriteStalled(write_timeout), "spin {spin}");
        assert!(seq >= 5, "spin {spin}: the good connection was served {seq} times meanwhile");
        let why = expect_rejection(&mut idle);
        assert!(why.contains("idle: nothing received for 600ms"), "{why}");
        round_trip(&mut good, 10_000);
    }
}

#[test]
fn a_spinning_ring_thread_sleeps_after_the_spin_cap() {
    let _serial = serial();
    if !uring_available("a_spinning_ring_thread_sleeps_after_the_spin_cap") {
        return;
    }
    let policy = ServerPolicy { spin_cap: Duration::from_millis(50), ..ServerPolicy::trusting() };
    let (server, _rx) = start(config(policy));
    let before = ring_threads();
    let (mut stream, welcome) = handshake(server.addr(), &HelloConfig { spin: true, ..hello() });
    assert!(welcome.spin, "the trusting policy lets it spin");
    round_trip(&mut stream, 1);
    let ours: Vec<u32> = ring_threads().difference(&before).copied().collect();
    assert_eq!(ours.len(), 1, "one new ring thread: {ours:?}");
    thread::sleep(Duration::from_millis(200));
    let start = cpu_ticks(ours[0]);
    thread::sleep(Duration::from_millis(500));
    let used = cpu_ticks(ours[0]) - start;
    // Spinning all the time would be ~50 ticks; asleep, none or one.
    assert!(used <= 5, "the ring thread used {used} ticks in 0.5 s after the spin cap");
    round_trip(&mut stream, 2);
}

#[test]
fn shutdown_returns_promptly_with_connections_on_ring_threads() {
    let _serial = serial();
    if !uring_available("shutdown_returns_promptly_with_connections_on_ring_threads") {
        return;
    }
    let before = ring_threads();
    let server = Server::bind(config(ServerPolicy::trusting())).unwrap();
    let addr = server.local_addr();
    let handle = server.shutdown_handle();
    let (done_tx, done_rx) = mpsc::channel();
    let runner = thread::spawn(move || {
        server.run(&|_| {});
        done_tx.send(()).unwrap();
    });
    let (mut blocking, _) = handshake(addr, &hello());
    let (mut spinning, _) = handshake(addr, &HelloConfig { spin: true, ..hello() });
    round_trip(&mut blocking, 1);
    round_trip(&mut spinning, 1);
    let (mut mid_request, _) = handshake(addr, &hello());
    mid_request.write_all(&[b'T'; 10]).unwrap();
    shutdown_promptly(&handle, &done_rx, runner);
    for stream in [&mut blocking, &mut spinning, &mut mid_request] {
        let mut buf = [0u8; 64];
        assert!(matches!(stream.read(&mut buf), Ok(0) | Err(_)), "still open");
    }
    assert!(ring_threads().difference(&before).next().is_none(), "ring threads left after run");
}

/// Requests `count` responses of `reply_len` bytes back to back, then reads them in order.
fn pipelined(stream: &mut TcpStream, first: u64, count: u64, reply_len: u32) {
    for seq in first..first + count {
        send_request(stream, seq, reply_len);
    }
    let mut payload = Vec::new();
    for seq in first..first + count {
        let header = wire::read_frame(stream, &mut payload).expect("a response");
        assert_eq!((header.kind, header.seq), (FrameKind::Response, seq));
        assert_eq!(header.frame_len, reply_len);
    }
}

/// What a connection alone on its ring asks for: round trips, a pipelined batch, responses
/// that fill the send slot and ones that need several sends, and a StatsReply in between.
fn exchange_alone(stream: &mut TcpStream, first: u64) {
    for seq in first..first + 50 {
        round_trip(stream, seq);
    }
    pipelined(stream, first + 50, 16, 64);
    pipelined(stream, first + 100, 4, 64 * 1024);
    pipelined(stream, first + 200, 2, 1 << 20);
    wire::write_stats_request(stream).unwrap();
    let stats = wire::read_stats_reply(stream, 0).expect("a StatsReply");
    assert!(stats.requests >= 72, "{} requests in the window", stats.requests);
    round_trip(stream, first + 300);
}

#[test]
fn a_connection_alone_on_its_ring_is_served_like_one_among_many() {
    let _serial = serial();
    if !uring_available("a_connection_alone_on_its_ring_is_served_like_one_among_many") {
        return;
    }
    // One pinned ring thread, serving a connection alone, then beside a second one, then
    // alone again: every response comes whole and in order throughout, and a connection alone
    // on its ring keeps the server's limits: a peer that stops reading is cut at the write
    // timeout, one that resets mid-batch is a close, and the ring serves the next one.
    let write_timeout = Duration::from_millis(300);
    let cpu = tcptail_bench::sys::allowed_cpus().unwrap()[0];
    let (server, rx) =
        start(ServerConfig { cpu: Some(cpu), write_timeout, ..config(ServerPolicy::trusting()) });
    let greedy = HelloConfig { reply_len: 1 << 20, ..hello() };
    let (mut a, _) = handshake(server.addr(), &greedy);
    exchange_alone(&mut a, 0);
    let (mut b, _) = handshake(server.addr(), &greedy);
    for seq in 1000..1050 {
        round_trip(&mut a, seq);
        round_trip(&mut b, seq);
    }
    pipelined(&mut b, 2000, 8, 64 * 1024);
    let b_at = b.local_addr().unwrap();
    drop(b);
    assert!(matches!(ended(&rx, b_at), ServerEvent::Closed { requests: 58, .. }));
    exchange_alone(&mut a, 3000);

    // Alone and deaf: responses that fill the slot, never read, stall the send.
    let stalled = Instant::now();
    for seq in 0..400 {
        send_request(&mut a, seq, 64 * 1024);
    }
    let a_at = a.local_addr().unwrap();
    match ended(&rx, a_at) {
        ServerEvent::Rejected { reason, .. } => {
            assert_eq!(reason, RejectReason::WriteStalled(write_timeout))
        }
        other => panic!("a deaf peer alone on its ring is cut, not {other}"),
    }
    assert!(stalled.elapsed() >= write_timeout);

    // Alone and reset while a batch is being answered.
    let (mut c, _) = handshake(server.addr(), &greedy);
    round_trip(&mut c, 0);
    for seq in 1..=32 {
        send_request(&mut c, seq, 64 * 1024);
    }
    let mut some = [0u8; 4096];
    c.read_exact(&mut some).unwrap();
    SockRef::from(&c).set_linger(Some(Duration::ZERO)).unwrap();
    let c_at = c.local_addr().unwrap();
    drop(c);
    match ended(&rx, c_at) {
        ServerEvent::Closed { requests, .. } => assert!((1..=33).contains(&requests), "{requests}"),
        other => panic!("a reset peer is a close, not {other}"),
    }
    let (mut d, _) = handshake(server.addr(), &greedy);
    exchange_alone(&mut d, 0);
    server.stop();
}
