//! TCP and UDP header views.
//!
//! [`Tcp`] and [`Udp`] wrap a buffer that starts with the transport header, like the IP views:
//! the constructor checks the lengths every accessor relies on, setters change exactly the
//! field they name (checksums are the caller's business: see [`super::checksum`]).

use super::WireError;

/// TCP flags (the header's 13th byte): CWR ECE URG ACK PSH RST SYN FIN.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TcpFlags(pub u8);

impl TcpFlags {
    /// No more data from the sender.
    pub const FIN: TcpFlags = TcpFlags(0x01);
    /// Synchronise sequence numbers.
    pub const SYN: TcpFlags = TcpFlags(0x02);
    /// Reset.
    pub const RST: TcpFlags = TcpFlags(0x04);
    /// Push.
    pub const PSH: TcpFlags = TcpFlags(0x08);
    /// The acknowledgment field is significant.
    pub const ACK: TcpFlags = TcpFlags(0x10);
    /// The urgent pointer is significant.
    pub const URG: TcpFlags = TcpFlags(0x20);
    /// ECN echo.
    pub const ECE: TcpFlags = TcpFlags(0x40);
    /// Congestion window reduced.
    pub const CWR: TcpFlags = TcpFlags(0x80);

    /// Whether every flag of `other` is set.
    pub fn contains(self, other: TcpFlags) -> bool {
        self.0 & other.0 == other.0
    }

    /// These flags without those of `other`.
    pub fn without(self, other: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 & !other.0)
    }
}

impl std::ops::BitOr for TcpFlags {
    type Output = TcpFlags;
    fn bitor(self, rhs: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 | rhs.0)
    }
}

/// A TCP header at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tcp<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> Tcp<T> {
    /// Byte offset of the checksum field in the header.
    pub const CHECKSUM_OFFSET: usize = 16;
    /// The fixed part of the header.
    pub const MIN_HEADER_LEN: usize = 20;

    /// Checks that `buf` starts with a whole TCP header (data offset 5..=15 words, options
    /// inside the buffer).
    pub fn new(buf: T) -> Result<Tcp<T>, WireError> {
        let b = buf.as_ref();
        if b.len() < Self::MIN_HEADER_LEN {
            return Err(WireError::Truncated { what: "TCP header", need: 20, have: b.len() });
        }
        let header_len = usize::from(b[12] >> 4) * 4;
        if header_len < Self::MIN_HEADER_LEN {
            return Err(WireError::Malformed("TCP data offset below 5 words"));
        }
        if b.len() < header_len {
            return Err(WireError::Truncated {
                what: "TCP header",
                need: header_len,
                have: b.len(),
            });
        }
        Ok(Tcp { buf })
    }

    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }

    fn u16_at(&self, at: usize) -> u16 {
        u16::from_be_bytes([self.b()[at], self.b()[at + 1]])
    }

    fn u32_at(&self, at: usize) -> u32 {
        let b = self.b();
        u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }

    /// The buffer.
    pub fn into_inner(self) -> T {
        self.buf
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        self.u16_at(0)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        self.u16_at(2)
    }

    /// Sequence number.
    pub fn seq(&self) -> u32 {
        self.u32_at(4)
    }

    /// Acknowledgment number.
    pub fn ack(&self) -> u32 {
        self.u32_at(8)
    }

    /// Header length in bytes, options included (20..=60).
    pub fn header_len(&self) -> usize {
        usize::from(self.b()[12] >> 4) * 4
    }

    /// The flags.
    pub fn flags(&self) -> TcpFlags {
        TcpFlags(self.b()[13])
    }

    /// Receive window (unscaled).
    pub fn window(&self) -> u16 {
        self.u16_at(14)
    }

    /// The checksum as stored.
    pub fn checksum(&self) -> u16 {
        self.u16_at(Self::CHECKSUM_OFFSET)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Tcp<T> {
    /// Sets the sequence number.
    pub fn set_seq(&mut self, seq: u32) {
        self.buf.as_mut()[4..8].copy_from_slice(&seq.to_be_bytes());
    }

    /// Sets the flags byte.
    pub fn set_flags(&mut self, flags: TcpFlags) {
        self.buf.as_mut()[13] = flags.0;
    }

    /// Stores a checksum value.
    pub fn set_checksum(&mut self, check: u16) {
        self.buf.as_mut()[16..18].copy_from_slice(&check.to_be_bytes());
    }
}

/// A UDP header at the start of a buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Udp<T> {
    buf: T,
}

impl<T: AsRef<[u8]>> Udp<T> {
    /// Byte offset of the checksum field in the header.
    pub const CHECKSUM_OFFSET: usize = 6;
    /// The header's length.
    pub const HEADER_LEN: usize = 8;

    /// Checks that `buf` starts with a whole UDP header (8 bytes).
    pub fn new(buf: T) -> Result<Udp<T>, WireError> {
        let have = buf.as_ref().len();
        if have < Self::HEADER_LEN {
            return Err(WireError::Truncated { what: "UDP header", need: 8, have });
        }
        Ok(Udp { buf })
    }

    fn u16_at(&self, at: usize) -> u16 {
        let b = self.buf.as_ref();
        u16::from_be_bytes([b[at], b[at + 1]])
    }

    /// The buffer.
    pub fn into_inner(self) -> T {
        self.buf
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        self.u16_at(0)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        self.u16_at(2)
    }

    /// Length: header plus payload, as the header says.
    pub fn length(&self) -> u16 {
        self.u16_at(4)
    }

    /// The checksum as stored (0: none, IPv4 only).
    pub fn checksum(&self) -> u16 {
        self.u16_at(Self::CHECKSUM_OFFSET)
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Udp<T> {
    /// Sets the length field.
    pub fn set_length(&mut self, len: u16) {
        self.buf.as_mut()[4..6].copy_from_slice(&len.to_be_bytes());
    }

    /// Stores a checksum value.
    pub fn set_checksum(&mut self, check: u16) {
        self.buf.as_mut()[6..8].copy_from_slice(&check.to_be_bytes());
    }
}
