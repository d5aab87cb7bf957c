//! Latency statistics: an HDR histogram of nanoseconds and the summary every report prints.
//!
//! Pure code: values go in, percentiles come out. Nothing here reads a clock. The histogram
//! keeps 3 significant digits (0.1 % relative precision) over an auto-resizing range, so a
//! 10 µs median and a 30 ms outlier are both recorded faithfully; the summary states the
//! precision it was computed with.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use tcptail_units::stats::median;

/// Significant decimal digits kept by every latency histogram.
pub const SIGNIFICANT_DIGITS: u8 = 3;

/// A histogram of latencies in nanoseconds.
#[derive(Debug, Clone)]
pub struct LatencyHistogram {
    hist: Histogram<u64>,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    /// An empty histogram.
    pub fn new() -> Self {
        let mut hist = Histogram::new(SIGNIFICANT_DIGITS).expect("3 significant digits is valid");
        hist.auto(true);
        LatencyHistogram { hist }
    }

    /// Records one latency. Zero is recorded as 1 ns (the histogram's lowest value).
    pub fn record(&mut self, nanos: u64) {
        // Auto-resize is on, so recording cannot fail for any u64 below the hdrhistogram
        // ceiling (2^63); saturate there rather than dropping a sample.
        let value = nanos.clamp(1, i64::MAX as u64 / 2);
        self.hist.record(value).expect("auto-resizing histogram accepts every value");
    }

    /// Records `count` samples of one latency (as [`LatencyHistogram::record`]).
    pub fn record_n(&mut self, nanos: u64, count: u64) {
        let value = nanos.clamp(1, i64::MAX as u64 / 2);
        self.hist.record_n(value, count).expect("auto-resizing histogram accepts every value");
    }

    /// Adds every sample of `other`.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        self.hist.add(&other.hist).expect("auto-resizing histograms always merge");
    }

    /// The underlying HDR histogram (for serialisation).
    pub fn hdr(&self) -> &Histogram<u64> {
        &self.hist
    }

    /// Number of samples.
    pub fn len(&self) -> u64 {
        self.hist.len()
    }

    /// True when nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.hist.is_empty()
    }

    /// The latency at quantile `q` (0..=1), in nanoseconds.
    pub fn quantile_nanos(&self, q: f64) -> u64 {
        self.hist.value_at_quantile(q)
    }

    /// A 95 % interval for each reported percentile (see [`PercentileIntervals`]); `None`
    /// when there are no samples.
    pub fn percentile_intervals(&self) -> Option<PercentileIntervals> {
        let n = self.hist.len();
        if n == 0 {
            return None;
        }
        let confidence = PERCENTILE_CONFIDENCE;
        let mut unsupported = std::collections::BTreeMap::new();
        let mut at = |key: &str, q: f64| {
            let Some((l, u, coverage)) = interval_ranks(n, q, confidence) else {
                let needed = tcptail_units::stats::samples_needed(q, confidence);
                unsupported.insert(
                    key.to_string(),
                    format!(
                        "{n} samples cannot support it at {:.0} % confidence (an order-statistic \
                         interval needs at least {needed})",
                        confidence * 100.0
                    ),
                );
                return None;
            };
            // The value of the r-th smallest sample (HDR precision).
            let value =
                |rank: u64| self.hist.value_at_quantile(rank as f64 / n as f64) as f64 / 1000.0;
            Some(PercentileInterval { low: value(l), high: value(u), confidence: coverage })
        };
        let p50 = at("p50", 0.50);
        let p90 = at("p90", 0.90);
        let p95 = at("p95", 0.95);
        let p99 = at("p99", 0.99);
        let p999 = at("p999", 0.999);
        let p9999 = at("p9999", 0.9999);
        let method = if n <= EXACT_RANKS_UP_TO {
            "order statistics, exact binomial ranks"
        } else {
            "order statistics, normal approximation of the binomial ranks"
        };
        Some(PercentileIntervals {
            confidence,
            samples: n,
            method: method.to_string(),
            p50,
            p90,
            p95,
            p99,
            p999,
            p9999,
            unsupported,
        })
    }

    /// The summary reported for a run; `None` when there are no samples.
    pub fn summary(&self) -> Option<LatencySummary> {
        if self.hist.is_empty() {
            return None;
        }
        let us = |ns: u64| ns as f64 / 1000.0;
        let q = |x: f64| us(self.hist.value_at_quantile(x));
        Some(LatencySummary {
            count: self.hist.len(),
            significant_digits: self.hist.sigfig(),
            min: us(self.hist.min()),
            mean: self.hist.mean() / 1000.0,
            stddev: self.hist.stdev() / 1000.0,
            p50: q(0.50),
            p90: q(0.90),
            p95: q(0.95),
            p99: q(0.99),
            p999: q(0.999),
            p9999: q(0.9999),
            max: us(self.hist.max()),
        })
    }

    /// Log-spaced buckets (`per_decade` per factor of ten, anchored at 1 µs) with their
    /// counts, empty ones omitted: the histogram a person reads. Every sample lands in exactly
    /// one bucket.
    pub fn buckets(&self, per_decade: u32) -> Vec<Bucket> {
        let per_decade = per_decade.max(1) as f64;
        let mut counts: std::collections::BTreeMap<i64, u64> = std::collections::BTreeMap::new();
        for v in self.hist.iter_recorded() {
            let value_us = v.value_iterated_to() as f64 / 1000.0;
            let index = (value_us.log10() * per_decade).floor() as i64;
            *counts.entry(index).or_default() += v.count_at_value();
        }
        counts
            .into_iter()
            .map(|(index, count)| Bucket {
                low_us: 10f64.powf(index as f64 / per_decade),
                high_us: 10f64.powf((index + 1) as f64 / per_decade),
                count,
            })
            .collect()
    }
}

/// One bar of a latency histogram: `count` samples in `[low_us, high_us)`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Bucket {
    /// Lower bound, microseconds.
    pub low_us: f64,
    /// Upper bound (exclusive), microseconds.
    pub high_us: f64,
    /// Samples in the bucket.
    pub count: u64,
}

/// Confidence of [`LatencyHistogram::percentile_intervals`].
pub const PERCENTILE_CONFIDENCE: f64 = 0.95;
/// Up to this many samples the ranks come from the exact binomial
/// ([`tcptail_units::stats::quantile_ranks`]); above it, from its normal approximation, which
/// is then accurate to a fraction of a rank and costs nothing.
const EXACT_RANKS_UP_TO: u64 = 100_000;

/// A distribution-free confidence interval of one percentile, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PercentileInterval {
    /// Lower bound (an order statistic of the samples).
    pub low: f64,
    /// Upper bound.
    pub high: f64,
    /// The coverage the two order statistics have (at least the confidence asked for).
    pub confidence: f64,
}

/// `latency_us_ci`: a confidence interval for each reported percentile from the sample count
/// (order statistics: no assumption about the distribution). A percentile the count cannot
/// support is `null`, and `unsupported` says why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PercentileIntervals {
    /// The confidence asked for.
    pub confidence: f64,
    /// Samples the intervals are computed from.
    pub samples: u64,
    /// How the ranks were found.
    pub method: String,
    /// Median.
    pub p50: Option<PercentileInterval>,
    /// 90th percentile.
    pub p90: Option<PercentileInterval>,
    /// 95th percentile.
    pub p95: Option<PercentileInterval>,
    /// 99th percentile.
    pub p99: Option<PercentileInterval>,
    /// 99.9th percentile.
    pub p999: Option<PercentileInterval>,
    /// 99.99th percentile.
    pub p9999: Option<PercentileInterval>,
    /// Why a percentile is `null`, by its key.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub unsupported: std::collections::BTreeMap<String, String>,
}

/// The 1-based ranks of the order-statistic interval of the `q`-quantile of `n` samples:
/// exact up to [`EXACT_RANKS_UP_TO`], the binomial's normal approximation above (with the
/// same "not supported" rule: both ranks inside 1..=n).
fn interval_ranks(n: u64, q: f64, confidence: f64) -> Option<(u64, u64, f64)> {
    if n <= EXACT_RANKS_UP_TO {
        let (l, u, c) = tcptail_units::stats::quantile_ranks(n as usize, q, confidence)?;
        return Some((l as u64, u as u64, c));
    }
    if n < tcptail_units::stats::samples_needed(q, confidence) as u64 {
        return None;
    }
    // z for a two-sided 95 % (the only confidence reported); others fall back to 99.7 %-ish
    // conservatism through a larger z.
    let z = if (confidence - 0.95).abs() < 1e-9 { 1.959_964 } else { 3.0 };
    let (nf, sd) = (n as f64, (n as f64 * q * (1.0 - q)).sqrt());
    let l = (nf * q - z * sd).floor().max(1.0) as u64;
    let u = ((nf * q + z * sd).ceil() as u64 + 1).min(n);
    (l <= u).then_some((l, u, confidence))
}

/// The latency summary of a run, in microseconds, as scripts read it from `--json`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    /// Number of samples.
    pub count: u64,
    /// Significant decimal digits the histogram kept: every value is exact to within
    /// `10^-significant_digits` of itself.
    pub significant_digits: u8,
    /// Smallest sample.
    pub min: f64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Standard deviation.
    pub stddev: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// 99.99th percentile.
    pub p9999: f64,
    /// Largest sample.
    pub max: f64,
}

/// Spread of repeated measurements: median with min and max, for "median over rounds".
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// Median of the values.
    pub median: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
}

impl Spread {
    /// The spread of `values`; `None` when empty.
    pub fn of(values: &[f64]) -> Option<Spread> {
        let median = median(values)?;
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        Some(Spread { median, min, max })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentile_intervals_bracket_the_percentile_or_say_why_not() {
        let mut h = LatencyHistogram::new();
        for v in 1..=1000u64 {
            h.record(v * 1000);
        }
        let ci = h.percentile_intervals().unwrap();
        let p50 = ci.p50.unwrap();
        let s = h.summary().unwrap();
        assert!(p50.low <= s.p50 && s.p50 <= p50.high, "{p50:?}");
        assert!(p50.low > 450.0 && p50.high < 550.0, "{p50:?}");
        assert!(p50.confidence >= 0.95);
        assert!(ci.p99.is_some());
        // 1000 samples cannot bound p99.9 or p99.99 at 95 %.
        assert_eq!((ci.p999, ci.p9999), (None, None));
        assert!(ci.unsupported["p9999"].contains("needs at least"), "{:?}", ci.unsupported);
        // Above the exact range the approximation agrees with the exact ranks' width.
        let mut big = LatencyHistogram::new();
        for v in 0..200_000u64 {
            big.record(1000 + v % 1000);
        }
        let ci = big.percentile_intervals().unwrap();
        assert!(ci.method.contains("normal"));
        let p50 = ci.p50.unwrap();
        assert!(p50.low <= 1.5 && p50.high >= 1.5 && p50.high - p50.low < 0.02, "{p50:?}");
        assert!(ci.p9999.is_some());
    }
    use proptest::prelude::*;

    #[test]
    fn summary_of_uniform_microseconds() {
        let mut h = LatencyHistogram::new();
        for us in 1..=10_000u64 {
            h.record(us * 1000);
        }
        let s = h.summary().unwrap();
        assert_eq!(s.count, 10_000);
        assert_eq!(s.significant_digits, SIGNIFICANT_DIGITS);
        assert!((s.min - 1.0).abs() < 0.01);
        assert!((s.p50 - 5000.0).abs() / 5000.0 < 0.001, "{}", s.p50);
        assert!((s.p99 - 9900.0).abs() / 9900.0 < 0.001, "{}", s.p99);
        assert!((s.max - 10_000.0).abs() / 10_000.0 < 0.001);
        assert!((s.mean - 5000.5).abs() / 5000.5 < 0.001);
    }

    #[test]
    fn empty_has_no_summary() {
        assert!(LatencyHistogram::new().summary().is_none());
        assert!(LatencyHistogram::new().buckets(10).is_empty());
    }

    #[test]
    fn merge_adds_counts() {
        let mut a = LatencyHistogram::new();
        let mut b = LatencyHistogram::new();
        a.record(10_000);
        b.record(20_000);
        b.record(30_000);
        a.merge(&b);
        assert_eq!(a.len(), 3);
        assert!((a.summary().unwrap().max - 30.0).abs() < 0.05);
    }

    #[test]
    fn zero_and_huge_values_are_kept() {
        let mut h = LatencyHistogram::new();
        h.record(0);
        h.record(u64::MAX);
        assert_eq!(h.len(), 2);
    }

    #[test]
    fn median_and_spread() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[]), None);
        let s = Spread::of(&[5.0, 1.0, 3.0]).unwrap();
        assert_eq!((s.median, s.min, s.max), (3.0, 1.0, 5.0));
    }

    proptest! {
        #[test]
        fn percentiles_are_ordered_and_within_precision(
            values in prop::collection::vec(1u64..10_000_000_000, 1..2000)
        ) {
            let mut h = LatencyHistogram::new();
            for &v in &values { h.record(v); }
            let s = h.summary().unwrap();
            let chain = [s.min, s.p50, s.p90, s.p95, s.p99, s.p999, s.p9999, s.max];
            for w in chain.windows(2) { prop_assert!(w[0] <= w[1], "{chain:?}"); }
            let mut sorted = values.clone();
            sorted.sort_unstable();
            // The median matches an exact nearest-rank median within the histogram precision.
            let exact = sorted[((sorted.len() as f64 * 0.5).ceil() as usize).max(1) - 1] as f64;
            prop_assert!((s.p50 * 1000.0 - exact).abs() <= exact * 0.002 + 1.0,
                "p50 {} exact {}", s.p50 * 1000.0, exact);
            let total: u64 = h.buckets(10).iter().map(|b| b.count).sum();
            prop_assert_eq!(total, values.len() as u64);
        }
    }
}
