//! The socket iterator's program and the layout of the record it writes, both generated from
//! the running kernel's BTF: which kernel fields are read (the inputs of `tcp_get_info`,
//! `inet_diag`'s header, `sk_get_meminfo` and `bbr_get_info`), where each one is in the kernel's
//! structs, and where it goes in the fixed-size record.
//!
//! The program, per socket the iterator visits (`struct bpf_iter__tcp`):
//! 1. `ctx->sk_common` is NULL at the end of the walk: return.
//! 2. the state is not one of the requested ones: return (nothing is written).
//! 3. zero the record on the stack, copy the `sock_common` header (family, state, ports,
//!    addresses, interface), the uid, the socket cookie (`bpf_get_socket_cookie`), `jiffies`
//!    and the monotonic clock (the ages and running timers are computed from them);
//! 4. `bpf_skc_to_tcp_sock`: for a full TCP socket copy every listed field of `tcp_sock`, the
//!    words of the congestion control's private area BBR's info is read from, and the
//!    congestion control's name; TIME_WAIT and request sockets carry the header only;
//! 5. `bpf_seq_write` the record.
//!
//! Every field is copied raw (a bitfield as the bytes that hold it); the arithmetic
//! `tcp_get_info` does (shifts, jiffies to microseconds, the delivery rate) is done in user
//! space ([`super::convert`]). Little-endian only (bitfield positions are LSB-first there).

use super::asm::{Asm, Cond, R0, R1, R2, R3, R6, R7, R8, R9, R10, Size};
use super::btf::{Btf, BtfError, Member};
use super::select::{self, Offsets, Selection};

/// Helper ids (`enum bpf_func_id`).
const HELPER_GET_SOCKET_COOKIE: i32 = 46;
const HELPER_KTIME_GET_NS: i32 = 5;
const HELPER_JIFFIES64: i32 = 118;
const HELPER_SEQ_WRITE: i32 = 127;
const HELPER_SKC_TO_TCP_SOCK: i32 = 137;
const HELPER_SKC_TO_TCP_TIMEWAIT_SOCK: i32 = 138;
const TCP_TIME_WAIT: i32 = 6;

const AF_INET6: i32 = 10;

/// The kernel values the record carries (beyond its fixed header).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(usize)]
#[allow(missing_docs)]
pub enum K {
    // sock_common, every socket
    Family,
    State,
    Num,
    Dport,
    Saddr4,
    Daddr4,
    BoundDevIf,
    // tcp_sock
    PacingRate,
    MaxPacingRate,
    Reordering,
    SndCwnd,
    AckBacklog,
    MaxAckBacklog,
    CaState,
    Retransmits,
    ProbesOut,
    Backoff,
    Pending,
    TstampOk,
    SackOk,
    WscaleOk,
    SndWscale,
    RcvWscale,
    EcnFlags,
    SynDataAcked,
    UsecTs,
    SynFastopenChild,
    Rto,
    Ato,
    DelackMax,
    RtoMin,
    MssCache,
    RcvMss,
    PacketsOut,
    SackedOut,
    LostOut,
    RetransOut,
    Lsndtime,
    Lrcvtime,
    RcvTstamp,
    Pmtu,
    RcvSsthresh,
    SrttUs,
    MdevUs,
    SndSsthresh,
    Advmss,
    RcvRtt,
    RcvSpace,
    TotalRetrans,
    BytesAcked,
    BytesReceived,
    WriteSeq,
    SndNxt,
    SndUna,
    RcvNxt,
    CopiedSeq,
    Chrono0,
    Chrono1,
    Chrono2,
    ChronoType,
    ChronoStart,
    SegsOut,
    SegsIn,
    MinRtt,
    DataSegsIn,
    DataSegsOut,
    RateAppLimited,
    RateDelivered,
    RateIntervalUs,
    Delivered,
    DeliveredCe,
    BytesSent,
    BytesRetrans,
    DsackDups,
    ReordSeen,
    RcvOoopack,
    SndWnd,
    RcvWnd,
    PlbRehash,
    TimeoutRehash,
    FastopenClientFail,
    TotalRto,
    TotalRtoRecoveries,
    TotalRtoTime,
    RtoStamp,
    AccecnFailMode,
    SawAccecnOpt,
    ReceivedCe,
    DeliveredE1,
    DeliveredE0,
    DeliveredCeBytes,
    ReceivedE1,
    ReceivedE0,
    ReceivedCeBytes,
    RmemAlloc,
    Rcvbuf,
    WmemAlloc,
    Sndbuf,
    ForwardAlloc,
    WmemQueued,
    OmemAlloc,
    BacklogLen,
    Drops,
    RetransmitTimerExpires,
    SkTimerExpires,
    SkTimerPending,
    // struct bbr, within icsk_ca_priv
    BbrMinRttUs,
    BbrBw,
    BbrLtUseBw,
    BbrLtBw,
    BbrPacingGain,
    BbrCwndGain,
}

/// Number of [`K`] values.
pub const K_COUNT: usize = K::BbrCwndGain as usize + 1;

/// Where a value is read from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Base {
    Common,
    Tcp,
    /// `struct bbr`, read from `icsk_ca_priv`.
    Bbr,
}

/// Whether a kernel without the member is still served (the value is then absent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Need {
    Required,
    Optional,
}

use Base::{Bbr, Common, Tcp};
use Need::{Optional, Required};

const SK: &str = "inet_conn.icsk_inet.sk.";
const ICSK: &str = "inet_conn.";

/// (value, base, path, need); `SK`/`ICSK` prefixes are spliced in by [`path_of`].
const FIELDS: &[(K, Base, &str, Need)] = &[
    (K::Family, Common, "skc_family", Required),
    (K::State, Common, "skc_state", Required),
    (K::Num, Common, "skc_num", Required),
    (K::Dport, Common, "skc_dport", Required),
    (K::Saddr4, Common, "skc_rcv_saddr", Required),
    (K::Daddr4, Common, "skc_daddr", Required),
    (K::BoundDevIf, Common, "skc_bound_dev_if", Required),
    (K::PacingRate, Tcp, "SK.sk_pacing_rate", Required),
    (K::MaxPacingRate, Tcp, "SK.sk_max_pacing_rate", Required),
    (K::Reordering, Tcp, "reordering", Required),
    (K::SndCwnd, Tcp, "snd_cwnd", Required),
    (K::AckBacklog, Tcp, "SK.sk_ack_backlog", Required),
    (K::MaxAckBacklog, Tcp, "SK.sk_max_ack_backlog", Required),
    (K::CaState, Tcp, "ICSK.icsk_ca_state", Required),
    (K::Retransmits, Tcp, "ICSK.icsk_retransmits", Required),
    (K::ProbesOut, Tcp, "ICSK.icsk_probes_out", Required),
    (K::Backoff, Tcp, "ICSK.icsk_backoff", Required),
    (K::Pending, Tcp, "ICSK.icsk_pending", Required),
    (K::TstampOk, Tcp, "rx_opt.tstamp_ok", Required),
    (K::SackOk, Tcp, "rx_opt.sack_ok", Required),
    (K::WscaleOk, Tcp, "rx_opt.wscale_ok", Required),
    (K::SndWscale, Tcp, "rx_opt.snd_wscale", Required),
    (K::RcvWscale, Tcp, "rx_opt.rcv_wscale", Required),
    (K::EcnFlags, Tcp, "ecn_flags", Required),
    (K::SynDataAcked, Tcp, "syn_data_acked", Required),
    (K::UsecTs, Tcp, "tcp_usec_ts", Optional),
    (K::SynFastopenChild, Tcp, "syn_fastopen_child", Optional),
    (K::Rto, Tcp, "ICSK.icsk_rto", Required),
    (K::Ato, Tcp, "ICSK.icsk_ack.ato", Required),
    (K::DelackMax, Tcp, "ICSK.icsk_delack_max", Optional),
    (K::RtoMin, Tcp, "ICSK.icsk_rto_min", Optional),
    (K::MssCache, Tcp, "mss_cache", Required),
    (K::RcvMss, Tcp, "ICSK.icsk_ack.rcv_mss", Required),
    (K::PacketsOut, Tcp, "packets_out", Required),
    (K::SackedOut, Tcp, "sacked_out", Required),
    (K::LostOut, Tcp, "lost_out", Required),
    (K::RetransOut, Tcp, "retrans_out", Required),
    (K::Lsndtime, Tcp, "lsndtime", Required),
    (K::Lrcvtime, Tcp, "ICSK.icsk_ack.lrcvtime", Required),
    (K::RcvTstamp, Tcp, "rcv_tstamp", Required),
    (K::Pmtu, Tcp, "ICSK.icsk_pmtu_cookie", Required),
    (K::RcvSsthresh, Tcp, "rcv_ssthresh", Required),
    (K::SrttUs, Tcp, "srtt_us", Required),
    (K::MdevUs, Tcp, "mdev_us", Required),
    (K::SndSsthresh, Tcp, "snd_ssthresh", Required),
    (K::Advmss, Tcp, "advmss", Required),
    (K::RcvRtt, Tcp, "rcv_rtt_est.rtt_us", Required),
    (K::RcvSpace, Tcp, "rcvq_space.space", Required),
    (K::TotalRetrans, Tcp, "total_retrans", Required),
    (K::BytesAcked, Tcp, "bytes_acked", Required),
    (K::BytesReceived, Tcp, "bytes_received", Required),
    (K::WriteSeq, Tcp, "write_seq", Required),
    (K::SndNxt, Tcp, "snd_nxt", Required),
    (K::SndUna, Tcp, "snd_una", Required),
    (K::RcvNxt, Tcp, "rcv_nxt", Required),
    (K::CopiedSeq, Tcp, "copied_seq", Required),
    (K::Chrono0, Tcp, "chrono_stat[0]", Required),
    (K::Chrono1, Tcp, "chrono_stat[1]", Required),
    (K::Chrono2, Tcp, "chrono_stat[2]", Required),
    (K::ChronoType, Tcp, "chrono_type", Required),
    (K::ChronoStart, Tcp, "chrono_start", Required),
    (K::SegsOut, Tcp, "segs_out", Required),
    (K::SegsIn, Tcp, "segs_in", Required),
    (K::MinRtt, Tcp, "rtt_min.s[0].v", Required),
    (K::DataSegsIn, Tcp, "data_segs_in", Required),
    (K::DataSegsOut, Tcp, "data_segs_out", Required),
    (K::RateAppLimited, Tcp, "rate_app_limited", Required),
    (K::RateDelivered, Tcp, "rate_delivered", Required),
    (K::RateIntervalUs, Tcp, "rate_interval_us", Required),
    (K::Delivered, Tcp, "delivered", Required),
    (K::DeliveredCe, Tcp, "delivered_ce", Required),
    (K::BytesSent, Tcp, "bytes_sent", Required),
    (K::BytesRetrans, Tcp, "bytes_retrans", Required),
    (K::DsackDups, Tcp, "dsack_dups", Required),
    (K::ReordSeen, Tcp, "reord_seen", Required),
    (K::RcvOoopack, Tcp, "rcv_ooopack", Required),
    (K::SndWnd, Tcp, "snd_wnd", Required),
    (K::RcvWnd, Tcp, "rcv_wnd", Required),
    (K::PlbRehash, Tcp, "plb_rehash", Optional),
    (K::TimeoutRehash, Tcp, "timeout_rehash", Optional),
    (K::FastopenClientFail, Tcp, "fastopen_client_fail", Required),
    (K::TotalRto, Tcp, "total_rto", Optional),
    (K::TotalRtoRecoveries, Tcp, "total_rto_recoveries", Optional),
    (K::TotalRtoTime, Tcp, "total_rto_time", Optional),
    (K::RtoStamp, Tcp, "rto_stamp", Optional),
    (K::AccecnFailMode, Tcp, "accecn_fail_mode", Optional),
    (K::SawAccecnOpt, Tcp, "saw_accecn_opt", Optional),
    (K::ReceivedCe, Tcp, "received_ce", Optional),
    (K::DeliveredE1, Tcp, "delivered_ecn_bytes[0]", Optional),
    (K::DeliveredE0, Tcp, "delivered_ecn_bytes[1]", Optional),
    (K::DeliveredCeBytes, Tcp, "delivered_ecn_bytes[2]", Optional),
    (K::ReceivedE1, Tcp, "received_ecn_bytes[0]", Optional),
    (K::ReceivedE0, Tcp, "received_ecn_bytes[1]", Optional),
    (K::ReceivedCeBytes, Tcp, "received_ecn_bytes[2]", Optional),
    (K::RmemAlloc, Tcp, "SK.sk_backlog.rmem_alloc.counter", Required),
    (K::Rcvbuf, Tcp, "SK.sk_rcvbuf", Required),
    (K::WmemAlloc, Tcp, "SK.sk_wmem_alloc.refs.counter", Required),
    (K::Sndbuf, Tcp, "SK.sk_sndbuf", Required),
    (K::ForwardAlloc, Tcp, "SK.sk_forward_alloc", Required),
    (K::WmemQueued, Tcp, "SK.sk_wmem_queued", Required),
    (K::OmemAlloc, Tcp, "SK.sk_omem_alloc.counter", Required),
    (K::BacklogLen, Tcp, "SK.sk_backlog.len", Required),
    (K::Drops, Tcp, "SK.sk_drops.counter", Optional),
    (K::RetransmitTimerExpires, Tcp, "ICSK.icsk_retransmit_timer.expires", Required),
    (K::SkTimerExpires, Tcp, "SK.sk_timer.expires", Required),
    (K::SkTimerPending, Tcp, "SK.sk_timer.entry.pprev", Required),
    (K::BbrMinRttUs, Bbr, "min_rtt_us", Optional),
    (K::BbrBw, Bbr, "bw.s[0].v", Optional),
    (K::BbrLtUseBw, Bbr, "lt_use_bw", Optional),
    (K::BbrLtBw, Bbr, "lt_bw", Optional),
    (K::BbrPacingGain, Bbr, "pacing_gain", Optional),
    (K::BbrCwndGain, Bbr, "cwnd_gain", Optional),
];

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
    /// IPv6 source address, 16 bytes (AF_INET6 only).
    pub const SADDR6: usize = 32;
    /// IPv6 destination address, 16 bytes.
    pub const DADDR6: usize = 48;
    /// Congestion-control name, 16 bytes, NUL-padded.
    pub const CA_NAME: usize = 64;
    /// A TIME_WAIT socket's `tw_timer.expires` (jiffies), u64.
    pub const TW_EXPIRES: usize = 80;
    /// First value slot.
    pub const END: usize = 88;
}

/// One copy the program makes.
#[derive(Debug, Clone, Copy)]
struct Load {
    base: Base,
    /// Offset in the kernel struct (for `Bbr`: in `struct bbr`).
    kernel: u32,
    size: Size,
    bytes: u32,
    record: u16,
    /// A pointer, recorded as 0 or 1.
    flag: bool,
}

/// The record layout and the program that fills it, for one kernel.
#[derive(Debug, Clone)]
pub struct Layout {
    /// Where each value is, `None` when this kernel lacks it.
    pub slots: [Option<Slot>; K_COUNT],
    /// Record size, bytes (a multiple of 8).
    pub record_len: usize,
    loads: Vec<Load>,
    ca_ops: u32,
    ca_name: u32,
    ca_priv: u32,
    v6_src: u32,
    v6_dst: u32,
    state_off: u32,
    family_off: u32,
    /// Where the port/address filter reads.
    filter_offsets: Offsets,
    tw_substate: u32,
    tw_expires: u32,
}

/// Resolves `path` (with `SK.`/`ICSK.` prefixes and `[i]` array indexes) in `root`.
fn path_of(btf: &Btf, root: &str, path: &str) -> Result<Member, BtfError> {
    let path = if let Some(rest) = path.strip_prefix("ICSK.") {
        format!("{ICSK}{rest}")
    } else if let Some(rest) = path.strip_prefix("SK.") {
        format!("{SK}{rest}")
    } else {
        path.to_owned()
    };
    // `a.b[2].c`: resolve each `[i]` by stepping i elements of the array's element type.
    let mut base: Option<Member> = None;
    let mut rest = path.as_str();
    let mut prefix = String::new();
    while let Some(open) = rest.find('[') {
        let close = rest[open..].find(']').map(|c| open + c).ok_or(BtfError::Malformed("path"))?;
        let index: u32 = rest[open + 1..close].parse().map_err(|_| BtfError::Malformed("path"))?;
        prefix.push_str(&rest[..open]);
        let array = btf.member(root, &prefix)?;
        let elem = btf.array_elem_size(root, &prefix)?;
        let offset = array.bit_offset + index * elem * 8;
        base = Some(Member { bit_offset: offset, bitfield_bits: 0, size: elem });
        rest = rest[close + 1..].trim_start_matches('.');
        if !rest.is_empty() {
            // Continue inside the element: find the element's member offsets by name.
            let elem_struct = btf.array_elem_struct(root, &prefix)?;
            let inner = path_of(btf, &elem_struct, rest)?;
            return Ok(Member { bit_offset: offset + inner.bit_offset, ..inner });
        }
        prefix.clear();
    }
    match base {
        Some(m) => Ok(m),
        None => btf.member(root, rest),
    }
}

fn root_of(base: Base) -> &'static str {
    match base {
        Common => "sock_common",
        Tcp => "tcp_sock",
        Bbr => "bbr",
    }
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
        Ok(Layout {
            slots,
            record_len,
            loads,
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
        })
    }

    /// The slot of `k`, if this kernel has it.
    pub fn slot(&self, k: K) -> Option<Slot> {
        self.slots[k as usize]
    }

    /// A minimal program for the benchmark: the walk, the state filter and a 16-byte record
    /// (cookie, state) per socket: the floor of any iterator-based dump.
    pub fn minimal_program(&self, states: u32) -> Option<Vec<u64>> {
        let mut a = Asm::default();
        let out = a.label();
        a.mov(R6, R1);
        a.load(Size::DW, R7, R6, 8);
        a.jump_if(Cond::Eq, R7, 0, out);
        a.load(Size::B, R2, R7, self.state_off as i16);
        a.mov_imm(R3, 1);
        a.lsh(R3, R2);
        a.and_imm(R3, states as i32);
        a.jump_if(Cond::Eq, R3, 0, out);
        a.mov(R1, R7);
        a.call(HELPER_GET_SOCKET_COOKIE);
        a.store(Size::DW, R10, -16, R0);
        a.load(Size::B, R2, R7, self.state_off as i16);
        a.store(Size::DW, R10, -8, R2);
        a.load(Size::DW, R1, R6, 0);
        a.load(Size::DW, R1, R1, 0);
        a.mov(R2, R10);
        a.add_imm(R2, -16);
        a.mov_imm(R3, 16);
        a.call(HELPER_SEQ_WRITE);
        a.bind(out);
        a.mov_imm(R0, 0);
        a.exit();
        a.finish()
    }

    /// The program for the sockets `sel` selects.
    ///
    /// The record is written once per socket, every byte of it: no blanket zeroing, only the
    /// bytes no field covers on the path taken (alignment gaps; the `tcp_sock` area of a
    /// TIME_WAIT or request socket; the IPv6 addresses of an IPv4 socket; the name of a socket
    /// without congestion control). Addresses and the name are copied 8 bytes at a time, and
    /// the monotonic clock is read only when `rto_stamp` needs it.
    pub fn program(&self, sel: &Selection) -> Option<Vec<u64>> {
        let rec = -(self.record_len as i32);
        let at = |off: usize| (rec + off as i32) as i16;
        let mut a = Asm::default();
        if select::selects_nothing(sel) {
            a.mov_imm(R0, 0);
            a.exit();
            return a.finish();
        }
        let out = a.label();
        a.mov(R6, R1);
        a.load(Size::DW, R7, R6, 8); // ctx->sk_common
        a.jump_if(Cond::Eq, R7, 0, out);
        // Family and port/address filter before any other work (they read sock_common only);
        // the record's first bytes are their scratch space.
        select::emit_selection(&mut a, &self.filter_offsets, sel, at(header::COOKIE), out);
        // State filter; a TIME_WAIT socket is filtered (and reported) by its substate, as
        // sock_diag does. r8/r9 keep the substate and expiry across the calls.
        a.mov_imm(R8, 0);
        a.mov_imm(R9, 0);
        let check = a.label();
        a.load(Size::B, R2, R7, self.state_off as i16);
        a.jump_if(Cond::Ne, R2, TCP_TIME_WAIT, check);
        a.mov(R1, R7);
        a.call(HELPER_SKC_TO_TCP_TIMEWAIT_SOCK);
        a.jump_if(Cond::Eq, R0, 0, out);
        a.load(Size::B, R8, R0, self.tw_substate as i16);
        a.load(Size::DW, R9, R0, self.tw_expires as i16);
        a.mov(R2, R8);
        a.bind(check);
        a.mov_imm(R3, 1);
        a.lsh(R3, R2);
        a.and_imm(R3, sel.states as i32);
        a.jump_if(Cond::Eq, R3, 0, out);
        // Header bytes 28..32: FULL, HAS_CA, TW_SUBSTATE and a pad byte.
        a.store_imm(Size::W, R10, at(header::FULL), 0);
        a.store(Size::B, R10, at(header::TW_SUBSTATE), R8);
        a.store(Size::DW, R10, at(header::TW_EXPIRES), R9);
        a.mov(R1, R7);
        a.call(HELPER_GET_SOCKET_COOKIE);
        a.store(Size::DW, R10, at(header::COOKIE), R0);
        a.call(HELPER_JIFFIES64);
        a.store(Size::DW, R10, at(header::JIFFIES), R0);
        a.load(Size::W, R2, R6, 16); // ctx->uid
        a.store(Size::W, R10, at(header::UID), R2);
        // Value bytes no field covers, whatever the path.
        let covered_by = |pick: &dyn Fn(&Load) -> bool| {
            let mut covered = vec![false; self.record_len];
            for l in self.loads.iter().filter(|l| pick(l)) {
                let from = usize::from(l.record);
                covered[from..from + l.bytes as usize].fill(true);
            }
            covered
        };
        let all_fields = covered_by(&|_| true);
        let gaps: Vec<bool> = all_fields.iter().map(|c| !c).collect();
        zero_uncovered(&mut a, rec, &all_fields, header::END, &vec![false; self.record_len]);
        for l in self.loads.iter().filter(|l| l.base == Common) {
            a.load(l.size, R2, R7, l.kernel as i16);
            a.store(l.size, R10, at(usize::from(l.record)), R2);
        }
        let v4 = a.label();
        let addresses_done = a.label();
        a.load(Size::H, R2, R7, self.family_off as i16);
        a.jump_if(Cond::Ne, R2, AF_INET6, v4);
        for i in (0..16).step_by(8) {
            a.load(Size::DW, R2, R7, (self.v6_src + i) as i16);
            a.store(Size::DW, R10, at(header::SADDR6 + i as usize), R2);
            a.load(Size::DW, R2, R7, (self.v6_dst + i) as i16);
            a.store(Size::DW, R10, at(header::DADDR6 + i as usize), R2);
        }
        a.jump(addresses_done);
        a.bind(v4);
        for off in (header::SADDR6..header::CA_NAME).step_by(8) {
            a.store_imm(Size::DW, R10, at(off), 0);
        }
        a.bind(addresses_done);
        let write = a.label();
        let not_full = a.label();
        let no_ca = a.label();
        a.mov(R1, R7);
        a.call(HELPER_SKC_TO_TCP_SOCK);
        a.jump_if(Cond::Eq, R0, 0, not_full);
        a.mov(R8, R0);
        a.mov_imm(R2, 1);
        a.store(Size::B, R10, at(header::FULL), R2);
        for l in self.loads.iter().filter(|l| l.base == Tcp) {
            a.load(l.size, R2, R8, l.kernel as i16);
            if l.flag {
                let zero = a.label();
                a.mov_imm(R3, 0);
                a.jump_if(Cond::Eq, R2, 0, zero);
                a.mov_imm(R3, 1);
                a.bind(zero);
                a.store(l.size, R10, at(usize::from(l.record)), R3);
            } else {
                a.store(l.size, R10, at(usize::from(l.record)), R2);
            }
        }
        // BBR's fields, read as the u64 words of icsk_ca_priv that hold them.
        for l in self.loads.iter().filter(|l| l.base == Bbr) {
            let word = l.kernel / 8 * 8;
            let within = l.kernel - word;
            if within + l.bytes > 8 {
                return None;
            }
            a.load(Size::DW, R2, R8, (self.ca_priv + word) as i16);
            if within > 0 {
                a.rsh_imm(R2, (within * 8) as i32);
            }
            a.store(l.size, R10, at(usize::from(l.record)), R2);
        }
        // The monotonic clock only serves an RTO episode in progress (`rto_stamp` set).
        a.store_imm(Size::DW, R10, at(header::KTIME_NS), 0);
        if let Some(stamp) = self.slot(K::RtoStamp) {
            let no_rto = a.label();
            a.load(Size::of(stamp.size.into())?, R2, R10, at(usize::from(stamp.offset)));
            a.jump_if(Cond::Eq, R2, 0, no_rto);
            a.call(HELPER_KTIME_GET_NS);
            a.store(Size::DW, R10, at(header::KTIME_NS), R0);
            a.bind(no_rto);
        }
        a.load(Size::DW, R9, R8, self.ca_ops as i16);
        a.jump_if(Cond::Eq, R9, 0, no_ca);
        a.mov_imm(R2, 1);
        a.store(Size::B, R10, at(header::HAS_CA), R2);
        for i in (0..16).step_by(8) {
            a.load(Size::DW, R2, R9, (self.ca_name + i) as i16);
            a.store(Size::DW, R10, at(header::CA_NAME + i as usize), R2);
        }
        a.jump(write);
        // TIME_WAIT and request sockets: the tcp_sock area holds zeros (user space does not
        // read it, but no stack bytes leave the kernel).
        a.bind(not_full);
        a.store_imm(Size::DW, R10, at(header::KTIME_NS), 0);
        let common = covered_by(&|l| l.base == Common);
        zero_uncovered(&mut a, rec, &common, header::END, &gaps);
        a.bind(no_ca);
        a.store_imm(Size::DW, R10, at(header::CA_NAME), 0);
        a.store_imm(Size::DW, R10, at(header::CA_NAME + 8), 0);
        a.bind(write);
        a.load(Size::DW, R1, R6, 0); // ctx->meta
        a.load(Size::DW, R1, R1, 0); // meta->seq
        a.mov(R2, R10);
        a.add_imm(R2, rec);
        a.mov_imm(R3, self.record_len as i32);
        a.call(HELPER_SEQ_WRITE);
        a.bind(out);
        a.mov_imm(R0, 0);
        a.exit();
        a.finish()
    }
}

/// Zeroes the record bytes from `from` on that `covered` leaves out and `done` has not
/// zeroed already: a whole 8-byte word with one store, stray bytes one by one.
fn zero_uncovered(a: &mut Asm, rec: i32, covered: &[bool], from: usize, done: &[bool]) {
    let at = |off: usize| (rec + off as i32) as i16;
    for word in (from..covered.len()).step_by(8) {
        let want: Vec<usize> = (word..word + 8).filter(|&i| !covered[i] && !done[i]).collect();
        if want.len() == 8 {
            a.store_imm(Size::DW, R10, at(word), 0);
        } else {
            for i in want {
                a.store_imm(Size::B, R10, at(i), 0);
            }
        }
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

    #[test]
    fn the_running_kernel_has_every_required_field() {
        let blob =
            std::fs::read("/sys/kernel/btf/vmlinux").expect("kernel BTF (CI kernels have it)");
        let btf = Btf::parse(&blob).unwrap();
        let layout = Layout::new(&btf).unwrap();
        assert!(layout.record_len <= 512 - 8, "record of {} bytes", layout.record_len);
        let all = Selection { states: 1 << 1, ipv4: true, ipv6: true, filter: None };
        assert!(layout.program(&all).is_some());
    }
}
