//! `tcptail exporter` and `tcptail top` against real loopback connections, and the Prometheus
//! integration: Prometheus from Debian scrapes the exporter, series arrive with sane values and
//! the send-queue-delay alert fires when a slow reader pushes the delay above its budget.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use assert_cmd::cargo::CommandCargoExt;
use common::exporter::{self, Exporter, Killed};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The exporter and its address.
fn start(extra: &[&str]) -> (Exporter, SocketAddr) {
    let exporter = Exporter::start(extra);
    let addr = exporter.addr;
    (exporter, addr)
}

/// `GET PATH` with an `Accept` header: the status and the body.
fn http_get(addr: SocketAddr, path: &str, accept: &str) -> (u16, String) {
    let reply = exporter::get(addr, path, &format!("Accept: {accept}\r\n"));
    (reply.status, reply.text())
}

/// A loopback listener and one connection to it, with `n` bytes written by the client.
fn conn(n: usize) -> (TcpListener, TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (s, _) = l.accept().unwrap();
    c.write_all(&vec![1u8; n]).unwrap();
    (l, c, s)
}

fn selector_file(dir: &Path, port: u16, cap: usize) -> PathBuf {
    let p = dir.join("sel.toml");
    std::fs::write(
        &p,
        format!(
            "max_connections = {cap}\n[[selector]]\nname = \"test\"\nremote_ports = [\"{port}\"]\nremote_addrs = [\"127.0.0.0/8\"]\n"
        ),
    )
    .unwrap();
    p
}

#[test]
fn exporter_serves_selected_loopback_connections() {
    let (l, _c, _s) = conn(50_000);
    let (_c2, _s2) = {
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        (c, l.accept().unwrap().0)
    };
    let port = l.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let sel = selector_file(dir.path(), port, 1);
    let (_g, addr) = start(&["--selectors", sel.to_str().unwrap()]);
    let (status, body) = http_get(addr, "/metrics", "text/plain");
    assert_eq!(status, 200, "{body}");
    let rtt: Vec<&str> =
        body.lines().filter(|l| l.starts_with("tcptail_connection_rtt_seconds{")).collect();
    assert_eq!(rtt.len(), 1, "cap of 1: {rtt:?}");
    assert!(rtt[0].starts_with(
        r#"tcptail_connection_rtt_seconds{selector="test",peer="127.0.0.1",conn="0"} "#
    ));
    let v: f64 = rtt[0].rsplit(' ').next().unwrap().parse().unwrap();
    assert!(v > 0.0 && v < 0.1, "loopback RTT {v}");
    assert!(body.contains("tcptail_connections_unexported_total 1\n"), "{body}");
    assert!(body.contains(r#"tcptail_sockets{group="test",state="ESTABLISHED""#));
    assert!(body.contains(r#"tcptail_sockets{group="other",state="LISTEN""#));
    assert!(body.contains("tcptail_connection_congestion_info{"));
    assert!(!body.contains(&format!("{}", _c2.local_addr().unwrap().port())));
    let (_, om) = http_get(addr, "/metrics", "application/openmetrics-text; version=1.0.0");
    assert!(om.ends_with("# EOF\n"));
    assert_eq!(http_get(addr, "/nope", "*/*").0, 404);
}

#[test]
fn exporter_no_aggregates_reads_only_selected_sockets() {
    let (l, _c, _s) = conn(10);
    let dir = tempfile::tempdir().unwrap();
    let sel = selector_file(dir.path(), l.local_addr().unwrap().port(), 10);
    let (_g, addr) = start(&["--selectors", sel.to_str().unwrap(), "--no-aggregates"]);
    let (_, body) = http_get(addr, "/metrics", "text/plain");
    // Kernel-filtered: the client side (remote port = listener) only.
    assert!(body.contains("tcptail_sockets_seen 1\n"), "{body}");
    assert!(!body.contains("group=\"other\""));
}

#[test]
fn bad_selector_file_exits_1_naming_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.toml");
    std::fs::write(&p, "[[selector]]\nname = \"x\"\nremote_ports = [\"99999\"]\n").unwrap();
    let out = common::tcptail(&[
        "exporter",
        "--listen",
        "127.0.0.1:0",
        "--selectors",
        p.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad port \"99999\""), "{err}");
}

#[test]
fn top_once_json_lists_matched_connections() {
    let (l, _c, _s) = conn(100_000);
    let port = l.local_addr().unwrap().port().to_string();
    let out = Command::cargo_bin("tcptail")
        .unwrap()
        .args(["top", "--once", "--json", "--dport", &port, "--sort", "rtt"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let arr = v.as_array().unwrap();
    assert_eq!(arr.len(), 1, "{v:#}");
    let c = &arr[0];
    assert_eq!(c["remote"].as_str().unwrap(), format!("127.0.0.1:{port}"));
    assert!(c["info"]["rtt_us"].as_u64().unwrap() > 0);
    assert!(c["derived"].get("send_queue_delay").is_some());
    // The table form.
    let out = Command::cargo_bin("tcptail")
        .unwrap()
        .args(["top", "--once", "--port", &port])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("SQDELAY_MS") && text.matches(&port).count() == 2, "{text}");
}

#[test]
fn top_shows_the_state_and_json_is_not_truncated() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    let mut held = Vec::new();
    for _ in 0..45 {
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        held.push((c, l.accept().unwrap().0));
    }
    // One more connection closed by the client first: its client end is in TIME_WAIT.
    let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (mut s, _) = l.accept().unwrap();
    drop(c);
    // The server end has seen the client's FIN (end of stream) before it closes in turn.
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(s.read(&mut [0u8; 1]).unwrap(), 0, "the client's FIN");
    drop(s);
    let top = |args: &[&str]| {
        let out = Command::cargo_bin("tcptail").unwrap().arg("top").args(args).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let count = |text: &str, state: &str| {
        text.lines().filter(|l| l.contains(&format!(" {state} "))).count()
    };
    // The client end enters TIME_WAIT when the server's FIN arrives: wait for it to show.
    let deadline = Instant::now() + Duration::from_secs(10);
    let text = loop {
        let text = top(&["--once", "--all-states", "--dport", &port, "--limit", "0"]);
        if count(&text, "TIME_WAIT") >= 1 || Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let header = text.lines().nth(1).unwrap();
    assert!(header.contains(" STATE "), "{text}");
    let states = |state: &str| count(&text, state);
    assert_eq!(states("ESTABLISHED"), 45, "{text}");
    assert_eq!(states("TIME_WAIT"), 1, "{text}");
    // --json lists every connection; the table says what it leaves out.
    let json: serde_json::Value =
        serde_json::from_str(&top(&["--once", "--json", "--dport", &port])).unwrap();
    assert_eq!(json.as_array().unwrap().len(), 45);
    let table = top(&["--once", "--dport", &port]);
    assert_eq!(table.lines().filter(|l| l.contains(" ESTABLISHED ")).count(), 40);
    assert!(table.contains("(5 more not shown: --limit 0 shows all)"), "{table}");
    let limited: serde_json::Value =
        serde_json::from_str(&top(&["--once", "--json", "--dport", &port, "--limit", "3"]))
            .unwrap();
    assert_eq!(limited.as_array().unwrap().len(), 3);
}

/// A virtualenv with the reference Python client's exposition parsers (`prometheus_client`
/// from PyPI, pinned), made once under the target directory.
fn parser_python() -> PathBuf {
    static MADE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _lock = MADE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("prometheus-client-venv");
    let python = venv.join("bin/python");
    let ready = Command::new(&python)
        .args(["-c", "import prometheus_client.openmetrics.parser"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ready {
        let out = Command::new("python3").args(["-m", "venv"]).arg(&venv).output().unwrap();
        assert!(out.status.success(), "python3 -m venv: {}", String::from_utf8_lossy(&out.stderr));
        let out = Command::new(venv.join("bin/pip"))
            .args(["install", "-q", "prometheus-client==0.26.0"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "installing prometheus-client from PyPI (needed to check the exposition): {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    python
}

/// Parses both expositions with prometheus_client (the OpenMetrics parser is strict: types,
/// suffixes, `# EOF`, label syntax) and prints `{format: {family: [type, samples...]}}`.
const PARSE_EXPOSITION: &str = r#"
import json, sys
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om
from prometheus_client.parser import text_string_to_metric_families as text
out = {}
for name, parse, path in (("openmetrics", om, sys.argv[1]), ("text", text, sys.argv[2])):
    fams = {}
    for f in parse(open(path).read()):
        fams[f.name] = [f.type] + [[s.name, s.labels, s.value] for s in f.samples]
    out[name] = fams
print(json.dumps(out))
"#;

#[test]
fn both_expositions_parse_with_the_reference_client() {
    let (l, _c, _s) = conn(20_000);
    let (_c2, _s2) = {
        let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        (c, l.accept().unwrap().0)
    };
    let dir = tempfile::tempdir().unwrap();
    let sel = selector_file(dir.path(), l.local_addr().unwrap().port(), 1);
    let (_g, addr) = start(&["--selectors", sel.to_str().unwrap()]);
    let (status, om) = http_get(addr, "/metrics", "application/openmetrics-text; version=1.0.0");
    assert_eq!(status, 200);
    let (_, text) = http_get(addr, "/metrics", "text/plain");
    let (om_file, text_file) = (dir.path().join("om.txt"), dir.path().join("text.txt"));
    std::fs::write(&om_file, &om).unwrap();
    std::fs::write(&text_file, &text).unwrap();
    let out = Command::new(parser_python())
        .args(["-c", PARSE_EXPOSITION])
        .args([&om_file, &text_file])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "prometheus_client rejected the exposition: {}\n{om}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let om = &v["openmetrics"];
    for (family, ty) in [
        ("tcptail_connection_rtt_seconds", "gauge"),
        ("tcptail_connection_retransmitted_segments", "counter"),
        ("tcptail_connection_congestion", "info"),
        ("tcptail_rtt_seconds", "gaugehistogram"),
        ("tcptail_series_dropped", "counter"),
        ("tcptail_scrapes_incomplete", "counter"),
    ] {
        assert_eq!(om[family][0], ty, "{family}: {om:#}");
    }
    let rtt = &om["tcptail_connection_rtt_seconds"][1];
    assert_eq!(rtt[1]["selector"], "test");
    assert!(rtt[2].as_f64().unwrap() > 0.0);
    // The same families arrive through the text parser.
    let txt = &v["text"];
    assert_eq!(txt["tcptail_connection_rtt_seconds"][0], "gauge");
    assert_eq!(txt["tcptail_rtt_seconds"][0], "histogram");
}

/// The live view on a real terminal (a pty from script(1)): single keys act without Enter,
/// and the terminal is back in canonical, echoing mode after `q` and after Ctrl-C. script(1)
/// runs the command with `$SHELL`: both bash and dash are tried, because a Ctrl-C that
/// reached the terminal driver as SIGINT would kill dash before `stty -a` ran.
#[test]
fn top_takes_single_keys_and_restores_the_terminal() {
    let (_l, _a, _b) = conn(1);
    let bin = assert_cmd::cargo::cargo_bin("tcptail");
    let cases = ["/bin/sh", "/bin/bash"].into_iter().flat_map(|sh| [(sh, "q"), (sh, "\u{3}")]);
    for (shell, quit) in cases {
        let command = format!("{} top --interval-ms 100; stty -a", bin.display());
        let mut child = Command::new("script")
            .args(["-qfec", &command, "/dev/null"])
            .env("SHELL", shell)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("script(1) (bsdutils) runs tcptail on a pty");
        let mut stdin = child.stdin.take().expect("piped");
        let output = Output::collect(child.stdout.take().expect("piped"));
        // Keys go in once top shows a frame (its terminal is in raw mode by then).
        output.wait_for("sorted by", Duration::from_secs(30), shell);
        stdin.write_all(b"r").unwrap();
        output.wait_for("sorted by Rtt", Duration::from_secs(30), shell);
        stdin.write_all(quit.as_bytes()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while child.try_wait().unwrap().is_none() {
            assert!(
                Instant::now() < deadline,
                "{shell}: top did not quit on {quit:?} without Enter"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = output.finish();
        assert!(out.contains("sorted by Rtt"), "{shell}: the r key did not re-sort: {out}");
        // stty -a ran after tcptail on the same terminal: canonical mode and echo are back.
        let modes: Vec<&str> = out.split_whitespace().collect();
        let restored = ["icanon", "echo", "isig"].iter().all(|mode| modes.contains(mode));
        assert!(restored, "{shell}, {quit:?}: terminal modes not restored: {out}");
    }
}

/// A child's output read as it comes, to wait for what it prints.
struct Output {
    text: Arc<std::sync::Mutex<String>>,
    reader: std::thread::JoinHandle<()>,
}

impl Output {
    fn collect(mut from: impl Read + Send + 'static) -> Output {
        let text = Arc::new(std::sync::Mutex::new(String::new()));
        let sink = text.clone();
        let reader = std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = from.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().unwrap().push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        });
        Output { text, reader }
    }

    fn count(&self, needle: &str) -> usize {
        self.text.lock().unwrap().matches(needle).count()
    }

    /// Waits until `needle` has been printed `times` times, failing after `timeout`.
    fn wait_for_n(&self, needle: &str, times: usize, timeout: Duration, what: &str) {
        let deadline = Instant::now() + timeout;
        while self.count(needle) < times {
            assert!(
                Instant::now() < deadline,
                "{what}: {needle:?} not printed {times} times in {timeout:?}:\n{}",
                self.text.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn wait_for(&self, needle: &str, timeout: Duration, what: &str) {
        self.wait_for_n(needle, 1, timeout, what);
    }

    /// Everything, once the child closed its output.
    fn finish(self) -> String {
        self.reader.join().unwrap();
        Arc::try_unwrap(self.text).unwrap().into_inner().unwrap()
    }
}

// ---------------------------------------------------------------- Prometheus integration

/// Installs Prometheus once per test binary: the tests that need it run in parallel, and two
/// concurrent apt-get runs fail on apt's lock.
fn ensure_prometheus() {
    static INSTALLED: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let mut installed = INSTALLED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if *installed {
        return;
    }
    let out = Command::new(repo().join("deploy/prometheus/install-prometheus.sh"))
        .output()
        .expect("run deploy/prometheus/install-prometheus.sh");
    assert!(
        out.status.success(),
        "Prometheus is required and could not be installed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    *installed = true;
}

fn promtool(args: &[&str], dir: &Path) -> String {
    let out = Command::new("promtool").args(args).current_dir(dir).output().unwrap();
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "promtool {args:?}: {text}");
    text
}

fn encode(q: &str) -> String {
    q.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'.' | b'-' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn query(prom: SocketAddr, q: &str) -> serde_json::Value {
    let (status, body) = http_get(prom, &format!("/api/v1/query?query={}", encode(q)), "*/*");
    assert_eq!(status, 200, "{q}: {body}");
    serde_json::from_str(&body).unwrap()
}

fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(start.elapsed() < timeout, "timed out after {timeout:?} waiting for {what}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

#[test]
fn promtool_checks_and_unit_tests_the_shipped_rules() {
    ensure_prometheus();
    let dir = repo().join("deploy/prometheus");
    assert!(promtool(&["check", "rules", "alerts.yml"], &dir).contains("SUCCESS"));
    assert!(promtool(&["test", "rules", "alerts_test.yml"], &dir).contains("SUCCESS"));
}

#[test]
fn prometheus_scrapes_exporter_and_send_queue_delay_alert_fires() {
    ensure_prometheus();
    // A slow reader: the receiver's small buffer and 40 KB/s reads keep the sender's
    // unsent bytes large while its delivery rate is low, so notsent / rate >> 100 ms.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let stop = Arc::new(AtomicBool::new(false));
    let mut client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (mut server, _) = l.accept().unwrap();
    let s1 = stop.clone();
    let writer = std::thread::spawn(move || {
        client.set_write_timeout(Some(Duration::from_millis(200))).unwrap();
        let buf = vec![7u8; 64 * 1024];
        while !s1.load(Ordering::Relaxed) {
            let _ = client.write(&buf);
        }
    });
    let s2 = stop.clone();
    let reader = std::thread::spawn(move || {
        let mut buf = [0u8; 400];
        while !s2.load(Ordering::Relaxed) {
            let _ = server.read(&mut buf);
            std::thread::sleep(Duration::from_millis(10));
        }
    });

    let dir = tempfile::tempdir().unwrap();
    let sel = selector_file(dir.path(), port, 10);
    let (_g, exp) = start(&["--selectors", sel.to_str().unwrap()]);
    // The exposition passes promtool's linter.
    let (_, body) = http_get(exp, "/metrics", "text/plain");
    let metrics_file = dir.path().join("metrics.txt");
    std::fs::write(&metrics_file, &body).unwrap();
    let lint = Command::new("sh")
        .arg("-c")
        .arg(format!("promtool check metrics < {}", metrics_file.display()))
        .output()
        .unwrap();
    assert!(
        lint.status.success(),
        "promtool check metrics: {}",
        String::from_utf8_lossy(&lint.stderr)
    );

    let prom_port = free_port();
    let cfg = dir.path().join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {}\nscrape_configs:\n  - job_name: tcptail\n    static_configs:\n      - targets: ['{exp}']\n",
            repo().join("deploy/prometheus/alerts.yml").display()
        ),
    )
    .unwrap();
    let prom = Killed(
        Command::new("prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start prometheus"),
    );
    let paddr: SocketAddr = format!("127.0.0.1:{prom_port}").parse().unwrap();
    wait_for("prometheus ready", Duration::from_secs(30), || {
        TcpStream::connect(paddr).ok().filter(|_| http_get(paddr, "/-/ready", "*/*").0 == 200)
    });
    let value = |q: &str| -> Option<f64> {
        let v = query(paddr, q);
        v["data"]["result"].as_array()?.first()?["value"][1].as_str()?.parse().ok()
    };
    let up = wait_for("up == 1", Duration::from_secs(30), || {
        value("up{job=\"tcptail\"}").filter(|&v| v == 1.0)
    });
    assert_eq!(up, 1.0);
    let sel_q = r#"{selector="test",peer="127.0.0.1",conn="0"}"#;
    let rtt = wait_for("rtt series", Duration::from_secs(30), || {
        value(&format!("tcptail_connection_rtt_seconds{sel_q}"))
    });
    assert!(rtt > 0.0 && rtt < 1.0, "rtt {rtt}");
    let min_rtt = value(&format!("tcptail_connection_min_rtt_seconds{sel_q}")).unwrap();
    assert!(min_rtt > 0.0 && min_rtt <= rtt * 100.0, "min rtt {min_rtt}");
    let cwnd = value(&format!("tcptail_connection_cwnd_segments{sel_q}")).unwrap();
    assert!(cwnd >= 1.0);
    let seen = value("tcptail_sockets_seen").unwrap();
    assert!(seen >= 3.0);
    let delay = wait_for("send-queue delay > 0.1 s", Duration::from_secs(30), || {
        value(&format!("tcptail_connection_send_queue_delay_seconds{sel_q}")).filter(|&d| d > 0.1)
    });
    assert!(delay < 3600.0, "delay {delay}");
    // The alert goes pending, then fires after its `for: 15s`.
    let alert = wait_for("TcptailSendQueueDelayHigh firing", Duration::from_secs(90), || {
        let (_, body) = http_get(paddr, "/api/v1/alerts", "*/*");
        let v: serde_json::Value = serde_json::from_str(&body).ok()?;
        v["data"]["alerts"]
            .as_array()?
            .iter()
            .find(|a| {
                a["labels"]["alertname"] == "TcptailSendQueueDelayHigh"
                    && a["labels"]["selector"] == "test"
                    && a["state"] == "firing"
            })
            .cloned()
    });
    assert_eq!(alert["labels"]["peer"], "127.0.0.1");
    // Every dashboard query is valid PromQL (with its variables substituted).
    let dash: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(repo().join("deploy/grafana/tcptail.json")).unwrap(),
    )
    .unwrap();
    for panel in dash["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().unwrap() {
            let q = t["expr"].as_str().unwrap().replace("$selector", ".*").replace("$peer", ".*");
            assert_eq!(query(paddr, &q)["status"], "success", "{q}");
        }
    }
    drop(prom);
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    reader.join().unwrap();
}

#[test]
fn netns_flag_reads_the_named_namespace() {
    let cleanup = tcptail_netns::Cleanup::new();
    let ns = tcptail_netns::Netns::create(&cleanup, "diag")
        .expect("creating a network namespace needs root (CI runs as root)");
    ns.ip(["link", "set", "lo", "up"]).unwrap();
    // Sockets created on a thread inside the namespace stay in it.
    let (l, _c, _s) = ns.run(|| conn(1000)).unwrap();
    let port = l.local_addr().unwrap().port().to_string();
    let top = |netns: Option<&str>| -> serde_json::Value {
        let mut cmd = Command::cargo_bin("tcptail").unwrap();
        cmd.args(["top", "--once", "--json", "--all-states", "--port", &port]);
        if let Some(n) = netns {
            cmd.args(["--netns", n]);
        }
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    let inside = top(Some(ns.name()));
    assert_eq!(inside.as_array().unwrap().len(), 3, "listener + both ends: {inside:#}");
    // The same port in the test's own namespace is someone else's or nobody's: never ours.
    let outside = top(None);
    assert!(
        outside
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["cookie"] != inside[0]["cookie"] || c["local"] != inside[0]["local"])
    );
    // The exporter in the namespace.
    let (_g, addr) = start(&["--netns", ns.name()]);
    let (_, body) = http_get(addr, "/metrics", "text/plain");
    assert!(body.contains(r#"tcptail_sockets{group="other",state="LISTEN""#), "{body}");
    let out = Command::cargo_bin("tcptail")
        .unwrap()
        .args(["top", "--once", "--netns", "tcptail-no-such-ns"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/run/netns/tcptail-no-such-ns"));
    drop(ns);
}

#[test]
fn top_live_view_refreshes() {
    let (l, _c, _s) = conn(10);
    let port = l.local_addr().unwrap().port().to_string();
    let mut child = Command::cargo_bin("tcptail")
        .unwrap()
        .args(["top", "--interval-ms", "100", "--sort", "retrans", "--port", &port])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let output = Output::collect(child.stdout.take().unwrap());
    let frame = "tcptail top: 2 connections, sorted by Retrans";
    output.wait_for(frame, Duration::from_secs(30), "top");
    // Three frames at the 100 ms interval, however long the start took on a loaded host.
    output.wait_for_n(frame, 3, Duration::from_secs(30), "top");
    child.kill().unwrap();
    let _ = child.wait();
    let text = output.finish();
    let frames = text.matches(frame).count();
    assert!(frames >= 3, "{frames} frames:\n{text}");
}

#[test]
fn closed_connections_feed_bounded_histograms() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let sel = selector_file(dir.path(), port, 10);
    let (_g, addr) = start(&["--selectors", sel.to_str().unwrap()]);
    // Two connections live through a tracking dump (they get a lifetime): one closes
    // gracefully, one by a reset; a third opens and closes between two dumps. The selector
    // matches the client ends (remote port = port).
    let mut long = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (mut long_peer, _) = l.accept().unwrap();
    let reset = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let (reset_peer, _) = l.accept().unwrap();
    long.write_all(&[1u8; 200_000]).unwrap();
    let mut got = vec![0u8; 200_000];
    long_peer.read_exact(&mut got).unwrap();
    // Both client ends are tracked by the close watcher (it dumps every second).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, body) = http_get(addr, "/metrics", "text/plain");
        let tracked = body
            .lines()
            .find_map(|l| l.strip_prefix("tcptail_closed_tracked_connections "))
            .and_then(|v| v.parse::<u64>().ok());
        if tracked.is_some_and(|n| n >= 2) {
            break;
        }
        assert!(Instant::now() < deadline, "the close watcher never tracked both:\n{body}");
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(long);
    drop(long_peer);
    rustix::net::sockopt::set_socket_linger(&reset, Some(Duration::ZERO)).unwrap();
    drop(reset);
    drop(reset_peer);
    let quick = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    drop(l.accept().unwrap());
    drop(quick);
    let deadline = Instant::now() + Duration::from_secs(10);
    let body = loop {
        let (status, body) = http_get(addr, "/metrics", "text/plain");
        assert_eq!(status, 200, "{body}");
        let closed: u64 = body
            .lines()
            .filter(|l| l.starts_with("tcptail_closed_connections_total{"))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum();
        if closed >= 3 || Instant::now() > deadline {
            assert_eq!(closed, 3, "three client ends closed, each counted once:\n{body}");
            break body;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let count = |family: &str| -> u64 {
        body.lines()
            .filter(|l| l.starts_with(&format!("{family}_count{{")))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum()
    };
    assert_eq!(count("tcptail_closed_lifetime_seconds"), 2, "{body}");
    assert_eq!(count("tcptail_closed_bytes_acked_bytes"), 3, "{body}");
    let big = body
        .lines()
        .filter(|l| {
            l.starts_with("tcptail_closed_bytes_acked_bytes_bucket{") && l.contains("le=\"100000\"")
        })
        .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
        .sum::<u64>();
    assert_eq!(big, 2, "the long connection acked 200 kB, the others less:\n{body}");
    assert!(body.contains("# TYPE tcptail_closed_max_rtt_seconds histogram"), "{body}");
    assert!(body.contains("tcptail_closed_notifications_lost_total 0\n"), "{body}");
    // No per-connection label anywhere in the closed families.
    for line in body.lines().filter(|l| l.starts_with("tcptail_closed_")) {
        assert!(!line.contains("peer=") && !line.contains("conn="), "{line}");
    }
    let (_, om) = http_get(addr, "/metrics", "application/openmetrics-text; version=1.0.0");
    assert!(om.contains("tcptail_closed_connections_total{") && om.ends_with("# EOF\n"));
}

/// `tcptail top --once --json` over `port`'s connections with `--source SOURCE`, run through
/// `wrap` (e.g. setpriv): exit status, the connections, stderr.
fn top_json(wrap: &[&str], source: &str, port: &str) -> (bool, serde_json::Value, String) {
    let bin = common::bin();
    let mut cmd = match wrap.split_first() {
        Some((first, rest)) => {
            let mut c = Command::new(first);
            c.args(rest).arg("--").arg(&bin);
            c
        }
        None => Command::new(&bin),
    };
    let out =
        cmd.args(["top", "--once", "--json", "--port", port, "--source", source]).output().unwrap();
    let json = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (out.status.success(), json, String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn top_reads_the_same_connections_through_the_bpf_iterator_or_falls_back() {
    tcptail_netns::ensure_root().expect("the BPF socket iterator needs root (CI runs as root)");
    let (l, _c, _s) = conn(50_000);
    let port = l.local_addr().unwrap().port().to_string();
    let keys = |v: &serde_json::Value| -> Vec<(String, String, u64, String)> {
        let mut k: Vec<_> = v
            .as_array()
            .expect("a JSON list")
            .iter()
            .map(|c| {
                (
                    c["local"].as_str().unwrap().to_owned(),
                    c["remote"].as_str().unwrap().to_owned(),
                    c["cookie"].as_u64().unwrap(),
                    c["cc"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect();
        k.sort();
        k
    };
    let (ok, bpf, err) = top_json(&[], "bpf", &port);
    assert!(ok, "{err}");
    assert!(err.is_empty(), "no fallback line as root: {err}");
    let (ok, diag, err) = top_json(&[], "sock-diag", &port);
    assert!(ok, "{err}");
    assert_eq!(keys(&bpf).len(), 2, "{bpf}");
    assert_eq!(keys(&bpf), keys(&diag));
    let acked = |v: &serde_json::Value| {
        let mut a: Vec<_> =
            v.as_array().unwrap().iter().map(|c| c["info"]["bytes_acked"].clone()).collect();
        a.sort_by_key(|x| x.as_u64());
        a
    };
    assert_eq!(acked(&bpf), acked(&diag));

    // Without the capabilities a BPF program needs, auto reads through sock_diag and says so
    // in one line; an explicit --source bpf is an error naming the flag.
    let unprivileged = ["setpriv", "--bounding-set", "-bpf,-perfmon,-sys_admin"];
    let (ok, fell_back, err) = top_json(&unprivileged, "auto", &port);
    assert!(ok, "{err}");
    assert_eq!(keys(&fell_back), keys(&diag));
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("sock_diag") && err.contains("CAP_BPF"), "{err}");
    let (ok, _, err) = top_json(&unprivileged, "bpf", &port);
    assert!(!ok);
    assert!(err.contains("--source") && err.contains("CAP_BPF"), "{err}");
}
