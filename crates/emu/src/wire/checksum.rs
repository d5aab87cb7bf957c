//! The Internet checksum (RFC 1071) and its incremental update (RFC 1624).
//!
//! Sums are carried unfolded in a `u64` so they can be chained cheaply: start from
//! [`pseudo_header`] (or 0), add byte ranges with [`sum`], then [`fold`] to 16 bits. The value
//! stored in a header is the complement of the folded sum ([`finish`]); a header whose stored
//! checksum is right sums, checksum included, to `0xffff` ([`verifies`]).
//!
//! Offloaded packets (`VIRTIO_NET_HDR_F_NEEDS_CSUM`) carry only the *folded, uncomplemented*
//! pseudo-header sum in the TCP or UDP checksum field; the kernel adds the rest. That partial
//! value is [`fold`]`(`[`pseudo_header`]`(..))`.
//!
//! Pure arithmetic: no allocation, no panics on any input.

use std::net::IpAddr;

/// One's complement sum of `data` read as big-endian 16-bit words (an odd last byte is padded
/// with a zero byte), added to `initial`. Not folded: chain further sums, then [`fold`].
///
/// `initial` must stay below 2^48 (any chain of sums of packets up to 64 KiB does).
#[inline]
pub fn sum(data: &[u8], initial: u64) -> u64 {
    // Adding 32-bit big-endian words is the same as adding their two 16-bit halves, modulo
    // 0xffff (2^16 = 1 mod 0xffff); folding at the end absorbs every carry.
    let mut acc = initial;
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        acc += u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    }
    match *words.remainder() {
        [a] => acc += u64::from(a) << 8,
        [a, b] => acc += u64::from(u16::from_be_bytes([a, b])),
        [a, b, c] => acc += u64::from(u16::from_be_bytes([a, b])) + (u64::from(c) << 8),
        _ => {}
    }
    acc
}

/// Folds an unfolded sum to 16 bits (end-around carry).
#[inline]
pub fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    acc as u16
}

/// The checksum to store for a folded-to-be `acc`: the complement of [`fold`].
#[inline]
pub fn finish(acc: u64) -> u16 {
    !fold(acc)
}

/// Whether bytes whose one's complement sum (stored checksum included) is `acc` are intact.
#[inline]
pub fn verifies(acc: u64) -> bool {
    fold(acc) == 0xffff
}

/// The unfolded sum of the TCP/UDP pseudo-header: source and destination addresses, protocol
/// and the transport length (header plus payload). Mixed address families sum both as given.
pub fn pseudo_header(src: IpAddr, dst: IpAddr, protocol: u8, transport_len: u32) -> u64 {
    let addr = |a: IpAddr, acc: u64| match a {
        IpAddr::V4(a) => sum(&a.octets(), acc),
        IpAddr::V6(a) => sum(&a.octets(), acc),
    };
    let acc = addr(dst, addr(src, 0));
    acc + u64::from(protocol) + u64::from(transport_len >> 16) + u64::from(transport_len & 0xffff)
}

/// RFC 1624 (eqn. 3): the checksum after one 16-bit word it covers changed from `old` to `new`,
/// without summing the rest again: `HC' = ~(~HC + ~m + m')`.
#[inline]
pub fn update_word(checksum: u16, old: u16, new: u16) -> u16 {
    finish(u64::from(!checksum) + u64::from(!old) + u64::from(new))
}

/// The IPv4 header checksum to store for `header` (its own checksum field, bytes 10-11, is
/// skipped). `header` is the whole header, options included.
pub fn ipv4_header(header: &[u8]) -> u16 {
    let (before, after) = header.split_at(header.len().min(10));
    let after = after.get(2..).unwrap_or(&[]);
    finish(sum(after, sum(before, 0)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 1071's worked example: words 0001 f203 f4f5 f6f7 sum to ddf2 (folded).
    #[test]
    fn rfc1071_example() {
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&data, 0)), 0xddf2);
        assert_eq!(finish(sum(&data, 0)), !0xddf2);
        // Split at any point, chained, the same.
        for k in 0..data.len() {
            if k % 2 == 0 {
                assert_eq!(fold(sum(&data[k..], sum(&data[..k], 0))), 0xddf2);
            }
        }
    }

    #[test]
    fn odd_lengths_pad_with_zero() {
        assert_eq!(fold(sum(&[0xab], 0)), 0xab00);
        assert_eq!(fold(sum(&[0x01, 0x02, 0x03], 0)), 0x0102 + 0x0300);
        assert_eq!(fold(sum(&[1, 2, 3, 4, 5, 6, 7], 0)), 0x0102 + 0x0304 + 0x0506 + 0x0700);
    }

    /// A header captured from the wire (Wikipedia's IPv4 checksum example): b861.
    #[test]
    fn ipv4_header_example() {
        let header = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(ipv4_header(&header), 0xb861);
        assert!(verifies(sum(&header, 0)));
    }

    #[test]
    fn update_word_matches_a_full_recompute() {
        let mut header = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        for tos in [0x01u8, 0x02, 0x03, 0xff, 0x00] {
            let old = u16::from_be_bytes([header[0], header[1]]);
            header[1] = tos;
            let new = u16::from_be_bytes([header[0], header[1]]);
            let check = update_word(u16::from_be_bytes([header[10], header[11]]), old, new);
            header[10..12].copy_from_slice(&check.to_be_bytes());
            assert!(verifies(sum(&header, 0)), "tos {tos:#x}");
            assert_eq!(check, ipv4_header(&header));
        }
    }
}
