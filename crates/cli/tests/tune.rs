//! The real `tcptail tune` binary on what can go wrong: errors printed as one line with each
//! cause once and the next step; one tune at a time; an apply killed after its first key and
//! the revert that restores every key; revert refusing to clobber a later change unless
//! `--force`; the state made durable before the first key changes (seen with strace); profile
//! text that would add a line to sysctl.d; and a default congestion control the host allows
//! only in its initial namespace. Fixture trees stand in for the host (`--root`); the
//! namespace tests run the binary inside a throwaway network namespace.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{bin, in_netns, tcptail, text};
use tcptail_audit::HostView;
use tcptail_audit::cc;
use tcptail_audit::fixture::FakeRoot;
use tcptail_audit::tune::{AFTER_FIRST_KEY, conf_path, state_path};
use tcptail_netns::{Cleanup, Netns, ensure_root};

fn root(f: &FakeRoot) -> &str {
    f.path().to_str().expect("utf-8 path")
}

/// [`common::tree`] with each file's whitespace normalised (the kernel prints multi-value keys
/// tab-separated; a fixture file keeps what was written).
fn tree(dir: &Path) -> Vec<(PathBuf, String)> {
    common::tree(dir)
        .into_iter()
        .map(|(p, c)| (p, c.split_whitespace().collect::<Vec<_>>().join(" ")))
        .collect()
}

fn sysctl(f: &FakeRoot, key: &str) -> String {
    let path = f.path().join("proc/sys").join(key.replace('.', "/"));
    std::fs::read_to_string(path).unwrap().trim().to_owned()
}

#[test]
fn errors_name_each_cause_once_and_the_next_step() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path().join("root"));
    let r = root(&f);
    // A profile file that is not there.
    let missing = dir.path().join("missing.toml");
    let out = tcptail(&["tune", "--root", r, "--profile", missing.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert_eq!(
        err,
        format!(
            "error: loading profile {:?}: reading {}: No such file or directory (os error 2)\n",
            missing.to_str().unwrap(),
            missing.display()
        )
    );
    // A configuration root that cannot hold the lock and the state: the cause once.
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, "").unwrap();
    let c = file.to_str().unwrap();
    let out = tcptail(&["tune", "--root", r, "--config-root", c, "--profile", "trading-latency"]);
    assert!(out.status.success(), "a dry run writes nothing: {}", text(&out.stderr));
    let apply = ["tune", "--root", r, "--config-root", c, "--profile", "trading-latency"];
    let out = tcptail(&[&apply[..], &["--apply"]].concat());
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(err.matches("Not a directory").count(), 1, "{err}");
    assert!(err.starts_with("error: applying profile trading-latency: writing "), "{err}");
    // Nothing to revert.
    let out = tcptail(&["tune", "--root", r, "--revert"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        text(&out.stderr),
        "error: nothing to revert: tune --apply has not run on this host\n"
    );
    let out = tcptail(&["tune", "--root", r, "--revert", "--profile", "desk"]);
    assert_eq!(
        text(&out.stderr),
        "error: nothing to revert: tune --apply --profile desk has not run on this host\n"
    );
    // --force belongs to --revert.
    let out = tcptail(&["tune", "--root", r, "--profile", "trading-latency", "--force"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

#[test]
fn profile_text_that_would_add_a_sysctl_d_line_is_refused_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path().join("root"));
    let profile = dir.path().join("inject.toml");
    std::fs::write(
        &profile,
        "name = \"inject\"\n[[setting]]\nkey = \"net.ipv4.tcp_ecn\"\nvalue = 1\nscope = \
         \"netns\"\nrationale = \"harmless\\nkernel.sysrq = 1\"\n",
    )
    .unwrap();
    let before = tree(f.path());
    for extra in [&[][..], &["--apply"], &["--emit", "sysctl"]] {
        let args = [&["tune", "--root", root(&f), "--profile", profile.to_str().unwrap()], extra];
        let out = tcptail(&args.concat());
        assert_eq!(out.status.code(), Some(1), "{extra:?}: {}", text(&out.stdout));
        let err = text(&out.stderr);
        assert!(
            err.contains(&format!(
                "{}:6: net.ipv4.tcp_ecn: `rationale` contains a newline",
                profile.display()
            )),
            "{err}"
        );
        assert!(!text(&out.stdout).contains("kernel.sysrq"), "{extra:?}");
    }
    assert_eq!(tree(f.path()), before, "nothing written");
}

/// Waits for `path` to exist (a child reaching its hook).
fn wait_for(path: &Path, child: &mut std::process::Child) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            panic!("tune exited ({status}) before its hook {}: {err}", path.display());
        }
        assert!(Instant::now() < deadline, "tune did not reach {}", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn an_apply_killed_after_its_first_key_is_reverted_completely() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    let r = root(&f);
    let before = tree(f.path());
    f.hook(AFTER_FIRST_KEY);
    let mut first = Command::new(bin())
        .args(["tune", "--root", r, "--profile", "trading-latency", "--apply"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = first.id();
    wait_for(&f.hook_reached(AFTER_FIRST_KEY), &mut first);
    // One key written, the previous values and the file on disk.
    let changed: Vec<(PathBuf, String)> =
        tree(f.path()).into_iter().filter(|e| !before.contains(e)).collect();
    let lock = f.path().join("run/tcptail/tune.lock");
    let state = state_path(f.path(), "trading-latency");
    let conf = conf_path(f.path(), "trading-latency");
    let written: Vec<&PathBuf> =
        changed.iter().map(|(p, _)| p).filter(|p| ![&lock, &state, &conf].contains(p)).collect();
    assert_eq!(written.len(), 1, "exactly the first key: {changed:?}");
    // A second tune is refused, naming the holder.
    let holder = format!(
        "another tcptail tune is running (pid {pid} holds {}): wait for it to finish",
        lock.display()
    );
    for args in [&["--profile", "trading-latency", "--apply"][..], &["--revert"]] {
        let out = tcptail(&[&["tune", "--root", r][..], args].concat());
        assert_eq!(out.status.code(), Some(1));
        let err = text(&out.stderr);
        assert!(err.contains(&holder), "{err}");
        assert_eq!(err.matches(&format!("pid {pid}")).count(), 1, "{err}");
    }
    first.kill().unwrap();
    first.wait().unwrap();
    // The next command takes the dead holder's lock over and restores every key.
    let out = tcptail(&["tune", "--root", r, "--revert"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stderr),
        format!("note: took over the tune lock left by pid {pid}, which is no longer running\n")
    );
    let stdout = text(&out.stdout);
    assert!(stdout.starts_with("reverted profile trading-latency: 1 value(s) restored\n"));
    assert!(stdout.contains("(already the previous value)"), "{stdout}");
    assert_eq!(tree(f.path()), before, "every key restored, file, state and lock removed");
    // Killed again: an apply after it sees the interrupted one and sends the user to revert.
    std::fs::remove_file(f.hook_reached(AFTER_FIRST_KEY)).unwrap();
    let mut again = Command::new(bin())
        .args(["tune", "--root", r, "--profile", "trading-latency", "--apply"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&f.hook_reached(AFTER_FIRST_KEY), &mut again);
    again.kill().unwrap();
    again.wait().unwrap();
    let out = tcptail(&["tune", "--root", r, "--profile", "trading-latency", "--apply"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("already applied, or its apply was interrupted"), "{err}");
    assert!(err.contains("run `tcptail tune --revert --profile trading-latency` first"), "{err}");
    let out = tcptail(&["tune", "--root", r, "--revert"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(tree(f.path()), before);
}

#[test]
fn revert_refuses_to_clobber_a_later_change_unless_forced() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path());
    let r = root(&f);
    let before = tree(f.path());
    let out = tcptail(&["tune", "--root", r, "--profile", "trading-latency", "--apply"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    f.sysctl("net.ipv4.tcp_keepalive_time", "600");
    let out = tcptail(&["tune", "--root", r, "--revert"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert_eq!(
        err,
        "error: reverting profile trading-latency: not reverting profile trading-latency: 1 key \
         changed since tune applied them: net.ipv4.tcp_keepalive_time (tune wrote \"30\", now \
         \"600\"); nothing was reverted. Keep them by setting them again after the revert, or \
         run `tcptail tune --revert --profile trading-latency --force` to restore the saved \
         values anyway\n"
    );
    assert_eq!(sysctl(&f, "net.ipv4.tcp_slow_start_after_idle"), "0", "nothing reverted");
    let out = tcptail(&["tune", "--root", r, "--revert", "--force"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("  net.ipv4.tcp_keepalive_time = 7200 (forced over 600)\n"));
    assert_eq!(tree(f.path()), before);
    let help = text(&tcptail(&["tune", "--help"]).stdout);
    assert!(help.contains("--force"), "{help}");
    assert!(help.contains("unless --force"), "{help}");
}

/// One syscall of an strace log: pid, name, arguments, result.
struct Call {
    name: String,
    args: String,
    result: String,
}

fn parse_strace(log: &str) -> Vec<Call> {
    log.lines()
        .filter_map(|l| {
            // `PID name(args)   = result`, padded before the `=`.
            let l = l.split_once(' ').map_or(l, |(_, rest)| rest).trim_start();
            let (call, result) = l.rsplit_once(" = ")?;
            let (name, args) = call.trim_end().split_once('(')?;
            let args = args.strip_suffix(')')?;
            let result = result.split_whitespace().next()?;
            Some(Call { name: name.into(), args: args.into(), result: result.into() })
        })
        .collect()
}

/// The index of the first call from `from` on that matches.
fn find(calls: &[Call], from: usize, what: impl Fn(&Call) -> bool) -> Option<usize> {
    calls.iter().skip(from).position(what).map(|i| i + from)
}

/// `path` written durably before `until`: temp file opened, fsynced, renamed over `path`,
/// then its directory opened and fsynced. Returns the index after the directory's fsync.
fn durable(calls: &[Call], from: usize, path: &Path) -> usize {
    let name = path.file_name().unwrap().to_str().unwrap();
    let dir = path.parent().unwrap().to_str().unwrap();
    let tmp = find(calls, from, |c| {
        c.name == "openat"
            && c.args.contains(&format!("/.{name}.tmp"))
            && c.args.contains("O_CREAT")
    })
    .unwrap_or_else(|| panic!("no temp file for {name}"));
    let fd = &calls[tmp].result;
    let sync = find(calls, tmp, |c| c.name == "fsync" && &c.args == fd).expect("fsync of temp");
    let rename = find(calls, sync, |c| {
        c.name.starts_with("rename") && c.args.contains(&format!("{dir}/{name}\""))
    })
    .expect("rename after fsync");
    let open_dir =
        find(calls, rename, |c| c.name == "openat" && c.args.contains(&format!("\"{dir}\"")))
            .expect("directory opened after the rename");
    let dir_fd = &calls[open_dir].result;
    find(calls, open_dir, |c| c.name == "fsync" && &c.args == dir_fd).expect("fsync of the dir") + 1
}

#[test]
fn the_previous_values_are_on_disk_before_the_first_key_changes() {
    let dir = tempfile::tempdir().unwrap();
    let f = FakeRoot::linux_6_18(dir.path().join("root"));
    let log = dir.path().join("strace.log");
    let out = Command::new("strace")
        .args(["-f", "-qq", "-e", "trace=openat,fsync,rename,renameat,renameat2"])
        .arg("-o")
        .arg(&log)
        .arg(bin())
        .args(["tune", "--root", root(&f), "--profile", "trading-latency", "--apply"])
        .output()
        .expect("strace (scripts/install-deps installs it)");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let calls = parse_strace(&std::fs::read_to_string(&log).unwrap());
    let after_state = durable(&calls, 0, &state_path(f.path(), "trading-latency"));
    let after_conf = durable(&calls, after_state, &conf_path(f.path(), "trading-latency"));
    let proc_sys = f.path().join("proc/sys").display().to_string();
    let first_key = calls
        .iter()
        .position(|c| {
            c.name == "openat" && c.args.contains(&proc_sys) && c.args.contains("O_WRONLY")
        })
        .expect("a key written");
    assert!(after_conf <= first_key, "state and file durable before the first key changes");
}

/// An algorithm this host has registered but not allowed (cubic on the project's machine).
fn restricted_algorithm() -> Option<String> {
    cc::Facts::read(&HostView::live()).restricted().first().map(|a| (*a).to_owned())
}

/// A fixture with this machine's lists: cubic registered, allowed "reno bbr", default bbr.
fn restricted_cubic(dir: &Path) -> FakeRoot {
    let f = FakeRoot::linux_6_18(dir);
    f.sysctl(cc::DEFAULT, "bbr").sysctl(cc::AVAILABLE, "reno bbr cubic");
    f.sysctl(cc::ALLOWED, "reno bbr");
    f
}

#[test]
fn a_default_the_host_restricts_applies_on_the_host_and_is_skipped_in_a_namespace() {
    // The host (initial namespace): cubic is applied; the dry run names the allowed list.
    let dir = tempfile::tempdir().unwrap();
    let f = restricted_cubic(dir.path());
    let r = root(&f);
    let out = tcptail(&["tune", "--root", r, "--profile", "trading-latency"]);
    let dry = text(&out.stdout);
    assert!(dry.contains("+net.ipv4.tcp_congestion_control = cubic\n"), "{dry}");
    assert!(
        dry.contains(
            "# the kernel also changes net.ipv4.tcp_allowed_congestion_control: reno bbr -> reno \
             bbr cubic"
        ),
        "{dry}"
    );
    let out = tcptail(&["tune", "--root", r, "--profile", "trading-latency", "--apply"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(sysctl(&f, cc::DEFAULT), "cubic");
    // A child namespace (or container): skipped with the reason, the rest applied.
    let dir = tempfile::tempdir().unwrap();
    let f = restricted_cubic(dir.path());
    f.child_netns();
    let r = root(&f);
    let out = tcptail(&["tune", "--root", r, "--profile", "trading-latency"]);
    let dry = text(&out.stdout);
    assert!(dry.contains("# skipped net.ipv4.tcp_congestion_control: restricted here: cubic"));
    let out = tcptail(&["tune", "--root", r, "--profile", "trading-latency", "--apply"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("skipped net.ipv4.tcp_congestion_control: restricted"));
    assert_eq!(sysctl(&f, cc::DEFAULT), "bbr");
    assert_eq!(sysctl(&f, "net.ipv4.tcp_slow_start_after_idle"), "0");
    // An algorithm that is not there at all: the dry run says apply refuses, apply refuses.
    let profile = dir.path().join("vegas.toml");
    std::fs::write(
        &profile,
        "name = \"vegas\"\n[[setting]]\nkey = \"net.ipv4.tcp_congestion_control\"\nvalue = \
         \"vegas\"\nscope = \"netns\"\nrationale = \"r\"\n",
    )
    .unwrap();
    let p = profile.to_str().unwrap();
    let out = tcptail(&["tune", "--root", r, "--profile", p]);
    assert!(text(&out.stdout).contains(
        "# --apply refuses: net.ipv4.tcp_congestion_control = vegas: vegas is not available"
    ));
    let out = tcptail(&["tune", "--root", r, "--profile", p, "--apply"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("(nothing was written)"), "{err}");
}

#[test]
fn in_a_child_namespace_a_restricted_default_no_longer_refuses_the_apply() {
    if let Err(e) = ensure_root() {
        panic!("needs root with CAP_NET_ADMIN + CAP_SYS_ADMIN: {e}");
    }
    let Some(algorithm) = restricted_algorithm() else {
        eprintln!("note: no restricted congestion control on this host; fixture tests cover it");
        return;
    };
    let cleanup = Cleanup::new();
    let ns = Netns::create(&cleanup, "tunecc").unwrap();
    // The namespace reproduces the restriction: the kernel answers EPERM there.
    let err = ns.set_sysctl(cc::DEFAULT, &algorithm).unwrap_err();
    assert!(format!("{err:?}").contains("code: 1,"), "EPERM: {err:?}");
    let before_cc = ns.sysctl(cc::DEFAULT).unwrap();
    let before_ssai = ns.sysctl("net.ipv4.tcp_slow_start_after_idle").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("cc.toml");
    std::fs::write(
        &profile,
        format!(
            "name = \"cc\"\n[[setting]]\nkey = \"net.ipv4.tcp_congestion_control\"\nvalue = \
             \"{algorithm}\"\nscope = \"netns\"\nrationale = \"r\"\n[[setting]]\nkey = \
             \"net.ipv4.tcp_slow_start_after_idle\"\nvalue = 0\nscope = \"netns\"\nrationale = \
             \"r\"\n"
        ),
    )
    .unwrap();
    let cfg = dir.path().join("cfg");
    let (p, c) = (profile.to_str().unwrap(), cfg.to_str().unwrap());
    let run = |args: &[&str]| in_netns(&ns, args);
    let out = run(&["tune", "--profile", p, "--apply", "--config-root", c]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "skipped net.ipv4.tcp_congestion_control: restricted here: {algorithm} is not in"
        )),
        "{stdout}"
    );
    assert_eq!(ns.sysctl(cc::DEFAULT).unwrap(), before_cc);
    assert_eq!(ns.sysctl("net.ipv4.tcp_slow_start_after_idle").unwrap(), "0");
    let out = run(&["tune", "--revert", "--config-root", c]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(ns.sysctl("net.ipv4.tcp_slow_start_after_idle").unwrap(), before_ssai);
    ns.delete().unwrap();
}
