//! Tail attribution: which kernel state sets the slowest requests apart from the typical ones.
//!
//! With `--attribute`, the client reads `TCP_INFO`, the send queue (`SIOCOUTQ`) and, on BBR
//! sockets, `TCP_CC_INFO` just before each request and again after its response (outside the
//! timed window in closed loop; in open loop before the send, every request included).
//! [`KernelSnapshot`] keeps the few fields that can explain a slow request. [`attribute`] then
//! compares the requests above the 99th percentile with all requests, feature by feature:
//! for each value of a categorical feature (BBR phase and pacing gain, congestion state, "a
//! retransmission happened", "the RTO count rose", unsent data queued, ...) the share among
//! slow requests against the share among all, and for numeric ones (cwnd, unacked bytes,
//! unsent bytes, srtt, RTO, ...) the medians.
//!
//! Unacknowledged data is measured in **bytes**, as `SIOCOUTQ - tcpi_notsent_bytes` (exactly
//! `snd_nxt - snd_una`), not as `tcpi_unacked x mss`: a 64-byte request is one segment, and
//! counting it as a full MSS would overstate it twenty-fold. When either number is missing
//! (an old kernel), the segment count stands in. A value that is much more common among slow
//! requests than overall ("of the 1 % slowest, 93 % were sent in BBR probe-bw-up, against 8 %
//! of all") is reported as a finding; when nothing stands out, the report says so and points at
//! the machine rather than TCP.
//!
//! [`attribute`] is pure: it takes samples, returns statements. It never reads a socket.

use serde::{Deserialize, Serialize};
use tcptail_sock::tcp_info::CaState;
use tcptail_sock::{BbrInfo, BbrPhase, TcpInfo};

use tcptail_units::stats::median;

/// The per-request kernel state attribution works from.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct KernelSnapshot {
    /// Congestion window, packets.
    pub cwnd: u32,
    /// Unacknowledged packets in flight.
    pub unacked: u32,
    /// Unacknowledged bytes in flight: `SIOCOUTQ - tcpi_notsent_bytes`.
    pub unacked_bytes: Option<u32>,
    /// Retransmission timeout, µs.
    pub rto_us: u32,
    /// Smoothed RTT, µs.
    pub srtt_us: u32,
    /// Delayed-ACK timeout, µs.
    pub ato_us: u32,
    /// Congestion-avoidance state (open, disorder, CWR, recovery, loss).
    pub ca_state: CaState,
    /// Total retransmitted segments on the connection so far.
    pub total_retrans: u32,
    /// Total RTO expirations so far (6.7+).
    pub total_rto: Option<u32>,
    /// Pacing rate, bytes/s.
    pub pacing_rate: Option<u64>,
    /// Unsent bytes in the socket.
    pub notsent_bytes: Option<u32>,
    /// BBR's phase inferred from its gains, when the socket runs BBR.
    pub bbr_phase: Option<BbrPhase>,
    /// BBR's pacing gain x256.
    pub bbr_pacing_gain: Option<u32>,
}

impl KernelSnapshot {
    /// Builds a snapshot from a parsed `tcp_info`, optional BBR info and the socket's send
    /// queue in bytes (`SIOCOUTQ`), when it was read.
    pub fn from_kernel(
        info: &TcpInfo,
        bbr: Option<&BbrInfo>,
        send_queue_bytes: Option<u32>,
    ) -> KernelSnapshot {
        KernelSnapshot {
            cwnd: info.snd_cwnd_segs,
            unacked: info.unacked_segs,
            unacked_bytes: match (send_queue_bytes, info.notsent_bytes) {
                (Some(queued), Some(notsent)) => Some(queued.saturating_sub(notsent)),
                _ => None,
            },
            rto_us: info.rto_us,
            srtt_us: info.rtt_us,
            ato_us: info.ato_us,
            ca_state: info.ca_state,
            total_retrans: info.total_retrans_segs,
            total_rto: info.total_rto.map(u32::from),
            pacing_rate: info.pacing_rate_bytes_per_sec,
            notsent_bytes: info.notsent_bytes,
            bbr_phase: bbr.map(|b| b.phase()),
            bbr_pacing_gain: bbr.map(|b| b.pacing_gain),
        }
    }
}

/// What attribution knows about one request.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AttributedSample {
    /// Latency, ns (from the intended send time in open loop).
    pub latency_ns: u64,
    /// How late the request was actually sent against its schedule, ns (0 in closed loop).
    pub send_late_ns: u64,
    /// Kernel state before the request was sent.
    pub before: KernelSnapshot,
    /// Kernel state after its response arrived.
    pub after: KernelSnapshot,
}

/// The outcome of attribution for one run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attribution {
    /// Latency threshold above which a request counts as slow (the run's p99), µs.
    pub threshold_us: f64,
    /// Requests above the threshold.
    pub slow_requests: u64,
    /// All attributed requests.
    pub requests: u64,
    /// Categorical values over-represented among slow requests, strongest first.
    pub findings: Vec<AttributionFinding>,
    /// Every categorical feature value seen, with both shares (for the JSON reader).
    pub features: Vec<AttributionFinding>,
    /// Medians of numeric features, slow against all.
    pub numeric: Vec<NumericComparison>,
    /// Sentences a person reads.
    pub statements: Vec<String>,
    /// Measured cost of one snapshot (TCP_INFO + TCP_CC_INFO), ns, median.
    pub snapshot_cost_ns: f64,
}

/// One value of one categorical feature and how common it is among slow and all requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AttributionFinding {
    /// Feature name, e.g. "BBR phase at send".
    pub feature: String,
    /// Value, e.g. "probe-bw-up".
    pub value: String,
    /// Fraction of slow requests with this value.
    pub share_of_slow: f64,
    /// Fraction of all requests with this value.
    pub share_of_all: f64,
}

impl AttributionFinding {
    /// How many times more common the value is among slow requests than among all.
    pub fn lift(&self) -> f64 {
        if self.share_of_all > 0.0 { self.share_of_slow / self.share_of_all } else { 0.0 }
    }
}

/// Medians of a numeric feature among slow and among all requests.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NumericComparison {
    /// Feature name with unit, e.g. "cwnd (packets)".
    pub feature: String,
    /// Median among slow requests.
    pub median_slow: f64,
    /// Median among all requests.
    pub median_all: f64,
}

/// Categorical features: name and a function giving the sample's value (None = not applicable).
type Categorical = (&'static str, fn(&AttributedSample) -> Option<String>);

const CATEGORICAL: [Categorical; 8] = [
    ("BBR phase at send", |s| s.before.bbr_phase.map(|p| p.to_string())),
    ("BBR pacing gain at send", |s| {
        s.before.bbr_pacing_gain.map(|g| format!("{:.2}", f64::from(g) / 256.0))
    }),
    ("congestion state at send", |s| Some(s.before.ca_state.to_string())),
    ("retransmission during the request", |s| {
        Some(yes_no(s.after.total_retrans > s.before.total_retrans))
    }),
    ("RTO during the request", |s| match (s.before.total_rto, s.after.total_rto) {
        (Some(a), Some(b)) => Some(yes_no(b > a)),
        _ => None,
    }),
    ("data still unacknowledged at send", |s| {
        Some(yes_no(s.before.unacked_bytes.map_or(s.before.unacked > 0, |b| b > 0)))
    }),
    ("unsent data queued at send", |s| s.before.notsent_bytes.map(|b| yes_no(b > 0))),
    ("client sent more than 20 µs behind schedule", |s| Some(yes_no(s.send_late_ns > 20_000))),
];

fn yes_no(b: bool) -> String {
    if b { "yes".into() } else { "no".into() }
}

/// Numeric features: name and value.
type Numeric = (&'static str, fn(&AttributedSample) -> Option<f64>);

const NUMERIC: [Numeric; 9] = [
    ("cwnd at send (packets)", |s| Some(s.before.cwnd as f64)),
    ("unacked at send (bytes)", |s| s.before.unacked_bytes.map(f64::from)),
    ("unacked at send (packets)", |s| Some(s.before.unacked as f64)),
    ("unsent at send (bytes)", |s| s.before.notsent_bytes.map(f64::from)),
    ("srtt at send (µs)", |s| Some(s.before.srtt_us as f64)),
    ("RTO at send (ms)", |s| Some(s.before.rto_us as f64 / 1000.0)),
    ("pacing rate at send (Mbit/s)", |s| s.before.pacing_rate.map(|r| r as f64 * 8.0 / 1e6)),
    ("delayed-ACK timeout at send (µs)", |s| Some(s.before.ato_us as f64)),
    ("send lateness (µs)", |s| Some(s.send_late_ns as f64 / 1000.0)),
];

/// A finding must cover at least this share of slow requests...
const MIN_SHARE_OF_SLOW: f64 = 0.2;
/// ...and be at least this many times more common among them than overall.
const MIN_LIFT: f64 = 1.5;

/// Compares the requests above `threshold_ns` with all requests.
pub fn attribute(
    samples: &[AttributedSample],
    threshold_ns: u64,
    snapshot_cost_ns: f64,
) -> Attribution {
    let slow: Vec<&AttributedSample> =
        samples.iter().filter(|s| s.latency_ns > threshold_ns).collect();
    let all: Vec<&AttributedSample> = samples.iter().collect();
    let mut features = Vec::new();
    for (name, value_of) in CATEGORICAL {
        let all_values: Vec<String> = all.iter().filter_map(|s| value_of(s)).collect();
        if all_values.is_empty() {
            continue;
        }
        let slow_values: Vec<String> = slow.iter().filter_map(|s| value_of(s)).collect();
        let mut distinct: Vec<&String> = all_values.iter().collect();
        distinct.sort();
        distinct.dedup();
        for value in distinct {
            let share = |vals: &[String]| {
                if vals.is_empty() {
                    0.0
                } else {
                    vals.iter().filter(|v| *v == value).count() as f64 / vals.len() as f64
                }
            };
            features.push(AttributionFinding {
                feature: name.to_string(),
                value: value.clone(),
                share_of_slow: share(&slow_values),
                share_of_all: share(&all_values),
            });
        }
    }
    let mut findings: Vec<AttributionFinding> = features
        .iter()
        .filter(|f| f.share_of_slow >= MIN_SHARE_OF_SLOW && f.lift() >= MIN_LIFT)
        .cloned()
        .collect();
    findings.sort_by(|a, b| {
        (b.share_of_slow * b.lift().ln()).total_cmp(&(a.share_of_slow * a.lift().ln()))
    });

    let numeric = NUMERIC
        .iter()
        .filter_map(|(name, value_of)| {
            let all_v: Vec<f64> = all.iter().filter_map(|s| value_of(s)).collect();
            let slow_v: Vec<f64> = slow.iter().filter_map(|s| value_of(s)).collect();
            Some(NumericComparison {
                feature: name.to_string(),
                median_slow: median(&slow_v)?,
                median_all: median(&all_v)?,
            })
        })
        .collect();

    let slow_pct =
        if samples.is_empty() { 0.0 } else { 100.0 * slow.len() as f64 / samples.len() as f64 };
    let threshold_us = threshold_ns as f64 / 1000.0;
    let mut statements: Vec<String> = findings
        .iter()
        .take(3)
        .map(|f| {
            format!(
                "of the {slow_pct:.1} % slowest requests (n={}, above {threshold_us:.1} µs), \
                 {:.0} % had {} = {} ({:.1} % of all requests)",
                slow.len(),
                f.share_of_slow * 100.0,
                f.feature,
                f.value,
                f.share_of_all * 100.0
            )
        })
        .collect();
    if statements.is_empty() && !slow.is_empty() {
        statements.push(format!(
            "no kernel TCP state sets the {slow_pct:.1} % slowest requests (above \
             {threshold_us:.1} µs) apart from the rest: look at the machine (CPU placement, \
             wake-up latency, steal, other load) rather than TCP"
        ));
    }
    Attribution {
        threshold_us,
        slow_requests: slow.len() as u64,
        requests: samples.len() as u64,
        findings,
        features,
        numeric,
        statements,
        snapshot_cost_ns,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(latency_us: u64, phase: BbrPhase) -> AttributedSample {
        let snap = KernelSnapshot { bbr_phase: Some(phase), cwnd: 10, ..Default::default() };
        AttributedSample {
            latency_ns: latency_us * 1000,
            send_late_ns: 0,
            before: snap,
            after: snap,
        }
    }

    #[test]
    fn finds_the_phase_behind_the_tail() {
        // 1000 requests: 80 sent in probe-bw-up; the 10 slowest are all among those.
        let mut samples = Vec::new();
        for i in 0..1000u64 {
            let up = i % 12 == 0 && samples.len() < 1000;
            let phase = if up { BbrPhase::ProbeBwUp } else { BbrPhase::ProbeBwCruise };
            let latency = if up && i < 120 { 120 } else { 45 };
            samples.push(sample(latency, phase));
        }
        let a = attribute(&samples, 60_000, 800.0);
        assert_eq!(a.slow_requests, 10);
        let top = &a.findings[0];
        assert_eq!(top.feature, "BBR phase at send");
        assert_eq!(top.value, "probe-bw-up");
        assert_eq!(top.share_of_slow, 1.0);
        assert!((top.share_of_all - 84.0 / 1000.0).abs() < 1e-9, "{}", top.share_of_all);
        assert!(a.statements[0].contains("100 % had BBR phase at send = probe-bw-up"));
    }

    #[test]
    fn says_so_when_nothing_stands_out() {
        let samples: Vec<_> =
            (0..1000u64).map(|i| sample(40 + i % 100, BbrPhase::ProbeBwCruise)).collect();
        let a = attribute(&samples, 138_000, 800.0);
        assert!(a.findings.is_empty(), "{:?}", a.findings);
        assert!(a.statements[0].contains("look at the machine"));
    }

    #[test]
    fn retransmissions_are_detected_from_deltas() {
        let mut samples: Vec<_> = (0..200).map(|_| sample(50, BbrPhase::ProbeBwCruise)).collect();
        for s in samples.iter_mut().take(3) {
            s.latency_ns = 5_000_000;
            s.after.total_retrans = s.before.total_retrans + 1;
        }
        let a = attribute(&samples, 100_000, 0.0);
        let f = a
            .findings
            .iter()
            .find(|f| f.feature == "retransmission during the request")
            .expect("retransmission finding");
        assert_eq!((f.value.as_str(), f.share_of_slow), ("yes", 1.0));
    }

    #[test]
    fn snapshots_count_unacknowledged_bytes_not_segments() {
        let info = TcpInfo {
            unacked_segs: 1,
            snd_mss_bytes: 1448,
            notsent_bytes: Some(100),
            rto_us: 204_000,
            ..TcpInfo::default()
        };
        let bbr = BbrInfo { bw_bytes_per_sec: 1, min_rtt_us: 10, pacing_gain: 320, cwnd_gain: 512 };
        // 164 bytes queued, 100 of them not sent yet: 64 bytes in flight (one small request).
        let snap = KernelSnapshot::from_kernel(&info, Some(&bbr), Some(164));
        assert_eq!((snap.unacked, snap.unacked_bytes, snap.rto_us), (1, Some(64), 204_000));
        assert_eq!(snap.bbr_pacing_gain, Some(320));
        assert_eq!(KernelSnapshot::from_kernel(&info, None, None).unacked_bytes, None);
        let old_kernel = TcpInfo { notsent_bytes: None, ..info };
        assert_eq!(KernelSnapshot::from_kernel(&old_kernel, None, Some(164)).unacked_bytes, None);
    }

    #[test]
    fn pacing_gain_unsent_data_and_rto_are_compared() {
        // 500 requests; the 5 slow ones were sent at pacing gain 1.25 with 3000 bytes unsent
        // and a 1 s RTO; the rest at gain 1.0, nothing queued, 200 ms RTO.
        let samples: Vec<AttributedSample> = (0..500u64)
            .map(|i| {
                let slow = i % 100 == 0;
                let snap = KernelSnapshot {
                    bbr_pacing_gain: Some(if slow { 320 } else { 256 }),
                    notsent_bytes: Some(if slow { 3000 } else { 0 }),
                    unacked_bytes: Some(if slow { 64 } else { 0 }),
                    rto_us: if slow { 1_000_000 } else { 200_000 },
                    ..KernelSnapshot::default()
                };
                AttributedSample {
                    latency_ns: if slow { 900_000 } else { 40_000 },
                    send_late_ns: 0,
                    before: snap,
                    after: snap,
                }
            })
            .collect();
        let a = attribute(&samples, 100_000, 0.0);
        assert_eq!(a.slow_requests, 5);
        let has = |feature: &str, value: &str| {
            a.findings
                .iter()
                .any(|f| f.feature == feature && f.value == value && f.share_of_slow == 1.0)
        };
        assert!(has("BBR pacing gain at send", "1.25"), "{:?}", a.findings);
        assert!(has("unsent data queued at send", "yes"), "{:?}", a.findings);
        assert!(has("data still unacknowledged at send", "yes"), "{:?}", a.findings);
        let median = |feature: &str| {
            let n = a.numeric.iter().find(|n| n.feature == feature).expect(feature);
            (n.median_slow, n.median_all)
        };
        assert_eq!(median("RTO at send (ms)"), (1000.0, 200.0));
        assert_eq!(median("unsent at send (bytes)"), (3000.0, 0.0));
        assert_eq!(median("unacked at send (bytes)"), (64.0, 0.0));
    }

    #[test]
    fn empty_input_is_harmless() {
        let a = attribute(&[], 0, 0.0);
        assert_eq!(a.requests, 0);
        assert!(a.statements.is_empty());
    }
}
