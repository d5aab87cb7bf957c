//! The fixed-size record the iterator's program writes per socket, laid out for one kernel:
//! a fixed [`header`] (cookie, clocks, uid, flags, IPv6 addresses, congestion-control name,
//! TIME_WAIT timer), then one naturally aligned slot per [`K`] value this kernel has, biggest
//! first. [`Layout::new`] resolves the fields in BTF and places them; the program
//! ([`super::program`]) fills the slots and user space ([`super::convert`]) reads them
//! ([`Slot::read`]).
//!
//! A scrape's aggregates need far less of the sockets no selector matches: [`brief`] records
//! (state, congestion-control name and the few `tcp_info` inputs of the RTT and send-queue
//! delay histograms, [`BRIEF_FIELDS`]) stand in for full ones there. Byte [`header::KIND`]
//! tells them apart in the stream (0 full, 1 brief): every record is at least 32 bytes.

use super::asm::Size;
use super::btf::{Btf, BtfError, Member};
use super::fields::{Base, FIELDS, ICSK, K, K_COUNT, Need, path_of, root_of};
use super::select::Offsets;
use super::witness::Witness;
use Need::Required;

/// Where one value sits in the record and how to extract it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Byte offset in the record.
    pub offset: u16,
    /// Bytes loaded (1, 2, 4 or 8).
    pub size: u8,
    /// Bit shift of a bitfield within the loaded bytes.
    pub shift: u8,
    /// Width of a bitfield (0: the whole load).
    pub bits: u8,
}

impl Slot {
    /// The value in `record`.
    #[inline]
    pub fn read(self, record: &[u8]) -> u64 {
        let at = usize::from(self.offset);
        // Fixed-size reads (no memcpy call): this runs ~100 times per socket.
        let bytes = |n: usize| record.get(at..at + n).unwrap_or_default();
        let raw = match self.size {
            1 => bytes(1).first().copied().map_or(0, u64::from),
            2 => bytes(2).try_into().map_or(0, |b| u64::from(u16::from_le_bytes(b))),
            4 => bytes(4).try_into().map_or(0, |b| u64::from(u32::from_le_bytes(b))),
            _ => bytes(8).try_into().map_or(0, u64::from_le_bytes),
        };
        let raw = raw >> self.shift;
        if self.bits == 0 { raw } else { raw & ((1u64 << self.bits) - 1) }
    }
}

/// Fixed header of every record.
pub mod header {
    /// `bpf_get_socket_cookie`, u64.
    pub const COOKIE: usize = 0;
    /// `bpf_jiffies64`, u64.
    pub const JIFFIES: usize = 8;
    /// `bpf_ktime_get_ns` (CLOCK_MONOTONIC), u64.
    pub const KTIME_NS: usize = 16;
    /// `ctx->uid`, u32.
    pub const UID: usize = 24;
    /// 1 for a full TCP socket (the `tcp_sock` fields are valid).
    pub const FULL: usize = 28;
    /// 1 when the socket has congestion-control ops (the name is valid).
    pub const HAS_CA: usize = 29;
    /// A TIME_WAIT socket's substate (the state sock_diag reports), u8.
    pub const TW_SUBSTATE: usize = 30;
    /// The record's kind: 0 for this full record, 1 for a [`super::brief`] one.
    pub const KIND: usize = 31;
    /// IPv6 source address, 16 bytes (AF_INET6 only).
    pub const SADDR6: usize = 32;
    /// IPv6 destination address, 16 bytes.
    pub const DADDR6: usize = 48;
    /// Congestion-control name, 16 bytes, NUL-padded.
    pub const CA_NAME: usize = 64;
    /// A TIME_WAIT socket's `tw_timer.expires` (jiffies), u64.
    pub const TW_EXPIRES: usize = 80;
    /// A full socket's inode, as `sock_i_ino` gives it (`sk_socket->file->f_inode->i_ino`;
    /// 0 for an orphaned, TIME_WAIT or request socket), u64.
    pub const INODE: usize = 88;
    /// First value slot.
    pub const END: usize = 96;
}

/// The brief record of a socket that goes to the aggregates only: the congestion-control
/// name, the raw and TIME_WAIT states, flags at the full header's offsets, then one slot per
/// [`BRIEF_FIELDS`] value.
pub mod brief {
    /// Congestion-control name, 16 bytes, NUL-padded.
    pub const CA_NAME: usize = 0;
    /// `skc_state`, u8.
    pub const STATE: usize = 24;
    /// A TIME_WAIT socket's substate, u8.
    pub const TW_SUBSTATE: usize = 25;
    /// 1 for a full TCP socket (the values are valid), as [`super::header::FULL`].
    pub const FULL: usize = 28;
    /// 1 when the name is valid, as [`super::header::HAS_CA`].
    pub const HAS_CA: usize = 29;
    /// 1: a brief record ([`super::header::KIND`]).
    pub const KIND: usize = 31;
    /// First value slot.
    pub const END: usize = 32;
}

/// What a brief record carries beyond its header: the inputs of `tcpi_rtt` and of
/// [`tcptail_sock::tcp_info::TcpInfo::send_queue_delay`].
pub const BRIEF_FIELDS: [K; 9] = [
    K::PacingRate,
    K::SrttUs,
    K::SndCwnd,
    K::MssCache,
    K::WriteSeq,
    K::SndNxt,
    K::RateDelivered,
    K::RateIntervalUs,
    K::RateAppLimited,
];

/// One copy the program makes.
#[derive(Debug, Clone, Copy)]
pub(super) struct Load {
    /// The value copied.
    pub(super) k: K,
    pub(super) base: Base,
    /// Offset in the kernel struct (for `Bbr`: in `struct bbr`).
    pub(super) kernel: u32,
    pub(super) size: Size,
    pub(super) bytes: u32,
    pub(super) record: u16,
    /// A pointer, recorded as 0 or 1.
    pub(super) flag: bool,
}

/// The record layout and what the program copies into it, for one kernel.
#[derive(Debug, Clone)]
pub struct Layout {
    /// Where each value is, `None` when this kernel lacks it.
    pub slots: [Option<Slot>; K_COUNT],
    /// Record size, bytes (a multiple of 8).
    pub record_len: usize,
    /// Where each [`BRIEF_FIELDS`] value is in a brief record.
    pub brief_slots: [Option<Slot>; K_COUNT],
    /// Brief record size, bytes (a multiple of 8).
    pub brief_len: usize,
    pub(super) loads: Vec<Load>,
    /// The loads of a brief record (`record`: the offset in it).
    pub(super) brief_loads: Vec<Load>,
    pub(super) ca_ops: u32,
    pub(super) ca_name: u32,
    pub(super) ca_priv: u32,
    pub(super) v6_src: u32,
    pub(super) v6_dst: u32,
    pub(super) state_off: u32,
    pub(super) family_off: u32,
    /// Where the port/address filter reads.
    pub(super) filter_offsets: Offsets,
    pub(super) tw_substate: u32,
    pub(super) tw_expires: u32,
    /// The pointer walk to a socket's inode number: `sock.sk_socket`, `socket.file`,
    /// `file.f_inode`, `inode.i_ino`.
    pub(super) inode_path: [u32; 4],
    /// What the tracked poll compares before it rebuilds a record.
    pub witness: Witness,
}

impl Layout {
    /// Resolves every field in `btf`; a required field missing is an error.
    pub fn new(btf: &Btf) -> Result<Layout, BtfError> {
        let mut found = Vec::new();
        for &(k, base, path, need) in FIELDS {
            match path_of(btf, root_of(base), path) {
                Ok(m) => found.push((k, base, m)),
                Err(e) if need == Required => return Err(e),
                Err(_) => {}
            }
        }
        // Bigger loads first keeps every slot naturally aligned.
        let load_size = |m: &Member| -> u32 {
            if m.bitfield_bits == 0 {
                return m.size.min(8);
            }
            let first = m.bit_offset / 8;
            let last = (m.bit_offset + m.bitfield_bits - 1) / 8;
            (last - first + 1).next_power_of_two()
        };
        found.sort_by_key(|(_, _, m)| std::cmp::Reverse(load_size(m)));
        let mut slots = [None; K_COUNT];
        let mut loads = Vec::new();
        let mut at = header::END as u32;
        for (k, base, m) in found {
            let bytes = load_size(&m);
            let size = Size::of(bytes).ok_or(BtfError::Malformed("field wider than 8 bytes"))?;
            at = at.next_multiple_of(bytes);
            let shift = if m.bitfield_bits == 0 { 0 } else { m.bit_offset % 8 };
            slots[k as usize] = Some(Slot {
                offset: at as u16,
                size: bytes as u8,
                shift: shift as u8,
                bits: m.bitfield_bits as u8,
            });
            let flag = k == K::SkTimerPending;
            loads.push(Load {
                k,
                base,
                kernel: m.byte_offset(),
                size,
                bytes,
                record: at as u16,
                flag,
            });
            at += bytes;
        }
        let record_len = (at as usize).next_multiple_of(8);
        // The brief record: the same loads (biggest first, so aligned) at their own offsets.
        let mut brief_slots = [None; K_COUNT];
        let mut brief_loads = Vec::new();
        let mut at = brief::END as u32;
        for l in loads.iter().filter(|l| BRIEF_FIELDS.contains(&l.k)) {
            at = at.next_multiple_of(l.bytes);
            let full = slots[l.k as usize].ok_or(BtfError::Malformed("a load without a slot"))?;
            brief_slots[l.k as usize] = Some(Slot { offset: at as u16, ..full });
            brief_loads.push(Load { record: at as u16, ..*l });
            at += l.bytes;
        }
        if brief_loads.len() != BRIEF_FIELDS.len() {
            return Err(BtfError::Malformed("a field of the brief record is missing"));
        }
        let brief_len = (at as usize).next_multiple_of(8);
        let ca_ops = btf.member("tcp_sock", &format!("{ICSK}icsk_ca_ops"))?.byte_offset();
        let ca_priv = btf.member("tcp_sock", &format!("{ICSK}icsk_ca_priv"))?.byte_offset();
        let ca_name = btf.member("tcp_congestion_ops", "name")?.byte_offset();
        let v6_src = btf.member("sock_common", "skc_v6_rcv_saddr")?.byte_offset();
        let v6_dst = btf.member("sock_common", "skc_v6_daddr")?.byte_offset();
        let state_off = btf.member("sock_common", "skc_state")?.byte_offset();
        let family_off = btf.member("sock_common", "skc_family")?.byte_offset();
        let common = |name: &str| btf.member("sock_common", name).map(|m| m.byte_offset());
        let filter_offsets = Offsets {
            family: family_off,
            num: common("skc_num")?,
            dport: common("skc_dport")?,
            saddr4: common("skc_rcv_saddr")?,
            daddr4: common("skc_daddr")?,
            saddr6: v6_src,
            daddr6: v6_dst,
        };
        let tw_substate = btf.member("tcp_timewait_sock", "tw_sk.tw_substate")?.byte_offset();
        let tw_expires = btf.member("tcp_timewait_sock", "tw_sk.tw_timer.expires")?.byte_offset();
        let inode_path = [
            btf.member("sock", "sk_socket")?.byte_offset(),
            btf.member("socket", "file")?.byte_offset(),
            btf.member("file", "f_inode")?.byte_offset(),
            btf.member("inode", "i_ino")?.byte_offset(),
        ];
        let witness = Witness::new(btf, &loads, &[])?;
        Ok(Layout {
            slots,
            record_len,
            brief_slots,
            brief_len,
            loads,
            brief_loads,
            ca_ops,
            ca_name,
            ca_priv,
            v6_src,
            v6_dst,
            state_off,
            family_off,
            filter_offsets,
            tw_substate,
            tw_expires,
            inode_path,
            witness,
        })
    }

    /// The slot of `k`, if this kernel has it.
    pub fn slot(&self, k: K) -> Option<Slot> {
        self.slots[k as usize]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_read_bitfields_lsb_first() {
        let rec = [0u8, 0b1011_0100, 0, 0];
        let s = Slot { offset: 1, size: 1, shift: 2, bits: 3 };
        assert_eq!(s.read(&rec), 0b101);
        let whole = Slot { offset: 0, size: 2, shift: 0, bits: 0 };
        assert_eq!(whole.read(&rec), 0xb400);
    }
}
