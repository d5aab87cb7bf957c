//! The `idle-restart` workload (being written).

use crate::params::{ParamError, Params};
use crate::workload::{VariantPlan, Workload};

/// The `idle-restart` engine.
pub struct IdleRestart;

impl Workload for IdleRestart {
    fn name(&self) -> &'static str {
        "idle-restart"
    }

    fn plan(&self, _params: &Params) -> Result<Box<dyn VariantPlan>, ParamError> {
        Err(ParamError::new("workload", "the idle-restart engine is not written yet"))
    }
}
