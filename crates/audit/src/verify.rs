//! `tcptail tune --verify-with`: measure before you keep (seed 000: "If P99 doesn't improve,
//! revert the change").
//!
//! [`verify_each`] takes the plan's per-namespace changes one at a time: it measures the chosen
//! latency percentile `runs` times, applies the change, measures again, and keeps the change
//! only if the median improved by more than the run-to-run noise ([`improves`]); otherwise it
//! restores the previous value before trying the next change. Kept changes accumulate, so each
//! change is judged on top of those kept before it.
//!
//! The [`Lab`] trait is where values are set and latency is measured: the CLI implements it
//! with a veth namespace pair and the `tcptail bench` client; tests implement it with a model.
//! This module never touches a namespace, socket or clock itself.

use serde::Serialize;
use tcptail_units::stats::median;

use crate::Error;
use crate::profile::Scope;
use crate::tune::Plan;

/// Where changes are tried and measured.
pub trait Lab {
    /// Sets `key` to `value` in the lab (both ends), verified.
    fn set(&mut self, key: &str, value: &str) -> Result<(), Error>;
    /// One measurement of the chosen latency percentile, in microseconds.
    fn measure(&mut self) -> Result<f64, Error>;
}

/// One change's measured effect.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Trial {
    /// The key.
    pub key: String,
    /// The lab's value before.
    pub from: String,
    /// The profile's value.
    pub to: String,
    /// The percentile per run before the change (µs).
    pub before: Vec<f64>,
    /// The percentile per run after the change (µs).
    pub after: Vec<f64>,
    /// Whether the change was kept.
    pub kept: bool,
}

impl Trial {
    /// Median before minus median after (µs; positive = better); an empty series counts as 0.
    pub fn gain(&self) -> f64 {
        median(&self.before).unwrap_or(0.0) - median(&self.after).unwrap_or(0.0)
    }
}

/// Run-to-run noise: the larger spread (max - min) of the two series.
pub fn noise(before: &[f64], after: &[f64]) -> f64 {
    let spread = |xs: &[f64]| {
        let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
        if xs.len() < 2 { 0.0 } else { max - min }
    };
    spread(before).max(spread(after))
}

/// Whether `after` improves on `before` beyond noise: the median drops by more than the
/// spread of either series, and every run after beats the median before.
pub fn improves(before: &[f64], after: &[f64]) -> bool {
    let (Some(b), Some(a)) = (median(before), median(after)) else {
        return false;
    };
    b - a > noise(before, after) && after.iter().all(|x| *x < b)
}

/// Tries every per-namespace change of `plan` in `lab`, `runs` measurements before and after
/// each; returns one [`Trial`] per change. `progress` is told each trial as it completes.
pub fn verify_each(
    plan: &Plan,
    lab: &mut dyn Lab,
    runs: usize,
    progress: &mut dyn FnMut(&Trial),
) -> Result<Vec<Trial>, Error> {
    let runs = runs.max(1);
    let mut trials = Vec::new();
    for e in plan.changes().filter(|e| e.scope == Scope::Netns) {
        let from = e.current.clone().unwrap_or_default();
        let before = (0..runs).map(|_| lab.measure()).collect::<Result<Vec<_>, _>>()?;
        lab.set(&e.key, &e.value)?;
        let after = match (0..runs).map(|_| lab.measure()).collect::<Result<Vec<_>, _>>() {
            Ok(a) => a,
            Err(err) => {
                let _ = lab.set(&e.key, &from);
                return Err(err);
            }
        };
        let kept = improves(&before, &after);
        if !kept {
            lab.set(&e.key, &from)?;
        }
        let trial = Trial { key: e.key.clone(), from, to: e.value.clone(), before, after, kept };
        progress(&trial);
        trials.push(trial);
    }
    Ok(trials)
}

/// The trials as a table: key, change, median before/after, gain, noise, verdict.
pub fn render(trials: &[Trial], percentile: &str) -> String {
    let w = trials.iter().map(|t| t.key.len()).max().unwrap_or(3).max(3);
    let mut out = format!(
        "{:<w$} {:<28} {:>12} {:>12} {:>10} {:>10}  VERDICT\n",
        "KEY",
        "CHANGE",
        format!("{percentile} BEFORE"),
        format!("{percentile} AFTER"),
        "GAIN",
        "NOISE"
    );
    for t in trials {
        let change = format!("{} -> {}", t.from, t.to);
        out.push_str(&format!(
            "{:<w$} {:<28} {:>10.1}us {:>10.1}us {:>8.1}us {:>8.1}us  {}\n",
            t.key,
            change,
            median(&t.before).unwrap_or(0.0),
            median(&t.after).unwrap_or(0.0),
            t.gain(),
            noise(&t.before, &t.after),
            if t.kept { "kept" } else { "reverted (no gain beyond noise)" }
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::tune::Entry;

    /// A lab whose latency is a base plus a penalty per key that is not at its good value,
    /// with a fixed jitter sequence.
    struct Model {
        values: BTreeMap<String, String>,
        penalty: BTreeMap<&'static str, (&'static str, f64)>,
        jitter: Vec<f64>,
        n: usize,
    }

    impl Lab for Model {
        fn set(&mut self, key: &str, value: &str) -> Result<(), Error> {
            self.values.insert(key.to_owned(), value.to_owned());
            Ok(())
        }
        fn measure(&mut self) -> Result<f64, Error> {
            let mut lat = 100.0 + self.jitter[self.n % self.jitter.len()];
            self.n += 1;
            for (k, (good, p)) in &self.penalty {
                if self.values.get(*k).map(String::as_str) != Some(*good) {
                    lat += p;
                }
            }
            Ok(lat)
        }
    }

    fn entry(key: &str, from: &str, to: &str) -> Entry {
        Entry {
            key: key.into(),
            scope: Scope::Netns,
            current: Some(from.into()),
            value: to.into(),
            changes: true,
            rationale: String::new(),
            source: String::new(),
        }
    }

    #[test]
    fn keeps_only_changes_that_beat_noise() {
        let plan = Plan {
            profile: "t".into(),
            entries: vec![
                entry("net.ipv4.tcp_slow_start_after_idle", "1", "0"),
                entry("net.ipv4.tcp_keepalive_time", "7200", "30"),
            ],
            skipped: vec![],
            side_effects: vec![],
        };
        let mut lab = Model {
            values: [
                ("net.ipv4.tcp_slow_start_after_idle".to_owned(), "1".to_owned()),
                ("net.ipv4.tcp_keepalive_time".to_owned(), "7200".to_owned()),
            ]
            .into(),
            penalty: [("net.ipv4.tcp_slow_start_after_idle", ("0", 40.0))].into(),
            jitter: vec![0.0, 3.0, -2.0, 1.0],
            n: 0,
        };
        let mut seen = 0;
        let trials = verify_each(&plan, &mut lab, 3, &mut |_| seen += 1).unwrap();
        assert_eq!(seen, 2);
        assert!(trials[0].kept, "{trials:?}");
        assert!(trials[0].gain() > 30.0);
        assert!(!trials[1].kept, "keepalive does not change latency: {trials:?}");
        assert_eq!(lab.values["net.ipv4.tcp_keepalive_time"], "7200", "reverted");
        assert_eq!(lab.values["net.ipv4.tcp_slow_start_after_idle"], "0", "kept");
        let table = render(&trials, "p99");
        assert!(table.contains("kept") && table.contains("reverted"), "{table}");
    }

    #[test]
    fn noise_decides() {
        assert!(improves(&[100.0, 101.0, 99.0], &[90.0, 91.0, 89.0]));
        assert!(!improves(&[100.0, 130.0, 80.0], &[90.0, 91.0, 89.0]), "spread 50 > gain 10");
        assert!(!improves(&[100.0], &[]));
        assert_eq!(median(&[3.0, 1.0, 2.0, 4.0]), Some(2.5));
    }
}
