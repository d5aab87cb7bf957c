//! Header views over raw IP packets: IPv4, IPv6, TCP, UDP, checksums, ECN and flow keys.
//!
//! The emulator's model never looks inside a packet; the parts of the emulator that must (GSO
//! segmentation in [`crate::segment`], and later ECN marking, fq_codel's flow hash and
//! reordering) read and rewrite headers through these views, so the byte offsets live in one
//! place. In the manner of smoltcp's `wire` module:
//!
//! - A view wraps any buffer (`&[u8]`, `&mut [u8]`, `Vec<u8>`) that *starts* with the header;
//!   its constructor checks what the accessors rely on, so accessors never panic afterwards.
//!   Setters exist when the buffer is mutable.
//! - [`IpPacket`] dispatches on the version nibble and answers the questions every user asks:
//!   addresses, [`Ecn`], where the transport header is, the [`FlowKey`].
//! - [`checksum`] holds the Internet checksum, its pseudo-header and incremental update.
//!
//! ```
//! use tcptail_emu::wire::{Ecn, IpPacket};
//!
//! // A 20-byte IPv4 header (ECT(0), UDP) followed by an 8-byte UDP header.
//! let mut packet = vec![
//!     0x45, 0x02, 0x00, 0x1c, 0x00, 0x01, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00,
//!     10, 77, 0, 1, 10, 77, 0, 2, 0x30, 0x39, 0x00, 0x35, 0x00, 0x08, 0x00, 0x00,
//! ];
//! let mut ip = IpPacket::new(&mut packet[..])?;
//! ip.fill_checksum();
//! assert_eq!(ip.ecn(), Ecn::Ect0);
//! ip.set_ecn(Ecn::Ce); // what a router marking congestion does; the checksum follows
//! assert!(ip.checksum_ok());
//! let key = ip.flow_key().expect("a UDP header follows");
//! assert_eq!((key.protocol, key.src_port, key.dst_port), (17, 12345, 53));
//! # Ok::<(), tcptail_emu::wire::WireError>(())
//! ```
//!
//! Pure functions of their input: no allocation in the views, no I/O, no panics on any input
//! (malformed packets are [`WireError`]s).

pub mod checksum;
mod ip;
mod transport;

use std::net::IpAddr;

pub use ip::{Ipv4, Ipv6, Transport};
pub use transport::{Tcp, TcpFlags, Udp};

/// IP protocol number of TCP.
pub const PROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;

/// Why bytes are not the header they should be.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The buffer ends before the header does.
    #[error("{what} cut short: {need} bytes needed, {have} present")]
    Truncated {
        /// Which header.
        what: &'static str,
        /// Bytes the header needs.
        need: usize,
        /// Bytes there are.
        have: usize,
    },
    /// Not IPv4 or IPv6 (the version nibble), or not the version the view expects.
    #[error("IP version {0} is neither 4 nor 6 (or not the one expected)")]
    Version(u8),
    /// A field contradicts the header format or the packet's length.
    #[error("malformed packet: {0}")]
    Malformed(&'static str),
}

/// The ECN codepoint of an IP packet (RFC 3168): the two low bits of the TOS / traffic class.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ecn {
    /// Not ECN-capable transport.
    NotEct,
    /// ECN-capable transport, codepoint 1 (L4S).
    Ect1,
    /// ECN-capable transport, codepoint 0 (classic).
    Ect0,
    /// Congestion experienced.
    Ce,
}

impl Ecn {
    /// The codepoint of a TOS / traffic class byte.
    pub fn from_bits(tos: u8) -> Ecn {
        match tos & 0x03 {
            0 => Ecn::NotEct,
            1 => Ecn::Ect1,
            2 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }

    /// The two bits.
    pub fn bits(self) -> u8 {
        match self {
            Ecn::NotEct => 0,
            Ecn::Ect1 => 1,
            Ecn::Ect0 => 2,
            Ecn::Ce => 3,
        }
    }

    /// Whether a router may mark this packet CE instead of dropping it (ECT(0), ECT(1), or
    /// already CE).
    pub fn is_capable(self) -> bool {
        self != Ecn::NotEct
    }
}

/// The 5-tuple that identifies a flow: what fq_codel hashes. Ports are 0 for protocols
/// without them and for non-first fragments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Transport protocol number.
    pub protocol: u8,
    /// Source port (TCP, UDP), else 0.
    pub src_port: u16,
    /// Destination port (TCP, UDP), else 0.
    pub dst_port: u16,
}

/// An IPv4 or IPv6 packet, by its version nibble.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpPacket<T> {
    /// Version 4.
    V4(Ipv4<T>),
    /// Version 6.
    V6(Ipv6<T>),
}

impl<T: AsRef<[u8]>> IpPacket<T> {
    /// Checks the version and that the fixed header (and IPv4 options) are present.
    pub fn new(buf: T) -> Result<IpPacket<T>, WireError> {
        match buf.as_ref().first().map(|b| b >> 4) {
            Some(4) => Ipv4::new(buf).map(IpPacket::V4),
            Some(6) => Ipv6::new(buf).map(IpPacket::V6),
            Some(v) => Err(WireError::Version(v)),
            None => Err(WireError::Truncated { what: "IP header", need: 20, have: 0 }),
        }
    }

    /// The buffer.
    pub fn into_inner(self) -> T {
        match self {
            IpPacket::V4(p) => p.into_inner(),
            IpPacket::V6(p) => p.into_inner(),
        }
    }

    /// 4 or 6.
    pub fn version(&self) -> u8 {
        match self {
            IpPacket::V4(_) => 4,
            IpPacket::V6(_) => 6,
        }
    }

    /// Source address.
    pub fn src(&self) -> IpAddr {
        match self {
            IpPacket::V4(p) => p.src().into(),
            IpPacket::V6(p) => p.src().into(),
        }
    }

    /// Destination address.
    pub fn dst(&self) -> IpAddr {
        match self {
            IpPacket::V4(p) => p.dst().into(),
            IpPacket::V6(p) => p.dst().into(),
        }
    }

    /// The ECN codepoint.
    pub fn ecn(&self) -> Ecn {
        match self {
            IpPacket::V4(p) => p.ecn(),
            IpPacket::V6(p) => p.ecn(),
        }
    }

    /// Whether the header checksum is right (IPv6 has none: always true).
    pub fn checksum_ok(&self) -> bool {
        match self {
            IpPacket::V4(p) => p.checksum_ok(),
            IpPacket::V6(_) => true,
        }
    }

    /// Where the transport header is (IPv6: after the extension headers).
    pub fn transport(&self) -> Result<Transport, WireError> {
        match self {
            IpPacket::V4(p) => Ok(Transport {
                protocol: p.protocol(),
                offset: p.header_len(),
                has_header: p.fragment_offset() == 0,
            }),
            IpPacket::V6(p) => p.transport(),
        }
    }

    /// The whole packet's bytes.
    fn as_bytes(&self) -> &[u8] {
        match self {
            IpPacket::V4(p) => p.as_bytes(),
            IpPacket::V6(p) => p.as_bytes(),
        }
    }

    /// The flow's 5-tuple; `None` if the headers are cut short or malformed. Ports are read for
    /// TCP and UDP when the transport header is present, else 0.
    pub fn flow_key(&self) -> Option<FlowKey> {
        let t = self.transport().ok()?;
        let b = self.as_bytes();
        let ports = match t.protocol {
            PROTO_TCP | PROTO_UDP if t.has_header => b.get(t.offset..t.offset + 4)?,
            _ => &[0, 0, 0, 0][..],
        };
        Some(FlowKey {
            src: self.src(),
            dst: self.dst(),
            protocol: t.protocol,
            src_port: u16::from_be_bytes([ports[0], ports[1]]),
            dst_port: u16::from_be_bytes([ports[2], ports[3]]),
        })
    }

    /// The TCP flags, `None` if this is not TCP or its header is absent (a later fragment) or
    /// cut short.
    pub fn tcp_flags(&self) -> Option<TcpFlags> {
        let t = self.transport().ok()?;
        if t.protocol != PROTO_TCP || !t.has_header {
            return None;
        }
        let b = self.as_bytes();
        Some(Tcp::new(b.get(t.offset..)?).ok()?.flags())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IpPacket<T> {
    /// Rewrites the ECN codepoint (updating the IPv4 header checksum incrementally).
    pub fn set_ecn(&mut self, ecn: Ecn) {
        match self {
            IpPacket::V4(p) => p.set_ecn(ecn),
            IpPacket::V6(p) => p.set_ecn(ecn),
        }
    }

    /// Recomputes the IPv4 header checksum (nothing for IPv6).
    pub fn fill_checksum(&mut self) {
        if let IpPacket::V4(p) = self {
            p.fill_checksum();
        }
    }
}

/// The full TCP or UDP checksum of `transport` (header and payload, its checksum field treated
/// as zero) under the pseudo-header of `src`, `dst`, `protocol`. A UDP result of 0 is sent as
/// `0xffff` (0 means "no checksum").
pub fn transport_checksum(src: IpAddr, dst: IpAddr, protocol: u8, transport: &[u8]) -> u16 {
    let len = u32::try_from(transport.len()).unwrap_or(u32::MAX);
    let field = if protocol == PROTO_UDP { Udp::<&[u8]>::CHECKSUM_OFFSET } else { 16 };
    let pseudo = checksum::pseudo_header(src, dst, protocol, len);
    let (before, rest) = transport.split_at(field.min(transport.len()));
    let after = rest.get(2..).unwrap_or(&[]);
    let check = checksum::finish(checksum::sum(after, checksum::sum(before, pseudo)));
    if protocol == PROTO_UDP && check == 0 { 0xffff } else { check }
}

/// The partial checksum an offloaded packet carries in its TCP or UDP checksum field
/// (`VIRTIO_NET_HDR_F_NEEDS_CSUM`, Linux's `CHECKSUM_PARTIAL`): the folded pseudo-header sum for
/// a transport length of `transport_len`, not complemented. The kernel adds the rest.
pub fn partial_checksum(src: IpAddr, dst: IpAddr, protocol: u8, transport_len: u32) -> u16 {
    checksum::fold(checksum::pseudo_header(src, dst, protocol, transport_len))
}

#[cfg(test)]
mod tests;
