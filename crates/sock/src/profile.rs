//! What a socket profile is: plain data, serialisable, with every field optional so that
//! "not set" (leave the kernel's default) is distinct from "set to the default value".
//!
//! A profile never touches a socket by itself; [`crate::apply`] does that and verifies.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tcptail_units::{Bdp, ByteSize};

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
    /// `SO_PRIORITY` (0-6 without CAP_NET_ADMIN).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u32>,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BufferSize {
    /// Exactly this many bytes requested from the kernel (which doubles it for overhead).
    Bytes(ByteSize),
    /// The bandwidth-delay product of a path, e.g. `10gbit x 1ms` = 1.25 MB.
    Bdp(#[serde(with = "bdp_text")] Bdp),
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

pub(crate) mod bdp_text {
    use serde::{Deserialize, Deserializer, Serializer};
    use tcptail_units::Bdp;

    pub fn serialize<S: Serializer>(b: &Bdp, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&b.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Bdp, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}
