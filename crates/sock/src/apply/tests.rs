use super::*;

#[test]
fn buffer_outcomes_follow_the_kernels_doubling() {
    let out =
        |req, actual, limit| buffer_outcome("SO_RCVBUF", req, actual, "net.core.rmem_max", limit);
    assert_eq!(out(1_250_000, 2_500_000, Some(4 << 20)), OptionOutcome::Applied);
    // Raised to the kernel's minimum: more than asked, not a problem.
    assert_eq!(out(1, 2304, Some(4 << 20)), OptionOutcome::Applied);
    match out(16 << 20, 8 << 20, Some(4 << 20)) {
        OptionOutcome::Capped { limit_name, limit, note } => {
            assert_eq!(limit_name, "net.core.rmem_max");
            assert_eq!(limit, 4 << 20);
            assert!(note.contains("raise net.core.rmem_max"), "{note}");
            assert!(note.contains("SO_RCVBUFFORCE"), "{note}");
        }
        other => panic!("{other:?}"),
    }
    // Below twice the request but not at the cap: something else happened.
    assert_eq!(out(16 << 20, 1 << 20, Some(4 << 20)), OptionOutcome::Mismatch);
    // The cap could not be read: inferred from the read-back, and said so.
    match out(16 << 20, 8 << 20, None) {
        OptionOutcome::Capped { limit, note, .. } => {
            assert_eq!(limit, 4 << 20);
            assert!(note.contains("could not be read"), "{note}");
        }
        other => panic!("{other:?}"),
    }
}

fn row(
    option: &str,
    requested: &str,
    actual: Option<&str>,
    outcome: OptionOutcome,
) -> OptionReport {
    OptionReport {
        option: option.into(),
        requested: requested.into(),
        actual: actual.map(Into::into),
        outcome,
        note: None,
    }
}

fn sample() -> ApplyReport {
    let mut sndbuf = row(
        "SO_SNDBUF",
        "16MiB",
        Some("8MiB"),
        OptionOutcome::Capped {
            limit_name: "net.core.wmem_max".into(),
            limit: 4194304,
            note: "capped note".into(),
        },
    );
    sndbuf.note = Some(buffer_note("SO_SNDBUF", "net.ipv4.tcp_wmem", Some("4194304")));
    ApplyReport {
        profile: "throughput".into(),
        options: vec![
            row(
                "TCP_CONGESTION",
                "cubic",
                Some("bbr"),
                OptionOutcome::NotAllowed { allowed: vec!["reno".into(), "bbr".into()] },
            ),
            row("TCP_NODELAY", "on", Some("on"), OptionOutcome::Applied),
            sndbuf,
            row(
                "TCP_CONGESTION",
                "nosuchcc",
                None,
                OptionOutcome::NotAvailable { available: vec![] },
            ),
            row("SO_BUSY_POLL", "50us", None, OptionOutcome::Unsupported),
            row("TCP_KEEPCNT", "0", None, OptionOutcome::Failed { error: "not applied".into() }),
            row("SO_PRIORITY", "3", Some("4"), OptionOutcome::Mismatch),
        ],
    }
}

#[test]
fn clean_and_problems() {
    let r = sample();
    assert!(!r.is_clean());
    let problems: Vec<_> = r.problems().map(|o| o.option.as_str()).collect();
    assert_eq!(problems.len(), 6);
    assert!(!problems.contains(&"TCP_NODELAY"));
    assert_eq!(r.option("SO_SNDBUF").unwrap().requested, "16MiB");
    let clean = ApplyReport { profile: "x".into(), options: vec![r.options[1].clone()] };
    assert!(clean.is_clean());
    assert!(ApplyReport { profile: "kernel-default".into(), options: vec![] }.is_clean());
}

#[test]
fn display_is_an_aligned_table_with_notes() {
    let text = sample().to_string();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "profile throughput: 7 option(s), 6 not as requested");
    assert!(lines[1].starts_with("  OPTION          REQUESTED  ACTUAL  OUTCOME"), "{text}");
    let outcome_col = lines[1].find("OUTCOME").unwrap();
    for line in lines.iter().skip(2).filter(|l| !l.trim_start().starts_with("note:")) {
        let b = line.as_bytes();
        assert!(b[outcome_col - 2] == b' ' && b[outcome_col - 1] == b' ', "{text}");
        assert_ne!(b[outcome_col], b' ', "outcome column misaligned:\n{text}");
    }
    assert!(text.contains("not allowed (allowed: reno, bbr)"), "{text}");
    assert!(text.contains("capped at net.core.wmem_max = 4194304"), "{text}");
    assert!(text.contains("note: capped note"), "{text}");
    assert!(text.contains("turns off the kernel's buffer autotuning"), "{text}");
    assert!(text.contains("not available (loaded: unknown)"), "{text}");
    assert!(text.contains("mismatch"), "{text}");
    let empty = ApplyReport { profile: "kernel-default".into(), options: vec![] };
    assert_eq!(empty.to_string(), "profile kernel-default: no options set (kernel defaults)\n");
}

#[test]
fn reports_survive_serde() {
    // The report crosses the wire as JSON; serde_json is not a dependency of this crate, so
    // check the derived data model through TOML (same serde, different syntax).
    let r = sample();
    let text = toml::to_string(&r).unwrap();
    assert!(text.contains("kind = \"not-allowed\""), "{text}");
    assert!(text.contains("kind = \"capped\""), "{text}");
    assert_eq!(toml::from_str::<ApplyReport>(&text).unwrap(), r);
}

/// A cache lock held elsewhere (another thread, or a holder a `fork` left behind) never makes
/// `autotune_max` wait: it reads the value directly.
#[test]
fn autotune_max_never_waits_for_the_cache_lock() {
    let expected = sysctl_words("net.ipv4.tcp_rmem").get(2).cloned();
    let held = AUTOTUNE_CACHE.lock().unwrap_or_else(|e| e.into_inner());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(autotune_max("net.ipv4.tcp_rmem")).unwrap());
    // Generous: the read is one /proc file; only a thread blocked on the lock takes this long.
    let got = rx.recv_timeout(Duration::from_secs(30)).expect("autotune_max waited for the lock");
    drop(held);
    assert_eq!(got, expected);
}
