//! Looking at a running program's TCP sockets without its cooperation and without the preload
//! library's code: what `tcptail run`'s tests check "from outside".
//!
//! - [`ss_established`]: `ss -tinm` (iproute2, reading sock_diag: `INET_DIAG_CONG` for the
//!   congestion control, `INET_DIAG_SKMEMINFO` for `rb`/`tb`, the kernel's `sk_rcvbuf` and
//!   `sk_sndbuf`, twice what `SO_RCVBUF`/`SO_SNDBUF` asked for).
//! - [`probe`]: `TCP_NODELAY` is in neither sock_diag nor `tcp_info` (nor `/proc/PID/fdinfo`,
//!   `/proc/net/tcp`), so no tool can read it from outside. The nearest independent check is
//!   this test process taking a copy of the program's descriptor with `pidfd_getfd(2)` (root:
//!   `CAP_SYS_PTRACE`) and calling `getsockopt` on it: the same socket, read by code that is
//!   neither the program's nor the library's, while the program runs unmodified.

use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::process::Command;
use std::time::{Duration, Instant};

use rustix::net::sockopt;
use rustix::process::{Pid, PidfdFlags, PidfdGetfdFlags, pidfd_getfd, pidfd_open};

/// One established TCP socket as `ss -tinm` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct SsSocket {
    pub local: SocketAddr,
    pub peer: SocketAddr,
    /// The congestion control name (`reno`, `cubic`, `bbr`).
    pub cc: String,
    /// `skmem` `rb`: the socket's receive buffer in bytes (`sk_rcvbuf`).
    pub rb: u64,
    /// `skmem` `tb`: the socket's send buffer in bytes (`sk_sndbuf`).
    pub tb: u64,
}

/// The established TCP sockets `ss` lists for `filter` (an ss filter expression such as
/// `( sport = :5000 )`).
pub fn ss_established(filter: &str) -> Vec<SsSocket> {
    let out = Command::new("ss")
        .args(["-tinmH", "state", "established", filter])
        .output()
        .expect("run ss (iproute2)");
    assert!(out.status.success(), "ss failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let available = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control")
        .expect("read tcp_available_congestion_control");
    let available: Vec<&str> = available.split_whitespace().collect();
    parse_ss(&text, &available)
}

/// Parses `ss -tinmH` output: a line `RECVQ SENDQ LOCAL PEER`, then an indented line with
/// `skmem:(...)` and the congestion control's name among the other words.
fn parse_ss(text: &str, available_cc: &[&str]) -> Vec<SsSocket> {
    let mut sockets = Vec::new();
    let mut current: Option<(SocketAddr, SocketAddr)> = None;
    for line in text.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        if !line.starts_with(char::is_whitespace) {
            current = match words.as_slice() {
                [_, _, local, peer, ..] => Some((
                    local.parse().unwrap_or_else(|_| panic!("ss local address {local:?}")),
                    peer.parse().unwrap_or_else(|_| panic!("ss peer address {peer:?}")),
                )),
                _ => None,
            };
            continue;
        }
        let Some((local, peer)) = current.take() else { continue };
        let skmem = words
            .iter()
            .find_map(|w| w.strip_prefix("skmem:("))
            .unwrap_or_else(|| panic!("no skmem in ss line {line:?}"));
        let mem = |key: &str| -> u64 {
            skmem
                .trim_end_matches(')')
                .split(',')
                .find_map(|kv| kv.strip_prefix(key).and_then(|v| v.parse().ok()))
                .unwrap_or_else(|| panic!("no {key} in skmem {skmem:?}"))
        };
        let cc = words
            .iter()
            .find(|w| available_cc.contains(w))
            .unwrap_or_else(|| panic!("no congestion control name in ss line {line:?}"));
        sockets.push(SsSocket { local, peer, cc: cc.to_string(), rb: mem("rb"), tb: mem("tb") });
    }
    sockets
}

/// Polls `ss` until the socket from `local` is established (programs connect in their own
/// time); panics after `timeout` naming the filter.
pub fn wait_for_socket(local: SocketAddr, peer: SocketAddr, timeout: Duration) -> SsSocket {
    let filter = format!("( sport = :{} and dport = :{} )", local.port(), peer.port());
    let start = Instant::now();
    loop {
        if let Some(s) =
            ss_established(&filter).into_iter().find(|s| s.local == local && s.peer == peer)
        {
            return s;
        }
        assert!(start.elapsed() < timeout, "ss never showed {local} -> {peer} established");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A program's socket read through a copy of its descriptor (`pidfd_getfd`).
#[derive(Debug, Clone, PartialEq)]
pub struct Probed {
    pub local: SocketAddr,
    pub nodelay: bool,
    pub cc: String,
    pub sndbuf: usize,
    pub rcvbuf: usize,
}

/// Finds the socket of process `pid` connected to `peer` and reads its options through a copy
/// of its descriptor. Polls until `timeout` (the program may not have connected yet).
pub fn probe(pid: u32, peer: SocketAddr, timeout: Duration) -> Probed {
    let pid_t = i32::try_from(pid).ok().and_then(Pid::from_raw).expect("a valid pid");
    let pidfd = pidfd_open(pid_t, PidfdFlags::empty()).expect("pidfd_open (Linux 5.3+)");
    let start = Instant::now();
    loop {
        if let Some(fd) = find_connected(pid, &pidfd, peer) {
            let local = rustix::net::getsockname(&fd).expect("getsockname");
            return Probed {
                local: SocketAddr::try_from(local).expect("an inet socket"),
                nodelay: sockopt::tcp_nodelay(&fd).expect("getsockopt TCP_NODELAY"),
                cc: sockopt::tcp_congestion(&fd).expect("getsockopt TCP_CONGESTION"),
                sndbuf: sockopt::socket_send_buffer_size(&fd).expect("getsockopt SO_SNDBUF"),
                rcvbuf: sockopt::socket_recv_buffer_size(&fd).expect("getsockopt SO_RCVBUF"),
            };
        }
        assert!(start.elapsed() < timeout, "process {pid} never had a socket connected to {peer}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A copy of `pid`'s descriptor whose peer is `peer`, if it has one now.
fn find_connected(pid: u32, pidfd: &OwnedFd, peer: SocketAddr) -> Option<OwnedFd> {
    let dir = std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    for entry in dir.flatten() {
        let is_socket = std::fs::read_link(entry.path())
            .is_ok_and(|t| t.to_string_lossy().starts_with("socket:"));
        let Some(target) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        if !is_socket {
            continue;
        }
        // The descriptor may close between the listing and the copy: skip it then.
        let Ok(fd) = pidfd_getfd(pidfd, target, PidfdGetfdFlags::empty()) else { continue };
        let connected_to =
            rustix::net::getpeername(&fd).ok().flatten().and_then(|a| SocketAddr::try_from(a).ok());
        if connected_to == Some(peer) {
            return Some(fd);
        }
    }
    None
}

#[test]
fn ss_output_parses() {
    let text = "0      0      127.0.0.1:59008 127.0.0.1:17777\n\t skmem:(r0,rb262144,t0,tb393216,f0,w0,o0,bl0,d0) reno wscale:10,2 rto:200\n0 0 [::1]:5 [::1]:6\n\t skmem:(r0,rb1,t0,tb2) ts sack bbr wscale:7,7 bbr:(bw:0bps)\n";
    let got = parse_ss(text, &["reno", "cubic", "bbr"]);
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].local, "127.0.0.1:59008".parse().unwrap());
    assert_eq!((got[0].cc.as_str(), got[0].rb, got[0].tb), ("reno", 262144, 393216));
    assert_eq!((got[1].cc.as_str(), got[1].rb, got[1].tb), ("bbr", 1, 2));
    assert_eq!(got[1].peer, "[::1]:6".parse().unwrap());
}
