//! [`Headers`]: the little the model may read and rewrite in a payload it carries.
//!
//! The model treats payloads as opaque except for four questions, asked only when the spec
//! needs them: the ECN codepoint (an ECN blackhole drops ECN-capable packets), the TCP flags
//! (an ECN blackhole drops ECN-setup SYNs), marking CE (a CoDel or fq_codel queue with `ecn`
//! marks instead of dropping) and the flow's 5-tuple (fq_codel's flow queues). Raw IP packets (`Vec<u8>`, `Box<[u8]>`, starting with the IP
//! header) answer through [`crate::wire`]; GSO [`Segment`]s through their shared packet and
//! per-segment ECN override; plain ids (`u64`, `()`) have no headers: never ECN-capable, all
//! one flow.

use crate::segment::Segment;
use crate::wire::{Ecn, FlowKey, IpPacket, TcpFlags};

/// What the model may read and rewrite in a payload.
pub trait Headers {
    /// The ECN codepoint, `None` if the payload is not an IP packet.
    fn ecn(&self) -> Option<Ecn>;

    /// Marks the packet CE as a congested router does (RFC 3168 section 5), if it is
    /// ECN-capable: returns true if it now carries CE (also when it already did), false if it
    /// is not ECN-capable (then it must be dropped instead). IPv4's header checksum follows.
    fn mark_ce(&mut self) -> bool;

    /// The flow's 5-tuple, `None` if there is none to read.
    fn flow_key(&self) -> Option<FlowKey>;

    /// The TCP flags as this packet carries them on the wire, `None` if it is not TCP.
    fn tcp_flags(&self) -> Option<TcpFlags>;
}

/// Payloads that are not packets (ids in tests and simulations): no ECN, one flow.
macro_rules! opaque {
    ($($t:ty),*) => {$(
        impl Headers for $t {
            fn ecn(&self) -> Option<Ecn> {
                None
            }
            fn mark_ce(&mut self) -> bool {
                false
            }
            fn flow_key(&self) -> Option<FlowKey> {
                None
            }
            fn tcp_flags(&self) -> Option<TcpFlags> {
                None
            }
        }
    )*};
}

opaque!((), u32, u64, usize);

/// Raw IP packets, the IP header at the start of the buffer (bytes after the packet are
/// ignored).
macro_rules! ip_packet {
    ($($t:ty),*) => {$(
        impl Headers for $t {
            fn ecn(&self) -> Option<Ecn> {
                IpPacket::new(&self[..]).ok().map(|ip| ip.ecn())
            }
            fn mark_ce(&mut self) -> bool {
                match IpPacket::new(&mut self[..]) {
                    Ok(mut ip) if ip.ecn().is_capable() => {
                        if ip.ecn() != Ecn::Ce {
                            ip.set_ecn(Ecn::Ce);
                        }
                        true
                    }
                    _ => false,
                }
            }
            fn flow_key(&self) -> Option<FlowKey> {
                IpPacket::new(&self[..]).ok()?.flow_key()
            }
            fn tcp_flags(&self) -> Option<TcpFlags> {
                IpPacket::new(&self[..]).ok()?.tcp_flags()
            }
        }
    )*};
}

ip_packet!(Vec<u8>, Box<[u8]>);

/// A segment's own codepoint; marking rewrites only this segment when it is written out.
impl Headers for Segment {
    fn ecn(&self) -> Option<Ecn> {
        Segment::ecn(self)
    }
    fn mark_ce(&mut self) -> bool {
        match Segment::ecn(self) {
            Some(ecn) if ecn.is_capable() => {
                if ecn != Ecn::Ce {
                    self.set_ecn(Ecn::Ce);
                }
                true
            }
            _ => false,
        }
    }
    fn flow_key(&self) -> Option<FlowKey> {
        Segment::flow_key(self)
    }
    fn tcp_flags(&self) -> Option<TcpFlags> {
        Segment::tcp_flags(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// IPv4 + UDP, ECN bits as given, checksum filled.
    fn v4(ecn: Ecn) -> Vec<u8> {
        let mut p = vec![
            0x45, 0x00, 0x00, 0x1c, 0x00, 0x01, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 10, 77, 0, 1,
            10, 77, 0, 2, 0x30, 0x39, 0x00, 0x35, 0x00, 0x08, 0x00, 0x00,
        ];
        p[1] = ecn.bits();
        IpPacket::new(&mut p[..]).unwrap().fill_checksum();
        p
    }

    fn v6(ecn: Ecn) -> Vec<u8> {
        let mut p = vec![0u8; 48];
        p[0] = 0x60 | (ecn.bits() >> 2);
        p[1] = ecn.bits() << 4;
        p[5] = 8;
        p[6] = 17;
        p[7] = 64;
        p[23] = 1;
        p[39] = 2;
        p[40..44].copy_from_slice(&[0x30, 0x39, 0x00, 0x35]);
        p
    }

    #[test]
    fn marking_sets_ce_only_on_capable_packets_and_keeps_the_checksum() {
        for ecn in [Ecn::Ect0, Ecn::Ect1, Ecn::Ce] {
            let mut p = v4(ecn);
            assert!(p.mark_ce());
            assert_eq!(Headers::ecn(&p), Some(Ecn::Ce));
            let ip = IpPacket::new(&p[..]).unwrap();
            assert!(ip.checksum_ok(), "{ecn:?}");
            // An independent recomputation agrees with the incremental update.
            let mut again = p.clone();
            IpPacket::new(&mut again[..]).unwrap().fill_checksum();
            assert_eq!(again, p);
            let mut q = v6(ecn);
            assert!(q.mark_ce());
            assert_eq!(Headers::ecn(&q), Some(Ecn::Ce));
            assert_eq!(q[1] >> 4 & 3, 3);
        }
        let mut p = v4(Ecn::NotEct);
        let before = p.clone();
        assert!(!p.mark_ce());
        assert_eq!(p, before);
        let mut garbage = vec![0u8; 40];
        assert!(!garbage.mark_ce());
        assert_eq!(Headers::ecn(&garbage), None);
        assert!(!7u64.mark_ce());
    }

    #[test]
    fn flow_keys_come_from_the_headers() {
        let key = Headers::flow_key(&v4(Ecn::NotEct)).unwrap();
        assert_eq!((key.protocol, key.src_port, key.dst_port), (17, 12345, 53));
        let key6 = Headers::flow_key(&v6(Ecn::NotEct).into_boxed_slice()).unwrap();
        assert_eq!((key6.protocol, key6.src_port, key6.dst_port), (17, 12345, 53));
        assert_eq!(Headers::flow_key(&3u64), None);
    }
}
