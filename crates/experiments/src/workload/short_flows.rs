//! The `short-flows` workload: short flows (a new connection per transfer) and
//! request/response on persistent connections across an emulated path, counting the sender
//! namespace's retransmission timeouts by kind from its `nstat` counters (the `rack`
//! experiment, seed 004).
//!
//! Every transfer goes from the client namespace to the server namespace (the path's `up`
//! direction, where `loss` and `reorder` apply): a flow worker connects, writes `flow_size`
//! bytes, waits for the server's one-byte answer and closes; a request/response worker keeps
//! one connection and writes `request_size` bytes, waiting for the one-byte answer each time.
//! So the client namespace is where data is sent and where its loss recovery happens.
//!
//! | key | values | default |
//! |---|---|---|
//! | `cc` | `cubic`, `bbr`, `reno` | `cubic` |
//! | `flow_workers` | concurrent flow loops (0..=64) | 16 |
//! | `flow_size` | bytes per flow | `20KB` |
//! | `rr_workers` | concurrent request/response connections (0..=64) | 4 |
//! | `request_size` | bytes per request | `4KB` |
//! | `duration` | time new transfers are started; those under way then finish | `10s` |
//! | path keys | `path = "emulated"` (required), `rate`, `rtt`, `loss`, `reorder`, `buffer`, `queue`, `sysctl` | |
//!
//! Metrics: `transfers` (flows and requests completed), `fct_p50_ms` / `fct_p99_ms` (flow
//! completion time, from `connect` to the answer), `rr_p99_ms` (with request/response
//! workers), and from the client namespace's counters grown over the round: `rto_count`
//! (`TcpExtTCPTimeouts` less `TcpExtTCPSynRetrans`: retransmission timeouts of data, the
//! lost SYNs apart in `syn_rto_count`), `disorder_rto_count`
//! (`TcpExtTCPSackFailures`: a first timeout that fired in the Disorder state or with SACKed
//! data outstanding, net/ipv4/tcp_timer.c), both also per 1,000 transfers (`rto_per_1k`,
//! `disorder_rto_per_1k`) because a round that recovers faster completes more transfers,
//! `tlp_count` (`TcpExtTCPLossProbes`), `spurious_retrans_pct` (segments the receiver reported
//! as duplicates with D-SACK, `TcpExtTCPDSACKRecvSegs`, as a share of `TcpRetransSegs`) and
//! `failed` (transfers that errored or timed out after 10 s). Series: `fct_ms` (distribution).
//!
//! A variant that clears RACK's bit in `net.ipv4.tcp_recovery` is not applicable on Linux 6.17
//! and later, where the bit no longer turns RACK off (commit 1c120191dcec: RACK
//! is the only loss detection left).

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockRef, Socket, Type};
use tcptail_netns::nstat::Counters;
use tcptail_report::Series;

use crate::params::{ParamError, Params};
use crate::path::{LivePath, PathPlan};
use crate::round::{Measurement, RoundContext, RunError};
use crate::workload::flows;
use crate::workload::{VariantPlan, Workload};

/// The `short-flows` engine.
pub struct ShortFlows;

/// How long a transfer may take before it counts as failed.
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(10);

/// A checked `short-flows` variant.
#[derive(Debug)]
struct Plan {
    path: PathPlan,
    cc: String,
    flow_workers: usize,
    flow_size: usize,
    rr_workers: usize,
    request_size: usize,
    duration: Duration,
}

impl Workload for ShortFlows {
    fn name(&self) -> &'static str {
        "short-flows"
    }

    fn plan(&self, params: &Params) -> Result<Box<dyn VariantPlan>, ParamError> {
        let cc = flows::cc_param(params)?;
        let flow_workers = params.uint("flow_workers", 64)?.unwrap_or(16) as usize;
        let rr_workers = params.uint("rr_workers", 64)?.unwrap_or(4) as usize;
        if flow_workers + rr_workers == 0 {
            return Err(ParamError::new("flow_workers", "at least one flow or rr worker"));
        }
        let size = |key: &str, default: u64| -> Result<usize, ParamError> {
            let b = params.bytes(key)?.unwrap_or(default);
            if !(1..=64 << 20).contains(&b) {
                return Err(ParamError::new(key, "between 1 byte and 64MB"));
            }
            Ok(b as usize)
        };
        let flow_size = size("flow_size", 20_000)?;
        let request_size = size("request_size", 4_000)?;
        let duration = params.duration("duration")?.unwrap_or(Duration::from_secs(10));
        if duration < Duration::from_millis(500) {
            return Err(ParamError::new("duration", "at least 500ms"));
        }
        let path = PathPlan::emulated_from_params(params, "short-flows")?;
        Ok(Box::new(Plan { path, cc, flow_workers, flow_size, rr_workers, request_size, duration }))
    }
}

/// What one round's transfers gave.
#[derive(Debug, Default)]
struct Transfers {
    /// Flow completion times, ms.
    fct_ms: Vec<f64>,
    /// Request/response latencies, ms.
    rr_ms: Vec<f64>,
    /// Transfers that failed.
    failed: u64,
    /// The client namespace's counters grown over the round.
    grown: Counters,
}

impl VariantPlan for Plan {
    fn metrics(&self) -> Vec<String> {
        let mut names = vec![
            "transfers",
            "rto_count",
            "syn_rto_count",
            "disorder_rto_count",
            "rto_per_1k",
            "disorder_rto_per_1k",
            "tlp_count",
            "spurious_retrans_pct",
            "failed",
        ];
        if self.flow_workers > 0 {
            names.extend(["fct_p50_ms", "fct_p99_ms"]);
        }
        if self.rr_workers > 0 {
            names.push("rr_p99_ms");
        }
        names.into_iter().map(str::to_owned).collect()
    }

    fn run(&self, ctx: &RoundContext<'_>) -> Result<Measurement, RunError> {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        if let Some(why) = rack_cannot_be_disabled(&self.path.sysctls, release.trim()) {
            return Err(RunError::NotApplicable(why));
        }
        let (t, lateness) = self.path.round(ctx, |live| self.transfers(live, ctx))?;
        let mut m = Measurement { lateness, ..Measurement::default() };
        let done = (t.fct_ms.len() + t.rr_ms.len()) as f64;
        if done == 0.0 {
            return Err(RunError::NothingCompleted {
                what: "short-flows round",
                detail: "no flow or request completed",
            });
        }
        let count = |name: &str| t.grown.get(name).unwrap_or(0) as f64;
        // TCPTimeouts counts SYN timeouts too; TCPSynRetrans counts the SYNs they resent.
        let syn_rtos = count("TcpExtTCPSynRetrans");
        let rtos = (count("TcpExtTCPTimeouts") - syn_rtos).max(0.0);
        let disorder = count("TcpExtTCPSackFailures");
        let retrans = count("TcpRetransSegs");
        let spurious = count("TcpExtTCPDSACKRecvSegs");
        m.metric("transfers", done)
            .metric("rto_count", rtos)
            .metric("syn_rto_count", syn_rtos)
            .metric("disorder_rto_count", disorder)
            .metric("rto_per_1k", 1000.0 * rtos / done)
            .metric("disorder_rto_per_1k", 1000.0 * disorder / done)
            .metric("tlp_count", count("TcpExtTCPLossProbes"))
            .metric(
                "spurious_retrans_pct",
                if retrans > 0.0 { (100.0 * spurious / retrans).min(100.0) } else { 0.0 },
            )
            .metric("failed", t.failed as f64);
        for (name, q, values) in [
            ("fct_p50_ms", 0.5, &t.fct_ms),
            ("fct_p99_ms", 0.99, &t.fct_ms),
            ("rr_p99_ms", 0.99, &t.rr_ms),
        ] {
            if values.is_empty() {
                let why = "not measurable: no transfer of this kind completed".to_owned();
                m.not_measurable.insert(name.to_owned(), why);
                continue;
            }
            let mut sorted = values.clone();
            sorted.sort_by(f64::total_cmp);
            m.percentile(name, q, sorted.len(), flows::percentile(&sorted, q));
        }
        if !t.fct_ms.is_empty() {
            m.series.push(Series::cdf("fct_ms", &mut t.fct_ms.clone()));
        }
        if !t.rr_ms.is_empty() {
            m.series.push(Series::cdf("rr_ms", &mut t.rr_ms.clone()));
        }
        Ok(m)
    }

    fn planned(&self) -> Duration {
        // Transfers under way at the end finish: a few round trips each.
        self.duration + self.path.rtt() * 10
    }

    fn describe(&self) -> String {
        format!(
            "{}; {} flow worker(s) of {} KB per connection and {} request/response \
             connection(s) of {} KB requests, {}, {:.0} s per round",
            self.path.describe(),
            self.flow_workers,
            self.flow_size / 1000,
            self.rr_workers,
            self.request_size / 1000,
            self.cc,
            self.duration.as_secs_f64()
        )
    }
}

impl Plan {
    fn transfers(&self, live: &LivePath, ctx: &RoundContext<'_>) -> Result<Transfers, RunError> {
        let before = live.client().nstat()?;
        let server = Server::start(live, self.flow_size, self.request_size)?;
        let deadline = Instant::now() + self.duration;
        let failed = AtomicU64::new(0);
        let results: Vec<Result<(bool, Vec<f64>), RunError>> = std::thread::scope(|s| {
            let mut workers = Vec::new();
            for i in 0..self.flow_workers + self.rr_workers {
                let rr = i >= self.flow_workers;
                let failed = &failed;
                let server = &server;
                workers.push(s.spawn(move || {
                    let mut times = Vec::new();
                    let target = if rr { server.rr_addr } else { server.flow_addr };
                    let size = if rr { self.request_size } else { self.flow_size };
                    let mut conn: Option<TcpStream> = None;
                    let payload = vec![0x5au8; size];
                    while Instant::now() < deadline && !(ctx.stop_requested)() {
                        if i == 0 {
                            let left = deadline.saturating_duration_since(Instant::now());
                            (ctx.progress)(1.0 - left.as_secs_f64() / self.duration.as_secs_f64());
                        }
                        let start = Instant::now();
                        let stream = match conn.take() {
                            Some(c) => c,
                            None => match self.connect(live, target) {
                                Ok(c) => c,
                                Err(_) => {
                                    failed.fetch_add(1, Ordering::Relaxed);
                                    // Not a tight loop against a server that is gone.
                                    std::thread::sleep(Duration::from_millis(10));
                                    continue;
                                }
                            },
                        };
                        match exchange(&stream, &payload) {
                            Ok(()) => {
                                times.push(start.elapsed().as_secs_f64() * 1e3);
                                if rr {
                                    conn = Some(stream);
                                }
                            }
                            Err(_) => {
                                failed.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                    }
                    Ok::<_, RunError>((rr, times))
                }));
            }
            workers
                .into_iter()
                .map(|w| w.join().unwrap_or_else(|_| Err(RunError::panicked("worker", "panicked"))))
                .collect()
        });
        server.stop();
        if (ctx.stop_requested)() {
            return Err(RunError::Interrupted);
        }
        let after = live.client().nstat()?;
        let mut t = Transfers { grown: after.since(&before), ..Transfers::default() };
        for r in results {
            let (rr, times) = r?;
            if rr { t.rr_ms.extend(times) } else { t.fct_ms.extend(times) }
        }
        t.failed = failed.into_inner();
        Ok(t)
    }

    /// A connection from the client namespace to `target` with the variant's congestion
    /// control, TCP_NODELAY (each transfer is one write) and the transfer timeout.
    fn connect(&self, live: &LivePath, target: SocketAddr) -> Result<TcpStream, RunError> {
        let socket = live
            .client()
            .run(|| -> std::io::Result<Socket> {
                let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
                s.set_tcp_congestion(self.cc.as_bytes())?;
                s.set_tcp_nodelay(true)?;
                Ok(s)
            })?
            .map_err(|e| RunError::io("a socket in the client namespace", e))?;
        socket
            .connect_timeout(&target.into(), TRANSFER_TIMEOUT)
            .map_err(|e| RunError::io(format!("connect to {target}"), e))?;
        let stream: TcpStream = socket.into();
        stream.set_read_timeout(Some(TRANSFER_TIMEOUT)).map_err(|e| RunError::io("timeout", e))?;
        stream.set_write_timeout(Some(TRANSFER_TIMEOUT)).map_err(|e| RunError::io("timeout", e))?;
        Ok(stream)
    }
}

/// Why a variant that turns RACK off cannot run on kernel `release`, or `None` when it can.
///
/// Linux 6.17 removed RFC 6675 loss recovery (commit 1c120191dcec, "tcp: remove obsolete and
/// unused RFC3517/RFC6675 loss recovery code"): RACK is the only loss detection left, and
/// clearing bit 0x1 of `net.ipv4.tcp_recovery` is accepted but has no effect
/// (Documentation/networking/ip-sysctl.rst). A "RACK off" variant there would silently measure
/// RACK.
fn rack_cannot_be_disabled(
    sysctls: &std::collections::BTreeMap<String, String>,
    release: &str,
) -> Option<String> {
    let value = sysctls.get("net.ipv4.tcp_recovery")?;
    let bits: u32 = value.trim().parse().ok()?;
    if bits & 1 != 0 {
        return None;
    }
    let mut parts = release.split(|c: char| !c.is_ascii_digit()).map(str::parse::<u32>);
    let (Some(Ok(major)), Some(Ok(minor))) = (parts.next(), parts.next()) else {
        return None;
    };
    ((major, minor) >= (6, 17)).then(|| {
        format!(
            "net.ipv4.tcp_recovery={value} cannot turn RACK off on Linux {release}: since 6.17 \
             (commit 1c120191dcec) RACK is the only loss detection and the bit is ignored; the \
             RFC 6675 duplicate-ACK recovery this variant compares against needs a kernel \
             before 6.17"
        )
    })
}

/// One transfer: `payload` out, a one-byte answer back.
fn exchange(mut stream: &TcpStream, payload: &[u8]) -> std::io::Result<()> {
    stream.write_all(payload)?;
    let mut answer = [0u8; 1];
    stream.read_exact(&mut answer)
}

/// The answering side in the server namespace: one listener for flows, one for requests, a
/// thread per connection that reads each transfer whole and answers one byte.
struct Server {
    flow_addr: SocketAddr,
    rr_addr: SocketAddr,
    listeners: Vec<TcpListener>,
    acceptors: Vec<JoinHandle<()>>,
    handlers: std::sync::Arc<Mutex<Vec<JoinHandle<()>>>>,
}

impl Server {
    fn start(live: &LivePath, flow_size: usize, request_size: usize) -> Result<Server, RunError> {
        let handlers = std::sync::Arc::new(Mutex::new(Vec::new()));
        let mut server = Server {
            flow_addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            rr_addr: SocketAddr::from(([0, 0, 0, 0], 0)),
            listeners: Vec::new(),
            acceptors: Vec::new(),
            handlers: handlers.clone(),
        };
        for (size, is_rr) in [(flow_size, false), (request_size, true)] {
            let listener = flows::listen(live)?;
            let port = listener.local_addr().map_err(|e| RunError::io("listener", e))?.port();
            let addr = SocketAddr::from((live.server_addr(), port));
            if is_rr {
                server.rr_addr = addr;
            } else {
                server.flow_addr = addr;
            }
            let accepting =
                listener.try_clone().map_err(|e| RunError::io("clone the listener", e))?;
            let handlers = handlers.clone();
            let acceptor = std::thread::Builder::new()
                .name("tcptail-sf-accept".into())
                .spawn(move || {
                    // Ends when `stop` shuts the listener down.
                    while let Ok((conn, _)) = accepting.accept() {
                        let _ = conn.set_read_timeout(Some(TRANSFER_TIMEOUT));
                        let _ = conn.set_nodelay(true);
                        let h = std::thread::Builder::new()
                            .name("tcptail-sf-serve".into())
                            .spawn(move || answer(conn, size));
                        if let Ok(h) = h {
                            let mut all = handlers.lock().unwrap_or_else(|e| e.into_inner());
                            all.retain(|h: &JoinHandle<()>| !h.is_finished());
                            all.push(h);
                        }
                    }
                })
                .map_err(|e| RunError::io("start the accept thread", e))?;
            server.listeners.push(listener);
            server.acceptors.push(acceptor);
        }
        Ok(server)
    }

    fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        for l in &self.listeners {
            // Wakes the blocked accept() with an error (Linux), ending its thread.
            let _ = SockRef::from(l).shutdown(Shutdown::Both);
        }
        for a in self.acceptors.drain(..) {
            let _ = a.join();
        }
        let handlers =
            std::mem::take(&mut *self.handlers.lock().unwrap_or_else(|e| e.into_inner()));
        for h in handlers {
            let _ = h.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Reads transfers of `size` bytes and answers each with one byte, until the peer closes.
fn answer(mut conn: TcpStream, size: usize) {
    let mut buf = vec![0u8; size.min(256 * 1024)];
    loop {
        let mut left = size;
        while left > 0 {
            let want = left.min(buf.len());
            match conn.read(&mut buf[..want]) {
                Ok(0) | Err(_) => return,
                Ok(n) => left -= n,
            }
        }
        if conn.write_all(&[1]).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{self, test_support};

    fn params(pairs: &[(&str, toml::Value)]) -> Params {
        test_support::emulated("100mbit", "20ms", pairs)
    }

    #[test]
    fn rack_off_needs_a_kernel_before_6_17() {
        let off = [("net.ipv4.tcp_recovery".to_owned(), "0".to_owned())].into();
        let static_window = [("net.ipv4.tcp_recovery".to_owned(), "3".to_owned())].into();
        let why = rack_cannot_be_disabled(&off, "6.18.0-1-cloud").expect("not applicable");
        assert!(why.contains("since 6.17"), "{why}");
        assert!(rack_cannot_be_disabled(&off, "6.17.2").is_some());
        assert!(rack_cannot_be_disabled(&off, "6.16.9").is_none());
        assert!(rack_cannot_be_disabled(&off, "5.15.0-91-generic").is_none());
        assert!(rack_cannot_be_disabled(&static_window, "6.18.0").is_none());
        assert!(rack_cannot_be_disabled(&Default::default(), "6.18.0").is_none());
    }

    #[test]
    fn bad_parameters_are_named() {
        let err = |p: Params| workload::plan(&ShortFlows, &p).err().expect("refused");
        assert_eq!(err(params(&[("flow_workers", 65.into())])).key, "flow_workers");
        assert_eq!(
            err(params(&[("flow_workers", 0.into()), ("rr_workers", 0.into())])).key,
            "flow_workers"
        );
        assert_eq!(err(params(&[("flow_size", "0B".into())])).key, "flow_size");
        assert_eq!(err(params(&[("duration", "10ms".into())])).key, "duration");
        assert_eq!(err(params(&[("reorder", "5%".into())])).key, "reorder");
        assert_eq!(err(Params::from_pairs([("cc", toml::Value::from("bbr"))])).key, "path");
        let ok = workload::plan(&ShortFlows, &params(&[("reorder", "1%,gap=3ms".into())]));
        assert!(ok.unwrap().describe().contains("16 flow worker(s) of 20 KB"));
    }

    /// Short flows over a lossy path: transfers complete, completion times are at least the
    /// two round trips a flow needs, and the namespace's counters see retransmissions
    /// (needs root and /dev/net/tun).
    #[test]
    fn flows_complete_and_losses_are_counted() {
        let plan = workload::plan(
            &ShortFlows,
            &params(&[
                ("duration", "2s".into()),
                ("loss", "3%".into()),
                ("flow_workers", 8.into()),
                ("rr_workers", 2.into()),
            ]),
        )
        .unwrap();
        let m = test_support::run_once(plan.as_ref(), 11);
        assert!(m.metrics["transfers"] > 50.0, "{:?}", m.metrics);
        assert!(m.metrics["fct_p50_ms"] >= 39.0, "{:?}", m.metrics);
        assert!(m.metrics["rto_count"] + m.metrics["tlp_count"] > 0.0, "{:?}", m.metrics);
        assert_eq!(m.metrics["failed"], 0.0, "{:?}", m.metrics);
        assert!(m.series.iter().any(|s| s.name == "fct_ms"));
    }
}
