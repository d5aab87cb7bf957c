//! The runner: checks every experiment before anything runs, interleaves variants over
//! rounds, folds rounds into medians with their spread, decides the verdict, and writes
//! `results.json` and `index.html` after every experiment so an interrupted run keeps what
//! finished.
//!
//! Faithful rounds: a round counts only when its path and workload were what the experiment
//! meant. A round whose emulator ran later than the experiment's `lateness_tolerance` (p99),
//! during which the host's TCP memory reached `tcp_mem`'s low level or pressure (`tcp_mem` is
//! one for all namespaces: the kernel then keeps every socket's buffers from growing, see
//! [`tcptail_netns::tcp_memory`]), or whose workload failed, is excluded from the medians,
//! intervals and verdict, and listed in the variant's `rounds` with the reason; the verdict rules see fewer rounds, so too few
//! faithful rounds make the verdict inconclusive rather than decided on what remains. So does
//! a rule that misses only a percentile too few samples supported (a loaded machine completes
//! fewer requests per round): that is a lack of data, not a host that cannot run the test.
//!
//! Interleaving: round `r` runs every variant once, starting at variant `r mod n`, so slow
//! drift of the machine (thermal, a noisy neighbour) hits every variant alike and no variant
//! always runs first after a path was torn down. An engine with a joint plan
//! ([`crate::workload::JointPlan`]) runs every variant at once instead, one step per round;
//! each replica it returns for a variant is folded like a round of its own.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tcptail_netns::tcp_memory::{
    DEFAULT_INTERVAL as TCP_MEMORY_INTERVAL, Summary as TcpMemorySummary, Watch as TcpMemoryWatch,
};
use tcptail_report::{
    Environment, ExperimentResult, LATENESS_METRIC, Lateness, Metric, PathEventRecord, Results,
    RoundRecord, RunInfo, Series, SeriesKind, VariantResult, Verdict,
};

use crate::round::{Measurement, RoundContext, RunError};
use crate::spec::{Experiment, RunMode, SpecError, VariantSpec};
use crate::verdict::{self, FindingRule, Rule, RuleError};
use crate::workload::{self, JointPlan, VariantPlan};

/// Building and removing one variant-round's path and processes (namespaces, links, sysctls,
/// the emulator's threads), beside what the round's plan runs. Measured in a whole quick run
/// on this project's 2-vCPU VM under a load of 1-6 (2026-11-27): a variant-round took
/// 0.05-0.3 s longer than its plan: about 0.05 s on veth (nagle-delack), 0.15 s on emulated
/// paths (loss: 2.66 s for 2.5 s, link-downgrade: 7.15 s for 7 s), 0.25-0.3 s on the
/// 1 Gbit/s x 100-120 ms paths with their large buffers (rwin-limited, wan).
pub const SETUP_PER_ROUND: Duration = Duration::from_millis(150);

/// One experiment, checked: every variant planned, every rule compiled.
pub struct Prepared {
    /// The experiment file.
    pub experiment: Experiment,
    variants: Vec<PreparedVariant>,
    rules: Vec<Rule>,
    findings: Vec<FindingRule>,
    rounds: usize,
    /// Every variant at once, for engines that run them together.
    joint: Option<Box<dyn JointPlan>>,
}

struct PreparedVariant {
    spec: VariantSpec,
    plan: Box<dyn VariantPlan>,
    config: BTreeMap<String, serde_json::Value>,
}

impl Prepared {
    /// Plans every variant the mode runs and compiles the verdict rules; the first problem is
    /// returned with its file, line and key. `rounds` overrides the mode's.
    pub fn new(
        experiment: Experiment,
        mode: RunMode,
        rounds: Option<usize>,
    ) -> Result<Prepared, SpecError> {
        let engine = workload::by_name(&experiment.workload).ok_or_else(|| SpecError {
            file: experiment.file.clone(),
            line: None,
            key: Some("workload".into()),
            problem: format!(
                "unknown workload `{}` (known: {})",
                experiment.workload,
                workload::all().map(|w| w.name()).join(", ")
            ),
        })?;
        let mut variants = Vec::new();
        let mut all_params = Vec::new();
        for spec in experiment.variants_in(mode) {
            let params = experiment.params_for(spec, mode);
            let plan = workload::plan(engine, &params)
                .map_err(|e| experiment.param_error(spec, mode, &e.key, &e.problem))?;
            let mut config = params.to_json();
            config.insert("label".into(), spec.label.clone().into());
            config.insert("setup".into(), plan.describe().into());
            variants.push(PreparedVariant { spec: spec.clone(), plan, config });
            all_params.push(params);
        }
        let named: Vec<(&str, &crate::params::Params)> =
            variants.iter().map(|v| v.spec.name.as_str()).zip(&all_params).collect();
        let joint = engine.joint(&named).map_err(|(i, e)| {
            experiment.param_error(&variants[i].spec, mode, &e.key, &e.problem)
        })?;
        if variants.is_empty() {
            return Err(SpecError {
                file: experiment.file.clone(),
                line: None,
                key: Some(format!("mode.{mode}.variants")),
                problem: "the mode runs no variant".into(),
            });
        }
        let names: Vec<&str> = experiment.variants.iter().map(|v| v.name.as_str()).collect();
        // A rule or finding that does not compile is an error at its line of the file.
        let file = &experiment.file;
        let at_line = |line: usize| {
            move |e: RuleError| SpecError {
                file: file.clone(),
                line: Some(line),
                key: Some(e.key().to_owned()),
                problem: e.to_string(),
            }
        };
        let rules = experiment
            .rules
            .iter()
            .map(|spec| Rule::compile(spec, &names).map_err(at_line(spec.line)))
            .collect::<Result<Vec<_>, _>>()?;
        let findings = experiment
            .findings
            .iter()
            .map(|spec| FindingRule::compile(spec, &names).map_err(at_line(spec.line)))
            .collect::<Result<Vec<_>, _>>()?;
        let rounds = rounds.unwrap_or(experiment.mode(mode).rounds).max(1);
        Ok(Prepared { experiment, variants, rules, findings, rounds, joint })
    }

    /// Rounds times variants (rounds alone when the variants run together): the number of
    /// steps this experiment takes.
    pub fn steps(&self) -> usize {
        if self.joint.is_some() { self.rounds } else { self.rounds * self.variants.len() }
    }

    /// How long this experiment should take: per round, every variant's planned time (the
    /// joint round's for engines that run them together) plus [`SETUP_PER_ROUND`] for
    /// building and removing its path, times the rounds. What a loaded machine or an engine's
    /// waits beyond its plan (timeouts, drains) add is not in it: `duration_s` in the results
    /// is the measured time beside it.
    pub fn estimate(&self) -> Duration {
        let per_round = match &self.joint {
            Some(joint) => joint.planned() + SETUP_PER_ROUND,
            None => self.variants.iter().map(|v| v.plan.planned() + SETUP_PER_ROUND).sum(),
        };
        per_round * u32::try_from(self.rounds).unwrap_or(u32::MAX)
    }

    /// Rounds this experiment runs.
    pub fn rounds(&self) -> usize {
        self.rounds
    }

    /// The variants' names, in file order.
    pub fn variant_names(&self) -> Vec<&str> {
        self.variants.iter().map(|v| v.spec.name.as_str()).collect()
    }
}

/// How a run is set up.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The mode (recorded; the rounds and variants are already in the prepared experiments).
    pub mode: RunMode,
    /// Where results.json, index.html and the per-round scratch directories go.
    pub out: PathBuf,
    /// The run's seed: every round's seed derives from it, the experiment, variant and round.
    pub seed: u64,
    /// The command line, for the report.
    pub command: String,
    /// The machine (see [`crate::environment::probe`]); the run adds the emulator's lateness.
    pub environment: Environment,
    /// Reads the host's TCP memory and pressure state, sampled through every round
    /// ([`tcptail_netns::tcp_memory::read_host`]; a test scripts it).
    pub tcp_memory: tcptail_netns::tcp_memory::Sampler,
}

/// What a run reports while it goes (progress bars, log lines).
pub trait Observer: Sync {
    /// An experiment starts; it takes `steps` variant-rounds.
    fn experiment_started(&self, index: usize, prepared: &Prepared);
    /// A variant-round starts.
    fn step_started(&self, variant: &str, round: usize, rounds: usize);
    /// Progress within the current variant-round, 0..=1.
    fn step_progress(&self, fraction: f64);
    /// A variant-round ended (an error is also recorded in the results).
    fn step_finished(&self, variant: &str, round: usize, error: Option<&RunError>);
    /// An experiment's results are written.
    fn experiment_finished(&self, result: &ExperimentResult);
}

/// An observer that says nothing.
pub struct Silent;

impl Observer for Silent {
    fn experiment_started(&self, _: usize, _: &Prepared) {}
    fn step_started(&self, _: &str, _: usize, _: usize) {}
    fn step_progress(&self, _: f64) {}
    fn step_finished(&self, _: &str, _: usize, _: Option<&RunError>) {}
    fn experiment_finished(&self, _: &ExperimentResult) {}
}

/// A run that could not write its results.
#[derive(Debug, thiserror::Error)]
pub enum RunnerError {
    /// The output directory or a file in it.
    #[error("{path}: {source}")]
    Io {
        /// The path at fault.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// results.json could not be written.
    #[error(transparent)]
    Results(#[from] tcptail_report::results::ResultsError),
}

/// Runs `experiments` in order and writes the results after each. Returns the results (with
/// `run.interrupted` set when `stop_requested` became true).
pub fn run(
    experiments: &[Prepared],
    options: &RunOptions,
    observer: &dyn Observer,
    stop_requested: &(dyn Fn() -> bool + Sync),
) -> Result<Results, RunnerError> {
    std::fs::create_dir_all(&options.out)
        .map_err(|source| RunnerError::Io { path: options.out.clone(), source })?;
    let started = Instant::now();
    let mut results = Results {
        run: RunInfo {
            tool_version: env!("CARGO_PKG_VERSION").to_owned(),
            mode: options.mode.to_string(),
            started_unix_s: SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()),
            duration_s: 0.0,
            interrupted: false,
            command: options.command.clone(),
        },
        environment: options.environment.clone(),
        experiments: Vec::new(),
    };
    write(&results, &options.out)?;
    for (index, prepared) in experiments.iter().enumerate() {
        if stop_requested() {
            results.run.interrupted = true;
            break;
        }
        observer.experiment_started(index, prepared);
        let (result, interrupted) = run_experiment(prepared, options, observer, stop_requested);
        if let Some(lateness) = &result.lateness {
            lateness.add_to(&mut results.environment.emulator_lateness);
        }
        results.experiments.push(result);
        results.run.duration_s = started.elapsed().as_secs_f64();
        results.run.interrupted = interrupted;
        write(&results, &options.out)?;
        observer.experiment_finished(results.experiments.last().expect("just pushed"));
        if interrupted {
            break;
        }
    }
    results.run.duration_s = started.elapsed().as_secs_f64();
    write(&results, &options.out)?;
    Ok(results)
}

/// Writes results.json and index.html into `dir`, each atomically.
pub fn write(results: &Results, dir: &Path) -> Result<(), RunnerError> {
    results.write(&dir.join(tcptail_report::results::RESULTS_FILE))?;
    let html = tcptail_report::html::render(results);
    let path = dir.join(tcptail_report::results::REPORT_FILE);
    tcptail_report::files::write_atomically(&path, html.as_bytes(), 0o644)
        .map_err(|source| RunnerError::Io { path, source })
}

/// The per-variant metric that carries the emulator's p99 release lateness of its rounds.
pub const EMULATOR_LATENESS_METRIC: &str = LATENESS_METRIC;

/// Every round's measurements of one variant.
#[derive(Default)]
struct Rounds {
    /// The faithful rounds' measurements: what the metrics and the verdict use.
    measurements: Vec<Measurement>,
    /// Rounds that completed on a path that was not faithful (kept for the lateness column).
    excluded: Vec<Measurement>,
    /// Every round that ran, faithful or not, in order.
    records: Vec<RoundRecord>,
    errors: Vec<String>,
    /// Why this host cannot run the variant (found in its first round; not repeated).
    not_applicable: Option<String>,
}

fn run_experiment(
    prepared: &Prepared,
    options: &RunOptions,
    observer: &dyn Observer,
    stop_requested: &(dyn Fn() -> bool + Sync),
) -> (ExperimentResult, bool) {
    let started = Instant::now();
    let experiment = &prepared.experiment;
    let n = prepared.variants.len();
    let mut rounds: Vec<Rounds> = (0..n).map(|_| Rounds::default()).collect();
    let mut completed_rounds = 0;
    let mut interrupted = false;
    'rounds: for round in 0..prepared.rounds {
        if let Some(joint) = &prepared.joint {
            if stop_requested() {
                interrupted = true;
                break 'rounds;
            }
            if run_joint_round(
                prepared,
                joint.as_ref(),
                round,
                &mut rounds,
                options,
                observer,
                stop_requested,
            ) {
                interrupted = true;
                break 'rounds;
            }
            completed_rounds = round + 1;
            continue;
        }
        for k in 0..n {
            let index = (round + k) % n;
            let variant = &prepared.variants[index];
            if stop_requested() {
                interrupted = true;
                break 'rounds;
            }
            if rounds[index].not_applicable.is_some() {
                // The host cannot run it; one round found that out.
                observer.step_started(&variant.spec.name, round, prepared.rounds);
                observer.step_finished(&variant.spec.name, round, None);
                continue;
            }
            let plan = variant.plan.as_ref();
            let step = Step { name: &variant.spec.name, dir: &variant.spec.name, round };
            let (outcome, observed) = run_step(
                prepared,
                &step,
                options,
                observer,
                stop_requested,
                |ctx| plan.run(ctx),
                |m| declared_metrics_present(plan, m),
            );
            let r = &mut rounds[index];
            let recorded = r.records.len();
            match outcome {
                Ok(mut m) => match observed.unfaithful_round(&mut m, experiment) {
                    None => {
                        r.records.push(faithful(round));
                        r.measurements.push(m);
                    }
                    Some(why) => {
                        r.records.push(excluded(round, why));
                        r.excluded.push(m);
                    }
                },
                Err(RunError::Interrupted) => {
                    interrupted = true;
                    break 'rounds;
                }
                Err(RunError::NotApplicable(why)) => r.not_applicable = Some(why),
                Err(e) => {
                    r.records.push(excluded(round, format!("the workload failed: {e}")));
                    r.errors.push(format!("round {}: {e}", round + 1));
                }
            }
            if let Some(record) = r.records.get_mut(recorded) {
                observed.annotate(record);
            }
        }
        completed_rounds = round + 1;
    }
    let variants: Vec<VariantResult> =
        prepared.variants.iter().zip(&rounds).map(|(v, r)| fold_variant(v, r)).collect();
    let mut lateness: Option<Lateness> = None;
    let every_round = rounds.iter().flat_map(|r| r.measurements.iter().chain(&r.excluded));
    for l in every_round.filter_map(|m| m.lateness.as_ref()) {
        l.add_to(&mut lateness);
    }
    let failures: Vec<String> = prepared
        .variants
        .iter()
        .zip(&rounds)
        .flat_map(|(v, r)| r.errors.iter().map(move |e| format!("{}: {e}", v.spec.name)))
        .collect();
    let mut notes = experiment.notes.clone();
    if interrupted {
        notes.push(format!(
            "interrupted: {completed_rounds} of {} rounds completed; figures use the rounds \
             that finished",
            prepared.rounds
        ));
    }
    if lateness.as_ref().is_some_and(|l| l.flagged_paths > 0) {
        notes.push(
            "the emulator ran late on some paths (see lateness): treat sub-millisecond \
             differences on those paths with suspicion"
                .into(),
        );
    }
    // Rounds that completed on a path that was not faithful (failed rounds are errors).
    let unfaithful: usize = rounds.iter().map(|r| r.excluded.len()).sum();
    let (verdict, verdict_reason, verdict_rule, rules) =
        if variants.iter().all(|v| v.metrics.is_empty()) {
            if unfaithful > 0 && !interrupted {
                let why = format!(
                    "no faithful round: {unfaithful} variant-round(s) completed on a path that \
                     was not faithful and were excluded (see the excluded rounds); rerun on a \
                     quieter machine or with more rounds"
                );
                (Verdict::Inconclusive, why, String::new(), Vec::new())
            } else {
                let why = if interrupted {
                    "interrupted before any round finished"
                } else {
                    "no round succeeded"
                };
                (Verdict::NotApplicable, format!("no data: {why}"), String::new(), Vec::new())
            }
        } else {
            let d = verdict::decide(&prepared.rules, &variants.as_slice());
            let unmeasurable = not_measurable_only(&variants, &d.missing);
            match (unfaithful_only(&variants, &d.missing), unmeasurable) {
                // What the rule misses was measured only in excluded rounds: the data cannot
                // decide, which is not the same as this host being unable to run it.
                (Some(names), _) if d.verdict == Verdict::NotApplicable => {
                    let read = prepared
                        .rules
                        .iter()
                        .find(|r| r.describe() == d.rule)
                        .map(|r| r.values_read(&variants.as_slice()))
                        .unwrap_or_default();
                    let read = if read.is_empty() {
                        String::new()
                    } else {
                        format!(" Values read: {}.", read.join(", "))
                    };
                    let reason = format!(
                        "{}; every round of {} was excluded as not faithful (see the excluded \
                         rounds): more rounds, or a quieter machine, would decide it.{read}",
                        d.reason,
                        names.join(", ")
                    );
                    (Verdict::Inconclusive, reason, d.rule, d.rules)
                }
                // What the rule misses is a percentile too few samples supported (a loaded
                // machine runs fewer requests per round): longer rounds would decide it.
                (None, Some(why)) if d.verdict == Verdict::NotApplicable => {
                    let reason = format!(
                        "{}; {}: longer rounds (the full mode) or a quieter machine would decide \
                         it.",
                        d.reason,
                        why.join("; ")
                    );
                    (Verdict::Inconclusive, reason, d.rule, d.rules)
                }
                _ => (d.verdict, format!("{}{}", d.reason, d.evidence), d.rule, d.rules),
            }
        };
    let findings = if variants.iter().all(|v| v.metrics.is_empty()) {
        Vec::new()
    } else {
        prepared.findings.iter().map(|f| f.evaluate(&variants.as_slice())).collect()
    };
    let setup = format!(
        "{} variant{} x {} round{}, {}; {}",
        n,
        if n == 1 { "" } else { "s" },
        prepared.rounds,
        if prepared.rounds == 1 { "" } else { "s" },
        if prepared.joint.is_some() {
            "every variant at once on one path per round"
        } else {
            "interleaved (each round starts one variant later)"
        },
        common_setup(prepared),
    );
    let result = ExperimentResult {
        name: experiment.name.clone(),
        title: experiment.title.clone(),
        seed: experiment.seed.clone(),
        claim: experiment.claim.clone(),
        setup,
        verdict,
        verdict_reason,
        verdict_rule,
        rules,
        findings,
        rounds: completed_rounds,
        variants,
        plots: experiment.plots.clone(),
        table: experiment.table.clone(),
        notes,
        error: (!failures.is_empty()).then(|| {
            format!("{} variant-round(s) failed: {}", failures.len(), failures.join("; "))
        }),
        lateness,
        duration_s: started.elapsed().as_secs_f64(),
        conditions: experiment.conditions.clone(),
        decidability: experiment.decidability.clone(),
    };
    (result, interrupted)
}

/// The name a joint round goes by in progress lines.
pub const JOINT_STEP: &str = "all variants";

/// One joint round: every variant at once; each replica is checked and filed like a round of
/// its own. Returns true when the run was interrupted.
fn run_joint_round(
    prepared: &Prepared,
    joint: &dyn JointPlan,
    round: usize,
    rounds: &mut [Rounds],
    options: &RunOptions,
    observer: &dyn Observer,
    stop_requested: &(dyn Fn() -> bool + Sync),
) -> bool {
    let step = Step { name: JOINT_STEP, dir: "joint", round };
    let variants = prepared.variants.len();
    let (outcome, observed) = run_step(
        prepared,
        &step,
        options,
        observer,
        stop_requested,
        |ctx| joint.run(ctx),
        |per_variant: Vec<Vec<Measurement>>| {
            if per_variant.len() == variants && per_variant.iter().all(|m| !m.is_empty()) {
                Ok(per_variant)
            } else {
                Err(RunError::failed("the joint round", "returned no measurement for some variant"))
            }
        },
    );
    let before: Vec<usize> = rounds.iter().map(|r| r.records.len()).collect();
    let interrupted = file_joint_round(prepared, round, rounds, outcome, &observed);
    // Every variant ran on the one path: each round record lists its events.
    for (r, n) in rounds.iter_mut().zip(before) {
        if let Some(record) = r.records.get_mut(n) {
            observed.annotate(record);
        }
    }
    interrupted
}

/// Files a joint round's outcome into every variant's rounds; true when it was interrupted.
fn file_joint_round(
    prepared: &Prepared,
    round: usize,
    rounds: &mut [Rounds],
    outcome: Result<Vec<Vec<Measurement>>, RunError>,
    observed: &Observed,
) -> bool {
    let experiment = &prepared.experiment;
    match outcome {
        Ok(per_variant) => {
            let zipped = prepared.variants.iter().zip(rounds).zip(per_variant).enumerate();
            for (v, ((variant, r), replicas)) in zipped {
                let count = replicas.len();
                let mut problems = Vec::new();
                for (i, mut m) in replicas.into_iter().enumerate() {
                    // One path carried them all: its lateness is checked on every replica but
                    // kept once per variant (the variant's column) and counted as one path.
                    let checked = observed.unfaithful_round(&mut m, experiment);
                    if i > 0 {
                        m.lateness = None;
                    } else if let (true, Some(l)) = (v > 0, m.lateness.as_mut()) {
                        (l.paths, l.flagged_paths) = (0, 0);
                    }
                    match declared_metrics_present(variant.plan.as_ref(), m) {
                        Ok(m) => match checked {
                            None => r.measurements.push(m),
                            Some(why) => {
                                problems.push(format!("replica {}: {why}", i + 1));
                                r.excluded.push(m);
                            }
                        },
                        Err(e) => {
                            problems.push(format!("replica {}: {e}", i + 1));
                            r.errors.push(format!("round {} replica {}: {e}", round + 1, i + 1));
                        }
                    }
                }
                r.records.push(if problems.is_empty() {
                    faithful(round)
                } else {
                    excluded(
                        round,
                        format!("{} of {count} replicas: {}", problems.len(), problems.join("; ")),
                    )
                });
            }
            false
        }
        Err(RunError::Interrupted) => true,
        Err(RunError::NotApplicable(why)) => {
            for r in rounds {
                r.not_applicable = Some(why.clone());
            }
            false
        }
        Err(e) => {
            for r in rounds {
                r.records.push(excluded(round, format!("the workload failed: {e}")));
                r.errors.push(format!("round {}: {e}", round + 1));
            }
            false
        }
    }
}

/// The variants among `missing` references (`variant.metric`) that ran rounds but had none
/// faithful; `None` when there is none such.
fn unfaithful_only(variants: &[VariantResult], missing: &[String]) -> Option<Vec<String>> {
    let mut names: Vec<String> = Vec::new();
    for m in missing {
        let name = m.split('.').next().unwrap_or_default();
        let v = variants.iter().find(|v| v.name == name)?;
        let all_excluded = !v.rounds.is_empty() && v.rounds.iter().all(|r| !r.faithful);
        if all_excluded && v.not_applicable.is_none() && !names.iter().any(|n| n == name) {
            names.push(name.to_owned());
        }
    }
    (!names.is_empty()).then_some(names)
}

/// When every reference `missing` names is a percentile some faithful round could not support
/// (its variant's note says "`metric`: not measurable: ..."), those notes as
/// `variant.metric: not measurable: ...`; `None` otherwise.
fn not_measurable_only(variants: &[VariantResult], missing: &[String]) -> Option<Vec<String>> {
    let mut why: Vec<String> = Vec::new();
    for m in missing {
        let mut parts = m.split('.');
        let (variant, metric) = (parts.next()?, parts.next()?);
        let v = variants.iter().find(|v| v.name == variant)?;
        let prefix = format!("{metric}: not measurable");
        let note = v.notes.iter().find(|n| n.starts_with(&prefix))?;
        let line = format!("{variant}.{note}");
        if !why.contains(&line) {
            why.push(line);
        }
    }
    (!why.is_empty()).then_some(why)
}

fn faithful(round: usize) -> RoundRecord {
    RoundRecord {
        index: round + 1,
        faithful: true,
        excluded_reason: None,
        path_events: Vec::new(),
        placement: None,
    }
}

fn excluded(round: usize, why: String) -> RoundRecord {
    RoundRecord {
        index: round + 1,
        faithful: false,
        excluded_reason: Some(why),
        path_events: Vec::new(),
        placement: None,
    }
}

/// Why a completed round's path was not the one the experiment meant, if it was not: the
/// emulator released packets later than the experiment tolerates (p99).
fn unfaithful_path(m: &Measurement, tolerance: std::time::Duration) -> Option<String> {
    let l = m.lateness.as_ref()?;
    let tolerance_us = tolerance.as_secs_f64() * 1e6;
    (l.worst_p99_us > tolerance_us).then(|| {
        format!(
            "emulator lateness p99 {} µs, over the experiment's tolerance of {} µs",
            verdict::format_value(l.worst_p99_us),
            verdict::format_value(tolerance_us)
        )
    })
}

/// A round that lacks a metric its plan declares failed, whatever the engine returned.
fn declared_metrics_present(
    plan: &dyn VariantPlan,
    m: Measurement,
) -> Result<Measurement, RunError> {
    // A percentile the round's samples cannot support is accounted for: not measurable.
    let missing: Vec<String> = plan
        .metrics()
        .into_iter()
        .filter(|n| !m.metrics.get(n).is_some_and(|v| v.is_finite()))
        .filter(|n| !m.not_measurable.contains_key(n))
        .collect();
    if missing.is_empty() { Ok(m) } else { Err(RunError::MissingMetrics(missing)) }
}

/// One step of a run: a variant's round, or a joint round (every variant at once).
struct Step<'a> {
    /// What progress lines call it, and what its seed derives from: the variant's name, or
    /// [`JOINT_STEP`].
    name: &'a str,
    /// Its scratch directory's name, before `-r{round}`.
    dir: &'a str,
    /// 0-based round number.
    round: usize,
}

/// Runs one step with its observers and its scratch directory: reports its start, starts the
/// observers ([`RoundObservers`]), creates the scratch directory, runs `run` on a thread of
/// its own ([`isolated`]) and `accept` on its result, finishes the observers, removes the
/// scratch directory if nothing was written into it, and reports its end. Filing the
/// outcome is the caller's.
fn run_step<T: Send>(
    prepared: &Prepared,
    step: &Step<'_>,
    options: &RunOptions,
    observer: &dyn Observer,
    stop_requested: &(dyn Fn() -> bool + Sync),
    run: impl FnOnce(&RoundContext<'_>) -> Result<T, RunError> + Send,
    accept: impl FnOnce(T) -> Result<T, RunError>,
) -> (Result<T, RunError>, Observed) {
    let (experiment, round) = (&prepared.experiment.name, step.round);
    let scratch =
        options.out.join("rounds").join(experiment).join(format!("{}-r{round}", step.dir));
    observer.step_started(step.name, round, prepared.rounds);
    let observers = RoundObservers::start(options);
    let progress = |f: f64| observer.step_progress(f);
    let outcome = std::fs::create_dir_all(&scratch)
        .map_err(|e| RunError::io(format!("create {}", scratch.display()), e))
        .and_then(|()| {
            let seed = round_seed(options.seed, experiment, step.name, round);
            let ctx = observers.context(round, seed, &scratch, stop_requested, &progress);
            isolated(|| run(&ctx))
        })
        .and_then(accept);
    let observed = observers.finish();
    // An empty scratch directory says nothing; keep only those an engine wrote into.
    let _ = std::fs::remove_dir(&scratch);
    observer.step_finished(step.name, round, outcome.as_ref().err());
    (outcome, observed)
}

/// What the runner watches through every round besides its workload, started before the
/// round's path is built and finished after it is removed: the path events and placement the
/// round's path records through its [`RoundContext`], and the host's TCP memory
/// ([`tcptail_netns::tcp_memory`]), sampled throughout. A new per-round observer goes here
/// (and into [`Observed`]), once for variant and joint rounds alike.
struct RoundObservers {
    path_events: Mutex<Vec<PathEventRecord>>,
    placement: Mutex<Option<String>>,
    memory: TcpMemoryWatch,
}

impl RoundObservers {
    /// Starts watching (the TCP memory watch takes its first sample now).
    fn start(options: &RunOptions) -> RoundObservers {
        RoundObservers {
            path_events: Mutex::default(),
            placement: Mutex::default(),
            memory: TcpMemoryWatch::start(options.tcp_memory, TCP_MEMORY_INTERVAL),
        }
    }

    /// The round's view of the run, with these observers in it.
    fn context<'a>(
        &'a self,
        round: usize,
        seed: u64,
        scratch: &'a Path,
        stop_requested: &'a (dyn Fn() -> bool + Sync),
        progress: &'a (dyn Fn(f64) + Sync),
    ) -> RoundContext<'a> {
        RoundContext {
            round,
            seed,
            scratch,
            stop_requested,
            progress,
            path_events: &self.path_events,
            placement: &self.placement,
        }
    }

    /// Stops watching and returns what was seen.
    fn finish(self) -> Observed {
        Observed {
            path_events: self.path_events.into_inner().unwrap_or_else(|p| p.into_inner()),
            placement: self.placement.into_inner().unwrap_or_else(|p| p.into_inner()),
            memory: self.memory.finish(),
        }
    }
}

/// What a round's [`RoundObservers`] saw.
struct Observed {
    path_events: Vec<PathEventRecord>,
    placement: Option<String>,
    memory: TcpMemorySummary,
}

impl Observed {
    /// Why a completed round was not the one the experiment meant, if it was not: its path
    /// (see [`unfaithful_path`]) or the host's TCP memory at `tcp_mem`'s low level or under
    /// pressure while it ran ([`TcpMemorySummary::pressure_reason`]). A round the memory watch
    /// could not follow says so in its notes.
    fn unfaithful_round(&self, m: &mut Measurement, experiment: &Experiment) -> Option<String> {
        if let Some(e) = &self.memory.error {
            let note = format!("the host's TCP memory pressure was not watched: {e}");
            if !m.notes.contains(&note) {
                m.notes.push(note);
            }
        }
        let reasons: Vec<String> =
            [unfaithful_path(m, experiment.lateness_tolerance), self.memory.pressure_reason()]
                .into_iter()
                .flatten()
                .collect();
        (!reasons.is_empty()).then(|| reasons.join("; "))
    }

    /// Writes what the round's path recorded (its path events, its placement) into a record of
    /// the round.
    fn annotate(&self, record: &mut RoundRecord) {
        record.path_events = self.path_events.clone();
        record.placement = self.placement.clone();
    }
}

/// Runs `round` on a thread of its own: engines pin the calling thread to CPUs and change its
/// scheduling, and none of that may leak into the next variant's round. A panic becomes that
/// round's error instead of ending the run.
fn isolated<T: Send>(round: impl FnOnce() -> Result<T, RunError> + Send) -> Result<T, RunError> {
    std::thread::scope(|scope| {
        let round = std::thread::Builder::new()
            .name("tcptail-round".into())
            .spawn_scoped(scope, round)
            .map_err(|e| RunError::io("start the round's thread", e))?;
        round.join().unwrap_or_else(|panic| {
            let message = panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic without a message".into());
            Err(RunError::panicked("the round panicked", message))
        })
    })
}

/// The setup every variant shares, or the first variant's with "(varies by variant)".
fn common_setup(prepared: &Prepared) -> String {
    let setups: Vec<String> = prepared.variants.iter().map(|v| v.plan.describe()).collect();
    if setups.windows(2).all(|w| w[0] == w[1]) {
        setups[0].clone()
    } else {
        "each variant's setup is in its row".into()
    }
}

/// Folds a variant's rounds: every metric becomes its median with the spread over rounds;
/// CDFs are pooled (rounds weighted alike); time series are the first round's, since
/// averaging time series of different rounds would blur what one round looked like.
fn fold_variant(variant: &PreparedVariant, rounds: &Rounds) -> VariantResult {
    let (spec, config) = (&variant.spec, variant.config.clone());
    let mut values: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    for m in &rounds.measurements {
        for (name, &value) in &m.metrics {
            values.entry(name).or_default().push(value);
        }
    }
    // Which variants ran on a late emulator, not only that some path of the experiment did:
    // every completed round's lateness, the excluded ones too (they are why they were).
    for m in rounds.measurements.iter().chain(&rounds.excluded) {
        if let Some(l) = &m.lateness {
            values.entry(EMULATOR_LATENESS_METRIC).or_default().push(l.worst_p99_us);
        }
    }
    // A percentile that any faithful round could not support is not measurable for the
    // variant: it gets no number (a median over the other rounds would hide that), only a note.
    let mut not_measurable: BTreeMap<&str, &str> = BTreeMap::new();
    for m in &rounds.measurements {
        for (name, why) in &m.not_measurable {
            not_measurable.entry(name).or_insert(why);
        }
    }
    let metrics: BTreeMap<String, Metric> = values
        .into_iter()
        .filter(|(name, _)| !not_measurable.contains_key(name))
        .filter_map(|(name, v)| Some((name.to_owned(), Metric::from_rounds(name, &v)?)))
        .collect();
    let mut series: Vec<Series> = Vec::new();
    let mut names: Vec<(&str, SeriesKind)> = Vec::new();
    for s in rounds.measurements.iter().flat_map(|m| &m.series) {
        if !names.iter().any(|(n, _)| *n == s.name) {
            names.push((&s.name, s.kind));
        }
    }
    for (name, kind) in names {
        let per_round: Vec<&Series> = rounds
            .measurements
            .iter()
            .filter_map(|m| m.series.iter().find(|s| s.name == name))
            .collect();
        series.push(match kind {
            SeriesKind::Cdf => Series::pool_cdfs(name, &per_round),
            SeriesKind::Time => per_round[0].clone(),
        });
    }
    let mut notes: Vec<String> = Vec::new();
    for note in rounds.measurements.iter().flat_map(|m| &m.notes) {
        if !notes.contains(note) {
            notes.push(note.clone());
        }
    }
    notes.extend(not_measurable.iter().map(|(name, why)| format!("{name}: {why}")));
    notes.extend(rounds.errors.iter().map(|e| format!("failed {e}")));
    VariantResult {
        name: spec.name.clone(),
        config,
        metrics,
        series,
        notes,
        not_applicable: rounds.not_applicable.clone(),
        expected_metrics: variant.plan.metrics(),
        rounds: rounds.records.clone(),
    }
}

/// A round's seed: the run's seed mixed with the experiment, variant and round (SplitMix64
/// over FNV-1a), so reruns with the same seed draw the same losses.
pub fn round_seed(run_seed: u64, experiment: &str, variant: &str, round: usize) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in experiment.bytes().chain([0]).chain(variant.bytes()).chain([0]) {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    let mut z = run_seed ^ h ^ (round as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

#[cfg(test)]
mod tests;
