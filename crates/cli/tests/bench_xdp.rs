//! The real `tcptail` binary with `bench local --engine af_xdp` (issue 16 §5): AF_XDP beside
//! kernel UDP on a veth pair between the throwaway namespaces the run creates and removes;
//! clear errors without root, for the subcommands that cannot run it, and for flags it has no
//! use for. Needs root, as CI runs (the lab lock checks it and fails otherwise).

mod common;

use std::process::Command;

use serde_json::Value;

use common::{bin, lab_lock, spawn, text};

fn num(v: &Value) -> f64 {
    v.as_f64().unwrap_or_else(|| panic!("not a number: {v}"))
}

#[test]
fn af_xdp_runs_beside_kernel_udp_in_namespaces_it_removes() {
    let _lab = lab_lock();
    for spin in [false, true] {
        let mut args = vec!["bench", "local", "--engine", "af_xdp", "--json"];
        // Two spinning ends on a loaded two-CPU machine get short, rare time slices: a longer
        // run, so that each row has answers to account for.
        args.extend(["--duration", if spin { "1s" } else { "400ms" }, "--warmup", "50ms"]);
        if spin {
            // Two busy-polling ends must not share a CPU.
            args.extend(["--cpu", "0", "--server-cpu", "1"]);
            args.push("--spin");
        }
        let done = common::finish(spawn(&args), std::time::Duration::from_secs(60));
        let (stdout, stderr) = (&done.stdout, &done.stderr);
        if !done.status.success()
            && (stderr.contains("built without") || stderr.contains("Address family"))
        {
            eprintln!("SKIPPED: this kernel lacks AF_XDP or XDP: {stderr}");
            return;
        }
        assert!(done.status.success(), "{stdout}{stderr}");
        assert!(done.leftovers.is_empty(), "namespaces left: {:?}", done.leftovers);
        let v: Value = serde_json::from_str(stdout).expect("JSON on stdout");
        assert_eq!(v["engine"], "af_xdp");
        assert_eq!(v["spin"], spin);
        let rows = v["rows"].as_array().expect("rows");
        assert_eq!(rows.len(), 2, "{v}");
        assert_eq!(
            (&rows[0]["engine"], &rows[1]["engine"]),
            (&"af_xdp".into(), &"kernel_udp".into())
        );
        // What this test judges is the engine's accounting and its kicks, not the host's speed
        // (a loaded CI machine gave one spinning row a single answer in 400 ms): every row must
        // have answers, each one counted once.
        for row in rows {
            let answered = row["requests"].as_u64().unwrap();
            assert!(answered >= 1, "{row}");
            let count = row["latency_us"]["count"].as_u64().unwrap();
            assert_eq!(count, answered + row["lost"].as_u64().unwrap(), "{row}");
            assert!(num(&row["latency_us"]["p50"]) > 0.0, "{row}");
        }
        // The seed's point: a sendto() kick per request and per response.
        let kicks = num(&rows[0]["kicks_per_request"]);
        assert!((1.95..=2.05).contains(&kicks), "{kicks} kicks per request");
        assert!(rows[1]["kicks_per_request"].is_null());
        assert!(num(&rows[0]["kick_us"]["p50"]) > 0.0);
        let ratio = num(&v["p50_ratio"]);
        let p50 = |i: usize| num(&rows[i]["latency_us"]["p50"]);
        assert!((ratio - p50(0) / p50(1)).abs() < 1e-9, "{v}");
    }
    // The human form: one row per engine and the ratio line.
    let out = Command::new(bin())
        .args(["bench", "local", "--engine", "af_xdp", "--duration", "200ms", "--warmup", "20ms"])
        .output()
        .unwrap();
    let stdout = text(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", text(&out.stderr));
    for line in ["AF_XDP  ", "kernel UDP  ", "AF_XDP / kernel UDP: p50 ", "sendto() kick"] {
        assert!(stdout.contains(line), "no {line:?} in:\n{stdout}");
    }
}

#[test]
fn without_root_the_error_names_what_is_missing() {
    let _lab = lab_lock();
    // Nobody, with no capabilities.
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"])
        .arg(bin())
        .args(["bench", "local", "--engine", "af_xdp", "--duration", "100ms"])
        .output()
        .expect("setpriv (util-linux)");
    assert_eq!(out.status.code(), Some(1), "{}{}", text(&out.stdout), text(&out.stderr));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: AF_XDP is not available: "), "{err}");
    assert!(err.contains("needs root"), "{err}");
    assert!(text(&out.stdout).is_empty());
}

#[test]
fn af_xdp_elsewhere_or_with_tcp_flags_is_refused_by_name() {
    let cases: [(&[&str], &str); 4] = [
        (
            &["bench", "client", "127.0.0.1:9", "--engine", "af_xdp"],
            "--engine af_xdp runs both ends itself",
        ),
        (&["bench", "server", "--engine", "af_xdp"], "use `tcptail bench local --engine af_xdp`"),
        (
            &["bench", "local", "--engine", "af_xdp", "--connections", "4"],
            "--connections does not apply to --engine af_xdp",
        ),
        (&["bench", "local", "--engine", "af_xdp", "--cc", "reno"], "--cc does not apply"),
    ];
    for (args, expected) in cases {
        let out = Command::new(bin()).args(args).output().unwrap();
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(err.contains(expected), "{args:?}: {err}");
    }
}
