//! Selectors: named rules that pick the connections worth their own time series.
//!
//! A selector file is TOML:
//!
//! ```toml
//! # Hard cap on connections exported with their own series (default 500).
//! max_connections = 200
//!
//! [[selector]]
//! name = "api"                      # label value, [a-zA-Z0-9_-]+, unique
//! remote_ports = ["443", "8000-8100"]
//! remote_addrs = ["10.0.0.0/8", "2001:db8::/32"]
//!
//! [[selector]]
//! name = "ingress"
//! local_ports = ["8443"]
//! ```
//!
//! Within a selector every listed field must match (AND); within a field any entry may match
//! (OR); a selector needs at least one rule. A connection belongs to the first selector that
//! matches it. All selectors together form one kernel filter ([`Selectors::filter`]).
//! Parsing is pure: [`Selectors::from_toml`] takes text, [`Selectors::load`] reads a file.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::filter::{Filter, Prefix, Side};
use crate::wire::SockId;

/// Default hard cap on connections with their own series.
pub const DEFAULT_MAX_CONNECTIONS: usize = 500;

/// Why a selector file was rejected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SelectorError {
    /// The file could not be read.
    #[error("cannot read selector file {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Not valid TOML or unknown keys (the message names the line).
    #[error("selector file {path}: {message}")]
    Syntax {
        /// The file.
        path: PathBuf,
        /// What and where.
        message: String,
    },
    /// A selector name is empty or has characters other than `[a-zA-Z0-9_-]`.
    #[error("selector name {name:?} must be non-empty [a-zA-Z0-9_-]")]
    BadName {
        /// The name.
        name: String,
    },
    /// Two selectors share a name.
    #[error("selector name {name:?} is used twice")]
    DuplicateName {
        /// The name.
        name: String,
    },
    /// A selector with no rules would match everything.
    #[error("selector {name:?} has no rules (give ports or addresses)")]
    NoRules {
        /// The selector.
        name: String,
    },
    /// A port or port range that does not parse.
    #[error("selector {name:?}: bad port {value:?} (want N or LO-HI within 0-65535)")]
    BadPort {
        /// The selector.
        name: String,
        /// The offending value.
        value: String,
    },
    /// An address or prefix that does not parse.
    #[error("selector {name:?}: bad address {value:?} (want ADDR or ADDR/LEN)")]
    BadAddr {
        /// The selector.
        name: String,
        /// The offending value.
        value: String,
    },
    /// `max_connections` must be positive.
    #[error("max_connections must be at least 1")]
    ZeroCap,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    max_connections: Option<usize>,
    #[serde(default)]
    selector: Vec<RawSelector>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSelector {
    name: String,
    #[serde(default)]
    local_ports: Vec<String>,
    #[serde(default)]
    remote_ports: Vec<String>,
    #[serde(default)]
    local_addrs: Vec<String>,
    #[serde(default)]
    remote_addrs: Vec<String>,
}

/// One named selector and its compiled filter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selector {
    /// The name, used as the `selector` label.
    pub name: String,
    /// The filter it compiles to.
    pub filter: Filter,
}

/// A checked selector file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selectors {
    /// Selectors in file order (first match wins).
    pub selectors: Vec<Selector>,
    /// Hard cap on connections with their own series.
    pub max_connections: usize,
}

impl Default for Selectors {
    fn default() -> Self {
        Selectors { selectors: Vec::new(), max_connections: DEFAULT_MAX_CONNECTIONS }
    }
}

impl Selectors {
    /// Reads and checks a selector file.
    pub fn load(path: &Path) -> Result<Selectors, SelectorError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| SelectorError::Read { path: path.to_owned(), source })?;
        Selectors::from_toml(&text, path)
    }

    /// Checks selector TOML; `path` is only used in error messages.
    pub fn from_toml(text: &str, path: &Path) -> Result<Selectors, SelectorError> {
        let raw: RawFile = toml::from_str(text).map_err(|e| SelectorError::Syntax {
            path: path.to_owned(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        let max_connections = raw.max_connections.unwrap_or(DEFAULT_MAX_CONNECTIONS);
        if max_connections == 0 {
            return Err(SelectorError::ZeroCap);
        }
        let mut selectors: Vec<Selector> = Vec::new();
        for s in raw.selector {
            let name = s.name.clone();
            if name.is_empty()
                || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return Err(SelectorError::BadName { name });
            }
            if selectors.iter().any(|o| o.name == name) {
                return Err(SelectorError::DuplicateName { name });
            }
            let mut all = Vec::new();
            for (side, values) in [(Side::Local, &s.local_ports), (Side::Remote, &s.remote_ports)] {
                if !values.is_empty() {
                    let any = values
                        .iter()
                        .map(|v| parse_port(v, side).ok_or_else(|| bad_port(&name, v)))
                        .collect::<Result<Vec<_>, _>>()?;
                    all.push(Filter::Or(any));
                }
            }
            for (side, values) in [(Side::Local, &s.local_addrs), (Side::Remote, &s.remote_addrs)] {
                if !values.is_empty() {
                    let any = values
                        .iter()
                        .map(|v| {
                            parse_prefix(v).map(|prefix| Filter::Addr { side, prefix }).ok_or_else(
                                || SelectorError::BadAddr { name: name.clone(), value: v.clone() },
                            )
                        })
                        .collect::<Result<Vec<_>, _>>()?;
                    all.push(Filter::Or(any));
                }
            }
            if all.is_empty() {
                return Err(SelectorError::NoRules { name });
            }
            selectors.push(Selector { name, filter: Filter::And(all) });
        }
        Ok(Selectors { selectors, max_connections })
    }

    /// One filter matching any selector; `None` when there are no selectors.
    pub fn filter(&self) -> Option<Filter> {
        (!self.selectors.is_empty())
            .then(|| Filter::Or(self.selectors.iter().map(|s| s.filter.clone()).collect()))
    }

    /// The index of the first selector matching `id`.
    pub fn classify(&self, id: &SockId) -> Option<usize> {
        self.selectors.iter().position(|s| s.filter.matches(id))
    }
}

fn bad_port(name: &str, value: &str) -> SelectorError {
    SelectorError::BadPort { name: name.to_owned(), value: value.to_owned() }
}

/// Parses `N` or `LO-HI` into a port filter.
pub fn parse_port(v: &str, side: Side) -> Option<Filter> {
    let (lo, hi) = match v.split_once('-') {
        Some((lo, hi)) => (lo.trim().parse().ok()?, hi.trim().parse().ok()?),
        None => {
            let p = v.trim().parse().ok()?;
            (p, p)
        }
    };
    (lo <= hi).then_some(Filter::Port { side, lo, hi })
}

/// Parses `ADDR` or `ADDR/LEN`.
pub fn parse_prefix(v: &str) -> Option<Prefix> {
    let (addr, len) = match v.split_once('/') {
        Some((a, l)) => (a.trim().parse::<IpAddr>().ok()?, Some(l.trim().parse::<u8>().ok()?)),
        None => (v.trim().parse::<IpAddr>().ok()?, None),
    };
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = len.unwrap_or(max);
    (len <= max).then_some(Prefix { addr, len })
}
