//! `tcptail sendq` through the binary: usage errors exit 2 before anything is created; a short
//! run (needs root, iproute2 and /dev/net/tun, as in CI) writes the JSON and the ECDF plots of
//! both congestion controls and prints every target beside its measured value.

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
    tcptail().args(["sendq", "--rounds", "0"]).assert().code(2);
}

#[test]
fn short_run_writes_json_and_plots() {
    let out = tempfile::tempdir().unwrap();
    let assert = tcptail()
        .args(["sendq", "--chunks", "20", "--rounds", "1", "--out"])
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
    for name in ["cubic/threshold-10ms@30M", "bbr/adaptive-10ms+fresh@30M"] {
        assert!(stdout.contains(name), "{name}: {stdout}");
    }
    // Each target is printed with what it asks for beside what was measured.
    let targets: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("PASS ") || l.starts_with("FAIL ") || l.starts_with("OUT OF"))
        .collect();
    assert_eq!(targets.len(), 24, "{stdout}");
    assert!(targets.iter().all(|l| l.contains(": target ") && l.contains(", measured ")));
    assert!(targets.iter().any(|l| l.contains("bbr: adaptive-10ms median send-start")));
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.path().join("sendq.json")).unwrap()).unwrap();
    let variants = json["main"]["variants"].as_array().unwrap();
    assert_eq!(variants.len(), 12);
    for v in variants {
        assert_eq!(v["rounds"], 1);
        assert_eq!(v["runs"][0]["chunks_offered"], 20);
        assert!(v["goodput_mbps"].as_f64().unwrap() > 10.0, "{v}");
    }
    for svg in [
        "ecdf-start-cubic.svg",
        "ecdf-schedule-cubic.svg",
        "ecdf-start-bbr.svg",
        "ecdf-schedule-bbr.svg",
    ] {
        let text = std::fs::read_to_string(out.path().join(svg)).unwrap();
        assert!(text.starts_with("<svg") && text.contains("no-control"), "{svg}");
    }
}
