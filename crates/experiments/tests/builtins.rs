//! Every built-in experiment parses, names a known workload, and every variant plans in every
//! mode (so a typo in a file fails here, not half-way through a quick run).

use tcptail_experiments::spec::{Experiment, Mode};
use tcptail_experiments::workload;

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
        for mode in Mode::ALL {
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
