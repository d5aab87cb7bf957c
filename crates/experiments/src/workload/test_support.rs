//! What the engines' tests share: parameters over an emulated path, and one real round.

use toml::Value;

use crate::params::Params;
use crate::round::{Measurement, RoundContext, RunError};
use crate::workload::VariantPlan;

/// Parameters for an emulated path of `rate` and `rtt`, then `pairs` (which may override).
pub(crate) fn emulated(rate: &str, rtt: &str, pairs: &[(&str, Value)]) -> Params {
    let mut all =
        vec![("path", Value::from("emulated")), ("rate", rate.into()), ("rtt", rtt.into())];
    all.extend(pairs.iter().cloned());
    Params::from_pairs(all)
}

/// Runs one round of `plan` with `seed` in a scratch directory. A real round needs root,
/// network namespaces, veth or TUN and tc: without them it fails with the reason.
pub(crate) fn run_once(plan: &dyn VariantPlan, seed: u64) -> Measurement {
    run_round(plan, seed).expect("a real round needs root, namespaces, veth/TUN and tc")
}

/// [`run_once`], returning the round's error instead of failing on it.
pub(crate) fn run_round(plan: &dyn VariantPlan, seed: u64) -> Result<Measurement, RunError> {
    let dir = tempfile::tempdir().expect("scratch directory");
    let ctx = RoundContext {
        round: 0,
        seed,
        scratch: dir.path(),
        stop_requested: &|| false,
        progress: &|_| {},
        path_events: &std::sync::Mutex::default(),
    };
    plan.run(&ctx)
}
