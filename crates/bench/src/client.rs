//! The benchmark client: configuration, validation, and a run over one or more connections.
//!
//! [`BenchConfig`] is the checked form of everything the command line can say; [`run`] opens
//! the connections (profile applied and verified before `connect`), performs the handshake that
//! makes the server apply the same profile and pin itself, warms up, then measures in closed
//! loop (back to back) or open loop (at a fixed rate, latency from each request's intended send
//! time). [`RunControl`] lets another thread stop a run early (Ctrl-C: the partial result is
//! still returned) and watch its progress.
//!
//! Invariants: nothing is measured before every connection has finished its warm-up; a result
//! always says what was asked (rate, placement, profile) next to what happened.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, OnceLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tcptail_sock::Profile;
use tcptail_units::MessageRate;

use crate::attribution::{self, AttributedSample};
use crate::connection::{self, ConnectionOutcome};
use crate::context::{ContextProbe, describe_placement};
use crate::pacer::Spacing;
use crate::report::{BenchResult, RateReport, SampleRecord};
use crate::stats::LatencyHistogram;
use crate::{sys, wire};

/// How requests are issued.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "kebab-case")]
pub enum Load {
    /// Each request is sent as soon as the previous response arrived (netperf TCP_RR).
    Closed,
    /// Requests are sent at a fixed rate whatever the responses do.
    Open {
        /// Requests per second, over all connections.
        rate: f64,
        /// Constant or Poisson spacing.
        spacing: Spacing,
    },
}

/// When the measured part of a run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopAfter {
    /// After this long.
    Duration(#[serde(with = "crate::report::duration_secs")] Duration),
    /// After this many requests (over all connections).
    Count(u64),
}

/// A checked benchmark configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchConfig {
    /// The server's address.
    pub server: SocketAddr,
    /// The socket profile applied at both ends.
    pub profile: Profile,
    /// Request frame size in bytes (header included).
    pub request_len: u32,
    /// Response frame size in bytes (header included).
    pub reply_len: u32,
    /// Closed or open loop.
    pub load: Load,
    /// End of the measured part.
    pub stop: StopAfter,
    /// Unmeasured warm-up before it.
    pub warmup: StopAfter,
    /// Parallel connections, one thread each.
    pub connections: usize,
    /// Pin the client's threads to this CPU.
    pub client_cpu: Option<usize>,
    /// Ask the server to pin its connection threads to this CPU.
    pub server_cpu: Option<usize>,
    /// Busy-poll non-blocking sockets at both ends instead of sleeping in `recv`.
    pub spin: bool,
    /// Sample kernel state around each request and explain the tail.
    pub attribute: bool,
    /// Keep every sample for `--samples` (memory grows with the run).
    pub keep_samples: bool,
    /// Open loop: the pacer spins for this long before each send instead of trusting timers.
    #[serde(with = "crate::report::duration_secs")]
    pub spin_window: Duration,
    /// Seed for Poisson spacing.
    pub seed: u64,
}

impl BenchConfig {
    /// A closed-loop, 64/64-byte, 5-second configuration with the given profile.
    pub fn new(server: SocketAddr, profile: Profile) -> BenchConfig {
        BenchConfig {
            server,
            profile,
            request_len: 64,
            reply_len: 64,
            load: Load::Closed,
            stop: StopAfter::Duration(Duration::from_secs(5)),
            warmup: StopAfter::Duration(Duration::from_millis(500)),
            connections: 1,
            client_cpu: None,
            server_cpu: None,
            spin: false,
            attribute: false,
            keep_samples: false,
            spin_window: Duration::from_micros(200),
            seed: 1,
        }
    }

    /// Checks the configuration before any socket is opened.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let frame_range = wire::HEADER_LEN as u32..=wire::MAX_FRAME_LEN;
        for (flag, value) in [("--size", self.request_len), ("--response-size", self.reply_len)] {
            if !frame_range.contains(&value) {
                return Err(ConfigError::FrameSize {
                    flag,
                    value,
                    min: *frame_range.start(),
                    max: *frame_range.end(),
                });
            }
        }
        if self.connections == 0 || self.connections > 1024 {
            return Err(ConfigError::Connections(self.connections));
        }
        match self.stop {
            StopAfter::Duration(d) if d.is_zero() => return Err(ConfigError::EmptyRun),
            StopAfter::Count(0) => return Err(ConfigError::EmptyRun),
            StopAfter::Count(n) if n < self.connections as u64 => {
                return Err(ConfigError::CountBelowConnections(n, self.connections));
            }
            _ => {}
        }
        if let Load::Open { rate, .. } = self.load
            && MessageRate::per_second(rate).is_none()
        {
            return Err(ConfigError::Rate(rate));
        }
        if let Some(cpu) = self.client_cpu {
            let allowed = sys::allowed_cpus().unwrap_or_default();
            if !allowed.contains(&cpu) {
                return Err(ConfigError::Cpu { flag: "--cpu", cpu, allowed });
            }
        }
        Ok(())
    }
}

/// A configuration that cannot run, named by the flag at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// Request or response size outside the frame limits.
    #[error("{flag} {value}: must be between {min} and {max} bytes (the header alone is {min})")]
    FrameSize {
        /// The flag.
        flag: &'static str,
        /// The value given.
        value: u32,
        /// Smallest frame.
        min: u32,
        /// Largest frame.
        max: u32,
    },
    /// Zero or absurdly many connections.
    #[error("--connections {0}: must be between 1 and 1024")]
    Connections(usize),
    /// Zero duration or count.
    #[error("--duration/--count: the run would measure nothing")]
    EmptyRun,
    /// Fewer requests than connections.
    #[error("--count {0} is smaller than --connections {1}")]
    CountBelowConnections(u64, usize),
    /// Rate not positive.
    #[error("--rate {0}: must be a positive number of requests per second")]
    Rate(f64),
    /// A CPU this process may not use.
    #[error("{flag} {cpu}: not one of the CPUs this process may run on ({allowed:?})")]
    Cpu {
        /// The flag.
        flag: &'static str,
        /// The CPU asked for.
        cpu: usize,
        /// CPUs allowed.
        allowed: Vec<usize>,
    },
}

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
    /// Requests sent in the measured part (open loop may leave some unanswered at a stop).
    pub sent: u64,
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
    }
}

/// Runs the benchmark and returns its raw measurements.
pub fn run_raw(config: &BenchConfig, control: &RunControl) -> Result<RawRun, BenchError> {
    config.validate()?;
    let n = config.connections;
    let barrier = Arc::new(Barrier::new(n));
    let start: Arc<OnceLock<Instant>> = Arc::new(OnceLock::new());
    let outcomes: Vec<Result<RawRun, BenchError>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|index| {
                let barrier = Arc::clone(&barrier);
                let start = Arc::clone(&start);
                std::thread::Builder::new()
                    .name(format!("tcptail-client-{index}"))
                    .spawn_scoped(scope, move || {
                        connection::run_connection(config, index, control, &barrier, &start)
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
    let mut seen: Vec<usize> =
        raw.connections.iter().flat_map(|c| c.client_cpus_seen.iter().copied()).collect();
    seen.sort_unstable();
    seen.dedup();
    let first = raw.connections.first();
    context.client_cpu_pinned = config.client_cpu;
    context.client_cpus_seen = seen.clone();
    context.server_cpu = first.and_then(|c| c.welcome.server_cpu);
    context.placement = describe_placement(
        &seen,
        context.server_cpu,
        config.client_cpu.is_some() && config.server_cpu.is_some(),
    );
    context.congestion_client = first.and_then(|c| c.congestion.clone());
    context.congestion_server = first.and_then(|c| c.welcome.congestion.clone());
    let attribution = (config.attribute && !raw.attributed.is_empty()).then(|| {
        attribution::attribute(
            &raw.attributed,
            raw.latency.quantile_nanos(0.99),
            crate::stats::median(&raw.snapshot_costs_ns).unwrap_or(0.0),
        )
    });
    let secs = raw.elapsed.as_secs_f64();
    BenchResult {
        mode: match config.load {
            Load::Closed => "closed".into(),
            Load::Open { .. } => "open".into(),
        },
        run_config: config.clone(),
        latency_us: raw.latency.summary(),
        service_us: matches!(config.load, Load::Open { .. })
            .then(|| raw.service.summary())
            .flatten(),
        send_lateness_us: matches!(config.load, Load::Open { .. })
            .then(|| raw.send_lateness.summary())
            .flatten(),
        histogram: raw.latency.buckets(10),
        requests: raw.requests,
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
    }
}
