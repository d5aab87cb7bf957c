//! Result types of `tcptail bench` and their three forms: a human table, JSON (the interface
//! scripts rely on), and a CSV of every sample.
//!
//! The JSON keys are a contract: `latency_us` with `min`, `mean`, `stddev`, `p50`, `p90`,
//! `p95`, `p99`, `p999`, `p9999`, `max`; `transactions_per_second`; `requests`; `mode`
//! (`closed` or `open`); `rate_per_second` with `asked` and `achieved`; `attribution` when
//! asked for (absent otherwise). Additions: `sent` and `unanswered` (requests that never got a
//! response, kept in the percentiles as lower bounds; `requests` counts answered ones only),
//! `warnings`, `latency_us.significant_digits` (the histogram's precision), `latency_us_ci`
//! and `server` (the server's CPU time, service time and sockets; `null` where unknown).
//! Rendering never fails on missing values: an absent number prints as `-`.

use std::fmt::Write as _;
use std::io;

use serde::{Deserialize, Serialize};
use tcptail_sock::ApplyReport;

use crate::attribution::Attribution;
use crate::config::BenchConfig;
use crate::context::RunContext;
use crate::stats::{Bucket, LatencySummary};

/// The result of one benchmark run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchResult {
    /// `closed` or `open`.
    pub mode: String,
    /// The configuration that ran (`run_config`, so that matrix rows can use `config` for
    /// their axis settings).
    pub run_config: BenchConfig,
    /// Latency summary, µs (open loop: from the intended send time; open-loop
    /// connect-per-request: from when the transaction was due, through its connect, to its
    /// response).
    pub latency_us: Option<LatencySummary>,
    /// A 95 % confidence interval for each percentile of `latency_us` from its sample count;
    /// a percentile the count cannot support is `null`, with the reason in `unsupported`.
    #[serde(default)]
    pub latency_us_ci: Option<crate::stats::PercentileIntervals>,
    /// Open loop: from the actual send time (service time), µs; connect-per-request: the
    /// request's own time, without the connect.
    pub service_us: Option<LatencySummary>,
    /// Open loop: how late requests left against their schedule, µs; connect-per-request:
    /// how late each transaction's connect started (waits for a busy slot included).
    pub send_lateness_us: Option<LatencySummary>,
    /// Connect-per-request: each transaction's connect time (connect to writable).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub connect_us: Option<LatencySummary>,
    /// Log-spaced latency histogram.
    pub histogram: Vec<Bucket>,
    /// Requests answered in the measured part.
    pub requests: u64,
    /// Requests sent in the measured part.
    pub sent: u64,
    /// Requests that never got a response (sent and given up on, or due and never sent).
    /// They are in `latency_us` at the time they had waited when the run gave up on them: a
    /// lower bound, so the percentiles are lower bounds too when this is not zero.
    pub unanswered: u64,
    /// Length of the measured part, seconds.
    pub duration_seconds: f64,
    /// Requests answered per second.
    pub transactions_per_second: f64,
    /// Open loop: rate asked and achieved.
    pub rate_per_second: Option<RateReport>,
    /// Open-loop connect-per-request: transactions that waited for their slot, never started
    /// or failed (by cause).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crr: Option<crate::run::CrrCounts>,
    /// Tail attribution, when asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attribution: Option<Attribution>,
    /// The client's profile report.
    pub client_apply: Option<ApplyReport>,
    /// The server's profile report.
    pub server_apply: Option<ApplyReport>,
    /// The server's own account of the measured part (its CPU time, service time per
    /// request, socket state at the end), from the servers that report it; `null` when none
    /// did (an older server, the io_uring engine, connect-per-request), with the reason in
    /// `warnings` where one was asked.
    #[serde(default)]
    pub server: Option<crate::server_stats::ServerReport>,
    /// Machine context.
    pub context: RunContext,
    /// True when the run was stopped early (Ctrl-C): the numbers are partial.
    pub interrupted: bool,
    /// `--tcp-info-interval`: every connection's `tcp_info` over the run (`t_ns` on the
    /// requests' clock: nanoseconds since the measured start, like the samples'
    /// `intended_ns`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tcp_info: Vec<crate::tcp_sampler::TcpInfoSample>,
    /// What a reader must know before trusting the numbers: unanswered requests, a server
    /// that could not pin itself, a congestion control that was not applied, ...
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// Open-loop rate, requests per second.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RateReport {
    /// Asked for.
    pub asked: f64,
    /// Achieved send rate.
    pub achieved: Option<f64>,
}

/// One request, as written by `--samples`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SampleRecord {
    /// Intended send time (closed loop: actual), ns since the measured part started.
    pub intended_ns: u64,
    /// Connection index.
    pub connection: usize,
    /// Sequence number on its connection.
    pub seq: u64,
    /// Latency, ns; for an unanswered request, the time it had waited (a lower bound).
    pub latency_ns: u64,
    /// Service time (from the actual send), ns; empty for a request never sent.
    pub service_ns: Option<u64>,
    /// Whether a response came.
    pub answered: bool,
}

/// Writes `--tcp-info-interval` samples as CSV, one row per connection per period.
pub fn write_tcp_info_csv<W: io::Write>(
    samples: &[crate::tcp_sampler::TcpInfoSample],
    out: W,
) -> csv::Result<()> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record(TCP_INFO_CSV_HEADER.split(','))?;
    for s in samples {
        let k = &s.state;
        let opt = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_default();
        w.write_record([
            s.t_ns.to_string(),
            s.connection.to_string(),
            k.cwnd.to_string(),
            k.unacked.to_string(),
            k.srtt_us.to_string(),
            s.rttvar_us.to_string(),
            k.rto_us.to_string(),
            format!("{:?}", k.ca_state),
            k.total_retrans.to_string(),
            s.retrans.to_string(),
            s.lost.to_string(),
            opt(k.pacing_rate),
            opt(s.delivery_rate),
            opt(k.notsent_bytes.map(u64::from)),
            k.bbr_phase.map(|p| format!("{p:?}")).unwrap_or_default(),
            opt(s.bbr_bw),
            opt(s.bbr_min_rtt_us.map(u64::from)),
        ])?;
    }
    w.flush()?;
    Ok(())
}

/// The header of [`write_tcp_info_csv`] rows.
pub const TCP_INFO_CSV_HEADER: &str = "t_ns,connection,cwnd,unacked,srtt_us,rttvar_us,rto_us,\
ca_state,total_retrans,retrans,lost,pacing_rate,delivery_rate,notsent_bytes,bbr_phase,bbr_bw,\
bbr_min_rtt_us";

/// Writes samples as CSV with a header row.
pub fn write_samples_csv<W: io::Write>(samples: &[SampleRecord], out: W) -> csv::Result<()> {
    let mut w = csv::Writer::from_writer(out);
    for s in samples {
        w.serialize(s)?;
    }
    w.flush()?;
    Ok(())
}

fn num(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| if v >= 100.0 { format!("{v:.0}") } else { format!("{v:.1}") })
}

/// The load's shape beyond the connection count: threads, depth, connect per request.
fn shape(c: &BenchConfig) -> String {
    let mut parts = Vec::new();
    if !c.one_thread_per_connection() {
        parts.push(format!("{} thread(s)", c.thread_count()));
    }
    if c.depth > 1 {
        parts.push(format!("depth {}", c.depth));
    }
    if c.mode == crate::config::TxMode::Crr {
        parts.push("connect per request".to_string());
    }
    if parts.is_empty() { String::new() } else { format!(" ({})", parts.join(", ")) }
}

/// The human table of one run.
pub fn render_result(r: &BenchResult) -> String {
    let mut out = String::new();
    let c = &r.run_config;
    let cc = r.context.congestion_client.as_deref().unwrap_or("?");
    let _ = writeln!(
        out,
        "tcptail bench: {} loop, {} B request / {} B response, {} connection(s){}, profile '{}', \
         congestion {cc}{}",
        r.mode,
        c.request_len,
        c.reply_len,
        c.connections,
        shape(c),
        c.profile.name,
        if c.spin { ", spinning" } else { "" }
    );
    if let Some(rate) = r.rate_per_second {
        let _ = writeln!(
            out,
            "rate: asked {:.0}/s, achieved {}/s",
            rate.asked,
            rate.achieved.map_or("-".into(), |a| format!("{a:.1}"))
        );
    }
    if let Some(crr) = &r.crr {
        let _ = writeln!(
            out,
            "transactions: latency from when each was due to its response (slot wait, connect \
             and request), service the request alone; {} waited for a busy slot, {} never \
             started, {} failed",
            crr.queued,
            crr.not_started,
            crr.failed()
        );
    }
    let _ = writeln!(out, "placement: {}", r.context.placement);
    let _ = writeln!(out);
    let header =
        ["", "min", "mean", "p50", "p90", "p95", "p99", "p99.9", "p99.99", "max", "stddev"];
    let rows: Vec<(&str, &Option<LatencySummary>)> = vec![
        ("latency µs", &r.latency_us),
        ("service µs", &r.service_us),
        ("send late µs", &r.send_lateness_us),
        ("connect µs", &r.connect_us),
    ];
    let mut table = vec![header.iter().map(|s| s.to_string()).collect::<Vec<_>>()];
    for (name, summary) in rows {
        let Some(s) = summary else { continue };
        table.push(vec![
            name.to_string(),
            num(Some(s.min)),
            num(Some(s.mean)),
            num(Some(s.p50)),
            num(Some(s.p90)),
            num(Some(s.p95)),
            num(Some(s.p99)),
            num(Some(s.p999)),
            num(Some(s.p9999)),
            num(Some(s.max)),
            num(Some(s.stddev)),
        ]);
    }
    out.push_str(&align(&table));
    let _ = writeln!(
        out,
        "\n{} requests in {:.2} s: {:.0} transactions/s{}",
        r.requests,
        r.duration_seconds,
        r.transactions_per_second,
        if r.interrupted { " (interrupted: partial result)" } else { "" }
    );
    if let Some(digits) = r.latency_us.map(|l| l.significant_digits) {
        let _ = writeln!(out, "percentiles from an HDR histogram, {digits} significant digits");
        if let Some(ci) = &r.latency_us_ci {
            let fmt = |name: &str, i: &Option<crate::stats::PercentileInterval>| match i {
                Some(i) => format!("{name} [{}, {}]", num(Some(i.low)), num(Some(i.high))),
                None => format!("{name} -"),
            };
            let _ = writeln!(
                out,
                "{:.0} % intervals (µs): {}, {}, {}, {}, {}, {}{}",
                ci.confidence * 100.0,
                fmt("p50", &ci.p50),
                fmt("p90", &ci.p90),
                fmt("p95", &ci.p95),
                fmt("p99", &ci.p99),
                fmt("p99.9", &ci.p999),
                fmt("p99.99", &ci.p9999),
                if ci.unsupported.is_empty() {
                    String::new()
                } else {
                    format!(
                        " (- : too few samples for {})",
                        ci.unsupported.keys().cloned().collect::<Vec<_>>().join(", ")
                    )
                }
            );
        }
    }
    if let Some(server) = &r.server {
        let _ = writeln!(out, "{}", crate::server_stats::render(server));
    }
    if r.unanswered > 0 {
        let _ = writeln!(
            out,
            "\nWARNING: {} of {} requests got no response. They are in the percentiles at the \
             time they had waited when the run gave up on them, so every percentile above is a \
             lower bound.",
            r.unanswered,
            r.requests + r.unanswered
        );
    }
    for w in &r.warnings {
        let _ = writeln!(out, "warning: {w}");
    }
    if let Some(a) = &r.attribution {
        let timing = if r.rate_per_second.is_some() {
            "taken before each send; a late one adds to that send's lateness"
        } else {
            "outside the timed window"
        };
        let _ = writeln!(
            out,
            "\ntail attribution (kernel snapshot cost {:.2} µs each, {timing}):",
            a.snapshot_cost_ns / 1000.0
        );
        for s in &a.statements {
            let _ = writeln!(out, "  - {s}");
        }
        for n in &a.numeric {
            let _ = writeln!(
                out,
                "    {}: median {:.1} among the slowest, {:.1} overall",
                n.feature, n.median_slow, n.median_all
            );
        }
    }
    for (side, report) in [("client", &r.client_apply), ("server", &r.server_apply)] {
        if let Some(report) = report.as_ref().filter(|rep| !rep.is_clean()) {
            let _ = writeln!(out, "\n{side} profile problems:\n{report}");
        }
    }
    let ctx = &r.context;
    let _ = writeln!(
        out,
        "\ncontext: kernel {}{}, {} CPUs, cpuidle {}, clocksource {}, steal {}%, other load {}%, \
         own load {}%, congestion client {} / server {}",
        ctx.kernel,
        match &ctx.server_kernel {
            Some(k) if *k != ctx.kernel => format!(" (server {k})"),
            _ => String::new(),
        },
        ctx.cpus,
        ctx.cpuidle_driver.as_deref().unwrap_or("-"),
        ctx.clocksource.as_deref().unwrap_or("-"),
        num(ctx.steal_percent),
        num(ctx.other_load_percent),
        num(ctx.own_load_percent),
        ctx.congestion_client.as_deref().unwrap_or("-"),
        ctx.congestion_server.as_deref().unwrap_or("-"),
    );
    out
}

/// Pads columns: the first left-aligned, the rest right-aligned.
pub fn align(rows: &[Vec<String>]) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|c| rows.iter().filter_map(|r| r.get(c)).map(|s| s.chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            let pad = widths[c].saturating_sub(cell.chars().count());
            if c == 0 {
                line.push_str(cell);
                line.push_str(&" ".repeat(pad));
            } else {
                line.push_str("  ");
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn align_pads_columns() {
        let rows = vec![
            vec!["a".to_string(), "1".to_string()],
            vec!["long".to_string(), "100".to_string()],
        ];
        assert_eq!(align(&rows), "a       1\nlong  100\n");
    }

    #[test]
    fn samples_csv_has_header() {
        let s = SampleRecord {
            intended_ns: 5,
            connection: 0,
            seq: 1,
            latency_ns: 10,
            service_ns: Some(9),
            answered: true,
        };
        let never_sent = SampleRecord { service_ns: None, answered: false, seq: 2, ..s };
        let mut out = Vec::new();
        write_samples_csv(&[s, never_sent], &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "intended_ns,connection,seq,latency_ns,service_ns,answered\n5,0,1,10,9,true\n\
             5,0,2,10,,false\n"
        );
    }

    #[test]
    fn numbers_print_compactly() {
        assert_eq!(num(None), "-");
        assert_eq!(num(Some(12.345)), "12.3");
        assert_eq!(num(Some(1234.5)), "1234");
    }
}
