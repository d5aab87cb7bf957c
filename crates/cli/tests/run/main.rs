//! The real `tcptail run` binary with the real preload library, on loopback (127.0.0.1 only).
//!
//! - [`programs`]: a Python client and server, curl and sockperf (client and server) run under
//!   it, each checked from inside (getsockopt in the Python programs) and from outside
//!   ([`outside`]: `ss -tinm` over sock_diag for congestion control and buffers, a
//!   `pidfd_getfd` copy of the program's descriptor for `TCP_NODELAY`, which sock_diag does not
//!   export), with `--log` writing exactly one line per socket.
//! - [`receives`]: QUICKACK re-armed after every receive path, Python's and a C program's
//!   compiled with `-D_FORTIFY_SOURCE=2` (`__recv_chk`, `__recvfrom_chk`, `__read_chk`,
//!   `readv`, `recvmmsg`), errno kept when a re-arm fails.
//! - here: errno of a failed connect and non-TCP sockets passed through untouched, and the
//!   usage errors (bad profile, missing library) that must stop before the program runs.
//!
//! The library is built here with `cargo build -p tcptail-preload` into the same target
//! directory as the binary, so `cargo test -p tcptail` alone works and never uses a stale
//! library. python3, curl, ss, sockperf and gcc must be installed (`scripts/install-deps`); a
//! test whose tool is missing fails and says which.

mod outside;
mod programs;
mod receives;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

const LIB: &str = "libtcptail_preload.so";

/// The test profile: reno (the host default is bbr or cubic, so seeing reno proves it
/// changed), NODELAY, QUICKACK re-arm and buffers below the default `*mem_max`.
const PROFILE: &str = r#"
name = "runtest"
congestion = "reno"
nodelay = true
quickack = "rearm"
send_buffer = 196608
receive_buffer = 131072
"#;

fn bin() -> PathBuf {
    let bin = assert_cmd::cargo::cargo_bin("tcptail");
    build_library(&bin);
    bin
}

/// Builds the preload library next to the binary once per test run.
fn build_library(bin: &Path) {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let dir = bin.parent().expect("binary directory");
        let target_dir = dir.parent().expect("target directory");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-q", "-p", "tcptail-preload"]).env("CARGO_TARGET_DIR", target_dir);
        if dir.ends_with("release") {
            cmd.arg("--release");
        }
        let status = cmd.current_dir(env!("CARGO_MANIFEST_DIR")).status().expect("run cargo");
        assert!(status.success(), "cargo build -p tcptail-preload failed");
        assert!(dir.join(LIB).is_file(), "{LIB} not in {} after building it", dir.display());
    });
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

/// A temporary directory holding the test profile as `p.toml`.
fn profile_dir(body: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("p.toml");
    std::fs::write(&path, body).unwrap();
    (dir, path)
}

/// `tcptail run [--log] --profile PROFILE -- ARGS`, not yet started.
fn run_cmd(profile: &Path, log: bool, args: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    cmd.arg("run").arg("--profile").arg(profile);
    if log {
        cmd.arg("--log");
    }
    cmd.arg("--").args(args).env_remove("TCPTAIL_PRELOAD_LIB").env_remove("LD_PRELOAD");
    cmd
}

fn output(mut cmd: Command) -> Output {
    cmd.output().expect("run tcptail")
}

/// How long a test waits for a program to connect or for `ss` to list a socket.
const PATIENCE: Duration = Duration::from_secs(10);

/// What the kernel holds for [`PROFILE`]'s buffers: `SO_SNDBUF`/`SO_RCVBUF` store twice the
/// request (`sk_sndbuf`/`sk_rcvbuf`, `ss`'s `tb`/`rb`), and setting them locks them against
/// autotuning, so these are exact.
const PROFILE_TB: u64 = 2 * 196608;
const PROFILE_RB: u64 = 2 * 131072;

/// The host's default congestion control, which [`PROFILE`] must differ from for a `reno`
/// reading to prove anything.
fn host_default_cc() -> String {
    let cc = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .expect("read net.ipv4.tcp_congestion_control");
    let cc = cc.trim().to_string();
    assert_ne!(cc, "reno", "the host default is reno, so the tests cannot tell the profile's");
    cc
}

/// Asserts that `ss` shows [`PROFILE`] on a socket: reno and the profile's buffers.
fn assert_profile_seen(socket: &outside::SsSocket, whose: &str) {
    assert_eq!(socket.cc, "reno", "{whose}: ss shows the wrong congestion control: {socket:?}");
    assert_eq!(socket.rb, PROFILE_RB, "{whose}: ss skmem rb: {socket:?}");
    assert_eq!(socket.tb, PROFILE_TB, "{whose}: ss skmem tb: {socket:?}");
}

/// The library's log lines in a program's stderr.
fn log_lines(stderr: &str) -> Vec<&str> {
    stderr.lines().filter(|l| l.starts_with("tcptail-preload[")).collect()
}

const REFUSED: &str = r#"
import errno, socket, sys
port = int(sys.argv[1])
s = socket.socket()
print("blocking", errno.errorcode[s.connect_ex(("127.0.0.1", port))])
s2 = socket.socket()
s2.setblocking(False)
print("nonblocking", errno.errorcode[s2.connect_ex(("127.0.0.1", port))])
try:
    socket.create_connection(("127.0.0.1", port))
except OSError as e:
    print("raised", type(e).__name__, errno.errorcode[e.errno])
"#;

#[test]
fn failed_connect_keeps_its_errno() {
    need("python3");
    let (_dir, profile) = profile_dir(PROFILE);
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string();
    let plain = Command::new("python3").args(["-c", REFUSED, &port]).output().unwrap();
    let out = output(run_cmd(&profile, true, &["python3", "-c", REFUSED, &port]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("blocking ECONNREFUSED\n"), "{stdout}");
    assert!(stdout.contains("nonblocking EINPROGRESS\n"), "{stdout}");
    assert!(stdout.contains("raised ConnectionRefusedError ECONNREFUSED"), "{stdout}");
    assert_eq!(stdout, text(&plain.stdout), "differs from the program run plainly");
}

const NON_TCP: &str = r#"
import socket
socks = {
    "udp": socket.socket(socket.AF_INET, socket.SOCK_DGRAM),
    "udp6": socket.socket(socket.AF_INET6, socket.SOCK_DGRAM),
    "unix-stream": socket.socket(socket.AF_UNIX, socket.SOCK_STREAM),
    "unix-dgram": socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM),
}
a, b = socket.socketpair()
socks["socketpair"] = a
for name, s in socks.items():
    print(name, s.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF),
          s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF))
u = socks["udp"]
u.bind(("127.0.0.1", 0))
u.sendto(b"d", u.getsockname())
print("udp recv", u.recv(1))
b.sendall(b"u")
print("unix recv", a.recv(1))
"#;

#[test]
fn non_tcp_sockets_are_untouched() {
    need("python3");
    let (_dir, profile) = profile_dir(PROFILE);
    let plain = Command::new("python3").args(["-c", NON_TCP]).output().unwrap();
    let out = output(run_cmd(&profile, true, &["python3", "-c", NON_TCP]));
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), text(&plain.stdout));
    assert!(!text(&out.stdout).contains("393216"), "a profile buffer size leaked");
    let log = text(&out.stderr);
    assert!(!log.contains("tcptail-preload["), "non-TCP sockets were logged:\n{log}");
}

#[test]
fn bad_profiles_stop_before_the_program_runs() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "nodelay = true\ncongestion = \"CUBIC\"\n").unwrap();
    for (profile, expect) in [
        (Path::new("tradng"), "unknown built-in profile `tradng`".to_string()),
        (bad.as_path(), format!("{}:2:", bad.display())),
    ] {
        let out = output(run_cmd(profile, false, &["touch", marker.to_str().unwrap()]));
        let err = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.starts_with("error: --profile ") && err.contains(&expect), "{err}");
        assert!(!marker.exists(), "the program ran despite a bad profile");
    }
}

#[test]
fn missing_library_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let mut cmd = run_cmd(Path::new("trading"), false, &["touch", marker.to_str().unwrap()]);
    cmd.env("TCPTAIL_PRELOAD_LIB", dir.path().join("nope.so"));
    let out = output(cmd);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("TCPTAIL_PRELOAD_LIB=") && err.contains("nope.so"), "{err}");
    assert!(!marker.exists());
}

#[test]
fn environment_exit_code_and_unrunnable_programs() {
    let (dir, _) = profile_dir(PROFILE);
    let script = "echo \"$LD_PRELOAD|$TCPTAIL_PROFILE|${TCPTAIL_LOG-unset}\"; exit 7";
    let mut cmd = run_cmd(Path::new("./p.toml"), false, &["sh", "-c", script]);
    cmd.current_dir(dir.path())
        .env("LD_PRELOAD", "/nonexistent-first.so")
        .env_remove("TCPTAIL_LOG");
    let out = output(cmd);
    assert_eq!(out.status.code(), Some(7));
    let lib = std::fs::canonicalize(bin().parent().unwrap().join(LIB)).unwrap();
    let profile = std::fs::canonicalize(dir.path().join("p.toml")).unwrap();
    let expected = format!("/nonexistent-first.so:{}|{}|unset\n", lib.display(), profile.display());
    assert_eq!(text(&out.stdout), expected);

    let out = output(run_cmd(Path::new("trading"), false, &["/nonexistent/program"]));
    assert_eq!(out.status.code(), Some(127));
    assert!(text(&out.stderr).contains("cannot run /nonexistent/program"));
}

#[test]
fn help_says_what_it_cannot_reach() {
    let out = Command::new(bin()).args(["run", "--help"]).output().unwrap();
    let help = text(&out.stdout);
    for needle in [
        "statically linked",
        "Go programs",
        "io_uring",
        "__recv_chk",
        "readv",
        "preadv2",
        "tcptail exporter",
        "tcptail audit",
    ] {
        assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
    }
}
