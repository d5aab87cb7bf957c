//! The `bloat` workload (being written).

use crate::params::{ParamError, Params};
use crate::workload::{VariantPlan, Workload};

/// The `bloat` engine.
pub struct Bloat;

impl Workload for Bloat {
    fn name(&self) -> &'static str {
        "bloat"
    }

    fn plan(&self, _params: &Params) -> Result<Box<dyn VariantPlan>, ParamError> {
        Err(ParamError::new("workload", "the bloat engine is not written yet"))
    }
}
