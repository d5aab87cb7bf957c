//! The real `tcptail lab` binary, as root, in namespaces it creates itself: bad specs rejected
//! before anything exists, exit codes (COMMAND's, also when the lab fails after it ran),
//! `lab exec`, the refusal without root, and cleanup after SIGTERM/SIGINT (by itself) and
//! SIGKILL (its commands die with it; `lab clean` or the next lab command removes the rest):
//! no namespace, no process of the run and no link left. What paths do to traffic is measured
//! in `lab_shaping.rs`.
//!
//! Every run is a child process whose namespaces are named `tcptail-<child pid>-...`; a guard
//! removes whatever such a namespace is left after the test looked (also when it fails). The
//! tests take one lock so that measurements never share the two vCPUs with another lab.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

mod common;

use common::{Guard, bin, finish, lab_lock, namespaces_of, run, spawn};

fn eventually(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    cond()
}

fn report(out: &Path) -> Value {
    let text = std::fs::read_to_string(out.join("lab-report.json")).expect("lab-report.json");
    serde_json::from_str(&text).expect("report is JSON")
}

#[test]
fn bad_specs_fail_before_anything_is_created() {
    let _lock = lab_lock();
    let dir = tempfile::tempdir().unwrap();
    let bad_trace = dir.path().join("bad-line3.trace");
    std::fs::write(&bad_trace, "1\n2\n2.5\n4\n").unwrap();
    let bad = bad_trace.to_str().unwrap();
    let good_trace = dir.path().join("good.trace");
    std::fs::write(&good_trace, "1\n").unwrap();
    let good = good_trace.to_str().unwrap();
    let good_pair = format!("{good},{good}");
    let missing = dir.path().join("missing.trace");
    let missing = missing.to_str().unwrap();
    let a_dir = dir.path().to_str().unwrap();
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        (vec!["--rate", "30mbit", "--rtt", "-5ms"], vec!["--rtt", "must not be negative"]),
        (vec!["--rate", "0mbit", "--rtt", "10ms"], vec!["--rate", "greater than zero"]),
        (vec!["--rate", "30furlongs"], vec!["--rate", "unknown unit 'furlongs'"]),
        (vec!["--rate", "30mbit", "--loss", "101%"], vec!["--loss", "at most 100%"]),
        (
            vec!["--rate-up", "1mbit", "--rate-down", "0bit"],
            vec!["--rate-down", "greater than zero"],
        ),
        (vec!["--trace", bad], vec!["bad-line3.trace", "line 3", "--trace"]),
        (vec!["--trace", missing], vec!["missing.trace", "cannot read"]),
        (vec!["--trace", a_dir], vec![a_dir, "cannot read"]),
        (vec!["--trace-up", missing, "--rate-down", "1mbit"], vec!["--trace-up", "cannot read"]),
        // `--trace UP,DOWN` is split at the comma: two readable traces, so --rate is unused.
        (
            vec!["--trace", &good_pair, "--rate", "1mbit"],
            vec!["--rate", "each direction already has its own"],
        ),
        (
            vec!["--trace-down", good, "--trace", &good_pair],
            vec!["--trace-down", "--trace UP,DOWN already gives the down"],
        ),
        (vec!["--rate", "1mbit", "--rtt", "4ms", "--jitter", "3ms"], vec!["--jitter", "delay"]),
        (vec!["--rate", "1mbit", "--buffer", "12"], vec!["--buffer", "no unit"]),
        (vec!["--emulator", "none", "--rate", "1mbit"], vec!["--rate", "plain veth"]),
        (
            vec!["--rate", "1mbit", "--threads", "dual"],
            vec![
                "--threads",
                "unknown thread layout 'dual' (use single, per-direction, split or pipeline)",
            ],
        ),
        (
            vec!["--emulator", "none", "--threads", "split"],
            vec!["--threads", "only the built-in emulator has threads", "not none"],
        ),
        (vec!["--rate", "1mbit", "--emulator-cpu", "first"], vec!["--emulator-cpu", "'first'"]),
        (vec!["--rate", "1mbit", "--steer"], vec!["--steer", "needs --emulator-cpu N|last"]),
        (
            vec!["--rate", "1mbit", "--emulator-cpu", "100000"],
            vec!["--emulator-cpu", "CPU 100000 is not usable here: no such CPU"],
        ),
        (
            vec!["--emulator", "none", "--emulator-cpu", "last"],
            vec!["--emulator-cpu", "only the built-in emulator has threads to place"],
        ),
    ];
    for (flags, expected) in cases {
        let out = dir.path().join("out");
        let mut args = vec!["lab", "path", "--out", out.to_str().unwrap()];
        args.extend(&flags);
        args.extend(["--", "true"]);
        let done = run(&args, Duration::from_secs(10));
        assert_eq!(done.status.code(), Some(2), "{flags:?}: {}", done.stderr);
        for word in expected {
            assert!(done.stderr.contains(word), "{flags:?}: {word:?} not in {}", done.stderr);
        }
        assert!(done.leftovers.is_empty(), "{flags:?}: {:?}", done.leftovers);
        assert!(!out.exists(), "{flags:?}: the run got as far as creating its output directory");
    }
    let done = run(
        &["lab", "path", "--rate", "1mbit", "--", "no-such-program-xyz"],
        Duration::from_secs(10),
    );
    assert_eq!(done.status.code(), Some(2));
    assert!(done.stderr.contains("`no-such-program-xyz` was not found on PATH"), "{}", done.stderr);
}

/// Accepts one connection on port 7980 in the server namespace, reads it to its end and
/// prints `N bytes sha256 HEX` of what arrived.
const DIGEST_SERVER: &str = "exec python3 -c '
import hashlib, socket
l = socket.create_server((\"0.0.0.0\", 7980))
c, h, n = l.accept()[0], hashlib.sha256(), 0
while True:
    b = c.recv(65536)
    if not b:
        break
    h.update(b)
    n += len(b)
print(\"%d bytes sha256 %s\" % (n, h.hexdigest()), flush=True)
c.close()
'";

/// Sends 4 MiB of a byte pattern to the server's port 7980, closes, and prints what
/// [`DIGEST_SERVER`] prints for the same bytes.
const DIGEST_CLIENT: &str = "python3 -c '
import hashlib, os, socket
data = bytes(range(251)) * 16710 + bytes(range(94))
s = socket.create_connection((os.environ[\"TCPTAIL_SERVER_ADDR\"], 7980), timeout=30)
s.sendall(data)
s.shutdown(socket.SHUT_WR)
s.recv(1)
print(\"%d bytes sha256 %s\" % (len(data), hashlib.sha256(data).hexdigest()))
'";

/// Every thread layout of the built-in emulator (`--threads`) carries a transfer end to end,
/// and `lab-report.json` names the layout and holds one CPU entry per thread it ran.
#[test]
fn every_thread_layout_carries_a_transfer_and_is_recorded() {
    let _lock = lab_lock();
    let layouts: [(&str, &[&str]); 4] = [
        ("single", &["forward up,down"]),
        ("per-direction", &["forward up", "forward down"]),
        ("split", &["read up", "release up", "read down", "release down"]),
        ("pipeline", &["read up,down", "release up,down"]),
    ];
    for (layout, roles) in layouts {
        let out = tempfile::tempdir().unwrap();
        let args = [
            "lab",
            "path",
            "--out",
            out.path().to_str().unwrap(),
            "--rate",
            "100mbit",
            "--rtt",
            "4ms",
            "--threads",
            layout,
            "--server-cmd",
            DIGEST_SERVER,
            "--server-ready",
            "7980",
            "--",
            "sh",
            "-c",
            DIGEST_CLIENT,
        ];
        let done = run(&args, Duration::from_secs(60));
        assert!(done.status.success(), "{layout}: {:?}\n{}", done.status, done.stderr);
        assert!(done.leftovers.is_empty(), "{layout}: left {:?}", done.leftovers);
        let sent = done.stdout.trim();
        assert!(sent.starts_with("4194304 bytes sha256 "), "{layout}: client printed {sent:?}");
        let server_log = std::fs::read_to_string(out.path().join("server.log")).unwrap();
        assert_eq!(server_log.trim(), sent, "{layout}: what arrived differs from what was sent");
        if layout != "single" {
            let banner = format!("via the built-in emulator (threads: {layout})");
            assert!(done.stderr.contains(&banner), "{layout}: banner: {}", done.stderr);
        }

        let report = report(out.path());
        assert_eq!(report["threads"], layout, "{layout}: lab-report.json");
        let emulator = &report["emulator_report"];
        assert_eq!(emulator["threads"], layout, "{layout}: the emulator's own report");
        let mut ran: Vec<&str> = emulator["thread_cpu"]
            .as_array()
            .expect("thread_cpu")
            .iter()
            .map(|t| t["role"].as_str().expect("role"))
            .collect();
        ran.sort_unstable();
        let mut expected = roles.to_vec();
        expected.sort_unstable();
        assert_eq!(ran, expected, "{layout}: the threads that ran");
        let forwarded = emulator["up"]["forwarded"]["bytes"].as_u64().expect("forwarded bytes");
        assert!(forwarded >= 4 << 20, "{layout}: the emulator forwarded {forwarded} bytes up");
    }
}

#[test]
fn command_exit_code_propagates() {
    let _lock = lab_lock();
    let cases = [
        (vec!["--rate", "10mbit", "--rtt", "2ms"], "exit 3", 3),
        (vec!["--emulator", "none"], "exit 0", 0),
        (vec!["--emulator", "none"], "kill -TERM $$", 128 + 15),
    ];
    for (flags, script, code) in cases {
        let out = tempfile::tempdir().unwrap();
        let mut args = vec!["lab", "path", "--out", out.path().to_str().unwrap()];
        args.extend(&flags);
        args.extend(["--", "sh", "-c", script]);
        let done = run(&args, Duration::from_secs(20));
        assert_eq!(done.status.code(), Some(code), "{script}: {}", done.stderr);
        assert!(done.leftovers.is_empty(), "{:?}", done.leftovers);
        let report = report(out.path());
        assert_eq!(report["client"]["command"][2], script);
    }
}

#[test]
fn a_lab_failure_after_command_ran_keeps_its_exit_code() {
    let _lock = lab_lock();
    // COMMAND exits 3 after making the report's path a directory, so the lab cannot write
    // lab-report.json: the lab says so on stderr and still exits with COMMAND's 3.
    let out = tempfile::tempdir().unwrap();
    let out_dir = out.path().to_str().unwrap();
    let script = format!("mkdir {out_dir}/lab-report.json; exit 3");
    for emulator in ["none", "builtin"] {
        let mut args = vec!["lab", "path", "--out", out_dir, "--emulator", emulator];
        if emulator == "builtin" {
            args.extend(["--rate", "10mbit", "--rtt", "2ms"]);
        }
        args.extend(["--", "sh", "-c", &script]);
        let done = run(&args, Duration::from_secs(20));
        assert_eq!(done.status.code(), Some(3), "{emulator}: {}", done.stderr);
        assert!(
            done.stderr.contains("error: lab: ") && done.stderr.contains("lab-report.json"),
            "{emulator}: the lab's error is not on stderr: {}",
            done.stderr
        );
        assert!(done.leftovers.is_empty(), "{emulator}: {:?}", done.leftovers);
        std::fs::remove_dir(out.path().join("lab-report.json")).unwrap();
    }
}

/// Processes (other than this test) whose command line contains `marker`.
fn processes_with(marker: &str) -> Vec<String> {
    let me = std::process::id().to_string();
    std::fs::read_dir("/proc")
        .expect("/proc")
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_str().is_some_and(|n| n != me && n.parse::<u32>().is_ok()))
        .filter_map(|e| {
            let raw = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmd = String::from_utf8_lossy(&raw).replace('\0', " ");
            cmd.contains(marker).then(|| format!("{}: {}", e.file_name().to_string_lossy(), cmd))
        })
        .collect()
}

/// Links in the host's namespace that a run of `pid` created (the lab names each link's
/// namespace in its `ifalias`), or that carry the lab's `tcptail-` prefix.
fn links_of(pid: u32) -> Vec<String> {
    let out = Command::new("ip").args(["-o", "link", "show"]).output().expect("ip link");
    let owner = format!("tcptail-{pid}-");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| {
            l.contains(&owner) || l.split(": ").nth(1).is_some_and(|n| n.starts_with("tcptail-"))
        })
        .map(str::to_owned)
        .collect()
}

/// A unique sleep length: its text marks one process of one run in `/proc/*/cmdline`.
fn marker(n: i32) -> String {
    format!("{}.{}{n}", 600 + n, std::process::id())
}

/// Asserts that nothing of the run of `pid` is left: namespaces, processes, links.
fn assert_nothing_left(pid: u32, markers: &[&str], what: &str) {
    let ok = eventually(Duration::from_secs(5), || {
        namespaces_of(pid).is_empty() && markers.iter().all(|m| processes_with(m).is_empty())
    });
    for m in markers {
        assert!(processes_with(m).is_empty(), "{what}: processes left: {:?}", processes_with(m));
    }
    assert!(
        ok && namespaces_of(pid).is_empty(),
        "{what}: namespaces left: {:?}",
        namespaces_of(pid)
    );
    assert!(links_of(pid).is_empty(), "{what}: links left: {:?}", links_of(pid));
}

fn wait_for_namespaces(guard: &mut Guard, count: usize) -> Vec<String> {
    let pid = guard.pid;
    let ok = eventually(Duration::from_secs(15), || {
        namespaces_of(pid).len() >= count
            && std::fs::read_to_string(format!("/proc/{pid}/status")).is_ok()
    });
    assert!(ok, "the lab's namespaces did not appear: {:?}", namespaces_of(pid));
    // Setup is done once the banner is out; the namespaces exist before that.
    common::wait_for_stderr(guard, "lab: client ");
    namespaces_of(pid)
}

/// Whether process `pid` has a child whose command line starts with `program`.
fn has_child(pid: u32, program: &str) -> bool {
    let Ok(dir) = std::fs::read_dir("/proc") else { return false };
    dir.filter_map(Result::ok).any(|e| {
        let path = e.path();
        let stat = std::fs::read_to_string(path.join("stat")).unwrap_or_default();
        // "pid (comm) state ppid ...": the comm may hold spaces, so read after the last ')'.
        let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1));
        let cmd = std::fs::read(path.join("cmdline")).unwrap_or_default();
        ppid == Some(pid.to_string().as_str()) && cmd.starts_with(program.as_bytes())
    })
}

/// Starts a lab run (10 Mbit/s, 10 ms) with `server_cmd` as its server and `sleep CLIENT` as
/// its client, and waits for its two namespaces (returned by name).
fn spawn_sleeping_lab(server_cmd: &str, client: &str) -> (Guard, Vec<String>) {
    let mut guard = spawn(&[
        "lab",
        "path",
        "--rate",
        "10mbit",
        "--rtt",
        "10ms",
        "--server-cmd",
        server_cmd,
        "--server-ready",
        "100ms",
        "--",
        "sleep",
        client,
    ]);
    let names = wait_for_namespaces(&mut guard, 2);
    (guard, names)
}

#[test]
fn sigterm_and_sigint_clean_up_by_themselves() {
    let _lock = lab_lock();
    for (signal, number) in [("TERM", 15), ("INT", 2)] {
        // The server and the client sleep for lengths no other process uses; deleting a
        // namespace does not kill what runs in it, so they are looked for by name.
        let (server, client) = (marker(number), marker(number + 100));
        let (guard, names) = spawn_sleeping_lab(&format!("sleep {server}"), &client);
        let alive = |m: &str| eventually(Duration::from_secs(5), || !processes_with(m).is_empty());
        assert!(alive(&format!("sleep {server}")), "SIG{signal}: the server never ran");
        assert!(alive(&format!("sleep {client}")), "SIG{signal}: the client never ran");
        let pid = guard.pid;
        let sent = Command::new("kill").args([&format!("-{signal}"), &pid.to_string()]).status();
        assert!(sent.unwrap().success());
        let done = finish(guard, Duration::from_secs(15));
        assert_eq!(done.status.code(), Some(128 + number), "SIG{signal}: {}", done.stderr);
        assert!(done.leftovers.is_empty(), "SIG{signal} left {:?}", done.leftovers);
        for name in names {
            assert!(!Path::new("/run/netns").join(&name).exists(), "{name} still mounted");
        }
        assert_nothing_left(pid, &[&server, &client], &format!("SIG{signal}"));
    }
}

/// With a terminal, Ctrl-C reaches the interactive command itself (a shell ignores it), so the
/// lab must not shut down on SIGINT while that command runs; SIGTERM still does. `script`
/// (util-linux) gives the run a pseudo-terminal.
#[test]
fn sigint_belongs_to_an_interactive_command() {
    let _lock = lab_lock();
    for (signal, expect_done) in [("INT", true), ("TERM", false)] {
        let out = tempfile::tempdir().expect("tempdir");
        let log = out.path().join("tty.log");
        // The lab's --out is a new directory beside the terminal log (an existing one must be
        // empty).
        let command = format!(
            "{} lab path --out {} --rate 10mbit --rtt 2ms -- sh -c 'sleep 2; echo client-$((40+2))'",
            bin().display(),
            out.path().join("lab").display()
        );
        let mut script = Command::new("script")
            .args(["-qec", &command, log.to_str().expect("utf-8 path")])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("`script` (util-linux) runs the lab on a pseudo-terminal");
        // The lab's pid: the tcptail process whose command line names this test's --out.
        let marker = out.path().display().to_string();
        let mut lab_pid = None;
        let found = eventually(Duration::from_secs(10), || {
            lab_pid = std::fs::read_dir("/proc").ok().and_then(|d| {
                d.filter_map(|e| e.ok()?.file_name().into_string().ok()?.parse::<u32>().ok()).find(
                    |pid| {
                        let cmd = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
                        let cmd = String::from_utf8_lossy(&cmd);
                        cmd.starts_with(bin().to_str().expect("utf-8"))
                            && cmd.contains(&marker)
                            && !namespaces_of(*pid).is_empty()
                    },
                )
            });
            lab_pid.is_some()
        });
        assert!(found, "the lab did not start under script");
        let pid = lab_pid.expect("found");
        // Setup is over once the interactive command runs.
        let running = eventually(Duration::from_secs(30), || has_child(pid, "sh\0-c"));
        assert!(running, "SIG{signal}: the lab's command never started");
        let sent = Command::new("kill").args([&format!("-{signal}"), &pid.to_string()]).status();
        assert!(sent.expect("kill").success());
        let exited = eventually(Duration::from_secs(15), || {
            script.try_wait().expect("wait for script").is_some()
        });
        if !exited {
            let _ = script.kill();
        }
        assert!(exited, "SIG{signal}: the lab did not end");
        let tty = std::fs::read_to_string(&log).unwrap_or_default();
        assert_eq!(tty.contains("client-42"), expect_done, "SIG{signal}: terminal output:\n{tty}");
        assert!(namespaces_of(pid).is_empty(), "SIG{signal} left {:?}", namespaces_of(pid));
    }
}

#[test]
fn sigkill_kills_the_commands_and_lab_clean_removes_the_rest() {
    let _lock = lab_lock();
    let (server, client) = (marker(9), marker(109));
    let (mut guard, names) = spawn_sleeping_lab(&format!("exec sleep {server}"), &client);
    let _ = guard.child.kill();
    let _ = guard.child.wait();
    assert_eq!(namespaces_of(guard.pid), names, "a SIGKILLed run cannot clean up after itself");
    // Its commands die with it (PR_SET_PDEATHSIG), before any other lab command runs.
    for m in [&server, &client] {
        let gone = eventually(Duration::from_secs(5), || processes_with(m).is_empty());
        assert!(gone, "sleep {m} outlived the run: {:?}", processes_with(m));
    }

    let clean = Command::new(bin()).args(["lab", "clean"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&clean.stdout);
    assert!(clean.status.success(), "{stdout}{}", String::from_utf8_lossy(&clean.stderr));
    for name in &names {
        assert!(stdout.contains(&format!("removed namespace {name}")), "{stdout}");
        assert!(!Path::new("/run/netns").join(name).exists());
    }
    assert_nothing_left(guard.pid, &[&server, &client], "lab clean");
}

#[test]
fn exec_runs_commands_on_either_side_of_a_running_lab() {
    let _lock = lab_lock();
    let mut guard =
        spawn(&["lab", "path", "--rate", "10mbit", "--rtt", "10ms", "--", "sleep", "30"]);
    wait_for_namespaces(&mut guard, 2);
    let run = guard.pid.to_string();
    let exec = |side: &str, script: &str| {
        Command::new(bin())
            .args(["lab", "exec", side, "--run", &run, "--", "sh", "-c", script])
            .output()
            .unwrap()
    };
    let server =
        exec("--server", "echo $TCPTAIL_SERVER_ADDR $TCPTAIL_CLIENT_ADDR; ip -br addr; exit 7");
    let text = String::from_utf8_lossy(&server.stdout);
    assert_eq!(server.status.code(), Some(7));
    assert!(text.starts_with("10.77.0.2 10.77.0.1"), "{text}");
    assert!(text.contains("10.77.0.2 peer 10.77.0.1"), "{text}");
    let client = exec("--client", "ip -br addr");
    assert!(String::from_utf8_lossy(&client.stdout).contains("10.77.0.1 peer 10.77.0.2"));
    let router = exec("--router", "true");
    assert_eq!(router.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&router.stderr).contains("no router namespace"));
    let unknown =
        Command::new(bin()).args(["lab", "exec", "--run", "1", "--", "true"]).output().unwrap();
    assert_eq!(unknown.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&unknown.stderr).contains("--run 1"));
    drop(guard);
}

#[test]
fn without_root_it_says_so() {
    let _lock = lab_lock();
    // Copy the binary where an unprivileged user can run it, and run it as `nobody`: std's
    // `CommandExt::uid`/`gid` drop privileges in the child (setgid, setgroups, setuid) before
    // exec, so this needs no helper tool.
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("tcptail");
    std::fs::copy(bin(), &exe).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let (nobody, nogroup) = (65534, 65534);
    for sub in
        [&["path", "--rate", "10mbit", "--", "true"][..], &["clean"], &["exec", "--", "true"]]
    {
        let out = Command::new(&exe)
            .arg("lab")
            .args(sub)
            .uid(nobody)
            .gid(nogroup)
            .output()
            .unwrap_or_else(|e| panic!("running {} as uid {nobody}: {e}", exe.display()));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "lab {sub:?}: {stderr}");
        assert!(stderr.contains("needs root") && stderr.contains("sudo"), "lab {sub:?}: {stderr}");
    }
}

#[test]
fn help_documents_the_flag_syntax() {
    let out = Command::new(bin()).args(["lab", "path", "--help"]).output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    for word in [
        "--rate-up",
        "--delay-down",
        "--buffer-up",
        "ge:1%,burst=4",
        "250pkt",
        "codel",
        "--server-ready",
        "--emulator",
        "--trace-up",
        "--trace-down",
        "TCPTAIL_SERVER_ADDR",
        "--threads",
        "per-direction",
        "pipeline",
    ] {
        assert!(help.contains(word), "{word} missing from lab path --help");
    }
}

/// A tiny xorshift generator: the kill points are random, and the seed is printed so that a
/// failing sequence can be replayed (`TCPTAIL_KILL_SEED`).
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: Duration) -> Duration {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        n.mul_f64((self.0 % 10_000) as f64 / 10_000.0)
    }
}

#[test]
fn runs_killed_at_random_points_leave_nothing_after_the_next_lab_command() {
    let _lock = lab_lock();
    let seed =
        std::env::var("TCPTAIL_KILL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or_else(|| {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH);
            now.map_or(1, |d| d.as_nanos() as u64) | 1
        });
    let mut rng = Rng(seed);
    // The phases of one run, measured on this machine now: setup ends with the banner,
    // the workload is the client's sleep, teardown follows it.
    let workload = Duration::from_millis(300);
    let args = |server: &str, client: &str| -> Vec<String> {
        ["lab", "path", "--rate", "10mbit", "--rtt", "2ms", "--server-cmd"]
            .iter()
            .map(|s| s.to_string())
            .chain([format!("exec sleep {server}"), "--server-ready".into(), "50ms".into()])
            .chain(["--", "sleep", client].iter().map(|s| s.to_string()))
            .collect()
    };
    let reference = {
        let a = args(&marker(300), &format!("{:.3}", workload.as_secs_f64()));
        let started = Instant::now();
        let done = run(&a.iter().map(String::as_str).collect::<Vec<_>>(), Duration::from_secs(20));
        assert_eq!(done.status.code(), Some(0), "{}", done.stderr);
        started.elapsed()
    };
    let setup = reference.saturating_sub(workload);
    eprintln!("seed {seed}: a whole run takes {reference:?} (setup + teardown {setup:?})");
    // A concurrent run that stays alive throughout: no other run's cleanup may touch it.
    let bystander_cmd = marker(399);
    let mut bystander =
        spawn(&["lab", "path", "--emulator", "none", "--", "sleep", &bystander_cmd]);
    let bystander_ns = wait_for_namespaces(&mut bystander, 2);
    let mut killed = Vec::new();
    for i in 0..20 {
        // Each run's processes carry their own markers; the client sleeps for the workload.
        let server = marker(310 + i);
        let client = format!("0.3{i:02}{}", std::process::id());
        // Setup and teardown share what the reference run spent outside the workload.
        let when = match i % 3 {
            0 => rng.below(setup),
            1 => setup / 2 + rng.below(workload),
            _ => setup / 2 + workload + rng.below(setup / 2 + Duration::from_millis(50)),
        };
        let a = args(&server, &client);
        let mut guard = spawn(&a.iter().map(String::as_str).collect::<Vec<_>>());
        std::thread::sleep(when);
        let _ = guard.child.kill();
        let _ = guard.child.wait();
        // Its direct children die with it, before any other lab command runs.
        let marks = [format!("sleep {server}"), format!("sleep {client}")];
        let gone = eventually(Duration::from_secs(5), || {
            marks.iter().all(|m| processes_with(m).is_empty())
        });
        assert!(gone, "run {i} killed after {when:?}: its commands outlived it");
        killed.push((guard, when, server, client));
    }
    // The next lab command removes what the last killed run left (each killed run's
    // successor removed its predecessor's) and says so in one line.
    let last = killed.last().map(|(g, ..)| namespaces_of(g.pid)).unwrap_or_default();
    let next = run(&["lab", "path", "--emulator", "none", "--", "true"], Duration::from_secs(20));
    assert_eq!(next.status.code(), Some(0), "{}", next.stderr);
    let lines: Vec<&str> =
        next.stderr.lines().filter(|l| l.contains("removed what dead lab runs left")).collect();
    if last.is_empty() {
        assert!(lines.len() <= 1, "{}", next.stderr);
    } else {
        assert_eq!(lines.len(), 1, "one line of what was removed: {}", next.stderr);
        for ns in &last {
            assert!(lines[0].contains(ns.as_str()), "{ns} not named: {}", lines[0]);
        }
    }
    for (guard, when, server, client) in &killed {
        assert_nothing_left(guard.pid, &[server, client], &format!("killed after {when:?}"));
    }
    assert_eq!(namespaces_of(bystander.pid), bystander_ns, "a live run's namespaces were touched");
    let alive = processes_with(&format!("sleep {bystander_cmd}"));
    assert!(!alive.is_empty(), "a live run's command was killed");
    assert!(!next.stderr.contains(&format!("tcptail-{}-", bystander.pid)), "{}", next.stderr);
}

/// The lab's own output: the default directory is new, random and private; a named `--out`
/// must be a directory the caller owns, empty unless `--force`; nothing is written through a
/// symlink planted in it.
#[test]
fn the_output_directory_is_private_and_never_written_through_links() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt, symlink};
    let _lock = lab_lock();
    let lab = |args: &[&str], tmp: &Path| {
        let out = Command::new(bin())
            .args(["lab", "path"])
            .args(args)
            .env("TMPDIR", tmp)
            .env_remove("XDG_RUNTIME_DIR")
            .output()
            .expect("run tcptail");
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let none = ["--emulator", "none", "--", "true"];

    // Default: two runs, two new directories with random names, mode 0700, owned by us.
    let tmp = tempfile::tempdir().unwrap();
    for _ in 0..2 {
        let (code, stderr) = lab(&none, tmp.path());
        assert_eq!(code, Some(0), "{stderr}");
    }
    let mut made: Vec<_> =
        std::fs::read_dir(tmp.path()).unwrap().map(|e| e.unwrap().path()).collect();
    made.sort();
    assert_eq!(made.len(), 2, "{made:?}");
    for dir in &made {
        let name = dir.file_name().unwrap().to_str().unwrap();
        let random = name.strip_prefix("tcptail-lab-").expect("named tcptail-lab-*");
        assert!(random.len() == 10 && !random.contains(&std::process::id().to_string()), "{name}");
        let meta = std::fs::symlink_metadata(dir).unwrap();
        assert!(meta.is_dir() && meta.uid() == 0, "{name}");
        assert_eq!(meta.permissions().mode() & 0o777, 0o700, "{name}");
        assert!(dir.join("lab-report.json").is_file());
    }

    // A named --out: refused when not empty (unless --force), a symlink, or someone else's.
    let base = tempfile::tempdir().unwrap();
    let victim = base.path().join("victim");
    std::fs::write(&victim, "precious").unwrap();
    let used = base.path().join("used");
    std::fs::create_dir(&used).unwrap();
    symlink(&victim, used.join("lab-report.json")).unwrap();
    let used_s = used.to_str().unwrap();
    let (code, stderr) = lab(&[&["--out", used_s][..], &none].concat(), tmp.path());
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(used_s) && stderr.contains("not empty") && stderr.contains("--force"));
    let link = base.path().join("link");
    symlink(&used, &link).unwrap();
    let (code, stderr) =
        lab(&[&["--out", link.to_str().unwrap(), "--force"][..], &none].concat(), tmp.path());
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("symbolic link"), "{stderr}");
    let theirs = base.path().join("theirs");
    std::fs::create_dir(&theirs).unwrap();
    std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
    let (code, stderr) =
        lab(&[&["--out", theirs.to_str().unwrap()][..], &none].concat(), tmp.path());
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("owned by uid 65534"), "{stderr}");
    assert_eq!(std::fs::read_dir(&theirs).unwrap().count(), 0, "nothing written into it");

    // --force: every file a run writes replaces what is there; a planted link is removed,
    // never written through (the report, server.log, and the emulator's Mahimahi logs).
    let (code, stderr) = lab(&[&["--out", used_s, "--force"][..], &none].concat(), tmp.path());
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert!(std::fs::symlink_metadata(used.join("lab-report.json")).unwrap().is_file());
    symlink(&victim, used.join("server.log")).unwrap();
    symlink(&victim, used.join("up.log")).unwrap();
    let server = ["--server-cmd", "echo hi", "--server-ready", "10ms"];
    let emulated = ["--rate", "10mbit", "--delay", "1ms", "--", "true"];
    let args = [&["--out", used_s, "--force"][..], &server, &emulated].concat();
    for run in 0..2 {
        // The second run finds the first one's files (up.log, down.log, server.log) there.
        let (code, stderr) = lab(&args, tmp.path());
        assert_eq!(code, Some(0), "run {run}: {stderr}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert_eq!(std::fs::read_to_string(used.join("server.log")).unwrap(), "hi\n");
        let up = std::fs::read_to_string(used.join("up.log")).unwrap();
        assert!(up.starts_with("# mahimahi"), "run {run}: {up:.80}");
    }
}
