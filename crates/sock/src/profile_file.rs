//! Profiles from TOML files (and the built-in names), with errors that name the file, line and
//! key at fault.
//!
//! [`Profile::load`] takes what a user types after `--profile`: a built-in name (`trading`,
//! `throughput`, `kernel-default`) or a path to a TOML file. A file uses the same keys as
//! [`Profile`]:
//!
//! ```toml
//! # exchange.toml: the trading profile with a longer keepalive and a 50us busy poll
//! extends = "trading"            # optional: start from a built-in
//! name = "exchange"              # optional: defaults to the file stem
//! congestion = "cubic"
//! nodelay = true
//! quickack = "rearm"             # "off" | "once" | "rearm"
//! bdp = "10gbit x 1ms"           # sets both buffers unless given below
//! send_buffer = "4MiB"           # or 4194304, or { bdp = "10gbit x 1ms" }
//! keepalive = { idle = "30s", interval = "3s", count = 3 }
//! user_timeout = "5s"
//! reuse_address = true
//! reuse_port = false
//! busy_poll = "50us"
//! notsent_lowat = "16KiB"
//! priority = 6
//! ```
//!
//! Rules: keys in the file override the `extends` base; `bdp` fills whichever of
//! `send_buffer`/`receive_buffer` the file does not give; a `keepalive` table may give only
//! some of its keys when the base has a keepalive to complete it. Values are checked for what
//! the kernel would reject or silently round ([`Profile::validate`]), so `count = 0` or
//! `idle = "1500ms"` fail here, at their line, rather than on a socket.
//!
//! Errors: [`ProfileError`] has one variant per thing a user fixes differently, and every
//! message is complete on its own (`exchange.toml:7:15: `keepalive.count`: must be at least
//! 1 ...`): the underlying unit or I/O error is part of the message, not a separate
//! `source()`, so printing the chain does not repeat it. The first problem in file order is
//! reported. Loading never panics, whatever the input (a property test and a fuzz target hold
//! it to that).

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use tcptail_units::{Bdp, ByteSize, UnitError};
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::profile::{self, BufferSize, InvalidValue, Keepalive, Profile, QuickAck};

/// Where in a profile file something is: 1-based line and column (in characters).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The file as it was named to the loader.
    pub file: PathBuf,
    /// 1-based line.
    pub line: usize,
    /// 1-based column, counted in characters.
    pub column: usize,
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}", self.file.display(), self.line, self.column)
    }
}

/// Why a profile could not be loaded. Every variant says where and what to change.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The file could not be read (missing, a directory, no permission, not UTF-8).
    #[error("cannot read profile file {}: {error}", path.display())]
    Unreadable {
        /// The path as given.
        path: PathBuf,
        /// The operating system's error.
        error: std::io::Error,
    },
    /// The file is not valid TOML.
    #[error("{at}: invalid TOML: {message}")]
    Syntax {
        /// Where the parser stopped.
        at: Location,
        /// The TOML parser's message.
        message: String,
    },
    /// A key that profiles do not have (often a typo or another tool's spelling).
    #[error(
        "{at}: unknown key `{key}`{}; valid keys: {}",
        .suggestion.map(|s| format!(" (did you mean `{s}`?)")).unwrap_or_default(),
        .valid.join(", ")
    )]
    UnknownKey {
        /// Where the key is.
        at: Location,
        /// The key, dotted when nested (`keepalive.idel`).
        key: String,
        /// The closest valid key, if one is close.
        suggestion: Option<&'static str>,
        /// The keys valid at that level.
        valid: &'static [&'static str],
    },
    /// A value of the wrong TOML type (`nodelay = "yes"`).
    #[error("{at}: `{key}` must be {expected}, found {found}")]
    WrongType {
        /// Where the value is.
        at: Location,
        /// The key.
        key: String,
        /// What the key takes, with an example.
        expected: &'static str,
        /// The TOML type given.
        found: &'static str,
    },
    /// A size, duration or bandwidth-delay product that does not parse.
    #[error("{at}: `{key}`: {error}{}", .hint.map(|h| format!("; {h}")).unwrap_or_default())]
    BadValue {
        /// Where the value is.
        at: Location,
        /// The key.
        key: String,
        /// The unit parser's error (input and reason), boxed to keep the error small.
        error: Box<UnitError>,
        /// A suggestion when the mistake is a common one.
        hint: Option<&'static str>,
    },
    /// A well-formed value the kernel would reject or silently change (`count = 0`,
    /// `idle = "1500ms"`, `congestion = "CUBIC"`).
    #[error("{at}: `{key}`: {reason}")]
    Invalid {
        /// Where the value is.
        at: Location,
        /// The key, dotted when nested.
        key: String,
        /// What is wrong and what would be accepted.
        reason: String,
    },
    /// A required key is absent (a `keepalive` table without `count` and nothing to inherit).
    #[error("{at}: `{key}` is missing{}", .hint.map(|h| format!(" ({h})")).unwrap_or_default())]
    MissingKey {
        /// The table that lacks it.
        at: Location,
        /// The missing key, dotted.
        key: String,
        /// How to fix it.
        hint: Option<&'static str>,
    },
    /// A name that is neither a built-in profile nor a file (or an unknown `extends`).
    #[error(
        "{}unknown built-in profile `{name}` (built-ins: {}{})",
        .at.as_ref().map(|a| format!("{a}: ")).unwrap_or_default(),
        .builtins.join(", "),
        if .at.is_none() { "; or give a path to a .toml file" } else { "" }
    )]
    UnknownBuiltin {
        /// The name given.
        name: String,
        /// Where, when it came from an `extends` key.
        at: Option<Location>,
        /// The built-in names.
        builtins: &'static [&'static str],
    },
}

impl Profile {
    /// A built-in profile by name, or a profile file by path.
    ///
    /// A built-in name wins over a file of the same name in the current directory; write
    /// `./trading` for the file. Anything containing a `/`, ending in `.toml`, or naming an
    /// existing path is read as a file; any other word is an unknown built-in.
    pub fn load(name_or_path: &str) -> Result<Profile, ProfileError> {
        if let Some(profile) = Profile::builtin(name_or_path) {
            return Ok(profile);
        }
        let path = Path::new(name_or_path);
        if name_or_path.contains('/') || name_or_path.ends_with(".toml") || path.exists() {
            return Profile::load_file(path);
        }
        Err(ProfileError::UnknownBuiltin {
            name: name_or_path.to_string(),
            at: None,
            builtins: Profile::builtin_names(),
        })
    }

    /// Reads and parses a profile file.
    pub fn load_file(path: &Path) -> Result<Profile, ProfileError> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| ProfileError::Unreadable { path: path.to_path_buf(), error })?;
        Profile::from_toml(&text, path)
    }

    /// Parses profile TOML; `file` names it in errors and gives the default name (its stem).
    pub fn from_toml(text: &str, file: &Path) -> Result<Profile, ProfileError> {
        Parser { text, file }.profile()
    }
}

/// The top-level keys, in the order the docs list them.
#[rustfmt::skip]
const TOP_KEYS: &[&str] = &[
    "name", "extends", "congestion", "nodelay", "quickack", "bdp", "send_buffer",
    "receive_buffer", "keepalive", "user_timeout", "reuse_address", "reuse_port", "busy_poll",
    "notsent_lowat", "priority",
];
const KEEPALIVE_KEYS: &[&str] = &["idle", "interval", "count"];
const BUFFER_KEYS: &[&str] = &["bdp", "bytes"];

/// Other tools' spellings of our keys (sysctl, socket option and C names).
#[rustfmt::skip]
const ALIASES: &[(&str, &str)] = &[
    ("sndbuf", "send_buffer"), ("so_sndbuf", "send_buffer"), ("send_buf", "send_buffer"),
    ("rcvbuf", "receive_buffer"), ("so_rcvbuf", "receive_buffer"),
    ("recv_buffer", "receive_buffer"), ("recv_buf", "receive_buffer"),
    ("cc", "congestion"), ("congestion_control", "congestion"), ("tcp_congestion", "congestion"),
    ("tcp_nodelay", "nodelay"), ("tcp_quickack", "quickack"),
    ("tcp_user_timeout", "user_timeout"), ("tcp_notsent_lowat", "notsent_lowat"),
    ("so_reuseaddr", "reuse_address"), ("reuseaddr", "reuse_address"),
    ("so_reuseport", "reuse_port"), ("reuseport", "reuse_port"),
    ("so_busy_poll", "busy_poll"), ("so_priority", "priority"), ("so_keepalive", "keepalive"),
    ("keepidle", "keepalive.idle"), ("tcp_keepidle", "keepalive.idle"),
    ("keepintvl", "keepalive.interval"), ("tcp_keepintvl", "keepalive.interval"),
    ("keepcnt", "keepalive.count"), ("tcp_keepcnt", "keepalive.count"),
];

type Entry<'t, 'i> = (&'t Spanned<std::borrow::Cow<'i, str>>, &'t Spanned<DeValue<'i>>);

/// One parse: the text (for line numbers) and the file name (for messages).
struct Parser<'a> {
    text: &'a str,
    file: &'a Path,
}

impl Parser<'_> {
    fn at(&self, span: Range<usize>) -> Location {
        let mut offset = span.start.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let before = &self.text[..offset];
        let line = before.matches('\n').count() + 1;
        let column = before.rsplit('\n').next().unwrap_or("").chars().count() + 1;
        Location { file: self.file.to_path_buf(), line, column }
    }

    fn profile(&self) -> Result<Profile, ProfileError> {
        let doc = DeTable::parse(self.text).map_err(|e| ProfileError::Syntax {
            at: self.at(e.span().unwrap_or(0..0)),
            message: e.message().trim().to_string(),
        })?;
        let entries = sorted(doc.get_ref());
        let find = |name: &str| entries.iter().find(|(k, _)| k.get_ref() == name).copied();

        let mut profile = match find("extends") {
            Some((_, v)) => {
                let base = self.string("extends", v)?;
                Profile::builtin(base).ok_or_else(|| ProfileError::UnknownBuiltin {
                    name: base.to_string(),
                    at: Some(self.at(v.span())),
                    builtins: Profile::builtin_names(),
                })?
            }
            None => Profile::default(),
        };
        profile.name = self
            .file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| "custom".to_string());

        let (mut send_given, mut receive_given, mut bdp) = (false, false, None);
        for (key, value) in &entries {
            let name = key.get_ref().as_ref();
            match name {
                "extends" => {}
                "name" => {
                    let s = self.string(name, value)?;
                    if s.trim().is_empty() {
                        return Err(self.invalid(name, value, "must not be empty".into()));
                    }
                    profile.name = s.to_string();
                }
                "congestion" => {
                    let s = self.string(name, value)?;
                    profile::check_congestion(s).map_err(|e| self.invalid_value(e, value))?;
                    profile.congestion = Some(s.to_string());
                }
                "nodelay" => profile.nodelay = Some(self.boolean(name, value)?),
                "reuse_address" => profile.reuse_address = Some(self.boolean(name, value)?),
                "reuse_port" => profile.reuse_port = Some(self.boolean(name, value)?),
                "quickack" => {
                    let s = self.string(name, value)?;
                    profile.quickack =
                        s.parse::<QuickAck>().map_err(|e| self.invalid(name, value, e))?;
                }
                "bdp" => bdp = Some((self.bdp(name, value)?, value.span())),
                "send_buffer" => {
                    profile.send_buffer = Some(self.buffer("send_buffer", value)?);
                    send_given = true;
                }
                "receive_buffer" => {
                    profile.receive_buffer = Some(self.buffer("receive_buffer", value)?);
                    receive_given = true;
                }
                "keepalive" => profile.keepalive = Some(self.keepalive(value, profile.keepalive)?),
                "user_timeout" => {
                    let d = self.duration(name, value)?;
                    profile::user_timeout_ms(d).map_err(|e| self.invalid_value(e, value))?;
                    profile.user_timeout = Some(d);
                }
                "busy_poll" => {
                    let d = self.duration(name, value)?;
                    profile::busy_poll_us(d).map_err(|e| self.invalid_value(e, value))?;
                    profile.busy_poll = Some(d);
                }
                "notsent_lowat" => {
                    let b = self.size(name, value)?;
                    profile::notsent_lowat_bytes(b).map_err(|e| self.invalid_value(e, value))?;
                    profile.notsent_lowat = Some(b);
                }
                "priority" => {
                    let n = self.integer(name, value, "an integer, e.g. 6")?;
                    let p = u32::try_from(n).map_err(|_| {
                        self.invalid(name, value, format!("{n} is not between 0 and {}", u32::MAX))
                    })?;
                    profile.priority = Some(p);
                }
                _ => return Err(self.unknown(name, key.span(), TOP_KEYS, "")),
            }
        }
        if let Some((bdp, span)) = bdp {
            let size = BufferSize::Bdp(bdp);
            for (given, key, slot) in [
                (send_given, "send_buffer", &mut profile.send_buffer),
                (receive_given, "receive_buffer", &mut profile.receive_buffer),
            ] {
                if !given {
                    profile::buffer_bytes(key, &size).map_err(|e| ProfileError::Invalid {
                        at: self.at(span.clone()),
                        key: "bdp".into(),
                        reason: format!("for {key}: {}", e.reason),
                    })?;
                    *slot = Some(size);
                }
            }
        }
        // Every key was checked as it was read; this is a backstop for inherited values.
        profile.validate().map_err(|e| {
            let span = find(e.key.split('.').next().unwrap_or("")).map(|(_, v)| v.span());
            ProfileError::Invalid {
                at: self.at(span.unwrap_or(0..0)),
                key: e.key.into(),
                reason: e.reason,
            }
        })?;
        Ok(profile)
    }

    fn buffer(
        &self,
        key: &'static str,
        v: &Spanned<DeValue<'_>>,
    ) -> Result<BufferSize, ProfileError> {
        const EXPECTED: &str =
            "a size (\"4MiB\" or 4194304) or a table ({ bdp = \"10gbit x 1ms\" })";
        let size = match v.get_ref() {
            DeValue::String(_) | DeValue::Integer(_) => BufferSize::Bytes(self.size(key, v)?),
            DeValue::Table(table) => {
                let entries = sorted(table);
                let mut found = None;
                for (k, value) in &entries {
                    let inner = k.get_ref().as_ref();
                    let dotted = format!("{key}.{inner}");
                    let size = match inner {
                        "bdp" => BufferSize::Bdp(self.bdp(&dotted, value)?),
                        "bytes" => BufferSize::Bytes(self.size(&dotted, value)?),
                        _ => return Err(self.unknown(&dotted, k.span(), BUFFER_KEYS, key)),
                    };
                    if found.replace(size).is_some() {
                        return Err(self.invalid(
                            key,
                            v,
                            "give either bdp or bytes, not both".into(),
                        ));
                    }
                }
                found.ok_or_else(|| {
                    self.invalid(key, v, "an empty table: give bdp or bytes".into())
                })?
            }
            other => return Err(self.wrong_type(key, v, EXPECTED, other)),
        };
        profile::buffer_bytes(key, &size).map_err(|e| self.invalid_value(e, v))?;
        Ok(size)
    }

    fn keepalive(
        &self,
        v: &Spanned<DeValue<'_>>,
        base: Option<Keepalive>,
    ) -> Result<Keepalive, ProfileError> {
        const EXPECTED: &str = "a table, e.g. { idle = \"10s\", interval = \"3s\", count = 3 }";
        let DeValue::Table(table) = v.get_ref() else {
            return Err(self.wrong_type("keepalive", v, EXPECTED, v.get_ref()));
        };
        let entries = sorted(table);
        let (mut idle, mut interval, mut count) =
            (base.map(|k| k.idle), base.map(|k| k.interval), base.map(|k| k.count));
        let mut spans: Vec<(&str, Range<usize>)> = Vec::new();
        for (k, value) in &entries {
            let inner = k.get_ref().as_ref();
            let dotted = format!("keepalive.{inner}");
            match inner {
                "idle" => idle = Some(self.duration(&dotted, value)?),
                "interval" => interval = Some(self.duration(&dotted, value)?),
                "count" => {
                    let n = self.integer(&dotted, value, "an integer, e.g. 3")?;
                    count = Some(u32::try_from(n).map_err(|_| {
                        self.invalid(&dotted, value, format!("{n} is not a probe count"))
                    })?);
                }
                _ => return Err(self.unknown(&dotted, k.span(), KEEPALIVE_KEYS, "keepalive")),
            }
            spans.push((inner, value.span()));
        }
        let missing = |key: &str| ProfileError::MissingKey {
            at: self.at(v.span()),
            key: format!("keepalive.{key}"),
            hint: Some("give idle, interval and count, or extend a profile that has a keepalive"),
        };
        let keepalive = Keepalive {
            idle: idle.ok_or_else(|| missing("idle"))?,
            interval: interval.ok_or_else(|| missing("interval"))?,
            count: count.ok_or_else(|| missing("count"))?,
        };
        profile::keepalive_values(&keepalive).map_err(|e| {
            let inner = e.key.trim_start_matches("keepalive.");
            let span = spans.iter().find(|(k, _)| *k == inner).map(|(_, s)| s.clone());
            ProfileError::Invalid {
                at: self.at(span.unwrap_or_else(|| v.span())),
                key: e.key.into(),
                reason: e.reason,
            }
        })?;
        Ok(keepalive)
    }

    fn string<'v>(&self, key: &str, v: &'v Spanned<DeValue<'_>>) -> Result<&'v str, ProfileError> {
        match v.get_ref() {
            DeValue::String(s) => Ok(s.as_ref()),
            other => Err(self.wrong_type(key, v, "a string", other)),
        }
    }

    fn boolean(&self, key: &str, v: &Spanned<DeValue<'_>>) -> Result<bool, ProfileError> {
        match v.get_ref() {
            DeValue::Boolean(b) => Ok(*b),
            other => Err(self.wrong_type(key, v, "true or false", other)),
        }
    }

    fn integer(
        &self,
        key: &str,
        v: &Spanned<DeValue<'_>>,
        expected: &'static str,
    ) -> Result<i128, ProfileError> {
        match v.get_ref() {
            DeValue::Integer(i) => i128::from_str_radix(i.as_str(), i.radix())
                .map_err(|_| self.invalid(key, v, format!("'{i}' is out of range"))),
            other => Err(self.wrong_type(key, v, expected, other)),
        }
    }

    fn size(&self, key: &str, v: &Spanned<DeValue<'_>>) -> Result<ByteSize, ProfileError> {
        match v.get_ref() {
            DeValue::String(s) => s.parse::<ByteSize>().map_err(|error| {
                let hint = s
                    .contains(['x', 'X', '*', '×'])
                    .then_some("for a bandwidth-delay product write { bdp = \"10gbit x 1ms\" }");
                ProfileError::BadValue {
                    at: self.at(v.span()),
                    key: key.into(),
                    error: Box::new(error),
                    hint,
                }
            }),
            DeValue::Integer(_) => {
                let n = self.integer(key, v, "")?;
                u64::try_from(n).map(ByteSize).map_err(|_| {
                    self.invalid(key, v, format!("{n} is not a size in bytes (0 or more)"))
                })
            }
            other => Err(self.wrong_type(key, v, "a size, e.g. \"64KiB\" or 65536", other)),
        }
    }

    fn duration(
        &self,
        key: &str,
        v: &Spanned<DeValue<'_>>,
    ) -> Result<std::time::Duration, ProfileError> {
        const EXPECTED: &str = "a duration with a unit, e.g. \"10s\" or \"50us\"";
        match v.get_ref() {
            DeValue::String(s) => {
                tcptail_units::parse_duration(s).map_err(|error| ProfileError::BadValue {
                    at: self.at(v.span()),
                    key: key.into(),
                    error: Box::new(error),
                    hint: None,
                })
            }
            other => Err(self.wrong_type(key, v, EXPECTED, other)),
        }
    }

    fn bdp(&self, key: &str, v: &Spanned<DeValue<'_>>) -> Result<Bdp, ProfileError> {
        match v.get_ref() {
            DeValue::String(s) => s.parse::<Bdp>().map_err(|error| ProfileError::BadValue {
                at: self.at(v.span()),
                key: key.into(),
                error: Box::new(error),
                hint: None,
            }),
            other => Err(self.wrong_type(key, v, "a string, e.g. \"10gbit x 1ms\"", other)),
        }
    }

    fn wrong_type(
        &self,
        key: &str,
        v: &Spanned<DeValue<'_>>,
        expected: &'static str,
        found: &DeValue<'_>,
    ) -> ProfileError {
        ProfileError::WrongType {
            at: self.at(v.span()),
            key: key.into(),
            expected,
            found: found.type_str(),
        }
    }

    fn invalid(&self, key: &str, v: &Spanned<DeValue<'_>>, reason: String) -> ProfileError {
        ProfileError::Invalid { at: self.at(v.span()), key: key.into(), reason }
    }

    fn invalid_value(&self, e: InvalidValue, v: &Spanned<DeValue<'_>>) -> ProfileError {
        ProfileError::Invalid { at: self.at(v.span()), key: e.key.into(), reason: e.reason }
    }

    /// An unknown key; `parent` is the table it is in (`""` at the top level).
    fn unknown(
        &self,
        key: &str,
        span: Range<usize>,
        valid: &'static [&'static str],
        parent: &str,
    ) -> ProfileError {
        let leaf = key.rsplit('.').next().unwrap_or(key);
        ProfileError::UnknownKey {
            at: self.at(span),
            key: key.into(),
            suggestion: suggest(leaf, valid, parent.is_empty()),
            valid,
        }
    }
}

/// A table's entries in file order, so the first problem reported is the first in the file.
fn sorted<'t, 'i>(table: &'t DeTable<'i>) -> Vec<Entry<'t, 'i>> {
    let mut entries: Vec<Entry<'t, 'i>> = table.iter().collect();
    entries.sort_by_key(|(k, _)| k.span().start);
    entries
}

/// The valid key closest to `key`: a known alias (top level only), the same key spelt with
/// `-` or in capitals, or one within a small edit distance.
fn suggest(key: &str, valid: &'static [&'static str], top: bool) -> Option<&'static str> {
    let norm = key.to_ascii_lowercase().replace('-', "_");
    if top && let Some((_, to)) = ALIASES.iter().find(|(from, _)| *from == norm) {
        return Some(to);
    }
    let budget = if norm.len() >= 5 { 2 } else { 1 };
    valid
        .iter()
        .map(|v| (edit_distance(&norm, v), *v))
        .filter(|(d, _)| *d <= budget)
        .min_by_key(|(d, _)| *d)
        .map(|(_, v)| v)
}

/// Levenshtein distance over bytes (keys are ASCII; anything else is simply far away).
fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len().abs_diff(b.len()) > 2 {
        return usize::MAX;
    }
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1; b.len() + 1];
        for (j, cb) in b.iter().enumerate() {
            let cost = usize::from(ca != cb);
            cur[j + 1] = (prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests;
