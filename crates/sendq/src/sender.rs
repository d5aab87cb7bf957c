//! [`BoundedSender`]: the thin adapter that applies a [`Governor`] to a real TCP socket.
//!
//! Every write goes through the governor ([`Governor::admit`]): it is capped to the room left
//! under the bound, reading `tcp_info` only when the governor's cached upper bound cannot
//! decide, and any `TCP_NOTSENT_LOWAT` the governor asks for is applied. So the guarantee of
//! the [governor](crate::governor) holds on every path ([`BoundedSender::send`],
//! [`BoundedSender::send_all`], [`Write`], [`BoundedSender::ready`]): after each write through
//! the wrapper, `notsent` is at most the bound. What happens when a write may not go follows
//! the socket's mode, as the poster proposes:
//!
//! - a **blocking** socket waits: it sleeps the governor's wait in threshold mode, or polls for
//!   `POLLOUT` (which the kernel withholds while `2 × notsent ≥ lowat`) in adaptive mode, never
//!   longer than `max_wait` at a time so a changed rate is noticed;
//! - a **non-blocking** socket returns [`io::ErrorKind::WouldBlock`] (`EAGAIN`), and
//!   [`BoundedSender::retry_after`] says when to try again (threshold mode) or is `None`:
//!   wait for `POLLOUT` in an event loop, which in adaptive mode comes exactly when the next
//!   write will be admitted.
//!
//! The kernel can still refuse a write the governor admitted (a full send buffer: the only
//! limit in no-control mode; the LOWAT in static mode). Writes are first tried with
//! `MSG_DONTWAIT` whatever the socket's mode, so such a refusal is seen here, not hidden
//! inside a blocking `write`: a non-blocking socket returns `WouldBlock`, and a blocking one
//! then writes the rest of what was admitted with a plain blocking `send`, so the kernel
//! blocks and wakes it exactly as it would an unwrapped writer (a `POLLOUT` poll wakes later
//! than the kernel's own blocked writer: on the poster's path it kept ~13 ms more data queued
//! in no-control mode), while the time spent inside that call is measured. Either way the
//! refusal is counted ([`SenderStats::kernel_refusals`], [`SenderStats::waits`]) and
//! `tcp_info` is read again.
//!
//! The stats are truthful in every mode: [`SenderStats::time_blocked`] covers every wait
//! (governor sleeps, `POLLOUT` polls, time inside a write the kernel blocked), and
//! [`SenderStats::estimate`] is re-read after every wait or refusal and is never older than
//! [`GovernorConfig::refresh`] when a write is admitted, also in the no-control and
//! static-LOWAT modes (one `tcp_info` read per `refresh` while writing).
//!
//! A kernel without `TCP_NOTSENT_LOWAT` degrades: the failure is counted in
//! [`SenderStats::lowat_unsupported`] and writes are then bounded by the governor alone. The
//! clock is read here (`Instant`), never in the governor.

use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use rustix::net::SendFlags;
use serde::{Deserialize, Serialize};
use socket2::SockRef;

use crate::governor::{Admission, Estimate, Governor, GovernorConfig, Inputs};

/// What a [`BoundedSender`] did so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SenderStats {
    /// Bytes the socket accepted.
    pub bytes_written: u64,
    /// Successful write calls.
    pub writes: u64,
    /// Time a blocking socket spent waiting, for the bound or for the kernel's buffer.
    pub time_blocked: Duration,
    /// Waits (blocking) or `WouldBlock` returns (non-blocking), for the bound or the kernel.
    pub waits: u64,
    /// `WouldBlock` returned to the caller.
    pub would_block: u64,
    /// Writes the governor admitted and the kernel refused (`EAGAIN`: its buffer or LOWAT).
    pub kernel_refusals: u64,
    /// `tcp_info` reads.
    pub info_reads: u64,
    /// `TCP_NOTSENT_LOWAT` changes applied.
    pub lowat_sets: u64,
    /// The LOWAT currently set.
    pub lowat: Option<u32>,
    /// Whether setting `TCP_NOTSENT_LOWAT` failed (the kernel lacks it): writes are bounded by
    /// the governor alone.
    pub lowat_unsupported: bool,
    /// The latest send-queue delay estimate, with its inputs (`None` while the kernel gives
    /// no usable rate).
    pub estimate: Option<Estimate>,
}

/// A writer that keeps its socket's send-queue delay bounded; see the [module docs](self).
#[derive(Debug)]
pub struct BoundedSender<S> {
    stream: S,
    governor: Governor,
    epoch: Instant,
    nonblocking: bool,
    retry_after: Option<Duration>,
    stats: SenderStats,
}

impl<S: AsFd> BoundedSender<S> {
    /// Wraps `stream` (a connected TCP socket, blocking or not: its `O_NONBLOCK` flag now
    /// decides how a write that may not go is reported). Reads `tcp_info` once, and applies
    /// the first LOWAT before any write so the first burst is already bounded.
    pub fn new(stream: S, config: GovernorConfig) -> io::Result<BoundedSender<S>> {
        let flags = rustix::fs::fcntl_getfl(stream.as_fd())?;
        let mut sender = BoundedSender {
            stream,
            governor: Governor::new(config),
            epoch: Instant::now(),
            nonblocking: flags.contains(rustix::fs::OFlags::NONBLOCK),
            retry_after: None,
            stats: SenderStats::default(),
        };
        sender.refresh()?;
        Ok(sender)
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &S {
        &self.stream
    }

    /// The wrapped stream, mutably. Writing through it bypasses the bound and the counters
    /// (in the LOWAT modes the kernel still refuses to start a segment once
    /// `notsent ≥ lowat`).
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.stream
    }

    /// Unwraps the stream.
    pub fn into_inner(self) -> S {
        self.stream
    }

    /// The counters and the latest estimate.
    pub fn stats(&self) -> SenderStats {
        self.stats
    }

    /// The governor.
    pub fn governor(&self) -> &Governor {
        &self.governor
    }

    /// After a `WouldBlock`: when the bound should admit again (threshold mode), or `None`:
    /// wait for `POLLOUT` (adaptive mode, or the kernel's buffer was full).
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }

    /// Reads `tcp_info`, lets the governor observe it, applies a new LOWAT.
    fn refresh(&mut self) -> io::Result<()> {
        let info = tcptail_sock::tcp_info::tcp_info(self.fd())?;
        self.stats.info_reads += 1;
        let now = self.now();
        let observation = self.governor.observe(now, &Inputs::from_tcp_info(&info));
        self.stats.estimate = observation.estimate;
        if let Some(lowat) = observation.set_lowat {
            match SockRef::from(&self.stream).set_tcp_notsent_lowat(lowat) {
                Ok(()) => {
                    self.stats.lowat = Some(lowat);
                    self.stats.lowat_sets += 1;
                }
                // Degrade: record it and stop asking.
                Err(e) if is_unsupported(&e) => self.stats.lowat_unsupported = true,
                Err(e) => return Err(e),
            }
            self.governor.lowat_applied(lowat);
        }
        Ok(())
    }

    /// Returns once a write may go: the bound leaves at least half of itself free and the
    /// kernel reports `POLLOUT` (blocking socket), or `WouldBlock` (non-blocking socket).
    ///
    /// For a caller that picks what to write only when it can go (the freshest message).
    pub fn ready(&mut self) -> io::Result<()> {
        self.retry_after = None;
        loop {
            self.admitted(usize::MAX)?;
            if poll_writable(self.fd(), Duration::ZERO)? {
                return Ok(());
            }
            self.wait_for_kernel()?;
        }
    }

    /// Writes once, as much of `buf` as the bound admits; returns the bytes written (at least
    /// one for a non-empty `buf`). A blocking socket first waits until at least half the bound
    /// (or all of `buf`) fits, and then, if the kernel's buffer is full, blocks in the kernel
    /// for the rest of what was admitted, as a plain blocking write would.
    pub fn send(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.retry_after = None;
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            let admitted = &buf[..self.admitted(buf.len())?];
            let written = match send_flags(self.fd(), admitted, SendFlags::DONTWAIT) {
                Ok(n) => n,
                Err(rustix::io::Errno::INTR) => continue,
                Err(rustix::io::Errno::AGAIN) => 0,
                Err(e) => return Err(e.into()),
            };
            self.record(written);
            if written == admitted.len() || (self.nonblocking && written > 0) {
                return Ok(written);
            }
            // The kernel holds writes back: its buffer is full, or its LOWAT reached.
            self.stats.kernel_refusals += 1;
            self.stats.waits += 1;
            self.refresh()?;
            if self.nonblocking {
                self.stats.would_block += 1;
                return Err(io::ErrorKind::WouldBlock.into());
            }
            // Block inside the kernel's write, exactly as an unwrapped blocking write does
            // (same wake-up), and count the time.
            let start = Instant::now();
            let more = send_flags(self.fd(), &admitted[written..], SendFlags::empty());
            self.stats.time_blocked += start.elapsed();
            match more {
                Ok(n) => {
                    self.record(n);
                    return Ok(written + n);
                }
                Err(rustix::io::Errno::INTR) if written > 0 => return Ok(written),
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn record(&mut self, written: usize) {
        if written > 0 {
            self.stats.bytes_written += written as u64;
            self.stats.writes += 1;
            self.governor.on_written(written as u64);
        }
    }

    /// Writes all of `buf` in as many bounded writes as it takes (for blocking sockets: on a
    /// non-blocking socket a `WouldBlock` part-way loses how much was written; use
    /// [`BoundedSender::send`] there).
    pub fn send_all(&mut self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            let n = self.send(buf)?;
            buf = &buf[n..];
        }
        Ok(())
    }

    /// How many bytes (of `want`) the governor admits now, after waiting for it.
    fn admitted(&mut self, want: usize) -> io::Result<usize> {
        loop {
            let now = self.now();
            match self.governor.admit(now, want as u64) {
                Admission::Admit(n) => return Ok(usize::try_from(n).unwrap_or(want).min(want)),
                Admission::Refresh => self.refresh()?,
                Admission::Wait(wait) => self.wait(Some(wait))?,
                Admission::WaitWritable => self.wait(None)?,
            }
        }
    }

    /// The kernel holds writes back (full buffer, or its LOWAT): re-read the estimate, then
    /// wait for `POLLOUT` or say `WouldBlock`.
    fn wait_for_kernel(&mut self) -> io::Result<()> {
        self.refresh()?;
        self.wait(None)
    }

    /// One wait: `Some(time)` sleeps, `None` polls for `POLLOUT` (at most `max_wait`); a
    /// non-blocking socket returns `WouldBlock` instead.
    fn wait(&mut self, time: Option<Duration>) -> io::Result<()> {
        self.stats.waits += 1;
        if self.nonblocking {
            self.stats.would_block += 1;
            self.retry_after = time;
            return Err(io::ErrorKind::WouldBlock.into());
        }
        let start = Instant::now();
        match time {
            Some(d) => std::thread::sleep(d),
            None => {
                poll_writable(self.fd(), self.governor.config().max_wait)?;
            }
        }
        self.stats.time_blocked += start.elapsed();
        Ok(())
    }
}

impl<S: AsFd> Write for BoundedSender<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.send(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// `send(2)` with `flags`, never raising `SIGPIPE`.
fn send_flags(fd: BorrowedFd<'_>, buf: &[u8], flags: SendFlags) -> rustix::io::Result<usize> {
    rustix::net::send(fd, buf, flags | SendFlags::NOSIGNAL)
}

/// Whether the kernel reports `POLLOUT` within `timeout` (a signal counts as not yet).
fn poll_writable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    let timeout = rustix::time::Timespec {
        tv_sec: i64::try_from(timeout.as_secs()).unwrap_or(i64::MAX),
        tv_nsec: i64::from(timeout.subsec_nanos()),
    };
    let mut fds = [PollFd::new(&fd, PollFlags::OUT)];
    match rustix::event::poll(&mut fds, Some(&timeout)) {
        Ok(n) => Ok(n > 0),
        Err(rustix::io::Errno::INTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

fn is_unsupported(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(code) if code == rustix::io::Errno::NOPROTOOPT.raw_os_error()
        || code == rustix::io::Errno::OPNOTSUPP.raw_os_error())
}
