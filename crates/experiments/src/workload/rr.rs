//! The `request-response` workload (being written).

use crate::params::{ParamError, Params};
use crate::workload::{VariantPlan, Workload};

/// The `request-response` engine.
pub struct RequestResponse;

impl Workload for RequestResponse {
    fn name(&self) -> &'static str {
        "request-response"
    }

    fn plan(&self, _params: &Params) -> Result<Box<dyn VariantPlan>, ParamError> {
        Err(ParamError::new("workload", "the request-response engine is not written yet"))
    }
}
