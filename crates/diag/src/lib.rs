//! Reading TCP connections from the kernel with sock_diag, selecting the ones that matter and
//! exposing them as bounded Prometheus metrics.
//!
//! - [`wire`]: `SOCK_DIAG_BY_FAMILY` requests and reply parsing (`inet_diag_msg`, attributes);
//!   `tcp_info` and `tcp_bbr_info` are parsed by `tcptail_sock`, never here.
//! - [`filter`]: port/address conditions compiled to `INET_DIAG_REQ_BYTECODE`, so the kernel
//!   only serialises matching sockets, and evaluated identically in user space.
//! - [`dump`]: the [`Dumper`], a sock_diag client for the current or a named network namespace.
//! - [`bpf`]: the [`bpf::IterDumper`], the same dump from a BPF socket iterator (cheaper per
//!   socket), with sock_diag as the fallback where it cannot run.
//! - [`source`]: sock_diag or the BPF iterator behind one [`source::Dump`] trait, `auto`
//!   falling back to sock_diag where the iterator cannot run.
//! - [`selector`]: the selector TOML file (named port/address rules) turned into filters.
//! - [`closed`]: closed connections: the kernel's destroy notifications and the summary of
//!   what each connection lived through.
//! - [`record`]: the flight recorder (change-only records of every selected connection in
//!   compressed, rotating files) and its replay.
//! - [`metrics`]: the scrape-time collector: per-connection series for selected connections
//!   under a hard cap, per-group aggregates for everything else, text exposition.
//! - [`http`]: the exporter's HTTP endpoint (hyper on a small tokio runtime): bounded
//!   connections, read/write timeouts, header size, TLS and basic auth from a node_exporter-style
//!   web config, gzip.
//! - [`Connection`]: an owned view of one socket with derived values (BBR phase, estimated
//!   send-queue delay, limited-time fractions), serialisable for `tcptail top --json`.
//!
//! Invariants: parsing never panics on any input; everything except [`dump`], [`sys`], [`http`]
//! and the recorder's files is pure (no clock, no sockets), so it is tested on captured replies.
//! All `libc` calls are in [`sys`]. A field the kernel does not report is absent, never zero.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod bpf;
pub mod closed;
pub mod dump;
pub mod filter;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod http;
pub mod metrics;
pub mod record;
pub mod selector;
pub mod source;
pub mod sys;
pub mod wire;

use std::net::{IpAddr, SocketAddr};

use serde::Serialize;
use tcptail_sock::cc_info::{BbrInfo, BbrPhase};
use tcptail_sock::tcp_info::{SendQueueDelay, TcpInfo, TcpState};

pub use dump::{DiagError, DumpRequest, DumpStats, Dumper};
pub use filter::{Filter, Prefix, Side};
pub use selector::{Selector, SelectorError, Selectors};
pub use wire::{SkMemInfo, SockId, Socket};

/// Derived values of one connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Derived {
    /// Estimated send-queue delay with its inputs (`TcpInfo::send_queue_delay`).
    pub send_queue_delay: Option<SendQueueDelay>,
    /// BBR's phase inferred from its gains.
    pub bbr_phase: Option<BbrPhase>,
    /// Fraction of busy time limited by the receiver's window.
    pub rwnd_limited_fraction: Option<f64>,
    /// Fraction of busy time limited by the send buffer.
    pub sndbuf_limited_fraction: Option<f64>,
    /// Fraction of busy time limited by neither (cwnd, pacing or the network).
    pub busy_unlimited_fraction: Option<f64>,
}

impl Derived {
    /// Computes the derived values from a socket's `tcp_info` and BBR info.
    pub fn compute(info: Option<&TcpInfo>, bbr: Option<&BbrInfo>) -> Derived {
        let frac = |part: Option<u64>| -> Option<f64> {
            let busy = info?.busy_time_us?;
            let part = part?;
            (busy > 0).then(|| (part as f64 / busy as f64).min(1.0))
        };
        let rwnd = frac(info.and_then(|i| i.rwnd_limited_us));
        let sndbuf = frac(info.and_then(|i| i.sndbuf_limited_us));
        Derived {
            send_queue_delay: info.and_then(TcpInfo::send_queue_delay),
            bbr_phase: bbr.map(BbrInfo::phase),
            rwnd_limited_fraction: rwnd,
            sndbuf_limited_fraction: sndbuf,
            busy_unlimited_fraction: rwnd.zip(sndbuf).map(|(r, s)| (1.0 - r - s).max(0.0)),
        }
    }
}

/// An owned snapshot of one TCP connection.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Connection {
    /// Local address and port.
    pub local: SocketAddr,
    /// Remote address and port.
    pub remote: SocketAddr,
    /// TCP state name (`established`, ...).
    pub state: &'static str,
    /// Kernel socket cookie.
    pub cookie: u64,
    /// Congestion control.
    pub cc: Option<String>,
    /// Receive-queue bytes (unread).
    pub recv_queue_bytes: u32,
    /// Send-queue bytes (unacked + unsent).
    pub send_queue_bytes: u32,
    /// `tcp_info`, if reported.
    pub info: Option<TcpInfo>,
    /// BBR model, for BBR sockets.
    pub bbr: Option<BbrInfo>,
    /// Socket memory.
    pub skmem: Option<SkMemInfo>,
    /// Derived values.
    pub derived: Derived,
}

impl Connection {
    /// Copies what a dump returned.
    pub fn from_socket(s: &Socket<'_>) -> Connection {
        Connection {
            local: SocketAddr::new(unmap(s.id.src), s.id.sport),
            remote: SocketAddr::new(unmap(s.id.dst), s.id.dport),
            state: TcpState::from_raw(s.state).name(),
            cookie: s.id.cookie,
            cc: s.cong.map(str::to_owned),
            recv_queue_bytes: s.rqueue,
            send_queue_bytes: s.wqueue,
            info: s.info.clone(),
            bbr: s.bbr,
            skmem: s.skmem,
            derived: Derived::compute(s.info.as_ref(), s.bbr.as_ref()),
        }
    }

    /// Estimated send-queue delay in seconds (0 when unknown), for sorting.
    pub fn queue_delay_secs(&self) -> f64 {
        self.derived.send_queue_delay.map_or(0.0, |d| d.delay.as_secs_f64())
    }

    /// Smoothed RTT in seconds (0 when unknown).
    pub fn rtt_secs(&self) -> f64 {
        self.info.as_ref().map_or(0.0, |i| f64::from(i.rtt_us) / 1e6)
    }

    /// Total retransmitted segments.
    pub fn retrans(&self) -> u32 {
        self.info.as_ref().map_or(0, |i| i.total_retrans_segs)
    }
}

/// An IPv4-mapped IPv6 address as IPv4, any other address unchanged.
pub fn unmap(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        IpAddr::V4(_) => ip,
    }
}

/// CPU time used by this process so far (user + system).
pub fn process_cpu_time() -> std::time::Duration {
    sys::process_cpu_time()
}
