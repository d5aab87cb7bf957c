//! Seed 000's six production failure modes ("How This Breaks in Production"), each mapped to
//! the experiment that tests it, and what a run's `results.json` says about each: the report's
//! section "seed 000's six failure modes" is drawn from [`rows`] alone.
//!
//! Where one experiment tests several claims (`nagle-delack` holds failure modes 2 and 3 beside
//! its own split-write claim), the failure mode is judged by the finding whose title starts
//! with "Failure mode N", and the experiment's verdict is shown beside it.

use crate::results::{ExperimentResult, Outcome, Results, Verdict};

/// One failure mode and where it is tested.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FailureMode {
    /// Its number in the seed (1-6).
    pub number: u8,
    /// The seed's heading.
    pub title: &'static str,
    /// The experiment that tests it.
    pub experiment: &'static str,
    /// The finding of that experiment that judges it, by title prefix, when the experiment
    /// tests more than this failure mode.
    pub finding: Option<&'static str>,
}

/// Seed 000's failure modes, in the seed's order.
pub const SEED_000: [FailureMode; 6] = [
    FailureMode {
        number: 1,
        title: "BBR probe fires during order burst",
        experiment: "bbr-burst",
        finding: None,
    },
    FailureMode {
        number: 2,
        title: "Nagle delay on reconnect",
        experiment: "nagle-delack",
        finding: Some("Failure mode 2"),
    },
    FailureMode {
        number: 3,
        title: "QUICKACK silently disarms",
        experiment: "nagle-delack",
        finding: Some("Failure mode 3"),
    },
    FailureMode {
        number: 4,
        title: "Buffer size exceeds rmem_max - silently capped",
        experiment: "rcvbuf-capped",
        finding: None,
    },
    FailureMode {
        number: 5,
        title: "TIME_WAIT exhaustion during exchange reconnect storm",
        experiment: "reconnect-storm",
        finding: None,
    },
    FailureMode {
        number: 6,
        title: "tcp_slow_start_after_idle re-applies slow start on idle exchanges",
        experiment: "idle-restart",
        finding: None,
    },
];

/// What a run says about one failure mode.
#[derive(Debug, Clone, PartialEq)]
pub struct FailureModeRow {
    /// The failure mode.
    pub mode: FailureMode,
    /// The experiment's index in the run, its verdict and reason; `None`: not run.
    pub experiment: Option<(usize, Verdict, String)>,
    /// The judging finding's outcome and text, for modes judged by a finding (`None` when the
    /// experiment did not run, or the finding is not in its results).
    pub finding: Option<(Outcome, String)>,
}

impl FailureModeRow {
    /// `not-run`, or the verdict (for finding-judged modes, the finding's outcome).
    pub fn status(&self) -> &'static str {
        match (&self.experiment, self.mode.finding, &self.finding) {
            (None, ..) => "not-run",
            (Some(_), Some(_), Some((o, _))) => o.as_str(),
            (Some(_), Some(_), None) => "no-finding",
            (Some((_, v, _)), None, _) => v.as_str(),
        }
    }
}

fn find<'a>(results: &'a Results, name: &str) -> Option<(usize, &'a ExperimentResult)> {
    results.experiments.iter().enumerate().find(|(_, e)| e.name == name)
}

/// One row per failure mode, whether its experiment ran or not.
pub fn rows(results: &Results) -> Vec<FailureModeRow> {
    SEED_000
        .iter()
        .map(|&mode| {
            let found = find(results, mode.experiment);
            let finding = match (found, mode.finding) {
                (Some((_, e)), Some(prefix)) => e
                    .findings
                    .iter()
                    .find(|f| f.title.starts_with(prefix))
                    .map(|f| (f.outcome, f.text.clone())),
                _ => None,
            };
            FailureModeRow {
                mode,
                experiment: found.map(|(i, e)| (i, e.verdict, e.verdict_reason.clone())),
                finding,
            }
        })
        .collect()
}

/// Whether the report shows the section: when the run holds any of the mapped experiments.
pub fn applies(results: &Results) -> bool {
    rows(results).iter().any(|r| r.experiment.is_some())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{Environment, FindingResult, RunInfo};

    fn experiment(name: &str, verdict: Verdict, findings: &[(&str, Outcome)]) -> ExperimentResult {
        let mut e = ExperimentResult {
            name: name.into(),
            title: name.into(),
            seed: "000".into(),
            claim: String::new(),
            setup: String::new(),
            verdict,
            verdict_reason: format!("{name} reason"),
            verdict_rule: String::new(),
            rules: Vec::new(),
            findings: Vec::new(),
            rounds: 1,
            variants: Vec::new(),
            plots: Vec::new(),
            table: Vec::new(),
            notes: Vec::new(),
            conditions: Vec::new(),
            decidability: None,
            error: None,
            lateness: None,
            duration_s: 1.0,
        };
        e.findings = findings
            .iter()
            .map(|(t, o)| FindingResult {
                title: (*t).into(),
                when: String::new(),
                evaluated: String::new(),
                outcome: *o,
                text: format!("{t}: text"),
            })
            .collect();
        e
    }

    #[test]
    fn every_mode_has_a_row_and_missing_experiments_are_not_run() {
        let mut results = Results {
            run: RunInfo {
                tool_version: "0".into(),
                mode: "quick".into(),
                started_unix_s: 0,
                duration_s: 1.0,
                interrupted: false,
                command: String::new(),
            },
            environment: Environment::default(),
            experiments: Vec::new(),
        };
        assert!(!applies(&results));
        results.experiments = vec![
            experiment("idle-restart", Verdict::Reproduced, &[]),
            experiment(
                "nagle-delack",
                Verdict::Partly,
                &[("Failure mode 2: Nagle delay", Outcome::Fails), ("Other", Outcome::Holds)],
            ),
        ];
        assert!(applies(&results));
        let rows = rows(&results);
        let status: Vec<&str> = rows.iter().map(FailureModeRow::status).collect();
        assert_eq!(status, ["not-run", "fails", "no-finding", "not-run", "not-run", "reproduced"]);
        assert_eq!(rows[5].experiment.as_ref().map(|e| e.0), Some(0));
        assert_eq!(
            rows[1].finding.as_ref().map(|f| f.1.as_str()),
            Some("Failure mode 2: Nagle delay: text")
        );
    }
}
