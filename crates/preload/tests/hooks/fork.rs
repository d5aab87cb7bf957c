//! `fork` while another thread is inside the library: see `fork.c`. Before the library took
//! no lock a fork can inherit, each child here waited forever (its alarm killed it).

use crate::{compile, pairs, preloaded, profile_file, run, text};

const SOURCE: &str = include_str!("fork.c");

/// Both the thread's socket and the child's got the profile, and the child finished.
fn assert_both_applied(stdout: &str) {
    let mut got = pairs(stdout);
    got.sort();
    let want = [("child", "reno"), ("thread", "reno")].map(|(k, v)| (k.into(), v.into()));
    assert_eq!(got, want, "a child that deadlocked is 'killed 14' (SIGALRM):\n{stdout}");
}

#[test]
fn child_forked_while_the_profile_is_read_makes_its_own_sockets() {
    let dir = tempfile::tempdir().unwrap();
    let program = compile(dir.path(), "fork", SOURCE, &[]);
    let profile = profile_file(dir.path());
    let fifo = dir.path().join("profile.fifo");
    let status = std::process::Command::new("mkfifo").arg(&fifo).status().expect("run mkfifo");
    assert!(status.success(), "mkfifo failed");
    let (fifo, profile) = (fifo.to_str().unwrap(), profile.to_str().unwrap());
    let out = run(preloaded(&program, &["config", fifo, profile], &[("TCPTAIL_PROFILE", fifo)]));
    assert_both_applied(&text(&out.stdout));
}

#[test]
fn child_forked_while_a_log_line_is_blocked_makes_its_own_sockets() {
    let dir = tempfile::tempdir().unwrap();
    let program = compile(dir.path(), "fork", SOURCE, &[]);
    let profile = profile_file(dir.path());
    let env = [("TCPTAIL_PROFILE", profile.to_str().unwrap()), ("TCPTAIL_LOG", "1")];
    let out = run(preloaded(&program, &["stderr"], &env));
    assert_both_applied(&text(&out.stdout));
}
