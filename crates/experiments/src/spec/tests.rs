use super::*;

const GOOD: &str = r#"
name = "nagle-delack"
title = "Nagle and delayed ACKs"
seed = "000_195f82ea5b9a1f8f.txt"
claim = "A request split in two writes waits for the delayed ACK."
workload = "split-write"
table = ["p50_us"]

[params]
path = "veth"
duration = "5s"

[mode.smoke]
rounds = 1
duration = "1s"
[mode.quick]
rounds = 3
variants = ["off_off"]
[mode.full]
rounds = 10

[[variant]]
name = "off_off"
label = "Nagle on, QUICKACK off"
nodelay = false

[[variant]]
name = "on_rearm"
nodelay = true
duration = "2s"

[[plot]]
kind = "ecdf"
series = "latency_us"
title = "Latency"
log_x = true

[[verdict]]
verdict = "reproduced"
when = "off_off.p50_us > 10 * on_rearm.p50_us"
reason = "p50 {off_off.p50_us} vs {on_rearm.p50_us}"

[[verdict]]
verdict = "not-reproduced"
reason = "no stall"
"#;

fn err(text: &str) -> SpecError {
    Experiment::parse(text, "x.toml").unwrap_err()
}

#[test]
fn parses_a_complete_file() {
    let e = Experiment::parse(GOOD, "x.toml").unwrap();
    assert_eq!(e.name, "nagle-delack");
    assert_eq!(e.variants.len(), 2);
    assert_eq!(e.variants[0].label, "Nagle on, QUICKACK off");
    assert_eq!(e.variants[1].label, "on_rearm");
    assert_eq!(e.mode(RunMode::Quick).rounds, 3);
    assert_eq!(e.variants_in(RunMode::Quick).len(), 1);
    assert_eq!(e.variants_in(RunMode::Full).len(), 2);
    assert_eq!(e.rules.len(), 2);
    assert_eq!(e.rules[1].when, None);
    assert!(matches!(&e.plots[0], PlotSpec::Ecdf { log_x: true, .. }));
}

#[test]
fn layers_params_then_variant_then_mode() {
    let e = Experiment::parse(GOOD, "x.toml").unwrap();
    let v = &e.variants[1];
    let p = e.params_for(v, RunMode::Quick);
    assert_eq!(p.duration("duration").unwrap(), Some(std::time::Duration::from_secs(2)));
    let p = e.params_for(v, RunMode::Smoke);
    assert_eq!(p.duration("duration").unwrap(), Some(std::time::Duration::from_secs(1)));
    assert_eq!(p.line("duration"), Some(15));
    assert_eq!(p.bool("nodelay").unwrap(), Some(true));
}

#[test]
fn errors_name_file_line_and_key() {
    let e = err(&GOOD.replace("title = ", "titel = "));
    assert_eq!((e.line, e.key.as_deref()), (Some(3), Some("titel")), "{e}");
    assert!(e.to_string().starts_with("x.toml:3: `titel`: unknown key"), "{e}");

    let e = err(&GOOD.replace("verdict = \"reproduced\"", "verdict = \"proven\""));
    assert_eq!(e.key.as_deref(), Some("verdict"), "{e}");
    assert!(e.problem.contains("proven"), "{e}");

    let e = err(&GOOD.replace("name = \"on_rearm\"", "name = \"on-rearm\""));
    assert!(e.problem.contains("[a-z][a-z0-9_]*"), "{e}");

    let e = err(&GOOD.replace("rounds = 3", "rounds = 0"));
    assert_eq!((e.line, e.key.as_deref()), (Some(17), Some("rounds")), "{e}");

    let e = err(&GOOD.replace("[mode.full]\nrounds = 10", ""));
    assert_eq!(e.key.as_deref(), Some("mode.full"), "{e}");

    let e = err(&GOOD.replace("variants = [\"off_off\"]", "variants = [\"nope\"]"));
    assert!(e.problem.contains("nope"), "{e}");

    let e = err(&GOOD.replace("kind = \"ecdf\"", "kind = \"pie\""));
    assert_eq!(e.key.as_deref(), Some("plot"), "{e}");

    let e = err(&GOOD.replace("reason = \"no stall\"", "reason = \"no stall\"\nwhen = \"1 > 0\""));
    assert!(e.problem.contains("last [[verdict]]"), "{e}");

    let e = err("name = [");
    assert_eq!(e.line, Some(1), "{e}");
}

#[test]
fn duplicate_variants_are_refused() {
    let text = GOOD.replace("name = \"on_rearm\"", "name = \"off_off\"");
    assert!(err(&text).problem.contains("defined twice"));
}

#[test]
fn param_errors_point_at_the_line_that_set_the_value() {
    let e = Experiment::parse(GOOD, "x.toml").unwrap();
    let err = e.param_error(&e.variants[0], RunMode::Quick, "nodelay", "bad");
    assert_eq!(err.line, Some(25), "{err}");
    let err = e.param_error(&e.variants[0], RunMode::Quick, "missing", "is required");
    assert_eq!(err.line, Some(e.variants[0].line), "{err}");
}

#[test]
fn findings_are_read_with_their_lines_and_checked_for_keys() {
    let finding = "\n[[finding]]\ntitle = \"QUICKACK\"\nwhen = \"off_off.p50_us > 1\"\nthen = \"yes\"\notherwise = \"no\"\n";
    let text = format!("{GOOD}{finding}");
    let e = Experiment::parse(&text, "x.toml").unwrap();
    assert_eq!(e.findings.len(), 1);
    let f = &e.findings[0];
    assert_eq!(
        (f.title.as_str(), f.then.as_str(), f.otherwise.as_str()),
        ("QUICKACK", "yes", "no")
    );
    assert_eq!(f.line, text[..text.find("[[finding]]").unwrap()].matches('\n').count() + 1);
    assert!(Experiment::parse(GOOD, "x.toml").unwrap().findings.is_empty());

    let e = err(&format!("{GOOD}{}", finding.replace("then = \"yes\"\n", "")));
    assert_eq!(e.key.as_deref(), Some("finding.then"), "{e}");
    let e = err(&format!("{GOOD}{finding}colour = \"red\"\n"));
    assert_eq!(e.key.as_deref(), Some("finding.colour"), "{e}");
    assert!(e.problem.contains("unknown key in [[finding]] (title, when, then, otherwise)"), "{e}");
}

/// `GOOD` on an emulated path, with two `[[event]]` tables (one for `on_rearm` only).
fn with_events() -> String {
    let text =
        GOOD.replace("path = \"veth\"", "path = \"emulated\"\nrate = \"10mbit\"\nrtt = \"20ms\"");
    format!(
        "{text}\n[[event]]\nat = \"1s\"\nchange = \"blackhole\"\n\n[[event]]\nat = \"2s\"\n\
         change = \"delay=+5ms\"\nvariants = [\"on_rearm\"]\n"
    )
}

fn line_of(text: &str, needle: &str) -> usize {
    text[..text.find(needle).expect("in the text")].matches('\n').count() + 1
}

#[test]
fn event_tables_apply_to_their_variants_before_the_event_param() {
    let text = with_events().replace("nodelay = true", "nodelay = true\nevent = \"3s:restore\"");
    let e = Experiment::parse(&text, "x.toml").unwrap();
    assert_eq!(e.events.len(), 2);
    assert_eq!(e.events[0].line, line_of(&text, "[[event]]"));
    let texts = |v: usize| {
        let params = e.params_for(&e.variants[v], RunMode::Full);
        let plan = crate::path::PathPlan::from_params(&params).unwrap();
        plan.events.iter().map(ToString::to_string).collect::<Vec<_>>()
    };
    assert_eq!(texts(0), ["1s:blackhole"]);
    assert_eq!(texts(1), ["1s:blackhole", "2s:delay=+5ms", "3s:restore"]);
    // Without tables the parameter is untouched (line and value).
    let plain = Experiment::parse(GOOD, "x.toml").unwrap();
    assert!(plain.events.is_empty());
    assert_eq!(plain.params_for(&plain.variants[0], RunMode::Full).line("event"), None);
}

#[test]
fn event_table_errors_name_their_line_and_key() {
    let text = with_events();
    let second = text.rfind("[[event]]").unwrap();
    let line = text[..second].matches('\n').count() + 1;
    let e = err(&format!("{}change = \"delay=+5ms\"\ncolour = 1\n", &text[..second + 10]));
    assert_eq!(e.key.as_deref(), Some("event.colour"), "{e}");
    let e = err(&text.replace("change = \"blackhole\"", "change = \"outage\""));
    assert_eq!((e.line, e.key.as_deref()), (Some(line_of(&text, "[[event]]")), Some("event")));
    assert!(e.problem.contains("unknown change 'outage'"), "{e}");
    let e = err(&text.replace("change = \"blackhole\"", ""));
    assert_eq!(e.key.as_deref(), Some("event.change"), "{e}");
    let e = err(&text.replace("variants = [\"on_rearm\"]", "variants = [\"nope\"]"));
    assert_eq!(e.key.as_deref(), Some("event.variants"), "{e}");
    assert!(e.problem.contains("no variant named `nope` (known: off_off, on_rearm)"), "{e}");
    let e = err(&text.replace("variants = [\"on_rearm\"]", "variants = []"));
    assert!(e.problem.contains("empty list"), "{e}");

    // A change that does not fit the variant's path fails at planning, at the table's line.
    let text = text.replace("delay=+5ms", "delay=-15ms");
    let exp = Experiment::parse(&text, "x.toml").unwrap();
    let v = &exp.variants[1];
    let p = crate::path::PathPlan::from_params(&exp.params_for(v, RunMode::Full)).unwrap_err();
    let e = exp.param_error(v, RunMode::Full, &p.key, &p.problem);
    assert_eq!((e.line, e.key.as_deref()), (Some(line), Some("event")), "{e}");
    assert!(e.problem.contains("2s:delay=-15ms: takes the delay (10ms) below zero"), "{e}");
    // The variant the table does not name plans fine.
    crate::path::PathPlan::from_params(&exp.params_for(&exp.variants[0], RunMode::Full)).unwrap();
}

#[test]
fn decidability_is_read_and_checked() {
    let table =
        "\n[decidability]\nquick = \"partly\"\nreason = \"only full mode runs the seed's rate\"\n";
    let e = Experiment::parse(&format!("{GOOD}{table}"), "x.toml").unwrap();
    let d = e.decidability.expect("read");
    assert_eq!(d.quick, tcptail_report::QuickDecides::Partly);
    assert_eq!(d.reason, "only full mode runs the seed's rate");
    assert!(Experiment::parse(GOOD, "x.toml").unwrap().decidability.is_none());

    let e = err(&format!("{GOOD}{}", table.replace("\"partly\"", "\"maybe\"")));
    assert_eq!(e.key.as_deref(), Some("decidability.quick"), "{e}");
    assert!(e.problem.contains("`maybe`: expected `yes`, `partly` or `no`"), "{e}");
    let line = GOOD.matches('\n').count() + 3;
    assert_eq!(e.line, Some(line), "{e}");
    let e = err(&format!("{GOOD}{}", table.replace("reason = ", "why = ")));
    assert_eq!(e.key.as_deref(), Some("decidability.why"), "{e}");
    assert!(e.problem.contains("unknown key in [decidability] (quick, reason)"), "{e}");
    let e = err(&format!("{GOOD}\n[decidability]\nquick = \"yes\"\n"));
    assert_eq!(e.key.as_deref(), Some("decidability.reason"), "{e}");
}

/// Issue 14 §2: every built-in experiment states the seed's conditions beside its own and
/// whether its quick mode can decide the verdict at the seed's effect size.
#[test]
fn every_builtin_states_its_conditions_and_decidability() {
    for (name, text) in BUILTIN {
        let e = Experiment::parse(text, &format!("{name}.toml")).unwrap();
        assert!(!e.conditions.is_empty(), "{name}: no [[condition]]");
        let d = e.decidability.unwrap_or_else(|| panic!("{name}: no [decidability]"));
        assert!(d.reason.len() > 40, "{name}: say why in [decidability] reason");
    }
}

/// The path plan of `text`'s `variant` in full mode, or the error its file would report.
fn plan_of(text: &str, variant: usize) -> Result<crate::path::PathPlan, SpecError> {
    let exp = Experiment::parse(text, "x.toml").unwrap();
    let v = &exp.variants[variant];
    let engine = crate::workload::by_name(&exp.workload).expect("known workload");
    crate::workload::plan(engine, &exp.params_for(v, RunMode::Full))
        .map(|_| crate::path::PathPlan::from_params(&exp.params_for(v, RunMode::Full)).unwrap())
        .map_err(|p| exp.param_error(v, RunMode::Full, &p.key, &p.problem))
}

#[test]
fn the_emulator_thread_layout_is_a_path_key_checked_with_its_file_and_line() {
    use tcptail_lab::emulator::Threads;
    let emulated =
        GOOD.replace("path = \"veth\"", "path = \"emulated\"\nrate = \"10mbit\"\nrtt = \"20ms\"");
    assert_eq!(plan_of(&emulated, 0).unwrap().threads, Threads::Single, "the default");
    let split = emulated.replace("nodelay = true", "nodelay = true\nthreads = \"split\"");
    assert_eq!(plan_of(&split, 1).unwrap().threads, Threads::Split);
    assert_eq!(plan_of(&split, 0).unwrap().threads, Threads::Single, "only where it is set");
    let described = plan_of(&split, 1).unwrap().describe();
    assert!(described.ends_with("(emulator threads: split)"), "{described}");

    let bad = emulated.replace("nodelay = true", "nodelay = true\nthreads = \"dual\"");
    let e = plan_of(&bad, 1).unwrap_err();
    assert_eq!(
        (e.file.as_str(), e.line, e.key.as_deref()),
        ("x.toml", Some(line_of(&bad, "threads = \"dual\"")), Some("threads")),
        "{e}"
    );
    assert!(
        e.problem.contains(
            "unknown thread layout 'dual' (use single, per-direction, split or pipeline)"
        ),
        "{e}"
    );
    let veth = GOOD.replace("nodelay = true", "nodelay = true\nthreads = \"split\"");
    let e = plan_of(&veth, 1).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("threads"), "{e}");
    assert!(e.problem.contains("needs path = \"emulated\""), "{e}");
}

#[test]
fn emulator_placement_is_a_path_key_checked_with_its_file_and_line() {
    use tcptail_lab::placement::{CpuChoice, PlacementRequest};
    let emulated =
        GOOD.replace("path = \"veth\"", "path = \"emulated\"\nrate = \"10mbit\"\nrtt = \"20ms\"");
    assert!(plan_of(&emulated, 0).unwrap().placement.is_empty(), "the default: nothing placed");
    let with = |keys: &str| emulated.replace("nodelay = true", &format!("nodelay = true\n{keys}"));
    let pinned = with("emulator_cpu = \"last\"\nsteer = true\nendpoints_apart = true");
    assert_eq!(
        plan_of(&pinned, 1).unwrap().placement,
        PlacementRequest {
            emulator_cpu: Some(CpuChoice::Last),
            steer: true,
            endpoints_apart: true
        }
    );
    assert!(plan_of(&pinned, 0).unwrap().placement.is_empty(), "only where it is set");
    let described = plan_of(&pinned, 1).unwrap().describe();
    assert!(
        described.ends_with(
            "(emulator on CPU last, receive processing steered off it, endpoints off it)"
        ),
        "{described}"
    );
    let numbered = plan_of(&with("emulator_cpu = 1"), 1).unwrap().placement;
    assert_eq!((numbered.emulator_cpu, numbered.steer), (Some(CpuChoice::Index(1)), false));

    // Each refusal names the key and its line.
    for (keys, key, problem) in [
        ("emulator_cpu = \"first\"", "emulator_cpu", "'first' is not a CPU number"),
        ("emulator_cpu = -1", "emulator_cpu", "'-1' is not a CPU number"),
        ("emulator_cpu = true", "emulator_cpu", "expected a string"),
        ("steer = \"yes\"", "steer", "expected true or false"),
        ("steer = true", "steer", "needs emulator_cpu"),
        ("endpoints_apart = true", "endpoints_apart", "needs emulator_cpu"),
    ] {
        let bad = with(keys);
        let e = plan_of(&bad, 1).unwrap_err();
        assert_eq!(
            (e.file.as_str(), e.line, e.key.as_deref()),
            ("x.toml", Some(line_of(&bad, keys)), Some(key)),
            "{e}"
        );
        assert!(e.problem.contains(problem), "{keys}: {e}");
    }
    let veth = GOOD.replace("nodelay = true", "nodelay = true\nemulator_cpu = 1\nsteer = true");
    let e = plan_of(&veth, 1).unwrap_err();
    assert_eq!(e.key.as_deref(), Some("emulator_cpu"), "{e}");
    assert!(e.problem.contains("needs path = \"emulated\""), "{e}");
}
