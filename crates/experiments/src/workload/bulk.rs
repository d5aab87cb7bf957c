//! The `bulk` workload (being written).

use crate::params::{ParamError, Params};
use crate::workload::{VariantPlan, Workload};

/// The `bulk` engine.
pub struct Bulk;

impl Workload for Bulk {
    fn name(&self) -> &'static str {
        "bulk"
    }

    fn plan(&self, _params: &Params) -> Result<Box<dyn VariantPlan>, ParamError> {
        Err(ParamError::new("workload", "the bulk engine is not written yet"))
    }
}
