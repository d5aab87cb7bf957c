//! The cost the preload hooks add to `recv` and to a connection, measured on loopback by
//! `scripts/bench-preload`, which runs this program with and without `LD_PRELOAD`.
//!
//! This program does not link the preload library; it only makes the calls the library
//! intercepts, through std (which calls libc's `socket`, `connect`, `accept4`, `recv`, `close`).
//!
//! - **ping-pong**: one thread holds both ends of a loopback TCP connection and bounces one
//!   byte: write at A, read at B, write at B, read at A. Loopback delivers during the `send`
//!   call, so no read waits for a wake-up and the loop measures system-call cost, not
//!   scheduling. Two receives per round trip, both through the hooks.
//! - **connect**: one thread connects to a loopback listener, accepts, and closes both ends;
//!   each connection is one `socket`, one `connect`, one `accept4` and two `close`s.
//!
//! With `PRELOAD_BENCH_MANUAL_REARM=1` the program re-arms QUICKACK itself after every read
//! (`tcptail_sock::recv::QuickAckStream`, what a program written against tcptail does), which
//! separates the cost of the re-arm (a `setsockopt` that also sends the pending ACK at once)
//! from the cost of doing it through the hooks.
//!
//! Prints one line: `roundtrip_ns=.. recv_per_roundtrip=2 connect_ns=..` (means over the run).
//!
//! Usage: `preload_bench [ROUNDTRIPS] [CONNECTIONS]` (defaults 200000 and 3000).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Instant;

use tcptail_sock::QuickAck;
use tcptail_sock::recv::QuickAckStream;

fn main() -> std::io::Result<()> {
    let mut args = std::env::args().skip(1);
    let roundtrips: u32 = args.next().map_or(200_000, |a| a.parse().expect("ROUNDTRIPS"));
    let connections: u32 = args.next().map_or(3_000, |a| a.parse().expect("CONNECTIONS"));

    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;

    let manual = std::env::var_os("PRELOAD_BENCH_MANUAL_REARM").is_some_and(|v| v == "1");
    let policy = if manual { QuickAck::Rearm } else { QuickAck::Off };
    let a = TcpStream::connect(addr)?;
    let (b, _) = listener.accept()?;
    a.set_nodelay(true)?;
    b.set_nodelay(true)?;
    let (mut a, mut b) = (QuickAckStream::new(a, policy), QuickAckStream::new(b, policy));
    let mut byte = [0u8; 1];
    let mut bounce = |n: u32| -> std::io::Result<()> {
        for _ in 0..n {
            a.write_all(b"p")?;
            b.read_exact(&mut byte)?;
            b.write_all(&byte)?;
            a.read_exact(&mut byte)?;
        }
        Ok(())
    };
    bounce(roundtrips / 10)?; // warm up
    let start = Instant::now();
    bounce(roundtrips)?;
    let roundtrip_ns = start.elapsed().as_nanos() as f64 / f64::from(roundtrips);

    let connect = |n: u32| -> std::io::Result<()> {
        for _ in 0..n {
            let client = TcpStream::connect(addr)?;
            let (server, _) = listener.accept()?;
            // The accepting side closes first, so TIME_WAIT stays off the client's ports.
            drop(server);
            drop(client);
        }
        Ok(())
    };
    connect(connections / 10)?; // warm up
    let start = Instant::now();
    connect(connections)?;
    let connect_ns = start.elapsed().as_nanos() as f64 / f64::from(connections);

    println!("roundtrip_ns={roundtrip_ns:.0} recv_per_roundtrip=2 connect_ns={connect_ns:.0}");
    Ok(())
}
