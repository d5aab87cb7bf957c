//! Connections that closed: what each one lived through, from the kernel's destroy
//! notifications or, where those are not available, from the last poll that saw it.
//!
//! When a full TCP socket is freed the kernel multicasts its final `inet_diag_msg` with
//! `tcp_info` to sock_diag listeners of the `SKNLGRP_INET_TCP_DESTROY` and
//! `SKNLGRP_INET6_TCP_DESTROY` groups in the socket's namespace ([`DestroyListener`]; joining
//! needs CAP_NET_ADMIN there). That happens once per socket: after both sides closed (for the
//! side that closed first, when it enters TIME_WAIT, whose mini-socket is not a full socket),
//! after a reset, after an abort. The message has no congestion-control name and no BBR or
//! memory attributes; the poller that knew the connection adds what it saw (first seen, the
//! largest smoothed RTT, the congestion control).
//!
//! A [`ClosedSummary`] is the same whichever way the close was learnt ([`CloseSeen`]).

use std::net::SocketAddr;
use std::time::Duration;

use serde::Serialize;
use tcptail_sock::tcp_info::TcpState;

use crate::dump::DiagError;
use crate::record::{Identity, Values};
use crate::sys::NetlinkSocket;
use crate::wire::{self, Socket};

/// `SKNLGRP_INET_TCP_DESTROY` (linux/sock_diag.h).
const GROUP_TCP4_DESTROY: u32 = 1;
/// `SKNLGRP_INET6_TCP_DESTROY`.
const GROUP_TCP6_DESTROY: u32 = 3;

/// A subscription to the kernel's TCP socket destroy notifications of one namespace.
#[derive(Debug)]
pub struct DestroyListener {
    sock: NetlinkSocket,
    buf: Vec<u8>,
    /// Times the socket's buffer overflowed (ENOBUFS): notifications were lost.
    pub overruns: u64,
}

impl DestroyListener {
    fn with_socket(sock: NetlinkSocket) -> Result<DestroyListener, DiagError> {
        for group in [GROUP_TCP4_DESTROY, GROUP_TCP6_DESTROY] {
            sock.join_group(group).map_err(DiagError::Open)?;
        }
        Ok(DestroyListener { sock, buf: vec![0; 64 * 1024], overruns: 0 })
    }

    /// Listens in the current network namespace.
    pub fn new() -> Result<DestroyListener, DiagError> {
        DestroyListener::with_socket(NetlinkSocket::open().map_err(DiagError::Open)?)
    }

    /// Listens in the named network namespace (`/run/netns/NAME`).
    pub fn in_netns(name: &str) -> Result<DestroyListener, DiagError> {
        let path = std::path::PathBuf::from("/run/netns").join(name);
        let sock = NetlinkSocket::open_in_netns(&path)
            .map_err(|source| DiagError::Netns { path: path.clone(), source })?;
        DestroyListener::with_socket(sock)
    }

    /// Hands every notification queued now to `each`, without waiting; returns how many.
    pub fn drain(&mut self, mut each: impl FnMut(&Socket<'_>)) -> Result<usize, DiagError> {
        let mut n = 0;
        loop {
            let got = match self.sock.recv_nowait(&mut self.buf) {
                Ok(Some(got)) => got,
                Ok(None) => return Ok(n),
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    self.overruns += 1;
                    continue;
                }
                Err(e) => return Err(DiagError::Io(e)),
            };
            for frame in wire::raw_frames(&self.buf[..got]).flatten() {
                if frame.is_socket() {
                    each(&wire::parse_socket(frame.payload)?);
                    n += 1;
                }
            }
        }
    }
}

/// How a close was learnt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CloseSeen {
    /// The kernel's destroy notification: the final state.
    Destroyed,
    /// A poll no longer found it: the state of the last poll that did.
    Vanished,
}

impl CloseSeen {
    /// `destroyed` or `vanished`.
    pub fn as_str(self) -> &'static str {
        match self {
            CloseSeen::Destroyed => "destroyed",
            CloseSeen::Vanished => "vanished",
        }
    }

    /// The byte a recording stores.
    pub fn to_byte(self) -> u8 {
        match self {
            CloseSeen::Destroyed => 1,
            CloseSeen::Vanished => 2,
        }
    }

    /// The inverse of [`CloseSeen::to_byte`].
    pub fn from_byte(b: u8) -> Option<CloseSeen> {
        match b {
            1 => Some(CloseSeen::Destroyed),
            2 => Some(CloseSeen::Vanished),
            _ => None,
        }
    }
}

/// What a closed connection lived through.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ClosedSummary {
    /// Kernel socket cookie.
    pub cookie: u64,
    /// Local address and port.
    pub local: SocketAddr,
    /// Remote address and port.
    pub remote: SocketAddr,
    /// Congestion control, as the polls saw it.
    pub cc: Option<String>,
    /// How the close was learnt.
    pub seen: CloseSeen,
    /// From the first poll that saw it to the close (`None`: no poll saw it).
    pub lifetime: Option<Duration>,
    /// TCP state at the end (`CLOSE`, `TIME_WAIT`... as the kernel reported it).
    pub final_state: &'static str,
    /// Bytes acknowledged by the peer.
    pub bytes_acked: Option<u64>,
    /// Bytes received.
    pub bytes_received: Option<u64>,
    /// Bytes retransmitted.
    pub bytes_retrans: Option<u64>,
    /// Segments retransmitted.
    pub total_retrans_segs: Option<u32>,
    /// Minimum RTT the kernel measured, µs.
    pub min_rtt_us: Option<u32>,
    /// Largest smoothed RTT any poll (or the final state) showed, µs.
    pub max_rtt_us: Option<u32>,
    /// Time limited by the receiver's window, µs.
    pub rwnd_limited_us: Option<u64>,
    /// Time limited by the send buffer, µs.
    pub sndbuf_limited_us: Option<u64>,
    /// Time with data in flight, µs.
    pub busy_time_us: Option<u64>,
}

impl ClosedSummary {
    /// The summary of a connection whose final recorded row is `v`.
    pub fn new(
        id: &Identity,
        v: &Values,
        seen: CloseSeen,
        lifetime: Option<Duration>,
        max_rtt_us: Option<u32>,
    ) -> ClosedSummary {
        let c = id.connection(v);
        let info = c.info.as_ref();
        let final_rtt = info.map(|i| i.rtt_us).filter(|&r| r > 0);
        ClosedSummary {
            cookie: id.cookie,
            local: c.local,
            remote: c.remote,
            cc: id.cc.clone(),
            seen,
            lifetime,
            final_state: c.state,
            bytes_acked: info.and_then(|i| i.bytes_acked),
            bytes_received: info.and_then(|i| i.bytes_received),
            bytes_retrans: info.and_then(|i| i.bytes_retrans),
            total_retrans_segs: info.map(|i| i.total_retrans_segs),
            min_rtt_us: info.and_then(|i| i.min_rtt_us).filter(|&r| r != u32::MAX && r > 0),
            max_rtt_us: max_rtt_us.max(final_rtt),
            rwnd_limited_us: info.and_then(|i| i.rwnd_limited_us),
            sndbuf_limited_us: info.and_then(|i| i.sndbuf_limited_us),
            busy_time_us: info.and_then(|i| i.busy_time_us),
        }
    }

    /// One line for a terminal.
    pub fn line(&self) -> String {
        let opt = |v: Option<u64>| v.map_or("-".into(), |v| v.to_string());
        let us = |v: Option<u32>| v.map_or("-".into(), |v| format!("{:.3}ms", f64::from(v) / 1e3));
        format!(
            "closed {} -> {} cc={} seen={} lifetime={} final={} bytes_acked={} \
             bytes_received={} retrans_segs={} bytes_retrans={} min_rtt={} max_rtt={} \
             busy_us={} rwnd_limited_us={} sndbuf_limited_us={}",
            self.local,
            self.remote,
            self.cc.as_deref().unwrap_or("-"),
            self.seen.as_str(),
            self.lifetime.map_or("-".into(), |d| format!("{:.3}s", d.as_secs_f64())),
            self.final_state,
            opt(self.bytes_acked),
            opt(self.bytes_received),
            opt(self.total_retrans_segs.map(u64::from)),
            opt(self.bytes_retrans),
            us(self.min_rtt_us),
            us(self.max_rtt_us),
            opt(self.busy_time_us),
            opt(self.rwnd_limited_us),
            opt(self.sndbuf_limited_us),
        )
    }
}

/// Whether a destroyed socket nobody polled was a connection's end: a listener's, or a
/// socket that never connected, has no remote port and sent nothing (an aborted connection
/// has no remote port either, tcp_disconnect clears it, but it sent segments).
pub fn never_connected(s: &Socket<'_>) -> bool {
    s.id.dport == 0 && s.info.as_ref().and_then(|i| i.segs_out).unwrap_or(0) == 0
}

/// What the watcher knows of a live connection.
#[derive(Debug)]
struct Known {
    first_ns: u64,
    seen_ns: u64,
    cc: Option<String>,
}

/// How long a connection no tracking dump found is remembered (its destroy notification may
/// come after FIN_WAIT2 or a long close).
const FORGET_AFTER_NS: u64 = 120_000_000_000;

/// Watches one namespace's closes for a long-running process (the exporter): the destroy
/// notifications, plus a header-only dump every `track_every` that learns when each selected
/// connection was first seen and its congestion control (a lifetime's resolution is that
/// period; a connection that lived between two dumps has no lifetime).
#[derive(Debug)]
pub struct CloseWatcher {
    listener: DestroyListener,
    dumper: crate::Dumper,
    req: crate::DumpRequest,
    known: std::collections::HashMap<u64, Known>,
    track_every_ns: u64,
    last_track_ns: Option<u64>,
}

impl CloseWatcher {
    /// A watcher of the sockets `filter` selects (all without one).
    pub fn new(
        listener: DestroyListener,
        dumper: crate::Dumper,
        filter: Option<crate::Filter>,
        track_every: Duration,
    ) -> CloseWatcher {
        let req = crate::DumpRequest {
            states: wire::ALL_STATES,
            filter,
            attrs: wire::Attrs { cong: true, ..wire::Attrs::NONE },
            ..crate::DumpRequest::default()
        };
        CloseWatcher {
            listener,
            dumper,
            req,
            known: std::collections::HashMap::new(),
            track_every_ns: track_every.as_nanos() as u64,
            last_track_ns: None,
        }
    }

    /// Notifications lost to a full socket buffer so far.
    pub fn lost(&self) -> u64 {
        self.listener.overruns
    }

    /// Connections tracked (one entry per live selected connection, plus recently gone ones).
    pub fn tracked(&self) -> usize {
        self.known.len()
    }

    /// A tracking dump when one is due, then every queued notification, each close handed to
    /// `closed`.
    pub fn step(&mut self, mut closed: impl FnMut(ClosedSummary)) -> Result<(), DiagError> {
        let now = crate::sys::monotonic_ns();
        if self.last_track_ns.is_none_or(|t| now.saturating_sub(t) >= self.track_every_ns) {
            self.last_track_ns = Some(now);
            let known = &mut self.known;
            self.dumper.dump(&self.req, |s| {
                // Listeners and TIME_WAIT mini-sockets are not connections to time.
                if s.id.dport == 0 || TcpState::from_raw(s.state) == TcpState::TimeWait {
                    return;
                }
                let k = known.entry(s.id.cookie).or_insert(Known {
                    first_ns: now,
                    seen_ns: now,
                    cc: None,
                });
                k.seen_ns = now;
                if k.cc.as_deref() != s.cong {
                    k.cc = s.cong.map(str::to_owned);
                }
            })?;
            self.known.retain(|_, k| now.saturating_sub(k.seen_ns) < FORGET_AFTER_NS);
        }
        let (filter, known) = (&self.req.filter, &mut self.known);
        self.listener.drain(|s| {
            // A tracked connection was selected when it lived; an aborted one has lost its
            // addresses by now (tcp_disconnect clears them), so an untracked one that was
            // aborted between two tracking dumps cannot be matched and is not counted.
            let k = known.remove(&s.id.cookie);
            let selected = filter.as_ref().is_none_or(|f| f.matches(&s.id));
            if k.is_none() && (!selected || never_connected(s)) {
                return;
            }
            let mut id = Identity::of(s);
            let mut values = Values::default();
            values.fill(s);
            let lifetime = k.as_ref().map(|k| Duration::from_nanos(now.saturating_sub(k.first_ns)));
            if let Some(k) = k {
                id.cc = k.cc;
            }
            closed(ClosedSummary::new(&id, &values, CloseSeen::Destroyed, lifetime, None));
        })?;
        Ok(())
    }
}
