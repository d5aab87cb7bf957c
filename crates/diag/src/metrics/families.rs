//! The per-connection metric families: name, help, type and how to read each one from a
//! connection's [`Values`]; and [`series_of`], the exact number of series a connection produces.

use tcptail_sock::cc_info::BbrInfo;
use tcptail_sock::tcp_info::{SendQueueDelay, TcpInfo};

use super::text::{Kind, Num};
use crate::Connection;

/// What the families read of one connection: borrowed, so a scrape builds it per connection
/// without copying or allocating.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Values<'a> {
    pub(crate) info: Option<&'a TcpInfo>,
    pub(crate) bbr: Option<&'a BbrInfo>,
    pub(crate) send_queue_bytes: u32,
    pub(crate) recv_queue_bytes: u32,
    pub(crate) delay: Option<SendQueueDelay>,
}

impl<'a> Values<'a> {
    /// The values of an owned [`Connection`].
    pub(crate) fn of(c: &'a Connection) -> Values<'a> {
        Values {
            info: c.info.as_ref(),
            bbr: c.bbr.as_ref(),
            send_queue_bytes: c.send_queue_bytes,
            recv_queue_bytes: c.recv_queue_bytes,
            delay: c.derived.send_queue_delay,
        }
    }
}

type Getter = fn(&Values<'_>) -> Option<Num>;

pub(crate) fn connection_families() -> [(&'static str, &'static str, Kind, Getter); 29] {
    use Kind::{Counter as C, Gauge as G};
    [
        ("tcptail_connection_rtt_seconds", "Smoothed RTT.", G, |c| {
            c.info.map(|i| Num::micros(i.rtt_us))
        }),
        ("tcptail_connection_min_rtt_seconds", "Minimum RTT seen.", G, |c| {
            c.info?.min_rtt_us.map(Num::micros)
        }),
        ("tcptail_connection_rtt_variance_seconds", "RTT mean deviation (rttvar).", G, |c| {
            c.info.map(|i| Num::micros(i.rttvar_us))
        }),
        ("tcptail_connection_cwnd_segments", "Congestion window.", G, |c| {
            c.info.map(|i| Num::int(i.snd_cwnd_segs))
        }),
        ("tcptail_connection_ssthresh_segments", "Slow-start threshold.", G, |c| {
            c.info.map(|i| Num::int(i.snd_ssthresh_segs))
        }),
        ("tcptail_connection_mss_bytes", "Sender MSS.", G, |c| {
            c.info.map(|i| Num::int(i.snd_mss_bytes))
        }),
        (
            "tcptail_connection_delivery_rate_bytes_per_second",
            "Latest delivery-rate sample.",
            G,
            |c| c.info?.delivery_rate_bytes_per_sec.map(Num::int),
        ),
        (
            "tcptail_connection_delivery_rate_app_limited",
            "1 when the latest delivery-rate sample was application-limited.",
            G,
            |c| c.info?.delivery_rate_app_limited.map(|v| Num::int(u8::from(v))),
        ),
        (
            "tcptail_connection_pacing_rate_bytes_per_second",
            "Pacing rate (absent when unpaced).",
            G,
            |c| c.info?.pacing_rate_bytes_per_sec.filter(|&v| v != u64::MAX).map(Num::int),
        ),
        (
            "tcptail_connection_bbr_bandwidth_bytes_per_second",
            "BBR bottleneck bandwidth estimate.",
            G,
            |c| c.bbr.map(|b| Num::int(b.bw_bytes_per_sec)),
        ),
        ("tcptail_connection_bbr_min_rtt_seconds", "BBR windowed min RTT.", G, |c| {
            c.bbr?.min_rtt().map(|d| Num::nanos(d.as_nanos()))
        }),
        ("tcptail_connection_bbr_pacing_gain_ratio", "BBR pacing gain.", G, |c| {
            c.bbr.map(|b| Num::ratio256(b.pacing_gain))
        }),
        ("tcptail_connection_bbr_cwnd_gain_ratio", "BBR cwnd gain.", G, |c| {
            c.bbr.map(|b| Num::ratio256(b.cwnd_gain))
        }),
        ("tcptail_connection_unsent_bytes", "Bytes written but not yet sent (notsent).", G, |c| {
            c.info?.notsent_bytes.map(Num::int)
        }),
        ("tcptail_connection_send_queue_bytes", "Send queue: unacked + unsent bytes.", G, |c| {
            Some(Num::int(c.send_queue_bytes))
        }),
        ("tcptail_connection_receive_queue_bytes", "Receive queue: unread bytes.", G, |c| {
            Some(Num::int(c.recv_queue_bytes))
        }),
        (
            "tcptail_connection_send_queue_delay_seconds",
            "Estimated send-queue delay: unsent / rate.",
            G,
            |c| c.delay.map(|d| Num::nanos(d.delay.as_nanos())),
        ),
        (
            "tcptail_connection_send_queue_delay_rate_bytes_per_second",
            "Rate the send-queue delay was computed with.",
            G,
            |c| c.delay.map(|d| Num::int(d.rate_bytes_per_sec)),
        ),
        ("tcptail_connection_retransmitted_segments", "Segments retransmitted.", C, |c| {
            c.info.map(|i| Num::int(i.total_retrans_segs))
        }),
        ("tcptail_connection_retransmitted_bytes", "Bytes retransmitted.", C, |c| {
            c.info?.bytes_retrans.map(Num::int)
        }),
        ("tcptail_connection_sent_segments", "Segments sent.", C, |c| {
            c.info?.segs_out.map(Num::int)
        }),
        ("tcptail_connection_sent_bytes", "Bytes sent (including retransmissions).", C, |c| {
            c.info?.bytes_sent.map(Num::int)
        }),
        ("tcptail_connection_rto", "Retransmission timeouts.", C, |c| {
            c.info?.total_rto.map(Num::int)
        }),
        ("tcptail_connection_rto_seconds", "Time spent in RTO recovery.", C, |c| {
            c.info?.total_rto_time_ms.map(Num::millis)
        }),
        ("tcptail_connection_busy_seconds", "Time with data in flight.", C, |c| {
            c.info?.busy_time_us.map(Num::micros)
        }),
        (
            "tcptail_connection_rwnd_limited_seconds",
            "Time limited by the receive window.",
            C,
            |c| c.info?.rwnd_limited_us.map(Num::micros),
        ),
        ("tcptail_connection_sndbuf_limited_seconds", "Time limited by the send buffer.", C, |c| {
            c.info?.sndbuf_limited_us.map(Num::micros)
        }),
        ("tcptail_connection_lost_segments", "Segments currently considered lost.", G, |c| {
            c.info.map(|i| Num::int(i.lost_segs))
        }),
        ("tcptail_connection_unacked_segments", "Segments in flight.", G, |c| {
            c.info.map(|i| Num::int(i.unacked_segs))
        }),
    ]
}

/// The number of series `c` produces when exported: one per family it has a value for, its
/// BBR phase (BBR sockets only) and its congestion-control info. A non-BBR socket has fewer
/// than a BBR one, a socket without `tcp_info` fewer still.
pub fn series_of(c: &Connection) -> u64 {
    series_of_values(&Values::of(c))
}

/// [`series_of`] for borrowed values.
pub(crate) fn series_of_values(v: &Values<'_>) -> u64 {
    let values = connection_families().iter().filter(|(_, _, _, get)| get(v).is_some()).count();
    values as u64 + u64::from(v.bbr.is_some()) + 1
}
