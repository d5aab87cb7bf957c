//! The report's environment block: kernel, CPUs, congestion controls, which qdiscs the kernel
//! can instantiate (probed in a throwaway namespace, never on the host's interfaces) and which
//! emulator the lab uses because of that.

use std::collections::BTreeMap;
use std::path::Path;

use tcptail_netns::{Cleanup, Netns};
use tcptail_report::Environment;

/// Qdiscs worth knowing about for latency work, with the arguments `tc` needs to create one.
const QDISC_PROBES: &[(&str, &[&str])] = &[
    ("pfifo", &[]),
    ("bfifo", &[]),
    ("tbf", &["rate", "1mbit", "burst", "10kb", "latency", "10ms"]),
    ("htb", &[]),
    ("netem", &["delay", "1ms"]),
    ("fq", &[]),
    ("fq_codel", &[]),
    ("codel", &[]),
    ("sfq", &[]),
    ("prio", &[]),
    ("cake", &[]),
];

/// Reads the machine's facts. Whatever cannot be read is left empty and said in `notes`.
pub fn probe() -> Environment {
    let mut notes = BTreeMap::new();
    let read = |path: &str| read_trimmed(Path::new(path));
    let words = |path: &str| -> Vec<String> {
        read(path).map(|s| s.split_whitespace().map(str::to_owned).collect()).unwrap_or_default()
    };
    let qdiscs = match probe_qdiscs() {
        Ok(q) => q,
        Err(e) => {
            notes.insert("qdiscs".into(), format!("not probed: {e}"));
            Vec::new()
        }
    };
    let emulator = if qdiscs.iter().any(|q| q == "netem") {
        "built-in userspace emulator (netem is available too: tcptail lab path --emulator netem)"
    } else {
        "built-in userspace emulator (this kernel has no netem)"
    };
    if let Some(governor) = read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor") {
        notes.insert("cpu0 governor".into(), governor);
    }
    if let Some(isolated) = read("/sys/devices/system/cpu/isolated").filter(|s| !s.is_empty()) {
        notes.insert("isolated cpus".into(), isolated);
    }
    if let Some(load) = read("/proc/loadavg") {
        notes.insert("load average at start".into(), load);
    }
    Environment {
        kernel: read("/proc/sys/kernel/osrelease").unwrap_or_default(),
        cpus: std::thread::available_parallelism().map_or(0, usize::from),
        cpu_model: cpu_model().unwrap_or_default(),
        congestion_controls_available: words("/proc/sys/net/ipv4/tcp_available_congestion_control"),
        congestion_controls_allowed: words("/proc/sys/net/ipv4/tcp_allowed_congestion_control"),
        default_congestion_control: read("/proc/sys/net/ipv4/tcp_congestion_control")
            .unwrap_or_default(),
        qdiscs,
        emulator: emulator.into(),
        emulator_lateness: None,
        notes,
    }
}

fn read_trimmed(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_owned())
}

fn cpu_model() -> Option<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("model name")?.split_once(':').map(|(_, v)| v.trim()))
        .map(str::to_owned)
}

/// Creates each qdisc on `lo` of a throwaway namespace; those the kernel accepts are listed.
fn probe_qdiscs() -> Result<Vec<String>, tcptail_netns::Error> {
    tcptail_netns::ensure_root()?;
    let cleanup = Cleanup::new();
    let ns = Netns::create(&cleanup, "xq")?;
    let mut found = Vec::new();
    for (kind, args) in QDISC_PROBES {
        let created = ns
            .command("tc")
            .args(["qdisc", "replace", "dev", "lo", "root", kind])
            .args(*args)
            .output()
            .is_ok_and(|o| o.status.success());
        if created {
            found.push((*kind).to_owned());
        }
    }
    let clsact = ns
        .command("tc")
        .args(["qdisc", "add", "dev", "lo", "clsact"])
        .output()
        .is_ok_and(|o| o.status.success());
    if clsact {
        found.push("clsact".into());
    }
    ns.delete()?;
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_is_described() {
        let env = probe();
        assert!(!env.kernel.is_empty());
        assert!(env.cpus >= 1);
        assert!(env.congestion_controls_available.iter().any(|c| c == "cubic"), "{env:?}");
        assert!(!env.default_congestion_control.is_empty());
        // Every Linux with tc has tbf and htb here (the lab needs both); a kernel without
        // netem must say so in the emulator line.
        assert!(env.qdiscs.iter().any(|q| q == "tbf"), "{env:?}");
        assert_eq!(
            env.qdiscs.iter().any(|q| q == "netem"),
            env.emulator.contains("netem is available")
        );
    }
}
