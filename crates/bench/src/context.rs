//! The machine context a latency result depends on, recorded with every run.
//!
//! On a 2-vCPU virtual machine the placement of client and server, the cpuidle driver, steal
//! time and other processes' load decide the median more than TCP does (a p50 of ~75 µs on
//! different vCPUs against ~15 µs on the same one). A result without this context cannot be
//! compared with another, so [`ContextProbe`] snapshots `/proc/stat` and this process's CPU
//! time when a run starts and turns the differences into percentages when it ends.
//!
//! Everything here is read-only and best effort: a file that cannot be read gives `None`,
//! never an error.

use std::fs;
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// Where the ends of a run ran and what else the machine was doing.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct RunContext {
    /// `uname -r`.
    pub kernel: String,
    /// Online CPUs.
    pub cpus: usize,
    /// `/sys/devices/system/cpu/cpuidle/current_driver` (`haltpoll`, `intel_idle`, `none`...).
    pub cpuidle_driver: Option<String>,
    /// `/sys/devices/system/cpu/cpuidle/current_governor`.
    pub cpuidle_governor: Option<String>,
    /// The clock source (`kvm-clock`, `tsc`...): its read cost is inside every sample.
    pub clocksource: Option<String>,
    /// CPU the client's measuring thread was pinned to, if any.
    pub client_cpu_pinned: Option<usize>,
    /// CPUs the client's measuring threads were seen on (sampled during the run).
    pub client_cpus_seen: Vec<usize>,
    /// CPU the server's connection thread reported, if the server told.
    pub server_cpu: Option<usize>,
    /// Human description of the placement: "same CPU (0)", "different CPUs (0, 1)", "unpinned".
    pub placement: String,
    /// Steal time over the run, percent of all CPU time (the hypervisor ran someone else).
    pub steal_percent: Option<f64>,
    /// Busy time of the whole machine over the run that was not this process, percent of all
    /// CPU time: other processes competing with (or waking the CPUs for) the benchmark.
    pub other_load_percent: Option<f64>,
    /// Congestion control read back from the client socket.
    pub congestion_client: Option<String>,
    /// Congestion control the server read back from its socket.
    pub congestion_server: Option<String>,
    /// The tcptail version that produced the result.
    pub tool_version: String,
}

/// CPU time counters from the first line of `/proc/stat`, in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CpuTimes {
    /// All ticks (busy + idle + steal).
    pub total: u64,
    /// Idle and iowait ticks.
    pub idle: u64,
    /// Steal ticks.
    pub steal: u64,
}

impl CpuTimes {
    /// Parses the aggregate `cpu ` line of `/proc/stat`.
    pub fn parse(proc_stat: &str) -> Option<CpuTimes> {
        let line = proc_stat.lines().find(|l| l.starts_with("cpu "))?;
        let fields: Vec<u64> =
            line.split_whitespace().skip(1).map(|f| f.parse().ok()).collect::<Option<_>>()?;
        if fields.len() < 8 {
            return None;
        }
        // user nice system idle iowait irq softirq steal [guest guest_nice]: guest time is
        // already counted in user/nice, so it is not added again.
        let total = fields[..8].iter().sum();
        Some(CpuTimes { total, idle: fields[3] + fields[4], steal: fields[7] })
    }

    fn read() -> Option<CpuTimes> {
        CpuTimes::parse(&fs::read_to_string("/proc/stat").ok()?)
    }
}

/// This process's user + system CPU time in clock ticks, from `/proc/self/stat`.
pub fn parse_process_ticks(self_stat: &str) -> Option<u64> {
    // The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    let rest = &self_stat[self_stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state is field 3, utime field 14, stime field 15 (1-based in proc(5)).
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

fn process_ticks() -> Option<u64> {
    parse_process_ticks(&fs::read_to_string("/proc/self/stat").ok()?)
}

/// Snapshot taken when a run starts; [`ContextProbe::finish`] fills in the run's context.
#[derive(Debug)]
pub struct ContextProbe {
    cpu: Option<CpuTimes>,
    own: Option<u64>,
    started: Instant,
}

impl ContextProbe {
    /// Takes the starting snapshot.
    pub fn start() -> ContextProbe {
        ContextProbe { cpu: CpuTimes::read(), own: process_ticks(), started: Instant::now() }
    }

    /// Seconds since [`ContextProbe::start`].
    pub fn elapsed_secs(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Reads the end snapshot and returns the static context with steal and load filled in.
    pub fn finish(&self) -> RunContext {
        let mut ctx = static_context();
        if let (Some(a), Some(b)) = (self.cpu, CpuTimes::read()) {
            let total = b.total.saturating_sub(a.total);
            if total > 0 {
                let steal = b.steal.saturating_sub(a.steal);
                ctx.steal_percent = Some(100.0 * steal as f64 / total as f64);
                if let (Some(own_a), Some(own_b)) = (self.own, process_ticks()) {
                    let busy =
                        total.saturating_sub(b.idle.saturating_sub(a.idle)).saturating_sub(steal);
                    let other = busy.saturating_sub(own_b.saturating_sub(own_a));
                    ctx.other_load_percent = Some(100.0 * other as f64 / total as f64);
                }
            }
        }
        ctx
    }
}

fn read_trimmed(path: &str) -> Option<String> {
    let text = fs::read_to_string(path).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

/// The parts of the context that do not change during a run.
pub fn static_context() -> RunContext {
    RunContext {
        kernel: read_trimmed("/proc/sys/kernel/osrelease").unwrap_or_else(|| "unknown".into()),
        cpus: std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        cpuidle_driver: read_trimmed("/sys/devices/system/cpu/cpuidle/current_driver"),
        cpuidle_governor: read_trimmed("/sys/devices/system/cpu/cpuidle/current_governor"),
        clocksource: read_trimmed(
            "/sys/devices/system/clocksource/clocksource0/current_clocksource",
        ),
        tool_version: env!("CARGO_PKG_VERSION").to_string(),
        placement: "unpinned".into(),
        ..RunContext::default()
    }
}

/// Describes where the two ends ran, from what was pinned and what was observed.
pub fn describe_placement(client_seen: &[usize], server: Option<usize>, pinned: bool) -> String {
    let client = match client_seen {
        [] => None,
        [one] => Some(*one),
        _ => None,
    };
    match (client, server) {
        (Some(c), Some(s)) if c == s => format!("same CPU ({c})"),
        (Some(c), Some(s)) => format!("different CPUs (client {c}, server {s})"),
        _ if !pinned => format!(
            "unpinned (client seen on {:?}, server {})",
            client_seen,
            server.map_or("unknown".to_string(), |s| s.to_string())
        ),
        _ => format!("client on {client_seen:?}, server {server:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_stat() {
        let text = "cpu  100 5 50 1000 20 1 2 7 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        let t = CpuTimes::parse(text).unwrap();
        assert_eq!(t, CpuTimes { total: 1185, idle: 1020, steal: 7 });
        assert!(CpuTimes::parse("intr 1 2 3").is_none());
        assert!(CpuTimes::parse("cpu  1 2 x").is_none());
    }

    #[test]
    fn parses_self_stat_with_spaces_in_name() {
        let text = "1234 (my (odd) prog) S 1 1234 1234 0 -1 4194304 100 0 0 0 37 5 0 0 20 0 1";
        assert_eq!(parse_process_ticks(text), Some(42));
        assert_eq!(parse_process_ticks("garbage"), None);
    }

    #[test]
    fn placement_descriptions() {
        assert_eq!(describe_placement(&[1], Some(1), true), "same CPU (1)");
        assert!(describe_placement(&[0], Some(1), true).starts_with("different CPUs"));
        assert!(describe_placement(&[0, 1], None, false).starts_with("unpinned"));
    }

    #[test]
    fn live_context_is_sane() {
        let probe = ContextProbe::start();
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_add(i * i);
        }
        std::hint::black_box(x);
        let ctx = probe.finish();
        assert!(!ctx.kernel.is_empty());
        assert!(ctx.cpus >= 1);
        if let Some(steal) = ctx.steal_percent {
            assert!((0.0..=100.0).contains(&steal));
        }
    }
}
