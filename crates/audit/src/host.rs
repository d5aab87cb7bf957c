//! Reading the host: the [`Snapshot`] of everything the checks look at, read through a
//! [`HostView`] (files under a root directory, in [`crate::view`]).
//!
//! Every path is relative to the view's root: `/` for the real host, a fixture tree in tests
//! (`proc/sys/...`, `proc/net/sockstat`, `proc/cmdline`, `proc/<pid>/comm`, `sys/...`,
//! `etc/sysctl.d/...`). Two facts have no file: interface root qdiscs (netlink) and NIC
//! offloads/coalescing (ethtool). A live view runs `tc -j qdisc show` and `ethtool -k/-c`; a
//! fixture view reads the same commands' output from `<root>/.commands/tc-qdisc.json` and
//! `<root>/.commands/ethtool-{k,c}-<ifname>.txt`, so no test runs a command. What cannot be
//! read is `None` (reported N/A), never an error.
//!
//! # Where we run
//!
//! Host-wide settings are only ours to judge on the host itself. [`Snapshot::collect`] records
//! three facts about the place it reads from, each from files only (so fixture trees exercise
//! them):
//!
//! - **child network namespace**: `proc/sys/net/core` exists but `net.core.default_qdisc`
//!   (which only the initial namespace has) does not;
//! - **container** ([`detect_container`]), any of: `/.dockerenv` (Docker), `/run/.containerenv`
//!   (Podman, Buildah), `container=` in PID 1's environment (systemd-nspawn, LXC, Podman), a
//!   container runtime in PID 1's cgroup path (`docker`, `kubepods`, `containerd`, `lxc`,
//!   `libpod`, `crio`), or PID 1 not being an init system (its `comm` is none of
//!   [`INIT_NAMES`]: a container's PID 1 is its application or a shim such as `tini`);
//! - **own PID namespace**: processes are listed in `proc` but the kernel's `kthreadd` (PID 2
//!   on every host) is not among them, so processes outside this namespace (irqbalance) are
//!   invisible.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::profile::normalize;
use crate::view::HostView;

/// One line of a sysctl configuration file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConfigLine {
    /// The file (as seen from the root, e.g. `/etc/sysctl.d/99-trading.conf`).
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// The key (dots; `/` separators normalised to dots).
    pub key: String,
    /// The whitespace-normalised value.
    pub value: String,
}

/// Offload and coalescing settings of one interface, as ethtool prints them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct NicInfo {
    /// `ethtool -k` features that matter for latency (`tcp-segmentation-offload` ...): on/off.
    pub offloads: BTreeMap<String, String>,
    /// `ethtool -c` values (`rx-usecs`, `adaptive-rx` ...).
    pub coalesce: BTreeMap<String, String>,
}

/// Everything the checks look at, read once.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Snapshot {
    /// Sysctl values by key; `None` = the key does not exist here.
    pub sysctls: BTreeMap<String, Option<String>>,
    /// Lines of `/etc/sysctl.conf`, `/etc/sysctl.d`, `/run/sysctl.d`, `/usr/lib/sysctl.d`.
    pub config: Vec<ConfigLine>,
    /// Interfaces in `/sys/class/net`.
    pub interfaces: Vec<String>,
    /// Root qdisc kind per interface; `None` when it could not be read.
    pub qdiscs: Option<BTreeMap<String, String>>,
    /// TIME_WAIT sockets from `/proc/net/sockstat`.
    pub time_wait: Option<u64>,
    /// Distinct CPU frequency governors; empty when there is no cpufreq.
    pub governors: Vec<String>,
    /// Whether a process named `irqbalance` runs; `None` when `/proc` has no processes.
    pub irqbalance: Option<bool>,
    /// The kernel command line.
    pub cmdline: Option<String>,
    /// The selected transparent huge page mode.
    pub thp: Option<String>,
    /// Per-interface NIC settings; `None` when ethtool is not available.
    pub nics: Option<BTreeMap<String, NicInfo>>,
    /// True in a child network namespace (host-scope `net.core` keys do not exist there).
    pub child_netns: bool,
    /// Why we think we are in a container, if we do (the signals found, `; `-separated).
    pub container: Option<String>,
    /// True when `/proc` lists processes but not the kernel's `kthreadd`: a PID namespace of
    /// our own, where processes outside it (irqbalance) cannot be seen.
    pub own_pid_namespace: bool,
    /// What decides which congestion controls can become the default here.
    pub cc: crate::cc::Facts,
}

/// Keys every audit reads, whatever the profile.
pub const BASE_KEYS: [&str; 14] = [
    "net.ipv4.tcp_congestion_control",
    "net.ipv4.tcp_available_congestion_control",
    "net.ipv4.tcp_allowed_congestion_control",
    "net.core.default_qdisc",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.tcp_tw_reuse",
    "net.ipv4.tcp_slow_start_after_idle",
    "net.core.rmem_max",
    "net.core.wmem_max",
    "net.ipv4.tcp_rmem",
    "net.ipv4.tcp_wmem",
    "net.core.busy_read",
    "net.core.busy_poll",
    "kernel.numa_balancing",
];

const CONFIG_DIRS: [&str; 4] = ["etc/sysctl.d", "run/sysctl.d", "usr/lib/sysctl.d", "lib/sysctl.d"];

/// Parses `sysctl.conf` text into lines (comments, blanks and `-`/`include` prefixes handled).
pub fn parse_config(file: &str, text: &str) -> Vec<ConfigLine> {
    text.lines()
        .enumerate()
        .filter_map(|(i, raw)| {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                return None;
            }
            let (key, value) = line.split_once('=')?;
            let key = key.trim().trim_start_matches('-').trim().replace('/', ".");
            Some(ConfigLine { file: file.to_owned(), line: i + 1, key, value: normalize(value) })
        })
        .collect()
}

/// The sysctl configuration files under `view`, in the order systemd-sysctl applies them
/// (by file name across directories, `/etc` shadowing same-named files elsewhere), then
/// `/etc/sysctl.conf` (which procps' `sysctl --system` reads last).
pub fn config_files(view: &HostView) -> Vec<String> {
    let mut by_name: BTreeMap<String, String> = BTreeMap::new();
    for dir in CONFIG_DIRS.iter().rev() {
        for name in view.list(dir) {
            if name.ends_with(".conf") {
                by_name.insert(name.clone(), format!("/{dir}/{name}"));
            }
        }
    }
    let mut files: Vec<String> = by_name.into_values().collect();
    if view.path("etc/sysctl.conf").is_file() {
        files.push("/etc/sysctl.conf".into());
    }
    files
}

fn parse_sockstat_tw(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("TCP:"))?;
    let words: Vec<&str> = line.split_whitespace().collect();
    let i = words.iter().position(|w| *w == "tw")?;
    words.get(i + 1)?.parse().ok()
}

fn parse_qdiscs(json: &str) -> Option<BTreeMap<String, String>> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let mut out = BTreeMap::new();
    for q in v.as_array()? {
        if q.get("root").and_then(|r| r.as_bool()) == Some(true) {
            let dev = q.get("dev")?.as_str()?.to_owned();
            out.insert(dev, q.get("kind")?.as_str()?.to_owned());
        }
    }
    Some(out)
}

/// Parses `ethtool -k` / `ethtool -c` output (`name: value` lines, `[fixed]` dropped).
pub fn parse_ethtool(text: &str) -> BTreeMap<String, String> {
    text.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            let v = v.trim().trim_end_matches("[fixed]").trim();
            (!v.is_empty()).then(|| (k.trim().to_owned(), v.to_owned()))
        })
        .collect()
}

fn read_thp(view: &HostView) -> Option<String> {
    let text = view.read("sys/kernel/mm/transparent_hugepage/enabled")?;
    let start = text.find('[')?;
    let end = text[start..].find(']')? + start;
    Some(text[start + 1..end].to_owned())
}

/// `comm` names of init systems: a PID 1 with any other name is a container's entry point.
pub const INIT_NAMES: [&str; 11] = [
    "systemd",
    "init",
    "upstart",
    "runit",
    "runit-init",
    "s6-svscan",
    "openrc-init",
    "busybox",
    "dinit",
    "shepherd",
    "launchd",
];

/// Container runtimes as they appear in a cgroup path.
const CGROUP_RUNTIMES: [&str; 6] = ["docker", "kubepods", "containerd", "lxc", "libpod", "crio"];

/// The signals (module docs, "Where we run") that say we run in a container, joined with
/// `; `; `None` when there is none.
pub fn detect_container(view: &HostView) -> Option<String> {
    let mut found = Vec::new();
    for marker in [".dockerenv", "run/.containerenv"] {
        if view.path(marker).exists() {
            found.push(format!("/{marker} exists"));
        }
    }
    if let Some(environ) = view.read("proc/1/environ")
        && let Some(c) = environ.split('\0').find_map(|kv| kv.strip_prefix("container="))
    {
        found.push(format!("PID 1 has container={c}"));
    }
    if let Some(cgroup) = view.read("proc/1/cgroup")
        && let Some(runtime) = CGROUP_RUNTIMES.iter().find(|r| cgroup.contains(*r))
    {
        found.push(format!("PID 1's cgroup names {runtime}"));
    }
    if let Some(comm) = view.read("proc/1/comm").map(|c| c.trim().to_owned())
        && !comm.is_empty()
        && !INIT_NAMES.contains(&comm.as_str())
    {
        found.push(format!("PID 1 is {comm}, not an init system"));
    }
    (!found.is_empty()).then(|| found.join("; "))
}

impl Snapshot {
    /// Reads everything the checks need (the base keys plus `extra_keys`).
    pub fn collect<'a>(view: &HostView, extra_keys: impl IntoIterator<Item = &'a str>) -> Self {
        let mut sysctls = BTreeMap::new();
        for key in BASE_KEYS.iter().copied().chain(extra_keys) {
            sysctls.insert(key.to_owned(), view.sysctl(key));
        }
        let mut config = Vec::new();
        for file in config_files(view) {
            if let Some(text) = view.read(&file) {
                config.extend(parse_config(&file, &text));
            }
        }
        let interfaces = view.list("sys/class/net");
        let qdiscs = view
            .command_output("tc-qdisc.json", "tc", &["-j", "qdisc", "show"])
            .and_then(|j| parse_qdiscs(&j));
        let mut governors: Vec<String> = view
            .list("sys/devices/system/cpu")
            .iter()
            .filter(|c| c.starts_with("cpu") && c[3..].bytes().all(|b| b.is_ascii_digit()))
            .filter_map(|c| {
                view.read(&format!("sys/devices/system/cpu/{c}/cpufreq/scaling_governor"))
            })
            .map(|g| g.trim().to_owned())
            .collect();
        governors.sort();
        governors.dedup();
        let pids: Vec<String> = view
            .list("proc")
            .into_iter()
            .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
            .collect();
        let own_pid_namespace =
            !pids.is_empty() && view.read("proc/2/comm").is_none_or(|c| c.trim() != "kthreadd");
        let irqbalance = (!pids.is_empty()).then(|| {
            pids.iter().any(|p| {
                view.read(&format!("proc/{p}/comm")).is_some_and(|c| c.trim() == "irqbalance")
            })
        });
        let ethtool_available = !view.is_live() || which("ethtool");
        let nics = ethtool_available
            .then(|| {
                let mut map = BTreeMap::new();
                for ifname in interfaces.iter().filter(|i| *i != "lo") {
                    let k = view.command_output(
                        &format!("ethtool-k-{ifname}.txt"),
                        "ethtool",
                        &["-k", ifname],
                    );
                    let c = view.command_output(
                        &format!("ethtool-c-{ifname}.txt"),
                        "ethtool",
                        &["-c", ifname],
                    );
                    if k.is_none() && c.is_none() {
                        continue;
                    }
                    let info = NicInfo {
                        offloads: k.map(|t| parse_ethtool(&t)).unwrap_or_default(),
                        coalesce: c.map(|t| parse_ethtool(&t)).unwrap_or_default(),
                    };
                    map.insert(ifname.clone(), info);
                }
                map
            })
            .filter(|m| !m.is_empty());
        let child_netns = view.child_netns();
        Snapshot {
            sysctls,
            config,
            interfaces,
            qdiscs,
            time_wait: view.read("proc/net/sockstat").and_then(|t| parse_sockstat_tw(&t)),
            governors,
            irqbalance,
            cmdline: view.read("proc/cmdline").map(|c| c.trim().to_owned()),
            thp: read_thp(view),
            nics,
            child_netns,
            container: detect_container(view),
            own_pid_namespace,
            cc: crate::cc::Facts::read(view),
        }
    }

    /// A sysctl value, `None` when missing (or not read).
    pub fn sysctl(&self, key: &str) -> Option<&str> {
        self.sysctls.get(key).and_then(|v| v.as_deref())
    }

    /// Config lines setting `key`, in application order.
    pub fn configured(&self, key: &str) -> impl Iterator<Item = &ConfigLine> {
        self.config.iter().filter(move |c| c.key == key)
    }

    /// Whether host-scope settings are not ours to judge or change here (child network
    /// namespace or container): they may be invisible, read-only, or the host's.
    pub fn host_hidden(&self) -> bool {
        self.child_netns || self.container.is_some()
    }

    /// Where we run when it is not the host itself: `child network namespace`,
    /// `container: <signals>`, or both; `None` on the host.
    pub fn confinement(&self) -> Option<String> {
        let mut parts = Vec::new();
        if self.child_netns {
            parts.push("child network namespace".to_owned());
        }
        if let Some(c) = &self.container {
            parts.push(format!("container: {c}"));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// Why processes outside this PID namespace cannot be seen, when they cannot.
    pub fn processes_hidden(&self) -> Option<String> {
        match (&self.container, self.own_pid_namespace) {
            (_, true) => Some("own PID namespace: kthreadd is not visible in /proc".to_owned()),
            (Some(c), false) => Some(format!("container: {c}")),
            (None, false) => None,
        }
    }
}

fn which(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn config_parsing_never_panics_and_keeps_line_numbers(text in "\\PC{0,200}(\n\\PC{0,40}){0,8}") {
            let lines = parse_config("/f.conf", &text);
            let count = text.lines().count();
            for l in &lines {
                prop_assert!(l.line >= 1 && l.line <= count);
                prop_assert!(!l.value.contains("  "));
            }
        }
    }

    #[test]
    fn sockstat_time_wait() {
        let text = "sockets: used 11\nTCP: inuse 1 orphan 2 tw 17 alloc 3 mem 161\n";
        assert_eq!(parse_sockstat_tw(text), Some(17));
        assert_eq!(parse_sockstat_tw("UDP: inuse 0"), None);
    }

    #[test]
    fn config_lines() {
        let lines = parse_config(
            "/etc/sysctl.d/a.conf",
            "# c\n\nnet.ipv4.tcp_rmem = 4096\t262144 16777216\n-net/ipv4/tcp_frto=0\n; x\n",
        );
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0].value, "4096 262144 16777216");
        assert_eq!(lines[0].line, 3);
        assert_eq!(lines[1].key, "net.ipv4.tcp_frto");
    }

    #[test]
    fn qdisc_json() {
        let json = r#"[{"kind":"noqueue","dev":"lo","root":true},{"kind":"fq","dev":"eth0","root":true},{"kind":"fq","dev":"eth0","parent":"1:"}]"#;
        let q = parse_qdiscs(json).unwrap();
        assert_eq!(q.len(), 2);
        assert_eq!(q["eth0"], "fq");
    }

    #[test]
    fn ethtool_text() {
        let k = "Features for eth0:\nrx-checksumming: on\ntcp-segmentation-offload: on\n\ttx-tcp-segmentation: on\nlarge-receive-offload: off [fixed]\n";
        let m = parse_ethtool(k);
        assert_eq!(m["tcp-segmentation-offload"], "on");
        assert_eq!(m["large-receive-offload"], "off");
    }
}
