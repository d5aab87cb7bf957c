//! The values of `tcptail lab path`'s flags and their syntax ([`FromStr`] for clap's value
//! parsers): [`LossArg`], [`BufferArg`], [`QueueArg`], [`JitterArg`], [`ReadyArg`],
//! [`EmulatorKind`]. The syntax is tabled in the [parent module's docs](super). Parsing is
//! pure; errors ([`ArgError`]) say what was expected, and the front end adds the flag's name.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use tcptail_emu::{Discipline, Jitter, LossModel};
use tcptail_units::{ByteSize, Percent, parse_duration};

/// A value that does not follow its flag's syntax (the front end adds the flag's name).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ArgError(String);

fn arg_err(msg: impl Into<String>) -> ArgError {
    ArgError(msg.into())
}

/// Which emulator carries the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EmulatorKind {
    /// The userspace TUN emulator (`tcptail_lab::emulator`); works on every kernel with TUN.
    #[default]
    Builtin,
    /// Kernel netem qdiscs on a router namespace between client and server.
    Netem,
    /// A plain veth pair, no shaping (datacenter-like paths).
    None,
}

impl FromStr for EmulatorKind {
    type Err = ArgError;
    fn from_str(s: &str) -> Result<Self, ArgError> {
        match s.trim().to_ascii_lowercase().as_str() {
            "builtin" => Ok(EmulatorKind::Builtin),
            "netem" => Ok(EmulatorKind::Netem),
            "none" => Ok(EmulatorKind::None),
            _ => Err(arg_err(format!("unknown emulator '{s}' (use builtin, netem or none)"))),
        }
    }
}

impl fmt::Display for EmulatorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            EmulatorKind::Builtin => "builtin",
            EmulatorKind::Netem => "netem",
            EmulatorKind::None => "none",
        })
    }
}

/// A loss model from `--loss`; see the [`crate::path`] docs for the syntax.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LossArg(pub LossModel);

fn percent(what: &str, s: &str) -> Result<f64, ArgError> {
    s.trim().parse::<Percent>().map(Percent::fraction).map_err(|e| arg_err(format!("{what}: {e}")))
}

impl FromStr for LossArg {
    type Err = ArgError;
    fn from_str(s: &str) -> Result<Self, ArgError> {
        let s = s.trim();
        let Some(rest) = s.strip_prefix("ge:").or_else(|| s.strip_prefix("gemodel:")) else {
            let p = s.parse::<Percent>().map_err(|e| {
                arg_err(format!("{e} (or ge:RATE,burst=N for bursts, e.g. ge:1%,burst=4)"))
            })?;
            return Ok(LossArg(LossModel::Bernoulli { p: p.fraction() }));
        };
        let items: Vec<&str> = rest.split(',').map(str::trim).collect();
        if !items[0].contains('=') {
            // ge:RATE,burst=N
            let rate = percent("loss rate", items[0])?;
            let mut burst = None;
            for item in &items[1..] {
                match item.split_once('=') {
                    Some(("burst", v)) => {
                        let b: f64 = v.trim().parse().map_err(|_| {
                            arg_err(format!("burst '{v}' is not a number of packets"))
                        })?;
                        burst = Some(b);
                    }
                    _ => return Err(arg_err(format!("unknown item '{item}' (expected burst=N)"))),
                }
            }
            let burst = burst.ok_or_else(|| {
                arg_err("ge:RATE needs the mean burst length, e.g. ge:1%,burst=4")
            })?;
            if !(burst.is_finite() && burst >= 1.0) {
                return Err(arg_err(format!("burst={burst}: a burst is at least 1 packet")));
            }
            if rate >= 1.0 {
                return Err(arg_err("a bursty loss rate must be below 100%"));
            }
            let model = LossModel::gilbert(rate, burst);
            if let LossModel::GilbertElliott { p, .. } = model
                && p > 1.0
            {
                return Err(arg_err(format!(
                    "a {}% loss rate in bursts of {burst} packets is impossible (the good \
                     stretches would be shorter than one packet); use a longer burst",
                    rate * 100.0
                )));
            }
            return Ok(LossArg(model));
        }
        let (mut p, mut r, mut bad_loss, mut good_loss) = (None, None, 1.0, 0.0);
        for item in items {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| arg_err(format!("'{item}' is not KEY=VALUE")))?;
            match key.trim() {
                "p" => p = Some(percent("p", value)?),
                "r" => r = Some(percent("r", value)?),
                "bad-loss" => bad_loss = percent("bad-loss", value)?,
                "good-loss" => good_loss = percent("good-loss", value)?,
                other => {
                    return Err(arg_err(format!(
                        "unknown key '{other}' (use p, r, bad-loss, good-loss)"
                    )));
                }
            }
        }
        let (Some(p), Some(r)) = (p, r) else {
            return Err(arg_err("ge:p=..,r=.. needs both p and r (e.g. ge:p=0.5%,r=25%)"));
        };
        Ok(LossArg(LossModel::GilbertElliott { p, r, h: 1.0 - bad_loss, k: 1.0 - good_loss }))
    }
}

/// A bottleneck buffer size from `--buffer`; see the [`crate::path`] docs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BufferArg {
    /// Bytes waiting.
    Bytes(ByteSize),
    /// Packets waiting.
    Packets(u64),
    /// Longest wait before serialisation.
    Time(Duration),
    /// Multiples of the direction's BDP (rate x base RTT).
    Bdp(f64),
}

const DURATION_UNITS: &[&str] = &["ns", "us", "µs", "μs", "ms", "s", "sec", "min", "h"];

impl FromStr for BufferArg {
    type Err = ArgError;
    fn from_str(s: &str) -> Result<Self, ArgError> {
        let text = s.trim();
        let lower = text.to_ascii_lowercase();
        let forms = "use bytes (375KB), packets (250pkt), time (100ms) or BDPs (2bdp)";
        if let Some(n) = lower.strip_suffix("bdp") {
            let n = n.trim();
            let m: f64 = if n.is_empty() { Ok(1.0) } else { n.parse() }
                .map_err(|_| arg_err(format!("'{text}': '{n}' is not a number")))?;
            if !(m.is_finite() && m > 0.0) {
                return Err(arg_err(format!("'{text}': the BDP multiple must be above zero")));
            }
            return Ok(BufferArg::Bdp(m));
        }
        for suffix in ["packets", "packet", "pkts", "pkt"] {
            if let Some(n) = lower.strip_suffix(suffix) {
                return n.trim().parse().map(BufferArg::Packets).map_err(|_| {
                    arg_err(format!("'{text}': '{}' is not a whole number of packets", n.trim()))
                });
            }
        }
        let unit_at = text
            .char_indices()
            .find(|&(_, c)| !(c.is_ascii_digit() || matches!(c, '.' | '_' | '-' | '+')))
            .map_or(text.len(), |(i, _)| i);
        let unit = text[unit_at..].trim();
        if unit.is_empty() {
            return Err(arg_err(format!("'{text}' has no unit: {forms}")));
        }
        if DURATION_UNITS.contains(&unit) {
            return parse_duration(text).map(BufferArg::Time).map_err(|e| arg_err(e.to_string()));
        }
        text.parse::<ByteSize>().map(BufferArg::Bytes).map_err(|e| arg_err(format!("{e}; {forms}")))
    }
}

/// A queue discipline from `--queue`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueArg(pub Discipline);

impl FromStr for QueueArg {
    type Err = ArgError;
    fn from_str(s: &str) -> Result<Self, ArgError> {
        let s = s.trim();
        match s {
            "fifo" | "droptail" => return Ok(QueueArg(Discipline::Fifo)),
            "codel" => return Ok(QueueArg(Discipline::codel())),
            _ => {}
        }
        let Some(rest) = s.strip_prefix("codel:") else {
            return Err(arg_err(format!(
                "unknown queue '{s}' (use fifo, codel or codel:target=5ms,interval=100ms)"
            )));
        };
        let Discipline::Codel { mut target, mut interval } = Discipline::codel() else {
            unreachable!("Discipline::codel() is CoDel")
        };
        for item in rest.split(',') {
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| arg_err(format!("'{item}' is not KEY=VALUE")))?;
            let d = parse_duration(value.trim()).map_err(|e| arg_err(format!("{key}: {e}")))?;
            match key.trim() {
                "target" => target = d,
                "interval" => interval = d,
                other => {
                    return Err(arg_err(format!("unknown CoDel key '{other}' (target, interval)")));
                }
            }
        }
        Ok(QueueArg(Discipline::Codel { target, interval }))
    }
}

/// Delay variation from `--jitter`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JitterArg(pub Jitter);

impl FromStr for JitterArg {
    type Err = ArgError;
    fn from_str(s: &str) -> Result<Self, ArgError> {
        let s = s.trim();
        let (kind, value) = s.split_once(':').unwrap_or(("uniform", s));
        let d = parse_duration(value.trim()).map_err(|e| arg_err(e.to_string()))?;
        match kind.trim() {
            "uniform" => Ok(JitterArg(Jitter::Uniform { max: d })),
            "normal" => Ok(JitterArg(Jitter::Normal { sigma: d })),
            other => Err(arg_err(format!("unknown jitter '{other}' (use uniform:D or normal:D)"))),
        }
    }
}

/// When the client may start, from `--server-ready`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadyArg {
    /// Until any TCP socket listens in the server namespace (at most 2 s).
    #[default]
    Auto,
    /// Until this TCP port listens in the server namespace.
    Port(u16),
    /// After a fixed pause.
    After(Duration),
}

impl FromStr for ReadyArg {
    type Err = ArgError;
    fn from_str(s: &str) -> Result<Self, ArgError> {
        let s = s.trim();
        if s == "auto" {
            return Ok(ReadyArg::Auto);
        }
        if !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()) {
            return match s.parse::<u16>() {
                Ok(port) if port > 0 => Ok(ReadyArg::Port(port)),
                _ => Err(arg_err(format!("'{s}' is not a TCP port (1-65535)"))),
            };
        }
        parse_duration(s)
            .map(ReadyArg::After)
            .map_err(|e| arg_err(format!("{e} (or a TCP port, or auto)")))
    }
}
