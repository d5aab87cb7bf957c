//! The benchmark server over real sockets on 127.0.0.1: handshakes, request/response, pipelining,
//! spinning, hostile clients (each loses only its own connection), limits and shutdown.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use tcptail_bench::server::{
    HANDSHAKE_TIMEOUT, RejectReason, Server, ServerConfig, ServerEvent, ServerPolicy,
};
use tcptail_bench::wire::{
    self, FrameError, FrameKind, HEADER_LEN, Header, HelloConfig, MAGIC, MAX_FRAME_LEN, Welcome,
    WireError,
};
use tcptail_sock::Profile;

mod common;
use common::{WAIT, shutdown_promptly, start, wait_for};

fn config() -> ServerConfig {
    ServerConfig::new("127.0.0.1:0".parse().unwrap())
}

/// A server that grants every privilege: for tests of what the server does when it honours
/// spinning, pinning and any congestion control (the default refuses them; see
/// `tests/server_policy.rs`).
fn trusting() -> ServerConfig {
    ServerConfig { policy: ServerPolicy::trusting(), ..config() }
}

fn rejected_for(rx: &Receiver<ServerEvent>, who: SocketAddr) -> RejectReason {
    wait_for(rx, |e| match e {
        ServerEvent::Rejected { peer, reason, .. } if peer == who => Some(reason),
        _ => None,
    })
}

fn closed_after(rx: &Receiver<ServerEvent>, who: SocketAddr) -> u64 {
    wait_for(rx, |e| match e {
        ServerEvent::Closed { peer, requests } if peer == who => Some(requests),
        ServerEvent::Rejected { peer, reason, .. } if peer == who => {
            panic!("{peer} was rejected: {reason}")
        }
        _ => None,
    })
}

fn hello(profile: Profile) -> HelloConfig {
    HelloConfig { profile, server_cpu: None, spin: false, request_len: 64, reply_len: 64 }
}

fn profile() -> Profile {
    Profile { name: "test".into(), ..Profile::default() }
}

/// A hand-written client: no code shared with the real one beyond the wire module.
struct Client {
    stream: TcpStream,
}

impl Client {
    fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_read_timeout(Some(WAIT)).unwrap();
        stream.set_nodelay(true).unwrap();
        Client { stream }
    }

    fn addr(&self) -> SocketAddr {
        self.stream.local_addr().unwrap()
    }

    fn handshake(addr: SocketAddr, hello: &HelloConfig) -> (Client, Welcome) {
        let mut client = Client::connect(addr);
        wire::write_hello(&mut client.stream, hello).unwrap();
        let welcome = wire::read_welcome(&mut client.stream).expect("welcome");
        (client, welcome)
    }

    fn send_request(&mut self, seq: u64, frame_len: u32, reply_len: u32) {
        let mut frame = vec![0x5a; frame_len as usize];
        wire::encode_request(&mut frame, seq, reply_len);
        self.stream.write_all(&frame).unwrap();
    }

    fn response(&mut self) -> Header {
        let mut payload = Vec::new();
        let header = wire::read_frame(&mut self.stream, &mut payload).expect("a response");
        assert_eq!(header.kind, FrameKind::Response);
        assert_eq!(payload.len(), header.frame_len as usize - HEADER_LEN);
        assert!(payload.iter().all(|&b| b == 0), "response payload is not zeros");
        header
    }

    fn round_trip(&mut self, seq: u64, frame_len: u32, reply_len: u32) {
        self.send_request(seq, frame_len, reply_len);
        let header = self.response();
        assert_eq!((header.seq, header.frame_len), (seq, reply_len));
    }

    /// The connection must bring an Error frame, then end.
    fn expect_rejection(&mut self) -> String {
        let mut payload = Vec::new();
        let header = wire::read_frame(&mut self.stream, &mut payload).expect("an Error frame");
        assert_eq!(header.kind, FrameKind::Error);
        let mut rest = [0u8; 64];
        assert_eq!(self.stream.read(&mut rest).expect("a clean close"), 0, "data after Error");
        String::from_utf8(payload).expect("UTF-8 reason")
    }
}

fn raw_header(version: u8, kind: u8, frame_len: u32, reply_len: u32) -> [u8; HEADER_LEN] {
    let mut b = [0u8; HEADER_LEN];
    b[0..2].copy_from_slice(&MAGIC.to_be_bytes());
    b[2] = version;
    b[3] = kind;
    b[4..8].copy_from_slice(&frame_len.to_be_bytes());
    b[8..12].copy_from_slice(&reply_len.to_be_bytes());
    b
}

#[test]
fn applies_each_congestion_control_and_serves_varied_replies() {
    let (server, rx) = start(trusting());
    for cc in ["cubic", "bbr", "reno"] {
        let asked = Profile { congestion: Some(cc.into()), ..profile() };
        // Replies of up to 1 MiB, negotiated in the Hello.
        let hello = HelloConfig { reply_len: 1 << 20, ..hello(asked) };
        let (mut client, welcome) = Client::handshake(server.addr(), &hello);
        let row = welcome.apply.option("TCP_CONGESTION").expect("a TCP_CONGESTION row");
        assert!(welcome.apply.is_clean(), "{cc} was not applied:\n{}", welcome.apply);
        assert_eq!(row.actual.as_deref(), Some(cc));
        assert_eq!(welcome.congestion.as_deref(), Some(cc), "read back after applying");
        assert_eq!(welcome.version, env!("CARGO_PKG_VERSION"));
        assert!(!welcome.kernel.is_empty() && welcome.pinned.is_none() && !welcome.spin);
        let who = client.addr();
        let configured = wait_for(&rx, |e| match e {
            ServerEvent::Configured { peer, welcome } if peer == who => Some(welcome),
            _ => None,
        });
        assert_eq!(*configured, welcome);

        let replies = [64, 24, 100, 1500, 65536, 65537, 4000];
        for seq in 0..1000u64 {
            let reply = if seq % 100 == 99 { 1 << 20 } else { replies[seq as usize % 7] };
            client.round_trip(seq, 64, reply);
        }
        drop(client);
        assert_eq!(closed_after(&rx, who), 1000);
    }
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let (server, _rx) = start(trusting());
    for spin in [false, true] {
        let (mut client, _) = Client::handshake(
            server.addr(),
            &HelloConfig { spin, reply_len: 1000, ..hello(profile()) },
        );
        for round in 0..50u64 {
            let mut batch = Vec::new();
            for i in 0..10 {
                let mut frame = vec![0u8; 64];
                wire::encode_request(&mut frame, round * 10 + i, 24 + i as u32 * 100);
                batch.extend_from_slice(&frame);
            }
            client.stream.write_all(&batch).unwrap();
            for i in 0..10 {
                let header = client.response();
                assert_eq!((header.seq, header.frame_len), (round * 10 + i, 24 + i as u32 * 100));
            }
        }
    }
}

#[test]
fn spin_mode_serves_correctly() {
    let (server, rx) = start(trusting());
    let big =
        HelloConfig { spin: true, request_len: 1 << 20, reply_len: 1 << 20, ..hello(profile()) };
    let (mut client, welcome) = Client::handshake(server.addr(), &big);
    assert!(welcome.spin);
    for seq in 0..1000u64 {
        let (request, reply) = match seq % 4 {
            0 => (64, 64),
            1 => (1 << 20, 64),
            2 => (64, 1 << 20),
            _ => (3000, 24),
        };
        client.round_trip(seq, request, reply);
    }
    let who = client.addr();
    drop(client);
    assert_eq!(closed_after(&rx, who), 1000);
}

#[test]
fn large_requests_are_skipped_across_receives() {
    let (server, _rx) = start(config());
    let hello =
        HelloConfig { request_len: MAX_FRAME_LEN, reply_len: MAX_FRAME_LEN, ..hello(profile()) };
    let (mut client, _) = Client::handshake(server.addr(), &hello);
    client.round_trip(1, MAX_FRAME_LEN, 64);
    client.round_trip(2, 64, MAX_FRAME_LEN);
    client.round_trip(3, 24, 24);
}

/// Each hostile client gets an Error frame naming its fault and loses its connection, while a
/// well-behaved client on the same server goes on being served.
#[test]
fn malformed_frames_cost_only_their_own_connection() {
    let (server, rx) = start(config());
    let (mut good, _) = Client::handshake(server.addr(), &hello(profile()));
    let mut good_seq = 0;

    let mut request = [0u8; 64];
    wire::encode_request(&mut request, 1, 64);
    let mut hello_frame = Vec::new();
    wire::write_hello(&mut hello_frame, &hello(profile())).unwrap();
    let mut bad_magic = raw_header(1, 3, 64, 64).to_vec();
    bad_magic[0..2].copy_from_slice(b"GE");
    let mut flags = raw_header(1, 3, 64, 64);
    flags[15] = 1;

    // (bytes sent, after a valid handshake?, expected reason text)
    let cases: Vec<(Vec<u8>, bool, &str)> = vec![
        (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(), false, "bad magic 0x47 0x45"),
        (bad_magic.clone(), true, "bad magic 0x47 0x45"),
        (raw_header(9, 1, 64, 0).to_vec(), false, "unsupported protocol version 9"),
        (raw_header(9, 3, 64, 64).to_vec(), true, "unsupported protocol version 9"),
        (raw_header(1, 1, 3, 0).to_vec(), false, "frame_len 3 is shorter"),
        (raw_header(1, 3, 3, 64).to_vec(), true, "frame_len 3 is shorter"),
        (raw_header(1, 1, 1 << 30, 0).to_vec(), false, "frame_len 1073741824 exceeds"),
        (raw_header(1, 3, 1 << 30, 64).to_vec(), true, "frame_len 1073741824 exceeds"),
        (raw_header(1, 3, 64, 1 << 30).to_vec(), true, "reply_len 1073741824 exceeds"),
        (raw_header(1, 9, 64, 0).to_vec(), false, "unknown frame kind 9"),
        (raw_header(1, 9, 64, 0).to_vec(), true, "unknown frame kind 9"),
        (flags.to_vec(), true, "reserved flags 0x00000001"),
        (request.to_vec(), false, "unexpected Request frame (expected Hello)"),
        (hello_frame.clone(), true, "unexpected Hello frame (expected Request)"),
        (raw_header(1, 3, 65, 64).to_vec(), true, "65 bytes is larger than the 64 bytes promised"),
        // One 64-byte request may not buy a longer reply than the Hello negotiated (64).
        (
            raw_header(1, 3, 64, 65).to_vec(),
            true,
            "reply_len of 65 bytes, more than the 64 bytes negotiated in the Hello",
        ),
        (
            raw_header(1, 3, 64, MAX_FRAME_LEN).to_vec(),
            true,
            "reply_len of 16777216 bytes, more than the 64 bytes negotiated",
        ),
        (raw_header(1, 1, 24 + 65537, 0).to_vec(), false, "Hello payload of 65537 bytes"),
        (
            [raw_header(1, 1, 24 + 5, 0).as_slice(), b"{oops"].concat(),
            false,
            "Hello payload is not valid JSON",
        ),
    ];
    for (bytes, after_handshake, text) in cases {
        let mut bad = if after_handshake {
            Client::handshake(server.addr(), &hello(profile())).0
        } else {
            Client::connect(server.addr())
        };
        bad.stream.write_all(&bytes).unwrap();
        let reason = bad.expect_rejection();
        assert!(reason.contains(text), "expected '{text}' in the Error frame, got '{reason}'");
        let who = bad.addr();
        drop(bad);
        let event = rejected_for(&rx, who);
        assert!(event.to_string().contains(text), "event says '{event}', not '{text}'");

        for _ in 0..10 {
            good.round_trip(good_seq, 64, 64);
            good_seq += 1;
        }
    }
}

#[test]
fn a_peer_that_vanishes_mid_frame_is_a_normal_close() {
    let (server, rx) = start(config());
    // Mid-Hello.
    let mut client = Client::connect(server.addr());
    client.stream.write_all(&raw_header(1, 1, 1000, 0)).unwrap();
    client.stream.write_all(b"{\"profile\"").unwrap();
    let who = client.addr();
    drop(client);
    assert_eq!(closed_after(&rx, who), 0);
    // Mid-request, after two answered ones: half a header, then half a payload.
    let hello = HelloConfig { request_len: 1 << 20, ..hello(profile()) };
    for cut in [10, HEADER_LEN + 1000] {
        let (mut client, _) = Client::handshake(server.addr(), &hello);
        client.round_trip(1, 64, 64);
        client.round_trip(2, 64, 64);
        let mut frame = vec![0u8; 1 << 20];
        wire::encode_request(&mut frame, 3, 64);
        client.stream.write_all(&frame[..cut]).unwrap();
        let who = client.addr();
        client.stream.shutdown(Shutdown::Both).unwrap();
        drop(client);
        assert_eq!(closed_after(&rx, who), 2);
    }
}

#[test]
fn a_silent_client_is_dropped_after_the_handshake_timeout() {
    let (server, rx) = start(config());
    let started = Instant::now();
    let mut silent = Client::connect(server.addr());
    // A trickle does not extend the deadline.
    silent.stream.write_all(&raw_header(1, 1, 100, 0)[..5]).unwrap();
    let reason = silent.expect_rejection();
    let waited = started.elapsed();
    assert!(reason.contains("no complete Hello within 5s"), "{reason}");
    assert!(waited >= HANDSHAKE_TIMEOUT && waited < HANDSHAKE_TIMEOUT + Duration::from_secs(2));
    let who = silent.addr();
    drop(silent);
    assert_eq!(rejected_for(&rx, who), RejectReason::HandshakeTimeout(HANDSHAKE_TIMEOUT));
}

#[test]
fn connections_beyond_the_limit_are_refused() {
    let (server, rx) = start(ServerConfig { max_connections: 2, ..config() });
    let (mut first, _) = Client::handshake(server.addr(), &hello(profile()));
    let (second, _) = Client::handshake(server.addr(), &hello(profile()));
    let mut third = Client::connect(server.addr());
    wire::write_hello(&mut third.stream, &hello(profile())).unwrap();
    match wire::read_welcome(&mut third.stream) {
        Err(FrameError::Peer(reason)) => assert!(reason.contains("server busy: 2"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(rejected_for(&rx, third.addr()), RejectReason::TooManyConnections { limit: 2 });
    first.round_trip(1, 64, 64);
    let who = second.addr();
    drop(second);
    closed_after(&rx, who);
    let (mut fourth, _) = Client::handshake(server.addr(), &hello(profile()));
    fourth.round_trip(1, 64, 64);
}

#[test]
fn connection_threads_pin_where_asked() {
    let allowed = tcptail_bench::sys::allowed_cpus().unwrap();
    let target = *allowed.last().unwrap();
    let (server, _rx) = start(ServerConfig { cpu: Some(allowed[0]), ..trusting() });
    let asked = HelloConfig { server_cpu: Some(target), ..hello(profile()) };
    let (_, welcome) = Client::handshake(server.addr(), &asked);
    assert_eq!((welcome.requested_cpu, welcome.server_cpu), (Some(target), Some(target)));
    assert_eq!(welcome.pinned, None);
    // Without a CPU in the hello, the server's default applies.
    let (_, welcome) = Client::handshake(server.addr(), &hello(profile()));
    assert_eq!((welcome.requested_cpu, welcome.server_cpu), (Some(allowed[0]), Some(allowed[0])));
    // A CPU that does not exist is reported, not fatal.
    let asked = HelloConfig { server_cpu: Some(100_000), ..hello(profile()) };
    let (mut client, welcome) = Client::handshake(server.addr(), &asked);
    let pinned = welcome.pinned.expect("pinning to CPU 100000 must fail");
    assert!(pinned.contains("CPU 100000"), "{pinned}");
    client.round_trip(1, 64, 64);
}

#[test]
fn accepted_sockets_inherit_the_listener_profile() {
    let default = Profile { congestion: Some("reno".into()), ..profile() };
    let config = ServerConfig { default_profile: Some(default), ..config() };
    let server = Server::bind(config).unwrap();
    let report = server.listener_report().expect("a report for the listener").clone();
    assert!(report.is_clean(), "{report}");
    let running = server.spawn();
    let (_, welcome) = Client::handshake(running.addr(), &hello(profile()));
    assert_eq!(welcome.congestion.as_deref(), Some("reno"));
    running.stop();
}

#[test]
fn shutdown_returns_promptly_with_clients_connected() {
    let server = Server::bind(trusting()).unwrap();
    let addr = server.local_addr();
    let handle = server.shutdown_handle();
    let (done_tx, done_rx) = mpsc::channel();
    let (event_tx, events) = mpsc::channel();
    let runner = thread::spawn(move || {
        server.run(&|event| {
            let _ = event_tx.send(event);
        });
        done_tx.send(()).unwrap();
    });
    let (mut blocking, _) = Client::handshake(addr, &hello(profile()));
    let spin = HelloConfig { spin: true, ..hello(profile()) };
    let (mut spinning, _) = Client::handshake(addr, &spin);
    blocking.round_trip(1, 64, 64);
    spinning.round_trip(1, 64, 64);
    let mut mid_hello = Client::connect(addr);
    mid_hello.stream.write_all(&raw_header(1, 1, 100, 0)).unwrap();
    let mut mid_request = Client::handshake(addr, &hello(profile())).0;
    mid_request.stream.write_all(&raw_header(1, 3, 64, 64)).unwrap();
    // All four are connected (the server accepted each), not just queued in the backlog.
    for _ in 0..4 {
        wait_for(&events, |e| matches!(e, ServerEvent::Accepted { .. }).then_some(()));
    }

    shutdown_promptly(&handle, &done_rx, runner);
    assert!(handle.is_shut_down());
    for client in [&mut blocking, &mut spinning, &mut mid_hello, &mut mid_request] {
        let mut buf = [0u8; 64];
        assert!(matches!(client.stream.read(&mut buf), Ok(0) | Err(_)), "still open");
    }
    assert!(TcpStream::connect_timeout(&addr, Duration::from_millis(500)).is_err());
}

#[test]
fn events_tell_the_story_of_a_connection() {
    let (server, rx) = start(config());
    let (mut client, _) = Client::handshake(server.addr(), &hello(profile()));
    let who = client.addr();
    for seq in 0..3 {
        client.round_trip(seq, 64, 64);
    }
    drop(client);
    let mut seen = Vec::new();
    while seen.len() < 3 {
        let event = rx.recv_timeout(WAIT).unwrap();
        let line = event.to_string();
        assert!(line.starts_with(&who.to_string()), "{line}");
        seen.push(event);
    }
    assert!(matches!(seen[0], ServerEvent::Accepted { peer } if peer == who));
    assert!(matches!(&seen[1], ServerEvent::Configured { peer, .. } if *peer == who));
    assert_eq!(seen[2], ServerEvent::Closed { peer: who, requests: 3 });
    assert_eq!(seen[2].to_string(), format!("{who}: closed after 3 requests"));
    server.stop();
}

#[test]
fn a_welcome_is_refused_by_a_reader_expecting_one_that_gets_a_request() {
    // The client-side helper rejects anything but a Welcome or an Error.
    let mut frame = vec![0u8; 64];
    wire::encode_request(&mut frame, 1, 64);
    let err = wire::read_welcome(&mut frame.as_slice()).unwrap_err();
    assert!(matches!(
        err,
        FrameError::Wire(WireError::UnexpectedKind { found: FrameKind::Request, .. })
    ));
}

#[test]
fn a_hello_asking_for_longer_replies_than_the_server_serves_is_refused() {
    let (server, rx) = start(ServerConfig { max_reply_len: 4096, ..config() });
    let mut greedy = Client::connect(server.addr());
    wire::write_hello(&mut greedy.stream, &HelloConfig { reply_len: 4097, ..hello(profile()) })
        .unwrap();
    match wire::read_welcome(&mut greedy.stream) {
        Err(FrameError::Peer(reason)) => {
            assert!(reason.contains("reply_len 4097 exceeds this server's 4096-byte"), "{reason}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(
        rejected_for(&rx, greedy.addr()),
        RejectReason::ReplyLimit { asked: 4097, limit: 4096 }
    );
    let (mut fine, _) =
        Client::handshake(server.addr(), &HelloConfig { reply_len: 4096, ..hello(profile()) });
    fine.round_trip(1, 64, 4096);
}

/// Round trips on `good` until `rx` reports that `who` was rejected; returns the reason and
/// how many round trips `good` made meanwhile.
fn serve_good_until_rejected(
    rx: &Receiver<ServerEvent>,
    who: SocketAddr,
    good: &mut Client,
) -> (RejectReason, u64) {
    let deadline = Instant::now() + WAIT;
    let mut seq = 0;
    loop {
        good.round_trip(seq, 64, 64);
        seq += 1;
        match rx.recv_timeout(Duration::from_millis(20)) {
            Ok(ServerEvent::Rejected { peer, reason, .. }) if peer == who => return (reason, seq),
            Ok(_) | Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(e) => panic!("server events ended: {e}"),
        }
        assert!(Instant::now() < deadline, "{who} was never rejected");
    }
}

#[test]
fn an_idle_connection_is_dropped_while_others_are_served() {
    let idle_timeout = Duration::from_millis(400);
    let (server, rx) = start(ServerConfig { idle_timeout, ..trusting() });
    for spin in [false, true] {
        let (mut good, welcome) = Client::handshake(server.addr(), &hello(profile()));
        assert_eq!(welcome.idle_timeout_seconds, Some(0.4), "the Welcome tells the limit");
        let asked = HelloConfig { spin, ..hello(profile()) };
        let (mut idle, _) = Client::handshake(server.addr(), &asked);
        idle.round_trip(1, 64, 64);
        // Half a header, then silence: a trickle that stops counts as idle too.
        idle.stream.write_all(&raw_header(1, 3, 64, 64)[..10]).unwrap();
        let quiet_since = Instant::now();
        let (reason, served) = serve_good_until_rejected(&rx, idle.addr(), &mut good);
        let waited = quiet_since.elapsed();
        assert_eq!(reason, RejectReason::IdleTimeout(idle_timeout), "spin {spin}");
        assert!(waited >= idle_timeout && waited < idle_timeout + Duration::from_secs(3));
        assert!(served >= 5, "the good client was served {served} times meanwhile");
        let why = idle.expect_rejection();
        assert!(why.contains("idle: nothing received for 400ms"), "{why}");
        good.round_trip(10_000, 64, 64);
    }
}

#[test]
fn a_peer_that_never_reads_is_dropped_after_the_write_timeout() {
    let write_timeout = Duration::from_millis(500);
    let (server, rx) = start(ServerConfig { write_timeout, ..trusting() });
    for spin in [false, true] {
        let (mut good, _) = Client::handshake(server.addr(), &hello(profile()));
        let greedy = HelloConfig { spin, reply_len: 1 << 20, ..hello(profile()) };
        let (mut deaf, _) = Client::handshake(server.addr(), &greedy);
        // 64 requests for 1 MiB each, far beyond what the socket buffers hold; never read.
        for seq in 0..64 {
            deaf.send_request(seq, 64, 1 << 20);
        }
        let (reason, served) = serve_good_until_rejected(&rx, deaf.addr(), &mut good);
        assert_eq!(reason, RejectReason::WriteStalled(write_timeout), "spin {spin}");
        assert!(served >= 5, "the good client was served {served} times meanwhile");
        assert!(reason.to_string().contains("stopped reading"), "{reason}");
        good.round_trip(10_000, 64, 64);
        drop(deaf);
    }
}

impl Client {
    /// Sends a StatsRequest and reads the reply.
    fn stats(&mut self) -> wire::ServerStats {
        wire::write_stats_request(&mut self.stream).unwrap();
        wire::read_stats_reply(&mut self.stream, 0).expect("a StatsReply")
    }
}

#[test]
fn stats_cover_this_connections_window_only() {
    let (server, _rx) = start(config());
    let (mut other, _) = Client::handshake(server.addr(), &hello(profile()));
    for seq in 0..50 {
        other.round_trip(seq, 64, 64);
    }
    let asked = HelloConfig { reply_len: 1000, ..hello(profile()) };
    let (mut client, welcome) = Client::handshake(server.addr(), &asked);
    assert_eq!(welcome.stats_version, Some(wire::STATS_VERSION));
    for seq in 0..20 {
        client.round_trip(seq, 64, 64);
    }
    // The warm-up's window, then the measured part's: 100 requests, 30 of them pipelined.
    assert_eq!(client.stats().requests, 20);
    for seq in 0..70 {
        client.round_trip(seq, 64, 1000);
    }
    let mut batch = Vec::new();
    for seq in 70..100 {
        let mut frame = vec![0u8; 64];
        wire::encode_request(&mut frame, seq, 64);
        batch.extend_from_slice(&frame);
    }
    client.stream.write_all(&batch).unwrap();
    for seq in 70..100 {
        assert_eq!(client.response().seq, seq);
    }
    let s = client.stats();
    s.validate().unwrap();
    assert_eq!(s.requests, 100, "the other connection's requests are not counted");
    assert_eq!(s.service_ns.iter().map(|b| b.1).sum::<u64>(), 100);
    assert!(s.window_seconds > 0.0 && s.window_seconds < WAIT.as_secs_f64());
    // The service time is the server's own part of a round trip.
    let longest = s.service_ns.last().unwrap().0;
    assert!(longest < 1_000_000_000, "service time of {longest} ns");
    let socket = s.socket.expect("the server reads its socket's tcp_info");
    let received = socket.bytes_received.expect("tcp_info has bytes_received");
    assert!(received >= 120 * 64, "{received} bytes received");
    assert!(socket.bytes_acked.unwrap() >= 70 * 1000, "{socket:?}");
    assert!(socket.cwnd_segs > 0 && socket.rtt_us > 0, "{socket:?}");
    // A new window started with the reply; requests still work after it.
    assert_eq!(client.stats().requests, 0);
    client.round_trip(100, 64, 64);
    assert_eq!(client.stats().requests, 1);
}

#[test]
fn stats_requests_cost_the_server_bounded_work() {
    let (server, rx) = start(config());
    // A StatsRequest is a bare header: one with a payload is a protocol error.
    let (mut client, _) = Client::handshake(server.addr(), &hello(profile()));
    let mut with_payload = raw_header(1, 6, 25, 0).to_vec();
    with_payload.push(0);
    client.stream.write_all(&with_payload).unwrap();
    let reason = client.expect_rejection();
    assert!(
        reason.contains("StatsRequest payload of 1 bytes exceeds the 0-byte limit"),
        "{reason}"
    );
    // Nor may it come before the handshake.
    let mut early = Client::connect(server.addr());
    early.stream.write_all(&raw_header(1, 6, 24, 0)).unwrap();
    let reason = early.expect_rejection();
    assert!(reason.contains("unexpected StatsRequest frame (expected Hello)"), "{reason}");

    // A flood of StatsRequests: each answered with its own (empty) window, bounded in size.
    let (mut flood, _) = Client::handshake(server.addr(), &hello(profile()));
    let who = flood.addr();
    let mut requests = Vec::new();
    for _ in 0..2000 {
        wire::write_stats_request(&mut requests).unwrap();
    }
    flood.stream.write_all(&requests).unwrap();
    flood.stream.shutdown(Shutdown::Write).unwrap();
    let mut replies = Vec::new();
    flood.stream.read_to_end(&mut replies).unwrap();
    let mut rest = &replies[..];
    let mut answered = 0;
    while !rest.is_empty() {
        let s = wire::read_stats_reply(&mut rest, 0).unwrap();
        assert_eq!(s.requests, 0);
        answered += 1;
    }
    assert_eq!(answered, 2000);
    assert!(replies.len() < 2000 * 1024, "{} bytes of replies", replies.len());
    assert_eq!(closed_after(&rx, who), 0);
}
