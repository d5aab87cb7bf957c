//! A separate process builds a topology with a child inside and is then signalled:
//! SIGKILL (nothing can run; `clean_stale` recovers), SIGTERM to a process that does not
//! cooperate (the watcher tears down after the grace and exits 143), SIGINT to one that does
//! (the child is terminated, `main` returns and `Drop` tears down).
//!
//! The helper process is this test binary re-executed to run the ignored `helper` test.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};
use tcptail_netns::{Cleanup, Group, Scope, Topology, clean_stale, netns, signal};

use common::{eventually, process_gone, require_root};

const MODE_ENV: &str = "TCPTAIL_NETNS_SIGNAL_HELPER";

#[test]
#[ignore = "helper process for the other tests in this file, which run it themselves"]
fn helper() {
    let mode = std::env::var(MODE_ENV).expect("run by the signal tests");
    let grace =
        if mode == "cooperate" { Duration::from_secs(30) } else { Duration::from_millis(300) };
    signal::install(grace).unwrap();
    let cleanup = Cleanup::new();
    let mut topo = Topology::veth_pair("sig-c", "sig-s").build(&cleanup).unwrap();
    let mut cmd = topo.server_command("sleep");
    cmd.arg("600");
    let pid = topo.processes().spawn("sleeper", cmd, Group::Own).unwrap();
    println!("READY {} {} {pid}", topo.client().name(), topo.server().name());
    if mode == "cooperate" {
        // Blocks until the watcher's SIGTERM ends the child, then returns normally.
        let exited = topo.processes().wait(pid).unwrap();
        assert!(signal::shutdown_requested());
        drop(topo);
        println!("COOPERATED {:?} {:?}", signal::received(), exited.status);
    } else {
        loop {
            std::thread::sleep(Duration::from_secs(1));
        }
    }
}

struct Helper {
    child: Child,
    lines: mpsc::Receiver<String>,
    namespaces: Vec<String>,
    sleeper: u32,
}

impl Helper {
    fn start(mode: &str) -> Helper {
        let exe = std::env::current_exe().unwrap();
        let mut child = Command::new(exe)
            .args(["helper", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
            .env(MODE_ENV, mode)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut helper = Helper { child, lines, namespaces: Vec::new(), sleeper: 0 };
        let ready = helper
            .line_starting("READY ", Duration::from_secs(30))
            .expect("helper never became ready (see its stderr above)");
        let fields: Vec<&str> = ready.split_whitespace().collect();
        helper.namespaces = vec![fields[1].to_owned(), fields[2].to_owned()];
        helper.sleeper = fields[3].parse().unwrap();
        for name in &helper.namespaces {
            assert!(netns::exists(name), "{name} missing while the helper runs");
        }
        assert!(!process_gone(helper.sleeper));
        helper
    }

    /// The next output line containing `prefix`, from `prefix` on (libtest prints
    /// `test helper ... ` without a newline before the helper's own output).
    fn line_starting(&self, prefix: &str, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(at) = line.find(prefix) {
                        return Some(line[at..].to_owned());
                    }
                }
                Err(_) => return None,
            }
        }
    }

    fn signal(&self, sig: Signal) {
        kill_process(Pid::from_raw(self.child.id() as i32).unwrap(), sig).unwrap();
    }

    fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(Instant::now() < deadline, "helper did not exit within {timeout:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn assert_all_gone(&self) {
        for name in &self.namespaces {
            assert!(!netns::exists(name), "{name} left behind");
        }
        assert!(
            eventually(Duration::from_secs(3), || process_gone(self.sleeper)),
            "child {} survived",
            self.sleeper
        );
    }
}

impl Drop for Helper {
    /// Whatever happened, kill the helper and remove its leftovers (only its own: a global
    /// `clean_stale` here would race with the SIGKILL test running concurrently).
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if self.sleeper != 0 && !process_gone(self.sleeper) {
            let _ = kill_process(Pid::from_raw(self.sleeper as i32).unwrap(), Signal::KILL);
        }
        for name in &self.namespaces {
            if netns::exists(name) {
                let _ = Command::new("ip").args(["netns", "del", name]).status();
            }
        }
    }
}

#[test]
fn sigkill_leaves_leftovers_that_clean_stale_recovers() {
    require_root();
    let mut helper = Helper::start("hold");
    helper.signal(Signal::KILL);
    let status = helper.wait(Duration::from_secs(10));
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(status.signal(), Some(libc::SIGKILL));
    // No cleanup could run: the namespaces are still there. The child died with the helper
    // (PR_SET_PDEATHSIG), before any clean_stale.
    for name in &helper.namespaces {
        assert!(netns::exists(name), "{name} vanished without clean_stale");
    }
    assert!(
        eventually(Duration::from_secs(3), || process_gone(helper.sleeper)),
        "child {} outlived the SIGKILLed run",
        helper.sleeper
    );

    let report = clean_stale(Scope::DeadOwners).unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    helper.assert_all_gone();
}

#[test]
fn sigterm_to_an_uncooperative_process_cleans_up_and_exits_143() {
    require_root();
    let mut helper = Helper::start("hold");
    helper.signal(Signal::TERM);
    let status = helper.wait(Duration::from_secs(15));
    assert_eq!(status.code(), Some(128 + libc::SIGTERM), "{status:?}");
    // No clean_stale here: the helper's own watcher removed everything.
    helper.assert_all_gone();
}

#[test]
fn sigint_to_a_cooperating_process_unwinds_through_drop() {
    require_root();
    let mut helper = Helper::start("cooperate");
    let started = Instant::now();
    helper.signal(Signal::INT);
    let line = helper
        .line_starting("COOPERATED ", Duration::from_secs(15))
        .expect("helper did not report cooperating");
    assert!(line.contains(&format!("Some({})", libc::SIGINT)), "{line}");
    let status = helper.wait(Duration::from_secs(15));
    assert!(status.success(), "{status:?}");
    // Well within the 30 s grace: the normal Drop path did the work, not the watcher.
    assert!(started.elapsed() < Duration::from_secs(20));
    helper.assert_all_gone();
}
