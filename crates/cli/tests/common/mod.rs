//! What the CLI tests share: the binary and its output, fixture trees as files; for the lab
//! tests one lock so runs never share the vCPUs, and child runs whose namespaces
//! (`tcptail-<child pid>-...`) are removed by a guard whatever happens.
#![allow(dead_code)] // each test binary uses its own part

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

pub mod exporter;

static LAB: Mutex<()> = Mutex::new(());

pub fn lab_lock() -> MutexGuard<'static, ()> {
    let guard = LAB.lock().unwrap_or_else(PoisonError::into_inner);
    if let Err(e) = tcptail_netns::ensure_root() {
        panic!("the lab tests need root with CAP_NET_ADMIN + CAP_SYS_ADMIN: {e}");
    }
    guard
}

pub fn bin() -> PathBuf {
    assert_cmd::cargo::cargo_bin("tcptail")
}

/// Runs `tcptail ARGS` to completion.
pub fn tcptail(args: &[&str]) -> Output {
    Command::new(bin()).args(args).output().expect("run tcptail")
}

/// Runs `tcptail ARGS` inside network namespace `ns` (`ip netns exec`).
pub fn in_netns(ns: &tcptail_netns::Netns, args: &[&str]) -> Output {
    Command::new("ip")
        .args(["netns", "exec", ns.name()])
        .arg(bin())
        .args(args)
        .output()
        .expect("ip netns exec tcptail")
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Every file under `dir` with its content, sorted (to compare trees before and after), but
/// a fixture's test hooks (`.hooks/`).
pub fn tree(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.ends_with(".hooks") {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.clone(), std::fs::read_to_string(&p).unwrap_or_default()));
            }
        }
    }
    out.sort();
    out
}

/// Namespaces named after `pid`, from `/run/netns` and from `ip netns list`.
pub fn namespaces_of(pid: u32) -> Vec<String> {
    let prefix = format!("tcptail-{pid}-");
    let mut names: Vec<String> = std::fs::read_dir("/run/netns")
        .map(|d| d.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
        .unwrap_or_default();
    let listed = Command::new("ip").args(["netns", "list"]).output().expect("ip netns list");
    names.extend(
        String::from_utf8_lossy(&listed.stdout)
            .lines()
            .filter_map(|l| l.split_whitespace().next().map(str::to_owned)),
    );
    names.retain(|n| n.starts_with(&prefix));
    names.sort();
    names.dedup();
    names
}

/// Kills the run if it still runs and deletes its namespaces (and their processes).
pub struct Guard {
    pub child: Child,
    pub pid: u32,
    /// The run's `--out` directory when the test gave none (so nothing is left in /tmp).
    _out: Option<tempfile::TempDir>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for ns in namespaces_of(self.pid) {
            let _ = Command::new("ip").args(["netns", "pids", &ns]).output().map(|o| {
                for pid in String::from_utf8_lossy(&o.stdout).split_whitespace() {
                    let _ = Command::new("kill").args(["-9", pid]).status();
                }
            });
            let _ = Command::new("ip").args(["netns", "del", &ns]).status();
        }
    }
}

pub fn spawn(args: &[&str]) -> Guard {
    let mut args: Vec<&str> = args.to_vec();
    let out = (args.starts_with(&["lab", "path"]) && !args.contains(&"--out"))
        .then(|| tempfile::tempdir().expect("tempdir"));
    if let Some(dir) = &out {
        args.splice(2..2, ["--out", dir.path().to_str().expect("utf-8 path")]);
    }
    let child = Command::new(bin())
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn tcptail");
    let pid = child.id();
    Guard { child, pid, _out: out }
}

pub struct Finished {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    /// Namespaces of the run that still existed right after it exited.
    pub leftovers: Vec<String>,
    /// Removes leftovers when the test is done with them.
    _guard: Guard,
}

/// Waits for the run to end (killing it after `timeout`) and collects its output.
pub fn finish(mut guard: Guard, timeout: Duration) -> Finished {
    let mut out = guard.child.stdout.take().expect("piped");
    let mut err = guard.child.stderr.take().expect("piped");
    let out_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = guard.child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = guard.child.kill();
            let stderr = err_reader.join().unwrap_or_default();
            panic!("tcptail did not finish within {timeout:?}; stderr:\n{stderr}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let leftovers = namespaces_of(guard.pid);
    let stdout = out_reader.join().unwrap_or_default();
    let stderr = err_reader.join().unwrap_or_default();
    Finished { status, stdout, stderr, leftovers, _guard: guard }
}

pub fn run(args: &[&str], timeout: Duration) -> Finished {
    finish(spawn(args), timeout)
}

/// Waits until the run printed a stderr line starting with `prefix` (e.g. the lab's banner,
/// printed once setup is done), failing after 30 s. Its stderr stays readable for [`finish`]:
/// the lines are passed on through a socket that replaces the child's stderr handle.
pub fn wait_for_stderr(guard: &mut Guard, prefix: &str) {
    use std::io::{BufRead, BufReader, Write};
    let err = guard.child.stderr.take().expect("piped");
    let (mut pass_on, keep) = std::os::unix::net::UnixStream::pair().expect("socketpair");
    let (tx, rx) = std::sync::mpsc::channel();
    let wanted = prefix.as_bytes().to_vec();
    std::thread::spawn(move || {
        let mut reader = BufReader::new(err);
        let mut line = Vec::new();
        let mut told = false;
        while reader.read_until(b'\n', &mut line).is_ok_and(|n| n > 0) {
            let _ = pass_on.write_all(&line);
            if !told && line.starts_with(&wanted) {
                told = true;
                let _ = tx.send(());
            }
            line.clear();
        }
    });
    guard.child.stderr = Some(std::process::ChildStderr::from(std::os::fd::OwnedFd::from(keep)));
    rx.recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("no stderr line starting with {prefix:?} within 30 s"));
}

/// The address a server printed as `... http://ADDR/...` or `https://ADDR/...` on its first
/// line (the exporter's "listening" line).
pub fn printed_address(line: &str) -> std::net::SocketAddr {
    line.split("://")
        .nth(1)
        .and_then(|s| s.split('/').next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
}

/// Answers a bench client's handshake on `s` the way a real server would (its profile
/// applied, the `kernel` named) and returns the client's Hello: the start of the hand-written
/// servers that misbehave afterwards.
pub fn welcome_bench_client(
    s: &mut std::net::TcpStream,
    kernel: &str,
) -> tcptail_bench::wire::HelloConfig {
    use tcptail_bench::wire;
    let hello = wire::read_hello(&mut *s).unwrap();
    let welcome = wire::Welcome {
        apply: tcptail_sock::apply_profile(std::os::fd::AsFd::as_fd(&*s), &hello.profile),
        congestion: None,
        server_cpu: None,
        requested_cpu: None,
        pinned: None,
        spin: false,
        kernel: kernel.into(),
        version: "test".into(),
        idle_timeout_seconds: None,
        // A server from before the stats frames.
        stats_version: None,
    };
    wire::write_welcome(&mut *s, &welcome).unwrap();
    hello
}

/// A `tcptail bench server` on a free loopback port (`extra` appended to its arguments),
/// killed when dropped.
pub struct BenchServer {
    child: Child,
    /// The address it printed on its first line.
    pub addr: String,
}

impl BenchServer {
    pub fn start(extra: &[&str]) -> BenchServer {
        use std::io::{BufRead, BufReader};
        let mut child = Command::new(bin())
            .args(["bench", "server", "--listen", "127.0.0.1:0"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tcptail bench server");
        let mut stderr = BufReader::new(child.stderr.take().expect("piped"));
        let mut line = String::new();
        stderr.read_line(&mut line).expect("the server's first line");
        let addr = line
            .split("listening on ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no address in {line:?}"))
            .to_string();
        // Keep draining its log so it never blocks on a full pipe.
        std::thread::spawn(move || std::io::copy(&mut stderr, &mut std::io::sink()));
        BenchServer { child, addr }
    }
}

impl Drop for BenchServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
