//! The real `tcptail` binary against real loopback sockets: `bench local`, `bench server` +
//! `bench client`, open-loop rate accuracy, profile verification, hostile input, matrix runs,
//! argument errors and Ctrl-C.
//!
//! The runs take one lock each, so that a spinning or flat-out run never shares the two vCPUs
//! with a run whose timing is asserted.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, Command as StdCommand, Stdio};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use assert_cmd::Command;
use serde_json::Value;

static RUNS: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    RUNS.lock().unwrap_or_else(PoisonError::into_inner)
}

fn tcptail() -> Command {
    Command::cargo_bin("tcptail").expect("tcptail binary")
}

/// Waits until process `pid` holds an established TCP socket (its benchmark connection: the
/// Ctrl-C handler is installed before it connects), failing after 30 s.
fn wait_until_connected(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .map(|dir| {
                dir.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
                    .filter_map(|l| {
                        let l = l.to_string_lossy().into_owned();
                        Some(l.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
                    })
                    .collect()
            })
            .unwrap_or_default();
        let table = std::fs::read_to_string(format!("/proc/{pid}/net/tcp")).unwrap_or_default();
        let established = table.lines().skip(1).any(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            cols.len() > 9 && cols[3] == "01" && inodes.iter().any(|i| i == cols[9])
        });
        if established {
            return;
        }
        assert!(Instant::now() < deadline, "process {pid} never connected to its server");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn run_json(args: &[&str]) -> Value {
    let _serial = one_at_a_time();
    let out = tcptail().args(args).arg("--json").output().expect("run tcptail");
    assert!(
        out.status.success(),
        "tcptail {args:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

fn f(v: &Value, path: &[&str]) -> f64 {
    let mut cur = v;
    for p in path {
        cur = &cur[*p];
    }
    cur.as_f64().unwrap_or_else(|| panic!("{path:?} missing in {v}"))
}

#[test]
fn local_run_reports_every_percentile_for_each_congestion_control() {
    for cc in ["cubic", "bbr", "reno"] {
        let v = run_json(&["bench", "local", "--cc", cc, "--count", "2000", "--warmup", "200"]);
        assert_eq!(v["mode"], "closed");
        assert_eq!(v["requests"], 2000);
        let keys = ["min", "mean", "stddev", "p50", "p90", "p95", "p99", "p999", "p9999", "max"];
        for k in keys {
            assert!(f(&v, &["latency_us", k]) >= 0.0, "{k}");
        }
        assert!(f(&v, &["latency_us", "min"]) <= f(&v, &["latency_us", "p50"]));
        assert!(f(&v, &["latency_us", "p50"]) <= f(&v, &["latency_us", "p99"]));
        assert!(f(&v, &["latency_us", "p99"]) <= f(&v, &["latency_us", "max"]));
        assert!(f(&v, &["transactions_per_second"]) > 100.0);
        assert_eq!(v["latency_us"]["significant_digits"], 3);
        assert_eq!((&v["sent"], &v["unanswered"]), (&2000.into(), &0.into()));
        assert!(v.get("attribution").is_none(), "attribution was not asked for: {v}");
        // Read back from both sockets, not assumed.
        assert_eq!(v["context"]["congestion_client"], cc, "{cc}");
        assert_eq!(v["context"]["congestion_server"], cc, "{cc}");
        assert!(v["context"]["kernel"].as_str().is_some_and(|k| !k.is_empty()));
    }
}

#[test]
fn open_loop_hits_the_asked_rate_within_one_percent() {
    let v = run_json(&[
        "bench",
        "local",
        "--rate",
        "2000/s",
        "--duration",
        "3s",
        "--warmup",
        "100",
        "--nodelay",
    ]);
    assert_eq!(v["mode"], "open");
    let asked = f(&v, &["rate_per_second", "asked"]);
    let achieved = f(&v, &["rate_per_second", "achieved"]);
    assert_eq!(asked, 2000.0);
    assert!((achieved - asked).abs() / asked < 0.01, "achieved {achieved}");
    // Open loop reports service time beside latency from the intended send time. Every
    // request's latency includes its service time, so the quantiles are ordered too. (That
    // latency really runs from the intended time is checked against a server that stalls, in
    // crates/bench/tests/client.rs.)
    assert!(f(&v, &["service_us", "p50"]) > 0.0);
    assert!(f(&v, &["latency_us", "p50"]) >= f(&v, &["service_us", "p50"]));
    assert!(f(&v, &["latency_us", "p99"]) >= f(&v, &["service_us", "p99"]));
    let requests = f(&v, &["requests"]);
    assert!((requests - 6000.0).abs() < 120.0, "requests {requests}");
}

#[test]
fn capped_buffers_are_reported_not_hidden() {
    // Ask for twice the host's wmem_max (read, never changed): the kernel caps the buffer
    // silently, and the report must say so, whatever the host's limit is.
    let wmem_max: u64 =
        std::fs::read_to_string("/proc/sys/net/core/wmem_max").unwrap().trim().parse().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big-buffers.toml");
    std::fs::write(&path, format!("send_buffer = {}\n", 2 * wmem_max)).unwrap();
    let v = run_json(&["bench", "local", "--profile", path.to_str().unwrap(), "--count", "200"]);
    for side in ["client_apply", "server_apply"] {
        let options = v[side]["options"].as_array().expect("a profile report");
        let sndbuf = options.iter().find(|o| o["option"] == "SO_SNDBUF").expect("SO_SNDBUF row");
        assert_eq!(sndbuf["outcome"]["kind"], "capped", "{side}: {sndbuf}");
        assert_eq!(sndbuf["outcome"]["limit_name"], "net.core.wmem_max", "{side}: {sndbuf}");
        assert_eq!(sndbuf["outcome"]["limit"], wmem_max, "{side}: {sndbuf}");
    }
}

#[test]
fn matrix_interleaves_and_reports_ratios() {
    let v = run_json(&[
        "bench",
        "local",
        "--matrix",
        "cc=cubic,bbr quickack=off,rearm",
        "--count",
        "800",
        "--rounds",
        "2",
        "--warmup",
        "50",
    ]);
    let rows = v["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 4);
    assert_eq!(rows[0]["config"]["cc"], "cubic");
    assert_eq!(rows[0]["config"]["quickack"], "off");
    assert_eq!(rows[3]["config"]["cc"], "bbr");
    assert_eq!(rows[3]["config"]["quickack"], "rearm");
    assert_eq!(f(&rows[0], &["p50_ratio"]), 1.0);
    for row in rows {
        assert_eq!(row["requests"], 800);
        assert!(f(row, &["latency_us", "p99"]) > 0.0);
        assert_eq!(row["context"]["congestion_client"], row["config"]["cc"]);
    }
}

#[test]
fn attribution_explains_the_tail() {
    let v = run_json(&["bench", "local", "--cc", "bbr", "--count", "3000", "--attribute"]);
    let a = &v["attribution"];
    assert!(f(a, &["snapshot_cost_ns"]) > 0.0);
    assert_eq!(a["requests"], 3000);
    assert!(f(a, &["slow_requests"]) >= 1.0);
    assert!(a["statements"].as_array().is_some_and(|s| !s.is_empty()), "{a}");
    // A BBR socket's phase is part of what is compared.
    let features = a["features"].as_array().unwrap();
    assert!(features.iter().any(|f| f["feature"] == "BBR phase at send"), "{a}");
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct ServerProcess(Child);

impl Drop for ServerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_server(port: u16) -> ServerProcess {
    start_server_with(port, &[])
}

fn start_server_with(port: u16, extra: &[&str]) -> ServerProcess {
    let bin = assert_cmd::cargo::cargo_bin("tcptail");
    let child = StdCommand::new(bin)
        .args(["bench", "server", "--listen", &format!("127.0.0.1:{port}")])
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .expect("start server");
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "server did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    ServerProcess(child)
}

/// utime + stime of a process, in clock ticks (10 ms).
fn process_cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    tcptail_netns::procfs::parse_task_stat(&stat).expect("a task's stat line").cpu_ticks()
}

#[test]
fn a_default_server_refuses_spin_and_stays_idle_between_requests() {
    let port = free_port();
    let server = start_server(port);
    let addr = format!("127.0.0.1:{port}");
    let v = run_json(&["bench", "client", &addr, "--spin", "--count", "50", "--warmup", "0"]);
    let rows = v["server_apply"]["options"].as_array().expect("server_apply rows");
    let spin = rows.iter().find(|r| r["option"] == "spin").expect("a spin row");
    assert_eq!(spin["outcome"]["kind"], "refused-by-policy", "{spin}");
    assert_eq!(v["context"]["connections"][0]["server_spin"], false);
    let warnings = v["warnings"].to_string();
    assert!(warnings.contains("refused: server policy"), "{warnings}");

    // The human output prints the refusal beside what was asked; meanwhile the server, asked
    // to spin, sleeps between the requests 250 ms apart.
    let _serial = one_at_a_time();
    let before = process_cpu_ticks(server.0.id());
    let args = ["bench", "client", &addr, "--spin", "--rate", "4/s", "--duration", "1s"];
    let out = tcptail().args(args).args(["--warmup", "0"]).output().unwrap();
    let used = process_cpu_ticks(server.0.id()) - before;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
    let line = text.lines().find(|l| l.contains("spin") && l.contains("refused: server policy"));
    assert!(line.is_some(), "no 'spin ... refused: server policy' line:\n{text}");
    assert!(used <= 10, "the server used {used} ticks (10 ms) serving 4 requests/s for 1 s");
}

#[test]
fn server_survives_hostile_peers_and_keeps_serving() {
    let port = free_port();
    let mut server = start_server(port);
    let addr = format!("127.0.0.1:{port}");
    for garbage in [
        b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
        vec![0x54, 0x54, 9, 1, 0, 0, 0, 24, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
        vec![0x54, 0x54, 1, 3, 0x40, 0, 0, 0, 0, 0, 0, 64, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0],
    ] {
        let mut s = TcpStream::connect(&addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(&garbage).unwrap();
        let mut rest = Vec::new();
        // The server closes the connection (after a best-effort error frame).
        let _ = s.read_to_end(&mut rest);
    }
    let v = run_json(&["bench", "client", &addr, "--count", "500", "--warmup", "10"]);
    assert_eq!(v["requests"], 500);
    let _ = server.0.kill();
    let _ = server.0.wait();
    let mut log = String::new();
    server.0.stderr.take().unwrap().read_to_string(&mut log).unwrap();
    assert!(log.to_lowercase().contains("magic"), "server log: {log}");
    assert!(log.to_lowercase().contains("version"), "server log: {log}");
}

#[test]
fn bad_arguments_name_the_flag() {
    let out = tcptail().args(["bench", "local", "--size", "8"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--size 8"));
    let out = tcptail().args(["bench", "local", "--rate", "0/s"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--rate"));
    let out = tcptail().args(["bench", "local", "--duration", "10"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing unit"));
    let out = tcptail().args(["bench", "local", "--profile", "nosuchprofile"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nosuchprofile"));
    let out = tcptail().args(["bench", "local", "--matrix", "colour=red"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("colour"));
    let out = tcptail().args(["bench", "client", "127.0.0.1:1", "--count", "10"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("connecting"));
}

#[test]
fn interrupt_prints_the_partial_result() {
    use std::io::BufRead;
    let _serial = one_at_a_time();
    let bin = assert_cmd::cargo::cargo_bin("tcptail");
    // Interim lines (JSON lines with --json) start with the first measured request, so the
    // first one says there is something to print: Ctrl-C then, not after a guessed delay.
    let mut child = StdCommand::new(bin)
        .args(["bench", "local", "--duration", "60s", "--json", "--warmup", "10"])
        .args(["--interval", "100ms"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    stdout.read_line(&mut first).unwrap();
    let interim: Value = serde_json::from_str(&first).expect("an interim JSON line");
    assert!(f(&interim, &["interval", "requests"]) > 0.0, "{first}");
    let pid = child.id() as i32;
    StdCommand::new("kill").args(["-INT", &pid.to_string()]).status().unwrap();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    let last = rest.lines().last().unwrap_or_else(|| panic!("no final line after {first}"));
    let v: Value = serde_json::from_str(last).expect("partial JSON");
    assert_eq!(v["interrupted"], true);
    assert!(f(&v, &["requests"]) > 0.0);
}

#[test]
fn samples_file_has_every_request() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.csv");
    let v = run_json(&[
        "bench",
        "local",
        "--count",
        "300",
        "--samples",
        path.to_str().unwrap(),
        "--warmup",
        "10",
    ]);
    assert_eq!(v["requests"], 300);
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "intended_ns,connection,seq,latency_ns,service_ns,answered");
    assert_eq!(lines.len(), 301);
    assert!(lines[1..].iter().all(|l| l.ends_with(",true")), "{}", lines[1]);
}

/// Reads the CSV written by `--samples`: (intended_ns, latency_ns, answered) per line.
fn read_samples(path: &std::path::Path) -> Vec<(u64, u64, bool)> {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines()
        .skip(1)
        .map(|line| {
            let cols: Vec<&str> = line.split(',').collect();
            (cols[0].parse().unwrap(), cols[3].parse().unwrap(), cols[5] == "true")
        })
        .collect()
}

#[test]
fn poisson_spacing_keeps_the_rate_with_exponential_gaps() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("poisson.csv");
    let v = run_json(&[
        "bench",
        "local",
        "--rate",
        "2000/s",
        "--spacing",
        "poisson",
        "--duration",
        "3s",
        "--warmup",
        "100",
        "--samples",
        path.to_str().unwrap(),
    ]);
    assert_eq!(v["run_config"]["load"]["spacing"], "poisson");
    let achieved = f(&v, &["rate_per_second", "achieved"]);
    // ~6000 exponential gaps: the realised rate is within 3 % of the asked one (4 sigma).
    assert!((achieved - 2000.0).abs() / 2000.0 < 0.03, "achieved {achieved}");
    // The gaps between intended send times are exponential: their coefficient of variation
    // is 1 (constant spacing gives 0).
    let mut intended: Vec<f64> = read_samples(&path).iter().map(|s| s.0 as f64).collect();
    intended.sort_by(f64::total_cmp);
    let gaps: Vec<f64> = intended.windows(2).map(|w| w[1] - w[0]).collect();
    let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
    let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
    let cv = var.sqrt() / mean;
    assert!((0.9..1.1).contains(&cv), "coefficient of variation {cv} over {} gaps", gaps.len());
    assert!((mean - 500_000.0).abs() < 25_000.0, "mean gap {mean} ns");
}

#[test]
fn spin_mode_runs_both_ends_spinning() {
    let v = run_json(&["bench", "local", "--spin", "--count", "500", "--warmup", "10"]);
    assert_eq!(v["requests"], 500);
    assert_eq!(v["run_config"]["spin"], true);
    let conns = v["context"]["connections"].as_array().unwrap();
    assert_eq!(conns.len(), 1);
    assert_eq!(conns[0]["server_spin"], true, "the server said it serves by spinning: {v}");
}

#[test]
fn same_cpu_puts_both_ends_on_one_cpu() {
    let cpu = *tcptail_bench::sys::allowed_cpus().unwrap().last().unwrap();
    let v = run_json(&["bench", "local", "--same-cpu", "--count", "500", "--warmup", "10"]);
    let ctx = &v["context"];
    assert_eq!(ctx["client_cpu_pinned"], cpu);
    assert_eq!(ctx["client_cpus_seen"], serde_json::json!([cpu]), "{ctx}");
    assert_eq!(ctx["server_cpu"], cpu, "{ctx}");
    assert_eq!(ctx["connections"][0]["server_cpu_requested"], cpu);
    assert_eq!(ctx["placement"], format!("same CPU ({cpu})"));
    assert!(v["warnings"].as_array().unwrap().is_empty(), "{}", v["warnings"]);
}

#[test]
fn two_connections_share_the_count_and_each_reports_its_placement() {
    let v =
        run_json(&["bench", "local", "--connections", "2", "--count", "1000", "--warmup", "10"]);
    assert_eq!((&v["requests"], &v["sent"]), (&1000.into(), &1000.into()));
    assert_eq!(v["run_config"]["connections"], 2);
    let conns = v["context"]["connections"].as_array().unwrap();
    assert_eq!(conns.len(), 2, "one placement per connection: {}", v["context"]);
    for c in conns {
        assert!(c["client_cpus_seen"].as_array().is_some_and(|s| !s.is_empty()), "{c}");
        assert!(c["server_cpu"].is_u64(), "{c}");
        assert_eq!(c["congestion_client"], c["congestion_server"], "{c}");
    }
    assert!(v["context"]["server_cpus_seen"].as_array().is_some_and(|s| !s.is_empty()));
}

#[test]
fn open_loop_attribution_covers_every_request() {
    // With no spin window the pacer is always "late" for the early snapshot: every request
    // must still get its snapshot before it is sent.
    for window in ["0us", "200us"] {
        let v = run_json(&[
            "bench",
            "local",
            "--cc",
            "bbr",
            "--rate",
            "2000/s",
            "--count",
            "2000",
            "--warmup",
            "50",
            "--attribute",
            "--spin-window",
            window,
        ]);
        let a = &v["attribution"];
        assert_eq!(a["requests"], v["requests"], "--spin-window {window}: {a}");
        assert_eq!(v["requests"], 2000);
        let numeric: Vec<&str> =
            a["numeric"].as_array().unwrap().iter().filter_map(|n| n["feature"].as_str()).collect();
        for feature in ["unacked at send (bytes)", "unsent at send (bytes)", "RTO at send (ms)"] {
            assert!(numeric.contains(&feature), "{feature} missing from {numeric:?}");
        }
        let features = a["features"].as_array().unwrap();
        assert!(features.iter().any(|f| f["feature"] == "BBR pacing gain at send"), "{a}");
    }
}

#[test]
fn a_matrix_row_whose_congestion_control_was_not_applied_is_flagged() {
    // A name no kernel has (not "vegas": as root, asking for a missing algorithm makes the
    // kernel try to load its module, which would change this host).
    let missing = "tcptailnone";
    let available = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .expect("reading tcp_available_congestion_control");
    assert!(
        !available.split_whitespace().any(|cc| cc == missing),
        "cannot build the case: {missing} is available here ({available})"
    );
    let host_default = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .unwrap()
        .trim()
        .to_string();
    let matrix = format!("cc=cubic,{missing}");
    let args = ["bench", "local", "--matrix", &matrix, "--count", "200", "--rounds", "1"];
    let v = run_json(&args);
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows[0]["congestion_client"], "cubic");
    assert!(rows[0]["problems"].as_array().unwrap().is_empty(), "{}", rows[0]["problems"]);
    let bad = &rows[1];
    assert_eq!(bad["config"]["cc"], missing);
    // What the sockets really ran, read back at both ends: the host's default.
    assert_eq!(bad["congestion_client"], host_default.as_str());
    assert_eq!(bad["congestion_server"], host_default.as_str());
    let problems = bad["problems"].to_string();
    assert!(
        problems.contains("TCP_CONGESTION") && problems.contains("not available"),
        "{problems}"
    );
    // The human table shows the read-back name and flags the row.
    let _serial = one_at_a_time();
    let out = tcptail().args(args).output().unwrap();
    assert!(out.status.success());
    let table = String::from_utf8(out.stdout).unwrap();
    let line = table.lines().find(|l| l.starts_with(&format!("cc={missing}"))).expect("the row");
    assert!(line.contains(&host_default) && line.contains(" ! "), "{line}\n{table}");
    assert!(table.contains("did not run as labelled"), "{table}");
}

#[test]
fn interrupt_during_the_warmup_stops_at_once() {
    let _serial = one_at_a_time();
    let bin = assert_cmd::cargo::cargo_bin("tcptail");
    let child = StdCommand::new(bin)
        .args(["bench", "local", "--warmup", "60s", "--duration", "5s", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_until_connected(child.id());
    let asked = Instant::now();
    StdCommand::new("kill").args(["-INT", &child.id().to_string()]).status().unwrap();
    let out = child.wait_with_output().unwrap();
    // Ignoring the Ctrl-C would run out the 60 s warm-up: half of it tells the two apart
    // however slowly a loaded host lets the process exit.
    let warmup = Duration::from_secs(60);
    assert!(asked.elapsed() < warmup / 2, "took {:?} to stop", asked.elapsed());
    assert_eq!(out.status.code(), Some(130), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("partial JSON");
    assert_eq!((&v["interrupted"], &v["requests"]), (&true.into(), &0.into()));
}

#[test]
fn server_cpu_is_checked_like_cpu() {
    let out = tcptail().args(["bench", "local", "--server-cpu", "4096"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--server-cpu 4096: not one of the CPUs"), "{err}");
}

#[test]
fn server_flags_set_its_limits() {
    use tcptail_bench::wire;
    let port = free_port();
    let bin = assert_cmd::cargo::cargo_bin("tcptail");
    let child = StdCommand::new(bin)
        .args(["bench", "server", "--listen", &format!("127.0.0.1:{port}")])
        .args(["--idle-timeout", "500ms", "--max-response-size", "4KiB"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("start server");
    let mut server = ServerProcess(child);
    let deadline = Instant::now() + Duration::from_secs(10);
    let connect = || loop {
        match TcpStream::connect(("127.0.0.1", port)) {
            Ok(s) => break s,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => panic!("server did not start: {e}"),
        }
    };
    let hello = |reply_len| wire::HelloConfig {
        profile: tcptail_sock::Profile::default(),
        server_cpu: None,
        spin: false,
        request_len: 64,
        reply_len,
    };
    let mut s = connect();
    wire::write_hello(&mut s, &hello(4096)).unwrap();
    let welcome = wire::read_welcome(&mut s).unwrap();
    assert_eq!(welcome.idle_timeout_seconds, Some(0.5));
    let mut s = connect();
    wire::write_hello(&mut s, &hello(4097)).unwrap();
    match wire::read_welcome(&mut s) {
        Err(wire::FrameError::Peer(reason)) => assert!(reason.contains("4096-byte"), "{reason}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let _ = server.0.kill();
    let _ = server.0.wait();
    let bad = tcptail().args(["bench", "server", "--idle-timeout", "0s"]).output().unwrap();
    assert_eq!(bad.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--idle-timeout"));
}
