//! `clean_stale`: a dead owner's leftovers go, a live owner's stay.

mod common;

use std::os::unix::fs::MetadataExt;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use tcptail_netns::process::is_alive;
use tcptail_netns::stale::clean_stale_links_in;
use tcptail_netns::{Cleanup, Netns, Scope, clean_stale, netns};

use common::{eventually, require_root};

/// A namespace created behind the library's back (as a crashed run would leave it); deleted
/// on drop whatever happens.
struct RawNetns(String);

impl RawNetns {
    fn add(name: String) -> Self {
        let st = Command::new("ip").args(["netns", "add", &name]).status().unwrap();
        assert!(st.success(), "ip netns add {name}");
        RawNetns(name)
    }
}

impl Drop for RawNetns {
    fn drop(&mut self) {
        if netns::exists(&self.0) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        }
    }
}

/// A child killed and reaped on drop.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A pid that certainly belonged to a process which is now dead.
fn dead_pid() -> u32 {
    let mut child = Command::new("true").spawn().unwrap();
    let pid = child.id();
    child.wait().unwrap();
    assert!(!is_alive(pid));
    pid
}

#[test]
fn removes_dead_owners_namespaces_and_keeps_live_ones() {
    require_root();
    let me = std::process::id();
    let dead = dead_pid();
    let stale = RawNetns::add(format!("tcptail-{dead}-t-stale-of{me}-0"));
    // A process left running inside the stale namespace.
    let inside = Reaped(
        Command::new("ip")
            .args(["netns", "exec", &stale.0, "sleep", "600"])
            .stdin(Stdio::null())
            .spawn()
            .unwrap(),
    );
    // Another run that is alive (owner: a live process) and one of our own.
    let other_run = Reaped(Command::new("sleep").arg("600").spawn().unwrap());
    let other = RawNetns::add(format!("tcptail-{}-t-stale-live-0", other_run.0.id()));
    let cleanup = Cleanup::new();
    let ours = Netns::create(&cleanup, "t-stale-ours").unwrap();
    // `ip netns exec` enters the namespace, then execs sleep in the same process: wait for
    // both, so clean_stale has a process to stop (a fixed sleep raced with it).
    let stale_ns = std::fs::metadata(format!("/run/netns/{}", stale.0)).unwrap();
    let inside_pid = inside.0.id();
    let entered = eventually(Duration::from_secs(10), || {
        let ns = std::fs::metadata(format!("/proc/{inside_pid}/ns/net"));
        let comm = std::fs::read_to_string(format!("/proc/{inside_pid}/comm"));
        ns.is_ok_and(|m| (m.dev(), m.ino()) == (stale_ns.dev(), stale_ns.ino()))
            && comm.is_ok_and(|c| c.trim() == "sleep")
    });
    assert!(entered, "ip netns exec never ran sleep inside {}", stale.0);

    let report = clean_stale(Scope::DeadOwners).unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    assert!(report.namespaces.contains(&stale.0), "{report:?}");
    assert!(!netns::exists(&stale.0));
    assert!(report.kept.contains(&other.0) && report.kept.contains(&ours.name().to_owned()));
    assert!(netns::exists(&other.0) && netns::exists(ours.name()));

    // The process inside the stale namespace was stopped.
    let mut inside = inside;
    let status = inside.0.wait().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
}

#[test]
fn removes_links_whose_alias_names_a_dead_owner() {
    require_root();
    let cleanup = Cleanup::new();
    // Tested inside a namespace so the host's links are never touched.
    let ns = Netns::create(&cleanup, "t-stale-links").unwrap();
    let dead = dead_pid();
    let me = std::process::id();
    ns.ip_batch(&[
        "link add tcptail-a type veth peer name tcptail-b".to_owned(),
        format!("link set tcptail-a alias tcptail-{dead}-x-0"),
        "link add tcptail-k type veth peer name tcptail-l".to_owned(),
        format!("link set tcptail-k alias tcptail-{me}-x-0"),
        "link add other-m type veth peer name other-n".to_owned(),
        "link set other-m alias tcptail-1-x-0".to_owned(),
    ])
    .unwrap();

    let report = clean_stale_links_in(&ns, Scope::DeadOwners).unwrap();
    assert!(report.errors.is_empty(), "{:?}", report.errors);
    let mut removed = report.links.clone();
    removed.sort();
    assert_eq!(removed, ["tcptail-a", "tcptail-b"]);
    let mut kept = report.kept.clone();
    kept.sort();
    assert_eq!(kept, ["tcptail-k", "tcptail-l"]);
    let links = ns.ip(["-o", "link", "show"]).unwrap();
    assert!(
        !links.contains("tcptail-a") && links.contains("tcptail-k") && links.contains("other-m")
    );
}
