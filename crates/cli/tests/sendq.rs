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
    // Goodput is the delivered bytes over the time from the first chunk's schedule to the
    // last completion, never more than the emulated link carries (less headers). How close
    // it comes to the link depends on the host's share, so the check is the definition.
    let link_mbps = json["main"]["rate_bps"].as_f64().unwrap() / 1e6 * 1448.0 / 1500.0;
    let chunk_bits = json["config"]["chunk_bytes"].as_f64().unwrap() * 8.0;
    let interval = &json["config"]["interval"];
    let interval_ms =
        interval["secs"].as_f64().unwrap() * 1e3 + interval["nanos"].as_f64().unwrap() / 1e6;
    for v in variants {
        assert_eq!(v["rounds"], 1);
        let run = &v["runs"][0];
        assert_eq!(run["chunks_offered"], 20);
        let chunks = run["chunks"].as_array().unwrap();
        assert_eq!(run["chunks_delivered"].as_u64().unwrap() as usize, chunks.len());
        let ms = |c: &serde_json::Value, k: &str| c[k].as_f64().unwrap();
        // Chunk `seq` is scheduled `seq` intervals after the first (which a variant that
        // drops stale chunks may not deliver).
        let first_ms = ms(&chunks[0], "scheduled_ms") - ms(&chunks[0], "seq") * interval_ms;
        let span_ms = ms(chunks.last().unwrap(), "complete_ms") - first_ms;
        let expected = chunks.len() as f64 * chunk_bits / span_ms / 1e3;
        let goodput = v["goodput_mbps"].as_f64().unwrap();
        assert!((goodput / expected - 1.0).abs() < 1e-9, "{goodput} != {expected}: {v}");
        assert!(goodput <= link_mbps * 1.01, "{goodput} above the link's {link_mbps}: {v}");
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
