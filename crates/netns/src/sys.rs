//! The only module of this crate allowed `unsafe`: thin, checked wrappers over the few Linux
//! calls that neither `std` nor `rustix` cover safely.
//!
//! - [`enter_netns`]: `setns(fd, CLONE_NEWNET)` for the **calling thread** only. Threads that
//!   enter a namespace are meant to be scratch threads that exit afterwards (see
//!   [`crate::Netns::run`]); this module never moves the main thread.
//! - [`open_tun`]: opens `/dev/net/tun` and attaches it with `TUNSETIFF`
//!   (`IFF_TUN | IFF_NO_PI`, and with [`TunMode::Offload`] `IFF_VNET_HDR` plus
//!   `TUNSETVNETHDRSZ` and `TUNSETOFFLOAD`). The device is created in the namespace of the
//!   *calling thread*, so call it from a thread that has entered the target namespace. The
//!   returned descriptor stays valid, and the device stays in that namespace, after the thread
//!   exits.
//! - [`set_timer_slack`] and [`set_fifo_priority`]: latency tuning for an emulator thread that
//!   reports [`Tuning::NotPermitted`] (e.g. SCHED_FIFO in a container without `CAP_SYS_NICE`
//!   or without an RT budget) instead of failing.
//! - [`die_with_parent`]: `prctl(PR_SET_PDEATHSIG, SIGKILL)` in a child between `fork` and
//!   `exec`, so a lab's commands do not outlive a lab that was SIGKILLed.
//! - [`run_on_cpus`]: `sched_setaffinity` in a child between `fork` and `exec`, so a lab's
//!   commands (and every thread they start) run only on the CPUs a placement gave them.
//! - [`install_signal_pipe`]: async-signal-safe handlers that write the signal number to a
//!   self-pipe, read by [`crate::signal`]'s watcher thread.
//!
//! Namespace *creation* is deliberately not here: [`crate::Netns::create`] shells out to
//! `ip netns add`. Doing it by hand (`unshare(CLONE_NEWNET)` on a thread, then bind-mounting
//! `/proc/self/task/<tid>/ns/net` onto `/run/netns/<name>`) also requires reproducing
//! iproute2's one-time setup of `/run/netns` as a shared, self-bind-mounted directory so the
//! mount propagates to other mount namespaces; getting that subtly different from iproute2
//! makes namespaces invisible to `ip netns exec` or unremovable by `ip netns del`. Using `ip`
//! for both ends keeps one implementation of that convention.

#![allow(unsafe_code)]

use std::fs::OpenOptions;
use std::io;
use std::num::NonZeroU64;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicI32, Ordering};

/// Longest interface name the kernel accepts (`IFNAMSIZ - 1`).
pub const MAX_IFNAME: usize = libc::IFNAMSIZ - 1;

/// Moves the calling thread (only) into the network namespace referred to by `ns`, an open
/// `/run/netns/<name>` or `/proc/<pid>/ns/net`.
pub fn enter_netns(ns: BorrowedFd<'_>) -> io::Result<()> {
    rustix::thread::move_into_link_name_space(ns, Some(rustix::thread::LinkNameSpaceType::Network))
        .map_err(io::Error::from)
}

/// How a TUN device is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TunMode {
    /// One IP packet per read or write, nothing in front of it.
    Plain,
    /// Every packet behind a 10-byte `virtio_net_hdr` (`IFF_VNET_HDR`), with checksum offload
    /// and TSO (and USO where the kernel has it) enabled: the kernel hands out and accepts
    /// TCP/UDP packets of up to 64 KiB that stand for several MTU-sized segments.
    Offload,
}

/// What a TUN device was opened with (see [`TunMode`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TunOffloads {
    /// Packets carry a `virtio_net_hdr` in both directions.
    pub vnet_hdr: bool,
    /// Partial checksums are passed through (`TUN_F_CSUM`).
    pub csum: bool,
    /// TCP segmentation offload over IPv4 and IPv6, ECN included (`TUN_F_TSO4 | TUN_F_TSO6 |
    /// TUN_F_TSO_ECN`).
    pub tso: bool,
    /// UDP segmentation offload (`TUN_F_USO4 | TUN_F_USO6`, Linux 6.2 and later).
    pub uso: bool,
}

/// Bytes of the `virtio_net_hdr` in front of every packet of an offload TUN device (the legacy
/// header without `num_buffers`).
pub const TUN_VNET_HDR_LEN: usize = 10;

/// Creates (or attaches to) the TUN device `ifname` in the calling thread's network namespace,
/// with `IFF_TUN | IFF_NO_PI` (and the offloads of `mode`), close-on-exec and non-blocking.
/// Returns the descriptor, the name the kernel actually used and the offloads in effect. With
/// [`TunMode::Offload`], a kernel without USO gets checksum and TSO offload only; a kernel that
/// refuses `IFF_VNET_HDR` or TSO is an error (the caller asked for offload).
pub fn open_tun(ifname: &str, mode: TunMode) -> io::Result<(OwnedFd, String, TunOffloads)> {
    if ifname.is_empty() || ifname.len() > MAX_IFNAME || ifname.bytes().any(|b| b == 0) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name must be 1 to {MAX_IFNAME} bytes without NUL"),
        ));
    }
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open("/dev/net/tun")?;

    // SAFETY: `ifreq` is a plain C struct (arrays and a union of integers/pointers) for which
    // all-zero bytes are a valid value.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in req.ifr_name.iter_mut().zip(ifname.bytes()) {
        *dst = src as libc::c_char;
    }
    let mut flags = libc::IFF_TUN | libc::IFF_NO_PI;
    if mode == TunMode::Offload {
        flags |= libc::IFF_VNET_HDR;
    }
    req.ifr_ifru.ifru_flags = flags as libc::c_short;
    // SAFETY: `file` is an open /dev/net/tun descriptor; TUNSETIFF reads and writes exactly one
    // `struct ifreq`, and `req` is a valid, exclusively borrowed `ifreq` that outlives the call.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), libc::TUNSETIFF, &mut req) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    let actual: Vec<u8> = req.ifr_name.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    let actual = String::from_utf8_lossy(&actual).into_owned();
    let offloads = match mode {
        TunMode::Plain => TunOffloads::default(),
        TunMode::Offload => enable_offloads(file.as_fd())?,
    };
    Ok((OwnedFd::from(file), actual, offloads))
}

/// `TUNSETVNETHDRSZ` to [`TUN_VNET_HDR_LEN`], then `TUNSETOFFLOAD` with checksum, TSO and USO,
/// retried without USO on a kernel that does not know it.
fn enable_offloads(fd: BorrowedFd<'_>) -> io::Result<TunOffloads> {
    let size = TUN_VNET_HDR_LEN as libc::c_int;
    // SAFETY: `fd` is a TUN descriptor attached with IFF_VNET_HDR; TUNSETVNETHDRSZ reads one
    // `int` through the pointer, which points at `size` for the duration of the call.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETVNETHDRSZ, &size) } < 0 {
        return Err(io::Error::last_os_error());
    }
    let set = |features: libc::c_uint| {
        // SAFETY: TUNSETOFFLOAD takes its argument by value (an `unsigned long` of TUN_F_*
        // bits); no memory is passed.
        let rc = unsafe {
            libc::ioctl(fd.as_raw_fd(), libc::TUNSETOFFLOAD, libc::c_ulong::from(features))
        };
        if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
    };
    let tso = libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6 | libc::TUN_F_TSO_ECN;
    let uso = match set(tso | libc::TUN_F_USO4 | libc::TUN_F_USO6) {
        Ok(()) => true,
        // A kernel before 6.2 rejects the USO bits it does not know.
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            set(tso)?;
            false
        }
        Err(e) => return Err(e),
    };
    Ok(TunOffloads { vnet_hdr: true, csum: true, tso: true, uso })
}

/// Makes the process `cmd` spawns receive SIGKILL when the **thread** that spawns it exits
/// (`PR_SET_PDEATHSIG`; the kernel ties it to the creating thread, not the process), so call
/// `spawn` from a thread that lives as long as the child should. The death signal survives
/// `exec` (not of set-uid programs). A parent that died between `fork` and the `prctl` is
/// caught by comparing `getppid` with the spawner's pid, and the spawn then fails with ESRCH.
pub fn die_with_parent(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let parent = rustix::process::getpid();
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
    // calls are allowed: it makes two raw syscalls (prctl, getppid) through rustix, takes no
    // lock and allocates nothing on success (an io::Error from a raw errno does not allocate).
    unsafe {
        cmd.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
                .map_err(io::Error::from)?;
            if rustix::process::getppid() != Some(parent) {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            Ok(())
        });
    }
}

/// `setsockopt(SOL_UDP, UDP_SEGMENT, size)`: every send on the UDP socket `fd` larger than
/// `size` bytes leaves as a GSO packet of `size`-byte datagrams (segmented by the device if it
/// has USO, else by the kernel). For tests and tools that generate UDP GSO traffic.
pub fn set_udp_segment(fd: BorrowedFd<'_>, size: u16) -> io::Result<()> {
    // Linux's value (include/uapi/linux/udp.h); libc exports it only for some targets.
    const UDP_SEGMENT: libc::c_int = 103;
    let value = libc::c_int::from(size);
    // SAFETY: `fd` is a valid descriptor for the duration of the call; the option value is
    // one `int`, read through a pointer to `value` with its exact size.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_UDP,
            UDP_SEGMENT,
            (&raw const value).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Sets or clears `O_NONBLOCK` on `fd`.
pub fn set_nonblocking(fd: BorrowedFd<'_>, nonblocking: bool) -> io::Result<()> {
    rustix::io::ioctl_fionbio(fd, nonblocking).map_err(io::Error::from)
}

/// What happened to a best-effort tuning request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tuning {
    /// The setting is in effect.
    Applied,
    /// The kernel refused for lack of privilege (`EPERM`/`EACCES`); the caller carries on
    /// with worse timing and should say so in its results.
    NotPermitted,
    /// The kernel does not support the request (`ENOSYS`/`EOPNOTSUPP`).
    Unsupported,
}

impl std::fmt::Display for Tuning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Tuning::Applied => "applied",
            Tuning::NotPermitted => "not permitted",
            Tuning::Unsupported => "unsupported",
        })
    }
}

fn degrade(err: io::Error) -> io::Result<Tuning> {
    match err.raw_os_error() {
        Some(libc::EPERM | libc::EACCES) => Ok(Tuning::NotPermitted),
        Some(libc::ENOSYS | libc::EOPNOTSUPP) => Ok(Tuning::Unsupported),
        _ => Err(err),
    }
}

/// `prctl(PR_SET_TIMERSLACK, ns)` for the calling thread (`ns >= 1`; 0 would mean "reset to
/// the default", which is never what a caller of this function wants).
pub fn set_timer_slack(ns: u64) -> io::Result<Tuning> {
    let Some(ns) = NonZeroU64::new(ns) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "timer slack must be at least 1 ns",
        ));
    };
    match rustix::thread::set_current_timer_slack(Some(ns)) {
        Ok(()) => Ok(Tuning::Applied),
        Err(e) => degrade(e.into()),
    }
}

/// The calling thread's current timer slack in nanoseconds.
pub fn timer_slack() -> io::Result<u64> {
    rustix::thread::current_timer_slack().map_err(io::Error::from)
}

/// `sched_setscheduler(0, SCHED_FIFO, priority)` for the calling thread (`priority` 1..=99).
pub fn set_fifo_priority(priority: i32) -> io::Result<Tuning> {
    if !(1..=99).contains(&priority) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "SCHED_FIFO priority must be within 1..=99",
        ));
    }
    let param = libc::sched_param { sched_priority: priority };
    // SAFETY: pid 0 means the calling thread; `param` is a valid `sched_param` that outlives
    // the call and is only read.
    let rc = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if rc == 0 { Ok(Tuning::Applied) } else { degrade(io::Error::last_os_error()) }
}

/// Whether the calling thread runs under `SCHED_FIFO`.
pub fn is_fifo() -> io::Result<bool> {
    // SAFETY: no pointers; pid 0 means the calling thread.
    let policy = unsafe { libc::sched_getscheduler(0) };
    if policy < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(policy == libc::SCHED_FIFO)
}

/// The affinity set of `cpus` (for `sched_setaffinity`).
pub fn cpu_set(cpus: &[usize]) -> rustix::thread::CpuSet {
    let mut set = rustix::thread::CpuSet::new();
    for &cpu in cpus {
        set.set(cpu);
    }
    set
}

/// Makes `cmd`'s child run only on `cpus` (`sched_setaffinity` between `fork` and `exec`,
/// inherited by everything it starts). Whether the CPUs exist and are allowed is the caller's
/// check; a set the kernel refuses fails the spawn with its error (`EINVAL`). An empty
/// `cpus` leaves the command alone.
pub fn run_on_cpus(cmd: &mut std::process::Command, cpus: &[usize]) {
    use std::os::unix::process::CommandExt;
    if cpus.is_empty() {
        return;
    }
    // Built before the fork: the child must not allocate.
    let set = cpu_set(cpus);
    // SAFETY: the closure runs in the forked child before exec, where only async-signal-safe
    // calls are allowed: it makes one raw syscall (sched_setaffinity) through rustix on a set
    // built before the fork, takes no lock and allocates nothing on success.
    unsafe {
        cmd.pre_exec(move || {
            rustix::thread::sched_setaffinity(None, &set).map_err(io::Error::from)
        });
    }
}

/// Write end of the self-pipe, read by the signal handler. -1 until installed.
static SIGNAL_PIPE_WR: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(sig: libc::c_int) {
    let fd = SIGNAL_PIPE_WR.load(Ordering::Relaxed);
    if fd < 0 {
        return;
    }
    let byte = sig as u8;
    // SAFETY: `__errno_location` returns this thread's errno slot; write(2) is
    // async-signal-safe and `byte` is a valid one-byte buffer. errno is restored so the
    // interrupted code does not observe our write's errno. The pipe is non-blocking, so a
    // full pipe drops the byte instead of blocking inside the handler.
    unsafe {
        let errno = libc::__errno_location();
        let saved = *errno;
        libc::write(fd, (&raw const byte).cast(), 1);
        *errno = saved;
    }
}

/// Creates a self-pipe and installs handlers for `signals` that write each received signal
/// number (as one byte) to it; returns the read end. Handlers use `SA_RESTART`, so blocking
/// calls elsewhere in the program are not interrupted. Call once per process.
pub fn install_signal_pipe(signals: &[libc::c_int]) -> io::Result<OwnedFd> {
    let mut fds = [-1; 2];
    // SAFETY: `fds` is a valid two-element array for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 succeeded, so both descriptors are open and owned by nobody else.
    let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    set_nonblocking(wr.as_fd(), true)?;
    // The write end lives for the rest of the process: the handler may run at any time.
    let previous = SIGNAL_PIPE_WR.swap(wr.into_raw_fd(), Ordering::SeqCst);
    if previous >= 0 {
        // SAFETY: `previous` came from `into_raw_fd` above in an earlier call and is closed
        // exactly once, here.
        drop(unsafe { OwnedFd::from_raw_fd(previous) });
    }
    for &sig in signals {
        // SAFETY: an all-zero `sigaction` is valid (empty mask, no flags); we then set a
        // handler of the correct `extern "C" fn(c_int)` type, which only touches an atomic
        // and calls async-signal-safe functions.
        let rc = unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as libc::sighandler_t;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(sig, &action, std::ptr::null_mut())
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(rd)
}
