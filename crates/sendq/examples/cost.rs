//! The wrapper's cost per send against a plain `send`, on loopback, 64-byte messages.
//!
//! `cargo run --release -p tcptail-sendq --example cost [-- ROUNDS]` prints the median
//! nanoseconds per call over rounds of 20,000 calls for a plain `write`, and for
//! [`BoundedSender`] in each mode (the bound set far above what loopback reaches, so every call
//! is admitted and the cost measured is the decision, not a wait). A reader thread drains the
//! socket.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use tcptail_sendq::{BoundedSender, GovernorConfig, Mode};

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

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
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
/// per-round-pair differences, tcp_info reads per call).
fn compare(rounds: usize, config: GovernorConfig) -> (f64, f64, f64, f64) {
    let msg = [7u8; 64];
    let (stream, reader) = pair();
    let mut sender = BoundedSender::new(&stream, config).unwrap();
    let (mut plain, mut wrapped, mut diff) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..=rounds {
        let p = round(|| (&stream).write_all(&msg).unwrap());
        let w = round(|| sender.send_all(&msg).unwrap());
        if i > 0 {
            plain.push(p);
            wrapped.push(w);
            diff.push(w - p);
        }
    }
    let stats = sender.stats();
    let reads = stats.info_reads as f64 / stats.writes as f64;
    drop(stream);
    reader.join().unwrap();
    (median(plain), median(wrapped), median(diff), reads)
}

fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(15);
    let big = Duration::from_secs(10);
    let mut per_call = GovernorConfig::new(Mode::Threshold(big));
    per_call.refresh = Duration::ZERO;
    println!("64-byte writes on loopback, median of {rounds} rounds x {CALLS} calls");
    println!(
        "{:<28} {:>9} {:>9} {:>9} {:>12}",
        "mode", "plain ns", "wrap ns", "added ns", "info/call"
    );
    for (name, config) in [
        ("no control", GovernorConfig::new(Mode::NoControl)),
        ("threshold 10 s (cached)", GovernorConfig::new(Mode::Threshold(big))),
        ("threshold, tcp_info/call", per_call),
        ("adaptive LOWAT", GovernorConfig::new(Mode::AdaptiveLowat(big))),
        ("static LOWAT 16 KB", GovernorConfig::new(Mode::StaticLowat(16_384))),
    ] {
        let (p, w, d, reads) = compare(rounds, config);
        println!("{name:<28} {p:>9.0} {w:>9.0} {d:>9.0} {reads:>12.4}");
    }
    // The decision alone, without the write: what the wrapper adds in CPU per call.
    let mut g = tcptail_sendq::Governor::new(GovernorConfig::new(Mode::Threshold(big)));
    g.observe(
        Duration::ZERO,
        &tcptail_sendq::Inputs {
            delivery_rate: Some(1 << 30),
            app_limited: Some(false),
            ..Default::default()
        },
    );
    let epoch = Instant::now();
    let ns = median(
        (0..rounds)
            .map(|_| {
                round(|| {
                    let now = epoch.elapsed();
                    assert!(
                        std::hint::black_box(&g)
                            .admit_cached(std::hint::black_box(now).min(Duration::from_millis(1)))
                    );
                    g.on_written(64);
                })
            })
            .collect(),
    );
    println!("cached decision alone (clock read + bound check): {ns:.1} ns/call");
}
