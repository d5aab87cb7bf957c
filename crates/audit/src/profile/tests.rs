use super::*;
use proptest::prelude::*;

#[test]
fn builtins_parse_and_extend_baseline() {
    for name in builtin_names() {
        let p = load(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(p.name, name);
        assert!(p.known_bad.len() >= 9, "{name} inherits the known-bad list");
        assert!(p.setting("net.ipv4.tcp_timestamps").is_some(), "{name}");
        for s in &p.settings {
            assert!(!s.rationale.is_empty() && !s.source.is_empty(), "{name}: {}", s.key);
        }
    }
    let t = load("trading-latency").unwrap();
    assert_eq!(
        t.setting("net.ipv4.tcp_congestion_control").unwrap().want,
        Want::Exact("cubic".into())
    );
    assert_eq!(t.setting("net.core.busy_read").unwrap().scope, Scope::Host);
    assert_eq!(t.host.governor.as_deref(), Some("performance"));
    let b = load("bulk-throughput").unwrap();
    assert_eq!(b.setting("net.core.default_qdisc").unwrap().want, Want::Exact("fq".into()));
}

#[test]
fn known_bad_covers_the_seed_verdicts() {
    let p = load("baseline").unwrap();
    let has = |key: &str, value: Option<&str>| {
        p.known_bad.iter().any(|k| k.key == key && k.value.as_deref() == value)
    };
    assert!(has("net.ipv4.tcp_fallback_to_cubic", None));
    assert!(has("net.ipv4.tcp_frto", Some("0")));
    assert!(has("net.ipv4.tcp_tw_recycle", None));
    assert!(has("net.ipv4.tcp_low_latency", None));
    assert!(has("net.ipv4.tcp_rmem", Some("4096 262144 16777216")));
    let rmem_max = p.known_bad.iter().find(|k| k.key == "net.core.rmem_max").unwrap();
    assert_eq!(rmem_max.unless_set.as_deref(), Some("net.ipv4.tcp_rmem"));
}

fn err(text: &str) -> Error {
    parse_str("user.toml", text).expect_err("must not parse")
}

#[test]
fn syntax_errors_name_file_and_line() {
    let e = err("name = \"x\"\n\n[[setting]]\nkey = \"net.ipv4.tcp_ecn\"\nvalu = 1\n");
    let Error::ProfileSyntax { file, line, message } = &e else { panic!("{e:?}") };
    assert_eq!(file, Path::new("user.toml"));
    assert_eq!(*line, 5, "{message}");
    assert!(e.to_string().starts_with("user.toml:5: "), "{e}");
    let e = err("name = \"x\"\nscope = = 1\n");
    assert!(matches!(e, Error::ProfileSyntax { line: 2, .. }), "{e:?}");
}

#[test]
fn semantic_errors_name_file_line_and_key() {
    let cases = [
        (
            "[[setting]]\nkey = \"net.ipv4.tcp_ecn\"\nrationale = \"r\"\nscope = \"netns\"\n",
            "exactly one of",
        ),
        (
            "[[setting]]\nkey = \"net.ipv4.tcp_ecn\"\nvalue = 1\nat_least = 2\nrationale = \"r\"\nscope = \"netns\"\n",
            "exactly one of",
        ),
        (
            "[[setting]]\nkey = \"net.ipv4.tcp_ecn\"\nvalue = 1\nrationale = \"r\"\n",
            "missing `scope`",
        ),
        (
            "[[setting]]\nkey = \"net.core.busy_poll\"\nvalue = 50\nscope = \"netns\"\nrationale = \"r\"\n",
            "host-wide",
        ),
        (
            "[[setting]]\nkey = \"net.ipv4.tcp_ecn\"\nvalue = 1\nscope = \"netns\"\n",
            "missing `rationale`",
        ),
        (
            "[[setting]]\nkey = \"Net..x\"\nvalue = 1\nscope = \"netns\"\nrationale = \"r\"\n",
            "not a valid sysctl key",
        ),
    ];
    for (body, want) in cases {
        let text = format!("name = \"x\"\n\n{body}");
        let e = err(&text);
        let Error::Profile { line, key, message, .. } = &e else { panic!("{e:?}") };
        assert_eq!(*line, 4, "{body}: {e}");
        assert!(message.contains(want), "{body}: {e}");
        assert!(key.starts_with("net") || key.starts_with("Net"), "{key}");
    }
    let dup = "name = \"x\"\n[[setting]]\nkey = \"net.ipv4.tcp_ecn\"\nvalue = 1\nscope = \"netns\"\nrationale = \"r\"\n[[setting]]\nkey = \"net.ipv4.tcp_ecn\"\nvalue = 2\nscope = \"netns\"\nrationale = \"r\"\n";
    let e = err(dup);
    assert!(
        matches!(&e, Error::Profile { line: 8, key, .. } if key == "net.ipv4.tcp_ecn"),
        "{e:?}"
    );
}

#[test]
fn user_profile_extends_and_overrides() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("desk.toml");
    std::fs::write(
        &path,
        r#"name = "desk"
extends = "trading-latency"

[host]
governor = "ondemand"

[[setting]]
key = "net.ipv4.tcp_congestion_control"
value = "bbr"
scope = "netns"
rationale = "we measured it"
source = "our bench"

[[setting]]
key = "kernel.numa_balancing"
remove = true

[[setting]]
key = "net.ipv4.tcp_notsent_lowat"
at_most = 131072
scope = "netns"
rationale = "bound the unsent queue"
"#,
    )
    .unwrap();
    let p = load(path.to_str().unwrap()).unwrap();
    let base = load("trading-latency").unwrap();
    assert_eq!(p.name, "desk");
    assert_eq!(
        p.setting("net.ipv4.tcp_congestion_control").unwrap().want,
        Want::Exact("bbr".into())
    );
    assert!(p.setting("kernel.numa_balancing").is_none());
    assert!(p.setting("net.ipv4.tcp_slow_start_after_idle").is_some());
    assert_eq!(p.settings.len(), base.settings.len());
    assert_eq!(p.host.governor.as_deref(), Some("ondemand"));
    assert_eq!(p.host.irqbalance, Some(false), "inherited");
    assert_eq!(p.known_bad, base.known_bad);
    // A user file extending another user file, relative to it.
    std::fs::write(dir.path().join("child.toml"), "name = \"child\"\nextends = \"desk.toml\"\n")
        .unwrap();
    let c = load(dir.path().join("child.toml").to_str().unwrap()).unwrap();
    assert_eq!(c.settings, p.settings);
}

#[test]
fn unknown_parent_and_profile() {
    let e = err("name = \"x\"\nextends = \"nope\"\n");
    assert!(e.to_string().contains("unknown profile \"nope\""), "{e}");
    let e = load("nope").unwrap_err();
    assert!(matches!(e, Error::UnknownProfile { .. }));
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("a.toml");
    std::fs::write(&p, "name = \"a\"\nextends = \"nope\"\n").unwrap();
    let e = load(p.to_str().unwrap()).unwrap_err();
    assert!(matches!(&e, Error::Profile { line: 2, key, .. } if key == "extends"), "{e:?}");
    std::fs::write(&p, "name = \"a\"\nextends = \"a.toml\"\n").unwrap();
    assert!(load(p.to_str().unwrap()).unwrap_err().to_string().contains("cycle"));
}

#[test]
fn wants_and_targets() {
    let cap = Want::AtLeast { field: 2, value: 33554432 };
    assert_eq!(cap.satisfied_by("4096 131072 33554432"), Some(true));
    assert_eq!(cap.satisfied_by("4096 262144 16777216"), Some(false));
    assert_eq!(cap.target(Some("4096 262144 16777216")).as_deref(), Some("4096 262144 33554432"));
    assert_eq!(cap.target(Some("4096 131072 67108864")), None);
    let most = Want::AtMost { field: 0, value: 30 };
    assert_eq!(most.target(Some("7200")).as_deref(), Some("30"));
    assert_eq!(most.satisfied_by("cubic"), None);
    assert_eq!(Want::Exact("1024 65535".into()).satisfied_by("1024\t65535\n"), Some(true));
    assert_eq!(cap.to_string(), ">= 33554432 (field 2)");
}

proptest! {
    #[test]
    fn parsing_never_panics(text in "\\PC{0,300}") {
        let _ = parse_str("fuzz.toml", &text);
    }

    #[test]
    fn a_target_satisfies_its_bound(
        fields in proptest::collection::vec(0u64..1 << 40, 1..4),
        field in 0usize..4,
        value in 0u64..1 << 40,
        at_least: bool,
    ) {
        let want = if at_least { Want::AtLeast { field, value } } else { Want::AtMost { field, value } };
        let current = fields.iter().map(u64::to_string).collect::<Vec<_>>().join(" ");
        match want.target(Some(&current)) {
            None => prop_assert_eq!(want.satisfied_by(&current), Some(true)),
            Some(t) => {
                prop_assert_eq!(want.satisfied_by(&t), Some(true));
                // Other fields are kept.
                for (i, f) in fields.iter().enumerate() {
                    if i != field {
                        prop_assert_eq!(t.split(' ').nth(i).map(str::to_owned), Some(f.to_string()));
                    }
                }
            }
        }
    }
}

/// A TOML basic string holding `s` exactly (control characters escaped).
fn toml_string(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[test]
fn text_that_reaches_sysctl_d_must_be_one_line() {
    let setting = |field: &str, value: &str| {
        let mut fields = [
            ("key", toml_string("net.ipv4.tcp_ecn")),
            ("value", toml_string("1")),
            ("scope", toml_string("netns")),
            ("rationale", toml_string("r")),
            ("source", toml_string("s")),
        ];
        fields.iter_mut().find(|(f, _)| *f == field).expect("a setting field").1 =
            toml_string(value);
        let body: Vec<String> = fields.iter().map(|(f, v)| format!("{f} = {v}")).collect();
        format!("name = \"x\"\n\n[[setting]]\n{}\n", body.join("\n"))
    };
    let injected = "1\nnet.core.somaxconn = 1";
    // (profile text, line, key named, words in the message)
    let cases = [
        (
            setting("rationale", "ok\nnet.ipv4.tcp_ecn = 0"),
            7,
            "net.ipv4.tcp_ecn",
            "`rationale` contains a newline",
        ),
        (
            setting("source", "seed\r\nkernel.sysrq = 1"),
            8,
            "net.ipv4.tcp_ecn",
            "`source` contains a carriage return",
        ),
        (setting("rationale", "a\u{2028}b"), 7, "net.ipv4.tcp_ecn", "line separator (U+2028)"),
        (setting("rationale", "bell\u{7}"), 7, "net.ipv4.tcp_ecn", "control character (U+0007)"),
        (setting("value", injected), 5, "net.ipv4.tcp_ecn", "the value contains a newline"),
        (setting("value", "0 = 1"), 5, "net.ipv4.tcp_ecn", "contains `=`"),
        (setting("value", "  "), 5, "net.ipv4.tcp_ecn", "the value is empty"),
        (
            format!("name = {}\n", toml_string("x\nnet.core.somaxconn = 1")),
            1,
            "name",
            "`name` contains a newline",
        ),
        ("name = \"a b\"\n".to_owned(), 1, "name", "is not a profile name"),
        ("name = \"-x\"\n".to_owned(), 1, "name", "is not a profile name"),
        ("name = \"x=1\"\n".to_owned(), 1, "name", "is not a profile name"),
        (
            "name = \"x\"\ndescription = \"\"\"\none\ntwo\"\"\"\n".to_owned(),
            2,
            "description",
            "newline",
        ),
        (
            format!("name = \"x\"\n[host]\ngovernor = {}\n", toml_string("performance\n")),
            3,
            "host",
            "`governor` contains a newline",
        ),
        (
            "name = \"x\"\n[[known_bad]]\nkey = \"net.ipv4.tcp_frto\"\nreason = \"a\\nb\"\n"
                .to_owned(),
            4,
            "net.ipv4.tcp_frto",
            "`reason` contains a newline",
        ),
    ];
    for (text, line, key, words) in &cases {
        let e = err(text);
        let Error::Profile { file, line: l, key: k, message } = &e else { panic!("{text}: {e:?}") };
        assert_eq!(file, Path::new("user.toml"));
        assert_eq!((l, k.as_str()), (line, *key), "{text}: {e}");
        assert!(message.contains(words), "{text}: {e}");
        assert!(e.to_string().starts_with(&format!("user.toml:{line}: ")), "{e}");
    }
    // A tab is a tab, in a comment or between a multi-value's fields.
    let p = parse_str("user.toml", &setting("value", "4096\t131072")).unwrap();
    assert_eq!(p.settings[0].want, Want::Exact("4096 131072".into()));
    parse_str("user.toml", &setting("rationale", "a\tb")).unwrap();
}

proptest! {
    /// Whatever text a profile carries, it is refused with its file and line, or every piece of
    /// it stays on its own line of the rendered sysctl.d file: the file sets exactly the
    /// profile's keys to exactly its values.
    #[test]
    fn no_profile_text_can_add_a_line_to_the_file(
        name in "[a-zA-Z0-9 =#;\n\r\u{2028}._-]{0,12}",
        rationale in "[a-z =#;\n\r\t\u{0}\u{85}\u{2028}]{0,20}",
        source in "[a-z =#;\n\r\t\u{b}\u{2029}]{0,20}",
        value in "[0-9a-z =#;\n\r\t\u{c}]{0,12}",
    ) {
        let text = format!(
            "name = {}\n[[setting]]\nkey = \"net.ipv4.tcp_ecn\"\nvalue = {}\nscope = \"netns\"\nrationale = {}\nsource = {}\n",
            toml_string(&name), toml_string(&value), toml_string(&rationale), toml_string(&source)
        );
        let p = match parse_str("prop.toml", &text) {
            Err(Error::Profile { file, line, .. }) => {
                prop_assert_eq!(file, PathBuf::from("prop.toml"));
                prop_assert!((1..=7).contains(&line));
                return Ok(());
            }
            Err(e) => panic!("only Profile errors are expected here: {e:?}\n{text}"),
            Ok(p) => p,
        };
        let plan = crate::tune::Plan {
            profile: p.name.clone(),
            entries: p.settings.iter().map(|s| crate::tune::Entry {
                key: s.key.clone(),
                scope: s.scope,
                current: Some("2".into()),
                value: s.want.to_string(),
                changes: true,
                rationale: s.rationale.clone(),
                source: s.source.clone(),
            }).collect(),
            skipped: vec![],
            side_effects: vec![],
        };
        let file = crate::tune::render_file(&plan);
        prop_assert_eq!(file.lines().count(), 1 + 2 * plan.entries.len());
        let lines = crate::host::parse_config("/f.conf", &file);
        let set: Vec<(String, String)> = lines.into_iter().map(|l| (l.key, l.value)).collect();
        prop_assert_eq!(set, vec![("net.ipv4.tcp_ecn".to_owned(), normalize(&value))]);
        prop_assert!(plan.check_text().is_ok());
    }
}
