//! The segmenter against an independent model: GSO packets built here the way the kernel
//! hands them out (checksums by a naive one's complement sum written separately below), split,
//! checked field by field, and coalesced back byte for byte.

use proptest::prelude::*;

use super::*;

/// Naive one's complement sum of 16-bit big-endian words, carry folded after each add.
fn naive_sum(bytes: &[u8]) -> u16 {
    let mut acc: u32 = 0;
    for pair in bytes.chunks(2) {
        acc += u32::from(pair[0]) << 8 | u32::from(*pair.get(1).unwrap_or(&0));
        if acc > 0xffff {
            acc -= 0xffff;
        }
    }
    acc as u16
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The pseudo-header bytes of `packet` (IPv4 or IPv6, no extension headers) for `proto` and a
/// transport length `len`.
fn pseudo(packet: &[u8], proto: u8, len: usize) -> Vec<u8> {
    let mut p = Vec::new();
    if packet[0] >> 4 == 4 {
        p.extend_from_slice(&packet[12..20]);
        p.extend_from_slice(&[0, proto]);
        p.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        p.extend_from_slice(&packet[8..40]);
        p.extend_from_slice(&(len as u32).to_be_bytes());
        p.extend_from_slice(&[0, 0, 0, proto]);
    }
    p
}

/// What a test GSO packet is made of.
#[derive(Debug, Clone)]
struct Spec {
    v6: bool,
    udp: bool,
    ident: u16,
    seq: u32,
    flags: u8,
    tcp_options: usize,
    tos: u8,
    gso_size: u16,
    payload: Vec<u8>,
}

impl Spec {
    fn ip_len(&self) -> usize {
        if self.v6 { 40 } else { 20 }
    }

    fn l4_len(&self) -> usize {
        if self.udp { 8 } else { 20 + self.tcp_options }
    }

    fn header_len(&self) -> usize {
        self.ip_len() + self.l4_len()
    }

    fn segments(&self) -> usize {
        self.payload.len().div_ceil(usize::from(self.gso_size))
    }

    /// The GSO packet as the kernel hands it out: `virtio_net_hdr`, headers with the partial
    /// checksum of the whole length, payload.
    fn build(&self) -> Vec<u8> {
        let proto = if self.udp { 17 } else { 6 };
        let total = self.header_len() + self.payload.len();
        let mut p = Vec::new();
        if self.v6 {
            p.extend_from_slice(&[0x60 | (self.tos >> 4), self.tos << 4, 0x0a, 0xbc]);
            p.extend_from_slice(&((total - 40) as u16).to_be_bytes());
            p.extend_from_slice(&[proto, 64]);
            p.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]);
            p.extend_from_slice(&[0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2]);
        } else {
            p.extend_from_slice(&[0x45, self.tos]);
            p.extend_from_slice(&(total as u16).to_be_bytes());
            p.extend_from_slice(&self.ident.to_be_bytes());
            p.extend_from_slice(&[0x40, 0, 64, proto, 0, 0, 10, 77, 0, 1, 10, 77, 0, 2]);
            let c = !naive_sum(&p);
            p[10..12].copy_from_slice(&c.to_be_bytes());
        }
        let l4 = p.len();
        if self.udp {
            p.extend_from_slice(&[0x30, 0x39, 0x13, 0x89]);
            p.extend_from_slice(&((total - l4) as u16).to_be_bytes());
            p.extend_from_slice(&[0, 0]);
        } else {
            p.extend_from_slice(&[0x9c, 0x40, 0x14, 0x51]);
            p.extend_from_slice(&self.seq.to_be_bytes());
            p.extend_from_slice(&0x0102_0304u32.to_be_bytes());
            p.extend_from_slice(&[((5 + self.tcp_options / 4) as u8) << 4, self.flags, 0x01, 0xf5]);
            p.extend_from_slice(&[0, 0, 0, 0]);
            p.extend((0..self.tcp_options).map(|i| if i < 2 { 1 } else { i as u8 }));
        }
        let partial = naive_sum(&pseudo(&p, proto, total - l4));
        let at = l4 + if self.udp { 6 } else { 16 };
        p[at..at + 2].copy_from_slice(&partial.to_be_bytes());
        p.extend_from_slice(&self.payload);
        let gso = self.segments() > 1;
        let base = match (self.udp, self.v6) {
            (true, _) => VirtioNetHdr::GSO_UDP_L4,
            (false, false) => VirtioNetHdr::GSO_TCPV4,
            (false, true) => VirtioNetHdr::GSO_TCPV6,
        };
        let ecn = !self.udp && self.flags & 0x80 != 0;
        let hdr = VirtioNetHdr {
            flags: VirtioNetHdr::F_NEEDS_CSUM,
            gso_type: if !gso {
                0
            } else if ecn {
                base | VirtioNetHdr::GSO_ECN
            } else {
                base
            },
            hdr_len: self.header_len() as u16,
            gso_size: if gso { self.gso_size } else { 0 },
            csum_start: l4 as u16,
            csum_offset: if self.udp { 6 } else { 16 },
        };
        let mut frame = hdr.encode().to_vec();
        frame.extend_from_slice(&p);
        frame
    }

    /// Checks segment `k` of the split, field by field, against this spec.
    fn check_segment(&self, frame: &[u8], k: usize, seg: &[u8]) -> Result<(), TestCaseError> {
        let n = self.segments();
        let g = usize::from(self.gso_size);
        let payload = &self.payload[k * g..((k + 1) * g).min(self.payload.len())];
        let (ip, hl) = (self.ip_len(), self.header_len());
        prop_assert_eq!(seg.len(), hl + payload.len());
        prop_assert_eq!(&seg[hl..], payload);
        if self.v6 {
            prop_assert_eq!(usize::from(be16(seg, 4)), seg.len() - 40);
        } else {
            prop_assert_eq!(usize::from(be16(seg, 2)), seg.len());
            prop_assert_eq!(be16(seg, 4), self.ident.wrapping_add(k as u16));
            prop_assert_eq!(naive_sum(&seg[..20]), 0xffff, "IPv4 header checksum");
        }
        let proto = if self.udp { 17 } else { 6 };
        let transport = [pseudo(seg, proto, seg.len() - ip), seg[ip..].to_vec()].concat();
        prop_assert_eq!(naive_sum(&transport), 0xffff, "transport checksum of segment {}", k);
        if self.udp {
            prop_assert_eq!(usize::from(be16(seg, ip + 4)), seg.len() - ip);
        } else {
            let seq = self.seq.wrapping_add((k * g) as u32);
            prop_assert_eq!(be32(seg, ip + 4), seq);
            let mut flags = self.flags;
            if k > 0 {
                flags &= !0x80;
            }
            if k + 1 < n {
                flags &= !0x09;
            }
            prop_assert_eq!(seg[ip + 13], flags, "flags of segment {} of {}", k, n);
            prop_assert_eq!(&seg[ip + 20..hl], &frame[VNET_HDR_LEN + ip + 20..VNET_HDR_LEN + hl]);
        }
        Ok(())
    }
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        any::<bool>(),
        any::<bool>(),
        any::<u16>(),
        any::<u32>(),
        any::<u8>(),
        prop::sample::select(vec![0usize, 12, 40]),
        any::<u8>(),
        1u16..=1500,
        1usize..=8000,
    )
        .prop_flat_map(|(v6, udp, ident, seq, flags, tcp_options, tos, gso_size, len)| {
            let len = len.max(usize::from(gso_size) + 1);
            prop::collection::vec(any::<u8>(), len).prop_map(move |payload| Spec {
                v6,
                udp,
                ident,
                seq,
                // SYN/RST never ride in TSO packets; any other combination may.
                flags: (flags & !0x06) | 0x10,
                tcp_options,
                tos,
                gso_size,
                payload,
            })
        })
}

/// Completes a partial transport checksum the way the kernel would (tests only).
fn complete(frame: &[u8]) -> Vec<u8> {
    let hdr = VirtioNetHdr::decode(frame).unwrap();
    let mut p = frame[VNET_HDR_LEN..].to_vec();
    if hdr.needs_csum() {
        let start = usize::from(hdr.csum_start);
        let at = start + usize::from(hdr.csum_offset);
        let c = !naive_sum(&p[start..]);
        p[at..at + 2].copy_from_slice(&c.to_be_bytes());
    }
    p
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn split_is_right_and_coalesce_restores_it(s in spec()) {
        let frame = s.build();
        let segments = split(&frame).unwrap();
        prop_assert_eq!(segments.len(), s.segments());
        for (k, seg) in segments.iter().enumerate() {
            s.check_segment(&frame, k, seg)?;
        }
        prop_assert_eq!(coalesce(&segments).unwrap(), frame);
    }

    #[test]
    fn any_run_is_the_same_segments(s in spec(), a in any::<u16>(), b in any::<u16>()) {
        let frame = s.build();
        let all = split(&frame).unwrap();
        let packet = Arc::new(GsoPacket::from_vec(frame, true).unwrap());
        let n = packet.layout().segments();
        let (i, j) = (a % n, b % n);
        let run = i.min(j)..i.max(j) + 1;
        let mut scratch = [0u8; MAX_FRAME_HEADER];
        let (len, payload) = packet.layout().write_run_header(
            packet.ip_packet(), packet.vnet_header().unwrap(), run.clone(), None, &mut scratch,
        );
        let written = [&scratch[..len], &packet.ip_packet()[payload]].concat();
        let expected = &all[usize::from(run.start)..usize::from(run.end)];
        if run.len() == 1 {
            prop_assert_eq!(&complete(&written), &expected[0]);
        } else {
            prop_assert_eq!(&split(&written).unwrap()[..], expected);
        }
        prop_assert_eq!(packet.layout().run_len(run.clone()) as usize, expected.iter().map(Vec::len).sum::<usize>());
        for k in run {
            let seg = Segment::all(&packet).nth(usize::from(k)).unwrap();
            prop_assert_eq!(seg.len() as usize, all[usize::from(k)].len());
            prop_assert_eq!(seg.to_packet(), all[usize::from(k)].clone());
        }
    }

    #[test]
    fn ecn_rewrite_of_a_run_keeps_checksums(s in spec(), ecn in 0u8..4) {
        let frame = s.build();
        let packet = Arc::new(GsoPacket::from_vec(frame, true).unwrap());
        let mut seg = Segment::all(&packet).last().unwrap();
        seg.set_ecn(Ecn::from_bits(ecn));
        prop_assert_eq!(seg.ecn(), Some(Ecn::from_bits(ecn)));
        let bytes = seg.to_packet();
        let tc = if s.v6 { (bytes[0] << 4) | (bytes[1] >> 4) } else { bytes[1] };
        prop_assert_eq!(tc & 3, ecn);
        prop_assert_eq!(tc >> 2, s.tos >> 2, "DSCP untouched");
        if !s.v6 {
            prop_assert_eq!(naive_sum(&bytes[..20]), 0xffff);
        }
    }

    #[test]
    fn parsing_arbitrary_bytes_never_panics(data in prop::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(p) = GsoPacket::from_vec(data, true) {
            let p = Arc::new(p);
            for seg in Segment::all(&p) {
                let _ = (seg.len(), seg.to_packet(), seg.flow_key(), seg.ecn(), seg.tcp_flags());
            }
        }
    }
}

fn tcp4(payload: usize, gso_size: u16, flags: u8) -> Spec {
    Spec {
        v6: false,
        udp: false,
        ident: 0xfffe,
        seq: u32::MAX - 1000,
        flags,
        tcp_options: 12,
        tos: 0x02,
        gso_size,
        payload: (0..payload).map(|i| i as u8).collect(),
    }
}

#[test]
fn a_64k_tso_packet_becomes_45_segments() {
    let s = tcp4(65_060, 1448, 0x10 | 0x08 | 0x80);
    let frame = s.build();
    assert_eq!(frame.len() - VNET_HDR_LEN, 65_112);
    let packet = GsoPacket::from_vec(frame.clone(), true).unwrap();
    let layout = packet.layout();
    assert_eq!(layout.segments(), 45);
    assert_eq!(layout.segment_len(0), 1500);
    assert_eq!(layout.segment_len(44), 52 + 1348);
    assert_eq!(layout.run_len(0..45), 65_112 + 44 * 52);
    let g = layout.gso().unwrap();
    assert_eq!((g.kind, g.ip_version, g.l4_offset, g.header_len), (GsoKind::Tcp, 4, 20, 52));
    assert!(g.ecn_flag);
    let segments = split(&frame).unwrap();
    // Wrapping identification and sequence numbers, CWR first, PSH last.
    assert_eq!(be16(&segments[2], 4), 0);
    assert_eq!(be32(&segments[1], 24), (u32::MAX - 1000).wrapping_add(1448));
    assert_eq!(segments[0][33], 0x90);
    assert_eq!(segments[1][33], 0x10);
    assert_eq!(segments[44][33], 0x18);
    // Each segment reports the flags it is written out with.
    let shared = Arc::new(packet);
    for (segment, bytes) in Segment::all(&shared).zip(&segments) {
        assert_eq!(segment.tcp_flags(), Some(TcpFlags(bytes[33])), "segment {}", segment.index());
    }
    assert_eq!(coalesce(&segments).unwrap(), frame);
}

#[test]
fn a_packet_no_longer_than_one_segment_is_one_segment() {
    let frame = tcp4(1448, 1448, 0x18).build();
    let packet = GsoPacket::from_vec(frame.clone(), true).unwrap();
    assert_eq!(packet.layout().segments(), 1);
    assert_eq!(split(&frame).unwrap().len(), 1);
}

#[test]
fn plain_packets_are_one_segment_and_never_parsed() {
    let p = GsoPacket::from_vec(vec![0xff; 100], false).unwrap();
    assert_eq!((p.layout().segments(), p.layout().len()), (1, 100));
    assert!(p.vnet_header().is_none());
    let p = Arc::new(p);
    let seg = Segment::all(&p).next().unwrap();
    assert_eq!((seg.len(), seg.ecn(), seg.flow_key()), (100, None, None));
    assert_eq!(seg.to_packet(), vec![0xff; 100]);
    // GSO_NONE behind a virtio_net_hdr: one segment, whatever follows.
    let mut framed = VirtioNetHdr::default().encode().to_vec();
    framed.extend_from_slice(&[1, 2, 3]);
    assert_eq!(GsoPacket::from_vec(framed, true).unwrap().layout().segments(), 1);
}

#[test]
fn inconsistent_packets_are_rejected_with_the_reason() {
    let good = tcp4(3000, 1000, 0x10).build();
    let parse = |f: Vec<u8>| GsoPacket::from_vec(f, true).map(|_| ()).unwrap_err();
    assert_eq!(parse(good[..5].to_vec()), SegmentError::VnetHeader { have: 5 });
    let mut bad = good.clone();
    bad[1] = VirtioNetHdr::GSO_UDP;
    assert_eq!(parse(bad), SegmentError::UnsupportedGso(3));
    let mut bad = good.clone();
    bad[1] = VirtioNetHdr::GSO_TCPV6;
    assert!(matches!(parse(bad), SegmentError::Mismatch(m) if m.contains("IP version")));
    let mut bad = good.clone();
    bad[6] = 21; // csum_start
    assert!(matches!(parse(bad), SegmentError::Mismatch(m) if m.contains("csum_start")));
    let mut bad = good.clone();
    bad[4..6].copy_from_slice(&[0, 0]); // gso_size
    assert!(matches!(parse(bad), SegmentError::Mismatch(m) if m.contains("gso_size")));
    let mut bad = good.clone();
    bad.truncate(bad.len() - 1); // shorter than the IPv4 total length
    assert!(matches!(parse(bad), SegmentError::Mismatch(m) if m.contains("total length")));
    let mut bad = good.clone();
    bad[VNET_HDR_LEN + 9] = 17; // IPv4 protocol UDP under GSO_TCPV4
    assert!(matches!(parse(bad), SegmentError::Mismatch(m) if m.contains("transport")));
    let mut bad = good;
    bad[VNET_HDR_LEN] = 0x75;
    assert_eq!(parse(bad), SegmentError::Wire(WireError::Version(7)));
}

#[test]
fn coalesce_refuses_what_is_not_one_flow_in_order() {
    let segments = split(&tcp4(5000, 1000, 0x10).build()).unwrap();
    let refused = |s: &[Vec<u8>]| matches!(coalesce(s), Err(SegmentError::Coalesce(_)));
    assert!(refused(&[segments[0].clone(), segments[2].clone()]), "a gap");
    assert!(refused(&[segments[1].clone(), segments[0].clone()]), "out of order");
    let mut corrupt = segments.clone();
    corrupt[3][60] ^= 1;
    assert!(refused(&corrupt), "a payload byte flipped: the checksum no longer holds");
    let mut other_flow = segments.clone();
    other_flow[2][20] ^= 1; // source port
    assert!(refused(&other_flow));
    assert!(refused(&[]));
    // Consecutive segments from the middle coalesce into a GSO packet of their own.
    let middle = coalesce(&segments[1..4]).unwrap();
    assert_eq!(split(&middle).unwrap(), segments[1..4].to_vec());
}
