//! The network path a variant runs on, from its parameters, and the live path for one round.
//!
//! | `path =` | what is built | keys |
//! |---|---|---|
//! | `"veth"` (default) | client ─veth─ server, no shaping: a datacenter path | `sysctl` |
//! | `"emulated"` | client ─TUN┄built-in emulator┄TUN─ server | `rate` (required), `rtt`, `loss`, `reorder` (`1%,gap=3ms`), `buffer` (default `1bdp`), `queue` (`fifo`, `codel[,ecn]`, `fq_codel[,ecn]`), `ecn_blackhole` (an ECN-hostile middlebox, both directions: `"syn"` drops ECN-setup SYNs, `"data"` or `true` every ECT/CE packet, `"all"` both), `event`, `threads`, `emulator_cpu`, `steer`, `endpoints_apart`, `sysctl` |
//! | `"tbf"` | client ─veth─ router ─veth─ server, kernel `tbf` on the router's egress towards the server, never on the sender | `rate` (required), `buffer` (bytes, default 1 ms at `rate`, at least 64 KB), `sysctl` |
//!
//! `emulator_cpu` (emulated paths only; a CPU number or `"last"`), `steer` and
//! `endpoints_apart` (both `true`/`false`, both need `emulator_cpu`) place the round's work on
//! the machine's CPUs as `tcptail lab path --emulator-cpu N|last --steer --endpoints-apart`
//! does ([`tcptail_lab::placement`]): the emulator's thread(s) pinned to that CPU, both
//! namespaces' receive processing steered to the other CPUs, and the round's own endpoints
//! (the workload's sender and receiver threads, started while the round runs) kept off the
//! emulator's CPU. The CPU is checked against the machine when a round builds its path (a
//! one-CPU machine, or an offline CPU, fails the round with the reason), and each round records
//! the placement it ran with (`rounds[].placement` in `results.json`).
//!
//! `threads` (emulated paths only) lays the built-in emulator out over threads, as `tcptail lab
//! path --threads` does: `"single"` (the default), `"per-direction"`, `"split"` or
//! `"pipeline"`. It is recorded with the variant's parameters in `results.json`.
//!
//! `loss` and `reorder` apply to the data direction only (client to server): losing or
//! reordering ACKs is a different experiment.
//!
//! `event` schedules path events on the emulator's clock, both directions, as `tcptail lab path
//! --event` does. The usual form is the experiment file's top-level `[[event]]` tables
//! (`at = "5s"`, `change = "blackhole"`, optional `variants = [...]`; see
//! `crate::spec::EventSpec`), which reach this reader as the `event` key; the parameter form
//! works too: `event = ["5s:blackhole", "6s:restore"]`, or `[[params.event]]` /
//! `[[variant.event]]` tables with `at` and `change` (changes: `blackhole`, `restore`,
//! `rate=1gbit`, `loss=20%,for=200ms`, `delay=+50ms`). When each event took effect is
//! recorded per round in `results.json` (`rounds[].path_events`).
//!
//! `sysctl = { "net.ipv4.tcp_slow_start_after_idle" = "0" }` is written inside the client and
//! server namespaces (never the host's). On emulated paths the namespaces' `tcp_rmem` and
//! `tcp_wmem` maxima are first raised to fit the path, as `tcptail lab path` does; an explicit
//! `sysctl` entry for them wins.

use std::collections::BTreeMap;
use std::time::Duration;

use tcptail_emu::{
    BufferSize, DirectionSpec, Discipline, EcnBlackhole, LossModel, PathEvent, PathSpec, QueueSpec,
    Reorder,
};
use tcptail_lab::emulator::{EmulatorOptions, EmulatorReport, Threads};
use tcptail_lab::path::LabError;
use tcptail_lab::placement::{CpuChoice, PlacementRequest, Spelling};
pub use tcptail_lab::{LivePath, PathShape};
use tcptail_report::Lateness;
use tcptail_units::{Bdp, BitRate};

use crate::params::{ParamError, Params, required};
use crate::round::{RoundContext, RunError};

/// p99 emulator lateness above which a round's results are marked.
pub const LATENESS_BOUND: Duration = Duration::from_micros(500);

/// A checked path: what to build for each round.
#[derive(Debug, Clone, PartialEq)]
pub struct PathPlan {
    /// The shape (never [`PathShape::Netem`]: this kernel has no netem).
    pub kind: PathShape,
    /// Sysctls for the client and server namespaces.
    pub sysctls: BTreeMap<String, String>,
    /// Path events on the emulator's clock (emulated paths only).
    pub events: Vec<PathEvent>,
    /// The built-in emulator's thread layout (emulated paths only; default
    /// [`Threads::Single`]).
    pub threads: Threads,
    /// Where the emulator, the receive processing and the endpoints run (emulated paths
    /// only; default: the scheduler's choice), resolved against the machine per round.
    pub placement: PlacementRequest,
}

impl PathPlan {
    /// [`PathPlan::from_params`] for an engine that needs the built-in emulator (`path =
    /// "emulated"`): loss, events, ECN or its own report; any other path is refused in the
    /// `workload`'s name.
    pub fn emulated_from_params(params: &Params, workload: &str) -> Result<PathPlan, ParamError> {
        let path = PathPlan::from_params(params)?;
        if !matches!(path.kind, PathShape::Emulated(_)) {
            return Err(ParamError::new(
                "path",
                format!("the {workload} workload needs path = \"emulated\""),
            ));
        }
        Ok(path)
    }

    /// Reads `path`, `rate`, `rtt`, `loss`, `buffer`, `queue`, `event`, `threads`,
    /// `emulator_cpu`, `steer`, `endpoints_apart` and `sysctl`.
    pub fn from_params(params: &Params) -> Result<PathPlan, ParamError> {
        let kind =
            params.choice("path", &["veth", "emulated", "tbf"])?.unwrap_or_else(|| "veth".into());
        let sysctls = params.string_table("sysctl")?.unwrap_or_default();
        for key in sysctls.keys() {
            if !key.starts_with("net.") {
                return Err(ParamError::new(
                    "sysctl",
                    format!("`{key}`: only net.* sysctls are per namespace"),
                ));
            }
        }
        let kind = match kind.as_str() {
            "veth" => {
                for key in
                    ["rate", "rtt", "loss", "reorder", "buffer", "queue", "ecn_blackhole", "event"]
                {
                    if params.has(key) {
                        return Err(ParamError::new(
                            key,
                            "has no effect on path = \"veth\" (use \"emulated\" or \"tbf\")",
                        ));
                    }
                }
                PathShape::Veth
            }
            "tbf" => {
                let rate = required("rate", params.rate("rate")?)?;
                for key in ["rtt", "loss", "reorder", "queue", "ecn_blackhole", "event"] {
                    if params.has(key) {
                        return Err(ParamError::new(
                            key,
                            "is not supported on path = \"tbf\" (this kernel has no netem)",
                        ));
                    }
                }
                let default = (rate.bytes_per_second() / 1000).max(64 * 1024);
                let buffer_bytes = match params
                    .parsed("buffer", |s| s.parse::<BufferSize>().map_err(|e| e.to_string()))?
                {
                    None => default,
                    Some(BufferSize::Bytes(b)) => b.bytes(),
                    Some(BufferSize::Packets(n)) => n * 1500,
                    Some(BufferSize::Time(d)) => Bdp { rate, rtt: d }.bytes().bytes(),
                    Some(BufferSize::Bdp(_)) => {
                        return Err(ParamError::new(
                            "buffer",
                            "a tbf path has no RTT to size a BDP from; give bytes or a time",
                        ));
                    }
                };
                PathShape::Tbf { rate, buffer_bytes: buffer_bytes.max(1600) }
            }
            _ => {
                let rate = required("rate", params.rate("rate")?)?;
                let rtt = params.duration("rtt")?.unwrap_or(Duration::ZERO);
                let loss =
                    params.parsed("loss", |s| s.parse::<LossModel>().map_err(|e| e.to_string()))?;
                let discipline = params
                    .parsed("queue", |s| s.parse::<Discipline>().map_err(|e| e.to_string()))?
                    .unwrap_or(Discipline::Fifo);
                let bdp = Bdp { rate, rtt };
                let limit = params
                    .parsed("buffer", |s| s.parse::<BufferSize>().map_err(|e| e.to_string()))?
                    .unwrap_or(BufferSize::Bdp(1.0))
                    .limit(bdp);
                let reorder = params
                    .parsed("reorder", |s| s.parse::<Reorder>().map_err(|e| e.to_string()))?;
                let ecn_blackhole = ecn_blackhole(params)?;
                let mut dir =
                    DirectionSpec::constant(rate, rtt / 2, QueueSpec { limit, discipline });
                dir.loss = loss;
                dir.reorder = reorder;
                dir.ecn_blackhole = ecn_blackhole;
                // Loss and reordering only on the data direction (client to server): losing
                // or reordering ACKs is a different experiment. A middlebox that drops ECN
                // traffic does so both ways.
                let mut down = dir.clone();
                down.loss = None;
                down.reorder = None;
                let spec = PathSpec { up: dir, down };
                spec.validate().map_err(|e| ParamError::new("path", e.to_string()))?;
                PathShape::Emulated(spec)
            }
        };
        let threads = params.parsed("threads", |s| s.parse::<Threads>())?;
        if threads.is_some() && !matches!(kind, PathShape::Emulated(_)) {
            return Err(ParamError::new(
                "threads",
                "lays out the built-in emulator's threads: it needs path = \"emulated\"",
            ));
        }
        let threads = threads.unwrap_or(EmulatorOptions::default().threads);
        let placement = placement(params, &kind)?;
        let events = events(params)?;
        if let PathShape::Emulated(spec) = &kind {
            for dir in [&spec.up, &spec.down] {
                tcptail_emu::validate_events(dir, &events).map_err(|e| {
                    let i = e.field.trim_start_matches("event[").trim_end_matches(']');
                    let which = i.parse::<usize>().ok().and_then(|i| events.get(i));
                    let which = which.map_or_else(String::new, |w| format!("{w}: "));
                    ParamError::new("event", format!("{which}{}", e.problem))
                })?;
            }
        }
        Ok(PathPlan { kind, sysctls, events, threads, placement })
    }

    /// Base round-trip time of the path (zero for veth and tbf).
    pub fn rtt(&self) -> Duration {
        match &self.kind {
            PathShape::Emulated(p) | PathShape::Netem(p) => p.up.delay + p.down.delay,
            PathShape::Veth | PathShape::Tbf { .. } => Duration::ZERO,
        }
    }

    /// The bottleneck rate, if there is one.
    pub fn rate(&self) -> Option<BitRate> {
        match &self.kind {
            PathShape::Veth => None,
            PathShape::Emulated(p) | PathShape::Netem(p) => Some(p.up.rate.mean()),
            PathShape::Tbf { rate, .. } => Some(*rate),
        }
    }

    /// One line for the report.
    pub fn describe(&self) -> String {
        let base = match &self.kind {
            PathShape::Veth => "veth pair (no shaping)".to_owned(),
            PathShape::Emulated(p) => {
                let mut how = Vec::new();
                if self.threads != EmulatorOptions::default().threads {
                    how.push(format!("emulator threads: {}", self.threads));
                }
                let asked = &self.placement;
                if let Some(cpu) = asked.emulator_cpu {
                    how.push(format!("emulator on CPU {cpu}"));
                }
                if asked.steer {
                    how.push("receive processing steered off it".to_owned());
                }
                if asked.endpoints_apart {
                    how.push("endpoints off it".to_owned());
                }
                if how.is_empty() {
                    format!("emulated path: {}", p.up)
                } else {
                    format!("emulated path: {} ({})", p.up, how.join(", "))
                }
            }
            PathShape::Netem(p) => format!("netem path: {}", p.up),
            PathShape::Tbf { rate, buffer_bytes } => {
                format!(
                    "router with tbf {} Mbit/s, {} KB bucket",
                    rate.0 as f64 / 1e6,
                    buffer_bytes / 1024
                )
            }
        };
        if self.sysctls.is_empty() {
            base
        } else {
            let s: Vec<String> = self.sysctls.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("{base}; {}", s.join(", "))
        }
    }

    /// One round on this path: unless a stop was asked for, builds the path, runs `measure`
    /// on it, and removes it whatever `measure` returned, giving back the result with the
    /// emulator's lateness (for emulated paths). When the path's events took effect goes to
    /// the round's record ([`RoundContext::path_events`]).
    pub fn round<T>(
        &self,
        ctx: &RoundContext<'_>,
        measure: impl FnOnce(&LivePath) -> Result<T, RunError>,
    ) -> Result<(T, Option<Lateness>), RunError> {
        let (measured, lateness, _) = self.round_with_report(ctx, measure)?;
        Ok((measured, lateness))
    }

    /// Like [`PathPlan::round`], also giving back the emulator's whole self-measurement (its
    /// per-direction drops by reason, ECN marks, queueing delay and applied path events) for
    /// emulated paths.
    pub fn round_with_report<T>(
        &self,
        ctx: &RoundContext<'_>,
        measure: impl FnOnce(&LivePath) -> Result<T, RunError>,
    ) -> Result<(T, Option<Lateness>, Option<EmulatorReport>), RunError> {
        if (ctx.stop_requested)() {
            return Err(RunError::Interrupted);
        }
        let live = self.build(ctx.seed)?;
        let outcome = placed(&live, ctx).and_then(|_confined| measure(&live));
        let report = live.stop().emulator;
        if let Some(report) = &report {
            pinning_outcome(report, ctx);
            if !self.events.is_empty() {
                let mut log = ctx.path_events.lock().unwrap_or_else(|p| p.into_inner());
                log.extend(report.applied_events(&self.events));
            }
        }
        Ok((outcome?, report.as_ref().map(lateness), report))
    }

    /// Builds the path for one round; `seed` drives the emulator's loss draws.
    pub fn build(&self, seed: u64) -> Result<LivePath, RunError> {
        tcptail_netns::ensure_root()?;
        let placement = self.placement.resolve().map_err(|e| {
            RunError::failed(
                "place the emulator",
                format!("{}: {}", e.option().key(), e.spelled(Spelling::Key)),
            )
        })?;
        let options = EmulatorOptions {
            seed,
            threads: self.threads,
            lateness_bound: LATENESS_BOUND,
            events: self.events.clone(),
            mahimahi_log_dir: test_log_dir(),
            ..EmulatorOptions::default()
        };
        LivePath::builder(self.kind.clone())
            .roles("xc", "xr", "xs")
            .emulator(options)
            .sysctls(self.sysctls.clone())
            .placement(placement)
            .start()
            .map_err(|e| match e {
                LabError::Netns(e) => RunError::Netns(*e),
                LabError::Interrupted => RunError::Interrupted,
                LabError::Emulator(e) => RunError::failed("start the emulator", e),
                LabError::Tbf { detail } => RunError::failed("tc qdisc add tbf", detail),
                e => RunError::failed("build the path", e),
            })
    }
}

/// The `emulator_cpu`, `steer` and `endpoints_apart` keys, checked for what they need (an
/// emulated path, an emulator CPU); the machine's CPUs are checked when a round builds its
/// path.
fn placement(params: &Params, kind: &PathShape) -> Result<PlacementRequest, ParamError> {
    let request = PlacementRequest {
        emulator_cpu: params
            .parsed("emulator_cpu", |s| s.parse::<CpuChoice>().map_err(|e| e.to_string()))?,
        steer: params.bool("steer")?.unwrap_or(false),
        endpoints_apart: params.bool("endpoints_apart")?.unwrap_or(false),
    };
    let Some(first_set) = request.first_asked() else {
        return Ok(request);
    };
    if !matches!(kind, PathShape::Emulated(_)) {
        return Err(ParamError::new(
            first_set.key(),
            "places the built-in emulator's threads: it needs path = \"emulated\"",
        ));
    }
    request
        .check()
        .map_err(|e| ParamError::new(e.option().key(), e.spelled(Spelling::Key).to_string()))?;
    Ok(request)
}

/// Confines the round's thread (so the endpoints it starts) to the placement's endpoint CPUs
/// and records the placement for the round's record; the confinement ends when the returned
/// guard drops.
fn placed(
    live: &LivePath,
    ctx: &RoundContext<'_>,
) -> Result<Option<tcptail_lab::placement::ThreadConfinement>, RunError> {
    let Some(placement) = live.placement() else {
        return Ok(None);
    };
    *ctx.placement.lock().unwrap_or_else(|p| p.into_inner()) = Some(placement.describe());
    placement
        .confine_current_thread()
        .map(Some)
        .map_err(|e| RunError::io("keep the endpoints off the emulator's CPU", e))
}

/// Adds to the round's recorded placement when the emulator could not pin its thread(s) (the
/// runtime degrades rather than fails): the round then ran unpinned, and its record says so.
fn pinning_outcome(report: &EmulatorReport, ctx: &RoundContext<'_>) {
    let mut placement = ctx.placement.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(text) = placement.as_mut()
        && !report.cpu_affinity.is_applied()
    {
        text.push_str(&format!(" (the emulator's pinning: {})", report.cpu_affinity));
    }
}

/// The `event` key: strings (`"5s:blackhole"`) or tables (`{ at = "5s", change = "blackhole" }`).
/// `ecn_blackhole`: a mode (`"syn"`, `"data"`, `"all"`), or `true` for `"data"` (what the
/// bare `--ecn-blackhole` flag means) and `false` for none.
fn ecn_blackhole(params: &Params) -> Result<Option<EcnBlackhole>, ParamError> {
    match params.raw("ecn_blackhole") {
        None | Some(toml::Value::Boolean(false)) => Ok(None),
        Some(toml::Value::Boolean(true)) => Ok(Some(EcnBlackhole::Data)),
        Some(toml::Value::String(s)) => s
            .parse::<EcnBlackhole>()
            .map(Some)
            .map_err(|e| ParamError::new("ecn_blackhole", e.to_string())),
        Some(other) => Err(ParamError::new(
            "ecn_blackhole",
            format!(
                "expected \"syn\", \"data\", \"all\" or true/false, found {}",
                other.type_str()
            ),
        )),
    }
}

fn events(params: &Params) -> Result<Vec<PathEvent>, ParamError> {
    let items = match params.raw("event") {
        None => return Ok(Vec::new()),
        Some(toml::Value::Array(items)) => items.clone(),
        Some(one @ (toml::Value::String(_) | toml::Value::Table(_))) => vec![one.clone()],
        Some(other) => {
            return Err(ParamError::new(
                "event",
                format!("expected a list of events, found {}", other.type_str()),
            ));
        }
    };
    let text = |v: &toml::Value| -> Result<String, ParamError> {
        match v {
            toml::Value::String(s) => Ok(s.clone()),
            toml::Value::Table(t) => match (t.get("at"), t.get("change")) {
                (Some(toml::Value::String(at)), Some(toml::Value::String(change)))
                    if t.len() == 2 =>
                {
                    Ok(format!("{at}:{change}"))
                }
                _ => Err(ParamError::new(
                    "event",
                    "an [[event]] table has exactly `at` and `change`, both strings \
                     (at = \"5s\", change = \"blackhole\")",
                )),
            },
            other => Err(ParamError::new(
                "event",
                format!("expected \"TIME:CHANGE\" or a table, found {}", other.type_str()),
            )),
        }
    };
    items
        .iter()
        .map(|v| {
            let t = text(v)?;
            t.parse::<PathEvent>().map_err(|e| ParamError::new("event", format!("'{t}': {e}")))
        })
        .collect()
}

#[cfg(test)]
thread_local! {
    /// Where this thread's rounds write the emulator's per-packet logs (`up.log`,
    /// `down.log`): tests match a round's numbers against what the link carried.
    pub(crate) static TEST_LOG_DIR: std::cell::RefCell<Option<std::path::PathBuf>> =
        const { std::cell::RefCell::new(None) };
}

#[cfg(test)]
fn test_log_dir() -> Option<std::path::PathBuf> {
    TEST_LOG_DIR.with(|d| d.borrow().clone())
}

#[cfg(not(test))]
fn test_log_dir() -> Option<std::path::PathBuf> {
    None
}

/// A round's view of the emulator's lateness against [`LATENESS_BOUND`].
fn lateness(report: &EmulatorReport) -> Lateness {
    Lateness {
        worst_p99_us: report.lateness.p99_us,
        max_us: report.lateness.max_us,
        bound_us: LATENESS_BOUND.as_secs_f64() * 1e6,
        flagged_paths: usize::from(report.lateness_flag.is_some()),
        paths: 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> Params {
        Params::from_pairs(pairs.iter().map(|(k, v)| (*k, toml::Value::String((*v).into()))))
    }

    #[test]
    fn emulated_path_from_params() {
        let p =
            params(&[("path", "emulated"), ("rate", "100mbit"), ("rtt", "10ms"), ("loss", "1%")]);
        let plan = PathPlan::from_params(&p).unwrap();
        assert_eq!(plan.rtt(), Duration::from_millis(10));
        assert_eq!(plan.rate(), Some(BitRate(100_000_000)));
        let PathShape::Emulated(spec) = &plan.kind else { panic!("{plan:?}") };
        assert!(spec.up.loss.is_some() && spec.down.loss.is_none());
        assert!(p.unread().is_empty());
    }

    #[test]
    fn events_as_strings_or_tables() {
        let strings = Params::from_pairs([
            ("path", toml::Value::String("emulated".into())),
            ("rate", toml::Value::String("100mbit".into())),
            ("rtt", toml::Value::String("10ms".into())),
            (
                "event",
                toml::Value::Array(vec![
                    toml::Value::String("5s:blackhole".into()),
                    toml::Value::String("6s:restore".into()),
                ]),
            ),
        ]);
        let plan = PathPlan::from_params(&strings).unwrap();
        let text: Vec<String> = plan.events.iter().map(ToString::to_string).collect();
        assert_eq!(text, ["5s:blackhole", "6s:restore"]);
        let table: toml::Value = toml::from_str(
            "event = [{ at = \"2s\", change = \"delay=+50ms\" }]\npath = \"emulated\"\n\
             rate = \"10mbit\"\nrtt = \"10ms\"",
        )
        .unwrap();
        let toml::Value::Table(t) = table else { unreachable!() };
        let params = Params::from_pairs(t.iter().map(|(k, v)| (k.as_str(), v.clone())));
        let plan = PathPlan::from_params(&params).unwrap();
        assert_eq!(plan.events[0].to_string(), "2s:delay=+50ms");
        // Checked against the path: 5 ms of one-way delay cannot lose 10 ms.
        let bad = Params::from_pairs([
            ("path", toml::Value::String("emulated".into())),
            ("rate", toml::Value::String("10mbit".into())),
            ("rtt", toml::Value::String("10ms".into())),
            ("event", toml::Value::String("1s:delay=-10ms".into())),
        ]);
        let e = PathPlan::from_params(&bad).unwrap_err();
        assert_eq!(e.key, "event");
        assert!(e.to_string().contains("1s:delay=-10ms: takes the delay"), "{e}");
        let veth = Params::from_pairs([("event", toml::Value::String("1s:blackhole".into()))]);
        assert_eq!(PathPlan::from_params(&veth).unwrap_err().key, "event");
    }

    /// Through real namespaces (root): a round on an emulated path with events records when
    /// each took effect, and an event after the round's end as not applied.
    #[test]
    fn a_round_records_when_its_path_events_took_effect() {
        let plan = PathPlan::from_params(&Params::from_pairs([
            ("path", toml::Value::String("emulated".into())),
            ("rate", toml::Value::String("10mbit".into())),
            ("rtt", toml::Value::String("2ms".into())),
            (
                "event",
                toml::Value::Array(vec![
                    toml::Value::String("50ms:blackhole".into()),
                    toml::Value::String("1h:restore".into()),
                ]),
            ),
        ]))
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let log = std::sync::Mutex::default();
        let ctx = RoundContext {
            round: 0,
            seed: 1,
            scratch: dir.path(),
            stop_requested: &|| false,
            progress: &|_| {},
            path_events: &log,
            placement: &std::sync::Mutex::default(),
        };
        let ((), lateness) = plan
            .round(&ctx, |_| {
                std::thread::sleep(Duration::from_millis(300));
                Ok(())
            })
            .expect("a real round needs root, namespaces and TUN");
        assert!(lateness.is_some());
        let log = log.into_inner().unwrap();
        assert_eq!(log.len(), 2, "{log:?}");
        assert_eq!((log[0].event.as_str(), log[0].at_s), ("50ms:blackhole", 0.05));
        assert!(log[0].applied_s.is_some_and(|t| t >= 0.05), "{log:?}");
        assert_eq!((log[1].event.as_str(), log[1].applied_s), ("3600s:restore", None));
    }

    #[test]
    fn ecn_blackhole_modes() {
        let with = |v: toml::Value| {
            let p = Params::from_pairs([
                ("path", toml::Value::String("emulated".into())),
                ("rate", toml::Value::String("100mbit".into())),
                ("ecn_blackhole", v),
            ]);
            PathPlan::from_params(&p).map(|plan| match plan.kind {
                PathShape::Emulated(spec) => (spec.up.ecn_blackhole, spec.down.ecn_blackhole),
                other => panic!("{other:?}"),
            })
        };
        for mode in EcnBlackhole::ALL {
            assert_eq!(with(mode.name().into()).unwrap(), (Some(mode), Some(mode)));
        }
        assert_eq!(
            with(true.into()).unwrap(),
            (Some(EcnBlackhole::Data), Some(EcnBlackhole::Data))
        );
        assert_eq!(with(false.into()).unwrap(), (None, None));
        for bad in [toml::Value::from("ect"), toml::Value::from(1)] {
            let err = with(bad).unwrap_err();
            assert_eq!(err.key, "ecn_blackhole");
            assert!(err.to_string().contains("syn"), "{err}");
        }
    }

    #[test]
    fn reorder_and_ecn_blackhole() {
        let p = Params::from_pairs([
            ("path", toml::Value::String("emulated".into())),
            ("rate", toml::Value::String("100mbit".into())),
            ("rtt", toml::Value::String("10ms".into())),
            ("reorder", toml::Value::String("1%,gap=3ms".into())),
            ("ecn_blackhole", toml::Value::Boolean(true)),
        ]);
        let plan = PathPlan::from_params(&p).unwrap();
        let PathShape::Emulated(spec) = &plan.kind else { panic!("{plan:?}") };
        let gap = spec.up.reorder.map(|r| r.gap);
        assert_eq!(gap, Some(Duration::from_millis(3)));
        assert!(spec.down.reorder.is_none());
        assert_eq!(
            (spec.up.ecn_blackhole, spec.down.ecn_blackhole),
            (Some(EcnBlackhole::Data), Some(EcnBlackhole::Data))
        );
        let bad = Params::from_pairs([
            ("path", toml::Value::String("emulated".into())),
            ("rate", toml::Value::String("100mbit".into())),
            ("reorder", toml::Value::String("1%".into())),
        ]);
        assert_eq!(PathPlan::from_params(&bad).unwrap_err().key, "reorder");
        let veth = Params::from_pairs([("ecn_blackhole", toml::Value::Boolean(true))]);
        assert_eq!(PathPlan::from_params(&veth).unwrap_err().key, "ecn_blackhole");
    }

    #[test]
    fn veth_rejects_shaping_keys() {
        let err = PathPlan::from_params(&params(&[("rate", "1gbit")])).unwrap_err();
        assert_eq!(err.key, "rate");
    }

    #[test]
    fn tbf_needs_a_rate_and_rejects_delay() {
        assert_eq!(PathPlan::from_params(&params(&[("path", "tbf")])).unwrap_err().key, "rate");
        let err =
            PathPlan::from_params(&params(&[("path", "tbf"), ("rate", "1gbit"), ("rtt", "1ms")]))
                .unwrap_err();
        assert_eq!(err.key, "rtt");
        let plan = PathPlan::from_params(&params(&[("path", "tbf"), ("rate", "1gbit")])).unwrap();
        assert_eq!(
            plan.kind,
            PathShape::Tbf { rate: BitRate(1_000_000_000), buffer_bytes: 125_000 }
        );
    }

    #[test]
    fn only_net_sysctls() {
        let p = Params::from_pairs([(
            "sysctl",
            toml::Value::Table(
                [("kernel.foo".to_owned(), toml::Value::String("1".into()))].into_iter().collect(),
            ),
        )]);
        assert_eq!(PathPlan::from_params(&p).unwrap_err().key, "sysctl");
    }
}
