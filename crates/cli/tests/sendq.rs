//! `tcptail sendq` through the binary: usage errors exit 2 before anything is created; a short
//! run (needs root, iproute2 and /dev/net/tun, as in CI) writes the JSON and the ECDF plots.

use assert_cmd::Command;
use predicates::prelude::*;

fn tcptail() -> Command {
    Command::cargo_bin("tcptail").unwrap()
}

#[test]
fn help_names_the_experiment_flags() {
    tcptail()
        .args(["sendq", "--help"])
        .assert()
        .success()
        .stdout(predicate::str::contains("--full").and(predicate::str::contains("--out")));
}

#[test]
fn bad_values_exit_2_before_anything_runs() {
    tcptail().args(["sendq", "--chunks", "3"]).assert().code(2);
    tcptail().args(["sendq", "--rate", "fast"]).assert().code(2);
    tcptail().args(["sendq", "--rate", "0mbit"]).assert().code(2);
}

#[test]
fn short_run_writes_json_and_plots() {
    let out = tempfile::tempdir().unwrap();
    let assert = tcptail()
        .args(["sendq", "--chunks", "20", "--out"])
        .arg(out.path())
        .timeout(std::time::Duration::from_secs(120))
        .assert();
    let output = assert.get_output();
    assert!(
        output.status.success(),
        "tcptail sendq needs root, iproute2 and /dev/net/tun: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("cubic/threshold-10ms@30M"), "{stdout}");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("sendq.json")).unwrap()).unwrap();
    let variants = json["main"]["variants"].as_array().unwrap();
    assert_eq!(variants.len(), 5);
    for v in variants {
        assert_eq!(v["chunks_offered"], 20);
        assert!(v["goodput_mbps"].as_f64().unwrap() > 10.0, "{v}");
    }
    for svg in ["ecdf-start-cubic.svg", "ecdf-schedule-cubic.svg"] {
        let text = std::fs::read_to_string(out.path().join(svg)).unwrap();
        assert!(text.starts_with("<svg") && text.contains("no-control"), "{svg}");
    }
}
