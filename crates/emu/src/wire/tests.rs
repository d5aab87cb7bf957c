//! Header views against hand-built packets, and checksums against a naive implementation
//! written separately here (16-bit words, end-around carry after every addition).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use super::*;

/// The naive one's complement sum: 16-bit big-endian words, carry folded after each add.
fn naive_sum(chunks: &[&[u8]]) -> u16 {
    let bytes: Vec<u8> = chunks.concat();
    let mut acc: u32 = 0;
    for pair in bytes.chunks(2) {
        let word = u32::from(pair[0]) << 8 | u32::from(*pair.get(1).unwrap_or(&0));
        acc += word;
        if acc > 0xffff {
            acc = (acc & 0xffff) + 1;
        }
    }
    acc as u16
}

fn naive_pseudo(src: &[u8], dst: &[u8], proto: u8, len: u32) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(src);
    p.extend_from_slice(dst);
    if src.len() == 4 {
        p.extend_from_slice(&[0, proto]);
        p.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        p.extend_from_slice(&len.to_be_bytes());
        p.extend_from_slice(&[0, 0, 0, proto]);
    }
    p
}

fn ipv4_tcp(payload: &[u8]) -> Vec<u8> {
    let total = 20 + 20 + payload.len();
    let mut p =
        vec![0x45, 0x02, 0, 0, 0x12, 0x34, 0x40, 0x00, 64, 6, 0, 0, 10, 77, 0, 1, 10, 77, 0, 2];
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p.extend_from_slice(&[0x9c, 0x40, 0x14, 0x51]); // ports 40000 -> 5201
    p.extend_from_slice(&1000u32.to_be_bytes());
    p.extend_from_slice(&77u32.to_be_bytes());
    p.extend_from_slice(&[0x50, 0x18, 0xff, 0xff, 0, 0, 0, 0]);
    p.extend_from_slice(payload);
    p
}

#[test]
fn ipv4_fields() {
    let mut p = ipv4_tcp(b"hello");
    let mut v4 = Ipv4::new(&mut p[..]).unwrap();
    v4.fill_checksum();
    assert!(v4.checksum_ok());
    assert_eq!(v4.header_len(), 20);
    assert_eq!(v4.total_len(), 45);
    assert_eq!(v4.ident(), 0x1234);
    assert!(v4.dont_fragment() && !v4.more_fragments() && !v4.is_fragment());
    assert_eq!((v4.ttl(), v4.protocol()), (64, PROTO_TCP));
    assert_eq!(v4.src(), Ipv4Addr::new(10, 77, 0, 1));
    assert_eq!(v4.dst(), Ipv4Addr::new(10, 77, 0, 2));
    assert_eq!(v4.ecn(), Ecn::Ect0);
    assert_eq!(naive_sum(&[&p[..20]]), 0xffff, "the naive sum agrees the header is intact");
    let tcp = Tcp::new(&p[20..]).unwrap();
    assert_eq!((tcp.src_port(), tcp.dst_port(), tcp.seq(), tcp.ack()), (40000, 5201, 1000, 77));
    assert_eq!(tcp.flags(), TcpFlags::ACK | TcpFlags::PSH);
    assert_eq!((tcp.header_len(), tcp.window()), (20, 0xffff));
    assert_eq!(IpPacket::new(&p[..]).unwrap().tcp_flags(), Some(TcpFlags::ACK | TcpFlags::PSH));
    // Not TCP: no flags.
    p[9] = PROTO_UDP;
    assert_eq!(IpPacket::new(&p[..]).unwrap().tcp_flags(), None);
}

#[test]
fn ecn_rewrite_keeps_the_ipv4_checksum_right() {
    let mut p = ipv4_tcp(b"x");
    Ipv4::new(&mut p[..]).unwrap().fill_checksum();
    for ecn in [Ecn::Ce, Ecn::NotEct, Ecn::Ect1, Ecn::Ect0, Ecn::Ce] {
        let mut ip = IpPacket::new(&mut p[..]).unwrap();
        ip.set_ecn(ecn);
        assert_eq!(ip.ecn(), ecn);
        assert!(ip.checksum_ok(), "{ecn:?}");
        assert_eq!(naive_sum(&[&p[..20]]), 0xffff, "{ecn:?}");
        assert_eq!(p[1] >> 2, 0, "DSCP untouched");
    }
}

#[test]
fn ipv6_traffic_class_and_flow_label() {
    let mut p = [0u8; 48];
    p[0] = 0x6a; // version 6, traffic class high nibble 0xa
    p[1] = 0xb1; // traffic class low nibble 0xb, flow label 0x1....
    p[2] = 0x23;
    p[3] = 0x45;
    p[4..6].copy_from_slice(&8u16.to_be_bytes());
    p[6] = PROTO_UDP;
    p[7] = 9;
    p[23] = 1;
    p[39] = 2;
    p[40..44].copy_from_slice(&[0x04, 0xd2, 0x16, 0x2e]);
    let mut v6 = Ipv6::new(&mut p[..]).unwrap();
    assert_eq!(v6.traffic_class(), 0xab);
    assert_eq!(v6.ecn(), Ecn::Ce);
    assert_eq!(v6.flow_label(), 0x12345);
    assert_eq!((v6.payload_len(), v6.next_header(), v6.hop_limit()), (8, PROTO_UDP, 9));
    v6.set_ecn(Ecn::Ect1);
    assert_eq!(v6.traffic_class(), 0xa9);
    assert_eq!(v6.flow_label(), 0x12345, "the flow label is untouched");
    let ip = IpPacket::new(&p[..]).unwrap();
    let key = ip.flow_key().unwrap();
    assert_eq!(key.src, IpAddr::V6(Ipv6Addr::from(1u128)));
    assert_eq!((key.protocol, key.src_port, key.dst_port), (PROTO_UDP, 1234, 5678));
}

#[test]
fn ipv6_extension_headers_are_walked() {
    let mut p = vec![0u8; 40];
    p[0] = 0x60;
    p[6] = 0; // hop-by-hop
    p.extend_from_slice(&[60, 0, 0, 0, 0, 0, 0, 0]); // -> destination options, 8 bytes
    p.extend_from_slice(&[44, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]); // -> fragment, 16 bytes
    p.extend_from_slice(&[PROTO_TCP, 0, 0, 0, 0, 0, 0, 1]); // fragment: offset 0 -> TCP
    p.extend_from_slice(&[0x00, 0x50, 0x01, 0xbb]);
    p.resize(p.len() + 16, 0);
    let ip = IpPacket::new(&p[..]).unwrap();
    let t = ip.transport().unwrap();
    assert_eq!((t.protocol, t.offset, t.has_header), (PROTO_TCP, 72, true));
    assert_eq!(ip.flow_key().unwrap().dst_port, 443);
    // A later fragment carries no transport header: no ports.
    p[66] = 0x05;
    let ip = IpPacket::new(&p[..]).unwrap();
    assert!(!ip.transport().unwrap().has_header);
    assert_eq!(ip.flow_key().unwrap().src_port, 0);
    // Cut inside the extension headers.
    let ip = IpPacket::new(&p[..50]).unwrap();
    assert!(matches!(ip.transport(), Err(WireError::Truncated { .. })));
}

#[test]
fn malformed_headers_are_errors() {
    assert!(matches!(IpPacket::new(&[][..]), Err(WireError::Truncated { .. })));
    assert_eq!(IpPacket::new(&[0x55; 40][..]).unwrap_err(), WireError::Version(5));
    assert!(matches!(Ipv4::new(&[0x44; 40][..]), Err(WireError::Malformed(_))));
    assert!(matches!(Ipv4::new(&[0x46; 20][..]), Err(WireError::Truncated { need: 24, .. })));
    assert!(matches!(Ipv6::new(&[0x60; 39][..]), Err(WireError::Truncated { .. })));
    assert_eq!(Ipv6::new(&[0x45; 40][..]).unwrap_err(), WireError::Version(4));
    let mut tcp = [0u8; 24];
    tcp[12] = 0x40;
    assert!(matches!(Tcp::new(&tcp[..]), Err(WireError::Malformed(_))));
    tcp[12] = 0x70;
    assert!(matches!(Tcp::new(&tcp[..]), Err(WireError::Truncated { need: 28, .. })));
    assert!(Udp::new(&[0u8; 7][..]).is_err());
    let e = Ipv4::new(&[0x46; 20][..]).unwrap_err();
    assert_eq!(e.to_string(), "IPv4 header cut short: 24 bytes needed, 20 present");
}

#[test]
fn transport_checksums_verify_with_the_naive_sum() {
    let mut p = ipv4_tcp(b"some payload, odd length");
    let (src, dst) = (IpAddr::from([10, 77, 0, 1]), IpAddr::from([10, 77, 0, 2]));
    let check = transport_checksum(src, dst, PROTO_TCP, &p[20..]);
    p[36..38].copy_from_slice(&check.to_be_bytes());
    let pseudo = naive_pseudo(&[10, 77, 0, 1], &[10, 77, 0, 2], PROTO_TCP, (p.len() - 20) as u32);
    assert_eq!(naive_sum(&[&pseudo, &p[20..]]), 0xffff);
    // The partial checksum plus the sum of the segment without it gives the same result.
    let partial = partial_checksum(src, dst, PROTO_TCP, (p.len() - 20) as u32);
    p[36..38].copy_from_slice(&partial.to_be_bytes());
    assert_eq!(!naive_sum(&[&p[20..]]), check);
}

#[test]
fn udp_zero_checksum_is_sent_as_all_ones() {
    // Find a payload whose checksum folds to zero by adjusting the last two bytes.
    let (src, dst) = (IpAddr::from([1, 2, 3, 4]), IpAddr::from([5, 6, 7, 8]));
    let mut udp = vec![0, 1, 0, 2, 0, 12, 0, 0, 0, 0, 0, 0];
    let c = transport_checksum(src, dst, PROTO_UDP, &udp);
    udp[10..12].copy_from_slice(&c.to_be_bytes()); // now the complement sums to 0xffff...
    assert_eq!(transport_checksum(src, dst, PROTO_UDP, &udp), 0xffff);
}

fn arb_v4_header() -> impl Strategy<Value = Vec<u8>> {
    (0u8..=10, prop::collection::vec(any::<u8>(), 60)).prop_map(|(options, mut bytes)| {
        let ihl = 5 + options.min(10);
        bytes[0] = 0x40 | ihl;
        bytes.truncate(usize::from(ihl) * 4);
        bytes
    })
}

proptest! {
    #[test]
    fn sum_matches_the_naive_sum(data in prop::collection::vec(any::<u8>(), 0..3000), split in 0usize..3000) {
        let folded = checksum::fold(checksum::sum(&data, 0));
        prop_assert_eq!(folded, naive_sum(&[&data]));
        // Chaining at an even split gives the same.
        let k = (split.min(data.len())) & !1;
        prop_assert_eq!(checksum::fold(checksum::sum(&data[k..], checksum::sum(&data[..k], 0))), folded);
    }

    #[test]
    fn ipv4_set_ecn_keeps_any_header_valid(mut h in arb_v4_header(), ecn in 0u8..4) {
        let mut v4 = Ipv4::new(&mut h[..]).unwrap();
        v4.fill_checksum();
        v4.set_ecn(Ecn::from_bits(ecn));
        prop_assert!(v4.checksum_ok());
        prop_assert_eq!(naive_sum(&[&h]), 0xffff);
    }

    #[test]
    fn views_never_panic(data in prop::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(ip) = IpPacket::new(&data[..]) {
            let _ = (ip.src(), ip.dst(), ip.ecn(), ip.checksum_ok(), ip.transport(), ip.flow_key());
        }
        if let Ok(t) = Tcp::new(&data[..]) {
            let _ = (t.seq(), t.ack(), t.flags(), t.header_len(), t.window(), t.checksum());
        }
        if let Ok(u) = Udp::new(&data[..]) {
            let _ = (u.length(), u.checksum(), u.src_port(), u.dst_port());
        }
    }

    #[test]
    fn pseudo_header_matches_the_naive_layout(src in any::<[u8; 16]>(), dst in any::<[u8; 16]>(), len in 0u32..70_000, v6 in any::<bool>()) {
        let (s, d): (IpAddr, IpAddr, ) = if v6 {
            (Ipv6Addr::from(src).into(), Ipv6Addr::from(dst).into())
        } else {
            (Ipv4Addr::new(src[0], src[1], src[2], src[3]).into(), Ipv4Addr::new(dst[0], dst[1], dst[2], dst[3]).into())
        };
        let (sb, db) = if v6 { (&src[..], &dst[..]) } else { (&src[..4], &dst[..4]) };
        let len = if v6 { len } else { len & 0xffff };
        let naive = naive_sum(&[&naive_pseudo(sb, db, PROTO_TCP, len)]);
        prop_assert_eq!(checksum::fold(checksum::pseudo_header(s, d, PROTO_TCP, len)), naive);
    }
}
