//! Writes a report for the browser check (`scripts/test-report-browser`).
//!
//! ```text
//! sample_report OUT_DIR                 # the synthetic run: OUT_DIR/results.json + index.html
//! sample_report OUT_DIR RESULTS_JSON    # a real run's results.json rendered to OUT_DIR/index.html
//! ```
//!
//! Prints `svg_expected=N` on stdout: how many plots have data, counted from the results
//! alone, for the check to compare with the `<svg>` elements the browser sees; then
//! `svg_per_section=A B C ...`, the same count for each experiment's section in order; then
//! `faithful_rounds_per_section=A B C ...`, the rounds whose numbers count in each experiment
//! (a real run's section may lack plots only when it has none: every round excluded on a loaded
//! machine); then `excluded_expected=N`, the rounds the results leave out, each of which the
//! page must list; then `failure_modes_expected=N NOT_RUN`, the rows of the section on seed 000's failure modes
//! (6, or 0 when the run holds none of their experiments) and how many say "not run".

#[path = "../tests/common/mod.rs"]
mod common;

use std::path::PathBuf;
use std::process::ExitCode;

use tcptail_report::files::write_atomically;
use tcptail_report::results::{REPORT_FILE, RESULTS_FILE};
use tcptail_report::{Results, html};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (out, from) = match &args[..] {
        [out] => (PathBuf::from(out), None),
        [out, from] => (PathBuf::from(out), Some(PathBuf::from(from))),
        _ => {
            eprintln!("usage: sample_report OUT_DIR [RESULTS_JSON]");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = std::fs::create_dir_all(&out) {
        eprintln!("sample_report: {}: {e}", out.display());
        return ExitCode::FAILURE;
    }
    let results = match &from {
        Some(path) => match Results::read(path) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("sample_report: {e}");
                return ExitCode::FAILURE;
            }
        },
        None => {
            let r = common::sample();
            if let Err(e) = r.write(&out.join(RESULTS_FILE)) {
                eprintln!("sample_report: {e}");
                return ExitCode::FAILURE;
            }
            r
        }
    };
    let report = out.join(REPORT_FILE);
    if let Err(e) = write_atomically(&report, html::render(&results).as_bytes(), 0o644) {
        eprintln!("sample_report: {}: {e}", report.display());
        return ExitCode::FAILURE;
    }
    eprintln!("sample_report: {} ({} experiments)", report.display(), results.experiments.len());
    println!("svg_expected={}", common::plots_with_data(&results));
    let per: Vec<String> =
        common::plots_with_data_per_experiment(&results).iter().map(usize::to_string).collect();
    println!("svg_per_section={}", per.join(" "));
    let faithful: Vec<String> = results
        .experiments
        .iter()
        .map(|e| e.variants.iter().flat_map(|v| &v.rounds).filter(|r| r.faithful).count())
        .map(|n| n.to_string())
        .collect();
    println!("faithful_rounds_per_section={}", faithful.join(" "));
    let excluded: usize = results
        .experiments
        .iter()
        .flat_map(|e| &e.variants)
        .map(|v| v.excluded_rounds().count())
        .sum();
    println!("excluded_expected={excluded}");
    let (rows, not_run) = if tcptail_report::failure_modes::applies(&results) {
        let rows = tcptail_report::failure_modes::rows(&results);
        let not_run = rows.iter().filter(|r| r.experiment.is_none()).count();
        (rows.len(), not_run)
    } else {
        (0, 0)
    };
    println!("failure_modes_expected={rows} {not_run}");
    ExitCode::SUCCESS
}
