//! The `bulk` workload: long-lived bulk TCP flows from the client to the server namespace
//! across a shaped path, measured at the receiver (the `loss`, `wan` and `rwin-limited`
//! experiments).
//!
//! | key | values | default |
//! |---|---|---|
//! | `cc` | `cubic`, `bbr`, `reno` | `cubic` |
//! | `flows` | parallel connections (1..=64) | 1 |
//! | `duration` | sending time per round, warm-up included | `10s` |
//! | `warmup` | time excluded from goodput, RTT and ratios (start-up, slow start) | `2s` |
//! | `sample` | `tcp_info` sampling interval | `10ms` |
//! | path keys | `path = "emulated"` (required), `rate`, `rtt`, `loss`, `buffer`, `queue`, `sysctl` | |
//!
//! Metrics, over the window after `warmup`: `goodput_mbps` (bytes read by the receivers over
//! the window divided by its length, never above the shaped rate, with a note when the count
//! read above it: see [`flows::goodput_between`] and [`flows::held_to_link`]), `link_pct`
//! (goodput as a share of the shaped rate), `rtt_p50_ms` / `rtt_p95_ms` /
//! `rtt_mean_ms` (every sender's smoothed RTT, sampled), `retrans_pct` (bytes retransmitted / bytes sent),
//! `rwnd_limited_pct` (`tcpi_rwnd_limited` as a share of `tcpi_busy_time`: how much of the
//! time the receiver's window, not the congestion window, held the sender back). Series:
//! `goodput_mbps` per 100 ms, `rtt_ms` and `cwnd_pkts` (flow 0) per sample, whole round.

use std::time::Duration;

use tcptail_report::Series;

use crate::params::{ParamError, Params};
use crate::path::PathPlan;
use crate::round::{Measurement, RoundContext, RunError};
use crate::workload::flows::{self, BulkFlows, BulkShape};
use crate::workload::{VariantPlan, Workload};

/// The `bulk` engine.
pub struct Bulk;

/// A checked `bulk` variant.
#[derive(Debug)]
struct Plan {
    path: PathPlan,
    shape: BulkShape,
}

impl Workload for Bulk {
    fn name(&self) -> &'static str {
        "bulk"
    }

    fn plan(&self, params: &Params) -> Result<Box<dyn VariantPlan>, ParamError> {
        let shape = BulkShape::from_params(params, Duration::from_millis(500), "at least 500ms")?;
        let path = PathPlan::emulated_from_params(params, "bulk")?;
        Ok(Box::new(Plan { path, shape }))
    }
}

impl VariantPlan for Plan {
    fn metrics(&self) -> Vec<String> {
        let mut names =
            vec!["goodput_mbps", "rtt_p50_ms", "rtt_p95_ms", "rtt_mean_ms", "retrans_pct"];
        names.push("rwnd_limited_pct");
        if self.path.rate().is_some() {
            names.push("link_pct");
        }
        names.into_iter().map(str::to_owned).collect()
    }

    fn run(&self, ctx: &RoundContext<'_>) -> Result<Measurement, RunError> {
        let (samples, lateness) = self.path.round(ctx, |live| {
            let flows = BulkFlows::start(live, self.shape.flows, Some(&self.shape.cc), None)?;
            flows::sample_then_stop(flows, &self.shape, ctx)
        })?;
        let rate_bps = self.path.rate().map(|r| r.0 as f64);
        let s = flows::summarise(&samples, self.shape.warmup, Duration::from_millis(100), rate_bps);
        let mut m = Measurement { lateness, ..Measurement::default() };
        m.metric("goodput_mbps", s.goodput_mbps)
            .metric("rtt_p50_ms", s.rtt_p50_ms)
            .metric("rtt_p95_ms", s.rtt_p95_ms)
            .metric("rtt_mean_ms", s.rtt_mean_ms)
            .metric("retrans_pct", s.retrans_pct)
            .metric("rwnd_limited_pct", s.rwnd_limited_pct);
        if let Some(rate) = rate_bps {
            m.metric("link_pct", 100.0 * s.goodput_mbps * 1e6 / rate);
        }
        m.notes.extend(s.goodput_note);
        m.series.push(Series::time("goodput_mbps", s.goodput_series));
        m.series.push(Series::time("rtt_ms", s.rtt_series));
        m.series.push(Series::time("cwnd_pkts", s.cwnd_series));
        m.notes.extend(flows::window_note(self.shape.duration, self.shape.warmup, self.path.rtt()));
        Ok(m)
    }

    fn planned(&self) -> Duration {
        self.shape.duration
    }

    fn describe(&self) -> String {
        self.shape.describe(&self.path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{self, test_support};

    fn params(pairs: &[(&str, toml::Value)]) -> Params {
        test_support::emulated("50mbit", "20ms", pairs)
    }

    #[test]
    fn bad_parameters_are_named() {
        let err = |p: Params| workload::plan(&Bulk, &p).err().expect("refused");
        assert_eq!(err(params(&[("cc", "vegas".into())])).key, "cc");
        assert_eq!(err(params(&[("flows", 0.into())])).key, "flows");
        assert_eq!(err(params(&[("flows", 65.into())])).key, "flows");
        assert_eq!(err(params(&[("duration", "100ms".into())])).key, "duration");
        assert_eq!(
            err(params(&[("duration", "2s".into()), ("warmup", "2s".into())])).key,
            "warmup"
        );
        assert_eq!(err(params(&[("sample", "1s".into())])).key, "sample");
        assert_eq!(err(params(&[("loss", "lots".into())])).key, "loss");
        assert_eq!(err(params(&[("colour", "red".into())])).key, "colour");
        assert_eq!(err(Params::from_pairs([("cc", toml::Value::from("bbr"))])).key, "path");
        let ok = workload::plan(&Bulk, &params(&[("cc", "bbr".into()), ("loss", "1%".into())]));
        assert!(ok.unwrap().describe().contains("bbr"));
    }

    /// A short round on a clean emulated path (needs root, /dev/net/tun and iproute2: fails
    /// with the reason otherwise), held to what the emulator's own log says the link did.
    ///
    /// The link runs at its rate while its queue keeps it busy (its busiest 100 ms, within
    /// two 1500-byte packets) and never above it, on any host. The round's goodput is what
    /// the link delivered in the same window, less headers (the same count over the same
    /// sample times), within 1 % and the data between the link and the receiver's
    /// reads at the window's ends: after a loss the receiver reads nothing for up to a round
    /// trip (at most 20 ms base + the 20 ms buffer), plus the emulator's worst measured
    /// lateness and 5 ms of read lag. Filling the link also needs a host that gives the sender,
    /// the receiver and the emulator their share for the whole window: when the link carried
    /// at least 90 % of its rate, the sender was held back by its congestion window, not the
    /// receiver's, and the queue stayed within the one-BDP buffer (20 ms) plus what a loaded
    /// host adds to a sampled smoothed RTT.
    #[test]
    fn a_clean_path_is_filled() {
        let plan = workload::plan(
            &Bulk,
            &params(&[("cc", "cubic".into()), ("duration", "3s".into()), ("warmup", "1s".into())]),
        )
        .unwrap();
        let round = test_support::run_logged(plan.as_ref(), 3);
        let m = &round.m;
        let get = |k: &str| m.metrics[k];
        let goodput = get("goodput_mbps");
        assert!(goodput < 50.5, "{m:?}");
        assert!(get("rtt_p50_ms") >= 19.0, "a 20 ms path: {m:?}");
        let lateness = m.lateness.as_ref().expect("an emulated path reports its lateness");
        assert!(m.series.iter().any(|s| s.name == "goodput_mbps" && s.points.len() > 20));
        let busiest = round.busiest_mbps(100.0);
        assert!((busiest - 50.0).abs() <= 0.24, "the link at its busiest: {busiest:.3} Mbit/s");
        let payload = 50.0 * 1448.0 / 1500.0;
        let link = round.link_goodput_mbps(1.0 / 3.0, 1.0);
        let edge_s = 0.040 + lateness.max_us / 1e6 + 0.005;
        let slack = 0.01 * payload + 3.0 * payload * edge_s / 2.0;
        eprintln!(
            "goodput {goodput:.2} Mbit/s, the link delivered {link:.2} in the window (slack \
             {slack:.2}); busiest 100 ms {busiest:.2}; {m:?}"
        );
        assert!(link <= payload * 1.01, "the link delivered more than its rate: {link:.2}");
        assert!((goodput - link).abs() <= slack, "goodput {goodput:.2}, link {link:.2}: {m:?}");
        if link >= 0.9 * payload {
            assert!(get("rwnd_limited_pct") < 20.0, "{m:?}");
            assert!(get("rtt_p95_ms") < 100.0, "{m:?}");
        } else {
            eprintln!("the host left the link idle ({link:.2} Mbit/s): fill bounds not applied");
        }
    }
}
