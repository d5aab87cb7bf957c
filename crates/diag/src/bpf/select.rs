//! Which sockets the iterator's program writes: the state mask, the address families and the
//! port/address [`Filter`] compiled to eBPF, so a filtered dump copies only the sockets it
//! selects (as sock_diag's kernel-side bytecode does) instead of every socket for user space
//! to drop.
//!
//! The compiled filter means exactly what [`Filter::matches`] means: ports compare in host
//! order (the local port is `skc_num`, the remote one `skc_dport` in network order, read a
//! byte at a time), prefixes compare the address bytes under the prefix's mask, 16 bits at a
//! time, and an IPv4 prefix matches an IPv6 socket's IPv4-mapped address (`::ffff:a.b.c.d`).
//! A filter with more than [`MAX_CONDITIONS`] conditions is not compiled
//! ([`expressible`]): the dump then filters in user space.
//!
//! The walk still visits every socket: a filtered iterator dump costs ~0.5 us per socket of
//! the table however few match, about 3x what sock_diag's bytecode walk costs, so `auto`
//! sends filtered dumps to sock_diag (`scripts/bench-exporter` prints both).

use std::net::IpAddr;

use super::asm::{Asm, Cond, Label, R2, R3, R7, R10, Size};
use crate::filter::{Filter, Prefix, Side};
use crate::wire::Attrs;

const AF_INET: i32 = 2;
const AF_INET6: i32 = 10;

/// The most port/address conditions a compiled filter may hold: every condition is about ten
/// instructions, and a jump reaches at most 32,767 instructions.
pub const MAX_CONDITIONS: usize = 512;

/// Where the filter's inputs are in `struct sock_common`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offsets {
    /// `skc_family`, u16.
    pub family: u32,
    /// `skc_num`, the local port in host order, u16.
    pub num: u32,
    /// `skc_dport`, the remote port in network order, u16.
    pub dport: u32,
    /// `skc_rcv_saddr`, 4 bytes.
    pub saddr4: u32,
    /// `skc_daddr`, 4 bytes.
    pub daddr4: u32,
    /// `skc_v6_rcv_saddr`, 16 bytes.
    pub saddr6: u32,
    /// `skc_v6_daddr`, 16 bytes.
    pub daddr6: u32,
}

/// What the program selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    /// `1 << state` bits (TIME_WAIT sockets by their substate).
    pub states: u32,
    /// IPv4 sockets.
    pub ipv4: bool,
    /// IPv6 sockets.
    pub ipv6: bool,
    /// The port/address filter, compiled into the program.
    pub filter: Option<Filter>,
    /// What is read of each socket: the fields these attributes need
    /// ([`super::fields::needed`]); the others' slots hold zeros.
    pub attrs: Attrs,
    /// The filter picks the sockets that get a full record; every other one the states and
    /// families select gets a brief record ([`super::record::brief`]) instead of none. Only
    /// with a filter that [`depends_on_the_socket`].
    pub brief: bool,
}

/// The number of port/address conditions in `f`.
fn conditions(f: &Filter) -> usize {
    match f {
        Filter::Port { .. } | Filter::Addr { .. } => 1,
        Filter::And(all) | Filter::Or(all) => all.iter().map(conditions).sum(),
    }
}

/// Whether the program can evaluate `f` (else user space does).
pub fn expressible(f: &Filter) -> bool {
    conditions(f) <= MAX_CONDITIONS
}

/// A filter with the conditions decided without a socket taken out.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Reduced {
    /// No socket matches.
    Never,
    /// Every socket matches.
    Always,
    /// Depends on the socket (no `Never`/`Always` part left inside).
    Depends(Filter),
}

/// Takes out what is decided without a socket (an empty port range, the whole port range,
/// empty `And`/`Or`): the verifier rejects code no path reaches, which a condition that
/// always jumps would leave behind it.
fn reduce(f: &Filter) -> Reduced {
    match f {
        Filter::Port { lo, hi, .. } if lo > hi => Reduced::Never,
        Filter::Port { lo: 0, hi: u16::MAX, .. } => Reduced::Always,
        Filter::Port { .. } | Filter::Addr { .. } => Reduced::Depends(f.clone()),
        Filter::And(all) => {
            let mut left = Vec::new();
            for f in all {
                match reduce(f) {
                    Reduced::Never => return Reduced::Never,
                    Reduced::Always => {}
                    Reduced::Depends(f) => left.push(f),
                }
            }
            if left.is_empty() { Reduced::Always } else { Reduced::Depends(Filter::And(left)) }
        }
        Filter::Or(any) => {
            let mut left = Vec::new();
            for f in any {
                match reduce(f) {
                    Reduced::Always => return Reduced::Always,
                    Reduced::Never => {}
                    Reduced::Depends(f) => left.push(f),
                }
            }
            if left.is_empty() { Reduced::Never } else { Reduced::Depends(Filter::Or(left)) }
        }
    }
}

/// Whether `f` matches some sockets and not others (compiled, it has a path for each).
pub fn depends_on_the_socket(f: &Filter) -> bool {
    expressible(f) && matches!(reduce(f), Reduced::Depends(_))
}

/// Whether `sel` rejects every socket whatever it is (no family, or a filter nothing
/// matches): the program is then `return 0` alone.
pub fn selects_nothing(sel: &Selection) -> bool {
    !(sel.ipv4 || sel.ipv6) || sel.filter.as_ref().is_some_and(|f| reduce(f) == Reduced::Never)
}

/// Emits the family and filter checks: falls through for a socket (`r7`) `sel` keeps, else
/// jumps to `reject`. `sel` must not be [`selects_nothing`]. `scratch` is a stack offset
/// (from `r10`) of 2 free bytes. Uses `r2` and `r3`.
pub fn emit_selection(a: &mut Asm, off: &Offsets, sel: &Selection, scratch: i16, reject: Label) {
    if sel.ipv4 != sel.ipv6 {
        let keep = if sel.ipv4 { AF_INET } else { AF_INET6 };
        a.load(Size::H, R2, R7, off.family as i16);
        a.jump_if(Cond::Ne, R2, keep, reject);
    }
    if let Some(Reduced::Depends(f)) = sel.filter.as_ref().map(reduce) {
        emit_filter(a, off, &f, scratch, reject);
    }
}

/// Emits `f` (reduced: no part of it always or never matches): falls through when the
/// socket in `r7` matches, jumps to `reject` when not.
fn emit_filter(a: &mut Asm, off: &Offsets, f: &Filter, scratch: i16, reject: Label) {
    match f {
        Filter::Port { side, lo, hi } => {
            match side {
                Side::Local => a.load(Size::H, R2, R7, off.num as i16),
                Side::Remote => {
                    // Network order to host order through the stack (the high byte first).
                    a.load(Size::B, R2, R7, off.dport as i16);
                    a.load(Size::B, R3, R7, off.dport as i16 + 1);
                    a.store(Size::B, R10, scratch + 1, R2);
                    a.store(Size::B, R10, scratch, R3);
                    a.load(Size::H, R2, R10, scratch);
                }
            }
            // lo <= port <= hi as one unsigned compare: port - lo wraps below lo.
            if *lo > 0 {
                a.add_imm(R2, -i32::from(*lo));
            }
            a.jump_if(Cond::Gt, R2, i32::from(hi - lo), reject);
        }
        Filter::Addr { side, prefix } => emit_prefix(a, off, *side, prefix, reject),
        Filter::And(all) => {
            for f in all {
                emit_filter(a, off, f, scratch, reject);
            }
        }
        Filter::Or(any) => {
            let Some((last, rest)) = any.split_last() else {
                unreachable!("a reduced Or has alternatives")
            };
            let matched = a.label();
            for f in rest {
                let next = a.label();
                emit_filter(a, off, f, scratch, next);
                a.jump(matched);
                a.bind(next);
            }
            emit_filter(a, off, last, scratch, reject);
            a.bind(matched);
        }
    }
}

/// An address prefix on one side, by family.
fn emit_prefix(a: &mut Asm, off: &Offsets, side: Side, prefix: &Prefix, reject: Label) {
    let (v4, v6) = match side {
        Side::Local => (off.saddr4, off.saddr6),
        Side::Remote => (off.daddr4, off.daddr6),
    };
    let is_v6 = a.label();
    let done = a.label();
    a.load(Size::H, R2, R7, off.family as i16);
    a.jump_if(Cond::Eq, R2, AF_INET6, is_v6);
    match prefix.addr {
        IpAddr::V4(net) => {
            emit_masked(a, v4, &net.octets(), prefix.len.min(32), reject);
            a.jump(done);
            a.bind(is_v6);
            // An IPv4 prefix matches an IPv4-mapped IPv6 address.
            let mapped = net.to_ipv6_mapped().octets();
            emit_masked(a, v6, &mapped, 96 + prefix.len.min(32), reject);
        }
        IpAddr::V6(net) => {
            a.jump(reject);
            a.bind(is_v6);
            emit_masked(a, v6, &net.octets(), prefix.len.min(128), reject);
        }
    }
    a.bind(done);
}

/// Compares the first `bits` bits of the address at `r7 + at` with `net`, 16 bits at a time.
fn emit_masked(a: &mut Asm, at: u32, net: &[u8], bits: u8, reject: Label) {
    let bits = usize::from(bits);
    for (i, pair) in net.chunks_exact(2).enumerate() {
        let mask_of = |byte: usize| -> u8 {
            let from = byte * 8;
            if bits >= from + 8 {
                0xff
            } else if bits > from {
                0xffu8 << (8 - (bits - from))
            } else {
                0
            }
        };
        let mask = [mask_of(2 * i), mask_of(2 * i + 1)];
        if mask == [0, 0] {
            break;
        }
        // The bytes as a little-endian load sees them.
        let mask_le = i32::from(u16::from_le_bytes(mask));
        let want = i32::from(u16::from_le_bytes([pair[0] & mask[0], pair[1] & mask[1]]));
        a.load(Size::H, R2, R7, (at + 2 * i as u32) as i16);
        if mask_le != 0xffff {
            a.and_imm(R2, mask_le);
        }
        a.jump_if(Cond::Ne, R2, want, reject);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn port(side: Side, lo: u16, hi: u16) -> Filter {
        Filter::Port { side, lo, hi }
    }

    #[test]
    fn conditions_are_counted_through_the_tree() {
        let f = Filter::Or(vec![
            port(Side::Local, 1, 2),
            Filter::And(vec![port(Side::Remote, 3, 3), port(Side::Local, 4, 4)]),
        ]);
        assert_eq!(conditions(&f), 3);
        assert!(expressible(&f));
        let big =
            Filter::Or((0..=MAX_CONDITIONS as u16).map(|p| port(Side::Local, p, p)).collect());
        assert!(!expressible(&big));
    }

    #[test]
    fn every_filter_shape_assembles() {
        let off = Offsets {
            family: 16,
            num: 14,
            dport: 12,
            saddr4: 4,
            daddr4: 0,
            saddr6: 72,
            daddr6: 56,
        };
        let v4 = Prefix { addr: IpAddr::V4(Ipv4Addr::new(10, 1, 128, 0)), len: 17 };
        let v6 = Prefix { addr: IpAddr::V6(Ipv6Addr::LOCALHOST), len: 128 };
        for f in [
            port(Side::Remote, 1, 1),
            Filter::Or(vec![
                Filter::Addr { side: Side::Local, prefix: v4 },
                Filter::And(vec![Filter::Addr { side: Side::Remote, prefix: v6 }]),
                port(Side::Local, 5, 4),
            ]),
        ] {
            let sel = Selection {
                states: 2,
                ipv4: true,
                ipv6: false,
                filter: Some(f.clone()),
                attrs: Attrs::ALL,
                brief: false,
            };
            assert!(!selects_nothing(&sel));
            let mut a = Asm::default();
            let reject = a.label();
            emit_selection(&mut a, &off, &sel, -8, reject);
            a.bind(reject);
            a.exit();
            assert!(a.finish().is_some(), "{f:?}");
        }
    }

    #[test]
    fn decided_parts_are_taken_out() {
        let empty = port(Side::Local, 5, 4);
        let any = port(Side::Remote, 0, u16::MAX);
        let p = port(Side::Local, 80, 80);
        assert_eq!(reduce(&Filter::Or(vec![])), Reduced::Never);
        assert_eq!(reduce(&Filter::And(vec![])), Reduced::Always);
        assert_eq!(reduce(&Filter::And(vec![p.clone(), empty.clone()])), Reduced::Never);
        assert_eq!(reduce(&Filter::Or(vec![p.clone(), any.clone()])), Reduced::Always);
        assert_eq!(
            reduce(&Filter::Or(vec![empty, Filter::And(vec![any, p.clone()])])),
            Reduced::Depends(Filter::Or(vec![Filter::And(vec![p])]))
        );
        let none = Selection {
            states: 2,
            ipv4: false,
            ipv6: false,
            filter: None,
            attrs: Attrs::ALL,
            brief: false,
        };
        assert!(selects_nothing(&none));
        let or = Selection { ipv4: true, filter: Some(Filter::Or(vec![])), ..none };
        assert!(selects_nothing(&or));
    }
}
