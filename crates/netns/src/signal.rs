//! SIGINT/SIGTERM/SIGHUP handling that guarantees lab teardown.
//!
//! [`install`] sets async-signal-safe handlers that only write the signal number to a pipe
//! (see [`crate::sys::install_signal_pipe`]); a watcher thread does the real work in normal
//! thread context:
//!
//! 1. **First signal:** record it ([`shutdown_requested`], [`received`]) and send SIGTERM to
//!    every child process registered in any live [`crate::Cleanup`]. A main thread blocked in
//!    [`crate::Processes::wait`] therefore wakes up.
//! 2. **Grace period:** the main thread is expected to notice, return normally and let `Drop`
//!    tear everything down (then exit with [`exit_code`]). The process exits when `main`
//!    returns, ending the watcher too.
//! 3. **Grace expired, or a second signal:** the watcher runs every live registry itself
//!    (SIGKILL to processes, namespaces deleted), then exits the process with 128 + signal.
//!
//! So the process is gone at most `grace` (plus teardown time) after the first signal, with
//! everything removed, whether or not the rest of the program cooperates.
//!
//! # How a long-running caller cooperates
//!
//! - Blocked waiting for a child: nothing to do, the child is terminated and the wait returns.
//! - A loop (an emulator, a poller): check [`shutdown_requested`] at least every few hundred
//!   milliseconds (e.g. use it as the loop condition and give `poll` a timeout), then return.
//! - Work that must not be cut short (writing results): finish within the grace period, or
//!   pass a larger one to [`install`].
//! - Cleanup of your own (stop an emulator thread): register it with
//!   [`crate::Cleanup::defer`] so the forced path runs it too.
//!
//! With `panic = "abort"` nothing unwinds, so no `Drop` runs on panic; [`install`] then also
//! installs a panic hook that runs every live registry before the abort.
//!
//! `install` replaces any previous handler for these signals (e.g. one set by the `ctrlc`
//! crate): a process uses one or the other.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::{Error, cleanup, sys};

static RECEIVED: AtomicI32 = AtomicI32::new(0);
static GRACE_MS: AtomicU64 = AtomicU64::new(0);
static INSTALLED: Mutex<bool> = Mutex::new(false);
static FOREGROUND_CHILD: AtomicBool = AtomicBool::new(false);

/// Default grace between the first signal and forced teardown.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// Installs the handlers and starts the watcher thread; see the [module docs](self). Calling
/// it again only updates `grace`.
pub fn install(grace: Duration) -> Result<(), Error> {
    GRACE_MS.store(u64::try_from(grace.as_millis()).unwrap_or(u64::MAX), Ordering::Relaxed);
    let mut installed = INSTALLED.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if *installed {
        return Ok(());
    }
    let rd = sys::install_signal_pipe(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP])
        .map_err(Error::Signal)?;
    std::thread::Builder::new()
        .name("tcptail-signal".into())
        .spawn(move || watch(rd))
        .map_err(Error::Signal)?;
    #[cfg(panic = "abort")]
    {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            previous(info);
            cleanup::run_all();
        }));
    }
    *installed = true;
    Ok(())
}

/// Marks whether an interactive child shares the terminal's foreground process group.
///
/// While it does, Ctrl-C (SIGINT) reaches that child directly and is the child's business:
/// a shell in `tcptail lab path -- bash` ignores it, a `ping` exits (and the lab then tears
/// down because its command ended). So the watcher ignores SIGINT meanwhile; SIGTERM and
/// SIGHUP still shut everything down.
pub fn set_foreground_child(present: bool) {
    FOREGROUND_CHILD.store(present, Ordering::SeqCst);
}

/// Whether a termination signal has been received.
pub fn shutdown_requested() -> bool {
    RECEIVED.load(Ordering::Relaxed) != 0
}

/// The first termination signal received, if any (`libc::SIGINT`, ...).
pub fn received() -> Option<i32> {
    match RECEIVED.load(Ordering::Relaxed) {
        0 => None,
        sig => Some(sig),
    }
}

/// The conventional exit code after a signal (128 + signal number), if one was received.
pub fn exit_code() -> Option<i32> {
    received().map(|sig| 128 + sig)
}

fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "signal",
    }
}

/// Waits for one byte on the pipe; `None` timeout waits forever. Returns the signal number,
/// or `None` on timeout.
fn next_signal(rd: &OwnedFd, deadline: Option<Instant>) -> Option<i32> {
    loop {
        if let Some(deadline) = deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let timeout = rustix::time::Timespec {
                tv_sec: i64::try_from(left.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: i64::from(left.subsec_nanos()),
            };
            let mut fds = [rustix::event::PollFd::new(rd, rustix::event::PollFlags::IN)];
            match rustix::event::poll(&mut fds, Some(&timeout)) {
                Ok(0) | Err(_) => continue,
                Ok(_) => {}
            }
        }
        let mut byte = [0u8; 1];
        match rustix::io::read(rd.as_fd(), &mut byte) {
            Ok(1) => return Some(i32::from(byte[0])),
            // EOF cannot happen (we hold the write end forever); EINTR: retry.
            _ => continue,
        }
    }
}

fn watch(rd: OwnedFd) {
    let sig = loop {
        let Some(sig) = next_signal(&rd, None) else {
            return;
        };
        if !(sig == libc::SIGINT && FOREGROUND_CHILD.load(Ordering::SeqCst)) {
            break sig;
        }
    };
    RECEIVED.store(sig, Ordering::SeqCst);
    for registry in cleanup::live() {
        registry.terminate_processes();
    }
    let grace = Duration::from_millis(GRACE_MS.load(Ordering::Relaxed));
    let _second = next_signal(&rd, Some(Instant::now() + grace));
    let ran = cleanup::run_all();
    if ran > 0 {
        eprintln!("tcptail: {}: removed {ran} leftover lab resource(s), exiting", signal_name(sig));
    }
    std::process::exit(128 + sig);
}
