//! [`BoundedSender`]: the thin adapter that applies a [`Governor`] to a real TCP socket.
//!
//! Before each write it asks the governor whether the write may go, reading `tcp_info` only
//! when the governor's cached upper bound cannot decide ([`Governor::admit_cached`]), and
//! applies any `TCP_NOTSENT_LOWAT` the governor asks for. What happens when a write may not
//! go follows the socket's mode, as the poster proposes:
//!
//! - a **blocking** socket waits: it sleeps the governor's wait in threshold mode, or polls for
//!   `POLLOUT` (which the kernel withholds while `notsent ≥ lowat`) in the LOWAT modes, never
//!   longer than `max_wait` at a time so a changed rate is noticed;
//! - a **non-blocking** socket returns [`io::ErrorKind::WouldBlock`] (`EAGAIN`) and
//!   [`BoundedSender::retry_after`] says when to try again; in the LOWAT modes the kernel
//!   itself returns `EAGAIN` and `POLLOUT` in an event loop signals recovery.
//!
//! A kernel without `TCP_NOTSENT_LOWAT` (or `tcp_info` fields) degrades: the failure is counted
//! in [`SenderStats::lowat_unsupported`] and writes go on uncontrolled rather than failing.
//! The clock is read here (`Instant`), never in the governor.

use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags};
use serde::{Deserialize, Serialize};
use socket2::SockRef;

use crate::governor::{Admission, Estimate, Governor, GovernorConfig, Inputs, Mode};

/// What a [`BoundedSender`] did so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SenderStats {
    /// Bytes the socket accepted.
    pub bytes_written: u64,
    /// Successful write calls.
    pub writes: u64,
    /// Time spent waiting for the governor or for `POLLOUT` before writes.
    pub time_blocked: Duration,
    /// Waits (blocking) or `WouldBlock` returns (non-blocking) caused by the bound.
    pub waits: u64,
    /// `WouldBlock` returned to the caller.
    pub would_block: u64,
    /// `tcp_info` reads.
    pub info_reads: u64,
    /// `TCP_NOTSENT_LOWAT` changes applied.
    pub lowat_sets: u64,
    /// The LOWAT currently set.
    pub lowat: Option<u32>,
    /// Whether setting `TCP_NOTSENT_LOWAT` failed (the kernel lacks it): writes go uncontrolled.
    pub lowat_unsupported: bool,
    /// The latest send-queue delay estimate, with its inputs.
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

impl<S: AsFd + Write> BoundedSender<S> {
    /// Wraps `stream` (a connected TCP socket, blocking or not: its `O_NONBLOCK` flag decides
    /// how a write that may not go is reported).
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
        // Apply a LOWAT before the first write, so the first burst is already bounded.
        if !matches!(config.mode, Mode::NoControl | Mode::Threshold(_)) {
            sender.refresh()?;
        }
        Ok(sender)
    }

    /// The wrapped stream.
    pub fn get_ref(&self) -> &S {
        &self.stream
    }

    /// The wrapped stream, mutably (writing through it bypasses the bound and the counters).
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

    /// After a `WouldBlock` in threshold mode: when the estimate should be back under the
    /// threshold. `None` in the LOWAT modes (wait for `POLLOUT` instead).
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }

    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    fn fd(&self) -> BorrowedFd<'_> {
        self.stream.as_fd()
    }

    /// Reads `tcp_info`, lets the governor decide, applies a new LOWAT.
    fn refresh(&mut self) -> io::Result<Admission> {
        let info = tcptail_sock::tcp_info::tcp_info(self.fd())?;
        self.stats.info_reads += 1;
        let now = self.now();
        let verdict = self.governor.observe(now, &Inputs::from_tcp_info(&info));
        self.stats.estimate = verdict.estimate;
        if let Some(lowat) = verdict.set_lowat {
            match SockRef::from(&self.stream).set_tcp_notsent_lowat(lowat) {
                Ok(()) => {
                    self.governor.lowat_applied(lowat);
                    self.stats.lowat = Some(lowat);
                    self.stats.lowat_sets += 1;
                }
                Err(e) if is_unsupported(&e) => {
                    // Degrade: record it and stop asking.
                    self.stats.lowat_unsupported = true;
                    self.governor.lowat_applied(lowat);
                }
                Err(e) => return Err(e),
            }
        }
        Ok(verdict.admission)
    }

    /// Returns once a write may go (blocking socket), or `WouldBlock` (non-blocking socket).
    ///
    /// In the LOWAT modes a blocking socket also waits here for `POLLOUT`, so the whole wait
    /// happens before the caller's write (and is counted in [`SenderStats::time_blocked`]);
    /// [`BoundedSender::send`] skips that poll and lets the kernel block inside the write.
    pub fn ready(&mut self) -> io::Result<()> {
        self.admit()?;
        if !self.nonblocking && self.governor.lowat().is_some() && !self.stats.lowat_unsupported {
            self.wait_writable()?;
        }
        Ok(())
    }

    /// The governor's part of [`BoundedSender::ready`].
    fn admit(&mut self) -> io::Result<()> {
        self.retry_after = None;
        loop {
            let now = self.now();
            let admission =
                if self.governor.admit_cached(now) { Admission::Admit } else { self.refresh()? };
            match admission {
                Admission::Admit => break,
                Admission::Wait(wait) => {
                    self.stats.waits += 1;
                    if self.nonblocking {
                        self.stats.would_block += 1;
                        self.retry_after = Some(wait);
                        return Err(io::ErrorKind::WouldBlock.into());
                    }
                    let start = Instant::now();
                    std::thread::sleep(wait);
                    self.stats.time_blocked += start.elapsed();
                }
            }
        }
        Ok(())
    }

    /// Polls for `POLLOUT` (withheld by the kernel while `notsent ≥ lowat`), re-reading the
    /// rate every `max_wait`.
    fn wait_writable(&mut self) -> io::Result<()> {
        let mut first = true;
        let start = Instant::now();
        loop {
            let max_wait = self.governor.config().max_wait;
            let timeout = rustix::time::Timespec {
                tv_sec: i64::try_from(max_wait.as_secs()).unwrap_or(i64::MAX),
                tv_nsec: i64::from(max_wait.subsec_nanos()),
            };
            let ready = {
                let mut fds = [PollFd::new(&self.stream, PollFlags::OUT)];
                let zero = rustix::time::Timespec { tv_sec: 0, tv_nsec: 0 };
                let n = rustix::event::poll(&mut fds, Some(if first { &zero } else { &timeout }))?;
                n > 0
            };
            if ready {
                break;
            }
            if first {
                self.stats.waits += 1;
            }
            first = false;
            self.refresh()?;
        }
        if !first {
            self.stats.time_blocked += start.elapsed();
        }
        Ok(())
    }

    /// Waits for the bound (the governor; in the LOWAT modes the kernel blocks or returns
    /// `EAGAIN` inside the write), then writes once; returns the bytes written.
    pub fn send(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.admit()?;
        let n = self.stream.write(buf)?;
        self.record(n);
        Ok(n)
    }

    /// Waits for the bound once, then writes all of `buf` (a blocking socket's `write_all`).
    pub fn send_all(&mut self, buf: &[u8]) -> io::Result<()> {
        self.admit()?;
        self.write_all_unchecked(buf)
    }

    /// Writes once without consulting the bound (after [`BoundedSender::ready`]); returns the
    /// bytes written.
    pub fn write_unchecked(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.stream.write(buf)?;
        self.record(n);
        Ok(n)
    }

    /// Writes all of `buf` without consulting the bound (after [`BoundedSender::ready`]).
    pub fn write_all_unchecked(&mut self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            match self.stream.write(buf) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.record(n);
                    buf = &buf[n..];
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn record(&mut self, n: usize) {
        self.stats.bytes_written += n as u64;
        self.stats.writes += 1;
        self.governor.on_written(n as u64);
    }
}

impl<S: AsFd + Write> Write for BoundedSender<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.send(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.stream.flush()
    }
}

fn is_unsupported(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(code) if code == rustix::io::Errno::NOPROTOOPT.raw_os_error()
        || code == rustix::io::Errno::OPNOTSUPP.raw_os_error())
}
