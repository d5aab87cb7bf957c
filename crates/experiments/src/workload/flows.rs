//! Shared pieces of the throughput engines (`bulk`, `bloat`, `idle-restart`): connections
//! across a lab path, bulk senders and counting receivers, and a sampler that reads the
//! receivers' byte counts and the senders' `tcp_info` on one clock.
//!
//! Every connection goes from the client namespace (the sender) to the server namespace (the
//! receiver), so data crosses the path's `up` direction, where the emulator applies loss and
//! its bottleneck queue; the `down` direction carries ACKs and probe replies. Sockets are
//! created inside their namespace by [`tcptail_netns::Netns::run`] and then used from ordinary threads of
//! this process: a socket stays in the namespace it was created in, and both ends share this
//! process's `CLOCK_MONOTONIC`, so a receiver's timestamp and a sender's are comparable.
//!
//! Goodput is always counted at the receiver (bytes the application read), never from the
//! sender's writes, which include whatever still sits in buffers, and always the same way:
//! the bytes read over the measurement window divided by its length ([`goodput_between`]),
//! held to the shaped rate with a note when data held before the window is read inside it
//! ([`held_to_link`]).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};
use tcptail_sock::TcpInfo;

use crate::params::{ParamError, Params};
use crate::path::LivePath;
use crate::round::RunError;

/// Congestion controls this machine offers per socket.
pub const CCS: &[&str] = &["cubic", "bbr", "reno"];

/// Reads `cc` (default `cubic`).
pub fn cc_param(params: &Params) -> Result<String, ParamError> {
    Ok(params.choice("cc", CCS)?.unwrap_or_else(|| "cubic".into()))
}

/// What a bulk-flow engine (`bulk`, `ecn`) reads besides its path: congestion control, how
/// many flows, and the round's timing.
#[derive(Debug, Clone)]
pub struct BulkShape {
    /// Congestion control of every flow (`cc`).
    pub cc: String,
    /// Parallel flows (`flows`, 1..=64, default 1).
    pub flows: usize,
    /// Sending time per round, warm-up included (`duration`, default 10 s).
    pub duration: Duration,
    /// Time excluded from the measurements (`warmup`, default 2 s).
    pub warmup: Duration,
    /// `tcp_info` sampling interval (`sample`, 1-100 ms, default 10 ms).
    pub sample: Duration,
}

impl BulkShape {
    /// Reads and checks `cc`, `flows`, `duration`, `warmup` and `sample`; a `duration`
    /// shorter than `min_duration` is refused with `why_min` as the problem.
    pub fn from_params(
        params: &Params,
        min_duration: Duration,
        why_min: &str,
    ) -> Result<BulkShape, ParamError> {
        let cc = cc_param(params)?;
        let flows = params.uint("flows", 64)?.unwrap_or(1);
        if flows == 0 {
            return Err(ParamError::new("flows", "at least one flow"));
        }
        let duration = params.duration("duration")?.unwrap_or(Duration::from_secs(10));
        let warmup = params.duration("warmup")?.unwrap_or(Duration::from_secs(2));
        let sample = params.duration("sample")?.unwrap_or(Duration::from_millis(10));
        if duration < min_duration {
            return Err(ParamError::new("duration", why_min));
        }
        if warmup + Duration::from_millis(300) > duration {
            return Err(ParamError::new(
                "warmup",
                "must leave at least 300ms of the duration to measure",
            ));
        }
        if sample < Duration::from_millis(1) || sample > Duration::from_millis(100) {
            return Err(ParamError::new("sample", "between 1ms and 100ms"));
        }
        Ok(BulkShape { cc, flows: flows as usize, duration, warmup, sample })
    }

    /// The variant as the report describes it: the path, then the flows and the round's timing.
    pub fn describe(&self, path: &crate::path::PathPlan) -> String {
        format!(
            "{}; {} {} flow{}, {:.0} s per round of which {:.0} s warm-up",
            path.describe(),
            self.flows,
            self.cc,
            if self.flows == 1 { "" } else { "s" },
            self.duration.as_secs_f64(),
            self.warmup.as_secs_f64()
        )
    }
}

/// A listener in the server namespace on an ephemeral port.
pub fn listen(live: &LivePath) -> Result<TcpListener, RunError> {
    let addr = live.server_addr();
    live.server()
        .run(|| TcpListener::bind((addr, 0)))?
        .map_err(|e| RunError::failed("listen in the server namespace", e))
}

/// Connects from the client namespace to `listener` with congestion control `cc` (the
/// namespace's default when `None`) and returns both ends: (client/sender, server/receiver).
pub fn connect(
    live: &LivePath,
    listener: &TcpListener,
    cc: Option<&str>,
    nodelay: bool,
) -> Result<(TcpStream, TcpStream), RunError> {
    connect_marked(live, listener, cc, nodelay, 0)
}

/// [`connect`] with the client's packets carrying `tos` in their TOS byte (`IP_TOS`, set
/// before the SYN, so every packet is marked; 0 leaves it unset), for a qdisc that classifies
/// by DSCP.
pub fn connect_marked(
    live: &LivePath,
    listener: &TcpListener,
    cc: Option<&str>,
    nodelay: bool,
    tos: u8,
) -> Result<(TcpStream, TcpStream), RunError> {
    let port = listener.local_addr().map_err(|e| RunError::io("listener address", e))?.port();
    let target = SocketAddr::from((live.server_addr(), port));
    let socket = live
        .client()
        .run(|| -> std::io::Result<Socket> {
            let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
            if let Some(cc) = cc {
                s.set_tcp_congestion(cc.as_bytes())?;
            }
            s.set_tcp_nodelay(nodelay)?;
            if tos != 0 {
                s.set_tos_v4(u32::from(tos))?;
            }
            s.connect_timeout(&target.into(), Duration::from_secs(5))?;
            Ok(s)
        })?
        .map_err(|e| {
            RunError::failed(format!("connect to {target} with {}", cc.unwrap_or("default cc")), e)
        })?;
    let (server, _) = listener.accept().map_err(|e| RunError::io("accept", e))?;
    server.set_nodelay(nodelay).map_err(|e| RunError::io("TCP_NODELAY", e))?;
    Ok((socket.into(), server))
}

/// One connection attempt of [`connect_all`]: how long `connect()` took, and the connection or
/// why there is none.
#[derive(Debug)]
pub struct Handshake {
    /// From the `connect()` call to its return (success, error or timeout).
    pub took: Duration,
    /// Both ends (client/sender, server/receiver), or the client's error.
    pub result: std::io::Result<(TcpStream, TcpStream)>,
}

/// Opens `n` connections from the client namespace to `listener` at once, each `connect()`
/// allowed `timeout`, and times each handshake: for paths where a handshake can take seconds
/// (a dropped SYN retried after the SYN timeout) or fail, so that `n` slow handshakes cost the
/// time of one. A connection that did not complete in time is an `Err` in its [`Handshake`],
/// not a failure of the call; sockets are made with congestion control `cc` (the namespace's
/// default when `None`).
pub fn connect_all(
    live: &LivePath,
    listener: &TcpListener,
    n: usize,
    cc: Option<&str>,
    timeout: Duration,
) -> Result<Vec<Handshake>, RunError> {
    let port = listener.local_addr().map_err(|e| RunError::io("listener address", e))?.port();
    let target: socket2::SockAddr = SocketAddr::from((live.server_addr(), port)).into();
    // Made inside the client namespace; a socket stays in it whichever thread connects it.
    let sockets = live
        .client()
        .run(|| -> std::io::Result<Vec<Socket>> {
            (0..n)
                .map(|_| {
                    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
                    if let Some(cc) = cc {
                        s.set_tcp_congestion(cc.as_bytes())?;
                    }
                    Ok(s)
                })
                .collect()
        })?
        .map_err(|e| {
            RunError::failed(format!("make a socket with {}", cc.unwrap_or("default cc")), e)
        })?;
    let attempts: Vec<(Duration, std::io::Result<Socket>)> = std::thread::scope(|scope| {
        let threads: Vec<_> = sockets
            .into_iter()
            .map(|s| {
                let target = &target;
                scope.spawn(move || {
                    let start = Instant::now();
                    let done = s.connect_timeout(target, timeout).map(|()| s);
                    (start.elapsed(), done)
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| {
                t.join().unwrap_or_else(|_| {
                    (Duration::ZERO, Err(std::io::Error::other("connect thread panicked")))
                })
            })
            .collect()
    });
    let connected = attempts.iter().filter(|(_, r)| r.is_ok()).count();
    let mut accepted = accept_n(listener, connected)?;
    let mut handshakes = Vec::with_capacity(n);
    for (took, attempt) in attempts {
        let result = attempt.and_then(|client| {
            let client = TcpStream::from(client);
            let local = client.local_addr()?;
            let i = accepted
                .iter()
                .position(|(_, peer)| *peer == local)
                .ok_or_else(|| std::io::Error::other("the server never accepted the connection"))?;
            Ok((client, accepted.swap_remove(i).0))
        });
        handshakes.push(Handshake { took, result });
    }
    Ok(handshakes)
}

/// Accepts `n` connections whose handshakes the clients have seen complete (the server's side
/// completes half an RTT later, with the client's ACK), each within a bound that only a lost
/// final ACK would reach.
fn accept_n(listener: &TcpListener, n: usize) -> Result<Vec<(TcpStream, SocketAddr)>, RunError> {
    let bound = Some(Duration::from_secs(5));
    let sock = socket2::SockRef::from(listener);
    sock.set_read_timeout(bound).map_err(|e| RunError::io("SO_RCVTIMEO on the listener", e))?;
    let accepted: std::io::Result<Vec<_>> = (0..n)
        .map(|_| {
            let (stream, peer) = listener.accept()?;
            // An accepted socket is a clone of the listener, timeout included.
            stream.set_read_timeout(None)?;
            Ok((stream, peer))
        })
        .collect();
    sock.set_read_timeout(None).map_err(|e| RunError::io("SO_RCVTIMEO on the listener", e))?;
    accepted.map_err(|e| RunError::io("accept a connection the client completed", e))
}

/// The socket's `tcp_info`.
pub fn tcp_info(s: &TcpStream) -> Result<TcpInfo, RunError> {
    tcptail_sock::sys::info::tcp_info(s.as_fd()).map_err(|e| RunError::failed("read tcp_info", e))
}

/// One sampler tick: time since the measurement's start, bytes every receiver has read so
/// far, and flow 0's sender `tcp_info` (plus the sum of every sender's counters).
#[derive(Debug, Clone)]
pub struct Sample {
    /// Seconds since the flows started.
    pub t: f64,
    /// Bytes read by all receivers.
    pub received: u64,
    /// Smoothed RTT of every sender, µs.
    pub rtts_us: Vec<u32>,
    /// Sum over senders of `tcpi_bytes_sent`.
    pub bytes_sent: u64,
    /// Sum over senders of `tcpi_bytes_retrans`.
    pub bytes_retrans: u64,
    /// Sum over senders of `tcpi_busy_time`, µs.
    pub busy_us: u64,
    /// Sum over senders of `tcpi_rwnd_limited`, µs.
    pub rwnd_limited_us: u64,
    /// Every sender's congestion window, packets, flow 0 first.
    pub cwnds: Vec<u32>,
}

/// Bulk flows that send as fast as the path lets them, and count at the receiver.
pub struct BulkFlows {
    senders: Vec<TcpStream>,
    // Kept to unblock the readers at the end: a FIN would wait behind a deep queue.
    receivers: Vec<TcpStream>,
    received: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    threads: Vec<JoinHandle<std::io::Result<()>>>,
    /// When the flows started sending.
    pub start: Instant,
}

impl BulkFlows {
    /// Opens `n` connections with `cc` (the namespace's default when `None`) and starts
    /// sending on all of them, their threads pinned to `cpu` when given (so that flows which
    /// only compete for a bottleneck do not also compete for the measured pair's CPUs).
    pub fn start(
        live: &LivePath,
        n: usize,
        cc: Option<&str>,
        cpu: Option<usize>,
    ) -> Result<BulkFlows, RunError> {
        let listener = listen(live)?;
        let mut pairs = Vec::with_capacity(n);
        for _ in 0..n {
            pairs.push(connect(live, &listener, cc, false)?);
        }
        BulkFlows::from_pairs(pairs, cpu)
    }

    /// Starts sending on connections already made, (client/sender, server/receiver) each, as
    /// [`BulkFlows::start`] does after connecting.
    pub fn from_pairs(
        pairs: Vec<(TcpStream, TcpStream)>,
        cpu: Option<usize>,
    ) -> Result<BulkFlows, RunError> {
        let n = pairs.len();
        let received = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let mut flows = BulkFlows {
            senders: Vec::with_capacity(n),
            receivers: Vec::with_capacity(n),
            received: received.clone(),
            stop: stop.clone(),
            threads: Vec::with_capacity(2 * n),
            start: Instant::now(),
        };
        for (client, server) in pairs {
            let writer =
                client.try_clone().map_err(|e| RunError::io("clone the sender socket", e))?;
            flows.senders.push(client);
            flows.receivers.push(
                server.try_clone().map_err(|e| RunError::io("clone the receiver socket", e))?,
            );
            let (received, stop) = (received.clone(), stop.clone());
            flows.threads.push(spawn(cpu, move || receive(server, &received, &stop))?);
            let stop = flows.stop.clone();
            flows.threads.push(spawn(cpu, move || send(writer, &stop))?);
        }
        Ok(flows)
    }

    /// The sending ends, flow 0 first (for engines that read more of their state than
    /// [`BulkFlows::sample`] does).
    pub fn senders(&self) -> &[TcpStream] {
        &self.senders
    }

    /// Bytes read by all receivers so far.
    pub fn received(&self) -> u64 {
        self.received.load(Ordering::Relaxed)
    }

    /// Reads every sender's `tcp_info` now.
    pub fn sample(&self) -> Result<Sample, RunError> {
        let t = self.start.elapsed().as_secs_f64();
        let received = self.received();
        let mut s = Sample {
            t,
            received,
            rtts_us: Vec::with_capacity(self.senders.len()),
            bytes_sent: 0,
            bytes_retrans: 0,
            busy_us: 0,
            rwnd_limited_us: 0,
            cwnds: Vec::with_capacity(self.senders.len()),
        };
        for sender in &self.senders {
            let info = tcp_info(sender)?;
            s.rtts_us.push(info.rtt_us);
            s.cwnds.push(info.snd_cwnd_segs);
            s.bytes_sent += info.bytes_sent.unwrap_or(0);
            s.bytes_retrans += info.bytes_retrans.unwrap_or(0);
            s.busy_us += info.busy_time_us.unwrap_or(0);
            s.rwnd_limited_us += info.rwnd_limited_us.unwrap_or(0);
        }
        Ok(s)
    }

    /// Stops every flow and waits for its threads; the first I/O error, if any, is returned
    /// (a reset caused by the stop itself is not an error).
    pub fn stop(mut self) -> Result<(), RunError> {
        self.shutdown();
        let mut first = None;
        for t in self.threads.drain(..) {
            match t.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    first.get_or_insert_with(|| RunError::io("bulk flow", e));
                }
                Err(_) => {
                    first.get_or_insert_with(|| RunError::panicked("bulk flow", "thread panicked"));
                }
            }
        }
        first.map_or(Ok(()), Err)
    }

    fn shutdown(&self) {
        self.stop.store(true, Ordering::Relaxed);
        for s in self.senders.iter().chain(&self.receivers) {
            // The round is over and nobody will read what is still queued: the close resets
            // the connection and frees its buffers at once. A graceful close would leave the
            // sender orphaned in FIN_WAIT1 with the unsent queue (480 MB on a 10 Gbit/s x
            // 120 ms path) retransmitting into a torn-down path for minutes, holding host-wide
            // TCP memory (tcp_mem) that pushes every socket on the host toward pressure.
            let _ = tcptail_bench::sys::set_linger_zero(s.as_fd());
            // Unblocks writers stuck in send() on a full buffer and readers in recv().
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
    }
}

impl Drop for BulkFlows {
    fn drop(&mut self) {
        self.shutdown();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// A flow thread, pinned to `cpu` when given.
fn spawn(
    cpu: Option<usize>,
    f: impl FnOnce() -> std::io::Result<()> + Send + 'static,
) -> Result<JoinHandle<std::io::Result<()>>, RunError> {
    std::thread::Builder::new()
        .name("tcptail-bulk".into())
        .spawn(move || {
            if let Some(cpu) = cpu {
                tcptail_bench::sys::pin_current_thread(cpu)?;
            }
            f()
        })
        .map_err(|e| RunError::io("start a bulk-flow thread", e))
}

fn send(mut s: TcpStream, stop: &AtomicBool) -> std::io::Result<()> {
    let buf = vec![0x5au8; 256 * 1024];
    while !stop.load(Ordering::Relaxed) {
        if let Err(e) = s.write(&buf) {
            if stop.load(Ordering::Relaxed) {
                return Ok(());
            }
            return Err(e);
        }
    }
    Ok(())
}

fn receive(mut s: TcpStream, received: &AtomicU64, stop: &AtomicBool) -> std::io::Result<()> {
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                received.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(_) if stop.load(Ordering::Relaxed) => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

/// Samples `flows` for `shape`'s duration at its interval ([`sample_for`]), then stops them:
/// the samples, or the first error (the sampler's before the flows').
pub fn sample_then_stop(
    flows: BulkFlows,
    shape: &BulkShape,
    ctx: &crate::round::RoundContext<'_>,
) -> Result<Vec<Sample>, RunError> {
    let samples =
        sample_for(&flows, shape.duration, shape.sample, ctx.stop_requested, ctx.progress);
    let stopped = flows.stop();
    let samples = samples?;
    stopped?;
    Ok(samples)
}

/// Runs `flows` for `duration`, sampling every `every`; returns the samples. Stops early with
/// [`RunError::Interrupted`] when asked to.
pub fn sample_for(
    flows: &BulkFlows,
    duration: Duration,
    every: Duration,
    stop_requested: &(dyn Fn() -> bool + Sync),
    progress: &(dyn Fn(f64) + Sync),
) -> Result<Vec<Sample>, RunError> {
    let samples = sample_with(flows, duration, every, stop_requested, progress, |_| Ok(()))?;
    Ok(samples.into_iter().map(|(s, ())| s).collect())
}

/// [`sample_for`], also calling `extra` right after each sample (for state an engine reads
/// beyond [`Sample`], such as the pacing rate or BBR's bandwidth estimate) and keeping what it
/// returns beside the sample.
pub fn sample_with<X>(
    flows: &BulkFlows,
    duration: Duration,
    every: Duration,
    stop_requested: &(dyn Fn() -> bool + Sync),
    progress: &(dyn Fn(f64) + Sync),
    mut extra: impl FnMut(&BulkFlows) -> Result<X, RunError>,
) -> Result<Vec<(Sample, X)>, RunError> {
    let mut samples =
        Vec::with_capacity((duration.as_millis() / every.as_millis().max(1)) as usize);
    let mut next = Duration::ZERO;
    loop {
        let now = flows.start.elapsed();
        if now < next {
            std::thread::sleep(next - now);
        }
        if stop_requested() {
            return Err(RunError::Interrupted);
        }
        let sample = flows.sample()?;
        samples.push((sample, extra(flows)?));
        progress((next.as_secs_f64() / duration.as_secs_f64()).min(1.0));
        if next >= duration {
            return Ok(samples);
        }
        next += every;
    }
}

/// Nearest-rank percentile of `sorted` (ascending); NaN when empty.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    tcptail_units::stats::percentile_of_sorted(sorted, q).unwrap_or(f64::NAN)
}

/// What a bulk measurement window says, from samples taken at a steady interval.
#[derive(Debug, Clone, PartialEq)]
pub struct BulkSummary {
    /// Goodput over the window (the bytes read over it divided by its length, never above
    /// the shaped rate: see [`window_goodput_mbps`] and [`held_to_link`]), Mbit/s.
    pub goodput_mbps: f64,
    /// Why `goodput_mbps` is the shaped rate rather than the count, when the count read above
    /// it ([`held_to_link`]).
    pub goodput_note: Option<String>,
    /// RTT percentiles of every sender's smoothed RTT over the window, ms.
    pub rtt_p50_ms: f64,
    /// 95th percentile.
    pub rtt_p95_ms: f64,
    /// Mean of the same samples (seed 002 reports an average RTT).
    pub rtt_mean_ms: f64,
    /// Bytes retransmitted as a share of bytes sent in the window, %.
    pub retrans_pct: f64,
    /// Time limited by the receive window as a share of busy time in the window, %.
    pub rwnd_limited_pct: f64,
    /// Goodput per `bucket` over the whole run, `[s, Mbit/s]`.
    pub goodput_series: Vec<[f64; 2]>,
    /// Mean smoothed RTT per sample over the whole run, `[s, ms]`.
    pub rtt_series: Vec<[f64; 2]>,
    /// Flow 0's congestion window per sample over the whole run, `[s, packets]`.
    pub cwnd_series: Vec<[f64; 2]>,
}

/// Summarises samples: the measurement window starts at `warmup` seconds; goodput series are
/// computed over `bucket`-long steps. On a path shaped to `rate_bps` the window's goodput is
/// held to that rate ([`held_to_link`]).
pub fn summarise(
    samples: &[Sample],
    warmup: Duration,
    bucket: Duration,
    rate_bps: Option<f64>,
) -> BulkSummary {
    let w = warmup.as_secs_f64();
    let first = samples.iter().find(|s| s.t >= w).or(samples.first());
    let last = samples.last();
    let (retrans_pct, rwnd_limited_pct) = match (first, last) {
        (Some(a), Some(b)) if b.t > a.t => {
            let d = |x: u64, y: u64| y.saturating_sub(x) as f64;
            let sent = d(a.bytes_sent, b.bytes_sent);
            let busy = d(a.busy_us, b.busy_us);
            (
                if sent > 0.0 { 100.0 * d(a.bytes_retrans, b.bytes_retrans) / sent } else { 0.0 },
                if busy > 0.0 {
                    100.0 * d(a.rwnd_limited_us, b.rwnd_limited_us) / busy
                } else {
                    0.0
                },
            )
        }
        _ => (f64::NAN, f64::NAN),
    };
    let (goodput_mbps, goodput_note) =
        held_to_link(window_goodput_mbps(samples, warmup), rate_bps, "goodput_mbps");
    let mut rtts: Vec<f64> = samples
        .iter()
        .filter(|s| s.t >= w)
        .flat_map(|s| s.rtts_us.iter().map(|&r| f64::from(r) / 1e3))
        .collect();
    rtts.sort_by(f64::total_cmp);
    let mut goodput_series = Vec::new();
    let mut prev: Option<&Sample> = None;
    for s in samples {
        match prev {
            None => prev = Some(s),
            Some(p) if s.t - p.t >= bucket.as_secs_f64() * 0.999 => {
                let mbps = s.received.saturating_sub(p.received) as f64 * 8.0 / (s.t - p.t) / 1e6;
                goodput_series.push([s.t, mbps]);
                prev = Some(s);
            }
            Some(_) => {}
        }
    }
    let rtt_series = samples
        .iter()
        .filter(|s| !s.rtts_us.is_empty())
        .map(|s| {
            let mean =
                s.rtts_us.iter().map(|&r| f64::from(r)).sum::<f64>() / s.rtts_us.len() as f64;
            [s.t, mean / 1e3]
        })
        .collect();
    // Flow 0's window, as the series has always shown (0 without senders).
    let cwnd_series =
        samples.iter().map(|s| [s.t, f64::from(s.cwnds.first().copied().unwrap_or(0))]).collect();
    BulkSummary {
        goodput_mbps,
        goodput_note,
        rtt_p50_ms: percentile(&rtts, 0.5),
        rtt_p95_ms: percentile(&rtts, 0.95),
        rtt_mean_ms: if rtts.is_empty() {
            f64::NAN
        } else {
            rtts.iter().sum::<f64>() / rtts.len() as f64
        },
        retrans_pct,
        rwnd_limited_pct,
        goodput_series,
        rtt_series,
        cwnd_series,
    }
}

/// Goodput from `a` to `b`: the bytes the receivers read between the two samples divided by
/// the time between them, Mbit/s; NaN unless `b` is later than `a`.
///
/// This is every bulk engine's goodput (over its measurement window, or either side of a
/// link-downgrade's step). Either end of a window can fall while the receivers wait on a hole (a
/// loss not yet repaired) with data behind it that the link has already carried: the count then
/// misses what is held at the end and includes what was held at the start, each at most what the
/// flows had in flight (a BDP plus the bottleneck's buffer) plus what a reader the host ran late
/// left in the receive buffer, small against a window of many round trips. It replaced a
/// least-squares slope of the bytes read, which weighs the window's middle most (a byte read there
/// counts 1.5x the average, one read at either end nothing): when the receivers read nothing for a
/// long stretch and then a burst (a hole waiting on a retransmission timeout, seconds on a 128
/// kbit/s path, then everything held behind it at once) the fit reads far above what the link
/// carried (half a window of stall, then the held data: 125 % of the link); the count cannot.
pub fn goodput_between(a: &Sample, b: &Sample) -> f64 {
    if b.t > a.t {
        b.received.saturating_sub(a.received) as f64 * 8.0 / (b.t - a.t) / 1e6
    } else {
        f64::NAN
    }
}

/// [`goodput_between`] the first sample at or after `warmup` and the last sample, Mbit/s;
/// NaN with fewer than two samples there.
pub fn window_goodput_mbps(samples: &[Sample], warmup: Duration) -> f64 {
    let w = warmup.as_secs_f64();
    match (samples.iter().find(|s| s.t >= w), samples.last()) {
        (Some(a), Some(b)) => goodput_between(a, b),
        _ => f64::NAN,
    }
}

/// The goodput to report for a window whose count read `read_mbps` on a path shaped to
/// `rate_bps` (`None`: not shaped), with a note when the count read above the rate.
///
/// The count exceeds the rate only by data the link carried before the window and the receivers
/// read inside it: held out of order behind a hole at the window's start, or late on a loaded host
/// (unread in a receive buffer, or released late by the emulator): quick runs at 1 Gbit/s x 100 ms
/// without loss read up to 4 % above the payload's share of the link over their 2 s windows. The
/// link carries no more than its rate, so that is the figure, and the note gives the count.
/// `metric` names the figure in the note (`goodput_mbps`, `post_goodput_mbps`).
pub fn held_to_link(read_mbps: f64, rate_bps: Option<f64>, metric: &str) -> (f64, Option<String>) {
    match rate_bps {
        Some(rate) if read_mbps > rate / 1e6 => (
            rate / 1e6,
            Some(format!(
                "the receivers read {read_mbps:.3} Mbit/s over {metric}'s window, above the \
                 link's {:.3} Mbit/s: data the link carried before the window was read inside \
                 it (held behind a hole at its start, or late on a loaded host: unread in a \
                 receive buffer, or released late by the emulator); {metric} is the link's rate",
                rate / 1e6
            )),
        ),
        _ => (read_mbps, None),
    }
}

/// Notes for a round: a warning when a variant's measurement window is too short to say much.
pub fn window_note(duration: Duration, warmup: Duration, rtt: Duration) -> Option<String> {
    let window = duration.saturating_sub(warmup);
    (!rtt.is_zero() && window < rtt * 20).then(|| {
        format!(
            "the measurement window ({:.1} s after a {:.1} s warm-up) is under 20 RTTs: a short \
             run, read its numbers as indicative",
            window.as_secs_f64(),
            warmup.as_secs_f64()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t: f64, received: u64, rtt_us: u32, sent: u64, retrans: u64) -> Sample {
        Sample {
            t,
            received,
            rtts_us: vec![rtt_us],
            bytes_sent: sent,
            bytes_retrans: retrans,
            busy_us: (t * 1e6) as u64,
            rwnd_limited_us: (t * 0.5e6) as u64,
            cwnds: vec![10],
        }
    }

    #[test]
    fn summary_excludes_the_warm_up() {
        // 1 s of warm-up at a slow rate, then 12.5 MB/s (100 Mbit/s) for 2 s.
        let samples = vec![
            sample(0.0, 0, 50_000, 0, 0),
            sample(1.0, 1_000, 50_000, 1_000, 0),
            sample(2.0, 12_501_000, 60_000, 12_501_000, 125_000),
            sample(3.0, 25_001_000, 70_000, 25_001_000, 125_000),
        ];
        let s = summarise(&samples, Duration::from_secs(1), Duration::from_secs(1), None);
        assert!((s.goodput_mbps - 100.0).abs() < 1e-9, "{s:?}");
        assert!((s.retrans_pct - 0.5).abs() < 1e-9, "{s:?}");
        assert!((s.rwnd_limited_pct - 50.0).abs() < 1e-9, "{s:?}");
        assert_eq!(s.rtt_p50_ms, 60.0);
        assert_eq!(s.rtt_p95_ms, 70.0);
        assert_eq!(s.goodput_series.len(), 3);
        assert!((s.goodput_series[1][1] - 100.0).abs() < 1e-9);
    }

    /// Samples every 10 ms over `secs` seconds of a 128 kbit/s link (16,000 B/s) whose
    /// receivers have read `read(t)` bytes by time `t`.
    fn trace(secs: f64, read: impl Fn(f64) -> f64) -> Vec<Sample> {
        (0..=(secs * 100.0).round() as u32)
            .map(|i| {
                let t = f64::from(i) / 100.0;
                Sample {
                    t,
                    received: read(t).round() as u64,
                    rtts_us: vec![40_000],
                    bytes_sent: 0,
                    bytes_retrans: 0,
                    busy_us: 0,
                    rwnd_limited_us: 0,
                    cwnds: vec![4],
                }
            })
            .collect()
    }

    /// The least-squares slope of bytes read against time after `warmup`, Mbit/s: what the
    /// bulk engines reported before the count, kept here to show where the two differ.
    fn least_squares_mbps(samples: &[Sample], warmup: f64) -> f64 {
        let p: Vec<(f64, f64)> =
            samples.iter().filter(|s| s.t >= warmup).map(|s| (s.t, s.received as f64)).collect();
        let n = p.len() as f64;
        let (mx, my) =
            (p.iter().map(|p| p.0).sum::<f64>() / n, p.iter().map(|p| p.1).sum::<f64>() / n);
        let sxx: f64 = p.iter().map(|p| (p.0 - mx).powi(2)).sum();
        let sxy: f64 = p.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
        sxy / sxx * 8.0 / 1e6
    }

    const LINK_BPS: f64 = 128e3;
    const LINK_BYTES_PER_S: f64 = LINK_BPS / 8.0;

    fn window(samples: &[Sample], warmup_s: u64, rate_bps: Option<f64>) -> (f64, Option<String>) {
        let s =
            summarise(samples, Duration::from_secs(warmup_s), Duration::from_millis(100), rate_bps);
        (s.goodput_mbps, s.goodput_note)
    }

    /// What bloat's full mode met at 128 kbit/s: the link runs at its rate throughout, but a
    /// hole waits on a retransmission timeout for the first half of the window (2-6 s after
    /// 2 s of warm-up) and everything held behind it is read at once. The least-squares slope
    /// reads 125 % of the link; the count over the window reads the link's rate, shaped path
    /// or not.
    #[test]
    fn a_stall_then_a_burst_reads_the_link_not_more() {
        let samples =
            trace(10.0, |t| LINK_BYTES_PER_S * if (2.0..6.0).contains(&t) { 2.0 } else { t });
        let slope = least_squares_mbps(&samples, 2.0);
        assert!(slope > 1.2 * LINK_BPS / 1e6, "the slope over-reads here: {slope}");
        for rate in [Some(LINK_BPS), None] {
            let (goodput, note) = window(&samples, 2, rate);
            assert!((goodput - LINK_BPS / 1e6).abs() < 1e-9, "{goodput}");
            assert_eq!(note, None);
        }
    }

    /// Data the link carried before the window, held out of order at its start and read
    /// inside it, is the one way the count exceeds the link: the figure is then the link's
    /// rate, and the note gives the count and why.
    #[test]
    fn held_data_from_before_the_window_is_capped_with_the_reason() {
        // A hole from the start holds back 2 s of link time (32,000 B) until 3 s, a second into
        // the window: read at 3 s, although the link carried it before the window.
        let held = 2.0 * LINK_BYTES_PER_S;
        let samples = trace(10.0, |t| {
            let carried = LINK_BYTES_PER_S * t;
            if t < 3.0 { (carried - held).max(0.0) } else { carried }
        });
        let (goodput, note) = window(&samples, 2, Some(LINK_BPS));
        assert_eq!(goodput, LINK_BPS / 1e6);
        let note = note.expect("a note");
        assert!(note.contains("read 0.160 Mbit/s"), "{note}");
        assert!(note.contains("above the link's 0.128 Mbit/s") && note.contains("held"), "{note}");
        assert!(note.ends_with("goodput_mbps is the link's rate"), "{note}");
        // Without a shaped rate nothing to hold it to: the count as read.
        let (read, none) = window(&samples, 2, None);
        assert!((read - 0.16).abs() < 1e-9 && none.is_none(), "{read}");
    }

    #[test]
    fn goodput_needs_two_samples_in_the_window() {
        let samples = trace(3.0, |t| LINK_BYTES_PER_S * t);
        assert!(window_goodput_mbps(&samples, Duration::from_secs(3)).is_nan());
        assert!(window_goodput_mbps(&[], Duration::ZERO).is_nan());
        assert!(goodput_between(&samples[5], &samples[5]).is_nan());
        assert!((goodput_between(&samples[0], &samples[100]) - 0.128).abs() < 1e-9);
        // NaN is never held to the link, nor noted.
        let (nan, note) = held_to_link(f64::NAN, Some(LINK_BPS), "x");
        assert!(nan.is_nan() && note.is_none());
    }

    proptest::proptest! {
        /// Whatever the link's idle spells and however long the receivers wait on holes, when
        /// nothing carried before the window is read inside it the goodput never exceeds the
        /// link's rate (the least-squares slope fails this: see the tests above).
        #[test]
        fn goodput_never_exceeds_the_link(
            busy in proptest::collection::vec(0.9f64..=1.0, 80),
            holes in proptest::collection::vec((200usize..800, 0usize..600), 1..4),
        ) {
            // 8 s of 10 ms samples: the link at 90-100 % of its rate in each 100 ms, and up to
            // three holes (first sample, length) inside the window after 2 s of warm-up, during
            // each of which the receivers read nothing beyond what the link had carried when
            // it opened; then they catch up at once.
            let mut carried = vec![0.0f64; 801];
            for i in 1..=800 {
                carried[i] = carried[i - 1] + busy[(i - 1) / 10] * LINK_BYTES_PER_S / 100.0;
            }
            let read: Vec<f64> = (0..=800usize)
                .map(|i| {
                    let open = holes.iter().filter(|&&(s, l)| s <= i && i < s + l);
                    carried[open.map(|&(s, _)| s).min().unwrap_or(i)]
                })
                .collect();
            let samples = trace(8.0, |t| read[(t * 100.0).round() as usize]);
            let (goodput, note) = window(&samples, 2, Some(LINK_BPS));
            proptest::prop_assert!(goodput <= LINK_BPS / 1e6 * (1.0 + 1e-9), "{goodput}");
            proptest::prop_assert!(note.is_none(), "{note:?}");
        }
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v = [1.0, 2.0, 3.0, 4.0];
        assert_eq!(percentile(&v, 0.5), 2.0);
        assert_eq!(percentile(&v, 0.99), 4.0);
        assert!(percentile(&[], 0.5).is_nan());
    }
}
