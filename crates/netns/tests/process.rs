//! Child processes inside namespaces: environment, tracking, termination, teardown.

mod common;

use std::process::Stdio;
use std::time::{Duration, Instant};

use rustix::process::{Pid, Signal, kill_process};
use tcptail_netns::{Cleanup, Group, Netns, Processes, Topology, netns};

use common::{eventually, process_gone, require_root};

#[test]
fn commands_run_inside_with_the_lab_environment() {
    require_root();
    let cleanup = Cleanup::new();
    let mut topo = Topology::veth_pair("t-env-c", "t-env-s").build(&cleanup).unwrap();
    let mut cmd = topo.client_command("sh");
    cmd.args(["-c", "echo $TCPTAIL_SERVER_ADDR $TCPTAIL_CLIENT_ADDR; readlink /proc/self/ns/net"])
        .stdout(Stdio::piped());
    let out = cmd.output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let mut lines = text.lines();
    assert_eq!(lines.next(), Some("10.77.0.2 10.77.0.1"));
    let inside = lines.next().unwrap().to_owned();
    let client_ns =
        topo.client().run(|| std::fs::read_link("/proc/thread-self/ns/net").unwrap()).unwrap();
    assert_eq!(inside, client_ns.to_string_lossy());

    // Through Processes: tracked, waited, reaped, deregistered.
    let mut cmd = topo.server_command("sh");
    cmd.args(["-c", "exit 7"]);
    let pid = topo.processes().spawn("exit7", cmd, Group::Own).unwrap();
    let exited = topo.processes().wait(pid).unwrap();
    assert_eq!((exited.label.as_str(), exited.status.code()), ("exit7", Some(7)));
    assert!(topo.processes().is_empty());
}

#[test]
fn kill_all_escalates_to_sigkill_and_reaps() {
    require_root();
    let cleanup = Cleanup::new();
    let ns = Netns::create(&cleanup, "t-killall").unwrap();
    let mut procs = Processes::new(&cleanup);
    let mut polite = ns.command("sleep");
    polite.arg("600");
    let polite = procs.spawn("polite", polite, Group::Own).unwrap();
    // A shell that ignores SIGTERM, as do the children it starts (an ignored signal stays
    // ignored across exec): ten background sleeps and the loop's own. Only SIGKILL to the
    // group ends them, and kill_all must not return before every one is gone.
    let mut stubborn = ns.command("sh");
    stubborn.args([
        "-c",
        "trap '' TERM; for i in 1 2 3 4 5 6 7 8 9 10; do sleep 600 & done; \
         while :; do sleep 1; done",
    ]);
    let stubborn = procs.spawn("stubborn", stubborn, Group::Own).unwrap();
    // polite, the shell, its ten sleeps and the loop's: the shell set its trap before
    // starting any of them, so once they are all seen it is in place.
    assert!(
        eventually(Duration::from_secs(10), || ns.pids().unwrap().len() >= 13),
        "children not seen inside the namespace: {:?}",
        ns.pids()
    );
    assert_eq!(cleanup.pending(), 3);

    let started = Instant::now();
    let exited = procs.kill_all(Duration::from_millis(500));
    let took = started.elapsed();
    assert_eq!(exited.len(), 2);
    let by_pid = |pid| exited.iter().find(|e| e.pid == pid).unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(by_pid(polite).status.signal(), Some(libc::SIGTERM));
    assert_eq!(by_pid(stubborn).status.signal(), Some(libc::SIGKILL));
    assert!(took >= Duration::from_millis(500), "SIGKILL came early: {took:?}");
    assert!(procs.is_empty());
    assert!(ns.pids().unwrap().is_empty(), "survived kill_all: {:?}", ns.pids());
    assert_eq!(cleanup.pending(), 1, "only the namespace is left registered");
}

#[test]
fn a_child_killed_mid_run_leaves_no_namespace_or_process() {
    require_root();
    let cleanup = Cleanup::new();
    let mut topo = Topology::routed("t-mid-c", "t-mid-r", "t-mid-s").build(&cleanup).unwrap();
    let mut server = topo.server_command("sleep");
    server.arg("600");
    let server = topo.processes().spawn("server", server, Group::Own).unwrap();
    // A daemon that escapes our process group entirely: only namespace teardown can find it.
    let mut daemon = topo.client_command("setsid");
    daemon.args(["-f", "sleep", "600"]);
    assert!(daemon.status().unwrap().success());
    assert!(eventually(Duration::from_secs(5), || { topo.client().pids().unwrap().len() == 1 }));
    let daemon_pid = topo.client().pids().unwrap()[0];

    // The server dies mid-run.
    kill_process(Pid::from_raw(server as i32).unwrap(), Signal::KILL).unwrap();
    let exited = topo.processes().wait(server).unwrap();
    assert!(!exited.status.success());

    let names: Vec<String> = [topo.client(), topo.router().unwrap(), topo.server()]
        .iter()
        .map(|ns| ns.name().to_owned())
        .collect();
    drop(topo);
    for name in &names {
        assert!(!netns::exists(name), "{name} left behind");
    }
    assert!(
        eventually(Duration::from_secs(3), || process_gone(daemon_pid)),
        "escaped daemon {daemon_pid} survived teardown"
    );
    assert_eq!(cleanup.pending(), 0);
}

#[test]
fn registry_run_kills_registered_children() {
    require_root();
    let cleanup = Cleanup::new();
    let ns = Netns::create(&cleanup, "t-regkill").unwrap();
    let mut procs = Processes::new(&cleanup);
    let mut cmd = ns.command("sleep");
    cmd.arg("600");
    let pid = procs.spawn("sleeper", cmd, Group::Inherit).unwrap();
    let name = ns.name().to_owned();
    // The forced path (what the signal watcher does after its grace period).
    assert_eq!(cleanup.run(), 2);
    assert!(!netns::exists(&name));
    let exited = procs.wait(pid).unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(exited.status.signal(), Some(libc::SIGKILL));
    drop((procs, ns));
}
