//! One variant over repeated rounds: medians of the per-round figures, with their spread.
//!
//! Each round is a fresh connection on the same emulated path; the figures the targets use are
//! the medians over rounds of each round's percentile (so one round disturbed by a busy CPU
//! does not decide), and the min-max of the per-round medians is kept beside them.

use serde::{Deserialize, Serialize};
use tcptail_bench::stats::Spread;
use tcptail_units::stats::median;

use super::Variant;
use super::variant::{ChunkLatency, SendqRound};

/// Median, smallest and largest per-round value (NaN when no round has a value).
fn spread(xs: &[f64]) -> Spread {
    Spread::of(xs).unwrap_or(Spread { median: f64::NAN, min: f64::NAN, max: f64::NAN })
}

/// A variant's figures over its rounds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VariantSummary {
    /// The variant's label.
    pub name: String,
    /// Its settings.
    pub variant: Variant,
    /// Rounds run.
    pub rounds: usize,
    /// Latency from send start: each percentile is the median over rounds of that round's.
    pub from_start_ms: ChunkLatency,
    /// Spread (median, min, max) of the per-round medians from send start.
    pub from_start_p50_spread: Spread,
    /// Latency from the scheduled time, medians over rounds as above.
    pub from_schedule_ms: ChunkLatency,
    /// Spread of the per-round medians from the scheduled time.
    pub from_schedule_p50_spread: Spread,
    /// Median goodput over rounds.
    pub goodput_mbps: f64,
    /// Spread of the goodput over rounds.
    pub goodput_spread: Spread,
    /// Median over rounds of the fraction of chunks merged or dropped.
    pub fraction_merged_or_dropped: f64,
    /// Median over rounds of the sending socket's median smoothed RTT, ms.
    pub srtt_p50_ms: f64,
    /// Smallest minimum RTT over rounds, ms.
    pub min_rtt_ms: f64,
    /// Every round, with its chunk records.
    pub runs: Vec<SendqRound>,
}

impl VariantSummary {
    /// Summarises the rounds of `variant` (at least one).
    pub fn of(variant: &Variant, runs: Vec<SendqRound>) -> VariantSummary {
        let per = |f: &dyn Fn(&SendqRound) -> f64| runs.iter().map(f).collect::<Vec<f64>>();
        // The shared median; NaN (JSON null) when no round has a value.
        let median_over_rounds = |xs: &[f64]| median(xs).unwrap_or(f64::NAN);
        let latency = |f: &dyn Fn(&SendqRound) -> ChunkLatency| ChunkLatency {
            count: runs.iter().map(|r| f(r).count).sum(),
            p50: median_over_rounds(&per(&|r| f(r).p50)),
            p90: median_over_rounds(&per(&|r| f(r).p90)),
            p99: median_over_rounds(&per(&|r| f(r).p99)),
            max: median_over_rounds(&per(&|r| f(r).max)),
        };
        VariantSummary {
            name: variant.name.clone(),
            variant: variant.clone(),
            rounds: runs.len(),
            from_start_ms: latency(&|r| r.from_start_ms),
            from_start_p50_spread: spread(&per(&|r| r.from_start_ms.p50)),
            from_schedule_ms: latency(&|r| r.from_schedule_ms),
            from_schedule_p50_spread: spread(&per(&|r| r.from_schedule_ms.p50)),
            goodput_mbps: median_over_rounds(&per(&|r| r.goodput_mbps)),
            goodput_spread: spread(&per(&|r| r.goodput_mbps)),
            fraction_merged_or_dropped: median_over_rounds(&per(&|r| r.fraction_merged_or_dropped)),
            srtt_p50_ms: median_over_rounds(&per(&|r| r.srtt_p50_ms)),
            min_rtt_ms: per(&|r| r.min_rtt_ms).into_iter().fold(f64::NAN, f64::min),
            runs,
        }
    }

    /// Latencies from send start of every round's chunks, ms.
    pub fn from_start_samples(&self) -> Vec<f64> {
        self.runs.iter().flat_map(SendqRound::from_start_samples).collect()
    }

    /// Latencies from the scheduled time of every round's chunks, ms.
    pub fn from_schedule_samples(&self) -> Vec<f64> {
        self.runs.iter().flat_map(SendqRound::from_schedule_samples).collect()
    }

    /// The path's standing queue as this variant's congestion control kept it: median smoothed
    /// RTT minus the minimum RTT, ms.
    pub fn standing_queue_ms(&self) -> f64 {
        (self.srtt_p50_ms - self.min_rtt_ms).max(0.0)
    }
}
