//! `tcptail lab run`: experiments that test the seeds' claims on this machine's namespaces.
//!
//! - [`spec`]: experiment files (TOML, built in or the user's): workload, parameters,
//!   variants, modes (smoke, quick, full), plots and the verdict rule. Errors name file, line
//!   and key.
//! - [`params`]: a variant's parameters with their lines; keys no engine reads are errors.
//! - [`workload`]: the engines that run one variant for one round (request/response latency,
//!   split writes, idle restart, the tuning ladder, send-queue delay, bulk transfers, bloat).
//! - [`round`]: what a round sees ([`round::RoundContext`]), returns ([`round::Measurement`])
//!   and fails with ([`round::RunError`]), shared by the runner, the engines and the path.
//! - [`path`]: the network path of a round: veth, the built-in emulator, or `tbf` on a router.
//! - [`verdict`]: the rule language that turns medians and spreads into a verdict with its
//!   reason, every rule evaluated for the report, and findings (observations decided from the
//!   data beside the verdict).
//! - [`runner`]: interleaves variants over rounds, aggregates medians and spreads, keeps
//!   what finished when interrupted, and writes `results.json`.
//! - [`environment`]: the machine block of the report.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod environment;
pub mod params;
pub mod path;
pub mod round;
pub mod runner;
pub mod spec;
pub mod verdict;
pub mod workload;
