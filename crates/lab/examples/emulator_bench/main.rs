//! Measures the TUN emulator on this machine (run as root; used by `scripts/bench-emulator`).
//!
//! ```text
//! emulator_bench delay      [--delays 1,5,25,100] [--secs 5] [--interval-us 1000] [--no-veth]
//! emulator_bench throughput [--delays-ms 0,25] [--secs 10] [--cc cubic]
//! emulator_bench rate       [--rates 10,30,100,300] [--secs 10] [--delay-ms 5] [--cc cubic]
//! common: [--spin-us 50] [--wake ppoll|timerfd] [--threads single|per] [--cpu N] [--no-fifo]
//!         [--batch N] [--max-busy-us N (0: never rest)] [--rest-us N] [--log-dir DIR]
//!         [--json (full emulator reports on stderr)]
//! ```
//!
//! - `delay`: open-loop 64-byte TCP echo through the emulator with `d` ms each way; prints
//!   RTT − 2d (p50/p99/max) beside the plain RTT over a veth pair, and the emulator's lateness.
//! - `throughput`: one iperf3 flow through an unshaped (10 Gbit/s) path with `d` ms each way,
//!   `tcp_rmem`/`tcp_wmem` sized for 2 Gbit/s over the round trip.
//! - `rate`: one iperf3 flow through `r` Mbit/s; goodput / (r × 1448/1500).
//!
//! Every namespace is uniquely named and removed on exit, also on Ctrl-C.

mod iperf;
mod probe;

use std::time::Duration;

use tcptail_emu::{DirectionSpec, PathSpec, QueueLimit, QueueSpec};
use tcptail_lab::emulator::{Emulator, EmulatorOptions, EmulatorReport, Threads, Wake};
use tcptail_netns::{Cleanup, NetSysctl, Topology, ensure_root, signal};
use tcptail_units::{BitRate, ByteSize};

type Res<T> = Result<T, String>;

struct Args {
    cmd: String,
    list: Vec<u64>,
    secs: u32,
    delay_ms: u64,
    interval_us: u64,
    json: bool,
    veth: bool,
    cc: String,
    options: EmulatorOptions,
}

fn parse() -> Res<Args> {
    let mut it = std::env::args().skip(1);
    let cmd = it.next().ok_or("usage: emulator_bench delay|throughput|rate [options]")?;
    let mut a = Args {
        list: match cmd.as_str() {
            "delay" => vec![1, 5, 25, 100],
            "throughput" => vec![0, 25],
            "rate" => vec![10, 30, 100, 300],
            _ => Vec::new(),
        },
        secs: if cmd == "delay" { 5 } else { 10 },
        delay_ms: if cmd == "rate" { 5 } else { 0 },
        interval_us: 1000,
        json: false,
        veth: true,
        cc: "cubic".to_owned(),
        options: EmulatorOptions::default(),
        cmd,
    };
    while let Some(flag) = it.next() {
        let mut val = || it.next().ok_or(format!("{flag} needs a value"));
        let num = |s: String| s.parse::<u64>().map_err(|e| format!("{s}: {e}"));
        match flag.as_str() {
            "--delays" | "--rates" | "--delays-ms" => {
                a.list = val()?.split(',').map(|s| num(s.to_owned())).collect::<Res<_>>()?;
            }
            "--secs" => a.secs = num(val()?)? as u32,
            "--delay-ms" => a.delay_ms = num(val()?)?,
            "--interval-us" => a.interval_us = num(val()?)?,
            "--spin-us" => a.options.spin = Duration::from_micros(num(val()?)?),
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
            "--cc" => a.cc = val()?,
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
                    "single" => Threads::Single,
                    "per" => Threads::PerDirection,
                    other => return Err(format!("--threads {other}: single or per")),
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
        .sysctl(NetSysctl::TcpRmem, mem.clone())
        .sysctl(NetSysctl::TcpWmem, mem)
        .build(&cleanup)
        .map_err(|e| e.to_string())?;
    let tun = topo.take_tun().ok_or("no TUN pair")?;
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

/// p50, p99, max of round trips in milliseconds, each minus `minus_ms`.
fn quantiles(rtts: &[Duration], minus_ms: f64) -> [f64; 3] {
    let mut v: Vec<f64> = rtts.iter().map(|r| r.as_secs_f64() * 1e3 - minus_ms).collect();
    [0.5, 0.99, 1.0].map(|q| probe::quantile_ms(&mut v, q))
}

fn delay(a: &Args) -> Res<()> {
    let secs = Duration::from_secs(a.secs.into());
    let interval = Duration::from_micros(a.interval_us);
    let warmup = Duration::from_millis(500);
    let veth = if a.veth {
        let cleanup = Cleanup::new();
        let veth =
            Topology::veth_pair("client", "server").build(&cleanup).map_err(|e| e.to_string())?;
        let base = probe::round_trips(veth.client(), veth.server(), interval, secs, warmup)?;
        Some(quantiles(&base, 0.0))
    } else {
        None
    };
    println!(
        "64-byte TCP echo every {} µs for {} s; error = RTT - 2 x one-way delay (ms); \
         target p50 <= 0.150, p99 <= 0.500",
        a.interval_us, a.secs
    );
    if let Some([p50, p99, max]) = veth {
        println!("plain veth pair, RTT (ms): p50 {p50:.3}  p99 {p99:.3}  max {max:.3}");
    }
    println!("one-way | error p50 | error p99 | error max | target | lateness p50/p99/max (ms)");
    for &d in &a.list {
        let one_way = Duration::from_millis(d);
        let spec = path(BitRate(10_000_000_000), one_way, 10_000_000);
        let (rtts, report) = through_emulator(spec, a, 16 << 20, |topo| {
            // Slow start needs a few round trips to open the window for the probe's rate.
            let warmup = warmup.max(one_way * 20);
            probe::round_trips(topo.client(), topo.server(), interval, secs, warmup)
        })?;
        let [p50, p99, max] = quantiles(&rtts, 2.0 * one_way.as_secs_f64() * 1e3);
        println!(
            "{d:4} ms | {p50:9.3} | {p99:9.3} | {max:9.3} | {:6} | {}",
            mark(p50 <= 0.150 && p99 <= 0.500),
            lateness(&report)
        );
    }
    Ok(())
}

fn throughput(a: &Args) -> Res<()> {
    println!(
        "one iperf3 flow ({}), unshaped 10 Gbit/s path, {} s after 2 s omitted; \
         target >= 1.5 Gbit/s",
        a.cc, a.secs
    );
    println!("one-way | goodput (Gbit/s) | tcp_rmem/wmem max | lateness p50/p99/max (ms)");
    for &d in &a.list {
        let one_way = Duration::from_millis(d);
        let spec = path(BitRate(10_000_000_000), one_way, 64 << 20);
        // Enough window for 2 Gbit/s over the round trip, at least the default 6 MB.
        let bdp = (2e9 / 8.0 * (2.0 * one_way.as_secs_f64() + 0.001)) as u64;
        let buffers = (2 * bdp).max(6 << 20);
        let (bps, report) =
            through_emulator(spec, a, buffers, |topo| iperf::goodput(topo, a.secs, 2, &a.cc))?;
        println!(
            "{d:4} ms | {:9.3} {:6} | {buffers:>17} | {}",
            bps / 1e9,
            mark(bps >= 1.5e9),
            lateness(&report)
        );
    }
    Ok(())
}

fn rate(a: &Args) -> Res<()> {
    let one_way = Duration::from_millis(a.delay_ms);
    println!(
        "one iperf3 flow ({}), {} ms each way, drop-tail 2 x BDP (>= 100 packets), {} s after \
         2 s omitted; ratio = goodput / (rate x 1448/1500); target within 1 %",
        a.cc, a.delay_ms, a.secs
    );
    println!(
        "rate (Mbit/s) | goodput (Mbit/s) | ratio            | queue p50/p99 (ms) | drops | \
         lateness p50/p99/max (ms)"
    );
    for &r in &a.list {
        let rate = BitRate(r * 1_000_000);
        let bdp = (rate.0 as f64 / 8.0 * 2.0 * one_way.as_secs_f64()) as u64;
        let spec = path(rate, one_way, (2 * bdp).max(100 * 1500));
        let buffers = (8 * bdp).max(6 << 20);
        let (bps, report) =
            through_emulator(spec, a, buffers, |topo| iperf::goodput(topo, a.secs, 2, &a.cc))?;
        let ratio = bps / (rate.0 as f64 * 1448.0 / 1500.0);
        let up = &report.up.stats;
        println!(
            "{r:13} | {:16.3} | {ratio:.4} {:+.2} % {:4} | {:7.2} / {:7.2} | {:5} | {}",
            bps / 1e6,
            (ratio - 1.0) * 100.0,
            mark((ratio - 1.0).abs() <= 0.01),
            up.queue_delay_ms.p50,
            up.queue_delay_ms.p99,
            up.drops.queue_full.packets,
            lateness(&report)
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
            "rate" => rate(&a),
            other => Err(format!("unknown command {other}")),
        }
    });
    if let Err(e) = result {
        eprintln!("emulator_bench: {e}");
        std::process::exit(1);
    }
}
