//! A panic inside the library is caught at the hook; the program's stderr sees nothing of it
//! unless logging is on, and then one line of the library's own per panic, never the Rust
//! runtime's "thread panicked at" and backtrace note. `TCPTAIL_PRELOAD_TEST_PANIC=1` makes the
//! library panic where it would apply the profile.

use crate::{compile, host_default_cc, library_lines, pairs, preloaded, profile_file, run, text};

const SOURCE: &str = include_str!("sockets.c");

#[test]
fn a_panic_inside_the_library_is_silent_unless_logging() {
    let dir = tempfile::tempdir().unwrap();
    let program = compile(dir.path(), "sockets", SOURCE, &[]);
    let profile = profile_file(dir.path());
    let profile = profile.to_str().unwrap();
    let default_cc = host_default_cc();
    for log in ["0", "1"] {
        let env = [
            ("TCPTAIL_PROFILE", profile),
            ("TCPTAIL_PRELOAD_TEST_PANIC", "1"),
            ("TCPTAIL_LOG", log),
        ];
        let out = run(preloaded(&program, &["3"], &env));
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        let sockets = pairs(&stdout);
        assert_eq!(sockets.len(), 4, "every socket() returned a socket:\n{stdout}");
        assert!(
            sockets[1..].iter().all(|(_, cc)| *cc == default_cc),
            "the panic happened before the profile was applied:\n{stdout}"
        );
        assert!(!stderr.contains("panicked"), "the runtime's panic message leaked:\n{stderr}");
        if log == "0" {
            assert_eq!(stderr, "", "nothing on stderr without TCPTAIL_LOG");
        } else {
            let lines = library_lines(&stderr);
            assert_eq!(lines.len(), 3, "one line per caught panic:\n{stderr}");
            assert!(lines.iter().all(|l| l.contains("internal error")), "{stderr}");
            assert_eq!(lines.len(), stderr.lines().count(), "nothing else:\n{stderr}");
        }
    }
}
