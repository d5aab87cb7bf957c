//! The targets, checked on a [`SendqReport`], with the path's physical floor beside
//! each latency target.
//!
//! - At a 10 ms threshold (the poster's mode and the adaptive LOWAT), the median latency from
//!   send start is at least 70 % below "no control", read both ways the issue names: the
//!   autotuned buffer and a buffer that never blocks (the poster's "No Thresh"), with goodput
//!   at least 98 % of theirs.
//! - With drop-stale on, the median latency from the *scheduled* time is below
//!   `3 × RTT + one chunk's transmission time`, where no control stays above 100 ms.
//!
//! A target is never weakened here. When one fails and its latency lies below the floor that
//! no sender-side control can pass on this path, [`TargetCheck::out_of_reach`] says so with
//! the numbers: the chunk's own serialisation at the bottleneck, the one-way delay, and the
//! standing bottleneck queue the congestion control kept in that very run (median smoothed
//! RTT minus minimum RTT, sampled after every chunk).

use serde::{Deserialize, Serialize};

use super::{Cc, SendqReport};

/// The cut from send start the issue asks for, against either "no control".
pub const START_CUT: f64 = 0.70;
/// The goodput floor, relative to "no control".
pub const GOODPUT_FLOOR: f64 = 0.98;
/// "No control stays above" this median from the scheduled time, ms.
pub const NO_CONTROL_SCHED_MS: f64 = 100.0;

/// The controlled variants the start-latency and goodput targets are checked for.
pub const CONTROLLED: [&str; 2] = ["threshold-10ms", "adaptive-10ms"];
/// The baselines ("no control", both readings).
pub const BASELINES: [&str; 2] = ["no-control", "no-control-never-blocks"];

/// One target of the issue, checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetCheck {
    /// What is checked.
    pub name: String,
    /// The target, with the value it works out to.
    pub target: String,
    /// What was measured (medians over rounds).
    pub measured: String,
    /// Whether the target holds.
    pub pass: bool,
    /// For a failed latency target below the path's floor: why it is physically out of reach,
    /// with the numbers.
    pub out_of_reach: Option<String>,
}

impl SendqReport {
    /// The one chunk's transmission time at the main rate, ms.
    pub fn chunk_time_ms(&self) -> f64 {
        self.config.chunk_bytes as f64 * 8.0 / self.config.rate.0 as f64 * 1e3
    }

    /// `3 × RTT + one chunk's transmission time`, ms: the bound from the scheduled time.
    pub fn schedule_bound_ms(&self) -> f64 {
        3.0 * self.config.rtt.as_secs_f64() * 1e3 + self.chunk_time_ms()
    }

    /// The targets for `cc`, where the variants they need were run.
    pub fn targets(&self, cc: Cc) -> Vec<TargetCheck> {
        let cc_name = cc.name();
        let get = |rest: &str| self.variant(&format!("{cc_name}/{rest}"));
        let mut out = Vec::new();
        let tx = self.chunk_time_ms();
        let one_way = self.config.rtt.as_secs_f64() * 1e3 / 2.0;
        for name in CONTROLLED {
            let Some(c) = get(name) else { continue };
            for base_name in BASELINES {
                let Some(base) = get(base_name) else { continue };
                let (got, of) = (c.from_start_ms.p50, base.from_start_ms.p50);
                let cut = 1.0 - got / of;
                let target_ms = (1.0 - START_CUT) * of;
                let pass = cut >= START_CUT;
                let queue = c.standing_queue_ms();
                let floor = tx + one_way + queue;
                let out_of_reach = (!pass && target_ms < floor).then(|| {
                    format!(
                        "{target_ms:.1} ms is below the floor of any sender-side control here, \
                         {floor:.1} ms = the chunk's own serialisation {tx:.1} ms + one-way \
                         delay {one_way:.1} ms + the standing bottleneck queue {cc_name} kept, \
                         {queue:.1} ms (median srtt {:.1} - min_rtt {:.1})",
                        c.srtt_p50_ms, c.min_rtt_ms
                    )
                });
                out.push(TargetCheck {
                    name: format!(
                        "{cc_name}: {name} median send-start latency vs {base_name} ({:.0} % cut)",
                        START_CUT * 100.0
                    ),
                    target: format!(
                        ">= {:.0} % below {of:.1} ms, i.e. <= {target_ms:.1} ms",
                        START_CUT * 100.0
                    ),
                    measured: format!("{got:.1} ms: {:.0} % below", cut * 100.0),
                    pass,
                    out_of_reach,
                });
                let ratio = c.goodput_mbps / base.goodput_mbps;
                out.push(TargetCheck {
                    name: format!("{cc_name}: {name} goodput vs {base_name}"),
                    target: format!(
                        ">= {:.0} % of {:.2} Mbit/s",
                        GOODPUT_FLOOR * 100.0,
                        base.goodput_mbps
                    ),
                    measured: format!("{:.2} Mbit/s: {:.1} %", c.goodput_mbps, ratio * 100.0),
                    pass: ratio >= GOODPUT_FLOOR,
                    out_of_reach: None,
                });
            }
        }
        let bound = self.schedule_bound_ms();
        for name in CONTROLLED.map(|c| format!("{c}+fresh")) {
            let Some(fresh) = get(&name) else { continue };
            let got = fresh.from_schedule_ms.p50;
            out.push(TargetCheck {
                name: format!("{cc_name}: {name} median latency from schedule"),
                target: format!("< 3 RTT + chunk time = {bound:.1} ms"),
                measured: format!("{got:.1} ms"),
                pass: got < bound,
                out_of_reach: None,
            });
        }
        for base_name in BASELINES {
            let Some(base) = get(base_name) else { continue };
            let got = base.from_schedule_ms.p50;
            out.push(TargetCheck {
                name: format!("{cc_name}: {base_name} median latency from schedule"),
                target: format!("> {NO_CONTROL_SCHED_MS:.0} ms"),
                measured: format!("{got:.1} ms"),
                pass: got > NO_CONTROL_SCHED_MS,
                out_of_reach: None,
            });
        }
        out
    }
}
