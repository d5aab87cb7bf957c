//! The real `tcptail run` binary with the real preload library, on loopback (127.0.0.1 only):
//! a Python client and server checked from inside (getsockopt) and from outside (`ss -tin`),
//! curl and sockperf with `--log`, QUICKACK re-armed across recv/read/recvfrom/recvmsg, errno
//! and non-TCP sockets passed through untouched, and the usage errors (bad profile, missing
//! library) that must stop before the program runs.
//!
//! The library is built here with `cargo build -p tcptail-preload` into the same target
//! directory as the binary, so `cargo test -p tcptail` alone works and never uses a stale
//! library. python3, curl, ss and sockperf must be installed (`scripts/install-deps`); a test
//! whose tool is missing fails and says which.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
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

const CLIENT: &str = r#"
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
cc = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0").decode()
nd = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
sb = s.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
rb = s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
print(f"cc={cc} nodelay={nd} sndbuf={sb} rcvbuf={rb} lport={s.getsockname()[1]}", flush=True)
assert s.recv(1) == b"x"
"#;

fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

#[test]
fn python_client_gets_the_profile_inside_and_outside() {
    need("python3");
    need("ss");
    let (_dir, profile) = profile_dir(PROFILE);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port().to_string();
    let mut child = run_cmd(&profile, false, &["python3", "-c", CLIENT, &port])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut server, _) = listener.accept().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(field(&line, "cc"), "reno", "{line}");
    assert_eq!(field(&line, "nodelay"), "1", "{line}");
    assert_eq!(field(&line, "sndbuf"), (2 * 196608).to_string(), "{line}");
    assert_eq!(field(&line, "rcvbuf"), (2 * 131072).to_string(), "{line}");

    // From outside, while the connection is open: the kernel's view of the client's socket.
    let lport = field(&line, "lport");
    let filter = format!("( sport = :{lport} )");
    let ss = Command::new("ss").args(["-tinH", "state", "established", &filter]).output().unwrap();
    let ss = text(&ss.stdout);
    assert!(ss.contains(" reno "), "ss -tin does not show reno for port {lport}:\n{ss}");

    server.write_all(b"x").unwrap();
    assert!(child.wait().unwrap().success());
}

const SERVER: &str = r#"
import socket
l = socket.socket()
l.bind(("127.0.0.1", 0))
l.listen(1)
print(l.getsockname()[1], flush=True)
c, _ = l.accept()
cc = c.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0").decode()
nd = c.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
print(f"cc={cc} nodelay={nd}", flush=True)
c.sendall(b"x")
"#;

#[test]
fn python_server_accepted_sockets_get_the_profile() {
    need("python3");
    let (_dir, profile) = profile_dir(PROFILE);
    let mut child = run_cmd(&profile, true, &["python3", "-c", SERVER])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut port = String::new();
    stdout.read_line(&mut port).unwrap();
    let mut client =
        TcpStream::connect(("127.0.0.1", port.trim().parse::<u16>().unwrap())).unwrap();
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let mut byte = [0u8];
    client.read_exact(&mut byte).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(field(&line, "cc"), "reno", "{line}");
    assert_eq!(field(&line, "nodelay"), "1", "{line}");
    let log = text(&out.stderr);
    assert!(log.contains("accept from 127.0.0.1:") && log.contains("TCP_CONGESTION=reno"), "{log}");
}

/// Serves one HTTP/1.1 request with `hello`.
fn http_once(listener: TcpListener) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        let mut req = Vec::new();
        let mut buf = [0u8; 1024];
        while !req.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut buf).unwrap();
            assert!(n > 0, "client closed early");
            req.extend_from_slice(&buf[..n]);
        }
        s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello")
            .unwrap();
    })
}

#[test]
fn curl_under_run_logs_the_applied_profile() {
    need("curl");
    let (_dir, profile) = profile_dir(PROFILE);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let server = http_once(listener);
    let out = output(run_cmd(&profile, true, &["curl", "-sS", "--noproxy", "*", &url]));
    server.join().unwrap();
    let log = text(&out.stderr);
    assert!(out.status.success(), "curl failed: {log}");
    assert_eq!(text(&out.stdout), "hello");
    let line = log.lines().find(|l| l.contains("socket AF_INET")).unwrap_or_else(|| {
        panic!("no log line for curl's socket:\n{log}");
    });
    assert!(line.starts_with("tcptail-preload["), "{line}");
    assert!(line.contains("profile \"runtest\": all 5 applied"), "{line}");
    assert!(line.contains("TCP_CONGESTION=reno") && line.contains("TCP_NODELAY=on"), "{line}");
    assert!(line.contains("SO_SNDBUF=192KiB (kernel: 384KiB)"), "{line}");
}

#[test]
fn sockperf_ping_pong_runs_under_the_profile() {
    need("sockperf");
    let (_dir, profile) = profile_dir(PROFILE);
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port().to_string();
    let mut server = Command::new("sockperf")
        .args(["server", "--tcp", "-i", "127.0.0.1", "-p", &port])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let addr = format!("127.0.0.1:{port}");
    let ready = (0..100).any(|_| {
        std::thread::sleep(Duration::from_millis(50));
        TcpStream::connect(&addr).is_ok()
    });
    let out = ready.then(|| {
        output(run_cmd(
            &profile,
            true,
            &["sockperf", "ping-pong", "--tcp", "-i", "127.0.0.1", "-p", &port, "-t", "1"],
        ))
    });
    let _ = server.kill();
    let _ = server.wait();
    let out = out.expect("sockperf server did not start listening");
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "sockperf ping-pong failed:\n{all}");
    assert!(all.contains("Summary: Latency is"), "no latency summary:\n{all}");
    assert!(
        all.lines().any(|l| l.starts_with("tcptail-preload[")
            && l.contains("TCP_CONGESTION=reno")
            && l.contains("TCP_NODELAY=on")),
        "no application logged:\n{all}"
    );
}

const QUICKACK: &str = r#"
import os, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
calls = [lambda: s.recv(1), lambda: os.read(s.fileno(), 1),
         lambda: s.recvfrom(1)[0], lambda: s.recvmsg(1)[0]]
on = 0
for i in range(40):
    s.sendall(b"p")
    assert calls[i % 4]() == b"p"
    on += s.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK)
print(on)
"#;

/// Echoes every byte back until the peer closes.
fn echo_server() -> (u16, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let handle = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mut b = [0u8; 1];
        while s.read(&mut b).unwrap_or(0) == 1 {
            s.write_all(&b).unwrap();
        }
    });
    (port, handle)
}

/// `getsockopt(TCP_QUICKACK)` reads 1 while the socket is out of delayed-ACK (pingpong) mode.
/// Sending right after receiving puts it back in, so only a re-arm after each receive keeps
/// it reading 1 right after the receive.
fn quickack_count(profile: &str) -> u32 {
    let (_dir, path) = profile_dir(profile);
    let (port, server) = echo_server();
    let out = output(run_cmd(&path, false, &["python3", "-c", QUICKACK, &port.to_string()]));
    server.join().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout).trim().parse().unwrap()
}

#[test]
fn quickack_is_rearmed_after_every_kind_of_receive() {
    need("python3");
    assert_eq!(quickack_count(PROFILE), 40, "recv/read/recvfrom/recvmsg must all re-arm");
    let off = quickack_count("nodelay = true\n");
    assert!(off < 40, "without re-arm QUICKACK should drop back to delayed ACKs ({off}/40)");
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
    for needle in
        ["statically linked", "Go programs", "io_uring", "tcptail exporter", "tcptail audit"]
    {
        assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
    }
}
