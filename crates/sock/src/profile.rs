//! What a socket profile is: plain data, serialisable, with every field optional so that
//! "not set" (leave the kernel's default) is distinct from "set to the default value".
//!
//! A profile never touches a socket by itself; [`crate::apply`] does that and verifies. This
//! module also owns the three built-in profiles ([`Profile::builtin`]) and the *semantic* checks
//! shared by the file loader and by `apply` ([`Profile::validate`]): values the kernel would
//! reject (`TCP_KEEPCNT = 0`) or silently change (a keepalive of `1.5s`, truncated to whole
//! seconds), so that a profile file fails at load time with the key at fault rather than on the
//! socket. Advice that is not an error (an `SO_PRIORITY` that needs a capability, a
//! QUICKACK policy that cannot last) is available from [`Profile::advisories`].
//!
//! Invariants: a profile that passes [`Profile::validate`] maps every set field to exactly one
//! `setsockopt` value without rounding. Nothing here reads the system (`/proc`, capabilities):
//! whether the host allows a value is only known where the profile is applied.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use tcptail_units::{Bdp, BitRate, ByteSize, HumanDuration};

/// A named set of per-socket options. `None` everywhere means "touch nothing".
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// The profile's name (`trading`, `throughput`, `kernel-default`, or a user's).
    pub name: String,
    /// Congestion control set with `TCP_CONGESTION` (e.g. `cubic`, `bbr`, `reno`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub congestion: Option<String>,
    /// `TCP_NODELAY`: disable Nagle's algorithm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodelay: Option<bool>,
    /// `TCP_QUICKACK` policy.
    #[serde(default, skip_serializing_if = "QuickAck::is_off")]
    pub quickack: QuickAck,
    /// `SO_SNDBUF`, explicit or from a bandwidth-delay product.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_buffer: Option<BufferSize>,
    /// `SO_RCVBUF`, explicit or from a bandwidth-delay product.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receive_buffer: Option<BufferSize>,
    /// `SO_KEEPALIVE` with `TCP_KEEPIDLE`, `TCP_KEEPINTVL`, `TCP_KEEPCNT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keepalive: Option<Keepalive>,
    /// `TCP_USER_TIMEOUT`: how long sent data may stay unacknowledged before the connection is
    /// dropped.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "opt_duration")]
    pub user_timeout: Option<Duration>,
    /// `SO_REUSEADDR`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reuse_address: Option<bool>,
    /// `SO_REUSEPORT`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reuse_port: Option<bool>,
    /// `SO_BUSY_POLL`, in microseconds of busy polling per blocking receive.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "opt_duration")]
    pub busy_poll: Option<Duration>,
    /// `TCP_NOTSENT_LOWAT`: the most unsent bytes the socket may hold before writes block.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notsent_lowat: Option<ByteSize>,
    /// `SO_PRIORITY` (0-6 without CAP_NET_ADMIN or CAP_NET_RAW).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
}

/// The names [`Profile::builtin`] knows, in the order they are documented.
const BUILTIN_NAMES: &[&str] = &["trading", "throughput", "kernel-default"];

impl Profile {
    /// An empty profile with this name: touches nothing until fields are set.
    pub fn named(name: impl Into<String>) -> Profile {
        Profile { name: name.into(), ..Profile::default() }
    }

    /// The names of the built-in profiles: `trading`, `throughput`, `kernel-default`.
    pub fn builtin_names() -> &'static [&'static str] {
        BUILTIN_NAMES
    }

    /// A built-in profile by name, or `None`.
    ///
    /// - `trading`: the seed article's exchange-connection socket. CUBIC (no BBR probe cycle
    ///   during an order burst), `TCP_NODELAY`, QUICKACK re-armed after every receive,
    ///   keepalive idle 10 s / interval 3 s / 3 probes (the article's crypto-exchange values),
    ///   and both buffers sized to the bandwidth-delay product of the article's co-location
    ///   example, `10gbit x 1ms` = 1,250,000 bytes (the kernel reports twice that, the extra
    ///   being bookkeeping overhead). Setting the buffers turns off the kernel's autotuning for
    ///   the socket, which the apply report says in its notes.
    /// - `throughput`: BBR with 16 MiB buffers. On a host whose `net.core.wmem_max`/`rmem_max`
    ///   are smaller (4 MiB by default) the apply report shows both buffers *capped*: the
    ///   seed's "silently capped" failure mode, made visible.
    /// - `kernel-default`: touches nothing; the baseline to compare against.
    pub fn builtin(name: &str) -> Option<Profile> {
        match name {
            "trading" => Some(Profile::trading()),
            "throughput" => Some(Profile::throughput()),
            "kernel-default" => Some(Profile::named("kernel-default")),
            _ => None,
        }
    }

    fn trading() -> Profile {
        let colo =
            BufferSize::Bdp(Bdp { rate: BitRate(10_000_000_000), rtt: Duration::from_millis(1) });
        Profile {
            congestion: Some("cubic".to_string()),
            nodelay: Some(true),
            quickack: QuickAck::Rearm,
            send_buffer: Some(colo),
            receive_buffer: Some(colo),
            keepalive: Some(Keepalive {
                idle: Duration::from_secs(10),
                interval: Duration::from_secs(3),
                count: 3,
            }),
            ..Profile::named("trading")
        }
    }

    fn throughput() -> Profile {
        let big = BufferSize::Bytes(ByteSize(16 << 20));
        Profile {
            congestion: Some("bbr".to_string()),
            send_buffer: Some(big),
            receive_buffer: Some(big),
            ..Profile::named("throughput")
        }
    }

    /// Checks every set field against what the kernel accepts without changing it, returning
    /// the first problem (in field order). [`crate::apply::apply_profile`] runs the same checks
    /// per option and refuses to pass an invalid value to the kernel.
    pub fn validate(&self) -> Result<(), InvalidValue> {
        if let Some(name) = &self.congestion {
            check_congestion(name)?;
        }
        if let Some(b) = &self.send_buffer {
            buffer_bytes("send_buffer", b)?;
        }
        if let Some(b) = &self.receive_buffer {
            buffer_bytes("receive_buffer", b)?;
        }
        if let Some(k) = &self.keepalive {
            keepalive_values(k)?;
        }
        if let Some(d) = self.user_timeout {
            user_timeout_ms(d)?;
        }
        if let Some(d) = self.busy_poll {
            busy_poll_us(d)?;
        }
        if let Some(b) = self.notsent_lowat {
            notsent_lowat_bytes(b)?;
        }
        Ok(())
    }

    /// Advice about valid settings that may not do what the author expects. Never an error:
    /// whether e.g. a priority above 6 is allowed depends on the process that applies it.
    pub fn advisories(&self) -> Vec<Advisory> {
        let mut out = Vec::new();
        if self.priority.is_some_and(|p| p > 6) {
            out.push(Advisory {
                key: "priority",
                message: "SO_PRIORITY above 6 needs CAP_NET_ADMIN or CAP_NET_RAW where the \
                          profile is applied; without it the apply report says not-allowed",
            });
        }
        if self.quickack == QuickAck::Once {
            out.push(Advisory {
                key: "quickack",
                message: "TCP_QUICKACK does not stay set: the kernel returns to delayed ACKs as \
                          soon as the connection looks interactive; use \"rearm\" and receive \
                          through tcptail_sock::recv to keep it in effect",
            });
        }
        if self.send_buffer.is_some() || self.receive_buffer.is_some() {
            out.push(Advisory {
                key: "send_buffer/receive_buffer",
                message: "setting SO_SNDBUF/SO_RCVBUF turns off the kernel's buffer autotuning \
                          for the socket; the value is also capped at net.core.wmem_max/rmem_max",
            });
        }
        out
    }
}

/// When to set `TCP_QUICKACK`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum QuickAck {
    /// Never set it: the kernel's delayed-ACK heuristics decide.
    #[default]
    Off,
    /// Set it once after the socket is created (the kernel clears it again on its own).
    Once,
    /// Set it again after every receive, which is the only way it stays in effect.
    Rearm,
}

impl QuickAck {
    /// True for [`QuickAck::Off`]; used to keep serialised profiles short.
    pub fn is_off(&self) -> bool {
        *self == QuickAck::Off
    }
}

impl std::str::FromStr for QuickAck {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(QuickAck::Off),
            "once" => Ok(QuickAck::Once),
            "rearm" => Ok(QuickAck::Rearm),
            _ => Err(format!("unknown QUICKACK policy '{s}' (use off, once or rearm)")),
        }
    }
}

impl std::fmt::Display for QuickAck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            QuickAck::Off => "off",
            QuickAck::Once => "once",
            QuickAck::Rearm => "rearm",
        })
    }
}

/// A socket buffer size: given in bytes, or derived from the path's bandwidth-delay product.
///
/// Serialised the way profile files spell it: a byte count (`4194304`) or `{ bdp = "10gbit x
/// 1ms" }`. Deserialisation also accepts a size with a unit (`"4MiB"`) and `{ bytes = N }`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferSize {
    /// Exactly this many bytes requested from the kernel (which doubles it for overhead).
    Bytes(ByteSize),
    /// The bandwidth-delay product of a path, e.g. `10gbit x 1ms` = 1.25 MB.
    Bdp(Bdp),
}

impl BufferSize {
    /// The number of bytes to request with `SO_SNDBUF`/`SO_RCVBUF`.
    pub fn bytes(&self) -> ByteSize {
        match self {
            BufferSize::Bytes(b) => *b,
            BufferSize::Bdp(bdp) => bdp.bytes(),
        }
    }
}

impl fmt::Display for BufferSize {
    /// `4MiB`, or `1250000B (10gbit x 1ms)` for a bandwidth-delay product.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BufferSize::Bytes(b) => write!(f, "{b}"),
            BufferSize::Bdp(bdp) => write!(f, "{} ({bdp})", bdp.bytes()),
        }
    }
}

impl Serialize for BufferSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        match self {
            BufferSize::Bytes(b) => s.serialize_u64(b.0),
            BufferSize::Bdp(bdp) => {
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry("bdp", &bdp.to_string())?;
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for BufferSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(deny_unknown_fields, rename_all = "kebab-case")]
        enum Tagged {
            Bytes(ByteSize),
            Bdp(#[serde(deserialize_with = "bdp_text::deserialize")] Bdp),
        }
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Repr {
            Size(ByteSize),
            Tagged(Tagged),
        }
        Ok(match Repr::deserialize(d)? {
            Repr::Size(b) | Repr::Tagged(Tagged::Bytes(b)) => BufferSize::Bytes(b),
            Repr::Tagged(Tagged::Bdp(bdp)) => BufferSize::Bdp(bdp),
        })
    }
}

/// TCP keepalive timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Keepalive {
    /// Idle time before the first probe (`TCP_KEEPIDLE`).
    #[serde(with = "duration_text")]
    pub idle: Duration,
    /// Time between probes (`TCP_KEEPINTVL`).
    #[serde(with = "duration_text")]
    pub interval: Duration,
    /// Unanswered probes before the connection is declared dead (`TCP_KEEPCNT`).
    pub count: u32,
}

/// A profile value the kernel would reject or silently change: the key (`keepalive.count`)
/// and why, phrased so the author can fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{key}`: {reason}")]
pub struct InvalidValue {
    /// The profile key at fault, dotted for nested keys (`keepalive.idle`).
    pub key: &'static str,
    /// What is wrong and what would be accepted.
    pub reason: String,
}

fn invalid(key: &'static str, reason: impl Into<String>) -> InvalidValue {
    InvalidValue { key, reason: reason.into() }
}

/// Advice about a valid profile setting (see [`Profile::advisories`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Advisory {
    /// The profile key the advice is about.
    pub key: &'static str,
    /// The advice.
    pub message: &'static str,
}

impl fmt::Display for Advisory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.message)
    }
}

/// The kernel's limit on a congestion control name (`TCP_CA_NAME_MAX` is 16 with the NUL).
const CA_NAME_MAX: usize = 15;
/// `MAX_TCP_KEEPIDLE` and `MAX_TCP_KEEPINTVL`, in seconds.
const MAX_KEEPALIVE_SECS: u64 = 32767;
/// `MAX_TCP_KEEPCNT`.
const MAX_KEEPALIVE_COUNT: u32 = 127;
/// `setsockopt` takes an `int`.
const MAX_INT: u64 = i32::MAX as u64;

/// A plausible congestion control name: what the kernel's modules use (`cubic`, `bbr`,
/// `dctcp`, `highspeed`): lower-case ASCII letters, digits and `_`, starting with a letter, at
/// most 15 bytes. The kernel matches names exactly, so `CUBIC` would fail on the socket.
pub(crate) fn check_congestion(name: &str) -> Result<(), InvalidValue> {
    const KEY: &str = "congestion";
    let plausible = |s: &str| {
        s.starts_with(|c: char| c.is_ascii_lowercase())
            && s.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
    };
    if name.is_empty() {
        return Err(invalid(KEY, "empty name (e.g. cubic, bbr or reno)"));
    }
    if name.len() > CA_NAME_MAX {
        return Err(invalid(
            KEY,
            format!("'{name}' is longer than the kernel's {CA_NAME_MAX}-byte limit"),
        ));
    }
    if !plausible(name) {
        let lower = name.to_ascii_lowercase();
        let reason = if plausible(&lower) {
            format!(
                "'{name}': the kernel matches names exactly and they are lower case \
                 (did you mean '{lower}'?)"
            )
        } else {
            format!(
                "'{name}' is not a congestion control name: use lower-case letters, digits and \
                 '_', starting with a letter (e.g. cubic, bbr, reno)"
            )
        };
        return Err(invalid(KEY, reason));
    }
    Ok(())
}

/// The `SO_SNDBUF`/`SO_RCVBUF` request in bytes, at most `i32::MAX`.
pub(crate) fn buffer_bytes(key: &'static str, size: &BufferSize) -> Result<u32, InvalidValue> {
    let bytes = size.bytes().0;
    if bytes > MAX_INT {
        return Err(invalid(
            key,
            format!("{size} is {bytes} bytes, more than setsockopt can take ({MAX_INT})"),
        ));
    }
    Ok(bytes as u32)
}

/// `(idle, interval, count)` for `TCP_KEEPIDLE`, `TCP_KEEPINTVL` (whole seconds) and
/// `TCP_KEEPCNT`.
pub(crate) fn keepalive_values(k: &Keepalive) -> Result<(u32, u32, u32), InvalidValue> {
    let idle = keepalive_secs("keepalive.idle", k.idle)?;
    let interval = keepalive_secs("keepalive.interval", k.interval)?;
    if k.count == 0 {
        return Err(invalid(
            "keepalive.count",
            "must be at least 1: with 0 probes the kernel rejects TCP_KEEPCNT (EINVAL)",
        ));
    }
    if k.count > MAX_KEEPALIVE_COUNT {
        return Err(invalid(
            "keepalive.count",
            format!("{} is more than the kernel's limit of {MAX_KEEPALIVE_COUNT}", k.count),
        ));
    }
    Ok((idle, interval, k.count))
}

fn keepalive_secs(key: &'static str, d: Duration) -> Result<u32, InvalidValue> {
    let shown = HumanDuration(d);
    if d < Duration::from_secs(1) {
        return Err(invalid(
            key,
            format!(
                "{shown} is less than a second; the kernel counts keepalive time in whole seconds"
            ),
        ));
    }
    if d.subsec_nanos() != 0 {
        return Err(invalid(
            key,
            format!(
                "{shown} is not a whole number of seconds; the kernel counts keepalive time in \
                 whole seconds and would truncate it"
            ),
        ));
    }
    if d.as_secs() > MAX_KEEPALIVE_SECS {
        return Err(invalid(
            key,
            format!("{shown} is more than the kernel's {MAX_KEEPALIVE_SECS}s"),
        ));
    }
    Ok(d.as_secs() as u32)
}

/// `TCP_USER_TIMEOUT` in whole milliseconds (0 means the kernel's default).
pub(crate) fn user_timeout_ms(d: Duration) -> Result<u32, InvalidValue> {
    whole_units("user_timeout", d, 1_000_000, "milliseconds", "1ms")
}

/// `SO_BUSY_POLL` in whole microseconds (0 turns it off).
pub(crate) fn busy_poll_us(d: Duration) -> Result<u32, InvalidValue> {
    whole_units("busy_poll", d, 1_000, "microseconds", "1us")
}

fn whole_units(
    key: &'static str,
    d: Duration,
    nanos_per_unit: u128,
    unit: &str,
    example: &str,
) -> Result<u32, InvalidValue> {
    let nanos = d.as_nanos();
    let shown = HumanDuration(d);
    if !nanos.is_multiple_of(nanos_per_unit) {
        return Err(invalid(
            key,
            format!(
                "{shown} is not a whole number of {unit} (the kernel's unit for this option); \
                 write a multiple of {example}"
            ),
        ));
    }
    let units = nanos / nanos_per_unit;
    if units > MAX_INT as u128 {
        return Err(invalid(key, format!("{shown} is more than setsockopt can take")));
    }
    Ok(units as u32)
}

/// `TCP_NOTSENT_LOWAT` in bytes (0 means `net.ipv4.tcp_notsent_lowat`).
pub(crate) fn notsent_lowat_bytes(b: ByteSize) -> Result<u32, InvalidValue> {
    u32::try_from(b.0).map_err(|_| {
        invalid("notsent_lowat", format!("{b} is more than the kernel's limit of {}", u32::MAX))
    })
}

/// Durations travel as human text (`"10s"`), so profile files and the wire read the same.
pub(crate) mod duration_text {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};
    use tcptail_units::HumanDuration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&HumanDuration(*d).to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        HumanDuration::deserialize(d).map(|h| h.0)
    }
}

pub(crate) mod opt_duration {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};
    use tcptail_units::HumanDuration;

    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_str(&HumanDuration(*d).to_string()),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Some(HumanDuration::deserialize(d)?.0))
    }
}

/// A bandwidth-delay product read from its text form (`"10gbit x 1ms"`).
pub(crate) mod bdp_text {
    use serde::{Deserialize, Deserializer};
    use tcptail_units::Bdp;

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Bdp, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests;
