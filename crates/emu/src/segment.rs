//! Segmentation offload: GSO packets read from a TUN device, as MTU-sized segments.
//!
//! A TUN device opened with `IFF_VNET_HDR` and `TUNSETOFFLOAD` hands out packets of up to
//! 64 KiB, each behind a [`VirtioNetHdr`] saying how the kernel would have cut it into
//! `gso_size`-byte segments (TSO for TCP over IPv4/IPv6, USO for UDP), and takes such packets
//! back whole. On the wire those segments are separate packets, so the emulator's model
//! treats them one by one: each [`Segment`] is an index into a shared, immutable [`GsoPacket`]
//! (an `Arc`; no bytes are copied), and goes through loss, the queue, the link and the delay
//! line with its own wire length ([`Layout::segment_len`]).
//!
//! On release, [`crate::runs`] gathers consecutive segments of one packet into a run and
//! writes it as one packet: the original bytes when the whole packet leaves together, or a
//! rewritten header ([`Layout::write_run_header`]: TCP sequence number, IPv4 id and checksum,
//! IPv6 payload length, UDP length, flags: CWR only on the first segment, FIN and PSH only on
//! the last, partial transport checksum) in front of a slice of the original payload.
//!
//! [`split`] turns a GSO packet into standalone segments with complete checksums, and
//! [`coalesce`] does the inverse (byte-identical for what the kernel produces); tests hold
//! both against an independent implementation.
//!
//! # Invariants
//!
//! - A [`GsoPacket`] is validated once ([`Layout::parse`]); everything derived from it (runs,
//!   segments, headers) never panics and never reads outside it.
//! - A packet that is not GSO (`GSO_NONE`, or a device without `IFF_VNET_HDR`) is one segment
//!   whose bytes are never looked at unless its ECN codepoint is rewritten.
//! - Pure: no clock, no I/O. Allocation only where a function returns new bytes.

mod layout;
mod vnet;

use std::sync::Arc;

pub use layout::{Gso, GsoKind, Layout, MAX_FRAME_HEADER, MAX_HEADER_LEN};
pub use vnet::{VNET_HDR_LEN, VirtioNetHdr};

use crate::wire::{Ecn, FlowKey, IpPacket, PROTO_TCP, PROTO_UDP, Tcp, TcpFlags, WireError};

/// Why bytes are not a GSO packet this crate can segment, or segments that cannot be
/// coalesced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SegmentError {
    /// Shorter than a `virtio_net_hdr`.
    #[error("{have} bytes are too short for a {VNET_HDR_LEN}-byte virtio_net_hdr")]
    VnetHeader {
        /// Bytes there are.
        have: usize,
    },
    /// A GSO type other than TCPv4, TCPv6 and UDP_L4 (e.g. legacy UFO).
    #[error("GSO type {0} is not supported (TCPv4 1, TCPv6 4, UDP_L4 5)")]
    UnsupportedGso(u8),
    /// The headers of the packet itself are malformed.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// The `virtio_net_hdr` and the packet's headers disagree.
    #[error("inconsistent GSO packet: {0}")]
    Mismatch(&'static str),
    /// Headers longer than [`MAX_HEADER_LEN`].
    #[error("{0} bytes of headers exceed {MAX_HEADER_LEN}")]
    HeaderTooLong(usize),
    /// Segments that are not consecutive segments of one flow.
    #[error("cannot coalesce: {0}")]
    Coalesce(&'static str),
}

/// A packet as read from a TUN device: the buffer it was read into, its `virtio_net_hdr` (if
/// the device has them) and its validated [`Layout`]. Immutable once built; segments share it
/// through an `Arc`.
#[derive(Debug)]
pub struct GsoPacket {
    buf: Box<[u8]>,
    len: usize,
    vnet: Option<VirtioNetHdr>,
    layout: Layout,
}

/// A buffer [`GsoPacket::parse`] refused, handed back for reuse with the reason.
#[derive(Debug)]
pub struct Rejected {
    /// Why.
    pub error: SegmentError,
    /// The buffer.
    pub buffer: Box<[u8]>,
}

impl GsoPacket {
    /// The first `len` bytes of `buf` as read from a device: a `virtio_net_hdr` and the IP
    /// packet if `vnet`, else the IP packet alone (one segment, never parsed).
    pub fn parse(buf: Box<[u8]>, len: usize, vnet: bool) -> Result<GsoPacket, Rejected> {
        let len = len.min(buf.len());
        if !vnet {
            return Ok(GsoPacket { layout: Layout::single(len), buf, len, vnet: None });
        }
        let parsed = VirtioNetHdr::decode(&buf[..len])
            .and_then(|hdr| Ok((hdr, Layout::parse(&hdr, &buf[VNET_HDR_LEN..len])?)));
        match parsed {
            Ok((hdr, layout)) => Ok(GsoPacket { buf, len, vnet: Some(hdr), layout }),
            Err(error) => Err(Rejected { error, buffer: buf }),
        }
    }

    /// [`GsoPacket::parse`] of an owned byte vector (tests, small tools).
    pub fn from_vec(bytes: Vec<u8>, vnet: bool) -> Result<GsoPacket, SegmentError> {
        let len = bytes.len();
        GsoPacket::parse(bytes.into_boxed_slice(), len, vnet).map_err(|r| r.error)
    }

    /// The bytes as read: `virtio_net_hdr` (if any) and IP packet.
    pub fn frame(&self) -> &[u8] {
        &self.buf[..self.len]
    }

    /// The IP packet.
    pub fn ip_packet(&self) -> &[u8] {
        let start = if self.vnet.is_some() { VNET_HDR_LEN } else { 0 };
        &self.buf[start..self.len]
    }

    /// The `virtio_net_hdr`, if the device has them.
    pub fn vnet_header(&self) -> Option<&VirtioNetHdr> {
        self.vnet.as_ref()
    }

    /// Where the segments are.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The buffer it was read into (for reuse).
    pub fn into_buffer(self) -> Box<[u8]> {
        self.buf
    }
}

/// One MTU-sized segment of a [`GsoPacket`]: what the emulator's model carries (the `T` of
/// `Direction<Segment>`). Cheap to move (an `Arc`, an index and an ECN override).
#[derive(Debug, Clone)]
pub struct Segment {
    packet: Arc<GsoPacket>,
    index: u16,
    ecn: Option<Ecn>,
}

impl Segment {
    /// Every segment of `packet`, in order.
    pub fn all(packet: &Arc<GsoPacket>) -> impl Iterator<Item = Segment> + '_ {
        (0..packet.layout.segments()).map(|index| Segment {
            packet: Arc::clone(packet),
            index,
            ecn: None,
        })
    }

    /// The packet it belongs to.
    pub fn packet(&self) -> &Arc<GsoPacket> {
        &self.packet
    }

    /// Its index in the packet (0-based).
    pub fn index(&self) -> u16 {
        self.index
    }

    /// Bytes on the wire (IP header, transport header, its payload).
    pub fn len(&self) -> u32 {
        self.packet.layout.segment_len(self.index)
    }

    /// Whether it carries nothing (never, for a packet read from a device).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether it is the last segment of its packet.
    pub fn is_last(&self) -> bool {
        self.index + 1 >= self.packet.layout.segments()
    }

    /// Its ECN codepoint: the one set with [`Segment::set_ecn`], else the packet's; `None` if
    /// the packet is not IP.
    pub fn ecn(&self) -> Option<Ecn> {
        self.ecn.or_else(|| IpPacket::new(self.packet.ip_packet()).ok().map(|ip| ip.ecn()))
    }

    /// The ECN codepoint set on this segment alone, if any.
    pub fn ecn_override(&self) -> Option<Ecn> {
        self.ecn
    }

    /// Rewrites this segment's ECN codepoint when it is written out (e.g. CE for a marking
    /// queue); the shared packet is not touched, and the segment no longer joins runs with
    /// segments that differ.
    pub fn set_ecn(&mut self, ecn: Ecn) {
        self.ecn = Some(ecn);
    }

    /// The flow's 5-tuple (the same for every segment of a packet); `None` if not IP.
    pub fn flow_key(&self) -> Option<FlowKey> {
        IpPacket::new(self.packet.ip_packet()).ok()?.flow_key()
    }

    /// The TCP flags this segment carries when written out: the packet's, with CWR only on the
    /// first segment and FIN and PSH only on the last (as in [`Segment::to_packet`]); `None`
    /// if the packet is not TCP.
    pub fn tcp_flags(&self) -> Option<TcpFlags> {
        let mut flags = IpPacket::new(self.packet.ip_packet()).ok()?.tcp_flags()?;
        if self.index > 0 {
            flags = flags.without(TcpFlags::CWR);
        }
        if !self.is_last() {
            flags = flags.without(TcpFlags::FIN | TcpFlags::PSH);
        }
        Some(flags)
    }

    /// This segment as a standalone IP packet with complete checksums.
    pub fn to_packet(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.len() as usize);
        self.packet.layout.write_segment(self.packet.ip_packet(), self.index, self.ecn, &mut out);
        out
    }
}

/// Every segment of a GSO packet (`virtio_net_hdr` followed by the IP packet) as a standalone
/// IP packet with complete checksums: what Linux's software GSO would put on the wire.
pub fn split(frame: &[u8]) -> Result<Vec<Vec<u8>>, SegmentError> {
    let packet = Arc::new(GsoPacket::from_vec(frame.to_vec(), true)?);
    Ok(Segment::all(&packet).map(|s| s.to_packet()).collect())
}

/// The inverse of [`split`]: consecutive segments of one TCP or UDP flow (standalone IP
/// packets with complete checksums) as one GSO packet, `virtio_net_hdr` first, with a partial
/// transport checksum (`F_NEEDS_CSUM`) as the kernel would hand it out. One segment comes back
/// unchanged behind a `GSO_NONE` header.
///
/// Fails unless [`split`] of the result gives back exactly `segments`: same flow and headers,
/// consecutive sequence numbers and IPv4 ids, every segment but the last of one size, CWR only
/// on the first and FIN/PSH only on the last, and valid checksums.
pub fn coalesce<S: AsRef<[u8]>>(segments: &[S]) -> Result<Vec<u8>, SegmentError> {
    let (first, last) = match segments {
        [] => return Err(SegmentError::Coalesce("no segments")),
        [only] => {
            let mut out = VirtioNetHdr::default().encode().to_vec();
            out.extend_from_slice(only.as_ref());
            return Ok(out);
        }
        [first, .., last] => (first.as_ref(), last.as_ref()),
    };
    let ip = IpPacket::new(first)?;
    let transport = ip.transport()?;
    let l4 = transport.offset;
    let (kind, l4_len) = match transport.protocol {
        PROTO_TCP => (GsoKind::Tcp, Tcp::new(first.get(l4..).unwrap_or(&[]))?.header_len()),
        PROTO_UDP => (GsoKind::Udp, 8),
        _ => return Err(SegmentError::Coalesce("neither TCP nor UDP")),
    };
    let header_len = l4 + l4_len;
    let gso_size = first.len().checked_sub(header_len).filter(|&p| p > 0);
    let gso_size = gso_size.ok_or(SegmentError::Coalesce("the first segment has no payload"))?;
    let mut out =
        Vec::with_capacity(VNET_HDR_LEN + segments.iter().map(|s| s.as_ref().len()).sum::<usize>());
    out.extend_from_slice(&[0; VNET_HDR_LEN]);
    out.extend_from_slice(&first[..header_len]);
    for s in segments {
        let payload = s.as_ref().get(header_len..).unwrap_or(&[]);
        out.extend_from_slice(payload);
    }
    let total = out.len() - VNET_HDR_LEN;
    let packet = &mut out[VNET_HDR_LEN..];
    match IpPacket::new(&mut packet[..l4])? {
        IpPacket::V4(mut v4) => {
            let total = u16::try_from(total).map_err(|_| SegmentError::Coalesce("over 64 KiB"))?;
            v4.set_total_len(total);
            v4.fill_checksum();
        }
        IpPacket::V6(mut v6) => {
            let payload =
                u16::try_from(total - 40).map_err(|_| SegmentError::Coalesce("over 64 KiB"))?;
            v6.set_payload_len(payload);
        }
    }
    let transport_len = (total - l4) as u32;
    let (src, dst) = (ip.src(), ip.dst());
    let cwr;
    match kind {
        GsoKind::Tcp => {
            let last_flags = Tcp::new(last.get(l4..).unwrap_or(&[]))?.flags();
            let mut tcp = Tcp::new(&mut packet[l4..header_len])?;
            cwr = tcp.flags().contains(TcpFlags::CWR);
            let ending = TcpFlags(last_flags.0 & (TcpFlags::FIN | TcpFlags::PSH).0);
            tcp.set_flags(tcp.flags() | ending);
            tcp.set_checksum(crate::wire::partial_checksum(src, dst, PROTO_TCP, transport_len));
        }
        GsoKind::Udp => {
            cwr = false;
            let mut udp = crate::wire::Udp::new(&mut packet[l4..header_len])?;
            let len =
                u16::try_from(transport_len).map_err(|_| SegmentError::Coalesce("over 64 KiB"))?;
            udp.set_length(len);
            udp.set_checksum(crate::wire::partial_checksum(src, dst, PROTO_UDP, transport_len));
        }
    }
    let base = match (kind, ip.version()) {
        (GsoKind::Tcp, 4) => VirtioNetHdr::GSO_TCPV4,
        (GsoKind::Tcp, _) => VirtioNetHdr::GSO_TCPV6,
        (GsoKind::Udp, _) => VirtioNetHdr::GSO_UDP_L4,
    };
    let hdr = VirtioNetHdr {
        flags: VirtioNetHdr::F_NEEDS_CSUM,
        gso_type: if cwr { base | VirtioNetHdr::GSO_ECN } else { base },
        hdr_len: header_len as u16,
        gso_size: u16::try_from(gso_size).map_err(|_| SegmentError::Coalesce("over 64 KiB"))?,
        csum_start: l4 as u16,
        csum_offset: match kind {
            GsoKind::Tcp => 16,
            GsoKind::Udp => 6,
        },
    };
    out[..VNET_HDR_LEN].copy_from_slice(&hdr.encode());
    // The result is right exactly when it splits back into the segments given.
    let again = split(&out)?;
    if again.len() != segments.len() || again.iter().zip(segments).any(|(a, s)| a != s.as_ref()) {
        return Err(SegmentError::Coalesce("not consecutive segments of one flow"));
    }
    Ok(out)
}

#[cfg(test)]
pub(crate) mod test_packets;
#[cfg(test)]
mod tests;
