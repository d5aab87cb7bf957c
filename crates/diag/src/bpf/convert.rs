//! From one iterator record to the [`Socket`] a sock_diag dump would have produced: the
//! `inet_diag_msg` header, `struct tcp_info` rebuilt byte for byte in the uapi layout (so the
//! exporter, the recorder and [`TcpInfo::parse`] see what `INET_DIAG_INFO` carries), the
//! congestion-control name, BBR's info and the socket memory.
//!
//! This mirrors `tcp_get_info`, `tcp_diag_get_info`, `inet_sk_diag_fill`, `sk_get_meminfo` and
//! `bbr_get_info` (Linux 6.18). What it cannot reproduce is said in [`super`]'s docs. Pure and
//! allocation-free: the `tcp_info` bytes go to a caller-owned buffer.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use tcptail_sock::cc_info::BbrInfo;
use tcptail_sock::tcp_info::TcpInfo;

use super::fields::K;
use super::record::{Layout, header};
use crate::source::Brief;
use crate::wire::{Attrs, SkMemInfo, SockId, Socket};

const TCP_LISTEN: u8 = 10;
const TCP_TIME_WAIT: u8 = 6;
const TCP_NEW_SYN_RECV: u8 = 12;
const TCP_SYN_RECV: u8 = 3;
const AF_INET6: u8 = 10;

/// Kernel tick rate, for the jiffies the kernel keeps ages, timeouts and chrono stats in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hz(pub u32);

impl Hz {
    /// `jiffies_to_usecs`.
    pub fn usecs(self, j: u32) -> u32 {
        if 1_000_000 % self.0 == 0 {
            j.wrapping_mul(1_000_000 / self.0)
        } else {
            (u64::from(j) * 1_000_000 / u64::from(self.0)) as u32
        }
    }

    /// `jiffies_to_msecs`.
    pub fn msecs(self, j: u32) -> u32 {
        if 1000 % self.0 == 0 {
            j.wrapping_mul(1000 / self.0)
        } else {
            (u64::from(j) * 1000 / u64::from(self.0)) as u32
        }
    }
}

/// Reads values of one record.
struct Rec<'a> {
    layout: &'a Layout,
    bytes: &'a [u8],
}

impl Rec<'_> {
    fn get(&self, k: K) -> u64 {
        self.layout.slot(k).map_or(0, |s| s.read(self.bytes))
    }
    fn u32(&self, k: K) -> u32 {
        self.get(k) as u32
    }
    fn has(&self, k: K) -> bool {
        self.layout.slot(k).is_some()
    }
    /// A value of a brief record.
    fn brief(&self, k: K) -> u64 {
        self.layout.brief_slots[k as usize].map_or(0, |s| s.read(self.bytes))
    }
    fn u64_at(&self, at: usize) -> u64 {
        u64::from_le_bytes(self.bytes[at..at + 8].try_into().unwrap_or_default())
    }
}

fn put<const N: usize>(info: &mut [u8], at: usize, v: [u8; N]) {
    if let Some(dst) = info.get_mut(at..at + N) {
        dst.copy_from_slice(&v);
    }
}

/// The address family and identity of `record` (cheap: what a filter needs).
pub fn identity(layout: &Layout, record: &[u8]) -> (u8, SockId) {
    let r = Rec { layout, bytes: record };
    let family = r.get(K::Family) as u8;
    let (src, dst) = if family == AF_INET6 {
        let a = |at: usize| {
            let b: [u8; 16] = record[at..at + 16].try_into().unwrap_or_default();
            IpAddr::V6(Ipv6Addr::from(b))
        };
        (a(header::SADDR6), a(header::DADDR6))
    } else {
        let a = |k| IpAddr::V4(Ipv4Addr::from((r.get(k) as u32).to_le_bytes()));
        (a(K::Saddr4), a(K::Daddr4))
    };
    let id = SockId {
        sport: r.get(K::Num) as u16,
        dport: u16::from_be_bytes((r.get(K::Dport) as u16).to_le_bytes()),
        src,
        dst,
        ifindex: r.u32(K::BoundDevIf),
        cookie: r.u64_at(header::COOKIE),
    };
    (family, id)
}

/// Builds the socket of `record` (whose [`identity`] is `family`, `id`). `info` receives
/// `struct tcp_info` (the first `info_len` bytes are the kernel's struct); `decode_info` also
/// parses it into [`Socket::info`].
#[allow(clippy::too_many_arguments)]
pub fn socket<'a>(
    (family, id): (u8, SockId),
    layout: &Layout,
    hz: Hz,
    info_len: usize,
    record: &'a [u8],
    info: &'a mut [u8; TcpInfo::KNOWN_LEN],
    attrs: Attrs,
    decode_info: bool,
) -> Socket<'a> {
    let r = Rec { layout, bytes: record };
    let raw_state = r.get(K::State) as u8;
    let state = match raw_state {
        TCP_NEW_SYN_RECV => TCP_SYN_RECV,
        TCP_TIME_WAIT => record[header::TW_SUBSTATE],
        s => s,
    };
    let uid =
        u32::from_le_bytes(record[header::UID..header::UID + 4].try_into().unwrap_or_default());
    let mut sock = Socket {
        family,
        state,
        timer: 0,
        retrans: 0,
        id,
        expires_ms: 0,
        rqueue: 0,
        wqueue: 0,
        uid,
        inode: 0,
        info: None,
        info_raw: &[],
        cong: None,
        bbr: None,
        skmem: None,
    };
    let jiffies = r.u64_at(header::JIFFIES);
    let until = |expires: u64| hz.msecs((expires.wrapping_sub(jiffies) as i64).max(0) as u32);
    if record[header::FULL] == 0 {
        if raw_state == TCP_TIME_WAIT {
            sock.timer = 3;
            sock.expires_ms = until(r.u64_at(header::TW_EXPIRES));
        }
        return sock;
    }
    sock.inode = r.u64_at(header::INODE) as u32;
    let now32 = jiffies as u32;
    // inet_diag's header: queues and the pending timer.
    if state == TCP_LISTEN {
        sock.rqueue = r.u32(K::AckBacklog);
        sock.wqueue = r.u32(K::MaxAckBacklog);
    } else {
        sock.rqueue = (r.u32(K::RcvNxt).wrapping_sub(r.u32(K::CopiedSeq)) as i32).max(0) as u32;
        sock.wqueue = r.u32(K::WriteSeq).wrapping_sub(r.u32(K::SndUna));
    }
    match r.get(K::Pending) {
        1 | 5 | 6 => {
            sock.timer = 1;
            sock.retrans = r.get(K::Retransmits) as u8;
            sock.expires_ms = until(r.get(K::RetransmitTimerExpires));
        }
        3 => {
            sock.timer = 4;
            sock.retrans = r.get(K::ProbesOut) as u8;
            sock.expires_ms = until(r.get(K::RetransmitTimerExpires));
        }
        _ if r.get(K::SkTimerPending) != 0 => {
            sock.timer = 2;
            sock.retrans = r.get(K::ProbesOut) as u8;
            sock.expires_ms = until(r.get(K::SkTimerExpires));
        }
        _ => {}
    }
    let cong = ca_name(record, header::CA_NAME, header::HAS_CA);
    if attrs.cong {
        sock.cong = cong;
    }
    if attrs.skmem {
        sock.skmem = Some(SkMemInfo {
            rmem_alloc: r.u32(K::RmemAlloc),
            rcvbuf: r.u32(K::Rcvbuf),
            wmem_alloc: r.u32(K::WmemAlloc).saturating_sub(1),
            sndbuf: r.u32(K::Sndbuf),
            fwd_alloc: r.u32(K::ForwardAlloc),
            wmem_queued: r.u32(K::WmemQueued),
            optmem: r.u32(K::OmemAlloc),
            backlog: r.u32(K::BacklogLen),
            drops: r.u32(K::Drops),
        });
    }
    // inet_diag asks the congestion control for its info below TCP_TIME_WAIT only.
    if attrs.cc_info && cong == Some("bbr") && r.has(K::BbrBw) && raw_state < TCP_TIME_WAIT {
        let bw = if r.get(K::BbrLtUseBw) != 0 { r.get(K::BbrLtBw) } else { r.get(K::BbrBw) };
        let bw = (bw * r.get(K::MssCache) * 1_000_000) >> 24;
        sock.bbr = Some(BbrInfo {
            bw_bytes_per_sec: bw,
            min_rtt_us: r.u32(K::BbrMinRttUs),
            pacing_gain: r.u32(K::BbrPacingGain),
            cwnd_gain: r.u32(K::BbrCwndGain),
        });
    }
    if attrs.info {
        fill_tcp_info(&r, hz, now32, state, info);
        sock.info_raw = &info[..info_len.min(TcpInfo::KNOWN_LEN)];
        if decode_info {
            sock.info = TcpInfo::parse(sock.info_raw).ok();
        }
    }
    sock
}

/// The name in the 16 bytes at `at` of `record`, if `has_ca` says it is valid.
fn ca_name(record: &[u8], at: usize, has_ca: usize) -> Option<&str> {
    let name = record.get(at..at + 16).unwrap_or_default();
    let name = name.split(|&b| b == 0).next().unwrap_or_default();
    (record.get(has_ca).is_some_and(|&b| b != 0)).then(|| std::str::from_utf8(name).ok()).flatten()
}

/// What a brief record ([`super::record::brief`]) says: the state as sock_diag reports it, the
/// congestion control, and a [`TcpInfo`] holding what `fill_tcp_info` and [`TcpInfo::parse`]
/// would have given for `tcpi_rtt` and every input of [`TcpInfo::send_queue_delay`] (the rest
/// of it zero). `info_len` is the kernel's `struct tcp_info` size.
pub fn brief<'a>(layout: &Layout, info_len: usize, record: &'a [u8]) -> Brief<'a> {
    use super::record::brief as b;
    let r = Rec { layout, bytes: record };
    let raw_state = record[b::STATE];
    let state = match raw_state {
        TCP_NEW_SYN_RECV => TCP_SYN_RECV,
        TCP_TIME_WAIT => record[b::TW_SUBSTATE],
        s => s,
    };
    if record[b::FULL] == 0 {
        return Brief { state, cong: None, info: None };
    }
    let len = info_len.min(TcpInfo::KNOWN_LEN);
    let has = |end: usize| len >= end;
    let mss = r.brief(K::MssCache) as u32;
    let (rate, interval) = (r.brief(K::RateDelivered), r.brief(K::RateIntervalUs));
    let delivery =
        if rate != 0 && interval != 0 { rate * u64::from(mss) * 1_000_000 / interval } else { 0 };
    let notsent = ((r.brief(K::WriteSeq) as u32).wrapping_sub(r.brief(K::SndNxt) as u32) as i32)
        .max(0) as u32;
    let info = TcpInfo {
        len,
        state: tcptail_sock::tcp_info::TcpState::from_raw(state),
        snd_mss_bytes: mss,
        rtt_us: (r.brief(K::SrttUs) as u32) >> 3,
        snd_cwnd_segs: r.brief(K::SndCwnd) as u32,
        pacing_rate_bytes_per_sec: has(112).then(|| r.brief(K::PacingRate)),
        notsent_bytes: has(148).then_some(notsent),
        delivery_rate_bytes_per_sec: has(168).then_some(delivery),
        delivery_rate_app_limited: has(168).then(|| r.brief(K::RateAppLimited) != 0),
        ..TcpInfo::default()
    };
    Brief { state, cong: ca_name(record, b::CA_NAME, b::HAS_CA), info: Some(info) }
}

/// `tcp_get_info` from the record's raw fields.
fn fill_tcp_info(r: &Rec<'_>, hz: Hz, now32: u32, state: u8, info: &mut [u8; TcpInfo::KNOWN_LEN]) {
    info.fill(0);
    let u32s =
        |info: &mut [u8; TcpInfo::KNOWN_LEN], at: usize, v: u32| put(info, at, v.to_ne_bytes());
    let u64s =
        |info: &mut [u8; TcpInfo::KNOWN_LEN], at: usize, v: u64| put(info, at, v.to_ne_bytes());
    info[0] = state;
    u64s(info, 104, r.get(K::PacingRate));
    u64s(info, 112, r.get(K::MaxPacingRate));
    u32s(info, 88, r.u32(K::Reordering));
    u32s(info, 80, r.u32(K::SndCwnd));
    if state == TCP_LISTEN {
        u32s(info, 24, r.u32(K::AckBacklog));
        u32s(info, 28, r.u32(K::MaxAckBacklog));
        return;
    }
    info[1] = r.get(K::CaState) as u8;
    info[2] = r.get(K::Retransmits) as u8;
    info[3] = r.get(K::ProbesOut) as u8;
    info[4] = r.get(K::Backoff) as u8;
    let mut options = 0u8;
    let mut bit = |on: bool, b: u8| {
        if on {
            options |= b;
        }
    };
    bit(r.get(K::TstampOk) != 0, 1);
    bit(r.get(K::SackOk) != 0, 2);
    let wscale_ok = r.get(K::WscaleOk) != 0;
    bit(wscale_ok, 4);
    // Kernels with AccECN mark any negotiated ECN mode (bits 0-1); before, TCP_ECN_OK (bit 0).
    let ecn_mode = if r.has(K::AccecnFailMode) { 3 } else { 1 };
    let ecn = r.get(K::EcnFlags);
    bit(ecn & ecn_mode != 0, 8);
    bit(ecn & 8 != 0, 16);
    bit(r.get(K::SynDataAcked) != 0, 32);
    bit(r.get(K::UsecTs) != 0, 64);
    bit(r.get(K::SynFastopenChild) != 0, 128);
    info[5] = options;
    if wscale_ok {
        info[6] = (r.get(K::SndWscale) as u8 & 0xf) | (r.get(K::RcvWscale) as u8 & 0xf) << 4;
    }
    u32s(info, 8, hz.usecs(r.u32(K::Rto)));
    let ato = r.u32(K::Ato);
    let ato = if r.has(K::DelackMax) {
        let from_rto_min = r.u32(K::RtoMin).max(2) - 1;
        ato.min(r.u32(K::DelackMax).min(from_rto_min))
    } else {
        ato
    };
    u32s(info, 12, hz.usecs(ato));
    let mss = r.u32(K::MssCache);
    u32s(info, 16, mss);
    u32s(info, 20, r.u32(K::RcvMss));
    u32s(info, 24, r.u32(K::PacketsOut));
    u32s(info, 28, r.u32(K::SackedOut));
    u32s(info, 32, r.u32(K::LostOut));
    u32s(info, 36, r.u32(K::RetransOut));
    u32s(info, 44, hz.msecs(now32.wrapping_sub(r.u32(K::Lsndtime))));
    u32s(info, 52, hz.msecs(now32.wrapping_sub(r.u32(K::Lrcvtime))));
    u32s(info, 56, hz.msecs(now32.wrapping_sub(r.u32(K::RcvTstamp))));
    u32s(info, 60, r.u32(K::Pmtu));
    u32s(info, 64, r.u32(K::RcvSsthresh));
    u32s(info, 68, r.u32(K::SrttUs) >> 3);
    u32s(info, 72, r.u32(K::MdevUs) >> 2);
    u32s(info, 76, r.u32(K::SndSsthresh));
    u32s(info, 84, r.u32(K::Advmss));
    u32s(info, 92, r.u32(K::RcvRtt) >> 3);
    u32s(info, 96, r.u32(K::RcvSpace));
    u32s(info, 100, r.u32(K::TotalRetrans));
    u64s(info, 120, r.get(K::BytesAcked));
    u64s(info, 128, r.get(K::BytesReceived));
    let notsent = (r.u32(K::WriteSeq).wrapping_sub(r.u32(K::SndNxt)) as i32).max(0) as u32;
    u32s(info, 144, notsent);
    // tcp_get_info_chrono_stats: the running chrono counts up to now.
    let mut stats = [0u64; 3];
    let chrono_type = r.get(K::ChronoType);
    for (i, k) in [K::Chrono0, K::Chrono1, K::Chrono2].into_iter().enumerate() {
        let mut v = r.get(k);
        if chrono_type == i as u64 + 1 {
            v += u64::from(now32.wrapping_sub(r.u32(K::ChronoStart)));
        }
        stats[i] = v * u64::from(1_000_000 / hz.0);
    }
    u64s(info, 168, stats.iter().sum());
    u64s(info, 176, stats[1]);
    u64s(info, 184, stats[2]);
    u32s(info, 136, r.u32(K::SegsOut));
    u32s(info, 140, r.u32(K::SegsIn));
    u32s(info, 148, r.u32(K::MinRtt));
    u32s(info, 152, r.u32(K::DataSegsIn));
    u32s(info, 156, r.u32(K::DataSegsOut));
    let (rate, interval) = (r.get(K::RateDelivered), r.get(K::RateIntervalUs));
    if rate != 0 && interval != 0 {
        u64s(info, 160, rate * u64::from(mss) * 1_000_000 / interval);
    }
    info[7] = (r.get(K::RateAppLimited) != 0) as u8 | (r.get(K::FastopenClientFail) as u8 & 3) << 1;
    u32s(info, 192, r.u32(K::Delivered));
    u32s(info, 196, r.u32(K::DeliveredCe));
    u64s(info, 200, r.get(K::BytesSent));
    u64s(info, 208, r.get(K::BytesRetrans));
    u32s(info, 216, r.u32(K::DsackDups));
    u32s(info, 220, r.u32(K::ReordSeen));
    u32s(info, 224, r.u32(K::RcvOoopack));
    u32s(info, 228, r.u32(K::SndWnd));
    u32s(info, 232, r.u32(K::RcvWnd));
    u32s(info, 236, r.u32(K::PlbRehash) + r.u32(K::TimeoutRehash));
    put(info, 240, (r.get(K::TotalRto) as u16).to_ne_bytes());
    put(info, 242, (r.get(K::TotalRtoRecoveries) as u16).to_ne_bytes());
    let mut rto_time = r.u32(K::TotalRtoTime);
    let rto_stamp = r.u32(K::RtoStamp);
    if rto_stamp != 0 {
        let now_ms = (r.u64_at(header::KTIME_NS) / 1_000_000) as u32;
        rto_time = rto_time.wrapping_add(now_ms.wrapping_sub(rto_stamp));
    }
    u32s(info, 244, rto_time);
    u32s(info, 248, r.u32(K::ReceivedCe));
    u32s(info, 252, r.u32(K::DeliveredE1));
    u32s(info, 256, r.u32(K::DeliveredE0));
    u32s(info, 260, r.u32(K::DeliveredCeBytes));
    u32s(info, 264, r.u32(K::ReceivedE1));
    u32s(info, 268, r.u32(K::ReceivedE0));
    u32s(info, 272, r.u32(K::ReceivedCeBytes));
    put(info, 276, (r.get(K::AccecnFailMode) as u16).to_ne_bytes());
    put(info, 278, (r.get(K::SawAccecnOpt) as u16).to_ne_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jiffies_convert_like_the_kernel() {
        assert_eq!(Hz(250).usecs(3), 12_000);
        assert_eq!(Hz(250).msecs(3), 12);
        assert_eq!(Hz(1000).msecs(7), 7);
        assert_eq!(Hz(300).msecs(3), 10);
    }
}
