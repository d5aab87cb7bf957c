//! The text syntax of the path's values, as `tcptail lab path`'s flags and experiment files
//! write them: [`LossModel`], [`Discipline`], [`Jitter`], [`Reorder`] and [`EcnBlackhole`] parse from text
//! (`FromStr`), and [`BufferSize`] is a buffer as a user gives it, possibly in BDPs. Parsing is pure; a
//! [`SyntaxError`] says what was expected, and the caller adds which flag or key it was.
//!
//! | value | syntax |
//! |---|---|
//! | [`LossModel`] | `1%` (independent losses), `ge:1%,burst=4` (Gilbert bursts: long-run rate, mean burst length in packets), `ge:p=0.5%,r=25%[,bad-loss=100%][,good-loss=0%]` (netem's `loss gemodel p r 1-h 1-k`) |
//! | [`BufferSize`] | `375KB` (bytes), `250pkt` (packets), `100ms` (time a packet may wait), `2bdp` (multiples of rate x RTT) |
//! | [`Discipline`] | `fifo` (drop-tail), `codel`, `codel,ecn`, `codel:target=5ms,interval=100ms`, `fq_codel`, `fq_codel,ecn`, `fq_codel:quantum=1514,flows=1024,target=5ms,interval=100ms` |
//! | [`Jitter`] | `2ms` or `uniform:2ms` (+-2 ms), `normal:1ms` (sigma, cut at 3 sigma), `pareto:1ms`, `paretonormal:1ms` (netem's tables); never reorders |
//! | [`Reorder`] | `1%,gap=2ms` (each packet with probability 1% is held back 2 ms) |
//! | [`EcnBlackhole`] | `syn` (drop ECN-setup SYNs), `data` (drop ECT/CE packets), `all` (both) |

use std::str::FromStr;
use std::time::Duration;

use tcptail_units::{Bdp, ByteSize, Percent, parse_duration};

use crate::{Discipline, EcnBlackhole, Jitter, LossModel, QueueLimit, Reorder};

/// A value that does not follow its syntax (the caller adds the flag's or key's name).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SyntaxError(String);

impl SyntaxError {
    pub(crate) fn new(msg: impl Into<String>) -> SyntaxError {
        SyntaxError(msg.into())
    }
}

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
    /// `NAME[(:|,)ITEM,...]`: `fifo`, `codel`, `codel,ecn`, `codel:target=10ms,interval=200ms`,
    /// `fq_codel`, `fq_codel,ecn`, `fq_codel:quantum=300,flows=64,target=5ms`.
    fn from_str(s: &str) -> Result<Self, SyntaxError> {
        let s = s.trim();
        let split = s.find([':', ',']).unwrap_or(s.len());
        let (name, rest) = (&s[..split], s.get(split + 1..).unwrap_or(""));
        let forms = "use fifo, codel[,ecn], fq_codel[,ecn], or with settings like \
                     codel:target=5ms,interval=100ms or fq_codel:quantum=1514,flows=1024,ecn";
        let mut discipline = match name.trim() {
            "fifo" | "droptail" => Discipline::Fifo,
            "codel" => Discipline::codel(),
            "fq_codel" | "fq-codel" | "fqcodel" => Discipline::fq_codel(),
            other => return Err(arg_err(format!("unknown queue '{other}' ({forms})"))),
        };
        if matches!(discipline, Discipline::Fifo) {
            return match rest.trim() {
                "" => Ok(discipline),
                extra => Err(arg_err(format!("fifo takes no settings (got '{extra}')"))),
            };
        }
        for item in rest.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            if item == "ecn" {
                match &mut discipline {
                    Discipline::Codel { ecn, .. } | Discipline::FqCodel { ecn, .. } => *ecn = true,
                    Discipline::Fifo => {}
                }
                continue;
            }
            let (key, value) = item
                .split_once('=')
                .ok_or_else(|| arg_err(format!("'{item}' is not ecn or KEY=VALUE ({forms})")))?;
            let (key, value) = (key.trim(), value.trim());
            let duration = || parse_duration(value).map_err(|e| arg_err(format!("{key}: {e}")));
            let count = || {
                value
                    .parse::<u32>()
                    .map_err(|_| arg_err(format!("{key}: '{value}' is not a whole number")))
            };
            match (&mut discipline, key) {
                (
                    Discipline::Codel { target, .. } | Discipline::FqCodel { target, .. },
                    "target",
                ) => *target = duration()?,
                (
                    Discipline::Codel { interval, .. } | Discipline::FqCodel { interval, .. },
                    "interval",
                ) => *interval = duration()?,
                (Discipline::FqCodel { quantum, .. }, "quantum") => *quantum = count()?,
                (Discipline::FqCodel { flows, .. }, "flows") => *flows = count()?,
                (Discipline::Codel { .. }, _) => {
                    return Err(arg_err(format!(
                        "unknown CoDel setting '{key}' (target, interval, ecn)"
                    )));
                }
                _ => {
                    return Err(arg_err(format!(
                        "unknown fq_codel setting '{key}' (target, interval, quantum, flows, ecn)"
                    )));
                }
            }
        }
        Ok(discipline)
    }
}

impl FromStr for Jitter {
    type Err = SyntaxError;
    /// `D` or `uniform:D` (+-D), `normal:D`, `pareto:D`, `paretonormal:D` (sigma D).
    fn from_str(s: &str) -> Result<Self, SyntaxError> {
        let s = s.trim();
        let (kind, value) = s.split_once(':').unwrap_or(("uniform", s));
        let d = parse_duration(value.trim()).map_err(|e| arg_err(e.to_string()))?;
        match kind.trim() {
            "uniform" => Ok(Jitter::Uniform { max: d }),
            "normal" => Ok(Jitter::Normal { sigma: d }),
            "pareto" => Ok(Jitter::Pareto { sigma: d }),
            "paretonormal" => Ok(Jitter::ParetoNormal { sigma: d }),
            other => Err(arg_err(format!(
                "unknown jitter distribution '{other}' (use uniform:D, normal:D, pareto:D or \
                 paretonormal:D, as netem names them)"
            ))),
        }
    }
}

impl FromStr for Reorder {
    type Err = SyntaxError;
    /// `P%,gap=D`: each packet with probability P is held back D.
    fn from_str(s: &str) -> Result<Self, SyntaxError> {
        let s = s.trim();
        let example = "e.g. 1%,gap=2ms";
        let (p, rest) = s.split_once(',').unwrap_or((s, ""));
        let p =
            percent("reorder probability", p).map_err(|e| arg_err(format!("{e} ({example})")))?;
        let mut gap = None;
        for item in rest.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            match item.split_once('=') {
                Some(("gap", v)) => {
                    gap = Some(parse_duration(v.trim()).map_err(|e| arg_err(format!("gap: {e}")))?)
                }
                _ => return Err(arg_err(format!("unknown item '{item}' (expected gap=D)"))),
            }
        }
        let gap = gap.ok_or_else(|| {
            arg_err(format!("reordering needs the gap a packet is held back, {example}"))
        })?;
        if gap.is_zero() {
            return Err(arg_err("gap=0 would reorder nothing; give a gap above zero"));
        }
        Ok(Reorder { p, gap })
    }
}

impl FromStr for EcnBlackhole {
    type Err = SyntaxError;
    /// `syn`, `data` or `all`.
    fn from_str(s: &str) -> Result<Self, SyntaxError> {
        let s = s.trim();
        EcnBlackhole::ALL.into_iter().find(|m| m.name() == s).ok_or_else(|| {
            arg_err(format!(
                "unknown ECN blackhole mode '{s}' (use syn: drop ECN-setup SYNs, data: drop \
                 ECT/CE packets, or all: both)"
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ecn_blackhole_modes() {
        for mode in EcnBlackhole::ALL {
            assert_eq!(mode.name().parse::<EcnBlackhole>().unwrap(), mode);
            assert_eq!(format!(" {mode} ").parse::<EcnBlackhole>().unwrap(), mode);
        }
        for bad in ["", "SYN", "true", "syn,data", "ect"] {
            let err = bad.parse::<EcnBlackhole>().unwrap_err().to_string();
            assert!(err.contains("syn") && err.contains("data") && err.contains("all"), "{err}");
        }
    }

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
                interval: Duration::from_millis(100),
                ecn: false,
            }
        );
        assert!("red".parse::<Discipline>().is_err());
        assert_eq!(
            "normal:2ms".parse::<Jitter>().unwrap(),
            Jitter::Normal { sigma: Duration::from_millis(2) }
        );
    }

    #[test]
    fn queue_syntax() {
        let ms = Duration::from_millis;
        assert_eq!(
            "codel,ecn".parse::<Discipline>().unwrap(),
            Discipline::Codel { target: ms(5), interval: ms(100), ecn: true }
        );
        assert_eq!(
            "codel:target=10ms,ecn".parse::<Discipline>().unwrap(),
            Discipline::Codel { target: ms(10), interval: ms(100), ecn: true }
        );
        assert_eq!("fq_codel".parse::<Discipline>().unwrap(), Discipline::fq_codel());
        assert_eq!(
            "fq_codel:quantum=300,flows=64,ecn,interval=50ms".parse::<Discipline>().unwrap(),
            Discipline::FqCodel {
                target: ms(5),
                interval: ms(50),
                quantum: 300,
                flows: 64,
                ecn: true
            }
        );
        assert!("fq_codel,ecn".parse::<Discipline>().unwrap().ecn());
        for (bad, says) in [
            ("fifo,ecn", "fifo takes no settings"),
            ("codel,quantum=300", "unknown CoDel setting 'quantum'"),
            ("fq_codel:flows=many", "flows: 'many' is not a whole number"),
            ("fq_codel:color=red", "unknown fq_codel setting 'color'"),
            ("fq_codel:target", "is not ecn or KEY=VALUE"),
            ("red", "unknown queue 'red'"),
        ] {
            let e = bad.parse::<Discipline>().unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn jitter_and_reorder_syntax() {
        let ms = Duration::from_millis;
        assert_eq!("2ms".parse::<Jitter>().unwrap(), Jitter::Uniform { max: ms(2) });
        assert_eq!("pareto:2ms".parse::<Jitter>().unwrap(), Jitter::Pareto { sigma: ms(2) });
        assert_eq!(
            "paretonormal:3ms".parse::<Jitter>().unwrap(),
            Jitter::ParetoNormal { sigma: ms(3) }
        );
        let e = "cauchy:1ms".parse::<Jitter>().unwrap_err().to_string();
        assert!(e.contains("pareto:D or paretonormal:D"), "{e}");
        assert_eq!("1%,gap=2ms".parse::<Reorder>().unwrap(), Reorder { p: 0.01, gap: ms(2) });
        for (bad, says) in [
            ("1%", "needs the gap"),
            ("1%,gap=0ms", "gap=0"),
            ("1%,delay=2ms", "unknown item 'delay=2ms'"),
            ("150%,gap=1ms", "reorder probability"),
            ("x,gap=1ms", "reorder probability"),
        ] {
            let e = bad.parse::<Reorder>().unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn buffer_sizes_become_limits() {
        let bdp = Bdp { rate: tcptail_units::BitRate(100_000_000), rtt: Duration::from_millis(10) };
        assert_eq!(BufferSize::Packets(10).limit(bdp), QueueLimit::Packets(10));
        assert_eq!(BufferSize::Bdp(2.0).limit(bdp), QueueLimit::from_bdp(bdp, 2.0));
    }
}
