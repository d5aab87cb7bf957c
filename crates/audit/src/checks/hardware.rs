//! The audit rows about the machine rather than sysctls: CPU frequency governor, irqbalance,
//! isolated CPUs, transparent huge pages, and each interface's offloads and interrupt
//! coalescing. Every audit reports them; the profile's `[host]` decides whether they are
//! judged, and never inside a container or child namespace (they are the host's).

use super::{AuditFinding, HOST_NOT_CHANGEABLE, Status, finding};
use crate::host::Snapshot;
use crate::profile::HostProfile;

/// CPU governor, irqbalance, isolated CPUs, transparent huge pages, NIC coalescing: always
/// reported; judged only when the profile's `[host]` asks for a value, and never judged
/// inside a container or child namespace (host scope).
pub fn host_checks(profile: &HostProfile, snap: &Snapshot) -> Vec<AuditFinding> {
    let h = &profile.host;
    let no_rec = format!("(no recommendation in {})", profile.name);
    // A row whose value is known: judged against `want`, unless host scope hides it.
    let judge = |f: AuditFinding, matches: Option<bool>| -> AuditFinding {
        match (matches, snap.confinement()) {
            (None, _) => f,
            (Some(_), Some(place)) => AuditFinding { status: Status::NotApplicable, ..f }.evidence(
                format!("{HOST_NOT_CHANGEABLE} ({place}); the host's value, for information"),
            ),
            (Some(true), None) => f,
            (Some(false), None) => AuditFinding { status: Status::Warn, ..f },
        }
    };
    let mut out = Vec::new();
    let f = finding("cpu-governor", Status::Ok, snap.governors.join(","))
        .rec(h.governor.clone().unwrap_or_else(|| no_rec.clone()))
        .why("frequency ramps add microseconds to the first packets of a burst")
        .source("seed 001 (tuning ladder); tuned latency-performance");
    out.push(if snap.governors.is_empty() {
        AuditFinding { current: "-".into(), status: Status::NotApplicable, ..f }
            .evidence("no cpufreq in /sys (VM or no driver)")
    } else {
        let matches = h.governor.as_ref().map(|want| snap.governors.iter().all(|g| g == want));
        judge(f, matches)
    });

    let f = finding("irqbalance", Status::Ok, "-")
        .rec(match h.irqbalance {
            Some(true) => "running".to_owned(),
            Some(false) => "not running (pin NIC IRQs by hand)".to_owned(),
            None => no_rec.clone(),
        })
        .why("irqbalance moves NIC interrupts onto the cores the latency thread uses")
        .source("seed 001 (IRQ affinity)");
    out.push(match (snap.processes_hidden(), snap.irqbalance) {
        (Some(why), _) => AuditFinding { status: Status::NotApplicable, ..f }
            .evidence(format!("processes outside this PID namespace are not visible ({why})")),
        (None, None) => AuditFinding { status: Status::NotApplicable, ..f }
            .evidence("no processes listed in /proc"),
        (None, Some(running)) => {
            let cur = if running { "running" } else { "not running" };
            judge(
                AuditFinding { current: cur.into(), ..f },
                h.irqbalance.map(|want| want == running),
            )
        }
    });

    let f = finding("isolated-cpus", Status::Ok, "-")
        .rec(match h.isolated_cpus {
            Some(true) => "isolcpus= and nohz_full= for the latency cores".to_owned(),
            Some(false) => "none".to_owned(),
            None => no_rec.clone(),
        })
        .why("the scheduler tick and other tasks preempt the latency thread")
        .evidence("/proc/cmdline")
        .source("seed 001 (CPU isolation)");
    out.push(match &snap.cmdline {
        None => AuditFinding { status: Status::NotApplicable, ..f },
        Some(cmdline) => {
            let found: Vec<&str> = cmdline
                .split_whitespace()
                .filter(|w| w.starts_with("isolcpus=") || w.starts_with("nohz_full="))
                .collect();
            let cur = if found.is_empty() { "none".to_owned() } else { found.join(" ") };
            judge(
                AuditFinding { current: cur, ..f },
                h.isolated_cpus.map(|want| found.is_empty() != want),
            )
        }
    });

    let f = finding("transparent-hugepages", Status::Ok, snap.thp.as_deref().unwrap_or("-"))
        .rec(h.thp.clone().unwrap_or_else(|| no_rec.clone()))
        .why("khugepaged compaction stalls show up as latency spikes")
        .source("tuned network-latency");
    out.push(match &snap.thp {
        None => AuditFinding { status: Status::NotApplicable, ..f }
            .evidence("/sys/kernel/mm/transparent_hugepage/enabled not readable"),
        Some(mode) => judge(f, h.thp.as_ref().map(|want| want == mode)),
    });
    out.extend(nic_checks(h.nic_rx_usecs_max, snap));
    out
}

fn nic_checks(max_usecs: Option<u64>, snap: &Snapshot) -> Vec<AuditFinding> {
    let Some(nics) = &snap.nics else {
        return vec![
            finding("nic", Status::NotApplicable, "-")
                .rec("offloads and interrupt coalescing reviewed")
                .why("coalescing delays interrupts; TSO/GRO batch packets")
                .evidence("ethtool not available"),
        ];
    };
    nics.iter()
        .map(|(ifname, info)| {
            let pick = |m: &std::collections::BTreeMap<String, String>, keys: &[&str]| {
                keys.iter()
                    .filter_map(|k| m.get(*k).map(|v| format!("{k} {v}")))
                    .collect::<Vec<_>>()
            };
            let mut cur = pick(
                &info.offloads,
                &["tcp-segmentation-offload", "generic-receive-offload", "large-receive-offload"],
            );
            cur.extend(pick(&info.coalesce, &["rx-usecs", "adaptive-rx"]));
            let usecs = info.coalesce.get("rx-usecs").and_then(|v| v.parse::<u64>().ok());
            let adaptive = info.coalesce.get("adaptive-rx").is_some_and(|v| v == "on");
            let exceeds = max_usecs.map(|max| adaptive || usecs.is_some_and(|u| u > max));
            let (status, evidence) = match (exceeds, snap.confinement()) {
                (Some(true), Some(place)) => (
                    Status::NotApplicable,
                    Some(format!("{HOST_NOT_CHANGEABLE} ({place}); coalescing exceeds the bound")),
                ),
                (Some(true), None) => (Status::Warn, None),
                _ => (Status::Ok, None),
            };
            let f = finding(format!("nic:{ifname}"), status, cur.join(", "));
            let f = match evidence {
                Some(e) => f.evidence(e),
                None => f,
            };
            f.rec(
                max_usecs
                    .map_or("reported".to_owned(), |m| format!("rx-usecs <= {m}, adaptive-rx off")),
            )
            .why("interrupt coalescing holds received packets back; TSO hides RTT samples")
            .source("seed 002 (hardware offload); seed 001")
        })
        .collect()
}
