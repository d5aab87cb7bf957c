//! The real `tcptail lab run` and `lab report`, as root: every built-in experiment end to end
//! in smoke mode (CI's check that the whole set runs: every experiment with a verdict in the
//! allowed set, its reason quoting the numbers it was decided on, and every rule evaluated,
//! every variant with the metrics its engine declares
//! or the reason this host cannot run it, every metric the rules and the table read present,
//! and each report section with a plot for each plot that has data), `--list` against the
//! built-in files, experiment files checked before anything runs, Ctrl-C keeping what
//! finished and removing everything, and the report re-rendered from results.json alone.
//!
//! Runs are child processes whose namespaces are named `tcptail-<child pid>-...`; a guard
//! removes any left after a failed test. One lock keeps runs from sharing the vCPUs (see
//! `common`).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;
use tcptail_experiments::runner::EMULATOR_LATENESS_METRIC;
use tcptail_experiments::spec::{Experiment, RunMode};
use tcptail_experiments::verdict::format_value;

mod common;

use common::{bin, finish, lab_lock, namespaces_of, spawn};

fn results(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("results.json")).expect("results.json");
    serde_json::from_str(&text).expect("results.json is JSON")
}

const VERDICTS: [&str; 5] =
    ["reproduced", "partly", "not-reproduced", "inconclusive", "not-applicable"];

/// The values a condition reads: `variant.metric` (median over rounds), `variant.metric.min`
/// and `.max`, for the variants in `ran`, as (variant, metric, statistic); `has(...)` guards
/// read presence, not a number, and are left out.
fn values_read<'a>(condition: &'a str, ran: &[&str]) -> Vec<(&'a str, &'a str, &'a str)> {
    let mut text = condition;
    let mut kept = Vec::new();
    while let Some(at) = text.find("has(") {
        kept.push(&text[..at]);
        text = text[at..].split_once(')').map_or("", |(_, rest)| rest);
    }
    kept.push(text);
    kept.iter()
        .flat_map(|part| part.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.')))
        .filter_map(|word| {
            let parts: Vec<&str> = word.split('.').collect();
            let (v, m, stat) = match parts[..] {
                [v, m] => (v, m, "median"),
                [v, m, stat @ ("min" | "max")] => (v, m, stat),
                _ => return None,
            };
            ran.contains(&v).then_some((v, m, stat))
        })
        .collect()
}

/// Asserts that an experiment's reason quotes the numbers its verdict was decided on, as the
/// reason templates print them ([`format_value`]): every value the deciding rule's condition
/// read (for the final `otherwise` rule, the values of the first rule's condition, the claim's
/// test it failed), or, when the deciding condition could not be decided, the name of each
/// reference this run did not measure. (A reference without a value in a condition that was
/// decided, through `has(...)` or `and`/`or`, decided nothing.)
fn assert_reason_quotes_its_numbers(name: &str, e: &Value, spec: &Experiment, ran: &[&str]) {
    let reason = e["verdict_reason"].as_str().unwrap_or("");
    let rules = e["rules"].as_array().expect("rules");
    let fired = rules.iter().position(|r| r["fired"] == true).expect("a deciding rule");
    let undecided = rules[fired]["outcome"] == "unknown";
    let condition = match spec.rules[fired].when.as_deref() {
        Some(when) => when,
        None => spec.rules[0].when.as_deref().unwrap_or(""),
    };
    let variants = e["variants"].as_array().expect("variants");
    for (v, m, stat) in values_read(condition, ran) {
        let reference =
            if stat == "median" { format!("{v}.{m}") } else { format!("{v}.{m}.{stat}") };
        let value = variants
            .iter()
            .find(|x| x["name"] == v)
            .and_then(|x| x["metrics"].get(m))
            .and_then(|x| x[stat].as_f64())
            .filter(|x| x.is_finite());
        match value {
            Some(value) => {
                let printed = format_value(value);
                assert!(
                    reason.contains(&printed),
                    "{name}: the verdict was decided on {reference} = {printed}, which the \
                     reason does not quote: {reason:?}"
                );
            }
            None if undecided => assert!(
                reason.contains(&reference),
                "{name}: {reference} has no value and the reason does not name it: {reason:?}"
            ),
            None => {}
        }
    }
}

/// Whether the variant's notes say its metric `m` was not measurable from its sample count.
fn not_measurable(variant: &Value, m: &str) -> bool {
    let prefix = format!("{m}: not measurable");
    variant["notes"].as_array().is_some_and(|notes| {
        notes.iter().any(|n| n.as_str().is_some_and(|n| n.starts_with(&prefix)))
    })
}

/// `variant.metric` references in a rule's or finding's text, for the variants in `ran`.
fn references<'a>(text: &'a str, ran: &[&str]) -> Vec<(&'a str, &'a str)> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .filter_map(|word| {
            let mut parts = word.split('.');
            let (v, m) = (parts.next()?, parts.next()?);
            ran.contains(&v).then_some((v, m))
        })
        .collect()
}

/// How many of an experiment's plots have data to draw (what its section must show).
fn plots_with_data(e: &Value) -> usize {
    let variants = e["variants"].as_array().expect("variants");
    // What the report can draw: a finite number, and a positive one on a log axis (a round
    // under load can measure 0 where the axis is logarithmic; the report then says "no data").
    let drawable =
        |v: &Value, log: bool| v.as_f64().is_some_and(|x| x.is_finite() && (!log || x > 0.0));
    let has_series = |name: &str, kind: &str, log_x: bool| {
        variants.iter().any(|v| {
            v["series"].as_array().is_some_and(|all| {
                all.iter().any(|s| {
                    s["name"] == name
                        && s["kind"] == kind
                        && s["points"].as_array().is_some_and(|p| {
                            p.iter().any(|p| drawable(&p[0], log_x) && drawable(&p[1], false))
                        })
                })
            })
        })
    };
    e["plots"]
        .as_array()
        .expect("plots")
        .iter()
        .filter(|plot| {
            let series = plot["series"].as_str().unwrap_or("");
            match plot["kind"].as_str() {
                Some("ecdf") => has_series(series, "cdf", plot["log_x"] == true),
                Some("timeseries") => has_series(series, "time", false),
                _ => plot["metrics"].as_array().is_some_and(|ms| {
                    ms.iter().any(|m| {
                        variants.iter().any(|v| {
                            let metric = &v["metrics"][m.as_str().unwrap_or("")];
                            drawable(&metric["median"], plot["log_y"] == true)
                        })
                    })
                }),
            }
        })
        .count()
}

#[test]
fn every_builtin_runs_end_to_end_in_smoke_mode() {
    let _lock = lab_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().to_str().expect("utf-8");
    let done = finish(spawn(&["lab", "run", "--smoke", "--out", out]), Duration::from_secs(600));
    assert!(
        done.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        done.status,
        done.stdout,
        done.stderr
    );
    assert!(done.leftovers.is_empty(), "namespaces left behind: {:?}", done.leftovers);
    let results = results(dir.path());
    assert_eq!(results["run"]["mode"], "smoke");
    assert_eq!(results["run"]["interrupted"], false);
    assert!(!results["environment"]["kernel"].as_str().unwrap_or("").is_empty());
    let builtins = Experiment::builtins();
    let experiments = results["experiments"].as_array().expect("experiments");
    let names: Vec<&str> = experiments.iter().filter_map(|e| e["name"].as_str()).collect();
    let expected: Vec<&str> = builtins.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, expected, "every built-in, in order");
    let html = std::fs::read_to_string(dir.path().join("index.html")).expect("index.html");
    let sections: Vec<&str> = html.split("<section class=\"experiment\"").skip(1).collect();
    assert_eq!(sections.len(), builtins.len(), "one report section per experiment");
    for ((e, spec), section) in experiments.iter().zip(&builtins).zip(&sections) {
        let name = spec.name.as_str();
        assert!(e["error"].is_null(), "{name}: {}", e["error"]);
        let verdict = e["verdict"].as_str().unwrap_or("");
        assert!(VERDICTS.contains(&verdict), "{name}: verdict {verdict}");
        assert!(!e["verdict_reason"].as_str().unwrap_or("").is_empty(), "{name}: no reason");
        assert!(!e["claim"].as_str().unwrap_or("").is_empty(), "{name}: no claim");
        // Every rule of the file, evaluated, exactly one of them deciding.
        let rules = e["rules"].as_array().expect("rules");
        assert_eq!(rules.len(), spec.rules.len(), "{name}: rules listed");
        assert_eq!(rules.iter().filter(|r| r["fired"] == true).count(), 1, "{name}: deciders");
        assert_eq!(e["findings"].as_array().map(Vec::len), Some(spec.findings.len()), "{name}");
        // Every variant the mode runs: its declared metrics, or the reason it cannot run.
        let variants = e["variants"].as_array().expect("variants");
        let ran: Vec<&str> =
            spec.variants_in(RunMode::Smoke).iter().map(|v| v.name.as_str()).collect();
        let got: Vec<&str> = variants.iter().filter_map(|v| v["name"].as_str()).collect();
        assert_eq!(got, ran, "{name}: the smoke variants");
        assert_reason_quotes_its_numbers(name, e, spec, &ran);
        let mut measured: Vec<&str> = Vec::new();
        for v in variants {
            let vname = v["name"].as_str().unwrap_or("?");
            let metrics = v["metrics"].as_object().expect("metrics");
            if let Some(why) = v["not_applicable"].as_str() {
                assert!(!why.is_empty() && metrics.is_empty(), "{name}/{vname}: {why}");
                continue;
            }
            // Every round is listed; one whose path was not faithful (a late emulator on a
            // loaded machine) is excluded with its reason, and a variant with no faithful round
            // has no metrics to check.
            let rounds = v["rounds"].as_array().expect("rounds");
            assert!(!rounds.is_empty(), "{name}/{vname}: no round listed");
            for r in rounds.iter().filter(|r| r["faithful"] == false) {
                let why = r["excluded_reason"].as_str().unwrap_or("");
                assert!(!why.is_empty(), "{name}/{vname}: excluded without a reason");
            }
            if rounds.iter().all(|r| r["faithful"] == false) {
                // Only the lateness column, which keeps every round (it is why they were
                // excluded); nothing measured on an unfaithful path.
                let leaked: Vec<&String> =
                    metrics.keys().filter(|k| *k != EMULATOR_LATENESS_METRIC).collect();
                assert!(leaked.is_empty(), "{name}/{vname}: {leaked:?} from excluded rounds");
                continue;
            }
            measured.push(vname);
            let declared = v["expected_metrics"].as_array().expect("expected_metrics");
            assert!(!declared.is_empty(), "{name}/{vname}: declares nothing");
            for m in declared.iter().filter_map(Value::as_str) {
                let median = metrics.get(m).and_then(|x| x["median"].as_f64());
                // A percentile the smoke run's few samples cannot support has no number, only
                // the note saying so.
                assert!(
                    median.is_some() || not_measurable(v, m),
                    "{name}/{vname}: declared metric {m} missing"
                );
            }
            assert!(!metrics.is_empty(), "{name}/{vname}: no metrics");
        }
        // What the rules and findings read of the variants that ran, and what the table shows.
        let texts =
            spec.rules.iter().flat_map(|r| [r.when.clone().unwrap_or_default(), r.reason.clone()]);
        let texts: Vec<String> = texts
            .chain(
                spec.findings
                    .iter()
                    .flat_map(|f| [f.when.clone(), f.then.clone(), f.otherwise.clone()]),
            )
            .collect();
        for (v, m) in texts.iter().flat_map(|t| references(t, &measured)) {
            let variant = variants.iter().find(|x| x["name"] == v).expect("ran");
            assert!(
                variant["metrics"].get(m).is_some() || not_measurable(variant, m),
                "{name}: {v}.{m} is read but missing"
            );
        }
        // A column some measured variant declares has a value (or the reason it has none) in
        // one of them; a column only an excluded variant declares (its one smoke round ran on
        // a late emulator under load) has nothing to show.
        let measured_variants: Vec<&Value> = variants
            .iter()
            .filter(|v| measured.contains(&v["name"].as_str().unwrap_or("?")))
            .collect();
        for m in &spec.table {
            let declared_by_one = measured_variants.iter().any(|v| {
                v["expected_metrics"].as_array().is_some_and(|d| d.iter().any(|x| x == m.as_str()))
            });
            assert!(
                !declared_by_one
                    || measured_variants
                        .iter()
                        .any(|v| v["metrics"].get(m.as_str()).is_some() || not_measurable(v, m)),
                "{name}: table column {m} has no value in any variant"
            );
        }
        // The report's section for it: the rule table, and a plot for each plot with data.
        assert!(section.contains(&format!("<code>{name}</code>")), "{name}: section order");
        assert!(section.contains("← decided the verdict"), "{name}: no rule marked");
        let plots = plots_with_data(e);
        assert!(plots > 0, "{name}: no plot has data");
        assert_eq!(section.matches("<svg").count(), plots, "{name}: plots in its section");
    }
    // The summary on stdout names every experiment's verdict.
    for e in experiments {
        let line =
            format!("{:<14} {:<15}", e["name"].as_str().unwrap(), e["verdict"].as_str().unwrap());
        assert!(done.stdout.contains(&line), "{line:?} not in:\n{}", done.stdout);
    }
    assert!(done.stdout.contains("report:"));
}

#[test]
fn list_shows_every_builtin_with_its_variants_and_rounds() {
    let out = Command::new(bin()).args(["lab", "run", "--list"]).output().expect("run");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    let builtins = Experiment::builtins();
    // The header, one row per experiment, then a line in parentheses about the modes.
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip(1)
        .filter(|l| !l.starts_with('('))
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), builtins.len(), "{text}");
    for (e, row) in builtins.iter().zip(&rows) {
        let variants = e.variants_in(RunMode::Quick).len().to_string();
        let rounds = e.mode(RunMode::Quick).rounds.to_string();
        assert_eq!(row[..3], [e.name.as_str(), &variants, &rounds], "{text}");
        assert!(planned_s(row[3]).is_some(), "planned {:?} in:\n{text}", row[3]);
        assert_eq!(row[4], e.workload, "{text}");
    }
    assert!(text.contains("(quick mode, planned "), "{text}");
    // Another mode lists that mode's numbers.
    let out = Command::new(bin()).args(["lab", "run", "--list", "--full"]).output().expect("run");
    let text = String::from_utf8_lossy(&out.stdout);
    let bloat = Experiment::builtin("bloat").unwrap();
    let line = text.lines().find(|l| l.starts_with("bloat ")).expect("bloat listed");
    let full: Vec<&str> = line.split_whitespace().collect();
    assert_eq!(full[1], bloat.variants_in(RunMode::Full).len().to_string(), "{line}");
    assert_eq!(full[2], bloat.mode(RunMode::Full).rounds.to_string(), "{line}");
    // Full bloat: 3 rounds x 6 variants x 300 s at least.
    let planned = planned_s(full[3]).expect("a planned duration");
    assert!((5400..6600).contains(&planned), "{line}");
}

/// `45s`, `14min` or `2h05min` in seconds (minutes rounded).
fn planned_s(word: &str) -> Option<u64> {
    if let Some(s) = word.strip_suffix("min") {
        return match s.split_once('h') {
            Some((h, m)) => Some(h.parse::<u64>().ok()? * 3600 + m.parse::<u64>().ok()? * 60),
            None => Some(s.parse::<u64>().ok()? * 60),
        };
    }
    word.strip_suffix('s')?.parse().ok()
}

#[test]
fn bad_experiments_fail_before_anything_runs() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("out");
    let file = dir.path().join("bad.toml");
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments/nagle-delack.toml"),
    )
    .expect("nagle-delack.toml")
    .replace("header = \"32B\"", "header = \"32 parsecs\"");
    std::fs::write(&file, text).expect("write");
    let cases: [(&[&str], &str); 4] = [
        (&["lab", "run", "no-such-experiment"], "built-ins: trading-cc"),
        (&["lab", "run", file.to_str().expect("utf-8")], "bad.toml:"),
        (&["lab", "run", "nagle-delack", "nagle-delack"], "named twice"),
        (&["lab", "run", "/nonexistent/x.toml"], "/nonexistent/x.toml"),
    ];
    for (args, expected) in cases {
        let output = Command::new(bin())
            .args(args)
            .args(["--out", out.to_str().expect("utf-8")])
            .output()
            .expect("run");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(!out.exists(), "{args:?} created the output directory");
    }
    // The bad value is located: file, line and key.
    let output = Command::new(bin()).args(["lab", "run"]).arg(&file).output().expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    let line = std::fs::read_to_string(&file)
        .expect("read")
        .lines()
        .position(|l| l.contains("parsecs"))
        .expect("line")
        + 1;
    assert!(stderr.contains(&format!("bad.toml:{line}: `header`")), "{stderr}");
}

#[test]
fn ctrl_c_keeps_what_finished_and_removes_everything() {
    let _lock = lab_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().to_str().expect("utf-8");
    let mut run = spawn(&["lab", "run", "--smoke", "nagle-delack", "loss", "--out", out]);
    let results_file = dir.path().join("results.json");
    let deadline = Instant::now() + Duration::from_secs(120);
    // Wait until the first experiment is written and the second has namespaces up.
    loop {
        let first_done = std::fs::read_to_string(&results_file)
            .ok()
            .and_then(|t| serde_json::from_str::<Value>(&t).ok())
            .is_some_and(|r| r["experiments"].as_array().is_some_and(|a| a.len() == 1));
        if first_done && !namespaces_of(run.pid).is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "the first experiment never finished");
        assert!(run.child.try_wait().expect("wait").is_none(), "the run ended early");
        std::thread::sleep(Duration::from_millis(20));
    }
    let sent = Command::new("kill").args(["-INT", &run.pid.to_string()]).status().expect("kill");
    assert!(sent.success());
    let done = finish(run, Duration::from_secs(30));
    assert_eq!(done.status.code(), Some(130), "{}", done.stderr);
    assert!(done.leftovers.is_empty(), "left behind: {:?}", done.leftovers);
    let results = results(dir.path());
    assert_eq!(results["run"]["interrupted"], true);
    let experiments = results["experiments"].as_array().expect("experiments");
    assert_eq!(experiments[0]["name"], "nagle-delack");
    assert!(experiments[0]["variants"][0]["metrics"].as_object().is_some_and(|m| !m.is_empty()));
    assert!(std::fs::metadata(dir.path().join("index.html")).is_ok_and(|m| m.len() > 0));
}

#[test]
fn report_rerenders_from_results_json_alone() {
    let dir = tempfile::tempdir().expect("tempdir");
    // A results.json as a run writes it, from the library's own types.
    let results = tcptail_report::Results {
        run: tcptail_report::RunInfo {
            tool_version: "test".into(),
            mode: "quick".into(),
            started_unix_s: 1_795_437_296,
            duration_s: 1.0,
            interrupted: false,
            command: "tcptail lab run".into(),
        },
        environment: tcptail_report::Environment::default(),
        experiments: vec![tcptail_report::ExperimentResult {
            name: "nagle-delack".into(),
            title: "Nagle".into(),
            seed: "000_195f82ea5b9a1f8f.txt".into(),
            claim: "set TCP_NODELAY".into(),
            setup: "veth".into(),
            verdict: tcptail_report::Verdict::Reproduced,
            verdict_reason: "p50 40000 µs vs 30 µs".into(),
            verdict_rule: "when: a.p50_us > 10 * b.p50_us".into(),
            rules: vec![tcptail_report::RuleResult {
                verdict: tcptail_report::Verdict::Reproduced,
                when: Some("a.p50_us > 10 * b.p50_us".into()),
                evaluated: Some("40000 > 300 ✓".into()),
                outcome: tcptail_report::Outcome::Holds,
                fired: true,
                line: 3,
            }],
            findings: Vec::new(),
            rounds: 1,
            variants: Vec::new(),
            plots: Vec::new(),
            table: Vec::new(),
            notes: Vec::new(),
            error: None,
            lateness: None,
            duration_s: 1.0,
            conditions: Vec::new(),
            decidability: None,
        }],
    };
    results.write(&dir.path().join("results.json")).expect("write");
    let out = Command::new(bin()).args(["lab", "report"]).arg(dir.path()).output().expect("run");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let html = std::fs::read_to_string(dir.path().join("index.html")).expect("index.html");
    assert!(html.contains("nagle-delack") && html.contains("p50 40000 µs vs 30 µs"));
    assert!(html.contains("40000 &gt; 300 ✓") && html.contains("← decided the verdict"));

    std::fs::write(dir.path().join("results.json"), "{\"run\": 3}").expect("write");
    let out = Command::new(bin()).args(["lab", "report"]).arg(dir.path()).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("results.json"));
    let missing = dir.path().join("nowhere");
    let out = Command::new(bin()).args(["lab", "report"]).arg(&missing).output().expect("run");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn values_read_finds_medians_and_spreads_but_not_guards() {
    let ran = ["a", "b"];
    let condition = "has(c.x) and a.p99_us.min > 2.5 * b.p99_us.max or (a.x < 1e-3 and has(b.y))";
    assert_eq!(
        values_read(condition, &ran),
        [("a", "p99_us", "min"), ("b", "p99_us", "max"), ("a", "x", "median")]
    );
    assert_eq!(values_read("max(a.x, b.y.min) > 0 and c.z > 1", &ran).len(), 2, "c did not run");
}

#[test]
fn an_out_directory_with_files_is_refused_before_anything_runs() {
    let _lock = lab_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("results.json"), "{\"mine\": true}").unwrap();
    let out = dir.path().to_str().expect("utf-8");
    let output = Command::new(bin())
        .args(["lab", "run", "--smoke", "nagle-delack", "--out", out])
        .output()
        .expect("run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains(out) && stderr.contains("not empty") && stderr.contains("--force"));
    let kept = std::fs::read_to_string(dir.path().join("results.json")).unwrap();
    assert_eq!(kept, "{\"mine\": true}", "the existing file was left alone");
}
