//! Dumps of real loopback sockets created by the test (needs only 127.0.0.1 / ::1), and the
//! capture of the fixtures used by `tests/fixtures.rs`.

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;

use socket2::{Domain, Socket as Sock2, Type};
use tcptail_diag::filter::{Filter, Prefix, Side};
use tcptail_diag::{DumpRequest, Dumper, wire};

/// A connected pair over loopback; the client uses `cc`.
fn pair(addr: &str, cc: &str) -> (TcpStream, TcpStream, TcpListener) {
    let listener = TcpListener::bind(addr).expect("bind");
    let target: SocketAddr = listener.local_addr().unwrap();
    let s = Sock2::new(Domain::for_address(target), Type::STREAM, None).unwrap();
    s.set_tcp_congestion(cc.as_bytes()).expect("set congestion control");
    s.connect(&target.into()).expect("connect");
    let client: TcpStream = s.into();
    let (server, _) = listener.accept().unwrap();
    (client, server, listener)
}

fn port_filter(port: u16) -> Filter {
    Filter::Or(vec![
        Filter::Port { side: Side::Remote, lo: port, hi: port },
        Filter::Port { side: Side::Local, lo: port, hi: port },
    ])
}

#[test]
fn dump_finds_bbr_connection_with_info_cong_bbr_and_skmem() {
    let (mut client, _server, listener) = pair("127.0.0.1:0", "bbr");
    let port = listener.local_addr().unwrap().port();
    client.write_all(&[7u8; 100_000]).unwrap();
    let mut dumper = Dumper::new().expect("sock_diag socket");
    let req = DumpRequest { filter: Some(port_filter(port)), ..DumpRequest::default() };
    let conns = dumper.collect(&req).expect("dump");
    // listener + client + server side
    assert_eq!(conns.len(), 3, "{conns:#?}");
    let c = conns.iter().find(|c| c.remote.port() == port).expect("client side");
    assert_eq!(c.state, "ESTABLISHED");
    assert_eq!(c.cc.as_deref(), Some("bbr"));
    let info = c.info.as_ref().expect("INET_DIAG_INFO");
    // sock_diag's INET_DIAG_INFO carries the kernel's whole struct, as TCP_INFO does.
    let mut raw = [0u8; 4096];
    let kernel_len = tcptail_sock::tcp_info::tcp_info_raw(client.as_fd(), &mut raw).unwrap();
    assert_eq!(info.len, kernel_len, "tcp_info length: sock_diag vs TCP_INFO on this kernel");
    assert!(info.rtt_us > 0);
    let bbr = c.bbr.expect("INET_DIAG_BBRINFO");
    assert!(bbr.pacing_gain > 0);
    assert!(c.derived.bbr_phase.is_some());
    assert!(c.skmem.expect("SKMEMINFO").sndbuf > 0);
    assert_eq!(c.local.ip().to_string(), "127.0.0.1");
}

#[test]
fn kernel_filter_excludes_other_ports_and_matches_user_space() {
    let (_c1, _s1, l1) = pair("127.0.0.1:0", "cubic");
    let (_c2, _s2, l2) = pair("127.0.0.1:0", "cubic");
    let p1 = l1.local_addr().unwrap().port();
    let p2 = l2.local_addr().unwrap().port();
    let mut dumper = Dumper::new().unwrap();
    let f = Filter::And(vec![
        Filter::Port { side: Side::Remote, lo: p1, hi: p1 },
        Filter::Addr {
            side: Side::Remote,
            prefix: Prefix { addr: "127.0.0.0".parse().unwrap(), len: 8 },
        },
    ]);
    let req =
        DumpRequest { filter: Some(f.clone()), states: wire::ESTABLISHED, ..Default::default() };
    let mut n = 0;
    dumper
        .dump(&req, |s| {
            n += 1;
            assert_eq!(s.id.dport, p1);
            assert_ne!(s.id.dport, p2);
            assert!(f.matches(&s.id));
        })
        .unwrap();
    assert_eq!(n, 1);
    // Unfiltered: the kernel returns at least our four established sockets and the filter in
    // user space picks exactly one of them.
    let all = DumpRequest { states: wire::ESTABLISHED, ..Default::default() };
    let mut matched = 0;
    let stats = dumper.dump(&all, |s| matched += usize::from(f.matches(&s.id))).unwrap();
    assert!(stats.sockets >= 4);
    assert_eq!(matched, 1);
}

#[test]
fn ipv6_loopback_and_address_filter() {
    let (_c, _s, l) = pair("[::1]:0", "cubic");
    let port = l.local_addr().unwrap().port();
    let mut dumper = Dumper::new().unwrap();
    let f = Filter::And(vec![
        port_filter(port),
        Filter::Addr {
            side: Side::Local,
            prefix: Prefix { addr: "::1".parse().unwrap(), len: 128 },
        },
    ]);
    let req = DumpRequest { filter: Some(f), ipv4: false, ..Default::default() };
    let conns = dumper.collect(&req).unwrap();
    assert_eq!(conns.len(), 3);
    assert!(conns.iter().all(|c| c.local.ip().to_string() == "::1"));
}

#[test]
fn named_netns_that_does_not_exist_is_a_clear_error() {
    let err = Dumper::in_netns("tcptail-no-such-ns").unwrap_err();
    assert!(err.to_string().contains("/run/netns/tcptail-no-such-ns"), "{err}");
}

/// Regenerates `tests/fixtures/*.bin`: `TCPTAIL_CAPTURE=1 cargo test -p tcptail-diag --test
/// live capture -- --ignored`.
#[test]
#[ignore = "writes fixtures; run by hand"]
fn capture_fixtures() {
    if std::env::var_os("TCPTAIL_CAPTURE").is_none() {
        return;
    }
    let (mut client, _server, listener) = pair("127.0.0.1:0", "bbr");
    let (_c6, _s6, l6) = pair("[::1]:0", "cubic");
    client.write_all(&[1u8; 300_000]).unwrap();
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures");
    let mut dumper = Dumper::new().unwrap();
    for (name, port, v4, v6) in [
        ("bbr_v4", listener.local_addr().unwrap().port(), true, false),
        ("cubic_v6", l6.local_addr().unwrap().port(), false, true),
    ] {
        let req = DumpRequest {
            filter: Some(port_filter(port)),
            ipv4: v4,
            ipv6: v6,
            ..Default::default()
        };
        let batches = dumper.capture(&req).unwrap();
        std::fs::write(dir.join(format!("{name}.bin")), batches.concat()).unwrap();
    }
}

#[test]
fn one_request_dumps_both_families() {
    let (_c4, _s4, l4) = pair("127.0.0.1:0", "cubic");
    let (_c6, _s6, l6) = pair("[::1]:0", "cubic");
    let (p4, p6) = (l4.local_addr().unwrap().port(), l6.local_addr().unwrap().port());
    let mut dumper = Dumper::new().unwrap();
    let req = DumpRequest {
        filter: Some(Filter::Or(vec![port_filter(p4), port_filter(p6)])),
        states: wire::ESTABLISHED,
        ..Default::default()
    };
    let conns = dumper.collect(&req).unwrap();
    assert_eq!(conns.len(), 4, "{conns:#?}");
    assert_eq!(conns.iter().filter(|c| c.local.is_ipv6()).count(), 2);
    assert!(conns.iter().all(|c| c.info.is_some() && c.cc.is_some()));
}

#[test]
fn empty_selection_is_accepted_by_the_kernel_and_matches_nothing() {
    let (_c, _s, _l) = pair("127.0.0.1:0", "cubic");
    let mut dumper = Dumper::new().unwrap();
    let req = DumpRequest { filter: Some(Filter::Or(Vec::new())), ..Default::default() };
    let stats = dumper.dump(&req, |_| panic!("nothing matches")).unwrap();
    assert_eq!(stats.sockets, 0);
}

#[test]
fn a_rejected_dump_leaves_the_dumper_usable() {
    let (_c, _s, l) = pair("127.0.0.1:0", "cubic");
    let port = l.local_addr().unwrap().port();
    let mut dumper = Dumper::new().unwrap();
    // Bytecode with an unknown op: the kernel's audit of the filter answers EINVAL.
    let bogus = [0xffu8, 4, 8, 0];
    let err = dumper
        .dump_raw(|seq| wire::dump_request(2, wire::ALL_STATES, seq, Some(&bogus)), &mut |_| {
            panic!("nothing is dumped")
        })
        .unwrap_err();
    assert!(matches!(err, tcptail_diag::DiagError::Kernel(_)), "{err:?}");
    // The next dump runs on a fresh socket and sees exactly its own replies.
    let req = DumpRequest { filter: Some(port_filter(port)), ..Default::default() };
    let mut n = 0;
    let stats = dumper.dump(&req, |_| n += 1).unwrap();
    assert_eq!((n, stats.stale, stats.interrupted), (3, 0, false));
}
