//! Why releases were late: the emulator thread's own scheduling, sampled from
//! `/proc/thread-self/schedstat`, set against each late release.
//!
//! A release written `L` after its scheduled time spent those `L` in one of four ways, as the
//! kernel accounts the writing thread: **on a CPU** (its own work, and the interrupts and
//! softirqs taken on its CPU meanwhile: this kernel has no `IRQ_TIME_ACCOUNTING`, and the
//! receiving namespace's stack runs in the thread's TUN writes), **waiting for a CPU** (runnable
//! on a run queue: preempted by a task of equal or higher priority, the kernel's fair server,
//! or, with `preempt=none`, a task that has not yet reached a preemption point in the kernel),
//! **asleep** (in its own waits and rests: a timed wake-up rounded up while busy, or a wake-up
//! that came late), or **none of those** (the vCPU itself not running: hypervisor steal,
//! which `PARAVIRT_TIME_ACCOUNTING` takes out of both the run and the wait time).
//!
//! [`Attribution`] samples the thread's CPU time and run-queue wait ([`SchedStat`]) at most
//! every [`SAMPLE_EVERY`] of the loop (a `clock_gettime` and a `pread`, about 5.5 µs together
//! in a KVM guest, so about 2 % of a busy thread) and keeps the last [`SAMPLES_KEPT`] samples. A run of segments
//! released later than the bound is attributed over the span from the last sample at or before
//! its earliest scheduled time to the latest sample: each category's share of that span,
//! weighted by the lateness of the run's late segments. The span is at most one
//! [`SAMPLE_EVERY`] wider than the lateness, so short lateness is attributed coarsely; lateness
//! worth flagging (a bound of 0.5 ms or more) is at least twice the sampling step.
//!
//! The asleep share comes from the loop's own count of time spent blocked or resting; that
//! count includes the run-queue wait after a wake-up, so asleep is capped at what the run and
//! wait times leave (an approximation that favours "waiting for a CPU").
//!
//! When `schedstat` cannot be read (no `CONFIG_SCHED_INFO`, no procfs), everything is counted
//! as unattributed; nothing fails.

use std::collections::VecDeque;
use std::time::Duration;

use rustix::fd::OwnedFd;
use serde::Serialize;
use tcptail_emu::Nanos;
use tcptail_netns::procfs::parse_schedstat;

/// A thread's run and wait times (`schedstat`), parsed in [`tcptail_netns::procfs`].
pub(crate) use tcptail_netns::procfs::SchedTimes;

/// The loop samples the thread's schedstat at most this often.
pub(crate) const SAMPLE_EVERY: Duration = Duration::from_micros(250);

/// Samples kept: [`SAMPLE_EVERY`] x this (at least 1 s while the loop is busy) is the longest
/// lateness attributed over its own span; longer lateness uses the oldest sample kept.
pub(crate) const SAMPLES_KEPT: usize = 4096;

/// The calling thread's scheduling times: its CPU time from `CLOCK_THREAD_CPUTIME_ID` (exact:
/// `schedstat`'s own run time is only brought up to date at a tick or a context switch, 4 ms
/// apart at `HZ=250`) and its run-queue wait from `/proc/thread-self/schedstat` (final for every
/// wait that ended, and the calling thread is running), kept open and re-read with `pread`.
#[derive(Debug)]
pub(crate) struct SchedStat {
    file: Option<OwnedFd>,
}

impl SchedStat {
    /// Opens the calling thread's file: call it on the thread to be measured.
    pub(crate) fn of_current_thread() -> SchedStat {
        let flags = rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC;
        let file =
            rustix::fs::open("/proc/thread-self/schedstat", flags, rustix::fs::Mode::empty());
        SchedStat { file: file.ok() }
    }

    /// The calling thread's times now; `None` when unreadable. Call it on the thread that
    /// opened it.
    pub(crate) fn read(&self) -> Option<SchedTimes> {
        let file = self.file.as_ref()?;
        let mut buf = [0u8; 96];
        // A seq_file re-renders from offset 0 on every pread.
        let n = rustix::io::pread(file, &mut buf, 0).ok()?;
        let wait_ns = parse_schedstat(&buf[..n])?.wait_ns;
        let cpu = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
        let run_ns =
            u64::try_from(cpu.tv_sec).ok()? * 1_000_000_000 + u64::try_from(cpu.tv_nsec).ok()?;
        Some(SchedTimes { run_ns, wait_ns })
    }
}

/// One sample: when (the emulator's clock), the thread's run and wait times, and the time
/// the loop had spent blocked or resting so far.
#[derive(Debug, Clone, Copy)]
struct Sample {
    at: Nanos,
    times: SchedTimes,
    asleep_ns: u64,
}

/// Where the lateness of late releases went (the thread's share of
/// [`super::EmulatorReport::lateness_causes`]), in seconds of lateness.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct CauseTotals {
    pub(crate) late_segments: u64,
    pub(crate) lateness_s: f64,
    pub(crate) on_cpu_s: f64,
    pub(crate) waiting_s: f64,
    pub(crate) asleep_s: f64,
    pub(crate) other_s: f64,
    pub(crate) unattributed_s: f64,
}

impl CauseTotals {
    pub(crate) fn add(&mut self, other: &CauseTotals) {
        self.late_segments += other.late_segments;
        self.lateness_s += other.lateness_s;
        self.on_cpu_s += other.on_cpu_s;
        self.waiting_s += other.waiting_s;
        self.asleep_s += other.asleep_s;
        self.other_s += other.other_s;
        self.unattributed_s += other.unattributed_s;
    }
}

/// Where the lateness of the releases later than the bound went, as the kernel accounted the
/// writing thread meanwhile (sampled every 250 µs from `/proc/thread-self/schedstat` and its
/// CPU clock; a share is the thread's time in that state over each late release's span,
/// weighted by its lateness). Shares are of those releases' summed lateness (all 0 when none
/// was late) and add up to 1.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct LatenessCauses {
    /// Releases later than this (the lateness bound) were attributed, in ms.
    pub late_after_ms: f64,
    /// Segments released later than that.
    pub late_segments: u64,
    /// Their summed lateness, in seconds.
    pub lateness_s: f64,
    /// Share spent with the writing thread on a CPU: its own work (reads, the model, TUN
    /// writes and the receiving stack they run) and interrupts taken meanwhile.
    pub on_cpu: f64,
    /// Share spent with the thread runnable but waiting for a CPU (preempted or not yet
    /// scheduled after a wake-up).
    pub waiting_for_cpu: f64,
    /// Share spent in the thread's own waits and rests (a wake-up rounded up while busy, or
    /// one that came late).
    pub asleep: f64,
    /// Share spent neither running, nor waiting, nor asleep by the loop's count: the vCPU not
    /// running (hypervisor steal).
    pub other: f64,
    /// Share without samples to attribute it (schedstat unreadable).
    pub unattributed: f64,
}

impl LatenessCauses {
    pub(crate) fn from_totals(t: &CauseTotals, bound: Duration) -> LatenessCauses {
        let share = |s: f64| if t.lateness_s > 0.0 { s / t.lateness_s } else { 0.0 };
        LatenessCauses {
            late_after_ms: bound.as_secs_f64() * 1e3,
            late_segments: t.late_segments,
            lateness_s: t.lateness_s,
            on_cpu: share(t.on_cpu_s),
            waiting_for_cpu: share(t.waiting_s),
            asleep: share(t.asleep_s),
            other: share(t.other_s),
            unattributed: share(t.unattributed_s),
        }
    }

    /// `62 % waiting for a CPU, 30 % on a CPU (its own work), ...`: the shares of at least
    /// 0.5 %, largest first.
    pub fn describe(&self) -> String {
        let mut parts = [
            (self.waiting_for_cpu, "waiting for a CPU"),
            (self.on_cpu, "on a CPU (its own work)"),
            (self.asleep, "asleep (its own waits)"),
            (self.other, "stopped with its vCPU (hypervisor)"),
            (self.unattributed, "unattributed"),
        ];
        parts.sort_by(|a, b| b.0.total_cmp(&a.0));
        let parts: Vec<String> = parts
            .iter()
            .filter(|(share, _)| *share >= 0.005)
            .map(|(share, what)| format!("{:.0} % {what}", 100.0 * share))
            .collect();
        if parts.is_empty() { "nothing late".to_owned() } else { parts.join(", ") }
    }
}

/// Samples one thread's scheduling and attributes its late releases; see the
/// [module docs](self).
#[derive(Debug)]
pub(crate) struct Attribution {
    stat: Option<SchedStat>,
    late_after: Duration,
    samples: VecDeque<Sample>,
    totals: CauseTotals,
}

impl Attribution {
    /// For the calling thread; releases later than `late_after` are attributed.
    pub(crate) fn of_current_thread(late_after: Duration) -> Attribution {
        Attribution::with_stat(Some(SchedStat::of_current_thread()), late_after)
    }

    fn with_stat(stat: Option<SchedStat>, late_after: Duration) -> Attribution {
        Attribution {
            stat,
            late_after,
            samples: VecDeque::with_capacity(SAMPLES_KEPT),
            totals: CauseTotals::default(),
        }
    }

    /// The threshold above which a release counts as late.
    #[inline]
    pub(crate) fn late_after(&self) -> Duration {
        self.late_after
    }

    /// Takes a sample if the last one is [`SAMPLE_EVERY`] old; `asleep` is the loop's total
    /// time blocked or resting so far.
    #[inline]
    pub(crate) fn tick(&mut self, now: Nanos, asleep: Duration) {
        if self.samples.back().is_some_and(|s| now - s.at < SAMPLE_EVERY) {
            return;
        }
        if let Some(times) = self.stat.as_ref().and_then(SchedStat::read) {
            self.push(now, times, asleep);
        }
    }

    fn push(&mut self, at: Nanos, times: SchedTimes, asleep: Duration) {
        if self.samples.len() == SAMPLES_KEPT {
            self.samples.pop_front();
        }
        let asleep_ns = u64::try_from(asleep.as_nanos()).unwrap_or(u64::MAX);
        self.samples.push_back(Sample { at, times, asleep_ns });
    }

    /// A run written with `segments` segments later than [`Self::late_after`], summing to
    /// `lateness`, the earliest of them scheduled at `due`.
    pub(crate) fn late_run(&mut self, due: Nanos, segments: u64, lateness: Duration) {
        let weight = lateness.as_secs_f64();
        let t = &mut self.totals;
        t.late_segments += segments;
        t.lateness_s += weight;
        let Some(last) = self.samples.back().copied() else {
            t.unattributed_s += weight;
            return;
        };
        // The last sample at or before `due` (the oldest kept if none is that old).
        let first = match self.samples.partition_point(|s| s.at <= due) {
            0 => self.samples[0],
            i => self.samples[i - 1],
        };
        let span = (last.at - first.at).as_nanos() as f64;
        if span <= 0.0 {
            t.unattributed_s += weight;
            return;
        }
        let delta = |a: u64, b: u64| b.saturating_sub(a) as f64;
        let on_cpu = delta(first.times.run_ns, last.times.run_ns).min(span);
        let waiting = delta(first.times.wait_ns, last.times.wait_ns).min(span - on_cpu);
        let asleep = delta(first.asleep_ns, last.asleep_ns).min(span - on_cpu - waiting);
        let other = span - on_cpu - waiting - asleep;
        t.on_cpu_s += weight * on_cpu / span;
        t.waiting_s += weight * waiting / span;
        t.asleep_s += weight * asleep / span;
        t.other_s += weight * other / span;
    }

    /// What was attributed so far.
    pub(crate) fn totals(&self) -> CauseTotals {
        self.totals
    }

    /// The thread's run and wait times now (for its report), if readable.
    pub(crate) fn times(&self) -> Option<SchedTimes> {
        self.stat.as_ref().and_then(SchedStat::read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn times(run_ms: u64, wait_ms: u64) -> SchedTimes {
        SchedTimes { run_ns: run_ms * MS, wait_ns: wait_ms * MS }
    }

    #[test]
    fn the_own_thread_reads_and_its_times_only_grow() {
        let stat = SchedStat::of_current_thread();
        let a = stat.read().expect("procfs schedstat of the test thread");
        let mut x = 0u64;
        for i in 0..2_000_000u64 {
            x = x.wrapping_add(std::hint::black_box(i));
        }
        std::hint::black_box(x);
        let b = stat.read().expect("read again");
        assert!(b.run_ns > a.run_ns && b.wait_ns >= a.wait_ns, "{a:?} then {b:?}");
    }

    #[test]
    fn late_runs_split_by_what_the_thread_did_over_their_span() {
        let mut a = Attribution::with_stat(None, Duration::from_micros(500));
        // 0-10 ms: ran 2, waited 6, asleep 1 (loop), 1 unaccounted.
        a.push(Nanos(0), times(0, 0), Duration::ZERO);
        a.push(Nanos(10 * MS), times(2, 6), Duration::from_millis(1));
        // Due at 0, late by 10 ms over 3 segments (30 ms of lateness in all).
        a.late_run(Nanos(0), 3, Duration::from_millis(30));
        let t = a.totals();
        assert_eq!(t.late_segments, 3);
        let close = |x: f64, y: f64| (x - y).abs() < 1e-9;
        assert!(close(t.lateness_s, 0.030), "{t:?}");
        assert!(close(t.on_cpu_s, 0.006) && close(t.waiting_s, 0.018), "{t:?}");
        assert!(close(t.asleep_s, 0.003) && close(t.other_s, 0.003), "{t:?}");
        let causes = LatenessCauses::from_totals(&t, a.late_after());
        assert!(close(causes.waiting_for_cpu, 0.6) && close(causes.on_cpu, 0.2), "{causes:?}");
        assert!(close(causes.late_after_ms, 0.5));
        assert_eq!(
            causes.describe(),
            "60 % waiting for a CPU, 20 % on a CPU (its own work), 10 % asleep (its own \
             waits), 10 % stopped with its vCPU (hypervisor)"
        );
    }

    #[test]
    fn the_span_starts_at_the_last_sample_before_the_due_time() {
        let mut a = Attribution::with_stat(None, Duration::from_micros(500));
        // Asleep for the first 10 ms, then on a CPU throughout.
        a.push(Nanos(0), times(0, 0), Duration::ZERO);
        a.push(Nanos(10 * MS), times(0, 0), Duration::from_millis(10));
        a.push(Nanos(12 * MS), times(2, 0), Duration::from_millis(10));
        a.late_run(Nanos(11 * MS), 1, Duration::from_millis(1));
        let t = a.totals();
        assert!((t.on_cpu_s - 0.001).abs() < 1e-12 && t.asleep_s == 0.0, "{t:?}");
    }

    #[test]
    fn asleep_never_double_counts_the_wait_after_a_wake_up() {
        let mut a = Attribution::with_stat(None, Duration::from_micros(500));
        // The loop's blocked time (10 ms) includes 4 ms runnable after the wake-up.
        a.push(Nanos(0), times(0, 0), Duration::ZERO);
        a.push(Nanos(10 * MS), times(0, 4), Duration::from_millis(10));
        a.late_run(Nanos(0), 1, Duration::from_millis(10));
        let t = a.totals();
        let close = |x: f64, y: f64| (x - y).abs() < 1e-12;
        assert!(close(t.waiting_s, 0.004) && close(t.asleep_s, 0.006), "{t:?}");
        assert_eq!(t.other_s, 0.0);
    }

    #[test]
    fn without_samples_lateness_is_unattributed_and_counts_still_add_up() {
        let mut a = Attribution::with_stat(None, Duration::from_micros(500));
        a.tick(Nanos(0), Duration::ZERO);
        a.late_run(Nanos(0), 2, Duration::from_millis(4));
        let mut sum = CauseTotals::default();
        sum.add(&a.totals());
        sum.add(&a.totals());
        assert_eq!(sum.late_segments, 4);
        assert!((sum.unattributed_s - 0.008).abs() < 1e-12);
        let causes = LatenessCauses::from_totals(&sum, Duration::from_micros(500));
        assert_eq!(causes.describe(), "100 % unattributed");
        let none = LatenessCauses::from_totals(&CauseTotals::default(), Duration::ZERO);
        assert_eq!(none.describe(), "nothing late");
    }

    #[test]
    fn the_ring_keeps_the_newest_samples() {
        let mut a = Attribution::with_stat(None, Duration::from_micros(500));
        for i in 0..(SAMPLES_KEPT as u64 + 10) {
            a.push(Nanos(i * MS), times(i, 0), Duration::ZERO);
        }
        assert_eq!(a.samples.len(), SAMPLES_KEPT);
        assert_eq!(a.samples[0].at, Nanos(10 * MS));
        // Due before the oldest sample: the oldest kept starts the span.
        a.late_run(Nanos(0), 1, Duration::from_millis(1));
        assert!((a.totals().on_cpu_s - 0.001).abs() < 1e-12);
    }
}
