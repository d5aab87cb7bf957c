//! Every built-in experiment parses, names a known workload, and every variant plans in every
//! mode (so a typo in a file fails here, not half-way through a quick run); every metric its
//! table, plots, rules and findings read is one the variant's engine declares it produces.

use std::collections::BTreeSet;

use tcptail_experiments::spec::{Experiment, RunMode};
use tcptail_experiments::verdict::{FindingRule, Rule};
use tcptail_experiments::workload;
use tcptail_report::PlotSpec;

#[test]
fn every_builtin_variant_plans_in_every_mode() {
    let experiments = Experiment::builtins();
    assert!(experiments.len() >= 9, "the issue names nine experiments");
    let mut problems = Vec::new();
    for experiment in &experiments {
        let Some(engine) = workload::by_name(&experiment.workload) else {
            problems.push(format!("{}: unknown workload {}", experiment.name, experiment.workload));
            continue;
        };
        for mode in RunMode::ALL {
            let variants = experiment.variants_in(mode);
            if variants.is_empty() {
                problems.push(format!("{} ({mode}): no variants", experiment.name));
            }
            for variant in variants {
                let params = experiment.params_for(variant, mode);
                if let Err(e) = workload::plan(engine, &params) {
                    problems.push(
                        experiment.param_error(variant, mode, &e.key, &e.problem).to_string(),
                    );
                }
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// A rule's or finding's `variant.metric` references (the statistic suffix dropped).
fn references(text: &str, variants: &[&str]) -> Vec<(String, String)> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .filter_map(|word| {
            let mut parts = word.split('.');
            let (v, m) = (parts.next()?, parts.next()?);
            variants.contains(&v).then(|| (v.to_owned(), m.to_owned()))
        })
        .collect()
}

#[test]
fn every_metric_an_experiment_reads_is_declared_by_its_engine() {
    let mut problems = Vec::new();
    let mut undeclared_engines = BTreeSet::new();
    for e in Experiment::builtins() {
        let engine = workload::by_name(&e.workload).expect("known workload");
        let names: Vec<&str> = e.variants.iter().map(|v| v.name.as_str()).collect();
        for rule in &e.rules {
            Rule::compile(rule, &names).expect("rules compile");
        }
        for finding in &e.findings {
            FindingRule::compile(finding, &names)
                .unwrap_or_else(|err| panic!("{} line {}: {err}", e.file, finding.line));
        }
        // Full mode runs every variant.
        let declared: Vec<(String, BTreeSet<String>)> = e
            .variants_in(RunMode::Full)
            .into_iter()
            .map(|v| {
                let plan = workload::plan(engine, &e.params_for(v, RunMode::Full)).expect("plans");
                (v.name.clone(), plan.metrics().into_iter().collect())
            })
            .collect();
        if declared.iter().all(|(_, m)| m.is_empty()) {
            undeclared_engines.insert(e.workload.clone());
            continue;
        }
        let mut read: Vec<(String, String)> = Vec::new();
        for text in
            e.rules.iter().flat_map(|r| [r.when.clone().unwrap_or_default(), r.reason.clone()])
        {
            read.extend(references(&text, &names));
        }
        for f in &e.findings {
            for text in [&f.when, &f.then, &f.otherwise] {
                read.extend(references(text, &names));
            }
        }
        for (variant, metric) in read {
            let mine = &declared.iter().find(|(n, _)| *n == variant).expect("a variant").1;
            if !mine.contains(&metric) {
                problems.push(format!("{}: {variant}.{metric} is read but not declared", e.name));
            }
        }
        let mut shown: Vec<&String> = e.table.iter().collect();
        for plot in &e.plots {
            if let PlotSpec::Bars { metrics, .. } = plot {
                shown.extend(metrics);
            }
        }
        for metric in shown {
            if !declared.iter().any(|(_, m)| m.contains(metric)) {
                problems
                    .push(format!("{}: `{metric}` is shown but no variant declares it", e.name));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    // Every engine is held to its declaration here and by the runner.
    assert!(
        undeclared_engines.is_empty(),
        "engines that declare no metrics: {undeclared_engines:?}"
    );
}
