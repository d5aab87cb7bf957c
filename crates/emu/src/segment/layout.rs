//! [`Layout`]: where the segments of an offloaded packet are, and the headers of any run of
//! them.
//!
//! The segment table is documented on [`Layout`].

use std::net::IpAddr;
use std::ops::Range;

use crate::wire::{self, Ecn, IpPacket, Ipv6, PROTO_TCP, PROTO_UDP, Tcp, TcpFlags, Udp, WireError};

use super::{SegmentError, VNET_HDR_LEN, VirtioNetHdr};

/// Longest IP plus transport header a [`Layout`] accepts (60 + 60 for IPv4 with options, 40 +
/// extension headers + 60 for IPv6).
pub const MAX_HEADER_LEN: usize = 256;

/// Bytes a run's rewritten headers can take: a `virtio_net_hdr` and [`MAX_HEADER_LEN`].
pub const MAX_FRAME_HEADER: usize = VNET_HDR_LEN + MAX_HEADER_LEN;

/// The transport of a GSO packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GsoKind {
    /// TCP segmentation (TSO).
    Tcp,
    /// UDP segmentation (USO).
    Udp,
}

/// The validated shape of a GSO packet (see [`Layout`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Gso {
    /// TCP or UDP.
    pub kind: GsoKind,
    /// 4 or 6.
    pub ip_version: u8,
    /// Offset of the transport header (the `csum_start`).
    pub l4_offset: u16,
    /// IP and transport headers together.
    pub header_len: u16,
    /// Payload bytes per segment.
    pub gso_size: u16,
    /// Payload bytes of all segments.
    pub payload_len: u32,
    /// Number of segments.
    pub segments: u16,
    /// The `GSO_ECN` bit was set (the packet carries CWR).
    pub ecn_flag: bool,
}

/// Where the segments of a packet read from a TUN device are: one segment (an ordinary
/// packet), or a GSO packet of several.
///
/// A GSO packet is one set of headers followed by the payload of `n` segments, `gso_size`
/// bytes each (the last may be shorter). Segment `i` on the wire is those headers, rewritten,
/// followed by its slice of the payload:
///
/// | field | segment `i` of `n` (or the run `i..j`) |
/// |---|---|
/// | IPv4 total length / IPv6 payload length | its own length |
/// | IPv4 identification | the packet's + `i` (wrapping), header checksum recomputed |
/// | TCP sequence number | the packet's + `i * gso_size` (wrapping) |
/// | TCP flags | CWR only if `i == 0`; FIN and PSH only if it ends the packet |
/// | UDP length | 8 + its payload |
/// | TCP/UDP checksum | complete (a standalone packet), or the partial pseudo-header sum for its length (written with `F_NEEDS_CSUM`) |
///
/// which is what Linux's `tcp_gso_segment`/`__udp_gso_segment` produce. A run of several
/// segments written back to a TUN device is itself a GSO packet (same `gso_size`), so the same
/// rewrite gives its headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Length of the IP packet (without the `virtio_net_hdr`).
    len: u32,
    gso: Option<Gso>,
}

impl Layout {
    /// An ordinary packet of `len` bytes: one segment, carried as is.
    pub fn single(len: usize) -> Layout {
        Layout { len: u32::try_from(len).unwrap_or(u32::MAX), gso: None }
    }

    /// Reads the shape of `packet` (the IP packet after the `virtio_net_hdr`) from `hdr`,
    /// checking it against the packet's own headers: GSO type against IP version and protocol,
    /// lengths, `csum_start`/`csum_offset` against the transport header, a non-zero
    /// `gso_size`. A packet with `GSO_NONE` is [`Layout::single`] without further checks.
    pub fn parse(hdr: &VirtioNetHdr, packet: &[u8]) -> Result<Layout, SegmentError> {
        let (kind, want_version) = match hdr.gso_kind() {
            VirtioNetHdr::GSO_NONE => return Ok(Layout::single(packet.len())),
            VirtioNetHdr::GSO_TCPV4 => (GsoKind::Tcp, Some(4)),
            VirtioNetHdr::GSO_TCPV6 => (GsoKind::Tcp, Some(6)),
            VirtioNetHdr::GSO_UDP_L4 => (GsoKind::Udp, None),
            other => return Err(SegmentError::UnsupportedGso(other)),
        };
        let len = packet.len();
        let ip = IpPacket::new(packet)?;
        if want_version.is_some_and(|v| v != ip.version()) {
            return Err(SegmentError::Mismatch("the GSO type names the other IP version"));
        }
        match &ip {
            IpPacket::V4(v4) => {
                if usize::from(v4.total_len()) != len {
                    return Err(SegmentError::Mismatch("IPv4 total length is not the read length"));
                }
                if v4.is_fragment() {
                    return Err(SegmentError::Mismatch("a GSO packet cannot be an IP fragment"));
                }
            }
            IpPacket::V6(v6) => {
                if usize::from(v6.payload_len()) + Ipv6::<&[u8]>::HEADER_LEN != len {
                    return Err(SegmentError::Mismatch(
                        "IPv6 payload length is not the read length",
                    ));
                }
            }
        }
        let transport = ip.transport()?;
        if !transport.has_header {
            return Err(SegmentError::Mismatch("a GSO packet cannot be an IP fragment"));
        }
        let l4 = transport.offset;
        let rest = packet.get(l4..).unwrap_or(&[]);
        let (protocol, l4_len, csum_offset) = match kind {
            GsoKind::Tcp => {
                (PROTO_TCP, Tcp::new(rest)?.header_len(), Tcp::<&[u8]>::CHECKSUM_OFFSET)
            }
            GsoKind::Udp => {
                let udp = Udp::new(rest)?;
                if usize::from(udp.length()) != rest.len() {
                    return Err(SegmentError::Mismatch("UDP length is not the datagram's"));
                }
                (PROTO_UDP, Udp::<&[u8]>::HEADER_LEN, Udp::<&[u8]>::CHECKSUM_OFFSET)
            }
        };
        if transport.protocol != protocol {
            return Err(SegmentError::Mismatch("the GSO type names another transport"));
        }
        if hdr.needs_csum()
            && (usize::from(hdr.csum_start) != l4 || usize::from(hdr.csum_offset) != csum_offset)
        {
            return Err(SegmentError::Mismatch(
                "csum_start/csum_offset miss the transport checksum",
            ));
        }
        let header_len = l4 + l4_len;
        if header_len > MAX_HEADER_LEN {
            return Err(SegmentError::HeaderTooLong(header_len));
        }
        if hdr.gso_size == 0 {
            return Err(SegmentError::Mismatch("gso_size is 0"));
        }
        let payload_len = len - header_len;
        let segments = payload_len.div_ceil(usize::from(hdr.gso_size)).max(1);
        Ok(Layout {
            len: len as u32,
            gso: Some(Gso {
                kind,
                ip_version: ip.version(),
                l4_offset: l4 as u16,
                header_len: header_len as u16,
                gso_size: hdr.gso_size,
                payload_len: payload_len as u32,
                // At most 65535 payload bytes of at least one byte each.
                segments: u16::try_from(segments).unwrap_or(u16::MAX),
                ecn_flag: hdr.gso_type & VirtioNetHdr::GSO_ECN != 0,
            }),
        })
    }

    /// The GSO shape, if the packet is one.
    pub fn gso(&self) -> Option<&Gso> {
        self.gso.as_ref()
    }

    /// Length of the IP packet.
    pub fn len(&self) -> u32 {
        self.len
    }

    /// Whether the packet is empty (never, for a packet read from a device).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of segments (at least 1).
    pub fn segments(&self) -> u16 {
        self.gso.map_or(1, |g| g.segments)
    }

    /// Byte range of the payload of segments `run` within the IP packet.
    pub fn payload_range(&self, run: Range<u16>) -> Range<usize> {
        match self.gso {
            None => 0..self.len as usize,
            Some(g) => {
                let start = usize::from(g.header_len);
                let end = start + g.payload_len as usize;
                let at = |i: u16| (start + usize::from(i) * usize::from(g.gso_size)).min(end);
                at(run.start)..at(run.end)
            }
        }
    }

    /// Bytes on the wire of segments `run` together: each segment carries the headers.
    pub fn run_len(&self, run: Range<u16>) -> u32 {
        match self.gso {
            None => self.len,
            Some(g) => {
                let payload = self.payload_range(run.clone()).len() as u32;
                payload + u32::from(run.end.saturating_sub(run.start)) * u32::from(g.header_len)
            }
        }
    }

    /// Bytes on the wire of segment `i`.
    pub fn segment_len(&self, i: u16) -> u32 {
        self.run_len(i..i.saturating_add(1))
    }

    /// Writes into `out` the `virtio_net_hdr` and rewritten headers for segments `run` of
    /// `packet` (the IP packet, without `virtio_net_hdr`), with the ECN codepoint replaced by
    /// `ecn` if given. Returns their length and the range of `packet` to send after them. The
    /// transport checksum is partial (`F_NEEDS_CSUM`); a run of several segments is a GSO
    /// packet again.
    ///
    /// For an ordinary packet ([`Layout::single`]) the headers are `original` and the IP
    /// header (with `ecn` applied), and the rest follows unchanged; a packet that is not IP
    /// is sent as it is.
    pub fn write_run_header(
        &self,
        packet: &[u8],
        original: &VirtioNetHdr,
        run: Range<u16>,
        ecn: Option<Ecn>,
        out: &mut [u8; MAX_FRAME_HEADER],
    ) -> (usize, Range<usize>) {
        let Some(g) = self.gso else {
            out[..VNET_HDR_LEN].copy_from_slice(&original.encode());
            let ip_len = match IpPacket::new(packet) {
                Ok(IpPacket::V4(v4)) => v4.header_len(),
                Ok(IpPacket::V6(_)) => Ipv6::<&[u8]>::HEADER_LEN,
                Err(_) => 0,
            };
            let ip_len = ip_len.min(MAX_HEADER_LEN);
            let header = &mut out[VNET_HDR_LEN..VNET_HDR_LEN + ip_len];
            header.copy_from_slice(&packet[..ip_len]);
            if let (Some(ecn), Ok(mut ip)) = (ecn, IpPacket::new(&mut header[..])) {
                ip.set_ecn(ecn);
            }
            return (VNET_HDR_LEN + ip_len, ip_len..packet.len());
        };
        let count = run.end - run.start;
        let payload_range = self.payload_range(run.clone());
        let payload = payload_range.len();
        let vnet = VirtioNetHdr {
            flags: VirtioNetHdr::F_NEEDS_CSUM,
            gso_type: if count > 1 { gso_type(&g, run.start == 0) } else { VirtioNetHdr::GSO_NONE },
            hdr_len: g.header_len,
            gso_size: if count > 1 { g.gso_size } else { 0 },
            csum_start: g.l4_offset,
            csum_offset: match g.kind {
                GsoKind::Tcp => Tcp::<&[u8]>::CHECKSUM_OFFSET as u16,
                GsoKind::Udp => Udp::<&[u8]>::CHECKSUM_OFFSET as u16,
            },
        };
        out[..VNET_HDR_LEN].copy_from_slice(&vnet.encode());
        let header = &mut out[VNET_HDR_LEN..VNET_HDR_LEN + usize::from(g.header_len)];
        header.copy_from_slice(&packet[..usize::from(g.header_len)]);
        let (src, dst, transport_len) = rewrite(&g, header, run, payload, ecn, self.segments());
        let check = wire::partial_checksum(src, dst, protocol(&g), transport_len);
        set_transport_checksum(&g, header, check);
        (VNET_HDR_LEN + usize::from(g.header_len), payload_range)
    }

    /// Segment `i` of the GSO packet `packet` as a standalone IP packet with complete
    /// checksums (what a device without offload would carry), appended to `out`. An ordinary
    /// packet is appended unchanged. `ecn` replaces the ECN codepoint if given.
    pub fn write_segment(&self, packet: &[u8], i: u16, ecn: Option<Ecn>, out: &mut Vec<u8>) {
        let Some(g) = self.gso else {
            let start = out.len();
            out.extend_from_slice(packet);
            if let (Some(ecn), Ok(mut ip)) = (ecn, IpPacket::new(&mut out[start..])) {
                ip.set_ecn(ecn);
            }
            return;
        };
        let start = out.len();
        let hl = usize::from(g.header_len);
        out.extend_from_slice(&packet[..hl]);
        let range = self.payload_range(i..i + 1);
        let payload = range.len();
        out.extend_from_slice(&packet[range]);
        let seg = &mut out[start..];
        let (src, dst, _) = rewrite(&g, &mut seg[..hl], i..i + 1, payload, ecn, self.segments());
        let l4 = usize::from(g.l4_offset);
        let check = wire::transport_checksum(src, dst, protocol(&g), &seg[l4..]);
        set_transport_checksum(&g, &mut seg[..hl], check);
    }
}

fn protocol(g: &Gso) -> u8 {
    match g.kind {
        GsoKind::Tcp => PROTO_TCP,
        GsoKind::Udp => PROTO_UDP,
    }
}

/// The virtio GSO type of a run of several segments.
fn gso_type(g: &Gso, starts_packet: bool) -> u8 {
    let base = match (g.kind, g.ip_version) {
        (GsoKind::Tcp, 4) => VirtioNetHdr::GSO_TCPV4,
        (GsoKind::Tcp, _) => VirtioNetHdr::GSO_TCPV6,
        (GsoKind::Udp, _) => VirtioNetHdr::GSO_UDP_L4,
    };
    // CWR, and with it the ECN bit, stays with the first segment only.
    if g.ecn_flag && starts_packet { base | VirtioNetHdr::GSO_ECN } else { base }
}

/// Rewrites a copy of the packet's headers (`header`, exactly `g.header_len` bytes) for the
/// segments `run` carrying `payload` bytes: lengths, IPv4 id and checksum, TCP sequence and
/// flags, UDP length, ECN. Returns the addresses and the transport length for the checksum.
fn rewrite(
    g: &Gso,
    header: &mut [u8],
    run: Range<u16>,
    payload: usize,
    ecn: Option<Ecn>,
    segments: u16,
) -> (IpAddr, IpAddr, u32) {
    let hl = usize::from(g.header_len);
    let l4 = usize::from(g.l4_offset);
    // The layout was validated on these very bytes, so the views cannot fail; if they somehow
    // did, the header is left as it is rather than panicking.
    let (src, dst) = match IpPacket::new(&mut header[..l4]) {
        Ok(IpPacket::V4(mut v4)) => {
            v4.set_total_len((hl + payload) as u16);
            v4.set_ident(v4.ident().wrapping_add(run.start));
            if let Some(ecn) = ecn {
                v4.set_ecn(ecn);
            }
            v4.fill_checksum();
            (v4.src().into(), v4.dst().into())
        }
        Ok(IpPacket::V6(mut v6)) => {
            v6.set_payload_len((hl + payload - Ipv6::<&[u8]>::HEADER_LEN) as u16);
            if let Some(ecn) = ecn {
                v6.set_ecn(ecn);
            }
            (v6.src().into(), v6.dst().into())
        }
        Err(WireError::Truncated { .. } | WireError::Version(_) | WireError::Malformed(_)) => {
            return (IpAddr::from([0, 0, 0, 0]), IpAddr::from([0, 0, 0, 0]), 0);
        }
    };
    let transport_len = (hl - l4 + payload) as u32;
    match g.kind {
        GsoKind::Tcp => {
            if let Ok(mut tcp) = Tcp::new(&mut header[l4..]) {
                let advance = u32::from(run.start).wrapping_mul(u32::from(g.gso_size));
                tcp.set_seq(tcp.seq().wrapping_add(advance));
                let mut flags = tcp.flags();
                if run.start > 0 {
                    flags = flags.without(TcpFlags::CWR);
                }
                if run.end < segments {
                    flags = flags.without(TcpFlags::FIN | TcpFlags::PSH);
                }
                tcp.set_flags(flags);
            }
        }
        GsoKind::Udp => {
            if let Ok(mut udp) = Udp::new(&mut header[l4..]) {
                udp.set_length(transport_len as u16);
            }
        }
    }
    (src, dst, transport_len)
}

fn set_transport_checksum(g: &Gso, header: &mut [u8], check: u16) {
    let l4 = usize::from(g.l4_offset);
    match g.kind {
        GsoKind::Tcp => {
            if let Ok(mut tcp) = Tcp::new(&mut header[l4..]) {
                tcp.set_checksum(check);
            }
        }
        GsoKind::Udp => {
            if let Ok(mut udp) = Udp::new(&mut header[l4..]) {
                udp.set_checksum(check);
            }
        }
    }
}
