//! Thread placement for the benchmark (pin a thread to one CPU, ask which CPU it is on), a
//! nanosecond-resolution wait for a readable or writable socket, the socket's send-queue size
//! (`SIOCOUTQ`), a thread's CPU time (`getrusage`) and an eventfd that wakes a thread
//! waiting on an io_uring ([`EventFd`]); its children are the io_uring engine's
//! ring ([`uring`]) and the AF_XDP engine's socket and program loader ([`xdp`]). The only
//! `unsafe` in this crate.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::Duration;

pub mod uring;
pub mod xdp;

/// Pins the calling thread to `cpu`. Fails with the kernel's error if that CPU does not exist
/// or is not in this process's allowed set (e.g. under a cpuset).
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("CPU {cpu} out of range")));
    }
    // SAFETY: cpu_set_t is a plain bit array for which all-zero is a valid (empty) value.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `cpu` is below CPU_SETSIZE (checked above), so CPU_SET stays inside `set`.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 means the calling thread; `set` is a valid cpu_set_t of the size passed.
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// The CPU the calling thread is running on right now, if the kernel tells.
pub fn current_cpu() -> Option<usize> {
    // SAFETY: sched_getcpu has no arguments and no memory effects; it returns -1 on error.
    let cpu = unsafe { libc::sched_getcpu() };
    usize::try_from(cpu).ok()
}

/// The CPUs this thread may run on.
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: as in `pin_current_thread`, an all-zero cpu_set_t is valid.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 = calling thread; the kernel writes at most size_of::<cpu_set_t>() bytes.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: CPU_ISSET only reads inside `set` for indices below CPU_SETSIZE.
    Ok((0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect())
}

/// The calling thread's resource use so far: CPU time and context switches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ThreadUsage {
    /// User CPU time, µs.
    pub user_us: u64,
    /// System CPU time, µs.
    pub system_us: u64,
    /// Voluntary context switches (waits).
    pub voluntary_switches: u64,
    /// Involuntary context switches (preemptions).
    pub involuntary_switches: u64,
}

impl ThreadUsage {
    /// What was used between `earlier` and `self` (saturating: never negative).
    pub fn since(&self, earlier: &ThreadUsage) -> ThreadUsage {
        ThreadUsage {
            user_us: self.user_us.saturating_sub(earlier.user_us),
            system_us: self.system_us.saturating_sub(earlier.system_us),
            voluntary_switches: self.voluntary_switches.saturating_sub(earlier.voluntary_switches),
            involuntary_switches: self
                .involuntary_switches
                .saturating_sub(earlier.involuntary_switches),
        }
    }
}

/// `getrusage(RUSAGE_THREAD)` of the calling thread.
pub fn thread_usage() -> io::Result<ThreadUsage> {
    // SAFETY: rusage is plain integers, for which all-zero is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: RUSAGE_THREAD asks about the calling thread; the kernel writes one rusage into
    // the valid, exclusively borrowed `usage`.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let us = |t: libc::timeval| (t.tv_sec.max(0) as u64) * 1_000_000 + t.tv_usec.max(0) as u64;
    Ok(ThreadUsage {
        user_us: us(usage.ru_utime),
        system_us: us(usage.ru_stime),
        voluntary_switches: usage.ru_nvcsw.max(0) as u64,
        involuntary_switches: usage.ru_nivcsw.max(0) as u64,
    })
}

/// `recv` that never blocks (`MSG_DONTWAIT`), whatever the socket's mode.
pub fn recv_nowait(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    // SAFETY: `buf` is valid for writes of its length; the kernel writes at most that many.
    let n = unsafe {
        libc::recv(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT)
    };
    if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
}

/// `send` that never blocks (`MSG_DONTWAIT`), whatever the socket's mode; no SIGPIPE.
pub fn send_nowait(fd: BorrowedFd<'_>, buf: &[u8]) -> io::Result<usize> {
    let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL;
    // SAFETY: `buf` is valid for reads of its length.
    let n = unsafe { libc::send(fd.as_raw_fd(), buf.as_ptr().cast(), buf.len(), flags) };
    if n < 0 { Err(io::Error::last_os_error()) } else { Ok(n as usize) }
}

/// Waits until `fd` is readable or `timeout` passes (nanosecond resolution, unlike `poll`'s
/// milliseconds). Returns whether it became ready; EINTR counts as "not yet".
pub fn wait_readable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    wait_for(fd, libc::POLLIN, timeout)
}

/// Waits until `fd` is writable or `timeout` passes. Returns whether it became ready.
pub fn wait_writable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    wait_for(fd, libc::POLLOUT, timeout)
}

/// Waits until `fd` is readable or writable, or `timeout` passes. Returns whether it became
/// ready.
pub fn wait_readable_or_writable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    wait_for(fd, libc::POLLIN | libc::POLLOUT, timeout)
}

/// Bytes in a TCP socket's send queue, sent or not, that the peer has not acknowledged yet
/// (`ioctl(SIOCOUTQ)`, which is `TIOCOUTQ` on Linux: `write_seq - snd_una`). Minus
/// `tcpi_notsent_bytes` it gives the unacknowledged bytes in flight, exactly, where
/// `tcpi_unacked` counts segments.
pub fn send_queue_bytes(fd: BorrowedFd<'_>) -> io::Result<u32> {
    let mut queued: libc::c_int = 0;
    // SAFETY: SIOCOUTQ writes one int through the pointer, which points at a live c_int; `fd`
    // is kept open by the borrow for the duration of the call.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCOUTQ, &mut queued) };
    if rc == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(u32::try_from(queued).unwrap_or(0))
}

/// One epoll instance: the readiness wait of an event-loop thread.
#[derive(Debug)]
pub struct Epoll {
    fd: std::os::fd::OwnedFd,
}

/// Readable, for [`Epoll::add`] and [`Epoll::modify`].
pub const EPOLL_IN: u32 = libc::EPOLLIN as u32;
/// Writable.
pub const EPOLL_OUT: u32 = libc::EPOLLOUT as u32;

impl Epoll {
    /// A new epoll instance (close-on-exec).
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: epoll_create1 takes a flag and returns a new descriptor or -1.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
        Ok(Epoll {
            fd: unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) },
        })
    }

    fn ctl(&self, op: libc::c_int, fd: BorrowedFd<'_>, token: u64, events: u32) -> io::Result<()> {
        let mut event = libc::epoll_event { events, u64: token };
        // SAFETY: both descriptors are open for the call (borrowed / owned), `event` is a valid
        // epoll_event the kernel only reads.
        let rc = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd.as_raw_fd(), &mut event) };
        if rc == -1 { Err(io::Error::last_os_error()) } else { Ok(()) }
    }

    /// Watches `fd` for `events` (level-triggered), reported with `token`.
    pub fn add(&self, fd: BorrowedFd<'_>, token: u64, events: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token, events)
    }

    /// Changes what `fd` is watched for.
    pub fn modify(&self, fd: BorrowedFd<'_>, token: u64, events: u32) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, token, events)
    }

    /// Stops watching `fd` (before it is closed and replaced).
    pub fn delete(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_DEL, fd, 0, 0)
    }

    /// Waits up to `timeout` (rounded up to whole milliseconds; zero polls) and fills
    /// `events` with `(token, events)` pairs; returns how many. EINTR counts as none.
    pub fn wait(&self, events: &mut [(u64, u32)], timeout: Duration) -> io::Result<usize> {
        const MAX: usize = 64;
        let mut raw = [libc::epoll_event { events: 0, u64: 0 }; MAX];
        let max = events.len().min(MAX);
        let ms = if timeout.is_zero() {
            0
        } else {
            timeout.as_nanos().div_ceil(1_000_000).min(i32::MAX as u128) as libc::c_int
        };
        // SAFETY: `raw` has room for `max` events (max <= MAX); the epoll descriptor is open.
        let rc = unsafe {
            libc::epoll_wait(self.fd.as_raw_fd(), raw.as_mut_ptr(), max as libc::c_int, ms)
        };
        if rc == -1 {
            let err = io::Error::last_os_error();
            return if err.kind() == io::ErrorKind::Interrupted { Ok(0) } else { Err(err) };
        }
        let n = rc as usize;
        for (out, e) in events.iter_mut().zip(&raw[..n]) {
            *out = (e.u64, e.events);
        }
        Ok(n)
    }
}

/// Closes a socket with an RST instead of a FIN (`SO_LINGER` on, zero seconds), so this end
/// keeps no TIME_WAIT state and its port is free at once: how a connect-per-request client
/// reuses its ports. Set just before the socket is dropped.
pub fn set_linger_zero(fd: BorrowedFd<'_>) -> io::Result<()> {
    let linger = libc::linger { l_onoff: 1, l_linger: 0 };
    // SAFETY: `linger` is a valid struct of the length passed; `fd` is open for the call.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        )
    };
    if rc == -1 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// A non-blocking eventfd: one thread [`EventFd::signal`]s it, another waits for it to turn
/// readable (a poll on its io_uring) and [`EventFd::drain`]s it.
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    /// A new eventfd with its counter at zero.
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: eventfd takes no pointers; the result is checked before it is owned.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` was just returned by eventfd, is open, and nothing else owns it.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Adds one to the counter, making it readable. A counter at its maximum (2^64 - 2
    /// signals never drained) would fail with `EAGAIN`; it is readable then anyway.
    pub fn signal(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a valid 8-byte buffer to an eventfd this owns.
        let _ = unsafe { libc::write(self.0.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    }

    /// Resets the counter to zero (not readable until the next signal).
    pub fn drain(&self) {
        let mut value = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a valid 8-byte buffer; non-blocking, so an
        // unsignalled eventfd returns EAGAIN at once, which means the same as a read.
        let _ = unsafe { libc::read(self.0.as_raw_fd(), value.as_mut_ptr().cast(), value.len()) };
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

fn wait_for(fd: BorrowedFd<'_>, events: libc::c_short, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd { fd: fd.as_raw_fd(), events, revents: 0 };
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `pfd` is one valid pollfd for a descriptor borrowed for the call's duration, `ts`
    // is a valid timespec, and a null signal mask means "leave the mask alone".
    let rc = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
    match rc {
        -1 => {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted { Ok(false) } else { Err(err) }
        }
        0 => Ok(false),
        // Readiness includes POLLERR/POLLHUP: the caller's next recv/send reports the error.
        _ => Ok(true),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pin_and_read_back() {
        let allowed = allowed_cpus().unwrap();
        assert!(!allowed.is_empty());
        let target = *allowed.last().unwrap();
        std::thread::spawn(move || {
            pin_current_thread(target).unwrap();
            assert_eq!(current_cpu(), Some(target));
        })
        .join()
        .unwrap();
    }

    #[test]
    fn wait_readable_times_out_and_sees_data() {
        use std::io::Write;
        use std::os::fd::AsFd;
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut a = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (b, _) = listener.accept().unwrap();
        assert!(!wait_readable(b.as_fd(), Duration::from_micros(200)).unwrap());
        a.write_all(b"x").unwrap();
        assert!(wait_readable(b.as_fd(), Duration::from_secs(5)).unwrap());
    }

    #[test]
    fn send_queue_counts_every_byte_not_yet_acknowledged() {
        use std::io::Write;
        use std::os::fd::AsFd;
        // A receiver with a tiny window that never reads: the sender's queue holds what it
        // wrote beyond the window, unsent; tcp_info's notsent_bytes counts the same bytes.
        let listener =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        listener.set_recv_buffer_size(4096).unwrap();
        listener.bind(&"127.0.0.1:0".parse::<std::net::SocketAddr>().unwrap().into()).unwrap();
        listener.listen(1).unwrap();
        let addr = listener.local_addr().unwrap().as_socket().unwrap();
        let mut a = std::net::TcpStream::connect(addr).unwrap();
        let _b = listener.accept().unwrap();
        assert_eq!(send_queue_bytes(a.as_fd()).unwrap(), 0, "nothing written yet");
        a.set_nonblocking(true).unwrap();
        let mut written = 0usize;
        while written < 8 << 20 {
            match a.write(&[7u8; 65536]) {
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("{e}"),
            }
        }
        std::thread::sleep(Duration::from_millis(100));
        let queued = send_queue_bytes(a.as_fd()).unwrap();
        let info = tcptail_sock::tcp_info::tcp_info(a.as_fd()).unwrap();
        assert!(queued > 0 && (queued as usize) < written, "queued {queued} of {written}");
        assert_eq!(Some(queued), info.notsent_bytes, "window closed: all queued bytes unsent");
    }

    #[test]
    fn pin_to_missing_cpu_fails() {
        std::thread::spawn(|| assert!(pin_current_thread(100_000).is_err())).join().unwrap();
    }
}
