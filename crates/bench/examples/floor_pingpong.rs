//! The floor tcptail's benchmark is compared against: the smallest TCP ping-pong that can be
//! written (fixed-size messages, TCP_NODELAY, no framing, no profile, no statistics beyond one
//! histogram). `scripts/bench-overhead` runs it beside `tcptail bench local` and sockperf.
//!
//! One connection: blocking `write_all` + `read_exact` on one thread each side, against an
//! echo thread.
//!
//! N connections x T threads (neper's `tcp_rr` client): each client thread owns its share of
//! the connections on one epoll instance and answers each readiness with one `read` (and, when
//! a whole response is in, one `write` of the next request), one clock read per wake-up as
//! `tcptail bench`'s event loop does. The server is **tcptail's own** (`tcptail_bench::server`,
//! a blocking thread per connection, as `bench local` runs it), reached with the wire
//! protocol's handshake and a 24-byte Request header on each request, so the reference and
//! `tcptail bench local --connections N --threads T` differ only in the client: what the
//! ratio measures is the client's own cost.
//!
//! Usage: `floor_pingpong CPU SERVER_CPU SECONDS [SIZE] [CONNECTIONS THREADS]`; a CPU of `-`
//! leaves that side unpinned. Prints one JSON line with p50/p99 µs and transactions per
//! second.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use tcptail_bench::server::{Server, ServerConfig, ServerPolicy};
use tcptail_bench::stats::LatencyHistogram;
use tcptail_bench::sys::{EPOLL_IN, Epoll, pin_current_thread};
use tcptail_bench::wire::{self, HelloConfig};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let usage = "usage: floor_pingpong CPU SERVER_CPU SECONDS [SIZE] [CONNECTIONS THREADS]";
    let cpu_arg = |i: usize| {
        let a = args.get(i).expect(usage);
        if a == "-" { None } else { Some(a.parse::<usize>().expect(usage)) }
    };
    let (cpu, server_cpu) = (cpu_arg(1), cpu_arg(2));
    let seconds: u64 = args.get(3).and_then(|a| a.parse().ok()).expect(usage);
    let size = args.get(4).and_then(|a| a.parse().ok()).unwrap_or(64usize);
    let connections = args.get(5).and_then(|a| a.parse().ok()).unwrap_or(1usize);
    let threads = args.get(6).and_then(|a| a.parse().ok()).unwrap_or(1usize).min(connections);

    let (hist, n, secs) = if connections == 1 {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr");
        std::thread::spawn(move || serve(listener, server_cpu, size));
        one_connection(addr, cpu, size, seconds)
    } else {
        // tcptail's server, as `bench local` starts it.
        let server = Server::bind(ServerConfig {
            max_connections: 1024,
            policy: ServerPolicy::trusting(),
            cpu: server_cpu,
            ..ServerConfig::new("127.0.0.1:0".parse().expect("literal address"))
        })
        .expect("bind the server");
        let addr = server.local_addr();
        let _running = server.spawn();
        many_connections(addr, cpu, size, seconds, connections, threads)
    };
    let s = hist.summary().expect("samples");
    println!(
        "{{\"p50\": {:.3}, \"p99\": {:.3}, \"transactions_per_second\": {:.1}, \"requests\": {n}}}",
        s.p50,
        s.p99,
        n as f64 / secs
    );
}

/// A blocking echo thread per connection.
fn serve(listener: TcpListener, cpu: Option<usize>, size: usize) {
    loop {
        let Ok((mut s, _)) = listener.accept() else { return };
        std::thread::spawn(move || {
            if let Some(cpu) = cpu {
                pin_current_thread(cpu).expect("pin server");
            }
            s.set_nodelay(true).expect("nodelay");
            let mut buf = vec![0u8; size];
            while s.read_exact(&mut buf).is_ok() {
                if s.write_all(&buf).is_err() {
                    break;
                }
            }
        });
    }
}

fn one_connection(
    addr: SocketAddr,
    cpu: Option<usize>,
    size: usize,
    seconds: u64,
) -> (LatencyHistogram, u64, f64) {
    if let Some(cpu) = cpu {
        pin_current_thread(cpu).expect("pin client");
    }
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
    let end = start + Duration::from_secs(seconds);
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
    (hist, n, start.elapsed().as_secs_f64())
}

/// T threads, each with its connections on one epoll instance.
fn many_connections(
    addr: SocketAddr,
    cpu: Option<usize>,
    size: usize,
    seconds: u64,
    connections: usize,
    threads: usize,
) -> (LatencyHistogram, u64, f64) {
    let barrier = Arc::new(Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let barrier = Arc::clone(&barrier);
            let mine = (t..connections).step_by(threads).count();
            std::thread::spawn(move || {
                if let Some(cpu) = cpu {
                    pin_current_thread(cpu).expect("pin client");
                }
                epoll_thread(addr, size, seconds, mine, &barrier)
            })
        })
        .collect();
    let mut hist = LatencyHistogram::new();
    let (mut n, mut secs) = (0, 0f64);
    for h in handles {
        let (h, count, s) = h.join().expect("client thread");
        hist.merge(&h);
        n += count;
        secs = secs.max(s);
    }
    (hist, n, secs)
}

fn epoll_thread(
    addr: SocketAddr,
    size: usize,
    seconds: u64,
    count: usize,
    barrier: &Barrier,
) -> (LatencyHistogram, u64, f64) {
    let epoll = Epoll::new().expect("epoll");
    let hello = HelloConfig {
        profile: tcptail_sock::Profile { nodelay: Some(true), ..Default::default() },
        server_cpu: None,
        spin: false,
        request_len: size as u32,
        reply_len: size as u32,
    };
    let mut conns: Vec<(TcpStream, usize, Instant)> = (0..count)
        .map(|i| {
            let mut c = TcpStream::connect(addr).expect("connect");
            c.set_nodelay(true).expect("nodelay");
            wire::write_hello(&mut c, &hello).expect("hello");
            wire::read_welcome(&mut c).expect("welcome");
            c.set_nonblocking(true).expect("nonblocking");
            epoll.add(c.as_fd(), i as u64, EPOLL_IN).expect("epoll add");
            (c, 0, Instant::now())
        })
        .collect();
    // Every request is the same frame: the server echoes no sequence the client checks.
    let mut msg = vec![0u8; size];
    wire::encode_request(&mut msg, 0, size as u32);
    let mut buf = vec![0u8; size];
    let mut hist = LatencyHistogram::new();
    let mut events = [(0u64, 0u32); 64];
    let mut run = |until: Instant, measure: bool, hist: &mut LatencyHistogram| -> u64 {
        let mut n = 0u64;
        let mut in_flight = 0;
        for (c, got, t0) in conns.iter_mut() {
            *got = 0;
            *t0 = Instant::now();
            c.write_all(&msg).expect("write");
            in_flight += 1;
        }
        while in_flight > 0 {
            let ready = epoll.wait(&mut events, Duration::from_millis(100)).expect("epoll wait");
            let now = Instant::now();
            for &(token, _) in &events[..ready] {
                let (c, got, t0) = &mut conns[token as usize];
                match c.read(&mut buf[..size - *got]) {
                    Ok(0) => panic!("server closed"),
                    Ok(k) => *got += k,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                    Err(e) => panic!("read: {e}"),
                }
                if *got < size {
                    continue;
                }
                *got = 0;
                if measure {
                    hist.record((now - *t0).as_nanos() as u64);
                }
                n += 1;
                if now < until {
                    *t0 = now;
                    c.write_all(&msg).expect("write");
                } else {
                    in_flight -= 1;
                }
            }
        }
        n
    };
    run(Instant::now() + Duration::from_millis(500), false, &mut hist);
    barrier.wait();
    let start = Instant::now();
    let n = run(start + Duration::from_secs(seconds), true, &mut hist);
    (hist, n, start.elapsed().as_secs_f64())
}
