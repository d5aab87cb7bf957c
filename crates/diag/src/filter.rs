//! Socket filters: a small expression tree compiled to the kernel's `INET_DIAG_REQ_BYTECODE`
//! and evaluated in user space with identical meaning.
//!
//! The kernel runs the bytecode against every socket in its hash tables and only serialises the
//! ones that match, so a filtered dump costs in proportion to the matched sockets. The same
//! [`Filter`] is evaluated in user space ([`Filter::matches`]) to attribute each returned
//! socket to the selector that asked for it.
//!
//! Compilation follows `ss`'s scheme: each fragment *accepts* by running off its end and
//! *rejects* by jumping 4 bytes past it; `And` concatenates fragments (patching their reject
//! jumps), `Or` inserts a `JMP` that skips the second alternative. Pure code: no I/O.

use std::net::IpAddr;

use crate::wire::SockId;

/// `INET_DIAG_BC_JMP`.
const BC_JMP: u8 = 1;
/// `INET_DIAG_BC_S_GE`.
const BC_S_GE: u8 = 2;
/// `INET_DIAG_BC_S_LE`.
const BC_S_LE: u8 = 3;
/// `INET_DIAG_BC_D_GE`.
const BC_D_GE: u8 = 4;
/// `INET_DIAG_BC_D_LE`.
const BC_D_LE: u8 = 5;
/// `INET_DIAG_BC_S_COND`.
const BC_S_COND: u8 = 7;
/// `INET_DIAG_BC_D_COND`.
const BC_D_COND: u8 = 8;

/// Which end of the connection a condition looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The local (source) end.
    Local,
    /// The remote (destination) end.
    Remote,
}

/// An address prefix such as `10.0.0.0/8` or `::1/128`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    /// The network address.
    pub addr: IpAddr,
    /// Prefix length in bits.
    pub len: u8,
}

impl Prefix {
    /// Whether `ip` lies in the prefix; IPv4-mapped IPv6 addresses match IPv4 prefixes, as in
    /// the kernel.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match (self.addr, ip) {
            (IpAddr::V4(_), IpAddr::V6(v6)) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => return false,
            },
            _ => ip,
        };
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                prefix_eq(&net.octets(), &ip.octets(), self.len.min(32))
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                prefix_eq(&net.octets(), &ip.octets(), self.len.min(128))
            }
            _ => false,
        }
    }
}

fn prefix_eq(a: &[u8], b: &[u8], bits: u8) -> bool {
    let (full, rest) = (usize::from(bits / 8), bits % 8);
    if a[..full] != b[..full] {
        return false;
    }
    rest == 0 || {
        let mask = 0xffu8 << (8 - rest);
        a[full] & mask == b[full] & mask
    }
}

/// A condition tree over a socket's ports and addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filter {
    /// Port within `lo..=hi` on `side`.
    Port {
        /// Which end.
        side: Side,
        /// Lowest port accepted.
        lo: u16,
        /// Highest port accepted.
        hi: u16,
    },
    /// Address within `prefix` on `side`.
    Addr {
        /// Which end.
        side: Side,
        /// The accepted prefix.
        prefix: Prefix,
    },
    /// All of the conditions (true when empty).
    And(Vec<Filter>),
    /// Any of the conditions (false when empty).
    Or(Vec<Filter>),
}

impl Filter {
    /// Evaluates the filter on a socket's identity, exactly as the kernel would.
    pub fn matches(&self, id: &SockId) -> bool {
        match self {
            Filter::Port { side, lo, hi } => {
                let port = match side {
                    Side::Local => id.sport,
                    Side::Remote => id.dport,
                };
                (*lo..=*hi).contains(&port)
            }
            Filter::Addr { side, prefix } => prefix.contains(match side {
                Side::Local => id.src,
                Side::Remote => id.dst,
            }),
            Filter::And(all) => all.iter().all(|f| f.matches(id)),
            Filter::Or(any) => any.iter().any(|f| f.matches(id)),
        }
    }

    /// Compiles to `INET_DIAG_REQ_BYTECODE`. `None` for a filter that matches everything
    /// (an empty `And`), which needs no bytecode.
    pub fn bytecode(&self) -> Option<Vec<u8>> {
        if matches!(self, Filter::And(v) if v.is_empty()) {
            return None;
        }
        Some(compile(self))
    }
}

fn op(code: u8, yes: usize, no: usize) -> [u8; 4] {
    let no = u16::try_from(no).unwrap_or(u16::MAX).to_ne_bytes();
    [code, u8::try_from(yes).unwrap_or(u8::MAX), no[0], no[1]]
}

/// One comparison op followed by its operand op (`{0, 0, port}`): 8 bytes, rejects to 12.
fn port_op(code: u8, port: u16) -> Vec<u8> {
    let mut v = op(code, 8, 12).to_vec();
    v.extend_from_slice(&op(0, 0, usize::from(port)));
    v
}

fn compile(f: &Filter) -> Vec<u8> {
    match f {
        Filter::Port { side, lo, hi } => {
            let (ge, le) = match side {
                Side::Local => (BC_S_GE, BC_S_LE),
                Side::Remote => (BC_D_GE, BC_D_LE),
            };
            and(vec![port_op(ge, *lo), port_op(le, *hi)])
        }
        Filter::Addr { side, prefix } => {
            let (family, addr): (u8, Vec<u8>) = match prefix.addr {
                IpAddr::V4(a) => (libc::AF_INET as u8, a.octets().to_vec()),
                IpAddr::V6(a) => (libc::AF_INET6 as u8, a.octets().to_vec()),
            };
            let len = 4 + 8 + addr.len();
            let code = match side {
                Side::Local => BC_S_COND,
                Side::Remote => BC_D_COND,
            };
            let mut v = op(code, len, len + 4).to_vec();
            // struct inet_diag_hostcond { u8 family; u8 prefix_len; int port; u32 addr[]; }
            v.extend_from_slice(&[family, prefix.len, 0, 0]);
            v.extend_from_slice(&(-1i32).to_ne_bytes());
            v.extend_from_slice(&addr);
            v
        }
        Filter::And(all) => and(all.iter().map(compile).collect()),
        Filter::Or(any) => {
            let mut parts: Vec<Vec<u8>> = any.iter().map(compile).collect();
            match parts.len() {
                // An empty Or never matches: a jump past the end.
                0 => op(BC_JMP, 4, 8).to_vec(),
                _ => {
                    let mut acc = parts.pop().unwrap_or_default();
                    while let Some(mut first) = parts.pop() {
                        first.extend_from_slice(&op(BC_JMP, 4, acc.len() + 4));
                        first.extend_from_slice(&acc);
                        acc = first;
                    }
                    acc
                }
            }
        }
    }
}

/// Concatenates fragments so all must accept; reject jumps of earlier fragments (those that
/// pointed 4 bytes past their own end) are moved past the whole sequence.
fn and(parts: Vec<Vec<u8>>) -> Vec<u8> {
    let mut out: Vec<u8> = Vec::new();
    for part in parts.into_iter().rev() {
        let mut part = part;
        patch(&mut part, out.len());
        part.extend_from_slice(&out);
        out = part;
    }
    out
}

/// Adds `reloc` to the reject target of every op on the accept path of `code`.
fn patch(code: &mut [u8], reloc: usize) {
    let len = code.len();
    let mut pos = 0;
    while pos + 4 <= len {
        let yes = usize::from(code[pos + 1]);
        let no = usize::from(u16::from_ne_bytes([code[pos + 2], code[pos + 3]]));
        if no == len - pos + 4 {
            let new = u16::try_from(no + reloc).unwrap_or(u16::MAX).to_ne_bytes();
            code[pos + 2] = new[0];
            code[pos + 3] = new[1];
        }
        if yes == 0 {
            break;
        }
        pos += yes;
    }
}

/// Runs compiled bytecode in user space with the kernel's semantics (`inet_diag_bc_run`), for
/// tests that check compilation against [`Filter::matches`].
pub fn run_bytecode(code: &[u8], id: &SockId) -> bool {
    let mut pos: isize = 0;
    let len = code.len() as isize;
    while pos < len {
        let p = pos as usize;
        let Some(o) = code.get(p..p + 4) else { return false };
        let (c, yes, no) = (o[0], isize::from(o[1]), u16::from_ne_bytes([o[2], o[3]]) as isize);
        let operand =
            || code.get(p + 6..p + 8).map(|b| u16::from_ne_bytes([b[0], b[1]])).unwrap_or(0);
        let ok = match c {
            BC_JMP => false,
            BC_S_GE => id.sport >= operand(),
            BC_S_LE => id.sport <= operand(),
            BC_D_GE => id.dport >= operand(),
            BC_D_LE => id.dport <= operand(),
            BC_S_COND | BC_D_COND => {
                let Some(h) = code.get(p + 4..p + yes as usize) else { return false };
                let addr = match h[0] {
                    f if i32::from(f) == libc::AF_INET => h
                        .get(8..12)
                        .map(|b| IpAddr::from(<[u8; 4]>::try_from(b).unwrap_or_default())),
                    _ => h
                        .get(8..24)
                        .map(|b| IpAddr::from(<[u8; 16]>::try_from(b).unwrap_or_default())),
                };
                let Some(addr) = addr else { return false };
                let prefix = Prefix { addr, len: h[1] };
                prefix.contains(if c == BC_S_COND { id.src } else { id.dst })
            }
            _ => true,
        };
        pos += if ok { yes } else { no };
        if yes == 0 && ok {
            return false;
        }
    }
    pos == len
}
