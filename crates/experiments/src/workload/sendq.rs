//! The `sendq` workload: the SIGCOMM '24 poster's send-queue experiment (seed 003), one
//! sender configuration per variant, on an emulated path.
//!
//! The sender writes 51,200-byte chunks every 10 ms (41 Mbit/s offered into a 30 Mbit/s path,
//! so it is always behind) through `tcptail_sendq`'s governor; the receiver stamps each
//! chunk's completion on the same clock. The engine is [`experiment::run_variant`] (the code
//! behind `tcptail sendq`, which also runs the poster's whole variant set and sweep); this
//! module only maps parameters and metrics.
//!
//! | key | values | default |
//! |---|---|---|
//! | `control` | `no-control`, `never-blocks`, `lowat:16KB`, `threshold:10ms`, `adaptive:10ms` | `no-control` |
//! | `fresh` | conflation and drop-stale in front of the socket | `false` |
//! | `cc` | `cubic`, `bbr` | `cubic` |
//! | `chunks` | chunks per round | 100 |
//! | `chunk` | bytes per chunk | `51200B` |
//! | `interval` | time between chunks | `10ms` |
//! | `max_age` | age past which `fresh` drops a chunk | 2 × `interval` |
//! | path keys | `path = "emulated"` (required), `rate`, `rtt`, `buffer`, ... | |
//!
//! Metrics: latency from send start (`start_p50_ms` ... `start_max_ms`: from the moment the
//! application hands the chunk to the send path, before any wait of the wrapper or the kernel,
//! alike for every variant) and from the chunk's scheduled time (`sched_p50_ms` ...),
//! `goodput_mbps`, `merged_dropped_pct`, `blocked_pct` (share of the sending time, from the
//! first chunk's schedule to the last write, the writer spent waiting, for the bound or inside
//! a write the kernel blocked), `queue_ms` (the standing
//! bottleneck queue: median smoothed RTT minus minimum RTT of the sending socket) and
//! `sched_bound_ms` = 3 × RTT + one chunk's transmission time, the bound for the fresh
//! variants.

use std::time::Duration;

use tcptail_report::Series;
use tcptail_sendq::governor::GovernorMode;
use tcptail_units::BitRate;

use crate::params::{ParamError, Params};
use crate::path::{PathPlan, PathShape};
use crate::round::{Measurement, RoundContext, RunError};
use crate::workload::{VariantPlan, Workload};

pub mod experiment;

use experiment::{Cc, Control, SendqConfig, Variant, run_variant};

/// The `sendq` engine.
pub struct SendQueue;

struct Plan {
    path: PathPlan,
    config: SendqConfig,
    variant: Variant,
}

fn parse_control(text: &str) -> Result<Control, String> {
    let (kind, arg) = text.split_once(':').map_or((text, None), |(k, a)| (k, Some(a.trim())));
    let duration = |a: Option<&str>| -> Result<Duration, String> {
        let a = a.ok_or_else(|| format!("`{kind}` needs a time, e.g. `{kind}:10ms`"))?;
        tcptail_units::parse_duration(a).map_err(|e| e.to_string())
    };
    match kind.trim() {
        "no-control" if arg.is_none() => Ok(Control::Governed(GovernorMode::NoControl)),
        "never-blocks" if arg.is_none() => Ok(Control::NeverBlocks),
        "lowat" => {
            let a = arg.ok_or("`lowat` needs a size, e.g. `lowat:16KB`")?;
            let bytes = a.parse::<tcptail_units::ByteSize>().map_err(|e| e.to_string())?.bytes();
            let bytes = u32::try_from(bytes).map_err(|_| format!("{a} is too large"))?;
            Ok(Control::Governed(GovernorMode::StaticLowat(bytes)))
        }
        "threshold" => Ok(Control::Governed(GovernorMode::Threshold(duration(arg)?))),
        "adaptive" => Ok(Control::Governed(GovernorMode::AdaptiveLowat(duration(arg)?))),
        _ => Err(format!(
            "`{text}`: expected no-control, never-blocks, lowat:SIZE, threshold:TIME or adaptive:TIME"
        )),
    }
}

impl Workload for SendQueue {
    fn name(&self) -> &'static str {
        "sendq"
    }

    fn plan(&self, params: &Params) -> Result<Box<dyn VariantPlan>, ParamError> {
        let control = params
            .parsed("control", parse_control)?
            .unwrap_or(Control::Governed(GovernorMode::NoControl));
        let fresh = params.bool("fresh")?.unwrap_or(false);
        let cc = match params.choice("cc", &["cubic", "bbr"])?.as_deref() {
            Some("bbr") => Cc::Bbr,
            _ => Cc::Cubic,
        };
        let chunks = params.uint("chunks", 1_000_000)?.unwrap_or(100);
        let chunk_bytes = params.bytes("chunk")?.unwrap_or(51_200);
        let interval = params.duration("interval")?.unwrap_or(Duration::from_millis(10));
        let max_age = params.duration("max_age")?.unwrap_or(interval * 2);
        let path = PathPlan::from_params(params)?;
        let PathShape::Emulated(spec) = &path.kind else {
            return Err(ParamError::new("path", "the sendq workload needs path = \"emulated\""));
        };
        let config = SendqConfig {
            rate: spec.up.rate.mean(),
            rtt: path.rtt(),
            chunk_bytes: usize::try_from(chunk_bytes)
                .map_err(|_| ParamError::new("chunk", "too large"))?,
            interval,
            chunks: usize::try_from(chunks).unwrap_or(usize::MAX),
            // The lab runner repeats rounds itself.
            rounds: 1,
            max_age,
            variants: Vec::new(),
            sweep_rates: Vec::new(),
            sweep_variants: Vec::new(),
            seed: 1,
        };
        if chunks < 10 {
            return Err(ParamError::new("chunks", "at least 10 chunks make a distribution"));
        }
        if chunk_bytes > 64 << 20 {
            return Err(ParamError::new("chunk", "at most 64 MB"));
        }
        config.validate().map_err(|e| ParamError::new("chunk", e.to_string()))?;
        let variant = Variant::new(control, fresh, cc);
        Ok(Box::new(Plan { path, config, variant }))
    }
}

impl VariantPlan for Plan {
    fn run(&self, ctx: &RoundContext<'_>) -> Result<Measurement, RunError> {
        let mut config = self.config.clone();
        config.seed = ctx.seed;
        let (r, lateness) = self.path.round(ctx, |live| {
            run_variant(live, &config, &self.variant)
                .map_err(|e| RunError::failed(format!("sendq {}", self.variant.name), e))
        })?;

        let mut m = Measurement { lateness, ..Measurement::default() };
        let (s, d) = (r.from_start_ms, r.from_schedule_ms);
        for (prefix, summary) in [("start", s), ("sched", d)] {
            m.metric(&format!("{prefix}_p50_ms"), summary.p50)
                .metric(&format!("{prefix}_p90_ms"), summary.p90)
                .metric(&format!("{prefix}_p99_ms"), summary.p99)
                .metric(&format!("{prefix}_max_ms"), summary.max);
        }
        let transmission = BitRate(config.rate.0).transmission_time(config.chunk_bytes as u64);
        m.metric("goodput_mbps", r.goodput_mbps)
            .metric("merged_dropped_pct", r.fraction_merged_or_dropped * 100.0)
            .metric("delivered_count", r.chunks_delivered as f64)
            .metric("blocked_pct", 100.0 * r.sender.time_blocked.as_secs_f64() * 1e3 / r.sending_ms)
            .metric("sched_bound_ms", (3 * config.rtt + transmission).as_secs_f64() * 1e3);
        // Absent (not zero) when the kernel gave no RTT samples; the round then fails for
        // missing a declared metric.
        let queue = r.srtt_p50_ms - r.min_rtt_ms;
        if queue.is_finite() {
            m.metric("queue_ms", queue.max(0.0));
        }
        m.series.push(Series::cdf("start_ms", &mut r.from_start_samples()));
        m.series.push(Series::cdf("sched_ms", &mut r.from_schedule_samples()));
        if r.sender.lowat_unsupported {
            m.notes.push("TCP_NOTSENT_LOWAT was refused: writes were not controlled".into());
        }
        Ok(m)
    }

    fn metrics(&self) -> Vec<String> {
        // `queue_ms` too: a round whose sender saw no RTT sample at all measured nothing.
        let latency = ["start", "sched"]
            .into_iter()
            .flat_map(|view| ["p50", "p90", "p99", "max"].map(move |q| format!("{view}_{q}_ms")));
        let totals = [
            "goodput_mbps",
            "merged_dropped_pct",
            "delivered_count",
            "blocked_pct",
            "sched_bound_ms",
            "queue_ms",
        ];
        latency.chain(totals.map(String::from)).collect()
    }

    fn planned(&self) -> Duration {
        // The chunks' schedule, or the link's time for all of them when it cannot keep up
        // (an unbounded queue drains after the last write), and a round trip to finish.
        let c = &self.config;
        let schedule = c.interval * u32::try_from(c.chunks).unwrap_or(u32::MAX);
        let bytes = c.chunk_bytes as u64 * c.chunks as u64;
        schedule.max(BitRate(c.rate.0).transmission_time(bytes)) + c.rtt * 2
    }

    fn describe(&self) -> String {
        format!(
            "{}; {} chunks of {} B every {} ms ({:.0} Mbit/s offered)",
            self.path.describe(),
            self.config.chunks,
            self.config.chunk_bytes,
            self.config.interval.as_millis(),
            self.config.chunk_bytes as f64 * 8.0 / self.config.interval.as_secs_f64() / 1e6
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{self, test_support};

    fn params(pairs: &[(&str, toml::Value)]) -> Params {
        test_support::emulated("30mbit", "10ms", pairs)
    }

    #[test]
    fn controls_parse() {
        assert_eq!(
            parse_control("threshold:10ms"),
            Ok(Control::Governed(GovernorMode::Threshold(Duration::from_millis(10))))
        );
        assert_eq!(
            parse_control("lowat:16KB"),
            Ok(Control::Governed(GovernorMode::StaticLowat(16_000)))
        );
        assert_eq!(parse_control("never-blocks"), Ok(Control::NeverBlocks));
        assert!(parse_control("threshold").unwrap_err().contains("needs a time"));
        assert!(parse_control("no-control:5ms").is_err());
        assert!(parse_control("pid").unwrap_err().contains("expected"));
    }

    #[test]
    fn bad_parameters_are_named() {
        let err = |p: Params| workload::plan(&SendQueue, &p).err().expect("refused");
        assert_eq!(err(params(&[("control", "fast".into())])).key, "control");
        assert_eq!(err(params(&[("cc", "reno".into())])).key, "cc");
        assert_eq!(err(params(&[("chunks", 3.into())])).key, "chunks");
        assert_eq!(err(params(&[("colour", "red".into())])).key, "colour");
        let veth = Params::from_pairs([("control", toml::Value::from("no-control"))]);
        assert_eq!(err(veth).key, "path");
        assert!(workload::plan(&SendQueue, &params(&[("fresh", true.into())])).is_ok());
    }

    #[test]
    fn a_round_is_planned_as_the_schedule_or_the_links_time_for_every_chunk() {
        let planned = |chunks: i64| {
            let p = params(&[("chunks", chunks.into())]);
            workload::plan(&SendQueue, &p).expect("plans").planned()
        };
        // 50 chunks of 51,200 B every 10 ms offer 41 Mbit/s to a 30 Mbit/s link: the link
        // needs 683 ms for them, more than the 500 ms schedule; a 20 ms RTT x 2 to finish.
        let link_50 = 50.0 * 51_200.0 * 8.0 / 30e6;
        assert!((planned(50).as_secs_f64() - (link_50 + 0.02)).abs() < 1e-3, "{:?}", planned(50));
        assert!((planned(100).as_secs_f64() - (2.0 * link_50 + 0.02)).abs() < 1e-3);
        // A slow schedule is its own length.
        let p = params(&[("chunks", 20.into()), ("interval", "100ms".into())]);
        let slow = workload::plan(&SendQueue, &p).expect("plans").planned();
        assert_eq!(slow, Duration::from_millis(2000 + 20));
    }

    /// One short round on a real emulated path (needs root: fails with the reason otherwise).
    ///
    /// Goodput is the delivered bytes over the time from the first chunk's schedule to the
    /// last completion, held to what the emulator's log says the link did, not to this host's
    /// speed: that time covers the link's first to last data departure (no byte leaves before
    /// its chunk's schedule, none completes before it left the link), and exceeds it by at
    /// most the first chunk's wait for the link (within `sched_max_ms`) plus the last packet's
    /// 5 ms one-way delay, the emulator's worst lateness and 5 ms of read lag.
    #[test]
    fn a_round_measures_chunk_latency() {
        let plan = workload::plan(
            &SendQueue,
            &params(&[("control", "threshold:10ms".into()), ("chunks", 30.into())]),
        )
        .unwrap();
        let round = test_support::run_logged(plan.as_ref(), 7);
        let m = &round.m;
        let get = |k: &str| m.metrics[k];
        assert!(get("start_p50_ms") > 0.0 && get("start_p50_ms") <= get("start_p99_ms"), "{m:?}");
        let goodput = get("goodput_mbps");
        assert!(goodput > 0.0 && goodput < 30.0 * 1448.0 / 1500.0 * 1.01, "{m:?}");
        let bits = get("delivered_count") * 51_200.0 * 8.0;
        let (first, last) = round.data_span_ms();
        let lateness = m.lateness.as_ref().expect("an emulated path reports its lateness");
        let longest = last - first + get("sched_max_ms") + 10.0 + lateness.max_us / 1e3;
        let (most, least) = (bits / (last - first) / 1e3, bits / longest / 1e3);
        eprintln!("goodput {goodput:.2} Mbit/s; from the link's data span: {least:.2}..{most:.2}");
        assert!(goodput <= most * 1.002 && goodput >= least * 0.998, "{m:?}");
        assert!((get("sched_bound_ms") - (30.0 + 13.65)).abs() < 0.1, "{m:?}");
        assert!(get("queue_ms") >= 0.0 && get("queue_ms") < 50.0, "{m:?}");
        let blocked = get("blocked_pct");
        assert!(blocked > 0.0 && blocked <= 100.0, "threshold 10 ms waits on this path: {m:?}");
        assert!(m.lateness.is_some());
        assert_eq!(m.series.len(), 2);
    }
}
