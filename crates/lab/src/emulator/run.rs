//! The emulator thread's event loop: read what is there, write what is due, and otherwise wait
//! precisely until the next release.
//!
//! # One iteration
//!
//! 1. Stop if asked ([`Shared::stop`], or a termination signal seen by
//!    [`tcptail_netns::signal::shutdown_requested`]).
//! 2. Each lane reads up to `batch` packets (non-blocking) into its model.
//! 3. Each lane writes up to `batch` releases that have come due. Both steps are bounded so
//!    that a busy direction cannot starve the other one (late ACKs slow the sender).
//! 4. If anything moved, go round again without sleeping. Otherwise look at the earliest
//!    [`Lane::next_wakeup`]: if it is within `spin` of now, go round again (busy-waiting, still
//!    reading arrivals); if it is further, block in `ppoll` on the input devices and the stop
//!    eventfd until `spin` before it (with a `ppoll` timeout, or a `TFD_TIMER_ABSTIME` timerfd);
//!    if nothing is in flight, block until a packet or a stop arrives.
//!
//! So the thread never sleeps *past* a release: it wakes `spin` early and busy-waits the last
//! stretch, which absorbs the tens of µs an idle vCPU needs to wake. Except while it is busy
//! (the [`SpinGovernor`] turned spinning off): then it sleeps to the release's deadline
//! rounded up to [`EmulatorOptions::coalesce`], so that the releases due within one such step
//! share one timer arm. Blocking waits are capped
//! at [`MAX_SLEEP`] so a termination signal is noticed promptly.
//!
//! A split direction's releaser runs this same loop: its lanes take their packets from a
//! reader thread's hand-off (polling its eventfd instead of the device), and
//! [`ReaderWorker`] is the reader's loop: read into the hand-offs, block until a device has
//! more.
//!
//! # Tuning
//!
//! Each emulator thread first sets its timer slack, `SCHED_FIFO` priority and CPU affinity as
//! configured; refusals are recorded ([`TuningStatus`]), never fatal.
//!
//! This module never drops a packet itself and never changes anything outside its own thread.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rustix::event::{PollFd, PollFlags};
use rustix::fd::{AsFd, OwnedFd};
use rustix::io::Errno;
use rustix::time::{Itimerspec, TimerfdFlags, TimerfdTimerFlags, Timespec};
use tcptail_emu::Nanos;

use super::clock::{self, MonoClock};
use super::lane::{Intake, Lane, Reader};
use super::report::TuningStatus;
use super::sched::{Attribution, CauseTotals, SchedStat, SchedTimes};
use super::{EmulatorOptions, Wake};

/// Longest single blocking wait: the bound on noticing a termination signal.
pub(crate) const MAX_SLEEP: Duration = Duration::from_millis(100);

/// The span over which [`SpinGovernor`] measures how busy the thread is.
const SPIN_WINDOW: Duration = Duration::from_millis(10);

/// Busy-waiting before releases is allowed while the thread's own work (not counting spinning
/// and sleeping) stays under this share of [`SPIN_WINDOW`].
const SPIN_WORK_LIMIT: f64 = 0.25;

/// Decides, window by window, whether busy-waiting before releases is worth its CPU.
///
/// Spinning buys precision when packets are sparse (a halted vCPU takes tens of µs to wake).
/// Under a continuous flow it buys nothing: the CPU is awake anyway, and a thread that never
/// blocks has to take its rests ([`EmulatorOptions::max_busy`]), during which releases wait.
/// With `--spin-us 0` throughout, `scripts/bench-emulator`'s unshaped flow (2 vCPUs, loaded
/// machine) had release lateness p99 0.11-0.17 ms against 0.62-0.66 ms spinning, at the same
/// throughput and CPU. So when the thread worked more than [`SPIN_WORK_LIMIT`] of the last
/// [`SPIN_WINDOW`], it sleeps right up to releases in the next one. Measured the same way
/// (two runs each): p99 0.26 / 0.32 ms against 0.63 / 0.27 ms always spinning, half the rests
/// (737 / 699 against 1647 / 1291), same goodput and CPU per GB; the delay probes never
/// switch (no spinless window), so their precision is unchanged.
#[derive(Debug)]
struct SpinGovernor {
    adaptive: bool,
    window_start: Nanos,
    spun: Duration,
    idle: Duration,
    allowed: bool,
    windows_off: u64,
}

impl SpinGovernor {
    fn new(adaptive: bool) -> SpinGovernor {
        SpinGovernor {
            adaptive,
            window_start: Nanos::ZERO,
            spun: Duration::ZERO,
            idle: Duration::ZERO,
            allowed: true,
            windows_off: 0,
        }
    }

    /// Closes the window if it is over and decides for the next one.
    fn tick(&mut self, now: Nanos) {
        let len = now - self.window_start;
        if len < SPIN_WINDOW {
            return;
        }
        let work = len.saturating_sub(self.spun).saturating_sub(self.idle);
        self.allowed = !self.adaptive || work.as_secs_f64() < SPIN_WORK_LIMIT * len.as_secs_f64();
        if !self.allowed {
            self.windows_off += 1;
        }
        (self.window_start, self.spun, self.idle) = (now, Duration::ZERO, Duration::ZERO);
    }
}

/// While the write backlog is blocked, how long to wait for the device before retrying.
const BLOCKED_RETRY: Duration = Duration::from_micros(50);

/// State shared between the handle and the thread(s).
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) stop: AtomicBool,
    /// Written once by `stop()`, polled by every thread.
    pub(crate) wake: OwnedFd,
}

impl Shared {
    /// Whether a thread's loop ends now, and why: `Some(false)` after [`Self::request_stop`],
    /// `Some(true)` on a termination signal, `None` to go on.
    pub(crate) fn stop_requested(&self) -> Option<bool> {
        if self.stop.load(Ordering::Relaxed) {
            Some(false)
        } else if tcptail_netns::signal::shutdown_requested() {
            Some(true)
        } else {
            None
        }
    }

    pub(crate) fn request_stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        // An eventfd counter only overflows after 2^64 - 2 writes; a failed write can only
        // delay the stop by MAX_SLEEP.
        let _ = rustix::io::write(&self.wake, &1u64.to_ne_bytes());
    }
}

/// The tuning outcome of one thread.
#[derive(Debug, Clone)]
pub(crate) struct Tunings {
    pub(crate) sched_fifo: TuningStatus,
    pub(crate) timer_slack: TuningStatus,
    pub(crate) cpu_affinity: TuningStatus,
    /// The thread's kernel id (for `/proc/self/task/TID`).
    pub(crate) tid: i32,
}

/// What a thread hands back when it ends.
#[derive(Debug)]
pub(crate) struct Finished {
    pub(crate) lanes: Vec<Lane>,
    /// A reader thread's intakes (their lanes ran on a releaser thread).
    pub(crate) intakes: Vec<Intake>,
    pub(crate) sleeps: u64,
    pub(crate) timer_arms: u64,
    pub(crate) rests: u64,
    pub(crate) by_signal: bool,
    pub(crate) errors: Vec<String>,
    /// [`SPIN_WINDOW`]s without busy-waiting (see [`SpinGovernor`]).
    pub(crate) spinless_windows: u64,
    /// The thread's CPU time.
    pub(crate) cpu: Duration,
    /// What the thread did: `forward`, `read` or `release`, and its lanes.
    pub(crate) role: String,
    /// Its CPU time and run-queue wait at the end, if readable.
    pub(crate) sched: Option<SchedTimes>,
    /// Where its late releases' lateness went.
    pub(crate) causes: CauseTotals,
}

/// Applies the configured latency settings to the calling thread.
pub(crate) fn tune_current_thread(options: &EmulatorOptions) -> Tunings {
    let timer_slack = match options.timer_slack {
        None => TuningStatus::Off,
        Some(slack) => {
            let ns = u64::try_from(slack.as_nanos()).unwrap_or(u64::MAX).max(1);
            TuningStatus::from_result(tcptail_netns::set_timer_slack(ns))
        }
    };
    let sched_fifo = match options.fifo_priority {
        None => TuningStatus::Off,
        Some(p) => TuningStatus::from_result(tcptail_netns::set_fifo_priority(p)),
    };
    let cpu_affinity = match options.cpu {
        None => TuningStatus::Off,
        Some(cpu) => {
            let mut set = rustix::thread::CpuSet::new();
            set.set(cpu);
            match rustix::thread::sched_setaffinity(None, &set) {
                Ok(()) => TuningStatus::Applied,
                Err(Errno::PERM | Errno::ACCESS) => TuningStatus::NotPermitted,
                Err(e) => TuningStatus::Failed(format!("cpu {cpu}: {e}")),
            }
        }
    };
    let tid = rustix::thread::gettid().as_raw_nonzero().get();
    Tunings { sched_fifo, timer_slack, cpu_affinity, tid }
}

/// The event loop of one thread; see the [module docs](self).
pub(crate) struct Worker {
    lanes: Vec<Lane>,
    shared: Arc<Shared>,
    clock: MonoClock,
    spin: Duration,
    /// While busy, timed wake-ups are rounded up to a multiple of this (zero: never).
    coalesce: u64,
    batch: usize,
    timer: Option<OwnedFd>,
    max_busy: Option<Duration>,
    rest: Duration,
    armed: Option<Nanos>,
    /// When the thread last blocked or rested.
    last_block: Nanos,
    governor: SpinGovernor,
    /// When the current busy-wait iteration began.
    spin_mark: Option<Nanos>,
    sleeps: u64,
    /// Successful `timerfd_settime` calls.
    timer_arms: u64,
    rests: u64,
    /// Total time blocked or resting (for [`Attribution`]).
    asleep: Duration,
    /// Releases later than this are attributed ([`EmulatorOptions::lateness_bound`]).
    late_after: Duration,
    errors: Vec<String>,
}

impl Worker {
    pub(crate) fn new(
        lanes: Vec<Lane>,
        shared: Arc<Shared>,
        clock: MonoClock,
        options: &EmulatorOptions,
    ) -> Worker {
        Worker {
            lanes,
            shared,
            clock,
            spin: options.spin,
            coalesce: u64::try_from(options.coalesce.as_nanos()).unwrap_or(u64::MAX),
            batch: options.batch,
            timer: None,
            max_busy: options.max_busy,
            rest: options.rest,
            armed: None,
            last_block: Nanos::ZERO,
            governor: SpinGovernor::new(options.adaptive_spin),
            spin_mark: None,
            sleeps: 0,
            timer_arms: 0,
            rests: 0,
            asleep: Duration::ZERO,
            late_after: options.lateness_bound,
            errors: Vec::new(),
        }
    }

    /// Creates the timerfd for [`Wake::Timerfd`]; on failure falls back to `ppoll` timeouts
    /// and records why.
    pub(crate) fn with_wake(mut self, wake: Wake) -> Worker {
        if wake == Wake::Timerfd {
            let flags = TimerfdFlags::CLOEXEC | TimerfdFlags::NONBLOCK;
            match rustix::time::timerfd_create(rustix::time::TimerfdClockId::Monotonic, flags) {
                Ok(fd) => self.timer = Some(fd),
                Err(e) => self.errors.push(format!("timerfd_create: {e}; using ppoll timeouts")),
            }
        }
        self
    }

    /// Runs until stopped; returns the lanes for reporting.
    pub(crate) fn run(mut self) -> Finished {
        let spin_ns = u64::try_from(self.spin.as_nanos()).unwrap_or(u64::MAX);
        let mut late = Attribution::of_current_thread(self.late_after);
        let by_signal = loop {
            if let Some(by_signal) = self.shared.stop_requested() {
                break by_signal;
            }
            let mut progress = false;
            for lane in &mut self.lanes {
                progress |= lane.read_batch(&self.clock, self.batch) > 0;
            }
            // Sampled before the releases, so that a late run's span ends after its stall.
            late.tick(self.clock.now(), self.asleep);
            for lane in &mut self.lanes {
                progress |= lane.release_due(&self.clock, self.batch, &mut late) > 0;
            }
            let now = self.clock.now();
            if let Some(mark) = self.spin_mark.take()
                && !progress
            {
                self.governor.spun += now - mark;
            }
            self.governor.tick(now);
            if let Some(max_busy) = self.max_busy
                && now - self.last_block > max_busy
            {
                self.rests += 1;
                std::thread::sleep(self.rest);
                self.last_block = self.clock.now();
                self.governor.idle += self.last_block - now;
                self.asleep += self.last_block - now;
                continue;
            }
            if progress {
                continue;
            }
            let spin_ns = if self.governor.allowed { spin_ns } else { 0 };
            let wakeup = self.lanes.iter().filter_map(Lane::next_wakeup).min();
            match wakeup {
                Some(w) if w.as_nanos() <= now.as_nanos().saturating_add(spin_ns) => {
                    self.spin_mark = Some(now);
                    std::hint::spin_loop();
                }
                _ => {
                    let deadline = wakeup.map(|w| match self.governor.allowed {
                        true => Nanos(w.as_nanos() - spin_ns),
                        false => coalesced(w, self.coalesce),
                    });
                    self.wait(now, deadline);
                    self.last_block = self.clock.now();
                    self.governor.idle += self.last_block - now;
                    self.asleep += self.last_block - now;
                }
            }
        };
        let labels: Vec<&str> = self.lanes.iter().map(Lane::label).collect();
        let role = if self.lanes.iter().all(Lane::reads_itself) { "forward" } else { "release" };
        Finished {
            cpu: thread_cpu(),
            sched: late.times(),
            causes: late.totals(),
            role: format!("{role} {}", labels.join(",")),
            lanes: self.lanes,
            intakes: Vec::new(),
            sleeps: self.sleeps,
            timer_arms: self.timer_arms,
            rests: self.rests,
            spinless_windows: self.governor.windows_off,
            by_signal,
            errors: self.errors,
        }
    }

    /// Blocks until an input device is readable, a blocked output writable, a stop is
    /// requested, or `deadline` (at most [`MAX_SLEEP`] from `now`).
    fn wait(&mut self, now: Nanos, deadline: Option<Nanos>) {
        self.sleeps += 1;
        let blocked = self.lanes.iter().any(Lane::blocked);
        let mut timeout = deadline.map_or(MAX_SLEEP, |d| (d - now).min(MAX_SLEEP));
        if blocked {
            timeout = timeout.min(BLOCKED_RETRY);
        }
        // With a timerfd the deadline is absolute, so the ppoll timeout is only the cap.
        let use_timer = self.timer.is_some() && deadline.is_some() && !blocked;
        if use_timer && let Some(d) = deadline {
            self.arm(d);
        }
        // A split lane's reader must wake us for a new packet; if one already waits, do not
        // sleep at all.
        if !self.lanes.iter().all(Lane::prepare_sleep) {
            for lane in &mut self.lanes {
                lane.woke(PollFlags::empty());
            }
            return;
        }
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(6);
        fds.push(PollFd::new(&self.shared.wake, PollFlags::IN));
        if let Some(timer) = self.timer.as_ref().filter(|_| use_timer) {
            fds.push(PollFd::new(timer, PollFlags::IN));
        }
        let first_lane = fds.len();
        let polled: Vec<bool> = self.lanes.iter().map(|l| l.wake_fd().is_some()).collect();
        for fd in self.lanes.iter().filter_map(Lane::wake_fd) {
            fds.push(PollFd::from_borrowed_fd(fd, PollFlags::IN));
        }
        for lane in self.lanes.iter().filter(|l| l.blocked()) {
            fds.push(PollFd::new(lane.output(), PollFlags::OUT));
        }
        let ts: Timespec = clock::timeout(if use_timer { MAX_SLEEP } else { timeout });
        let result = rustix::event::poll(&mut fds, Some(&ts));
        let mut revents = Vec::with_capacity(self.lanes.len());
        let mut i = first_lane;
        for &p in &polled {
            revents.push(if p && result.is_ok() { fds[i].revents() } else { PollFlags::empty() });
            i += usize::from(p);
        }
        let timer_fired =
            result.is_ok() && use_timer && fds.get(1).is_some_and(|f| !f.revents().is_empty());
        drop(fds);
        for (lane, revents) in self.lanes.iter_mut().zip(revents) {
            if let Some(why) = lane.woke(revents) {
                self.errors.push(why);
            }
        }
        match result {
            Ok(_) | Err(Errno::INTR) => {}
            Err(e) => {
                // Cannot happen with valid descriptors; avoid a hot loop and say so once.
                if self.errors.len() < 16 {
                    self.errors.push(format!("ppoll: {e}"));
                }
                std::thread::sleep(Duration::from_millis(1));
                return;
            }
        }
        if timer_fired && let Some(timer) = &self.timer {
            let mut ticks = [0u8; 8];
            let _ = rustix::io::read(timer, &mut ticks);
            self.armed = None;
        }
    }

    fn arm(&mut self, deadline: Nanos) {
        if self.armed == Some(deadline) {
            return;
        }
        let Some(timer) = &self.timer else { return };
        let spec = Itimerspec {
            it_interval: Timespec { tv_sec: 0, tv_nsec: 0 },
            // A zero it_value would disarm; the epoch itself is never a deadline in practice.
            it_value: self.clock.absolute(Nanos(deadline.as_nanos().max(1))),
        };
        match rustix::time::timerfd_settime(timer.as_fd(), TimerfdTimerFlags::ABSTIME, &spec) {
            Ok(_) => {
                self.armed = Some(deadline);
                self.timer_arms += 1;
            }
            Err(e) => {
                if self.errors.len() < 16 {
                    self.errors.push(format!("timerfd_settime: {e}"));
                }
            }
        }
    }
}

/// `wakeup` rounded up to a multiple of `grid` ns on the monotonic clock (unchanged if `grid`
/// is zero): while the thread is busy, the releases due within one grid step share one
/// timed wake-up (one `timerfd_settime` instead of one per run; see
/// [`EmulatorOptions::coalesce`]).
fn coalesced(wakeup: Nanos, grid: u64) -> Nanos {
    if grid == 0 {
        return wakeup;
    }
    Nanos(wakeup.as_nanos().div_ceil(grid).saturating_mul(grid))
}

/// The calling thread's CPU time.
fn thread_cpu() -> Duration {
    let cpu = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(cpu.tv_sec.max(0) as u64, cpu.tv_nsec.clamp(0, 999_999_999) as u32)
}

/// The event loop of a reader thread ([`super::Threads::Split`], [`super::Threads::Pipeline`]):
/// read what is there into the hand-offs, otherwise block in `ppoll` until a device has a
/// packet or a stop is requested. It never waits for a time: releases are the releaser's.
/// It rests like [`Worker`] after [`EmulatorOptions::max_busy`] of continuous reading.
pub(crate) struct ReaderWorker {
    readers: Vec<Reader>,
    shared: Arc<Shared>,
    clock: MonoClock,
    batch: usize,
    max_busy: Option<Duration>,
    rest: Duration,
    last_block: Nanos,
    sleeps: u64,
    rests: u64,
    errors: Vec<String>,
}

impl ReaderWorker {
    pub(crate) fn new(
        readers: Vec<Reader>,
        shared: Arc<Shared>,
        clock: MonoClock,
        options: &EmulatorOptions,
    ) -> ReaderWorker {
        ReaderWorker {
            readers,
            shared,
            clock,
            batch: options.batch,
            max_busy: options.max_busy,
            rest: options.rest,
            last_block: Nanos::ZERO,
            sleeps: 0,
            rests: 0,
            errors: Vec::new(),
        }
    }

    /// Runs until stopped; returns the intakes for reporting.
    pub(crate) fn run(mut self) -> Finished {
        let by_signal = loop {
            if let Some(by_signal) = self.shared.stop_requested() {
                break by_signal;
            }
            let mut progress = false;
            for reader in &mut self.readers {
                progress |= reader.read_batch(&self.clock, self.batch) > 0;
            }
            let now = self.clock.now();
            if let Some(max_busy) = self.max_busy
                && now - self.last_block > max_busy
            {
                self.rests += 1;
                std::thread::sleep(self.rest);
                self.last_block = self.clock.now();
                continue;
            }
            if !progress {
                self.wait();
                self.last_block = self.clock.now();
            }
        };
        let labels: Vec<&str> = self.readers.iter().map(|r| r.intake.label()).collect();
        Finished {
            cpu: thread_cpu(),
            sched: SchedStat::of_current_thread().read(),
            causes: CauseTotals::default(),
            role: format!("read {}", labels.join(",")),
            lanes: Vec::new(),
            intakes: self.readers.into_iter().map(|r| r.intake).collect(),
            sleeps: self.sleeps,
            timer_arms: 0,
            rests: self.rests,
            spinless_windows: 0,
            by_signal,
            errors: self.errors,
        }
    }

    /// Blocks until an input device is readable or a stop is requested (at most
    /// [`MAX_SLEEP`]).
    fn wait(&mut self) {
        self.sleeps += 1;
        let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(3);
        fds.push(PollFd::new(&self.shared.wake, PollFlags::IN));
        let open: Vec<usize> =
            (0..self.readers.len()).filter(|&i| !self.readers[i].intake.input_closed()).collect();
        for &i in &open {
            fds.push(PollFd::new(self.readers[i].intake.input(), PollFlags::IN));
        }
        match rustix::event::poll(&mut fds, Some(&clock::timeout(MAX_SLEEP))) {
            Ok(0) | Err(Errno::INTR) => return,
            Ok(_) => {}
            Err(e) => {
                if self.errors.len() < 16 {
                    self.errors.push(format!("ppoll: {e}"));
                }
                std::thread::sleep(Duration::from_millis(1));
                return;
            }
        }
        let gone = PollFlags::ERR | PollFlags::HUP | PollFlags::NVAL;
        let revents: Vec<PollFlags> = fds[1..].iter().map(PollFd::revents).collect();
        drop(fds);
        for (&i, revents) in open.iter().zip(revents) {
            if revents.intersects(gone) {
                let intake = &mut self.readers[i].intake;
                let why = format!(
                    "{}: input device {} reported {revents:?}; no longer reading it",
                    intake.label(),
                    intake.input().name()
                );
                self.errors.push(why.clone());
                intake.close_input(why);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalesced_wake_ups_round_up_to_the_grid_and_never_earlier() {
        assert_eq!(coalesced(Nanos(123_456), 0), Nanos(123_456));
        assert_eq!(coalesced(Nanos(100_000), 100_000), Nanos(100_000));
        assert_eq!(coalesced(Nanos(100_001), 100_000), Nanos(200_000));
        assert_eq!(coalesced(Nanos(1), 100_000), Nanos(100_000));
        // Releases due within one step share a deadline, so one timer arm serves them all.
        let due = [Nanos(1_200_001), Nanos(1_252_000), Nanos(1_299_999), Nanos(1_300_000)];
        assert!(due.iter().all(|&w| coalesced(w, 100_000) == Nanos(1_300_000)));
        for w in [0, 1, 99_999, 7_777_777, u64::MAX / 2] {
            let c = coalesced(Nanos(w), 100_000);
            assert!(c >= Nanos(w) && c - Nanos(w) < Duration::from_micros(100));
        }
    }
}
