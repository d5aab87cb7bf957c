//! Histograms over closed connections ([`ClosedSummary`]): what connections lived through,
//! without a series per connection. Labelled by congestion control only, and at most
//! [`MAX_CC_LABELS`] of those (later names count as `other`), so the series stay bounded.

use std::collections::BTreeMap;

use super::Format;
use super::text::{Kind, Num, Writer};
use crate::closed::ClosedSummary;

/// Distinct `cc` label values kept; closes of further algorithms count under `other`.
pub const MAX_CC_LABELS: usize = 8;

const LIFETIME: &[f64] = &[0.01, 0.1, 1.0, 10.0, 60.0, 600.0, 3600.0, 86_400.0];
const BYTES: &[f64] = &[1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10];
const SEGMENTS: &[f64] = &[0.0, 1.0, 10.0, 100.0, 1000.0, 10_000.0];
const RTT: &[f64] = &[50e-6, 250e-6, 1e-3, 5e-3, 25e-3, 100e-3, 0.5, 2.0];
const FRACTION: &[f64] = &[0.0, 0.01, 0.1, 0.25, 0.5, 0.9, 1.0];

/// A cumulative histogram.
#[derive(Debug, Clone, Default, PartialEq)]
struct Cumulative {
    buckets: Vec<u64>,
    count: u64,
    sum: f64,
}

impl Cumulative {
    fn add(&mut self, bounds: &[f64], v: f64) {
        self.buckets.resize(bounds.len(), 0);
        for (b, bound) in self.buckets.iter_mut().zip(bounds) {
            if v <= *bound {
                *b += 1;
            }
        }
        self.count += 1;
        self.sum += v;
    }
}

/// The families, in exposition order: name, help, bucket bounds, and the value of a summary.
type Getter = fn(&ClosedSummary) -> Option<f64>;

const FAMILIES: [(&str, &str, &[f64], Getter); 8] = [
    (
        "tcptail_closed_lifetime_seconds",
        "Closed connections: time from the first poll that saw them to the close (connections \
         no poll saw are counted in tcptail_closed_connections_total only).",
        LIFETIME,
        |c| c.lifetime.map(|d| d.as_secs_f64()),
    ),
    (
        "tcptail_closed_bytes_acked_bytes",
        "Closed connections: bytes the peer acknowledged.",
        BYTES,
        |c| c.bytes_acked.map(|b| b as f64),
    ),
    ("tcptail_closed_bytes_received_bytes", "Closed connections: bytes received.", BYTES, |c| {
        c.bytes_received.map(|b| b as f64)
    }),
    (
        "tcptail_closed_retransmitted_segments",
        "Closed connections: segments retransmitted.",
        SEGMENTS,
        |c| c.total_retrans_segs.map(f64::from),
    ),
    (
        "tcptail_closed_min_rtt_seconds",
        "Closed connections: the minimum RTT the kernel measured.",
        RTT,
        |c| c.min_rtt_us.map(|r| f64::from(r) / 1e6),
    ),
    (
        "tcptail_closed_max_rtt_seconds",
        "Closed connections: the largest smoothed RTT seen (polls and the final state).",
        RTT,
        |c| c.max_rtt_us.map(|r| f64::from(r) / 1e6),
    ),
    (
        "tcptail_closed_rwnd_limited_ratio",
        "Closed connections: fraction of their busy time limited by the receive window.",
        FRACTION,
        |c| fraction(c.rwnd_limited_us, c.busy_time_us),
    ),
    (
        "tcptail_closed_sndbuf_limited_ratio",
        "Closed connections: fraction of their busy time limited by the send buffer.",
        FRACTION,
        |c| fraction(c.sndbuf_limited_us, c.busy_time_us),
    ),
];

fn fraction(part: Option<u64>, busy: Option<u64>) -> Option<f64> {
    let (part, busy) = (part?, busy?);
    (busy > 0).then(|| (part as f64 / busy as f64).min(1.0))
}

#[derive(Debug, Clone, Default, PartialEq)]
struct PerCc {
    closed: u64,
    hists: [Cumulative; FAMILIES.len()],
}

/// Histograms over every close observed since the start.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ClosedMetrics {
    by_cc: BTreeMap<String, PerCc>,
    /// Destroy notifications lost to a full socket buffer.
    pub lost: u64,
    /// Connections the close watcher tracks (live selected ones and recently gone ones).
    pub tracked: u64,
}

impl ClosedMetrics {
    /// Counts one close.
    pub fn observe(&mut self, c: &ClosedSummary) {
        let cc = c.cc.as_deref().unwrap_or("unknown");
        let label = if self.by_cc.contains_key(cc) || self.by_cc.len() < MAX_CC_LABELS {
            cc
        } else {
            "other"
        };
        let per = self.by_cc.entry(label.to_owned()).or_default();
        per.closed += 1;
        for ((_, _, bounds, get), h) in FAMILIES.iter().zip(&mut per.hists) {
            if let Some(v) = get(c) {
                h.add(bounds, v);
            }
        }
    }

    /// Appends the families to an exposition.
    pub(crate) fn render(&self, w: &mut Writer) {
        w.header(
            "tcptail_closed_connections",
            "Connections whose close was seen (the kernel's destroy notifications).",
            Kind::Counter,
        );
        for (cc, per) in &self.by_cc {
            w.line("tcptail_closed_connections", "_total")
                .label("cc", cc)
                .value(Num::int(per.closed));
        }
        w.header(
            "tcptail_closed_notifications_lost",
            "Destroy notifications lost because the listener's socket buffer overflowed.",
            Kind::Counter,
        );
        w.sample("tcptail_closed_notifications_lost", "_total", "", Num::int(self.lost));
        w.header(
            "tcptail_closed_tracked_connections",
            "Connections the close watcher tracks: a close of one of them gets a lifetime.",
            Kind::Gauge,
        );
        w.sample("tcptail_closed_tracked_connections", "", "", Num::int(self.tracked));
        for (i, (name, help, bounds, _)) in FAMILIES.iter().enumerate() {
            for (what, text) in [("# HELP ", *help), ("# TYPE ", "histogram")] {
                w.out.push_str(what);
                w.out.push_str(name);
                w.out.push(' ');
                w.out.push_str(text);
                w.out.push('\n');
            }
            for (cc, per) in &self.by_cc {
                let h = &per.hists[i];
                for (b, bound) in bounds.iter().enumerate() {
                    let n = h.buckets.get(b).copied().unwrap_or(0);
                    w.line(name, "_bucket")
                        .label("cc", cc)
                        .label_num("le", Num::Float(*bound))
                        .value(Num::int(n));
                }
                w.line(name, "_bucket")
                    .label("cc", cc)
                    .label("le", "+Inf")
                    .value(Num::int(h.count));
                w.line(name, "_count").label("cc", cc).value(Num::int(h.count));
                w.line(name, "_sum").label("cc", cc).value(Num::Float(h.sum));
            }
        }
    }

    /// The families as exposition text in `format` (without OpenMetrics' `# EOF`).
    pub fn text(&self, format: Format) -> String {
        let mut w = Writer { out: String::new(), format };
        self.render(&mut w);
        w.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::closed::CloseSeen;
    use std::time::Duration;

    fn summary(cc: &str, lifetime_ms: u64, acked: u64) -> ClosedSummary {
        ClosedSummary {
            cookie: 1,
            local: "127.0.0.1:1".parse().unwrap(),
            remote: "127.0.0.1:2".parse().unwrap(),
            cc: Some(cc.into()),
            seen: CloseSeen::Destroyed,
            lifetime: Some(Duration::from_millis(lifetime_ms)),
            final_state: "CLOSE",
            bytes_acked: Some(acked),
            bytes_received: None,
            bytes_retrans: Some(0),
            total_retrans_segs: Some(2),
            min_rtt_us: Some(30),
            max_rtt_us: Some(900),
            rwnd_limited_us: Some(50),
            sndbuf_limited_us: Some(0),
            busy_time_us: Some(100),
        }
    }

    #[test]
    fn histograms_count_every_close_under_bounded_labels() {
        let mut m = ClosedMetrics::default();
        m.observe(&summary("bbr", 50, 5_000));
        m.observe(&summary("bbr", 5_000, 50_000_000));
        for i in 0..20 {
            m.observe(&summary(&format!("cc{i}"), 1, 1));
        }
        let text = m.text(Format::Prometheus);
        assert!(text.contains("tcptail_closed_connections_total{cc=\"bbr\"} 2\n"), "{text}");
        assert!(text.contains("tcptail_closed_lifetime_seconds_bucket{cc=\"bbr\",le=\"0.1\"} 1\n"));
        assert!(text.contains("tcptail_closed_lifetime_seconds_bucket{cc=\"bbr\",le=\"10\"} 2\n"));
        assert!(text.contains("tcptail_closed_bytes_acked_bytes_count{cc=\"bbr\"} 2\n"));
        // Absent values are not observed.
        assert!(text.contains("tcptail_closed_bytes_received_bytes_count{cc=\"bbr\"} 0\n"));
        assert!(
            text.contains("tcptail_closed_rwnd_limited_ratio_bucket{cc=\"bbr\",le=\"0.5\"} 2\n")
        );
        let labels: std::collections::BTreeSet<&str> =
            text.lines().filter_map(|l| l.split("cc=\"").nth(1)?.split('"').next()).collect();
        assert_eq!(labels.len(), MAX_CC_LABELS + 1, "{labels:?}");
        assert!(text.contains("tcptail_closed_connections_total{cc=\"other\"} 13\n"));
    }
}
