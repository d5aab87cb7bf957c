//! The results of `tcptail lab run` and the report made from them.
//!
//! - [`results`]: the `results.json` schema, the one file every number of a run lives in:
//!   per-variant medians and spreads, the verdict with every rule evaluated, findings, and
//!   variants this host could not run with the reason.
//!   `tcptail lab report DIR` re-renders the report from it alone, so everything the report
//!   shows (claims, setups, plot choices, verdicts) is in it.
//! - [`html`]: `index.html`, self-contained (inline SVG, inline CSS, no scripts that fetch
//!   anything), one section per experiment.
//! - [`failure_modes`]: seed 000's six failure modes mapped to the experiments that test
//!   them, for the report's section on them.
//! - [`files`]: output files and directories that are safe to create as root (private
//!   random directories, no symlink followed, atomic and durable writes).
//! - [`svg`]: the plots inside it: number formatting, scales, nice and logarithmic ticks,
//!   line and grouped-bar charts that never write a non-finite coordinate.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod failure_modes;
pub mod files;
pub mod html;
pub mod results;
pub mod svg;

pub use results::{
    CONFIDENCE, Decidability, Environment, ExperimentResult, FindingResult, LATENESS_METRIC,
    Lateness, Metric, Outcome, PathEventRecord, PlotSpec, QuickDecides, Results, RoundRecord,
    RuleResult, RunInfo, SeedCondition, Series, SeriesKind, VariantResult, Verdict,
};
