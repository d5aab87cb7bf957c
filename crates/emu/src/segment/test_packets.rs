//! GSO packets for the unit tests of the modules that carry segments (`direction`, `runs`):
//! one builder, so every test's packet has the same valid headers.

use std::sync::Arc;

use super::{GsoPacket, VNET_HDR_LEN, VirtioNetHdr};

/// A TCP/IPv4 GSO packet 10.77.0.1 → 10.77.0.2: `segments` segments of 1460 payload bytes, the
/// last `last` bytes (1..=1460), ECN codepoint `ecn` (0..=3), source port `port` (its flow).
pub(crate) fn tcp_v4(segments: u16, last: u16, ecn: u8, port: u16) -> Arc<GsoPacket> {
    let payload = usize::from(segments - 1) * 1460 + usize::from(last);
    let total = 40 + payload;
    let hdr = VirtioNetHdr {
        flags: VirtioNetHdr::F_NEEDS_CSUM,
        gso_type: if segments > 1 { VirtioNetHdr::GSO_TCPV4 } else { 0 },
        hdr_len: 40,
        gso_size: if segments > 1 { 1460 } else { 0 },
        csum_start: 20,
        csum_offset: 16,
    };
    let mut frame = hdr.encode().to_vec();
    frame.extend_from_slice(&[0x45, ecn & 3, (total >> 8) as u8, total as u8, 0, 1, 0x40, 0]);
    frame.extend_from_slice(&[64, 6, 0, 0, 10, 77, 0, 1, 10, 77, 0, 2]);
    frame.extend_from_slice(&[(port >> 8) as u8, port as u8, 0x14, 0x51, 0, 0, 0, 1, 0, 0, 0, 1]);
    frame.extend_from_slice(&[0x50, 0x18, 1, 0, 0, 0, 0, 0]);
    frame.resize(VNET_HDR_LEN + total, 0xab);
    Arc::new(GsoPacket::from_vec(frame, true).expect("a valid GSO packet"))
}
