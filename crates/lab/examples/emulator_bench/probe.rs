//! An open-loop TCP echo probe: the client sends a 64-byte message carrying its send time
//! every `interval`, the server echoes it, and the client records each round trip. Open loop
//! (not ping-pong) so a 200 ms path yields as many samples per second as a 2 ms one.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use tcptail_netns::Netns;
use tcptail_netns::addr::SERVER_ADDR;

const MSG: usize = 64;

/// Round trips of messages sent every `interval` for `warmup + duration`; those sent during
/// `warmup` (slow start lets a long path's window grow) are dropped.
pub fn round_trips(
    client: &Netns,
    server: &Netns,
    interval: Duration,
    duration: Duration,
    warmup: Duration,
) -> Result<Vec<Duration>, String> {
    let listener = server
        .run(|| TcpListener::bind((SERVER_ADDR, 0)))
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("bind in {}: {e}", server.name()))?;
    let target = SocketAddr::from((SERVER_ADDR, listener.local_addr().unwrap().port()));
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut conn, _) = listener.accept()?;
        conn.set_nodelay(true)?;
        let mut buf = [0u8; MSG];
        loop {
            match conn.read_exact(&mut buf) {
                Ok(()) => conn.write_all(&buf)?,
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
    let base = Instant::now();
    let mut reader = stream.try_clone().map_err(|e| e.to_string())?;
    reader.set_read_timeout(Some(Duration::from_secs(5))).map_err(|e| e.to_string())?;
    let recv = std::thread::spawn(move || -> std::io::Result<Vec<(u64, Duration)>> {
        let mut rtts = Vec::with_capacity(count);
        let mut buf = [0u8; MSG];
        for _ in 0..count {
            reader.read_exact(&mut buf)?;
            let now = base.elapsed().as_nanos() as u64;
            let sent = u64::from_le_bytes(buf[..8].try_into().unwrap());
            rtts.push((sent, Duration::from_nanos(now.saturating_sub(sent))));
        }
        Ok(rtts)
    });
    let mut writer = stream;
    let mut msg = [0u8; MSG];
    for i in 0..count {
        if tcptail_netns::signal::shutdown_requested() {
            return Err("interrupted".to_owned());
        }
        let due = interval * i as u32;
        if let Some(wait) = due.checked_sub(base.elapsed()) {
            std::thread::sleep(wait);
        }
        let now = base.elapsed().as_nanos() as u64;
        msg[..8].copy_from_slice(&now.to_le_bytes());
        writer.write_all(&msg).map_err(|e| format!("send: {e}"))?;
    }
    let rtts = recv.join().unwrap().map_err(|e| format!("receive: {e}"))?;
    writer.shutdown(std::net::Shutdown::Both).ok();
    let _ = echo.join();
    Ok(rtts.into_iter().filter(|&(sent, _)| sent >= warmup_ns).map(|(_, rtt)| rtt).collect())
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
