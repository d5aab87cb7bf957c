//! The kernel's `struct tcp_info` through Linux 6.18, parsed length-aware from raw bytes.
//!
//! The same bytes come from `getsockopt(TCP_INFO)` ([`tcp_info`], [`tcp_info_raw`]) and from a
//! sock_diag dump's `INET_DIAG_INFO` attribute, so [`TcpInfo::parse`] takes a byte slice.
//!
//! The struct only grows: each kernel appends fields and returns
//! `min(requested, sizeof(struct tcp_info))` bytes. A field the kernel did not return is
//! **absent** (`None`), never zero: zero is a real value for most of them. The fields of the
//! original 104-byte struct (Linux 2.6) are plain values and must all be present; everything
//! appended since is an `Option`. Layout (`include/uapi/linux/tcp.h`, offsets cross-checked
//! against `libc::tcp_info` in the tests):
//!
//! | bytes   | fields                                                       | since |
//! |---------|--------------------------------------------------------------|-------|
//! | 0..104  | state .. total_retrans (the base struct)                     | 2.6   |
//! | 104..120| pacing_rate, max_pacing_rate                                 | 3.15  |
//! | 120..136| bytes_acked, bytes_received                                  | 4.1   |
//! | 136..144| segs_out, segs_in                                            | 4.2   |
//! | 144..160| notsent_bytes, min_rtt, data_segs_in, data_segs_out          | 4.6   |
//! | 160..168| delivery_rate (+ the app-limited bit in byte 7)              | 4.9   |
//! | 168..192| busy_time, rwnd_limited, sndbuf_limited                      | 4.10  |
//! | 192..200| delivered, delivered_ce                                      | 4.18  |
//! | 200..224| bytes_sent, bytes_retrans, dsack_dups, reord_seen            | 4.19  |
//! | 224..232| rcv_ooopack, snd_wnd (+ fastopen_client_fail in byte 7, 5.5) | 5.4   |
//! | 232..240| rcv_wnd, rehash                                              | 6.2   |
//! | 240..248| total_rto (u16), total_rto_recoveries (u16), total_rto_time  | 6.7   |
//! | 248..276| received_ce, AccECN byte counters (six `u32`)                | 6.18  |
//! | 276..280| accecn_fail_mode (u16), accecn_opt_seen (u16)                | 6.18  |
//!
//! Byte 6 holds two 4-bit fields (`snd_wscale`, `rcv_wscale`) and byte 7 two more
//! (`delivery_rate_app_limited:1`, `fastopen_client_fail:2`); bytes 248..280 were checked on
//! this kernel (`tcpi_received_e0_bytes` equals `bytes_received` with ECN on; with RFC 3168
//! ECN negotiated bytes 276..280 stay zero, where 7.0's layout below would show `ecn_mode` 1).
//!
//! **Linux 7.0 caveat:** 7.0 redefined bytes 276..280 (same total length) as one `u32` of
//! bitfields (`ecn_mode:2, accecn_opt_seen:2, accecn_fail_mode:4, options2:24`). Length cannot
//! tell the two layouts apart; this parser reads the 6.18 layout, so on 7.0+ only
//! [`TcpInfo::accecn_fail_mode`] and [`TcpInfo::accecn_opt_seen`] are misread.
//!
//! Invariants: parsing never panics, never allocates and ignores bytes beyond the known struct;
//! values are read in native endianness with `from_ne_bytes` (they come from the local kernel);
//! a field is present exactly when the input covers all of its bytes, so truncating the input
//! only ever removes fields. This module never reads the clock; only the re-exported `sys`
//! functions touch a socket.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::sys::info::{tcp_info, tcp_info_raw};

#[cfg(test)]
mod tests;

/// Why bytes could not be parsed as `struct tcp_info`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TcpInfoError {
    /// Fewer bytes than the base struct every Linux kernel returns.
    #[error(
        "tcp_info is {len} bytes, shorter than the {min}-byte base struct every Linux kernel \
         returns (truncated sock_diag attribute or wrong buffer?)"
    )]
    TooShort {
        /// Bytes given.
        len: usize,
        /// Bytes required ([`TcpInfo::BASE_LEN`]).
        min: usize,
    },
}

/// `struct tcp_info`, every field through Linux 6.18, in base units named in the field name.
///
/// Fields after the base struct are `None` when the kernel's struct ends before them. Counts
/// named `_segs` are in segments (packets), `_us` microseconds, `_ms` milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TcpInfo {
    /// Bytes the kernel returned (may exceed [`TcpInfo::KNOWN_LEN`] on a newer kernel).
    pub len: usize,
    /// Connection state (`tcpi_state`).
    pub state: TcpState,
    /// Congestion-avoidance state (`tcpi_ca_state`).
    pub ca_state: CaState,
    /// Consecutive unanswered RTO retransmissions of the head segment (`tcpi_retransmits`).
    pub retransmits: u8,
    /// Unanswered zero-window or keepalive probes (`tcpi_probes`).
    pub probes: u8,
    /// RTO exponential backoff exponent (`tcpi_backoff`).
    pub backoff: u8,
    /// Options negotiated on the handshake (`tcpi_options`).
    pub options: TcpiOptions,
    /// Send window scale shift (`tcpi_snd_wscale`, 4 bits).
    pub snd_wscale: u8,
    /// Receive window scale shift (`tcpi_rcv_wscale`, 4 bits).
    pub rcv_wscale: u8,
    /// Whether the last delivery-rate sample was application-limited (bit 0 of byte 7, 4.9+).
    /// Present exactly when [`TcpInfo::delivery_rate_bytes_per_sec`] is.
    pub delivery_rate_app_limited: Option<bool>,
    /// Why a TCP Fast Open client attempt failed: 0 unspecified, 1 no cookie, 2 SYN data not
    /// acknowledged, 3 SYN retransmitted (bits 1-2 of byte 7, 5.5+; present from the 5.4
    /// length, where the bits read 0 = unspecified).
    pub fastopen_client_fail: Option<u8>,
    /// Retransmission timeout (`tcpi_rto`).
    pub rto_us: u32,
    /// Delayed-ACK timeout (`tcpi_ato`).
    pub ato_us: u32,
    /// Sender MSS (`tcpi_snd_mss`, the current `mss_cache`).
    pub snd_mss_bytes: u32,
    /// Receiver's estimate of the peer's MSS (`tcpi_rcv_mss`).
    pub rcv_mss_bytes: u32,
    /// Segments sent and not yet acknowledged (`tcpi_unacked`).
    pub unacked_segs: u32,
    /// Segments selectively acknowledged (`tcpi_sacked`).
    pub sacked_segs: u32,
    /// Segments presumed lost (`tcpi_lost`).
    pub lost_segs: u32,
    /// Retransmitted segments still in flight (`tcpi_retrans`).
    pub retrans_segs: u32,
    /// Always 0 since FACK was removed (Linux 4.15).
    pub fackets_segs: u32,
    /// Time since the last data was sent (`tcpi_last_data_sent`).
    pub last_data_sent_ms: u32,
    /// Always 0: the kernel does not remember it.
    pub last_ack_sent_ms: u32,
    /// Time since the last data was received (`tcpi_last_data_recv`).
    pub last_data_recv_ms: u32,
    /// Time since the last ACK was received (`tcpi_last_ack_recv`).
    pub last_ack_recv_ms: u32,
    /// Path MTU (`tcpi_pmtu`).
    pub pmtu_bytes: u32,
    /// Receive slow-start threshold (`tcpi_rcv_ssthresh`).
    pub rcv_ssthresh_bytes: u32,
    /// Smoothed RTT (`tcpi_rtt`).
    pub rtt_us: u32,
    /// RTT variance (`tcpi_rttvar`).
    pub rttvar_us: u32,
    /// Send slow-start threshold (`tcpi_snd_ssthresh`; `i32::MAX` means "infinite").
    pub snd_ssthresh_segs: u32,
    /// Congestion window (`tcpi_snd_cwnd`).
    pub snd_cwnd_segs: u32,
    /// Advertised MSS (`tcpi_advmss`).
    pub advmss_bytes: u32,
    /// Reordering degree the sender tolerates (`tcpi_reordering`).
    pub reordering_segs: u32,
    /// Receiver-side RTT estimate (`tcpi_rcv_rtt`).
    pub rcv_rtt_us: u32,
    /// Receive-buffer autotuning space estimate (`tcpi_rcv_space`).
    pub rcv_space_bytes: u32,
    /// Segments retransmitted over the connection's life (`tcpi_total_retrans`).
    pub total_retrans_segs: u32,
    /// Current pacing rate (`tcpi_pacing_rate`, 3.15+; `u64::MAX` = unpaced).
    pub pacing_rate_bytes_per_sec: Option<u64>,
    /// `SO_MAX_PACING_RATE` (`tcpi_max_pacing_rate`, 3.15+; `u64::MAX` = no limit).
    pub max_pacing_rate_bytes_per_sec: Option<u64>,
    /// Bytes acknowledged by the peer (`tcpi_bytes_acked`, 4.1+).
    pub bytes_acked: Option<u64>,
    /// Bytes received in order (`tcpi_bytes_received`, 4.1+).
    pub bytes_received: Option<u64>,
    /// Segments sent, retransmissions and pure ACKs included (`tcpi_segs_out`, 4.2+).
    pub segs_out: Option<u32>,
    /// Segments received (`tcpi_segs_in`, 4.2+).
    pub segs_in: Option<u32>,
    /// Bytes written but not yet sent (`tcpi_notsent_bytes`, 4.6+; = `SIOCOUTQNSD`).
    pub notsent_bytes: Option<u32>,
    /// Windowed minimum RTT (`tcpi_min_rtt`, 4.6+).
    pub min_rtt_us: Option<u32>,
    /// Segments received with data (`tcpi_data_segs_in`, 4.6+).
    pub data_segs_in: Option<u32>,
    /// Segments sent with data (`tcpi_data_segs_out`, 4.6+).
    pub data_segs_out: Option<u32>,
    /// Latest delivery-rate sample (`tcpi_delivery_rate`, 4.9+).
    pub delivery_rate_bytes_per_sec: Option<u64>,
    /// Time with data in flight (`tcpi_busy_time`, 4.10+; jiffy granularity).
    pub busy_time_us: Option<u64>,
    /// Time limited by the peer's receive window (`tcpi_rwnd_limited`, 4.10+).
    pub rwnd_limited_us: Option<u64>,
    /// Time limited by the send buffer (`tcpi_sndbuf_limited`, 4.10+).
    pub sndbuf_limited_us: Option<u64>,
    /// Segments delivered, retransmissions included (`tcpi_delivered`, 4.18+).
    pub delivered_segs: Option<u32>,
    /// Delivered segments that were ECN CE-marked (`tcpi_delivered_ce`, 4.18+).
    pub delivered_ce_segs: Option<u32>,
    /// Bytes sent, retransmissions included (`tcpi_bytes_sent`, 4.19+).
    pub bytes_sent: Option<u64>,
    /// Bytes retransmitted (`tcpi_bytes_retrans`, 4.19+).
    pub bytes_retrans: Option<u64>,
    /// DSACK blocks received: spurious retransmissions (`tcpi_dsack_dups`, 4.19+).
    pub dsack_dups: Option<u32>,
    /// Reordering events seen (`tcpi_reord_seen`, 4.19+).
    pub reord_seen: Option<u32>,
    /// Out-of-order segments received (`tcpi_rcv_ooopack`, 5.4+).
    pub rcv_ooo_segs: Option<u32>,
    /// Peer's advertised receive window after scaling (`tcpi_snd_wnd`, 5.4+).
    pub snd_wnd_bytes: Option<u32>,
    /// Our advertised receive window after scaling (`tcpi_rcv_wnd`, 6.2+).
    pub rcv_wnd_bytes: Option<u32>,
    /// PLB- or timeout-triggered flow-label rehashes (`tcpi_rehash`, 6.2+).
    pub rehashes: Option<u32>,
    /// RTO timeouts, SYN and recurring ones included (`tcpi_total_rto`, 6.7+).
    pub total_rto: Option<u16>,
    /// RTO recoveries, an unfinished one included (`tcpi_total_rto_recoveries`, 6.7+).
    pub total_rto_recoveries: Option<u16>,
    /// Time spent in RTO recoveries (`tcpi_total_rto_time`, 6.7+).
    pub total_rto_time_ms: Option<u32>,
    /// CE-marked segments received (`tcpi_received_ce`, 6.18+).
    pub received_ce_segs: Option<u32>,
    /// AccECN: bytes delivered marked ECT(1) (`tcpi_delivered_e1_bytes`, 6.18+).
    pub delivered_e1_bytes: Option<u32>,
    /// AccECN: bytes delivered marked ECT(0) (`tcpi_delivered_e0_bytes`, 6.18+).
    pub delivered_e0_bytes: Option<u32>,
    /// AccECN: bytes delivered marked CE (`tcpi_delivered_ce_bytes`, 6.18+).
    pub delivered_ce_bytes: Option<u32>,
    /// Bytes received marked ECT(1) (`tcpi_received_e1_bytes`, 6.18+).
    pub received_e1_bytes: Option<u32>,
    /// Bytes received marked ECT(0) (`tcpi_received_e0_bytes`, 6.18+).
    pub received_e0_bytes: Option<u32>,
    /// Bytes received marked CE (`tcpi_received_ce_bytes`, 6.18+).
    pub received_ce_bytes: Option<u32>,
    /// AccECN failure bits: ACE send/receive, option send/receive (`tcpi_accecn_fail_mode`,
    /// 6.18 layout; see the module docs for 7.0).
    pub accecn_fail_mode: Option<u16>,
    /// AccECN option seen: 0 not seen, 1 empty, 2 counters, 3 failed (`tcpi_accecn_opt_seen`,
    /// 6.18 layout; see the module docs for 7.0).
    pub accecn_opt_seen: Option<u16>,
}

/// Native-endian reads that return `None` past the end of the input.
struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn bytes<const N: usize>(&self, off: usize) -> Option<[u8; N]> {
        self.0.get(off..off.checked_add(N)?)?.try_into().ok()
    }
    fn u8(&self, off: usize) -> Option<u8> {
        self.0.get(off).copied()
    }
    fn u16(&self, off: usize) -> Option<u16> {
        self.bytes(off).map(u16::from_ne_bytes)
    }
    fn u32(&self, off: usize) -> Option<u32> {
        self.bytes(off).map(u32::from_ne_bytes)
    }
    fn u64(&self, off: usize) -> Option<u64> {
        self.bytes(off).map(u64::from_ne_bytes)
    }
    /// A base-struct field: present once the length check in `parse` passed.
    fn base_u32(&self, off: usize) -> u32 {
        self.u32(off).unwrap_or_default()
    }
}

/// Splits byte 6 into (`snd_wscale`, `rcv_wscale`). C bitfields fill from the least significant
/// bit on little-endian targets and from the most significant bit on big-endian ones.
fn split_wscale(byte: u8) -> (u8, u8) {
    if cfg!(target_endian = "little") { (byte & 0x0f, byte >> 4) } else { (byte >> 4, byte & 0x0f) }
}

/// Splits byte 7 into (`delivery_rate_app_limited`, `fastopen_client_fail`).
fn split_flags(byte: u8) -> (bool, u8) {
    if cfg!(target_endian = "little") {
        (byte & 1 != 0, (byte >> 1) & 0b11)
    } else {
        (byte & 0x80 != 0, (byte >> 5) & 0b11)
    }
}

impl TcpInfo {
    /// Size of the original `struct tcp_info` every Linux kernel returns at least.
    pub const BASE_LEN: usize = 104;

    /// Size of `struct tcp_info` on Linux 6.18, the last byte this parser knows.
    pub const KNOWN_LEN: usize = 280;

    /// [`TcpInfo::parse`] of what [`TcpInfo::send_queue_delay`] and `rtt_us` read alone (the
    /// state, RTT, MSS, cwnd, pacing and delivery rates, bytes not yet sent); every other
    /// field is its default. For a caller that reads only those of many sockets (a scrape's
    /// aggregates).
    pub fn parse_delay_inputs(bytes: &[u8]) -> Result<TcpInfo, TcpInfoError> {
        if bytes.len() < Self::BASE_LEN {
            return Err(TcpInfoError::TooShort { len: bytes.len(), min: Self::BASE_LEN });
        }
        let r = Reader(bytes);
        let (app_limited, _) = split_flags(r.u8(7).unwrap_or_default());
        let delivery_rate_bytes_per_sec = r.u64(160);
        Ok(TcpInfo {
            len: bytes.len(),
            state: TcpState::from_raw(r.u8(0).unwrap_or_default()),
            delivery_rate_app_limited: delivery_rate_bytes_per_sec.map(|_| app_limited),
            snd_mss_bytes: r.base_u32(16),
            rtt_us: r.base_u32(68),
            snd_cwnd_segs: r.base_u32(80),
            pacing_rate_bytes_per_sec: r.u64(104),
            notsent_bytes: r.u32(144),
            delivery_rate_bytes_per_sec,
            ..TcpInfo::default()
        })
    }

    /// Parses the bytes the kernel returned; bytes beyond [`TcpInfo::KNOWN_LEN`] are ignored.
    ///
    /// Errors only when `bytes` is shorter than [`TcpInfo::BASE_LEN`]. Never panics.
    pub fn parse(bytes: &[u8]) -> Result<TcpInfo, TcpInfoError> {
        if bytes.len() < Self::BASE_LEN {
            return Err(TcpInfoError::TooShort { len: bytes.len(), min: Self::BASE_LEN });
        }
        let r = Reader(bytes);
        let byte = |off| r.u8(off).unwrap_or_default();
        let (snd_wscale, rcv_wscale) = split_wscale(byte(6));
        let (app_limited, tfo_fail) = split_flags(byte(7));
        let delivery_rate_bytes_per_sec = r.u64(160);
        let snd_wnd_bytes = r.u32(228);
        Ok(TcpInfo {
            len: bytes.len(),
            state: TcpState::from_raw(byte(0)),
            ca_state: CaState::from_raw(byte(1)),
            retransmits: byte(2),
            probes: byte(3),
            backoff: byte(4),
            options: TcpiOptions(byte(5)),
            snd_wscale,
            rcv_wscale,
            delivery_rate_app_limited: delivery_rate_bytes_per_sec.map(|_| app_limited),
            fastopen_client_fail: snd_wnd_bytes.map(|_| tfo_fail),
            rto_us: r.base_u32(8),
            ato_us: r.base_u32(12),
            snd_mss_bytes: r.base_u32(16),
            rcv_mss_bytes: r.base_u32(20),
            unacked_segs: r.base_u32(24),
            sacked_segs: r.base_u32(28),
            lost_segs: r.base_u32(32),
            retrans_segs: r.base_u32(36),
            fackets_segs: r.base_u32(40),
            last_data_sent_ms: r.base_u32(44),
            last_ack_sent_ms: r.base_u32(48),
            last_data_recv_ms: r.base_u32(52),
            last_ack_recv_ms: r.base_u32(56),
            pmtu_bytes: r.base_u32(60),
            rcv_ssthresh_bytes: r.base_u32(64),
            rtt_us: r.base_u32(68),
            rttvar_us: r.base_u32(72),
            snd_ssthresh_segs: r.base_u32(76),
            snd_cwnd_segs: r.base_u32(80),
            advmss_bytes: r.base_u32(84),
            reordering_segs: r.base_u32(88),
            rcv_rtt_us: r.base_u32(92),
            rcv_space_bytes: r.base_u32(96),
            total_retrans_segs: r.base_u32(100),
            pacing_rate_bytes_per_sec: r.u64(104),
            max_pacing_rate_bytes_per_sec: r.u64(112),
            bytes_acked: r.u64(120),
            bytes_received: r.u64(128),
            segs_out: r.u32(136),
            segs_in: r.u32(140),
            notsent_bytes: r.u32(144),
            min_rtt_us: r.u32(148),
            data_segs_in: r.u32(152),
            data_segs_out: r.u32(156),
            delivery_rate_bytes_per_sec,
            busy_time_us: r.u64(168),
            rwnd_limited_us: r.u64(176),
            sndbuf_limited_us: r.u64(184),
            delivered_segs: r.u32(192),
            delivered_ce_segs: r.u32(196),
            bytes_sent: r.u64(200),
            bytes_retrans: r.u64(208),
            dsack_dups: r.u32(216),
            reord_seen: r.u32(220),
            rcv_ooo_segs: r.u32(224),
            snd_wnd_bytes,
            rcv_wnd_bytes: r.u32(232),
            rehashes: r.u32(236),
            total_rto: r.u16(240),
            total_rto_recoveries: r.u16(242),
            total_rto_time_ms: r.u32(244),
            received_ce_segs: r.u32(248),
            delivered_e1_bytes: r.u32(252),
            delivered_e0_bytes: r.u32(256),
            delivered_ce_bytes: r.u32(260),
            received_e1_bytes: r.u32(264),
            received_e0_bytes: r.u32(268),
            received_ce_bytes: r.u32(272),
            accecn_fail_mode: r.u16(276),
            accecn_opt_seen: r.u16(278),
        })
    }

    /// Whether the latest delivery-rate sample was application-limited (the sender ran out of
    /// data, so the rate understates the path); `None` before Linux 4.9.
    pub fn delivery_rate_app_limited(&self) -> Option<bool> {
        self.delivery_rate_app_limited
    }

    /// The smoothed RTT as a `Duration`.
    pub fn rtt(&self) -> Duration {
        Duration::from_micros(u64::from(self.rtt_us))
    }

    /// Estimated time for the bytes not yet sent to leave: `notsent / R`, with the inputs used.
    ///
    /// `R` is the delivery rate when its latest sample was not application-limited, otherwise
    /// `min(pacing_rate, cwnd × mss / srtt)` over whichever of the two is known (an unpaced
    /// socket reports pacing rate `u64::MAX`, which is skipped). `None` when `notsent_bytes` is
    /// absent (before 4.6) or no rate is usable (all zero or unknown).
    pub fn send_queue_delay(&self) -> Option<SendQueueDelay> {
        let notsent_bytes = self.notsent_bytes?;
        let delivery = self.delivery_rate_bytes_per_sec.filter(|&r| r > 0);
        let pacing = self.pacing_rate_bytes_per_sec.filter(|&r| r > 0 && r != u64::MAX);
        let cwnd_per_srtt = (self.rtt_us > 0)
            .then(|| {
                let bytes_per_rtt = u128::from(self.snd_cwnd_segs) * u128::from(self.snd_mss_bytes);
                let rate = bytes_per_rtt * 1_000_000 / u128::from(self.rtt_us);
                u64::try_from(rate).unwrap_or(u64::MAX)
            })
            .filter(|&r| r > 0);
        let (rate_bytes_per_sec, rate_source) = match (self.delivery_rate_app_limited, delivery) {
            (Some(false), Some(rate)) => (rate, RateSource::DeliveryRate),
            _ => match (pacing, cwnd_per_srtt) {
                (Some(p), Some(c)) if c < p => (c, RateSource::CwndPerSrtt),
                (Some(p), _) => (p, RateSource::PacingRate),
                (None, Some(c)) => (c, RateSource::CwndPerSrtt),
                (None, None) => return None,
            },
        };
        let nanos = u128::from(notsent_bytes) * 1_000_000_000 / u128::from(rate_bytes_per_sec);
        Some(SendQueueDelay {
            delay: Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX)),
            notsent_bytes,
            rate_bytes_per_sec,
            rate_source,
            delivery_rate_bytes_per_sec: self.delivery_rate_bytes_per_sec,
            delivery_rate_app_limited: self.delivery_rate_app_limited,
            pacing_rate_bytes_per_sec: pacing,
            cwnd_per_srtt_bytes_per_sec: cwnd_per_srtt,
        })
    }

    /// Just the estimate of [`TcpInfo::send_queue_delay`]: how long the bytes written but not
    /// yet sent will wait before they leave.
    pub fn send_queue_delay_estimate(&self) -> Option<Duration> {
        self.send_queue_delay().map(|d| d.delay)
    }
}

/// The estimated send-queue delay and every input it was computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendQueueDelay {
    /// `notsent_bytes / rate_bytes_per_sec`.
    pub delay: Duration,
    /// Bytes written but not yet sent.
    pub notsent_bytes: u32,
    /// The rate the delay was computed with.
    pub rate_bytes_per_sec: u64,
    /// Which input that rate came from.
    pub rate_source: RateSource,
    /// The delivery rate as reported (also when not used).
    pub delivery_rate_bytes_per_sec: Option<u64>,
    /// Whether the delivery-rate sample was application-limited.
    pub delivery_rate_app_limited: Option<bool>,
    /// The pacing rate, `None` when absent, zero or unpaced (`u64::MAX`).
    pub pacing_rate_bytes_per_sec: Option<u64>,
    /// `cwnd × mss / srtt`, `None` when any of them is zero.
    pub cwnd_per_srtt_bytes_per_sec: Option<u64>,
}

/// Which rate a [`SendQueueDelay`] divided by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RateSource {
    /// The delivery rate (its latest sample was not application-limited).
    DeliveryRate,
    /// The pacing rate (lower than, or the only one known beside, cwnd / srtt).
    PacingRate,
    /// `cwnd × mss / srtt`.
    CwndPerSrtt,
}

/// TCP connection state (`include/net/tcp_states.h`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TcpState {
    /// `TCP_ESTABLISHED` (1): data flows both ways.
    Established,
    /// `TCP_SYN_SENT` (2): connecting, SYN sent.
    SynSent,
    /// `TCP_SYN_RECV` (3): SYN received, SYN-ACK sent (or a Fast Open child).
    SynRecv,
    /// `TCP_FIN_WAIT1` (4): we closed, our FIN not yet acknowledged.
    FinWait1,
    /// `TCP_FIN_WAIT2` (5): our FIN acknowledged, waiting for the peer's.
    FinWait2,
    /// `TCP_TIME_WAIT` (6): both closed, waiting out old segments.
    TimeWait,
    /// `TCP_CLOSE` (7): closed, or never connected.
    Close,
    /// `TCP_CLOSE_WAIT` (8): the peer closed, we have not.
    CloseWait,
    /// `TCP_LAST_ACK` (9): both closed, our FIN not yet acknowledged.
    LastAck,
    /// `TCP_LISTEN` (10): a listening socket.
    Listen,
    /// `TCP_CLOSING` (11): simultaneous close.
    Closing,
    /// `TCP_NEW_SYN_RECV` (12): a request socket (only seen through sock_diag).
    NewSynRecv,
    /// `TCP_BOUND_INACTIVE` (13, 6.9+): bound, not listening or connected.
    BoundInactive,
    /// A value this parser does not know (0, or a state newer than Linux 6.18).
    Unknown(u8),
}

/// Known states in kernel order (value 1 first), with the kernel's names.
const TCP_STATES: [(TcpState, &str); 13] = [
    (TcpState::Established, "ESTABLISHED"),
    (TcpState::SynSent, "SYN_SENT"),
    (TcpState::SynRecv, "SYN_RECV"),
    (TcpState::FinWait1, "FIN_WAIT1"),
    (TcpState::FinWait2, "FIN_WAIT2"),
    (TcpState::TimeWait, "TIME_WAIT"),
    (TcpState::Close, "CLOSE"),
    (TcpState::CloseWait, "CLOSE_WAIT"),
    (TcpState::LastAck, "LAST_ACK"),
    (TcpState::Listen, "LISTEN"),
    (TcpState::Closing, "CLOSING"),
    (TcpState::NewSynRecv, "NEW_SYN_RECV"),
    (TcpState::BoundInactive, "BOUND_INACTIVE"),
];

impl TcpState {
    /// Decodes `tcpi_state`.
    pub fn from_raw(raw: u8) -> TcpState {
        let index = usize::from(raw).wrapping_sub(1);
        TCP_STATES.get(index).map_or(TcpState::Unknown(raw), |&(state, _)| state)
    }

    /// The kernel's value for this state.
    pub fn raw(self) -> u8 {
        match self {
            TcpState::Unknown(raw) => raw,
            known => TCP_STATES
                .iter()
                .zip(1u8..)
                .find_map(|(&(state, _), raw)| (state == known).then_some(raw))
                .unwrap_or_default(),
        }
    }

    /// The kernel's name without the `TCP_` prefix: `ESTABLISHED`, `SYN_SENT`, ... `UNKNOWN`.
    pub fn name(self) -> &'static str {
        TCP_STATES.iter().find(|(state, _)| *state == self).map_or("UNKNOWN", |&(_, name)| name)
    }
}

impl Default for TcpState {
    fn default() -> Self {
        TcpState::Unknown(0)
    }
}

impl fmt::Display for TcpState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TcpState::Unknown(raw) => write!(f, "UNKNOWN({raw})"),
            known => f.write_str(known.name()),
        }
    }
}

/// Congestion-avoidance state (`enum tcp_ca_state`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CaState {
    /// Nothing bad has been seen.
    #[default]
    Open,
    /// Duplicate ACKs or SACKs: maybe reordering, maybe loss.
    Disorder,
    /// Window reduced after an ECN echo or a local congestion notification.
    Cwr,
    /// Fast retransmit / loss recovery.
    Recovery,
    /// After an RTO: everything in flight is presumed lost.
    Loss,
    /// A value this parser does not know.
    Unknown(u8),
}

impl CaState {
    /// Decodes `tcpi_ca_state`.
    pub fn from_raw(raw: u8) -> CaState {
        match raw {
            0 => CaState::Open,
            1 => CaState::Disorder,
            2 => CaState::Cwr,
            3 => CaState::Recovery,
            4 => CaState::Loss,
            other => CaState::Unknown(other),
        }
    }

    /// The kernel's value for this state.
    pub fn raw(self) -> u8 {
        match self {
            CaState::Open => 0,
            CaState::Disorder => 1,
            CaState::Cwr => 2,
            CaState::Recovery => 3,
            CaState::Loss => 4,
            CaState::Unknown(raw) => raw,
        }
    }

    /// The kernel's name without the `TCP_CA_` prefix: `Open`, `Disorder`, `CWR`, `Recovery`,
    /// `Loss`, or `Unknown`.
    pub fn name(self) -> &'static str {
        match self {
            CaState::Open => "Open",
            CaState::Disorder => "Disorder",
            CaState::Cwr => "CWR",
            CaState::Recovery => "Recovery",
            CaState::Loss => "Loss",
            CaState::Unknown(_) => "Unknown",
        }
    }
}

impl fmt::Display for CaState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CaState::Unknown(raw) => write!(f, "Unknown({raw})"),
            known => f.write_str(known.name()),
        }
    }
}

/// The `tcpi_options` bit set; test a bit with [`TcpiOptions::contains`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TcpiOptions(pub u8);

impl TcpiOptions {
    /// Timestamps negotiated.
    pub const TIMESTAMPS: u8 = 1;
    /// SACK negotiated.
    pub const SACK: u8 = 2;
    /// Window scaling negotiated.
    pub const WSCALE: u8 = 4;
    /// ECN negotiated.
    pub const ECN: u8 = 8;
    /// At least one ECT packet received.
    pub const ECN_SEEN: u8 = 16;
    /// The SYN-ACK acknowledged data carried on the SYN (Fast Open).
    pub const SYN_DATA: u8 = 32;
    /// Microsecond TCP timestamps in use (6.7+).
    pub const USEC_TS: u8 = 64;
    /// A passive Fast Open child socket.
    pub const TFO_CHILD: u8 = 128;

    /// Whether every bit of `flag` (one of the `TCPI_OPT_*` constants above) is set.
    pub fn contains(self, flag: u8) -> bool {
        self.0 & flag == flag
    }
}
