//! The `reconnect-storm` workload: many clients reconnecting to one server address, each
//! connection a short session closed by the client, with the client namespace's ephemeral
//! port range narrowed so that TIME_WAIT exhausts it in seconds (seed 000 failure mode 5).
//!
//! A round builds the path (veth by default), writes `net.ipv4.ip_local_port_range` and
//! `net.ipv4.tcp_tw_reuse` in the client namespace only (never the host's) and reads them
//! back, starts an echo server in the server namespace, and then, for `duration`, `clients`
//! threads in the client namespace attempt sessions at `attempt_rate` per second in total
//! (each thread on its own fixed schedule, a late attempt going as soon as it can: the
//! reconnect loop of a client that retries at once). A session is `connect`, one request and
//! its reply, `close` by the client, so the client's side of every connection ends in
//! TIME_WAIT (the server waits for the client's FIN before it closes). With `pooled = true`
//! each client opens one connection at the start and runs every session on it instead.
//! With `bind_first = true` a client `bind`s to its address before `connect`, as programs that
//! pick a source interface do: the port is then chosen by `bind`, which reports an exhausted
//! range as `EADDRINUSE` ("Address already in use", the seed's message), where a plain
//! `connect` reports `EADDRNOTAVAIL`.
//!
//! A sampler reads the client namespace's sockets with sock_diag every `sample` (the `diag`
//! crate's [`Dumper`], opened in the namespace): TIME_WAIT and other states over time, and at
//! the end the TIME_WAIT sockets' remaining timers. After the storm, one attempt every 50 ms
//! for up to `recovery_window` looks for the first success.
//!
//! | key | values | default |
//! |---|---|---|
//! | `port_range` | the client's `ip_local_port_range`, `"LOW HIGH"` | `"40000 40249"` (250 ports) |
//! | `tw_reuse` | the client's `tcp_tw_reuse`: 0, 1, 2 | 0 |
//! | `clients` | client threads (1..=64) | 8 |
//! | `attempt_rate` | session attempts per second, all clients together | 160 |
//! | `duration` | length of the storm | `2500ms` |
//! | `recovery_window` | how long to look for a success after the storm | `500ms` |
//! | `pooled` | one long-lived connection per client | `false` |
//! | `bind_first` | `bind` before `connect` | `false` |
//! | `sample` | sock_diag sampling interval | `100ms` |
//! | path keys | `path` (`veth`, `emulated`, `tbf`), `rate`, `rtt`, ..., `sysctl` | veth |
//!
//! Metrics: `connect_failures` (attempts whose `bind` or `connect` failed, any errno),
//! `eaddrnotavail_count`, `eaddrinuse_count`, `other_errno_count`, `attempts_count`,
//! `sessions_ok_count`, `failure_pct` (failed attempts of all, sessions that failed after
//! connecting included), `tw_peak_count` (most TIME_WAIT sockets seen), `port_use_peak_pct`
//! (most sockets holding a local port in the range, as a share of its size), `ports_count`,
//! `recover_s` (from the first failed attempt until attempts succeed again: 0 without a
//! failure; measured when a success came within the run, otherwise projected from the
//! kernel's TIME_WAIT timers, which the notes say) and `exhaust_s` (storm start to the first
//! failure; "not measurable" in a round where nothing failed). Series: `time_wait` and `failures` (cumulative) over
//! time.

use std::io::{Read, Write};
use std::net::{SocketAddr, SocketAddrV4, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};
use tcptail_diag::{DumpRequest, Dumper, wire};
use tcptail_netns::addr::CLIENT_ADDR;
use tcptail_report::Series;
use tcptail_sock::tcp_info::TcpState;

use crate::params::{ParamError, Params};
use crate::path::{LivePath, PathPlan};
use crate::round::{Measurement, RoundContext, RunError};
use crate::workload::{VariantPlan, Workload};

/// The `reconnect-storm` engine.
pub struct ReconnectStorm;

/// Bytes of each request and reply.
const MESSAGE: usize = 64;
/// The interval of the attempts that look for recovery after the storm.
const RECOVERY_STEP: Duration = Duration::from_millis(50);
/// Linux's TIME_WAIT length (`TCP_TIMEWAIT_LEN`, fixed at compile time).
pub const TIME_WAIT_S: f64 = 60.0;
/// How long a session's `connect` may take: TCP's initial SYN timeout, so a storm attempt
/// whose SYN is lost fails (`ETIMEDOUT`) rather than waiting out the retransmissions.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
/// How long opening a pooled connection before the storm may take: through two SYN
/// retransmissions (1 s + 2 s), so one SYN dropped on a busy host does not fail the pool.
const POOL_OPEN_TIMEOUT: Duration = Duration::from_secs(4);

/// A checked `reconnect-storm` variant.
#[derive(Debug, Clone)]
struct Plan {
    path: PathPlan,
    ports: (u16, u16),
    tw_reuse: u8,
    clients: usize,
    attempt_rate: f64,
    duration: Duration,
    recovery_window: Duration,
    pooled: bool,
    bind_first: bool,
    sample: Duration,
}

/// Parses `"LOW HIGH"` (the sysctl's own form) into an ephemeral port range.
pub fn parse_port_range(text: &str) -> Result<(u16, u16), String> {
    let parts: Vec<&str> = text.split_whitespace().collect();
    let [low, high] = parts[..] else {
        return Err(format!("'{text}': expected two ports, \"LOW HIGH\" (e.g. \"40000 40249\")"));
    };
    let port = |s: &str| s.parse::<u16>().map_err(|_| format!("'{s}' is not a port (1-65535)"));
    let (low, high) = (port(low)?, port(high)?);
    if low < 1024 || high <= low {
        return Err(format!(
            "'{text}': needs 1024 <= LOW < HIGH (ports under 1024 belong to services)"
        ));
    }
    Ok((low, high))
}

impl Workload for ReconnectStorm {
    fn name(&self) -> &'static str {
        "reconnect-storm"
    }

    fn plan(&self, params: &Params) -> Result<Box<dyn VariantPlan>, ParamError> {
        let path = PathPlan::from_params(params)?;
        for key in ["net.ipv4.ip_local_port_range", "net.ipv4.tcp_tw_reuse"] {
            if path.sysctls.contains_key(key) {
                return Err(ParamError::new(
                    "sysctl",
                    format!("`{key}` is this workload's own key: use port_range / tw_reuse"),
                ));
            }
        }
        let ports = params.parsed("port_range", parse_port_range)?.unwrap_or((40000, 40249));
        let tw_reuse = params.uint("tw_reuse", 2)?.unwrap_or(0) as u8;
        let clients = params.uint("clients", 64)?.unwrap_or(8) as usize;
        if clients == 0 {
            return Err(ParamError::new("clients", "at least one client"));
        }
        let attempt_rate = params.uint("attempt_rate", 100_000)?.unwrap_or(160) as f64;
        if attempt_rate < 1.0 {
            return Err(ParamError::new("attempt_rate", "at least 1 attempt per second"));
        }
        let duration = params.duration("duration")?.unwrap_or(Duration::from_millis(2500));
        if duration < Duration::from_millis(200) || duration > Duration::from_secs(600) {
            return Err(ParamError::new("duration", "between 200ms and 10min"));
        }
        let recovery_window =
            params.duration("recovery_window")?.unwrap_or(Duration::from_millis(500));
        if recovery_window > Duration::from_secs(120) {
            return Err(ParamError::new("recovery_window", "at most 2min"));
        }
        let pooled = params.bool("pooled")?.unwrap_or(false);
        let bind_first = params.bool("bind_first")?.unwrap_or(false);
        let sample = params.duration("sample")?.unwrap_or(Duration::from_millis(100));
        if sample < Duration::from_millis(10) || sample > Duration::from_secs(5) {
            return Err(ParamError::new("sample", "between 10ms and 5s"));
        }
        Ok(Box::new(Plan {
            path,
            ports,
            tw_reuse,
            clients,
            attempt_rate,
            duration,
            recovery_window,
            pooled,
            bind_first,
            sample,
        }))
    }
}

/// How one attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The session completed.
    Ok,
    /// `bind` or `connect` failed with this errno (0 when the error carried none).
    Connect(i32),
    /// Connected, but the request or reply failed.
    Session,
}

/// One attempt: seconds since the storm started, and how it ended.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Attempt {
    /// Seconds since the storm started.
    pub t: f64,
    /// How it ended.
    pub outcome: Outcome,
}

/// One sock_diag sample of the client namespace.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PortSample {
    /// Seconds since the storm started.
    pub t: f64,
    /// Sockets in TIME_WAIT.
    pub time_wait: u32,
    /// Sockets holding a local port in the range, any state.
    pub in_range: u32,
}

/// What a round's attempts and samples add up to.
#[derive(Debug, Clone, PartialEq)]
pub struct StormSummary {
    /// Attempts made during the storm.
    pub attempts: usize,
    /// Completed sessions during the storm.
    pub ok: usize,
    /// `bind`/`connect` failures by errno during the storm.
    pub eaddrnotavail: usize,
    /// `EADDRINUSE`.
    pub eaddrinuse: usize,
    /// Any other errno (timeouts, resets on connect).
    pub other_errno: usize,
    /// Sessions that connected and then failed.
    pub session_errors: usize,
    /// Storm start to the first failure, s.
    pub exhaust_s: Option<f64>,
    /// From the first failure to the first success after the last failure, s, when one
    /// happened (storm or recovery attempts).
    pub recovered_s: Option<f64>,
}

impl StormSummary {
    /// `bind`/`connect` failures of any errno.
    pub fn connect_failures(&self) -> usize {
        self.eaddrnotavail + self.eaddrinuse + self.other_errno
    }
}

/// Sums up the storm's attempts (`storm`) and the recovery attempts after it (`after`).
pub fn summarise(storm: &[Attempt], after: &[Attempt]) -> StormSummary {
    let mut s = StormSummary {
        attempts: storm.len(),
        ok: 0,
        eaddrnotavail: 0,
        eaddrinuse: 0,
        other_errno: 0,
        session_errors: 0,
        exhaust_s: None,
        recovered_s: None,
    };
    for a in storm {
        match a.outcome {
            Outcome::Ok => s.ok += 1,
            Outcome::Connect(libc::EADDRNOTAVAIL) => s.eaddrnotavail += 1,
            Outcome::Connect(libc::EADDRINUSE) => s.eaddrinuse += 1,
            Outcome::Connect(_) => s.other_errno += 1,
            Outcome::Session => s.session_errors += 1,
        }
    }
    let mut all: Vec<Attempt> = storm.iter().chain(after).copied().collect();
    all.sort_by(|a, b| a.t.total_cmp(&b.t));
    let failed = |a: &Attempt| a.outcome != Outcome::Ok;
    let first = all.iter().find(|a| failed(a)).map(|a| a.t);
    s.exhaust_s = storm.iter().filter(|a| failed(a)).map(|a| a.t).min_by(f64::total_cmp);
    if let (Some(first), Some(last)) = (first, all.iter().rposition(failed)) {
        s.recovered_s = all[last + 1..].first().map(|a| a.t - first);
    }
    s
}

impl VariantPlan for Plan {
    fn metrics(&self) -> Vec<String> {
        [
            "connect_failures",
            "eaddrnotavail_count",
            "eaddrinuse_count",
            "other_errno_count",
            "attempts_count",
            "sessions_ok_count",
            "failure_pct",
            "tw_peak_count",
            "port_use_peak_pct",
            "ports_count",
            "recover_s",
            "exhaust_s",
        ]
        .map(str::to_owned)
        .to_vec()
    }

    fn run(&self, ctx: &RoundContext<'_>) -> Result<Measurement, RunError> {
        let (m, lateness) = self.path.round(ctx, |live| self.run_on(live, ctx))?;
        Ok(Measurement { lateness, ..m })
    }

    fn planned(&self) -> Duration {
        self.duration + self.recovery_window
    }

    fn describe(&self) -> String {
        let ports = u32::from(self.ports.1 - self.ports.0) + 1;
        format!(
            "{}; client ip_local_port_range {}-{} ({ports} ports), tcp_tw_reuse={}; {} clients, \
             {:.0} attempts/s for {:.1} s; {}{}",
            self.path.describe(),
            self.ports.0,
            self.ports.1,
            self.tw_reuse,
            self.clients,
            self.attempt_rate,
            self.duration.as_secs_f64(),
            if self.pooled {
                "pooled: one long-lived connection per client"
            } else {
                "a new connection per session, closed by the client"
            },
            if self.bind_first { ", bind() before connect()" } else { "" }
        )
    }
}

impl Plan {
    fn ports_count(&self) -> u32 {
        u32::from(self.ports.1 - self.ports.0) + 1
    }

    fn run_on(&self, live: &LivePath, ctx: &RoundContext<'_>) -> Result<Measurement, RunError> {
        let client = live.client();
        let range = format!("{} {}", self.ports.0, self.ports.1);
        client.set_sysctl("net.ipv4.ip_local_port_range", &range)?;
        client.set_sysctl("net.ipv4.tcp_tw_reuse", &self.tw_reuse.to_string())?;
        let mut notes = vec![format!(
            "client namespace read back: ip_local_port_range {}, tcp_tw_reuse {}, \
             tcp_max_tw_buckets {}, tcp_timestamps {}, tcp_tw_reuse_delay {} ms",
            client
                .sysctl("net.ipv4.ip_local_port_range")?
                .split_whitespace()
                .collect::<Vec<_>>()
                .join("-"),
            client.sysctl("net.ipv4.tcp_tw_reuse")?,
            client.sysctl("net.ipv4.tcp_max_tw_buckets")?,
            client.sysctl("net.ipv4.tcp_timestamps")?,
            client.sysctl("net.ipv4.tcp_tw_reuse_delay").unwrap_or_else(|_| "n/a".into()),
        )];
        let server = EchoServer::start(live, self.clients)?;
        let target = SocketAddrV4::new(live.server_addr(), server.port);
        let mut dumper = Dumper::in_netns(client.name())
            .map_err(|e| RunError::failed("open sock_diag in the client namespace", e))?;
        let ports = self.ports;
        let stop = AtomicBool::new(false);
        let samples: Mutex<Vec<PortSample>> = Mutex::new(Vec::new());
        let start = Instant::now();
        let outcome = client.run(|| {
            std::thread::scope(|s| {
                let sampler = s.spawn(|| {
                    sample_until(&mut dumper, ports, start, self.sample, &stop, &samples)
                });
                let storm = self.storm(target, start, ctx);
                let after = match &storm {
                    Ok(attempts) if attempts.iter().any(|a| a.outcome != Outcome::Ok) => {
                        self.look_for_recovery(target, start, ctx)
                    }
                    _ => Ok(Vec::new()),
                };
                stop.store(true, Ordering::Relaxed);
                let last = sampler.join();
                (storm, after, last)
            })
        })?;
        let (storm, after, last) = outcome;
        let storm = storm?;
        let after = after?;
        let tw_left = match last {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => return Err(e),
            Err(_) => return Err(RunError::panicked("sock_diag sampler", "thread panicked")),
        };
        let server_error = server.stop();
        if (ctx.stop_requested)() {
            return Err(RunError::Interrupted);
        }
        if let Some(e) = server_error {
            notes.push(format!("echo server: {e}"));
        }
        let samples = samples.into_inner().unwrap_or_else(|p| p.into_inner());
        let mut m = self.measurement(&storm, &after, &samples, tw_left, start.elapsed());
        m.notes.splice(0..0, notes);
        Ok(m)
    }

    /// The storm: every client on its own schedule, all together `attempt_rate` per second.
    fn storm(
        &self,
        target: SocketAddrV4,
        start: Instant,
        ctx: &RoundContext<'_>,
    ) -> Result<Vec<Attempt>, RunError> {
        let interval = Duration::from_secs_f64(self.clients as f64 / self.attempt_rate);
        let offset = interval / self.clients as u32;
        let results: Vec<Result<Vec<Attempt>, RunError>> = std::thread::scope(|s| {
            let threads: Vec<_> = (0..self.clients)
                .map(|i| {
                    s.spawn(move || {
                        let mut conn = None;
                        let mut attempts = Vec::new();
                        if self.pooled {
                            // The pool: one connection per client, opened before the storm.
                            // One that cannot be opened is a failure, and the client keeps
                            // its schedule, opening it again at its next attempt.
                            match self.connect(target, POOL_OPEN_TIMEOUT) {
                                Ok(c) => conn = Some(c),
                                Err(e) => attempts.push(Attempt {
                                    t: start.elapsed().as_secs_f64(),
                                    outcome: Outcome::Connect(e.raw_os_error().unwrap_or(0)),
                                }),
                            }
                        }
                        let mut due = offset * i as u32;
                        while due < self.duration {
                            if (ctx.stop_requested)() {
                                return Err(RunError::Interrupted);
                            }
                            let now = start.elapsed();
                            if due > now {
                                std::thread::sleep(due - now);
                            }
                            let t = start.elapsed().as_secs_f64();
                            let outcome = match (self.pooled, conn.as_mut()) {
                                (false, _) => self.session(target),
                                (true, Some(c)) => match exchange(c) {
                                    Ok(()) => Outcome::Ok,
                                    Err(_) => {
                                        // A broken pooled connection is replaced.
                                        conn = self.connect(target, CONNECT_TIMEOUT).ok();
                                        Outcome::Session
                                    }
                                },
                                // No pooled connection (it could not be opened or replaced):
                                // open it now, and keep it.
                                (true, None) => match self.connect(target, CONNECT_TIMEOUT) {
                                    Err(e) => Outcome::Connect(e.raw_os_error().unwrap_or(0)),
                                    Ok(mut c) => match exchange(&mut c) {
                                        Ok(()) => {
                                            conn = Some(c);
                                            Outcome::Ok
                                        }
                                        Err(_) => Outcome::Session,
                                    },
                                },
                            };
                            attempts.push(Attempt { t, outcome });
                            due += interval;
                            if i == 0 {
                                (ctx.progress)(
                                    (start.elapsed().as_secs_f64() / self.duration.as_secs_f64())
                                        .min(1.0),
                                );
                            }
                        }
                        Ok(attempts)
                    })
                })
                .collect();
            threads
                .into_iter()
                .map(|t| {
                    t.join().unwrap_or_else(|_| {
                        Err(RunError::panicked("reconnect-storm client", "thread panicked"))
                    })
                })
                .collect()
        });
        let mut all = Vec::new();
        for r in results {
            all.extend(r?);
        }
        all.sort_by(|a, b| a.t.total_cmp(&b.t));
        Ok(all)
    }

    /// After a storm with failures: one attempt every [`RECOVERY_STEP`] until one succeeds or
    /// `recovery_window` has passed.
    fn look_for_recovery(
        &self,
        target: SocketAddrV4,
        start: Instant,
        ctx: &RoundContext<'_>,
    ) -> Result<Vec<Attempt>, RunError> {
        let mut attempts = Vec::new();
        let end = self.duration + self.recovery_window;
        while start.elapsed() < end {
            if (ctx.stop_requested)() {
                return Err(RunError::Interrupted);
            }
            let t = start.elapsed().as_secs_f64();
            let outcome = self.session(target);
            attempts.push(Attempt { t, outcome });
            if outcome == Outcome::Ok {
                break;
            }
            std::thread::sleep(RECOVERY_STEP);
        }
        Ok(attempts)
    }

    /// A new connection (bound first when asked), with the session's socket options.
    fn connect(&self, target: SocketAddrV4, timeout: Duration) -> std::io::Result<TcpStream> {
        let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
        s.set_tcp_nodelay(true)?;
        if self.bind_first {
            s.bind(&SocketAddr::from((CLIENT_ADDR, 0)).into())?;
        }
        s.connect_timeout(&SocketAddr::V4(target).into(), timeout)?;
        s.set_read_timeout(Some(Duration::from_secs(1)))?;
        Ok(s.into())
    }

    /// One session on a new connection, closed by the client.
    fn session(&self, target: SocketAddrV4) -> Outcome {
        match self.connect(target, CONNECT_TIMEOUT) {
            Err(e) => Outcome::Connect(e.raw_os_error().unwrap_or(0)),
            Ok(mut c) => match exchange(&mut c) {
                Ok(()) => Outcome::Ok,
                Err(_) => Outcome::Session,
            },
        }
    }

    /// Metrics, series and notes from the round's attempts and samples; `tw_left` is the
    /// TIME_WAIT sockets' remaining lifetimes (s) at the last sample, `elapsed` the time from
    /// the storm's start to that sample.
    fn measurement(
        &self,
        storm: &[Attempt],
        after: &[Attempt],
        samples: &[PortSample],
        tw_left: Vec<f64>,
        elapsed: Duration,
    ) -> Measurement {
        let s = summarise(storm, after);
        let ports = self.ports_count();
        let mut m = Measurement::default();
        let failures = s.connect_failures();
        m.metric("connect_failures", failures as f64)
            .metric("eaddrnotavail_count", s.eaddrnotavail as f64)
            .metric("eaddrinuse_count", s.eaddrinuse as f64)
            .metric("other_errno_count", s.other_errno as f64)
            .metric("attempts_count", s.attempts as f64)
            .metric("sessions_ok_count", s.ok as f64)
            .metric(
                "failure_pct",
                if s.attempts == 0 {
                    0.0
                } else {
                    100.0 * (s.attempts - s.ok) as f64 / s.attempts as f64
                },
            )
            .metric("ports_count", f64::from(ports));
        let tw_peak = samples.iter().map(|p| p.time_wait).max().unwrap_or(0);
        let in_range_peak = samples.iter().map(|p| p.in_range).max().unwrap_or(0);
        m.metric("tw_peak_count", f64::from(tw_peak))
            .metric("port_use_peak_pct", 100.0 * f64::from(in_range_peak) / f64::from(ports));
        match s.exhaust_s {
            Some(t) => {
                m.metric("exhaust_s", t);
            }
            None => {
                m.not_measurable.insert(
                    "exhaust_s".into(),
                    "not measurable: no attempt failed, the range was not exhausted in this round"
                        .into(),
                );
            }
        }
        let first_failure = storm.iter().chain(after).find(|a| a.outcome != Outcome::Ok);
        let recover = match (first_failure, s.recovered_s) {
            (None, _) => 0.0,
            (Some(_), Some(r)) => {
                m.notes.push(format!(
                    "recovered within the run: the first attempt after the last failure \
                     succeeded {r:.2} s after the first failure"
                ));
                r
            }
            (Some(first), None) => {
                // No success by the end: the first port frees when the oldest TIME_WAIT
                // socket expires (its timer read with sock_diag at the last sample).
                let soonest = tw_left.iter().copied().fold(f64::INFINITY, f64::min);
                let horizon = if soonest.is_finite() { soonest } else { TIME_WAIT_S };
                let r = elapsed.as_secs_f64() + horizon - first.t;
                m.notes.push(format!(
                    "not recovered within the run ({} recovery attempt(s) after the storm \
                     failed): recover_s {r:.1} s is projected from the kernel's TIME_WAIT \
                     timers (the first port frees in {horizon:.1} s after the last sample; \
                     TIME_WAIT lasts {TIME_WAIT_S:.0} s on Linux, TCP_TIMEWAIT_LEN)",
                    after.len()
                ));
                r
            }
        };
        m.metric("recover_s", recover);
        m.series.push(Series::time(
            "time_wait",
            samples.iter().map(|p| [p.t, f64::from(p.time_wait)]).collect(),
        ));
        let mut failed = 0.0;
        let mut cumulative = vec![[0.0, 0.0]];
        for a in storm {
            if a.outcome != Outcome::Ok {
                failed += 1.0;
                cumulative.push([a.t, failed]);
            }
        }
        if let Some(last) = storm.last() {
            cumulative.push([last.t, failed]);
        }
        m.series.push(Series::time("failures", cumulative));
        let rate = s.attempts as f64 / self.duration.as_secs_f64();
        m.notes.push(format!(
            "{} attempts in {:.1} s ({rate:.0}/s offered {:.0}/s); {} ok, {} EADDRNOTAVAIL, \
             {} EADDRINUSE, {} other errno, {} failed after connecting",
            s.attempts,
            self.duration.as_secs_f64(),
            self.attempt_rate,
            s.ok,
            s.eaddrnotavail,
            s.eaddrinuse,
            s.other_errno,
            s.session_errors
        ));
        if self.tw_reuse == 2 {
            m.notes.push(
                "tcp_tw_reuse=2 (this kernel's default) reuses TIME_WAIT ports for loopback \
                 traffic only; this path's addresses are not loopback, so it acts as 0"
                    .into(),
            );
        }
        m
    }
}

/// One request and its reply on `c`.
fn exchange(c: &mut TcpStream) -> std::io::Result<()> {
    c.write_all(&[0x42; MESSAGE])?;
    let mut reply = [0u8; MESSAGE];
    c.read_exact(&mut reply)
}

/// Samples the client namespace until `stop`; returns the TIME_WAIT sockets' remaining
/// lifetimes (s) at the last sample.
fn sample_until(
    dumper: &mut Dumper,
    ports: (u16, u16),
    start: Instant,
    every: Duration,
    stop: &AtomicBool,
    samples: &Mutex<Vec<PortSample>>,
) -> Result<Vec<f64>, RunError> {
    let req = DumpRequest {
        states: wire::ALL_STATES,
        filter: None,
        ipv4: true,
        ipv6: false,
        attrs: wire::Attrs::NONE,
    };
    let mut next = Duration::ZERO;
    loop {
        let done = stop.load(Ordering::Relaxed);
        let t = start.elapsed().as_secs_f64();
        let mut sample = PortSample { t, ..PortSample::default() };
        let mut tw_left = Vec::new();
        dumper
            .dump(&req, |s| {
                if s.id.src != std::net::IpAddr::V4(CLIENT_ADDR) {
                    return;
                }
                if (ports.0..=ports.1).contains(&s.id.sport) {
                    sample.in_range += 1;
                }
                if TcpState::from_raw(s.state) == TcpState::TimeWait {
                    sample.time_wait += 1;
                    tw_left.push(f64::from(s.expires_ms) / 1e3);
                }
            })
            .map_err(|e| RunError::failed("sock_diag dump of the client namespace", e))?;
        samples.lock().unwrap_or_else(|p| p.into_inner()).push(sample);
        if done {
            return Ok(tw_left);
        }
        next += every;
        while start.elapsed() < next && !stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(5).min(every));
        }
    }
}

/// The echo server in the server namespace: `threads` threads each accept a connection and
/// answer every request on it until the client closes, then close (after the client, so the
/// client's side is the one in TIME_WAIT).
struct EchoServer {
    port: u16,
    listener: Arc<Socket>,
    threads: Vec<std::thread::JoinHandle<Option<String>>>,
    stop: Arc<AtomicBool>,
}

impl EchoServer {
    fn start(live: &LivePath, threads: usize) -> Result<EchoServer, RunError> {
        let addr = SocketAddr::from((live.server_addr(), 0));
        let listener = live
            .server()
            .run(|| -> std::io::Result<Socket> {
                let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
                s.set_reuse_address(true)?;
                s.bind(&addr.into())?;
                s.listen(4096)?;
                Ok(s)
            })?
            .map_err(|e| RunError::failed("echo server: listen in the server namespace", e))?;
        let port = listener
            .local_addr()
            .ok()
            .and_then(|a| a.as_socket())
            .map(|a| a.port())
            .ok_or_else(|| RunError::failed("echo server", "no local port"))?;
        let listener = Arc::new(listener);
        let stop = Arc::new(AtomicBool::new(false));
        let mut server = EchoServer { port, listener, threads: Vec::new(), stop };
        for _ in 0..threads {
            let (listener, stop) = (server.listener.clone(), server.stop.clone());
            let t = std::thread::Builder::new()
                .name("tcptail-echo".into())
                .spawn(move || serve(&listener, &stop))
                .map_err(|e| RunError::io("start an echo-server thread", e))?;
            server.threads.push(t);
        }
        Ok(server)
    }

    /// Stops the threads; the first error one of them hit, if any.
    fn stop(mut self) -> Option<String> {
        self.shutdown();
        let mut first = None;
        for t in self.threads.drain(..) {
            match t.join() {
                Ok(e) => first = first.or(e),
                Err(_) => first = first.or(Some("a thread panicked".into())),
            }
        }
        first
    }

    fn shutdown(&self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wakes threads blocked in accept() (Linux returns EINVAL on a shut-down listener).
        let _ = self.listener.shutdown(std::net::Shutdown::Both);
    }
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        self.shutdown();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn serve(listener: &Socket, stop: &AtomicBool) -> Option<String> {
    let mut buf = [0u8; MESSAGE];
    while !stop.load(Ordering::Relaxed) {
        let conn = match listener.accept() {
            Ok((c, _)) => c,
            Err(_) if stop.load(Ordering::Relaxed) => return None,
            Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => continue,
            Err(e) => return Some(format!("accept: {e}")),
        };
        let mut conn: TcpStream = conn.into();
        let _ = conn.set_nodelay(true);
        // A client that vanishes must not hold a server thread for long.
        let _ = conn.set_read_timeout(Some(Duration::from_secs(2)));
        // Until EOF (the client closed first; close after it) or an error.
        while conn.read_exact(&mut buf).is_ok() {
            if conn.write_all(&buf).is_err() || stop.load(Ordering::Relaxed) {
                break;
            }
        }
    }
    None
}

#[cfg(test)]
mod tests;
