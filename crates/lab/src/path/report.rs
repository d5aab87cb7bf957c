//! `lab-report.json`: what a lab run was (path, namespaces, the TCP sysctls it set and read
//! back), how its commands ended, and the emulator's own measurements.
//!
//! Units are in the field names (`_bps`, `_us`, `_ms`). The emulator's report is embedded as
//! that module serialises it, so this file does not restate its schema.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Value, json};
use tcptail_emu::{DirectionSpec, Discipline, EcnBlackhole, LossModel, QueueLimit, Rate, Reorder};

use super::{EmulatorKind, TcpBuffers};

/// One direction of the path, flattened for JSON.
#[derive(Debug, Clone, Serialize)]
pub struct DirectionView {
    /// One-line description (`rate=30mbit delay=5ms queue=droptail [bytes=37500]`).
    pub summary: String,
    /// Constant rate, or the trace's mean rate.
    pub rate_bps: u64,
    /// The trace file, in trace mode.
    pub trace: Option<String>,
    /// One-way propagation delay.
    pub delay_us: u64,
    /// `{"distribution": "uniform"|"normal"|"pareto"|"paretonormal", "us": ...}` (half-width
    /// or sigma).
    pub jitter: Option<Value>,
    /// `{"model": "bernoulli", "p": ...}` or `{"model": "gilbert-elliott", "p", "r", "h", "k"}`.
    pub loss: Option<Value>,
    /// `{"discipline": "fifo"|"codel"|"fq_codel", "limit": {"bytes"|"packets"|"time_us": ...},
    /// "ecn": bool, ...}`.
    pub queue: Value,
    /// `{"p": ..., "gap_us": ...}` when packets are held back to be overtaken.
    pub reorder: Option<Value>,
    /// What an ECN-hostile middlebox drops on arrival: `"syn"` (ECN-setup SYNs), `"data"`
    /// (ECT and CE packets), `"all"` (both), or `null` for no such box.
    pub ecn_blackhole: Option<&'static str>,
}

impl From<&DirectionSpec> for DirectionView {
    fn from(d: &DirectionSpec) -> Self {
        let jitter =
            d.jitter.map(|j| json!({"distribution": j.name(), "us": j.scale().as_micros()}));
        let loss = d.loss.map(|l| match l {
            LossModel::Bernoulli { p } => json!({"model": "bernoulli", "p": p}),
            LossModel::GilbertElliott { p, r, h, k } => {
                json!({"model": "gilbert-elliott", "p": p, "r": r, "h": h, "k": k})
            }
        });
        let limit = match d.queue.limit {
            QueueLimit::Bytes(b) => json!({"bytes": b.bytes()}),
            QueueLimit::Packets(n) => json!({"packets": n}),
            QueueLimit::Time(t) => json!({"time_us": t.as_micros()}),
        };
        let queue = match d.queue.discipline {
            Discipline::Fifo => json!({"discipline": "fifo", "limit": limit}),
            Discipline::Codel { target, interval, ecn } => json!({
                "discipline": "codel", "limit": limit, "ecn": ecn,
                "target_us": target.as_micros(), "interval_us": interval.as_micros(),
            }),
            Discipline::FqCodel { target, interval, quantum, flows, ecn } => json!({
                "discipline": "fq_codel", "limit": limit, "ecn": ecn,
                "target_us": target.as_micros(), "interval_us": interval.as_micros(),
                "quantum": quantum, "flows": flows,
            }),
        };
        let reorder =
            d.reorder.map(|Reorder { p, gap }| json!({"p": p, "gap_us": gap.as_micros()}));
        DirectionView {
            summary: d.to_string(),
            rate_bps: d.rate.mean().bits_per_second(),
            trace: match &d.rate {
                Rate::Trace(t) => Some(t.source().to_owned()),
                Rate::Constant(_) => None,
            },
            delay_us: u64::try_from(d.delay.as_micros()).unwrap_or(u64::MAX),
            jitter,
            loss,
            queue,
            reorder,
            ecn_blackhole: d.ecn_blackhole.map(EcnBlackhole::name),
        }
    }
}

/// How a command ended.
#[derive(Debug, Clone, Serialize)]
pub struct CommandView {
    /// The command as given.
    pub command: Vec<String>,
    /// Its exit code, if it exited.
    pub exit_code: Option<i32>,
    /// The signal that killed it, if one did.
    pub signal: Option<i32>,
}

/// Everything `lab-report.json` holds.
#[derive(Debug, Clone, Serialize)]
pub struct LabReport {
    /// The tcptail version that ran the lab.
    pub tcptail_version: &'static str,
    /// `builtin`, `netem` or `none`.
    pub emulator: EmulatorKind,
    /// The built-in emulator's thread layout (`single`, `per-direction`, `split`,
    /// `pipeline`); `None` for netem or a plain veth.
    pub threads: Option<crate::emulator::Threads>,
    /// Where the emulator, the receive processing and the commands ran
    /// ([`crate::placement::Placement`]); absent: wherever the scheduler put them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement: Option<crate::placement::Placement>,
    /// Seed of the emulator's loss and jitter draws.
    pub seed: u64,
    /// Wall-clock start, ms since the Unix epoch.
    pub started_unix_ms: u64,
    /// Seconds from the start of the client command to its end.
    pub client_duration_s: f64,
    /// Client to server; `None` without an emulated path.
    pub up: Option<DirectionView>,
    /// Server to client.
    pub down: Option<DirectionView>,
    /// Base round trip (sum of the one-way delays).
    pub base_rtt_us: u64,
    /// Namespace names by side (`client`, `server`, `router`).
    pub namespaces: BTreeMap<&'static str, String>,
    /// Addresses by side.
    pub addresses: BTreeMap<&'static str, String>,
    /// The buffer limits the lab computed for the path.
    pub tcp_buffers: Option<TcpBuffers>,
    /// Per side, the lab's sysctls as read back from the namespace after setting them.
    pub sysctls: BTreeMap<&'static str, BTreeMap<String, String>>,
    /// The path events (`5s:blackhole`), in the order given; when each took effect is in the
    /// emulator report's `stats.path_changes` (by index) for each direction.
    pub events: Vec<String>,
    /// The same events with their scheduled time and when each had taken effect in both
    /// directions (`applied_s`, seconds from the emulator's start; `null` if the run ended
    /// first).
    pub event_times: Vec<tcptail_report::PathEventRecord>,
    /// `--emulator netem`: the `tc` command lines that installed the qdiscs.
    pub netem_qdiscs: Vec<String>,
    /// The server command, if there was one.
    pub server: Option<CommandView>,
    /// The client command.
    pub client: Option<CommandView>,
    /// The built-in emulator's report (self-measured lateness, per-direction stats).
    pub emulator_report: Option<Value>,
    /// The lateness bound the run was checked against.
    pub lateness_bound_us: u64,
    /// Whether the emulator's p99 lateness exceeded the bound (`None` without the emulator).
    pub lateness_flagged: Option<bool>,
    /// Files the run wrote besides this one (emulator logs, server output).
    pub files: Vec<String>,
}
