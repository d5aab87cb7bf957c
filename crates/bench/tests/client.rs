//! The benchmark client against scripted servers on 127.0.0.1: a server that stops answering,
//! one that stops reading, one that stalls once. These are the cases where a benchmark can
//! lie by omission (coordinated omission); each test checks that the missing or late answers
//! are in the result, at the time they waited, and that latency runs from the intended send
//! time while service time runs from the actual send.

use std::io::ErrorKind;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use socket2::{Domain, Socket, Type};
use tcptail_bench::client;
use tcptail_bench::config::{BenchConfig, Load, StopAfter};
use tcptail_bench::context::ContextProbe;
use tcptail_bench::pacer::Spacing;
use tcptail_bench::run::{RawRun, RunControl};
use tcptail_bench::wire::{self, FrameKind, Welcome};
use tcptail_sock::{BufferSize, Profile, apply_profile};
use tcptail_units::ByteSize;

/// What the scripted server does once it has answered `after` requests (warm-up included).
#[derive(Debug, Clone, Copy)]
enum Script {
    /// Stops reading for `pause`, once, then answers everything as usual.
    StallOnce { after: u64, pause: Duration },
    /// Goes on reading requests but never answers again.
    Silent { after: u64 },
    /// Neither reads nor answers again: the client's socket fills up.
    Deaf { after: u64 },
}

/// A one-connection server speaking the wire protocol by hand, following a [`Script`].
struct ScriptedServer {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Option<(Instant, Instant)>>>,
}

impl ScriptedServer {
    /// `rcvbuf`: receive buffer of the listening socket (inherited on accept), so a small one
    /// closes the window after a few requests.
    fn start(script: Script, rcvbuf: Option<usize>) -> ScriptedServer {
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
        if let Some(bytes) = rcvbuf {
            socket.set_recv_buffer_size(bytes).unwrap();
        }
        socket.bind(&"127.0.0.1:0".parse::<SocketAddr>().unwrap().into()).unwrap();
        socket.listen(1).unwrap();
        let listener: TcpListener = socket.into();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = thread::spawn(move || serve(&listener, script, &flag));
        ScriptedServer { addr, stop, thread: Some(thread) }
    }

    /// Stops the server and returns when it stalled, if it did.
    fn finish(mut self) -> Option<(Instant, Instant)> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().unwrap().join().expect("scripted server panicked")
    }
}

impl Drop for ScriptedServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve(listener: &TcpListener, script: Script, stop: &AtomicBool) -> Option<(Instant, Instant)> {
    let (mut stream, _) = listener.accept().unwrap();
    stream.set_nodelay(true).unwrap();
    let hello = wire::read_hello(&mut stream).unwrap();
    let welcome = Welcome {
        apply: apply_profile(stream.as_fd(), &hello.profile),
        congestion: None,
        server_cpu: None,
        requested_cpu: None,
        pinned: None,
        spin: false,
        kernel: "scripted".into(),
        version: "test".into(),
        idle_timeout_seconds: None,
        stats_version: None,
    };
    wire::write_welcome(&mut stream, &welcome).unwrap();
    stream.set_read_timeout(Some(Duration::from_millis(50))).unwrap();
    let mut stalled = None;
    let mut answered = 0u64;
    let mut payload = Vec::new();
    let mut response = Vec::new();
    while !stop.load(Ordering::Relaxed) {
        match script {
            Script::StallOnce { after, pause } if answered == after && stalled.is_none() => {
                let from = Instant::now();
                thread::sleep(pause);
                stalled = Some((from, Instant::now()));
            }
            Script::Deaf { after } if answered >= after => {
                thread::sleep(Duration::from_millis(10));
                continue;
            }
            _ => {}
        }
        let header = match read_request(&mut stream, &mut payload) {
            Ok(Some(header)) => header,
            Ok(None) => continue,
            Err(()) => break,
        };
        if matches!(script, Script::Silent { after } if answered >= after) {
            continue;
        }
        response.resize(header.reply_len as usize, 0);
        wire::encode_response(&mut response, header.seq);
        if std::io::Write::write_all(&mut stream, &response).is_err() {
            break;
        }
        answered += 1;
    }
    stalled
}

/// One request; `Ok(None)` when the read timed out before a frame began, `Err` at the end.
fn read_request(stream: &mut TcpStream, payload: &mut Vec<u8>) -> Result<Option<wire::Header>, ()> {
    match wire::read_frame(stream, payload) {
        Ok(h) if h.kind == FrameKind::Request => Ok(Some(h)),
        Err(wire::FrameError::Io(e)) if matches!(e.kind(), ErrorKind::WouldBlock) => Ok(None),
        _ => Err(()),
    }
}

const WARMUP: u64 = 5;

fn open_loop(addr: SocketAddr, rate: f64, count: u64, profile: Profile) -> BenchConfig {
    let mut c = BenchConfig::new(addr, profile);
    c.load = Load::Open { rate, spacing: Spacing::Constant };
    c.stop = StopAfter::Count(count);
    c.warmup = StopAfter::Count(WARMUP);
    c.keep_samples = true;
    c.response_timeout = Duration::from_millis(300);
    c
}

fn small_buffers() -> Profile {
    Profile {
        name: "small-buffers".into(),
        send_buffer: Some(BufferSize::Bytes(ByteSize(4096))),
        receive_buffer: Some(BufferSize::Bytes(ByteSize(4096))),
        nodelay: Some(true),
        ..Profile::default()
    }
}

fn run(config: &BenchConfig) -> RawRun {
    client::run_raw(config, &RunControl::default()).expect("the run itself succeeds")
}

#[test]
fn open_loop_keeps_requests_a_silent_server_never_answers() {
    let server = ScriptedServer::start(Script::Silent { after: WARMUP + 50 }, None);
    let config = open_loop(server.addr, 1000.0, 300, Profile::default());
    let started = Instant::now();
    let raw = run(&config);
    server.finish();
    assert_eq!((raw.requests, raw.sent, raw.unanswered), (50, 300, 250));
    // Every request is in the histogram; the unanswered ones at the time they had waited.
    let summary = raw.latency.summary().unwrap();
    assert_eq!(summary.count, 300);
    assert!(summary.p50 > 50_000.0, "p50 {} µs hides the unanswered requests", summary.p50);
    assert!(summary.max >= 300_000.0, "the first unanswered waited the whole timeout");
    assert!(started.elapsed() < Duration::from_secs(5), "the run gave up in time");
    assert!(raw.elapsed >= Duration::from_millis(300), "elapsed {:?}", raw.elapsed);
    let unanswered: Vec<_> = raw.samples.iter().filter(|s| !s.answered).collect();
    assert_eq!(unanswered.len(), 250);
    assert!(unanswered.iter().all(|s| s.service_ns.is_some()), "all of them were sent");
    assert!(
        raw.warnings.iter().any(|w| w.contains("no response within 300ms")),
        "{:?}",
        raw.warnings
    );

    let result = client::summarise(&config, &raw, &ContextProbe::start());
    assert_eq!((result.requests, result.unanswered), (50, 250));
    let json = serde_json::to_value(&result).unwrap();
    assert_eq!(json["unanswered"], 250);
    assert_eq!(json["requests"], 50);
    let table = tcptail_bench::report::render_result(&result);
    assert!(table.contains("WARNING: 250 of 300 requests got no response"), "{table}");
    assert!(table.contains("lower bound"), "{table}");
}

#[test]
fn closed_loop_gives_up_on_a_request_after_the_timeout_and_keeps_it() {
    let server = ScriptedServer::start(Script::Silent { after: WARMUP + 20 }, None);
    let mut config = open_loop(server.addr, 1.0, 100, Profile::default());
    config.load = Load::Closed;
    let raw = run(&config);
    server.finish();
    assert_eq!((raw.requests, raw.sent, raw.unanswered), (20, 21, 1));
    let summary = raw.latency.summary().unwrap();
    assert_eq!(summary.count, 21);
    assert!(summary.max >= 300_000.0 && summary.max < 2_000_000.0, "max {} µs", summary.max);
    assert!(
        raw.warnings.iter().any(|w| w.contains("request 20 got no response")),
        "{:?}",
        raw.warnings
    );
}

#[test]
fn open_loop_charges_requests_a_full_socket_kept_from_leaving() {
    // The server stops reading: the client's socket fills after a few 2 KiB requests, and the
    // rest of the schedule can never be sent. Those requests are still due, and still count.
    let server = ScriptedServer::start(Script::Deaf { after: WARMUP + 30 }, Some(4096));
    let mut config = open_loop(server.addr, 1000.0, 500, small_buffers());
    config.request_len = 2048;
    let raw = run(&config);
    server.finish();
    assert_eq!(raw.requests, 30);
    assert!(raw.sent < 100, "{} sent: the socket should have filled long before", raw.sent);
    // The connection gave up when request 30 (sent at ~30 ms) had waited 300 ms: every
    // request due until then is accounted for, sent or not, and none after.
    let due = raw.requests + raw.unanswered;
    assert!((320..=450).contains(&due), "{due} requests accounted for");
    let mut seqs: Vec<u64> = raw.samples.iter().map(|s| s.seq).collect();
    seqs.sort_unstable();
    assert_eq!(seqs, (0..due).collect::<Vec<_>>(), "no gap in the schedule");
    let never_sent = raw.samples.iter().filter(|s| s.service_ns.is_none()).count() as u64;
    assert_eq!(never_sent, due - raw.sent);
    assert_eq!(raw.latency.len(), due);
    assert!(raw.latency.summary().unwrap().p50 > 100_000.0);
    assert!(raw.warnings.iter().any(|w| w.contains("due but never sent")), "{:?}", raw.warnings);
}

#[test]
fn latency_runs_from_the_intended_send_time_through_a_server_stall() {
    let pause = Duration::from_millis(300);
    let server =
        ScriptedServer::start(Script::StallOnce { after: WARMUP + 100, pause }, Some(4096));
    let mut config = open_loop(server.addr, 1000.0, 600, small_buffers());
    config.request_len = 2048;
    config.response_timeout = Duration::from_secs(5);
    let raw = run(&config);
    let (stall_from, stall_to) = server.finish().expect("the server stalled");
    assert_eq!((raw.requests, raw.unanswered), (600, 0));
    // The requests scheduled during the stall: the full socket kept most of them from leaving
    // until it ended, so they waited from their intended time (latency) but hardly at all
    // once actually sent (service time). Measured from the actual send, they would look fast.
    let slow: Vec<_> = raw.samples.iter().filter(|s| s.latency_ns > 50_000_000).collect();
    assert!(slow.len() >= 100, "only {} requests carry the {pause:?} stall", slow.len());
    let fast_service = slow.iter().filter(|s| s.service_ns.unwrap() * 4 < s.latency_ns).count();
    assert!(
        fast_service * 10 >= slow.len() * 8,
        "{fast_service} of {} stalled requests have a short service time",
        slow.len()
    );
    // Latency runs from the intended send and service time from the actual one, to the same
    // response: per request, latency - service is exactly how late it was sent. So over the
    // run, mean latency - mean service = mean send lateness, whatever the host's speed (the
    // stall's drain spreads over more than the stall itself on a loaded host, so the
    // completions' spread cannot tell the two timings apart). Latency timed from the actual
    // send would make the left side 0, with the stall's lateness (max over 100 ms, below) on
    // the right. The slack is the histograms' 0.1 % precision on each of the three means.
    let summary = |h: &tcptail_bench::stats::LatencyHistogram| h.summary().unwrap();
    let (latency, service) = (summary(&raw.latency), summary(&raw.service));
    let lateness = summary(&raw.send_lateness);
    assert_eq!((latency.count, service.count, lateness.count), (600, 600, 600));
    let slack = 1e-3 * (latency.mean + service.mean + lateness.mean) + 0.01;
    assert!(
        (latency.mean - service.mean - lateness.mean).abs() <= slack,
        "mean latency {:.1} us - mean service {:.1} us != mean send lateness {:.1} us",
        latency.mean,
        service.mean,
        lateness.mean
    );
    assert!(stall_to - stall_from >= pause);
    // The send lateness shows the sender held back by the full socket.
    assert!(raw.send_lateness.summary().unwrap().max > 100_000.0);
}
