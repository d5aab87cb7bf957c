use std::time::Duration;

use super::*;

fn parse(text: &str) -> Result<Profile, ProfileError> {
    Profile::from_toml(text, Path::new("profiles/exchange.toml"))
}

/// The error and its message, which must name the file and the given line.
fn fails(text: &str, line: usize) -> (ProfileError, String) {
    let e = parse(text).expect_err("should not parse");
    let msg = e.to_string();
    assert!(msg.starts_with(&format!("profiles/exchange.toml:{line}:")), "{msg}");
    (e, msg)
}

const EXAMPLE: &str = r#"
# exchange.toml
extends = "trading"
name = "exchange"
congestion = "cubic"
nodelay = true
quickack = "rearm"
bdp = "1gbit x 500us"
send_buffer = "4MiB"
keepalive = { idle = "30s", interval = "3s", count = 3 }
user_timeout = "5s"
reuse_address = true
reuse_port = false
busy_poll = "50us"
notsent_lowat = "16KiB"
priority = 6
"#;

#[test]
fn the_documented_example_parses() {
    let p = parse(EXAMPLE).unwrap();
    assert_eq!(p.name, "exchange");
    assert_eq!(p.congestion.as_deref(), Some("cubic"));
    assert_eq!(p.nodelay, Some(true));
    assert_eq!(p.quickack, QuickAck::Rearm);
    assert_eq!(p.send_buffer, Some(BufferSize::Bytes(ByteSize(4 << 20))));
    // `bdp` fills only the buffer the file does not give.
    assert_eq!(p.receive_buffer.unwrap().bytes(), ByteSize(62_500));
    let k = p.keepalive.unwrap();
    assert_eq!((k.idle, k.interval, k.count), (Duration::from_secs(30), Duration::from_secs(3), 3));
    assert_eq!(p.user_timeout, Some(Duration::from_secs(5)));
    assert_eq!((p.reuse_address, p.reuse_port), (Some(true), Some(false)));
    assert_eq!(p.busy_poll, Some(Duration::from_micros(50)));
    assert_eq!(p.notsent_lowat, Some(ByteSize(16 << 10)));
    assert_eq!(p.priority, Some(6));
}

#[test]
fn the_module_doc_example_parses() {
    let doc = include_str!("../profile_file.rs");
    let start = doc.find("//! ```toml\n").unwrap() + "//! ```toml\n".len();
    let end = start + doc[start..].find("//! ```").unwrap();
    let text: String =
        doc[start..end].lines().map(|l| format!("{}\n", &l[3.min(l.len())..])).collect();
    let p = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(p.name, "exchange");
}

#[test]
fn name_defaults_to_the_file_stem_and_extends_starts_from_a_builtin() {
    let p = parse("").unwrap();
    assert_eq!(p, Profile::named("exchange"));
    let p = parse("extends = \"trading\"\nnodelay = false").unwrap();
    assert_eq!(p.name, "exchange");
    assert_eq!(p.nodelay, Some(false));
    assert_eq!(p.congestion.as_deref(), Some("cubic"), "inherited");
    // A partial keepalive table completes itself from the base.
    let p = parse("extends = \"trading\"\n[keepalive]\ncount = 5\n").unwrap();
    let k = p.keepalive.unwrap();
    assert_eq!((k.idle, k.count), (Duration::from_secs(10), 5));
}

#[test]
fn buffers_take_every_spelling() {
    let b = |t: &str| parse(t).unwrap().send_buffer.unwrap();
    assert_eq!(b("send_buffer = 4194304"), BufferSize::Bytes(ByteSize(4194304)));
    assert_eq!(b("send_buffer = \"4MiB\""), BufferSize::Bytes(ByteSize(4194304)));
    assert_eq!(b("send_buffer = { bytes = \"64KiB\" }"), BufferSize::Bytes(ByteSize(65536)));
    let bdp = b("send_buffer = { bdp = \"10gbit x 1ms\" }");
    assert!(matches!(bdp, BufferSize::Bdp(_)));
    assert_eq!(bdp.bytes(), ByteSize(1_250_000));
    let p = parse("bdp = \"10gbit x 1ms\"").unwrap();
    assert_eq!(p.send_buffer, Some(bdp));
    assert_eq!(p.receive_buffer, Some(bdp));
    // Explicit wins over the shorthand wherever it appears.
    let p = parse("receive_buffer = 8192\nbdp = \"10gbit x 1ms\"").unwrap();
    assert_eq!(p.receive_buffer, Some(BufferSize::Bytes(ByteSize(8192))));
    assert_eq!(p.send_buffer, Some(bdp));
}

#[test]
fn syntax_errors_name_the_line() {
    let (e, msg) = fails("nodelay = true\nsend_buffer = \n", 2);
    assert!(matches!(e, ProfileError::Syntax { .. }), "{msg}");
    let (e, _) = fails("nodelay = true\nnodelay = false\n", 2);
    assert!(matches!(e, ProfileError::Syntax { .. }));
}

#[test]
fn unknown_keys_suggest_and_list() {
    let (e, msg) = fails("nodelay = true\nsndbuf = \"4MiB\"\n", 2);
    assert!(
        matches!(&e, ProfileError::UnknownKey { key, suggestion: Some("send_buffer"), .. }
            if key == "sndbuf"),
        "{msg}"
    );
    assert!(msg.contains("unknown key `sndbuf` (did you mean `send_buffer`?)"), "{msg}");
    assert!(msg.contains("valid keys: name, extends, congestion"), "{msg}");
    let (_, msg) = fails("\n\nnodealy = true", 3);
    assert!(msg.contains("did you mean `nodelay`?"), "{msg}");
    assert!(msg.starts_with("profiles/exchange.toml:3:1:"), "{msg}");
    let (_, msg) = fails("keepalive = { idle = \"10s\", intervall = \"3s\", count = 3 }", 1);
    assert!(msg.contains("unknown key `keepalive.intervall` (did you mean `interval`?)"), "{msg}");
    assert!(msg.contains("valid keys: idle, interval, count"), "{msg}");
    let (_, msg) = fails("send_buffer = { rate = \"1gbit\" }", 1);
    assert!(msg.contains("`send_buffer.rate`; valid keys: bdp, bytes"), "{msg}");
    let (_, msg) = fails("frobnicate = 1", 1);
    assert!(msg.contains("unknown key `frobnicate`; valid keys"), "{msg}");
    let (_, msg) = fails("keepidle = \"10s\"", 1);
    assert!(msg.contains("did you mean `keepalive.idle`?"), "{msg}");
}

#[test]
fn wrong_types_say_what_is_expected() {
    let (e, msg) = fails("\nnodelay = \"yes\"", 2);
    assert!(matches!(e, ProfileError::WrongType { found: "string", .. }));
    assert!(msg.ends_with("`nodelay` must be true or false, found string"), "{msg}");
    let (_, msg) = fails("user_timeout = 5", 1);
    assert!(msg.contains("`user_timeout` must be a duration with a unit"), "{msg}");
    let (_, msg) = fails("send_buffer = 4.5", 1);
    assert!(msg.contains("`send_buffer` must be a size"), "{msg}");
    let (_, msg) = fails("keepalive = 10", 1);
    assert!(msg.contains("`keepalive` must be a table"), "{msg}");
    let (_, msg) = fails("keepalive = { idle = \"10s\", interval = \"3s\", count = \"3\" }", 1);
    assert!(msg.contains("`keepalive.count` must be an integer"), "{msg}");
    let (_, msg) = fails("priority = \"high\"", 1);
    assert!(msg.contains("`priority` must be an integer"), "{msg}");
}

#[test]
fn bad_unit_values_carry_the_units_message() {
    let (e, msg) = fails("busy_poll = \"50 parsecs\"", 1);
    assert!(matches!(e, ProfileError::BadValue { .. }));
    assert!(msg.contains("`busy_poll`: invalid duration '50 parsecs': unknown unit"), "{msg}");
    let (_, msg) = fails("send_buffer = \"10gbit x 1ms\"", 1);
    assert!(msg.contains("invalid size"), "{msg}");
    assert!(msg.contains("write { bdp = \"10gbit x 1ms\" }"), "{msg}");
    let (_, msg) = fails("bdp = \"10gbit\"", 1);
    assert!(msg.contains("`bdp`: invalid bandwidth-delay product"), "{msg}");
    let (_, msg) = fails("[send_buffer]\nbdp = \"10 x 1ms\"", 2);
    assert!(msg.contains("`send_buffer.bdp`: invalid bit rate '10'"), "{msg}");
}

#[test]
fn semantic_checks_point_at_the_value() {
    let (e, msg) = fails("[keepalive]\nidle = \"10s\"\ninterval = \"3s\"\ncount = 0\n", 4);
    assert!(matches!(e, ProfileError::Invalid { .. }));
    assert!(
        msg.starts_with("profiles/exchange.toml:4:9: `keepalive.count`: must be at least 1"),
        "{msg}"
    );
    let (_, msg) = fails("keepalive = { idle = \"500ms\", interval = \"3s\", count = 3 }", 1);
    assert!(msg.contains("`keepalive.idle`: 500ms is less than a second"), "{msg}");
    let (_, msg) = fails("\ncongestion = \"CUBIC\"", 2);
    assert!(msg.contains("did you mean 'cubic'"), "{msg}");
    let (_, msg) = fails("congestion = \"cubic; rm -rf\"", 1);
    assert!(msg.contains("not a congestion control name"), "{msg}");
    let (_, msg) = fails("quickack = \"always\"", 1);
    assert!(msg.contains("use off, once or rearm"), "{msg}");
    let (_, msg) = fails("user_timeout = \"500us\"", 1);
    assert!(msg.contains("whole number of milliseconds"), "{msg}");
    let (_, msg) = fails("send_buffer = -1", 1);
    assert!(msg.contains("not a size in bytes"), "{msg}");
    let (_, msg) = fails("bdp = \"100gbit x 1s\"", 1);
    assert!(msg.contains("`bdp`: for send_buffer:"), "{msg}");
    let (_, msg) = fails("send_buffer = { bdp = \"1gbit x 1ms\", bytes = 5 }", 1);
    assert!(msg.contains("either bdp or bytes"), "{msg}");
    let (_, msg) = fails("priority = -1", 1);
    assert!(msg.contains("not between 0 and"), "{msg}");
    let (_, msg) = fails("name = \"  \"", 1);
    assert!(msg.contains("must not be empty"), "{msg}");
}

#[test]
fn missing_keepalive_keys_without_a_base() {
    let (e, msg) = fails("\n[keepalive]\nidle = \"10s\"\n", 2);
    assert!(
        matches!(&e, ProfileError::MissingKey { key, .. } if key == "keepalive.interval"),
        "{msg}"
    );
    assert!(msg.contains("extend a profile that has a keepalive"), "{msg}");
}

#[test]
fn unknown_extends_lists_the_builtins() {
    let (e, msg) = fails("\nextends = \"hft\"", 2);
    assert!(matches!(e, ProfileError::UnknownBuiltin { at: Some(_), .. }));
    assert!(
        msg.ends_with(
            "unknown built-in profile `hft` (built-ins: trading, throughput, kernel-default)"
        ),
        "{msg}"
    );
}

#[test]
fn the_first_problem_in_the_file_is_reported() {
    let (_, msg) = fails("nodelay = 1\nzzz = 2\naaa = 3\n", 1);
    assert!(msg.contains("`nodelay` must be"), "{msg}");
    let (_, msg) = fails("zzz = 2\naaa = 3\n", 1);
    assert!(msg.contains("`zzz`"), "{msg}");
}

#[test]
fn columns_count_characters() {
    let (_, msg) = fails("name = \"é\"\nnodelay = \"ü\"", 2);
    assert!(msg.starts_with("profiles/exchange.toml:2:11:"), "{msg}");
}

#[test]
fn serialised_profiles_load_back() {
    for name in Profile::builtin_names() {
        let p = Profile::builtin(name).unwrap();
        let text = toml::to_string(&p).unwrap();
        let back = Profile::from_toml(&text, Path::new("x.toml"))
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        assert_eq!(back, p, "{text}");
    }
}

#[test]
fn suggestions_stay_close() {
    assert_eq!(suggest("send-buffer", TOP_KEYS, true), Some("send_buffer"));
    assert_eq!(suggest("NODELAY", TOP_KEYS, true), Some("nodelay"));
    assert_eq!(suggest("zzzzzzzz", TOP_KEYS, true), None);
    assert_eq!(suggest("sndbuf", KEEPALIVE_KEYS, false), None);
    assert_eq!(edit_distance("kitten", "sitting"), 3);
}
