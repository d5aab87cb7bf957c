//! An open-loop TCP echo probe: the client sends a 64-byte message carrying its send time
//! every `interval`, the server echoes it with its own receive and send times, and the client
//! records each round trip split into its legs. Open loop (not ping-pong) so a 200 ms path
//! yields as many samples per second as a 2 ms one.
//!
//! Both ends are threads of this process, so their times come from one clock: the up leg
//! (client send to server receive) holds the client's send system call, the emulator's read
//! wake-up, its release lateness, the kernel's delivery and the server thread's wake-up; the
//! down leg the same the other way; the turn is the server's own time. With `fifo`, the
//! probe's threads run `SCHED_FIFO` (below the emulator's priority), so what other work on
//! the machine does to ordinary threads' wake-ups leaves the legs: what remains is the path's.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use tcptail_netns::Netns;
use tcptail_netns::addr::SERVER_ADDR;

const MSG: usize = 64;

/// One message's round trip and its legs.
#[derive(Debug, Clone, Copy)]
pub struct Trip {
    /// Client send to client receive.
    pub rtt: Duration,
    /// Client send to server receive.
    pub up: Duration,
    /// Server send to client receive.
    pub down: Duration,
}

/// `SCHED_FIFO` priority of the probe's threads with `fifo` (the emulator's default is 10).
const PROBE_FIFO: i32 = 5;

fn tune(fifo: bool) {
    if fifo {
        // Best effort: without the privilege the probe runs as an ordinary thread.
        let _ = tcptail_netns::set_fifo_priority(PROBE_FIFO);
        let _ = tcptail_netns::set_timer_slack(1);
    }
}

/// Round trips of messages sent every `interval` for `warmup + duration`; those sent during
/// `warmup` (slow start lets a long path's window grow) are dropped.
pub fn round_trips(
    client: &Netns,
    server: &Netns,
    interval: Duration,
    duration: Duration,
    warmup: Duration,
    fifo: bool,
) -> Result<Vec<Trip>, String> {
    let listener = server
        .run(|| TcpListener::bind((SERVER_ADDR, 0)))
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("bind in {}: {e}", server.name()))?;
    let target = SocketAddr::from((SERVER_ADDR, listener.local_addr().unwrap().port()));
    let base = Instant::now();
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        tune(fifo);
        let (mut conn, _) = listener.accept()?;
        conn.set_nodelay(true)?;
        let mut buf = [0u8; MSG];
        loop {
            match conn.read_exact(&mut buf) {
                Ok(()) => {
                    let received = base.elapsed().as_nanos() as u64;
                    buf[8..16].copy_from_slice(&received.to_le_bytes());
                    let sent = base.elapsed().as_nanos() as u64;
                    buf[16..24].copy_from_slice(&sent.to_le_bytes());
                    conn.write_all(&buf)?
                }
                Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    });
    let stream = client
        .run(|| TcpStream::connect_timeout(&target, Duration::from_secs(5)))
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("connect {target} from {}: {e}", client.name()))?;
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let count = ((warmup + duration).as_nanos() / interval.as_nanos().max(1)) as usize;
    let warmup_ns = warmup.as_nanos() as u64;
    let start = base.elapsed();
    let mut reader = stream.try_clone().map_err(|e| e.to_string())?;
    reader.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
    let recv = std::thread::spawn(move || -> std::io::Result<Vec<(u64, Trip)>> {
        tune(fifo);
        let mut trips = Vec::with_capacity(count);
        let mut buf = [0u8; MSG];
        let at = |buf: &[u8], i: usize| u64::from_le_bytes(buf[i..i + 8].try_into().unwrap());
        let between = |a: u64, b: u64| Duration::from_nanos(b.saturating_sub(a));
        for _ in 0..count {
            reader.read_exact(&mut buf)?;
            let now = base.elapsed().as_nanos() as u64;
            let (sent, received, echoed) = (at(&buf, 0), at(&buf, 8), at(&buf, 16));
            trips.push((
                sent,
                Trip {
                    rtt: between(sent, now),
                    up: between(sent, received),
                    down: between(echoed, now),
                },
            ));
        }
        Ok(trips)
    });
    // The sender is a thread of its own, so its scheduling class ends with it.
    let mut writer = stream.try_clone().map_err(|e| e.to_string())?;
    let send = std::thread::spawn(move || -> Result<(), String> {
        tune(fifo);
        let mut msg = [0u8; MSG];
        for i in 0..count {
            if tcptail_netns::signal::shutdown_requested() {
                return Err("interrupted".to_owned());
            }
            let due = start + interval * i as u32;
            if let Some(wait) = due.checked_sub(base.elapsed()) {
                std::thread::sleep(wait);
            }
            let now = base.elapsed().as_nanos() as u64;
            msg[..8].copy_from_slice(&now.to_le_bytes());
            writer.write_all(&msg).map_err(|e| format!("send: {e}"))?;
        }
        Ok(())
    });
    if let Err(e) = send.join().unwrap() {
        stream.shutdown(std::net::Shutdown::Both).ok();
        let _ = recv.join();
        return Err(e);
    }
    let writer = stream;
    let rtts = recv.join().unwrap().map_err(|e| format!("receive: {e}"))?;
    writer.shutdown(std::net::Shutdown::Both).ok();
    let _ = echo.join();
    let warm = start.as_nanos() as u64 + warmup_ns;
    Ok(rtts.into_iter().filter(|&(sent, _)| sent >= warm).map(|(_, trip)| trip).collect())
}

/// The `q` quantile of `samples` (sorted in place), in milliseconds.
pub fn quantile_ms(samples: &mut [f64], q: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    samples.sort_by(f64::total_cmp);
    let i = ((samples.len() - 1) as f64 * q).round() as usize;
    samples[i]
}
