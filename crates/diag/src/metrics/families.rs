//! The per-connection metric families: name, help, type and how to read each one from a
//! [`Connection`]; and [`series_of`], the exact number of series a connection produces.

use super::Kind;
use crate::Connection;

type Getter = fn(&Connection) -> Option<f64>;

fn us(v: u32) -> f64 {
    f64::from(v) / 1e6
}

pub(super) fn connection_families() -> [(&'static str, &'static str, Kind, Getter); 29] {
    use Kind::{Counter as C, Gauge as G};
    [
        ("tcptail_connection_rtt_seconds", "Smoothed RTT.", G, |c| {
            c.info.as_ref().map(|i| us(i.rtt_us))
        }),
        ("tcptail_connection_min_rtt_seconds", "Minimum RTT seen.", G, |c| {
            c.info.as_ref()?.min_rtt_us.map(us)
        }),
        ("tcptail_connection_rtt_variance_seconds", "RTT mean deviation (rttvar).", G, |c| {
            c.info.as_ref().map(|i| us(i.rttvar_us))
        }),
        ("tcptail_connection_cwnd_segments", "Congestion window.", G, |c| {
            c.info.as_ref().map(|i| f64::from(i.snd_cwnd_segs))
        }),
        ("tcptail_connection_ssthresh_segments", "Slow-start threshold.", G, |c| {
            c.info.as_ref().map(|i| f64::from(i.snd_ssthresh_segs))
        }),
        ("tcptail_connection_mss_bytes", "Sender MSS.", G, |c| {
            c.info.as_ref().map(|i| f64::from(i.snd_mss_bytes))
        }),
        (
            "tcptail_connection_delivery_rate_bytes_per_second",
            "Latest delivery-rate sample.",
            G,
            |c| c.info.as_ref()?.delivery_rate_bytes_per_sec.map(|v| v as f64),
        ),
        (
            "tcptail_connection_delivery_rate_app_limited",
            "1 when the latest delivery-rate sample was application-limited.",
            G,
            |c| c.info.as_ref()?.delivery_rate_app_limited.map(|v| f64::from(u8::from(v))),
        ),
        (
            "tcptail_connection_pacing_rate_bytes_per_second",
            "Pacing rate (absent when unpaced).",
            G,
            |c| {
                c.info
                    .as_ref()?
                    .pacing_rate_bytes_per_sec
                    .filter(|&v| v != u64::MAX)
                    .map(|v| v as f64)
            },
        ),
        (
            "tcptail_connection_bbr_bandwidth_bytes_per_second",
            "BBR bottleneck bandwidth estimate.",
            G,
            |c| c.bbr.map(|b| b.bw_bytes_per_sec as f64),
        ),
        ("tcptail_connection_bbr_min_rtt_seconds", "BBR windowed min RTT.", G, |c| {
            c.bbr?.min_rtt().map(|d| d.as_secs_f64())
        }),
        ("tcptail_connection_bbr_pacing_gain_ratio", "BBR pacing gain.", G, |c| {
            c.bbr.map(|b| b.pacing_gain_ratio())
        }),
        ("tcptail_connection_bbr_cwnd_gain_ratio", "BBR cwnd gain.", G, |c| {
            c.bbr.map(|b| b.cwnd_gain_ratio())
        }),
        ("tcptail_connection_unsent_bytes", "Bytes written but not yet sent (notsent).", G, |c| {
            c.info.as_ref()?.notsent_bytes.map(f64::from)
        }),
        ("tcptail_connection_send_queue_bytes", "Send queue: unacked + unsent bytes.", G, |c| {
            Some(f64::from(c.send_queue_bytes))
        }),
        ("tcptail_connection_receive_queue_bytes", "Receive queue: unread bytes.", G, |c| {
            Some(f64::from(c.recv_queue_bytes))
        }),
        (
            "tcptail_connection_send_queue_delay_seconds",
            "Estimated send-queue delay: unsent / rate.",
            G,
            |c| c.derived.send_queue_delay.map(|d| d.delay.as_secs_f64()),
        ),
        (
            "tcptail_connection_send_queue_delay_rate_bytes_per_second",
            "Rate the send-queue delay was computed with.",
            G,
            |c| c.derived.send_queue_delay.map(|d| d.rate_bytes_per_sec as f64),
        ),
        ("tcptail_connection_retransmitted_segments", "Segments retransmitted.", C, |c| {
            c.info.as_ref().map(|i| f64::from(i.total_retrans_segs))
        }),
        ("tcptail_connection_retransmitted_bytes", "Bytes retransmitted.", C, |c| {
            c.info.as_ref()?.bytes_retrans.map(|v| v as f64)
        }),
        ("tcptail_connection_sent_segments", "Segments sent.", C, |c| {
            c.info.as_ref()?.segs_out.map(f64::from)
        }),
        ("tcptail_connection_sent_bytes", "Bytes sent (including retransmissions).", C, |c| {
            c.info.as_ref()?.bytes_sent.map(|v| v as f64)
        }),
        ("tcptail_connection_rto", "Retransmission timeouts.", C, |c| {
            c.info.as_ref()?.total_rto.map(f64::from)
        }),
        ("tcptail_connection_rto_seconds", "Time spent in RTO recovery.", C, |c| {
            c.info.as_ref()?.total_rto_time_ms.map(|v| f64::from(v) / 1e3)
        }),
        ("tcptail_connection_busy_seconds", "Time with data in flight.", C, |c| {
            c.info.as_ref()?.busy_time_us.map(|v| v as f64 / 1e6)
        }),
        (
            "tcptail_connection_rwnd_limited_seconds",
            "Time limited by the receive window.",
            C,
            |c| c.info.as_ref()?.rwnd_limited_us.map(|v| v as f64 / 1e6),
        ),
        ("tcptail_connection_sndbuf_limited_seconds", "Time limited by the send buffer.", C, |c| {
            c.info.as_ref()?.sndbuf_limited_us.map(|v| v as f64 / 1e6)
        }),
        ("tcptail_connection_lost_segments", "Segments currently considered lost.", G, |c| {
            c.info.as_ref().map(|i| f64::from(i.lost_segs))
        }),
        ("tcptail_connection_unacked_segments", "Segments in flight.", G, |c| {
            c.info.as_ref().map(|i| f64::from(i.unacked_segs))
        }),
    ]
}

/// The number of series `c` produces when exported: one per family it has a value for, its
/// BBR phase (BBR sockets only) and its congestion-control info. A non-BBR socket has fewer
/// than a BBR one, a socket without `tcp_info` fewer still.
pub fn series_of(c: &Connection) -> u64 {
    let values = connection_families().iter().filter(|(_, _, _, get)| get(c).is_some()).count();
    values as u64 + u64::from(c.derived.bbr_phase.is_some()) + 1
}
