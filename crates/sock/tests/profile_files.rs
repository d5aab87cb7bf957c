//! Profiles loaded the way users load them: by built-in name or from a file on disk, and a
//! property test that no input makes the loader panic.

use std::path::Path;

use proptest::prelude::*;
use tcptail_sock::profile_file::ProfileError;
use tcptail_sock::{BufferSize, Profile, QuickAck};
use tcptail_units::ByteSize;

#[test]
fn builtin_names_load() {
    for name in Profile::builtin_names() {
        assert_eq!(Profile::load(name).unwrap(), Profile::builtin(name).unwrap());
    }
}

#[test]
fn unknown_builtin_lists_the_builtins() {
    let e = Profile::load("hft").unwrap_err();
    assert!(matches!(e, ProfileError::UnknownBuiltin { at: None, .. }));
    assert_eq!(
        e.to_string(),
        "unknown built-in profile `hft` (built-ins: trading, throughput, kernel-default; or give \
         a path to a .toml file)"
    );
}

#[test]
fn a_file_loads_with_its_stem_as_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("colo-10g.toml");
    std::fs::write(
        &path,
        "extends = \"trading\"\nquickack = \"once\"\nsend_buffer = { bdp = \"10gbit x 2ms\" }\n",
    )
    .unwrap();
    let p = Profile::load(path.to_str().unwrap()).unwrap();
    assert_eq!(p.name, "colo-10g");
    assert_eq!(p.quickack, QuickAck::Once);
    assert_eq!(p.send_buffer.unwrap().bytes(), ByteSize(2_500_000));
    assert_eq!(p.receive_buffer.unwrap().bytes(), ByteSize(1_250_000), "inherited");
    assert_eq!(Profile::load_file(&path).unwrap(), p);
}

#[test]
fn errors_in_a_file_name_the_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad.toml");
    std::fs::write(
        &path,
        "nodelay = true\n\n[keepalive]\nidle = \"10s\"\ninterval = \"3s\"\ncount = 0\n",
    )
    .unwrap();
    let msg = Profile::load(path.to_str().unwrap()).unwrap_err().to_string();
    let want = format!("{}:6:9: `keepalive.count`: must be at least 1", path.display());
    assert!(msg.starts_with(&want), "{msg}");
}

#[test]
fn unreadable_files_say_path_and_os_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.toml");
    let e = Profile::load(missing.to_str().unwrap()).unwrap_err();
    assert!(matches!(&e, ProfileError::Unreadable { path, .. } if path == &missing));
    let msg = e.to_string();
    assert!(msg.contains(&missing.display().to_string()), "{msg}");
    assert!(msg.contains("No such file or directory"), "{msg}");

    let e = Profile::load_file(dir.path()).unwrap_err();
    assert!(e.to_string().contains("Is a directory"), "{e}");

    let binary = dir.path().join("binary.toml");
    std::fs::write(&binary, [0xff, 0xfe, 0x00]).unwrap();
    let e = Profile::load_file(&binary).unwrap_err();
    assert!(matches!(e, ProfileError::Unreadable { .. }), "{e}");
}

#[test]
fn builtins_written_out_load_back() {
    let dir = tempfile::tempdir().unwrap();
    for name in Profile::builtin_names() {
        let p = Profile::builtin(name).unwrap();
        let path = dir.path().join(format!("{name}.toml"));
        std::fs::write(&path, toml::to_string(&p).unwrap()).unwrap();
        assert_eq!(Profile::load_file(&path).unwrap(), p);
    }
    let p = Profile::builtin("throughput").unwrap();
    assert_eq!(p.send_buffer, Some(BufferSize::Bytes(ByteSize(16 << 20))));
}

/// TOML-ish lines: real keys and near-misses, with values of every type, plus raw noise.
fn tomlish() -> impl Strategy<Value = String> {
    let key = prop_oneof![
        prop::sample::select(vec![
            "name",
            "extends",
            "congestion",
            "nodelay",
            "quickack",
            "bdp",
            "send_buffer",
            "receive_buffer",
            "keepalive",
            "user_timeout",
            "reuse_address",
            "reuse_port",
            "busy_poll",
            "notsent_lowat",
            "priority",
            "keepalive.idle",
            "keepalive.count",
            "send_buffer.bdp",
            "sndbuf",
            "idle",
            "count",
            "interval",
            "bytes",
        ])
        .prop_map(str::to_string),
        "[a-z_.]{1,12}",
    ];
    let value = prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<bool>().prop_map(|b| b.to_string()),
        "-?[0-9]{1,25}".prop_map(|s| s),
        "[0-9.]{1,6}(ns|us|ms|s|min|h|KiB|MiB|GB|gbit|x|)".prop_map(|s| format!("\"{s}\"")),
        "[0-9]{1,4}(gbit|mbit) x [0-9]{1,4}(ms|us|s)".prop_map(|s| format!("\"{s}\"")),
        prop::sample::select(vec![
            "\"trading\"",
            "\"throughput\"",
            "\"cubic\"",
            "\"rearm\"",
            "\"once\"",
            "{}",
            "{ bdp = \"10gbit x 1ms\" }",
            "{ bytes = 5 }",
            "{ bdp = 1, bytes = 2 }",
            "{ idle = \"10s\", interval = \"3s\", count = 3 }",
            "{ count = 0 }",
            "[1, 2]",
            "1979-05-27",
            "inf",
            "nan",
            "1e400",
            "\"\\u00e9\"",
            "{ a = { b = { c = 1 } } }",
        ])
        .prop_map(str::to_string),
        "\\PC{0,20}",
    ];
    let line = prop_oneof![
        4 => (key.clone(), value).prop_map(|(k, v)| format!("{k} = {v}")),
        1 => key.prop_map(|k| format!("[{k}]")),
        1 => "\\PC{0,30}",
    ];
    prop::collection::vec(line, 0..12).prop_map(|lines| lines.join("\n"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    #[test]
    fn the_loader_never_panics(text in tomlish()) {
        match Profile::from_toml(&text, Path::new("p.toml")) {
            Ok(p) => prop_assert!(p.validate().is_ok(), "loaded an invalid profile from {text:?}"),
            Err(e) => {
                let msg = e.to_string();
                let located = msg.starts_with("p.toml:");
                prop_assert!(located, "{msg}");
            }
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        let text = String::from_utf8_lossy(&bytes);
        let _ = Profile::from_toml(&text, Path::new("p.toml"));
    }
}
