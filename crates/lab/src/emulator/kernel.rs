//! The TUN devices' own drop counters, read from the kernel at start and stop.
//!
//! Two losses happen outside the emulator's reach and would otherwise be silent:
//!
//! - **Before the read**: the sending namespace's stack hands a packet to the TUN device, whose
//!   transmit ring (the emulator's input) is full, so the kernel drops it (`tx_dropped`).
//! - **After the write**: the emulator writes a packet into the receiving namespace, whose
//!   input backlog is full, so the kernel drops it (`rx_dropped`).
//!
//! [`read`] takes both from `/proc/thread-self/net/dev` on a scratch thread that has entered
//! the device's namespace (`/proc/net` would follow the thread-group leader's namespace
//! instead). It only reads; it never changes a setting, and a device or namespace that cannot
//! be read just leaves the counters unknown.

use std::fs::File;
use std::io;
use std::os::fd::AsFd;

/// Drop counters of one network device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct DeviceDrops {
    /// Packets dropped on the receive path (`rx_dropped`).
    pub(crate) rx: u64,
    /// Packets dropped on the transmit path (`tx_dropped`).
    pub(crate) tx: u64,
}

impl DeviceDrops {
    /// Counts since `earlier` (zero where a counter went backwards).
    pub(crate) fn since(self, earlier: DeviceDrops) -> DeviceDrops {
        DeviceDrops {
            rx: self.rx.saturating_sub(earlier.rx),
            tx: self.tx.saturating_sub(earlier.tx),
        }
    }
}

/// The drop counters of `ifname` in the named namespace `netns`.
pub(crate) fn read(netns: &str, ifname: &str) -> io::Result<DeviceDrops> {
    let ns = File::open(std::path::Path::new(tcptail_netns::netns::NETNS_DIR).join(netns))?;
    let text = std::thread::scope(|s| {
        s.spawn(|| {
            tcptail_netns::sys::enter_netns(ns.as_fd())?;
            std::fs::read_to_string("/proc/thread-self/net/dev")
        })
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the counter thread panicked")))
    })?;
    parse(&text, ifname)
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{ifname} not in net/dev")))
}

/// Finds `ifname`'s line in a `/proc/net/dev` text: after `name:`, receive bytes, packets,
/// errs, drop, ... (8 fields), then transmit bytes, packets, errs, drop, ...
fn parse(text: &str, ifname: &str) -> Option<DeviceDrops> {
    text.lines().find_map(|line| {
        let (name, rest) = line.split_once(':')?;
        if name.trim() != ifname {
            return None;
        }
        let fields: Vec<u64> =
            rest.split_whitespace().map(|f| f.parse().ok()).collect::<Option<_>>()?;
        Some(DeviceDrops { rx: *fields.get(3)?, tx: *fields.get(11)? })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEV: &str = "\
Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0
tcptail-tun: 820215   15775    0    7    0     0          0         0 44345928   29581    0   12    0     0       0          0
";

    #[test]
    fn parses_the_named_device() {
        assert_eq!(parse(DEV, "tcptail-tun"), Some(DeviceDrops { rx: 7, tx: 12 }));
        assert_eq!(parse(DEV, "lo"), Some(DeviceDrops::default()));
        assert_eq!(parse(DEV, "eth0"), None);
        assert_eq!(parse("garbage: x y", "garbage"), None);
    }

    #[test]
    fn since_saturates() {
        let a = DeviceDrops { rx: 5, tx: 1 };
        assert_eq!(a.since(DeviceDrops { rx: 2, tx: 3 }), DeviceDrops { rx: 3, tx: 0 });
    }

    #[test]
    fn unknown_namespace_is_an_error() {
        assert!(read("tcptail-no-such-namespace", "tcptail-tun").is_err());
    }
}
