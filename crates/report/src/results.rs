//! The `results.json` schema: every number of a `tcptail lab run`, and everything the report
//! needs to draw itself again from the file alone.
//!
//! ```json
//! {"run": {...}, "environment": {...},
//!  "experiments": [{"name", "seed", "claim", "verdict", "verdict_reason",
//!                   "variants": [{"name", "config", "metrics": {...}}], ...}]}
//! ```
//!
//! Metric names carry their unit as a suffix (`p99_us`, `goodput_mbps`, `burst_ms`,
//! `retrans_pct`); [`unit_of`] reads it. Every metric is kept per round and summarised by its
//! median, its spread (min and max over rounds) and a confidence interval of the median
//! (`ci`, with its `confidence`), because a single run of a latency experiment on a shared
//! 2-core machine says little. Each variant lists its rounds (`rounds`: which were faithful,
//! and why the others were excluded from its numbers), and each experiment the seed's
//! conditions beside the ones it ran (`conditions`) and whether its quick mode can decide its
//! verdict at the seed's effect size (`decidability`).
//!
//! Files written before `ci`, `confidence`, `rounds`, `conditions` and `decidability` existed
//! still read: the fields are then empty and the report says nothing about them.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use tcptail_units::stats;

/// The file name inside a run's output directory.
pub const RESULTS_FILE: &str = "results.json";
/// The report's file name inside a run's output directory.
pub const REPORT_FILE: &str = "index.html";

/// One `tcptail lab run`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Results {
    /// How and when the run was made.
    pub run: RunInfo,
    /// The machine it ran on.
    pub environment: Environment,
    /// One entry per experiment, in the order they were run.
    pub experiments: Vec<ExperimentResult>,
}

/// How and when a run was made.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct RunInfo {
    /// `tcptail` version that made the run.
    pub tool_version: String,
    /// `smoke`, `quick` or `full`.
    pub mode: String,
    /// Start, seconds since the Unix epoch.
    pub started_unix_s: u64,
    /// Wall-clock length of the run, seconds.
    pub duration_s: f64,
    /// True when the run was stopped (Ctrl-C) before every experiment finished; the file then
    /// holds what had finished.
    pub interrupted: bool,
    /// The command line, for reproduction.
    pub command: String,
}

/// The machine a run was made on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Environment {
    /// `uname -r`.
    pub kernel: String,
    /// Online CPUs.
    pub cpus: usize,
    /// The CPU's model name.
    pub cpu_model: String,
    /// `net.ipv4.tcp_available_congestion_control`.
    pub congestion_controls_available: Vec<String>,
    /// `net.ipv4.tcp_allowed_congestion_control` (what an unprivileged socket may pick).
    pub congestion_controls_allowed: Vec<String>,
    /// `net.ipv4.tcp_congestion_control`.
    pub default_congestion_control: String,
    /// Queueing disciplines `tc` could create on this kernel (probed in a scratch namespace).
    pub qdiscs: Vec<String>,
    /// Which emulator carried the emulated paths (`builtin` or `netem`).
    pub emulator: String,
    /// The built-in emulator's self-measured release lateness over the whole run.
    pub emulator_lateness: Option<Lateness>,
    /// Anything else worth knowing (CPU frequency governor, virtualisation, steal time...).
    pub notes: BTreeMap<String, String>,
}

/// The built-in emulator's self-measured release lateness.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Lateness {
    /// Worst p99 lateness of any emulated path, µs.
    pub worst_p99_us: f64,
    /// Worst single release, µs.
    pub max_us: f64,
    /// The p99 bound above which a path's results are marked.
    pub bound_us: f64,
    /// How many emulated paths exceeded the bound.
    pub flagged_paths: usize,
    /// How many emulated paths there were.
    pub paths: usize,
}

impl Lateness {
    /// Folds this path's figures into `total`, which starts empty.
    pub fn add_to(&self, total: &mut Option<Lateness>) {
        match total {
            Some(t) => t.merge(self),
            None => *total = Some(*self),
        }
    }

    /// Folds another path's figures into this summary.
    pub fn merge(&mut self, other: &Lateness) {
        self.worst_p99_us = self.worst_p99_us.max(other.worst_p99_us);
        self.max_us = self.max_us.max(other.max_us);
        self.bound_us = self.bound_us.max(other.bound_us);
        self.flagged_paths += other.flagged_paths;
        self.paths += other.paths;
    }
}

/// What the data says about a seed's claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// The claim holds here.
    Reproduced,
    /// Part of it holds, or it holds with a smaller effect.
    Partly,
    /// It does not hold here.
    NotReproduced,
    /// It cannot be tested here (the reason says why), or the experiment did not complete.
    NotApplicable,
    /// The data cannot decide at the stated confidence (too few faithful rounds, or an effect
    /// within the noise); the reason says what would decide it.
    Inconclusive,
}

impl Verdict {
    /// The name used in files and on screen.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Reproduced => "reproduced",
            Verdict::Partly => "partly",
            Verdict::NotReproduced => "not-reproduced",
            Verdict::NotApplicable => "not-applicable",
            Verdict::Inconclusive => "inconclusive",
        }
    }

    /// Every verdict, in the order a report lists them.
    pub const ALL: [Verdict; 5] = [
        Verdict::Reproduced,
        Verdict::Partly,
        Verdict::NotReproduced,
        Verdict::Inconclusive,
        Verdict::NotApplicable,
    ];

    /// Parses [`Verdict::as_str`]'s names.
    pub fn parse(s: &str) -> Option<Verdict> {
        Verdict::ALL.into_iter().find(|v| v.as_str() == s)
    }
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One experiment: a seed's claim, how it was tested, every variant's numbers and the verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExperimentResult {
    /// Short name (`trading-cc`), also the experiment file's stem.
    pub name: String,
    /// A one-line title.
    pub title: String,
    /// The seed document's file name (`000_195f82ea5b9a1f8f.txt`).
    pub seed: String,
    /// The claim, quoted from the seed.
    pub claim: String,
    /// The setup in prose: path, workload, variants, rounds.
    pub setup: String,
    /// What the data says.
    pub verdict: Verdict,
    /// Why, with the numbers the rule compared.
    pub verdict_reason: String,
    /// The rule that decided, as stated in the experiment file (`when: ...` or `otherwise`).
    pub verdict_rule: String,
    /// Every verdict rule in file order, evaluated on this run's values, the deciding one
    /// marked ([`RuleResult::fired`]).
    #[serde(default)]
    pub rules: Vec<RuleResult>,
    /// Observations decided from the data beside the verdict (e.g. "SO_BUSY_POLL changed
    /// nothing beyond the run-to-run spread").
    #[serde(default)]
    pub findings: Vec<FindingResult>,
    /// Rounds completed (variants are interleaved within each round).
    pub rounds: usize,
    /// One entry per variant, in the experiment file's order.
    pub variants: Vec<VariantResult>,
    /// The plots the experiment file asks for.
    pub plots: Vec<PlotSpec>,
    /// The metrics shown in the table, in order (empty: all).
    pub table: Vec<String>,
    /// Remarks: steps not applicable here and why, warnings about the data.
    pub notes: Vec<String>,
    /// The seed's conditions beside the ones this run used (rate, RTT, buffer, ...), as the
    /// experiment file states them; empty when it states none.
    #[serde(default)]
    pub conditions: Vec<SeedCondition>,
    /// Whether the quick mode can decide the verdict where the effect is as large as the seed
    /// says, and why; `None` in files written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decidability: Option<Decidability>,
    /// Set when the experiment failed or was interrupted; the variants hold what finished.
    pub error: Option<String>,
    /// The emulator's lateness on this experiment's emulated paths, if any.
    pub lateness: Option<Lateness>,
    /// Wall-clock seconds the experiment took.
    pub duration_s: f64,
}

/// One condition of the seed's setup beside the value this run used.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeedCondition {
    /// What it is (`rate`, `rtt`, `buffer`, `flows`).
    pub name: String,
    /// The seed's value, as the seed states it.
    pub seed: String,
    /// The value this run used.
    pub run: String,
    /// Whether they are the same.
    pub matches: bool,
    /// Why they differ, when they do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Whether an experiment's quick mode can decide its verdict where the effect is as large as
/// the seed says (its rounds and durations against the effect's size and the noise).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decidability {
    /// `yes`, `partly` or `no`.
    pub quick: QuickDecides,
    /// Why: the effect's size against the rounds' spread, what only full mode runs, what no
    /// mode of this machine can run.
    pub reason: String,
}

/// Whether quick mode can decide an experiment at the seed's effect size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum QuickDecides {
    /// Every part of the verdict.
    Yes,
    /// Some parts; the reason names the others.
    Partly,
    /// No part: only full mode (or a machine that can build the condition) decides.
    No,
}

impl QuickDecides {
    /// The name used in files and on screen.
    pub fn as_str(self) -> &'static str {
        match self {
            QuickDecides::Yes => "yes",
            QuickDecides::Partly => "partly",
            QuickDecides::No => "no",
        }
    }
}

/// What a condition came to on a run's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// It holds.
    Holds,
    /// It does not hold.
    Fails,
    /// A value it needs was not measured (or a division by zero).
    Unknown,
    /// The values are there but cannot decide it at the stated confidence.
    Undecided,
}

impl Outcome {
    /// The name used in files and on screen.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Holds => "holds",
            Outcome::Fails => "fails",
            Outcome::Unknown => "unknown",
            Outcome::Undecided => "undecided",
        }
    }
}

/// One verdict rule of an experiment file, evaluated.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RuleResult {
    /// The verdict the rule gives.
    pub verdict: Verdict,
    /// Its condition as written; `None` for the final rule (it applies otherwise).
    pub when: Option<String>,
    /// The condition with this run's values in place of every reference and expression, each
    /// comparison marked ✓, ✗ or ? (unknown): the thresholds the data was held against.
    pub evaluated: Option<String>,
    /// What the condition came to (the final rule always holds).
    pub outcome: Outcome,
    /// Whether this rule decided the verdict: the first that holds, or the first unknown one.
    pub fired: bool,
    /// Line of its `[[verdict]]` header.
    pub line: usize,
}

/// An observation an experiment file states as a condition on the data, with the text for
/// either outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FindingResult {
    /// What it is about.
    pub title: String,
    /// The condition as written.
    pub when: String,
    /// The condition on this run's values (see [`RuleResult::evaluated`]).
    pub evaluated: String,
    /// What it came to.
    pub outcome: Outcome,
    /// The file's text for that outcome, with the numbers filled in.
    pub text: String,
}

/// One variant of an experiment, over all rounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct VariantResult {
    /// Short name (`bbr`, `nodelay+rearm`).
    pub name: String,
    /// The parameters it ran with, after defaults, mode settings and overrides.
    pub config: BTreeMap<String, serde_json::Value>,
    /// Per-metric medians and spreads over rounds.
    pub metrics: BTreeMap<String, Metric>,
    /// Distributions and time series, for plots.
    pub series: Vec<Series>,
    /// Remarks about this variant (e.g. a lateness-flagged round).
    pub notes: Vec<String>,
    /// Set when this host cannot run the variant at all (e.g. no isolated CPU for an
    /// `isolcpus` step): why, as the engine found it. Such a variant has no metrics.
    #[serde(default)]
    pub not_applicable: Option<String>,
    /// The metrics its engine declares for every round (the runner fails a round that lacks
    /// one); empty when the engine declares none.
    #[serde(default)]
    pub expected_metrics: Vec<String>,
    /// Every round this variant ran, faithful or not; the metrics hold the faithful ones only.
    /// Empty in files written before rounds were listed.
    #[serde(default)]
    pub rounds: Vec<RoundRecord>,
}

/// One round of a variant: whether its numbers count, and why not when they do not.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoundRecord {
    /// 1-based round number.
    pub index: usize,
    /// Whether the path and the workload were as the experiment meant them; only faithful
    /// rounds enter the metrics.
    pub faithful: bool,
    /// Why the round was excluded (emulator lateness over the experiment's tolerance, a
    /// failed workload, ...); `None` for a faithful round.
    pub excluded_reason: Option<String>,
    /// The path events of the round's emulated path (`5s:blackhole`) and when each took
    /// effect; empty without events.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path_events: Vec<PathEventRecord>,
    /// Where the round's emulator, receive processing and endpoints ran, when its variant
    /// placed them (`emulator on CPU 1, receive processing on CPU 0, endpoints on CPU 0`);
    /// absent: wherever the scheduler put them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<String>,
}

/// A scheduled path event of one round and when it took effect on the emulator's clock.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathEventRecord {
    /// The event as written (`5s:blackhole`).
    pub event: String,
    /// Its scheduled time, seconds from the emulator's start.
    pub at_s: f64,
    /// When it had taken effect in both directions (the later of the two), seconds from the
    /// emulator's start; `None` when the round ended before its time.
    pub applied_s: Option<f64>,
}

impl VariantResult {
    /// The rounds excluded from the metrics.
    pub fn excluded_rounds(&self) -> impl Iterator<Item = &RoundRecord> {
        self.rounds.iter().filter(|r| !r.faithful)
    }
}

impl VariantResult {
    /// A metric's median over rounds (the value [`Metric::median`] holds; nothing computed).
    pub fn metric_median(&self, metric: &str) -> Option<f64> {
        self.metrics.get(metric).map(|m| m.median)
    }

    /// A series by name.
    pub fn series(&self, name: &str) -> Option<&Series> {
        self.series.iter().find(|s| s.name == name)
    }
}

/// One metric of one variant: a value per round, and their median and range.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Metric {
    /// Median over rounds.
    pub median: f64,
    /// Smallest round.
    pub min: f64,
    /// Largest round.
    pub max: f64,
    /// One value per completed round, in round order.
    pub values: Vec<f64>,
    /// The unit, from the name's suffix ([`unit_of`]).
    pub unit: String,
    /// A confidence interval of the median over rounds, `[low, high]`: the exact
    /// order-statistic interval at [`CONFIDENCE`] when the rounds support one (6 or more),
    /// otherwise the rounds' range with the smaller confidence it has; `None` for one round
    /// (or a file from before intervals).
    #[serde(default)]
    pub ci: Option<[f64; 2]>,
    /// The probability that `ci` holds the true median (exact).
    #[serde(default)]
    pub confidence: Option<f64>,
}

/// The confidence level intervals and verdict comparisons are stated at.
pub const CONFIDENCE: f64 = 0.95;

impl Metric {
    /// Summarises one value per round (non-finite values are dropped). `None` when no round
    /// produced a finite value.
    pub fn from_rounds(name: &str, values: &[f64]) -> Option<Metric> {
        let values: Vec<f64> = values.iter().copied().filter(|v| v.is_finite()).collect();
        if values.is_empty() {
            return None;
        }
        let median = stats::median(&values)?;
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let (ci, confidence) = match stats::interval_of_median(&values, CONFIDENCE) {
            Some(i) => (Some([i.low, i.high]), Some(i.confidence)),
            None if values.len() >= 2 => {
                (Some([min, max]), Some(stats::spread_confidence(values.len())))
            }
            None => (None, None),
        };
        Some(Metric { median, min, max, values, unit: unit_of(name).to_owned(), ci, confidence })
    }
}

/// The per-variant metric that carries the emulator's p99 release lateness of each round, in
/// µs (set by the runner on variants whose rounds used the built-in emulator).
pub const LATENESS_METRIC: &str = "emulator_lateness_p99_us";

/// The unit a metric's name declares by its suffix; empty when it has none.
pub fn unit_of(metric: &str) -> &'static str {
    const UNITS: [(&str, &str); 12] = [
        ("_us", "µs"),
        ("_ms", "ms"),
        ("_s", "s"),
        ("_mbps", "Mbit/s"),
        ("_gbps", "Gbit/s"),
        ("_pct", "%"),
        ("_bytes", "B"),
        ("_kb", "KB"),
        ("_pkts", "packets"),
        ("_count", ""),
        ("_per_s", "/s"),
        ("_ratio", "×"),
    ];
    UNITS.iter().find(|(suffix, _)| metric.ends_with(suffix)).map_or("", |(_, unit)| unit)
}

/// Points for a plot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Series {
    /// Name plots refer to (`latency_us`, `goodput_mbps`).
    pub name: String,
    /// What the points are.
    pub kind: SeriesKind,
    /// `[x, y]` pairs, x ascending.
    pub points: Vec<[f64; 2]>,
}

/// What a [`Series`]'s points are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SeriesKind {
    /// An empirical CDF: x is a value (in the name's unit), y the fraction of samples at or
    /// below it (0..=1).
    Cdf,
    /// A time series: x is seconds since the start of the measurement, y a value.
    Time,
}

/// Most points a [`Series`] keeps; a plot cannot show more.
pub const MAX_POINTS: usize = 400;

impl Series {
    /// The empirical CDF of `samples` (sorted in place), thinned to at most [`MAX_POINTS`]
    /// points that always include the minimum, the maximum and the tail above p99.
    /// Samples that are not finite are left out (JSON cannot hold them).
    pub fn cdf(name: impl Into<String>, samples: &mut [f64]) -> Series {
        let mut finite: Vec<f64>;
        let samples: &mut [f64] = if samples.iter().all(|v| v.is_finite()) {
            samples
        } else {
            finite = samples.iter().copied().filter(|v| v.is_finite()).collect();
            &mut finite
        };
        samples.sort_by(f64::total_cmp);
        let n = samples.len();
        let mut points = Vec::new();
        if n > 0 {
            // Evenly spaced ranks for the body, every rank for the last 1 % (up to a limit),
            // so the tail the report is about is drawn exactly.
            let tail_start = n.saturating_sub((n / 100).clamp(1, MAX_POINTS / 4));
            let body = (MAX_POINTS - (n - tail_start)).max(2);
            let step = (tail_start as f64 / body as f64).max(1.0);
            let mut r = 0.0;
            while (r as usize) < tail_start {
                let i = r as usize;
                points.push([samples[i], (i + 1) as f64 / n as f64]);
                r += step;
            }
            for (i, &v) in samples.iter().enumerate().skip(tail_start) {
                points.push([v, (i + 1) as f64 / n as f64]);
            }
        }
        Series { name: name.into(), kind: SeriesKind::Cdf, points }
    }

    /// A time series from `(seconds, value)` pairs, averaged into at most [`MAX_POINTS`]
    /// buckets.
    pub fn time(name: impl Into<String>, mut pairs: Vec<[f64; 2]>) -> Series {
        pairs.retain(|p| p[0].is_finite() && p[1].is_finite());
        pairs.sort_by(|a, b| a[0].total_cmp(&b[0]));
        let points = if pairs.len() <= MAX_POINTS {
            pairs
        } else {
            pairs
                .chunks(pairs.len().div_ceil(MAX_POINTS))
                .map(|c| {
                    let n = c.len() as f64;
                    [
                        c.iter().map(|p| p[0]).sum::<f64>() / n,
                        c.iter().map(|p| p[1]).sum::<f64>() / n,
                    ]
                })
                .collect()
        };
        Series { name: name.into(), kind: SeriesKind::Time, points }
    }

    /// Pools the CDFs of several rounds into one, each round weighing alike.
    ///
    /// A round's CDF is thinned unevenly ([`Series::cdf`] keeps every rank of the tail), so its
    /// points are not equally likely: each point stands for the samples between it and the
    /// point before, its step in `y`. Pooling therefore weighs every point by its step (divided
    /// by the number of rounds), sorts all points by value and accumulates; pooling the raw
    /// values instead would count the densely kept tail as a quarter of the distribution. The
    /// result is thinned like [`Series::cdf`]: evenly in `y` for the body, every point above
    /// 0.99, the extremes always.
    pub fn pool_cdfs(name: &str, rounds: &[&Series]) -> Series {
        let n = rounds.len() as f64;
        let mut weighted: Vec<(f64, f64)> = Vec::new();
        for s in rounds {
            let mut before = 0.0;
            for p in &s.points {
                if p[0].is_finite() && p[1].is_finite() {
                    weighted.push((p[0], (p[1] - before).max(0.0) / n));
                    before = p[1];
                }
            }
        }
        weighted.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut pooled: Vec<[f64; 2]> = Vec::with_capacity(weighted.len());
        let mut y = 0.0;
        for (x, w) in weighted {
            y += w;
            // Sums of steps carry rounding noise in the 17th digit, which JSON does not read
            // back exactly; twelve decimals are far finer than any plot.
            let y = (y * 1e12).round() / 1e12;
            match pooled.last_mut() {
                Some(last) if last[0] == x => last[1] = y,
                _ => pooled.push([x, y]),
            }
        }
        // Rounding can leave the last step a hair off 1.
        if let Some(last) = pooled.last_mut() {
            last[1] = 1.0;
        }
        Series { name: name.to_owned(), kind: SeriesKind::Cdf, points: thin_cdf(pooled) }
    }
}

/// Keeps at most about [`MAX_POINTS`] points of a CDF: the first, one per `1/body` step of
/// `y` in the body, every point above 0.99 (the last [`MAX_POINTS`]/4 of them at most), and
/// the last.
fn thin_cdf(points: Vec<[f64; 2]>) -> Vec<[f64; 2]> {
    if points.len() <= MAX_POINTS {
        return points;
    }
    let tail_start = points
        .iter()
        .position(|p| p[1] > 0.99)
        .unwrap_or(points.len())
        .max(points.len().saturating_sub(MAX_POINTS / 4));
    let body = (MAX_POINTS - (points.len() - tail_start)).max(2) as f64;
    let mut kept = Vec::with_capacity(MAX_POINTS + 1);
    let mut next_y = 0.0;
    for (i, p) in points.iter().enumerate() {
        if i == 0 || i >= tail_start || p[1] >= next_y {
            kept.push(*p);
            next_y = p[1] + 1.0 / body;
        }
    }
    kept
}

/// A plot an experiment file asks for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "kebab-case")]
pub enum PlotSpec {
    /// The ECDF of a [`SeriesKind::Cdf`] series, one line per variant.
    Ecdf {
        /// The series name.
        series: String,
        /// Plot title.
        title: String,
        /// Logarithmic value axis.
        #[serde(default)]
        log_x: bool,
    },
    /// A [`SeriesKind::Time`] series, one line per variant.
    Timeseries {
        /// The series name.
        series: String,
        /// Plot title.
        title: String,
    },
    /// Bars of metric medians with min–max whiskers, one group per variant.
    Bars {
        /// The metrics, one bar each per variant.
        metrics: Vec<String>,
        /// Plot title.
        title: String,
        /// Logarithmic value axis.
        #[serde(default)]
        log_y: bool,
    },
}

/// Errors reading or writing `results.json`.
#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    /// The file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a results file of this version.
    #[error("{path}: not a tcptail results file: {source}")]
    Parse {
        /// The file.
        path: String,
        /// Where and what.
        #[source]
        source: serde_json::Error,
    },
}

impl Results {
    /// Reads `results.json`.
    pub fn read(path: &Path) -> Result<Results, ResultsError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ResultsError::Io { path: path.display().to_string(), source })?;
        serde_json::from_str(&text)
            .map_err(|source| ResultsError::Parse { path: path.display().to_string(), source })
    }

    /// Writes `results.json` atomically (temporary file, then rename), so an interrupted run
    /// never leaves half a file.
    pub fn write(&self, path: &Path) -> Result<(), ResultsError> {
        let io = |source| ResultsError::Io { path: path.display().to_string(), source };
        let text = serde_json::to_string_pretty(self).expect("results serialise");
        crate::files::write_atomically(path, text.as_bytes(), 0o644).map_err(io)
    }
}

#[cfg(test)]
mod tests;
