//! The emulator runtime: a thin, fast, self-measuring adapter between the two TUN devices of a
//! [`TunPair`] and the pure model of `tcptail-emu`.
//!
//! ```text
//! client ns            emulator thread (SCHED_FIFO, 1 ns timer slack)                server ns
//! tun ──read──> up:   Direction (loss, queue, rate, delay) ──write when due──> tun
//! tun <──write when due── down: Direction (loss, queue, rate, delay) <──read── tun
//! ```
//!
//! With TUN devices opened for segmentation offload ([`tcptail_netns::TunMode::Offload`],
//! the default of a TUN topology), each read brings a GSO packet of up to 64 KiB; the model still
//! sees every MTU-sized segment on its own (loss, queue bytes/packets/time, CoDel, rate,
//! Mahimahi logs), and consecutive segments that leave within 100 µs of serialisation at the
//! link's rate are written back as one packet (split in software whenever they part ways).
//!
//! [`Emulator::start`] validates the [`PathSpec`] and [`EmulatorOptions`], opens the optional
//! Mahimahi logs and report file, starts the forwarding thread(s) and returns once they run and
//! have applied their latency settings. [`EmulatorHandle::stop`] (or dropping the handle, or a
//! termination signal seen by [`tcptail_netns::signal::shutdown_requested`]) stops them within
//! one loop iteration (at most [`MAX_STOP_LATENCY`] for a signal) and returns an
//! [`EmulatorReport`]. The TUN descriptors are closed when the threads end, which removes the
//! devices: stop the emulator before dropping the topology.
//!
//! # Timing
//!
//! `CLOCK_MONOTONIC`, with its zero at start, is the model's [`Nanos`]. Arrivals are stamped
//! when read. The model computes every release analytically (`tcptail-emu`'s virtual
//! schedule), so lateness never turns into rate error, and the loop's only job is to write
//! each packet as soon after its release time as it can: it sleeps until
//! [`EmulatorOptions::spin`] before the next release and busy-waits the rest, reading arrivals
//! meanwhile. Lateness, the time from a packet's scheduled release to its write, is measured
//! for every packet; a run whose p99 exceeds [`EmulatorOptions::lateness_bound`] carries
//! [`EmulatorReport::lateness_flag`]. When offered more than the thread can forward (about
//! 1.5 Gbit/s of full-size packets on a 2-vCPU VM with a long delay without offload; with it
//! the thread needs 0.33-0.36 CPU-seconds per GB unshaped and 0.8-1.2 behind a 10 Gbit/s
//! link, so 10 Gbit/s is a whole vCPU), the backlog shows up as lateness and the run is
//! flagged rather than silently queueing in the kernel.
//!
//! # Design, as measured on a 2-vCPU KVM guest (`scripts/bench-emulator`)
//!
//! - **Spin before releases** (default 50 µs): waking a halted vCPU costs tens of µs. Without
//!   spinning, release lateness was p50 ≈ 12 µs and the RTT error p50 0.11-0.15 ms; with it,
//!   lateness p50 ≈ 1 µs and RTT error p50 0.06-0.10 ms.
//! - **Timerfd or ppoll**: both arm the same hrtimer with 1 ns slack; no difference beyond
//!   noise (RTT error p50 0.06-0.12 ms either way). [`Wake::Timerfd`] is the default because
//!   its absolute deadline cannot drift while the timeout is being computed.
//! - **One thread** ([`Threads::Single`], default): RTT error p99 0.15-0.33 ms against
//!   0.25-1.0 ms with a thread per direction, whose two spinning `SCHED_FIFO` threads compete
//!   with the endpoints on both vCPUs. Without offload [`Threads::PerDirection`] forwarded
//!   more (unshaped 2.3-2.9 Gbit/s against 1.6-1.8 Gbit/s); with offload neither wins beyond
//!   the noise of a loaded machine (4.2-5.7 against 4.8-5.9 Gbit/s, 3 runs each).
//! - **Reader and releaser threads** ([`Threads::Split`]: two per direction;
//!   [`Threads::Pipeline`]: one reader for both devices, one releaser for both models): the
//!   reader stamps and parses each packet right after its TUN read and hands it over a
//!   lock-free channel (`std::sync::mpsc`); the releaser owns the model, admits the packets at
//!   their stamps before every poll of the model (so the model never runs ahead of an arrival
//!   it has not seen, beyond the microseconds between a read and its send) and writes the
//!   releases; buffers go back to the reader's pool on a second channel. A releaser that
//!   sleeps is woken by an eventfd only when it announced its sleep, so a busy one costs the
//!   reader no system call; readers run one `SCHED_FIFO` priority below the releasers (equal
//!   priorities never preempt, and a reader busy at 10 Gbit/s held its releaser's due
//!   releases back). Wire semantics are those of one thread: the same model sees the same
//!   segments at the same stamps. Measured (2026-11-26, load average 9-19 on the 2 vCPUs,
//!   `scripts/bench-emulator --quick`), it does not pay on this machine, so
//!   [`Threads::Single`] stays the default: the split costs more CPU per GB than one
//!   thread (unshaped 0.66 against 0.33-0.36 CPU-s/GB; seed 002's path 1.55-1.67 against
//!   1.07-1.19), because every packet crosses threads (the reader sleeps and wakes per
//!   burst, about 20k `ppoll`s per GB, and wakes the releaser by eventfd), and the second
//!   CPU it would use is the one the endpoints need. Unshaped it forwarded 8.9 Gbit/s against
//!   8.5-11.1 (one thread), 8.1 (per direction) and 7.2 (pipeline), veth 5.4 in the same run;
//!   with the endpoints `SCHED_FIFO` (`--endpoints-fifo`) 17.1 against 19.0, 20.2 and 17.9.
//!   On seed 002's path it carried more (4.0-5.5 against 3.0-4.9 Gbit/s) but released later
//!   (lateness p99 5-47 ms against 0.24-2.7 ms, flagged), and a delay probe's RTT error p50
//!   rose from 0.08-0.11 to 0.15-0.25 ms (two wake-ups per packet instead of one). It is the
//!   layout for a machine with CPUs to spare.
//! - **Bounded turns** ([`EmulatorOptions::batch`]): each direction reads and writes at most
//!   `batch` packets per turn; draining one direction's releases without bound left the ACKs
//!   of a 25 ms path 13 ms late (median) and cut goodput.
//! - **Rests** ([`EmulatorOptions::max_busy`]): a `SCHED_FIFO` thread that keeps its CPU busy
//!   for long is eventually preempted for ~50 ms at once (the kernel's fair server gives
//!   starved ordinary tasks their share, 5 % of the CPU); resting 100 µs every 2 ms of
//!   continuous work turned a 49 ms maximum lateness into under 1 ms at the same throughput.
//!   That is 4.8 %, just under the fair server's share: a 1 Gbit/s flow, which keeps the
//!   thread busy for seconds, still met ~50 ms stalls (maximum lateness 51-53 ms, goodput
//!   1.8-2.7 % short); resting 200 µs (9 %) removed them (0.8-3 ms, within 0.15 %).
//! - **Delay error is mostly the endpoints' wake-ups** (`scripts/bench-emulator` (a), load
//!   average 13 on 2 vCPUs): with the probe's threads ordinary, RTT error p99 was 1.1-13.6 ms
//!   (the veth pair's own RTT p99 5.8 ms); with them `SCHED_FIFO` below the emulator,
//!   0.26-0.88 ms, each leg's p99 0.13-0.43 ms against veth's 0.07-0.09 ms, and the
//!   emulator's release lateness p99 0.03-0.2 ms. What the emulator adds is its read wake-up
//!   and its lateness; the rest is how soon the kernel runs the endpoints on a busy machine.
//! - **Copies**: two per byte, the kernel's own (TUN read into a pooled 64 KiB buffer, TUN
//!   write from it); releases write `virtio_net_hdr` and rewritten headers in front of a slice
//!   of the original payload with one `writev`, so user space copies only headers and packets
//!   under 2 KiB (0.2-0.6 % of the bytes). TUN has no zero-copy path for a
//!   process (vhost-net's is for the kernel), so two copies is the floor of this design.
//! - **Where the time goes** (`scripts/bench-emulator` (e): `perf` per emulator thread of
//!   the benchmark's own process; the report's [`EmulatorReport::thread_cpu`] and
//!   [`DirectionReport::empty_reads`]). Unshaped, one thread needs 0.33-0.36 CPU-s per GB:
//!   TUN writes 45 % of its samples (a third of that the receiving namespace's TCP stack,
//!   which runs in the writer's softirq), TUN reads 16 %, the model 16 % and the lane's
//!   runs, buffers and lateness 7 % (about 44 segments per 64 KiB packet, each through loss,
//!   queue, link and delay line), `ppoll` 4 %; the kernel's two copies are a quarter of it.
//!   About 60k system calls per GB: 20k reads, 16-20k empty reads (the `EAGAIN` that ends a
//!   batch), 20k writes, 2-3k `ppoll`s; 35-42 segments per write, 2.004 copies per byte.
//!   Behind a 10 Gbit/s link the same thread needs 0.8-1.2 CPU-s per GB: a 64 KiB run is due
//!   every 52 µs, and between runs the thread sleeps (a `timerfd_settime`, which in a KVM
//!   guest reprograms the vCPU's timer through the host: up to a quarter of the thread in an
//!   earlier profile, and a `ppoll`) or, while its work stays under a quarter of the time,
//!   spins (1.6M empty reads per GB are spin iterations). Spinning through every wait under
//!   30 µs instead of sleeping removed the timer arms and a third of the system calls, but
//!   neither CPU per GB (0.79-0.93 against 0.79-0.85) nor lateness (p99 0.27 / 1.41 against
//!   0.25 / 0.27 ms) improved at load 17, so it was not kept.
//! - **Seed 002's path needs more than two shared vCPUs**: at 10 Gbit/s (1.25 GB/s) the
//!   emulator needs 1.0-1.5 vCPUs (0.8-1.2 CPU-s/GB, above) and iperf3's sender about 0.45
//!   (0.36 CPU-s/GB: 85 % of a CPU at 19 Gbit/s), the whole machine. A 10 Gbit/s BBR flow
//!   also probes at 1.25x its rate every few round trips (2.9x in startup). With the
//!   endpoints ordinary tasks on a machine at load 13-19 they get their fair share of what
//!   the emulator's `SCHED_FIFO` threads leave, and one flow carried 3.0-4.9 Gbit/s; with
//!   them `SCHED_FIFO` too (`--endpoints-fifo`) 9.15 Gbit/s, but real-time threads then fill
//!   both vCPUs and the kernel's fair server takes them away for ~50 ms at once (lateness p99
//!   51 ms; 235-433 ms split or per direction). Either way the run is flagged: on this
//!   machine the limit is CPU, not the emulator's design, and the lateness check says when it
//!   is reached. Earlier, quiet machine: one thread, 9.03 Gbit/s at lateness p99 39 ms.
//! - **Timer arms and the per-segment model** (2026-11-26, `perf record -g` of the emulator
//!   thread on seed 002's path, load average 10-17 on the 2 vCPUs): `timerfd_settime` was
//!   the largest single cost, 19.6 % of the thread's samples at 12-15k arms per GB (about
//!   17 µs each: the vCPU's timer is reprogrammed through the host with interrupts off),
//!   then TUN writes 16 % (+5 % the receiving stack), TUN reads 13 %, empty reads while
//!   spinning 13 %, the model and the lane's runs 18 %. Two changes: while busy, timed
//!   wake-ups round up to [`EmulatorOptions::coalesce`] (100 µs), and a GSO packet's
//!   segments enter the model in one step ([`tcptail_emu::Direction::enqueue_burst`], the
//!   same per-segment decisions and events; a proptest holds it to `enqueue` one by one).
//!   Timer arms fell to 0.6 % of the samples (2.3-4.2k per GB); what remains is the
//!   kernel's copies (the TUN write's copy into fresh skb pages alone 29 %, the read's 9 %),
//!   the receiving stack and the sender's ACK processing, which run in the writing thread,
//!   and the model at 10-13 % (departures, statistics, runs). Seed 002's path, three runs
//!   each alternating with the previous build, same load: goodput median 4.36 (3.29-5.27)
//!   against 2.91 (2.66-2.96) Gbit/s, emulator 1.02 against 1.10 CPU-s/GB. It still misses:
//!   the runs that carried more reached BBR's startup overshoot into the 150 MB buffer
//!   (110k tail drops), and there the one emulator thread, which also reads everything the
//!   sender offers and hosts its loss recovery, fell behind by up to 0.2-0.5 s (lateness p99
//!   190-214 ms, flagged; the previous build showed the same, 264-575 ms, when it got there
//!   with `--endpoints-fifo`). With `--endpoints-fifo` (two runs each): 9.24 / 9.19 against
//!   8.85 / 8.98 Gbit/s, 0.74 / 0.73 against 0.83 / 0.80 CPU-s/GB, 7k against 16k timer
//!   arms per GB, lateness p99 495 / 503 against 47 / 264 ms (both overshooting runs of
//!   the new build dropped 89k segments at the full buffer).
//! - **Receive steering** (2026-11-27, seed 002's path, load average 1-4 on the 2 vCPUs):
//!   a TUN write runs the receiving namespace's TCP stack and the wake-up of its reader in the
//!   writing thread (`perf`: 23 % of the emulator thread behind a 10 Gbit/s link). With the
//!   thread pinned ([`EmulatorOptions::cpu`]) and the TUN devices' receive processing steered
//!   to the other CPUs (`tcptail_netns::Netns::set_receive_cpus`), the thread needed
//!   0.61-0.69 instead of 0.65-0.90 CPU-s per GB, and one BBR flow met 9 Gbit/s at lateness
//!   p99 <= 1 ms in 4 of 6 runs (none of 9 otherwise). What is left late is BBR's startup
//!   overshoot into the 150 MB buffer, when the one thread reads up to ~3x the rate: the
//!   report's [`EmulatorReport::lateness_causes`] put 85-94 % of that lateness on the thread's
//!   own work and 0-3 % on waiting for a CPU.
//! - **Other emulators at the same priority**: the emulators of other lab runs on the machine
//!   use the same `SCHED_FIFO` priority, and a thread of equal priority is not preempted:
//!   release lateness maxima of 2-4 ms in otherwise light rows come from them.
//! - **No multi-queue TUN**: `IFF_MULTI_QUEUE` spreads packets over queues by flow hash (the
//!   kernel's `tun_automq_select_queue`), so a single flow, seed 002's case, stays on one
//!   queue and one thread; and several threads feeding one bottleneck model would need a lock
//!   on every packet (the model is one queue, one link, one clock per direction). A second
//!   thread per direction only helps many flows, which no experiment here needs at 10 Gbit/s.
//!   Nor is there more to re-coalesce: runs already leave as whole 64 KiB packets (35-42
//!   segments per write), and a TUN device takes no GSO packet beyond 64 KiB, so adjacent
//!   packets cannot share a write.
//!
//! # Invariants
//!
//! - Packets are never reordered within a direction (unless the path asks: `--reorder`, or
//!   fq_codel serving flows in turn) and never dropped silently: every drop is
//!   counted by reason (model drops in the stats, oversize reads, failed writes). A busy
//!   device (`EAGAIN` on write) delays packets, it does not lose them.
//! - Timing shortcomings degrade, they do not fail: `SCHED_FIFO`, timer slack and affinity
//!   that the kernel refuses are recorded as [`TuningStatus`] in the report.
//! - The runtime never changes anything outside its own threads: no sysctls, no qdiscs, no
//!   interfaces. It reads a packet's headers only to cut a GSO packet into its segments (and
//!   rewrites them only for a run that is not the whole packet), and through the model
//!   ([`tcptail_emu::Headers`]) when the path asks for ECN marks or fq_codel's flow hash;
//!   otherwise a packet from a device without `virtio_net_hdr`s is never looked at.
//!
//! All system calls go through `rustix` (safe wrappers); this module has no `unsafe`.

mod clock;
mod handoff;
mod kernel;
mod lane;
mod report;
mod run;
mod sched;
#[cfg(test)]
mod tests;

use std::fs::File;
use std::io::{self, BufWriter, Write};
use std::path::{Path as FsPath, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use tcptail_emu::segment::Segment;
use tcptail_emu::{LogHeader, MahimahiLog, Nanos, Path, PathSpec, SpecError, Stats};
use tcptail_netns::TunPair;

pub use report::{DirectionReport, EmulatorReport, LatenessSummary, ThreadCpu, TuningStatus};
pub use sched::LatenessCauses;

use clock::MonoClock;
use kernel::DeviceDrops;
use lane::{Endpoint, Lane, LaneObserver, Reader};
use run::{Finished, ReaderWorker, Shared, Tunings, Worker};

/// The longest a running emulator takes to notice a termination signal.
pub const MAX_STOP_LATENCY: Duration = run::MAX_SLEEP;

/// How the directions are spread over threads (`tcptail lab path --threads`, `threads =` in
/// experiment files; named as [`Threads::name`] says, in reports too).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Threads {
    /// One thread serves both directions (the default: on a 2-vCPU machine a second busy
    /// thread competes with the endpoints it serves).
    Single,
    /// One thread per direction.
    PerDirection,
    /// Each direction over two threads: a reader (TUN reads, stamping, parsing) hands packets
    /// to a releaser (the model, timed releases, TUN writes) through a lock-free channel.
    Split,
    /// Two threads for both directions: one reads both devices, one runs both models and
    /// writes (the stages of [`Threads::Split`] without a second pair of threads).
    Pipeline,
}

impl Threads {
    /// Every layout, in the order `--help` lists them.
    pub const ALL: [Threads; 4] =
        [Threads::Single, Threads::PerDirection, Threads::Split, Threads::Pipeline];

    /// The name on command lines, in experiment files and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Threads::Single => "single",
            Threads::PerDirection => "per-direction",
            Threads::Split => "split",
            Threads::Pipeline => "pipeline",
        }
    }

    /// The accepted names, for error messages: `single, per-direction, split or pipeline`.
    pub fn choices() -> String {
        let names = Threads::ALL.map(Threads::name);
        format!("{} or {}", names[..names.len() - 1].join(", "), names[names.len() - 1])
    }
}

impl std::str::FromStr for Threads {
    type Err = String;
    fn from_str(s: &str) -> Result<Threads, String> {
        let wanted = s.trim().to_ascii_lowercase().replace('_', "-");
        Threads::ALL
            .into_iter()
            .find(|t| t.name() == wanted)
            .ok_or_else(|| format!("unknown thread layout '{s}' (use {})", Threads::choices()))
    }
}

impl std::fmt::Display for Threads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What one emulator thread runs.
enum Job {
    /// Lanes reading their own devices or fed by readers: the timed event loop.
    Release(Vec<Lane>),
    /// Readers feeding lanes on other threads.
    Read(Vec<Reader>),
}

/// How a thread sleeps until shortly before the next release.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Wake {
    /// `ppoll` with a relative nanosecond timeout.
    Ppoll,
    /// A `CLOCK_MONOTONIC` timerfd armed with `TFD_TIMER_ABSTIME`, polled with the devices.
    Timerfd,
}

/// How the emulator runs and what it records. `Default` is the measured best setting for a
/// small VM; see `scripts/bench-emulator`.
#[derive(Debug, Clone, PartialEq)]
pub struct EmulatorOptions {
    /// Seed of the model's loss and jitter draws (the down direction derives its own).
    pub seed: u64,
    /// Thread layout (default [`Threads::Single`]).
    pub threads: Threads,
    /// Sleep mechanism (default [`Wake::Timerfd`]).
    pub wake: Wake,
    /// Stop sleeping this long before a release and busy-wait the rest (default 50 µs; at
    /// most 10 ms). Zero sleeps right up to the release.
    pub spin: Duration,
    /// Busy-wait only while the thread's own work took under a quarter of the last 10 ms
    /// (default `true`): under a continuous flow spinning buys no precision and forces rests
    /// (see [`EmulatorOptions::max_busy`]). `false` always spins.
    pub adaptive_spin: bool,
    /// While the thread is busy (a window without busy-waiting, see
    /// [`EmulatorOptions::adaptive_spin`]), timed wake-ups are rounded up to a multiple of
    /// this on the monotonic clock (default 100 µs; zero: never; at most 1 ms), so that
    /// releases due within one such window share one timer: each `timerfd_settime` costs
    /// ~17 µs in this KVM guest, and behind a 10 Gbit/s link a run is due every 52 µs.
    /// Releases are then up to this much later than scheduled (counted in the lateness);
    /// sparse traffic (delay probes) never coalesces.
    pub coalesce: Duration,
    /// After running this long without blocking, sleep for [`EmulatorOptions::rest`] (default
    /// `Some(2 ms)`; `None` never rests). A `SCHED_FIFO` thread that keeps its CPU busy (an
    /// unshaped gigabit flow) otherwise starves the ordinary tasks queued on that CPU until
    /// the kernel's fair-server/RT throttling takes the CPU away for ~50 ms at once; short
    /// regular rests give them their share in small pieces instead.
    pub max_busy: Option<Duration>,
    /// How long to rest after [`EmulatorOptions::max_busy`] of continuous work (default 200 µs).
    pub rest: Duration,
    /// Most packets read from, or written to, one device before the other direction gets its
    /// turn (default 32).
    pub batch: usize,
    /// Bytes per packet buffer of a device without `virtio_net_hdr`s; must exceed the TUN MTU
    /// (default 2048; 256..=65536). Offload devices always read into 64 KiB buffers.
    pub buffer_size: usize,
    /// `SCHED_FIFO` priority of the emulator thread(s), 1..=99 (default `Some(10)`); reader
    /// threads ([`Threads::Split`], [`Threads::Pipeline`]) run one below it.
    pub fifo_priority: Option<i32>,
    /// Timer slack of the emulator thread(s) (default 1 ns).
    pub timer_slack: Option<Duration>,
    /// Pin the emulator thread(s) to this CPU (default: not pinned).
    pub cpu: Option<usize>,
    /// p99 release lateness above which the report is flagged (default 0.5 ms).
    pub lateness_bound: Duration,
    /// Width of the model's throughput bins (default 100 ms).
    pub stats_bin: Duration,
    /// Write Mahimahi logs `up.log` and `down.log` into this directory (created if missing).
    pub mahimahi_log_dir: Option<PathBuf>,
    /// Write the [`EmulatorReport`] as JSON to this file at stop.
    pub report_path: Option<PathBuf>,
    /// The command line recorded in the Mahimahi log headers.
    pub command_line: Option<String>,
    /// Path events (outage, rate step, loss burst, delay change) applied to both directions on
    /// the model's virtual clock, times from the emulator's start; each direction's report
    /// lists when they took effect (`stats.path_changes`).
    pub events: Vec<tcptail_emu::PathEvent>,
}

impl Default for EmulatorOptions {
    fn default() -> EmulatorOptions {
        EmulatorOptions {
            seed: 1,
            threads: Threads::Single,
            wake: Wake::Timerfd,
            spin: Duration::from_micros(50),
            adaptive_spin: true,
            coalesce: Duration::from_micros(100),
            max_busy: Some(Duration::from_millis(2)),
            rest: Duration::from_micros(200),
            batch: 32,
            buffer_size: 2048,
            fifo_priority: Some(10),
            timer_slack: Some(Duration::from_nanos(1)),
            cpu: None,
            lateness_bound: Duration::from_micros(500),
            stats_bin: Duration::from_millis(100),
            mahimahi_log_dir: None,
            report_path: None,
            command_line: None,
            events: Vec::new(),
        }
    }
}

impl EmulatorOptions {
    /// Checks every field; the error names the field at fault.
    pub fn validate(&self) -> Result<(), EmulatorError> {
        let bad =
            |field: &'static str, problem: String| Err(EmulatorError::Option { field, problem });
        if self.spin > Duration::from_millis(10) {
            return bad("spin", format!("{:?} is more than 10 ms of busy-waiting", self.spin));
        }
        if self.coalesce > Duration::from_millis(1) {
            return bad(
                "coalesce",
                format!("{:?} is more than 1 ms of added lateness", self.coalesce),
            );
        }
        if self.max_busy.is_some_and(|b| b < Duration::from_micros(100)) {
            return bad("max_busy", format!("{:?} is below 100 µs", self.max_busy));
        }
        if self.rest > Duration::from_millis(10) {
            return bad("rest", format!("{:?} is more than 10 ms", self.rest));
        }
        if !(1..=4096).contains(&self.batch) {
            return bad("batch", format!("{} is outside 1..=4096", self.batch));
        }
        if !(256..=65536).contains(&self.buffer_size) {
            return bad("buffer_size", format!("{} is outside 256..=65536", self.buffer_size));
        }
        if let Some(p) = self.fifo_priority
            && !(1..=99).contains(&p)
        {
            return bad("fifo_priority", format!("{p} is outside 1..=99"));
        }
        if self.timer_slack.is_some_and(|s| s.is_zero()) {
            return bad("timer_slack", "0 would mean the default slack; use None".to_owned());
        }
        if self.cpu.is_some_and(|c| c >= 1024) {
            return bad("cpu", format!("{:?} is not a CPU number", self.cpu));
        }
        if self.lateness_bound.is_zero() {
            return bad("lateness_bound", "must be positive".to_owned());
        }
        if self.stats_bin < Duration::from_millis(1) {
            return bad("stats_bin", format!("{:?} is below 1 ms", self.stats_bin));
        }
        Ok(())
    }
}

/// Why the emulator could not start.
#[derive(Debug, thiserror::Error)]
pub enum EmulatorError {
    /// The path spec does not validate.
    #[error("invalid path spec: {0}")]
    Spec(#[from] SpecError),
    /// An [`EmulatorOptions`] field makes no sense.
    #[error("invalid emulator option {field}: {problem}")]
    Option {
        /// The field, e.g. `batch`.
        field: &'static str,
        /// What is wrong with it.
        problem: String,
    },
    /// A Mahimahi log or the report file could not be created.
    #[error("cannot create {}: {source}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// The error.
        source: io::Error,
    },
    /// A kernel object the emulator needs (eventfd) could not be created.
    #[error("cannot create the emulator's {what}: {source}")]
    Setup {
        /// What it was.
        what: &'static str,
        /// The error.
        source: io::Error,
    },
    /// The thread could not be spawned, or died before it started forwarding.
    #[error("cannot start the emulator thread: {0}")]
    Thread(io::Error),
}

/// The emulator; see the [module docs](self).
#[derive(Debug)]
pub struct Emulator;

impl Emulator {
    /// Starts forwarding between `tun.client` (up: client to server) and `tun.server` (down).
    /// Returns once the thread(s) run. The TUN descriptors are closed when they stop.
    pub fn start(
        tun: TunPair,
        spec: PathSpec,
        options: EmulatorOptions,
    ) -> Result<EmulatorHandle, EmulatorError> {
        Self::start_on(tun.client.into(), tun.server.into(), spec, options)
    }

    /// [`Emulator::start`] on any pair of packet devices.
    fn start_on(
        client: Endpoint,
        server: Endpoint,
        spec: PathSpec,
        options: EmulatorOptions,
    ) -> Result<EmulatorHandle, EmulatorError> {
        options.validate()?;
        if client.vnet_hdr() != server.vnet_hdr() {
            let problem = format!(
                "{} {} virtio_net_hdr but {} {}: open both TUN devices in one mode",
                client.name(),
                if client.vnet_hdr() { "has" } else { "has no" },
                server.name(),
                if server.vnet_hdr() { "has" } else { "has no" },
            );
            return Err(EmulatorError::Option { field: "devices", problem });
        }
        let mut path = Path::<Segment>::try_new(spec.clone(), options.seed)?;
        path.schedule(&options.events)?;
        let report_file = match &options.report_path {
            Some(p) => Some((p.clone(), File::create(p).map_err(|e| file_error(p, e))?)),
            None => None,
        };
        let clock = MonoClock::start();
        let wall_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis());
        let observer = |name: &str, file: &str, dir_spec| -> Result<LaneObserver, EmulatorError> {
            let stats = Stats::new(options.stats_bin, Nanos::ZERO);
            let Some(dir) = &options.mahimahi_log_dir else {
                return Ok(LaneObserver { stats, log: None });
            };
            let path = dir.join(file);
            std::fs::create_dir_all(dir).map_err(|e| file_error(dir, e))?;
            // Never through a symlink, never into someone else's file: the directory may be
            // one the user named (an earlier run's log there is replaced: `--force`).
            let file = tcptail_report::files::create_replacing(&path, 0o644);
            let out = BufWriter::new(file.map_err(|e| file_error(&path, e))?);
            let mut header = LogHeader::for_direction(name, dir_spec);
            header.log_name = path.display().to_string();
            header.command_line = options.command_line.clone();
            header.init_timestamp_ms = u64::try_from(wall_ms).unwrap_or(u64::MAX);
            let log = MahimahiLog::new(out, &header).map_err(|e| file_error(&path, e))?;
            Ok(LaneObserver { stats, log: Some(log) })
        };
        let path = path.with_observers(
            observer("uplink", "up.log", &spec.up)?,
            observer("downlink", "down.log", &spec.down)?,
        );
        let flags = rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::NONBLOCK;
        let wake = rustix::event::eventfd(0, flags)
            .map_err(|e| EmulatorError::Setup { what: "stop eventfd", source: e.into() })?;
        let shared = Arc::new(Shared { stop: AtomicBool::new(false), wake });

        let devices = [client.device(), server.device()];
        let mut setup_errors = Vec::new();
        let baseline = [
            device_drops(&devices[0], &mut setup_errors),
            device_drops(&devices[1], &mut setup_errors),
        ];
        let (client, server) = (Arc::new(client), Arc::new(server));
        let size = options.buffer_size;
        let jobs = match options.threads {
            Threads::Single | Threads::PerDirection => {
                let up = Lane::with_device("up", client.clone(), server.clone(), path.up, size);
                let down = Lane::with_device("down", server, client, path.down, size);
                if options.threads == Threads::Single {
                    vec![Job::Release(vec![up, down])]
                } else {
                    vec![Job::Release(vec![up]), Job::Release(vec![down])]
                }
            }
            Threads::Split | Threads::Pipeline => {
                let setup = |e| EmulatorError::Setup { what: "hand-off eventfd", source: e };
                let (up_reader, up) =
                    Lane::split("up", client.clone(), server.clone(), path.up, size)
                        .map_err(setup)?;
                let (down_reader, down) =
                    Lane::split("down", server, client, path.down, size).map_err(setup)?;
                if options.threads == Threads::Split {
                    vec![
                        Job::Read(vec![up_reader]),
                        Job::Release(vec![up]),
                        Job::Read(vec![down_reader]),
                        Job::Release(vec![down]),
                    ]
                } else {
                    vec![Job::Read(vec![up_reader, down_reader]), Job::Release(vec![up, down])]
                }
            }
        };
        let mut handle = EmulatorHandle {
            shared: shared.clone(),
            threads: Vec::new(),
            tunings: Vec::new(),
            clock,
            started: Instant::now(),
            options: options.clone(),
            report_file,
            devices,
            baseline,
            setup_errors,
        };
        let (ready_tx, ready_rx) = mpsc::channel();
        for (i, job) in jobs.into_iter().enumerate() {
            let (mut opts, ready) = (options.clone(), ready_tx.clone());
            if matches!(job, Job::Read(_)) {
                // One below the releasers, so that a release that comes due preempts a
                // reader on the same CPU (equal SCHED_FIFO priorities never preempt).
                opts.fifo_priority = opts.fifo_priority.map(|p| (p - 1).max(1));
            }
            let run: Box<dyn FnOnce() -> Finished + Send> = match job {
                Job::Release(lanes) => {
                    let worker =
                        Worker::new(lanes, shared.clone(), clock, &options).with_wake(options.wake);
                    Box::new(move || worker.run())
                }
                Job::Read(readers) => {
                    let worker = ReaderWorker::new(readers, shared.clone(), clock, &options);
                    Box::new(move || worker.run())
                }
            };
            let thread = std::thread::Builder::new()
                .name(format!("tcptail-emu-{i}"))
                .spawn(move || {
                    let _ = ready.send(run::tune_current_thread(&opts));
                    drop(ready);
                    run()
                })
                .map_err(EmulatorError::Thread)?;
            handle.threads.push(thread);
        }
        drop(ready_tx);
        for _ in 0..handle.threads.len() {
            match ready_rx.recv() {
                Ok(t) => handle.tunings.push(t),
                Err(_) => {
                    let msg = "the emulator thread exited before it started";
                    return Err(EmulatorError::Thread(io::Error::other(msg)));
                }
            }
        }
        Ok(handle)
    }
}

fn file_error(path: &FsPath, source: io::Error) -> EmulatorError {
    EmulatorError::File { path: path.to_owned(), source }
}

/// Stops a running emulator from anywhere (e.g. a [`tcptail_netns::Cleanup::defer`] action).
/// It does not wait: the owner of the [`EmulatorHandle`] joins and gets the report.
#[derive(Debug, Clone)]
pub struct Stopper(Arc<Shared>);

impl Stopper {
    /// Asks the emulator thread(s) to stop.
    pub fn stop(&self) {
        self.0.request_stop();
    }
}

/// A running emulator. [`EmulatorHandle::stop`] ends it and returns the report; dropping the
/// handle also stops it (writing the report file if one was configured).
#[derive(Debug)]
pub struct EmulatorHandle {
    shared: Arc<Shared>,
    threads: Vec<JoinHandle<Finished>>,
    tunings: Vec<Tunings>,
    clock: MonoClock,
    started: Instant,
    options: EmulatorOptions,
    report_file: Option<(PathBuf, File)>,
    /// The client and server devices (namespace, interface), if they are network devices.
    devices: [Option<(String, String)>; 2],
    /// Their kernel drop counters at start.
    baseline: [Option<DeviceDrops>; 2],
    /// Problems met while starting that did not prevent it.
    setup_errors: Vec<String>,
}

/// Reads a device's drop counters; `None` (and a note in `errors`) if that fails.
fn device_drops(
    device: &Option<(String, String)>,
    errors: &mut Vec<String>,
) -> Option<DeviceDrops> {
    let (netns, ifname) = device.as_ref()?;
    kernel::read(netns, ifname)
        .map_err(|e| errors.push(format!("reading the counters of {ifname} in {netns}: {e}")))
        .ok()
}

impl EmulatorHandle {
    /// The kernel thread ids of the emulator's threads (`/proc/self/task/TID`), while they
    /// run: where they are allowed to run and how they are scheduled can be read there.
    pub fn thread_ids(&self) -> Vec<i32> {
        self.tunings.iter().map(|t| t.tid).collect()
    }

    /// Stops the thread(s), waits for them and returns what they measured. Takes one loop
    /// iteration (microseconds) plus writing the logs and the report file.
    ///
    /// # Panics
    ///
    /// If an emulator thread panicked (a bug), the panic is propagated.
    pub fn stop(mut self) -> EmulatorReport {
        self.finish(true).expect("stop runs once")
    }

    /// A clonable stopper, e.g. for a cleanup action.
    pub fn stopper(&self) -> Stopper {
        Stopper(self.shared.clone())
    }

    /// Whether the thread(s) have ended (stopped, or a termination signal was received).
    pub fn is_finished(&self) -> bool {
        self.threads.iter().all(JoinHandle::is_finished)
    }

    /// Whether `SCHED_FIFO` is in effect on every emulator thread.
    pub fn sched_fifo(&self) -> TuningStatus {
        self.tunings.iter().fold(TuningStatus::Applied, |acc, t| acc.worst(t.sched_fifo.clone()))
    }

    /// Stops, joins and reports (writing the report file). A thread's panic is propagated
    /// when `propagate`, else only printed.
    fn finish(&mut self, propagate: bool) -> Option<EmulatorReport> {
        if self.threads.is_empty() {
            return None;
        }
        self.shared.request_stop();
        let mut finished = Vec::new();
        let mut panic = None;
        for thread in self.threads.drain(..) {
            match thread.join() {
                Ok(f) => finished.push(f),
                Err(p) => panic = Some(p),
            }
        }
        if let Some(p) = panic {
            if propagate {
                std::panic::resume_unwind(p);
            }
            eprintln!("tcptail: the emulator thread panicked; no report");
            return None;
        }
        // The lanes in `finished` still hold the devices open, so their counters exist.
        let mut errors = std::mem::take(&mut self.setup_errors);
        let now = [0, 1].map(|i| device_drops(&self.devices[i], &mut errors));
        let delta = [0, 1].map(|i| Some(now[i]?.since(self.baseline[i]?)));
        let mut report = self.assemble(finished);
        report.errors.extend(errors);
        let (client, server) = (delta[0], delta[1]);
        report.up.kernel_drops_before_read = client.map(|d| d.tx);
        report.up.kernel_drops_after_write = server.map(|d| d.rx);
        report.down.kernel_drops_before_read = server.map(|d| d.tx);
        report.down.kernel_drops_after_write = client.map(|d| d.rx);
        if let Some((path, file)) = self.report_file.take()
            && let Err(e) = write_json(file, &report)
        {
            report.errors.push(format!("writing the report to {}: {e}", path.display()));
        }
        Some(report)
    }

    fn assemble(&self, mut finished: Vec<Finished>) -> EmulatorReport {
        let now = self.clock.now();
        let mut errors = Vec::new();
        let (mut sleeps, mut timer_arms, mut rests, mut by_signal) = (0, 0, 0, false);
        let mut spinless_windows = 0;
        let mut cpu = Duration::ZERO;
        let mut thread_cpu = Vec::new();
        let mut causes = sched::CauseTotals::default();
        let mut lateness = report::LatenessHistogram::default();
        let (mut up, mut down) = (None, None);
        // A split lane's counters of reading come from its reader thread.
        let mut intakes: Vec<_> = finished
            .iter_mut()
            .flat_map(|f| f.intakes.drain(..))
            .map(|i| (i.label(), i.into_counters()))
            .collect();
        for (i, f) in finished.into_iter().enumerate() {
            thread_cpu.push(ThreadCpu {
                name: format!("tcptail-emu-{i}"),
                role: f.role.clone(),
                cpu_s: f.cpu.as_secs_f64(),
                run_queue_wait_s: f.sched.map(|t| t.wait_ns as f64 / 1e9),
            });
            causes.add(&f.causes);
            sleeps += f.sleeps;
            timer_arms += f.timer_arms;
            spinless_windows += f.spinless_windows;
            cpu += f.cpu;
            rests += f.rests;
            by_signal |= f.by_signal;
            errors.extend(f.errors);
            for lane in f.lanes {
                lateness.merge(lane.lateness());
                let label = lane.label();
                let intake = intakes.iter().position(|i| i.0 == label);
                let (dir, log_error) = lane.finish(now, intake.map(|i| intakes.swap_remove(i).1));
                errors.extend(log_error);
                if label == "up" { up = Some(dir) } else { down = Some(dir) }
            }
        }
        let worst = |f: fn(&Tunings) -> &TuningStatus| {
            self.tunings.iter().fold(TuningStatus::Applied, |acc, t| acc.worst(f(t).clone()))
        };
        let sched_fifo = worst(|t| &t.sched_fifo);
        let lateness = lateness.summary();
        let o = &self.options;
        let causes = LatenessCauses::from_totals(&causes, o.lateness_bound);
        EmulatorReport {
            up: up.expect("the up lane ran on one of the threads"),
            down: down.expect("the down lane ran on one of the threads"),
            lateness_flag: report::lateness_flag(&lateness, o.lateness_bound, &sched_fifo, &causes),
            lateness,
            lateness_causes: causes,
            lateness_bound_ms: o.lateness_bound.as_secs_f64() * 1e3,
            sched_fifo,
            timer_slack: worst(|t| &t.timer_slack),
            cpu_affinity: worst(|t| &t.cpu_affinity),
            threads: o.threads,
            wake: o.wake,
            spin_us: o.spin.as_secs_f64() * 1e6,
            coalesce_us: o.coalesce.as_secs_f64() * 1e6,
            sleeps,
            timer_arms,
            rests,
            spinless_windows,
            duration_s: self.started.elapsed().as_secs_f64(),
            cpu_s: cpu.as_secs_f64(),
            thread_cpu,
            stopped_by_signal: by_signal,
            errors,
        }
    }
}

fn write_json(file: File, report: &EmulatorReport) -> io::Result<()> {
    let mut out = BufWriter::new(file);
    serde_json::to_writer_pretty(&mut out, report)?;
    out.write_all(b"\n")?;
    out.flush()
}

impl Drop for EmulatorHandle {
    fn drop(&mut self) {
        // Never panic in drop: a panicked thread's payload is dropped with its handle.
        if self.threads.is_empty() {
            return;
        }
        self.shared.request_stop();
        if std::thread::panicking() {
            return;
        }
        let _ = self.finish(false);
    }
}
