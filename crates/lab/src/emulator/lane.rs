//! One direction of forwarding: read packets from one TUN device, pass them through the model,
//! write them to the other TUN device when they come due.
//!
//! A [`Lane`] owns its [`Direction`] model, a pool of packet buffers, a write backlog and its
//! counters. It never blocks and never sleeps: reads and writes are non-blocking, and the event
//! loop ([`super::run`]) decides when to call it and how long to wait.
//!
//! # Invariants
//!
//! - Every packet read is exactly one of: dropped by the model (counted in its stats), dropped
//!   as oversize (counted), held (model or write backlog), written (counted in `forwarded`), or
//!   lost to a failed write (counted in `write_errors`). Nothing disappears silently.
//! - A write that finds the device busy (`EAGAIN`) keeps the packet at the head of the write
//!   backlog; later releases queue behind it, so order is kept.
//! - Lateness is measured on the clock read just before each write.
//! - Buffers circulate: read buffer -> model payload -> written -> back to the pool. The pool
//!   allocates only when it runs dry and keeps at most [`POOL_MAX`] spare buffers.

use std::collections::VecDeque;
use std::fs::File;
use std::io::BufWriter;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use rustix::io::Errno;
use tcptail_emu::{Admission, Count, Direction, Event, MahimahiLog, Observer, Packet, ReleaseInfo};
use tcptail_emu::{Nanos, Stats};
use tcptail_netns::TunDevice;

use super::clock::MonoClock;
use super::report::{DirectionReport, LatenessHistogram};

/// A packet device: a non-blocking descriptor that reads and writes one packet per call (a
/// TUN device; a datagram socket in tests) and a name for messages.
#[derive(Debug)]
pub(crate) struct Endpoint {
    fd: OwnedFd,
    name: String,
    /// `(namespace, interface)` of a network device, whose kernel counters can be read.
    device: Option<(String, String)>,
}

impl Endpoint {
    /// `fd` must be non-blocking and packet-oriented.
    #[cfg(test)]
    pub(crate) fn new(fd: OwnedFd, name: String) -> Endpoint {
        Endpoint { fd, name, device: None }
    }

    /// `tcptail-tun in tcptail-123-client-0`.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// `(namespace, interface)` if this is a network device.
    pub(crate) fn device(&self) -> Option<(String, String)> {
        self.device.clone()
    }
}

impl From<TunDevice> for Endpoint {
    fn from(dev: TunDevice) -> Endpoint {
        let name = format!("{} in {}", dev.ifname(), dev.netns());
        let device = Some((dev.netns().to_owned(), dev.ifname().to_owned()));
        Endpoint { fd: dev.into_fd(), name, device }
    }
}

impl AsFd for Endpoint {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Spare buffers kept for reuse; beyond this they are freed.
pub(crate) const POOL_MAX: usize = 8192;

/// Buffers allocated up front per lane.
const POOL_INITIAL: usize = 256;

type Buf = Box<[u8]>;

/// The observers of one direction: statistics, and optionally a Mahimahi log.
#[derive(Debug)]
pub(crate) struct LaneObserver {
    pub(crate) stats: Stats,
    pub(crate) log: Option<MahimahiLog<BufWriter<File>>>,
}

impl Observer for LaneObserver {
    #[inline]
    fn on_event(&mut self, event: &Event) {
        self.stats.on_event(event);
        if let Some(log) = &mut self.log {
            log.on_event(event);
        }
    }
}

/// A free list of equally sized packet buffers.
#[derive(Debug)]
struct Pool {
    size: usize,
    free: Vec<Buf>,
}

impl Pool {
    fn new(size: usize) -> Pool {
        let mut pool = Pool { size, free: Vec::with_capacity(POOL_INITIAL) };
        pool.free.extend((0..POOL_INITIAL).map(|_| vec![0u8; size].into_boxed_slice()));
        pool
    }

    #[inline]
    fn get(&mut self) -> Buf {
        self.free.pop().unwrap_or_else(|| vec![0u8; self.size].into_boxed_slice())
    }

    #[inline]
    fn put(&mut self, buf: Buf) {
        if self.free.len() < POOL_MAX {
            self.free.push(buf);
        }
    }
}

/// Counters of one lane.
#[derive(Debug, Default)]
struct Counters {
    forwarded: Count,
    read_errors: u64,
    oversize_drops: u64,
    write_errors: u64,
    write_retries: u64,
}

/// What a write attempt did.
enum Written {
    /// Written, or failed for good (counted); the buffer can be reused.
    Done,
    /// The device is busy: keep the packet and retry when writable.
    Busy,
}

/// One direction of forwarding; see the [module docs](self).
#[derive(Debug)]
pub(crate) struct Lane {
    label: &'static str,
    from: Arc<Endpoint>,
    to: Arc<Endpoint>,
    model: Direction<Buf, LaneObserver>,
    pool: Pool,
    spare: Option<Buf>,
    backlog: VecDeque<(Buf, ReleaseInfo)>,
    next_id: u64,
    counters: Counters,
    lateness: LatenessHistogram,
    last_error: Option<String>,
    input_closed: bool,
}

impl Lane {
    pub(crate) fn new(
        label: &'static str,
        from: Arc<Endpoint>,
        to: Arc<Endpoint>,
        model: Direction<Buf, LaneObserver>,
        buffer_size: usize,
    ) -> Lane {
        Lane {
            label,
            from,
            to,
            model,
            pool: Pool::new(buffer_size),
            spare: None,
            backlog: VecDeque::new(),
            next_id: 0,
            counters: Counters::default(),
            lateness: LatenessHistogram::default(),
            last_error: None,
            input_closed: false,
        }
    }

    /// `up` or `down`.
    pub(crate) fn label(&self) -> &'static str {
        self.label
    }

    /// The device packets are read from.
    pub(crate) fn input(&self) -> &Endpoint {
        &self.from
    }

    /// The device packets are written to.
    pub(crate) fn output(&self) -> &Endpoint {
        &self.to
    }

    /// Whether the input device went away (no more reads are attempted).
    pub(crate) fn input_closed(&self) -> bool {
        self.input_closed
    }

    /// Stops reading from the input device, recording why.
    pub(crate) fn close_input(&mut self, why: String) {
        self.input_closed = true;
        self.last_error = Some(why);
    }

    /// Whether releases are waiting for the output device to become writable.
    pub(crate) fn blocked(&self) -> bool {
        !self.backlog.is_empty()
    }

    /// When the model next needs attention (`None`: nothing in flight).
    pub(crate) fn next_wakeup(&self) -> Option<Nanos> {
        self.model.next_wakeup()
    }

    /// Reads up to `max` packets and hands them to the model. Returns how many were read.
    pub(crate) fn read_batch(&mut self, clock: &MonoClock, max: usize) -> usize {
        if self.input_closed {
            return 0;
        }
        let mut read = 0;
        while read < max {
            let mut buf = self.spare.take().unwrap_or_else(|| self.pool.get());
            match rustix::io::read(&*self.from, &mut buf[..]) {
                Ok(n) if n > 0 && n < buf.len() => {
                    read += 1;
                    let now = clock.now();
                    let id = self.next_id;
                    self.next_id += 1;
                    let packet = Packet { id, len: n as u32, payload: buf };
                    if let Admission::Dropped { payload, .. } = self.model.enqueue(now, packet) {
                        self.pool.put(payload);
                    }
                }
                Ok(0) => {
                    self.spare = Some(buf);
                    break;
                }
                Ok(n) => {
                    // Filled the whole buffer: the packet may have been cut. Never forward it.
                    read += 1;
                    self.counters.oversize_drops += 1;
                    self.last_error = Some(format!(
                        "{}: a {n}-byte read filled the {}-byte buffer (MTU larger than \
                         buffer_size?); packet dropped",
                        self.label,
                        buf.len()
                    ));
                    self.spare = Some(buf);
                }
                Err(Errno::INTR) => self.spare = Some(buf),
                Err(e) => {
                    self.spare = Some(buf);
                    if e != Errno::AGAIN {
                        self.counters.read_errors += 1;
                        self.last_error = Some(format!("{}: read: {e}", self.label));
                    }
                    break;
                }
            }
        }
        read
    }

    /// Writes up to `max` releases that have come due (the write backlog first). Returns how
    /// many packets left the lane (written or lost to a write error). Bounded so that one busy
    /// direction cannot starve the other direction's releases or the reads.
    pub(crate) fn release_due(&mut self, clock: &MonoClock, max: usize) -> usize {
        let mut done = 0;
        while done < max {
            let (buf, info) = match self.backlog.pop_front() {
                Some(item) => item,
                None => match self.model.poll_release(clock.now()) {
                    Some(item) => item,
                    None => return done,
                },
            };
            match self.write(&buf, &info, clock) {
                Written::Done => {
                    self.pool.put(buf);
                    done += 1;
                }
                Written::Busy => {
                    self.backlog.push_front((buf, info));
                    // Move what is due behind the blocked head, so the model's clock and the
                    // observer keep up; it is written in order once the device drains.
                    let now = clock.now();
                    while let Some(r) = self.model.poll_release(now) {
                        self.backlog.push_back(r);
                    }
                    return done;
                }
            }
        }
        done
    }

    fn write(&mut self, buf: &[u8], info: &ReleaseInfo, clock: &MonoClock) -> Written {
        let len = info.len as usize;
        loop {
            let now = clock.now();
            match rustix::io::write(&*self.to, &buf[..len]) {
                Ok(_) => {
                    // A TUN write takes the whole packet or fails.
                    self.lateness.record(info.lateness(now));
                    self.counters.forwarded.packets += 1;
                    self.counters.forwarded.bytes += u64::from(info.len);
                    return Written::Done;
                }
                Err(Errno::INTR) => continue,
                Err(Errno::AGAIN) => {
                    self.counters.write_retries += 1;
                    return Written::Busy;
                }
                Err(e) => {
                    self.counters.write_errors += 1;
                    self.last_error = Some(format!("{}: write: {e}", self.label));
                    return Written::Done;
                }
            }
        }
    }

    /// The lane's lateness histogram (for the both-directions summary).
    pub(crate) fn lateness(&self) -> &LatenessHistogram {
        &self.lateness
    }

    /// Ends the lane at `now`: processes link events up to `now` so the statistics are
    /// complete, flushes the log, and returns the report and any log error.
    pub(crate) fn finish(self, now: Nanos) -> (DirectionReport, Option<String>) {
        let mut model = self.model;
        model.advance(now);
        let held = model.backlog().packets() as u64 + self.backlog.len() as u64;
        let LaneObserver { stats, log } = model.into_observer();
        let log_error = log
            .and_then(|log| log.finish().err())
            .map(|e| format!("{}: writing the Mahimahi log: {e}", self.label));
        let report = DirectionReport {
            stats: stats.summary(),
            forwarded: self.counters.forwarded,
            lateness: self.lateness.summary(),
            read_errors: self.counters.read_errors,
            oversize_drops: self.counters.oversize_drops,
            write_errors: self.counters.write_errors,
            write_retries: self.counters.write_retries,
            kernel_drops_before_read: None,
            kernel_drops_after_write: None,
            held_at_stop: held,
            last_error: self.last_error,
        };
        (report, log_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_reuses_and_caps() {
        let mut pool = Pool::new(64);
        assert_eq!(pool.free.len(), POOL_INITIAL);
        let bufs: Vec<Buf> = (0..POOL_INITIAL + 3).map(|_| pool.get()).collect();
        assert!(pool.free.is_empty());
        assert!(bufs.iter().all(|b| b.len() == 64));
        for b in bufs {
            pool.put(b);
        }
        assert_eq!(pool.free.len(), POOL_INITIAL + 3);
        for _ in 0..POOL_MAX {
            pool.put(vec![0; 64].into_boxed_slice());
        }
        assert_eq!(pool.free.len(), POOL_MAX);
    }
}
