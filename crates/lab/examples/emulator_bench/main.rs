//! Measures the TUN emulator on this machine (run as root; used by `scripts/bench-emulator`).
//!
//! ```text
//! emulator_bench delay      [--delays 1,5,25,100] [--secs 5] [--interval-us 1000] [--no-veth]
//!                           [--probe-fifo]
//! emulator_bench throughput [--delays-ms 0,25] [--secs 10] [--cc cubic] [--no-veth]
//! emulator_bench longfat    [--rate-mbit 10000] [--rtt-ms 120] [--queue-mb 150] [--secs 20]
//!                           [--cc bbr] [--no-veth]
//! emulator_bench rate       [--rates 0.128,1,10,100,1000,10000] [--secs 10] [--delay-ms 5]
//!                           [--cc cubic]
//! common: [--tun offload|plain] [--spin-us 50] [--fixed-spin] [--coalesce-us 100]
//!         [--wake ppoll|timerfd] [--threads single|per-direction (or per)|split|pipeline]
//!         [--cpu N] [--no-fifo] [--batch N] [--max-busy-us N (0: never rest)] [--rest-us N]
//!         [--log-dir DIR] [--json (full emulator reports on stderr)]
//!         [--endpoints-fifo (iperf3 under `chrt -f 5`, veth's too)]
//!         [--steer (with --cpu N: the namespaces' receive processing on the other CPUs)]
//! ```
//!
//! - `delay`: open-loop 64-byte TCP echo through the emulator with `d` ms each way; prints
//!   RTT − 2d (p50/p99/max) and each leg's error (client to server, server to client) beside
//!   the same over a veth pair, and the emulator's lateness. `--probe-fifo` runs the probe's
//!   threads `SCHED_FIFO` (below the emulator), which takes the machine's other work out of
//!   their wake-ups: the difference between the two runs is the endpoints' scheduling, not
//!   the path's.
//! - `throughput`: one iperf3 flow through an unshaped path (a 100 Gbit/s link, so the
//!   emulator itself is the limit) with `d` ms each way,
//!   `tcp_rmem`/`tcp_wmem` sized for 10 Gbit/s over the round trip, beside the same flow over
//!   a plain veth pair (ratio); system calls per GB and segments per write from the report.
//! - `longfat`: seed 002's path (10 Gbit/s, 120 ms RTT, a 150 MB bottleneck buffer): one BBR
//!   flow's goodput and the release lateness, then where the time went (`where_time_goes`),
//!   per GB received, beside the same flow over a plain veth pair (no delay) in the same run:
//!   the machine's CPU by kind, each iperf3 process's CPU, wait for a CPU, system calls and
//!   context switches (`procfs`), each emulator thread's CPU and run-queue wait, and what
//!   the emulator thread was doing while its releases were late (the report's
//!   `lateness_causes`).
//! - `rate`: one iperf3 flow through `r` Mbit/s; goodput / (r × 1448/1500).
//!
//! A row that misses its target says why, from measurements of the same run, never from the
//! shortfall alone (`why_missed`): `unfaithful (lateness)` when the emulator's release
//! lateness p99 exceeded its bound; `unfaithful (reads: ...)` when the sending kernel dropped
//! packets before the emulator read them or an emulator thread ran 90 % of a CPU or more;
//! `sender-starved (not the emulator)` when the emulator was on time with CPU to spare, the
//! link's queue was not kept busy (the load offered to it below the rate, or the link idle in
//! some 100 ms bins) and the sending iperf3 waited for a CPU (its run-queue time in
//! `/proc/PID/task/*/schedstat`) 10 % or more of the time it could run; otherwise `cause not
//! measured`. The evidence follows the cause.
//!
//! `--endpoints-fifo` runs both iperf3 processes (the veth reference's too) `SCHED_FIFO` 5,
//! below the emulator: on a machine shared with other work, ordinary endpoints get only their
//! fair share of the CPUs and become the limit of every row; with it, the rows show what the
//! emulator and the endpoints can carry on these CPUs.
//!
//! `--cpu N --steer` pins the emulator to CPU `N` and steers the receive processing of both
//! TUN devices to the other CPUs (receive packet steering, `Netns::set_receive_cpus`):
//! without it, every TUN write runs the receiving namespace's TCP stack (and the wake-up of
//! its reader) on the emulator's own thread, a quarter of its CPU behind a 10 Gbit/s link.
//!
//! Every row prints the emulator's peak RSS (this process's `VmHWM`, reset before the row).
//! `--tun plain` opens the TUN devices without `IFF_VNET_HDR` (one MTU packet per system
//! call, the emulator before segmentation offload).
//!
//! Every namespace is uniquely named and removed on exit, also on Ctrl-C.

mod iperf;
mod probe;
mod procfs;

use std::time::Duration;

use tcptail_emu::{DirectionSpec, PathSpec, QueueLimit, QueueSpec};
use tcptail_lab::emulator::{Emulator, EmulatorOptions, EmulatorReport, Threads, Wake};
use tcptail_netns::{Cleanup, NetSysctl, Topology, TunMode, ensure_root, signal};
use tcptail_units::{BitRate, ByteSize};

type Res<T> = Result<T, String>;

/// The link rate of an "unshaped" path: far above what two vCPUs can forward, so the emulator
/// is the limit (a 10 Gbit/s link would cap goodput at 9.65 Gbit/s, below the target).
const UNSHAPED: BitRate = BitRate(100_000_000_000);

#[derive(Clone)]
struct Args {
    cmd: String,
    list: Vec<f64>,
    secs: u32,
    delay_ms: u64,
    rate_mbit: u64,
    rtt_ms: u64,
    queue_mb: u64,
    tun: TunMode,
    interval_us: u64,
    json: bool,
    veth: bool,
    probe_fifo: bool,
    endpoints_fifo: bool,
    cc: String,
    /// Steer the receive processing of both TUN devices (the namespaces' TCP stacks for the
    /// packets the emulator writes) to every CPU but the emulator's (`--cpu`).
    steer: bool,
    options: EmulatorOptions,
}

fn parse() -> Res<Args> {
    let mut it = std::env::args().skip(1);
    let cmd = it.next().ok_or("usage: emulator_bench delay|throughput|rate [options]")?;
    let mut a = Args {
        list: match cmd.as_str() {
            "delay" => vec![1.0, 5.0, 25.0, 100.0],
            "throughput" => vec![0.0, 25.0],
            "rate" => vec![0.128, 1.0, 10.0, 100.0, 1000.0, 10000.0],
            _ => Vec::new(),
        },
        secs: match cmd.as_str() {
            "delay" => 5,
            "longfat" => 20,
            _ => 10,
        },
        delay_ms: if cmd == "rate" { 5 } else { 0 },
        rate_mbit: 10_000,
        rtt_ms: 120,
        queue_mb: 150,
        tun: TunMode::Offload,
        interval_us: 1000,
        json: false,
        veth: true,
        probe_fifo: false,
        endpoints_fifo: false,
        cc: if cmd == "longfat" { "bbr" } else { "cubic" }.to_owned(),
        options: EmulatorOptions::default(),
        steer: false,
        cmd,
    };
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or(format!("{flag} needs a value"));
        let num = |s: String| s.parse::<u64>().map_err(|e| format!("{s}: {e}"));
        match flag.as_str() {
            "--delays" | "--rates" | "--delays-ms" => {
                let float = |s: &str| s.parse::<f64>().map_err(|e| format!("{s}: {e}"));
                a.list = val()?.split(',').map(float).collect::<Res<_>>()?;
            }
            "--rate-mbit" => a.rate_mbit = num(val()?)?,
            "--rtt-ms" => a.rtt_ms = num(val()?)?,
            "--queue-mb" => a.queue_mb = num(val()?)?,
            "--tun" => {
                a.tun = match val()?.as_str() {
                    "offload" => TunMode::Offload,
                    "plain" => TunMode::Plain,
                    other => return Err(format!("--tun {other}: offload or plain")),
                }
            }
            "--secs" => a.secs = num(val()?)? as u32,
            "--delay-ms" => a.delay_ms = num(val()?)?,
            "--interval-us" => a.interval_us = num(val()?)?,
            "--spin-us" => a.options.spin = Duration::from_micros(num(val()?)?),
            "--fixed-spin" => a.options.adaptive_spin = false,
            "--coalesce-us" => a.options.coalesce = Duration::from_micros(num(val()?)?),
            "--batch" => a.options.batch = num(val()?)? as usize,
            "--cpu" => a.options.cpu = Some(num(val()?)? as usize),
            "--no-fifo" => a.options.fifo_priority = None,
            "--max-busy-us" => {
                a.options.max_busy = match num(val()?)? {
                    0 => None,
                    us => Some(Duration::from_micros(us)),
                }
            }
            "--rest-us" => a.options.rest = Duration::from_micros(num(val()?)?),
            "--json" => a.json = true,
            "--no-veth" => a.veth = false,
            "--probe-fifo" => a.probe_fifo = true,
            "--endpoints-fifo" => a.endpoints_fifo = true,
            "--cc" => a.cc = val()?,
            "--steer" => a.steer = true,
            "--log-dir" => a.options.mahimahi_log_dir = Some(val()?.into()),
            "--wake" => {
                a.options.wake = match val()?.as_str() {
                    "ppoll" => Wake::Ppoll,
                    "timerfd" => Wake::Timerfd,
                    other => return Err(format!("--wake {other}: ppoll or timerfd")),
                }
            }
            "--threads" => {
                a.options.threads = match val()?.as_str() {
                    "per" => Threads::PerDirection,
                    other => other.parse().map_err(|e| format!("--threads: {e}"))?,
                }
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    Ok(a)
}

/// Both directions: `rate`, `delay` one way, a drop-tail queue of `queue` bytes.
fn path(rate: BitRate, delay: Duration, queue: u64) -> PathSpec {
    let queue = QueueSpec::drop_tail(QueueLimit::Bytes(ByteSize(queue)));
    PathSpec::symmetric(DirectionSpec::constant(rate, delay, queue))
}

/// Builds a TUN topology with `buffers` as tcp_rmem/tcp_wmem max, runs `f` through the
/// emulator, and returns `f`'s result and the emulator's report.
fn through_emulator<R>(
    spec: PathSpec,
    a: &Args,
    buffers: u64,
    f: impl FnOnce(&mut Topology) -> Res<R>,
) -> Res<(R, EmulatorReport)> {
    let cleanup = Cleanup::new();
    let mem = format!("4096 131072 {buffers}");
    let mut topo = Topology::tun_pair("client", "server")
        .tun_mode(a.tun)
        .sysctl(NetSysctl::TcpRmem, mem.clone())
        .sysctl(NetSysctl::TcpWmem, mem)
        .build(&cleanup)
        .map_err(|e| e.to_string())?;
    let tun = topo.take_tun().ok_or("no TUN pair")?;
    if a.steer {
        let pinned = a.options.cpu.ok_or("--steer needs --cpu N (the emulator's CPU)")?;
        let others: Vec<usize> = (0..cpus() as usize).filter(|&c| c != pinned).collect();
        for (ns, dev) in [(topo.client(), &tun.client), (topo.server(), &tun.server)] {
            ns.set_receive_cpus(dev.ifname(), &others).map_err(|e| format!("--steer: {e}"))?;
        }
    }
    reset_peak_rss();
    let emu = Emulator::start(tun, spec, a.options.clone()).map_err(|e| e.to_string())?;
    let token = cleanup.defer("emulator", {
        let stopper = emu.stopper();
        move || stopper.stop()
    });
    let result = f(&mut topo);
    let report = emu.stop();
    cleanup.cancel(token);
    drop(topo);
    print_report(a, &report);
    Ok((result?, report))
}

/// Resets this process's `VmHWM` to its current RSS (`/proc/self/clear_refs`, value 5), so
/// the next [`peak_rss_mb`] is the peak of one emulator run. Best effort: without it the
/// peak is the process's.
fn reset_peak_rss() {
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// This process's peak resident set (`VmHWM`) in MB; the emulator is most of it.
fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kb = tcptail_netns::procfs::status_field(&status, "VmHWM");
    kb.map_or(f64::NAN, |kb| kb as f64 / 1e3)
}

/// Where the time goes, per GB forwarded in the up direction: system calls (reads, empty
/// reads and writes of both directions, waits, timer arms and rests), segments per write,
/// the emulator threads' CPU (seconds per GB, share of one CPU, and each thread's seconds per
/// GB by role) and the endpoints' CPU (iperf3 sender / receiver, % of one CPU).
fn costs(r: &EmulatorReport, flow: &iperf::Flow) -> String {
    let gb = (r.up.forwarded.bytes as f64 / 1e9).max(1e-9);
    let (reads, writes) =
        ((r.up.reads + r.down.reads) as f64, (r.up.writes + r.down.writes) as f64);
    // A batch of reads ends with one that finds nothing: a system call as well.
    let empty = (r.up.empty_reads + r.down.empty_reads) as f64;
    // Every ppoll (a sleep), timerfd_settime and rest (nanosleep) is a system call too.
    let (polls, arms, rests) = (r.sleeps as f64, r.timer_arms as f64, r.rests as f64);
    let calls = reads + empty + writes + polls + arms + rests;
    let per_write = r.up.forwarded.packets as f64 / r.up.writes.max(1) as f64;
    // The kernel copies each byte into the emulator (read) and out of it (write).
    let copied = (r.up.copied_bytes + r.down.copied_bytes) as f64;
    let copies = 2.0 + copied / (r.up.forwarded.bytes + r.down.forwarded.bytes).max(1) as f64;
    let threads: Vec<String> = r
        .thread_cpu
        .iter()
        .map(|t| match t.run_queue_wait_s {
            Some(w) => format!(
                "{} {:.2}, waited for a CPU {:.0} % of its runnable time",
                t.role,
                t.cpu_s / gb,
                100.0 * w / (w + t.cpu_s).max(1e-9)
            ),
            None => format!("{} {:.2}", t.role, t.cpu_s / gb),
        })
        .collect();
    format!(
        "{:.0} calls/GB (read {:.0} + {:.0} empty, write {:.0}, ppoll {:.0}, timerfd_settime \
         {:.0}, rest {:.0}), {per_write:.1} seg/write, {copies:.3} copies/byte, emulator {:.2} \
         CPU-s/GB ({:.0} % of a CPU; per thread: {}), iperf3 {:.0} / {:.0} %",
        calls / gb,
        reads / gb,
        empty / gb,
        writes / gb,
        polls / gb,
        arms / gb,
        rests / gb,
        r.cpu_s / gb,
        100.0 * r.cpu_s / r.duration_s.max(1e-9),
        threads.join(", "),
        flow.cpu_percent.0,
        flow.cpu_percent.1
    )
}

fn lateness(r: &EmulatorReport) -> String {
    format!(
        "{:.3} / {:.3} / {:.3}{}",
        r.lateness.p50_us / 1e3,
        r.lateness.p99_us / 1e3,
        r.lateness.max_us / 1e3,
        if r.lateness_flag.is_some() { " FLAGGED" } else { "" }
    )
}

fn mark(ok: bool) -> &'static str {
    if ok { "ok" } else { "MISS" }
}

/// p50, p99, max of durations in milliseconds, each minus `minus_ms`.
fn quantiles(durations: impl Iterator<Item = Duration>, minus_ms: f64) -> [f64; 3] {
    let mut v: Vec<f64> = durations.map(|r| r.as_secs_f64() * 1e3 - minus_ms).collect();
    [0.5, 0.99, 1.0].map(|q| probe::quantile_ms(&mut v, q))
}

/// `p50 / p99` of each leg, minus `one_way_ms`: "up | down".
fn legs(trips: &[probe::Trip], one_way_ms: f64) -> String {
    let [up50, up99, _] = quantiles(trips.iter().map(|t| t.up), one_way_ms);
    let [down50, down99, _] = quantiles(trips.iter().map(|t| t.down), one_way_ms);
    format!("{up50:.3} / {up99:.3} | {down50:.3} / {down99:.3}")
}

fn delay(a: &Args) -> Res<()> {
    let secs = Duration::from_secs(a.secs.into());
    let interval = Duration::from_micros(a.interval_us);
    let warmup = Duration::from_millis(500);
    let fifo = a.probe_fifo;
    let veth = if a.veth {
        let cleanup = Cleanup::new();
        let veth =
            Topology::veth_pair("client", "server").build(&cleanup).map_err(|e| e.to_string())?;
        let base = probe::round_trips(veth.client(), veth.server(), interval, secs, warmup, fifo)?;
        Some(base)
    } else {
        None
    };
    println!(
        "64-byte TCP echo every {} µs for {} s, probe threads {}; error = RTT - 2 x one-way \
         delay (ms), each leg's error = its time - the one-way delay; target p50 <= 0.100, \
         p99 <= 0.300",
        a.interval_us,
        a.secs,
        if fifo { "SCHED_FIFO 5 (--probe-fifo)" } else { "ordinary (SCHED_OTHER)" }
    );
    if let Some(trips) = &veth {
        let [p50, p99, max] = quantiles(trips.iter().map(|t| t.rtt), 0.0);
        println!(
            "plain veth pair, RTT (ms): p50 {p50:.3}  p99 {p99:.3}  max {max:.3}; legs p50 / p99 \
             up | down: {}",
            legs(trips, 0.0)
        );
    }
    println!(
        "one-way | error p50 | error p99 | error max | target | up leg p50 / p99 | down leg p50 \
         / p99 | lateness p50/p99/max (ms)"
    );
    for &d in &a.list {
        let one_way = Duration::from_secs_f64(d / 1e3);
        let spec = path(BitRate(10_000_000_000), one_way, 10_000_000);
        let (trips, report) = through_emulator(spec, a, 16 << 20, |topo| {
            // Slow start needs a few round trips to open the window for the probe's rate.
            let warmup = warmup.max(one_way * 20);
            probe::round_trips(topo.client(), topo.server(), interval, secs, warmup, fifo)
        })?;
        let one_way_ms = one_way.as_secs_f64() * 1e3;
        let [p50, p99, max] = quantiles(trips.iter().map(|t| t.rtt), 2.0 * one_way_ms);
        println!(
            "{d:4} ms | {p50:9.3} | {p99:9.3} | {max:9.3} | {:6} | {} | {} | RSS {:.0} MB",
            mark(p50 <= 0.100 && p99 <= 0.300),
            legs(&trips, one_way_ms),
            lateness(&report),
            peak_rss_mb()
        );
    }
    Ok(())
}

/// Goodput of one iperf3 flow over a plain veth pair with `buffers` as tcp_rmem/wmem max.
fn veth_goodput(a: &Args, buffers: u64) -> Res<f64> {
    veth_flow(a, buffers, a.secs, 2).map(|f| f.bps)
}

/// One iperf3 flow over a plain veth pair with `buffers` as tcp_rmem/wmem max, `secs` after
/// `omit`.
fn veth_flow(a: &Args, buffers: u64, secs: u32, omit: u32) -> Res<iperf::Flow> {
    let cleanup = Cleanup::new();
    let mem = format!("4096 131072 {buffers}");
    let mut topo = Topology::veth_pair("client", "server")
        .sysctl(NetSysctl::TcpRmem, mem.clone())
        .sysctl(NetSysctl::TcpWmem, mem)
        .build(&cleanup)
        .map_err(|e| e.to_string())?;
    iperf::flow(&mut topo, secs, omit, &a.cc, a.endpoints_fifo)
}

fn throughput(a: &Args) -> Res<()> {
    println!(
        "one iperf3 flow ({}), unshaped path (a {} Gbit/s link), {} s after 2 s omitted; \
         target >= 10 Gbit/s and >= 0.4 x veth",
        a.cc,
        UNSHAPED.0 / 1_000_000_000,
        a.secs
    );
    let veth = if a.veth { Some(veth_goodput(a, 64 << 20)?) } else { None };
    if let Some(v) = veth {
        println!("plain veth pair, no delay: {:.3} Gbit/s", v / 1e9);
    }
    println!(
        "one-way | goodput (Gbit/s) | x veth | tcp_rmem/wmem max | lateness p50/p99/max (ms) | \
         costs | peak RSS | why a miss"
    );
    for &d in &a.list {
        let one_way = Duration::from_secs_f64(d / 1e3);
        let spec = path(UNSHAPED, one_way, 64 << 20);
        // Enough window for 10 Gbit/s over the round trip, at least 64 MB.
        let bdp = (10e9 / 8.0 * (2.0 * one_way.as_secs_f64() + 0.001)) as u64;
        let buffers = (2 * bdp).max(64 << 20);
        let (flow, report) = through_emulator(spec, a, buffers, |topo| {
            iperf::flow(topo, a.secs, 2, &a.cc, a.endpoints_fifo)
        })?;
        let bps = flow.bps;
        let ratio = veth.map_or(f64::NAN, |v| bps / v);
        let ok = bps >= 10e9 && (veth.is_none() || ratio >= 0.4);
        println!(
            "{d:4} ms | {:9.3} {:6} | {ratio:6.3} | {buffers:>17} | {} | {} | {:.0} MB | {}",
            bps / 1e9,
            mark(ok),
            lateness(&report),
            costs(&report, &flow),
            peak_rss_mb(),
            verdict(ok, &report, &flow, None, UNSHAPED.0 as f64)
        );
    }
    Ok(())
}

fn longfat(a: &Args) -> Res<()> {
    let rate = BitRate(a.rate_mbit * 1_000_000);
    let one_way = Duration::from_millis(a.rtt_ms) / 2;
    let queue = a.queue_mb * 1_000_000;
    let bdp = (rate.0 as f64 / 8.0 * 2.0 * one_way.as_secs_f64()) as u64;
    // The sender keeps BDP + queue unacknowledged; the receiver advertises as much.
    let buffers = 3 * (bdp + queue);
    println!(
        "one iperf3 flow ({}) through {} Mbit/s, {} ms RTT, a {} MB drop-tail buffer, {} s \
         after 5 s omitted; target goodput >= 0.9 x rate, lateness p99 <= 1 ms; {} thread \
         layout, {}",
        a.cc,
        a.rate_mbit,
        a.rtt_ms,
        a.queue_mb,
        a.secs,
        a.options.threads,
        placement(a)
    );
    let spec = path(rate, one_way, queue);
    let mut options = a.options.clone();
    options.lateness_bound = options.lateness_bound.max(Duration::from_millis(1));
    let b = Args { options, ..a.clone() };
    // The reference: the same flow (same buffers, congestion control, duration) over a plain
    // veth pair, no delay: what carrying the bytes costs these CPUs without the path.
    let veth = if a.veth { Some(veth_flow(a, buffers, a.secs, 5)?) } else { None };
    let (flow, report) = through_emulator(spec, &b, buffers, |topo| {
        iperf::flow(topo, a.secs, 5, &a.cc, a.endpoints_fifo)
    })?;
    let bps = flow.bps;
    let ok = bps >= 0.9 * rate.0 as f64 && report.lateness.p99_us <= 1000.0;
    let up = &report.up.stats;
    let w = window(&report, 5.0, rate);
    println!(
        "goodput {:.3} Gbit/s ({:.3} x rate) {} | lateness p50/p99/max {} ms | queue p50/p99 \
         {:.1} / {:.1} ms | drops {} | {} | peak RSS {:.0} MB | {}",
        bps / 1e9,
        bps / rate.0 as f64,
        mark(ok),
        lateness(&report),
        up.queue_delay_ms.p50,
        up.queue_delay_ms.p99,
        up.drops.queue_full.packets,
        costs(&report, &flow),
        peak_rss_mb(),
        verdict(ok, &report, &flow, w.as_ref(), rate.0 as f64)
    );
    where_time_goes(veth.as_ref(), &flow, &report);
    Ok(())
}

/// `x / y` as a ratio column, `-` when either is missing.
fn ratio(x: f64, y: f64) -> String {
    if x.is_finite() && y.is_finite() && y != 0.0 { format!("{:.2}", x / y) } else { "-".into() }
}

/// One endpoint's cost: CPU-s per GB received (user / system), its share of a CPU, how long
/// it waited for one, system calls and context switches per GB.
fn endpoint_cost(p: Option<&procfs::Process>, gb: f64) -> (String, f64) {
    let Some(p) = p else { return ("(not readable)".to_owned(), f64::NAN) };
    let t = p.total();
    let cpu = t.user_s + t.system_s;
    let text = format!(
        "{:.3} CPU-s/GB (user {:.3}, system {:.3}; ran {:.0} % of a CPU), waited for a CPU \
        {:.0} % of its runnable time, {:.0}k read + {:.0}k write calls/GB, {:.1}k voluntary + \
        {:.1}k involuntary context switches/GB, {} thread(s)",
        cpu / gb,
        t.user_s / gb,
        t.system_s / gb,
        100.0 * t.run_s / p.wall_s.max(1e-9),
        100.0 * t.wait_share(),
        t.reads as f64 / gb / 1e3,
        t.writes as f64 / gb / 1e3,
        t.voluntary as f64 / gb / 1e3,
        t.involuntary as f64 / gb / 1e3,
        p.threads.len()
    );
    (text, cpu / gb)
}

/// The machine's CPU time per GB received, by kind, and its idle, stolen and pressure shares.
fn machine_cost(f: &iperf::Flow, gb: f64) -> (String, f64) {
    let m = &f.machine;
    let wall = f.wall_s.max(1e-9);
    let text = format!(
        "{:.3} CPU-s/GB (user {:.3}, system {:.3}, softirq {:.3}, irq {:.3}); idle {:.0} % and \
        stolen {:.1} % of the {} CPUs, some task waiting for a CPU {:.0} % of the time",
        m.busy_s() / gb,
        m.user_s / gb,
        m.system_s / gb,
        m.softirq_s / gb,
        m.irq_s / gb,
        100.0 * m.idle_s / (wall * cpus()),
        100.0 * m.steal_s / (wall * cpus()),
        cpus(),
        100.0 * m.pressure_s / wall
    );
    (text, m.busy_s() / gb)
}

/// Where the emulator and the namespaces' receive processing ran.
fn placement(a: &Args) -> String {
    let emulator = match a.options.cpu {
        Some(c) => format!("emulator pinned to CPU {c}"),
        None => "emulator not pinned".to_owned(),
    };
    let receive = match (a.steer, a.options.cpu) {
        (true, Some(c)) => {
            format!("receive processing steered to the {} other CPU(s)", cpus() - 1.0)
                + &format!(" (all but {c})")
        }
        _ => "receive processing in the emulator's TUN writes".to_owned(),
    };
    format!("{emulator}, {receive}, {} CPUs", cpus())
}

fn cpus() -> f64 {
    std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64)
}

/// Prints where the time of seed 002's flow went, per GB received over the flow's whole life
/// (omitted seconds included), beside the veth reference of the same run, with ratios: the
/// machine's CPU by kind, each iperf3 process, each emulator thread (CPU, run-queue wait,
/// system calls) and what the emulator thread was doing while its releases were late.
fn where_time_goes(veth: Option<&iperf::Flow>, flow: &iperf::Flow, r: &EmulatorReport) {
    let gb = |f: &iperf::Flow| (f.received_bytes / 1e9).max(1e-9);
    let emu_gb = gb(flow);
    println!(
        "# where the time goes, per GB received over the flow's life ({:.1} GB in {:.1} s), \
        beside a plain veth pair in the same run (same buffers and flow, no delay); ratio = \
        emulator path / veth",
        emu_gb, flow.wall_s
    );
    let row = |what: &str, v: Option<(String, f64)>, e: (String, f64)| {
        let (vt, vx) = v.unwrap_or_else(|| ("-".to_owned(), f64::NAN));
        println!("#   {what}: veth {vt} | emulator path {} | ratio {}", e.0, ratio(e.1, vx));
    };
    let veth_gb = veth.map(gb);
    row(
        "goodput",
        veth.map(|v| (format!("{:.3} Gbit/s", v.bps / 1e9), v.bps)),
        (format!("{:.3} Gbit/s", flow.bps / 1e9), flow.bps),
    );
    row("machine", veth.zip(veth_gb).map(|(v, g)| machine_cost(v, g)), machine_cost(flow, emu_gb));
    row(
        "iperf3 sender",
        veth.zip(veth_gb).map(|(v, g)| endpoint_cost(v.sender.as_ref(), g)),
        endpoint_cost(flow.sender.as_ref(), emu_gb),
    );
    row(
        "iperf3 receiver",
        veth.zip(veth_gb).map(|(v, g)| endpoint_cost(v.receiver.as_ref(), g)),
        endpoint_cost(flow.receiver.as_ref(), emu_gb),
    );
    for t in &r.thread_cpu {
        let wait = t.run_queue_wait_s.unwrap_or(f64::NAN);
        println!(
            "#   emulator thread {} ({}): {:.3} CPU-s/GB, ran {:.0} % of a CPU, waited for a CPU \
                {:.0} % of its runnable time ({:.2} s)",
            t.name,
            t.role,
            t.cpu_s / emu_gb,
            100.0 * t.cpu_s / r.duration_s.max(1e-9),
            100.0 * wait / (wait + t.cpu_s).max(1e-9),
            wait
        );
    }
    let c = &r.lateness_causes;
    println!(
        "#   emulator lateness p50/p99/max {} ms; {} segments later than {:.1} ms ({:.1} % of \
        {}, on average {:.1} ms late); while they were late the thread was {}",
        lateness(r),
        c.late_segments,
        c.late_after_ms,
        100.0 * c.late_segments as f64 / r.lateness.count.max(1) as f64,
        r.lateness.count,
        1e3 * c.lateness_s / c.late_segments.max(1) as f64,
        c.describe()
    );
}

/// The up direction's link over the saturated middle of the run (from `skip_s` after the
/// first departure to 1 s before the last), from the emulator's throughput bins (wire bytes).
struct Window {
    /// The link's own departure rate, bits per second.
    out_bps: f64,
    /// The load offered to its queue (arrivals, drops included), bits per second.
    in_bps: f64,
    /// Share of the bins in which the link sent less than 99 % of `rate`: its queue ran empty
    /// for part of the bin (a constant-rate link is busy whenever its queue holds a packet).
    idle_bins: f64,
}

fn window(report: &EmulatorReport, skip_s: f64, rate: BitRate) -> Option<Window> {
    let t = &report.up.stats.throughput;
    let bin_s = t.bin_ms / 1e3;
    let first = t.out_mbps.iter().position(|&m| m > 0.0).unwrap_or(0);
    let last = t.out_mbps.iter().rposition(|&m| m > 0.0).unwrap_or(0);
    let from = first + (skip_s / bin_s).ceil() as usize;
    let to = last.saturating_sub((1.0 / bin_s).ceil() as usize);
    if to <= from || t.in_mbps.len() < to {
        return None;
    }
    let mean = |bins: &[f64]| bins.iter().sum::<f64>() / bins.len() as f64 * 1e6;
    let out = &t.out_mbps[from..to];
    let short = out.iter().filter(|&&m| m * 1e6 < 0.99 * rate.0 as f64).count();
    Some(Window {
        out_bps: mean(out),
        in_bps: mean(&t.in_mbps[from..to]),
        idle_bins: short as f64 / out.len() as f64,
    })
}

/// An emulator thread that ran at least this share of a CPU had no time to spare: it may
/// have read its device late, which lateness (measured from the read) does not show.
const SATURATED_THREAD: f64 = 0.9;
/// A sender that waited for a CPU at least this share of the time it was runnable was held
/// back by the machine, not by the path.
const STARVED_WAIT: f64 = 0.1;

/// Why a row missed its target, decided from what the run measured, never from the
/// shortfall alone: the emulator's release lateness against its bound, the packets the
/// sending kernel dropped before the emulator read them, its busiest thread's CPU, the load
/// offered to the link's queue (`window`, `None` for an unshaped link, whose queue never
/// limits) and how long the sender (iperf3) waited for a CPU.
///
/// - `unfaithful (lateness)`: releases were written later than the bound (p99);
/// - `unfaithful (reads)`: the emulator fell behind its reads (kernel drops at the device, or
///   a thread without CPU to spare);
/// - `sender-starved (not the emulator)`: on time, keeping up with its reads, the link's
///   queue not kept busy (offered below the rate, or the link idle in some bins), and the
///   sender waiting for a CPU at least [`STARVED_WAIT`] of the time it could run;
/// - `cause not measured`: none of these; the evidence is printed either way.
fn why_missed(
    r: &EmulatorReport,
    flow: &iperf::Flow,
    window: Option<&Window>,
    rate: f64,
) -> String {
    let drops =
        r.up.kernel_drops_before_read.unwrap_or(0) + r.down.kernel_drops_before_read.unwrap_or(0);
    let busiest = r.thread_cpu.iter().map(|t| t.cpu_s).fold(0.0, f64::max) / r.duration_s.max(1e-9);
    let mut evidence = vec![
        format!(
            "lateness p99 {:.3} ms (bound {:.3})",
            r.lateness.p99_us / 1e3,
            r.lateness_bound_ms
        ),
        format!("{drops} kernel drops before read"),
        format!("busiest emulator thread {:.0} % of a CPU", 100.0 * busiest),
    ];
    let queue_idle = match window {
        Some(w) => {
            evidence.push(format!(
                "offered {:.1} % of the rate, link idle (queue empty) in {:.0} % of its {} ms bins, queue p50 {:.2} ms",
                100.0 * w.in_bps / rate,
                100.0 * w.idle_bins,
                r.up.stats.throughput.bin_ms,
                r.up.stats.queue_delay_ms.p50
            ));
            w.in_bps < 0.99 * rate || w.idle_bins >= 0.1
        }
        None => true,
    };
    let starved = match flow.sender_sched {
        Some(s) => {
            evidence.push(format!(
                "iperf3 sender waited for a CPU {:.0} % of its runnable time (ran {:.0} % of a CPU)",
                100.0 * s.wait_share(),
                100.0 * s.cpu_share()
            ));
            s.wait_share() >= STARVED_WAIT
        }
        None => {
            evidence.push("the sender's run-queue wait could not be read".to_owned());
            false
        }
    };
    let c = &r.lateness_causes;
    if c.late_segments > 0 {
        evidence.push(format!("while releases were late the thread was {}", c.describe()));
    }
    let cause = if r.lateness_flag.is_some() {
        if c.on_cpu >= 0.5 {
            "unfaithful (lateness: the emulator thread's own work outran its CPU)"
        } else if c.waiting_for_cpu >= 0.5 {
            "unfaithful (lateness: the emulator thread waited for a CPU)"
        } else {
            "unfaithful (lateness)"
        }
    } else if drops > 0 || busiest >= SATURATED_THREAD {
        "unfaithful (reads: the emulator fell behind its device)"
    } else if queue_idle && starved {
        "sender-starved (not the emulator)"
    } else {
        "cause not measured"
    };
    format!("{cause}: {}", evidence.join(", "))
}

/// The last column of a row: `-` when it met its target, else [`why_missed`].
fn verdict(
    ok: bool,
    r: &EmulatorReport,
    flow: &iperf::Flow,
    window: Option<&Window>,
    rate: f64,
) -> String {
    if ok { "-".to_owned() } else { why_missed(r, flow, window, rate) }
}

fn rate(a: &Args) -> Res<()> {
    let one_way = Duration::from_millis(a.delay_ms);
    println!(
        "one iperf3 flow ({}), {} ms each way, drop-tail 2 x BDP (>= 100 packets or 1 s), {} s \
         (30 s below 1 Mbit/s) after 2 s omitted; target within 1 %",
        a.cc, a.delay_ms, a.secs
    );
    println!(
        "# link = the emulator's own departure counters (wire bytes, saturated middle of the \
         run) / rate; steady = receiver's whole 1 s intervals / (rate x 1448/1500); iperf3 = \
         end.sum_received / (rate x 1448/1500), which also counts the bytes still queued when \
         the sender stops (at 128 kbit/s the queue holds ~1 s: ~+3 % over 30 s)"
    );
    println!(
        "rate (Mbit/s) | link ratio       | steady  | iperf3  | queue p50/p99 (ms) | drops | \
         lateness p50/p99/max (ms) | emulator CPU | peak RSS | why a miss (decided \
         from lateness, kernel drops before read, emulator CPU, offered load and the sender's \
         wait for a CPU)"
    );
    for &r in &a.list {
        let rate = BitRate((r * 1e6) as u64);
        let bdp = (rate.0 as f64 / 8.0 * 2.0 * one_way.as_secs_f64()) as u64;
        // At least 100 packets of queue, but no more than 1 s of it (10 packets at least):
        // at 128 kbit/s 100 packets would be 9 s of standing queue.
        let floor = (100 * 1500).min(rate.0 / 8).max(10 * 1500);
        let spec = path(rate, one_way, (2 * bdp).max(floor));
        // A slow link delivers few packets in `secs`: measure long enough that one packet
        // is well under 1 % of the total.
        let secs = if rate.0 < 1_000_000 { a.secs.max(30) } else { a.secs };
        let buffers = (8 * bdp).max(6 << 20);
        let (flow, report) = through_emulator(spec, a, buffers, |topo| {
            iperf::flow(topo, secs, 2, &a.cc, a.endpoints_fifo)
        })?;
        let payload = rate.0 as f64 * 1448.0 / 1500.0;
        let w = window(&report, 3.0, rate);
        let link = w.as_ref().map_or(f64::NAN, |w| w.out_bps) / rate.0 as f64;
        let ok = (link - 1.0).abs() <= 0.01;
        let why = match &w {
            None => "no saturated middle to measure: run longer (--secs)".to_owned(),
            Some(_) if link > 1.01 => {
                "the link ran faster than its rate: the model's own error".to_owned()
            }
            Some(w) => verdict(ok, &report, &flow, Some(w), rate.0 as f64),
        };
        let up = &report.up.stats;
        println!(
            "{r:13} | {link:.4} {:+.2} % {:4} | {:.4}  | {:.4}  | {:7.2} / {:7.2} | {:5} | {} | \
             {:.0} % | {:.0} MB | {why}",
            (link - 1.0) * 100.0,
            mark(ok),
            flow.steady_bps / payload,
            flow.bps / payload,
            up.queue_delay_ms.p50,
            up.queue_delay_ms.p99,
            up.drops.queue_full.packets,
            lateness(&report),
            100.0 * report.cpu_s / report.duration_s.max(1e-9),
            peak_rss_mb()
        );
    }
    Ok(())
}

/// With `--json`, the full report (without the per-bin throughput series) on stderr.
fn print_report(a: &Args, report: &EmulatorReport) {
    if a.json {
        let mut v = serde_json::to_value(report).expect("reports serialise");
        for dir in ["up", "down"] {
            v[dir]["stats"]["throughput"] = serde_json::Value::Null;
        }
        eprintln!("{v}");
    }
}

fn main() {
    let result = parse().and_then(|a| {
        ensure_root().map_err(|e| e.to_string())?;
        signal::install(signal::DEFAULT_GRACE).map_err(|e| e.to_string())?;
        match a.cmd.as_str() {
            "delay" => delay(&a),
            "throughput" => throughput(&a),
            "longfat" => longfat(&a),
            "rate" => rate(&a),
            other => Err(format!("unknown command {other}")),
        }
    });
    if let Err(e) = result {
        eprintln!("emulator_bench: {e}");
        std::process::exit(1);
    }
}
