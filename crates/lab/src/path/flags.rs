//! [`PathFlags`], the typed flags of `tcptail lab path`, and [`PathFlags::check`], which turns
//! them into a [`LabSpec`] without creating anything.
//!
//! The syntax of each value is tabled in the [parent module's docs](super).
//!
//! Per direction, a `-up`/`-down` flag overrides the flag for both directions, `--rtt` is split
//! evenly between the two one-way delays, and the buffer defaults to one BDP
//! ([`tcptail_emu::QueueSpec::default_for`]: the direction's rate x the base RTT, at least
//! ten packets).
//!
//! Rates and traces follow the same rule: `--rate-up`, `--trace-up` and `--trace UP,DOWN` set
//! one direction, `--rate` and `--trace FILE` both; see [`PathFlags::check`].

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tcptail_emu::{
    BufferSize, DeliveryTrace, DirectionSpec, Discipline, EcnBlackhole, FQ_CODEL_DEFAULT_LIMIT,
    Jitter, LossModel, PathSpec, QueueSpec, Rate, Reorder,
};
use tcptail_units::{Bdp, BitRate};

use super::values::{EmulatorKind, ReadyArg};
use super::{ANY_LISTENER_TIMEOUT, LabError, LabSpec, Readiness, ServerSpec};
use crate::emulator::{EmulatorOptions, Threads};
use crate::placement::PlacementRequest;

/// The flags of `tcptail lab path`, typed but not yet checked against each other; see the
/// [`crate::path`] docs. `-up`/`-down` fields override the both-directions field.
#[derive(Debug, Clone, Default)]
#[allow(missing_docs)]
pub struct PathFlags {
    pub rate: Option<BitRate>,
    pub rate_up: Option<BitRate>,
    pub rate_down: Option<BitRate>,
    /// Mahimahi traces: one file (both directions) or two (up, down).
    pub trace: Vec<PathBuf>,
    /// Mahimahi trace, client to server only.
    pub trace_up: Option<PathBuf>,
    /// Mahimahi trace, server to client only.
    pub trace_down: Option<PathBuf>,
    pub rtt: Option<Duration>,
    /// One-way delay, both directions.
    pub delay: Option<Duration>,
    pub delay_up: Option<Duration>,
    pub delay_down: Option<Duration>,
    pub jitter: Option<Jitter>,
    pub jitter_up: Option<Jitter>,
    pub jitter_down: Option<Jitter>,
    pub loss: Option<LossModel>,
    pub loss_up: Option<LossModel>,
    pub loss_down: Option<LossModel>,
    pub buffer: Option<BufferSize>,
    pub buffer_up: Option<BufferSize>,
    pub buffer_down: Option<BufferSize>,
    pub queue: Option<Discipline>,
    /// Reordering, both directions.
    pub reorder: Option<Reorder>,
    pub reorder_up: Option<Reorder>,
    pub reorder_down: Option<Reorder>,
    /// An ECN-hostile middlebox in both directions: what it drops.
    pub ecn_blackhole: Option<EcnBlackhole>,
    /// Path events on the emulator's clock (`5s:blackhole`), both directions.
    pub events: Vec<tcptail_emu::PathEvent>,
    pub emulator: EmulatorKind,
    /// The built-in emulator's thread layout (default [`Threads::Single`]).
    pub threads: Option<Threads>,
    /// Where the built-in emulator and the endpoints run (`--emulator-cpu`, `--steer`,
    /// `--endpoints-apart`; see [`crate::placement`]).
    pub placement: PlacementRequest,
    pub out: Option<PathBuf>,
    pub force: bool,
    pub lateness_bound: Option<Duration>,
    pub seed: Option<u64>,
    pub server_cmd: Option<String>,
    pub server_ready: Option<ReadyArg>,
    /// The client command: program and arguments.
    pub command: Vec<String>,
}

/// Which flag set each field of one direction, for error messages.
struct Origin {
    rate: String,
    delay: &'static str,
    jitter: &'static str,
    loss: &'static str,
    buffer: &'static str,
    reorder: &'static str,
}

impl Origin {
    fn for_field(&self, field: &str) -> String {
        match field.split('.').next().unwrap_or(field) {
            "rate" => self.rate.clone(),
            "delay" => self.delay.to_owned(),
            "jitter" => self.jitter.to_owned(),
            "loss" => self.loss.to_owned(),
            "reorder" => self.reorder.to_owned(),
            _ if field.starts_with("queue.codel") => "--queue".to_owned(),
            _ => self.buffer.to_owned(),
        }
    }
}

/// The value for one direction: the `-up`/`-down` flag if given, else the both-directions
/// flag; with the name of the flag that supplied it.
fn pick<T: Copy>(
    up: bool,
    (up_value, down_value): (Option<T>, Option<T>),
    both: Option<T>,
    flag: &'static [&'static str; 3],
) -> (Option<T>, &'static str) {
    let (specific, name) = if up { (up_value, flag[1]) } else { (down_value, flag[2]) };
    match specific {
        Some(v) => (Some(v), name),
        None => (both, flag[0]),
    }
}

impl PathFlags {
    /// Checks everything and builds the [`LabSpec`]. Reads trace files and looks the command up
    /// on `PATH`; creates nothing. Every error is a usage error naming the flag or file.
    pub fn check(&self) -> Result<LabSpec, LabError> {
        let client = check_command(&self.command)?;
        let server = self.check_server()?;
        let path = match self.emulator {
            EmulatorKind::None => {
                self.reject_shaping()?;
                None
            }
            kind => Some(self.check_path(kind)?),
        };
        let seed = self.seed.unwrap_or_else(default_seed);
        if self.lateness_bound.is_some_and(|b| b.is_zero()) {
            return Err(LabError::flag("--lateness-bound", "must be greater than zero"));
        }
        if let Some(threads) = self.threads
            && self.emulator != EmulatorKind::Builtin
        {
            return Err(LabError::flag(
                "--threads",
                format!(
                    "{threads}: only the built-in emulator has threads to lay out; drop \
                     --threads or use --emulator builtin (not {})",
                    self.emulator
                ),
            ));
        }
        let placement = self.check_placement()?;
        Ok(LabSpec {
            placement,
            path,
            events: self.events.clone(),
            emulator: self.emulator,
            threads: self.threads.unwrap_or(EmulatorOptions::default().threads),
            out_dir: self.out.clone(),
            force: self.force,
            lateness_bound: self
                .lateness_bound
                .unwrap_or_else(|| EmulatorOptions::default().lateness_bound),
            seed,
            client,
            server,
        })
    }

    /// Checks the placement against this machine's CPUs (reads them, changes nothing).
    fn check_placement(&self) -> Result<Option<crate::placement::Placement>, LabError> {
        let Some(first) = self.placement.first_asked() else {
            return Ok(None);
        };
        if self.emulator != EmulatorKind::Builtin {
            return Err(LabError::flag(
                first.flag(),
                format!(
                    "only the built-in emulator has threads to place; drop it or use \
                     --emulator builtin (not {})",
                    self.emulator
                ),
            ));
        }
        self.placement.resolve().map_err(|e| LabError::flag(e.option().flag(), e.to_string()))
    }

    fn check_server(&self) -> Result<Option<ServerSpec>, LabError> {
        let Some(command) = &self.server_cmd else {
            return match self.server_ready {
                Some(_) => Err(LabError::flag("--server-ready", "needs --server-cmd")),
                None => Ok(None),
            };
        };
        if command.trim().is_empty() {
            return Err(LabError::flag("--server-cmd", "is empty"));
        }
        let ready = match self.server_ready.unwrap_or_default() {
            ReadyArg::Auto => Readiness::AnyListener(ANY_LISTENER_TIMEOUT),
            ReadyArg::Port(p) => Readiness::Port(p),
            ReadyArg::After(d) => Readiness::After(d),
        };
        Ok(Some(ServerSpec { command: command.clone(), ready }))
    }

    fn reject_shaping(&self) -> Result<(), LabError> {
        let set = [
            ("--rate", self.rate.is_some()),
            ("--rate-up", self.rate_up.is_some()),
            ("--rate-down", self.rate_down.is_some()),
            ("--trace", !self.trace.is_empty()),
            ("--trace-up", self.trace_up.is_some()),
            ("--trace-down", self.trace_down.is_some()),
            ("--rtt", self.rtt.is_some()),
            ("--delay", self.delay.is_some()),
            ("--delay-up", self.delay_up.is_some()),
            ("--delay-down", self.delay_down.is_some()),
            ("--jitter", self.jitter.is_some()),
            ("--jitter-up", self.jitter_up.is_some()),
            ("--jitter-down", self.jitter_down.is_some()),
            ("--loss", self.loss.is_some()),
            ("--loss-up", self.loss_up.is_some()),
            ("--loss-down", self.loss_down.is_some()),
            ("--buffer", self.buffer.is_some()),
            ("--buffer-up", self.buffer_up.is_some()),
            ("--buffer-down", self.buffer_down.is_some()),
            ("--queue", self.queue.is_some()),
            ("--reorder", self.reorder.is_some()),
            ("--reorder-up", self.reorder_up.is_some()),
            ("--reorder-down", self.reorder_down.is_some()),
            ("--ecn-blackhole", self.ecn_blackhole.is_some()),
            ("--event", !self.events.is_empty()),
        ];
        match set.iter().find(|(_, given)| *given) {
            Some((flag, _)) => Err(LabError::flag(
                *flag,
                "--emulator none is a plain veth without shaping; drop the flag or use \
                 --emulator builtin",
            )),
            None => Ok(()),
        }
    }

    fn check_path(&self, kind: EmulatorKind) -> Result<PathSpec, LabError> {
        if self.trace.len() > 2 {
            return Err(LabError::flag(
                "--trace",
                "give one file (both directions) or two (UP,DOWN)",
            ));
        }
        if self.rtt.is_some() && self.delay.is_some() {
            return Err(LabError::flag(
                "--rtt",
                "--rtt and --delay both set the delays; give one (--rtt = 2 x --delay)",
            ));
        }
        let (up_delay, down_delay) = match (self.rtt, self.delay) {
            (Some(rtt), _) => (rtt / 2, rtt - rtt / 2),
            (None, Some(d)) => (d, d),
            (None, None) => (Duration::ZERO, Duration::ZERO),
        };
        let delay_up = self.delay_up.unwrap_or(up_delay);
        let delay_down = self.delay_down.unwrap_or(down_delay);
        let rtt = delay_up + delay_down;
        let up = self.direction(Dir::Up, delay_up, rtt)?;
        let down = self.direction(Dir::Down, delay_down, rtt)?;
        self.reject_unused_rate_source([&up.2, &down.2])?;
        let spec = PathSpec { up: up.0, down: down.0 };
        if let Err(source) = spec.validate() {
            let (dir, field) = source.field.split_once('.').unwrap_or(("up", &source.field));
            let origin = if dir == "down" { &down.1 } else { &up.1 };
            return Err(LabError::Spec {
                flag: origin.for_field(field),
                problem: format!("{dir} direction: {}", source.problem),
                source,
            });
        }
        for (name, dir) in [("up", &spec.up), ("down", &spec.down)] {
            if let Err(source) = tcptail_emu::validate_events(dir, &self.events) {
                let index = source.field.trim_start_matches("event[").trim_end_matches(']');
                let event = index.parse::<usize>().ok().and_then(|i| self.events.get(i));
                let event = event.map_or_else(String::new, |e| format!("{e}: "));
                return Err(LabError::Spec {
                    flag: "--event".to_owned(),
                    problem: format!("{event}{name} direction: {}", source.problem),
                    source,
                });
            }
        }
        if kind == EmulatorKind::Netem {
            if let Some(flag) =
                [up.2.flag, down.2.flag].into_iter().find(|f| f.starts_with("--trace"))
            {
                return Err(LabError::flag(
                    flag,
                    "netem cannot replay Mahimahi traces; use --emulator builtin",
                ));
            }
            if !matches!(spec.up.queue.discipline, Discipline::Fifo) {
                return Err(LabError::flag(
                    "--queue",
                    "CoDel and fq_codel are only available with --emulator builtin",
                ));
            }
            if let Some(flag) = [
                ("--reorder", self.reorder.is_some()),
                ("--reorder-up", self.reorder_up.is_some()),
                ("--reorder-down", self.reorder_down.is_some()),
                ("--ecn-blackhole", self.ecn_blackhole.is_some()),
                ("--event", !self.events.is_empty()),
            ]
            .into_iter()
            .find_map(|(flag, given)| given.then_some(flag))
            {
                return Err(LabError::flag(
                    flag,
                    "is only available with --emulator builtin (netem's reorder sends the chosen \
                     packets early rather than holding them back; it has no ECN blackhole and \
                     no timeline)",
                ));
            }
        }
        Ok(spec)
    }

    fn direction(
        &self,
        dir: Dir,
        delay: Duration,
        rtt: Duration,
    ) -> Result<(DirectionSpec, Origin, RateSource<'_>), LabError> {
        let up = dir == Dir::Up;
        let source = self.rate_source(dir)?;
        let rate = match source.value {
            RateValue::Trace(file) => Rate::Trace(read_trace(file, source.flag)?),
            RateValue::Constant(r) if r.bits_per_second() == 0 => {
                return Err(LabError::flag(source.flag, "must be greater than zero"));
            }
            RateValue::Constant(r) => Rate::Constant(r),
        };
        let rate_flag = source.flag.to_owned();
        let delay_flag = match (up, self.delay_up.is_some(), self.delay_down.is_some()) {
            (true, true, _) => "--delay-up",
            (false, _, true) => "--delay-down",
            _ if self.rtt.is_some() => "--rtt",
            _ => "--delay",
        };
        let (jitter, jitter_flag) = pick(
            up,
            (self.jitter_up, self.jitter_down),
            self.jitter,
            &["--jitter", "--jitter-up", "--jitter-down"],
        );
        let (loss, loss_flag) = pick(
            up,
            (self.loss_up, self.loss_down),
            self.loss,
            &["--loss", "--loss-up", "--loss-down"],
        );
        let (buffer, buffer_flag) = pick(
            up,
            (self.buffer_up, self.buffer_down),
            self.buffer,
            &["--buffer", "--buffer-up", "--buffer-down"],
        );
        let (reorder, reorder_flag) = pick(
            up,
            (self.reorder_up, self.reorder_down),
            self.reorder,
            &["--reorder", "--reorder-up", "--reorder-down"],
        );
        let bdp = Bdp { rate: rate.mean(), rtt };
        let discipline = self.queue.unwrap_or(Discipline::Fifo);
        // fq_codel keeps Linux's default limit: its flows and CoDel manage the queue, the
        // limit only guards memory.
        let default_buffer = match discipline {
            Discipline::FqCodel { .. } => BufferSize::Packets(FQ_CODEL_DEFAULT_LIMIT),
            _ => BufferSize::Bdp(1.0),
        };
        let limit = buffer.unwrap_or(default_buffer).limit(bdp);
        let spec = DirectionSpec {
            rate,
            delay,
            jitter,
            loss,
            queue: QueueSpec { limit, discipline },
            ecn_blackhole: self.ecn_blackhole,
            reorder,
        };
        let origin = Origin {
            rate: rate_flag,
            delay: delay_flag,
            jitter: jitter_flag,
            loss: loss_flag,
            buffer: buffer_flag,
            reorder: reorder_flag,
        };
        Ok((spec, origin, source))
    }

    /// What sets `dir`'s rate: a trace or a constant rate, from a flag for this direction
    /// (`--trace-up`, `--trace UP,DOWN`, `--rate-up`) or, failing that, one for both
    /// (`--trace FILE`, `--rate`). Two flags of the same reach for one direction conflict.
    fn rate_source(&self, dir: Dir) -> Result<RateSource<'_>, LabError> {
        let up = dir == Dir::Up;
        let (trace_flag, rate_flag) =
            if up { ("--trace-up", "--rate-up") } else { ("--trace-down", "--rate-down") };
        let own_trace_flag = if up { &self.trace_up } else { &self.trace_down };
        let listed = match self.trace.as_slice() {
            [u, d] => Some(if up { u } else { d }),
            _ => None,
        };
        let shared_trace = match self.trace.as_slice() {
            [both] => Some(both),
            _ => None,
        };
        let own_trace = match (own_trace_flag, listed) {
            (Some(_), Some(_)) => {
                return Err(LabError::flag(
                    trace_flag,
                    format!("--trace UP,DOWN already gives the {dir} trace; give one"),
                ));
            }
            (Some(file), None) => Some((file, trace_flag)),
            (None, Some(file)) => Some((file, "--trace")),
            (None, None) => None,
        };
        let own_rate = if up { self.rate_up } else { self.rate_down };
        let source = |flag, value, shared| RateSource { flag, value, shared };
        match (own_trace, own_rate) {
            (Some((_, t)), Some(_)) => Err(LabError::flag(
                rate_flag,
                format!("{t} and {rate_flag} both set the {dir} rate; give one"),
            )),
            (Some((file, t)), None) => Ok(source(t, RateValue::Trace(file), false)),
            (None, Some(r)) => Ok(source(rate_flag, RateValue::Constant(r), false)),
            (None, None) => match (shared_trace, self.rate) {
                (Some(_), Some(_)) => Err(LabError::flag(
                    "--rate",
                    format!(
                        "--trace and --rate both set the {dir} rate; give one (or a trace for \
                         one direction with --trace-up/--trace-down)"
                    ),
                )),
                (Some(file), None) => Ok(source("--trace", RateValue::Trace(file), true)),
                (None, Some(r)) => Ok(source("--rate", RateValue::Constant(r), true)),
                (None, None) => Err(LabError::flag(
                    "--rate",
                    "the path needs a rate (e.g. --rate 30mbit, or --rate-up/--rate-down, or \
                     --trace FILE, or --trace-up/--trace-down); --emulator none gives an \
                     unshaped veth",
                )),
            },
        }
    }

    /// A flag for both directions that neither direction used (each has its own) is a
    /// mistake, not a no-op.
    fn reject_unused_rate_source(&self, used: [&RateSource<'_>; 2]) -> Result<(), LabError> {
        let shared_used = |flag: &str| used.iter().any(|s| s.shared && s.flag == flag);
        if self.rate.is_some() && !shared_used("--rate") {
            return Err(LabError::flag(
                "--rate",
                "each direction already has its own rate or trace; drop --rate",
            ));
        }
        if self.trace.len() == 1 && !shared_used("--trace") {
            return Err(LabError::flag(
                "--trace",
                "each direction already has its own rate or trace; drop the shared --trace",
            ));
        }
        Ok(())
    }
}

/// Where one direction's rate comes from, and the flag that gave it.
struct RateSource<'a> {
    flag: &'static str,
    value: RateValue<'a>,
    /// Given by a flag for both directions (`--rate`, `--trace FILE`).
    shared: bool,
}

enum RateValue<'a> {
    Trace(&'a PathBuf),
    Constant(BitRate),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dir {
    Up,
    Down,
}

impl fmt::Display for Dir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Dir::Up => "up (client to server)",
            Dir::Down => "down (server to client)",
        })
    }
}

fn read_trace(file: &Path, flag: &'static str) -> Result<DeliveryTrace, LabError> {
    DeliveryTrace::from_file(file).map_err(|e| LabError::trace(flag, file.to_owned(), &e))
}

fn check_command(command: &[String]) -> Result<Vec<String>, LabError> {
    let Some(program) = command.first() else {
        return Err(LabError::flag("COMMAND", "missing: put the command after --"));
    };
    if find_program(program, std::env::var_os("PATH").as_deref()).is_none() {
        return Err(LabError::CommandNotFound { program: program.clone() });
    }
    Ok(command.to_vec())
}

/// Where `execvp` would find `program`: as given if it contains a `/`, else the first
/// executable `PATH` entry.
pub(crate) fn find_program(program: &str, path: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable =
        |p: &Path| p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    if program.contains('/') {
        let p = PathBuf::from(program);
        return executable(&p).then_some(p);
    }
    std::env::split_paths(path?).map(|dir| dir.join(program)).find(|p| executable(p))
}

fn default_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos ^ (u64::from(std::process::id()) << 32)
}
