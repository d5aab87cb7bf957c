//! Fake root trees for tests: a `/proc/sys`, `/proc/net/sockstat`, `/sys` and `/etc` laid out
//! under a directory, as [`HostView::at`](crate::HostView::at) reads them.
//!
//! [`FakeRoot::linux_6_18`] writes the defaults of a stock Linux 6.18 host (the values this
//! project's machine showed), so a test states only what it changes. Nothing here touches the
//! real host.
//!
//! Test hooks: a fixture tree may ask tcptail to stop at a named point ([`FakeRoot::hook`],
//! run by [`run_hook`]), so that a test can kill a run there. A hook is read only from a
//! fixture view, never from the live host.

use std::fs;
use std::path::{Path, PathBuf};

/// A fake root directory being filled in.
#[derive(Debug, Clone)]
pub struct FakeRoot {
    root: PathBuf,
}

/// Stock Linux 6.18 values of the keys the profiles and checks use.
pub const LINUX_6_18: [(&str, &str); 30] = [
    ("net.ipv4.tcp_congestion_control", "cubic"),
    ("net.ipv4.tcp_available_congestion_control", "reno cubic bbr"),
    ("net.ipv4.tcp_allowed_congestion_control", "reno cubic"),
    ("net.core.default_qdisc", "fq_codel"),
    ("net.ipv4.ip_local_port_range", "32768\t60999"),
    ("net.ipv4.tcp_tw_reuse", "2"),
    ("net.ipv4.tcp_slow_start_after_idle", "1"),
    ("net.ipv4.tcp_timestamps", "1"),
    ("net.ipv4.tcp_frto", "2"),
    ("net.ipv4.tcp_low_latency", "0"),
    ("net.ipv4.tcp_ecn", "2"),
    ("net.ipv4.tcp_no_metrics_save", "0"),
    ("net.ipv4.tcp_rmem", "4096\t131072\t33554432"),
    ("net.ipv4.tcp_wmem", "4096\t16384\t4194304"),
    ("net.ipv4.tcp_keepalive_time", "7200"),
    ("net.ipv4.tcp_keepalive_intvl", "75"),
    ("net.ipv4.tcp_keepalive_probes", "9"),
    ("net.ipv4.tcp_max_syn_backlog", "4096"),
    ("net.core.somaxconn", "4096"),
    ("net.core.rmem_max", "212992"),
    ("net.core.wmem_max", "212992"),
    ("net.core.rmem_default", "212992"),
    ("net.core.wmem_default", "212992"),
    ("net.core.busy_read", "0"),
    ("net.core.busy_poll", "0"),
    ("net.core.netdev_max_backlog", "1000"),
    ("net.core.netdev_budget", "300"),
    ("kernel.numa_balancing", "1"),
    ("net.ipv4.tcp_notsent_lowat", "4294967295"),
    ("net.ipv4.tcp_rto_min_us", "200000"),
];

/// Host-scope `net.core` keys a child network namespace does not have (Linux 6.18).
pub const ABSENT_IN_CHILD_NETNS: [&str; 5] = [
    "net.core.default_qdisc",
    "net.core.netdev_max_backlog",
    "net.core.netdev_budget",
    "net.core.busy_read",
    "net.core.busy_poll",
];

impl FakeRoot {
    /// An empty fake root at `dir` (created if needed).
    pub fn new(dir: impl AsRef<Path>) -> Self {
        let root = dir.as_ref().to_owned();
        fs::create_dir_all(&root).expect("create fake root");
        FakeRoot { root }
    }

    /// A fake stock Linux 6.18 host: [`LINUX_6_18`] sysctls, 2 CPUs with the `schedutil`
    /// governor, PID 1 `init` and PID 2 `kthreadd`, irqbalance not running, no isolated CPUs,
    /// THP `madvise`, interfaces `lo` and `eth0`, 3 TIME_WAIT sockets, no sysctl.d files.
    pub fn linux_6_18(dir: impl AsRef<Path>) -> Self {
        let f = FakeRoot::new(dir);
        for (k, v) in LINUX_6_18 {
            f.sysctl(k, v);
        }
        for cpu in ["cpu0", "cpu1"] {
            f.file(
                &format!("sys/devices/system/cpu/{cpu}/cpufreq/scaling_governor"),
                "schedutil\n",
            );
        }
        f.file("proc/1/comm", "init\n");
        f.file("proc/2/comm", "kthreadd\n");
        f.file("proc/cmdline", "BOOT_IMAGE=/vmlinuz root=/dev/vda1 quiet\n");
        f.file("sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n");
        f.file("sys/class/net/lo/mtu", "65536\n");
        f.file("sys/class/net/eth0/mtu", "1500\n");
        f.sockstat(3);
        f
    }

    /// The root directory.
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// Writes `root/rel`, creating directories.
    pub fn file(&self, rel: &str, text: &str) -> &Self {
        let path = self.root.join(rel);
        fs::create_dir_all(path.parent().expect("has a parent")).expect("mkdir");
        fs::write(path, text).expect("write fixture");
        self
    }

    /// Sets a sysctl (`root/proc/sys/...`), written as the kernel prints it.
    pub fn sysctl(&self, key: &str, value: &str) -> &Self {
        self.file(&format!("proc/sys/{}", key.replace('.', "/")), &format!("{value}\n"))
    }

    /// Removes a sysctl (the key does not exist on this "kernel").
    pub fn remove_sysctl(&self, key: &str) -> &Self {
        let _ = fs::remove_file(self.root.join(format!("proc/sys/{}", key.replace('.', "/"))));
        self
    }

    /// Makes the tree look like a child network namespace as Linux 6.18 shows one: the
    /// [`ABSENT_IN_CHILD_NETNS`] keys are gone; `rmem_max`, `wmem_max` and the defaults stay
    /// (read-only there), and so does `kernel.numa_balancing` (the host's).
    pub fn child_netns(&self) -> &Self {
        for k in ABSENT_IN_CHILD_NETNS {
            self.remove_sysctl(k);
        }
        self
    }

    /// Makes the tree look like a Docker container sharing the host's kernel: `/.dockerenv`,
    /// PID 1 a shell instead of an init system, and a PID namespace of its own (no
    /// `kthreadd`). Host-scope sysctls stay readable, as they are in a container.
    pub fn container(&self) -> &Self {
        self.file(".dockerenv", "");
        self.file("proc/1/comm", "sh\n");
        let _ = fs::remove_dir_all(self.root.join("proc/2"));
        self
    }

    /// `/proc/net/sockstat` with `tw` TIME_WAIT sockets.
    pub fn sockstat(&self, tw: u64) -> &Self {
        self.file(
            "proc/net/sockstat",
            &format!("sockets: used 11\nTCP: inuse 1 orphan 0 tw {tw} alloc 3 mem 1\n"),
        )
    }

    /// The root qdiscs `tc -j qdisc show` would print: `(dev, kind)` pairs.
    pub fn qdiscs(&self, qdiscs: &[(&str, &str)]) -> &Self {
        let list: Vec<String> = qdiscs
            .iter()
            .map(|(dev, kind)| {
                format!(r#"{{"kind":"{kind}","handle":"0:","dev":"{dev}","root":true}}"#)
            })
            .collect();
        self.file(".commands/tc-qdisc.json", &format!("[{}]", list.join(",")))
    }

    /// Makes a run reading this tree stop at hook `name` (e.g.
    /// [`tune::AFTER_FIRST_KEY`](crate::tune::AFTER_FIRST_KEY)): it writes
    /// [`hook_reached`](Self::hook_reached) with its pid and sleeps until killed.
    pub fn hook(&self, name: &str) -> &Self {
        self.file(&format!(".hooks/{name}"), "pause\n")
    }

    /// The file a run writes when it reaches hook `name`.
    pub fn hook_reached(&self, name: &str) -> PathBuf {
        self.root.join(format!(".hooks/{name}.reached"))
    }

    /// A running process `comm` with pid `pid`.
    pub fn process(&self, pid: u32, comm: &str) -> &Self {
        self.file(&format!("proc/{pid}/comm"), &format!("{comm}\n"))
    }
}

/// Runs the fixture hook `name` of `view`, if its tree has one: `pause` records our pid in
/// `.hooks/NAME.reached` and sleeps until the process is killed. Never does anything on the
/// live host ([`HostView::fixture_hook`](crate::HostView::fixture_hook)).
pub fn run_hook(view: &crate::HostView, name: &str) {
    if view.fixture_hook(name).as_deref() == Some("pause") {
        let reached = view.path(&format!(".hooks/{name}.reached"));
        let _ = fs::write(reached, format!("{}\n", std::process::id()));
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    }
}
