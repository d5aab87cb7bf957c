//! One round's interface between the runner and a workload engine: the [`RoundContext`] a
//! round sees, the [`Measurement`] it returns and the [`RunError`] it fails with.
//!
//! These sit below [`crate::workload`], [`crate::path`] and [`crate::runner`], which all use
//! them; they use none of those.

use std::collections::BTreeMap;
use std::path::Path;

use tcptail_report::{Lateness, Series};

/// What one round of one variant measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Measurement {
    /// Named values (`p99_us`, `goodput_mbps`, ...).
    pub metrics: BTreeMap<String, f64>,
    /// Distributions and time series for plots.
    pub series: Vec<Series>,
    /// Remarks (e.g. "SO_BUSY_POLL accepted but veth has no NAPI queue to poll").
    pub notes: Vec<String>,
    /// The emulator's self-measured lateness, when the round used an emulated path.
    pub lateness: Option<Lateness>,
    /// Percentiles this round's sample count cannot support at the report's confidence, with
    /// why: they are "not measurable", never a number ([`Measurement::percentile`]).
    pub not_measurable: BTreeMap<String, String>,
}

impl Measurement {
    /// Sets a metric (builder style).
    pub fn metric(&mut self, name: &str, value: f64) -> &mut Measurement {
        self.metrics.insert(name.to_owned(), value);
        self
    }

    /// Sets the `q`-quantile metric `name` computed from `samples` samples, or records it as
    /// not measurable when that many samples have no order-statistic interval for it at
    /// [`tcptail_report::CONFIDENCE`] (p99.9 from 500 samples).
    pub fn percentile(&mut self, name: &str, q: f64, samples: usize, value: f64) -> &mut Self {
        let confidence = tcptail_report::CONFIDENCE;
        if tcptail_units::stats::quantile_measurable(samples, q, confidence) {
            return self.metric(name, value);
        }
        let needed = tcptail_units::stats::samples_needed(q, confidence);
        self.not_measurable.insert(
            name.to_owned(),
            format!(
                "not measurable: {samples} samples cannot support p{} at {:.0} % confidence \
                 (needs {needed})",
                q * 100.0,
                confidence * 100.0
            ),
        );
        self
    }
}

/// What a round can see of the run around it.
pub struct RoundContext<'a> {
    /// 0-based round number.
    pub round: usize,
    /// A seed for this round's random draws (differs per round, reproducible per run).
    pub seed: u64,
    /// A scratch directory for this variant and round (logs, traces), inside the run's
    /// output directory.
    pub scratch: &'a Path,
    /// True once the user asked the run to stop (Ctrl-C): long rounds should return early
    /// with an error.
    pub stop_requested: &'a (dyn Fn() -> bool + Sync),
    /// Reports progress within the round, 0.0..=1.0 (for the progress bar).
    pub progress: &'a (dyn Fn(f64) + Sync),
    /// When the path events of the round's emulated path(s) took effect: filled by
    /// [`crate::path::PathPlan::round`], read by the runner into `results.json`.
    pub path_events: &'a std::sync::Mutex<Vec<tcptail_report::PathEventRecord>>,
    /// Where the round's emulator, receive processing and endpoints ran, when the variant
    /// placed them (`emulator_cpu`): filled by [`crate::path::PathPlan::round`], read by the
    /// runner into `results.json`.
    pub placement: &'a std::sync::Mutex<Option<String>>,
}

/// A round that could not complete.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The run was asked to stop.
    #[error("interrupted")]
    Interrupted,
    /// This host cannot run the variant at all (e.g. an `isolcpus` step on a machine with no
    /// isolated CPU): why, from what the engine found. Not a failure; the runner records it
    /// once and does not repeat the variant.
    #[error("not applicable here: {0}")]
    NotApplicable(String),
    /// Namespaces, links or processes failed.
    #[error(transparent)]
    Netns(#[from] tcptail_netns::Error),
    /// A system call of the round failed (a socket, a file, a thread); the OS error is kept
    /// so a caller can look at its kind.
    #[error("{what}: {error:#}")]
    Io {
        /// What was being done.
        what: String,
        /// The operating system's error.
        error: std::io::Error,
    },
    /// A thread of the round panicked: a bug in the engine, not a property of the host.
    #[error("{what}: {message}")]
    Panicked {
        /// Which thread, or what it was doing.
        what: String,
        /// The panic's message, when it had one.
        message: String,
    },
    /// The round ran to its end but completed no request, so it has nothing to measure.
    #[error("{what}: {detail}")]
    NothingCompleted {
        /// The kind of round.
        what: &'static str,
        /// What did not complete.
        detail: &'static str,
    },
    /// The round's measurement lacks metrics its plan declared (see
    /// [`crate::workload::VariantPlan::metrics`]): a bug in the engine.
    #[error("the round's measurement: declared metric(s) missing or not finite: {}", .0.join(", "))]
    MissingMetrics(Vec<String>),
    /// Anything else, with what was being done.
    #[error("{what}: {detail}")]
    Failed {
        /// What was being done.
        what: String,
        /// The cause, in words.
        detail: String,
    },
}

impl RunError {
    /// A failure of `what`, from any error.
    pub fn failed(what: impl Into<String>, err: impl std::fmt::Display) -> RunError {
        RunError::Failed { what: what.into(), detail: format!("{err:#}") }
    }

    /// A failed system call while doing `what`.
    pub fn io(what: impl Into<String>, error: std::io::Error) -> RunError {
        RunError::Io { what: what.into(), error }
    }

    /// A thread of the round that panicked while doing `what`.
    pub fn panicked(what: impl Into<String>, message: impl Into<String>) -> RunError {
        RunError::Panicked { what: what.into(), message: message.into() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_failures_read_as_the_untyped_form_did() {
        let io = || std::io::Error::from_raw_os_error(libc::EADDRINUSE);
        assert_eq!(
            RunError::io("accept", io()).to_string(),
            RunError::failed("accept", io()).to_string()
        );
        assert_eq!(
            RunError::panicked("the round panicked", "engine bug").to_string(),
            RunError::failed("the round panicked", "engine bug").to_string()
        );
        let nothing = RunError::NothingCompleted {
            what: "split-write round",
            detail: "no request completed",
        };
        assert_eq!(nothing.to_string(), "split-write round: no request completed");
        assert_eq!(
            RunError::MissingMetrics(vec!["p99_us".into(), "p50_us".into()]).to_string(),
            "the round's measurement: declared metric(s) missing or not finite: p99_us, p50_us"
        );
    }
}
