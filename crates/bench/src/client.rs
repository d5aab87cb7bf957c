//! The benchmark client: a run over one or more connections.
//!
//! Given a checked [`BenchConfig`] (see [`crate::config`]), [`run`] opens
//! the connections (profile applied and verified before `connect`), performs the handshake that
//! makes the server apply the same profile and pin itself, warms up, then measures in closed
//! loop (back to back) or open loop (at a fixed rate, latency from each request's intended send
//! time). [`RunControl`] lets another thread stop a run early (Ctrl-C: the partial result is
//! still returned) and watch its progress.
//!
//! Invariants: nothing is measured before every connection has finished its warm-up; a result
//! always says what was asked (rate, placement, profile) next to what happened; a request that
//! never got an answer is counted ([`RawRun::unanswered`]) and kept in the percentiles as a
//! lower bound, never dropped (see [`crate::connection`]).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, OnceLock};
use std::time::{Duration, Instant};

use crate::attribution::{self, AttributedSample};
use crate::config::{BenchConfig, ConfigError, Load};
use crate::connection::{self, ConnectionOutcome, STOP_GRACE};
use crate::context::{
    ConnectionPlacement, ContextProbe, RunContext, common_value, describe_placement,
};
use crate::report::{BenchResult, RateReport, SampleRecord};
use crate::stats::LatencyHistogram;
use crate::watchdog::{Closer, Watchdog};

/// A run that failed: the step and the cause.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Connecting or handshaking failed.
    #[error("connection {connection} to {server}: {step}: {source}")]
    Connect {
        /// Connection index.
        connection: usize,
        /// Server address.
        server: SocketAddr,
        /// What was being done.
        step: &'static str,
        /// The cause.
        source: std::io::Error,
    },
    /// The server broke the protocol or the connection failed mid-run.
    #[error("connection {connection}: {message}")]
    Protocol {
        /// Connection index.
        connection: usize,
        /// What went wrong.
        message: String,
    },
}

/// Shared between a run and whoever watches it: a stop flag and a progress counter.
#[derive(Debug, Default)]
pub struct RunControl {
    stop: AtomicBool,
    completed: AtomicU64,
}

impl RunControl {
    /// A fresh control.
    pub fn new() -> Arc<RunControl> {
        Arc::new(RunControl::default())
    }
    /// Asks the run to stop; it returns what it measured so far.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }
    /// Whether a stop was asked for.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
    /// Measured requests completed so far (all connections).
    pub fn completed(&self) -> u64 {
        self.completed.load(Ordering::Relaxed)
    }
    pub(crate) fn add_completed(&self, n: u64) {
        self.completed.fetch_add(n, Ordering::Relaxed);
    }
}

/// Everything a run measured, before it is summarised; matrix runs merge these.
#[derive(Debug, Default)]
pub struct RawRun {
    /// Latency (closed loop: send to response; open loop: intended send to response).
    pub latency: LatencyHistogram,
    /// Open loop: actual send to response.
    pub service: LatencyHistogram,
    /// Open loop: how late each request was sent against its schedule.
    pub send_lateness: LatencyHistogram,
    /// Requests sent and answered in the measured part.
    pub requests: u64,
    /// Requests sent in the measured part.
    pub sent: u64,
    /// Requests of the measured part that got no response: sent and still waited for when
    /// their connection gave up or was stopped, or (open loop) due but never sent because the
    /// socket stayed full. Each is in `latency` at the time it had waited: a lower bound.
    pub unanswered: u64,
    /// Wall time of the measured part.
    pub elapsed: Duration,
    /// Achieved send rate (open loop), per second.
    pub achieved_rate: Option<f64>,
    /// Attribution inputs.
    pub attributed: Vec<AttributedSample>,
    /// Median cost of one kernel snapshot, ns, per connection that took snapshots.
    pub snapshot_costs_ns: Vec<f64>,
    /// Every sample, when asked for.
    pub samples: Vec<SampleRecord>,
    /// Per-connection handshake outcomes (client report, server welcome, CPUs seen).
    pub connections: Vec<ConnectionOutcome>,
    /// Runs merged one after another into this one (matrix rounds); 1 for a plain run.
    pub rounds: u32,
    /// Whether the run was stopped early.
    pub interrupted: bool,
    /// What went wrong on the way that the numbers alone do not say (a connection that gave
    /// up on its server, requests left unanswered at a stop).
    pub warnings: Vec<String>,
}

/// How two sets of measurements combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Combine {
    /// Side by side (connections of one run): rates add up, elapsed is the longest.
    Parallel,
    /// One after another (rounds of a matrix row): rates average, elapsed adds up.
    Sequential,
}

impl RawRun {
    /// Adds `other`'s measurements to these.
    pub fn absorb(&mut self, other: RawRun, how: Combine) {
        self.latency.merge(&other.latency);
        self.service.merge(&other.service);
        self.send_lateness.merge(&other.send_lateness);
        self.requests += other.requests;
        self.sent += other.sent;
        self.unanswered += other.unanswered;
        match how {
            Combine::Parallel => {
                self.elapsed = self.elapsed.max(other.elapsed);
                if let Some(rate) = other.achieved_rate {
                    *self.achieved_rate.get_or_insert(0.0) += rate;
                }
                self.rounds = self.rounds.max(other.rounds);
            }
            Combine::Sequential => {
                self.elapsed += other.elapsed;
                self.achieved_rate = match (self.achieved_rate, other.achieved_rate) {
                    (Some(a), Some(b)) => Some(
                        (a * self.rounds as f64 + b * other.rounds as f64)
                            / (self.rounds + other.rounds) as f64,
                    ),
                    (a, b) => a.or(b),
                };
                self.rounds += other.rounds;
            }
        }
        self.attributed.extend(other.attributed);
        self.snapshot_costs_ns.extend(other.snapshot_costs_ns);
        self.samples.extend(other.samples);
        self.connections.extend(other.connections);
        self.interrupted |= other.interrupted;
        self.warnings.extend(other.warnings);
    }
}

/// Runs the benchmark and returns its raw measurements.
pub fn run_raw(config: &BenchConfig, control: &RunControl) -> Result<RawRun, BenchError> {
    config.validate()?;
    let n = config.connections;
    let barrier = Arc::new(Barrier::new(n));
    let start: Arc<OnceLock<Instant>> = Arc::new(OnceLock::new());
    // Blocking receives (closed loop without spinning) wait without a kernel timer; the
    // watchdog enforces their response timeout and the stop grace (see `watchdog`).
    let blocking = !config.spin && matches!(config.load, Load::Closed);
    let tick = Watchdog::tick_for(config.response_timeout, connection::POLL_SLICE);
    let watchdog = Watchdog::new(tick);
    let outcomes: Vec<Result<RawRun, BenchError>> = std::thread::scope(|scope| {
        let _closer = Closer(&watchdog);
        if blocking {
            std::thread::Builder::new()
                .name("tcptail-watchdog".into())
                .spawn_scoped(scope, || watchdog.run(&|| control.stopped(), STOP_GRACE))
                .expect("spawning the watchdog thread");
        }
        let handles: Vec<_> = (0..n)
            .map(|index| {
                let barrier = Arc::clone(&barrier);
                let start = Arc::clone(&start);
                let watchdog = &watchdog;
                std::thread::Builder::new()
                    .name(format!("tcptail-client-{index}"))
                    .spawn_scoped(scope, move || {
                        let shared = connection::Shared {
                            control,
                            barrier: &barrier,
                            start: &start,
                            watchdog,
                        };
                        connection::run_connection(config, index, &shared)
                    })
                    .expect("spawning a client thread")
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("client thread panicked")).collect()
    });
    let mut raw = RawRun::default();
    for outcome in outcomes {
        raw.absorb(outcome?, Combine::Parallel);
    }
    raw.samples.sort_by_key(|s| s.intended_ns);
    raw.interrupted = control.stopped();
    Ok(raw)
}

/// Runs the benchmark and summarises it with its context.
pub fn run(config: &BenchConfig, control: &RunControl) -> Result<BenchResult, BenchError> {
    let probe = ContextProbe::start();
    let raw = run_raw(config, control)?;
    Ok(summarise(config, &raw, &probe))
}

/// Turns raw measurements into the reported result.
pub fn summarise(config: &BenchConfig, raw: &RawRun, probe: &ContextProbe) -> BenchResult {
    let mut context = probe.finish();
    let mut warnings = raw.warnings.clone();
    place(config, raw, &mut context, &mut warnings);
    let first = raw.connections.first();
    let attribution = (config.attribute && !raw.attributed.is_empty()).then(|| {
        attribution::attribute(
            &raw.attributed,
            raw.latency.quantile_nanos(0.99),
            tcptail_units::stats::median(&raw.snapshot_costs_ns).unwrap_or(0.0),
        )
    });
    let secs = raw.elapsed.as_secs_f64();
    let open = matches!(config.load, Load::Open { .. });
    BenchResult {
        mode: if open { "open".into() } else { "closed".into() },
        run_config: config.clone(),
        latency_us: raw.latency.summary(),
        service_us: open.then(|| raw.service.summary()).flatten(),
        send_lateness_us: open.then(|| raw.send_lateness.summary()).flatten(),
        histogram: raw.latency.buckets(10),
        requests: raw.requests,
        sent: raw.sent,
        unanswered: raw.unanswered,
        duration_seconds: secs,
        transactions_per_second: if secs > 0.0 { raw.requests as f64 / secs } else { 0.0 },
        rate_per_second: match config.load {
            Load::Closed => None,
            Load::Open { rate, .. } => {
                Some(RateReport { asked: rate, achieved: raw.achieved_rate })
            }
        },
        attribution,
        client_apply: first.map(|c| c.client_apply.clone()),
        server_apply: first.map(|c| c.welcome.apply.clone()),
        context,
        interrupted: raw.interrupted,
        warnings,
    }
}

/// Fills in where each connection's ends ran, the congestion control each socket had, and the
/// server's kernel; warns about a server that could not pin itself where asked.
fn place(config: &BenchConfig, raw: &RawRun, context: &mut RunContext, warnings: &mut Vec<String>) {
    let conns = &raw.connections;
    context.connections = conns
        .iter()
        .map(|c| ConnectionPlacement {
            client_cpus_seen: c.client_cpus_seen.clone(),
            server_cpu: c.welcome.server_cpu,
            server_cpu_requested: c.welcome.requested_cpu,
            server_pin_error: c.welcome.pinned.clone(),
            server_spin: c.welcome.spin,
            congestion_client: c.congestion.clone(),
            congestion_server: c.welcome.congestion.clone(),
        })
        .collect();
    let distinct = |cpus: &mut Vec<usize>| {
        cpus.sort_unstable();
        cpus.dedup();
    };
    let mut client_seen: Vec<usize> =
        conns.iter().flat_map(|c| c.client_cpus_seen.iter().copied()).collect();
    distinct(&mut client_seen);
    let mut server_seen: Vec<usize> = conns.iter().filter_map(|c| c.welcome.server_cpu).collect();
    distinct(&mut server_seen);
    context.client_cpu_pinned = config.client_cpu;
    context.client_cpus_seen = client_seen.clone();
    context.server_cpu = match server_seen.as_slice() {
        [one] if conns.iter().all(|c| c.welcome.server_cpu.is_some()) => Some(*one),
        _ => None,
    };
    context.server_cpus_seen = server_seen.clone();
    // The server may pin itself by its own default (`bench server --cpu`), unasked.
    let server_pinned = !conns.is_empty()
        && conns.iter().all(|c| c.welcome.requested_cpu.is_some() && c.welcome.pinned.is_none());
    context.placement = describe_placement(
        &client_seen,
        &server_seen,
        config.client_cpu.is_some() && server_pinned,
    );
    context.congestion_client = common_value(conns.iter().map(|c| c.congestion.as_deref()));
    context.congestion_server = common_value(conns.iter().map(|c| c.welcome.congestion.as_deref()));
    context.server_kernel = common_value(conns.iter().map(|c| Some(c.welcome.kernel.as_str())));
    // The server's policy refused part of the Hello (the table of server profile problems
    // says why); the numbers were measured without it.
    let refused: Vec<String> = conns
        .first()
        .map(|c| &c.welcome.apply.options[..])
        .unwrap_or_default()
        .iter()
        .filter(|o| o.outcome.is_policy_refusal())
        .map(|o| format!("{} {}", o.option, o.requested))
        .collect();
    if !refused.is_empty() {
        warnings.push(format!(
            "the server refused {}: refused: server policy (it must be started with --allow)",
            refused.join(", ")
        ));
    }
    for (i, c) in conns.iter().enumerate() {
        if let Some(error) = &c.welcome.pinned {
            warnings.push(format!(
                "connection {i}: the server did not run where asked: {error} (it ran on {})",
                c.welcome.server_cpu.map_or("an unknown CPU".into(), |cpu| format!("CPU {cpu}"))
            ));
        }
    }
    if let Some(wanted) = &config.profile.congestion {
        for (side, cc) in
            [("client", &context.congestion_client), ("server", &context.congestion_server)]
        {
            if cc.as_deref() != Some(wanted.as_str()) {
                warnings.push(format!(
                    "congestion control {wanted} was asked for, but the {side} socket runs {}",
                    cc.as_deref().unwrap_or("an unknown one")
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::Welcome;
    use tcptail_sock::{ApplyReport, Profile};

    fn outcome(client_cpu: usize, server_cpu: usize, cc: (&str, &str)) -> ConnectionOutcome {
        let apply = ApplyReport { profile: "test".into(), options: Vec::new() };
        ConnectionOutcome {
            client_apply: apply.clone(),
            welcome: Welcome {
                apply,
                congestion: Some(cc.1.into()),
                server_cpu: Some(server_cpu),
                requested_cpu: Some(server_cpu),
                pinned: None,
                spin: false,
                kernel: "6.18.0-server".into(),
                version: "test".into(),
                idle_timeout_seconds: None,
            },
            congestion: Some(cc.0.into()),
            client_cpus_seen: vec![client_cpu],
        }
    }

    fn config() -> BenchConfig {
        let profile = Profile { congestion: Some("bbr".into()), ..Profile::default() };
        let mut c = BenchConfig::new("127.0.0.1:9".parse().unwrap(), profile);
        c.connections = 2;
        c.client_cpu = Some(0);
        c.server_cpu = Some(1);
        c
    }

    #[test]
    fn every_connection_keeps_its_own_placement_and_problems_become_warnings() {
        let mut failed = outcome(0, 0, ("bbr", "cubic"));
        failed.welcome.requested_cpu = Some(1);
        failed.welcome.pinned = Some("pinning to CPU 1 failed: Invalid argument".into());
        let raw = RawRun {
            connections: vec![outcome(0, 1, ("bbr", "bbr")), failed],
            ..RawRun::default()
        };
        let result = summarise(&config(), &raw, &ContextProbe::start());
        let ctx = &result.context;
        assert_eq!(ctx.connections.len(), 2);
        assert_eq!(ctx.connections[1].server_cpu, Some(0));
        assert_eq!(ctx.connections[1].server_cpu_requested, Some(1));
        assert!(ctx.connections[1].server_pin_error.is_some());
        // The connections disagree: no single server CPU, both listed, no "same CPU" claim.
        assert_eq!((ctx.server_cpu, ctx.server_cpus_seen.clone()), (None, vec![0, 1]));
        // One server thread failed to pin, so the placement is not what was asked.
        assert_eq!(ctx.placement, "unpinned (client seen on [0], server on [0, 1])");
        assert_eq!(ctx.congestion_server.as_deref(), Some("bbr,cubic"));
        assert_eq!(ctx.congestion_client.as_deref(), Some("bbr"));
        assert_eq!(ctx.server_kernel.as_deref(), Some("6.18.0-server"));
        let warnings = result.warnings.join("\n");
        assert!(
            warnings.contains("connection 1: the server did not run where asked"),
            "{warnings}"
        );
        assert!(warnings.contains("it ran on CPU 0"), "{warnings}");
        assert!(warnings.contains("the server socket runs bbr,cubic"), "{warnings}");
        assert!(!warnings.contains("client socket"), "{warnings}");
    }

    #[test]
    fn agreeing_connections_report_one_placement() {
        let raw = RawRun {
            connections: vec![outcome(1, 1, ("bbr", "bbr")), outcome(1, 1, ("bbr", "bbr"))],
            ..RawRun::default()
        };
        let mut c = config();
        c.client_cpu = Some(1);
        let result = summarise(&c, &raw, &ContextProbe::start());
        assert_eq!(result.context.server_cpu, Some(1));
        assert_eq!(result.context.placement, "same CPU (1)");
        assert!(result.warnings.is_empty(), "{:?}", result.warnings);
    }
}
