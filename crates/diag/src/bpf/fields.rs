//! The kernel values the iterator's record carries and where each is read from: the inputs
//! of `tcp_get_info`, `inet_diag`'s header, `sk_get_meminfo` and `bbr_get_info`, named by
//! their path in the kernel's structs (`sock_common`, `tcp_sock`, BBR's `struct bbr`) and
//! resolved in the running kernel's BTF (`path_of`). A field a kernel lacks is an error
//! unless it is marked optional (its value is then absent).

use super::btf::{Btf, BtfError, Member};
use crate::wire::Attrs;

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
pub(super) enum Base {
    Common,
    Tcp,
    /// `struct bbr`, read from `icsk_ca_priv`.
    Bbr,
}

/// Whether a kernel without the member is still served (the value is then absent).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Need {
    Required,
    Optional,
}

use Base::{Bbr, Common, Tcp};
use Need::{Optional, Required};

const SK: &str = "inet_conn.icsk_inet.sk.";
pub(super) const ICSK: &str = "inet_conn.";

/// (value, base, path, need); `SK`/`ICSK` prefixes are spliced in by [`path_of`].
pub(super) const FIELDS: &[(K, Base, &str, Need)] = &[
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

/// Resolves `path` (with `SK.`/`ICSK.` prefixes and `[i]` array indexes) in `root`.
pub(super) fn path_of(btf: &Btf, root: &str, path: &str) -> Result<Member, BtfError> {
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

pub(super) fn root_of(base: Base) -> &'static str {
    match base {
        Common => "sock_common",
        Tcp => "tcp_sock",
        Bbr => "bbr",
    }
}

/// Whether a dump asking for `attrs` reads `k`: the socket header (identity, queues, timer)
/// always; socket memory for `skmem`; BBR's model (and the MSS its bandwidth is scaled by)
/// for `cc_info`; the rest of `tcp_info` for `info`.
pub fn needed(k: K, attrs: Attrs) -> bool {
    use K::*;
    match k {
        Family
        | State
        | Num
        | Dport
        | Saddr4
        | Daddr4
        | BoundDevIf
        | AckBacklog
        | MaxAckBacklog
        | RcvNxt
        | CopiedSeq
        | WriteSeq
        | SndUna
        | Pending
        | Retransmits
        | ProbesOut
        | RetransmitTimerExpires
        | SkTimerExpires
        | SkTimerPending => true,
        RmemAlloc | Rcvbuf | WmemAlloc | Sndbuf | ForwardAlloc | WmemQueued | OmemAlloc
        | BacklogLen | Drops => attrs.skmem,
        BbrMinRttUs | BbrBw | BbrLtUseBw | BbrLtBw | BbrPacingGain | BbrCwndGain => attrs.cc_info,
        MssCache => attrs.info || attrs.cc_info,
        _ => attrs.info,
    }
}
