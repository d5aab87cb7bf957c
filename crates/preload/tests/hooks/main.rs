//! The built `libtcptail_preload.so` loaded into small C programs (compiled here with gcc), for
//! what only the real library inside a real process shows:
//!
//! - [`fd_table`]: the fd table follows `dup`, `dup2`, `dup3`, `close_range` and `closefrom`
//!   (a copy of a socket re-arms QUICKACK; a number reused behind the library's back gets the
//!   profile at `connect`).
//! - [`fork`]: a child forked while another thread was reading the profile, or was blocked
//!   writing a log line to a full stderr, makes its own sockets instead of deadlocking.
//! - [`secure`]: in a setuid program (`AT_SECURE`) the library warns once and does nothing.
//! - [`panics`]: a panic inside the library is caught and prints nothing unless logging is on.
//!
//! The library is built with `cargo build -p tcptail-preload` into this test's own target
//! directory, so `cargo test -p tcptail-preload` alone works and never loads a stale library.
//! gcc must be installed (`scripts/install-deps`); a test whose tool is missing fails and says
//! which. Sockets connect to 127.0.0.1 only.

mod fd_table;
mod fork;
mod panics;
mod secure;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

const LIB: &str = "libtcptail_preload.so";

/// The profile the tests look for: reno (the host default is bbr or cubic, so a reno socket
/// proves the profile was applied), NODELAY and QUICKACK re-armed after every receive.
const PROFILE: &str = "congestion = \"reno\"\nnodelay = true\nquickack = \"rearm\"\n";

/// The preload library, built once per test run.
fn library() -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            // target/<profile>/deps/hooks-<hash>: the library goes to target/<profile>.
            let exe = std::env::current_exe().expect("test binary path");
            let dir = exe.parent().and_then(Path::parent).expect("target/<profile>");
            let target_dir = dir.parent().expect("target directory");
            let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
            let mut cmd = Command::new(cargo);
            cmd.args(["build", "-q", "-p", "tcptail-preload"]).env("CARGO_TARGET_DIR", target_dir);
            if dir.ends_with("release") {
                cmd.arg("--release");
            }
            let status = cmd.current_dir(env!("CARGO_MANIFEST_DIR")).status().expect("run cargo");
            assert!(status.success(), "cargo build -p tcptail-preload failed");
            let lib = dir.join(LIB);
            assert!(lib.is_file(), "{LIB} not in {} after building it", dir.display());
            lib
        })
        .clone()
}

fn need(tool: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(found, "{tool} is not installed: run scripts/install-deps (Debian package)");
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Compiles `source` (named `name`.c) into `dir`/`name` with `extra` gcc arguments after the
/// source; returns the binary's path.
fn compile(dir: &Path, name: &str, source: &str, extra: &[&str]) -> PathBuf {
    need("gcc");
    let src = dir.join(format!("{name}.c"));
    let binary = dir.join(name);
    std::fs::write(&src, source).unwrap();
    let out = Command::new("gcc")
        .args(["-O2", "-Wall", "-Werror", "-pthread", "-o"])
        .arg(&binary)
        .arg(&src)
        .args(extra)
        .output()
        .expect("run gcc");
    assert!(out.status.success(), "gcc {name}.c failed: {}", text(&out.stderr));
    binary
}

/// `program args..` with the library preloaded and `env` set (no inherited TCPTAIL_*).
fn preloaded(program: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut cmd = Command::new(program);
    cmd.args(args).env("LD_PRELOAD", library());
    for var in ["TCPTAIL_PROFILE", "TCPTAIL_LOG", "TCPTAIL_PRELOAD_TEST_PANIC"] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied());
    cmd
}

fn run(mut cmd: Command) -> Output {
    let out = cmd.output().expect("run the test program");
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    out
}

/// A file holding [`PROFILE`] in `dir`.
fn profile_file(dir: &Path) -> PathBuf {
    let path = dir.join("p.toml");
    std::fs::write(&path, PROFILE).unwrap();
    path
}

/// The host's default congestion control, which must differ from [`PROFILE`]'s for a reno
/// reading to prove anything.
fn host_default_cc() -> String {
    let cc = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .expect("read net.ipv4.tcp_congestion_control");
    let cc = cc.trim().to_string();
    assert_ne!(cc, "reno", "the host default is reno, so the tests cannot tell the profile's");
    cc
}

/// `KEY VALUE` lines of a program's stdout, in order.
fn pairs(stdout: &str) -> Vec<(String, String)> {
    stdout
        .lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap_or_else(|| panic!("line {l:?}"));
            (k.to_string(), v.to_string())
        })
        .collect()
}

/// The library's own lines in a program's stderr.
fn library_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.starts_with("tcptail-preload[")).collect()
}
