//! Per-namespace TCP buffer limits for a path, and the "is the server listening yet" check.
//!
//! A TCP sender can only fill a path whose window fits its socket buffers: with 25 ms one-way
//! delay the default `tcp_wmem` max (4 MB) capped throughput at 0.54 Gbit/s (emulation.md).
//! [`tcp_buffers`] raises the *max* of `net.ipv4.tcp_rmem` and `tcp_wmem` in the lab's client
//! and server namespaces to at least twice what the path can hold in flight (its BDP plus its
//! bottleneck buffer, in the larger direction), and never lowers anything: min and default stay
//! as the namespace had them, and a max already larger is kept. The factor two covers the
//! receive buffer's overhead (`tcp_adv_win_scale`) and a full window of retransmissions.

use std::time::Duration;

use tcptail_emu::{DirectionSpec, PathSpec, QueueLimit};
use tcptail_units::Bdp;

/// Bytes per packet assumed when a buffer is given in packets (the lab's MTU).
const PACKET_BYTES: u64 = 1500;
/// The kernel stores these limits as `int`.
const KERNEL_MAX: u64 = i32::MAX as u64;
/// Linux's defaults, used only if the namespace's current value cannot be parsed.
const FALLBACK_RMEM: [u64; 3] = [4096, 131_072, 6_291_456];
const FALLBACK_WMEM: [u64; 3] = [4096, 16_384, 4_194_304];

/// The TCP buffer limits a lab run writes into its client and server namespaces.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct TcpBuffers {
    /// Bytes the path holds in flight in its larger direction: rate x base RTT plus the
    /// bottleneck buffer.
    pub path_window_bytes: u64,
    /// Twice that: the smallest max the lab accepts.
    pub wanted_max_bytes: u64,
    /// New `net.ipv4.tcp_rmem` ("min default max").
    pub tcp_rmem: String,
    /// New `net.ipv4.tcp_wmem` ("min default max").
    pub tcp_wmem: String,
}

fn bytes_in_buffer(dir: &DirectionSpec) -> u64 {
    match dir.queue.limit {
        QueueLimit::Bytes(b) => b.bytes(),
        QueueLimit::Packets(n) => n.saturating_mul(PACKET_BYTES),
        QueueLimit::Time(d) => Bdp { rate: dir.rate.mean(), rtt: d }.bytes().bytes(),
    }
}

/// The path's window in its larger direction: rate x `rtt` plus the bottleneck buffer.
pub fn path_window(path: &PathSpec, rtt: Duration) -> u64 {
    [&path.up, &path.down]
        .iter()
        .map(|d| {
            Bdp { rate: d.rate.mean(), rtt }.bytes().bytes().saturating_add(bytes_in_buffer(d))
        })
        .max()
        .unwrap_or(0)
}

fn raise(current: &str, fallback: [u64; 3], wanted_max: u64) -> String {
    let parsed: Vec<u64> = current.split_whitespace().filter_map(|v| v.parse().ok()).collect();
    let [min, default, max] = <[u64; 3]>::try_from(parsed).unwrap_or(fallback);
    format!("{min} {default} {}", max.max(wanted_max).min(KERNEL_MAX))
}

/// The limits for `path`, given the namespace's current `tcp_rmem` and `tcp_wmem` values.
pub fn tcp_buffers(path: &PathSpec, current_rmem: &str, current_wmem: &str) -> TcpBuffers {
    let rtt = path.up.delay + path.down.delay;
    let window = path_window(path, rtt);
    let wanted = window.saturating_mul(2).min(KERNEL_MAX);
    TcpBuffers {
        path_window_bytes: window,
        wanted_max_bytes: wanted,
        tcp_rmem: raise(current_rmem, FALLBACK_RMEM, wanted),
        tcp_wmem: raise(current_wmem, FALLBACK_WMEM, wanted),
    }
}

/// Whether `/proc/net/tcp` or `/proc/net/tcp6` text lists a socket listening on `port`
/// (any port, with `None`).
pub(crate) fn listening(proc_net_tcp: &str, port: Option<u16>) -> bool {
    proc_net_tcp.lines().skip(1).any(|line| {
        let mut fields = line.split_whitespace();
        let local = fields.nth(1);
        let state = fields.nth(1);
        let Some((_, port_hex)) = local.and_then(|l| l.rsplit_once(':')) else {
            return false;
        };
        state == Some("0A")
            && port.is_none_or(|p| u16::from_str_radix(port_hex, 16).is_ok_and(|lp| lp == p))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcptail_emu::{Discipline, QueueSpec, Rate};
    use tcptail_units::{BitRate, ByteSize};

    fn dir(mbit: u64, delay_ms: u64, limit: QueueLimit) -> DirectionSpec {
        DirectionSpec {
            rate: Rate::Constant(BitRate(mbit * 1_000_000)),
            delay: Duration::from_millis(delay_ms),
            jitter: None,
            loss: None,
            queue: QueueSpec { limit, discipline: Discipline::Fifo },
            ecn_blackhole: None,
            reorder: None,
        }
    }

    #[test]
    fn raises_only_the_max_and_never_lowers_it() {
        let path = PathSpec {
            up: dir(30, 5, QueueLimit::Bytes(ByteSize(375_000))),
            down: dir(30, 5, QueueLimit::Packets(10)),
        };
        let b = tcp_buffers(&path, "4096\t131072\t33554432", "4096 16384 4194304");
        assert_eq!(b.path_window_bytes, 37_500 + 375_000);
        assert_eq!(b.wanted_max_bytes, 825_000);
        assert_eq!(b.tcp_rmem, "4096 131072 33554432");
        assert_eq!(b.tcp_wmem, "4096 16384 4194304");

        let fat = PathSpec {
            up: dir(10_000, 25, QueueLimit::Time(Duration::from_millis(10))),
            down: dir(1, 25, QueueLimit::Packets(10)),
        };
        let b = tcp_buffers(&fat, "4096 131072 6291456", "garbage");
        // 10 Gbit/s x 50 ms = 62.5 MB, + 10 ms of queue = 12.5 MB.
        assert_eq!(b.path_window_bytes, 62_500_000 + 12_500_000);
        assert_eq!(b.tcp_rmem, "4096 131072 150000000");
        assert_eq!(b.tcp_wmem, "4096 16384 150000000");
    }

    #[test]
    fn finds_listeners_in_proc_net_tcp() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 00000000:1451 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n\
   1: 0100007F:0016 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2 1\n";
        assert!(listening(text, None));
        assert!(listening(text, Some(5201)));
        assert!(!listening(text, Some(22)), "port 22 is an established socket, not a listener");
        assert!(!listening("header only\n", None));
    }
}
