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
//! built with [`tcptail_report::Series::cdf`] and [`tcptail_report::Series::time`]. What a round
//! sees and returns ([`RoundContext`], [`Measurement`], [`RunError`]) lives in [`crate::round`].
//!
//! Joint rounds: an engine whose variants must share one path and its events (several
//! connections through one blackhole) returns a [`JointPlan`] from [`Workload::joint`]; the
//! runner then runs one joint round per round instead of one round per variant, and each
//! variant gets one measurement per independent replica (e.g. one per connection).

use std::time::Duration;

use crate::params::{ParamError, Params};
use crate::round::{Measurement, RoundContext, RunError};

pub mod bloat;
pub mod bulk;
pub mod burst;
pub mod ecn;
pub mod flows;
pub mod idle;
pub mod keepalive;
pub mod ladder;
pub mod link_downgrade;
pub mod rcvbuf;
pub mod rr;
pub mod sendq;
pub mod short_flows;
pub mod split_write;
pub mod storm;
pub mod sysctl_claim;
#[cfg(test)]
mod test_support;

/// One variant, checked and ready to run.
pub trait VariantPlan: Send + Sync {
    /// Runs one round and measures it; removes everything it created before returning.
    fn run(&self, ctx: &RoundContext<'_>) -> Result<Measurement, RunError>;

    /// A one-line description of the setup for the report ("veth, open loop 1000/s, 64 B").
    fn describe(&self) -> String;

    /// How long one round takes by its plan: warm-up, measurement and the waits and drains the
    /// engine schedules, without building and removing the path (the runner adds that). The
    /// runner prints the sum over rounds and variants before it starts: a full mode takes hours.
    fn planned(&self) -> Duration;

    /// The metrics every successful round of this variant produces. The runner treats a round
    /// that lacks one as failed, so an engine cannot silently stop measuring something an
    /// experiment's table or rules read. Empty (the default) declares nothing.
    fn metrics(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Every variant of an experiment run together, in one round on one path.
pub trait JointPlan: Send + Sync {
    /// Runs one round of every variant at once; returns, per variant in the order given to
    /// [`Workload::joint`], its measurements: one per independent replica (at least one), each
    /// folded like a round of its own. Removes everything it created before returning.
    fn run(&self, ctx: &RoundContext<'_>) -> Result<Vec<Vec<Measurement>>, RunError>;

    /// How long one joint round takes by its plan, as [`VariantPlan::planned`].
    fn planned(&self) -> Duration;
}

/// A workload engine.
pub trait Workload: Sync {
    /// The name experiment files use.
    fn name(&self) -> &'static str;

    /// Checks a variant's parameters (reading a key marks it known; keys nobody reads are
    /// reported as unknown by the caller).
    fn plan(&self, params: &Params) -> Result<Box<dyn VariantPlan>, ParamError>;

    /// For an engine whose variants run together (see the [module docs](self)): the joint plan
    /// of every variant the mode runs (name and parameters, in file order), or the index of
    /// the variant at fault and its error. `None`, the default, runs each variant on its own.
    fn joint(
        &self,
        _variants: &[(&str, &Params)],
    ) -> Result<Option<Box<dyn JointPlan>>, (usize, ParamError)> {
        Ok(None)
    }
}

/// Every engine.
pub fn all() -> [&'static dyn Workload; 15] {
    [
        &rr::RequestResponse,
        &split_write::SplitWrite,
        &idle::IdleRestart,
        &ladder::TuningLadder,
        &sendq::SendQueue,
        &bulk::Bulk,
        &bloat::Bloat,
        &ecn::Ecn,
        &storm::ReconnectStorm,
        &keepalive::KeepaliveEngine,
        &short_flows::ShortFlows,
        &rcvbuf::Rcvbuf,
        &sysctl_claim::SysctlClaim,
        &burst::OrderBursts,
        &link_downgrade::LinkDowngrade,
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
