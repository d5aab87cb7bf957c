//! The `link-downgrade` workload: one bulk flow across an emulated path whose rate steps down
//! mid-flow (a `rate=` path event), measuring queueing delay, loss and how long the sender
//! takes to settle after the step, and evaluating an alert rule on the BBR bandwidth estimate
//! the exporter publishes with `promtool` (the `link-downgrade` experiment, seed 002).
//!
//! | key | values | default |
//! |---|---|---|
//! | `cc` | `cubic`, `bbr`, `reno` | `cubic` |
//! | `duration` | sending time per round | `30s` |
//! | `warmup` | time before the step excluded from the pre-step figures | `2s` |
//! | `sample` | `tcp_info` sampling interval | `10ms` |
//! | `alert_time_scale` | run seconds to series time for the alert rules (60: 1 s is 1 min) | 60 |
//! | path keys | `path = "emulated"` (required), `rate`, `rtt`, `buffer`, `queue`, `sysctl`, and exactly one `event` that is `T:rate=R` | |
//!
//! A step to the path's own rate is a no-step control with the same arithmetic.
//!
//! Metrics, with the step at the event's time on the flow's clock: `pre_goodput_mbps` (from
//! `warmup` to the step), `post_goodput_mbps` (each the bytes read over its side of the step
//! divided by its length, never above that side's rate: see [`flows::goodput_between`] and
//! [`flows::held_to_link`]), `post_rtt_p95_ms`, `post_queue_p95_ms` (that RTT
//! less the base RTT) and `post_retrans_pct` (bytes retransmitted over bytes sent), all from
//! the step to the end; `pacing_settle_s`, the time from the step until the sender's pacing
//! rate is first at most 1.25x the new rate (BBR's highest pacing gain); `rtt_settle_s`, the
//! time from the step until the smoothed RTT is back at or below 1.25x its pre-step p95, or
//! 2.2x the base RTT if that is more (a queue of one BDP, BBR's cwnd gain of 2, plus 10 %),
//! for the rest of the round; both are censored at the end of the round (the round's remaining time, with a note) when
//! that never happens. For BBR also `bw_settle_s` (the same for BBR's bandwidth estimate) and,
//! when `promtool` is installed, `seed_alert_fired` and `fixed_alert_fired` (1 when the rule
//! fired at some evaluation after the step) and `seed_alert_early` and `fixed_alert_early` (1
//! when it fired before the step: a false alarm).
//!
//! The alert rules run on the series the exporter would have published for this connection
//! (`tcptail_connection_bbr_bandwidth_bytes_per_second`: the `tcp_bbr_info` bandwidth read
//! through `TCP_CC_INFO`, the struct the exporter reads through sock_diag), one point per
//! 100 ms, time-scaled by `alert_time_scale` so the rules' 5 min, 1 h and 10 min windows fit in
//! a round. The seed's rule (its metric renamed to the exporter's):
//! `rate(m[5m]) < 0.5 * avg_over_time(m[1h])` for 10 min; `rate()` is for counters and treats
//! every dip of a gauge as a counter reset. The corrected rule compares averages:
//! `avg_over_time(m[5m]) < 0.5 * avg_over_time(m[1h])` for 10 min. Series: `goodput_mbps`,
//! `rtt_ms`, `pacing_mbps` and (BBR) `bbr_bw_mbps`.

use std::fmt::Write as _;
use std::os::fd::AsFd;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use tcptail_emu::PathChange;
use tcptail_report::Series;
use tcptail_units::BitRate;

use crate::params::{ParamError, Params};
use crate::path::PathPlan;
use crate::round::{Measurement, RoundContext, RunError};
use crate::workload::flows::{self, BulkFlows, Sample};
use crate::workload::{VariantPlan, Workload};

/// The `link-downgrade` engine.
pub struct LinkDowngrade;

/// Where `promtool` is looked for first; then `PATH`.
const PROMTOOL: &str = "/usr/bin/promtool";

/// The exporter's name for BBR's bandwidth estimate (crates/diag/src/metrics/families.rs).
const BW_METRIC: &str = "tcptail_connection_bbr_bandwidth_bytes_per_second";

/// The highest pacing gain BBR uses in steady state (ProbeBW's probing phase).
const SETTLED: f64 = 1.25;

/// A checked `link-downgrade` variant.
#[derive(Debug)]
struct Plan {
    path: PathPlan,
    cc: String,
    duration: Duration,
    warmup: Duration,
    sample: Duration,
    time_scale: u32,
    /// When the rate steps, on the emulator's clock, and to what.
    step_at: Duration,
    new_rate: BitRate,
    promtool: Option<String>,
}

impl Workload for LinkDowngrade {
    fn name(&self) -> &'static str {
        "link-downgrade"
    }

    fn plan(&self, params: &Params) -> Result<Box<dyn VariantPlan>, ParamError> {
        let cc = flows::cc_param(params)?;
        let duration = params.duration("duration")?.unwrap_or(Duration::from_secs(30));
        let warmup = params.duration("warmup")?.unwrap_or(Duration::from_secs(2));
        let sample = params.duration("sample")?.unwrap_or(Duration::from_millis(10));
        if sample < Duration::from_millis(1) || sample > Duration::from_millis(100) {
            return Err(ParamError::new("sample", "between 1ms and 100ms"));
        }
        let time_scale = params.uint("alert_time_scale", 3600)?.unwrap_or(60) as u32;
        if time_scale == 0 {
            return Err(ParamError::new("alert_time_scale", "at least 1"));
        }
        let path = PathPlan::emulated_from_params(params, "link-downgrade")?;
        let steps: Vec<_> = path
            .events
            .iter()
            .filter_map(|e| match e.change {
                PathChange::Rate(r) => Some((e.at, r)),
                _ => None,
            })
            .collect();
        let [(step_at, new_rate)] = steps[..] else {
            return Err(ParamError::new(
                "event",
                "the link-downgrade workload needs exactly one rate step (event = [\"10s:rate=20mbit\"])",
            ));
        };
        if step_at < warmup + Duration::from_millis(500) {
            return Err(ParamError::new(
                "event",
                "the step must come at least 500ms after the warm-up, to measure before it",
            ));
        }
        if step_at + Duration::from_secs(1) > duration {
            return Err(ParamError::new(
                "duration",
                "must run at least 1s past the rate step, to measure after it",
            ));
        }
        let promtool = (cc == "bbr").then(find_promtool).flatten();
        Ok(Box::new(Plan {
            path,
            cc,
            duration,
            warmup,
            sample,
            time_scale,
            step_at,
            new_rate,
            promtool,
        }))
    }
}

/// `promtool`, if installed.
fn find_promtool() -> Option<String> {
    if Path::new(PROMTOOL).exists() {
        return Some(PROMTOOL.to_owned());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("promtool"))
        .find(|p| p.exists())
        .map(|p| p.to_string_lossy().into_owned())
}

/// What the sampler reads beyond [`Sample`]: flow 0's pacing rate and BBR estimate, bit/s.
#[derive(Debug, Clone, Copy)]
struct Rates {
    pacing_bps: f64,
    bbr_bw_bps: Option<f64>,
}

impl VariantPlan for Plan {
    fn metrics(&self) -> Vec<String> {
        let mut names = vec![
            "pre_goodput_mbps",
            "post_goodput_mbps",
            "post_rtt_p95_ms",
            "post_queue_p95_ms",
            "post_retrans_pct",
            "pacing_settle_s",
            "rtt_settle_s",
        ];
        if self.cc == "bbr" {
            names.push("bw_settle_s");
        }
        if self.promtool.is_some() {
            names.extend([
                "seed_alert_fired",
                "fixed_alert_fired",
                "seed_alert_early",
                "fixed_alert_early",
            ]);
        }
        names.into_iter().map(str::to_owned).collect()
    }

    fn run(&self, ctx: &RoundContext<'_>) -> Result<Measurement, RunError> {
        let (run, lateness) = self.path.round(ctx, |live| {
            // The emulator's clock started while the path was built, just before this.
            let built = Instant::now();
            let flows = BulkFlows::start(live, 1, Some(&self.cc), None)?;
            let offset = flows.start.saturating_duration_since(built);
            let samples = flows::sample_with(
                &flows,
                self.duration,
                self.sample,
                ctx.stop_requested,
                ctx.progress,
                |f| {
                    let sender = &f.senders()[0];
                    let info = flows::tcp_info(sender)?;
                    let bbr = tcptail_sock::sys::info::bbr_info(sender.as_fd())
                        .map_err(|e| RunError::io("read TCP_CC_INFO", e))?;
                    Ok(Rates {
                        pacing_bps: info.pacing_rate_bytes_per_sec.unwrap_or(0) as f64 * 8.0,
                        bbr_bw_bps: bbr.map(|b| b.bw_bytes_per_sec as f64 * 8.0),
                    })
                },
            );
            let stopped = flows.stop();
            let samples = samples?;
            stopped?;
            Ok::<_, RunError>((samples, offset))
        })?;
        let (samples, offset) = run;
        let step = self.step_at.saturating_sub(offset).as_secs_f64();
        let a = analyse(
            &samples,
            self.warmup.as_secs_f64(),
            step,
            (self.path.rate(), self.new_rate),
            self.path.rtt(),
        );
        let mut m = Measurement { lateness, ..Measurement::default() };
        m.metric("pre_goodput_mbps", a.pre_goodput_mbps)
            .metric("post_goodput_mbps", a.post_goodput_mbps)
            .metric("post_rtt_p95_ms", a.post_rtt_p95_ms)
            .metric("post_queue_p95_ms", a.post_rtt_p95_ms - self.path.rtt().as_secs_f64() * 1e3)
            .metric("post_retrans_pct", a.post_retrans_pct)
            .metric("pacing_settle_s", a.pacing_settle.value(a.left))
            .metric("rtt_settle_s", a.rtt_settle.value(a.left));
        for (name, settle) in [("pacing", a.pacing_settle), ("RTT", a.rtt_settle)] {
            if settle.is_none() {
                m.notes.push(format!(
                    "the {name} never settled after the step: censored at the round's remaining \
                     {:.1} s",
                    a.left
                ));
            }
        }
        m.notes.extend(a.goodput_notes.iter().cloned());
        if self.cc == "bbr" {
            m.metric("bw_settle_s", a.bw_settle.value(a.left));
        }
        let bw: Vec<[f64; 2]> =
            samples.iter().filter_map(|(s, r)| Some([s.t, r.bbr_bw_bps? / 1e6])).collect();
        if let Some(promtool) = &self.promtool {
            let alerts = evaluate_alerts(promtool, ctx.scratch, &samples, self.time_scale, step)?;
            let flag = |b: bool| f64::from(u8::from(b));
            m.metric("seed_alert_fired", flag(alerts.seed.after.is_some()))
                .metric("fixed_alert_fired", flag(alerts.fixed.after.is_some()))
                .metric("seed_alert_early", flag(alerts.seed.before.is_some()))
                .metric("fixed_alert_early", flag(alerts.fixed.before.is_some()));
            for (rule, f) in [("seed's", alerts.seed), ("corrected", alerts.fixed)] {
                let first = f.before.or(f.after);
                m.notes.push(match first {
                    Some(t) => format!(
                        "the {rule} alert rule first fired {:+.1} s from the step ({:+.0} min \
                         in series time)",
                        t - step,
                        (t - step) * f64::from(self.time_scale) / 60.0
                    ),
                    None => format!("the {rule} alert rule never fired"),
                });
            }
        }
        let s = flows::summarise(
            &samples.iter().map(|(s, _)| s.clone()).collect::<Vec<_>>(),
            self.warmup,
            Duration::from_millis(100),
            None,
        );
        m.series.push(Series::time("goodput_mbps", s.goodput_series));
        m.series.push(Series::time("rtt_ms", s.rtt_series));
        m.series.push(Series::time(
            "pacing_mbps",
            samples.iter().map(|(s, r)| [s.t, r.pacing_bps / 1e6]).collect(),
        ));
        if !bw.is_empty() {
            m.series.push(Series::time("bbr_bw_mbps", bw));
        }
        m.notes.push(format!(
            "rate step at {:.2} s of the flow's clock ({:.2} s on the emulator's)",
            step,
            self.step_at.as_secs_f64()
        ));
        Ok(m)
    }

    fn planned(&self) -> Duration {
        self.duration
    }

    fn describe(&self) -> String {
        format!(
            "{}; one {} flow, {:.0} s per round, rate to {} Mbit/s at {:.1} s",
            self.path.describe(),
            self.cc,
            self.duration.as_secs_f64(),
            self.new_rate.0 as f64 / 1e6,
            self.step_at.as_secs_f64()
        )
    }
}

/// When something settled after the step: seconds after it, or `None` (never, in the round).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Settle(Option<f64>);

impl Settle {
    /// The value to report: the time, or the round's remaining time when it never settled.
    fn value(self, left: f64) -> f64 {
        self.0.unwrap_or(left)
    }

    fn is_none(self) -> bool {
        self.0.is_none()
    }
}

/// The round's figures around the step.
#[derive(Debug, Clone, PartialEq)]
struct Analysis {
    pre_goodput_mbps: f64,
    post_goodput_mbps: f64,
    /// Why a goodput is the link's rate rather than the count ([`flows::held_to_link`]).
    goodput_notes: Vec<String>,
    post_rtt_p95_ms: f64,
    post_retrans_pct: f64,
    pacing_settle: Settle,
    rtt_settle: Settle,
    bw_settle: Settle,
    /// Seconds from the step to the last sample.
    left: f64,
}

/// Splits the samples at `step` (seconds on the flow's clock) and measures each side; `rates`
/// are the path's rate before the step (`None`: not shaped) and after it.
fn analyse(
    samples: &[(Sample, Rates)],
    warmup: f64,
    step: f64,
    rates: (Option<BitRate>, BitRate),
    base_rtt: Duration,
) -> Analysis {
    let (old_rate, new_rate) = rates;
    let pre: Vec<&(Sample, Rates)> =
        samples.iter().filter(|(s, _)| s.t >= warmup && s.t < step).collect();
    let post: Vec<&(Sample, Rates)> = samples.iter().filter(|(s, _)| s.t >= step).collect();
    let mut goodput_notes = Vec::new();
    // Each side's goodput is the bytes read from its first sample to its last over the time
    // between them, held to the rate the link had on that side.
    let mut goodput = |part: &[&(Sample, Rates)], rate: Option<BitRate>, metric: &str| {
        let read = match (part.first(), part.last()) {
            (Some((a, _)), Some((b, _))) => flows::goodput_between(a, b),
            _ => f64::NAN,
        };
        let (mbps, note) = flows::held_to_link(read, rate.map(|r| r.0 as f64), metric);
        goodput_notes.extend(note);
        mbps
    };
    let pre_goodput_mbps = goodput(&pre, old_rate, "pre_goodput_mbps");
    let post_goodput_mbps = goodput(&post, Some(new_rate), "post_goodput_mbps");
    let rtts = |part: &[&(Sample, Rates)]| {
        let mut v: Vec<f64> =
            part.iter().flat_map(|(s, _)| s.rtts_us.iter().map(|&r| f64::from(r) / 1e3)).collect();
        v.sort_by(f64::total_cmp);
        v
    };
    let pre_rtt_p95 = flows::percentile(&rtts(&pre), 0.95);
    let post_rtts = rtts(&post);
    let post_retrans_pct = match (post.first(), post.last()) {
        (Some((a, _)), Some((b, _))) if b.bytes_sent > a.bytes_sent => {
            100.0 * b.bytes_retrans.saturating_sub(a.bytes_retrans) as f64
                / (b.bytes_sent - a.bytes_sent) as f64
        }
        _ => 0.0,
    };
    let limit = SETTLED * new_rate.0 as f64;
    let first_after = |ok: &dyn Fn(&Sample, &Rates) -> bool| {
        Settle(post.iter().find(|(s, r)| ok(s, r)).map(|(s, _)| s.t - step))
    };
    // Settled: within 1.25x of the flow's own RTT before the step, or a queue of at most one
    // BDP of the path (an RTT of twice the base, what BBR's cwnd gain of 2 allows), plus 10 %.
    let rtt_bound = (SETTLED * pre_rtt_p95).max(2.2 * base_rtt.as_secs_f64() * 1e3);
    Analysis {
        pre_goodput_mbps,
        post_goodput_mbps,
        goodput_notes,
        post_rtt_p95_ms: flows::percentile(&post_rtts, 0.95),
        post_retrans_pct,
        pacing_settle: first_after(&|_, r| r.pacing_bps > 0.0 && r.pacing_bps <= limit),
        rtt_settle: {
            // The RTT starts low at the step and rises as the queue builds: it has settled
            // after the last sample above the bound, if that is not the round's last.
            let above = |s: &Sample| {
                let mean = s.rtts_us.iter().map(|&r| f64::from(r)).sum::<f64>()
                    / s.rtts_us.len().max(1) as f64;
                mean / 1e3 > rtt_bound
            };
            match post.iter().rposition(|(s, _)| above(s)) {
                None => Settle(Some(0.0)),
                Some(i) if i + 1 == post.len() => Settle(None),
                Some(i) => Settle(Some(post[i + 1].0.t - step)),
            }
        },
        bw_settle: first_after(&|_, r| r.bbr_bw_bps.is_some_and(|b| b <= limit)),
        left: post.last().map_or(0.0, |(s, _)| s.t - step),
    }
}

/// When an alert rule first fired before and after the step, seconds on the flow's clock.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Firing {
    before: Option<f64>,
    after: Option<f64>,
}

/// Both rules' firings.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Alerts {
    seed: Firing,
    fixed: Firing,
}

/// The seed's alert rule (its metric renamed to the exporter's) and the corrected one.
fn rules_file() -> String {
    let rule = |name: &str, expr: String| {
        format!(
            "  - alert: {name}\n    expr: {expr}\n    for: 10m\n    labels:\n      severity: \
             warning\n"
        )
    };
    format!(
        "groups:\n- name: tcptail-link-downgrade\n  rules:\n{}{}",
        rule(
            "BBRBandwidthDrop",
            format!("rate({BW_METRIC}[5m]) < 0.5 * avg_over_time({BW_METRIC}[1h])")
        ),
        rule(
            "BBRBandwidthDropFixed",
            format!("avg_over_time({BW_METRIC}[5m]) < 0.5 * avg_over_time({BW_METRIC}[1h])")
        ),
    )
}

/// A `promtool test rules` file: the bandwidth estimate one point per 100 ms of the round
/// (time-scaled), and for each rule an evaluation every scaled minute expecting nothing, so
/// that promtool lists exactly the evaluations at which the rule fired.
fn test_file(samples: &[(Sample, Rates)], time_scale: u32) -> Option<(String, u64)> {
    let mut values = Vec::new();
    let mut next = 0.0;
    for (s, r) in samples {
        if s.t + 1e-9 >= next {
            values.push(r.bbr_bw_bps? / 8.0);
            next += 0.1;
        }
    }
    // 100 ms of the round, in series seconds.
    let interval_ms = 100 * u64::from(time_scale);
    let minutes = values.len() as u64 * interval_ms / 60_000;
    let mut text = format!(
        "rule_files: [rules.yml]\nevaluation_interval: 1m\ntests:\n- interval: {interval_ms}ms\n  \
         input_series:\n  - series: '{BW_METRIC}{{conn=\"0\"}}'\n    values: '"
    );
    for (i, v) in values.iter().enumerate() {
        let _ = write!(text, "{}{v:.0}", if i == 0 { "" } else { " " });
    }
    text.push_str("'\n  alert_rule_test:\n");
    for alert in ["BBRBandwidthDrop", "BBRBandwidthDropFixed"] {
        for m in 1..=minutes {
            let _ = writeln!(text, "  - eval_time: {m}m\n    alertname: {alert}");
        }
    }
    Some((text, interval_ms))
}

/// Runs both rules over the round's series with promtool; the first firing of each, in
/// seconds on the flow's clock.
fn evaluate_alerts(
    promtool: &str,
    scratch: &Path,
    samples: &[(Sample, Rates)],
    time_scale: u32,
    step: f64,
) -> Result<Alerts, RunError> {
    let Some((test, _)) = test_file(samples, time_scale) else {
        return Err(RunError::failed("the alert rules", "the flow has no BBR estimate"));
    };
    let dir = scratch.join("alerts");
    std::fs::create_dir_all(&dir).map_err(|e| RunError::io("create the alerts directory", e))?;
    std::fs::write(dir.join("rules.yml"), rules_file())
        .map_err(|e| RunError::io("write rules.yml", e))?;
    std::fs::write(dir.join("test.yml"), test).map_err(|e| RunError::io("write test.yml", e))?;
    let out = Command::new(promtool)
        .args(["test", "rules", "test.yml"])
        .current_dir(&dir)
        .output()
        .map_err(|e| RunError::io(format!("run {promtool}"), e))?;
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    let _ = std::fs::write(dir.join("promtool.out"), &text);
    let fired = parse_firings(&text);
    if !out.status.success() && fired.is_empty() {
        return Err(RunError::failed("promtool test rules", text.trim()));
    }
    let firing = |alert: &str| {
        let times = fired
            .iter()
            .filter(|(a, _)| a == alert)
            .map(|(_, minute)| *minute as f64 * 60.0 / f64::from(time_scale));
        let first =
            |keep: &dyn Fn(f64) -> bool| times.clone().filter(|&t| keep(t)).reduce(f64::min);
        Firing { before: first(&|t| t < step), after: first(&|t| t >= step) }
    };
    Ok(Alerts { seed: firing("BBRBandwidthDrop"), fixed: firing("BBRBandwidthDropFixed") })
}

/// The (alert, minute) pairs promtool reports as failed because the alert was firing
/// (`alertname: X, time: 12m,` followed by a non-empty `got:[...]`).
fn parse_firings(text: &str) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let Some(rest) = line.trim().strip_prefix("alertname: ") else { continue };
        let Some((alert, time)) = rest.split_once(", time: ") else { continue };
        let Some(m) = minutes(time.trim_end_matches(',').trim()) else { continue };
        // The block lists `exp:[...]` then `got:[...]`; an empty `got:[]` is not a firing.
        let mut firing = false;
        while let Some(next) = lines.peek() {
            let t = next.trim();
            if t.starts_with("alertname: ") {
                break;
            }
            if let Some(got) = t.strip_prefix("got:") {
                firing = got.trim() != "[]" && got.trim() != "[],";
            }
            lines.next();
        }
        if firing {
            out.push((alert.to_owned(), m));
        }
    }
    out
}

/// Whole minutes of a Prometheus duration as promtool prints it (`12m`, `1h5m`, `2h`).
fn minutes(text: &str) -> Option<u64> {
    let (mut total, mut number) = (0u64, String::new());
    for c in text.chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let n: u64 = number.parse().ok()?;
        number.clear();
        total += match c {
            'h' => n * 60,
            'm' => n,
            's' => 0,
            _ => return None,
        };
    }
    number.is_empty().then_some(total)
}

#[cfg(test)]
mod tests;
