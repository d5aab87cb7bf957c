//! IPv4 and IPv6 header views.
//!
//! [`Ipv4`] and [`Ipv6`] wrap a buffer that starts with the header (`&[u8]`, `&mut [u8]`,
//! `Vec<u8>`...). The constructors check what every accessor relies on (version, lengths), so
//! accessors never panic afterwards; setters exist where the buffer is mutable. Setters change
//! exactly the field they name, except [`Ipv4::set_ecn`], which also updates the header
//! checksum incrementally (RFC 1624), as a router marking CE must.

use std::net::{Ipv4Addr, Ipv6Addr};

use super::checksum;
use super::{Ecn, WireError};

/// An IPv4 header at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> Ipv4<T> {
    /// The fixed part of the header.
    pub const MIN_HEADER_LEN: usize = 20;

    /// Checks that `buf` starts with a whole IPv4 header (version 4, IHL >= 5, the header with
    /// its options inside the buffer). Lengths beyond the header are not checked: see
    /// [`Ipv4::total_len`].
    pub fn new(buf: T) -> Result<Ipv4<T>, WireError> {
        let b = buf.as_ref();
        let Some(&first) = b.first() else {
            return Err(WireError::Truncated { what: "IPv4 header", need: 20, have: 0 });
        };
        if first >> 4 != 4 {
            return Err(WireError::Version(first >> 4));
        }
        let header_len = usize::from(first & 0x0f) * 4;
        if header_len < Self::MIN_HEADER_LEN {
            return Err(WireError::Malformed("IPv4 header length below 20 bytes"));
        }
        if b.len() < header_len {
            return Err(WireError::Truncated {
                what: "IPv4 header",
                need: header_len,
                have: b.len(),
            });
        }
        Ok(Ipv4 { buf })
    }

    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }

    fn u16_at(&self, at: usize) -> u16 {
        u16::from_be_bytes([self.b()[at], self.b()[at + 1]])
    }

    /// The buffer.
    pub fn into_inner(self) -> T {
        self.buf
    }

    /// The whole buffer: the header and whatever follows it.
    pub fn as_bytes(&self) -> &[u8] {
        self.buf.as_ref()
    }

    /// Header length in bytes, options included (20..=60).
    pub fn header_len(&self) -> usize {
        usize::from(self.b()[0] & 0x0f) * 4
    }

    /// The header bytes.
    pub fn header(&self) -> &[u8] {
        &self.b()[..self.header_len()]
    }

    /// The DSCP and ECN byte (formerly TOS).
    pub fn tos(&self) -> u8 {
        self.b()[1]
    }

    /// The ECN codepoint.
    pub fn ecn(&self) -> Ecn {
        Ecn::from_bits(self.tos())
    }

    /// Total length: header plus payload, as the header says.
    pub fn total_len(&self) -> u16 {
        self.u16_at(2)
    }

    /// Identification.
    pub fn ident(&self) -> u16 {
        self.u16_at(4)
    }

    /// The DF bit.
    pub fn dont_fragment(&self) -> bool {
        self.b()[6] & 0x40 != 0
    }

    /// The MF bit.
    pub fn more_fragments(&self) -> bool {
        self.b()[6] & 0x20 != 0
    }

    /// Fragment offset in bytes.
    pub fn fragment_offset(&self) -> u16 {
        (self.u16_at(6) & 0x1fff) * 8
    }

    /// Whether this is a fragment (MF set or a non-zero offset).
    pub fn is_fragment(&self) -> bool {
        self.more_fragments() || self.fragment_offset() != 0
    }

    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.b()[8]
    }

    /// The payload's protocol number (6 TCP, 17 UDP).
    pub fn protocol(&self) -> u8 {
        self.b()[9]
    }

    /// The header checksum as stored.
    pub fn checksum(&self) -> u16 {
        self.u16_at(10)
    }

    /// Whether the stored header checksum is right.
    pub fn checksum_ok(&self) -> bool {
        checksum::verifies(checksum::sum(self.header(), 0))
    }

    /// Source address.
    pub fn src(&self) -> Ipv4Addr {
        let b = self.b();
        Ipv4Addr::new(b[12], b[13], b[14], b[15])
    }

    /// Destination address.
    pub fn dst(&self) -> Ipv4Addr {
        let b = self.b();
        Ipv4Addr::new(b[16], b[17], b[18], b[19])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4<T> {
    fn put_u16(&mut self, at: usize, v: u16) {
        self.buf.as_mut()[at..at + 2].copy_from_slice(&v.to_be_bytes());
    }

    /// Sets the total length (the checksum is not updated: call [`Ipv4::fill_checksum`]).
    pub fn set_total_len(&mut self, len: u16) {
        self.put_u16(2, len);
    }

    /// Sets the identification (the checksum is not updated).
    pub fn set_ident(&mut self, ident: u16) {
        self.put_u16(4, ident);
    }

    /// Rewrites the ECN codepoint and updates the header checksum incrementally.
    pub fn set_ecn(&mut self, ecn: Ecn) {
        let old_word = self.u16_at(0);
        let b = self.buf.as_mut();
        b[1] = (b[1] & !0x03) | ecn.bits();
        let new_word = self.u16_at(0);
        let check = checksum::update_word(self.checksum(), old_word, new_word);
        self.put_u16(10, check);
    }

    /// Recomputes and stores the header checksum.
    pub fn fill_checksum(&mut self) {
        let check = checksum::ipv4_header(self.header());
        self.put_u16(10, check);
    }
}

/// An IPv6 fixed header at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6<T> {
    buf: T,
}

/// Extension headers [`Ipv6::transport`] walks before giving up (a bound on work per packet).
const MAX_EXTENSION_HEADERS: usize = 8;

/// Where an IP packet's transport header is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transport {
    /// Protocol number (6 TCP, 17 UDP, 58 ICMPv6...).
    pub protocol: u8,
    /// Offset of its header from the start of the IP packet.
    pub offset: usize,
    /// Whether this packet is a first fragment or not fragmented: only then does the
    /// transport header (and its ports) follow.
    pub has_header: bool,
}

impl<T: AsRef<[u8]>> Ipv6<T> {
    /// The fixed header's length.
    pub const HEADER_LEN: usize = 40;

    /// Checks that `buf` starts with a whole IPv6 fixed header (version 6, 40 bytes).
    pub fn new(buf: T) -> Result<Ipv6<T>, WireError> {
        let b = buf.as_ref();
        if let Some(&first) = b.first()
            && first >> 4 != 6
        {
            return Err(WireError::Version(first >> 4));
        }
        if b.len() < Self::HEADER_LEN {
            return Err(WireError::Truncated { what: "IPv6 header", need: 40, have: b.len() });
        }
        Ok(Ipv6 { buf })
    }

    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }

    /// The buffer.
    pub fn into_inner(self) -> T {
        self.buf
    }

    /// The whole buffer: the fixed header and whatever follows it.
    pub fn as_bytes(&self) -> &[u8] {
        self.buf.as_ref()
    }

    /// Traffic class (DSCP and ECN).
    pub fn traffic_class(&self) -> u8 {
        let b = self.b();
        (b[0] << 4) | (b[1] >> 4)
    }

    /// The ECN codepoint.
    pub fn ecn(&self) -> Ecn {
        Ecn::from_bits(self.traffic_class())
    }

    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        let b = self.b();
        (u32::from(b[1] & 0x0f) << 16) | (u32::from(b[2]) << 8) | u32::from(b[3])
    }

    /// Payload length (everything after the fixed header), as the header says.
    pub fn payload_len(&self) -> u16 {
        u16::from_be_bytes([self.b()[4], self.b()[5]])
    }

    /// Next header: the first extension header's or the transport's protocol number.
    pub fn next_header(&self) -> u8 {
        self.b()[6]
    }

    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.b()[7]
    }

    /// Source address.
    pub fn src(&self) -> Ipv6Addr {
        let o: [u8; 16] = self.b()[8..24].try_into().unwrap_or([0; 16]);
        Ipv6Addr::from(o)
    }

    /// Destination address.
    pub fn dst(&self) -> Ipv6Addr {
        let o: [u8; 16] = self.b()[24..40].try_into().unwrap_or([0; 16]);
        Ipv6Addr::from(o)
    }

    /// Walks the extension headers (hop-by-hop, routing, fragment, destination options,
    /// authentication) to the transport header. Fails if a header is cut short or there are
    /// more than eight of them.
    pub fn transport(&self) -> Result<Transport, WireError> {
        let b = self.b();
        let mut protocol = self.next_header();
        let mut offset = Self::HEADER_LEN;
        let mut has_header = true;
        for _ in 0..MAX_EXTENSION_HEADERS {
            let len = match protocol {
                // Hop-by-hop, routing, destination options: (length + 1) x 8 bytes.
                0 | 43 | 60 => b.get(offset + 1).map(|&l| (usize::from(l) + 1) * 8),
                // Fragment: 8 bytes; only the first fragment carries the transport header.
                44 => {
                    if let Some(f) = b.get(offset + 2..offset + 4) {
                        has_header &= u16::from_be_bytes([f[0], f[1]]) & 0xfff8 == 0;
                    }
                    Some(8)
                }
                // Authentication header: (length + 2) x 4 bytes.
                51 => b.get(offset + 1).map(|&l| (usize::from(l) + 2) * 4),
                _ => return Ok(Transport { protocol, offset, has_header }),
            };
            let Some(len) = len.filter(|&l| offset + l <= b.len()) else {
                return Err(WireError::Truncated {
                    what: "IPv6 extension header",
                    need: offset + 2,
                    have: b.len(),
                });
            };
            protocol = b[offset];
            offset += len;
        }
        Err(WireError::Malformed("more than eight IPv6 extension headers"))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6<T> {
    /// Sets the payload length.
    pub fn set_payload_len(&mut self, len: u16) {
        self.buf.as_mut()[4..6].copy_from_slice(&len.to_be_bytes());
    }

    /// Rewrites the ECN codepoint (IPv6 has no header checksum).
    pub fn set_ecn(&mut self, ecn: Ecn) {
        // The traffic class straddles bytes 0 and 1; its ECN bits are bits 4-5 of byte 1.
        let b = self.buf.as_mut();
        b[1] = (b[1] & !0x30) | (ecn.bits() << 4);
    }
}
