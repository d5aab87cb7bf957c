//! The wrapper's cost per send against a plain `send`, on loopback, 64-byte messages.
//!
//! `cargo run --release -p tcptail-sendq --example cost [-- ROUNDS]` prints, for every mode of
//! [`BoundedSender`], the median nanoseconds per call over rounds of 20,000 calls of a plain
//! `write` and of the wrapper's `send_all`, interleaved on the same connection, the time the
//! wrapper adds per call and the ratio wrapped/plain (medians of the per-round-pair figures),
//! and `tcp_info` reads per call, against the target of under 1 µs added per call. The bound is
//! set far above what loopback queues, so every call is admitted and the cost measured is the
//! decision, not a wait. A reader thread drains the socket. The machine's other load moves
//! both columns alike; repeat the run and take medians.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use tcptail_sendq::{BoundedSender, GovernorConfig, GovernorMode};
use tcptail_units::stats::median;

const CALLS: u32 = 20_000;

fn pair() -> (TcpStream, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    client.set_nodelay(true).unwrap();
    let (mut server, _) = listener.accept().unwrap();
    let reader = std::thread::spawn(move || {
        let mut buf = vec![0u8; 1 << 20];
        while matches!(server.read(&mut buf), Ok(n) if n > 0) {}
    });
    (client, reader)
}

/// Nanoseconds per call of one round of `CALLS` calls.
fn round(mut call: impl FnMut()) -> f64 {
    let start = Instant::now();
    for _ in 0..CALLS {
        call();
    }
    start.elapsed().as_nanos() as f64 / f64::from(CALLS)
}

/// Alternates rounds of plain writes and wrapped writes on the *same* connection, so both see
/// the same socket and reader state; returns (plain median, wrapped median, median of the
/// per-round-pair differences, median of the per-round-pair ratios, tcp_info reads per call).
fn compare(rounds: usize, config: GovernorConfig) -> (f64, f64, f64, f64, f64) {
    let msg = [7u8; 64];
    let (stream, reader) = pair();
    let mut sender = BoundedSender::new(&stream, config).unwrap();
    let (mut plain, mut wrapped) = (Vec::new(), Vec::new());
    let (mut diff, mut ratio) = (Vec::new(), Vec::new());
    for i in 0..=rounds {
        let p = round(|| (&stream).write_all(&msg).unwrap());
        let w = round(|| sender.send_all(&msg).unwrap());
        if i > 0 {
            plain.push(p);
            wrapped.push(w);
            diff.push(w - p);
            ratio.push(w / p);
        }
    }
    let stats = sender.stats();
    let reads = stats.info_reads as f64 / stats.writes as f64;
    drop(stream);
    reader.join().unwrap();
    let median = |v: &[f64]| median(v).expect("at least one round");
    (median(&plain), median(&wrapped), median(&diff), median(&ratio), reads)
}

/// The target: under 1 µs added per call.
const TARGET_ADDED_NS: f64 = 1000.0;

fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(15);
    let big = Duration::from_secs(10);
    let mut per_call = GovernorConfig::new(GovernorMode::Threshold(big));
    per_call.refresh = Duration::ZERO;
    println!("64-byte writes on loopback, median of {rounds} rounds x {CALLS} calls per mode");
    println!(
        "{:<30} {:>9} {:>9} {:>10} {:>7} {:>10}  target < {:.1} µs added",
        "mode",
        "plain ns",
        "wrap ns",
        "added µs",
        "ratio",
        "info/call",
        TARGET_ADDED_NS / 1e3
    );
    for (name, config) in [
        ("no control", GovernorConfig::new(GovernorMode::NoControl)),
        ("static LOWAT 16 KB", GovernorConfig::new(GovernorMode::StaticLowat(16_384))),
        ("threshold (cached bound)", GovernorConfig::new(GovernorMode::Threshold(big))),
        ("adaptive LOWAT (cached bound)", GovernorConfig::new(GovernorMode::AdaptiveLowat(big))),
        ("threshold, tcp_info every call", per_call),
    ] {
        let (p, w, d, r, reads) = compare(rounds, config);
        let verdict = if d < TARGET_ADDED_NS { "met" } else { "NOT met" };
        println!(
            "{name:<30} {p:>9.0} {w:>9.0} {:>10.3} {r:>7.3} {reads:>10.4}  {verdict}",
            d / 1e3
        );
    }
    // The decision alone, without the write: what the wrapper adds in CPU per call.
    let mut g = tcptail_sendq::Governor::new(GovernorConfig::new(GovernorMode::Threshold(big)));
    let epoch = Instant::now();
    let inputs = tcptail_sendq::Inputs {
        delivery_rate: Some(1 << 30),
        app_limited: Some(false),
        ..Default::default()
    };
    let per_round: Vec<f64> = (0..rounds)
        .map(|_| {
            g.observe(epoch.elapsed(), &inputs);
            round(|| {
                let now = std::hint::black_box(epoch.elapsed());
                let admission = std::hint::black_box(&mut g).admit(now, 64);
                if admission != tcptail_sendq::Admission::Admit(64) {
                    g.observe(now, &inputs);
                }
                g.on_written(64);
            })
        })
        .collect();
    let ns = median(&per_round).expect("at least one round");
    println!("cached decision alone (clock read + bound check): {ns:.1} ns/call");
}
