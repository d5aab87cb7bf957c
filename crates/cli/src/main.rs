//! The `tcptail` command line: a thin layer over the tcptail library crates.
//!
//! Each subcommand lives in its own module as a clap `Args` struct beside its `run()`, which
//! turns raw flags into a checked library configuration before any I/O. Errors are decided and
//! printed here, once ([`error_line`]): one line, `error: what was done: what failed: cause`,
//! each cause once, then the next step when the command attached one ([`NextStep`]); exit code
//! 1 for a failed run, 2 for bad usage (clap's convention); a closed stdout
//! (`tcptail bench ... | head`) exits 0.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod audit;
mod bench;
mod exporter;
mod keys;
mod lab;
mod lab_run;
mod record;
mod run;
mod select;
mod sendq;
mod top;

/// Find, explain and fix TCP tail latency on Linux.
#[derive(Debug, Parser)]
#[command(name = "tcptail", version, about, max_term_width = 100)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Request/response latency benchmark (server, client, or both on loopback).
    #[command(subcommand)]
    Bench(Box<bench::BenchCommand>),
    /// Emulated network paths between network namespaces (needs root).
    #[command(subcommand)]
    Lab(lab::LabCommand),
    /// The send-queue experiment (SIGCOMM '24 poster) on an emulated path; needs root.
    Sendq(sendq::SendqArgs),
    /// Check this host's TCP settings against a profile (exit 0 OK, 1 FAIL, 2 error).
    Audit(audit::AuditArgs),
    /// Show, apply (verified, reversible) or revert a profile's sysctl settings.
    Tune(audit::TuneArgs),
    /// Serve Prometheus metrics of TCP connections read with sock_diag (/metrics).
    Exporter(exporter::ExporterArgs),
    /// Live view of matched TCP connections (RTT, send-queue delay, retransmits).
    Top(top::TopArgs),
    /// Record every selected connection's TCP state as it changes (flight recorder), or
    /// show a recording (`record show`).
    Record(record::RecordArgs),
    /// Run a program with a profile applied to its TCP sockets (LD_PRELOAD).
    Run(run::RunArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let outcome = match cli.command {
        Command::Bench(cmd) => bench::run(*cmd),
        Command::Lab(cmd) => lab::run(cmd),
        Command::Sendq(args) => sendq::run(args),
        Command::Audit(args) => audit::run_audit(args),
        Command::Tune(args) => audit::run_tune(args),
        Command::Exporter(args) => exporter::run(args),
        Command::Top(args) => top::run(args),
        Command::Record(args) => record::run(args),
        Command::Run(args) => run::run(args),
    };
    match outcome {
        Ok(code) => code,
        Err(err) => {
            if is_broken_pipe(&err) {
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {}", error_line(&err));
            ExitCode::from(1)
        }
    }
}

/// The next step after a failure, attached to an error with `.context(NextStep(..))`: printed
/// at the end of the error's line instead of in front of its causes.
#[derive(Debug)]
pub(crate) struct NextStep(pub String);

impl std::fmt::Display for NextStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// An error as one line: each message of its chain, outermost first, joined by `: `, a message
/// that the line already ends with (an error that printed its own source) skipped, then `; `
/// and the [`NextStep`] when there is one.
pub(crate) fn error_line(err: &anyhow::Error) -> String {
    let next = err.downcast_ref::<NextStep>().map(|n| n.0.as_str());
    let mut line = causes_line(err.chain().filter(|c| Some(c.to_string().as_str()) != next));
    if let Some(next) = next {
        line.push_str("; ");
        line.push_str(next);
    }
    line
}

/// [`error_line`] for a library error and its sources.
pub(crate) fn chain_line(err: &(dyn std::error::Error + 'static)) -> String {
    causes_line(std::iter::successors(Some(err), |e| e.source()))
}

fn causes_line<'a>(chain: impl Iterator<Item = &'a (dyn std::error::Error + 'static)>) -> String {
    let mut line = String::new();
    for cause in chain {
        let text = cause.to_string();
        if text.is_empty() || line.ends_with(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

pub(crate) fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    /// An error that prints its source in its own message, as some libraries' errors do.
    #[derive(Debug)]
    struct Embeds {
        source: std::io::Error,
    }

    impl std::fmt::Display for Embeds {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "writing /x: {}", self.source)
        }
    }

    impl std::error::Error for Embeds {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.source)
        }
    }

    #[test]
    fn each_cause_once_and_the_next_step_last() {
        let io = || std::io::Error::from_raw_os_error(20);
        let err = anyhow::Error::new(Embeds { source: io() }).context("applying profile p");
        assert_eq!(
            error_line(&err),
            "applying profile p: writing /x: Not a directory (os error 20)",
            "{err:#} prints the cause twice"
        );
        let err = Err::<(), _>(io())
            .context("writing /x")
            .context("applying profile p")
            .context(NextStep("fix it, then run `tcptail tune --revert`".into()))
            .unwrap_err();
        assert_eq!(
            error_line(&err),
            "applying profile p: writing /x: Not a directory (os error 20); fix it, then run \
             `tcptail tune --revert`"
        );
    }
}
