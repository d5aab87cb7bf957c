//! The `ecn` workload: bulk flows through an emulated bottleneck that marks ECN (CoDel or
//! fq_codel with `,ecn`) or through a middlebox that drops ECN traffic (`ecn_blackhole =
//! "syn"`: ECN-setup SYNs; `"data"`: ECT/CE packets; `"all"`: both), with the namespaces'
//! `tcp_ecn` and `tcp_ecn_fallback` set by the variant's `sysctl` (the `ecn` experiment, seed
//! 002).
//!
//! The flows connect at once, each handshake timed and allowed `connect_timeout`: through a box
//! that drops ECN-setup SYNs a handshake takes Linux's SYN timeout (1 s) when the kernel falls
//! back to a SYN without ECN, and does not complete at all when it does not. Flows that
//! connected then send for `duration`; a round where none connected ends after the handshakes.
//!
//! | key | values | default |
//! |---|---|---|
//! | `cc` | `cubic`, `bbr`, `reno` | `cubic` |
//! | `flows` | parallel connections (1..=64) | 1 |
//! | `duration` | sending time per round, warm-up included | `10s` |
//! | `warmup` | time excluded from goodput, RTT and ratios | `2s` |
//! | `sample` | `tcp_info` sampling interval | `10ms` |
//! | `connect_timeout` | how long each handshake may take (100ms..=60s) | `5s` |
//! | path keys | `path = "emulated"` (required), `rate`, `rtt`, `buffer`, `queue`, `ecn_blackhole`, `sysctl` | |
//!
//! Metrics: `connect_ms` (the slowest handshake that completed, from `connect()` to its
//! return) and `connect_failures` (flows not connected within `connect_timeout`); those of
//! `bulk` over the window after `warmup` (`goodput_mbps`, `link_pct`, `rtt_p50_ms`,
//! `rtt_p95_ms`, `retrans_pct`), then over the whole round: `ce_marks` (data
//! packets the bottleneck marked CE), `aqm_drops` (data packets CoDel or a full queue
//! dropped), `ecn_drops` (packets the ECN blackhole dropped, both directions), `rto_count`
//! (`TcpExtTCPTimeouts` grown in the sender's namespace), `ecn_negotiated` (1 when flow 0's
//! `tcpi_options` has ECN), `stall_max_s` (the longest time the receivers read nothing, from
//! the first sample to the end: a stalled flow's outage) and `last_s_link_pct` (the final
//! second's goodput as a share of the link: whether a flow that stalled came back by the end).
//! Series: `goodput_mbps` per 100 ms and `rtt_ms`, as `bulk`. When no flow connected, the
//! application received nothing (`goodput_mbps`, `link_pct` and `last_s_link_pct` are 0) and
//! what only a connection has (RTT, retransmissions, negotiation, stalls, `connect_ms`) is not
//! measurable, with the reason.

use std::io::ErrorKind;
use std::net::TcpStream;
use std::time::Duration;

use tcptail_emu::{Count, EcnBlackhole};
use tcptail_lab::emulator::EmulatorReport;
use tcptail_report::Series;
use tcptail_sock::tcp_info::TcpiOptions;

use crate::params::{ParamError, Params};
use crate::path::{PathPlan, PathShape};
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
    connect_timeout: Duration,
}

const METRICS: [&str; 15] = [
    "connect_ms",
    "connect_failures",
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
        let connect_timeout = params.duration("connect_timeout")?.unwrap_or(Duration::from_secs(5));
        if !(Duration::from_millis(100)..=Duration::from_secs(60)).contains(&connect_timeout) {
            return Err(ParamError::new("connect_timeout", "between 100ms and 60s"));
        }
        Ok(Box::new(Plan { path, shape, connect_timeout }))
    }
}

/// What the round measured besides the emulator's report.
struct Round {
    handshakes: Handshakes,
    /// The data phase, when a flow connected.
    data: Option<DataPhase>,
    before: tcptail_netns::nstat::Counters,
    after: tcptail_netns::nstat::Counters,
}

/// The flows' handshakes.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Handshakes {
    /// The slowest completed handshake, ms (`None` when none completed).
    slowest_ms: Option<f64>,
    /// Handshakes that timed out.
    failures: usize,
}

impl Handshakes {
    /// Splits `attempts` into the connections made and the count that timed out; an error other
    /// than a timeout is the round's failure (a middlebox that drops packets makes timeouts).
    fn of(
        attempts: Vec<flows::Handshake>,
        timeout: Duration,
    ) -> Result<(Handshakes, Vec<(TcpStream, TcpStream)>), RunError> {
        let mut h = Handshakes { slowest_ms: None, failures: 0 };
        let mut pairs = Vec::with_capacity(attempts.len());
        for attempt in attempts {
            match attempt.result {
                Ok(pair) => {
                    let ms = attempt.took.as_secs_f64() * 1e3;
                    h.slowest_ms = Some(h.slowest_ms.map_or(ms, |s| s.max(ms)));
                    pairs.push(pair);
                }
                Err(e) if matches!(e.kind(), ErrorKind::TimedOut | ErrorKind::WouldBlock) => {
                    h.failures += 1;
                }
                Err(e) => {
                    return Err(RunError::failed(
                        format!("connect (allowed {})", tcptail_units::HumanDuration(timeout)),
                        e,
                    ));
                }
            }
        }
        Ok((h, pairs))
    }
}

/// What the flows that connected measured.
struct DataPhase {
    samples: Vec<Sample>,
    negotiated: bool,
}

impl VariantPlan for Plan {
    fn metrics(&self) -> Vec<String> {
        METRICS.iter().map(|&m| m.to_owned()).collect()
    }

    fn run(&self, ctx: &RoundContext<'_>) -> Result<Measurement, RunError> {
        let (round, lateness, report) = self.path.round_with_report(ctx, |live| {
            let before = live.client().nstat()?;
            let listener = flows::listen(live)?;
            let attempts = flows::connect_all(
                live,
                &listener,
                self.shape.flows,
                Some(&self.shape.cc),
                self.connect_timeout,
            )?;
            let (handshakes, pairs) = Handshakes::of(attempts, self.connect_timeout)?;
            let data = if pairs.is_empty() { None } else { Some(self.send(ctx, pairs)?) };
            let after = live.client().nstat()?;
            Ok::<_, RunError>(Round { handshakes, data, before, after })
        })?;
        let report = report.ok_or_else(|| {
            RunError::failed("read the emulator's report", "an emulated path has one")
        })?;
        let rate_mbps = self.path.rate().map_or(f64::NAN, |r| r.0 as f64 / 1e6);
        let grown = round.after.since(&round.before);
        let counts = EmulatorCounts::of(&report);
        let mut m = Measurement { lateness, ..Measurement::default() };
        m.metric("connect_failures", round.handshakes.failures as f64)
            .metric("ce_marks", counts.ce_marks as f64)
            .metric("aqm_drops", counts.aqm_drops as f64)
            .metric("ecn_drops", counts.ecn_drops as f64)
            .metric("rto_count", grown.get("TcpExtTCPTimeouts").unwrap_or(0) as f64)
            .metric("delivered_ce", grown.get("TcpExtTCPDeliveredCE").unwrap_or(0) as f64);
        let Some(data) = round.data else {
            let why = format!(
                "not measurable: none of the {} flows connected within {}",
                self.shape.flows,
                tcptail_units::HumanDuration(self.connect_timeout)
            );
            for name in [
                "connect_ms",
                "rtt_p50_ms",
                "rtt_p95_ms",
                "retrans_pct",
                "ecn_negotiated",
                "stall_max_s",
            ] {
                m.not_measurable.insert(name.to_owned(), why.clone());
            }
            m.metric("goodput_mbps", 0.0).metric("link_pct", 0.0).metric("last_s_link_pct", 0.0);
            m.notes.push(format!(
                "{} handshakes timed out: the application received nothing",
                round.handshakes.failures
            ));
            return Ok(m);
        };
        let samples = &data.samples;
        let s = flows::summarise(
            samples,
            self.shape.warmup,
            Duration::from_millis(100),
            self.path.rate().map(|r| r.0 as f64),
        );
        m.metric("connect_ms", round.handshakes.slowest_ms.unwrap_or(f64::NAN))
            .metric("goodput_mbps", s.goodput_mbps)
            .metric("link_pct", 100.0 * s.goodput_mbps / rate_mbps)
            .metric("rtt_p50_ms", s.rtt_p50_ms)
            .metric("rtt_p95_ms", s.rtt_p95_ms)
            .metric("retrans_pct", s.retrans_pct)
            .metric("ecn_negotiated", f64::from(u8::from(data.negotiated)))
            .metric("stall_max_s", longest_stall(samples))
            .metric("last_s_link_pct", 100.0 * last_second_mbps(samples) / rate_mbps);
        m.series.push(Series::time("goodput_mbps", s.goodput_series));
        m.series.push(Series::time("rtt_ms", s.rtt_series));
        m.notes.extend(s.goodput_note);
        m.notes.extend(flows::window_note(self.shape.duration, self.shape.warmup, self.path.rtt()));
        if round.handshakes.failures > 0 {
            m.notes.push(format!(
                "{} of {} handshakes timed out ({} allowed); the other flows sent",
                round.handshakes.failures,
                self.shape.flows,
                tcptail_units::HumanDuration(self.connect_timeout)
            ));
        }
        Ok(m)
    }

    fn planned(&self) -> Duration {
        // A handshake through a SYN-dropping box completes one initial RTO (1 s) late, or
        // not before `connect_timeout`.
        let drops_syns = match &self.path.kind {
            PathShape::Emulated(p) | PathShape::Netem(p) => {
                matches!(p.up.ecn_blackhole, Some(EcnBlackhole::Syn | EcnBlackhole::All))
            }
            _ => false,
        };
        let handshake = if drops_syns {
            self.connect_timeout.min(Duration::from_secs(1))
        } else {
            Duration::ZERO
        };
        self.shape.duration + handshake
    }

    fn describe(&self) -> String {
        self.shape.describe(&self.path)
    }
}

impl Plan {
    /// Sends on the connected flows for `duration` and samples them.
    fn send(
        &self,
        ctx: &RoundContext<'_>,
        pairs: Vec<(TcpStream, TcpStream)>,
    ) -> Result<DataPhase, RunError> {
        let flows = BulkFlows::from_pairs(pairs, None)?;
        let negotiated = flows
            .senders()
            .first()
            .map(flows::tcp_info)
            .transpose()?
            .is_some_and(|i| i.options.0 & TcpiOptions::ECN != 0);
        let samples = flows::sample_then_stop(flows, &self.shape, ctx)?;
        Ok(DataPhase { samples, negotiated })
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
    flows::goodput_between(start, end)
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
            cwnds: vec![10],
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
        assert_eq!(err(params(&[("connect_timeout", "50ms".into())])).key, "connect_timeout");
        assert_eq!(err(params(&[("connect_timeout", "2min".into())])).key, "connect_timeout");
        assert_eq!(err(params(&[("queue", "red".into())])).key, "queue");
        assert_eq!(err(Params::from_pairs([("cc", toml::Value::from("bbr"))])).key, "path");
        let ok = workload::plan(
            &Ecn,
            &params(&[("queue", "codel,ecn".into()), ("ecn_blackhole", true.into())]),
        );
        assert!(ok.unwrap().describe().contains("codel"));
    }

    fn sysctls(pairs: &[(&str, &str)]) -> toml::Value {
        toml::Value::Table(
            pairs.iter().map(|&(k, v)| (k.to_owned(), toml::Value::from(v))).collect(),
        )
    }

    /// Through a box that drops ECN-setup SYNs (needs root and /dev/net/tun): with
    /// `tcp_ecn_fallback=1` two flows with `tcp_ecn=1` connect after one SYN timeout (Linux's
    /// initial RTO, 1 s, both at once), without ECN, and then send; with the fallback off the
    /// retried SYN still asks for ECN and is dropped too, so nothing connects; a flow that does
    /// not ask for ECN is not touched.
    #[test]
    fn a_syn_blackhole_costs_one_syn_timeout_with_the_fallback_and_everything_without() {
        let run = |ecn: &str, fallback: &str| {
            let pairs = [
                ("duration", "1500ms".into()),
                ("warmup", "500ms".into()),
                ("flows", 2.into()),
                ("connect_timeout", "1500ms".into()),
                ("ecn_blackhole", "syn".into()),
                (
                    "sysctl",
                    sysctls(&[("net.ipv4.tcp_ecn", ecn), ("net.ipv4.tcp_ecn_fallback", fallback)]),
                ),
            ];
            let plan = workload::plan(&Ecn, &params(&pairs)).unwrap();
            test_support::run_once(plan.as_ref(), 7)
        };
        let fallback = run("1", "1");
        let m = &fallback.metrics;
        assert_eq!(m["connect_failures"], 0.0, "{fallback:?}");
        // The first SYN's retransmission timer is 1 s (TCP_TIMEOUT_INIT): it cannot fire
        // earlier; both handshakes wait for it at once, not one after the other.
        assert!((1000.0..2000.0).contains(&m["connect_ms"]), "{fallback:?}");
        assert_eq!(m["ecn_negotiated"], 0.0, "{fallback:?}");
        assert_eq!(m["ecn_drops"], 2.0, "one ECN-setup SYN per flow: {fallback:?}");
        assert!(m["goodput_mbps"] > 0.0 && m["stall_max_s"] < 1.0, "{fallback:?}");
        let stuck = run("1", "0");
        assert_eq!(stuck.metrics["connect_failures"], 2.0, "{stuck:?}");
        assert_eq!(stuck.metrics["goodput_mbps"], 0.0, "{stuck:?}");
        // The first SYNs and their retries at 1 s, both still asking for ECN.
        assert!(stuck.metrics["ecn_drops"] >= 4.0, "{stuck:?}");
        assert!(stuck.not_measurable["connect_ms"].contains("none of the 2 flows"), "{stuck:?}");
        let plain = run("0", "1");
        assert_eq!(plain.metrics["connect_failures"], 0.0, "{plain:?}");
        assert_eq!(plain.metrics["ecn_drops"], 0.0, "{plain:?}");
        assert!(plain.metrics["connect_ms"] < 1000.0, "no SYN retransmitted: {plain:?}");
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
