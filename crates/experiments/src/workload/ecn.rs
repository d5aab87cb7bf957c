//! The `ecn` workload: bulk flows through an emulated bottleneck that marks ECN (CoDel or
//! fq_codel with `,ecn`) or through a middlebox that drops ECN-capable packets
//! (`ecn_blackhole = true`), with the namespaces' `tcp_ecn` and `tcp_ecn_fallback` set by the
//! variant's `sysctl` (the `ecn` experiment, seed 002).
//!
//! | key | values | default |
//! |---|---|---|
//! | `cc` | `cubic`, `bbr`, `reno` | `cubic` |
//! | `flows` | parallel connections (1..=64) | 1 |
//! | `duration` | sending time per round, warm-up included | `10s` |
//! | `warmup` | time excluded from goodput, RTT and ratios | `2s` |
//! | `sample` | `tcp_info` sampling interval | `10ms` |
//! | path keys | `path = "emulated"` (required), `rate`, `rtt`, `buffer`, `queue`, `ecn_blackhole`, `sysctl` | |
//!
//! Metrics: those of `bulk` over the window after `warmup` (`goodput_mbps`, `link_pct`,
//! `rtt_p50_ms`, `rtt_p95_ms`, `retrans_pct`), then over the whole round: `ce_marks` (data
//! packets the bottleneck marked CE), `aqm_drops` (data packets CoDel or a full queue
//! dropped), `ecn_drops` (packets the ECN blackhole dropped, both directions), `rto_count`
//! (`TcpExtTCPTimeouts` grown in the sender's namespace), `ecn_negotiated` (1 when flow 0's
//! `tcpi_options` has ECN), `stall_max_s` (the longest time the receivers read nothing, from
//! the first sample to the end: a stalled flow's outage) and `last_s_link_pct` (the final
//! second's goodput as a share of the link: whether a flow that stalled came back by the end).
//! Series: `goodput_mbps` per 100 ms and `rtt_ms`, as `bulk`.

use std::time::Duration;

use tcptail_emu::Count;
use tcptail_lab::emulator::EmulatorReport;
use tcptail_report::Series;
use tcptail_sock::tcp_info::TcpiOptions;

use crate::params::{ParamError, Params};
use crate::path::PathPlan;
use crate::round::{Measurement, RoundContext, RunError};
use crate::workload::flows::{self, BulkFlows, BulkShape, Sample};
use crate::workload::{VariantPlan, Workload};

/// The `ecn` engine.
pub struct Ecn;

/// A checked `ecn` variant.
#[derive(Debug)]
struct Plan {
    path: PathPlan,
    shape: BulkShape,
}

const METRICS: [&str; 13] = [
    "goodput_mbps",
    "link_pct",
    "rtt_p50_ms",
    "rtt_p95_ms",
    "retrans_pct",
    "ce_marks",
    "aqm_drops",
    "ecn_drops",
    "rto_count",
    "ecn_negotiated",
    "stall_max_s",
    "last_s_link_pct",
    "delivered_ce",
];

impl Workload for Ecn {
    fn name(&self) -> &'static str {
        "ecn"
    }

    fn plan(&self, params: &Params) -> Result<Box<dyn VariantPlan>, ParamError> {
        let shape = BulkShape::from_params(
            params,
            Duration::from_millis(1500),
            "at least 1500ms (the last second is read)",
        )?;
        let path = PathPlan::emulated_from_params(params, "ecn")?;
        Ok(Box::new(Plan { path, shape }))
    }
}

/// What the round measured besides the samples.
struct Extra {
    negotiated: bool,
    before: tcptail_netns::nstat::Counters,
    after: tcptail_netns::nstat::Counters,
}

impl VariantPlan for Plan {
    fn metrics(&self) -> Vec<String> {
        METRICS.iter().map(|&m| m.to_owned()).collect()
    }

    fn run(&self, ctx: &RoundContext<'_>) -> Result<Measurement, RunError> {
        let (run, lateness, report) = self.path.round_with_report(ctx, |live| {
            let before = live.client().nstat()?;
            let flows = BulkFlows::start(live, self.shape.flows, Some(&self.shape.cc), None)?;
            let negotiated = flows
                .senders()
                .first()
                .map(flows::tcp_info)
                .transpose()?
                .is_some_and(|i| i.options.0 & TcpiOptions::ECN != 0);
            let samples = flows::sample_for(
                &flows,
                self.shape.duration,
                self.shape.sample,
                ctx.stop_requested,
                ctx.progress,
            );
            let stopped = flows.stop();
            let samples = samples?;
            stopped?;
            let after = live.client().nstat()?;
            Ok::<_, RunError>((samples, Extra { negotiated, before, after }))
        })?;
        let (samples, extra) = run;
        let report = report.ok_or_else(|| {
            RunError::failed("read the emulator's report", "an emulated path has one")
        })?;
        let rate_mbps = self.path.rate().map_or(f64::NAN, |r| r.0 as f64 / 1e6);
        let s = flows::summarise(&samples, self.shape.warmup, Duration::from_millis(100));
        let grown = extra.after.since(&extra.before);
        let counts = EmulatorCounts::of(&report);
        let mut m = Measurement { lateness, ..Measurement::default() };
        m.metric("goodput_mbps", s.goodput_mbps)
            .metric("link_pct", 100.0 * s.goodput_mbps / rate_mbps)
            .metric("rtt_p50_ms", s.rtt_p50_ms)
            .metric("rtt_p95_ms", s.rtt_p95_ms)
            .metric("retrans_pct", s.retrans_pct)
            .metric("ce_marks", counts.ce_marks as f64)
            .metric("aqm_drops", counts.aqm_drops as f64)
            .metric("ecn_drops", counts.ecn_drops as f64)
            .metric("rto_count", grown.get("TcpExtTCPTimeouts").unwrap_or(0) as f64)
            .metric("delivered_ce", grown.get("TcpExtTCPDeliveredCE").unwrap_or(0) as f64)
            .metric("ecn_negotiated", f64::from(u8::from(extra.negotiated)))
            .metric("stall_max_s", longest_stall(&samples))
            .metric("last_s_link_pct", 100.0 * last_second_mbps(&samples) / rate_mbps);
        m.series.push(Series::time("goodput_mbps", s.goodput_series));
        m.series.push(Series::time("rtt_ms", s.rtt_series));
        m.notes.extend(flows::window_note(self.shape.duration, self.shape.warmup, self.path.rtt()));
        Ok(m)
    }

    fn describe(&self) -> String {
        self.shape.describe(&self.path)
    }
}

/// The emulator's counts that say what happened to ECN traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct EmulatorCounts {
    /// Data packets marked CE (client to server).
    ce_marks: u64,
    /// Data packets dropped by CoDel or a full queue.
    aqm_drops: u64,
    /// Packets the ECN blackhole dropped, both directions.
    ecn_drops: u64,
}

impl EmulatorCounts {
    fn of(report: &EmulatorReport) -> EmulatorCounts {
        let up = &report.up.stats;
        let packets = |c: Count| c.packets;
        EmulatorCounts {
            ce_marks: packets(up.ecn_marks),
            aqm_drops: packets(up.drops.codel) + packets(up.drops.queue_full),
            ecn_drops: packets(up.drops.ecn_blackhole)
                + packets(report.down.stats.drops.ecn_blackhole),
        }
    }
}

/// The longest time between two samples at which the receivers' byte count grew (the first
/// sample and the last count as such), in seconds.
fn longest_stall(samples: &[Sample]) -> f64 {
    let Some(first) = samples.first() else {
        return f64::NAN;
    };
    let mut last_progress = first.t;
    let mut previous = first.received;
    let mut longest = 0.0f64;
    for s in &samples[1..] {
        if s.received > previous {
            longest = longest.max(s.t - last_progress);
            last_progress = s.t;
            previous = s.received;
        }
    }
    if let Some(end) = samples.last() {
        longest = longest.max(end.t - last_progress);
    }
    longest
}

/// Goodput over the final second of the samples, Mbit/s.
fn last_second_mbps(samples: &[Sample]) -> f64 {
    let Some(end) = samples.last() else {
        return f64::NAN;
    };
    let start = samples.iter().find(|s| s.t >= end.t - 1.0).unwrap_or(end);
    if end.t <= start.t {
        return f64::NAN;
    }
    end.received.saturating_sub(start.received) as f64 * 8.0 / (end.t - start.t) / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{self, test_support};

    fn params(pairs: &[(&str, toml::Value)]) -> Params {
        test_support::emulated("50mbit", "20ms", pairs)
    }

    fn sample(t: f64, received: u64) -> Sample {
        Sample {
            t,
            received,
            rtts_us: vec![20_000],
            bytes_sent: received,
            bytes_retrans: 0,
            busy_us: 0,
            rwnd_limited_us: 0,
            cwnd: 10,
        }
    }

    #[test]
    fn stalls_and_the_last_second() {
        let s = [
            sample(0.0, 0),
            sample(0.5, 100),
            sample(1.0, 100),
            sample(2.0, 100),
            sample(2.5, 1_000_100),
            sample(3.0, 1_000_100),
            sample(3.5, 2_250_100),
        ];
        // 0.5 s -> 2.5 s without progress.
        assert!((longest_stall(&s) - 2.0).abs() < 1e-9);
        // 2.5 s -> 3.5 s: 1,250,000 bytes in 1 s = 10 Mbit/s.
        assert!((last_second_mbps(&s) - 10.0).abs() < 1e-9, "{}", last_second_mbps(&s));
        // A flow that never delivers stalls for the whole run.
        let dead = [sample(0.0, 0), sample(1.0, 0), sample(2.0, 0)];
        assert_eq!(longest_stall(&dead), 2.0);
    }

    #[test]
    fn bad_parameters_are_named() {
        let err = |p: Params| workload::plan(&Ecn, &p).err().expect("refused");
        assert_eq!(err(params(&[("cc", "vegas".into())])).key, "cc");
        assert_eq!(err(params(&[("duration", "1s".into())])).key, "duration");
        assert_eq!(err(params(&[("ecn_blackhole", "yes".into())])).key, "ecn_blackhole");
        assert_eq!(err(params(&[("queue", "red".into())])).key, "queue");
        assert_eq!(err(Params::from_pairs([("cc", toml::Value::from("bbr"))])).key, "path");
        let ok = workload::plan(
            &Ecn,
            &params(&[("queue", "codel,ecn".into()), ("ecn_blackhole", true.into())]),
        );
        assert!(ok.unwrap().describe().contains("codel"));
    }

    /// Through a marking CoDel, a CUBIC flow with `tcp_ecn=1` negotiates ECN and is marked;
    /// through an ECN blackhole its first transmissions are dropped and goodput collapses
    /// against the same flow without ECN (needs root and /dev/net/tun).
    #[test]
    fn marks_through_codel_and_drops_through_a_blackhole() {
        let ecn = |on: u8| -> toml::Value {
            toml::Value::Table(
                [("net.ipv4.tcp_ecn".to_owned(), toml::Value::from(on.to_string()))]
                    .into_iter()
                    .collect(),
            )
        };
        let run = |pairs: &[(&str, toml::Value)]| {
            let mut all = vec![("duration", "2s".into()), ("warmup", "1s".into())];
            all.extend(pairs.iter().cloned());
            let plan = workload::plan(&Ecn, &params(&all)).unwrap();
            test_support::run_once(plan.as_ref(), 7)
        };
        let marked =
            run(&[("queue", "codel,ecn".into()), ("buffer", "4bdp".into()), ("sysctl", ecn(1))]);
        assert_eq!(marked.metrics["ecn_negotiated"], 1.0, "{marked:?}");
        assert!(marked.metrics["ce_marks"] > 0.0, "{marked:?}");
        assert_eq!(marked.metrics["ecn_drops"], 0.0, "{marked:?}");
        let blackholed = run(&[("ecn_blackhole", true.into()), ("sysctl", ecn(1))]);
        let plain = run(&[("ecn_blackhole", true.into()), ("sysctl", ecn(0))]);
        assert!(blackholed.metrics["ecn_drops"] > 0.0, "{blackholed:?}");
        assert_eq!(plain.metrics["ecn_drops"], 0.0, "{plain:?}");
        assert!(
            blackholed.metrics["goodput_mbps"] < 0.5 * plain.metrics["goodput_mbps"],
            "{blackholed:?} vs {plain:?}"
        );
    }
}
