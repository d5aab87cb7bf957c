//! The privilege check the lab runs before creating anything.
//!
//! Creating namespaces needs `CAP_SYS_ADMIN` (mounts under `/run/netns`, `setns`) and
//! configuring links needs `CAP_NET_ADMIN`. Root normally has both; root in an unprivileged
//! container may not, and that deserves a different message than "run it with sudo".

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::Error;

const CAP_NET_ADMIN: u32 = 12;
const CAP_SYS_ADMIN: u32 = 21;

/// The effective capability mask from a `/proc/<pid>/status` text (`CapEff:` line).
pub fn effective_caps(status: &str) -> Option<u64> {
    let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?.trim();
    u64::from_str_radix(hex, 16).ok()
}

/// Checks the capability mask and uid; the decision part of [`ensure_root`].
pub fn check(euid: u32, cap_eff: Option<u64>) -> Result<(), Error> {
    if euid != 0 {
        return Err(Error::NotRoot);
    }
    // If the mask cannot be read, let the first real operation fail with its own error.
    let Some(caps) = cap_eff else {
        return Ok(());
    };
    for (bit, capability) in [(CAP_NET_ADMIN, "CAP_NET_ADMIN"), (CAP_SYS_ADMIN, "CAP_SYS_ADMIN")] {
        if caps & (1 << bit) == 0 {
            return Err(Error::MissingCapability { capability });
        }
    }
    Ok(())
}

/// Fails with a plain explanation unless the process can create namespaces (root with
/// `CAP_NET_ADMIN` and `CAP_SYS_ADMIN`) and `ip` from iproute2 is available.
///
/// The capabilities are read on every call; `ip` is looked for until it is found once. Every
/// lab round builds its path behind this check, and a process spawn costs 10-20 ms on a
/// loaded 2-vCPU machine: spawning `ip -V` twice per round added seconds to a quick run.
pub fn ensure_root() -> Result<(), Error> {
    static IP_FOUND: AtomicBool = AtomicBool::new(false);
    let status = std::fs::read_to_string("/proc/self/status").ok();
    check(rustix::process::geteuid().as_raw(), status.as_deref().and_then(effective_caps))?;
    if IP_FOUND.load(Ordering::Relaxed) {
        return Ok(());
    }
    match Command::new("ip").arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status() {
        Ok(_) => {
            IP_FOUND.store(true, Ordering::Relaxed);
            Ok(())
        }
        Err(_) => Err(Error::IpMissing),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decides_from_uid_and_caps() {
        let full = Some(0x1ff_ffff_ffff);
        assert!(check(0, full).is_ok());
        assert!(check(0, None).is_ok());
        let err = check(1000, full).unwrap_err().to_string();
        assert_eq!(
            err,
            "tcptail lab needs root (CAP_NET_ADMIN + CAP_SYS_ADMIN) to create network \
             namespaces; run it with sudo"
        );
        let no_sys_admin = full.map(|c| c & !(1 << CAP_SYS_ADMIN));
        assert!(check(0, no_sys_admin).unwrap_err().to_string().contains("lacks CAP_SYS_ADMIN"));
    }

    #[test]
    fn parses_cap_eff() {
        let status = "Name:\tx\nCapInh:\t0000000000000000\nCapEff:\t000001ffffffffff\n";
        assert_eq!(effective_caps(status), Some(0x1ff_ffff_ffff));
        assert_eq!(effective_caps("Name: x\n"), None);
    }
}
