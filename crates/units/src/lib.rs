//! Human units for tcptail: byte sizes, bit rates, durations, percentages and message rates.
//!
//! Every number a user types into tcptail (`--rate 30mbit`, `--rtt 10ms`, `sndbuf = "4MiB"`,
//! `--loss 1%`, `--rate 1000/s`, `bdp = "10gbit x 1ms"`) goes through one of these parsers, so
//! the spelling rules are the same everywhere:
//!
//! - Sizes: decimal prefixes `k`, `M`, `G` (`KB`, `MB`, `GB`) are powers of 1000, binary prefixes
//!   `KiB`, `MiB`, `GiB` are powers of 1024. Case does not matter for the unit. A bare number is
//!   bytes.
//! - Bit rates: `bit`, `kbit`, `mbit`, `gbit` (optionally `/s`) or `bps`, `kbps`, `mbps`, `gbps`,
//!   all in **bits** per second (iperf's meaning, not tc's, where `mbps` is megabytes). A bare
//!   number is rejected: nobody should have to guess whether `30` means bits or bytes.
//! - Durations: `ns`, `us` (or `µs`), `ms`, `s`, `min`. A unit is required.
//! - Percentages: `1%`, `0.5%`, between 0 and 100.
//! - Message rates: `1000/s`, `2k/s`, `5/ms`, or a bare number per second.
//!
//! Parsing never panics; errors carry the input and what was expected so a CLI can name the
//! flag and print them as they are. The types are plain newtypes: no arithmetic surprises, the
//! inner value is always in the base unit (bytes, bits per second, seconds).
//!
//! [`stats`] holds the statistics every crate shares (one median, one empty-input rule), so
//! the numbers a unit describes are summarised the same way everywhere.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

pub mod stats;

/// A value that could not be parsed: the text given and what was wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {kind} '{input}': {reason}")]
pub struct UnitError {
    /// What kind of value was expected ("size", "bit rate", ...).
    pub kind: &'static str,
    /// The text that was given.
    pub input: String,
    /// Why it was rejected, phrased so the user can fix it.
    pub reason: String,
}

impl UnitError {
    fn new(kind: &'static str, input: &str, reason: impl Into<String>) -> Self {
        UnitError { kind, input: input.to_string(), reason: reason.into() }
    }
}

/// Splits `"12.5ms"` into `(12.5, "ms")`, rejecting empty, negative, non-finite numbers.
fn split_number<'a>(kind: &'static str, input: &'a str) -> Result<(f64, &'a str), UnitError> {
    let s = input.trim();
    if s.is_empty() {
        return Err(UnitError::new(kind, input, "empty value"));
    }
    let end = s
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_digit() || c == '.' || c == '_' || c == '-' || c == '+'))
        .map(|(i, _)| i)
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(end);
    let num: String = num.chars().filter(|&c| c != '_').collect();
    if num.is_empty() {
        return Err(UnitError::new(kind, input, "expected a number before the unit"));
    }
    let value: f64 =
        num.parse().map_err(|_| UnitError::new(kind, input, format!("'{num}' is not a number")))?;
    if !value.is_finite() {
        return Err(UnitError::new(kind, input, "the number is not finite"));
    }
    if value < 0.0 {
        return Err(UnitError::new(kind, input, "must not be negative"));
    }
    Ok((value, unit.trim()))
}

/// Rounds a non-negative float to u64, rejecting overflow.
fn to_u64(kind: &'static str, input: &str, value: f64) -> Result<u64, UnitError> {
    if value > u64::MAX as f64 {
        return Err(UnitError::new(kind, input, "too large"));
    }
    Ok(value.round() as u64)
}

/// A number of bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(pub u64);

impl ByteSize {
    /// The size in bytes.
    pub fn bytes(self) -> u64 {
        self.0
    }
}

impl FromStr for ByteSize {
    type Err = UnitError;
    fn from_str(input: &str) -> Result<Self, UnitError> {
        const KIND: &str = "size";
        let (value, unit) = split_number(KIND, input)?;
        let multiplier: f64 = match unit.to_ascii_lowercase().as_str() {
            "" | "b" => 1.0,
            "k" | "kb" => 1e3,
            "m" | "mb" => 1e6,
            "g" | "gb" => 1e9,
            "kib" => 1024.0,
            "mib" => 1024.0 * 1024.0,
            "gib" => 1024.0 * 1024.0 * 1024.0,
            _ => {
                return Err(UnitError::new(
                    KIND,
                    input,
                    format!("unknown unit '{unit}' (use B, KB, MB, GB, KiB, MiB or GiB)"),
                ));
            }
        };
        to_u64(KIND, input, value * multiplier).map(ByteSize)
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        const KIB: u64 = 1024;
        if b >= KIB * KIB && b.is_multiple_of(KIB * KIB) {
            write!(f, "{}MiB", b / (KIB * KIB))
        } else if b >= KIB && b.is_multiple_of(KIB) {
            write!(f, "{}KiB", b / KIB)
        } else {
            write!(f, "{b}B")
        }
    }
}

/// A rate in bits per second.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct BitRate(pub u64);

impl BitRate {
    /// The rate in bits per second.
    pub fn bits_per_second(self) -> u64 {
        self.0
    }
    /// The rate in bytes per second (rounded down).
    pub fn bytes_per_second(self) -> u64 {
        self.0 / 8
    }
    /// Time to serialise `bytes` at this rate. A zero rate is infinitely slow: `Duration::MAX`.
    pub fn transmission_time(self, bytes: u64) -> Duration {
        if self.0 == 0 {
            return Duration::MAX;
        }
        let nanos = (bytes as u128 * 8 * 1_000_000_000) / self.0 as u128;
        Duration::from_nanos(nanos.min(u64::MAX as u128) as u64)
    }
}

impl FromStr for BitRate {
    type Err = UnitError;
    fn from_str(input: &str) -> Result<Self, UnitError> {
        const KIND: &str = "bit rate";
        let (value, unit) = split_number(KIND, input)?;
        let lower = unit.to_ascii_lowercase();
        let stem = lower.strip_suffix("/s").unwrap_or(&lower);
        let multiplier: f64 = match stem {
            "bit" | "bps" | "b/s" => 1.0,
            "kbit" | "kbps" | "k" => 1e3,
            "mbit" | "mbps" | "m" => 1e6,
            "gbit" | "gbps" | "g" => 1e9,
            "" => {
                return Err(UnitError::new(
                    KIND,
                    input,
                    "missing unit (write e.g. 30mbit, 1gbit or 500kbit)",
                ));
            }
            _ => {
                return Err(UnitError::new(
                    KIND,
                    input,
                    format!("unknown unit '{unit}' (use bit, kbit, mbit or gbit, optionally /s)"),
                ));
            }
        };
        to_u64(KIND, input, value * multiplier).map(BitRate)
    }
}

impl fmt::Display for BitRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let r = self.0 as f64;
        if r >= 1e9 {
            write!(f, "{}gbit", trim_float(r / 1e9))
        } else if r >= 1e6 {
            write!(f, "{}mbit", trim_float(r / 1e6))
        } else if r >= 1e3 {
            write!(f, "{}kbit", trim_float(r / 1e3))
        } else {
            write!(f, "{}bit", self.0)
        }
    }
}

fn trim_float(v: f64) -> String {
    let s = format!("{v:.3}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// Parses a duration with a required unit: `250ns`, `20us`, `20µs`, `10ms`, `1.5s`, `2min`.
pub fn parse_duration(input: &str) -> Result<Duration, UnitError> {
    const KIND: &str = "duration";
    let (value, unit) = split_number(KIND, input)?;
    let seconds_per_unit: f64 = match unit {
        "ns" => 1e-9,
        "us" | "µs" | "μs" => 1e-6,
        "ms" => 1e-3,
        "s" | "sec" => 1.0,
        "m" | "min" => 60.0,
        "h" => 3600.0,
        "" => {
            return Err(UnitError::new(KIND, input, "missing unit (write e.g. 10ms, 5s, 250us)"));
        }
        _ => {
            return Err(UnitError::new(
                KIND,
                input,
                format!("unknown unit '{unit}' (use ns, us, ms, s or min)"),
            ));
        }
    };
    let seconds = value * seconds_per_unit;
    Duration::try_from_secs_f64(seconds).map_err(|_| UnitError::new(KIND, input, "out of range"))
}

/// A duration parsed from human text; `Display` prints it back in the largest exact unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct HumanDuration(pub Duration);

impl FromStr for HumanDuration {
    type Err = UnitError;
    fn from_str(s: &str) -> Result<Self, UnitError> {
        parse_duration(s).map(HumanDuration)
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        format_duration(self.0, f)
    }
}

fn format_duration(d: Duration, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let ns = d.as_nanos();
    if ns == 0 {
        write!(f, "0s")
    } else if ns.is_multiple_of(1_000_000_000) {
        write!(f, "{}s", ns / 1_000_000_000)
    } else if ns.is_multiple_of(1_000_000) {
        write!(f, "{}ms", ns / 1_000_000)
    } else if ns.is_multiple_of(1_000) {
        write!(f, "{}us", ns / 1_000)
    } else {
        write!(f, "{ns}ns")
    }
}

/// A fraction between 0 and 1, written by users as a percentage (`1%`, `0.1%`).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct Percent(f64);

impl Percent {
    /// Builds from a fraction in `[0, 1]`; `None` outside that range or for NaN.
    pub fn from_fraction(fraction: f64) -> Option<Percent> {
        (0.0..=1.0).contains(&fraction).then_some(Percent(fraction))
    }
    /// The value as a fraction in `[0, 1]`.
    pub fn fraction(self) -> f64 {
        self.0
    }
}

impl FromStr for Percent {
    type Err = UnitError;
    fn from_str(input: &str) -> Result<Self, UnitError> {
        const KIND: &str = "percentage";
        let (value, unit) = split_number(KIND, input)?;
        if unit != "%" {
            return Err(UnitError::new(
                KIND,
                input,
                "write it with a percent sign, e.g. 1% or 0.1%",
            ));
        }
        if value > 100.0 {
            return Err(UnitError::new(KIND, input, "must be at most 100%"));
        }
        Ok(Percent(value / 100.0))
    }
}

impl fmt::Display for Percent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}%", trim_float(self.0 * 100.0))
    }
}

/// A message rate in messages per second (`1000/s`, `2k/s`, `5/ms`).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Default)]
pub struct MessageRate(f64);

impl MessageRate {
    /// Builds from messages per second; `None` unless finite and positive.
    pub fn per_second(rate: f64) -> Option<MessageRate> {
        (rate.is_finite() && rate > 0.0).then_some(MessageRate(rate))
    }
    /// Messages per second.
    pub fn as_per_second(self) -> f64 {
        self.0
    }
    /// The mean spacing between messages.
    pub fn interval(self) -> Duration {
        Duration::from_secs_f64(1.0 / self.0)
    }
}

impl FromStr for MessageRate {
    type Err = UnitError;
    fn from_str(input: &str) -> Result<Self, UnitError> {
        const KIND: &str = "message rate";
        let (count_text, per) = match input.split_once('/') {
            Some((c, p)) => (c, p.trim()),
            None => (input, "s"),
        };
        let (value, prefix) = split_number(KIND, count_text)?;
        let count = value
            * match prefix.to_ascii_lowercase().as_str() {
                "" => 1.0,
                "k" => 1e3,
                "m" => 1e6,
                other => {
                    return Err(UnitError::new(
                        KIND,
                        input,
                        format!("unknown multiplier '{other}' (use k or M)"),
                    ));
                }
            };
        let per_seconds = match per {
            "s" | "sec" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "min" => 60.0,
            _ => {
                return Err(UnitError::new(
                    KIND,
                    input,
                    format!("unknown time unit '/{per}' (use /s, /ms or /min)"),
                ));
            }
        };
        MessageRate::per_second(count / per_seconds)
            .ok_or_else(|| UnitError::new(KIND, input, "must be greater than zero"))
    }
}

impl fmt::Display for MessageRate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/s", trim_float(self.0))
    }
}

/// A bandwidth-delay product written as `RATE x DELAY` (`10gbit x 1ms`, `30mbit*10ms`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bdp {
    /// The path's bottleneck rate.
    pub rate: BitRate,
    /// The path's round-trip time.
    pub rtt: Duration,
}

impl Bdp {
    /// The product in bytes, rounded up.
    pub fn bytes(self) -> ByteSize {
        let bits = self.rate.0 as u128 * self.rtt.as_nanos();
        let bytes = bits.div_ceil(8 * 1_000_000_000);
        ByteSize(bytes.min(u64::MAX as u128) as u64)
    }
}

impl FromStr for Bdp {
    type Err = UnitError;
    fn from_str(input: &str) -> Result<Self, UnitError> {
        let separators: &[char] = &['x', 'X', '*', '×'];
        // The rate's unit never contains a separator, and the delay comes last: split at the
        // last separator that is surrounded by digits/units, i.e. the last one in the string.
        let Some(at) = input.rfind(separators) else {
            return Err(UnitError::new(
                "bandwidth-delay product",
                input,
                "write it as RATE x RTT, e.g. '10gbit x 1ms'",
            ));
        };
        let sep_len = input[at..].chars().next().map(char::len_utf8).unwrap_or(1);
        let (rate, rtt) = (&input[..at], &input[at + sep_len..]);
        Ok(Bdp { rate: rate.trim().parse()?, rtt: parse_duration(rtt.trim())? })
    }
}

impl fmt::Display for Bdp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} x {}", self.rate, HumanDuration(self.rtt))
    }
}

/// Serde helper: accepts a number (base unit) or a human string for a `FromStr` unit type.
#[derive(Deserialize)]
#[serde(untagged)]
enum NumberOrText {
    Number(u64),
    Text(String),
}

macro_rules! serde_as_u64_or_text {
    ($ty:ident) => {
        impl Serialize for $ty {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_u64(self.0)
            }
        }
        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                match NumberOrText::deserialize(d)? {
                    NumberOrText::Number(n) => Ok($ty(n)),
                    NumberOrText::Text(t) => t.parse().map_err(serde::de::Error::custom),
                }
            }
        }
    };
}
serde_as_u64_or_text!(ByteSize);
serde_as_u64_or_text!(BitRate);

/// Serialises as whole microseconds; deserialises from a string with unit or a microsecond count.
impl Serialize for HumanDuration {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match NumberOrText::deserialize(d)? {
            NumberOrText::Number(_) => {
                Err(serde::de::Error::custom("a duration needs a unit, e.g. \"10ms\" or \"5s\""))
            }
            NumberOrText::Text(t) => t.parse().map_err(serde::de::Error::custom),
        }
    }
}

#[cfg(feature = "fuzzing")]
pub mod fuzzing;

#[cfg(test)]
mod tests;
