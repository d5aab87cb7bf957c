//! Real programs under `tcptail run`: a Python client and server, curl, and sockperf's client
//! and server. Each holds its connection open while the test looks at it from outside
//! ([`outside`](crate::outside): `ss` for congestion control and buffers, a `pidfd_getfd`
//! copy of the descriptor for `TCP_NODELAY`) and runs with `--log`, whose lines are counted:
//! exactly one per socket.
//!
//! curl and sockperf set `TCP_NODELAY` themselves by default, which would hide whether the
//! profile did; they run with `--no-tcp-nodelay` / `--tcp-avoid-nodelay`, and a control run of
//! the same program without `tcptail run` shows NODELAY off and the host's congestion control,
//! so the values seen under the profile can only have come from it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::outside::{probe, wait_for_socket};
use crate::{
    PATIENCE, PROFILE, PROFILE_RB, PROFILE_TB, assert_profile_seen, host_default_cc, log_lines,
    need, profile_dir, run_cmd, text,
};

const CLIENT: &str = r#"
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
cc = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0").decode()
nd = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
sb = s.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF)
rb = s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF)
print(f"cc={cc} nodelay={nd} sndbuf={sb} rcvbuf={rb} fd={s.fileno()}", flush=True)
for _ in range(3):
    assert s.recv(1) == b"x"
"#;

fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

#[test]
fn python_client_gets_the_profile_inside_and_outside() {
    need("python3");
    need("ss");
    let (_dir, profile) = profile_dir(PROFILE);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let server_addr = listener.local_addr().unwrap();
    let port = server_addr.port().to_string();
    let mut child = run_cmd(&profile, true, &["python3", "-c", CLIENT, &port])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut server, client_addr) = listener.accept().unwrap();

    // Inside: the program's own getsockopt.
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(field(&line, "cc"), "reno", "{line}");
    assert_eq!(field(&line, "nodelay"), "1", "{line}");
    assert_eq!(field(&line, "sndbuf"), PROFILE_TB.to_string(), "{line}");
    assert_eq!(field(&line, "rcvbuf"), PROFILE_RB.to_string(), "{line}");

    // Outside, while the connection is open (the client waits for our bytes).
    assert_profile_seen(&wait_for_socket(client_addr, server_addr, PATIENCE), "python client");
    let probed = probe(child.id(), server_addr, PATIENCE);
    assert_eq!(probed.local, client_addr);
    assert!(probed.nodelay, "TCP_NODELAY off on the client's socket: {probed:?}");
    assert_eq!(probed.cc, "reno");

    server.write_all(b"xxx").unwrap();
    let out = child.wait_with_output().unwrap();
    let log = text(&out.stderr);
    assert!(out.status.success(), "{log}");
    // One socket, three receives with re-arms, one connect: one line.
    let lines = log_lines(&log);
    assert_eq!(lines.len(), 1, "expected one log line for one socket:\n{log}");
    let fd = field(&line, "fd");
    assert!(lines[0].contains(&format!(": fd {fd} socket AF_INET: profile \"runtest\"")), "{log}");
}

const SERVER: &str = r#"
import socket
l = socket.socket()
l.bind(("127.0.0.1", 0))
l.listen(3)
print(l.getsockname()[1], flush=True)
conns = []
for _ in range(3):
    c, peer = l.accept()
    cc = c.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).rstrip(b"\0").decode()
    nd = c.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    print(f"cc={cc} nodelay={nd} peer={peer[1]}", flush=True)
    conns.append(c)
for c in conns:
    assert c.recv(1) == b"q"
    c.sendall(b"x")
"#;

#[test]
fn python_server_accepted_sockets_get_the_profile() {
    need("python3");
    need("ss");
    let (_dir, profile) = profile_dir(PROFILE);
    let mut child = run_cmd(&profile, true, &["python3", "-c", SERVER])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut port = String::new();
    stdout.read_line(&mut port).unwrap();
    let server_addr: SocketAddr = format!("127.0.0.1:{}", port.trim()).parse().unwrap();
    let mut clients: Vec<TcpStream> =
        (0..3).map(|_| TcpStream::connect(server_addr).unwrap()).collect();
    for client in &clients {
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(field(&line, "cc"), "reno", "{line}");
        assert_eq!(field(&line, "nodelay"), "1", "{line}");
        // From outside: the accepted socket, the server's end of this client's connection.
        let client_addr = client.local_addr().unwrap();
        assert_profile_seen(&wait_for_socket(server_addr, client_addr, PATIENCE), "accepted");
        let probed = probe(child.id(), client_addr, PATIENCE);
        assert!(probed.nodelay && probed.cc == "reno", "accepted socket: {probed:?}");
    }
    for client in &mut clients {
        client.write_all(b"q").unwrap();
        let mut byte = [0u8];
        client.read_exact(&mut byte).unwrap();
    }
    let out = child.wait_with_output().unwrap();
    let log = text(&out.stderr);
    assert!(out.status.success(), "{log}");
    // The listener and three accepted sockets: four lines, one each.
    let lines = log_lines(&log);
    assert_eq!(lines.len(), 4, "expected one log line per socket:\n{log}");
    assert_eq!(lines.iter().filter(|l| l.contains(" socket AF_INET: ")).count(), 1, "{log}");
    for client in &clients {
        let from = format!(" accept from {}: ", client.local_addr().unwrap());
        let n = lines.iter().filter(|l| l.contains(&from)).count();
        assert_eq!(n, 1, "expected one line with {from:?}:\n{log}");
    }
    assert!(lines.iter().all(|l| l.contains("TCP_CONGESTION=reno")), "{log}");
}

/// An HTTP server that answers each request only when told to, so the client's connection
/// stays open while the test looks at it. Each accepted connection's peer (the client's local
/// address) is sent on `peers`; a message on the release channel lets that one respond.
struct SlowHttp {
    peers: mpsc::Receiver<SocketAddr>,
    release: mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl SlowHttp {
    fn start(listener: TcpListener, connections: usize) -> SlowHttp {
        let (peer_tx, peers) = mpsc::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            for _ in 0..connections {
                let (mut s, peer) = listener.accept().unwrap();
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = s.read(&mut buf).unwrap();
                    assert!(n > 0, "client closed early");
                    request.extend_from_slice(&buf[..n]);
                }
                peer_tx.send(peer).unwrap();
                release_rx.recv().unwrap();
                s.write_all(
                    b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
                )
                .unwrap();
            }
        });
        SlowHttp { peers, release, thread }
    }

    fn next_peer(&self) -> SocketAddr {
        self.peers.recv_timeout(PATIENCE).expect("curl never sent its request")
    }
}

fn finished_curl(child: Child) -> String {
    let out = child.wait_with_output().unwrap();
    let log = text(&out.stderr);
    assert!(out.status.success(), "curl failed: {log}");
    assert_eq!(text(&out.stdout), "hello");
    log
}

#[test]
fn curl_gets_the_profile_seen_from_outside() {
    need("curl");
    need("ss");
    let default_cc = host_default_cc();
    let (_dir, profile) = profile_dir(PROFILE);
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let server_addr = listener.local_addr().unwrap();
    let url = format!("http://{server_addr}/");
    let server = SlowHttp::start(listener, 2);
    let curl = ["curl", "-sS", "--no-tcp-nodelay", "--noproxy", "*", &url];

    let child = run_cmd(&profile, true, &curl)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let peer = server.next_peer();
    assert_profile_seen(&wait_for_socket(peer, server_addr, PATIENCE), "curl");
    let probed = probe(child.id(), server_addr, PATIENCE);
    assert!(probed.nodelay && probed.cc == "reno", "curl's socket: {probed:?}");
    server.release.send(()).unwrap();
    let log = finished_curl(child);
    let lines = log_lines(&log);
    assert_eq!(lines.len(), 1, "expected one log line for curl's one socket:\n{log}");
    let line = lines[0];
    assert!(line.contains(" socket AF_INET: profile \"runtest\": all 5 applied"), "{line}");
    assert!(line.contains("TCP_CONGESTION=reno") && line.contains("TCP_NODELAY=on"), "{line}");
    assert!(line.contains("SO_SNDBUF=192KiB (kernel: 384KiB)"), "{line}");

    // The control: plain curl with the same flags keeps NODELAY off and the host's congestion
    // control, as seen by the same observers.
    let child = Command::new(curl[0])
        .args(&curl[1..])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let peer = server.next_peer();
    let seen = wait_for_socket(peer, server_addr, PATIENCE);
    assert_eq!(seen.cc, default_cc, "plain curl: {seen:?}");
    let probed = probe(child.id(), server_addr, PATIENCE);
    assert!(!probed.nodelay, "plain curl --no-tcp-nodelay has NODELAY on: {probed:?}");
    server.release.send(()).unwrap();
    let log = finished_curl(child);
    assert!(log_lines(&log).is_empty(), "{log}");
    server.thread.join().unwrap();
}

/// Waits until something listens on `port` (asked of `ss`, not by connecting, which would
/// give a server under the profile one more socket to log).
fn wait_listening(port: u16) {
    let start = Instant::now();
    let filter = format!("( sport = :{port} )");
    loop {
        let out = Command::new("ss").args(["-tlnH", &filter]).output().expect("run ss");
        if !text(&out.stdout).trim().is_empty() {
            return;
        }
        assert!(start.elapsed() < PATIENCE, "nothing listens on port {port}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sockperf_client_and_server_get_the_profile_seen_from_outside() {
    need("sockperf");
    need("ss");
    let default_cc = host_default_cc();
    let (_dir, profile) = profile_dir(PROFILE);
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let server_addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let port = port.to_string();
    let mut server =
        run_cmd(&profile, true, &["sockperf", "server", "--tcp", "-i", "127.0.0.1", "-p", &port])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
    wait_listening(server_addr.port());

    // Two seconds of ping-pong each, to give the observers time. One client at a time: the
    // sockperf server serves concurrent TCP clients unevenly (one may get no replies at all).
    let client = [
        "sockperf",
        "ping-pong",
        "--tcp",
        "--tcp-avoid-nodelay",
        "-i",
        "127.0.0.1",
        "-p",
        &port,
        "-t",
        "2",
    ];
    let observe = |mut cmd: Command| {
        let child = cmd.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let probed = probe(child.id(), server_addr, PATIENCE);
        let client_side = wait_for_socket(probed.local, server_addr, PATIENCE);
        let server_side = wait_for_socket(server_addr, probed.local, PATIENCE);
        let out = child.wait_with_output().unwrap();
        let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
        assert!(out.status.success(), "sockperf ping-pong failed:\n{all}");
        assert!(all.contains("Summary: Latency is"), "no latency summary:\n{all}");
        (probed, client_side, server_side, text(&out.stderr))
    };
    let mut plain_cmd = Command::new(client[0]);
    plain_cmd.args(&client[1..]);
    let (plain_probe, plain_seen, plain_server_side, _) = observe(plain_cmd);
    let (tuned_probe, tuned_seen, tuned_server_side, log) =
        observe(run_cmd(&profile, true, &client));
    let _ = server.kill();
    let server = server.wait_with_output().unwrap();

    assert!(tuned_probe.nodelay && tuned_probe.cc == "reno", "tuned client: {tuned_probe:?}");
    assert_profile_seen(&tuned_seen, "sockperf client");
    assert!(!plain_probe.nodelay, "plain client with --tcp-avoid-nodelay: {plain_probe:?}");
    assert_eq!(plain_probe.cc, default_cc, "plain client: {plain_probe:?}");
    assert_eq!(plain_seen.cc, default_cc, "plain client: {plain_seen:?}");
    // The server runs under the profile: both of its accepted sockets have it.
    assert_profile_seen(&plain_server_side, "sockperf server (plain client)");
    assert_profile_seen(&tuned_server_side, "sockperf server (tuned client)");
    let (tuned_addr, plain_addr) = (tuned_probe.local, plain_probe.local);

    let lines = log_lines(&log);
    assert_eq!(lines.len(), 1, "expected one log line for the client's socket:\n{log}");
    assert!(lines[0].contains(" socket AF_INET: ") && lines[0].contains("TCP_NODELAY=on"));
    let log = text(&server.stderr);
    let lines = log_lines(&log);
    assert_eq!(lines.len(), 3, "expected the listener and two accepted sockets:\n{log}");
    for from in [tuned_addr, plain_addr] {
        let from = format!(" accept from {from}: ");
        let n = lines.iter().filter(|l| l.contains(&from)).count();
        assert_eq!(n, 1, "expected one line with {from:?}:\n{log}");
    }
}
