//! The `tuning-ladder` workload (being written).

use crate::params::{ParamError, Params};
use crate::workload::{VariantPlan, Workload};

/// The `tuning-ladder` engine.
pub struct TuningLadder;

impl Workload for TuningLadder {
    fn name(&self) -> &'static str {
        "tuning-ladder"
    }

    fn plan(&self, _params: &Params) -> Result<Box<dyn VariantPlan>, ParamError> {
        Err(ParamError::new("workload", "the tuning-ladder engine is not written yet"))
    }
}
