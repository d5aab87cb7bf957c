//! The exporter's HTTP endpoint under abuse, on the real binary: scrapes complete while idle
//! sockets and slow readers hold connections, oversized headers are refused, memory stays
//! bounded, idle and non-reading clients are cut off by the timeouts; TLS and basic auth from a
//! node_exporter-style web config (curl as the client), gzip when asked.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Output};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use common::exporter::{Exporter, get};

/// The exporter with closed-connection listening off (these tests are about HTTP).
fn start(extra: &[&str]) -> Exporter {
    Exporter::start(&[&["--no-closed"], extra].concat())
}

/// `n` loopback connections to one listener, and a selector file that gives each client side
/// its own series, so a scrape's body is large (about 3 KiB per connection).
fn many_connections(dir: &Path, n: usize) -> (TcpListener, Vec<(TcpStream, TcpStream)>, String) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let pairs = (0..n)
        .map(|_| {
            let c = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            (c, l.accept().unwrap().0)
        })
        .collect();
    let sel = dir.join("sel.toml");
    std::fs::write(
        &sel,
        format!(
            "max_connections = {n}\n[[selector]]\nname = \"many\"\nremote_ports = [\"{}\"]\n",
            l.local_addr().unwrap().port()
        ),
    )
    .unwrap();
    (l, pairs, sel.to_str().unwrap().to_owned())
}

/// A client with a 4 KiB receive buffer that asks for /metrics and then reads slowly. Its MSS
/// is an Ethernet-sized one, not loopback's 64 KiB, so the server's send buffer stays small (as
/// on a real network) and a body the reader does not take stays in the exporter.
fn slow_reader(addr: SocketAddr) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.set_tcp_mss(1400).unwrap();
    socket.connect(&addr.into()).unwrap();
    let mut s: TcpStream = socket.into();
    write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    s
}

#[test]
fn scrape_completes_while_idle_sockets_and_slow_readers_hold_connections() {
    let dir = tempfile::tempdir().unwrap();
    let (_l, _pairs, sel) = many_connections(dir.path(), 300);
    let exporter = start(&["--selectors", &sel]);
    let warm = get(exporter.addr, "/metrics", "");
    assert_eq!(warm.status, 200);
    let body_len = warm.body.len();
    assert!(body_len > 256 * 1024, "the body must outgrow the socket buffers: {body_len} B");
    let rss_before = exporter.rss();

    let idle: Vec<TcpStream> =
        (0..200).map(|_| TcpStream::connect(exporter.addr).unwrap()).collect();
    let mut slow: Vec<TcpStream> = (0..20).map(|_| slow_reader(exporter.addr)).collect();
    // Each slow reader's response has started: the server is writing to all of them.
    for s in &mut slow {
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut first = [0u8; 12];
        s.read_exact(&mut first).expect("a slow reader's response starts");
        assert_eq!(&first, b"HTTP/1.1 200");
    }
    // They go on reading, 256 bytes each every 50 ms, while the scrape runs.
    let stop = Arc::new(AtomicBool::new(false));
    let reading = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 256];
            while !stop.load(Ordering::Relaxed) {
                for s in &mut slow {
                    s.set_read_timeout(Some(Duration::from_millis(1))).unwrap();
                    let _ = s.read(&mut buf);
                }
                // The slowness is the point: a reader at ~5 KB/s per connection.
                std::thread::sleep(Duration::from_millis(50));
            }
            slow
        })
    };

    let start = Instant::now();
    let reply = get(exporter.addr, "/metrics", "");
    let took = start.elapsed();
    let rss_after = exporter.rss();
    stop.store(true, Ordering::Relaxed);
    let slow = reading.join().unwrap();
    eprintln!(
        "scrape under abuse: {took:?} for {} B; RSS {} -> {} KiB (200 idle, {} slow readers)",
        reply.body.len(),
        rss_before / 1024,
        rss_after / 1024,
        slow.len()
    );
    assert_eq!(reply.status, 200);
    assert!(String::from_utf8_lossy(&reply.body).contains("tcptail_sockets_seen"));
    assert!(took < Duration::from_secs(1), "the scrape took {took:?} under abuse");
    // Bounded: the limit (128 connections) times one body, plus slack for the allocator.
    let bound = 128 * body_len as u64 + 64 * 1024 * 1024;
    assert!(
        rss_after < rss_before + bound,
        "RSS grew from {rss_before} to {rss_after} B (bound +{bound} B)"
    );
    drop(idle);
}

#[test]
fn oversized_headers_are_refused_with_431() {
    let exporter = start(&[]);
    let mut s = TcpStream::connect(exporter.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let pad = "a".repeat(1000);
    let mut request = String::from("GET /metrics HTTP/1.1\r\nHost: x\r\n");
    for i in 0..100 {
        request.push_str(&format!("X-Pad-{i}: {pad}\r\n"));
    }
    request.push_str("\r\n");
    assert!(request.len() > 100_000);
    // The server may close before reading it all; the answer is what matters.
    let _ = s.write_all(request.as_bytes());
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw);
    assert!(text.starts_with("HTTP/1.1 431"), "{text:?}");
    // The exporter is fine afterwards.
    assert_eq!(get(exporter.addr, "/metrics", "").status, 200);
}

#[test]
fn idle_and_non_reading_clients_are_cut_off_by_the_timeouts() {
    let dir = tempfile::tempdir().unwrap();
    let (_l, _pairs, sel) = many_connections(dir.path(), 300);
    let exporter =
        start(&["--selectors", &sel, "--web-read-timeout", "1s", "--web-write-timeout", "1s"]);
    let full = get(exporter.addr, "/metrics", "").body.len();

    // Idle: closed by the server after the read timeout.
    let mut idle = TcpStream::connect(exporter.addr).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let start = Instant::now();
    let n = idle.read(&mut [0u8; 16]).unwrap_or(0);
    let waited = start.elapsed();
    assert_eq!(n, 0, "an idle connection gets no data");
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(5),
        "closed after {waited:?}, read timeout 1 s"
    );

    // Not reading: the response is cut after the write timeout.
    let mut stalled = slow_reader(exporter.addr);
    // Reads nothing for three write timeouts: the behaviour under test.
    std::thread::sleep(Duration::from_secs(3));
    stalled.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut raw = Vec::new();
    let _ = stalled.read_to_end(&mut raw);
    assert!(raw.starts_with(b"HTTP/1.1 200"));
    assert!(
        raw.len() < full,
        "the stalled reader got {} B of a {full} B body: not cut off",
        raw.len()
    );
    // Others are served all along.
    assert_eq!(get(exporter.addr, "/metrics", "").status, 200);
}

#[test]
fn gzip_when_asked_and_identity_otherwise() {
    let exporter = start(&[]);
    let plain = get(exporter.addr, "/metrics", "");
    assert_eq!(plain.status, 200);
    assert_eq!(plain.header("content-encoding"), None);
    let zipped = get(exporter.addr, "/metrics", "Accept-Encoding: gzip\r\n");
    assert_eq!(zipped.status, 200);
    assert_eq!(zipped.header("content-encoding"), Some("gzip"));
    assert_eq!(zipped.header("vary"), Some("Accept-Encoding"));
    let mut text = String::new();
    flate2::read::GzDecoder::new(&zipped.body[..]).read_to_string(&mut text).unwrap();
    let names = |t: &str| -> Vec<String> {
        t.lines().filter(|l| l.starts_with("# TYPE ")).map(str::to_owned).collect()
    };
    let plain_text = String::from_utf8(plain.body).unwrap();
    assert!(!names(&text).is_empty());
    assert_eq!(names(&text), names(&plain_text), "same families, compressed or not");
    assert!(zipped.body.len() < plain_text.len());
    let refused = get(exporter.addr, "/metrics", "Accept-Encoding: gzip;q=0\r\n");
    assert_eq!(refused.header("content-encoding"), None);
}

fn curl(args: &[&str]) -> Output {
    Command::new("curl").args(["-sS", "--max-time", "20"]).args(args).output().expect("curl")
}

#[test]
fn tls_and_basic_auth_from_the_web_config() {
    let dir = tempfile::tempdir().unwrap();
    let cert =
        rcgen::generate_simple_self_signed(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
            .unwrap();
    let ca = dir.path().join("server.crt");
    std::fs::write(&ca, cert.cert.pem()).unwrap();
    std::fs::write(dir.path().join("server.key"), cert.signing_key.serialize_pem()).unwrap();
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    let web = dir.path().join("web.yml");
    std::fs::write(
        &web,
        format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\
             basic_auth_users:\n  prometheus: '{hash}'\n"
        ),
    )
    .unwrap();
    let exporter = start(&["--web.config.file", web.to_str().unwrap()]);
    let url = format!("https://127.0.0.1:{}/metrics", exporter.addr.port());
    let ca = ca.to_str().unwrap();
    let status = |args: &[&str]| -> String {
        let out =
            curl(&[&["-o", "/dev/null", "-w", "%{http_code}", "--cacert", ca], args].concat());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_eq!(status(&[&url]), "401");
    assert_eq!(status(&["-u", "prometheus:wrong", &url]), "401");
    assert_eq!(status(&["-u", "nobody:s3cret", &url]), "401");
    assert_eq!(status(&["-u", "prometheus:s3cret", &url]), "200");
    let out = curl(&["--cacert", ca, "--compressed", "-u", "prometheus:s3cret", &url]);
    let body = String::from_utf8_lossy(&out.stdout);
    assert!(body.contains("tcptail_sockets_seen"), "{body}");
    // Plain HTTP to the TLS port gets no metrics.
    let plain = curl(&["-o", "/dev/null", "-w", "%{http_code}", &url.replace("https", "http")]);
    assert_ne!(String::from_utf8_lossy(&plain.stdout), "200");
}

#[test]
fn a_flood_of_wrong_passwords_does_not_stall_a_known_scraper() {
    let dir = tempfile::tempdir().unwrap();
    let hash = bcrypt::hash("s3cret", 8).unwrap();
    let web = dir.path().join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  prometheus: '{hash}'\n")).unwrap();
    let exporter = start(&["--web-config", web.to_str().unwrap()]);
    let auth = |credentials: &str| {
        use base64::Engine;
        let encoded = base64::engine::general_purpose::STANDARD.encode(credentials);
        format!("Authorization: Basic {encoded}\r\n")
    };
    assert_eq!(get(exporter.addr, "/metrics", "").status, 401);
    // The scraper's first request pays bcrypt once.
    assert_eq!(get(exporter.addr, "/metrics", &auth("prometheus:s3cret")).status, 200);
    let stop = Arc::new(AtomicBool::new(false));
    let addr = exporter.addr;
    let (checked, first_check) = std::sync::mpsc::channel();
    let flood: Vec<_> = (0..12)
        .map(|i| {
            let (stop, header) = (stop.clone(), auth(&format!("prometheus:guess{i}")));
            let checked = checked.clone();
            std::thread::spawn(move || {
                let mut answers = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let t = Instant::now();
                    let status = get(addr, "/metrics", &header).status;
                    if status == 401 {
                        let _ = checked.send(());
                    }
                    answers.push((status, t.elapsed()));
                }
                answers
            })
        })
        .collect();
    // The scrapes start once the flood is in full swing: its first wrong password refused
    // after a bcrypt check (the others get 503 while that check runs).
    first_check.recv_timeout(Duration::from_secs(60)).expect("no wrong password was checked");
    let start = Instant::now();
    let mut took = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        assert_eq!(get(exporter.addr, "/metrics", &auth("prometheus:s3cret")).status, 200);
        took.push(t.elapsed());
    }
    stop.store(true, Ordering::Relaxed);
    let answers: Vec<(u16, Duration)> = flood.into_iter().flat_map(|t| t.join().unwrap()).collect();
    assert!(answers.iter().all(|(s, _)| *s == 401 || *s == 503), "{answers:?}");
    // A wrong password answered 401 ran one bcrypt check under the same flood: what one check
    // costs on this host right now.
    let mut checks: Vec<Duration> =
        answers.iter().filter(|(s, _)| *s == 401).map(|&(_, t)| t).collect();
    checks.sort();
    assert!(!checks.is_empty(), "no wrong password was checked: {answers:?}");
    let check = checks[checks.len() / 2];
    eprintln!(
        "known scraper under a password flood: {took:?}; {} wrong tries, {} checked, median \
         check {check:?}",
        answers.len(),
        checks.len()
    );
    assert!(start.elapsed() < Duration::from_secs(60));
    // Known credentials skip bcrypt, so a scrape waits for no check; one that queued behind
    // the flood's checks (12 clients, one check at a time) would wait for several. Four
    // checks' time (or 1 s on a host where a check is quick) tells the two apart on a loaded
    // host as on an idle one, where the worst scrape took tens of ms and a check ~20 ms.
    let bound = (4 * check).max(Duration::from_secs(1));
    let worst = took.iter().max().unwrap();
    assert!(*worst < bound, "a known scraper waited {worst:?} under the flood (bound {bound:?})");
}

#[test]
fn bad_web_config_exits_1_naming_file_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let web = dir.path().join("web.yml");
    std::fs::write(&web, "tls_server_config:\n  cert_file: missing.crt\n  key_file: x.key\n")
        .unwrap();
    let out = common::tcptail(&[
        "exporter",
        "--listen",
        "127.0.0.1:0",
        "--web-config",
        web.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&format!("web config {}", web.display())), "{err}");
    assert!(err.contains("tls_server_config.cert_file: cannot read"), "{err}");
}
