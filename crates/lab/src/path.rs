//! `tcptail lab path`: a checked lab specification and the run that realises it.
//!
//! # Two stages
//!
//! 1. [`PathFlags`] holds the command line's values, already typed by their unit parsers
//!    (rates, durations, [`LossModel`], [`BufferSize`], ...) but not yet checked against each
//!    other. [`PathFlags::check`] turns them into a [`LabSpec`]: both directions resolved
//!    (`--rate` versus `--rate-up`, `--rtt` split evenly, default buffer of one BDP), trace
//!    files read, the emu crate's `validate()` run, and the command looked up on `PATH`.
//!    It creates nothing; every error names the flag, file and line at fault
//!    ([`LabError::is_usage`] is true for all of them).
//! 2. [`LabRun::start`] builds the namespaces, sets per-namespace TCP buffers for the path's
//!    BDP, starts the emulator (built-in, netem or none) and the server command, and
//!    [`LabRun::run`] runs the client command to completion, stops everything and writes
//!    `lab-report.json`.
//!
//! # Flag syntax
//!
//! | value | syntax |
//! |---|---|
//! | [`LossModel`] | `1%` (independent losses), `ge:1%,burst=4` (Gilbert bursts: long-run rate, mean burst length in packets), `ge:p=0.5%,r=25%[,bad-loss=100%][,good-loss=0%]` (netem's `loss gemodel p r 1-h 1-k`) |
//! | [`BufferSize`] | `375KB` (bytes), `250pkt` (packets), `100ms` (time a packet may wait), `2bdp` (multiples of rate x RTT) |
//! | [`Discipline`] | `fifo` (drop-tail), `codel`, `codel:target=5ms,interval=100ms` |
//! | [`Jitter`] | `2ms` or `uniform:2ms` (+-2 ms), `normal:1ms` (sigma, cut at 3 sigma); never reorders |
//! | [`ReadyArg`] | `auto`, a TCP port (`5201`), or a pause (`500ms`) |
//! | [`EmulatorKind`] | `builtin`, `netem`, `none` |
//!
//! The path's values parse in `tcptail_emu` ([its syntax](tcptail_emu::BufferSize)); the
//! readiness and emulator choices are the lab's own.
//!
//! Per direction, a `-up`/`-down` flag overrides the flag for both directions, `--rtt` is split
//! evenly between the two one-way delays, and the buffer defaults to one BDP.
//!
//! A direction's rate is a constant rate or a Mahimahi trace: `--rate-up`/`--trace-up` (and
//! `--trace UP,DOWN`) set one direction, `--rate`/`--trace FILE` both. A direction-specific
//! flag wins over a shared one, so `--trace-down lte.trace --rate 5mbit` replays the trace
//! downstream at a constant 5 Mbit/s upstream; two flags of the same reach for one direction
//! (`--trace-up F --rate-up R`, `--trace F --rate R`), or a shared flag neither direction
//! uses, are errors.
//!
//! # Guarantees
//!
//! - Nothing is created before the spec is checked and root is confirmed.
//! - Everything a run creates (namespaces `tcptail-<pid>-lab-*`, their links and TUN devices,
//!   the emulator thread, child processes) is removed on every exit path: normal return, error,
//!   panic (`Drop`), SIGINT/SIGTERM/SIGHUP ([`tcptail_netns::signal`], installed by
//!   [`LabRun::start`]); a SIGKILLed run's leftovers are removed by
//!   [`tcptail_netns::clean_stale`] (`tcptail lab clean`).
//! - Nothing on the host changes: sysctls are written inside the lab's namespaces only.
//! - The library prints nothing; [`LabRun::banner`] is the line a front end shows.

use std::path::PathBuf;
use std::time::Duration;

#[cfg(doc)]
use tcptail_emu::{BufferSize, Discipline, Jitter, LossModel};
use tcptail_emu::{PathSpec, SpecError, TraceError};

mod flags;
mod report;
mod run;
mod running;
mod sizing;
mod values;

pub use flags::PathFlags;
pub use report::{DirectionView, LabReport};
pub use run::{LabOutcome, LabRun, REPORT_FILE, SERVER_LOG};
pub use running::{RunningLab, Side, exec_command, running_labs, select_lab};
pub use sizing::{TcpBuffers, tcp_buffers};
pub use values::{ArgError, EmulatorKind, ReadyArg};

/// Namespace roles of a lab run: the names are `tcptail-<pid>-<role>-<n>`.
pub const CLIENT_ROLE: &str = "lab-client";
/// See [`CLIENT_ROLE`].
pub const SERVER_ROLE: &str = "lab-server";
/// See [`CLIENT_ROLE`]; only `--emulator netem` has a router.
pub const ROUTER_ROLE: &str = "lab-router";

/// How the lab waits for the server command before starting the client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Readiness {
    /// Until any TCP socket listens in the server namespace, at most this long; then the
    /// client starts anyway (the server may use UDP).
    AnyListener(Duration),
    /// Until this TCP port listens in the server namespace; failing after [`PORT_TIMEOUT`].
    Port(u16),
    /// A fixed pause.
    After(Duration),
}

/// How long [`Readiness::Port`] waits before giving up.
pub const PORT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the default [`Readiness::AnyListener`] waits.
pub const ANY_LISTENER_TIMEOUT: Duration = Duration::from_secs(2);

/// The command started in the server namespace before the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerSpec {
    /// A shell command line, run with `sh -c`.
    pub command: String,
    /// When the client may start.
    pub ready: Readiness,
}

/// A checked lab configuration; only [`PathFlags::check`] builds one.
#[derive(Debug, Clone)]
pub struct LabSpec {
    pub(crate) path: Option<PathSpec>,
    pub(crate) events: Vec<tcptail_emu::PathEvent>,
    pub(crate) emulator: EmulatorKind,
    pub(crate) threads: crate::emulator::Threads,
    pub(crate) placement: Option<crate::placement::Placement>,
    pub(crate) out_dir: Option<PathBuf>,
    pub(crate) force: bool,
    pub(crate) lateness_bound: Duration,
    pub(crate) seed: u64,
    pub(crate) client: Vec<String>,
    pub(crate) server: Option<ServerSpec>,
}

impl LabSpec {
    /// The emulated path (`None` for [`EmulatorKind::None`], a plain veth).
    pub fn path(&self) -> Option<&PathSpec> {
        self.path.as_ref()
    }
    /// Which emulator carries the path.
    pub fn emulator(&self) -> EmulatorKind {
        self.emulator
    }
    /// The built-in emulator's thread layout (`--threads`).
    pub fn threads(&self) -> crate::emulator::Threads {
        self.threads
    }
    /// Where the built-in emulator and the endpoints run, checked against this machine's
    /// CPUs (`--emulator-cpu`, `--steer`, `--endpoints-apart`); `None`: the scheduler's
    /// choice.
    pub fn placement(&self) -> Option<&crate::placement::Placement> {
        self.placement.as_ref()
    }
    /// The directory the user chose for `lab-report.json`, the emulator's logs and the
    /// server's output (`--out`); `None`: a new private directory ([`LabRun::out_dir`]).
    pub fn out_dir(&self) -> Option<&std::path::Path> {
        self.out_dir.as_deref()
    }
    /// Whether a chosen output directory may already hold files (`--force`).
    pub fn force(&self) -> bool {
        self.force
    }
    /// p99 emulator lateness above which the run is flagged.
    pub fn lateness_bound(&self) -> Duration {
        self.lateness_bound
    }
    /// Seed of the emulator's loss and jitter draws.
    pub fn seed(&self) -> u64 {
        self.seed
    }
    /// The client command (program and arguments), run without a shell.
    pub fn client_command(&self) -> &[String] {
        &self.client
    }
    /// The server command, if any.
    pub fn server(&self) -> Option<&ServerSpec> {
        self.server.as_ref()
    }
    /// Base round-trip time (both one-way delays), zero without a path.
    pub fn rtt(&self) -> Duration {
        self.path.as_ref().map_or(Duration::ZERO, |p| p.up.delay + p.down.delay)
    }
}

/// Everything that can go wrong in a lab run. Variants up to [`LabError::CommandNotFound`]
/// are specification errors, found before anything is created ([`LabError::is_usage`]).
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// A flag's value, or a combination of flags, makes no sense.
    #[error("{flag}: {problem}")]
    Flag {
        /// The flag at fault, e.g. `--rate-up`.
        flag: String,
        /// What is wrong with it.
        problem: String,
    },
    /// A trace file could not be read or parsed.
    #[error("{flag}: trace file {file}{}: {problem}", line.map(|l| format!(" line {l}")).unwrap_or_default())]
    Trace {
        /// The flag that named the file.
        flag: &'static str,
        /// The file as given.
        file: PathBuf,
        /// 1-based line, where the problem is on one.
        line: Option<usize>,
        /// What is wrong.
        problem: String,
    },
    /// The checked path failed the emulator's own validation.
    #[error("{flag}: {problem}")]
    Spec {
        /// The flag(s) that set the field.
        flag: String,
        /// The emu crate's explanation.
        problem: String,
        /// The original error (field path).
        #[source]
        source: SpecError,
    },
    /// The client command's program is not on `PATH`.
    #[error("COMMAND: `{program}` was not found on PATH")]
    CommandNotFound {
        /// The program as given.
        program: String,
    },

    /// Namespaces, links, processes or sysctls failed (including "not root").
    #[error(transparent)]
    Netns(Box<tcptail_netns::Error>),
    /// The netem emulator could not be set up.
    #[error(transparent)]
    Netem(#[from] crate::netem::NetemError),
    /// The built-in emulator failed to start.
    #[error("starting the built-in emulator")]
    Emulator(#[source] crate::emulator::EmulatorError),
    /// The `--out` directory is not safe to write into (not a directory, somebody else's, or
    /// not empty without `--force`).
    #[error("--out {0}")]
    OutDir(#[from] tcptail_report::files::OutDirError),
    /// The output directory or a file in it could not be written.
    #[error("{path}: {op}")]
    Output {
        /// The file or directory.
        path: PathBuf,
        /// What was being done.
        op: &'static str,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// The server command exited before it was ready.
    #[error(
        "the server command `{command}` exited ({status}) before it was ready; its output is in {log}"
    )]
    ServerExited {
        /// The command line.
        command: String,
        /// How it ended.
        status: String,
        /// Its log file.
        log: PathBuf,
    },
    /// The server never started listening on the `--server-ready` port.
    #[error("--server-ready {port}: nothing listened on TCP port {port} in the server namespace within {}s; its output is in {log}", PORT_TIMEOUT.as_secs())]
    ServerNotReady {
        /// The port waited for.
        port: u16,
        /// The server's log file.
        log: PathBuf,
    },
    /// A termination signal arrived while the lab was being set up.
    #[error("interrupted by a signal while setting up the lab")]
    Interrupted,
    /// `lab exec` found no running lab, or several and no `--run`.
    #[error("{0}")]
    NoRunningLab(String),
    /// The kernel `tbf` qdisc of a [`crate::live::PathShape::Tbf`] path could not be added.
    #[error("tc qdisc add tbf: {detail}")]
    Tbf {
        /// What `tc` said, or why it could not run.
        detail: String,
    },
    /// An emulated path's topology came without its TUN pair (a bug).
    #[error("the emulated path's topology has no TUN pair")]
    NoTunPair,
    /// A netem or tbf path's topology came without its router (a bug).
    #[error("the path's topology has no router")]
    NoRouter,
}

impl From<tcptail_netns::Error> for LabError {
    fn from(e: tcptail_netns::Error) -> LabError {
        LabError::Netns(Box::new(e))
    }
}

impl LabError {
    /// Whether this is a specification (usage) error: nothing was created, and the fix is in
    /// the command line. Front ends exit with 2 for these.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            LabError::Flag { .. }
                | LabError::Trace { .. }
                | LabError::Spec { .. }
                | LabError::CommandNotFound { .. }
        )
    }

    pub(crate) fn flag(flag: impl Into<String>, problem: impl Into<String>) -> LabError {
        LabError::Flag { flag: flag.into(), problem: problem.into() }
    }

    pub(crate) fn trace(flag: &'static str, file: PathBuf, err: &TraceError) -> LabError {
        let (line, name) = match err {
            TraceError::NotAnInteger { line, source_name, .. }
            | TraceError::TooLarge { line, source_name, .. }
            | TraceError::Decreasing { line, source_name, .. } => (Some(*line), source_name),
            TraceError::Io { source_name, .. }
            | TraceError::Empty { source_name }
            | TraceError::ZeroDuration { source_name } => (None, source_name),
        };
        // The emu error reads `file:line: problem`; keep only the problem.
        let text = err.to_string();
        let prefix = match line {
            Some(l) => format!("{name}:{l}: "),
            None => format!("{name}: "),
        };
        let problem = text.strip_prefix(&prefix).unwrap_or(&text).to_owned();
        LabError::Trace { flag, file, line, problem }
    }
}

#[cfg(test)]
mod tests;
