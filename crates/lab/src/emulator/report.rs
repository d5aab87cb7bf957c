//! What the emulator measured about the path and about itself: [`EmulatorReport`].
//!
//! Two kinds of numbers live here, and they must not be confused:
//!
//! - **The emulated path** ([`DirectionReport::stats`]): the model's own summary in virtual
//!   time (arrivals, departures, queueing delay, drops by reason, throughput bins). These are
//!   exact consequences of the spec and the arrivals.
//! - **The emulator's error** ([`DirectionReport::lateness`]): how long after its scheduled
//!   release each packet was actually written to the far TUN device, measured on
//!   `CLOCK_MONOTONIC` just before the write. Lateness adds to every one-way delay the
//!   emulated path claims, so [`EmulatorReport::lateness_flag`] marks runs whose p99 lateness
//!   exceeded [`EmulatorOptions::lateness_bound`](super::EmulatorOptions::lateness_bound).
//!
//! Lateness does *not* include the time a packet spent in the kernel before the emulator read
//! it (waking the emulator thread, tens of µs on an idle vCPU): TUN devices carry no receive
//! timestamp, so that part is only visible end to end (see `scripts/bench-emulator`).
//!
//! Everything serialises to JSON with units in the field names. This module only formats and
//! summarises; it never reads a clock or touches a descriptor.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;
use tcptail_emu::{Count, StatsSummary};
use tcptail_netns::Tuning;

/// Whether a latency setting took effect on the emulator thread(s).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum TuningStatus {
    /// In effect.
    Applied,
    /// Refused for lack of privilege (no `CAP_SYS_NICE`, no RT budget); timing is worse.
    NotPermitted,
    /// The kernel does not support it.
    Unsupported,
    /// Not requested in [`EmulatorOptions`](super::EmulatorOptions).
    Off,
    /// Failed for another reason (the error text).
    Failed(String),
}

impl TuningStatus {
    /// Whether the setting is in effect.
    pub fn is_applied(&self) -> bool {
        *self == TuningStatus::Applied
    }

    pub(crate) fn from_result(result: std::io::Result<Tuning>) -> TuningStatus {
        match result {
            Ok(Tuning::Applied) => TuningStatus::Applied,
            Ok(Tuning::NotPermitted) => TuningStatus::NotPermitted,
            Ok(Tuning::Unsupported) => TuningStatus::Unsupported,
            Err(e) => TuningStatus::Failed(e.to_string()),
        }
    }

    /// The less favourable of two outcomes (for a report over several threads).
    pub(crate) fn worst(self, other: TuningStatus) -> TuningStatus {
        if self.is_applied() { other } else { self }
    }
}

impl std::fmt::Display for TuningStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TuningStatus::Applied => f.write_str("applied"),
            TuningStatus::NotPermitted => f.write_str("not permitted"),
            TuningStatus::Unsupported => f.write_str("unsupported"),
            TuningStatus::Off => f.write_str("off"),
            TuningStatus::Failed(e) => write!(f, "failed: {e}"),
        }
    }
}

/// Release lateness percentiles, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub struct LatenessSummary {
    /// Packets released.
    pub count: u64,
    /// Mean.
    pub mean_us: f64,
    /// Median.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Largest.
    pub max_us: f64,
}

/// A histogram of release lateness in nanoseconds (3 significant digits, auto-resizing).
#[derive(Debug, Clone)]
pub(crate) struct LatenessHistogram(Histogram<u64>);

impl Default for LatenessHistogram {
    fn default() -> LatenessHistogram {
        LatenessHistogram(Histogram::new(3).expect("3 significant figures is a valid precision"))
    }
}

impl LatenessHistogram {
    #[inline]
    pub(crate) fn record(&mut self, lateness: Duration) {
        let ns = u64::try_from(lateness.as_nanos()).unwrap_or(u64::MAX);
        // `saturating_record` clamps instead of growing the histogram; `record` grows it.
        if self.0.record(ns).is_err() {
            self.0.saturating_record(ns);
        }
    }

    pub(crate) fn merge(&mut self, other: &LatenessHistogram) {
        // Both auto-resize, so adding cannot fail for lack of range.
        let _ = self.0.add(&other.0);
    }

    pub(crate) fn summary(&self) -> LatenessSummary {
        let h = &self.0;
        if h.is_empty() {
            return LatenessSummary::default();
        }
        let us = |ns: u64| ns as f64 / 1e3;
        LatenessSummary {
            count: h.len(),
            mean_us: h.mean() / 1e3,
            p50_us: us(h.value_at_quantile(0.5)),
            p90_us: us(h.value_at_quantile(0.9)),
            p99_us: us(h.value_at_quantile(0.99)),
            p999_us: us(h.value_at_quantile(0.999)),
            max_us: us(h.max()),
        }
    }
}

/// One direction of an [`EmulatorReport`]: the emulated path's statistics and the emulator's
/// own counters.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DirectionReport {
    /// The model's summary (virtual time): arrivals, departures, queueing delay, drops.
    pub stats: StatsSummary,
    /// Packets (MTU-sized segments, as on a wire) and bytes written to the far TUN device.
    pub forwarded: Count,
    /// Frames read from the near device (a GSO frame carries up to 64 KiB of segments).
    pub reads: u64,
    /// Reads that found nothing (`EAGAIN`): each is a system call too, the one that ends a
    /// batch of reads.
    pub empty_reads: u64,
    /// Frames written to the far device (a run of consecutive segments each).
    pub writes: u64,
    /// Bytes the emulator copied in userspace: short packets moved out of their 64 KiB read
    /// buffer, and the headers rewritten for runs that are not a whole packet. Payload is
    /// never copied; the kernel copies every byte once into and once out of the emulator.
    pub copied_bytes: u64,
    /// How late releases were written (µs).
    pub lateness: LatenessSummary,
    /// Reads from the near TUN device that failed (other than "nothing to read").
    pub read_errors: u64,
    /// Packets too large for a buffer (see
    /// [`EmulatorOptions::buffer_size`](super::EmulatorOptions::buffer_size)); dropped and
    /// counted here, never forwarded cut short.
    pub oversize_drops: u64,
    /// GSO packets the segmenter refused (inconsistent `virtio_net_hdr`, unsupported GSO
    /// type); dropped and counted here, with the reason in `last_error`.
    pub malformed_drops: u64,
    /// Writes to the far TUN device that failed; each lost one packet, counted here.
    pub write_errors: u64,
    /// Writes that found the device busy (`EAGAIN`); the packet was kept and written later.
    pub write_retries: u64,
    /// Packets the sending namespace's kernel dropped at the TUN device before the emulator
    /// could read them (its transmit ring was full: the emulator fell behind). `None` when
    /// unknown (not a network device, or its counters could not be read).
    pub kernel_drops_before_read: Option<u64>,
    /// Packets the receiving namespace's kernel dropped after the emulator wrote them (its
    /// input backlog was full). `None` when unknown.
    pub kernel_drops_after_write: Option<u64>,
    /// Packets still inside the emulator (queue, link, delay line, write backlog) at stop.
    pub held_at_stop: u64,
    /// The last read or write error, if any.
    pub last_error: Option<String>,
}

/// Everything the emulator measured during one run.
///
/// Two kinds of numbers, not to be confused: the emulated path's own statistics in virtual
/// time ([`DirectionReport::stats`]: exact consequences of the spec and the arrivals), and the
/// emulator's error ([`DirectionReport::lateness`], [`EmulatorReport::lateness`]): how long
/// after its scheduled release each packet was actually written, which adds to every one-way
/// delay the path claims. Lateness does not include the time a packet waited in the kernel
/// before the emulator read it (TUN devices carry no receive timestamp); that part is only
/// visible end to end, e.g. with `scripts/bench-emulator`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EmulatorReport {
    /// Client to server.
    pub up: DirectionReport,
    /// Server to client.
    pub down: DirectionReport,
    /// Release lateness over both directions (µs).
    pub lateness: LatenessSummary,
    /// The p99 bound the run is held to, in milliseconds.
    pub lateness_bound_ms: f64,
    /// Set when p99 lateness exceeded the bound: results that depend on timing are suspect.
    pub lateness_flag: Option<String>,
    /// Where the lateness of the releases later than the bound went: the writing thread on a
    /// CPU, waiting for one, asleep, or its vCPU not running.
    pub lateness_causes: super::LatenessCauses,
    /// Whether `SCHED_FIFO` was applied to the emulator thread(s).
    pub sched_fifo: TuningStatus,
    /// Whether the 1 ns (or configured) timer slack was applied.
    pub timer_slack: TuningStatus,
    /// Whether the CPU affinity was applied.
    pub cpu_affinity: TuningStatus,
    /// How the directions were spread over threads.
    pub threads: super::Threads,
    /// How the thread(s) slept until shortly before a release.
    pub wake: super::Wake,
    /// How long before a release the thread stops sleeping and spins, in µs.
    pub spin_us: f64,
    /// The grid, in µs, that timed wake-ups were rounded up to while busy
    /// ([`EmulatorOptions::coalesce`](super::EmulatorOptions::coalesce)).
    pub coalesce_us: f64,
    /// Times the thread blocked waiting for packets or a release.
    pub sleeps: u64,
    /// Times a thread armed its timerfd for a release ([`Wake::Timerfd`](super::Wake)): each
    /// is a system call, and in a virtual machine it reprograms the vCPU's timer when the
    /// release is the CPU's next timer (on a 2-vCPU KVM guest, `perf` put ~18 % of an
    /// unshaped flow's emulator thread in `timerfd_settime`).
    pub timer_arms: u64,
    /// Times the thread rested after [`EmulatorOptions::max_busy`](super::EmulatorOptions::max_busy)
    /// of continuous work.
    pub rests: u64,
    /// 10 ms windows in which the thread(s) slept right up to releases instead of
    /// busy-waiting, because they had worked more than a quarter of the window before
    /// ([`EmulatorOptions::adaptive_spin`](super::EmulatorOptions::adaptive_spin)).
    pub spinless_windows: u64,
    /// Seconds from start to stop.
    pub duration_s: f64,
    /// CPU time of the emulator thread(s), user and system, in seconds. The kernel's copies
    /// into and out of the TUN devices count here, and so does the receiving namespace's
    /// network stack, which runs in the writing thread.
    pub cpu_s: f64,
    /// Each thread's share of [`EmulatorReport::cpu_s`], in start order.
    pub thread_cpu: Vec<ThreadCpu>,
    /// Whether the thread stopped because a termination signal was received.
    pub stopped_by_signal: bool,
    /// Problems that did not stop forwarding: a TUN device that went away, a log or report
    /// file that could not be written.
    pub errors: Vec<String>,
}

/// One emulator thread's CPU time.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ThreadCpu {
    /// The thread's name (`tcptail-emu-N`, as `perf` and `top -H` show it).
    pub name: String,
    /// What it does: `forward` (reads and releases), `read` or `release`, with the lanes it
    /// serves, e.g. `release up,down`.
    pub role: String,
    /// Its CPU time (user and system) in seconds.
    pub cpu_s: f64,
    /// Seconds it was runnable but waiting for a CPU (`/proc/thread-self/schedstat`); `None`
    /// when unreadable.
    pub run_queue_wait_s: Option<f64>,
}

impl EmulatorReport {
    /// Each of the run's scheduled `events` (as given in
    /// [`EmulatorOptions::events`](super::EmulatorOptions::events)) with its time and when it
    /// had taken effect in both directions (the later of the two; `None` when the run ended
    /// first in either).
    pub fn applied_events(
        &self,
        events: &[tcptail_emu::PathEvent],
    ) -> Vec<tcptail_report::PathEventRecord> {
        let applied = |index: usize| {
            let mut latest: Option<f64> = None;
            for dir in [&self.up, &self.down] {
                let change = dir.stats.path_changes.iter().find(|c| c.index as usize == index);
                latest = Some(latest.unwrap_or(0.0).max(change?.applied_s));
            }
            latest
        };
        events
            .iter()
            .enumerate()
            .map(|(i, e)| tcptail_report::PathEventRecord {
                event: e.to_string(),
                at_s: e.at.as_secs_f64(),
                applied_s: applied(i),
            })
            .collect()
    }

    /// Whether nothing was flagged or went wrong: lateness within its bound; no read, write,
    /// oversize or malformed-packet errors; no kernel drops at the devices; no other errors.
    pub fn is_clean(&self) -> bool {
        let dir_ok = |d: &DirectionReport| {
            d.read_errors == 0
                && d.write_errors == 0
                && d.oversize_drops == 0
                && d.malformed_drops == 0
                && d.kernel_drops_before_read.unwrap_or(0) == 0
                && d.kernel_drops_after_write.unwrap_or(0) == 0
        };
        self.lateness_flag.is_none()
            && self.errors.is_empty()
            && dir_ok(&self.up)
            && dir_ok(&self.down)
    }
}

/// The flag text when `lateness`'s p99 exceeds `bound`, else `None`.
pub(crate) fn lateness_flag(
    lateness: &LatenessSummary,
    bound: Duration,
    fifo: &TuningStatus,
    causes: &super::LatenessCauses,
) -> Option<String> {
    let bound_us = bound.as_secs_f64() * 1e6;
    if lateness.count == 0 || lateness.p99_us <= bound_us {
        return None;
    }
    let hint = if fifo.is_applied() { String::new() } else { format!("; SCHED_FIFO was {fifo}") };
    Some(format!(
        "emulator release lateness p99 {:.3} ms exceeds the {:.3} ms bound \
         (median {:.3} ms, max {:.3} ms over {} packets{hint}): one-way delays were longer \
         than specified by up to that much; while releases were late, the emulator thread \
         was {}",
        lateness.p99_us / 1e3,
        bound_us / 1e3,
        lateness.p50_us / 1e3,
        lateness.max_us / 1e3,
        lateness.count,
        causes.describe(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(values_us: &[u64]) -> LatenessHistogram {
        let mut h = LatenessHistogram::default();
        for &v in values_us {
            h.record(Duration::from_micros(v));
        }
        h
    }

    #[test]
    fn summary_of_empty_histogram_is_zero() {
        assert_eq!(LatenessHistogram::default().summary(), LatenessSummary::default());
    }

    #[test]
    fn summary_percentiles_in_microseconds() {
        let values: Vec<u64> = (1..=1000).collect();
        let s = hist(&values).summary();
        assert_eq!(s.count, 1000);
        assert!((s.p50_us - 500.0).abs() < 1.0, "{s:?}");
        assert!((s.p99_us - 990.0).abs() < 1.0, "{s:?}");
        assert!((s.max_us - 1000.0).abs() < 1.0, "{s:?}");
    }

    #[test]
    fn merge_adds_counts() {
        let mut a = hist(&[10, 20]);
        a.merge(&hist(&[30]));
        assert_eq!(a.summary().count, 3);
    }

    #[test]
    fn flag_only_above_bound() {
        let bound = Duration::from_micros(500);
        let ok = hist(&[100; 1000]).summary();
        let causes = crate::emulator::LatenessCauses {
            lateness_s: 1.0,
            waiting_for_cpu: 0.75,
            on_cpu: 0.25,
            ..Default::default()
        };
        assert_eq!(lateness_flag(&ok, bound, &TuningStatus::Applied, &causes), None);
        let mut values = vec![100; 980];
        values.extend([2_000; 20]);
        let late = hist(&values).summary();
        let flag = lateness_flag(&late, bound, &TuningStatus::NotPermitted, &causes).unwrap();
        assert!(flag.contains("p99 2.00") && flag.contains("0.500 ms bound"), "{flag}");
        assert!(flag.contains("SCHED_FIFO was not permitted"), "{flag}");
        assert!(
            flag.ends_with("was 75 % waiting for a CPU, 25 % on a CPU (its own work)"),
            "{flag}"
        );
        let empty = LatenessSummary::default();
        assert_eq!(lateness_flag(&empty, bound, &TuningStatus::Off, &causes), None);
    }

    #[test]
    fn worst_tuning_wins() {
        let applied = TuningStatus::Applied;
        assert_eq!(applied.clone().worst(TuningStatus::NotPermitted), TuningStatus::NotPermitted);
        assert_eq!(TuningStatus::Off.worst(applied), TuningStatus::Off);
    }
}
