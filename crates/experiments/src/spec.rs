//! Experiment files: what to run (workload, parameters, variants), how long in each mode, how
//! to draw it, and the rule that turns the numbers into a verdict.
//!
//! ```toml
//! name = "nagle-delack"
//! title = "Nagle's algorithm and delayed ACKs"
//! seed = "000_195f82ea5b9a1f8f.txt"
//! claim = "..."                 # quoted from the seed
//! workload = "split-write"      # the engine that runs every variant (see crate::workload)
//! table = ["p50_us", "p99_us"]  # columns of the report's table
//! notes = ["..."]
//!
//! [params]                      # every variant's parameters...
//! path = "veth"
//!
//! [mode.smoke]                  # ...then the mode's (smoke, quick and full are required)
//! rounds = 1
//! duration = "1s"
//! [mode.quick]
//! rounds = 3
//! variants = ["off-off", "on-rearm"]   # optional subset
//!
//! [[variant]]                   # ...with the variant's own keys in between
//! name = "off_off"
//! label = "Nagle on, QUICKACK off"
//! nodelay = false
//!
//! [[plot]]
//! kind = "ecdf"                 # ecdf | timeseries | bars (see tcptail_report::PlotSpec)
//! series = "latency_us"
//! title = "Request latency"
//!
//! [[verdict]]                   # first rule whose `when` holds; the last has no `when`
//! verdict = "reproduced"
//! when = "off_off.p50_us > 10 * on_rearm.p50_us"
//! reason = "Nagle + delayed ACK: p50 {off_off.p50_us} µs vs {on_rearm.p50_us} µs"
//! [[verdict]]
//! verdict = "not-reproduced"
//! reason = "..."
//!
//! [[event]]                     # optional: path events on the emulator's clock
//! at = "5s"                     # (every variant, or `variants = [...]`; see spec::events)
//! change = "blackhole"
//!
//! [[finding]]                   # optional: an observation decided from the data
//! title = "QUICKACK on the client"
//! when = "on_rearm.p50_us.max < off_off.p50_us.min"
//! then = "helps: {on_rearm.p50_us} µs"
//! otherwise = "does not help: {on_rearm.p50_us} µs"
//!
//! [[condition]]                 # the seed's condition beside this file's
//! name = "RTT"
//! seed = "40 ms"
//! run = "10 ms"
//! reason = "..."                # required when `run` differs from `seed`
//!
//! [decidability]                # can quick mode decide at the seed's effect size?
//! quick = "yes"                 # yes | partly | no
//! reason = "..."
//! ```
//!
//! Parameter layers, later winning: `[params]`, the variant's keys, the mode's keys. Errors
//! name the file, the line and the key.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use tcptail_report::{PlotSpec, Verdict};
use toml::Spanned;
use toml::de::{DeTable, DeValue};

use crate::params::{Param, Params};

/// How long and how thoroughly an experiment runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RunMode {
    /// Seconds per experiment: CI's end-to-end check that everything runs.
    Smoke,
    /// Minutes for the whole set: the README's main job.
    Quick,
    /// For real evaluations.
    Full,
}

impl RunMode {
    /// Every mode, in order.
    pub const ALL: [RunMode; 3] = [RunMode::Smoke, RunMode::Quick, RunMode::Full];

    /// The name used in files and on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            RunMode::Smoke => "smoke",
            RunMode::Quick => "quick",
            RunMode::Full => "full",
        }
    }
}

impl fmt::Display for RunMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A mode's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ModeSpec {
    /// Rounds; every variant runs once per round, interleaved.
    pub rounds: usize,
    /// The variants this mode runs (all when `None`).
    pub variants: Option<Vec<String>>,
    /// Parameter overrides for every variant.
    pub params: BTreeMap<String, Param>,
}

/// One variant.
#[derive(Debug, Clone, PartialEq)]
pub struct VariantSpec {
    /// Identifier used in verdict rules: `[a-z][a-z0-9_]*`.
    pub name: String,
    /// Display name (defaults to the name).
    pub label: String,
    /// The variant's own parameters.
    pub params: BTreeMap<String, Param>,
    /// Line of its `[[variant]]` header.
    pub line: usize,
}

/// One verdict rule.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleSpec {
    /// The verdict this rule gives.
    pub verdict: Verdict,
    /// The condition (see crate::verdict); `None` for the final, unconditional rule.
    pub when: Option<String>,
    /// The reason, with `{variant.metric}` placeholders.
    pub reason: String,
    /// Line of its `[[verdict]]` header.
    pub line: usize,
}

/// One finding (see [`crate::verdict::FindingRule`]).
#[derive(Debug, Clone, PartialEq)]
pub struct FindingSpec {
    /// What it is about.
    pub title: String,
    /// The condition.
    pub when: String,
    /// The text when it holds, with `{variant.metric}` placeholders.
    pub then: String,
    /// The text when it does not.
    pub otherwise: String,
    /// Line of its `[[finding]]` header.
    pub line: usize,
}

/// A parsed experiment file.
#[derive(Debug, Clone, PartialEq)]
pub struct Experiment {
    /// Where it came from (a path, or `built-in/NAME.toml`).
    pub file: String,
    /// Short name.
    pub name: String,
    /// One-line title.
    pub title: String,
    /// Seed document file name.
    pub seed: String,
    /// The seed's claim, quoted.
    pub claim: String,
    /// The workload engine's name.
    pub workload: String,
    /// `[params]`.
    pub params: BTreeMap<String, Param>,
    /// `[mode.*]`: all three modes.
    pub modes: BTreeMap<RunMode, ModeSpec>,
    /// `[[variant]]`, in order.
    pub variants: Vec<VariantSpec>,
    /// `[[plot]]`.
    pub plots: Vec<PlotSpec>,
    /// The table's columns.
    pub table: Vec<String>,
    /// `[[verdict]]`, in order.
    pub rules: Vec<RuleSpec>,
    /// `[[finding]]`, in order.
    pub findings: Vec<FindingSpec>,
    /// Remarks shown with the results.
    pub notes: Vec<String>,
    /// `lateness_tolerance`: the emulator's p99 release lateness above which a round's path
    /// was not faithful to the experiment and the round is excluded (default
    /// [`crate::path::LATENESS_BOUND`]).
    pub lateness_tolerance: std::time::Duration,
    /// `[[condition]]`: the seed's conditions beside the ones this file runs.
    pub conditions: Vec<tcptail_report::SeedCondition>,
    /// `[[event]]`: path events for every variant or the ones each names.
    pub events: Vec<EventSpec>,
    /// `[decidability]`: whether quick mode can decide the verdict where the effect is as large
    /// as the seed says (`quick = "yes" | "partly" | "no"`, `reason`).
    pub decidability: Option<tcptail_report::Decidability>,
}

/// A problem in an experiment file: where, which key, what.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}{}{}: {problem}", line.map(|l| format!(":{l}")).unwrap_or_default(), key.as_ref().map(|k| format!(": `{k}`")).unwrap_or_default())]
pub struct SpecError {
    /// The file.
    pub file: String,
    /// 1-based line, when the problem is on one.
    pub line: Option<usize>,
    /// The key at fault, when there is one.
    pub key: Option<String>,
    /// What is wrong.
    pub problem: String,
}

const TOP_KEYS: &[&str] = &[
    "name",
    "title",
    "seed",
    "claim",
    "workload",
    "table",
    "notes",
    "params",
    "mode",
    "variant",
    "plot",
    "verdict",
    "finding",
    "condition",
    "decidability",
    "lateness_tolerance",
    "event",
];

/// The experiment files built into the binary, in the order `lab run` runs them.
pub const BUILTIN: &[(&str, &str)] = &[
    ("trading-cc", include_str!("../../../experiments/trading-cc.toml")),
    ("nagle-delack", include_str!("../../../experiments/nagle-delack.toml")),
    ("idle-restart", include_str!("../../../experiments/idle-restart.toml")),
    ("tuning-ladder", include_str!("../../../experiments/tuning-ladder.toml")),
    ("sendq", include_str!("../../../experiments/sendq.toml")),
    ("loss", include_str!("../../../experiments/loss.toml")),
    ("bloat", include_str!("../../../experiments/bloat.toml")),
    ("wan", include_str!("../../../experiments/wan.toml")),
    ("rwin-limited", include_str!("../../../experiments/rwin-limited.toml")),
    ("ecn", include_str!("../../../experiments/ecn.toml")),
    ("reconnect-storm", include_str!("../../../experiments/reconnect-storm.toml")),
    ("keepalive", include_str!("../../../experiments/keepalive.toml")),
    ("rack", include_str!("../../../experiments/rack.toml")),
    ("rcvbuf-capped", include_str!("../../../experiments/rcvbuf-capped.toml")),
    ("sysctl-claims", include_str!("../../../experiments/sysctl-claims.toml")),
    ("bbr-burst", include_str!("../../../experiments/bbr-burst.toml")),
    ("link-downgrade", include_str!("../../../experiments/link-downgrade.toml")),
    ("tenant-isolation", include_str!("../../../experiments/tenant-isolation.toml")),
];

struct Source<'a> {
    text: &'a str,
    file: &'a str,
}

impl Source<'_> {
    fn line(&self, span: std::ops::Range<usize>) -> usize {
        let mut offset = span.start.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        self.text[..offset].matches('\n').count() + 1
    }

    fn err(&self, line: Option<usize>, key: Option<&str>, problem: impl Into<String>) -> SpecError {
        SpecError {
            file: self.file.to_owned(),
            line,
            key: key.map(str::to_owned),
            problem: problem.into(),
        }
    }

    fn at(&self, v: &Spanned<DeValue<'_>>, key: &str, problem: impl Into<String>) -> SpecError {
        self.err(Some(self.line(v.span())), Some(key), problem)
    }

    fn string(&self, key: &str, v: &Spanned<DeValue<'_>>) -> Result<String, SpecError> {
        v.get_ref().as_str().map(str::to_owned).ok_or_else(|| {
            self.at(v, key, format!("expected a string, found {}", v.get_ref().type_str()))
        })
    }

    /// The string at `key` of the `[[section]]` table `item`; its absence is an error at
    /// `item` naming `section.key`.
    fn required_string(
        &self,
        item: &Spanned<DeValue<'_>>,
        table: &DeTable<'_>,
        section: &str,
        key: &str,
    ) -> Result<String, SpecError> {
        match table.get(key) {
            Some(value) => self.string(key, value),
            None => Err(self.at(item, &format!("{section}.{key}"), "is required")),
        }
    }

    fn strings(&self, key: &str, v: &Spanned<DeValue<'_>>) -> Result<Vec<String>, SpecError> {
        let Some(items) = v.get_ref().as_array() else {
            return Err(self.at(v, key, "expected a list of strings"));
        };
        items.iter().map(|item| self.string(key, item)).collect()
    }

    fn table<'t, 'i>(
        &self,
        key: &str,
        v: &'t Spanned<DeValue<'i>>,
    ) -> Result<&'t DeTable<'i>, SpecError> {
        v.get_ref().as_table().ok_or_else(|| self.at(v, key, "expected a table"))
    }

    fn tables<'t, 'i>(
        &self,
        key: &str,
        v: &'t Spanned<DeValue<'i>>,
    ) -> Result<Vec<&'t Spanned<DeValue<'i>>>, SpecError> {
        let Some(items) = v.get_ref().as_array() else {
            return Err(self.at(v, key, format!("expected [[{key}]] tables")));
        };
        for item in items.iter() {
            self.table(key, item)?;
        }
        Ok(items.iter().collect())
    }

    /// Rejects a key of `table` that is not in `known`: the table's header (`[[finding]]`,
    /// `[decidability]`) and the keys it takes are in the error, keyed `name.key`.
    fn check_keys(
        &self,
        name: &str,
        header: &str,
        table: &DeTable<'_>,
        known: &[&str],
    ) -> Result<(), SpecError> {
        match table.iter().find(|(k, _)| !known.contains(&k.get_ref().as_ref())) {
            Some((k, kv)) => Err(self.at(
                kv,
                &format!("{name}.{}", k.get_ref()),
                format!("unknown key in {header} ({})", known.join(", ")),
            )),
            None => Ok(()),
        }
    }

    /// The `[[name]]` tables in `v`, each beside its item (for its line), keys checked against
    /// `known`.
    fn checked_tables<'t, 'i>(
        &self,
        name: &str,
        v: &'t Spanned<DeValue<'i>>,
        known: &[&str],
    ) -> Result<Vec<(&'t Spanned<DeValue<'i>>, &'t DeTable<'i>)>, SpecError> {
        let header = format!("[[{name}]]");
        let mut out = Vec::new();
        for item in self.tables(name, v)? {
            let table = self.table(name, item)?;
            self.check_keys(name, &header, table, known)?;
            out.push((item, table));
        }
        Ok(out)
    }

    fn params(
        &self,
        table: &DeTable<'_>,
        skip: &[&str],
    ) -> Result<BTreeMap<String, Param>, SpecError> {
        let mut out = BTreeMap::new();
        for (k, v) in table.iter() {
            let key = k.get_ref().as_ref();
            if skip.contains(&key) {
                continue;
            }
            let value = to_value(v.get_ref()).map_err(|p| self.at(v, key, p))?;
            out.insert(key.to_owned(), Param { value, line: self.line(v.span()) });
        }
        Ok(out)
    }
}

/// A spanned TOML value as a plain one.
fn to_value(v: &DeValue<'_>) -> Result<toml::Value, String> {
    Ok(match v {
        DeValue::String(s) => toml::Value::String(s.to_string()),
        DeValue::Integer(i) => {
            let digits = i.as_str().replace('_', "");
            let digits =
                digits.trim_start_matches("0x").trim_start_matches("0o").trim_start_matches("0b");
            toml::Value::Integer(
                i64::from_str_radix(digits, i.radix()).map_err(|e| format!("integer: {e}"))?,
            )
        }
        DeValue::Float(f) => toml::Value::Float(
            f.as_str().replace('_', "").parse().map_err(|e| format!("float: {e}"))?,
        ),
        DeValue::Boolean(b) => toml::Value::Boolean(*b),
        DeValue::Datetime(d) => toml::Value::String(d.to_string()),
        DeValue::Array(items) => toml::Value::Array(
            items.iter().map(|item| to_value(item.get_ref())).collect::<Result<_, _>>()?,
        ),
        DeValue::Table(t) => toml::Value::Table(
            t.iter()
                .map(|(k, v)| Ok((k.get_ref().to_string(), to_value(v.get_ref())?)))
                .collect::<Result<_, String>>()?,
        ),
    })
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

impl Experiment {
    /// Parses an experiment file's text; `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Experiment, SpecError> {
        let src = Source { text, file };
        let doc = DeTable::parse(text).map_err(|e| {
            let line = e.span().map(|s| src.line(s));
            src.err(line, None, e.message().trim().to_owned())
        })?;
        let doc = doc.get_ref();
        for (k, v) in doc.iter() {
            let key = k.get_ref().as_ref();
            if !TOP_KEYS.contains(&key) {
                return Err(src.at(
                    v,
                    key,
                    format!("unknown key (known: {})", TOP_KEYS.join(", ")),
                ));
            }
        }
        let get = |key: &str| doc.get(key);
        let required = |key: &str| -> Result<String, SpecError> {
            match get(key) {
                Some(v) => src.string(key, v),
                None => Err(src.err(None, Some(key), "is required")),
            }
        };
        let name = required("name")?;
        if !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
            return Err(src.at(
                get("name").expect("read above"),
                "name",
                "use lowercase letters, digits and `-`",
            ));
        }
        let mut exp = Experiment {
            file: file.to_owned(),
            title: required("title")?,
            seed: required("seed")?,
            claim: required("claim")?,
            workload: required("workload")?,
            name,
            params: BTreeMap::new(),
            modes: BTreeMap::new(),
            variants: Vec::new(),
            plots: Vec::new(),
            table: match get("table") {
                Some(v) => src.strings("table", v)?,
                None => Vec::new(),
            },
            rules: Vec::new(),
            findings: Vec::new(),
            notes: match get("notes") {
                Some(v) => src.strings("notes", v)?,
                None => Vec::new(),
            },
            lateness_tolerance: match get("lateness_tolerance") {
                Some(v) => {
                    let text = src.string("lateness_tolerance", v)?;
                    tcptail_units::parse_duration(&text)
                        .map_err(|e| src.at(v, "lateness_tolerance", e.to_string()))?
                }
                None => crate::path::LATENESS_BOUND,
            },
            conditions: Vec::new(),
            events: Vec::new(),
            decidability: None,
        };
        if let Some(v) = get("params") {
            exp.params = src.params(src.table("params", v)?, &[])?;
        }
        exp.parse_modes(&src, get("mode"))?;
        exp.parse_variants(&src, get("variant"))?;
        if let Some(v) = get("plot") {
            for item in src.tables("plot", v)? {
                let value = to_value(item.get_ref()).map_err(|p| src.at(item, "plot", p))?;
                let plot: PlotSpec = value.try_into().map_err(|e: toml::de::Error| {
                    src.at(item, "plot", e.message().trim().to_owned())
                })?;
                exp.plots.push(plot);
            }
        }
        exp.parse_rules(&src, get("verdict"))?;
        exp.parse_findings(&src, get("finding"))?;
        exp.parse_conditions(&src, get("condition"))?;
        exp.parse_events(&src, get("event"))?;
        exp.parse_decidability(&src, get("decidability"))?;
        Ok(exp)
    }

    fn parse_modes(
        &mut self,
        src: &Source<'_>,
        v: Option<&Spanned<DeValue<'_>>>,
    ) -> Result<(), SpecError> {
        let Some(v) = v else {
            return Err(src.err(
                None,
                Some("mode"),
                "[mode.smoke], [mode.quick] and [mode.full] are required",
            ));
        };
        let table = src.table("mode", v)?;
        for (k, mv) in table.iter() {
            let key = k.get_ref().as_ref();
            let Some(mode) = RunMode::ALL.into_iter().find(|m| m.as_str() == key) else {
                return Err(src.at(mv, key, "unknown mode (smoke, quick, full)"));
            };
            let mt = src.table(key, mv)?;
            let rounds = match mt.get("rounds") {
                Some(r) => {
                    match r.get_ref().as_integer().and_then(|i| i.as_str().parse::<usize>().ok()) {
                        Some(n @ 1..=1000) => n,
                        _ => return Err(src.at(r, "rounds", "expected an integer in 1..=1000")),
                    }
                }
                None => return Err(src.at(mv, &format!("mode.{key}.rounds"), "is required")),
            };
            let variants = match mt.get("variants") {
                Some(vv) => Some(src.strings("variants", vv)?),
                None => None,
            };
            let params = src.params(mt, &["rounds", "variants"])?;
            self.modes.insert(mode, ModeSpec { rounds, variants, params });
        }
        for mode in RunMode::ALL {
            if !self.modes.contains_key(&mode) {
                return Err(src.at(v, &format!("mode.{mode}"), "is required"));
            }
        }
        Ok(())
    }

    fn parse_variants(
        &mut self,
        src: &Source<'_>,
        v: Option<&Spanned<DeValue<'_>>>,
    ) -> Result<(), SpecError> {
        let Some(v) = v else {
            return Err(src.err(None, Some("variant"), "at least one [[variant]] is required"));
        };
        for item in src.tables("variant", v)? {
            let t = src.table("variant", item)?;
            let name = src.required_string(item, t, "variant", "name")?;
            if !valid_name(&name) {
                return Err(src.at(
                    t.get("name").expect("read above"),
                    "name",
                    format!(
                        "`{name}`: variant names are identifiers in verdict rules: [a-z][a-z0-9_]*"
                    ),
                ));
            }
            if self.variants.iter().any(|o| o.name == name) {
                return Err(src.at(item, "name", format!("variant `{name}` is defined twice")));
            }
            let label = match t.get("label") {
                Some(l) => src.string("label", l)?,
                None => name.clone(),
            };
            let params = src.params(t, &["name", "label"])?;
            self.variants.push(VariantSpec { name, label, params, line: src.line(item.span()) });
        }
        for (mode, spec) in &self.modes {
            for name in spec.variants.iter().flatten() {
                if !self.variants.iter().any(|v| &v.name == name) {
                    let line = spec.params.values().map(|p| p.line).min();
                    return Err(src.err(
                        line,
                        Some(&format!("mode.{mode}.variants")),
                        format!("no variant named `{name}`"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Reads and parses a file.
    pub fn load(path: &Path) -> Result<Experiment, SpecError> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| SpecError {
            file: file.clone(),
            line: None,
            key: None,
            problem: e.to_string(),
        })?;
        Experiment::parse(&text, &file)
    }

    /// A built-in experiment by name.
    pub fn builtin(name: &str) -> Option<Experiment> {
        let (_, text) = BUILTIN.iter().find(|(n, _)| *n == name)?;
        Some(
            Experiment::parse(text, &format!("built-in/{name}.toml"))
                .expect("built-in experiment files parse (tested)"),
        )
    }

    /// Every built-in experiment, in run order.
    pub fn builtins() -> Vec<Experiment> {
        BUILTIN.iter().map(|(n, _)| Experiment::builtin(n).expect("listed")).collect()
    }

    /// A mode's settings (all three exist in a parsed file).
    pub fn mode(&self, mode: RunMode) -> &ModeSpec {
        &self.modes[&mode]
    }

    /// The variants a mode runs, in file order.
    pub fn variants_in(&self, mode: RunMode) -> Vec<&VariantSpec> {
        match &self.mode(mode).variants {
            Some(names) => self.variants.iter().filter(|v| names.contains(&v.name)).collect(),
            None => self.variants.iter().collect(),
        }
    }

    /// A variant's parameters in a mode: `[params]`, then the variant's, then the mode's;
    /// `event` also holds the `[[event]]` tables that apply to the variant, before its own.
    pub fn params_for(&self, variant: &VariantSpec, mode: RunMode) -> Params {
        let layers = [&self.params, &variant.params, &self.mode(mode).params];
        let own = layers.iter().rev().find_map(|layer| layer.get("event"));
        match self.merged_event_param(&variant.name, own) {
            None => Params::from_layers(layers),
            Some(events) => {
                let merged = BTreeMap::from([("event".to_owned(), events)]);
                Params::from_layers(layers.into_iter().chain([&merged]))
            }
        }
    }

    /// An error about a parameter of `variant` in `mode`, located at the line that set it.
    pub fn param_error(
        &self,
        variant: &VariantSpec,
        mode: RunMode,
        key: &str,
        problem: &str,
    ) -> SpecError {
        let table = if key == "event" { self.event_line(&variant.name, problem) } else { None };
        let line = table
            .or_else(|| self.params_for(variant, mode).line(key).filter(|&l| l > 0))
            .or(Some(variant.line));
        SpecError {
            file: self.file.clone(),
            line,
            key: Some(key.to_owned()),
            problem: format!("variant `{}` ({mode} mode): {problem}", variant.name),
        }
    }
}

mod events;
mod rules;
pub use events::EventSpec;
#[cfg(test)]
mod tests;
