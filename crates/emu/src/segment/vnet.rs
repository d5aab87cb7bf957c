//! The `virtio_net_hdr` that a TUN device opened with `IFF_VNET_HDR` puts before every packet
//! it hands out and expects before every packet written to it (Linux
//! `include/uapi/linux/virtio_net.h`; 10 bytes, little-endian as set with `TUNSETVNETLE`).

use super::SegmentError;

/// Bytes of a `struct virtio_net_hdr` (the size set with `TUNSETVNETHDRSZ`).
pub const VNET_HDR_LEN: usize = 10;

/// A decoded `virtio_net_hdr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct VirtioNetHdr {
    /// [`VirtioNetHdr::F_NEEDS_CSUM`], [`VirtioNetHdr::F_DATA_VALID`].
    pub flags: u8,
    /// [`VirtioNetHdr::GSO_NONE`], `GSO_TCPV4`, `GSO_TCPV6`, `GSO_UDP_L4`, possibly with
    /// [`VirtioNetHdr::GSO_ECN`].
    pub gso_type: u8,
    /// Length of the headers (a hint for how much the kernel copies linearly).
    pub hdr_len: u16,
    /// Payload bytes per segment.
    pub gso_size: u16,
    /// With `F_NEEDS_CSUM`: where checksumming starts (the transport header's offset).
    pub csum_start: u16,
    /// With `F_NEEDS_CSUM`: where, from `csum_start`, the checksum is stored.
    pub csum_offset: u16,
}

impl VirtioNetHdr {
    /// The transport checksum is partial: the kernel completes it (`CHECKSUM_PARTIAL`).
    pub const F_NEEDS_CSUM: u8 = 1;
    /// The checksum was verified (`CHECKSUM_UNNECESSARY`).
    pub const F_DATA_VALID: u8 = 2;
    /// Not a GSO packet.
    pub const GSO_NONE: u8 = 0;
    /// TCP over IPv4.
    pub const GSO_TCPV4: u8 = 1;
    /// UDP fragmentation offload (legacy UFO; never enabled by tcptail).
    pub const GSO_UDP: u8 = 3;
    /// TCP over IPv6.
    pub const GSO_TCPV6: u8 = 4;
    /// UDP segmentation (USO), over IPv4 or IPv6.
    pub const GSO_UDP_L4: u8 = 5;
    /// The first segment carries CWR (`SKB_GSO_TCP_ECN`).
    pub const GSO_ECN: u8 = 0x80;

    /// Decodes the first [`VNET_HDR_LEN`] bytes of `bytes`.
    pub fn decode(bytes: &[u8]) -> Result<VirtioNetHdr, SegmentError> {
        let Some(b) = bytes.first_chunk::<VNET_HDR_LEN>() else {
            return Err(SegmentError::VnetHeader { have: bytes.len() });
        };
        let u16_at = |at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
        Ok(VirtioNetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u16_at(2),
            gso_size: u16_at(4),
            csum_start: u16_at(6),
            csum_offset: u16_at(8),
        })
    }

    /// The header's bytes.
    pub fn encode(&self) -> [u8; VNET_HDR_LEN] {
        let mut b = [0u8; VNET_HDR_LEN];
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_le_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
        b
    }

    /// The GSO type without the ECN bit.
    pub fn gso_kind(&self) -> u8 {
        self.gso_type & !Self::GSO_ECN
    }

    /// Whether the transport checksum is partial.
    pub fn needs_csum(&self) -> bool {
        self.flags & Self::F_NEEDS_CSUM != 0
    }
}
