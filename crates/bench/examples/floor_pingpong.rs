//! The floor tcptail's benchmark is compared against: the smallest blocking TCP ping-pong that
//! can be written (fixed-size messages, TCP_NODELAY, `write_all` + `read_exact`, no framing,
//! no profile, no statistics beyond one histogram). `scripts/bench-overhead` runs it beside
//! `tcptail bench local` and sockperf.
//!
//! Usage: `floor_pingpong CPU SERVER_CPU SECONDS [SIZE]`; prints one JSON line with p50/p99 µs
//! and transactions per second.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use tcptail_bench::stats::LatencyHistogram;
use tcptail_bench::sys::pin_current_thread;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: floor_pingpong CPU SERVER_CPU SECONDS [SIZE]";
    let arg = |i: usize| args.get(i).and_then(|a| a.parse::<usize>().ok()).expect(usage);
    let (cpu, server_cpu, seconds) = (arg(1), arg(2), arg(3));
    let size = args.get(4).and_then(|a| a.parse().ok()).unwrap_or(64usize);

    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    std::thread::spawn(move || {
        pin_current_thread(server_cpu).expect("pin server");
        let (mut s, _) = listener.accept().expect("accept");
        s.set_nodelay(true).expect("nodelay");
        let mut buf = vec![0u8; size];
        while s.read_exact(&mut buf).is_ok() {
            if s.write_all(&buf).is_err() {
                break;
            }
        }
    });
    pin_current_thread(cpu).expect("pin client");
    let mut c = TcpStream::connect(addr).expect("connect");
    c.set_nodelay(true).expect("nodelay");
    let mut buf = vec![0u8; size];
    let warm_end = Instant::now() + Duration::from_millis(500);
    while Instant::now() < warm_end {
        c.write_all(&buf).expect("write");
        c.read_exact(&mut buf).expect("read");
    }
    let mut hist = LatencyHistogram::new();
    let start = Instant::now();
    let end = start + Duration::from_secs(seconds as u64);
    let mut n = 0u64;
    loop {
        let t0 = Instant::now();
        if t0 >= end {
            break;
        }
        c.write_all(&buf).expect("write");
        c.read_exact(&mut buf).expect("read");
        hist.record((Instant::now() - t0).as_nanos() as u64);
        n += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    let s = hist.summary().expect("samples");
    println!(
        "{{\"p50\": {:.3}, \"p99\": {:.3}, \"transactions_per_second\": {:.1}, \"requests\": {n}}}",
        s.p50,
        s.p99,
        n as f64 / secs
    );
}
