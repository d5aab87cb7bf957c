//! What one `TCP_INFO` / `TCP_CC_INFO` read costs on a loopback socket: the median (and p90,
//! p99) nanoseconds per call over 100,000 calls of each.
//!
//! `cargo run --release -p tcptail-sock --example info_cost [calls]`
//!
//! Each call is timed on its own with `Instant`; the timer's own cost (two `Instant::now()`
//! back to back) is measured the same way and printed so it can be subtracted. The socket is a
//! BBR connection to 127.0.0.1 that has carried 4 MiB, so the kernel fills every field.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::Instant;

use tcptail_sock::cc_info;
use tcptail_sock::tcp_info;

fn main() -> std::io::Result<()> {
    let calls: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(100_000);
    let (client, _server) = connected_pair()?;
    let fd = client.as_fd();

    let timer = measure(calls, || {});
    let mut buf = [0u8; tcp_info::TcpInfo::KNOWN_LEN];
    let raw = measure(calls, || {
        std::hint::black_box(tcp_info::tcp_info_raw(fd, &mut buf).unwrap());
    });
    let parsed = measure(calls, || {
        std::hint::black_box(tcp_info::tcp_info(fd).unwrap());
    });
    let bbr = measure(calls, || {
        std::hint::black_box(cc_info::bbr_info(fd).unwrap());
    });
    let parse_only = measure(calls, || {
        std::hint::black_box(tcp_info::TcpInfo::parse(std::hint::black_box(&buf)).unwrap());
    });

    println!("{calls} calls each, ns per call (median / p90 / p99):");
    for (name, ns) in [
        ("timer overhead (Instant pair)", timer),
        ("tcp_info_raw (getsockopt only)", raw),
        ("tcp_info (getsockopt + parse)", parsed),
        ("bbr_info (getsockopt + parse)", bbr),
        ("TcpInfo::parse alone", parse_only),
    ] {
        println!("  {name:32} {:>6} / {:>6} / {:>6}", ns[0], ns[1], ns[2]);
    }
    println!("bbr phase: {:?}", cc_info::bbr_info(fd)?.map(|b| b.phase()));
    Ok(())
}

/// Times `calls` runs of `f` one by one; returns the median, p90 and p99 in nanoseconds.
fn measure(calls: usize, mut f: impl FnMut()) -> [u128; 3] {
    for _ in 0..calls / 10 {
        f(); // warm up caches and the branch predictor
    }
    let mut ns: Vec<u128> = (0..calls)
        .map(|_| {
            let start = Instant::now();
            f();
            start.elapsed().as_nanos()
        })
        .collect();
    ns.sort_unstable();
    let at = |q: f64| ns[((ns.len() - 1) as f64 * q) as usize];
    [at(0.5), at(0.9), at(0.99)]
}

/// A BBR connection on 127.0.0.1 that has carried 4 MiB, so every field is live.
fn connected_pair() -> std::io::Result<(TcpStream, TcpStream)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    socket.set_tcp_congestion(b"bbr")?;
    socket.connect(&listener.local_addr()?.into())?;
    let (mut server, _) = listener.accept()?;
    let mut client: TcpStream = socket.into();
    const TOTAL: usize = 4 << 20;
    let reader = std::thread::spawn(move || -> std::io::Result<TcpStream> {
        let mut buf = vec![0u8; 1 << 16];
        let mut seen = 0;
        while seen < TOTAL {
            match server.read(&mut buf)? {
                0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                n => seen += n,
            }
        }
        Ok(server)
    });
    client.write_all(&vec![0u8; TOTAL])?;
    let server = reader.join().expect("reader thread")?;
    Ok((client, server))
}
