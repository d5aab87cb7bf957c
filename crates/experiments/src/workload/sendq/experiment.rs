//! The send-queue experiment (SIGCOMM '24 poster) on an emulated path between two network
//! namespaces; needs root, `/dev/net/tun` and iproute2.
//!
//! The poster's setup: RTT 10 ms, 30 Mbit/s, 51,200-byte chunks every 10 ms (41 Mbit/s offered,
//! so the sender is always behind), each chunk stamped with its scheduled time and the time the
//! application handed it to the send path; the receiver records when each chunk is complete.
//! Sender and receiver are threads of this process with sockets opened inside the client and
//! server namespaces, so both read the same `CLOCK_MONOTONIC`.
//!
//! Latency "from send start" is measured alike for every variant: from the moment the
//! application calls [`BoundedSender::send_all`](tcptail_sendq::BoundedSender::send_all) with the
//! chunk, so the governor's waits and the kernel's (a blocking write into a full buffer) both
//! count; with freshness on, the chunk enters the send path (the freshness queue) at its
//! scheduled time, so both views coincide there.
//!
//! Each [`Variant`] runs on a fresh connection over one emulated path (built once per
//! bandwidth), [`SendqConfig::rounds`] times, interleaved (each round starts one variant
//! later). For each it reports latency from send start *and* from the chunk's scheduled time
//! (p50/p90/p99/max, medians over rounds with the spread of the per-round medians), goodput,
//! the fraction of chunks merged or dropped by the [`FreshnessQueue`](tcptail_sendq::FreshnessQueue),
//! and the path's standing queue (smoothed RTT minus minimum RTT). [`SendqReport::targets`]
//! checks the targets; [`plot`] draws the ECDF (the poster's Figure 3) and the
//! bandwidth sweep (its Figure 4) as SVG.
//!
//! [`run`] returns a serialisable [`SendqReport`]. Each bandwidth's path is a
//! [`LivePath`]; the run changes nothing outside the namespaces it
//! creates, which are removed on every exit path.

use std::io;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tcptail_emu::{DirectionSpec, PathSpec, QueueSpec};
use tcptail_lab::emulator::EmulatorOptions;
use tcptail_lab::path::LabError;
use tcptail_lab::{LivePath, PathShape};
use tcptail_units::{Bdp, BitRate};

use tcptail_sendq::governor::GovernorMode;

pub mod plot;
mod summary;
mod targets;
mod variant;

pub use summary::VariantSummary;
pub use targets::{BASELINES, CONTROLLED, GOODPUT_FLOOR, START_CUT, TargetCheck};
pub use variant::{ChunkLatency, ChunkRecord, SendqRound, run_variant};

/// Congestion control of the sending socket (set per socket with `TCP_CONGESTION`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Cc {
    /// CUBIC.
    Cubic,
    /// BBR.
    Bbr,
}

impl Cc {
    /// The kernel's name.
    pub fn name(self) -> &'static str {
        match self {
            Cc::Cubic => "cubic",
            Cc::Bbr => "bbr",
        }
    }
}

/// How the sender treats its socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Control {
    /// A governor mode (including no control with the autotuned buffer).
    Governed(GovernorMode),
    /// No control, and a send buffer so large (`SO_SNDBUFFORCE`, 64 MiB) that writes never
    /// block: the whole backlog waits in the socket.
    NeverBlocks,
}

/// One configuration of the sender.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Variant {
    /// A short label (`cubic/threshold-10ms+fresh`).
    pub name: String,
    /// Socket control.
    pub control: Control,
    /// Conflation and drop-stale in front of the socket.
    pub fresh: bool,
    /// Congestion control.
    pub cc: Cc,
}

impl Variant {
    /// A variant named after its settings.
    pub fn new(control: Control, fresh: bool, cc: Cc) -> Variant {
        let ctl = match control {
            Control::NeverBlocks => "no-control-never-blocks".to_owned(),
            Control::Governed(GovernorMode::NoControl) => "no-control".to_owned(),
            Control::Governed(GovernorMode::StaticLowat(b)) => format!("lowat-{}k", b / 1024),
            Control::Governed(GovernorMode::Threshold(t)) => {
                format!("threshold-{}ms", t.as_millis())
            }
            Control::Governed(GovernorMode::AdaptiveLowat(t)) => {
                format!("adaptive-{}ms", t.as_millis())
            }
        };
        let fresh_tag = if fresh { "+fresh" } else { "" };
        Variant { name: format!("{}/{ctl}{fresh_tag}", cc.name()), control, fresh, cc }
    }
}

/// The experiment's parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SendqConfig {
    /// Bottleneck rate, both directions.
    pub rate: BitRate,
    /// Base round-trip time (half each way).
    pub rtt: Duration,
    /// Bytes per chunk.
    pub chunk_bytes: usize,
    /// Time between chunks.
    pub interval: Duration,
    /// Chunks per variant and round.
    pub chunks: usize,
    /// Rounds: every variant runs once per round, interleaved.
    pub rounds: usize,
    /// Age past which a chunk is dropped in the fresh variants (default 2 x interval).
    pub max_age: Duration,
    /// The variants, run in order on the main path.
    pub variants: Vec<Variant>,
    /// Bandwidths of the sweep (each runs `sweep_variants`); empty for none.
    pub sweep_rates: Vec<BitRate>,
    /// The variants of the sweep.
    pub sweep_variants: Vec<Variant>,
    /// Emulator seed.
    pub seed: u64,
}

const MS: Duration = Duration::from_millis(1);

impl SendqConfig {
    /// The CI subset, CUBIC and BBR: both "no control" baselines (autotuned buffer, a buffer
    /// that never blocks), threshold and adaptive LOWAT at 10 ms, each of those with
    /// freshness; 100 chunks (the poster's 250 ms "No Thresh" median fits 100 chunks, not the
    /// 50 it states), 3 rounds, no sweep. About a minute.
    pub fn quick() -> SendqConfig {
        let mut variants = Vec::new();
        for cc in [Cc::Cubic, Cc::Bbr] {
            for (control, fresh) in [
                (Control::Governed(GovernorMode::NoControl), false),
                (Control::NeverBlocks, false),
                (Control::Governed(GovernorMode::Threshold(10 * MS)), false),
                (Control::Governed(GovernorMode::AdaptiveLowat(10 * MS)), false),
                (Control::Governed(GovernorMode::Threshold(10 * MS)), true),
                (Control::Governed(GovernorMode::AdaptiveLowat(10 * MS)), true),
            ] {
                variants.push(Variant::new(control, fresh, cc));
            }
        }
        SendqConfig {
            rate: BitRate(30_000_000),
            rtt: 10 * MS,
            chunk_bytes: 51_200,
            interval: 10 * MS,
            chunks: 100,
            rounds: 3,
            max_age: 20 * MS,
            variants,
            sweep_rates: Vec::new(),
            sweep_variants: Vec::new(),
            seed: 1,
        }
    }

    /// Every variant of the issue (no control, never-blocking buffer, static LOWAT 16/64 KB,
    /// threshold and adaptive LOWAT at 5/10/20/30 ms; each without and with freshness; CUBIC
    /// and BBR) and the 10-50 Mbit/s sweep of both baselines, threshold 10 ms and adaptive
    /// 10 ms, for both congestion controls.
    pub fn full() -> SendqConfig {
        let mut controls = vec![
            Control::Governed(GovernorMode::NoControl),
            Control::NeverBlocks,
            Control::Governed(GovernorMode::StaticLowat(16 * 1024)),
            Control::Governed(GovernorMode::StaticLowat(64 * 1024)),
        ];
        for t in [5, 10, 20, 30] {
            controls.push(Control::Governed(GovernorMode::Threshold(t * MS)));
        }
        for t in [5, 10, 20, 30] {
            controls.push(Control::Governed(GovernorMode::AdaptiveLowat(t * MS)));
        }
        let mut variants = Vec::new();
        for cc in [Cc::Cubic, Cc::Bbr] {
            for fresh in [false, true] {
                for &c in &controls {
                    variants.push(Variant::new(c, fresh, cc));
                }
            }
        }
        let mut sweep_variants = Vec::new();
        for cc in [Cc::Cubic, Cc::Bbr] {
            for c in [
                Control::Governed(GovernorMode::NoControl),
                Control::NeverBlocks,
                Control::Governed(GovernorMode::Threshold(10 * MS)),
                Control::Governed(GovernorMode::AdaptiveLowat(10 * MS)),
            ] {
                sweep_variants.push(Variant::new(c, false, cc));
            }
        }
        SendqConfig {
            variants,
            sweep_rates: [10, 20, 40, 50].map(|m| BitRate(m * 1_000_000)).to_vec(),
            sweep_variants,
            ..SendqConfig::quick()
        }
    }

    /// The emulated path at `rate`: `rtt / 2` each way, a drop-tail queue of one BDP.
    pub fn path(&self, rate: BitRate) -> PathSpec {
        let queue = QueueSpec::default_for(Bdp { rate, rtt: self.rtt });
        PathSpec::symmetric(DirectionSpec::constant(rate, self.rtt / 2, queue))
    }

    /// Checks the parameters.
    pub fn validate(&self) -> Result<(), ExperimentError> {
        let bad = |what: &str| Err(ExperimentError::Config(what.to_owned()));
        if self.chunk_bytes < variant::HEADER_BYTES {
            return bad("chunk_bytes is smaller than the 32-byte chunk header");
        }
        if self.chunks == 0
            || self.rounds == 0
            || self.interval.is_zero()
            || self.rtt.is_zero()
            || self.rate.0 == 0
        {
            return bad("chunks, rounds, interval, rtt and rate must be positive");
        }
        Ok(())
    }
}

/// Results at one bandwidth.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RateResults {
    /// Bottleneck rate, bit/s.
    pub rate_bps: u64,
    /// One entry per variant, in order.
    pub variants: Vec<VariantSummary>,
    /// The emulator's p99 release lateness, µs.
    pub emulator_lateness_p99_us: f64,
    /// Set when the emulator was too late to trust the timing.
    pub emulator_lateness_flag: Option<String>,
}

/// The whole experiment's outcome.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SendqReport {
    /// The parameters.
    pub config: SendqConfig,
    /// At the configured rate.
    pub main: RateResults,
    /// The bandwidth sweep (the main rate is not repeated in it).
    pub sweep: Vec<RateResults>,
}

impl SendqReport {
    /// A variant of the main run by name.
    pub fn variant(&self, name: &str) -> Option<&VariantSummary> {
        self.main.variants.iter().find(|v| v.name == name)
    }
}

/// Why the experiment could not run.
#[derive(Debug, thiserror::Error)]
pub enum ExperimentError {
    /// A parameter is out of range.
    #[error("invalid sendq configuration: {0}")]
    Config(String),
    /// Building or entering the namespaces failed (not root? no iproute2?).
    #[error("lab namespaces: {0}")]
    Netns(#[from] tcptail_netns::Error),
    /// The emulated path could not be built (the emulator failed to start, say).
    #[error(transparent)]
    Lab(LabError),
    /// A socket operation failed.
    #[error("{what}: {source}")]
    Io {
        /// The operation.
        what: String,
        /// The cause.
        source: io::Error,
    },
}

impl From<LabError> for ExperimentError {
    fn from(e: LabError) -> ExperimentError {
        match e {
            LabError::Netns(e) => ExperimentError::Netns(*e),
            e => ExperimentError::Lab(e),
        }
    }
}

pub(crate) fn io_err(what: impl Into<String>) -> impl FnOnce(io::Error) -> ExperimentError {
    let what = what.into();
    move |source| ExperimentError::Io { what, source }
}

/// Runs `variants` on one emulated path at `rate`.
fn run_at(
    config: &SendqConfig,
    rate: BitRate,
    variants: &[Variant],
    progress: &mut dyn FnMut(&str),
) -> Result<RateResults, ExperimentError> {
    let options = EmulatorOptions { seed: config.seed, ..EmulatorOptions::default() };
    let live = LivePath::builder(PathShape::Emulated(config.path(rate)))
        .roles("sqc", "sqr", "sqs")
        .emulator(options)
        .start()?;
    let mut runs: Vec<Vec<SendqRound>> = vec![Vec::new(); variants.len()];
    let outcome = (|| -> Result<(), ExperimentError> {
        for round in 0..config.rounds {
            for k in 0..variants.len() {
                // Interleaved: each round starts one variant later.
                let i = (k + round) % variants.len();
                let v = &variants[i];
                progress(&format!(
                    "{} Mbit/s {} round {}/{}",
                    rate.0 / 1_000_000,
                    v.name,
                    round + 1,
                    config.rounds
                ));
                runs[i].push(variant::run_variant(&live, config, v)?);
                // Let the path's queues empty before the next connection.
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        Ok(())
    })();
    let report = live.stop().emulator.ok_or(ExperimentError::Lab(LabError::NoTunPair))?;
    outcome?;
    Ok(RateResults {
        rate_bps: rate.0,
        variants: variants.iter().zip(runs).map(|(v, r)| VariantSummary::of(v, r)).collect(),
        emulator_lateness_p99_us: report.lateness.p99_us,
        emulator_lateness_flag: report.lateness_flag,
    })
}

/// Runs the experiment; `progress` gets a line per variant.
pub fn run(
    config: &SendqConfig,
    progress: &mut dyn FnMut(&str),
) -> Result<SendqReport, ExperimentError> {
    config.validate()?;
    tcptail_netns::ensure_root()?;
    let main = run_at(config, config.rate, &config.variants, progress)?;
    let mut sweep = Vec::new();
    for &rate in &config.sweep_rates {
        sweep.push(run_at(config, rate, &config.sweep_variants, progress)?);
    }
    Ok(SendqReport { config: config.clone(), main, sweep })
}

#[cfg(test)]
mod tests;
