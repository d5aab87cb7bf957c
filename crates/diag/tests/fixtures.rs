//! Parser tests on sock_diag replies captured from Linux 6.18 (`tests/fixtures/*.bin`, made by
//! `tests/live.rs::capture_fixtures`), on truncated and corrupted copies of them, and property
//! tests that parsing arbitrary bytes never panics.

use std::net::IpAddr;

use proptest::prelude::*;
use tcptail_diag::filter::{Filter, Prefix, Side, run_bytecode};
use tcptail_diag::wire::{self, Message, ParseError};
use tcptail_diag::{Connection, SockId};
use tcptail_sock::cc_info::BbrPhase;

const BBR_V4: &[u8] = include_bytes!("fixtures/bbr_v4.bin");
const CUBIC_V6: &[u8] = include_bytes!("fixtures/cubic_v6.bin");

fn sockets(buf: &[u8]) -> (Vec<Connection>, bool) {
    let mut out = Vec::new();
    let mut done = false;
    for m in wire::messages(buf) {
        match m.expect("fixture parses") {
            Message::Socket(s) => out.push(Connection::from_socket(&s)),
            Message::Done(status) => done = status == 0,
            other => panic!("unexpected {other:?}"),
        }
    }
    (out, done)
}

#[test]
fn bbr_v4_fixture() {
    let (conns, done) = sockets(BBR_V4);
    assert!(done);
    assert_eq!(conns.len(), 3, "listener, client, server");
    let listen = conns.iter().filter(|c| c.state == "LISTEN").count();
    assert_eq!(listen, 1);
    let client = conns
        .iter()
        .find(|c| {
            c.cc.as_deref() == Some("bbr")
                && c.state == "ESTABLISHED"
                && c.bbr.is_some_and(|b| b.bw_bytes_per_sec > 0)
        })
        .expect("established bbr socket");
    let info = client.info.as_ref().unwrap();
    assert_eq!(info.len, 280);
    assert!(info.rtt_us > 0 && info.snd_mss_bytes > 0);
    assert!(info.total_rto.is_some(), "6.7+ fields present");
    let bbr = client.bbr.unwrap();
    assert_eq!(bbr.phase(), BbrPhase::Startup, "739/739 right after connect");
    assert!(client.skmem.unwrap().sndbuf > 0);
    assert!(client.local.is_ipv4());
}

#[test]
fn cubic_v6_fixture() {
    let (conns, done) = sockets(CUBIC_V6);
    assert!(done);
    assert_eq!(conns.len(), 3);
    for c in &conns {
        assert!(c.local.is_ipv6());
        assert_eq!(c.local.ip().to_string(), "::1");
        assert_eq!(c.bbr.is_some(), c.cc.as_deref() == Some("bbr") && c.state != "LISTEN");
    }
    assert!(conns.iter().any(|c| c.cc.as_deref() == Some("cubic") && c.info.is_some()));
}

#[test]
fn truncated_batches_error_or_parse_prefix_never_panic() {
    for fixture in [BBR_V4, CUBIC_V6] {
        for cut in 0..fixture.len() {
            let results: Vec<_> = wire::messages(&fixture[..cut]).collect();
            // Every complete message before the cut still parses; a cut inside a message
            // header or body is reported as truncation.
            if let Some(Err(e)) = results.last() {
                assert!(matches!(e, ParseError::TruncatedMessage { .. }), "{e}");
            }
        }
    }
}

#[test]
fn short_inet_diag_msg_and_bad_attribute() {
    assert_eq!(wire::parse_socket(&[0; 71]).unwrap_err(), ParseError::ShortDiagMsg { len: 71 });
    let mut p = vec![0u8; 72];
    p.extend_from_slice(&200u16.to_ne_bytes());
    p.extend_from_slice(&2u16.to_ne_bytes());
    assert!(matches!(wire::parse_socket(&p), Err(ParseError::BadAttribute { len: 200, .. })));
}

#[test]
fn short_tcp_info_attribute_is_absent_not_zero() {
    // Replace INET_DIAG_INFO payload length with a 100-byte attribute (shorter than the base
    // struct): the socket parses, its info is absent.
    let mut p = vec![0u8; 72];
    p[0] = libc_af_inet();
    p.extend_from_slice(&104u16.to_ne_bytes());
    p.extend_from_slice(&2u16.to_ne_bytes());
    p.extend_from_slice(&[0u8; 100]);
    let s = wire::parse_socket(&p).unwrap();
    assert!(s.info.is_none());
    assert_eq!(s.expires_ms, 0);
    // idiag_expires sits between the socket id and the queues (offset 52).
    let mut timed = p.clone();
    timed[52..56].copy_from_slice(&59_000u32.to_ne_bytes());
    timed[56..60].copy_from_slice(&7u32.to_ne_bytes());
    let s = wire::parse_socket(&timed).unwrap();
    assert_eq!((s.expires_ms, s.rqueue), (59_000, 7));
    // A 6.2-sized struct: fields after 240 are absent.
    let mut p = vec![0u8; 72];
    p[0] = libc_af_inet();
    p.extend_from_slice(&244u16.to_ne_bytes());
    p.extend_from_slice(&2u16.to_ne_bytes());
    p.extend_from_slice(&[0u8; 240]);
    let info = wire::parse_socket(&p).unwrap().info.unwrap();
    assert!(info.rcv_wnd_bytes.is_some());
    assert!(info.total_rto.is_none());
}

fn libc_af_inet() -> u8 {
    2
}

#[test]
fn fixtures_are_v2_replies_as_the_dumper_requests_them() {
    // Captured with `Dumper::capture`, which sends the same SOCK_DIAG_BY_FAMILY requests
    // as `Dumper::dump`: every socket message is a v2 reply.
    for fixture in [BBR_V4, CUBIC_V6] {
        let kinds: Vec<u16> = wire::frames(fixture).map(|f| f.unwrap().header.kind).collect();
        assert_eq!(kinds.len(), 4);
        assert!(kinds[..3].iter().all(|k| *k == wire::SOCK_DIAG_BY_FAMILY), "{kinds:?}");
        assert_eq!(kinds[3], 3, "NLMSG_DONE");
    }
}

#[test]
fn request_layout() {
    let code = [1u8, 4, 8, 0];
    let r = wire::dump_request(10, wire::ESTABLISHED, 7, Some(&code));
    assert_eq!(r.len(), 16 + 56 + 8);
    assert_eq!(u32::from_ne_bytes(r[0..4].try_into().unwrap()) as usize, r.len());
    assert_eq!(u16::from_ne_bytes([r[4], r[5]]), wire::SOCK_DIAG_BY_FAMILY);
    assert_eq!(r[16], 10); // AF_INET6
    assert_eq!(r[17], 6); // IPPROTO_TCP
    assert_eq!(u32::from_ne_bytes(r[20..24].try_into().unwrap()), wire::ESTABLISHED);
}

fn id(sport: u16, dport: u16, src: [u8; 4], dst: [u8; 4]) -> SockId {
    SockId { sport, dport, src: src.into(), dst: dst.into(), ifindex: 0, cookie: 0 }
}

fn leaf() -> impl Strategy<Value = Filter> {
    prop_oneof![
        (any::<bool>(), 0u16..8, 0u16..8).prop_map(|(l, a, b)| Filter::Port {
            side: if l { Side::Local } else { Side::Remote },
            lo: a.min(b),
            hi: a.max(b),
        }),
        (any::<bool>(), 0u8..4, 0u8..=32).prop_map(|(l, x, len)| Filter::Addr {
            side: if l { Side::Local } else { Side::Remote },
            prefix: Prefix { addr: [10, 0, 0, x].into(), len },
        }),
        (any::<bool>(), 0u8..4, 0u8..=128).prop_map(|(l, x, len)| Filter::Addr {
            side: if l { Side::Local } else { Side::Remote },
            prefix: Prefix { addr: v6(x), len },
        }),
    ]
}

/// `fd00::x` with a bit set at 64 too, so prefixes of every length differ somewhere.
fn v6(x: u8) -> IpAddr {
    let mut o = [0u8; 16];
    o[0] = 0xfd;
    o[8] = 0x80;
    o[15] = x;
    IpAddr::from(o)
}

/// An address of family `kind`: IPv4 `10.0.0.x`, IPv6 `fd00::...x`, or IPv4-mapped IPv6.
fn any_addr(kind: u8, x: u8) -> IpAddr {
    match kind {
        0 => IpAddr::from([10, 0, 0, x]),
        1 => v6(x),
        _ => IpAddr::V6(std::net::Ipv4Addr::new(10, 0, 0, x).to_ipv6_mapped()),
    }
}

fn tree() -> impl Strategy<Value = Filter> {
    leaf().prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 1..4).prop_map(Filter::And),
            prop::collection::vec(inner, 1..4).prop_map(Filter::Or),
        ]
    })
}

proptest! {
    #[test]
    fn parsing_arbitrary_bytes_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..600)) {
        for m in wire::messages(&bytes) { let _ = m; }
        let _ = wire::parse_socket(&bytes);
    }

    #[test]
    fn corrupting_a_fixture_never_panics(pos in 0usize..1436, byte in any::<u8>(), cut in 0usize..1436) {
        let mut b = BBR_V4.to_vec();
        let pos = pos % b.len();
        b[pos] = byte;
        b.truncate(cut.min(b.len()));
        for m in wire::messages(&b) { let _ = m; }
    }

    #[test]
    fn bytecode_agrees_with_user_space(
        f in tree(), sp in 0u16..8, dp in 0u16..8, s in 0u8..4, d in 0u8..4, fam in 0u8..3,
    ) {
        // Both ends of a socket have one family: IPv4, IPv6, or IPv4-mapped IPv6.
        let sock = SockId { src: any_addr(fam, s), dst: any_addr(fam, d), ..id(sp, dp, [0; 4], [0; 4]) };
        let code = f.bytecode().unwrap();
        prop_assert_eq!(run_bytecode(&code, &sock), f.matches(&sock), "{:?} {:?}", f, code);
    }
}
