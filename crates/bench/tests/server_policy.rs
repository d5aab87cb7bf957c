//! The bench server's policy over real sockets on 127.0.0.1: what a default server refuses
//! (per option, reported in the Welcome), that it stays idle between requests of a client that
//! asked to spin, the spin cap when spinning is allowed, and the per-peer connection limit.
//!
//! CPU time is read per connection thread from `/proc/self/task/<tid>/stat` (clock ticks of
//! 10 ms), so tests running in parallel in this process do not disturb the measure.

use std::collections::BTreeSet;
use std::net::TcpStream;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use tcptail_bench::server::{
    Privilege, RejectReason, RunningServer, ServerConfig, ServerEvent, ServerPolicy,
};
use tcptail_bench::wire::{self, FrameError, HelloConfig, Welcome};
use tcptail_sock::{BufferSize, OptionOutcome, Profile};
use tcptail_units::ByteSize;

mod common;
use common::{WAIT, connect_from, handshake, start};

/// The tests of this file run one at a time: the CPU measure finds "our" connection thread as
/// the one that appeared during our handshake.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(PoisonError::into_inner)
}

fn config(policy: ServerPolicy) -> ServerConfig {
    ServerConfig { policy, ..ServerConfig::new("127.0.0.1:0".parse().unwrap()) }
}

fn hello(profile: Profile) -> HelloConfig {
    HelloConfig { profile, server_cpu: None, spin: false, request_len: 64, reply_len: 64 }
}

fn round_trip(stream: &mut TcpStream, seq: u64) {
    let mut frame = vec![0u8; 64];
    wire::encode_request(&mut frame, seq, 64);
    std::io::Write::write_all(stream, &frame).unwrap();
    let mut payload = Vec::new();
    let header = wire::read_frame(stream, &mut payload).expect("a response");
    assert_eq!(header.seq, seq);
}

/// Thread ids of this process's server connection threads.
fn connection_threads() -> BTreeSet<u32> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .filter(|tid: &u32| {
            std::fs::read_to_string(format!("/proc/self/task/{tid}/comm"))
                .is_ok_and(|c| c.starts_with("tcptail-conn-"))
        })
        .collect()
}

/// utime + stime of one thread, in clock ticks (10 ms).
fn cpu_ticks(tid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
    tcptail_netns::procfs::parse_task_stat(&stat).expect("a task's stat line").cpu_ticks()
}

/// Connects with `hello`, makes a round trip, then measures the CPU time the connection's
/// server thread uses while the client waits `gap` before its next request.
fn server_cpu_between_requests(server: &RunningServer, hello: &HelloConfig, gap: Duration) -> u64 {
    // Connections are accepted one at a time and this file's tests run serially: the thread
    // that appears during our handshake is ours.
    let before = connection_threads();
    let (mut stream, _) = handshake(server.addr(), hello);
    round_trip(&mut stream, 1);
    let ours: Vec<u32> = connection_threads().difference(&before).copied().collect();
    assert_eq!(ours.len(), 1, "exactly one new connection thread: {ours:?}");
    let start = cpu_ticks(ours[0]);
    thread::sleep(gap);
    let used = cpu_ticks(ours[0]) - start;
    round_trip(&mut stream, 2);
    used
}

fn refused_options(welcome: &Welcome) -> Vec<&str> {
    let refused = welcome.apply.options.iter().filter(|o| o.outcome.is_policy_refusal());
    refused.map(|o| o.option.as_str()).collect()
}

#[test]
fn a_default_server_refuses_each_privileged_request_and_serves_the_rest() {
    let _serial = serial();
    let (server, _rx) = start(config(ServerPolicy::default()));
    let allowed = tcptail_sock::apply::allowed_congestion_controls();
    let available = tcptail_sock::apply::available_congestion_controls();
    // A congestion control that is loaded but not allowed to unprivileged processes (cubic on
    // this image), if the host has one; the default server must refuse it although, as root,
    // it could set it.
    let privileged_cc = available.iter().find(|cc| !allowed.contains(cc)).cloned();
    let asked = Profile {
        nodelay: Some(true),
        congestion: privileged_cc.clone(),
        busy_poll: Some(Duration::from_micros(50)),
        priority: Some(6),
        send_buffer: Some(BufferSize::Bytes(ByteSize(64 * 1024))),
        ..Profile::named("asks-for-everything")
    };
    let cpu = *tcptail_bench::sys::allowed_cpus().unwrap().last().unwrap();
    let greedy = HelloConfig { spin: true, server_cpu: Some(cpu), ..hello(asked) };
    let (mut stream, welcome) = handshake(server.addr(), &greedy);
    let mut expected = vec!["SO_BUSY_POLL", "SO_PRIORITY", "spin", "server CPU"];
    if privileged_cc.is_some() {
        expected.insert(0, "TCP_CONGESTION");
    }
    assert_eq!(refused_options(&welcome), expected, "\n{}", welcome.apply);
    assert!(!welcome.spin, "served blocking");
    assert_eq!((welcome.requested_cpu, welcome.pinned.as_deref()), (None, None));
    let rendered = welcome.apply.to_string();
    assert!(rendered.contains("refused: server policy"), "{rendered}");
    assert!(rendered.contains("--allow busy-poll"), "the note says how to allow it: {rendered}");
    for applied in ["TCP_NODELAY", "SO_SNDBUF"] {
        let row = welcome.apply.option(applied).unwrap();
        assert_eq!(row.outcome, OptionOutcome::Applied, "{applied}: {rendered}");
    }
    if let Some(cc) = privileged_cc {
        assert_ne!(welcome.congestion.as_deref(), Some(cc.as_str()), "{cc} was not set");
    }
    round_trip(&mut stream, 1);
}

#[test]
fn a_default_server_stays_idle_between_requests_of_a_client_that_asked_to_spin() {
    let _serial = serial();
    let gap = Duration::from_millis(1000);
    let spin = HelloConfig { spin: true, ..hello(Profile::named("spin")) };
    let (default, _rx) = start(config(ServerPolicy::default()));
    let idle = server_cpu_between_requests(&default, &spin, gap);
    // The reference, measured the same way in the same run: a server that honours spinning
    // (with a cap longer than the gap) burns its CPU time for the whole gap.
    let spin_policy = ServerPolicy {
        allow: [Privilege::Spin].into(),
        spin_cap: Duration::from_secs(30),
        ..ServerPolicy::default()
    };
    let (spinning, _rx) = start(config(spin_policy));
    let busy = server_cpu_between_requests(&spinning, &spin, gap);
    eprintln!("server thread CPU over a {gap:?} gap: default {idle} ticks, spinning {busy} ticks");
    assert!(idle <= 2, "a default server used {idle} ticks (10 ms each) while idle");
    assert!(busy >= 10 && busy > 5 * idle.max(1), "the spinning reference used only {busy} ticks");
}

#[test]
fn an_allowed_spinning_connection_sleeps_after_the_spin_cap() {
    let _serial = serial();
    let gap = Duration::from_millis(1000);
    let spin = HelloConfig { spin: true, ..hello(Profile::named("spin")) };
    let capped = ServerPolicy {
        allow: [Privilege::Spin].into(),
        spin_cap: Duration::from_millis(50),
        ..ServerPolicy::default()
    };
    let (server, _rx) = start(config(capped));
    let (_, welcome) = handshake(server.addr(), &spin);
    assert!(welcome.spin, "spinning was allowed");
    let used = server_cpu_between_requests(&server, &spin, gap);
    // 50 ms of spinning is 5 ticks; the rest of the gap is spent asleep in poll.
    assert!(used <= 15, "a capped spinning connection used {used} ticks over {gap:?}");
}

#[test]
fn a_capped_spinning_connection_still_times_out_when_idle() {
    let _serial = serial();
    let idle_timeout = Duration::from_millis(400);
    let capped = ServerPolicy {
        allow: [Privilege::Spin].into(),
        spin_cap: Duration::from_millis(100),
        ..ServerPolicy::default()
    };
    let (server, rx) = start(ServerConfig { idle_timeout, ..config(capped) });
    let (stream, welcome) =
        handshake(server.addr(), &HelloConfig { spin: true, ..hello(Profile::named("s")) });
    assert!(welcome.spin);
    let who = stream.local_addr().unwrap();
    let since = Instant::now();
    let reason = loop {
        match rx.recv_timeout(WAIT).expect("no rejection came") {
            ServerEvent::Rejected { peer, reason, .. } if peer == who => break reason,
            _ => {}
        }
    };
    let waited = since.elapsed();
    assert_eq!(reason, RejectReason::IdleTimeout(idle_timeout));
    assert!(waited >= Duration::from_millis(300) && waited < Duration::from_secs(3), "{waited:?}");
}

#[test]
fn one_peer_address_holds_at_most_its_share_of_connections() {
    let _serial = serial();
    let policy = ServerPolicy { max_per_peer: 2, ..ServerPolicy::default() };
    let (server, rx) = start(config(policy));
    let (_a, _) = handshake(server.addr(), &hello(Profile::named("p")));
    let (_b, _) = handshake(server.addr(), &hello(Profile::named("p")));
    let mut third = connect_from([127, 0, 0, 1], server.addr());
    wire::write_hello(&mut third, &hello(Profile::named("p"))).unwrap();
    match wire::read_welcome(&mut third) {
        Err(FrameError::Peer(reason)) => {
            assert!(reason.contains("127.0.0.1 already holds 2 connections"), "{reason}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let who = third.local_addr().unwrap();
    let reason = loop {
        match rx.recv_timeout(WAIT).expect("no rejection came") {
            ServerEvent::Rejected { peer, reason, .. } if peer == who => break reason,
            _ => {}
        }
    };
    assert_eq!(reason, RejectReason::TooManyFromPeer { peer: who.ip(), limit: 2 });
    // Another address is still served.
    let mut other = connect_from([127, 0, 0, 2], server.addr());
    wire::write_hello(&mut other, &hello(Profile::named("p"))).unwrap();
    wire::read_welcome(&mut other).expect("another peer is served");
    round_trip(&mut other, 1);
}
