//! Thread placement for the benchmark (pin a thread to one CPU, ask which CPU it is on) and a
//! nanosecond-resolution wait for a readable socket. The only `unsafe` in this crate.

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Duration;

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

/// Waits until `fd` is readable or `timeout` passes (nanosecond resolution, unlike `poll`'s
/// milliseconds). Returns whether it became ready; EINTR counts as "not yet".
pub fn wait_readable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    wait_for(fd, libc::POLLIN, timeout)
}

/// Waits until `fd` is writable or `timeout` passes. Returns whether it became ready.
pub fn wait_writable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    wait_for(fd, libc::POLLOUT, timeout)
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
    fn pin_to_missing_cpu_fails() {
        std::thread::spawn(|| assert!(pin_current_thread(100_000).is_err())).join().unwrap();
    }
}
