//! The `request-response` workload: the benchmark engine of `tcptail bench` (closed or open
//! loop, per-socket congestion control, CPU placement, spin) on one lab path per round,
//! optionally sharing the path with competing bulk flows.
//!
//! | key | meaning | default |
//! |---|---|---|
//! | `path`, `rate`, `rtt`, `loss`, `buffer`, `queue`, `sysctl` | the path ([`crate::path`]) | veth |
//! | `cc` | `cubic`, `bbr` or `reno`, set with `TCP_CONGESTION` at both ends | namespace default |
//! | `load` | `closed` (back to back) or `open` (fixed rate) | `closed` |
//! | `request_rate` | open loop: requests per second | required when open |
//! | `spacing` | open loop: `constant` or `poisson` | `constant` |
//! | `size`, `response_size` | frame sizes, header included | `64B`, `size` |
//! | `duration`, `warmup` | measured part, unmeasured warm-up | `3s`, `300ms` |
//! | `nodelay`, `quickack`, `busy_poll` | socket options at both ends | `true`, `off`, unset |
//! | `spin` | busy-poll non-blocking sockets at both ends | `false` |
//! | `placement`, `cpu` | `same-cpu`, `split` or `free`; the server's CPU | `same-cpu`, last CPU |
//! | `competing_flows` | bulk TCP flows client → server with the same `cc`, started first | 0 |
//!
//! Metrics: `p50_us` ... `p999_us`, `max_us`, `min_us`, `mean_us` (latency from the actual
//! send: see [`round`]), `tx_per_s`, `samples_count`, `retrans_count`; open loop adds
//! `sched_*_us` (from the scheduled send time) and `send_late_p99_us`; competing flows add
//! `competing_mbps`; BBR adds `slow_<phase>_pct` and `all_<phase>_pct` (and both for
//! `probe_bw`, its three sub-phases together). Series: `latency_us`
//! (and `sched_latency_us` in open loop).

pub mod placement;
pub mod round;

use std::time::Duration;

use tcptail_bench::config::{BenchConfig, Load};
use tcptail_bench::pacer::Spacing;
use tcptail_sock::{Profile, QuickAck};

use crate::params::{ParamError, Params};
use crate::path::PathPlan;
use crate::round::{Measurement, RoundContext, RunError};
use crate::workload::{VariantPlan, Workload};
use placement::Placement;
use round::RoundSpec;

/// The `request-response` engine.
pub struct RequestResponse;

/// A checked `request-response` variant.
struct Plan {
    spec: RoundSpec,
}

/// Reads `size` and `response_size` and checks them against the bench frame limits.
pub(crate) fn frame_sizes(params: &Params, default: u64) -> Result<(u32, u32), ParamError> {
    let limits = tcptail_bench::wire::HEADER_LEN as u64..=tcptail_bench::wire::MAX_FRAME_LEN as u64;
    let mut sizes = [0u32; 2];
    let request = params.bytes("size")?.unwrap_or(default);
    let response = params.bytes("response_size")?.unwrap_or(request);
    for (slot, (key, v)) in sizes.iter_mut().zip([("size", request), ("response_size", response)]) {
        if !limits.contains(&v) {
            return Err(ParamError::new(
                key,
                format!(
                    "{v} B is outside {}..={} B (the frame header alone is {} B)",
                    limits.start(),
                    limits.end(),
                    limits.start()
                ),
            ));
        }
        *slot = v as u32;
    }
    Ok((sizes[0], sizes[1]))
}

/// Reads `duration` and `warmup` with defaults; the measured part must not be empty.
pub(crate) fn durations(
    params: &Params,
    duration: Duration,
    warmup: Duration,
) -> Result<(Duration, Duration), ParamError> {
    let d = params.duration("duration")?.unwrap_or(duration);
    if d < Duration::from_millis(100) || d > Duration::from_secs(3600) {
        return Err(ParamError::new("duration", "must be between 100ms and 1h"));
    }
    let w = params.duration("warmup")?.unwrap_or(warmup);
    if w > Duration::from_secs(60) {
        return Err(ParamError::new("warmup", "at most 60s"));
    }
    Ok((d, w))
}

impl Workload for RequestResponse {
    fn name(&self) -> &'static str {
        "request-response"
    }

    fn plan(&self, params: &Params) -> Result<Box<dyn VariantPlan>, ParamError> {
        let path = PathPlan::from_params(params)?;
        let cc = params.choice("cc", &["cubic", "bbr", "reno"])?;
        let open = params.choice("load", &["closed", "open"])?.as_deref() == Some("open");
        let rate = params.uint("request_rate", 1_000_000)?;
        let spacing = params
            .parsed("spacing", |s| s.parse::<Spacing>().map_err(|e| e.to_string()))?
            .unwrap_or_default();
        let load = match (open, rate) {
            (true, Some(r)) if r > 0 => Load::Open { rate: r as f64, spacing },
            (true, _) => {
                return Err(ParamError::new("request_rate", "open loop needs a positive rate"));
            }
            (false, Some(_)) => {
                return Err(ParamError::new("request_rate", "only with load = \"open\""));
            }
            (false, None) if params.has("spacing") => {
                return Err(ParamError::new("spacing", "only with load = \"open\""));
            }
            (false, None) => Load::Closed,
        };
        let (request_len, reply_len) = frame_sizes(params, 64)?;
        let (duration, warmup) =
            durations(params, Duration::from_secs(3), Duration::from_millis(300))?;
        let mut profile = Profile::named("lab");
        profile.congestion = cc;
        profile.nodelay = Some(params.bool("nodelay")?.unwrap_or(true));
        profile.quickack =
            params.parsed("quickack", |s| s.parse::<QuickAck>())?.unwrap_or(QuickAck::Off);
        profile.busy_poll = params.duration("busy_poll")?;
        profile.validate().map_err(|e| ParamError::new(e.key, e.reason))?;
        let spin = params.bool("spin")?.unwrap_or(false);
        let placement = Placement::from_params(params, "same-cpu")?;
        if spin && matches!(placement, Placement::SameCpu(_)) {
            return Err(ParamError::new(
                "spin",
                "two spinning ends on one CPU starve each other: use placement = \"split\"",
            ));
        }
        let competing_flows = params.uint("competing_flows", 16)?.unwrap_or(0) as usize;
        let spec = RoundSpec {
            path,
            profile,
            load,
            duration,
            warmup,
            request_len,
            reply_len,
            placement,
            spin,
            competing_flows,
            engine: tcptail_bench::config::Engine::Default,
        };
        // The bench's own checks, before any namespace exists.
        let mut check = BenchConfig::new(([127, 0, 0, 1], 1).into(), spec.profile.clone());
        check.load = spec.load;
        check.validate().map_err(|e| ParamError::new("request_rate", e.to_string()))?;
        Ok(Box::new(Plan { spec }))
    }
}

impl VariantPlan for Plan {
    fn run(&self, ctx: &RoundContext<'_>) -> Result<Measurement, RunError> {
        self.spec.measure(ctx)
    }

    fn metrics(&self) -> Vec<String> {
        self.spec.metrics()
    }

    fn planned(&self) -> Duration {
        let lead =
            if self.spec.competing_flows > 0 { round::COMPETING_LEAD } else { Duration::ZERO };
        lead + self.spec.warmup + self.spec.duration
    }

    fn describe(&self) -> String {
        let s = &self.spec;
        let load = match s.load {
            Load::Closed => "closed loop".to_owned(),
            Load::Open { rate, spacing } => format!("open loop {rate:.0}/s ({spacing:?} spacing)"),
        };
        let mut parts = vec![
            s.path.describe(),
            format!("{load}, {} B requests, {} B responses", s.request_len, s.reply_len),
            format!("cc {}", s.profile.congestion.as_deref().unwrap_or("default")),
            s.placement.describe(),
        ];
        if s.spin {
            parts.push("both ends spin".into());
        }
        if let Some(d) = s.profile.busy_poll {
            parts.push(format!("SO_BUSY_POLL {} µs", d.as_micros()));
        }
        if s.competing_flows > 0 {
            parts.push(format!("{} competing bulk flow(s) client → server", s.competing_flows));
        }
        parts.join("; ")
    }
}

#[cfg(test)]
pub(crate) mod tests;
