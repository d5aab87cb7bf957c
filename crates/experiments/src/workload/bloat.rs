//! The `bloat` workload: several bulk flows fill a bottleneck queue while a separate probe
//! connection measures the round-trip time a small request sees under that load (the slides'
//! "low queue delay, despite bloated buffers", seed 004).
//!
//! The probe is open loop: every `probe_interval` the client writes a `probe_size`-byte
//! request stamped with its send time on this process's monotonic clock; the server echoes it;
//! the client's reader computes the latency from that stamp when the echo is read. A slow reply
//! therefore never delays the next probe, and the latency includes everything a request waits
//! for: the bottleneck queue behind the bulk data, losses and their retransmission. Probes sent
//! during the warm-up are not counted; after `duration` the probe stops sending and waits (with
//! the bulk flows still running) up to 3 s for outstanding replies, so a multi-second queue
//! does not hide its own tail. Replies still missing then are counted in
//! `probe_unanswered_count`.
//!
//! | key | values | default |
//! |---|---|---|
//! | `cc` | the bulk flows' congestion control: `cubic`, `bbr`, `reno` | `cubic` |
//! | `flows` | bulk connections (1..=64) | 8 |
//! | `duration` | bulk time per round, warm-up included | `20s` |
//! | `warmup` | time excluded from every figure | `3s` |
//! | `probe_interval` | time between probe requests | `100ms` |
//! | `probe_size` | request and reply size (16B..=1400B) | `64B` |
//! | path keys | `path = "emulated"` (required), `rate`, `rtt`, `buffer`, `queue`, `loss`, `sysctl` | |
//!
//! Metrics: `probe_p50_ms`, `probe_p95_ms`, `probe_p99_ms` (over the probes answered within
//! 3 s after the run; when none of the window's probes was, lower bounds: each probe's wait
//! until the reader stopped, with a note), `probe_count`, `probe_unanswered_count`,
//! `goodput_mbps` (all bulk flows: the bytes their receivers read over the window after the
//! warm-up, divided by its length, never above the link's rate: see
//! [`flows::goodput_between`]), `link_pct`, `retrans_pct`, `rwnd_limited_pct` (as in `bulk`),
//! `flow_rtt_p50_ms` (the bulk senders' own smoothed RTT), `queue_p50_ms` (that RTT less the
//! path's base RTT: the queueing delay the flows keep, the slides' y axis) and `floor_ms` (the
//! queue BBR cannot go below: [`BBR_MIN_CWND_PKTS`] packets per flow, at the bottleneck
//! rate), `cwnd_p50_pkts` (the bulk senders' congestion windows, median over the flows and the
//! window's 10 ms samples) and, for BBR, `bbr_min_rtt_p50_ms` (BBR's own min-RTT estimate, the
//! same median: when it holds the queue, BBR's model takes the queue for the path). Series:
//! `probe_ms` (CDF), `probe_rtt_ms` (each probe's latency against its send
//! time), `goodput_mbps`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tcptail_report::Series;

use crate::params::{ParamError, Params};
use crate::path::PathPlan;
use crate::round::{Measurement, RoundContext, RunError};
use crate::workload::flows::{self, BulkFlows};
use crate::workload::{VariantPlan, Workload};

/// The `bloat` engine.
pub struct Bloat;

/// How long the probe waits for outstanding replies after the last request.
const PROBE_GRACE: Duration = Duration::from_secs(3);

/// The congestion window BBR never goes below, in packets (`bbr_cwnd_min_target` in Linux's
/// tcp_bbr.c): with `flows` flows at least this many full packets each are in flight, and on a
/// path whose BDP is smaller than that, they wait in the bottleneck queue.
pub const BBR_MIN_CWND_PKTS: u64 = 4;

/// Bytes of one full packet on the lab's paths (MTU 1500).
const PACKET_BYTES: u64 = 1500;

/// The queueing delay BBR's minimum window keeps at `rate` with `flows` flows, in ms:
/// `flows x 4 x 1500 B` at the bottleneck rate, less the path's BDP (`rtt`), never negative
/// (8 flows at 128 kbit/s, 40 ms: 48 KB, 3.0 s less 0.04 s).
pub fn bbr_floor_ms(flows: usize, rate_bps: f64, rtt: Duration) -> f64 {
    let bytes = flows as f64 * (BBR_MIN_CWND_PKTS * PACKET_BYTES) as f64;
    (bytes * 8.0 / rate_bps * 1e3 - rtt.as_secs_f64() * 1e3).max(0.0)
}

#[derive(Debug)]
struct Plan {
    path: PathPlan,
    cc: String,
    flows: usize,
    duration: Duration,
    warmup: Duration,
    probe_interval: Duration,
    probe_size: usize,
}

impl Workload for Bloat {
    fn name(&self) -> &'static str {
        "bloat"
    }

    fn plan(&self, params: &Params) -> Result<Box<dyn VariantPlan>, ParamError> {
        let cc = flows::cc_param(params)?;
        let flows = params.uint("flows", 64)?.unwrap_or(8);
        if flows == 0 {
            return Err(ParamError::new("flows", "at least one bulk flow"));
        }
        let duration = params.duration("duration")?.unwrap_or(Duration::from_secs(20));
        let warmup = params.duration("warmup")?.unwrap_or(Duration::from_secs(3));
        let probe_interval =
            params.duration("probe_interval")?.unwrap_or(Duration::from_millis(100));
        let probe_size = params.bytes("probe_size")?.unwrap_or(64);
        if !(16..=1400).contains(&probe_size) {
            return Err(ParamError::new("probe_size", "between 16B and 1400B"));
        }
        if probe_interval < Duration::from_millis(1) {
            return Err(ParamError::new("probe_interval", "at least 1ms"));
        }
        if warmup + probe_interval * 10 > duration {
            return Err(ParamError::new(
                "duration",
                "must leave room for at least 10 probes after the warm-up",
            ));
        }
        let path = PathPlan::emulated_from_params(params, "bloat")?;
        Ok(Box::new(Plan {
            path,
            cc,
            flows: flows as usize,
            duration,
            warmup,
            probe_interval,
            probe_size: probe_size as usize,
        }))
    }
}

/// One answered probe: when it was sent (s since the flows started) and its latency (ms).
type ProbeRecord = [f64; 2];

/// The probe connection's threads.
struct Probe {
    stop: Arc<AtomicBool>,
    answered: Arc<AtomicU64>,
    sockets: [TcpStream; 2],
    writer: JoinHandle<std::io::Result<u64>>,
    reader: JoinHandle<std::io::Result<Vec<ProbeRecord>>>,
    echo: JoinHandle<std::io::Result<()>>,
}

impl Probe {
    fn start(
        client: TcpStream,
        server: TcpStream,
        epoch: Instant,
        interval: Duration,
        size: usize,
    ) -> Result<Probe, RunError> {
        let clone = |s: &TcpStream| s.try_clone().map_err(|e| RunError::io("clone probe", e));
        let stop = Arc::new(AtomicBool::new(false));
        let sockets = [clone(&client)?, clone(&server)?];
        let mut writer_sock = clone(&client)?;
        let writer_stop = stop.clone();
        let writer = std::thread::spawn(move || -> std::io::Result<u64> {
            let mut buf = vec![0u8; size];
            let mut sent = 0u64;
            while !writer_stop.load(Ordering::Relaxed) {
                let due = interval * u32::try_from(sent).unwrap_or(u32::MAX);
                let now = epoch.elapsed();
                if due > now {
                    std::thread::sleep(due - now);
                }
                let stamp = u64::try_from(epoch.elapsed().as_nanos()).unwrap_or(u64::MAX);
                buf[..8].copy_from_slice(&stamp.to_le_bytes());
                writer_sock.write_all(&buf)?;
                sent += 1;
            }
            Ok(sent)
        });
        let mut echo_sock = server;
        let echo = std::thread::spawn(move || -> std::io::Result<()> {
            let mut buf = vec![0u8; size];
            loop {
                match echo_sock.read_exact(&mut buf) {
                    Ok(()) => echo_sock.write_all(&buf)?,
                    // EOF or the shutdown at the end of the round.
                    Err(_) => return Ok(()),
                }
            }
        });
        let mut reader_sock = client;
        let answered = Arc::new(AtomicU64::new(0));
        let counter = answered.clone();
        let reader = std::thread::spawn(move || -> std::io::Result<Vec<ProbeRecord>> {
            let mut buf = vec![0u8; size];
            let mut out = Vec::new();
            while reader_sock.read_exact(&mut buf).is_ok() {
                let now = epoch.elapsed().as_secs_f64();
                let sent = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes")) as f64 / 1e9;
                out.push([sent, (now - sent) * 1e3]);
                counter.fetch_add(1, Ordering::Relaxed);
            }
            Ok(out)
        });
        Ok(Probe { stop, answered, sockets, writer, reader, echo })
    }

    /// Stops sending new probes.
    fn stop_sending(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }

    /// Waits until every probe sent was answered or `grace` passed, then closes everything;
    /// returns how many probes were sent and the answered ones.
    fn finish(self, grace: Duration) -> Result<(u64, Vec<ProbeRecord>), RunError> {
        let sent = self
            .writer
            .join()
            .map_err(|_| RunError::panicked("probe writer", "panicked"))?
            .map_err(|e| RunError::io("probe writer", e))?;
        let deadline = Instant::now() + grace;
        while self.answered.load(Ordering::Relaxed) < sent && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        for s in &self.sockets {
            let _ = s.shutdown(std::net::Shutdown::Both);
        }
        let records = self
            .reader
            .join()
            .map_err(|_| RunError::panicked("probe reader", "panicked"))?
            .map_err(|e| RunError::io("probe reader", e))?;
        let _ = self.echo.join();
        Ok((sent, records))
    }
}

/// The send times, in s from the round's start and in order, of the probes (`sent` of them,
/// one every `interval`) that fall within the window `[from, to]` s.
fn window_send_times(sent: u64, interval: Duration, from: f64, to: f64) -> Vec<f64> {
    (0..sent).map(|i| i as f64 * interval.as_secs_f64()).filter(|&t| t >= from && t <= to).collect()
}

/// The waits, in ms and sorted, of probes sent at `sends` (in order) that got no reply by
/// `deadline` s: each waited at least from its send to the deadline, so their percentiles
/// are lower bounds.
fn unanswered_waits_ms(sends: &[f64], deadline: f64) -> Vec<f64> {
    sends.iter().rev().map(|t| (deadline - t) * 1e3).collect()
}

/// Every sender's BBR min-RTT estimate now, ms (the sampler's `extra`, beside the windows
/// [`flows::Sample`] holds); `None` before BBR's first RTT sample.
fn bbr_min_rtts_ms(flows: &BulkFlows) -> Result<Vec<Option<f64>>, RunError> {
    flows
        .senders()
        .iter()
        .map(|sender| {
            let bbr = tcptail_sock::sys::info::bbr_info(sender.as_fd())
                .map_err(|e| RunError::io("read TCP_CC_INFO", e))?;
            Ok(bbr.and_then(|b| b.min_rtt()).map(|d| d.as_secs_f64() * 1e3))
        })
        .collect()
}

/// The median of `values`; NaN when there is none.
fn median(values: impl Iterator<Item = f64>) -> f64 {
    let mut all: Vec<f64> = values.collect();
    all.sort_by(f64::total_cmp);
    flows::percentile(&all, 0.5)
}

impl VariantPlan for Plan {
    fn metrics(&self) -> Vec<String> {
        let mut names = vec!["probe_p50_ms", "probe_p95_ms", "probe_p99_ms", "probe_count"];
        names.extend(["probe_unanswered_count", "goodput_mbps", "retrans_pct", "flow_rtt_p50_ms"]);
        names.extend(["queue_p50_ms", "rwnd_limited_pct", "cwnd_p50_pkts"]);
        if self.cc == "bbr" {
            names.push("bbr_min_rtt_p50_ms");
        }
        if self.path.rate().is_some() {
            names.extend(["link_pct", "floor_ms"]);
        }
        names.into_iter().map(str::to_owned).collect()
    }

    fn run(&self, ctx: &RoundContext<'_>) -> Result<Measurement, RunError> {
        let bbr = self.cc == "bbr";
        let ((samples, (sent, records)), lateness) = self.path.round(ctx, |live| {
            let listener = flows::listen(live)?;
            // The probe uses CUBIC whatever the bulk flows use: its requests are far below
            // one window, so its own congestion control never limits them.
            let (pc, ps) = flows::connect(live, &listener, Some("cubic"), true)?;
            let bulk = BulkFlows::start(live, self.flows, Some(&self.cc), None)?;
            let mut probe = Probe::start(pc, ps, bulk.start, self.probe_interval, self.probe_size)?;
            let samples = flows::sample_with(
                &bulk,
                self.duration,
                Duration::from_millis(10),
                ctx.stop_requested,
                ctx.progress,
                // Only BBR has an estimate to read: no TCP_CC_INFO call for the others.
                |f| if bbr { bbr_min_rtts_ms(f) } else { Ok(Vec::new()) },
            );
            probe.stop_sending();
            let probed = probe.finish(PROBE_GRACE);
            let stopped = bulk.stop();
            let samples = samples?;
            let probed = probed?;
            stopped?;
            Ok::<_, RunError>((samples, probed))
        })?;
        let w = self.warmup.as_secs_f64();
        let end = self.duration.as_secs_f64();
        let mut latencies: Vec<f64> =
            records.iter().filter(|r| r[0] >= w && r[0] <= end).map(|r| r[1]).collect();
        latencies.sort_by(f64::total_cmp);
        let window_sends = window_send_times(sent, self.probe_interval, w, end);
        let counted_sent = window_sends.len();
        let rate_bps = self.path.rate().map(|r| r.0 as f64);
        let (samples, min_rtts): (Vec<_>, Vec<_>) = samples.into_iter().unzip();
        let in_window = |t: f64| t >= w && t <= end;
        let cwnd_p50 = median(
            samples.iter().filter(|s| in_window(s.t)).flat_map(|s| &s.cwnds).map(|&c| f64::from(c)),
        );
        let s = flows::summarise(&samples, self.warmup, Duration::from_millis(100), rate_bps);
        let goodput = s.goodput_mbps;
        let mut m = Measurement { lateness, ..Measurement::default() };
        let answered = latencies.len();
        if answered == 0 && counted_sent > 0 {
            // Every probe of the window was still waiting when the reader stopped (one lost
            // probe segment holds the rest behind its retransmission timeout, seconds behind
            // a deep buffer): the round is the claim's worst case, not a failed one.
            let deadline = end + PROBE_GRACE.as_secs_f64();
            latencies = unanswered_waits_ms(&window_sends, deadline);
            m.notes.push(format!(
                "none of the window's {counted_sent} probes got a reply within {} s after the \
                 run: probe_p50/p95/p99_ms are lower bounds, each probe's wait until the reader \
                 stopped",
                PROBE_GRACE.as_secs()
            ));
        }
        m.metric("probe_p50_ms", flows::percentile(&latencies, 0.50))
            .metric("probe_p95_ms", flows::percentile(&latencies, 0.95))
            .metric("probe_p99_ms", flows::percentile(&latencies, 0.99))
            .metric("probe_count", answered as f64)
            .metric("probe_unanswered_count", counted_sent.saturating_sub(answered) as f64)
            .metric("goodput_mbps", goodput)
            .metric("retrans_pct", s.retrans_pct)
            .metric("flow_rtt_p50_ms", s.rtt_p50_ms)
            .metric("rwnd_limited_pct", s.rwnd_limited_pct)
            .metric("queue_p50_ms", (s.rtt_p50_ms - self.path.rtt().as_secs_f64() * 1e3).max(0.0))
            .metric("cwnd_p50_pkts", cwnd_p50);
        if bbr {
            let estimates = samples.iter().zip(&min_rtts).filter(|(s, _)| in_window(s.t));
            m.metric(
                "bbr_min_rtt_p50_ms",
                median(estimates.flat_map(|(_, r)| r.iter().flatten().copied())),
            );
        }
        if let Some(rate) = rate_bps {
            m.metric("link_pct", 100.0 * goodput * 1e6 / rate);
            m.metric("floor_ms", bbr_floor_ms(self.flows, rate, self.path.rtt()));
        }
        m.notes.extend(s.goodput_note);
        if counted_sent > answered && answered > 0 {
            m.notes.push(format!(
                "{} of {counted_sent} probes got no reply within {} s after the run: the \
                 percentiles leave out their (even longer) latency",
                counted_sent - answered,
                PROBE_GRACE.as_secs()
            ));
        }
        m.series.push(Series::time(
            "probe_rtt_ms",
            records.iter().filter(|r| r[0] >= w && r[0] <= end).copied().collect(),
        ));
        m.series.push(Series::cdf("probe_ms", &mut latencies));
        m.series.push(Series::time("goodput_mbps", s.goodput_series));
        Ok(m)
    }

    fn planned(&self) -> Duration {
        // Probe replies still queued at the end add up to PROBE_GRACE (3 s) to this.
        self.duration
    }

    fn describe(&self) -> String {
        format!(
            "{}; {} {} bulk flows, probe of {} B every {} ms; {:.0} s per round of which {:.0} s \
             warm-up",
            self.path.describe(),
            self.flows,
            self.cc,
            self.probe_size,
            self.probe_interval.as_millis(),
            self.duration.as_secs_f64(),
            self.warmup.as_secs_f64()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{self, test_support};

    fn params(pairs: &[(&str, toml::Value)]) -> Params {
        test_support::emulated("10mbit", "40ms", pairs)
    }

    /// A window none of whose probes was answered: each waited from its send to the
    /// deadline, so the waits run from the deadline less the window's end to the deadline
    /// less its start, and only the window's probes count.
    #[test]
    fn unanswered_probes_wait_at_least_until_the_deadline() {
        // Probes every 500 ms from 0; window [8, 11] s; the reader stopped at 14 s.
        let sends = window_send_times(30, Duration::from_millis(500), 8.0, 11.0);
        let waits = unanswered_waits_ms(&sends, 14.0);
        assert_eq!(waits.len(), 7, "{waits:?}"); // 8.0, 8.5, ..., 11.0
        assert!((waits[0] - 3000.0).abs() < 1e-6 && (waits[6] - 6000.0).abs() < 1e-6, "{waits:?}");
        assert!(waits.windows(2).all(|w| w[0] <= w[1]), "sorted: {waits:?}");
        assert!(window_send_times(10, Duration::from_millis(500), 8.0, 11.0).is_empty());
    }

    /// The slides' condition: 8 flows x 4 packets = 48 KB, 3 s at 128 kbit/s, less the 40 ms
    /// the path itself holds; none on a path whose BDP holds them.
    #[test]
    fn bbr_floor_is_the_minimum_window_at_the_rate() {
        let floor = bbr_floor_ms(8, 128e3, Duration::from_millis(40));
        assert!((floor - (3000.0 - 40.0)).abs() < 1e-6, "{floor}");
        let scaled = bbr_floor_ms(8, 128e3 * 40.0, Duration::from_millis(1));
        assert!((scaled - (75.0 - 1.0)).abs() < 1e-6, "{scaled}");
        assert_eq!(bbr_floor_ms(8, 10e9, Duration::from_millis(40)), 0.0);
    }

    #[test]
    fn bad_parameters_are_named() {
        let err = |p: Params| workload::plan(&Bloat, &p).err().expect("refused");
        assert_eq!(err(params(&[("cc", "vegas".into())])).key, "cc");
        assert_eq!(err(params(&[("flows", 0.into())])).key, "flows");
        assert_eq!(err(params(&[("probe_size", "8B".into())])).key, "probe_size");
        assert_eq!(err(params(&[("probe_interval", "0ms".into())])).key, "probe_interval");
        assert_eq!(
            err(params(&[("duration", "2s".into()), ("warmup", "1500ms".into())])).key,
            "duration"
        );
        assert_eq!(err(params(&[("queue", "red".into())])).key, "queue");
        assert_eq!(err(params(&[("probe", true.into())])).key, "probe");
        assert_eq!(err(Params::from_pairs([("flows", toml::Value::from(8))])).key, "path");
        assert!(workload::plan(&Bloat, &params(&[("queue", "codel".into())])).is_ok());
    }

    /// One short round through a deep drop-tail buffer: the probe sees the queue (needs root,
    /// /dev/net/tun and iproute2: fails with the reason otherwise). The flows' goodput is
    /// what the link delivered over the same samples, less headers (within 1 % and the data
    /// held at the window's ends: behind a loss the receivers read nothing for up to a round
    /// trip, 40 ms base + the 300 ms buffer, plus the emulator's worst lateness and 5 ms of
    /// read lag), and the link ran at its 10 Mbit/s while busy, not a floor this host may miss.
    #[test]
    fn probes_see_the_queue() {
        let plan = workload::plan(
            &Bloat,
            &params(&[
                ("cc", "cubic".into()),
                ("flows", 4.into()),
                ("buffer", "300ms".into()),
                ("duration", "4s".into()),
                ("warmup", "2s".into()),
            ]),
        )
        .unwrap();
        let round = test_support::run_logged(plan.as_ref(), 5);
        let m = &round.m;
        let get = |k: &str| m.metrics[k];
        assert!(get("probe_count") >= 15.0, "{m:?}");
        // Base RTT 40 ms plus a queue that CUBIC keeps largely full.
        assert!(get("probe_p50_ms") > 100.0 && get("probe_p50_ms") < 400.0, "{m:?}");
        let goodput = get("goodput_mbps");
        assert!(goodput > 0.0 && goodput < 10.2, "{m:?}");
        let busiest = round.busiest_mbps(100.0);
        assert!((busiest - 10.0).abs() <= 0.24, "the link at its busiest: {busiest:.3} Mbit/s");
        let payload = 10.0 * 1448.0 / 1500.0;
        let link = round.link_goodput_mbps(0.5, 1.0);
        let lateness = m.lateness.as_ref().expect("an emulated path reports its lateness");
        let slack = 0.01 * payload + 3.0 * payload * (0.345 + lateness.max_us / 1e6) / 2.0;
        eprintln!("goodput {goodput:.2}, the link delivered {link:.2} (slack {slack:.2})");
        assert!(link <= payload * 1.01, "the link delivered more than its rate: {link:.2}");
        assert!((goodput - link).abs() <= slack, "goodput {goodput:.2}, link {link:.2}: {m:?}");
        assert!(m.series.iter().any(|s| s.name == "probe_ms" && !s.points.is_empty()));
    }
}
