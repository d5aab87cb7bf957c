//! What `tcptail lab path` does to traffic, measured with iperf3 through the real binary, as
//! root, in namespaces it creates itself: the bottleneck rate, CUBIC filling a deep buffer
//! while BBR does not, loss in retransmits, a Mahimahi trace one way with a constant rate the
//! other, asymmetric rates and delays, CoDel against drop-tail, and `--emulator netem` (the
//! missing-netem error on a kernel without it, the real path on one with it).
//!
//! The emulator's own report (`lab-report.json`) gives queueing delay from its virtual
//! schedule, which CPU contention cannot distort; iperf3 gives goodput and the sender's RTT.
//! Every run is a child process whose namespaces are removed by a guard (see `common`).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

mod common;

use common::{lab_lock, run};

fn report(out: &Path) -> Value {
    let text = std::fs::read_to_string(out.join("lab-report.json")).expect("lab-report.json");
    serde_json::from_str(&text).expect("report is JSON")
}

fn f64_at(v: &Value, pointer: &str) -> f64 {
    v.pointer(pointer).and_then(Value::as_f64).unwrap_or_else(|| panic!("{pointer} missing in {v}"))
}

/// TCP payload per 1500-byte IP packet (timestamps on): goodput = rate x this.
const PAYLOAD_SHARE: f64 = 1448.0 / 1500.0;

/// One link direction's departures from the emulator's log (`up.log`, `down.log`):
/// wall-clock ms since the Unix epoch (virtual time from the log's init timestamp), IP bytes.
#[derive(Debug, Default)]
struct LinkLog(Vec<(f64, u64)>);

/// IP + TCP header bytes of a data packet (timestamps on).
const HEADERS: u64 = 52;

impl LinkLog {
    fn read(path: &Path) -> LinkLog {
        let log = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
        let init: f64 = log
            .lines()
            .find_map(|l| l.strip_prefix("# init timestamp: "))
            .and_then(|v| v.parse().ok())
            .expect("init timestamp in the link log");
        LinkLog(
            log.lines()
                .filter_map(|l| {
                    let f: Vec<&str> = l.split(' ').collect();
                    if f.len() < 3 || f[1] != "-" {
                        return None;
                    }
                    Some((init + f[0].parse::<f64>().ok()?, f[2].parse().ok()?))
                })
                .collect(),
        )
    }

    /// Payload bytes (each packet less [`HEADERS`]) that left the link within wall-clock ms
    /// `from..to`.
    fn payload_between(&self, from: f64, to: f64) -> f64 {
        let in_window = self.0.iter().filter(|&&(t, _)| t >= from && t < to);
        in_window.map(|&(_, len)| len.saturating_sub(HEADERS) as f64).sum()
    }

    /// The most the link carried in any `window_ms` starting at a departure, Mbit/s.
    fn busiest_mbps(&self, window_ms: f64) -> f64 {
        let (mut best, mut sum, mut j) = (0u64, 0u64, 0);
        for i in 0..self.0.len() {
            while j < self.0.len() && self.0[j].0 < self.0[i].0 + window_ms {
                sum += self.0[j].1;
                j += 1;
            }
            best = best.max(sum);
            sum -= self.0[i].1;
        }
        best as f64 * 8.0 / (window_ms / 1e3) / 1e6
    }
}

/// The shell line that runs `cmd` between two wall-clock stamps (ms since the Unix epoch), so
/// a test can match iperf3's measurement window against the link's log.
fn timed(cmd: &str) -> String {
    format!("date +%s%3N && {cmd} && date +%s%3N")
}

/// iperf3 got what the link carried: its receiver's bytes are at least the payload the link
/// (`log`, the data direction) carried in a part of the run that lies inside iperf3's
/// measurement window whatever the host did, less the data that can be held at the window's
/// end (a round trip of `rtt_ms` plus `buffer_ms` of queue behind a loss, the emulator's worst
/// lateness, 5 ms of read lag) at `rate_mbps`. `stamps` are the wall-clock ms before and
/// after the iperf3 run; `omit_s` its -O seconds.
///
/// The window starts after the connection setup and the omitted seconds and lasts
/// `sum_received.seconds`; setup and teardown together took the run's time beyond those, so
/// the window holds [before + omit + overhead, after - overhead].
fn assert_got_what_the_link_carried(
    iperf: &Value,
    stamps: (f64, f64),
    omit_s: f64,
    log: &LinkLog,
    report: &Value,
    (rate_mbps, rtt_ms, buffer_ms): (f64, f64, f64),
) {
    let (before, after) = stamps;
    let seconds = f64_at(iperf, "/end/sum_received/seconds");
    let received = f64_at(iperf, "/end/sum_received/bytes");
    let overhead = ((after - before) - (omit_s + seconds) * 1e3).max(0.0);
    let (from, to) = (before + omit_s * 1e3 + overhead, after - overhead);
    let carried = log.payload_between(from, to);
    let lateness_ms = f64_at(report, "/emulator_report/lateness/max_us") / 1e3;
    let held = rate_mbps * 1e6 / 8.0 * (rtt_ms + buffer_ms + lateness_ms + 5.0) / 1e3;
    eprintln!(
        "iperf3 received {received:.0} B in {seconds:.2} s; the link carried {carried:.0} B of \
         payload in the {:.2} s inside its window (held at the end: up to {held:.0} B)",
        (to - from) / 1e3
    );
    assert!(
        received >= carried - held,
        "iperf3 received {received:.0} B, less than the {carried:.0} B the link delivered \
         inside its window (less {held:.0} B held at the end)"
    );
}

/// The iperf3 runs of a [`timed`] script: each JSON document with the stamps around it.
fn timed_runs(docs: Vec<Value>) -> Vec<(Value, (f64, f64))> {
    let mut runs = Vec::new();
    let mut docs = docs.into_iter();
    while let Some(before) = docs.next() {
        let (Some(json), Some(after)) = (docs.next(), docs.next()) else {
            panic!("a stamp, an iperf3 JSON document and a stamp per run");
        };
        let stamp = |v: &Value| v.as_f64().unwrap_or_else(|| panic!("a stamp, not {v}"));
        runs.push((json, (stamp(&before), stamp(&after))));
    }
    runs
}

/// Runs `script` (sh) as the client of a lab path with `iperf3 -s` as the server, and returns
/// the JSON documents the script printed (iperf3 -J runs, in order) and the lab report.
fn iperf_runs(path_args: &[&str], server: &str, script: &str) -> (Vec<Value>, Value) {
    let (docs, report, _) = iperf_runs_logged(path_args, server, script);
    (docs, report)
}

/// [`iperf_runs`], also giving the link's logs (up, down).
fn iperf_runs_logged(
    path_args: &[&str],
    server: &str,
    script: &str,
) -> (Vec<Value>, Value, [LinkLog; 2]) {
    let out = tempfile::tempdir().expect("tempdir");
    let out_dir = out.path().to_str().expect("utf-8 path");
    let mut args = vec!["lab", "path", "--out", out_dir, "--seed", "42"];
    args.extend_from_slice(path_args);
    args.extend(["--server-cmd", server, "--server-ready", "5201", "--", "sh", "-c", script]);
    let done = run(&args, Duration::from_secs(60));
    assert!(done.status.success(), "{:?}\n{}", done.status, done.stderr);
    assert!(done.leftovers.is_empty(), "left behind: {:?}", done.leftovers);
    assert!(done.stderr.contains("lab: client tcptail-"), "banner: {}", done.stderr);
    let docs: Vec<Value> = serde_json::Deserializer::from_str(&done.stdout)
        .into_iter::<Value>()
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| panic!("iperf3 -J output: {e}\n{}", done.stdout));
    let logs = ["up.log", "down.log"].map(|f| LinkLog::read(&out.path().join(f)));
    (docs, report(out.path()), logs)
}

/// One iperf3 run through a lab path: (iperf3 JSON, lab report).
fn iperf(path_args: &[&str], iperf_args: &str) -> (Value, Value) {
    let (json, report, _, _) = iperf_logged(path_args, iperf_args);
    (json, report)
}

/// [`iperf`], also giving the wall-clock stamps around the run and the up link's log.
fn iperf_logged(path_args: &[&str], iperf_args: &str) -> (Value, Value, (f64, f64), LinkLog) {
    let client = timed(&format!("iperf3 -c $TCPTAIL_SERVER_ADDR -J {iperf_args}"));
    let (docs, report, [up, _]) = iperf_runs_logged(path_args, "iperf3 -s -1", &client);
    let mut runs = timed_runs(docs);
    assert_eq!(runs.len(), 1, "one iperf3 run");
    let (json, stamps) = runs.remove(0);
    (json, report, stamps, up)
}

/// The emulated link's output over its busiest 100 ms bin in `dir`, Mbit/s, and how far from
/// the link's `rate_mbps` a busy bin may be: the rate the emulator shaped to while its queue
/// kept the link busy. The bins are the emulator's virtual schedule, so a loaded host can
/// leave the link idle (a slower bin) but never make it faster; a bin holds a whole number
/// of packets, so a busy one is within one 1500-byte packet of the rate (the last bin, cut
/// short by the stop, is left out).
fn busiest_bin_mbps(report: &Value, dir: &str, rate_mbps: f64) -> (f64, f64) {
    let at = format!("/emulator_report/{dir}/stats/throughput");
    let bin_s = f64_at(report, &format!("{at}/bin_ms")) / 1e3;
    let bins: Vec<f64> = report
        .pointer(&format!("{at}/out_mbps"))
        .and_then(Value::as_array)
        .unwrap_or_else(|| panic!("{at}/out_mbps missing"))
        .iter()
        .filter_map(Value::as_f64)
        .collect();
    let whole = &bins[..bins.len().saturating_sub(1)];
    let busiest = whole.iter().copied().fold(0.0, f64::max);
    let packet_mbps = 1500.0 * 8.0 / bin_s / 1e6;
    (busiest, packet_mbps / rate_mbps)
}

fn goodput_mbps(iperf: &Value) -> f64 {
    f64_at(iperf, "/end/sum_received/bits_per_second") / 1e6
}

#[test]
fn iperf3_gets_the_bottleneck_rate_within_two_percent() {
    let _lock = lab_lock();
    // This checks the emulator's rate, so the sender must keep the bottleneck busy without a
    // standing queue: BBR does. CUBIC with the default one-BDP buffer leaves the link idle
    // while it recovers from slow start's overshoot (the emulator's own output rate dips
    // too), and with a deep buffer iperf3's receive sum also counts the queue drained after
    // the sender stopped (+1.5 % with 375 KB).
    //
    // The rate is the emulator's, read from its own schedule (a loaded host can leave the
    // link idle, never make it faster or slower while busy): its busiest 100 ms within one
    // packet of 30 Mbit/s, no 100 ms above that. iperf3 gets at most the rate less headers
    // (2 % for its interval edges), and what the link carried inside its window.
    let (json, report, stamps, up) =
        iperf_logged(&["--rate", "30mbit", "--rtt", "10ms"], "-t 5 -O 1 -C bbr");
    let goodput = goodput_mbps(&json);
    let expected = 30.0 * PAYLOAD_SHARE;
    let (busiest, tolerance) = busiest_bin_mbps(&report, "up", 30.0);
    eprintln!(
        "iperf3 goodput {goodput:.3} Mbit/s (the rate less headers: {expected:.3}); the link's \
         busiest 100 ms {busiest:.3} Mbit/s"
    );
    assert!(within(busiest, 30.0, tolerance), "the link at its busiest: {busiest:.3} Mbit/s");
    assert!(goodput < expected * 1.02, "goodput {goodput:.3} Mbit/s above the rate");
    assert_got_what_the_link_carried(&json, stamps, 1.0, &up, &report, (30.0, 10.0, 10.0));

    // The report: the path, the sysctls read back, both commands, the emulator's numbers.
    assert_eq!(report["emulator"], "builtin");
    assert_eq!(report["seed"], 42);
    assert_eq!(report["up"]["rate_bps"], 30_000_000);
    assert_eq!(report["down"]["delay_us"], 5000);
    assert_eq!(report["up"]["queue"]["limit"]["bytes"], 37_500);
    assert_eq!(report["base_rtt_us"], 10_000);
    for side in ["client", "server"] {
        let rmem = report["sysctls"][side]["net.ipv4.tcp_rmem"].as_str().unwrap();
        let max: u64 = rmem.rsplit(' ').next().unwrap().parse().unwrap();
        assert!(max >= report["tcp_buffers"]["wanted_max_bytes"].as_u64().unwrap());
    }
    assert_eq!(report["server"]["exit_code"], 0);
    assert_eq!(report["client"]["exit_code"], 0);
    let up = f64_at(&report, "/emulator_report/up/stats/departures/packets");
    assert!(up > 10_000.0, "the emulator carried the transfer ({up} packets)");
    assert!(report["lateness_flagged"].is_boolean());
}

/// The bottleneck queue's delay as the emulator scheduled it (ms): p50, p90, max.
fn queue_delay_ms(report: &Value, dir: &str) -> (f64, f64, f64) {
    let at = |q: &str| f64_at(report, &format!("/emulator_report/{dir}/stats/queue_delay_ms/{q}"));
    (at("p50"), at("p90"), at("max"))
}

#[test]
fn cubic_fills_the_buffer_while_bbr_stays_near_the_base_rtt() {
    let _lock = lab_lock();
    // 375 KB at 30 Mbit/s is 100 ms of queue on a 10 ms path (emulation.md: CUBIC ~94 ms RTT,
    // BBR ~14 ms). "Reaches the buffer's worth of queueing" means most of the transfer waits
    // in an almost full buffer: CUBIC's sawtooth refills it to 100 ms after each loss and only
    // backs off to ~0.7 x (BDP + buffer) - BDP = 67 ms, so 90 % of packets wait at least 80 %
    // of the buffer. The queue delay is the emulator's virtual schedule (contention on the
    // vCPUs cannot shorten it); the sender's RTT must show the same (base + queue).
    let path = ["--rate", "30mbit", "--rtt", "10ms", "--buffer", "375KB"];
    let measure = |cc: &str| {
        let (json, report, stamps, up) = iperf_logged(&path, &format!("-t 6 -O 2 -C {cc}"));
        // Both fill the link as far as the host lets them: iperf3 got what the link carried,
        // which ran at its rate while busy.
        let (busiest, tolerance) = busiest_bin_mbps(&report, "up", 30.0);
        assert!(within(busiest, 30.0, tolerance), "{cc}: the link at its busiest: {busiest:.3}");
        assert_got_what_the_link_carried(&json, stamps, 2.0, &up, &report, (30.0, 10.0, 100.0));
        let (p50, p90, max) = queue_delay_ms(&report, "up");
        let max_rtt = f64_at(&json, "/end/streams/0/sender/max_rtt") / 1e3;
        let mean_rtt = f64_at(&json, "/end/streams/0/sender/mean_rtt") / 1e3;
        let goodput = goodput_mbps(&json);
        eprintln!(
            "{cc}: queue delay p50 {p50:.1} p90 {p90:.1} max {max:.1} ms; sender RTT mean \
             {mean_rtt:.1} max {max_rtt:.1} ms; goodput {goodput:.2} Mbit/s"
        );
        (p50, p90, max, max_rtt, goodput)
    };
    let buffer_ms = 100.0;
    let base_ms = 10.0;
    let (c50, c90, cmax, c_rtt, c_rate) = measure("cubic");
    assert!(
        c90 >= 0.8 * buffer_ms,
        "CUBIC should keep the buffer nearly full: queue delay p90 {c90:.1} ms < 80 ms"
    );
    assert!(c50 >= 0.6 * buffer_ms, "CUBIC queue delay p50 {c50:.1} ms");
    // The buffer is honoured (one packet's serialisation of slack).
    assert!(cmax <= buffer_ms + 1.0, "queue delay max {cmax:.1} ms exceeds the 100 ms buffer");
    assert!(
        c_rtt >= 0.8 * (base_ms + buffer_ms),
        "the sender's RTT never reached the full buffer: max {c_rtt:.1} ms"
    );
    let (b50, _, _, _, b_rate) = measure("bbr");
    assert!(b50 < 15.0, "BBR should keep the queue short: queue delay p50 {b50:.1} ms");
    // At most the rate less headers, plus the 375 KB queue the receiver drains after the
    // sender stopped, over the 6 s measured.
    let most = 30.0 * PAYLOAD_SHARE * 1.02 + 0.375 * 8.0 / 6.0;
    assert!(c_rate < most && b_rate < most, "{c_rate} / {b_rate}");
}

#[test]
fn one_percent_loss_shows_in_retransmits() {
    let _lock = lab_lock();
    let (json, report) =
        iperf(&["--rate", "30mbit", "--rtt", "10ms", "--loss", "1%"], "-t 3 -C cubic");
    let retransmits = f64_at(&json, "/end/sum_sent/retransmits");
    let lost = f64_at(&report, "/emulator_report/up/stats/drops/loss/packets");
    let arrived = f64_at(&report, "/emulator_report/up/stats/arrivals/packets");
    eprintln!("1% loss: {retransmits} retransmits; emulator lost {lost} of {arrived} packets");
    assert!(retransmits >= 5.0, "retransmits {retransmits}");
    let rate = lost / arrived;
    assert!((0.005..0.02).contains(&rate), "loss rate {rate}");
    assert_eq!(report["up"]["loss"]["model"], "bernoulli");
}

/// An upload then a download (`-R`) of `secs` seconds each, BBR, first second omitted.
fn both_ways(secs: u32) -> String {
    let up = timed(&format!("iperf3 -c $TCPTAIL_SERVER_ADDR -J -t {secs} -O 1 -C bbr"));
    let down = timed(&format!("iperf3 -c $TCPTAIL_SERVER_ADDR -J -t {secs} -O 1 -C bbr -R"));
    format!("{up} && {down}")
}

fn within(measured: f64, expected: f64, tolerance: f64) -> bool {
    (measured / expected - 1.0).abs() < tolerance
}

#[test]
fn a_trace_one_way_and_a_constant_rate_the_other() {
    let _lock = lab_lock();
    let dir = tempfile::tempdir().expect("tempdir");
    // A bursty 10 ms trace: three opportunities per ms for 5 ms, then one per ms: 20
    // opportunities of 1504 B per 10 ms = 24.064 Mbit/s on average.
    let trace = dir.path().join("down.trace");
    let lines: Vec<String> =
        (1..=10u32).flat_map(|ms| vec![ms.to_string(); if ms <= 5 { 3 } else { 1 }]).collect();
    std::fs::write(&trace, lines.join("\n") + "\n").expect("write trace");
    let trace = trace.to_str().expect("utf-8");
    let (docs, report, [up_log, down_log]) = iperf_runs_logged(
        &["--rate-up", "5mbit", "--trace-down", trace, "--rtt", "10ms"],
        "iperf3 -s",
        &both_ways(4),
    );
    let runs = timed_runs(docs);
    let (up, down) = (goodput_mbps(&runs[0].0), goodput_mbps(&runs[1].0));
    let (up_expected, down_expected) = (5.0 * PAYLOAD_SHARE, 24.064 * PAYLOAD_SHARE);
    // Each link's rate from the emulator's own schedule (a 100 ms bin holds ten trace
    // periods, 200 opportunities: 24.0 Mbit/s of 1500-byte packets), never above it; iperf3
    // at most that less headers, and what the link carried inside its window.
    let (up_bin, up_tolerance) = busiest_bin_mbps(&report, "up", 5.0);
    let (down_bin, down_tolerance) = busiest_bin_mbps(&report, "down", 24.064);
    eprintln!(
        "up {up:.3} (at most {up_expected:.3}), down {down:.3} ({down_expected:.3}) Mbit/s; \
         busiest 100 ms: up {up_bin:.3}, down {down_bin:.3}"
    );
    assert!(within(up_bin, 5.0, up_tolerance), "constant 5 Mbit/s up: {up_bin:.3} at its busiest");
    assert!(within(down_bin, 24.064, 2.0 * down_tolerance), "trace down: {down_bin:.3}");
    assert!(up < up_expected * 1.025, "constant 5 Mbit/s up: {up:.3} Mbit/s");
    assert!(down < down_expected * 1.025, "trace down: {down:.3} Mbit/s");
    let path = |rate: f64| (rate, 10.0, 20.0);
    assert_got_what_the_link_carried(&runs[0].0, runs[0].1, 1.0, &up_log, &report, path(5.0));
    let down_run = (&runs[1].0, runs[1].1);
    assert_got_what_the_link_carried(down_run.0, down_run.1, 1.0, &down_log, &report, path(24.064));
    // The report says which direction is which, and the trace drove the down link.
    assert_eq!(report["up"]["rate_bps"], 5_000_000);
    assert!(report["down"]["trace"].as_str().is_some_and(|t| t.ends_with("down.trace")));
    assert!(report["up"]["trace"].is_null());
    assert_eq!(report["down"]["rate_bps"], 24_064_000);
    let opportunities = f64_at(&report, "/emulator_report/down/stats/opportunities/total");
    assert!(opportunities > 10_000.0, "down opportunities {opportunities}");
    assert!(report["emulator_report"]["up"]["stats"]["opportunities"].is_null());
}

#[test]
fn asymmetric_rates_and_delays_each_way() {
    let _lock = lab_lock();
    let (runs, report) = iperf_runs(
        &[
            "--rate-up",
            "8mbit",
            "--rate-down",
            "40mbit",
            "--delay-up",
            "15ms",
            "--delay-down",
            "5ms",
        ],
        "iperf3 -s",
        &both_ways(4),
    );
    let runs: Vec<Value> = timed_runs(runs).into_iter().map(|(json, _)| json).collect();
    let (up, down) = (goodput_mbps(&runs[0]), goodput_mbps(&runs[1]));
    let (up_bin, up_tolerance) = busiest_bin_mbps(&report, "up", 8.0);
    let (down_bin, down_tolerance) = busiest_bin_mbps(&report, "down", 40.0);
    eprintln!(
        "asymmetric: up {up:.3} Mbit/s, down {down:.3} Mbit/s; busiest 100 ms of the link: up \
         {up_bin:.3}, down {down_bin:.3} Mbit/s"
    );
    // Each direction shaped at its own rate, as the emulator scheduled it (host-independent).
    assert!(within(up_bin, 8.0, up_tolerance), "up link {up_bin:.3} Mbit/s at its busiest");
    assert!(within(down_bin, 40.0, down_tolerance), "down link {down_bin:.3} Mbit/s");
    // And iperf3 got no more than that: the link's rate less headers, 2 % for iperf3's
    // interval edges.
    assert!(up < 8.0 * PAYLOAD_SHARE * 1.02, "up {up:.3} Mbit/s, at most 7.72");
    assert!(down < 40.0 * PAYLOAD_SHARE * 1.02, "down {down:.3} Mbit/s, at most 38.6");
    // The uploading client sees the round trip of 15 + 5 ms, plus at most the up direction's
    // one-BDP (20 ms) buffer and a packet's serialisation (iperf3's RTT is the smoothed RTT
    // sampled under load, not the path's minimum; with -R the client is not the sender).
    let min_rtt = f64_at(&runs[0], "/end/streams/0/sender/min_rtt") / 1e3;
    assert!((20.0..42.0).contains(&min_rtt), "up: RTT {min_rtt:.2} ms, base 20 ms");
    assert_eq!(report["up"]["delay_us"], 15_000);
    assert_eq!(report["down"]["delay_us"], 5_000);
    assert_eq!(report["up"]["rate_bps"], 8_000_000);
    assert_eq!(report["down"]["rate_bps"], 40_000_000);
    // Each direction's buffer defaults to its own BDP: rate x 20 ms.
    assert_eq!(report["up"]["queue"]["limit"]["bytes"], 20_000);
    assert_eq!(report["down"]["queue"]["limit"]["bytes"], 100_000);
}

#[test]
fn codel_keeps_the_queue_short_where_drop_tail_fills_it() {
    let _lock = lab_lock();
    // Four CUBIC flows through a deep (300 ms) buffer: drop-tail lets them fill it, CoDel
    // (target 5 ms, interval 100 ms) drops at the head until the standing queue is gone.
    let measure = |queue: &str| {
        let path = ["--rate", "20mbit", "--rtt", "20ms", "--buffer", "300ms", "--queue", queue];
        let (json, report, stamps, up) = iperf_logged(&path, "-t 6 -O 2 -P 4 -C cubic");
        // iperf3 got what the link carried (a round trip of 20 ms + up to the 300 ms buffer
        // held at the end), and the link's best second: CoDel's drops must not keep it below
        // 90 % of its rate even when the host lets the senders keep it busy.
        assert_got_what_the_link_carried(&json, stamps, 2.0, &up, &report, (20.0, 20.0, 300.0));
        let best_second = up.busiest_mbps(1000.0);
        let (p50, p90, _) = queue_delay_ms(&report, "up");
        let codel_drops = f64_at(&report, "/emulator_report/up/stats/drops/codel/packets");
        let goodput = goodput_mbps(&json);
        eprintln!(
            "{queue}: queue delay p50 {p50:.1} ms, p90 {p90:.1} ms; {codel_drops} CoDel drops; \
             goodput {goodput:.2} Mbit/s; the link's best second {best_second:.2} Mbit/s"
        );
        (p50, p90, codel_drops, (goodput, best_second))
    };
    let (fifo50, _, fifo_drops, fifo_rate) = measure("fifo");
    let (codel50, codel90, codel_drops, codel_rate) = measure("codel");
    assert!(fifo50 > 100.0, "drop-tail should hold a long queue: p50 {fifo50:.1} ms");
    assert_eq!(fifo_drops, 0.0, "drop-tail never drops by CoDel");
    assert!(codel50 < 15.0, "CoDel should keep the queue near its 5 ms target: p50 {codel50:.1}");
    assert!(codel90 < 40.0, "CoDel p90 {codel90:.1} ms");
    assert!(codel_drops > 0.0, "CoDel must have dropped to control the queue");
    // And the link stays busy: in its best second at least 90 % of its rate, never above it;
    // iperf3 at most the rate less headers, plus the 300 ms (750 KB) queue the receiver
    // drains after the sender stopped, over the 6 s measured.
    for (goodput, best_second) in [codel_rate, fifo_rate] {
        assert!((18.0..=20.0 * 1.001).contains(&best_second), "{codel_rate:?} / {fifo_rate:?}");
        let most = 20.0 * PAYLOAD_SHARE * 1.02 + 0.75 * 8.0 / 6.0;
        assert!(goodput < most, "{codel_rate:?} / {fifo_rate:?}");
    }
}

/// Whether this kernel can create a netem qdisc, probed on `lo` of a scratch namespace (never
/// on the host's interfaces).
fn kernel_has_netem() -> bool {
    let ns = format!("tcptail-{}-netem-probe", std::process::id());
    let ip = |args: &[&str]| Command::new("ip").args(args).output().expect("ip");
    assert!(ip(&["netns", "add", &ns]).status.success(), "creating {ns}");
    let added = Command::new("tc")
        .args(["-n", &ns, "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"])
        .output()
        .expect("tc");
    let _ = ip(&["netns", "del", &ns]);
    added.status.success()
}

#[test]
fn netem_is_used_behind_the_router_or_reported_missing_before_command_runs() {
    let _lock = lab_lock();
    if kernel_has_netem() {
        netem_path_carries_traffic_from_the_router();
    } else {
        missing_netem_is_reported_before_command_runs();
    }
}

const NETEM_PATH: [&str; 8] =
    ["--emulator", "netem", "--rate", "30mbit", "--rtt", "10ms", "--buffer", "375KB"];

/// The real path: netem on the router's two egresses (never on an end's own interface), a
/// limit that holds the buffer plus twice the BDP (250 + 2 x 25 packets), and traffic through
/// it at the rate and no faster than the path's RTT.
fn netem_path_carries_traffic_from_the_router() {
    let out = tempfile::tempdir().unwrap();
    let script = "tc qdisc show; iperf3 -c $TCPTAIL_SERVER_ADDR -J -t 4 -O 1 -C bbr";
    let mut args = vec!["lab", "path", "--out", out.path().to_str().unwrap()];
    args.extend(NETEM_PATH);
    args.extend(["--server-cmd", "iperf3 -s -1", "--server-ready", "5201", "--"]);
    args.extend(["sh", "-c", script]);
    let done = run(&args, Duration::from_secs(60));
    assert!(done.status.success(), "{}", done.stderr);
    assert!(done.leftovers.is_empty(), "left behind: {:?}", done.leftovers);
    assert!(done.stderr.contains("netem on router"), "{}", done.stderr);
    let (qdiscs, json) = done.stdout.split_at(done.stdout.find('{').expect("iperf3 JSON"));
    assert!(!qdiscs.contains("netem"), "netem on the client's own interface:\n{qdiscs}");
    let report = report(out.path());
    let lines: Vec<&str> =
        report["netem_qdiscs"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].contains("dev tcptail-s root netem limit 300 "), "{lines:?}");
    assert!(lines[1].contains("dev tcptail-c root netem limit 300 "), "{lines:?}");
    assert_eq!(
        report["namespaces"]["router"].as_str().map(|r| r.contains("lab-router")),
        Some(true)
    );
    let json: Value = serde_json::from_str(json).expect("iperf3 -J");
    let goodput = goodput_mbps(&json);
    assert!(within(goodput, 30.0 * PAYLOAD_SHARE, 0.05), "netem goodput {goodput:.2} Mbit/s");
    let min_rtt = f64_at(&json, "/end/streams/0/sender/min_rtt") / 1e3;
    assert!(min_rtt >= 10.0, "min RTT {min_rtt:.2} ms is below the path's 10 ms");
}

/// This kernel has no netem: the lab says so, names the fix, and never runs COMMAND.
fn missing_netem_is_reported_before_command_runs() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("command-ran");
    let mut args = vec!["lab", "path"];
    args.extend(NETEM_PATH);
    args.extend(["--", "touch", marker.to_str().unwrap()]);
    let done = run(&args, Duration::from_secs(20));
    assert!(done.leftovers.is_empty(), "left behind: {:?}", done.leftovers);
    assert_eq!(done.status.code(), Some(1), "{}", done.stderr);
    assert!(!marker.exists(), "COMMAND ran although the lab could not be set up");
    for word in
        ["no netem qdisc", "sch_netem", "--emulator builtin", "Specified qdisc kind is unknown"]
    {
        assert!(done.stderr.contains(word), "{word:?} not in {}", done.stderr);
    }
}
