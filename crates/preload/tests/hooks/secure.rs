//! A setuid program (`AT_SECURE`): the library warns once and does nothing. The program is
//! linked against the library (an absolute run path, which the dynamic linker honours in
//! secure mode, unlike `LD_PRELOAD` paths) and owned by `nobody` with the setuid bit, so that
//! root running it gets a different effective uid. A copy without the setuid bit is the
//! control: the same program does get the profile.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use crate::{LIB, compile, host_default_cc, library, library_lines, pairs, profile_file, text};

const SOURCE: &str = include_str!("sockets.c");
const NOBODY: u32 = 65534;

fn run_linked(program: &Path, profile: &Path) -> (Vec<(String, String)>, String) {
    let out = Command::new(program)
        .arg("3")
        .env("TCPTAIL_PROFILE", profile)
        .env("TCPTAIL_LOG", "1")
        .env_remove("LD_PRELOAD")
        .output()
        .expect("run the test program");
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{program:?}: {}\n{stdout}\n{stderr}", out.status);
    (pairs(&stdout), stderr)
}

#[test]
fn setuid_program_gets_one_warning_and_an_untouched_socket() {
    // SAFETY-free check of the precondition: only root can hand a file to another owner.
    let euid = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m));
    assert_eq!(euid.ok(), Some(0), "this test needs root (CI runs as root) to chown a setuid file");
    let dir = tempfile::tempdir().unwrap();
    // The dynamic linker, running as `nobody`, must reach the library and the profile.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::copy(library(), dir.path().join(LIB)).unwrap();
    let lib_dir = dir.path().to_str().unwrap();
    let link = ["-L", lib_dir, "-ltcptail_preload", &format!("-Wl,-rpath,{lib_dir}")];
    let plain = compile(dir.path(), "sockets", SOURCE, &link);
    let setuid = dir.path().join("sockets-setuid");
    std::fs::copy(&plain, &setuid).unwrap();
    std::os::unix::fs::chown(&setuid, Some(NOBODY), Some(NOBODY)).unwrap();
    std::fs::set_permissions(&setuid, std::fs::Permissions::from_mode(0o4755)).unwrap();
    let profile = profile_file(dir.path());
    let default_cc = host_default_cc();

    let (control, stderr) = run_linked(&plain, &profile);
    assert_eq!(control[0], ("at_secure".into(), "0".into()));
    assert!(
        control[1..].iter().all(|(k, v)| k == "cc" && v == "reno"),
        "the linked library applies the profile in an ordinary program: {control:?}\n{stderr}"
    );
    assert_eq!(library_lines(&stderr).len(), 3, "one log line per socket:\n{stderr}");

    let (secure, stderr) = run_linked(&setuid, &profile);
    assert_eq!(secure[0], ("at_secure".into(), "1".into()), "the setuid bit did not take");
    assert_eq!(secure.len(), 4, "{secure:?}");
    assert!(
        secure[1..].iter().all(|(k, v)| k == "cc" && *v == default_cc),
        "no profile in a setuid program (host default {default_cc}): {secure:?}"
    );
    let lines = library_lines(&stderr);
    assert_eq!(lines.len(), 1, "exactly one line, the warning:\n{stderr}");
    assert!(lines[0].contains("AT_SECURE") && lines[0].contains("doing nothing"), "{stderr}");
}
