//! Where a run's time went, from procfs: each thread of a process (CPU time user/system, time
//! waiting for a CPU, context switches, read/write system calls), the machine's CPU time by
//! kind (`/proc/stat`) and the CPU pressure (`/proc/pressure/cpu`), as differences between two
//! samples. The text is parsed by [`tcptail_netns::procfs`]; this module reads the files and
//! turns ticks and nanoseconds into seconds.

use std::time::Instant;

use tcptail_netns::procfs;

/// `USER_HZ`, the unit of `/proc/.../stat` and `/proc/stat` times, as a float.
const TICKS_PER_S: f64 = procfs::USER_HZ as f64;

/// One thread's counters since it started.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Thread {
    /// Its name (`comm`).
    pub name: String,
    /// User and system CPU seconds (`stat` fields 14 and 15, tick-sampled).
    pub user_s: f64,
    pub system_s: f64,
    /// Seconds on a CPU and runnable but waiting for one (`schedstat`).
    pub run_s: f64,
    pub wait_s: f64,
    /// Voluntary (blocked) and involuntary (preempted) context switches.
    pub voluntary: u64,
    pub involuntary: u64,
    /// Read-type and write-type system calls (`io`: `syscr`, `syscw`).
    pub reads: u64,
    pub writes: u64,
}

impl Thread {
    /// `stat`, `schedstat`, `status` and `io` of one task directory.
    fn read(dir: &std::path::Path) -> Option<Thread> {
        let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
        let schedstat = std::fs::read_to_string(dir.join("schedstat")).ok()?;
        let status = std::fs::read_to_string(dir.join("status")).unwrap_or_default();
        let io = std::fs::read_to_string(dir.join("io")).unwrap_or_default();
        let mut t = parse_stat(&stat)?;
        let sched = procfs::parse_schedstat(schedstat.as_bytes())?;
        t.run_s = sched.run_ns as f64 / 1e9;
        t.wait_s = sched.wait_ns as f64 / 1e9;
        t.voluntary = procfs::status_field(&status, "voluntary_ctxt_switches").unwrap_or(0);
        t.involuntary = procfs::status_field(&status, "nonvoluntary_ctxt_switches").unwrap_or(0);
        t.reads = procfs::status_field(&io, "syscr").unwrap_or(0);
        t.writes = procfs::status_field(&io, "syscw").unwrap_or(0);
        Some(t)
    }

    /// The share of its runnable time it spent waiting for a CPU.
    pub fn wait_share(&self) -> f64 {
        self.wait_s / (self.run_s + self.wait_s).max(1e-9)
    }
}

/// The name, user and system time of a `/proc/.../stat` line (the name may hold spaces and
/// parentheses: it ends at the last `)`).
pub fn parse_stat(stat: &str) -> Option<Thread> {
    let t = procfs::parse_task_stat(stat)?;
    Some(Thread {
        name: t.comm.to_owned(),
        user_s: t.utime as f64 / TICKS_PER_S,
        system_s: t.stime as f64 / TICKS_PER_S,
        ..Thread::default()
    })
}

/// Every thread of `pid` (`None` once the process is gone), sorted by thread id.
pub fn threads(pid: u32) -> Option<Vec<(u32, Thread)>> {
    let mut out = Vec::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).ok()?.flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse().ok()) else { continue };
        if let Some(t) = Thread::read(&task.path()) {
            out.push((tid, t));
        }
    }
    out.sort_by_key(|(tid, _)| *tid);
    (!out.is_empty()).then_some(out)
}

/// A process's threads, summed: what it did over its life up to the last sample.
#[derive(Debug, Clone, Default)]
pub struct Process {
    pub threads: Vec<(u32, Thread)>,
    /// Seconds from its start (as the sampler saw it) to the last sample.
    pub wall_s: f64,
}

impl Process {
    pub fn total(&self) -> Thread {
        let mut sum = Thread::default();
        for (_, t) in &self.threads {
            sum.user_s += t.user_s;
            sum.system_s += t.system_s;
            sum.run_s += t.run_s;
            sum.wait_s += t.wait_s;
            sum.voluntary += t.voluntary;
            sum.involuntary += t.involuntary;
            sum.reads += t.reads;
            sum.writes += t.writes;
        }
        sum
    }
}

/// Samples processes until told to stop, keeping each one's last readable sample.
pub struct Sampler {
    started: Instant,
    pids: Vec<u32>,
    last: Vec<Option<Process>>,
}

impl Sampler {
    pub fn new(pids: &[u32]) -> Sampler {
        Sampler { started: Instant::now(), pids: pids.to_vec(), last: vec![None; pids.len()] }
    }

    /// Reads every process still there.
    pub fn sample(&mut self) {
        let wall_s = self.started.elapsed().as_secs_f64();
        for (pid, last) in self.pids.iter().zip(&mut self.last) {
            if let Some(threads) = threads(*pid) {
                *last = Some(Process { threads, wall_s });
            }
        }
    }

    /// The last sample of each process, in the order given.
    pub fn into_last(self) -> Vec<Option<Process>> {
        self.last
    }
}

/// The machine's CPU time by kind, in seconds (`/proc/stat`'s `cpu` line).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Machine {
    pub user_s: f64,
    pub system_s: f64,
    pub irq_s: f64,
    pub softirq_s: f64,
    pub idle_s: f64,
    pub steal_s: f64,
    /// `/proc/pressure/cpu` `some` total: seconds in which some runnable task waited.
    pub pressure_s: f64,
}

impl Machine {
    pub fn read() -> Machine {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let pressure = std::fs::read_to_string("/proc/pressure/cpu").unwrap_or_default();
        let mut m = parse_proc_stat(&stat).unwrap_or_default();
        m.pressure_s = procfs::parse_cpu_pressure_us(&pressure).map_or(0.0, |us| us as f64 / 1e6);
        m
    }

    /// What happened between `self` (earlier) and `later`.
    pub fn until(&self, later: &Machine) -> Machine {
        Machine {
            user_s: later.user_s - self.user_s,
            system_s: later.system_s - self.system_s,
            irq_s: later.irq_s - self.irq_s,
            softirq_s: later.softirq_s - self.softirq_s,
            idle_s: later.idle_s - self.idle_s,
            steal_s: later.steal_s - self.steal_s,
            pressure_s: later.pressure_s - self.pressure_s,
        }
    }

    /// CPU seconds spent working (not idle, not stolen).
    pub fn busy_s(&self) -> f64 {
        self.user_s + self.system_s + self.irq_s + self.softirq_s
    }
}

/// The aggregate `cpu` line of `/proc/stat`: user nice system idle iowait irq softirq steal.
pub fn parse_proc_stat(text: &str) -> Option<Machine> {
    let t = procfs::parse_cpu_ticks(text)?;
    let s = |ticks: u64| ticks as f64 / TICKS_PER_S;
    Some(Machine {
        user_s: s(t.user) + s(t.nice),
        system_s: s(t.system),
        idle_s: s(t.idle) + s(t.iowait),
        irq_s: s(t.irq),
        softirq_s: s(t.softirq),
        steal_s: s(t.steal),
        ..Machine::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_names_may_hold_spaces_and_parentheses() {
        let line = "27954 (a b) c)) R 27951 27951 15937 0 -1 4194304 99 0 0 0 250 75 0 0 20 0 1 0";
        let t = parse_stat(line).unwrap();
        assert_eq!(t.name, "a b) c)");
        assert_eq!((t.user_s, t.system_s), (2.5, 0.75));
        assert!(parse_stat("12 (x) R 1 2").is_none());
    }

    #[test]
    fn proc_stat_cpu_line_by_kind() {
        let text = "cpu  100 50 200 1000 10 5 20 7 0 0\ncpu0 1 1 1 1 1 1 1 1 0 0\n";
        let m = parse_proc_stat(text).unwrap();
        assert_eq!((m.user_s, m.system_s, m.idle_s), (1.5, 2.0, 10.1));
        assert_eq!((m.irq_s, m.softirq_s, m.steal_s), (0.05, 0.2, 0.07));
        assert!((m.busy_s() - 3.75).abs() < 1e-9);
        assert!(parse_proc_stat("intr 1 2 3").is_none());
    }

    #[test]
    fn this_process_reads_and_sums() {
        let me = threads(std::process::id()).expect("own threads");
        assert!(!me.is_empty());
        let p = Process { threads: me, wall_s: 1.0 };
        let total = p.total();
        assert!(total.run_s > 0.0 && total.wait_share() <= 1.0, "{total:?}");
    }
}
