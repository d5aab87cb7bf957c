//! The runner with fake engines: interleaving, folding rounds, verdicts, failures, stops and
//! the files written after every experiment.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tcptail_netns::procfs::ProtocolMemory;

use super::*;

const FILE: &str = r#"
name = "fake"
title = "A fake experiment"
seed = "000_test.txt"
claim = "a is slower than b"
workload = "split-write"
table = ["p50_us"]

[mode.smoke]
rounds = 1
[mode.quick]
rounds = 3
[mode.full]
rounds = 5

[[variant]]
name = "a"
[[variant]]
name = "b"
[[variant]]
name = "c"

[[plot]]
kind = "ecdf"
series = "latency_us"
title = "Latency"

[[verdict]]
verdict = "reproduced"
when = "a.p50_us > 2 * b.p50_us"
reason = "a {a.p50_us} vs b {b.p50_us}"
[[verdict]]
verdict = "not-reproduced"
reason = "a {a.p50_us} vs b {b.p50_us}"
"#;

type Log = Arc<Mutex<Vec<(String, usize)>>>;

struct Fake {
    name: String,
    p50: f64,
    log: Log,
    fail_in_round: Option<usize>,
    panic_in_round: Option<usize>,
}

impl VariantPlan for Fake {
    fn run(&self, ctx: &RoundContext<'_>) -> Result<Measurement, RunError> {
        self.log.lock().unwrap().push((self.name.clone(), ctx.round));
        if (ctx.stop_requested)() {
            return Err(RunError::Interrupted);
        }
        if self.panic_in_round == Some(ctx.round) {
            panic!("engine bug in round {}", ctx.round);
        }
        if self.fail_in_round == Some(ctx.round) {
            return Err(RunError::failed("fake round", "boom"));
        }
        let mut m = Measurement::default();
        m.metric("p50_us", self.p50 + ctx.round as f64);
        let mut samples: Vec<f64> = (0..100).map(|i| self.p50 + f64::from(i)).collect();
        m.series.push(Series::cdf("latency_us", &mut samples));
        m.notes.push(format!("{} ran", self.name));
        if self.name == "a" {
            m.lateness = Some(Lateness {
                worst_p99_us: 100.0 * (ctx.round + 1) as f64,
                max_us: 1000.0,
                bound_us: 500.0,
                flagged_paths: 0,
                paths: 1,
            });
        }
        Ok(m)
    }

    fn planned(&self) -> Duration {
        Duration::from_secs(2)
    }
    fn describe(&self) -> String {
        "fake path".into()
    }
}

fn prepared(p50: [f64; 3], fail: Option<(&str, usize)>, log: &Log) -> Prepared {
    let experiment = Experiment::parse(FILE, "fake.toml").expect("parses");
    let names: Vec<&str> = experiment.variants.iter().map(|v| v.name.as_str()).collect();
    let rules = experiment.rules.iter().map(|r| Rule::compile(r, &names).expect("compiles"));
    let rules = rules.collect();
    let variants = experiment
        .variants
        .iter()
        .zip(p50)
        .map(|(spec, p50)| PreparedVariant {
            spec: spec.clone(),
            plan: Box::new(Fake {
                name: spec.name.clone(),
                p50,
                log: Arc::clone(log),
                fail_in_round: fail.filter(|(n, _)| *n == spec.name).map(|(_, r)| r),
                panic_in_round: None,
            }),
            config: BTreeMap::new(),
        })
        .collect();
    Prepared {
        rounds: experiment.mode(RunMode::Quick).rounds,
        experiment,
        variants,
        rules,
        findings: Vec::new(),
        joint: None,
    }
}

fn options(dir: &Path) -> RunOptions {
    RunOptions {
        mode: RunMode::Quick,
        out: dir.to_owned(),
        seed: 7,
        command: "test".into(),
        environment: Environment::default(),
        tcp_memory: calm_tcp_memory,
    }
}

/// The host's TCP memory as a test scripts it: never under pressure.
fn calm_tcp_memory() -> Result<ProtocolMemory, String> {
    Ok(ProtocolMemory { pages: 1_000, pressure: false })
}

#[test]
fn rounds_interleave_with_the_start_rotated() {
    let log = Log::default();
    let dir = tempfile::tempdir().unwrap();
    run(&[prepared([10.0, 1.0, 1.0], None, &log)], &options(dir.path()), &Silent, &|| false)
        .unwrap();
    let order: Vec<String> = log.lock().unwrap().iter().map(|(n, r)| format!("{n}{r}")).collect();
    assert_eq!(order, ["a0", "b0", "c0", "b1", "c1", "a1", "c2", "a2", "b2"]);
}

#[test]
fn rounds_fold_into_medians_with_spread_and_a_verdict() {
    let log = Log::default();
    let dir = tempfile::tempdir().unwrap();
    let results =
        run(&[prepared([10.0, 1.0, 1.0], None, &log)], &options(dir.path()), &Silent, &|| false)
            .unwrap();
    let e = &results.experiments[0];
    assert_eq!(e.rounds, 3);
    let a = &e.variants[0].metrics["p50_us"];
    assert_eq!((a.median, a.min, a.max), (11.0, 10.0, 12.0));
    assert_eq!(a.unit, "µs");
    assert_eq!(e.verdict, Verdict::Reproduced);
    // The rule's reason, then the test that decided it and the intervals of the medians.
    assert!(
        e.verdict_reason.starts_with(
            "a 11 vs b 2 [at 95 % confidence: `a.p50_us > 2 * b.p50_us` holds (rank test over \
             3 and 3 rounds: p = 0.05 for, 1 against)."
        ),
        "{}",
        e.verdict_reason
    );
    assert!(
        e.verdict_reason.ends_with("a.p50_us 11 [10–12] (75 %), b.p50_us 2 [1–3] (75 %)]"),
        "{}",
        e.verdict_reason
    );
    assert!(e.error.is_none());
    // CDFs are pooled over rounds; notes are kept once.
    assert_eq!(e.variants[0].series[0].kind, SeriesKind::Cdf);
    assert_eq!(e.variants[0].notes, ["a ran"]);
    assert!(e.setup.contains("3 variants x 3 rounds") && e.setup.contains("fake path"));
    // The emulator's lateness per variant, and summed over the experiment's paths.
    assert_eq!(e.variants[0].metrics[EMULATOR_LATENESS_METRIC].values, [100.0, 200.0, 300.0]);
    assert!(!e.variants[1].metrics.contains_key(EMULATOR_LATENESS_METRIC));
    let lateness = e.lateness.expect("merged");
    assert_eq!((lateness.paths, lateness.worst_p99_us), (3, 300.0));

    // No effect, with rounds tight enough to exclude the rule's 2x (10-12 against 20-24);
    // rounds of 1-3 against 2-6 could not, and are inconclusive.
    let results =
        run(&[prepared([10.0, 10.0, 10.0], None, &log)], &options(dir.path()), &Silent, &|| false)
            .unwrap();
    assert_eq!(results.experiments[0].verdict, Verdict::NotReproduced);
    let results =
        run(&[prepared([1.0, 1.0, 1.0], None, &log)], &options(dir.path()), &Silent, &|| false)
            .unwrap();
    assert_eq!(results.experiments[0].verdict, Verdict::Inconclusive);
}

#[test]
fn a_failed_round_is_recorded_and_the_rest_still_runs() {
    let log = Log::default();
    let dir = tempfile::tempdir().unwrap();
    let results = run(
        &[prepared([10.0, 1.0, 1.0], Some(("b", 1)), &log)],
        &options(dir.path()),
        &Silent,
        &|| false,
    )
    .unwrap();
    let e = &results.experiments[0];
    assert_eq!(log.lock().unwrap().len(), 9);
    assert_eq!(e.variants[1].metrics["p50_us"].values, [1.0, 3.0]);
    let error = e.error.as_deref().expect("error recorded");
    assert!(error.contains("b: round 2: fake round: boom"), "{error}");
    assert!(e.variants[1].notes.iter().any(|n| n.contains("boom")));
}

/// Stops after `n` variant-rounds have started, like a Ctrl-C during the run.
struct StopAfter {
    started: AtomicUsize,
    n: usize,
}

impl Observer for StopAfter {
    fn experiment_started(&self, _: usize, _: &Prepared) {}
    fn step_started(&self, _: &str, _: usize, _: usize) {
        self.started.fetch_add(1, Ordering::SeqCst);
    }
    fn step_progress(&self, _: f64) {}
    fn step_finished(&self, _: &str, _: usize, _: Option<&RunError>) {}
    fn experiment_finished(&self, _: &ExperimentResult) {}
}

#[test]
fn a_stop_keeps_what_finished_and_skips_the_rest() {
    let log = Log::default();
    let dir = tempfile::tempdir().unwrap();
    let experiments =
        [prepared([10.0, 1.0, 1.0], None, &log), prepared([10.0, 1.0, 1.0], None, &log)];
    let observer = StopAfter { started: AtomicUsize::new(0), n: 5 };
    let stop = || observer.started.load(Ordering::SeqCst) >= observer.n;
    let results = run(&experiments, &options(dir.path()), &observer, &stop).unwrap();
    assert!(results.run.interrupted);
    assert_eq!(results.experiments.len(), 1, "the second experiment never started");
    let e = &results.experiments[0];
    assert_eq!(e.rounds, 1, "one full round finished before the stop");
    assert!(e.notes.iter().any(|n| n.starts_with("interrupted: 1 of 3 rounds")), "{:?}", e.notes);
    // What is on disk is what was returned.
    let on_disk = Results::read(&dir.path().join("results.json")).unwrap();
    assert_eq!(on_disk, results);
    assert!(dir.path().join("index.html").exists());
}

/// Checks, when each experiment ends, that its results are already on disk.
struct FilesWritten<'a> {
    dir: &'a Path,
    seen: Mutex<Vec<usize>>,
}

impl Observer for FilesWritten<'_> {
    fn experiment_started(&self, _: usize, _: &Prepared) {}
    fn step_started(&self, _: &str, _: usize, _: usize) {}
    fn step_progress(&self, _: f64) {}
    fn step_finished(&self, _: &str, _: usize, _: Option<&RunError>) {}
    fn experiment_finished(&self, _: &ExperimentResult) {
        let results = Results::read(&self.dir.join("results.json")).unwrap();
        self.seen.lock().unwrap().push(results.experiments.len());
    }
}

#[test]
fn results_are_written_after_every_experiment() {
    let log = Log::default();
    let dir = tempfile::tempdir().unwrap();
    let experiments =
        [prepared([10.0, 1.0, 1.0], None, &log), prepared([1.0, 1.0, 1.0], None, &log)];
    let observer = FilesWritten { dir: dir.path(), seen: Mutex::new(Vec::new()) };
    run(&experiments, &options(dir.path()), &observer, &|| false).unwrap();
    assert_eq!(*observer.seen.lock().unwrap(), [1, 2]);
}

#[test]
fn an_experiment_without_data_is_not_applicable() {
    let log = Log::default();
    let dir = tempfile::tempdir().unwrap();
    let mut p = prepared([10.0, 1.0, 1.0], None, &log);
    p.rounds = 1;
    for v in &mut p.variants {
        v.plan = Box::new(Fake {
            name: v.spec.name.clone(),
            p50: 0.0,
            log: Arc::clone(&log),
            fail_in_round: Some(0),
            panic_in_round: None,
        });
    }
    let results = run(&[p], &options(dir.path()), &Silent, &|| false).unwrap();
    let e = &results.experiments[0];
    assert_eq!(e.verdict, Verdict::NotApplicable);
    assert!(e.verdict_reason.contains("no round succeeded"), "{}", e.verdict_reason);
}

#[test]
fn round_seeds_differ_and_repeat() {
    let a = round_seed(1, "loss", "bbr_1", 0);
    assert_eq!(a, round_seed(1, "loss", "bbr_1", 0));
    assert_ne!(a, round_seed(1, "loss", "bbr_1", 1));
    assert_ne!(a, round_seed(1, "loss", "bbr_2", 0));
    assert_ne!(a, round_seed(2, "loss", "bbr_1", 0));
    // The separator keeps ("ab", "c") and ("a", "bc") apart.
    assert_ne!(round_seed(1, "ab", "c", 0), round_seed(1, "a", "bc", 0));
}

#[test]
fn a_panicking_round_is_an_error_and_the_run_goes_on() {
    let log = Log::default();
    let dir = tempfile::tempdir().unwrap();
    let mut p = prepared([10.0, 1.0, 1.0], None, &log);
    p.variants[2].plan = Box::new(Fake {
        name: "c".into(),
        p50: 1.0,
        log: Arc::clone(&log),
        fail_in_round: None,
        panic_in_round: Some(0),
    });
    let results = run(&[p], &options(dir.path()), &Silent, &|| false).unwrap();
    let e = &results.experiments[0];
    assert_eq!(e.variants[2].metrics["p50_us"].values, [2.0, 3.0]);
    let error = e.error.as_deref().expect("error");
    assert!(error.contains("c: round 1: the round panicked: engine bug in round 0"), "{error}");
}

/// Pins its thread to one CPU, as the latency engines do, and records the CPUs it was
/// allowed when it started.
struct Pinner {
    seen: Arc<Mutex<Vec<usize>>>,
}

impl VariantPlan for Pinner {
    fn run(&self, _: &RoundContext<'_>) -> Result<Measurement, RunError> {
        let allowed = tcptail_bench::sys::allowed_cpus().unwrap();
        self.seen.lock().unwrap().push(allowed.len());
        tcptail_bench::sys::pin_current_thread(allowed[allowed.len() - 1]).unwrap();
        let mut m = Measurement::default();
        m.metric("p50_us", 1.0);
        Ok(m)
    }

    fn planned(&self) -> Duration {
        Duration::from_secs(2)
    }
    fn describe(&self) -> String {
        "pins".into()
    }
}

#[test]
fn cpu_pinning_does_not_leak_into_the_next_round() {
    let log = Log::default();
    let dir = tempfile::tempdir().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut p = prepared([1.0, 1.0, 1.0], None, &log);
    for v in &mut p.variants {
        v.plan = Box::new(Pinner { seen: Arc::clone(&seen) });
    }
    let before = tcptail_bench::sys::allowed_cpus().unwrap().len();
    run(&[p], &options(dir.path()), &Silent, &|| false).unwrap();
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 9);
    assert!(seen.iter().all(|&n| n == before), "{seen:?} (expected {before} each)");
    assert_eq!(tcptail_bench::sys::allowed_cpus().unwrap().len(), before);
}

/// A step the host cannot take: says so on every call, counting them.
struct NotHere(Arc<AtomicUsize>);

impl VariantPlan for NotHere {
    fn run(&self, _: &RoundContext<'_>) -> Result<Measurement, RunError> {
        self.0.fetch_add(1, Ordering::SeqCst);
        Err(RunError::NotApplicable("no CPU is isolated".into()))
    }

    fn planned(&self) -> Duration {
        Duration::from_secs(2)
    }
    fn describe(&self) -> String {
        "isolated CPU".into()
    }
}

#[test]
fn a_variant_the_host_cannot_run_is_a_row_with_the_reason_not_a_failure() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::default();
    let mut p = prepared([30.0, 10.0, 5.0], None, &log);
    let calls = Arc::new(AtomicUsize::new(0));
    p.variants[2].plan = Box::new(NotHere(Arc::clone(&calls)));
    let results = run(&[p], &options(dir.path()), &Silent, &|| false).unwrap();
    let e = &results.experiments[0];
    assert_eq!(calls.load(Ordering::SeqCst), 1, "asked once, not once per round");
    assert!(e.error.is_none(), "{:?}", e.error);
    let c = &e.variants[2];
    assert_eq!(c.not_applicable.as_deref(), Some("no CPU is isolated"));
    assert!(c.metrics.is_empty() && c.notes.is_empty(), "{c:?}");
    // The other variants ran all three rounds and the verdict is theirs.
    assert_eq!(e.variants[0].metrics["p50_us"].values.len(), 3);
    assert_eq!(e.verdict, Verdict::Reproduced);
    assert_eq!(e.rules.iter().map(|r| r.fired).collect::<Vec<_>>(), [true, false]);
    assert_eq!(e.rules[0].evaluated.as_deref(), Some("31 > 22 ✓"));
}

/// A plan that declares a metric its rounds never produce.
struct Forgetful(Fake);

impl VariantPlan for Forgetful {
    fn run(&self, ctx: &RoundContext<'_>) -> Result<Measurement, RunError> {
        self.0.run(ctx)
    }

    fn planned(&self) -> Duration {
        Duration::from_secs(2)
    }
    fn describe(&self) -> String {
        self.0.describe()
    }

    fn metrics(&self) -> Vec<String> {
        vec!["p50_us".into(), "p99_us".into()]
    }
}

#[test]
fn a_round_without_a_declared_metric_fails() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::default();
    let mut p = prepared([30.0, 10.0, 5.0], None, &log);
    p.variants[1].plan = Box::new(Forgetful(Fake {
        name: "b".into(),
        p50: 10.0,
        log: Arc::clone(&log),
        fail_in_round: None,
        panic_in_round: None,
    }));
    let results = run(&[p], &options(dir.path()), &Silent, &|| false).unwrap();
    let e = &results.experiments[0];
    let error = e.error.as_deref().unwrap_or_default();
    assert!(error.starts_with("3 variant-round(s) failed: b: round 1:"), "{error}");
    assert!(error.contains("declared metric(s) missing or not finite: p99_us"), "{error}");
    assert_eq!(e.variants[1].expected_metrics, ["p50_us", "p99_us"]);
    assert!(e.variants[1].metrics.is_empty());
}

/// A round on a late emulator (over the experiment's tolerance) and a failed round are left
/// out of the numbers, listed with their reasons; with too few faithful rounds left the
/// verdict is inconclusive rather than decided on what remains.
#[test]
fn unfaithful_rounds_are_excluded_listed_and_make_the_verdict_inconclusive() {
    let log = Log::default();
    let dir = tempfile::tempdir().unwrap();
    let mut p = prepared([10.0, 1.0, 1.0], Some(("b", 1)), &log);
    // a's rounds run 100, 200 and 300 µs late: the third is over a 250 µs tolerance.
    p.experiment.lateness_tolerance = std::time::Duration::from_micros(250);
    let results = run(&[p], &options(dir.path()), &Silent, &|| false).unwrap();
    let e = &results.experiments[0];
    let rounds = |v: usize| -> Vec<(usize, bool, Option<String>)> {
        e.variants[v]
            .rounds
            .iter()
            .map(|r| (r.index, r.faithful, r.excluded_reason.clone()))
            .collect()
    };
    assert_eq!(
        rounds(0),
        [
            (1, true, None),
            (2, true, None),
            (
                3,
                false,
                Some(
                    "emulator lateness p99 300 µs, over the experiment's tolerance of 250 µs"
                        .into()
                )
            ),
        ]
    );
    let b = rounds(1);
    assert_eq!((b[1].0, b[1].1), (2, false));
    assert!(b[1].2.as_deref().unwrap().starts_with("the workload failed: "), "{b:?}");
    // Only faithful rounds enter the metrics; the lateness column keeps every round.
    assert_eq!(e.variants[0].metrics["p50_us"].values, [10.0, 11.0]);
    assert_eq!(e.variants[1].metrics["p50_us"].values, [1.0, 3.0]);
    assert_eq!(e.variants[0].metrics[EMULATOR_LATENESS_METRIC].values.len(), 3);
    assert_eq!(e.verdict, Verdict::Inconclusive, "{}", e.verdict_reason);
    assert!(e.verdict_reason.contains("rank test over 2 and 2 rounds"), "{}", e.verdict_reason);
}

/// A variant whose every round was excluded leaves the rules without its values: the verdict
/// is inconclusive (the data cannot decide), not "not applicable" (the host can run it).
#[test]
fn a_variant_without_a_faithful_round_makes_the_verdict_inconclusive() {
    let log = Log::default();
    let dir = tempfile::tempdir().unwrap();
    let mut p = prepared([10.0, 1.0, 1.0], None, &log);
    p.experiment.lateness_tolerance = std::time::Duration::from_micros(50);
    let results = run(&[p], &options(dir.path()), &Silent, &|| false).unwrap();
    let e = &results.experiments[0];
    assert!(!e.variants[0].metrics.contains_key("p50_us"));
    assert_eq!(e.variants[0].excluded_rounds().count(), 3);
    assert_eq!(e.verdict, Verdict::Inconclusive, "{}", e.verdict_reason);
    assert!(e.verdict_reason.contains("every round of a was excluded"), "{}", e.verdict_reason);
}

/// A round during which the host's TCP memory was under pressure ran with every socket's
/// buffers held down by the kernel: it is excluded with the pressure and the peak in its reason,
/// and a run that could not watch the memory says so in the variants' notes.
#[test]
fn rounds_under_host_tcp_memory_pressure_are_excluded() {
    let log = Log::default();
    let dir = tempfile::tempdir().unwrap();
    let mut options = options(dir.path());
    options.tcp_memory = || Ok(ProtocolMemory { pages: 400_000, pressure: true });
    let results =
        run(&[prepared([10.0, 1.0, 1.0], None, &log)], &options, &Silent, &|| false).unwrap();
    let e = &results.experiments[0];
    for v in &e.variants {
        assert_eq!(v.excluded_rounds().count(), 3, "{:?}", v.rounds);
        let why = v.rounds[0].excluded_reason.as_deref().unwrap();
        assert!(why.contains("the host's TCP memory was under pressure in "), "{why}");
        assert!(why.contains("peak 400000 pages"), "{why}");
    }
    assert_eq!(e.verdict, Verdict::Inconclusive, "{}", e.verdict_reason);

    options.tcp_memory = || Err("no /proc here".into());
    let results =
        run(&[prepared([10.0, 1.0, 1.0], None, &log)], &options, &Silent, &|| false).unwrap();
    let e = &results.experiments[0];
    assert_eq!(e.verdict, Verdict::Reproduced, "not watched is not excluded");
    let note = "the host's TCP memory pressure was not watched: no /proc here";
    assert!(e.variants[0].notes.iter().any(|n| n == note), "{:?}", e.variants[0].notes);
}

/// A percentile a round's sample count cannot support is not measurable: the round counts,
/// the variant gets no number for it, and its notes say why.
#[test]
fn percentiles_the_samples_cannot_support_are_not_measurable() {
    let mut m = Measurement::default();
    m.percentile("p999_us", 0.999, 500, 123.0).percentile("p99_us", 0.99, 500, 45.0);
    assert_eq!(m.metrics.get("p99_us"), Some(&45.0));
    assert!(!m.metrics.contains_key("p999_us"));
    assert_eq!(
        m.not_measurable["p999_us"],
        "not measurable: 500 samples cannot support p99.9 at 95 % confidence (needs 3688)"
    );
    let experiment = Experiment::parse(FILE, "fake.toml").expect("parses");
    let variant = PreparedVariant {
        spec: experiment.variants[0].clone(),
        plan: Box::new(Fake {
            name: "a".into(),
            p50: 1.0,
            log: Log::default(),
            fail_in_round: None,
            panic_in_round: None,
        }),
        config: BTreeMap::new(),
    };
    let rounds = Rounds { measurements: vec![m.clone(), m], ..Rounds::default() };
    let v = fold_variant(&variant, &rounds);
    assert!(v.metrics.contains_key("p99_us") && !v.metrics.contains_key("p999_us"));
    assert!(
        v.notes.contains(
            &"p999_us: not measurable: 500 samples cannot support p99.9 at 95 % confidence \
              (needs 3688)"
                .to_string()
        ),
        "{:?}",
        v.notes
    );
}

/// A rule that misses only percentiles too few samples supported is undecided for want of
/// samples, not inapplicable to the host: the runner names the notes that say so.
#[test]
fn a_rule_missing_only_unmeasurable_percentiles_is_inconclusive() {
    let variant = |name: &str, notes: &[&str]| VariantResult {
        name: name.into(),
        config: BTreeMap::new(),
        metrics: BTreeMap::new(),
        series: Vec::new(),
        notes: notes.iter().map(|n| n.to_string()).collect(),
        not_applicable: None,
        expected_metrics: Vec::new(),
        rounds: Vec::new(),
    };
    let why = "p99_us: not measurable: 346 samples cannot support p99 at 95 % confidence \
               (needs 367)";
    let variants = [variant("spin", &[why]), variant("baseline", &[])];
    assert_eq!(
        not_measurable_only(&variants, &["spin.p99_us.max".into()]),
        Some(vec![format!("spin.{why}")])
    );
    // Any missing value the notes do not explain (or none at all) keeps "not applicable".
    let both = ["spin.p99_us.max".into(), "baseline.p99_us.min".into()];
    assert_eq!(not_measurable_only(&variants, &both), None);
    assert_eq!(not_measurable_only(&variants, &[]), None);
}

/// Every variant at once: replicas per variant, one lateness per path, a replica without a
/// declared metric recorded against its round.
struct JointFake {
    runs: Arc<AtomicUsize>,
}

impl JointPlan for JointFake {
    fn planned(&self) -> Duration {
        Duration::from_secs(5)
    }
    fn run(&self, ctx: &RoundContext<'_>) -> Result<Vec<Vec<Measurement>>, RunError> {
        self.runs.fetch_add(1, Ordering::SeqCst);
        let late = Lateness {
            worst_p99_us: 100.0,
            max_us: 200.0,
            bound_us: 500.0,
            flagged_paths: 0,
            paths: 1,
        };
        let replica = |p50: f64| {
            let mut m = Measurement { lateness: Some(late), ..Measurement::default() };
            m.metric("p50_us", p50 + ctx.round as f64);
            m
        };
        let mut c = vec![replica(1.0), Measurement::default()];
        c[1].lateness = Some(late);
        Ok(vec![
            vec![replica(10.0), replica(11.0), replica(12.0)],
            vec![replica(1.0), replica(2.0), replica(3.0)],
            c,
        ])
    }
}

/// A fake plan declaring `p50_us` (so a replica without it fails).
struct Declares;

impl VariantPlan for Declares {
    fn run(&self, _: &RoundContext<'_>) -> Result<Measurement, RunError> {
        unreachable!("joint experiments run through their joint plan")
    }
    fn planned(&self) -> Duration {
        Duration::from_secs(2)
    }
    fn describe(&self) -> String {
        "joint path".into()
    }
    fn metrics(&self) -> Vec<String> {
        vec!["p50_us".into()]
    }
}

#[test]
fn a_joint_round_runs_every_variant_once_and_folds_its_replicas() {
    let log = Log::default();
    let mut p = prepared([0.0; 3], None, &log);
    for v in &mut p.variants {
        v.plan = Box::new(Declares);
    }
    let runs = Arc::new(AtomicUsize::new(0));
    p.joint = Some(Box::new(JointFake { runs: Arc::clone(&runs) }));
    assert_eq!(p.steps(), 3, "one step per round");
    let dir = tempfile::tempdir().unwrap();
    let results = run(&[p], &options(dir.path()), &Silent, &|| false).unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    assert!(log.lock().unwrap().is_empty(), "no variant ran on its own");
    let e = &results.experiments[0];
    // Three replicas per round, three rounds: nine values; rank tests read all of them.
    assert_eq!(e.variants[0].metrics["p50_us"].values.len(), 9);
    assert_eq!(e.verdict, Verdict::Reproduced);
    assert!(e.verdict_reason.contains("rank test over 9 and 9"), "{}", e.verdict_reason);
    // One path per round, whatever the replicas.
    assert_eq!(e.lateness.expect("merged").paths, 3);
    // c's second replica lacks p50_us: its round is listed as excluded, with the reason.
    let c = &e.variants[2];
    assert_eq!(c.rounds.len(), 3);
    assert!(c.rounds.iter().all(|r| !r.faithful), "{:?}", c.rounds);
    let why = c.rounds[0].excluded_reason.as_deref().unwrap_or("");
    assert!(why.contains("1 of 2 replicas") && why.contains("p50_us"), "{why}");
    assert_eq!(c.metrics["p50_us"].values.len(), 3);
    assert!(e.setup.contains("every variant at once"), "{}", e.setup);
}

#[test]
fn the_estimate_is_rounds_times_every_variants_plan_and_setup() {
    let log = Log::default();
    let mut p = prepared([0.0; 3], None, &log);
    // Three variants of 2 s each, three quick rounds.
    assert_eq!(p.estimate(), (Duration::from_secs(2) + SETUP_PER_ROUND) * 3 * 3);
    p.rounds = 5;
    assert_eq!(p.estimate(), (Duration::from_secs(2) + SETUP_PER_ROUND) * 3 * 5);
    // Variants run together: one joint round (5 s) and one path per round.
    p.joint = Some(Box::new(JointFake { runs: Arc::new(AtomicUsize::new(0)) }));
    assert_eq!(p.estimate(), (Duration::from_secs(5) + SETUP_PER_ROUND) * 5);
}
