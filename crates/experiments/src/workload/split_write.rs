//! The `split-write` workload (being written).

use crate::params::{ParamError, Params};
use crate::workload::{VariantPlan, Workload};

/// The `split-write` engine.
pub struct SplitWrite;

impl Workload for SplitWrite {
    fn name(&self) -> &'static str {
        "split-write"
    }

    fn plan(&self, _params: &Params) -> Result<Box<dyn VariantPlan>, ParamError> {
        Err(ParamError::new("workload", "the split-write engine is not written yet"))
    }
}
