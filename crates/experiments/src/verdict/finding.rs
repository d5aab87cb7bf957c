//! Findings: observations an experiment file states as conditions on the data, beside the
//! verdict. Where a verdict answers "does the seed's claim hold here", a finding answers a
//! narrower question the data can settle, such as whether `SO_BUSY_POLL` changed anything
//! beyond the run-to-run spread, so that the report says it from the measurements rather than
//! from an expectation written in advance.
//!
//! ```toml
//! [[finding]]
//! title = "SO_BUSY_POLL on veth"
//! when = "busy_poll.mean_us.max >= same_cpu.mean_us.min and busy_poll.mean_us.min <= same_cpu.mean_us.max"
//! then = "no effect beyond the spread: {busy_poll.mean_us} vs {same_cpu.mean_us} µs"
//! otherwise = "SO_BUSY_POLL moved the mean beyond the spread: {busy_poll.mean_us} vs {same_cpu.mean_us} µs"
//! ```
//!
//! The condition language and templates are the verdict rules' (see [the parent module](super)).
//! An unknown condition gives neither text but says what was not measured.

use tcptail_report::FindingResult;

use super::{Piece, RuleError, Values, condition::Cond, dedup, fill, join_and, parse_condition};
use super::{outcome, parse_template};
use crate::spec::FindingSpec;

/// A compiled finding.
#[derive(Debug, Clone, PartialEq)]
pub struct FindingRule {
    title: String,
    when: String,
    cond: Cond,
    then: Vec<Piece>,
    otherwise: Vec<Piece>,
}

impl FindingRule {
    /// Compiles a finding, checking that every reference names one of `variants`.
    pub fn compile(spec: &FindingSpec, variants: &[&str]) -> Result<FindingRule, RuleError> {
        Ok(FindingRule {
            title: spec.title.clone(),
            when: spec.when.clone(),
            cond: parse_condition(&spec.when, variants)?,
            then: parse_template(&spec.then, variants, "then")?,
            otherwise: parse_template(&spec.otherwise, variants, "otherwise")?,
        })
    }

    /// The finding on `values`: the `then` or `otherwise` text, or what was missing.
    pub fn evaluate(&self, values: &dyn Values) -> FindingResult {
        let held = self.cond.eval(values);
        let text = match &held {
            Ok(true) => fill(&self.then, values),
            Ok(false) => fill(&self.otherwise, values),
            Err(unknown) => {
                let missing: Vec<String> = dedup(unknown.0.iter().map(|r| r.to_string()).collect());
                if missing.is_empty() {
                    "not decided: the condition divides by zero or overflows".into()
                } else {
                    format!(
                        "not decided: needs {}, which this run did not measure",
                        join_and(&missing)
                    )
                }
            }
        };
        FindingResult {
            title: self.title.clone(),
            when: self.when.clone(),
            evaluated: self.cond.explain(values),
            outcome: outcome(held),
            text,
        }
    }
}
