//! `tcptail lab path|exec|clean`: flags turned into a checked [`LabSpec`] before anything is
//! created; the work lives in `tcptail_lab::path`. (`lab run` and `lab report` are in
//! `lab_run`.)
//!
//! Exit codes: `lab path` and `lab exec` exit with COMMAND's code (128 + signal if it was
//! killed, or if the lab itself got SIGINT/SIGTERM); 2 for a bad command line or path spec
//! or an `--out` directory it refuses (nothing was created); 1 when the lab failed before
//! COMMAND ran. Once COMMAND has run, its
//! code is the exit code even when writing the report or tearing down failed afterwards: the
//! lab prints those errors on stderr (`error: lab: ...`) and keeps COMMAND's code, so a script
//! never mistakes a lab problem for its own command's failure.
//!
//! Every command that needs root (`lab path`, `lab exec`, `lab run`) first removes what
//! SIGKILLed runs left behind ([`clean_dead_runs`]), printing one line of what it removed.

use std::io::IsTerminal;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use tcptail_emu::{BufferSize, Discipline, EcnBlackhole, Jitter, LossModel, PathEvent, Reorder};
use tcptail_lab::emulator::Threads;
use tcptail_lab::path::{
    EmulatorKind, LabError, LabRun, LabSpec, PathFlags, ReadyArg, Side, exec_command, running_labs,
    select_lab,
};
use tcptail_lab::placement::{CpuChoice, PlacementRequest};
use tcptail_netns::{Cleanup, Group, Processes, Scope, clean_stale, ensure_root, signal};
use tcptail_units::{BitRate, HumanDuration};

#[derive(Debug, Subcommand)]
pub enum LabCommand {
    /// Run COMMAND in a client namespace joined to a server namespace by an emulated path.
    Path(Box<PathArgs>),
    /// Run a command inside a running lab's client, server or router namespace.
    Exec(ExecArgs),
    /// Remove what crashed lab runs left behind (namespaces named tcptail-*).
    Clean(CleanArgs),
    /// Run experiments that test the seeds' claims; writes results.json and index.html.
    Run(Box<crate::lab_run::RunArgs>),
    /// Re-render DIR/index.html from DIR/results.json.
    Report(crate::lab_run::ReportArgs),
}

const PATH_AFTER_HELP: &str = "\
Directions: 'up' is client to server, 'down' server to client. A -up/-down flag overrides the
flag for both directions; --rtt is split evenly into the two one-way delays.

Values:
  rates      30mbit, 1gbit, 500kbit (bits per second)
  --loss     1%                          independent losses
             ge:1%,burst=4               Gilbert bursts: long-run rate, mean burst in packets
             ge:p=0.5%,r=25%[,bad-loss=100%][,good-loss=0%]
                                         Gilbert-Elliott, as netem's 'loss gemodel p r 1-h 1-k'
  --buffer   375KB | 250pkt | 100ms | 2bdp   bytes, packets, time, or multiples of rate x RTT
             (default: 1bdp, at least 10 packets)
  --queue    fifo (drop-tail, default) | codel | codel:target=5ms,interval=100ms
             codel,ecn                   mark ECN-capable packets CE instead of dropping
             fq_codel[,ecn]              flow queues (5-tuple), DRR, CoDel per flow; Linux's
                                         defaults target=5ms,interval=100ms,quantum=1514,
                                         flows=1024 and limit 10240pkt (--buffer overrides)
  --jitter   2ms (uniform +-2ms) | normal:1ms (sigma) | pareto:1ms | paretonormal:1ms
             (netem's distributions and tables); never reorders packets
  --reorder  1%,gap=2ms                  hold 1% of packets back 2ms, so later ones overtake
  --ecn-blackhole [MODE]                 an ECN-hostile middlebox: syn drops ECN-setup SYNs
                                         (SYN with ECE+CWR: Linux retries without ECN after
                                         the SYN timeout, tcp_ecn_fallback), data (the bare
                                         flag) every ECT/CE packet, all both
  --event    TIME:CHANGE, repeatable, on the emulator's clock from its start, both directions:
             5s:blackhole (drop everything) | 30s:restore | 10s:rate=1gbit |
             3s:loss=20%,for=200ms | 8s:delay=+50ms (or -5ms, or 80ms); on a --trace
             direction rate=R scales the trace to mean R (opportunities keep their times,
             evenly thinned or repeated); the times they took effect are in
             lab-report.json (emulator_report.*.stats.path_changes)
  --threads  single (default): one thread forwards both directions, the least CPU per GB;
             per-direction: one thread each way; split: a reader and a releaser thread per
             direction; pipeline: one reader for both devices, one releaser for both. The
             extra threads pay on a machine with idle CPUs (they compete with the endpoints
             on a small one); lab-report.json names the layout (threads) and each
             thread's CPU time (emulator_report.thread_cpu)
  --trace    Mahimahi packet-delivery traces: FILE (both directions) or UP,DOWN;
             --trace-up/--trace-down FILE for one direction, e.g. --trace-down lte.trace
             --rate-up 5mbit (a trace one way, a constant rate the other)

Both commands get TCPTAIL_SERVER_ADDR=10.77.0.2 and TCPTAIL_CLIENT_ADDR=10.77.0.1. The server
command's output goes to server.log in the output directory, beside lab-report.json and the
emulator's Mahimahi logs (up.log, down.log).

Examples:
  tcptail lab path --rate 30mbit --rtt 10ms --buffer 375KB --server-cmd 'iperf3 -s -1' \\
      -- sh -c 'iperf3 -c $TCPTAIL_SERVER_ADDR -t 5 -C bbr'
  tcptail lab path --rate-up 5mbit --rate-down 50mbit --rtt 40ms --loss ge:1%,burst=4 -- bash
  tcptail lab path --rate 50mbit --rtt 20ms --queue fq_codel,ecn --reorder 1%,gap=2ms -- bash
  tcptail lab path --rate 10gbit --rtt 120ms --threads split --server-cmd 'iperf3 -s -1' \\
      -- sh -c 'iperf3 -c $TCPTAIL_SERVER_ADDR -t 10 -C bbr'
  tcptail lab exec --server -- ss -tin";

#[derive(Debug, Args)]
#[command(after_help = PATH_AFTER_HELP)]
pub struct PathArgs {
    /// Bottleneck rate, both directions (e.g. 30mbit).
    #[arg(long, value_name = "RATE", allow_hyphen_values = true, help_heading = "Path")]
    rate: Option<BitRate>,
    /// Rate client to server.
    #[arg(long, value_name = "RATE", allow_hyphen_values = true, help_heading = "Path")]
    rate_up: Option<BitRate>,
    /// Rate server to client.
    #[arg(long, value_name = "RATE", allow_hyphen_values = true, help_heading = "Path")]
    rate_down: Option<BitRate>,
    /// Mahimahi delivery traces instead of a constant rate: FILE or UP,DOWN.
    #[arg(long, value_delimiter = ',', value_name = "FILE[,FILE]", help_heading = "Path")]
    trace: Vec<PathBuf>,
    /// Mahimahi trace client to server (the other direction keeps its own rate or trace).
    #[arg(long, value_name = "FILE", help_heading = "Path")]
    trace_up: Option<PathBuf>,
    /// Mahimahi trace server to client.
    #[arg(long, value_name = "FILE", help_heading = "Path")]
    trace_down: Option<PathBuf>,
    /// Base round-trip time, split evenly between the directions.
    #[arg(
        long,
        value_name = "DURATION",
        allow_hyphen_values = true,
        conflicts_with = "delay",
        help_heading = "Path"
    )]
    rtt: Option<HumanDuration>,
    /// One-way delay, both directions.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, help_heading = "Path")]
    delay: Option<HumanDuration>,
    /// One-way delay client to server.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, help_heading = "Path")]
    delay_up: Option<HumanDuration>,
    /// One-way delay server to client.
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, help_heading = "Path")]
    delay_down: Option<HumanDuration>,
    /// Delay variation, both directions: 2ms (uniform), normal:1ms, pareto:1ms or
    /// paretonormal:1ms.
    #[arg(long, value_name = "JITTER", allow_hyphen_values = true, help_heading = "Path")]
    jitter: Option<Jitter>,
    /// Delay variation client to server.
    #[arg(long, value_name = "JITTER", allow_hyphen_values = true, help_heading = "Path")]
    jitter_up: Option<Jitter>,
    /// Delay variation server to client.
    #[arg(long, value_name = "JITTER", allow_hyphen_values = true, help_heading = "Path")]
    jitter_down: Option<Jitter>,
    /// Random loss, both directions: 1% or ge:1%,burst=4 (see below).
    #[arg(long, value_name = "LOSS", allow_hyphen_values = true, help_heading = "Path")]
    loss: Option<LossModel>,
    /// Loss client to server.
    #[arg(long, value_name = "LOSS", allow_hyphen_values = true, help_heading = "Path")]
    loss_up: Option<LossModel>,
    /// Loss server to client.
    #[arg(long, value_name = "LOSS", allow_hyphen_values = true, help_heading = "Path")]
    loss_down: Option<LossModel>,
    /// Bottleneck buffer, both directions: 375KB, 250pkt, 100ms or 2bdp [default: 1bdp].
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true, help_heading = "Path")]
    buffer: Option<BufferSize>,
    /// Buffer client to server.
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true, help_heading = "Path")]
    buffer_up: Option<BufferSize>,
    /// Buffer server to client.
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true, help_heading = "Path")]
    buffer_down: Option<BufferSize>,
    /// Queue discipline, both directions: fifo, codel[,ecn] or fq_codel[,ecn] (see below).
    // The brackets are option syntax in the --help text, not doc links.
    #[allow(rustdoc::broken_intra_doc_links)]
    #[arg(long, value_name = "QUEUE", help_heading = "Path")]
    queue: Option<Discipline>,
    /// Reordering, both directions: 1%,gap=2ms holds 1% of packets back by 2ms [default: off].
    #[arg(long, value_name = "P,gap=D", help_heading = "Path")]
    reorder: Option<Reorder>,
    /// Reordering client to server.
    #[arg(long, value_name = "P,gap=D", help_heading = "Path")]
    reorder_up: Option<Reorder>,
    /// Reordering server to client.
    #[arg(long, value_name = "P,gap=D", help_heading = "Path")]
    reorder_down: Option<Reorder>,
    /// An ECN-hostile middlebox, both directions: syn drops ECN-setup SYNs (what Linux's
    /// tcp_ecn_fallback retries around), data every ECT/CE packet, all both [bare flag: data].
    #[arg(
        long,
        value_name = "MODE",
        num_args = 0..=1,
        default_missing_value = "data",
        help_heading = "Path"
    )]
    ecn_blackhole: Option<EcnBlackhole>,
    /// A change to the running path at a time from the emulator's start, both directions
    /// (repeatable): 5s:blackhole, 30s:restore, 10s:rate=1gbit, 3s:loss=20%,for=200ms,
    /// 8s:delay=+50ms.
    #[arg(long = "event", value_name = "TIME:CHANGE", help_heading = "Path")]
    events: Vec<PathEvent>,

    /// builtin (userspace TUN emulator), netem (kernel qdiscs behind a router; needs
    /// sch_netem), or none (plain veth, no shaping).
    #[arg(long, value_name = "KIND", default_value = "builtin", help_heading = "Emulator")]
    emulator: EmulatorKind,
    /// The built-in emulator's threads: single (one thread for both directions),
    /// per-direction, split (a reader and a releaser per direction) or pipeline (one reader,
    /// one releaser) [default: single]; recorded in lab-report.json (see below).
    #[arg(long, value_name = "LAYOUT", help_heading = "Emulator")]
    threads: Option<Threads>,
    /// Pin the built-in emulator's thread(s) to this CPU (a number, or last: the
    /// highest-numbered usable one); checked against the online CPUs, refused on a one-CPU
    /// machine; recorded in lab-report.json (placement).
    #[arg(long, value_name = "N|last", help_heading = "Emulator")]
    emulator_cpu: Option<CpuChoice>,
    /// With --emulator-cpu: steer both namespaces' receive processing (RPS on the TUN devices)
    /// to the other CPUs, so the emulator's TUN writes do not run the receiving TCP stack.
    #[arg(long, help_heading = "Emulator")]
    steer: bool,
    /// With --emulator-cpu: run the server command and COMMAND on the other CPUs only.
    #[arg(long, help_heading = "Emulator")]
    endpoints_apart: bool,
    /// Flag the run when the emulator's p99 release lateness exceeds this [default: 500us].
    #[arg(long, value_name = "DURATION", help_heading = "Emulator")]
    lateness_bound: Option<HumanDuration>,
    /// Seed for loss and jitter draws [default: from the clock; recorded in the report].
    #[arg(long, value_name = "N", help_heading = "Emulator")]
    seed: Option<u64>,
    /// Directory for lab-report.json, Mahimahi logs and server.log: created 0700 if missing;
    /// an existing one must be yours and empty [default: a new private
    /// tcptail-lab-XXXXXXXXXX in $XDG_RUNTIME_DIR or /tmp].
    #[arg(long, value_name = "DIR", help_heading = "Emulator")]
    out: Option<PathBuf>,
    /// Write into an existing --out directory that already holds files (it must still be a
    /// directory you own).
    #[arg(long, requires = "out", help_heading = "Emulator")]
    force: bool,

    /// Shell command started in the server namespace before COMMAND (e.g. 'iperf3 -s -1').
    #[arg(long, value_name = "COMMAND", help_heading = "Commands")]
    server_cmd: Option<String>,
    /// When COMMAND may start: auto (a TCP socket listens in the server namespace, at most
    /// 2s), a TCP PORT that must listen (at most 10s), or a pause like 500ms.
    #[arg(long, value_name = "auto|PORT|DURATION", help_heading = "Commands")]
    server_ready: Option<ReadyArg>,
    /// The client command, run in the client namespace without a shell.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

impl PathArgs {
    fn flags(self) -> PathFlags {
        let d = |h: Option<HumanDuration>| h.map(|h| h.0);
        PathFlags {
            rate: self.rate,
            rate_up: self.rate_up,
            rate_down: self.rate_down,
            trace: self.trace,
            trace_up: self.trace_up,
            trace_down: self.trace_down,
            rtt: d(self.rtt),
            delay: d(self.delay),
            delay_up: d(self.delay_up),
            delay_down: d(self.delay_down),
            jitter: self.jitter,
            jitter_up: self.jitter_up,
            jitter_down: self.jitter_down,
            loss: self.loss,
            loss_up: self.loss_up,
            loss_down: self.loss_down,
            buffer: self.buffer,
            buffer_up: self.buffer_up,
            buffer_down: self.buffer_down,
            queue: self.queue,
            reorder: self.reorder,
            reorder_up: self.reorder_up,
            reorder_down: self.reorder_down,
            ecn_blackhole: self.ecn_blackhole,
            events: self.events,
            emulator: self.emulator,
            threads: self.threads,
            placement: PlacementRequest {
                emulator_cpu: self.emulator_cpu,
                steer: self.steer,
                endpoints_apart: self.endpoints_apart,
            },
            out: self.out,
            force: self.force,
            lateness_bound: d(self.lateness_bound),
            seed: self.seed,
            server_cmd: self.server_cmd,
            server_ready: self.server_ready,
            command: self.command,
        }
    }
}

#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Run in the client namespace (10.77.0.1) (the default).
    #[arg(long, conflicts_with_all = ["server", "router"])]
    client: bool,
    /// Run in the server namespace (10.77.0.2).
    #[arg(long, conflicts_with = "router")]
    server: bool,
    /// Run in the router namespace (--emulator netem runs only).
    #[arg(long)]
    router: bool,
    /// Which run, by the pid of its `tcptail lab path` process (the PID in the namespace names
    /// tcptail-PID-lab-*); needed only when several runs are alive.
    #[arg(long, value_name = "PID")]
    run: Option<u32>,
    /// The command, run without a shell.
    #[arg(last = true, required = true, value_name = "COMMAND")]
    command: Vec<String>,
}

#[derive(Debug, Args)]
pub struct CleanArgs {
    /// Remove every tcptail- namespace, including those of runs that are still alive.
    #[arg(long)]
    all: bool,
}

pub fn run(cmd: LabCommand) -> Result<ExitCode> {
    match cmd {
        LabCommand::Path(args) => path(*args),
        LabCommand::Exec(args) => exec(args),
        LabCommand::Clean(args) => clean(args),
        LabCommand::Run(args) => crate::lab_run::run(*args),
        LabCommand::Report(args) => crate::lab_run::report(args),
    }
}

/// COMMAND's exit code as a process exit code (already 0-255 or 128 + signal).
fn exit_code(code: i32) -> ExitCode {
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

fn usage_error(err: &LabError) -> ExitCode {
    eprintln!("error: {err}");
    ExitCode::from(2)
}

fn path(args: PathArgs) -> Result<ExitCode> {
    let spec: LabSpec = match args.flags().check() {
        Ok(spec) => spec,
        Err(e) => return Ok(usage_error(&e)),
    };
    ensure_root()?;
    clean_dead_runs();
    let lab = match LabRun::start(&spec) {
        Ok(lab) => lab,
        Err(LabError::Interrupted) => {
            return Ok(exit_code(signal::exit_code().unwrap_or(1)));
        }
        // An --out that is not safe to write into: bad input, and nothing was created.
        Err(e @ LabError::OutDir(_)) => return Ok(usage_error(&e)),
        Err(e) => return Err(e).context("setting up the lab"),
    };
    eprintln!("{}", lab.banner());
    let outcome = lab.run().context("running the lab")?;
    if let Some(flag) = &outcome.lateness_flag {
        eprintln!("warning: {flag}");
    }
    // COMMAND ran: its exit code stands, the lab's own failures are printed beside it.
    for e in &outcome.lab_errors {
        eprintln!("error: lab: {}", crate::chain_line(e));
    }
    Ok(exit_code(outcome.signal.map_or(outcome.exit_code, |s| 128 + s)))
}

fn exec(args: ExecArgs) -> Result<ExitCode> {
    ensure_root()?;
    clean_dead_runs();
    let side = if args.server {
        Side::Server
    } else if args.router {
        Side::Router
    } else {
        Side::Client
    };
    let lab = select_lab(running_labs()?, args.run)?;
    let cmd = exec_command(&lab, side, &args.command)?;
    // Tracked like a lab run's own commands: SIGINT/SIGTERM to `lab exec` terminate the
    // command instead of orphaning it in the namespace.
    signal::install(signal::DEFAULT_GRACE)?;
    let cleanup = Cleanup::new();
    let mut processes = Processes::new(&cleanup);
    let group = if std::io::stdin().is_terminal() { Group::Inherit } else { Group::Own };
    let pid = processes.spawn("exec", cmd, group)?;
    let status = processes.wait(pid)?.status;
    let code = status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    Ok(exit_code(signal::exit_code().unwrap_or(code)))
}

/// Removes what SIGKILLed lab runs left behind (their namespaces with whatever still runs in
/// them, and links whose owning pid is gone; never a live run's) and prints one line naming
/// it. Every lab command that needs root calls this first, so a killed run costs nothing
/// after the next command. A failure is reported and does not stop the command.
pub(crate) fn clean_dead_runs() {
    match clean_stale(Scope::DeadOwners) {
        Ok(report) => {
            if let Some(line) = report.removed_line() {
                eprintln!("lab: {line}");
            }
            for e in &report.errors {
                eprintln!("warning: lab: a dead run's leftover could not be removed: {e}");
            }
        }
        Err(e) => eprintln!(
            "warning: lab: could not look for what dead runs left: {} (`tcptail lab clean` \
             retries)",
            crate::chain_line(&e)
        ),
    }
}

fn clean(args: CleanArgs) -> Result<ExitCode> {
    ensure_root()?;
    let scope = if args.all { Scope::All } else { Scope::DeadOwners };
    let report = clean_stale(scope).context("cleaning up lab leftovers")?;
    for ns in &report.namespaces {
        println!("removed namespace {ns}");
    }
    for link in &report.links {
        println!("removed link {link}");
    }
    if report.namespaces.is_empty() && report.links.is_empty() {
        println!("nothing to clean");
    }
    if !report.kept.is_empty() {
        println!(
            "kept {} belonging to running processes (--all removes them too): {}",
            report.kept.len(),
            report.kept.join(", ")
        );
    }
    for e in &report.errors {
        eprintln!("error: {e}");
    }
    Ok(if report.errors.is_empty() { ExitCode::SUCCESS } else { ExitCode::from(1) })
}
