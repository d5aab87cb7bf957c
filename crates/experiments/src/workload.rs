//! Workload engines: what runs one variant for one round, and the registry that maps an
//! experiment file's `workload = "..."` to its engine.
//!
//! An engine first *checks* a variant's [`Params`] (before anything is created, so a bad file
//! fails in a second with the file, line and key), producing a [`VariantPlan`]; the runner
//! then calls [`VariantPlan::run`] once per round. A plan builds whatever it needs for the
//! round (namespaces, emulator, sockets, threads) and removes all of it before returning, on
//! success, error or panic.
//!
//! Metric names end in their unit (see [`tcptail_report::results::unit_of`]); series are
//! built with [`Series::cdf`] and [`Series::time`].

use std::collections::BTreeMap;
use std::path::Path;

use tcptail_report::{Lateness, Series};

use crate::params::{ParamError, Params};

pub mod bloat;
pub mod bulk;
pub mod flows;
pub mod idle;
pub mod ladder;
pub mod rr;
pub mod sendq;
pub mod split_write;
#[cfg(test)]
mod test_support;

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

/// One variant, checked and ready to run.
pub trait VariantPlan: Send + Sync {
    /// Runs one round and measures it; removes everything it created before returning.
    fn run(&self, ctx: &RoundContext<'_>) -> Result<Measurement, RunError>;

    /// A one-line description of the setup for the report ("veth, open loop 1000/s, 64 B").
    fn describe(&self) -> String;

    /// The metrics every successful round of this variant produces. The runner treats a round
    /// that lacks one as failed, so an engine cannot silently stop measuring something an
    /// experiment's table or rules read. Empty (the default) declares nothing.
    fn metrics(&self) -> Vec<String> {
        Vec::new()
    }
}

/// A workload engine.
pub trait Workload: Sync {
    /// The name experiment files use.
    fn name(&self) -> &'static str;

    /// Checks a variant's parameters (reading a key marks it known; keys nobody reads are
    /// reported as unknown by the caller).
    fn plan(&self, params: &Params) -> Result<Box<dyn VariantPlan>, ParamError>;
}

/// Every engine.
pub fn all() -> [&'static dyn Workload; 7] {
    [
        &rr::RequestResponse,
        &split_write::SplitWrite,
        &idle::IdleRestart,
        &ladder::TuningLadder,
        &sendq::SendQueue,
        &bulk::Bulk,
        &bloat::Bloat,
    ]
}

/// The engine named `name`.
pub fn by_name(name: &str) -> Option<&'static dyn Workload> {
    all().into_iter().find(|w| w.name() == name)
}

/// Checks `params` with the engine `workload` and rejects keys it did not read.
pub fn plan(workload: &dyn Workload, params: &Params) -> Result<Box<dyn VariantPlan>, ParamError> {
    let plan = workload.plan(params)?;
    if let Some(key) = params.unread().into_iter().next() {
        return Err(ParamError::new(
            &key,
            format!("unknown parameter for workload `{}`", workload.name()),
        ));
    }
    Ok(plan)
}
