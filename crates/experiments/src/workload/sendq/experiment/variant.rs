//! One variant of the experiment: a fresh connection from the client namespace, the paced
//! chunk sender on this thread, the timestamping receiver on another.

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use socket2::{Domain, Protocol, Socket, Type};
use tcptail_lab::LivePath;
use tcptail_netns::addr::SERVER_ADDR;
use tcptail_units::stats::percentile_of_sorted;

use super::{Control, ExperimentError, SendqConfig, Variant, io_err};
use tcptail_sendq::freshness::{FreshnessPolicy, FreshnessQueue};
use tcptail_sendq::governor::{GovernorConfig, GovernorMode};
use tcptail_sendq::sender::{BoundedSender, SenderStats};

/// Bytes of the header at the start of every chunk: magic, sequence number, scheduled time
/// and send-start time (ns since the run's epoch), reserved.
pub(crate) const HEADER_BYTES: usize = 32;
const MAGIC: u32 = 0x5e4d_0001;
/// The first chunk is scheduled this long after the connection is up.
const LEAD: Duration = Duration::from_millis(20);

/// One delivered chunk; times in ms since the run's epoch.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ChunkRecord {
    /// Sequence number (chunk index in the schedule).
    pub seq: u32,
    /// When it was due.
    pub scheduled_ms: f64,
    /// When the application handed it to the send path: the start of its `send_all` (before
    /// any wait of the wrapper or the kernel), or, with freshness on, its scheduled time (the
    /// freshness queue in front of the socket is part of the send path).
    pub start_ms: f64,
    /// When its last byte was read by the receiver.
    pub complete_ms: f64,
}

/// Nearest-rank percentiles of a sample of chunk latencies (or of RTTs), ms; NaN (JSON null)
/// for an empty sample.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct ChunkLatency {
    /// Samples.
    pub count: usize,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Maximum.
    pub max: f64,
}

impl ChunkLatency {
    /// Nearest-rank percentiles of `samples` (sorted here; NaN left out).
    pub fn of(samples: &[f64]) -> ChunkLatency {
        let mut s: Vec<f64> = samples.iter().copied().filter(|x| !x.is_nan()).collect();
        s.sort_by(f64::total_cmp);
        let pick = |q: f64| percentile_of_sorted(&s, q).unwrap_or(f64::NAN);
        ChunkLatency {
            count: s.len(),
            p50: pick(0.5),
            p90: pick(0.9),
            p99: pick(0.99),
            max: pick(1.0),
        }
    }
}

/// What one variant measured in one round (one connection).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SendqRound {
    /// The variant's label.
    pub name: String,
    /// Its settings.
    pub variant: Variant,
    /// Chunks scheduled.
    pub chunks_offered: usize,
    /// Chunks the receiver completed.
    pub chunks_delivered: usize,
    /// Chunks replaced by a newer one before being sent.
    pub merged: u64,
    /// Chunks dropped as stale.
    pub dropped_stale: u64,
    /// `(merged + dropped) / offered`.
    pub fraction_merged_or_dropped: f64,
    /// Latency from send start (the application handing the chunk to the send path) to
    /// completion.
    pub from_start_ms: ChunkLatency,
    /// Latency from the scheduled time to completion.
    pub from_schedule_ms: ChunkLatency,
    /// Delivered bytes over the time from the first chunk's schedule to the last completion.
    pub goodput_mbps: f64,
    /// From the first chunk's scheduled time until the sender had written its last chunk, ms
    /// (longer than the schedule when the path cannot keep up).
    pub sending_ms: f64,
    /// Median of the sending socket's smoothed RTT sampled after each chunk, ms: the path's
    /// queueing as the congestion control leaves it.
    pub srtt_p50_ms: f64,
    /// The sending socket's minimum RTT, ms.
    pub min_rtt_ms: f64,
    /// The sender wrapper's counters.
    pub sender: SenderStats,
    /// Every delivered chunk.
    pub chunks: Vec<ChunkRecord>,
}

impl SendqRound {
    /// Latencies from send start, ms, in delivery order.
    pub fn from_start_samples(&self) -> Vec<f64> {
        self.chunks.iter().map(|c| c.complete_ms - c.start_ms).collect()
    }

    /// Latencies from the scheduled time, ms, in delivery order.
    pub fn from_schedule_samples(&self) -> Vec<f64> {
        self.chunks.iter().map(|c| c.complete_ms - c.scheduled_ms).collect()
    }
}

fn connect(live: &LivePath, port: u16, v: &Variant) -> Result<TcpStream, ExperimentError> {
    let target = SocketAddr::from((SERVER_ADDR, port));
    let socket = live.client().run(|| -> std::io::Result<Socket> {
        let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
        s.set_tcp_congestion(v.cc.name().as_bytes())?;
        s.set_tcp_nodelay(true)?;
        if v.control == Control::NeverBlocks {
            rustix::net::sockopt::set_socket_send_buffer_size_force(&s, 64 << 20)?;
        }
        s.connect_timeout(&target.into(), Duration::from_secs(5))?;
        Ok(s)
    })?;
    Ok(socket.map_err(io_err(format!("connect to {target} with {}", v.cc.name())))?.into())
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn sleep_until(epoch: Instant, at: Duration) {
    let now = epoch.elapsed();
    if at > now {
        std::thread::sleep(at - now);
    }
}

/// Reads whole chunks until EOF, stamping each completion.
fn receive(
    mut conn: TcpStream,
    epoch: Instant,
    chunk_bytes: usize,
) -> std::io::Result<Vec<ChunkRecord>> {
    let mut buf = vec![0u8; chunk_bytes];
    let mut filled = 0;
    let mut out = Vec::new();
    loop {
        let n = conn.read(&mut buf[filled..])?;
        if n == 0 {
            return Ok(out);
        }
        filled += n;
        if filled == chunk_bytes {
            let complete = epoch.elapsed();
            filled = 0;
            let word = |i: usize| u64::from_le_bytes(buf[i..i + 8].try_into().expect("8 bytes"));
            let magic = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes"));
            if magic != MAGIC {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    "bad chunk header",
                ));
            }
            out.push(ChunkRecord {
                seq: u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes")),
                scheduled_ms: word(8) as f64 / 1e6,
                start_ms: word(16) as f64 / 1e6,
                complete_ms: ms(complete),
            });
        }
    }
}

/// Runs one variant on `live`.
pub fn run_variant(
    live: &LivePath,
    config: &SendqConfig,
    v: &Variant,
) -> Result<SendqRound, ExperimentError> {
    let listener = live
        .server()
        .run(|| TcpListener::bind((SERVER_ADDR, 0)))?
        .map_err(io_err("listen in the server namespace"))?;
    let port = listener.local_addr().map_err(io_err("listener address"))?.port();
    let stream = connect(live, port, v)?;
    let (conn, _) = listener.accept().map_err(io_err("accept"))?;
    let epoch = Instant::now();
    let chunk_bytes = config.chunk_bytes;
    let receiver = std::thread::spawn(move || receive(conn, epoch, chunk_bytes));

    let mode = match v.control {
        Control::Governed(m) => m,
        Control::NeverBlocks => GovernorMode::NoControl,
    };
    let sent = send_chunks(&stream, config, v, mode, epoch);
    let sending_ms = ms(epoch.elapsed().saturating_sub(LEAD));
    // EOF for the receiver, also after a failed send.
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let records =
        receiver.join().map_err(|_| ExperimentError::Config("receiver panicked".into()))?;
    let Sent { stats, merged, dropped, srtt_ms, min_rtt_ms } = sent?;
    let chunks = records.map_err(io_err("receive"))?;

    let from_start: Vec<f64> = chunks.iter().map(|c| c.complete_ms - c.start_ms).collect();
    let from_sched: Vec<f64> = chunks.iter().map(|c| c.complete_ms - c.scheduled_ms).collect();
    let span_ms = chunks.last().map_or(0.0, |c| c.complete_ms) - ms(LEAD);
    let goodput_mbps = (chunks.len() * config.chunk_bytes) as f64 * 8.0 / (span_ms * 1e3);
    Ok(SendqRound {
        name: v.name.clone(),
        variant: v.clone(),
        chunks_offered: config.chunks,
        chunks_delivered: chunks.len(),
        merged,
        dropped_stale: dropped,
        fraction_merged_or_dropped: (merged + dropped) as f64 / config.chunks as f64,
        from_start_ms: ChunkLatency::of(&from_start),
        from_schedule_ms: ChunkLatency::of(&from_sched),
        goodput_mbps,
        sending_ms,
        srtt_p50_ms: ChunkLatency::of(&srtt_ms).p50,
        min_rtt_ms,
        sender: stats,
        chunks,
    })
}

/// What the paced sender reports.
struct Sent {
    stats: SenderStats,
    merged: u64,
    dropped: u64,
    /// The socket's smoothed RTT after each chunk, ms.
    srtt_ms: Vec<f64>,
    /// The socket's minimum RTT at the end, ms.
    min_rtt_ms: f64,
}

/// The paced sender.
fn send_chunks(
    stream: &TcpStream,
    config: &SendqConfig,
    v: &Variant,
    mode: GovernorMode,
    epoch: Instant,
) -> Result<Sent, ExperimentError> {
    let mut sender =
        BoundedSender::new(stream, GovernorConfig::new(mode)).map_err(io_err("wrap the socket"))?;
    let sched = |i: usize| LEAD + config.interval * u32::try_from(i).unwrap_or(u32::MAX);
    let mut buf = vec![0u8; config.chunk_bytes];
    // `start`: when the application handed the chunk to the send path, before any wait of
    // the wrapper or the kernel, so every variant's latency from send start counts its own
    // waits alike.
    // After each chunk, the path's queueing as the sender sees it (smoothed RTT), sampled the
    // same way for every variant, outside the wrapper.
    let mut srtt_ms = Vec::with_capacity(config.chunks);
    let mut min_rtt_ms = f64::NAN;
    let mut write = |sender: &mut BoundedSender<&TcpStream>, seq: usize, start: Duration| {
        buf[0..4].copy_from_slice(&MAGIC.to_le_bytes());
        buf[4..8].copy_from_slice(&u32::try_from(seq).unwrap_or(u32::MAX).to_le_bytes());
        buf[8..16].copy_from_slice(&ns(sched(seq)).to_le_bytes());
        buf[16..24].copy_from_slice(&ns(start).to_le_bytes());
        sender.send_all(&buf).map_err(io_err(format!("send chunk {seq}")))?;
        let info =
            tcptail_sock::tcp_info::tcp_info(stream.as_fd()).map_err(io_err("read tcp_info"))?;
        srtt_ms.push(ms(info.rtt()));
        if let Some(us) = info.min_rtt_us {
            min_rtt_ms = f64::from(us) / 1e3;
        }
        Ok::<(), ExperimentError>(())
    };
    let n = config.chunks;
    if !v.fresh {
        for i in 0..n {
            sleep_until(epoch, sched(i));
            let start = epoch.elapsed();
            write(&mut sender, i, start)?;
        }
        let stats = sender.stats();
        return Ok(Sent { stats, merged: 0, dropped: 0, srtt_ms, min_rtt_ms });
    }
    // One key: each new chunk supersedes an unsent older one (the freshest frame wins).
    let mut queue: FreshnessQueue<u8, usize> =
        FreshnessQueue::new(FreshnessPolicy { conflate: true, max_age: Some(config.max_age) });
    let mut next = 0;
    let admit_due = |queue: &mut FreshnessQueue<u8, usize>, next: &mut usize| {
        let now = epoch.elapsed();
        while *next < n && sched(*next) <= now {
            queue.push(sched(*next), 0, *next);
            *next += 1;
        }
    };
    loop {
        admit_due(&mut queue, &mut next);
        if queue.is_empty() {
            if next == n {
                break;
            }
            sleep_until(epoch, sched(next));
            continue;
        }
        // Pick the chunk only once the socket can take it, so it is the freshest.
        sender.ready().map_err(io_err("wait for the send queue"))?;
        admit_due(&mut queue, &mut next);
        if let Some(item) = queue.pop(epoch.elapsed()) {
            // The freshness queue is part of the send path: the chunk entered it when due.
            write(&mut sender, item.message, sched(item.message))?;
        }
    }
    let q = queue.stats();
    let stats = sender.stats();
    Ok(Sent { stats, merged: q.merged, dropped: q.dropped_stale, srtt_ms, min_rtt_ms })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let s: Vec<f64> = (1..=100).map(f64::from).collect();
        let l = ChunkLatency::of(&s);
        assert_eq!((l.count, l.p50, l.p90, l.p99, l.max), (100, 50.0, 90.0, 99.0, 100.0));
        assert!(ChunkLatency::of(&[]).p50.is_nan());
    }
}
