//! One variant over repeated rounds: medians of the per-round figures, with their spread.
//!
//! Each round is a fresh connection on the same emulated path; the figures the targets use are
//! the medians over rounds of each round's percentile (so one round disturbed by a busy CPU
//! does not decide), and the min-max of the per-round medians is kept beside them.

use serde::{Deserialize, Serialize};

use super::Variant;
use super::variant::{LatencySummary, VariantResult};

/// The smallest and largest per-round value.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Spread {
    /// Smallest round.
    pub min: f64,
    /// Largest round.
    pub max: f64,
}

impl Spread {
    fn of(xs: &[f64]) -> Spread {
        Spread {
            min: xs.iter().copied().fold(f64::INFINITY, f64::min),
            max: xs.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }
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
    pub from_start_ms: LatencySummary,
    /// Spread of the per-round medians from send start.
    pub from_start_p50_spread: Spread,
    /// Latency from the scheduled time, medians over rounds as above.
    pub from_schedule_ms: LatencySummary,
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
    pub runs: Vec<VariantResult>,
}

/// The median of `xs` (the mean of the middle two for an even count); NaN when empty.
pub fn median(xs: &[f64]) -> f64 {
    let mut s: Vec<f64> = xs.iter().copied().filter(|x| !x.is_nan()).collect();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

impl VariantSummary {
    /// Summarises the rounds of `variant` (at least one).
    pub fn of(variant: &Variant, runs: Vec<VariantResult>) -> VariantSummary {
        let per = |f: &dyn Fn(&VariantResult) -> f64| runs.iter().map(f).collect::<Vec<f64>>();
        let latency = |f: &dyn Fn(&VariantResult) -> LatencySummary| LatencySummary {
            count: runs.iter().map(|r| f(r).count).sum(),
            p50: median(&per(&|r| f(r).p50)),
            p90: median(&per(&|r| f(r).p90)),
            p99: median(&per(&|r| f(r).p99)),
            max: median(&per(&|r| f(r).max)),
        };
        VariantSummary {
            name: variant.name.clone(),
            variant: variant.clone(),
            rounds: runs.len(),
            from_start_ms: latency(&|r| r.from_start_ms),
            from_start_p50_spread: Spread::of(&per(&|r| r.from_start_ms.p50)),
            from_schedule_ms: latency(&|r| r.from_schedule_ms),
            from_schedule_p50_spread: Spread::of(&per(&|r| r.from_schedule_ms.p50)),
            goodput_mbps: median(&per(&|r| r.goodput_mbps)),
            goodput_spread: Spread::of(&per(&|r| r.goodput_mbps)),
            fraction_merged_or_dropped: median(&per(&|r| r.fraction_merged_or_dropped)),
            srtt_p50_ms: median(&per(&|r| r.srtt_p50_ms)),
            min_rtt_ms: per(&|r| r.min_rtt_ms).into_iter().fold(f64::NAN, f64::min),
            runs,
        }
    }

    /// Latencies from send start of every round's chunks, ms.
    pub fn from_start_samples(&self) -> Vec<f64> {
        self.runs.iter().flat_map(VariantResult::from_start_samples).collect()
    }

    /// Latencies from the scheduled time of every round's chunks, ms.
    pub fn from_schedule_samples(&self) -> Vec<f64> {
        self.runs.iter().flat_map(VariantResult::from_schedule_samples).collect()
    }

    /// The path's standing queue as this variant's congestion control kept it: median smoothed
    /// RTT minus the minimum RTT, ms.
    pub fn standing_queue_ms(&self) -> f64 {
        (self.srtt_p50_ms - self.min_rtt_ms).max(0.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_even_and_empty() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(&[]).is_nan());
        assert_eq!(Spread::of(&[2.0, 5.0, 1.0]), Spread { min: 1.0, max: 5.0 });
    }
}
