//! Host profiles as data: TOML files with recommended settings and known-bad entries.
//!
//! A profile names settings (a sysctl key with an exact value or a bound, its scope, a
//! one-line rationale and the document it comes from), expectations about the host that are
//! not sysctls (`[host]`: CPU governor, irqbalance, isolated CPUs, transparent huge pages), and
//! **known-bad entries**: settings that circulate in blog posts (and in the project's seed
//! documents) but are wrong or obsolete, each with the reason.
//!
//! Built-in profiles are compiled in ([`BUILTIN`]): `baseline` (the known-bad list),
//! `trading-latency` and `bulk-throughput` (both extend `baseline`). A user profile file
//! extends or overrides one with `extends = "NAME"`; a child setting replaces the parent's
//! setting of the same key, `remove = true` drops it.
//!
//! Invariants: a resolved [`HostProfile`] has unique setting keys, every key is a syntactically
//! valid sysctl name, `kernel.`/`vm.` keys and the known host-scope `net.core` keys are never
//! declared per-namespace, and every error names the file, the line and, where there is one,
//! the key. Parsing never touches the host.
//!
//! # Text that reaches `/etc/sysctl.d`
//!
//! `tune` writes a profile's name, each setting's rationale and source (as comments) and each
//! value into a `sysctl.d` file, which systemd-sysctl and procps read line by line, splitting a
//! line at its first `=`. So every piece of profile text is refused, with its file and line,
//! unless it is one line: no newline, carriage return, Unicode line separator or other control
//! character (a tab is allowed). Values also must not be empty or contain `=` (no sysctl tune
//! sets takes one, and `key = a = b` reads differently to a human than to the parser), and a
//! profile name is 1 to 64 characters from `[A-Za-z0-9._-]` (it names the file). A profile
//! therefore cannot carry a setting that the dry run does not show as its own line;
//! [`Plan::check_text`](crate::tune::Plan::check_text) checks the same again, on the rendered
//! file, before `tune --apply` writes it.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::Error;

/// The built-in profiles: `(name, TOML text)`.
pub const BUILTIN: [(&str, &str); 3] = [
    ("baseline", include_str!("../profiles/baseline.toml")),
    ("trading-latency", include_str!("../profiles/trading-latency.toml")),
    ("bulk-throughput", include_str!("../profiles/bulk-throughput.toml")),
];

/// `net.` keys that do not exist, or are read-only, in a child network namespace.
pub const HOST_SCOPE_NET_KEYS: [&str; 10] = [
    "net.core.default_qdisc",
    "net.core.netdev_max_backlog",
    "net.core.netdev_budget",
    "net.core.busy_read",
    "net.core.busy_poll",
    "net.core.rmem_default",
    "net.core.rmem_max",
    "net.core.wmem_default",
    "net.core.wmem_max",
    "net.ipv4.tcp_allowed_congestion_control",
];

/// Where a setting lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Per network namespace: can be validated and measured in a throwaway namespace.
    Netns,
    /// Host-wide: not visible (or read-only) inside a child namespace or container.
    Host,
}

/// How bad a deviation is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Reported as WARN.
    #[default]
    Warn,
    /// Reported as FAIL (exit code 1).
    Fail,
}

/// What a setting should be.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Want {
    /// Exactly this (whitespace-normalised) value.
    Exact(String),
    /// Field `field` (0-based, whitespace-separated) is at least `value`.
    AtLeast {
        /// The field index.
        field: usize,
        /// The bound.
        value: u64,
    },
    /// Field `field` is at most `value`.
    AtMost {
        /// The field index.
        field: usize,
        /// The bound.
        value: u64,
    },
}

impl std::fmt::Display for Want {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let field = |f: &mut std::fmt::Formatter<'_>, i: usize| {
            if i > 0 { write!(f, " (field {i})") } else { Ok(()) }
        };
        match self {
            Want::Exact(v) => f.write_str(v),
            Want::AtLeast { field: i, value } => {
                write!(f, ">= {value}")?;
                field(f, *i)
            }
            Want::AtMost { field: i, value } => {
                write!(f, "<= {value}")?;
                field(f, *i)
            }
        }
    }
}

impl Want {
    /// Whether `current` satisfies this; `None` when a bound's field is not a number.
    pub fn satisfied_by(&self, current: &str) -> Option<bool> {
        match self {
            Want::Exact(v) => Some(normalize(current) == *v),
            Want::AtLeast { field, value } => Some(number_field(current, *field)? >= *value),
            Want::AtMost { field, value } => Some(number_field(current, *field)? <= *value),
        }
    }

    /// The value to write so that `current` satisfies this: `None` when it already does,
    /// otherwise `current` with the bounded field replaced (or the exact value).
    pub fn target(&self, current: Option<&str>) -> Option<String> {
        if let Some(cur) = current
            && self.satisfied_by(cur) == Some(true)
        {
            return None;
        }
        match self {
            Want::Exact(v) => Some(v.clone()),
            Want::AtLeast { field, value } | Want::AtMost { field, value } => {
                let mut fields: Vec<String> = current
                    .map(|c| c.split_whitespace().map(str::to_owned).collect())
                    .unwrap_or_default();
                if fields.len() <= *field {
                    fields.resize(field + 1, value.to_string());
                }
                fields[*field] = value.to_string();
                Some(fields.join(" "))
            }
        }
    }
}

fn number_field(value: &str, field: usize) -> Option<u64> {
    value.split_whitespace().nth(field)?.parse().ok()
}

/// Collapses runs of whitespace to single spaces and trims (the kernel prints tabs).
pub fn normalize(value: &str) -> String {
    value.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// One recommended setting.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Setting {
    /// Dotted sysctl key, e.g. `net.ipv4.tcp_slow_start_after_idle`.
    pub key: String,
    /// The recommended value or bound.
    pub want: Want,
    /// Per namespace or host-wide.
    pub scope: Scope,
    /// How a deviation is reported.
    pub severity: Severity,
    /// One line: why.
    pub rationale: String,
    /// The seed or kernel document it comes from.
    pub source: String,
}

/// A setting known to be wrong or obsolete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct KnownBad {
    /// Dotted sysctl key.
    pub key: String,
    /// Only this value is bad (matched live and in config files); any value when `None`.
    pub value: Option<String>,
    /// Not bad when this other key is also configured.
    pub unless_set: Option<String>,
    /// Why it is wrong.
    pub reason: String,
    /// Where it was seen.
    pub source: String,
    /// How a match is reported.
    pub severity: Severity,
}

/// Expectations about the host that are not sysctls; `None` means "not checked".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostExpect {
    /// Wanted CPU frequency governor, e.g. `performance`.
    pub governor: Option<String>,
    /// Whether irqbalance should be running.
    pub irqbalance: Option<bool>,
    /// Whether `isolcpus`/`nohz_full` should be on the kernel command line.
    pub isolated_cpus: Option<bool>,
    /// Wanted transparent huge page mode (`always`, `madvise`, `never`).
    pub thp: Option<String>,
    /// Largest acceptable NIC `rx-usecs` interrupt coalescing (and no `adaptive-rx`).
    pub nic_rx_usecs_max: Option<u64>,
}

/// A resolved profile (its `extends` chain merged).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostProfile {
    /// Profile name.
    pub name: String,
    /// One line.
    pub description: String,
    /// Settings in declaration order (parents first), keys unique.
    pub settings: Vec<Setting>,
    /// Known-bad entries.
    pub known_bad: Vec<KnownBad>,
    /// Host expectations.
    pub host: HostExpect,
}

impl HostProfile {
    /// The setting for `key`, if any.
    pub fn setting(&self, key: &str) -> Option<&Setting> {
        self.settings.iter().find(|s| s.key == key)
    }
}

type Text = toml::Spanned<String>;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawProfile {
    name: Text,
    description: Option<Text>,
    extends: Option<Text>,
    #[serde(default)]
    host: RawHost,
    #[serde(default)]
    setting: Vec<RawSetting>,
    #[serde(default)]
    known_bad: Vec<RawKnownBad>,
}

/// [`HostExpect`] with the position of each string, so that bad text is refused by line.
#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    governor: Option<Text>,
    irqbalance: Option<bool>,
    isolated_cpus: Option<bool>,
    thp: Option<Text>,
    nic_rx_usecs_max: Option<u64>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawValue {
    Int(i64),
    Str(String),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSetting {
    key: Text,
    value: Option<toml::Spanned<RawValue>>,
    at_least: Option<u64>,
    at_most: Option<u64>,
    field: Option<usize>,
    scope: Option<Scope>,
    #[serde(default)]
    severity: Severity,
    rationale: Option<Text>,
    source: Option<Text>,
    #[serde(default)]
    remove: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKnownBad {
    key: Text,
    value: Option<toml::Spanned<RawValue>>,
    unless_set: Option<Text>,
    reason: Text,
    source: Option<Text>,
    #[serde(default)]
    severity: Severity,
}

/// A parsed profile file before its parent is merged in.
struct Parsed {
    profile: HostProfile,
    extends: Option<(String, usize)>,
    removed: Vec<String>,
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].bytes().filter(|&b| b == b'\n').count() + 1
}

/// Whether `key` is a plausible sysctl name (`a.b[.c...]`, lowercase, digits, `_`, `-`).
pub fn valid_key(key: &str) -> bool {
    key.contains('.')
        && !key.starts_with('.')
        && !key.ends_with('.')
        && !key.contains("..")
        && key.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b))
}

/// The scope a key must have, when it is known regardless of the profile.
pub fn inherent_scope(key: &str) -> Option<Scope> {
    if key.starts_with("kernel.") || key.starts_with("vm.") || HOST_SCOPE_NET_KEYS.contains(&key) {
        Some(Scope::Host)
    } else {
        None
    }
}

/// Why `text` cannot be one line of a `sysctl.d` file, if it cannot: the first newline,
/// carriage return, Unicode line separator or control character other than a tab.
pub fn line_problem(text: &str) -> Option<String> {
    text.chars().find_map(|c| match c {
        '\n' => Some("a newline".to_owned()),
        '\r' => Some("a carriage return".to_owned()),
        '\t' => None,
        '\u{2028}' | '\u{2029}' => Some(format!("a line separator (U+{:04X})", u32::from(c))),
        c if c.is_control() => Some(format!("a control character (U+{:04X})", u32::from(c))),
        _ => None,
    })
}

/// Why `value` cannot be written as `key = value` in a `sysctl.d` file, if it cannot: it is
/// not one line ([`line_problem`]), is empty, or contains `=`.
pub fn value_problem(value: &str) -> Option<String> {
    if let Some(p) = line_problem(value) {
        return Some(format!("the value contains {p}"));
    }
    if value.trim().is_empty() {
        return Some("the value is empty".to_owned());
    }
    value
        .contains('=')
        .then(|| "the value contains `=` (a sysctl.d line is split at its first `=`)".to_owned())
}

/// Whether `name` can name a profile: 1 to 64 characters from `[A-Za-z0-9._-]`, starting with
/// a letter or digit (it becomes part of the `sysctl.d` file name and its header line).
pub fn valid_name(name: &str) -> bool {
    name.len() <= 64
        && name.bytes().next().is_some_and(|b| b.is_ascii_alphanumeric())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
}

/// A profile file being parsed: turns positions into lines and builds errors.
struct Source<'a> {
    file: &'a Path,
    text: &'a str,
}

impl Source<'_> {
    fn line<T>(&self, spanned: &toml::Spanned<T>) -> usize {
        line_of(self.text, spanned.span().start)
    }

    fn error(&self, line: usize, key: &str, message: String) -> Error {
        Error::Profile { file: self.file.to_owned(), line, key: key.to_owned(), message }
    }

    /// The string of `field` (of `key`'s entry), refused unless it is one line.
    fn one_line(&self, key: &str, field: &str, text: Text) -> Result<String, Error> {
        match line_problem(text.get_ref()) {
            Some(p) => Err(self.error(
                self.line(&text),
                key,
                format!(
                    "`{field}` contains {p}: profile text must be one line (it is written to \
                     sysctl.d)"
                ),
            )),
            None => Ok(text.into_inner()),
        }
    }

    fn optional(
        &self,
        key: &str,
        field: &str,
        text: Option<Text>,
    ) -> Result<Option<String>, Error> {
        text.map(|t| self.one_line(key, field, t)).transpose()
    }

    /// A value's text, refused unless it can be written as `key = value`.
    fn value(&self, key: &str, value: toml::Spanned<RawValue>) -> Result<String, Error> {
        let line = self.line(&value);
        match value.into_inner() {
            RawValue::Int(i) => Ok(i.to_string()),
            RawValue::Str(s) => match value_problem(&s) {
                Some(p) => Err(self.error(line, key, p)),
                None => Ok(normalize(&s)),
            },
        }
    }
}

fn parse(file: &Path, text: &str) -> Result<Parsed, Error> {
    let raw: RawProfile = toml::from_str(text).map_err(|e| Error::ProfileSyntax {
        file: file.to_owned(),
        line: e.span().map_or(0, |s| line_of(text, s.start)),
        message: e.message().to_owned(),
    })?;
    let src = Source { file, text };
    let name_line = src.line(&raw.name);
    let name = src.one_line("name", "name", raw.name)?;
    if !valid_name(&name) {
        return Err(src.error(
            name_line,
            "name",
            format!(
                "{name:?} is not a profile name: use 1 to 64 characters from [A-Za-z0-9._-], \
                 starting with a letter or digit"
            ),
        ));
    }
    let description =
        src.optional("description", "description", raw.description)?.unwrap_or_default();
    let host = HostExpect {
        governor: src.optional("host", "governor", raw.host.governor)?,
        irqbalance: raw.host.irqbalance,
        isolated_cpus: raw.host.isolated_cpus,
        thp: src.optional("host", "thp", raw.host.thp)?,
        nic_rx_usecs_max: raw.host.nic_rx_usecs_max,
    };
    let mut settings: Vec<Setting> = Vec::new();
    let mut removed = Vec::new();
    for s in raw.setting {
        let line = src.line(&s.key);
        let key = s.key.into_inner();
        if !valid_key(&key) {
            return Err(src.error(line, &key, "not a valid sysctl key".into()));
        }
        if settings.iter().any(|o| o.key == key) || removed.contains(&key) {
            return Err(src.error(line, &key, "set twice in this file".into()));
        }
        if s.remove {
            removed.push(key);
            continue;
        }
        let want = match (s.value, s.at_least, s.at_most) {
            (Some(v), None, None) if s.field.is_none() => Want::Exact(src.value(&key, v)?),
            (None, Some(value), None) => Want::AtLeast { field: s.field.unwrap_or(0), value },
            (None, None, Some(value)) => Want::AtMost { field: s.field.unwrap_or(0), value },
            _ => {
                return Err(src.error(
                    line,
                    &key,
                    "needs exactly one of `value`, `at_least`, `at_most` (`field` only with a \
                     bound)"
                        .into(),
                ));
            }
        };
        let Some(scope) = s.scope.or(inherent_scope(&key)) else {
            return Err(src.error(line, &key, "missing `scope` (\"netns\" or \"host\")".into()));
        };
        if scope == Scope::Netns && inherent_scope(&key) == Some(Scope::Host) {
            return Err(src.error(line, &key, "is host-wide: declare `scope = \"host\"`".into()));
        }
        let rationale = src.optional(&key, "rationale", s.rationale)?.unwrap_or_default();
        if rationale.trim().is_empty() {
            return Err(src.error(line, &key, "missing `rationale`".into()));
        }
        let source = src.optional(&key, "source", s.source)?.unwrap_or_default();
        settings.push(Setting { key, want, scope, severity: s.severity, rationale, source });
    }
    let mut known_bad = Vec::new();
    for k in raw.known_bad {
        let line = src.line(&k.key);
        let key = k.key.into_inner();
        if !valid_key(&key) {
            return Err(src.error(line, &key, "not a valid sysctl key".into()));
        }
        let unless_set = src.optional(&key, "unless_set", k.unless_set)?;
        if let Some(other) = &unless_set
            && !valid_key(other)
        {
            return Err(src.error(
                line,
                &key,
                format!("`unless_set = {other:?}` is not a valid key"),
            ));
        }
        known_bad.push(KnownBad {
            value: k.value.map(|v| src.value(&key, v)).transpose()?,
            unless_set,
            reason: src.one_line(&key, "reason", k.reason)?,
            source: src.optional(&key, "source", k.source)?.unwrap_or_default(),
            severity: k.severity,
            key,
        });
    }
    let extends = raw.extends.map(|e| (src.line(&e), e.into_inner()));
    let extends = match extends {
        Some((line, parent)) => match line_problem(&parent) {
            Some(p) => return Err(src.error(line, "extends", format!("contains {p}"))),
            None => Some((parent, line)),
        },
        None => None,
    };
    Ok(Parsed {
        profile: HostProfile { name, description, settings, known_bad, host },
        extends,
        removed,
    })
}

fn merge(parent: HostProfile, child: Parsed) -> HostProfile {
    let mut settings: Vec<Setting> =
        parent.settings.into_iter().filter(|s| !child.removed.contains(&s.key)).collect();
    for s in child.profile.settings {
        match settings.iter_mut().find(|o| o.key == s.key) {
            Some(slot) => *slot = s,
            None => settings.push(s),
        }
    }
    let mut known_bad = parent.known_bad;
    for k in child.profile.known_bad {
        known_bad.retain(|o| !(o.key == k.key && o.value == k.value));
        known_bad.push(k);
    }
    let (p, c) = (parent.host, child.profile.host);
    HostProfile {
        name: child.profile.name,
        description: child.profile.description,
        settings,
        known_bad,
        host: HostExpect {
            governor: c.governor.or(p.governor),
            irqbalance: c.irqbalance.or(p.irqbalance),
            isolated_cpus: c.isolated_cpus.or(p.isolated_cpus),
            thp: c.thp.or(p.thp),
            nic_rx_usecs_max: c.nic_rx_usecs_max.or(p.nic_rx_usecs_max),
        },
    }
}

/// The names of the built-in profiles.
pub fn builtin_names() -> Vec<&'static str> {
    BUILTIN.iter().map(|(n, _)| *n).collect()
}

/// Loads a profile: a built-in name, or a path to a `.toml` file (anything containing `/` or
/// ending in `.toml`). `extends` in a file names a built-in, or a file relative to it.
pub fn load(name_or_path: &str) -> Result<HostProfile, Error> {
    load_depth(name_or_path, None, 0)
}

fn load_depth(name: &str, base: Option<&Path>, depth: usize) -> Result<HostProfile, Error> {
    let is_path = name.contains('/') || name.ends_with(".toml");
    let (file, text) = if is_path {
        let path = match base {
            Some(dir) => dir.join(name),
            None => PathBuf::from(name),
        };
        let text = std::fs::read_to_string(&path)
            .map_err(|source| Error::Read { path: path.clone(), source })?;
        (path, text)
    } else {
        let (_, text) = BUILTIN.iter().find(|(n, _)| *n == name).ok_or_else(|| {
            Error::UnknownProfile { name: name.to_owned(), known: builtin_names().join(", ") }
        })?;
        (PathBuf::from(format!("<builtin>/{name}.toml")), (*text).to_owned())
    };
    let mut parsed = parse(&file, &text)?;
    let Some((parent, line)) = parsed.extends.take() else {
        return Ok(parsed.profile);
    };
    if depth >= 8 {
        return Err(Error::Profile {
            file,
            line,
            key: "extends".into(),
            message: "more than 8 levels of `extends` (a cycle?)".into(),
        });
    }
    let dir = if is_path { file.parent().map(Path::to_owned) } else { None };
    let parent = load_depth(&parent, dir.as_deref(), depth + 1).map_err(|e| match e {
        Error::UnknownProfile { name, known } => Error::Profile {
            file: file.clone(),
            line,
            key: "extends".into(),
            message: format!("unknown profile {name:?} (built-in: {known})"),
        },
        other => other,
    })?;
    Ok(merge(parent, parsed))
}

/// Parses profile text (no `extends` resolution beyond built-ins); for tests and fuzzing.
pub fn parse_str(file: &str, text: &str) -> Result<HostProfile, Error> {
    let mut parsed = parse(Path::new(file), text)?;
    match parsed.extends.take() {
        None => Ok(parsed.profile),
        Some((parent, _)) => Ok(merge(load_depth(&parent, None, 1)?, parsed)),
    }
}

#[cfg(test)]
mod tests;
