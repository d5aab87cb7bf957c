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
//!
//! # What "other load" counts
//!
//! `other_load_percent` is the machine's busy time minus this process's own CPU time
//! (`/proc/self/stat`, every thread, exited ones included). `tcptail bench local` runs its
//! server inside this process, so the server's threads count as the benchmark's own
//! (`own_load_percent`), not as other load. A `tcptail bench server` the user started as a
//! separate process on the same machine is another process: its CPU time does count as other
//! load, and with a busy (e.g. `--spin`) server it can dominate the figure.

use std::fs;
use std::time::Instant;

use serde::{Deserialize, Serialize};
use tcptail_netns::procfs;

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
    /// CPU the server's connection threads reported, when they all agree (see
    /// `connections` for each).
    pub server_cpu: Option<usize>,
    /// Every CPU a server connection thread reported.
    #[serde(default)]
    pub server_cpus_seen: Vec<usize>,
    /// The server's kernel release, from its Welcome.
    #[serde(default)]
    pub server_kernel: Option<String>,
    /// Each connection's placement and congestion control, in connection order.
    #[serde(default)]
    pub connections: Vec<ConnectionPlacement>,
    /// Human description of the placement: "same CPU (0)", "different CPUs (0, 1)", "unpinned".
    pub placement: String,
    /// Steal time over the run, percent of all CPU time (the hypervisor ran someone else).
    pub steal_percent: Option<f64>,
    /// Busy time of the whole machine over the run that was not this process, percent of all
    /// CPU time: other processes competing with (or waking the CPUs for) the benchmark. An
    /// in-process server (`bench local`) is not other load; a separate server process is.
    pub other_load_percent: Option<f64>,
    /// This process's own CPU time over the run (client, and the server under `bench
    /// local`), percent of all CPU time.
    #[serde(default)]
    pub own_load_percent: Option<f64>,
    /// Congestion control read back from the client sockets; when connections differ, their
    /// distinct values joined with commas.
    pub congestion_client: Option<String>,
    /// Congestion control the server read back from its sockets, likewise.
    pub congestion_server: Option<String>,
    /// The tcptail version that produced the result.
    pub tool_version: String,
}

/// Where one connection's two ends ran and what congestion control each socket had.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ConnectionPlacement {
    /// CPUs the client thread was seen on.
    pub client_cpus_seen: Vec<usize>,
    /// The CPU the server's connection thread ran on after pinning.
    pub server_cpu: Option<usize>,
    /// The CPU the server tried to pin it to.
    pub server_cpu_requested: Option<usize>,
    /// Why the server's pinning failed, if it did.
    pub server_pin_error: Option<String>,
    /// Whether the server served this connection by spinning.
    pub server_spin: bool,
    /// Congestion control read back from the client socket.
    pub congestion_client: Option<String>,
    /// Congestion control read back from the server socket.
    pub congestion_server: Option<String>,
}

/// One value if all agree, else the distinct values joined with commas; `None` if none known.
pub fn common_value<'a>(values: impl IntoIterator<Item = Option<&'a str>>) -> Option<String> {
    let mut distinct: Vec<&str> = values.into_iter().flatten().collect();
    distinct.sort_unstable();
    distinct.dedup();
    (!distinct.is_empty()).then(|| distinct.join(","))
}

/// Steal, other and own load over an interval, percent of all CPU time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadShares {
    /// Steal time.
    pub steal: f64,
    /// Busy time of other processes.
    pub other: Option<f64>,
    /// This process's CPU time.
    pub own: Option<f64>,
}

impl LoadShares {
    /// From machine counters at both ends of the interval and this process's CPU ticks over
    /// it; `None` when no time passed.
    pub fn between(a: CpuTimes, b: CpuTimes, own_ticks: Option<u64>) -> Option<LoadShares> {
        let total = b.total.saturating_sub(a.total);
        if total == 0 {
            return None;
        }
        let pct = |ticks: u64| 100.0 * ticks as f64 / total as f64;
        let steal = b.steal.saturating_sub(a.steal);
        let busy = total.saturating_sub(b.idle.saturating_sub(a.idle)).saturating_sub(steal);
        Some(LoadShares {
            steal: pct(steal),
            other: own_ticks.map(|own| pct(busy.saturating_sub(own))),
            own: own_ticks.map(|own| pct(own.min(busy))),
        })
    }
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
    /// Parses the aggregate `cpu ` line of `/proc/stat` ([`procfs::parse_cpu_ticks`]).
    pub fn parse(proc_stat: &str) -> Option<CpuTimes> {
        let t = procfs::parse_cpu_ticks(proc_stat)?;
        Some(CpuTimes { total: t.total(), idle: t.idle_with_iowait(), steal: t.steal })
    }

    fn read() -> Option<CpuTimes> {
        CpuTimes::parse(&fs::read_to_string("/proc/stat").ok()?)
    }
}

/// This process's user + system CPU time in clock ticks, from `/proc/self/stat`.
fn process_ticks() -> Option<u64> {
    let stat = fs::read_to_string("/proc/self/stat").ok()?;
    Some(procfs::parse_task_stat(&stat)?.cpu_ticks())
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
        let own = match (self.own, process_ticks()) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a)),
            _ => None,
        };
        if let (Some(a), Some(b)) = (self.cpu, CpuTimes::read())
            && let Some(shares) = LoadShares::between(a, b, own)
        {
            ctx.steal_percent = Some(shares.steal);
            ctx.other_load_percent = shares.other;
            ctx.own_load_percent = shares.own;
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

/// Describes where the two ends ran, from what was pinned and what was observed (every CPU
/// the client threads were seen on, every CPU the server's connection threads reported).
pub fn describe_placement(client_seen: &[usize], server_seen: &[usize], pinned: bool) -> String {
    match (client_seen, server_seen) {
        ([c], [s]) if c == s && pinned => format!("same CPU ({c})"),
        ([c], [s]) if c == s => format!("same CPU ({c}), as seen: not pinned"),
        ([c], [s]) if pinned => format!("different CPUs (client {c}, server {s})"),
        ([c], [s]) => format!("different CPUs (client {c}, server {s}), as seen: not pinned"),
        _ if !pinned => {
            format!("unpinned (client seen on {client_seen:?}, server on {server_seen:?})")
        }
        _ => format!("client on {client_seen:?}, server on {server_seen:?}"),
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
    fn placement_descriptions() {
        assert_eq!(describe_placement(&[1], &[1], true), "same CPU (1)");
        assert!(describe_placement(&[0], &[1], true).starts_with("different CPUs"));
        assert!(describe_placement(&[0, 1], &[], false).starts_with("unpinned"));
        assert_eq!(describe_placement(&[1], &[1], false), "same CPU (1), as seen: not pinned");
        assert_eq!(describe_placement(&[1], &[0, 1], true), "client on [1], server on [0, 1]");
    }

    #[test]
    fn load_shares_separate_own_time_from_other_processes() {
        // 1000 ticks: 100 steal, 300 idle, so 600 busy; 450 of them are this process (client
        // and an in-process server), 150 someone else.
        let a = CpuTimes { total: 10_000, idle: 5_000, steal: 50 };
        let b = CpuTimes { total: 11_000, idle: 5_300, steal: 150 };
        let s = LoadShares::between(a, b, Some(450)).unwrap();
        assert_eq!((s.steal, s.other, s.own), (10.0, Some(15.0), Some(45.0)));
        let s = LoadShares::between(a, b, None).unwrap();
        assert_eq!((s.other, s.own), (None, None));
        assert!(LoadShares::between(a, a, Some(0)).is_none());
    }

    #[test]
    fn own_time_includes_other_threads_even_after_they_exit() {
        // What keeps an in-process server (`bench local`) out of "other load": its threads'
        // CPU time is in /proc/self/stat, also once they have exited.
        let before = process_ticks().expect("/proc/self/stat");
        let spun = std::thread::spawn(|| {
            let until = Instant::now() + std::time::Duration::from_millis(400);
            let mut x = 0u64;
            while Instant::now() < until {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            let stat = fs::read_to_string("/proc/thread-self/stat").unwrap();
            procfs::parse_task_stat(&stat).unwrap().cpu_ticks()
        })
        .join()
        .unwrap();
        let after = process_ticks().expect("/proc/self/stat");
        assert!(spun > 0, "the spinning thread got no CPU time at all");
        assert!(
            after - before >= spun,
            "process {} ticks, the exited thread alone {spun}",
            after - before
        );
    }

    #[test]
    fn common_values_and_disagreement() {
        assert_eq!(common_value([Some("bbr"), Some("bbr")]), Some("bbr".into()));
        assert_eq!(common_value([Some("cubic"), None, Some("bbr")]), Some("bbr,cubic".into()));
        assert_eq!(common_value([None]), None);
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
