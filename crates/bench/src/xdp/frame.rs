//! Ethernet + IPv4 + UDP framing for the AF_XDP engine, which sends and receives whole
//! frames: headers written in place in front of a payload, and received frames checked
//! before their payload is trusted. Pure functions over byte slices.

use std::net::SocketAddrV4;

/// Ethernet (14) + IPv4 without options (20) + UDP (8).
pub const HEADERS_LEN: usize = 42;
/// The largest UDP payload that fits a 1500-byte MTU unfragmented.
pub const MAX_PAYLOAD: usize = 1500 - 28;

/// One direction of a UDP flow at the link layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flow {
    /// Sender's MAC address.
    pub src_mac: [u8; 6],
    /// Receiver's MAC address.
    pub dst_mac: [u8; 6],
    /// Sender's address and port.
    pub src: SocketAddrV4,
    /// Receiver's address and port.
    pub dst: SocketAddrV4,
}

impl Flow {
    /// The same flow seen from the other end.
    pub fn reversed(&self) -> Flow {
        Flow { src_mac: self.dst_mac, dst_mac: self.src_mac, src: self.dst, dst: self.src }
    }
}

/// Why a received frame is not one of ours.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Shorter than its headers say.
    #[error("frame of {0} bytes is truncated")]
    Truncated(usize),
    /// Not IPv4 + UDP without options.
    #[error("not an IPv4/UDP frame without IP options")]
    NotUdp,
    /// From or to another address or port than the flow's.
    #[error("frame of another flow")]
    OtherFlow,
}

/// The Internet checksum of `bytes` (RFC 1071).
pub fn checksum(bytes: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    for pair in bytes.chunks(2) {
        let word = if pair.len() == 2 {
            u16::from_be_bytes([pair[0], pair[1]])
        } else {
            u16::from(pair[0]) << 8
        };
        sum += u32::from(word);
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// Writes the headers of a `payload_len`-byte datagram of `flow` into `frame[..HEADERS_LEN]`
/// (IPv4 checksum computed; UDP checksum 0, "none", which IPv4 allows).
///
/// # Panics
/// If `frame` is shorter than [`HEADERS_LEN`] or `payload_len` exceeds [`MAX_PAYLOAD`].
pub fn write_headers(frame: &mut [u8], flow: &Flow, payload_len: usize, ip_id: u16) {
    assert!(payload_len <= MAX_PAYLOAD, "payload of {payload_len} bytes exceeds the MTU");
    let h = &mut frame[..HEADERS_LEN];
    h[0..6].copy_from_slice(&flow.dst_mac);
    h[6..12].copy_from_slice(&flow.src_mac);
    h[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
    let ip_len = (20 + 8 + payload_len) as u16;
    h[14] = 0x45;
    h[15] = 0;
    h[16..18].copy_from_slice(&ip_len.to_be_bytes());
    h[18..20].copy_from_slice(&ip_id.to_be_bytes());
    h[20..22].copy_from_slice(&0x4000u16.to_be_bytes()); // don't fragment
    h[22] = 64;
    h[23] = 17;
    h[24..26].fill(0);
    h[26..30].copy_from_slice(&flow.src.ip().octets());
    h[30..34].copy_from_slice(&flow.dst.ip().octets());
    let sum = checksum(&h[14..34]);
    h[24..26].copy_from_slice(&sum.to_be_bytes());
    h[34..36].copy_from_slice(&flow.src.port().to_be_bytes());
    h[36..38].copy_from_slice(&flow.dst.port().to_be_bytes());
    h[38..40].copy_from_slice(&((8 + payload_len) as u16).to_be_bytes());
    h[40..42].fill(0);
}

/// The UDP payload of `frame` if it is a datagram of `flow` (addresses and ports; MACs are
/// not checked), bounded by the IP and UDP lengths, not by the frame's padding.
pub fn payload<'a>(frame: &'a [u8], flow: &Flow) -> Result<&'a [u8], FrameError> {
    if frame.len() < HEADERS_LEN {
        return Err(FrameError::Truncated(frame.len()));
    }
    if frame[12..14] != [0x08, 0x00] || frame[14] != 0x45 || frame[23] != 17 {
        return Err(FrameError::NotUdp);
    }
    let src = SocketAddrV4::new(
        [frame[26], frame[27], frame[28], frame[29]].into(),
        u16::from_be_bytes([frame[34], frame[35]]),
    );
    let dst = SocketAddrV4::new(
        [frame[30], frame[31], frame[32], frame[33]].into(),
        u16::from_be_bytes([frame[36], frame[37]]),
    );
    if src != flow.src || dst != flow.dst {
        return Err(FrameError::OtherFlow);
    }
    let udp_len = usize::from(u16::from_be_bytes([frame[38], frame[39]]));
    let ip_len = usize::from(u16::from_be_bytes([frame[16], frame[17]]));
    if udp_len < 8 || ip_len != 20 + udp_len || frame.len() < 14 + ip_len {
        return Err(FrameError::Truncated(frame.len()));
    }
    Ok(&frame[HEADERS_LEN..HEADERS_LEN + udp_len - 8])
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn flow() -> Flow {
        Flow {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 0, 2],
            src: "10.77.0.1:40000".parse().unwrap(),
            dst: "10.77.0.2:40001".parse().unwrap(),
        }
    }

    #[test]
    fn the_ip_header_checksums_to_zero() {
        let mut f = vec![0u8; HEADERS_LEN + 64];
        write_headers(&mut f, &flow(), 64, 7);
        assert_eq!(checksum(&f[14..34]), 0);
        // A known header (Wikipedia's IPv4 checksum example) gives the known checksum.
        let hdr = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(checksum(&hdr), 0xb861);
    }

    #[test]
    fn frames_of_other_flows_and_short_frames_are_refused() {
        let mut f = vec![0u8; HEADERS_LEN + 10];
        write_headers(&mut f, &flow(), 10, 1);
        assert_eq!(payload(&f, &flow()).unwrap().len(), 10);
        assert_eq!(payload(&f, &flow().reversed()), Err(FrameError::OtherFlow));
        assert_eq!(payload(&f[..30], &flow()), Err(FrameError::Truncated(30)));
        assert_eq!(payload(&f[..HEADERS_LEN + 5], &flow()), Err(FrameError::Truncated(47)));
        f[23] = 6;
        assert_eq!(payload(&f, &flow()), Err(FrameError::NotUdp));
    }

    proptest! {
        /// Whatever the payload, what is written reads back as the same payload, and no
        /// byte string makes the reader panic.
        #[test]
        fn written_frames_read_back(body in prop::collection::vec(any::<u8>(), 0..MAX_PAYLOAD), pad in 0usize..20) {
            let mut f = vec![0u8; HEADERS_LEN + body.len() + pad];
            write_headers(&mut f, &flow(), body.len(), 3);
            f[HEADERS_LEN..HEADERS_LEN + body.len()].copy_from_slice(&body);
            prop_assert_eq!(payload(&f, &flow()).unwrap(), &body[..]);
        }

        #[test]
        fn any_bytes_are_read_without_panicking(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            let _ = payload(&bytes, &flow());
        }
    }
}
