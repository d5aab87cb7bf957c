//! One request/response round with the benchmark engine (`tcptail bench`) on a lab path,
//! shared by the `request-response` and `tuning-ladder` engines.
//!
//! A round builds its path, starts a bench [`Server`] whose listening socket lives in the
//! server namespace, optionally starts competing bulk flows, runs the bench client from a
//! thread inside the client namespace (its connection threads inherit the namespace), then
//! stops everything and removes the path — on success, error or interruption alike (the
//! [`LivePath`] and the server stop themselves when dropped).
//!
//! Every round keeps every sample (for the CDF) and takes a `TCP_INFO` snapshot around each
//! request (for BBR phase attribution) whatever the congestion control, so variants pay the
//! same measurement cost; in open loop the snapshot is taken in the pacer's spin window, in
//! closed loop outside the timed window, so neither lands inside a measured latency.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tcptail_bench::attribution::AttributedSample;
use tcptail_bench::client::run_raw;
use tcptail_bench::config::{BenchConfig, Engine, Load, StopAfter};
use tcptail_bench::run::{RawRun, RunControl};
use tcptail_bench::server::{Server, ServerConfig};
use tcptail_bench::stats::LatencySummary;
use tcptail_report::Series;
use tcptail_sock::{BbrPhase, Profile};

use super::placement::{Placement, cpus_phrase};
use crate::path::{LivePath, PathPlan};
use crate::round::{Measurement, RoundContext, RunError};
use crate::workload::flows::BulkFlows;

/// How long competing flows run before the measurement starts, so that they are past slow
/// start (and BBR past STARTUP/DRAIN) when the first request is timed.
pub const COMPETING_LEAD: Duration = Duration::from_millis(500);

/// Everything one round needs, checked.
#[derive(Debug, Clone)]
pub struct RoundSpec {
    /// The path to build for the round.
    pub path: PathPlan,
    /// The socket profile applied at both ends of the measured connection.
    pub profile: Profile,
    /// Closed or open loop.
    pub load: Load,
    /// Length of the measured part.
    pub duration: Duration,
    /// Unmeasured warm-up before it.
    pub warmup: Duration,
    /// Request frame length, bytes.
    pub request_len: u32,
    /// Response frame length, bytes.
    pub reply_len: u32,
    /// Where client and server run.
    pub placement: Placement,
    /// Busy-poll non-blocking sockets at both ends.
    pub spin: bool,
    /// Competing bulk flows (client → server, the profile's congestion control).
    pub competing_flows: usize,
    /// The bench's I/O engine at both ends (the io_uring engine takes no kernel snapshots:
    /// attribution is off with it).
    pub engine: Engine,
}

impl RoundSpec {
    /// The bench client configuration for a server at `server`.
    fn bench_config(&self, server: SocketAddr, seed: u64) -> BenchConfig {
        let mut c = BenchConfig::new(server, self.profile.clone());
        c.request_len = self.request_len;
        c.reply_len = self.reply_len;
        c.load = self.load;
        c.stop = StopAfter::Duration(self.duration);
        c.warmup = StopAfter::Duration(self.warmup);
        c.client_cpu = self.placement.client_cpu();
        c.server_cpu = self.placement.server_cpu();
        c.spin = self.spin;
        c.attribute = self.engine == Engine::Default;
        c.keep_samples = true;
        c.engine = self.engine;
        c.seed = seed;
        c
    }

    /// The metrics every round produces: latency from the actual send, throughput and
    /// retransmissions; open loop adds `sched_*` and `send_late_*`; competing flows add
    /// `competing_mbps`; a BBR socket adds the phase shares (`slow_*`, `all_*`).
    pub fn metrics(&self) -> Vec<String> {
        let summary = ["min", "mean", "p50", "p95", "p99", "p999", "max"];
        let mut names: Vec<String> = summary.iter().map(|p| format!("{p}_us")).collect();
        names.extend(["samples_count", "tx_per_s", "retrans_count"].map(str::to_owned));
        if matches!(self.load, Load::Open { .. }) {
            names.extend(summary.iter().map(|p| format!("sched_{p}_us")));
            names.extend(["send_late_p99_us", "send_late_max_us"].map(str::to_owned));
        }
        if self.competing_flows > 0 {
            names.push("competing_mbps".to_owned());
        }
        if self.profile.congestion.as_deref() == Some("bbr") {
            for phase in PHASES {
                let key = phase.as_str().replace('-', "_");
                names.push(format!("slow_{key}_pct"));
                names.push(format!("all_{key}_pct"));
            }
            names
                .extend(["slow_probe_bw_pct", "all_probe_bw_pct", "slow_count"].map(str::to_owned));
        }
        names
    }

    /// Builds the path, runs one round on it, removes it and returns the measurement.
    pub fn measure(&self, ctx: &RoundContext<'_>) -> Result<Measurement, RunError> {
        let (mut m, lateness) = self.path.round(ctx, |live| self.run_on(live, ctx))?;
        m.lateness = lateness;
        Ok(m)
    }

    fn run_on(&self, live: &LivePath, ctx: &RoundContext<'_>) -> Result<Measurement, RunError> {
        let listen = SocketAddr::from((live.server_addr(), 0));
        // The experiment's own server in its own namespace: it grants the spinning, pinning
        // and congestion controls the experiment asks for.
        let config = ServerConfig { engine: self.engine, ..ServerConfig::new(listen) };
        let server = Server::spawn_trusting_in(live.server(), config)
            .map_err(|e| RunError::failed("bench server: bind", e))?;
        // The flows share the path's bottleneck with the requests; their bytes received while
        // the measurement runs become `competing_mbps`, which shows it really was saturated.
        let competing = match self.competing_flows {
            0 => None,
            n => {
                let cc = self.profile.congestion.as_deref();
                let flows = BulkFlows::start(live, n, cc, self.placement.spare_cpu())?;
                std::thread::sleep(COMPETING_LEAD);
                let mark = (Instant::now(), flows.received());
                Some((flows, mark))
            }
        };
        let config = self.bench_config(server.addr(), ctx.seed);
        let control = RunControl::new();
        let total = (self.warmup + self.duration).as_secs_f64();
        let done = AtomicBool::new(false);
        let raw = std::thread::scope(|s| {
            // Turns a Ctrl-C into a prompt stop of the bench loops, and reports progress.
            s.spawn(|| {
                let start = Instant::now();
                while !done.load(Ordering::Relaxed) {
                    if (ctx.stop_requested)() {
                        control.stop();
                    }
                    (ctx.progress)((start.elapsed().as_secs_f64() / total).min(1.0));
                    std::thread::sleep(Duration::from_millis(50));
                }
            });
            let r = live.client().run(|| run_raw(&config, &control));
            done.store(true, Ordering::Relaxed);
            r
        })?
        .map_err(|e| RunError::failed("bench client", e))?;
        let competing_mbps = match competing {
            None => None,
            Some((flows, (since, bytes))) => {
                let delta = flows.received().saturating_sub(bytes);
                let mbps = delta as f64 * 8.0 / since.elapsed().as_secs_f64() / 1e6;
                flows.stop()?;
                Some(mbps)
            }
        };
        server.stop();
        if (ctx.stop_requested)() {
            return Err(RunError::Interrupted);
        }
        let mut m = self.summarise(&raw)?;
        if let Some(mbps) = competing_mbps {
            m.metric("competing_mbps", mbps);
        }
        Ok(m)
    }

    /// Turns the raw run into metrics, series and notes.
    fn summarise(&self, raw: &RawRun) -> Result<Measurement, RunError> {
        let open = matches!(self.load, Load::Open { .. });
        // Primary latency: from the actual send. In open loop the latency from the scheduled
        // send adds the pacer's own lateness, which is the VM's timer behaviour and the same
        // for every congestion control; it is kept as `sched_*`.
        let primary = if open { &raw.service } else { &raw.latency };
        let s = primary.summary().ok_or(RunError::NothingCompleted {
            what: "request-response round",
            detail: "no request completed in the round",
        })?;
        let mut m = Measurement::default();
        put_summary(&mut m, "", &s);
        let secs = raw.elapsed.as_secs_f64();
        m.metric("tx_per_s", if secs > 0.0 { raw.requests as f64 / secs } else { 0.0 });
        // A request never sent (its connection gave up) has no service time.
        let mut samples: Vec<f64> =
            raw.samples.iter().filter_map(|r| r.service_ns).map(|ns| ns as f64 / 1e3).collect();
        m.series.push(Series::cdf("latency_us", &mut samples));
        if open {
            if let Some(sched) = raw.latency.summary() {
                put_summary(&mut m, "sched_", &sched);
            }
            if let Some(late) = raw.send_lateness.summary() {
                m.metric("send_late_p99_us", late.p99).metric("send_late_max_us", late.max);
            }
            let mut sched: Vec<f64> =
                raw.samples.iter().map(|r| r.latency_ns as f64 / 1e3).collect();
            m.series.push(Series::cdf("sched_latency_us", &mut sched));
        }
        if let (Some(first), Some(last)) = (raw.attributed.first(), raw.attributed.last()) {
            let retrans = last.after.total_retrans.saturating_sub(first.before.total_retrans);
            m.metric("retrans_count", f64::from(retrans));
        }
        let conn = raw.connections.first();
        let client_cc = conn.and_then(|c| c.congestion.clone());
        if client_cc.as_deref() == Some("bbr") {
            bbr_phases(&mut m, &raw.attributed);
        }
        // Where each end really ran, and what the sockets really had.
        let seen: Vec<usize> = conn.map(|c| c.client_cpus_seen.clone()).unwrap_or_default();
        let server_cpu = conn.and_then(|c| c.welcome.server_cpu);
        m.notes.push(format!(
            "placement: {}; client seen on {}, server on {}",
            self.placement.describe(),
            cpus_phrase(&seen),
            server_cpu.map_or_else(|| "an unknown CPU".to_owned(), |c| format!("CPU {c}")),
        ));
        if let Some(c) = conn {
            if let Some(reason) = &c.welcome.pinned {
                m.notes.push(format!("server pinning failed: {reason}"));
            }
            m.notes.push(format!(
                "congestion control read back: client {}, server {}",
                client_cc.as_deref().unwrap_or("unknown"),
                c.welcome.congestion.as_deref().unwrap_or("unknown"),
            ));
            for (side, report) in [("client", &c.client_apply), ("server", &c.welcome.apply)] {
                for p in report.problems() {
                    m.notes.push(format!(
                        "{side} {}: asked {}, got {} ({:?})",
                        p.option,
                        p.requested,
                        p.actual.as_deref().unwrap_or("?"),
                        p.outcome
                    ));
                }
                if let Some(bp) = report.option("SO_BUSY_POLL") {
                    m.notes.push(format!(
                        "{side} SO_BUSY_POLL asked {} and read back {}",
                        bp.requested,
                        bp.actual.as_deref().unwrap_or("?")
                    ));
                }
            }
        }
        Ok(m)
    }
}

/// `p50_us`, `p95_us`, ... from a summary, with a prefix (`sched_`); a percentile the sample
/// count cannot support is recorded as not measurable instead.
pub(crate) fn put_summary(m: &mut Measurement, prefix: &str, s: &LatencySummary) {
    for (name, v) in [("min", s.min), ("mean", s.mean), ("max", s.max)] {
        m.metric(&format!("{prefix}{name}_us"), v);
    }
    let samples = usize::try_from(s.count).unwrap_or(usize::MAX);
    for (name, q, v) in
        [("p50", 0.5, s.p50), ("p95", 0.95, s.p95), ("p99", 0.99, s.p99), ("p999", 0.999, s.p999)]
    {
        m.percentile(&format!("{prefix}{name}_us"), q, samples, v);
    }
    if prefix.is_empty() {
        m.metric("samples_count", s.count as f64);
    }
}

const PHASES: [BbrPhase; 7] = [
    BbrPhase::Startup,
    BbrPhase::Drain,
    BbrPhase::ProbeBwUp,
    BbrPhase::ProbeBwDown,
    BbrPhase::ProbeBwCruise,
    BbrPhase::ProbeRtt,
    BbrPhase::Unknown,
];

/// The BBR phase at send of the slow requests (above the round's p99 of the primary
/// latency) and of all requests: `slow_probe_bw_up_pct`, `all_probe_bw_up_pct`, ..., and
/// `slow_probe_bw_pct`/`all_probe_bw_pct` for the three PROBE_BW sub-phases together.
fn bbr_phases(m: &mut Measurement, samples: &[AttributedSample]) {
    let service = |s: &AttributedSample| s.latency_ns.saturating_sub(s.send_late_ns);
    let with_phase: Vec<(u64, BbrPhase)> =
        samples.iter().filter_map(|s| s.before.bbr_phase.map(|p| (service(s), p))).collect();
    if with_phase.is_empty() {
        m.notes.push("BBR socket, but TCP_CC_INFO gave no phase: no attribution".into());
        return;
    }
    let mut sorted: Vec<u64> = with_phase.iter().map(|(l, _)| *l).collect();
    sorted.sort_unstable();
    let threshold = sorted[((sorted.len() as f64 * 0.99) as usize).min(sorted.len() - 1)];
    let slow: Vec<BbrPhase> =
        with_phase.iter().filter(|(l, _)| *l > threshold).map(|(_, p)| *p).collect();
    let share = |set: &[BbrPhase], phase: BbrPhase| {
        if set.is_empty() {
            0.0
        } else {
            100.0 * set.iter().filter(|p| **p == phase).count() as f64 / set.len() as f64
        }
    };
    let all: Vec<BbrPhase> = with_phase.iter().map(|(_, p)| *p).collect();
    for phase in PHASES {
        let key = phase.as_str().replace('-', "_");
        m.metric(&format!("slow_{key}_pct"), share(&slow, phase));
        m.metric(&format!("all_{key}_pct"), share(&all, phase));
    }
    let probe_bw = [BbrPhase::ProbeBwUp, BbrPhase::ProbeBwDown, BbrPhase::ProbeBwCruise];
    m.metric("slow_probe_bw_pct", probe_bw.iter().map(|p| share(&slow, *p)).sum());
    m.metric("all_probe_bw_pct", probe_bw.iter().map(|p| share(&all, *p)).sum());
    m.metric("slow_count", slow.len() as f64);
}
