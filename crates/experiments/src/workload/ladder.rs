//! The `tuning-ladder` workload: closed-loop request/response (netperf `TCP_RR` style) on one
//! rung of the seed's tuning ladder per variant, one short run per round, so that the
//! runner's spread over rounds *is* the run-to-run jitter the seed is about.
//!
//! | `rung =` | what it sets |
//! |---|---|
//! | `baseline` | nothing: both ends free to run anywhere |
//! | `split-cpus` | client and server pinned to different CPUs (the seed's "CPU affinity" with the NIC's CPU out of reach: a veth has no IRQ to pin) |
//! | `same-cpu` | client and server pinned to the same CPU |
//! | `busy-poll` | `same-cpu` plus `SO_BUSY_POLL` (`busy_poll`, default 50 µs) at both ends |
//! | `spin` | application polling: non-blocking sockets spun on at both ends, one CPU each |
//!
//! Other keys: the path keys ([`crate::path`], default veth), `size` (frames, default 64 B),
//! `duration` (default 1 s: one "run"), `warmup` (default 200 ms), `cpu` (the server's CPU).
//! Metrics per run: `min_us`, `mean_us`, `p50_us`, `p99_us`, `p999_us`, `max_us`,
//! `tx_per_s`, `samples_count`. Series: `latency_us`.
//!
//! The rungs the seed also climbs and this machine cannot (interrupt affinity: a veth pair
//! raises no device interrupt; `isolcpus`: a boot parameter) are the experiment file's notes,
//! not rungs that would silently measure the same thing twice.

use std::time::Duration;

use tcptail_bench::client::Load;
use tcptail_sock::Profile;

use super::rr::durations;
use super::rr::placement::Placement;
use super::rr::round::RoundSpec;
use crate::params::{ParamError, Params, required};
use crate::path::PathPlan;
use crate::workload::{Measurement, RoundContext, RunError, VariantPlan, Workload};

/// The rungs, in ladder order.
pub const RUNGS: [&str; 5] = ["baseline", "split-cpus", "same-cpu", "busy-poll", "spin"];

/// The `tuning-ladder` engine.
pub struct TuningLadder;

/// A checked rung.
struct Plan {
    rung: String,
    spec: RoundSpec,
}

impl Workload for TuningLadder {
    fn name(&self) -> &'static str {
        "tuning-ladder"
    }

    fn plan(&self, params: &Params) -> Result<Box<dyn VariantPlan>, ParamError> {
        let path = PathPlan::from_params(params)?;
        let rung = required("rung", params.choice("rung", &RUNGS)?)?;
        let busy_poll = params.duration("busy_poll")?;
        if busy_poll.is_some() && rung != "busy-poll" {
            return Err(ParamError::new("busy_poll", "only on rung = \"busy-poll\""));
        }
        let (duration, warmup) =
            durations(params, Duration::from_secs(1), Duration::from_millis(200))?;
        let (request_len, reply_len) = super::rr::frame_sizes(params, 64)?;
        let placement_kind = match rung.as_str() {
            "baseline" => "free",
            "split-cpus" | "spin" => "split",
            _ => "same-cpu",
        };
        // `placement` is the rung's business here: reading it only to refuse it keeps a
        // stray `placement` key from being silently overridden.
        if params.has("placement") {
            return Err(ParamError::new("placement", "set by `rung` in this workload"));
        }
        let cpu = params.uint("cpu", 4095)?.map(|c| c as usize);
        let placement = Placement::resolve(placement_kind, cpu)?;
        let mut profile = Profile::named(format!("ladder-{rung}"));
        profile.nodelay = Some(true);
        if rung == "busy-poll" {
            profile.busy_poll = Some(busy_poll.unwrap_or(Duration::from_micros(50)));
            profile.validate().map_err(|e| ParamError::new("busy_poll", e.reason))?;
        }
        let spec = RoundSpec {
            path,
            profile,
            load: Load::Closed,
            duration,
            warmup,
            request_len,
            reply_len,
            placement,
            spin: rung == "spin",
            competing_flows: 0,
        };
        Ok(Box::new(Plan { rung, spec }))
    }
}

impl VariantPlan for Plan {
    fn run(&self, ctx: &RoundContext<'_>) -> Result<Measurement, RunError> {
        let mut m = self.spec.measure(ctx)?;
        // Keep what the ladder compares: the shared round code's retransmission and BBR
        // phase counters (the namespace default may be BBR) say nothing on an unshaped veth.
        m.metrics.retain(|k, _| !["retrans", "slow_", "all_"].iter().any(|p| k.starts_with(p)));
        if self.rung == "busy-poll" {
            m.notes.push(
                "SO_BUSY_POLL polls the NIC queue (NAPI) a socket's packets arrived on; a veth \
                 pair delivers through the per-CPU backlog and gives sockets no NAPI id, so \
                 the option is accepted but has nothing to poll: compare with same-cpu"
                    .into(),
            );
        }
        Ok(m)
    }

    fn describe(&self) -> String {
        let s = &self.spec;
        let mut d = format!(
            "{}; closed loop, {} B requests; rung {}: {}",
            s.path.describe(),
            s.request_len,
            self.rung,
            s.placement.describe()
        );
        if let Some(bp) = s.profile.busy_poll {
            d.push_str(&format!(", SO_BUSY_POLL {} µs", bp.as_micros()));
        }
        if s.spin {
            d.push_str(", both ends spin on non-blocking sockets");
        }
        d
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload;
    use crate::workload::rr::tests::assert_sane;
    use crate::workload::test_support::run_once;

    fn params(pairs: &[(&str, toml::Value)]) -> Params {
        Params::from_pairs(pairs.iter().cloned())
    }

    fn refused(pairs: &[(&str, toml::Value)]) -> ParamError {
        workload::plan(&TuningLadder, &params(pairs)).err().expect("refused")
    }

    #[test]
    fn bad_parameters_are_named_by_key() {
        assert_eq!(refused(&[]).key, "rung");
        assert_eq!(refused(&[("rung", "isolcpus".into())]).key, "rung");
        let bp = [("rung", "spin".into()), ("busy_poll", "50us".into())];
        assert_eq!(refused(&bp).key, "busy_poll");
        let bp = [("rung", "busy-poll".into()), ("busy_poll", "1h".into())];
        assert_eq!(refused(&bp).key, "busy_poll");
        assert_eq!(refused(&[("rung", "baseline".into()), ("cpu", 0.into())]).key, "cpu");
        assert_eq!(refused(&[("rung", "same-cpu".into()), ("cpu", 4000.into())]).key, "cpu");
        let pl = [("rung", "same-cpu".into()), ("placement", "free".into())];
        assert_eq!(refused(&pl).key, "placement");
        assert_eq!(refused(&[("rung", "spin".into()), ("duration", "1ms".into())]).key, "duration");
        assert_eq!(refused(&[("rung", "spin".into()), ("spin", true.into())]).key, "spin");
    }

    #[test]
    fn rungs_set_what_they_name() {
        let d = |rung: &str| {
            workload::plan(&TuningLadder, &params(&[("rung", rung.into())])).unwrap().describe()
        };
        assert!(d("baseline").contains("not pinned"));
        assert!(d("same-cpu").contains("same CPU"));
        assert!(d("busy-poll").contains("SO_BUSY_POLL 50 µs"));
        assert!(d("spin").contains("spin"));
    }

    /// One short run of every rung on a real veth pair.
    #[test]
    fn every_rung_runs_on_veth() {
        for rung in RUNGS {
            let p = params(&[
                ("rung", rung.into()),
                ("duration", "200ms".into()),
                ("warmup", "50ms".into()),
            ]);
            let m = run_once(workload::plan(&TuningLadder, &p).unwrap().as_ref(), 3);
            assert_sane(&m);
            assert!(m.metrics["min_us"] <= m.metrics["mean_us"], "{rung}: {:?}", m.metrics);
        }
    }
}
