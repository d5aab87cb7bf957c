//! Namespace lifecycle, scratch-thread execution, per-namespace sysctls, tuning helpers.

mod common;

use std::fs;
use std::os::unix::fs::MetadataExt;

use tcptail_netns::sysctl::host_sysctl;
use tcptail_netns::{Cleanup, Error, NetSysctl, Netns, PREFIX, Tuning, netns, sys};

use common::require_root;

fn ns_inode_here() -> u64 {
    fs::metadata("/proc/thread-self/ns/net").unwrap().ino()
}

#[test]
fn create_enter_and_delete() {
    require_root();
    let cleanup = Cleanup::new();
    let ns = Netns::create(&cleanup, "t-create").unwrap();
    let expected = format!("{PREFIX}{}-t-create-", std::process::id());
    assert!(ns.name().starts_with(&expected), "{}", ns.name());
    assert!(ns.path().exists());
    assert!(netns::list().unwrap().contains(&ns.name().to_owned()));
    assert_eq!(cleanup.pending(), 1);

    // A scratch thread is inside; this thread is not moved.
    let host = ns_inode_here();
    let inside = ns.run(ns_inode_here).unwrap();
    assert_eq!(inside, fs::metadata(ns.path()).unwrap().ino());
    assert_ne!(inside, host);
    assert_eq!(ns_inode_here(), host);

    // A fresh namespace has only a loopback device.
    let links = ns.ip(["-o", "link", "show"]).unwrap();
    assert_eq!(links.lines().count(), 1, "{links}");
    assert!(links.contains("lo:"));

    let path = ns.path();
    ns.delete().unwrap();
    assert!(!path.exists());
    assert_eq!(cleanup.pending(), 0);

    // Drop deletes too.
    let ns = Netns::create(&cleanup, "t-create-drop").unwrap();
    let path = ns.path();
    drop(ns);
    assert!(!path.exists());
}

#[test]
fn registry_run_removes_namespace_and_later_drop_is_harmless() {
    require_root();
    let cleanup = Cleanup::new();
    let ns = Netns::create(&cleanup, "t-registry").unwrap();
    let path = ns.path();
    assert_eq!(cleanup.run(), 1);
    assert!(!path.exists(), "registry did not delete {}", path.display());
    drop(ns);
    assert_eq!(cleanup.pending(), 0);
}

#[test]
fn names_are_unique_and_roles_validated() {
    require_root();
    let cleanup = Cleanup::new();
    let a = Netns::create(&cleanup, "t-uniq").unwrap();
    let b = Netns::create(&cleanup, "t-uniq").unwrap();
    assert_ne!(a.name(), b.name());
    assert!(matches!(Netns::create(&cleanup, "bad/role"), Err(Error::InvalidRole { .. })));
}

fn available_cc_other_than(current: &str) -> String {
    let avail = host_sysctl("net.ipv4.tcp_available_congestion_control").unwrap();
    avail.split_whitespace().find(|cc| *cc != current).unwrap_or(current).to_owned()
}

#[test]
fn sysctls_are_per_namespace_and_host_is_untouched() {
    require_root();
    let host_before: Vec<String> =
        NetSysctl::ALL.iter().map(|s| host_sysctl(s.key()).unwrap()).collect();
    let flip = |v: &str| if v == "0" { "1" } else { "0" }.to_owned();
    let wanted = [
        (NetSysctl::TcpRmem, "4096 65536 8765432".to_owned()),
        (NetSysctl::TcpWmem, "4096 32768 7654321".to_owned()),
        (NetSysctl::TcpSlowStartAfterIdle, flip(&host_before[2])),
        (NetSysctl::TcpCongestionControl, available_cc_other_than(&host_before[3])),
        (NetSysctl::IpForward, flip(&host_before[4])),
    ];

    let cleanup = Cleanup::new();
    let ns = Netns::create(&cleanup, "t-sysctl").unwrap();
    let other = Netns::create(&cleanup, "t-sysctl-other").unwrap();
    let other_before = other.net_sysctls().unwrap();
    for (key, value) in &wanted {
        ns.set_sysctl(key.key(), value).unwrap_or_else(|e| panic!("{key}: {e}"));
        assert_eq!(&ns.sysctl(key.key()).unwrap(), value, "{key}");
        // Cross-check through an independent path: a process started by `ip netns exec`.
        let path = format!("/proc/sys/{}", key.key().replace('.', "/"));
        let seen = ns.exec("cat", [&path]).unwrap();
        assert_eq!(&tcptail_netns::sysctl::normalize(&seen), value, "{key} via cat");
    }
    let host_after: Vec<String> =
        NetSysctl::ALL.iter().map(|s| host_sysctl(s.key()).unwrap()).collect();
    assert_eq!(host_before, host_after, "the host's sysctls changed");
    assert_eq!(other.net_sysctls().unwrap(), other_before, "another namespace changed");
}

#[test]
fn sysctl_errors_are_typed() {
    require_root();
    let cleanup = Cleanup::new();
    let ns = Netns::create(&cleanup, "t-sysctl-err").unwrap();
    assert!(matches!(ns.set_sysctl("kernel.pid_max", "4194304"), Err(Error::InvalidSysctl { .. })));
    let err = ns.set_sysctl(NetSysctl::TcpCongestionControl.key(), "no-such-cc").unwrap_err();
    assert!(matches!(err, Error::Sysctl { op: "write", .. }), "{err}");
    assert!(matches!(ns.disable_ipv6("tcptail-none"), Err(Error::Sysctl { .. })));
}

#[test]
fn tuning_helpers_report_instead_of_failing() {
    // Runs on a scratch thread so the test harness's threads keep their policy.
    std::thread::spawn(|| {
        assert_eq!(sys::set_timer_slack(1).unwrap(), Tuning::Applied);
        assert_eq!(sys::timer_slack().unwrap(), 1);
        assert!(sys::set_timer_slack(0).is_err());
        assert!(sys::set_fifo_priority(0).is_err());
        match sys::set_fifo_priority(10).unwrap() {
            Tuning::Applied => assert!(sys::is_fifo().unwrap()),
            other => {
                eprintln!("SCHED_FIFO: {other} (degraded, as designed)");
                assert!(!sys::is_fifo().unwrap());
            }
        }
    })
    .join()
    .unwrap();
}

#[test]
fn nstat_reads_the_namespace_not_the_host() {
    require_root();
    let cleanup = Cleanup::new();
    let ns = Netns::create(&cleanup, "t-nstat").unwrap();
    // A fresh namespace has opened nothing, whatever the host's counters say; the parser
    // reading the host's `/proc/self/net` instead would see the host's connections.
    let counters = ns.nstat().unwrap();
    assert_eq!(counters.get("TcpActiveOpens"), Some(0), "{counters:?}");
    assert_eq!(counters.get("TcpExtTCPTimeouts"), Some(0), "{counters:?}");
    assert!(counters.get("TcpExtTCPSackFailures").is_some());
}

#[test]
fn receive_steering_is_per_namespace_device_and_checked() {
    require_root();
    let cleanup = Cleanup::new();
    let ns = Netns::create(&cleanup, "t-rps").unwrap();
    let cpu = std::thread::available_parallelism().map_or(1, |n| n.get()) - 1;
    ns.set_receive_cpus("lo", &[cpu]).unwrap();
    let read = ns.exec("cat", ["/sys/class/net/lo/queues/rx-0/rps_cpus"]).unwrap();
    let word = read.trim().rsplit(',').nth(cpu / 32).unwrap();
    assert_eq!(u32::from_str_radix(word, 16).unwrap(), 1 << (cpu % 32), "{read}");
    // The host's own loopback is another device: untouched.
    let host = std::fs::read_to_string("/sys/class/net/lo/queues/rx-0/rps_cpus").unwrap();
    assert_ne!(host, read, "the host's lo changed (or already had this mask)");
    ns.set_receive_cpus("lo", &[]).unwrap();
    let err = ns.set_receive_cpus("no-such-dev", &[0]).unwrap_err().to_string();
    assert!(err.contains("no-such-dev"), "{err}");
}
