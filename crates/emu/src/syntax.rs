//! The text syntax of the path's values, as `tcptail lab path`'s flags and experiment files
//! write them: [`LossModel`], [`Discipline`] and [`Jitter`] parse from text (`FromStr`), and
//! [`BufferSize`] is a buffer as a user gives it, possibly in BDPs. Parsing is pure; a
//! [`SyntaxError`] says what was expected, and the caller adds which flag or key it was.
//!
//! | value | syntax |
//! |---|---|
//! | [`LossModel`] | `1%` (independent losses), `ge:1%,burst=4` (Gilbert bursts: long-run rate, mean burst length in packets), `ge:p=0.5%,r=25%[,bad-loss=100%][,good-loss=0%]` (netem's `loss gemodel p r 1-h 1-k`) |
//! | [`BufferSize`] | `375KB` (bytes), `250pkt` (packets), `100ms` (time a packet may wait), `2bdp` (multiples of rate x RTT) |
//! | [`Discipline`] | `fifo` (drop-tail), `codel`, `codel:target=5ms,interval=100ms` |
//! | [`Jitter`] | `2ms` or `uniform:2ms` (+-2 ms), `normal:1ms` (sigma, cut at 3 sigma); never reorders |

use std::str::FromStr;
use std::time::Duration;

use tcptail_units::{Bdp, ByteSize, Percent, parse_duration};

use crate::{Discipline, Jitter, LossModel, QueueLimit};

/// A value that does not follow its syntax (the caller adds the flag's or key's name).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SyntaxError(String);

fn arg_err(msg: impl Into<String>) -> SyntaxError {
    SyntaxError(msg.into())
}

fn percent(what: &str, s: &str) -> Result<f64, SyntaxError> {
    s.trim().parse::<Percent>().map(Percent::fraction).map_err(|e| arg_err(format!("{what}: {e}")))
}

impl FromStr for LossModel {
    type Err = SyntaxError;
    fn from_str(s: &str) -> Result<Self, SyntaxError> {
        let s = s.trim();
        let Some(rest) = s.strip_prefix("ge:").or_else(|| s.strip_prefix("gemodel:")) else {
            let p = s.parse::<Percent>().map_err(|e| {
                arg_err(format!("{e} (or ge:RATE,burst=N for bursts, e.g. ge:1%,burst=4)"))
            })?;
            return Ok(LossModel::Bernoulli { p: p.fraction() });
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
            return Ok(model);
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
        Ok(LossModel::GilbertElliott { p, r, h: 1.0 - bad_loss, k: 1.0 - good_loss })
    }
}

/// The size of a bottleneck buffer as a user gives it: in bytes, packets, time, or multiples of
/// the path's BDP, which only a path with a rate and an RTT turns into a [`QueueLimit`]
/// ([`BufferSize::limit`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum BufferSize {
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

impl FromStr for BufferSize {
    type Err = SyntaxError;
    fn from_str(s: &str) -> Result<Self, SyntaxError> {
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
            return Ok(BufferSize::Bdp(m));
        }
        for suffix in ["packets", "packet", "pkts", "pkt"] {
            if let Some(n) = lower.strip_suffix(suffix) {
                return n.trim().parse().map(BufferSize::Packets).map_err(|_| {
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
            return parse_duration(text).map(BufferSize::Time).map_err(|e| arg_err(e.to_string()));
        }
        text.parse::<ByteSize>()
            .map(BufferSize::Bytes)
            .map_err(|e| arg_err(format!("{e}; {forms}")))
    }
}

impl BufferSize {
    /// The queue limit this size is on a path whose BDP (rate x base RTT) is `bdp`.
    pub fn limit(self, bdp: Bdp) -> QueueLimit {
        match self {
            BufferSize::Bytes(b) => QueueLimit::Bytes(b),
            BufferSize::Packets(n) => QueueLimit::Packets(n),
            BufferSize::Time(d) => QueueLimit::Time(d),
            BufferSize::Bdp(m) => QueueLimit::from_bdp(bdp, m),
        }
    }
}

impl FromStr for Discipline {
    type Err = SyntaxError;
    fn from_str(s: &str) -> Result<Self, SyntaxError> {
        let s = s.trim();
        match s {
            "fifo" | "droptail" => return Ok(Discipline::Fifo),
            "codel" => return Ok(Discipline::codel()),
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
        Ok(Discipline::Codel { target, interval })
    }
}

impl FromStr for Jitter {
    type Err = SyntaxError;
    fn from_str(s: &str) -> Result<Self, SyntaxError> {
        let s = s.trim();
        let (kind, value) = s.split_once(':').unwrap_or(("uniform", s));
        let d = parse_duration(value.trim()).map_err(|e| arg_err(e.to_string()))?;
        match kind.trim() {
            "uniform" => Ok(Jitter::Uniform { max: d }),
            "normal" => Ok(Jitter::Normal { sigma: d }),
            other => Err(arg_err(format!("unknown jitter '{other}' (use uniform:D or normal:D)"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn value_syntax() {
        assert_eq!("375KB".parse::<BufferSize>().unwrap(), BufferSize::Bytes(ByteSize(375_000)));
        assert_eq!(
            "100ms".parse::<BufferSize>().unwrap(),
            BufferSize::Time(Duration::from_millis(100))
        );
        assert_eq!("1.5bdp".parse::<BufferSize>().unwrap(), BufferSize::Bdp(1.5));
        assert_eq!("10 packets".parse::<BufferSize>().unwrap(), BufferSize::Packets(10));
        for bad in ["375000", "5furlongs", "0bdp", "1.5pkt", "-3ms"] {
            assert!(bad.parse::<BufferSize>().is_err(), "{bad}");
        }
        let ge = "ge:p=1%,r=25%,bad-loss=50%".parse::<LossModel>().unwrap();
        assert_eq!(ge, LossModel::GilbertElliott { p: 0.01, r: 0.25, h: 0.5, k: 1.0 });
        for bad in ["101%", "1", "ge:1%", "ge:1%,burst=0.5", "ge:90%,burst=1", "ge:p=1%", "ge:x=1%"]
        {
            assert!(bad.parse::<LossModel>().is_err(), "{bad}");
        }
        let codel = "codel:target=10ms".parse::<Discipline>().unwrap();
        assert_eq!(
            codel,
            Discipline::Codel {
                target: Duration::from_millis(10),
                interval: Duration::from_millis(100)
            }
        );
        assert!("red".parse::<Discipline>().is_err());
        assert_eq!(
            "normal:2ms".parse::<Jitter>().unwrap(),
            Jitter::Normal { sigma: Duration::from_millis(2) }
        );
    }

    #[test]
    fn buffer_sizes_become_limits() {
        let bdp = Bdp { rate: tcptail_units::BitRate(100_000_000), rtt: Duration::from_millis(10) };
        assert_eq!(BufferSize::Packets(10).limit(bdp), QueueLimit::Packets(10));
        assert_eq!(BufferSize::Bdp(2.0).limit(bdp), QueueLimit::from_bdp(bdp, 2.0));
    }
}
