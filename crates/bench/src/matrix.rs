//! Several configurations compared in one run.
//!
//! `--matrix "cc=cubic,bbr,reno quickack=off,rearm"` names axes; every combination is a row.
//! The run is split into rounds and each round runs every row once, in order (A B C A B C ...),
//! so slow drift of the machine (another tenant, thermal state, a noisy neighbour) hits every
//! row alike instead of whichever ran last. Each row's histogram is merged over its rounds,
//! and the per-round medians are kept to show the spread. Ratios are to the first row.
//!
//! A row is labelled with the settings it asked for, but what it measured is what the sockets
//! really had: each row also carries the congestion control read back from both ends and
//! every problem the profile reports raised (a congestion control that is not available, a
//! capped buffer, ...), and the table flags such rows, so that a row asking for `vegas` on a
//! kernel without it is not read as Vegas's numbers.

use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tcptail_sock::{OptionOutcome, QuickAck};

use crate::client;
use crate::config::{BenchConfig, StopAfter};
use crate::context::ContextProbe;
use crate::report::{BenchResult, align};
use crate::run::{BenchError, Combine, RawRun, RunControl};
use crate::stats::{LatencySummary, Spread};

/// A matrix axis: a setting and the values it takes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Axis {
    /// Setting name: `cc`, `quickack`, `nodelay`, `busy-poll`, `size`, `response-size`, `spin`.
    pub key: String,
    /// Values, in order.
    pub values: Vec<String>,
}

/// A parsed `--matrix` specification.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MatrixSpec {
    /// Axes, in the order given.
    pub axes: Vec<Axis>,
}

/// A bad `--matrix` value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--matrix: {0}")]
pub struct MatrixError(String);

const KEYS: [&str; 7] = ["cc", "quickack", "nodelay", "busy-poll", "size", "response-size", "spin"];

impl std::str::FromStr for MatrixSpec {
    type Err = MatrixError;
    fn from_str(s: &str) -> Result<Self, MatrixError> {
        let mut axes: Vec<Axis> = Vec::new();
        for word in s.split_whitespace() {
            let (key, values) = word.split_once('=').ok_or_else(|| {
                MatrixError(format!("'{word}' is not KEY=V1,V2 (e.g. cc=cubic,bbr)"))
            })?;
            if !KEYS.contains(&key) {
                return Err(MatrixError(format!(
                    "unknown setting '{key}' (use one of {})",
                    KEYS.join(", ")
                )));
            }
            if axes.iter().any(|a| a.key == key) {
                return Err(MatrixError(format!("setting '{key}' given twice")));
            }
            let values: Vec<String> =
                values.split(',').filter(|v| !v.is_empty()).map(str::to_string).collect();
            if values.is_empty() {
                return Err(MatrixError(format!("'{key}' has no values")));
            }
            axes.push(Axis { key: key.to_string(), values });
        }
        if axes.is_empty() {
            return Err(MatrixError(
                "no axes given (e.g. \"cc=cubic,bbr quickack=off,rearm\")".into(),
            ));
        }
        Ok(MatrixSpec { axes })
    }
}

impl MatrixSpec {
    /// Every combination, first axis varying slowest, as (key, value) lists.
    pub fn combinations(&self) -> Vec<Vec<(String, String)>> {
        let mut combos: Vec<Vec<(String, String)>> = vec![Vec::new()];
        for axis in &self.axes {
            combos = combos
                .into_iter()
                .flat_map(|prefix| {
                    axis.values.iter().map(move |v| {
                        let mut c = prefix.clone();
                        c.push((axis.key.clone(), v.clone()));
                        c
                    })
                })
                .collect();
        }
        combos
    }

    /// Builds and validates each row's configuration from `base`, before anything runs.
    pub fn configs(&self, base: &BenchConfig) -> Result<Vec<BenchConfig>, MatrixError> {
        self.combinations()
            .iter()
            .map(|combo| {
                let mut config = base.clone();
                for (key, value) in combo {
                    apply_setting(&mut config, key, value)?;
                }
                config.validate().map_err(|e| MatrixError(format!("{}: {e}", label(combo))))?;
                Ok(config)
            })
            .collect()
    }
}

fn parse_bool(key: &str, value: &str) -> Result<bool, MatrixError> {
    match value {
        "on" | "true" | "1" | "yes" => Ok(true),
        "off" | "false" | "0" | "no" => Ok(false),
        _ => Err(MatrixError(format!("{key}={value}: use on or off"))),
    }
}

fn apply_setting(config: &mut BenchConfig, key: &str, value: &str) -> Result<(), MatrixError> {
    let bad = |e: String| MatrixError(format!("{key}={value}: {e}"));
    match key {
        "cc" => config.profile.congestion = Some(value.to_string()),
        "quickack" => config.profile.quickack = value.parse::<QuickAck>().map_err(bad)?,
        "nodelay" => config.profile.nodelay = Some(parse_bool(key, value)?),
        "busy-poll" => {
            let d = tcptail_units::parse_duration(value).map_err(|e| bad(e.to_string()))?;
            config.profile.busy_poll = Some(d);
        }
        "size" | "response-size" => {
            let size: tcptail_units::ByteSize = value.parse().map_err(|e| bad(format!("{e}")))?;
            let size = u32::try_from(size.bytes()).map_err(|_| bad("too large".into()))?;
            if key == "size" {
                config.request_len = size;
            } else {
                config.reply_len = size;
            }
        }
        "spin" => config.spin = parse_bool(key, value)?,
        _ => unreachable!("keys are checked when parsing"),
    }
    Ok(())
}

fn label(combo: &[(String, String)]) -> String {
    combo.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
}

/// One row of a matrix result.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MatrixRow {
    /// The row's settings, e.g. `{"cc": "bbr", "quickack": "rearm"}`.
    pub config: BTreeMap<String, String>,
    /// The merged result over all rounds.
    #[serde(flatten)]
    pub result: BenchResult,
    /// p50 of each round, µs: the run-to-run spread.
    pub p50_rounds: Option<Spread>,
    /// p99 of each round, µs.
    pub p99_rounds: Option<Spread>,
    /// This row's p50 divided by the first row's.
    pub p50_ratio: Option<f64>,
    /// This row's p99 divided by the first row's.
    pub p99_ratio: Option<f64>,
    /// Congestion control read back from the client sockets.
    pub congestion_client: Option<String>,
    /// Congestion control read back from the server sockets.
    pub congestion_server: Option<String>,
    /// Why the row may not measure what its label says: profile options not applied as asked
    /// (either end), the result's warnings. Empty when the row is clean.
    pub problems: Vec<String>,
}

/// A matrix run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MatrixResult {
    /// Rounds each row ran.
    pub rounds: usize,
    /// Rows, in combination order.
    pub rows: Vec<MatrixRow>,
}

/// Runs every row `rounds` times, interleaved; each round gets 1/rounds of the base stop.
pub fn run_matrix(
    base: &BenchConfig,
    spec: &MatrixSpec,
    rounds: usize,
    control: &RunControl,
) -> Result<MatrixResult, BenchError> {
    let rounds = rounds.max(1);
    let mut configs = spec
        .configs(base)
        .map_err(|e| BenchError::Protocol { connection: 0, message: e.to_string() })?;
    for c in &mut configs {
        c.stop = match base.stop {
            StopAfter::Duration(d) => StopAfter::Duration(d / rounds as u32),
            StopAfter::Count(n) => StopAfter::Count((n / rounds as u64).max(c.connections as u64)),
        };
        if let StopAfter::Duration(d) = c.warmup {
            c.warmup = StopAfter::Duration(d.min(Duration::from_millis(200)));
        }
    }
    let combos = spec.combinations();
    let probe = ContextProbe::start();
    let mut merged: Vec<RawRun> = configs.iter().map(|_| RawRun::default()).collect();
    let mut p50s: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
    let mut p99s: Vec<Vec<f64>> = vec![Vec::new(); configs.len()];
    run_rounds(&configs, rounds, control, |i, config| {
        // Interval histograms (--interval, --hdr-log) carry the row they belong to.
        if let Some(intervals) = control.intervals() {
            intervals.set_tag(Some(label(&combos[i])));
        }
        let raw = client::run_raw(config, control)?;
        if let Some(s) = raw.latency.summary() {
            p50s[i].push(s.p50);
            p99s[i].push(s.p99);
        }
        merged[i].absorb(raw, Combine::Sequential);
        Ok(())
    })?;
    let results: Vec<BenchResult> =
        merged.iter().zip(&configs).map(|(raw, c)| client::summarise(c, raw, &probe)).collect();
    let first = results.first().and_then(|r| r.latency_us);
    let ratio = |r: &BenchResult, pick: fn(&LatencySummary) -> f64| match (first, r.latency_us) {
        (Some(f), Some(l)) if pick(&f) > 0.0 => Some(pick(&l) / pick(&f)),
        _ => None,
    };
    let rows = results
        .into_iter()
        .enumerate()
        .map(|(i, result)| MatrixRow {
            config: combos[i].iter().cloned().collect(),
            p50_ratio: ratio(&result, |s| s.p50),
            p99_ratio: ratio(&result, |s| s.p99),
            congestion_client: result.context.congestion_client.clone(),
            congestion_server: result.context.congestion_server.clone(),
            problems: problems(&result),
            result,
            p50_rounds: Spread::of(&p50s[i]),
            p99_rounds: Spread::of(&p99s[i]),
        })
        .collect();
    Ok(MatrixResult { rounds, rows })
}

/// Runs `run(row, config)` for every row, round after round (A B C A B C ...), until done or
/// stopped; the order is the whole point of a matrix, so it lives here, apart from the I/O.
fn run_rounds<F>(
    configs: &[BenchConfig],
    rounds: usize,
    control: &RunControl,
    mut run: F,
) -> Result<(), BenchError>
where
    F: FnMut(usize, &BenchConfig) -> Result<(), BenchError>,
{
    for _ in 0..rounds {
        for (i, config) in configs.iter().enumerate() {
            if control.stopped() {
                return Ok(());
            }
            run(i, config)?;
        }
    }
    Ok(())
}

/// The profile options either end did not apply as asked, and the result's warnings.
fn problems(result: &BenchResult) -> Vec<String> {
    let mut out = Vec::new();
    for (side, report) in [("client", &result.client_apply), ("server", &result.server_apply)] {
        for p in report.iter().flat_map(|r| r.problems()) {
            out.push(format!(
                "{side} {}: asked {}, got {} ({})",
                p.option,
                p.requested,
                p.actual.as_deref().unwrap_or("?"),
                outcome_kind(&p.outcome)
            ));
        }
    }
    out.extend(result.warnings.iter().cloned());
    out
}

fn outcome_kind(outcome: &OptionOutcome) -> String {
    match outcome {
        OptionOutcome::Applied => "applied".into(),
        OptionOutcome::Capped { limit_name, limit, .. } => {
            format!("capped by {limit_name}={limit}")
        }
        OptionOutcome::NotAvailable { available } => {
            format!("not available; available: {}", available.join(" "))
        }
        OptionOutcome::NotAllowed { allowed } => {
            format!("not allowed; allowed: {}", allowed.join(" "))
        }
        OptionOutcome::Unsupported => "unsupported by this kernel".into(),
        OptionOutcome::Failed { error } => format!("failed: {error}"),
        OptionOutcome::Mismatch => "read back differs".into(),
        OptionOutcome::RefusedByPolicy => "refused: server policy".into(),
    }
}

/// The human table of a matrix run.
pub fn render_matrix(m: &MatrixResult) -> String {
    let mut table = vec![
        [
            "config",
            "cc read back",
            "",
            "p50 µs",
            "p99 µs",
            "p99.9 µs",
            "max µs",
            "tx/s",
            "p50 ×",
            "p99 ×",
            "p50 spread",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>(),
    ];
    for row in &m.rows {
        let l = row.result.latency_us;
        let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.1}"));
        let cc = match (&row.congestion_client, &row.congestion_server) {
            (Some(c), Some(s)) if c == s => c.clone(),
            (c, s) => format!("{}/{}", c.as_deref().unwrap_or("?"), s.as_deref().unwrap_or("?")),
        };
        table.push(vec![
            label_of(row),
            cc,
            if row.problems.is_empty() { String::new() } else { "!".into() },
            f(l.map(|l| l.p50)),
            f(l.map(|l| l.p99)),
            f(l.map(|l| l.p999)),
            f(l.map(|l| l.max)),
            format!("{:.0}", row.result.transactions_per_second),
            row.p50_ratio.map_or("-".into(), |r| format!("{r:.2}")),
            row.p99_ratio.map_or("-".into(), |r| format!("{r:.2}")),
            row.p50_rounds.map_or("-".into(), |s| format!("{:.1}-{:.1}", s.min, s.max)),
        ]);
    }
    let mut out = format!(
        "tcptail bench matrix: {} rows x {} interleaved rounds; ratios against the first row\n\n",
        m.rows.len(),
        m.rounds
    );
    out.push_str(&align(&table));
    let flagged: Vec<&MatrixRow> = m.rows.iter().filter(|r| !r.problems.is_empty()).collect();
    if !flagged.is_empty() {
        out.push_str(
            "\n! rows that did not run as labelled (\"cc read back\" is client/server when \
             they differ); their numbers belong to what was read back:\n",
        );
        for row in flagged {
            for p in &row.problems {
                out.push_str(&format!("  {}: {p}\n", label_of(row)));
            }
        }
    }
    if let Some(first) = m.rows.first() {
        out.push_str(&format!("\nplacement: {}\n", first.result.context.placement));
    }
    for row in &m.rows {
        if let Some(a) = &row.result.attribution {
            for s in &a.statements {
                out.push_str(&format!("{}: {s}\n", label_of(row)));
            }
        }
    }
    out
}

fn label_of(row: &MatrixRow) -> String {
    row.config.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcptail_sock::Profile;

    #[test]
    fn parses_and_expands() {
        let spec: MatrixSpec = "cc=cubic,bbr,reno quickack=off,rearm".parse().unwrap();
        let combos = spec.combinations();
        assert_eq!(combos.len(), 6);
        assert_eq!(label(&combos[0]), "cc=cubic quickack=off");
        assert_eq!(label(&combos[5]), "cc=reno quickack=rearm");
    }

    #[test]
    fn rejects_bad_specs() {
        for (spec, needle) in [
            ("", "no axes"),
            ("cc", "KEY=V1,V2"),
            ("colour=red", "unknown setting 'colour'"),
            ("cc=cubic cc=bbr", "given twice"),
            ("cc=", "no values"),
        ] {
            let e = spec.parse::<MatrixSpec>().unwrap_err().to_string();
            assert!(e.contains(needle), "{spec}: {e}");
        }
    }

    #[test]
    fn rounds_interleave_rows() {
        let base = BenchConfig::new("127.0.0.1:1".parse().unwrap(), Profile::default());
        let configs: Vec<BenchConfig> =
            "cc=cubic,bbr,reno".parse::<MatrixSpec>().unwrap().configs(&base).unwrap();
        let control = RunControl::default();
        let mut order = Vec::new();
        run_rounds(&configs, 3, &control, |i, c| {
            order.push((i, c.profile.congestion.clone().unwrap()));
            Ok(())
        })
        .unwrap();
        let rows: Vec<usize> = order.iter().map(|(i, _)| *i).collect();
        assert_eq!(rows, [0, 1, 2, 0, 1, 2, 0, 1, 2]);
        assert_eq!(order[1].1, "bbr");
        assert_eq!(order[5].1, "reno");

        // A stop ends the rounds before the next row, and an error ends them at once.
        let control = RunControl::default();
        let mut ran = Vec::new();
        run_rounds(&configs, 3, &control, |i, _| {
            ran.push(i);
            if ran.len() == 4 {
                control.stop();
            }
            Ok(())
        })
        .unwrap();
        assert_eq!(ran, [0, 1, 2, 0]);
        let control = RunControl::default();
        let mut calls = 0;
        let err = run_rounds(&configs, 3, &control, |i, _| {
            calls += 1;
            if i == 1 {
                return Err(BenchError::Protocol { connection: 0, message: "boom".into() });
            }
            Ok(())
        });
        assert!(err.is_err());
        assert_eq!(calls, 2);
    }

    #[test]
    fn configs_apply_and_validate_settings() {
        let base = BenchConfig::new("127.0.0.1:1".parse().unwrap(), Profile::default());
        let spec: MatrixSpec = "cc=bbr quickack=rearm size=128 nodelay=on".parse().unwrap();
        let c = &spec.configs(&base).unwrap()[0];
        assert_eq!(c.profile.congestion.as_deref(), Some("bbr"));
        assert_eq!(c.profile.quickack, QuickAck::Rearm);
        assert_eq!(c.profile.nodelay, Some(true));
        assert_eq!(c.request_len, 128);
        let bad: MatrixSpec = "size=8".parse().unwrap();
        assert!(bad.configs(&base).unwrap_err().to_string().contains("--size 8"));
        let bad: MatrixSpec = "quickack=sometimes".parse().unwrap();
        assert!(bad.configs(&base).is_err());
    }
}
