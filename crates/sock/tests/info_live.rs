//! `TCP_INFO` and `TCP_CC_INFO` read from real loopback connections on 127.0.0.1.
//!
//! Needs root (CAP_NET_ADMIN) only for the CUBIC test: on this machine `cubic` is available but
//! not in `tcp_allowed_congestion_control`. Nothing here changes a sysctl.

use std::io::{self, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::thread;
use std::time::{Duration, Instant};

use socket2::SockRef;
use tcptail_sock::cc_info::{self, CcInfo};
use tcptail_sock::tcp_info::{self, CaState, TcpState};
use tcptail_sock::{BbrInfo, BbrPhase, TcpInfo};

/// A connected pair on 127.0.0.1; `setup` runs on the client before `connect`.
fn pair(setup: impl FnOnce(&socket2::Socket)) -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().unwrap();
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    setup(&socket);
    socket.connect(&addr.into()).expect("connect to 127.0.0.1");
    let (server, _) = listener.accept().expect("accept");
    (socket.into(), server)
}

/// Sends `total` bytes from `client` to `server` (read on another thread), waits until the
/// server has read them all and the client has seen them acknowledged, and hands the server
/// back (dropping it would close the connection).
fn transfer(client: &mut TcpStream, server: TcpStream, total: usize) -> TcpStream {
    let reader = thread::spawn(move || {
        let mut server = server;
        let mut buf = vec![0u8; 1 << 16];
        let mut seen = 0;
        while seen < total {
            let n = server.read(&mut buf).expect("server read");
            assert!(n > 0, "client closed early");
            seen += n;
        }
        server
    });
    let chunk = vec![0x5au8; 1 << 16];
    let mut sent = 0;
    while sent < total {
        let n = (total - sent).min(chunk.len());
        client.write_all(&chunk[..n]).expect("client write");
        sent += n;
    }
    let server = reader.join().expect("reader thread");
    wait_for(|| {
        // bytes_acked counts the SYN too.
        let info = tcp_info::tcp_info(client.as_fd()).unwrap();
        info.bytes_acked.unwrap() > total as u64 && info.unacked_segs == 0
    });
    server
}

fn wait_for(mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !done() {
        assert!(Instant::now() < deadline, "condition not met within 5 s");
        thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn established_connection_reports_consistent_counters() {
    let (mut client, server) = pair(|_| {});
    const TOTAL: usize = 3 << 20;
    let server = transfer(&mut client, server, TOTAL);

    let sent = tcp_info::tcp_info(client.as_fd()).unwrap();
    let recv = tcp_info::tcp_info(server.as_fd()).unwrap();
    let kernel_len = kernel_struct_len(&client);
    for info in [&sent, &recv] {
        assert_eq!(info.len, kernel_len, "the parsed length is what the kernel returned");
        assert_eq!(info.state, TcpState::Established);
        assert_eq!(info.ca_state, CaState::Open);
        assert!(info.snd_mss_bytes > 0 && info.rtt_us > 0, "{info:?}");
        assert!(info.options.contains(tcp_info::TcpiOptions::TIMESTAMPS));
        // Fields the kernel's struct covers are present, the others absent (6.18: 280 bytes).
        assert_eq!(info.accecn_opt_seen.is_some(), info.len >= 280, "{info:?}");
    }
    // bytes_acked counts the SYN, like the kernel's snd_una - ISN.
    assert_eq!(sent.bytes_acked, Some(TOTAL as u64 + 1));
    assert_eq!(recv.bytes_received, Some(TOTAL as u64));
    assert_eq!(sent.bytes_sent, Some(TOTAL as u64));
    assert_eq!(sent.notsent_bytes, Some(0));
    assert_eq!(sent.bytes_retrans, Some(0));
    assert!(sent.delivery_rate_bytes_per_sec.unwrap() > 0);
    assert!(sent.delivery_rate_app_limited().is_some());
    assert!(sent.data_segs_out.unwrap() > 0 && recv.data_segs_in.unwrap() > 0);
    assert!(sent.min_rtt_us.unwrap() <= sent.rtt_us.max(1) * 10);
    assert_eq!(sent.send_queue_delay_estimate(), Some(Duration::ZERO));
}

#[test]
fn unsent_bytes_give_a_send_queue_delay() {
    // A small peer receive buffer and a reader that never reads: the client's data piles up.
    let (mut client, server) = pair(|_| {});
    SockRef::from(&server).set_recv_buffer_size(4096).unwrap();
    client.set_nonblocking(true).unwrap();
    let chunk = vec![0u8; 1 << 16];
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match client.write(&chunk) {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("write: {e}"),
        }
        assert!(Instant::now() < deadline, "send buffer never filled");
    }
    let info = tcp_info::tcp_info(client.as_fd()).unwrap();
    let notsent = info.notsent_bytes.unwrap();
    assert!(notsent > 0, "{info:?}");
    let estimate = info.send_queue_delay().expect("a rate is known on a connected socket");
    assert_eq!(estimate.notsent_bytes, notsent);
    assert!(estimate.rate_bytes_per_sec > 0 && estimate.delay > Duration::ZERO, "{estimate:?}");
    drop(server);
}

#[test]
fn bbr_socket_exports_its_model() {
    let (mut client, server) = pair(|s| s.set_tcp_congestion(b"bbr").expect("set bbr"));
    let _server = transfer(&mut client, server, 8 << 20);

    let bbr = cc_info::bbr_info(client.as_fd()).unwrap().expect("BBR exports tcp_bbr_info");
    assert!(bbr.bw_bytes_per_sec > 0, "{bbr:?}");
    assert!(bbr.min_rtt().is_some(), "{bbr:?}");
    assert_ne!(bbr.phase(), BbrPhase::Unknown, "{bbr:?}");
    assert_eq!(cc_info::cc_info(client.as_fd()).unwrap().name(), "bbr");

    let mut raw = [0u8; 64];
    assert_eq!(cc_info::cc_info_raw(client.as_fd(), &mut raw).unwrap(), BbrInfo::LEN);
}

#[test]
fn cubic_socket_has_no_bbr_info() {
    let (mut client, server) = pair(|s| {
        s.set_tcp_congestion(b"cubic").expect("set cubic (needs CAP_NET_ADMIN: run as root)")
    });
    let _server = transfer(&mut client, server, 1 << 20);
    let mut raw = [0u8; 64];
    assert_eq!(cc_info::cc_info_raw(client.as_fd(), &mut raw).unwrap(), 0, "CUBIC exports nothing");
    assert_eq!(cc_info::bbr_info(client.as_fd()).unwrap(), None);
    assert_eq!(cc_info::cc_info(client.as_fd()).unwrap(), CcInfo::Other { name: "cubic".into() });
}

/// The size of this kernel's `struct tcp_info` (what `TCP_INFO` returns into a buffer larger
/// than any kernel's struct): 280 on Linux 6.18, less on older kernels, more on newer ones.
fn kernel_struct_len(socket: &TcpStream) -> usize {
    let mut buf = [0u8; 4096];
    let n = tcp_info::tcp_info_raw(socket.as_fd(), &mut buf).unwrap();
    assert!(n >= TcpInfo::BASE_LEN && n < buf.len(), "TCP_INFO returned {n} bytes");
    n
}

#[test]
fn short_buffers_give_short_structs() {
    let (client, _server) = pair(|_| {});
    let kernel_len = kernel_struct_len(&client);
    let mut buf = [0u8; 512];
    for len in [0, 8, 103, 104, 168, 248, 280, 512] {
        let n = tcp_info::tcp_info_raw(client.as_fd(), &mut buf[..len]).unwrap();
        assert_eq!(n, len.min(kernel_len));
        match TcpInfo::parse(&buf[..n]) {
            Ok(info) => {
                assert_eq!(info.state, TcpState::Established);
                assert_eq!(info.delivery_rate_bytes_per_sec.is_some(), n >= 168);
                assert_eq!(info.total_rto_time_ms.is_some(), n >= 248);
            }
            Err(e) => assert!(n < TcpInfo::BASE_LEN, "{e}"),
        }
    }
}

#[test]
fn a_non_tcp_socket_is_an_error() {
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    assert!(tcp_info::tcp_info(udp.as_fd()).is_err());
    assert!(cc_info::bbr_info(udp.as_fd()).is_err());
}

/// Refreshes the committed fixtures from this kernel:
/// `cargo test -p tcptail-sock --test info_live -- --ignored capture_fixtures`.
#[test]
#[ignore = "writes tests/fixtures/*.bin; run on purpose to refresh them"]
fn capture_fixtures() {
    let (mut client, server) = pair(|s| s.set_tcp_congestion(b"bbr").expect("set bbr"));
    let _server = transfer(&mut client, server, 1 << 20);
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    std::fs::create_dir_all(&dir).unwrap();

    let mut buf = [0u8; 512];
    let n = tcp_info::tcp_info_raw(client.as_fd(), &mut buf).unwrap();
    assert_eq!(n, TcpInfo::KNOWN_LEN, "capture on a 6.18 kernel");
    std::fs::write(dir.join("tcp_info_6.18_established.bin"), &buf[..n]).unwrap();

    let n = cc_info::cc_info_raw(client.as_fd(), &mut buf).unwrap();
    assert_eq!(n, BbrInfo::LEN);
    std::fs::write(dir.join("tcp_bbr_info_6.18.bin"), &buf[..n]).unwrap();
}
