//! Per-namespace network sysctls, written and **read back**.
//!
//! `net.*` sysctls (`net.ipv4.tcp_rmem`, `tcp_congestion_control`, `ip_forward`, ...) are
//! per network namespace, and `/proc/sys/net/...` resolves against the namespace of the
//! *thread that opens the file* (the kernel's `net_ctl_header_lookup` uses `current`'s
//! namespace, and cached dentries are re-validated per caller). So [`Netns::set_sysctl`] opens
//! the file from a scratch thread that has entered the namespace: no `ip netns exec sysctl`
//! process, and the host's value is never touched (the tests check the host's value before and
//! after, and cross-check the result with `ip netns exec NAME cat`).
//!
//! Only `net.` keys are accepted: writing `kernel.*` or `vm.*` from inside a network namespace
//! would change the host. Values are compared whitespace-normalised (the kernel prints
//! `tcp_rmem` tab-separated), and a write that reads back differently is an error
//! ([`Error::SysctlNotApplied`]).

use std::fs;
use std::io;
use std::path::PathBuf;

use crate::{Error, Netns};

/// The per-namespace sysctls the lab sets for every run and records in its results.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NetSysctl {
    /// `net.ipv4.tcp_rmem`: "min default max" receive buffer bytes.
    TcpRmem,
    /// `net.ipv4.tcp_wmem`: "min default max" send buffer bytes.
    TcpWmem,
    /// `net.ipv4.tcp_slow_start_after_idle`: 0 or 1.
    TcpSlowStartAfterIdle,
    /// `net.ipv4.tcp_congestion_control`: the default algorithm for new sockets.
    TcpCongestionControl,
    /// `net.ipv4.ip_forward`: 1 in a router namespace only.
    IpForward,
}

impl NetSysctl {
    /// Every variant, in a stable order (for recording a namespace's settings).
    pub const ALL: [NetSysctl; 5] = [
        NetSysctl::TcpRmem,
        NetSysctl::TcpWmem,
        NetSysctl::TcpSlowStartAfterIdle,
        NetSysctl::TcpCongestionControl,
        NetSysctl::IpForward,
    ];

    /// The dotted key, e.g. `net.ipv4.tcp_rmem`.
    pub fn key(self) -> &'static str {
        match self {
            NetSysctl::TcpRmem => "net.ipv4.tcp_rmem",
            NetSysctl::TcpWmem => "net.ipv4.tcp_wmem",
            NetSysctl::TcpSlowStartAfterIdle => "net.ipv4.tcp_slow_start_after_idle",
            NetSysctl::TcpCongestionControl => "net.ipv4.tcp_congestion_control",
            NetSysctl::IpForward => "net.ipv4.ip_forward",
        }
    }
}

impl std::fmt::Display for NetSysctl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.key())
    }
}

/// The `/proc/sys` path of a `net.` key (dots become slashes, so interface names containing
/// dots are not supported; ours never contain any).
pub fn sysctl_path(key: &str) -> Result<PathBuf, Error> {
    let ok = key.starts_with("net.")
        && !key.contains("..")
        && !key.ends_with('.')
        && key.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
    if !ok {
        return Err(Error::InvalidSysctl { key: key.to_owned() });
    }
    Ok(PathBuf::from("/proc/sys").join(key.replace('.', "/")))
}

/// Collapses runs of whitespace to single spaces and trims.
pub fn normalize(value: &str) -> String {
    value.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Reads a `net.` sysctl in the calling thread's namespace (from the main thread: the host's).
/// Read-only: this crate never writes a host sysctl.
pub fn host_sysctl(key: &str) -> Result<String, Error> {
    let path = sysctl_path(key)?;
    fs::read_to_string(&path).map(|v| normalize(&v)).map_err(|source| Error::Sysctl {
        key: key.to_owned(),
        netns: "(caller's)".to_owned(),
        op: "read",
        path,
        source,
    })
}

impl Netns {
    /// Reads a `net.` sysctl inside this namespace (whitespace-normalised).
    pub fn sysctl(&self, key: &str) -> Result<String, Error> {
        let path = sysctl_path(key)?;
        let read = self.run(|| fs::read_to_string(&path))?;
        read.map(|v| normalize(&v)).map_err(|source| self.sysctl_err(key, "read", path, source))
    }

    /// Writes a `net.` sysctl inside this namespace and verifies it reads back as written.
    pub fn set_sysctl(&self, key: &str, value: &str) -> Result<(), Error> {
        let path = sysctl_path(key)?;
        let wanted = normalize(value);
        let (written, actual) = self.run(|| {
            let written = fs::write(&path, format!("{wanted}\n"));
            (written, fs::read_to_string(&path))
        })?;
        written.map_err(|source| self.sysctl_err(key, "write", path.clone(), source))?;
        let actual =
            normalize(&actual.map_err(|source| self.sysctl_err(key, "read", path, source))?);
        if actual == wanted {
            Ok(())
        } else {
            Err(Error::SysctlNotApplied {
                key: key.to_owned(),
                netns: self.name().to_owned(),
                wanted,
                actual,
            })
        }
    }

    /// Reads every [`NetSysctl`] in this namespace, for recording alongside results.
    pub fn net_sysctls(&self) -> Result<Vec<(NetSysctl, String)>, Error> {
        NetSysctl::ALL.iter().map(|&s| Ok((s, self.sysctl(s.key())?))).collect()
    }

    /// Turns IPv6 off on one interface of this namespace (no link-local address, no router or
    /// neighbour solicitations on an emulated path). Returns `false`, not an error, when the
    /// kernel has no IPv6 at all.
    pub fn disable_ipv6(&self, ifname: &str) -> Result<bool, Error> {
        let key = format!("net.ipv6.conf.{ifname}.disable_ipv6");
        let path = sysctl_path(&key)?;
        let exists = self.run(|| fs::metadata("/proc/sys/net/ipv6").is_ok())?;
        if !exists {
            return Ok(false);
        }
        if !self.run(|| path.exists())? {
            return Err(self.sysctl_err(
                &key,
                "write",
                path,
                io::Error::new(io::ErrorKind::NotFound, "no such interface"),
            ));
        }
        self.set_sysctl(&key, "1").map(|()| true)
    }

    /// Receive packet steering for `ifname` in this namespace: the packets it receives are
    /// handed (by flow hash) to one of `cpus`, which runs the protocol stack for them in its
    /// softirq, instead of the CPU that received them. For a TUN device that is the writing
    /// process's CPU: the emulator's TUN writes would otherwise run the receiving namespace's
    /// TCP stack (and the wake-up of its reader) themselves. Sets every receive queue's
    /// `rps_cpus` (sysfs as `ip netns exec` mounts it for the namespace) and checks that it
    /// reads back; an empty `cpus` turns steering off.
    pub fn set_receive_cpus(&self, ifname: &str, cpus: &[usize]) -> Result<(), Error> {
        let wanted = cpu_mask(cpus);
        // The mask and the name are arguments, never shell text.
        let script = r#"set -e
for q in /sys/class/net/"$2"/queues/rx-*; do
    printf '%s\n' "$1" > "$q/rps_cpus"
    cat "$q/rps_cpus"
done"#;
        let out = self.exec("sh", ["-c", script, "sh", &wanted, ifname])?;
        let wanted_bits = mask_bits(&wanted);
        let mut queues = 0;
        for line in out.lines() {
            queues += 1;
            if mask_bits(line) != wanted_bits {
                return Err(Error::SysctlNotApplied {
                    key: format!("{ifname} rps_cpus"),
                    netns: self.name().to_owned(),
                    wanted: wanted.clone(),
                    actual: line.trim().to_owned(),
                });
            }
        }
        if queues == 0 {
            return Err(self.sysctl_err(
                &format!("{ifname} rps_cpus"),
                "write",
                PathBuf::from(format!("/sys/class/net/{ifname}/queues")),
                io::Error::new(io::ErrorKind::NotFound, "no receive queues"),
            ));
        }
        Ok(())
    }

    fn sysctl_err(&self, key: &str, op: &'static str, path: PathBuf, source: io::Error) -> Error {
        Error::Sysctl { key: key.to_owned(), netns: self.name().to_owned(), op, path, source }
    }
}

/// `cpus` as the kernel's CPU mask text: hex, 32-bit groups separated by commas, most
/// significant first (`[0, 1]` -> `3`, `[33]` -> `2,00000000`).
pub(crate) fn cpu_mask(cpus: &[usize]) -> String {
    let words = cpus.iter().map(|c| c / 32 + 1).max().unwrap_or(1);
    let mut mask = vec![0u32; words];
    for &c in cpus {
        mask[c / 32] |= 1 << (c % 32);
    }
    let mut text = format!("{:x}", mask[words - 1]);
    for w in mask[..words - 1].iter().rev() {
        text.push_str(&format!(",{w:08x}"));
    }
    text
}

/// The CPUs set in a mask as the kernel prints it (leading zero groups and zeros ignored).
fn mask_bits(text: &str) -> Vec<usize> {
    let groups: Vec<&str> = text.trim().split(',').collect();
    let mut cpus = Vec::new();
    for (i, group) in groups.iter().rev().enumerate() {
        let word = u32::from_str_radix(group, 16).unwrap_or(0);
        cpus.extend((0..32).filter(|b| word & (1 << b) != 0).map(|b| i * 32 + b));
    }
    cpus
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_masks_as_the_kernel_prints_them() {
        assert_eq!(cpu_mask(&[]), "0");
        assert_eq!(cpu_mask(&[0]), "1");
        assert_eq!(cpu_mask(&[0, 1]), "3");
        assert_eq!(cpu_mask(&[1, 4]), "12");
        assert_eq!(cpu_mask(&[33]), "2,00000000");
        assert_eq!(cpu_mask(&[0, 64]), "1,00000000,00000001");
        for cpus in [vec![], vec![0], vec![1, 4], vec![33], vec![0, 31, 32, 64]] {
            assert_eq!(mask_bits(&cpu_mask(&cpus)), cpus);
        }
        // The kernel pads: 00000003 is CPUs 0 and 1.
        assert_eq!(mask_bits("00000003\n"), vec![0, 1]);
        assert_eq!(mask_bits("00000000,00000002"), vec![1]);
    }

    #[test]
    fn only_net_keys_map_to_paths() {
        assert_eq!(
            sysctl_path("net.ipv4.tcp_rmem").unwrap(),
            PathBuf::from("/proc/sys/net/ipv4/tcp_rmem")
        );
        assert_eq!(
            sysctl_path("net.ipv6.conf.tcptail-tun.disable_ipv6").unwrap(),
            PathBuf::from("/proc/sys/net/ipv6/conf/tcptail-tun/disable_ipv6")
        );
        for bad in [
            "kernel.pid_max",
            "vm.swappiness",
            "net..ipv4",
            "net.ipv4/../../kernel",
            "net.",
            "net.ipv4.tcp rmem",
        ] {
            assert!(sysctl_path(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn values_are_whitespace_normalised() {
        assert_eq!(normalize("4096\t131072\t6291456\n"), "4096 131072 6291456");
        assert_eq!(normalize(" cubic \n"), "cubic");
    }

    #[test]
    fn keys_are_net_keys() {
        for s in NetSysctl::ALL {
            assert!(sysctl_path(s.key()).is_ok(), "{s}");
        }
    }
}
