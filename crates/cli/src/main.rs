//! The `tcptail` command line: a thin layer over the tcptail library crates.
//!
//! Each subcommand lives in its own module as a clap `Args` struct beside its `run()`, which
//! turns raw flags into a checked library configuration before any I/O. Errors are decided and
//! printed here, once: `error: {:#}` and exit code 1 for a failed run, 2 for bad usage (clap's
//! convention); a closed stdout (`tcptail bench ... | head`) exits 0.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod audit;
mod bench;
mod exporter;
mod keys;
mod lab;
mod lab_run;
mod run;
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
        Command::Run(args) => run::run(args),
    };
    match outcome {
        Ok(code) => code,
        Err(err) => {
            if is_broken_pipe(&err) {
                return ExitCode::SUCCESS;
            }
            eprintln!("error: {err:#}");
            ExitCode::from(1)
        }
    }
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|cause| {
        cause
            .downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
