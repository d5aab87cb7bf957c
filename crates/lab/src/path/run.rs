//! [`LabRun`]: one lab run, from namespaces to report, torn down on every exit path.
//!
//! Order of events, each step only after the previous one succeeded:
//!
//! 1. root check, signal handlers ([`tcptail_netns::signal::install`]), output directory;
//! 2. the [`LivePath`]: the topology (TUN pair for the built-in emulator, client ─ router ─
//!    server for netem, a veth pair for none), `net.ipv4.tcp_rmem`/`tcp_wmem` in the client
//!    and server namespaces raised for the path ([`super::tcp_buffers`]), and the emulator
//!    (the built-in one on the TUN pair, or netem qdiscs on the router; a missing netem fails
//!    here);
//! 3. every lab sysctl read back for the report;
//! 4. the server command (`sh -c`, own process group, output to `server.log`), and the wait
//!    for it to be ready ([`super::Readiness`]).
//!
//! [`LabRun::run`] then runs the client command with the terminal's stdio, waits for it, stops
//! the server (a short grace to exit by itself, then SIGTERM), stops the emulator, writes
//! `lab-report.json`, and tears the topology down. Once the client has run, its result is
//! the run's result: a report that cannot be written or a teardown step that fails is
//! returned in [`LabOutcome::lab_errors`], not as an error that would hide the command's exit
//! code. The [`LivePath`]'s `Drop` does the same teardown without the report for any run that
//! ends early (error, panic).

use std::collections::BTreeMap;
use std::fs;
use std::io::IsTerminal;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tcptail_netns::addr::{CLIENT_ADDR, SERVER_ADDR};
use tcptail_netns::{Group, Netns, signal};
use tcptail_report::files;

use super::report::{CommandView, DirectionView, LabReport};
use super::sizing::listening;
use super::{
    CLIENT_ROLE, EmulatorKind, LabError, LabSpec, PORT_TIMEOUT, ROUTER_ROLE, Readiness, SERVER_ROLE,
};
use crate::emulator::EmulatorOptions;
use crate::live::{LivePath, PathShape};

/// The report file in the output directory.
pub const REPORT_FILE: &str = "lab-report.json";
/// The server command's stdout and stderr, in the output directory.
pub const SERVER_LOG: &str = "server.log";
/// How long the server may take to exit by itself after the client ended.
const SERVER_EXIT_GRACE: Duration = Duration::from_millis(300);
/// Time between readiness polls.
const POLL: Duration = Duration::from_millis(20);

/// How a [`LabRun`] ended.
#[derive(Debug)]
pub struct LabOutcome {
    /// The client command's status.
    pub status: ExitStatus,
    /// Its exit code, or 128 + the signal that killed it.
    pub exit_code: i32,
    /// The report written.
    pub report_path: PathBuf,
    /// The emulator's lateness flag, if the run was flagged.
    pub lateness_flag: Option<String>,
    /// A termination signal the lab itself received during the run.
    pub signal: Option<i32>,
    /// What went wrong after the client command ended (writing the report, tearing down).
    /// The command's own result above stands: a front end prints these and still exits with
    /// the command's code.
    pub lab_errors: Vec<LabError>,
}

/// A lab that is set up and ready for its client command. [`LabRun::start`] sets it up,
/// [`LabRun::run`] runs the client and tears down; `Drop` tears down a run that ends early.
#[derive(Debug)]
pub struct LabRun {
    spec: LabSpec,
    /// The output directory: the chosen one, checked, or a new private one.
    out_dir: PathBuf,
    live: LivePath,
    server_pid: Option<u32>,
    server_status: Option<ExitStatus>,
    report: LabReport,
}

/// The run's output directory: `--out` if it is safe to write into (created 0700 when
/// missing; an existing one must be the caller's own, empty unless `--force`), else a new
/// private `tcptail-lab-XXXXXXXXXX` (random, 0700) under `$XDG_RUNTIME_DIR` or the temporary
/// directory: a predictable name in `/tmp` would let another user plant it first.
fn prepare_out_dir(spec: &LabSpec) -> Result<PathBuf, LabError> {
    match &spec.out_dir {
        Some(dir) => {
            files::prepare_out_dir(dir, spec.force)?;
            Ok(dir.clone())
        }
        None => {
            let parent = files::runtime_or_temp_dir();
            files::create_private_dir(&parent, "tcptail-lab-")
                .map_err(output_err(&parent, "create a private directory in"))
        }
    }
}

fn interrupted() -> Result<(), LabError> {
    if signal::shutdown_requested() { Err(LabError::Interrupted) } else { Ok(()) }
}

fn output_err(path: &Path, op: &'static str) -> impl FnOnce(std::io::Error) -> LabError {
    let path = path.to_owned();
    move |source| LabError::Output { path, op, source }
}

fn status_view(command: Vec<String>, status: Option<ExitStatus>) -> CommandView {
    CommandView {
        command,
        exit_code: status.and_then(|s| s.code()),
        signal: status.and_then(|s| s.signal()),
    }
}

impl LabRun {
    /// Sets the lab up: root check, signal handlers, output directory, namespaces, TCP buffers,
    /// emulator, server command. On error, whatever was created is removed before this returns.
    pub fn start(spec: &LabSpec) -> Result<LabRun, LabError> {
        tcptail_netns::ensure_root()?;
        signal::install(signal::DEFAULT_GRACE)?;
        let out_dir = prepare_out_dir(spec)?;
        let shape = match (spec.emulator, &spec.path) {
            (EmulatorKind::Builtin, Some(p)) => PathShape::Emulated(p.clone()),
            (EmulatorKind::Netem, Some(p)) => PathShape::Netem(p.clone()),
            _ => PathShape::Veth,
        };
        let builtin = matches!(shape, PathShape::Emulated(_));
        let path = spec.path.as_ref();
        let report = LabReport {
            tcptail_version: env!("CARGO_PKG_VERSION"),
            emulator: spec.emulator,
            threads: builtin.then_some(spec.threads),
            placement: spec.placement.clone(),
            seed: spec.seed,
            started_unix_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            client_duration_s: 0.0,
            up: path.map(|p| DirectionView::from(&p.up)),
            down: path.map(|p| DirectionView::from(&p.down)),
            base_rtt_us: u64::try_from(spec.rtt().as_micros()).unwrap_or(u64::MAX),
            namespaces: BTreeMap::new(),
            addresses: BTreeMap::from([
                ("client", CLIENT_ADDR.to_string()),
                ("server", SERVER_ADDR.to_string()),
            ]),
            tcp_buffers: None,
            sysctls: BTreeMap::new(),
            netem_qdiscs: Vec::new(),
            events: spec.events.iter().map(ToString::to_string).collect(),
            event_times: Vec::new(),
            server: None,
            client: None,
            emulator_report: None,
            lateness_bound_us: u64::try_from(spec.lateness_bound.as_micros()).unwrap_or(u64::MAX),
            lateness_flagged: None,
            files: Vec::new(),
        };
        let options = EmulatorOptions {
            seed: spec.seed,
            threads: spec.threads,
            lateness_bound: spec.lateness_bound,
            mahimahi_log_dir: Some(out_dir.clone()),
            command_line: Some(spec.client.join(" ")),
            events: spec.events.clone(),
            ..EmulatorOptions::default()
        };
        let live = LivePath::builder(shape)
            .roles(CLIENT_ROLE, ROUTER_ROLE, SERVER_ROLE)
            .emulator(options)
            .placement(spec.placement.clone())
            .start()?;
        let mut run = LabRun {
            spec: spec.clone(),
            out_dir,
            live,
            server_pid: None,
            server_status: None,
            report,
        };
        run.record_path()?;
        if builtin {
            for log in ["up.log", "down.log"] {
                run.report.files.push(run.out_dir.join(log).display().to_string());
            }
        }
        interrupted()?;
        run.start_server()?;
        Ok(run)
    }

    /// The client namespace's name.
    pub fn client_netns(&self) -> &str {
        self.live.client().name()
    }

    /// The server namespace's name.
    pub fn server_netns(&self) -> &str {
        self.live.server().name()
    }

    /// The output directory (the checked `--out`, or the private one made at start).
    pub fn out_dir(&self) -> &Path {
        &self.out_dir
    }

    /// Where `lab-report.json` will be written.
    pub fn report_path(&self) -> PathBuf {
        self.out_dir.join(REPORT_FILE)
    }

    /// One line for the user: namespaces, addresses, the path and where the report goes.
    pub fn banner(&self) -> String {
        let via = match (self.spec.emulator, self.live.router()) {
            (EmulatorKind::Netem, Some(r)) => format!("netem on router {}", r.name()),
            (EmulatorKind::None, _) => "a plain veth (no emulation)".to_owned(),
            _ if self.spec.threads == EmulatorOptions::default().threads => {
                "the built-in emulator".to_owned()
            }
            _ => format!("the built-in emulator (threads: {})", self.spec.threads),
        };
        let mut path = match &self.spec.path {
            Some(p) => format!("; up: {}; down: {}", p.up, p.down),
            None => String::new(),
        };
        if let Some(p) = &self.spec.placement {
            path.push_str(&format!("; {}", p.describe()));
        }
        format!(
            "lab: client {} ({CLIENT_ADDR}) <-> server {} ({SERVER_ADDR}) via {via}{path}; \
             report: {}",
            self.live.client().name(),
            self.live.server().name(),
            self.report_path().display()
        )
    }

    /// Records what the path set up: TCP buffers, namespaces, every lab sysctl, qdiscs.
    fn record_path(&mut self) -> Result<(), LabError> {
        self.report.tcp_buffers = self.live.tcp_buffers().cloned();
        self.report.netem_qdiscs = self.live.qdiscs().to_vec();
        let mut sides: Vec<(&'static str, &Netns)> =
            vec![("client", self.live.client()), ("server", self.live.server())];
        if let Some(r) = self.live.router() {
            sides.push(("router", r));
        }
        for (side, ns) in sides {
            self.report.namespaces.insert(side, ns.name().to_owned());
            let values = ns.net_sysctls()?.into_iter().map(|(k, v)| (k.key().to_owned(), v));
            self.report.sysctls.insert(side, values.collect());
        }
        Ok(())
    }

    fn start_server(&mut self) -> Result<(), LabError> {
        let Some(server) = self.spec.server.clone() else {
            return Ok(());
        };
        let log = self.out_dir.join(SERVER_LOG);
        let out = files::create_replacing(&log, 0o644).map_err(output_err(&log, "create"))?;
        let err = out.try_clone().map_err(output_err(&log, "open"))?;
        self.report.files.push(log.display().to_string());
        let mut cmd = self.live.server_command("sh");
        cmd.args(["-c", &server.command]).stdin(Stdio::null()).stdout(out).stderr(err);
        let pid = self.live.processes().spawn("server", cmd, Group::Own)?;
        self.server_pid = Some(pid);
        self.wait_ready(server.ready, &server.command, &log)
    }

    /// Whether the server has exited; a failure exit is an error.
    fn server_exited(&mut self, command: &str, log: &Path) -> Result<bool, LabError> {
        let Some(pid) = self.server_pid else {
            return Ok(true);
        };
        let Some(exited) = self.live.processes().try_wait(pid)? else {
            return Ok(false);
        };
        self.server_pid = None;
        self.server_status = Some(exited.status);
        if exited.status.success() {
            // A server that daemonised (`iperf3 -s -D`): keep looking for its socket.
            return Ok(true);
        }
        Err(LabError::ServerExited {
            command: command.to_owned(),
            status: exited.status.to_string(),
            log: log.to_owned(),
        })
    }

    fn wait_ready(&mut self, ready: Readiness, command: &str, log: &Path) -> Result<(), LabError> {
        let (port, timeout) = match ready {
            Readiness::After(d) => (None, d),
            Readiness::AnyListener(d) => (None, d),
            Readiness::Port(p) => (Some(p), PORT_TIMEOUT),
        };
        let deadline = Instant::now() + timeout;
        loop {
            interrupted()?;
            self.server_exited(command, log)?;
            if !matches!(ready, Readiness::After(_)) && self.server_listening(port)? {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return match port {
                    Some(port) => Err(LabError::ServerNotReady { port, log: log.to_owned() }),
                    None => Ok(()),
                };
            }
            std::thread::sleep(POLL.min(deadline.saturating_duration_since(Instant::now())));
        }
    }

    fn server_listening(&self, port: Option<u16>) -> Result<bool, LabError> {
        let tables = self.live.server().run(|| {
            ["/proc/thread-self/net/tcp", "/proc/thread-self/net/tcp6"]
                .map(|p| fs::read_to_string(p).unwrap_or_default())
        })?;
        Ok(tables.iter().any(|t| listening(t, port)))
    }

    /// Runs the client command to completion, then stops everything and writes the report.
    pub fn run(mut self) -> Result<LabOutcome, LabError> {
        let started = Instant::now();
        let client = self.spec.client.clone();
        let mut cmd = self.live.client_command(&client[0]);
        cmd.args(&client[1..]);
        // An interactive command must stay in the terminal's foreground process group.
        let group = if std::io::stdin().is_terminal() { Group::Inherit } else { Group::Own };
        // A signal during setup already terminated every registered process; a client started
        // after it would run unharmed, so check first, and again once it is registered.
        interrupted()?;
        let pid = self.live.processes().spawn("client", cmd, group)?;
        if signal::shutdown_requested() {
            let _ = self.live.processes().signal(pid, rustix::process::Signal::TERM);
        }
        // Ctrl-C in the terminal reaches the interactive command itself; it decides.
        let _foreground = ForegroundChild::set(group == Group::Inherit);
        let status = self.live.processes().wait(pid)?.status;
        self.report.client_duration_s = started.elapsed().as_secs_f64();
        self.report.client = Some(status_view(client, Some(status)));

        self.stop_server();
        let lateness_flag = self.stop_emulator();
        let report_path = self.report_path();
        // From here on the command's result is known: a failure to write the report or to
        // tear down is reported beside it, never instead of it.
        let mut lab_errors = Vec::new();
        if let Err(e) = self.write_report(&report_path) {
            lab_errors.push(e);
        }
        if let Err(e) = self.live.stop().teardown {
            lab_errors.push(e.into());
        }
        let exit_code = status.code().unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
        Ok(LabOutcome {
            status,
            exit_code,
            report_path,
            lateness_flag,
            signal: signal::received(),
            lab_errors,
        })
    }

    fn stop_server(&mut self) {
        let Some(server) = self.spec.server.clone() else {
            return;
        };
        if let Some(pid) = self.server_pid {
            let deadline = Instant::now() + SERVER_EXIT_GRACE;
            while Instant::now() < deadline {
                match self.live.processes().try_wait(pid) {
                    Ok(Some(exited)) => {
                        self.server_status = Some(exited.status);
                        self.server_pid = None;
                        break;
                    }
                    Ok(None) => std::thread::sleep(POLL),
                    Err(_) => break,
                }
            }
        }
        if self.server_pid.take().is_some() {
            let grace = tcptail_netns::process::DEFAULT_GRACE;
            let ended = self.live.processes().kill_all(grace);
            if let Some(e) = ended.into_iter().find(|e| e.label == "server") {
                self.server_status = Some(e.status);
            }
        }
        let view = status_view(vec![server.command], self.server_status);
        self.report.server = Some(view);
    }

    /// Stops the built-in emulator, records its report and returns its lateness flag.
    fn stop_emulator(&mut self) -> Option<String> {
        let report = self.live.stop_emulator()?;
        let flag = report.lateness_flag.clone();
        self.report.lateness_flagged = Some(flag.is_some());
        self.report.event_times = report.applied_events(&self.spec.events);
        self.report.emulator_report = serde_json::to_value(&report).ok();
        flag
    }

    fn write_report(&self, path: &Path) -> Result<(), LabError> {
        let mut json = serde_json::to_vec_pretty(&self.report).map_err(std::io::Error::other);
        if let Ok(j) = &mut json {
            j.push(b'\n');
        }
        json.and_then(|j| files::write_atomically(path, &j, 0o644))
            .map_err(output_err(path, "write"))
    }
}

/// While alive, tells the signal watcher that an interactive child owns Ctrl-C.
struct ForegroundChild(bool);

impl ForegroundChild {
    fn set(present: bool) -> ForegroundChild {
        tcptail_netns::signal::set_foreground_child(present);
        ForegroundChild(present)
    }
}

impl Drop for ForegroundChild {
    fn drop(&mut self) {
        if self.0 {
            tcptail_netns::signal::set_foreground_child(false);
        }
    }
}
