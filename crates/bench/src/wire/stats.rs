//! The payload of a StatsReply ([`ServerStats`]) and the client's reader for it.
//!
//! What a server reports is about one connection only, the one that asked, over one window
//! (since the handshake or the previous StatsRequest). Its size is bounded whatever the client
//! did: the service-time histogram has a fixed range and precision, so at most
//! [`MAX_SERVICE_BUCKETS`] buckets, and everything else is fixed-size; the whole reply fits
//! [`super::MAX_STATS_PAYLOAD`]. [`ServerStats::validate`] is what a client checks before it
//! believes a reply.

use std::io::{self, Read};

use serde::{Deserialize, Serialize};
use tcptail_sock::tcp_info::TcpInfo;

use super::{FrameError, FrameKind, WireError, from_json, read_header, read_payload};

/// The [`ServerStats`] layout this build writes and reads.
pub const STATS_VERSION: u32 = 1;
/// Significant decimal digits of the server's service-time histogram (1 % precision).
pub const SERVICE_SIGNIFICANT_DIGITS: u8 = 2;
/// The longest service time the histogram tells apart, ns (100 s); longer ones count here.
pub const MAX_SERVICE_NS: u64 = 100_000_000_000;
/// The most buckets a service-time histogram of [`SERVICE_SIGNIFICANT_DIGITS`] digits over
/// 1 ns..=[`MAX_SERVICE_NS`] has (3 968), rounded up.
pub const MAX_SERVICE_BUCKETS: usize = 4096;
/// The longest string field a reply may carry (congestion control and state names).
const MAX_NAME_LEN: usize = 64;

/// What the server did for one connection over one window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerStats {
    /// [`STATS_VERSION`] of the layout.
    pub version: u32,
    /// Length of the window, seconds (server clock).
    pub window_seconds: f64,
    /// Requests the connection answered in the window.
    pub requests: u64,
    /// User CPU time of the connection's thread in the window, µs.
    pub cpu_user_us: u64,
    /// System CPU time of the connection's thread in the window, µs.
    pub cpu_system_us: u64,
    /// Times the thread gave up the CPU to wait (a blocking receive that slept).
    pub voluntary_switches: u64,
    /// Times the thread was preempted.
    pub involuntary_switches: u64,
    /// Each answered request's service time, from the receive that completed it to the end of
    /// the send that completed its response: `[highest value of the bucket in ns, count]`,
    /// ascending, empty buckets left out; the counts add up to `requests`.
    pub service_ns: Vec<(u64, u64)>,
    /// The connection's socket as the server read it when answering; `None` if the kernel
    /// refused `TCP_INFO`.
    pub socket: Option<SocketState>,
}

/// A summary of the server socket's `tcp_info` (and its congestion control).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SocketState {
    /// `TCP_CONGESTION`.
    pub congestion: Option<String>,
    /// Congestion-avoidance state (`Open`, `Recovery`, `Loss`, ...).
    pub ca_state: String,
    /// Congestion window, segments.
    pub cwnd_segs: u32,
    /// Smoothed RTT, µs.
    pub rtt_us: u32,
    /// RTT variance, µs.
    pub rttvar_us: u32,
    /// Lowest RTT seen, µs.
    pub min_rtt_us: Option<u32>,
    /// Segments retransmitted over the connection's life.
    pub total_retrans_segs: u32,
    /// Bytes sent over the connection's life (retransmissions included).
    pub bytes_sent: Option<u64>,
    /// Bytes retransmitted.
    pub bytes_retrans: Option<u64>,
    /// Bytes the peer acknowledged.
    pub bytes_acked: Option<u64>,
    /// Bytes received.
    pub bytes_received: Option<u64>,
    /// The kernel's latest delivery-rate estimate, bytes/s.
    pub delivery_rate_bytes_per_sec: Option<u64>,
    /// The pacing rate, bytes/s.
    pub pacing_rate_bytes_per_sec: Option<u64>,
}

impl SocketState {
    /// The summary of `info`, with the socket's congestion control.
    pub fn from_tcp_info(info: &TcpInfo, congestion: Option<String>) -> SocketState {
        SocketState {
            congestion,
            ca_state: format!("{:?}", info.ca_state),
            cwnd_segs: info.snd_cwnd_segs,
            rtt_us: info.rtt_us,
            rttvar_us: info.rttvar_us,
            min_rtt_us: info.min_rtt_us,
            total_retrans_segs: info.total_retrans_segs,
            bytes_sent: info.bytes_sent,
            bytes_retrans: info.bytes_retrans,
            bytes_acked: info.bytes_acked,
            bytes_received: info.bytes_received,
            delivery_rate_bytes_per_sec: info.delivery_rate_bytes_per_sec,
            pacing_rate_bytes_per_sec: info.pacing_rate_bytes_per_sec,
        }
    }
}

impl ServerStats {
    /// Checks what a client relies on: the version, a finite window, at most
    /// [`MAX_SERVICE_BUCKETS`] ascending buckets within range whose counts add up to
    /// `requests`, short names.
    pub fn validate(&self) -> Result<(), WireError> {
        let bad = |m: String| Err(WireError::BadStats { message: m });
        if self.version != STATS_VERSION {
            return bad(format!(
                "stats version {} (this build reads version {STATS_VERSION})",
                self.version
            ));
        }
        if !self.window_seconds.is_finite() || self.window_seconds < 0.0 {
            return bad(format!("window of {} s", self.window_seconds));
        }
        if self.service_ns.len() > MAX_SERVICE_BUCKETS {
            return bad(format!(
                "{} service-time buckets (at most {MAX_SERVICE_BUCKETS})",
                self.service_ns.len()
            ));
        }
        let mut previous = 0u64;
        let mut total = 0u64;
        for &(value, count) in &self.service_ns {
            if value <= previous || value > MAX_SERVICE_NS {
                return bad(format!(
                    "service-time bucket {value} ns is out of order or outside 1..={MAX_SERVICE_NS}"
                ));
            }
            previous = value;
            total = match total.checked_add(count) {
                Some(t) => t,
                None => return bad("service-time counts overflow".into()),
            };
        }
        if total != self.requests {
            return bad(format!(
                "service-time counts add up to {total}, not to the {} requests answered",
                self.requests
            ));
        }
        if let Some(s) = &self.socket {
            let long = |v: &str| v.len() > MAX_NAME_LEN;
            if long(&s.ca_state) || s.congestion.as_deref().is_some_and(long) {
                return bad(format!("a name longer than {MAX_NAME_LEN} bytes"));
            }
        }
        Ok(())
    }

    /// The CPU time of the window, µs.
    pub fn cpu_us(&self) -> u64 {
        self.cpu_user_us.saturating_add(self.cpu_system_us)
    }
}

/// Client side: reads the answer to a StatsRequest. Up to `outstanding` Responses to requests
/// the client gave up on may come first; they are skipped (their payloads read and dropped,
/// never buffered). An Error frame is [`FrameError::Peer`] with the server's reason.
pub fn read_stats_reply<R: Read + ?Sized>(
    r: &mut R,
    mut outstanding: u64,
) -> Result<ServerStats, FrameError> {
    loop {
        let header = read_header(r)?;
        match header.kind {
            FrameKind::Response if outstanding > 0 => {
                outstanding -= 1;
                let want = header.payload_len() as u64;
                if io::copy(&mut r.take(want), &mut io::sink())? < want {
                    return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
                }
            }
            FrameKind::StatsReply | FrameKind::Error => {
                let mut payload = Vec::new();
                read_payload(r, &header, &mut payload)?;
                if header.kind == FrameKind::Error {
                    return Err(FrameError::Peer(String::from_utf8_lossy(&payload).into_owned()));
                }
                let stats: ServerStats = from_json(FrameKind::StatsReply, &payload)?;
                stats.validate()?;
                return Ok(stats);
            }
            found => {
                return Err(
                    WireError::UnexpectedKind { found, expected: FrameKind::StatsReply }.into()
                );
            }
        }
    }
}

/// What a client reports when a server did not answer a StatsRequest: `server_version` from
/// its Welcome, `answer` what it said instead (its Error frame, or the failure).
pub fn stats_unsupported(server_version: &str, answer: &str) -> String {
    format!(
        "server does not report stats: upgrade it (server {server_version} answered the stats \
         request with: {answer})"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{self, HEADER_LEN, Header};
    use proptest::prelude::*;

    fn valid_stats() -> impl Strategy<Value = ServerStats> {
        (
            prop::collection::btree_map(1u64..=MAX_SERVICE_NS, 0u64..1 << 40, 0..300),
            0.0f64..1e7,
            any::<[u64; 4]>(),
            prop::option::of(any::<[u32; 5]>()),
        )
            .prop_map(|(buckets, window_seconds, [user, system, vol, invol], socket)| {
                let service_ns: Vec<(u64, u64)> = buckets.into_iter().collect();
                ServerStats {
                    version: STATS_VERSION,
                    window_seconds,
                    requests: service_ns.iter().map(|b| b.1).sum(),
                    cpu_user_us: user,
                    cpu_system_us: system,
                    voluntary_switches: vol,
                    involuntary_switches: invol,
                    service_ns,
                    socket: socket.map(|[cwnd, rtt, var, retrans, min]| SocketState {
                        congestion: Some("bbr".into()),
                        ca_state: "Open".into(),
                        cwnd_segs: cwnd,
                        rtt_us: rtt,
                        rttvar_us: var,
                        min_rtt_us: Some(min),
                        total_retrans_segs: retrans,
                        bytes_sent: Some(u64::from(cwnd) << 20),
                        bytes_retrans: None,
                        bytes_acked: Some(7),
                        bytes_received: None,
                        delivery_rate_bytes_per_sec: Some(u64::MAX),
                        pacing_rate_bytes_per_sec: None,
                    }),
                }
            })
    }

    proptest! {
        #[test]
        fn any_valid_reply_reads_back(stats in valid_stats(), late in 0u64..3) {
            prop_assert_eq!(stats.validate(), Ok(()));
            let mut bytes = Vec::new();
            for seq in 0..late {
                let mut response = vec![0u8; 30];
                wire::encode_response(&mut response, seq);
                bytes.extend(response);
            }
            bytes.extend(wire::stats_reply_frame(&stats).unwrap());
            let again = read_stats_reply(&mut &bytes[..], late).unwrap();
            prop_assert!((again.window_seconds - stats.window_seconds).abs() <= stats.window_seconds * 1e-15);
            prop_assert_eq!(ServerStats { window_seconds: stats.window_seconds, ..again }, stats);
        }

        #[test]
        fn a_damaged_reply_is_an_error_not_a_panic(
            stats in valid_stats(),
            flips in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
            cut in any::<prop::sample::Index>(),
        ) {
            let mut bytes = wire::stats_reply_frame(&stats).unwrap();
            for (at, byte) in flips {
                let i = at.index(bytes.len());
                bytes[i] ^= byte;
            }
            let end = cut.index(bytes.len() + 1);
            if let Ok(read) = read_stats_reply(&mut &bytes[..end], 1) {
                prop_assert_eq!(read.validate(), Ok(()));
            }
        }

        #[test]
        fn arbitrary_bytes_are_an_error_not_a_panic(
            data in prop::collection::vec(any::<u8>(), 0..400),
            late in 0u64..3,
        ) {
            let _ = read_stats_reply(&mut &data[..], late);
        }
    }

    fn stats(service_ns: Vec<(u64, u64)>) -> ServerStats {
        ServerStats {
            version: STATS_VERSION,
            window_seconds: 1.5,
            requests: service_ns.iter().map(|b| b.1).sum(),
            cpu_user_us: 10,
            cpu_system_us: 20,
            voluntary_switches: 3,
            involuntary_switches: 0,
            service_ns,
            socket: None,
        }
    }

    fn reply(s: &ServerStats) -> Vec<u8> {
        let mut out = Vec::new();
        let json = serde_json::to_vec(s).unwrap();
        wire::write_frame(&mut out, FrameKind::StatsReply, 0, &json).unwrap();
        out
    }

    #[test]
    fn a_reply_after_late_responses_reads_back() {
        let s = stats(vec![(1000, 2), (2000, 1)]);
        let mut bytes = vec![0u8; 100];
        wire::encode_response(&mut bytes, 4);
        bytes.extend(reply(&s));
        assert_eq!(read_stats_reply(&mut &bytes[..], 1).unwrap(), s);
        // More responses than the client has outstanding is a protocol error.
        let err = read_stats_reply(&mut &bytes[..], 0).unwrap_err();
        assert!(err.to_string().contains("unexpected Response frame"), "{err}");
    }

    #[test]
    fn an_error_frame_is_the_servers_reason() {
        let mut bytes = Vec::new();
        wire::write_error(&mut bytes, "unknown frame kind 6").unwrap();
        match read_stats_reply(&mut &bytes[..], 0) {
            Err(FrameError::Peer(reason)) => assert_eq!(reason, "unknown frame kind 6"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn replies_that_do_not_add_up_are_refused() {
        let mut s = stats(vec![(1000, 2)]);
        s.requests = 3;
        assert!(s.validate().unwrap_err().to_string().contains("add up to 2"));
        let s = stats(vec![(2000, 1), (1000, 1)]);
        assert!(s.validate().unwrap_err().to_string().contains("out of order"));
        let s = stats(vec![(MAX_SERVICE_NS + 1, 1)]);
        assert!(s.validate().is_err());
        let mut s = stats(vec![]);
        s.version = 2;
        let err = read_stats_reply(&mut &reply(&s)[..], 0).unwrap_err().to_string();
        assert!(err.contains("stats version 2"), "{err}");
    }

    #[test]
    fn a_stats_request_is_a_bare_header() {
        let h = Header { kind: FrameKind::StatsRequest, frame_len: 25, reply_len: 0, seq: 0 };
        let mut b = [0u8; HEADER_LEN];
        h.encode(&mut b);
        assert!(matches!(Header::decode(&b), Err(WireError::PayloadTooLarge { .. })));
    }
}
