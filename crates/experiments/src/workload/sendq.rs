//! The `sendq` workload (being written).

use crate::params::{ParamError, Params};
use crate::workload::{VariantPlan, Workload};

/// The `sendq` engine.
pub struct SendQueue;

impl Workload for SendQueue {
    fn name(&self) -> &'static str {
        "sendq"
    }

    fn plan(&self, _params: &Params) -> Result<Box<dyn VariantPlan>, ParamError> {
        Err(ParamError::new("workload", "the sendq engine is not written yet"))
    }
}
