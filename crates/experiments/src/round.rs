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
}

impl Measurement {
    /// Sets a metric (builder style).
    pub fn metric(&mut self, name: &str, value: f64) -> &mut Measurement {
        self.metrics.insert(name.to_owned(), value);
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
}
