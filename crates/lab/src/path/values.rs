//! The values of `tcptail lab path`'s flags that are the lab's own ([`FromStr`] for clap's
//! value parsers): [`ReadyArg`], [`EmulatorKind`]. The path's values (loss, buffer, queue,
//! jitter) parse in `tcptail_emu` ([`tcptail_emu::BufferSize`] and `FromStr` on its models).
//! The syntax is tabled in the [parent module's docs](super). Parsing is pure; errors
//! ([`ArgError`]) say what was expected, and the front end adds the flag's name.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use tcptail_units::parse_duration;

/// A value that does not follow its flag's syntax (the front end adds the flag's name).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ArgError(String);

impl ArgError {
    pub(crate) fn new(msg: impl Into<String>) -> ArgError {
        ArgError(msg.into())
    }
}

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
