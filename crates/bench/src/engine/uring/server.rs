//! The io_uring server: connections served from **one ring per server thread** (a *ring
//! thread*), each socket with one multishot receive into the ring's provided buffers, the
//! responses of a connection gathered into its send slot, and the sends of every connection
//! that has something owed submitted together in one `io_uring_enter` per turn.
//!
//! # Shape
//!
//! The handshake stays where the default engine does it (`crate::server::serve`: a thread per
//! accepted connection with a deadline for the Hello, the policy, the Welcome): it is
//! blocking and bounded by timeouts that must not stall a ring serving other connections.
//! Instead of pinning itself, the connection's thread asks the `Pool` for the ring thread
//! of the CPU the Hello asked for (`Pool::place`: one per pinned CPU and spin decision,
//! created and pinned on first use; unpinned connections spread over up to one ring thread
//! per CPU the process may use), reports that thread's CPU in the Welcome, hands a duplicate
//! of the socket over (`Placed::serve`) and sleeps until the ring thread says how the
//! connection ended; then it closes or rejects it as every engine does. So a request costs a
//! wake-up of the ring thread at most, shared by every connection whose requests arrived
//! meanwhile, never one of a thread per connection.
//!
//! # Per turn of a ring thread
//!
//! Connections handed over are adopted (an eventfd polled on the ring wakes the thread for
//! them); every connection gets its receive re-armed if the kernel disarmed it, and one
//! send of what it owes if its last send is done; a turn that staged sends submits them
//! without waiting (they run inside that call and their completions are there when it
//! returns, where a request's service time ends, as the default engine's ends after its
//! `send`), otherwise it waits for the next completion, at most until the oldest send still
//! in flight reaches the write timeout. The clock is read once per turn, when completions are
//! reaped: the same instant ends the served requests' service times and starts new sends'
//! write timeouts.
//!
//! # Limits
//!
//! Those of the default loop (`crate::server::serve`), per connection: requests are checked
//! against the Hello by the same parser; the memory is fixed (the ring's provided buffers and
//! one send slot of at most [`crate::server::RESPONSE_BUF_LEN`] per connection; longer
//! responses go out from the slot's zeros in chunks); a connection idle for the idle timeout
//! is closed (the watchdog shuts its read side down); one whose peer takes no byte of a
//! response for the write timeout is cut. A connection that ends has what it had armed on
//! the ring cancelled, and its slot is reused only after the kernel completed all of it. A
//! spinning ring thread (the vetted spin decision) that receives no request on any of its
//! connections for the spin cap sleeps until the next completion.
//!
//! StatsRequests are answered as the default loop answers them (`crate::server::stats`), in
//! order after the responses owed before them; a ring thread's CPU time is shared out among
//! its connections by the requests each was answered (`StatsWindow::start_shared`). With
//! `--sqpoll` the kernel thread that issues the sends is in no window.

use std::collections::VecDeque;
use std::io;
use std::net::TcpStream;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use super::{Op, ring_options};
use crate::engine::Splitter;
use crate::server::RESPONSE_BUF_LEN;
use crate::server::stats::StatsWindow;
use crate::sys::uring::{Completion, MAX_TOKEN, Ring, RingOptions};
use crate::sys::{self, EventFd};
use crate::watchdog::Watch;
use crate::wire::{self, FrameKind, FrameParser, HEADER_LEN, Header, WireError};

/// Connections a ring thread's queues and provided buffers are sized for.
const RING_SIZED_FOR: usize = 64;

/// The token of the ring thread's wake-up poll (no connection's: those are `Op` tokens of
/// indices far below it).
const WAKE_TOKEN: u64 = MAX_TOKEN;

/// How a connection's serving ended, for the server to turn into its own close or reject.
#[derive(Debug)]
pub(crate) enum Ended {
    /// The peer closed the connection (or reset it).
    PeerClosed,
    /// The server is shutting down.
    Stopping,
    /// Nothing received for the idle timeout.
    Idle,
    /// A response made no progress for the write timeout.
    WriteStalled,
    /// The peer broke the protocol.
    Wire(WireError),
    /// Setting the ring up or an operation failed.
    Io(io::Error),
}

impl From<WireError> for Ended {
    fn from(e: WireError) -> Ended {
        Ended::Wire(e)
    }
}

/// What every ring thread of a server follows.
#[derive(Debug, Clone)]
pub(crate) struct Limits {
    /// Connections the server serves at once: every ring thread has room for all of them.
    pub(crate) max_connections: usize,
    /// A spinning ring thread sleeps after this long without a request.
    pub(crate) spin_cap: Duration,
    pub(crate) sqpoll: bool,
    pub(crate) write_timeout: Duration,
    /// The server's stop flag.
    pub(crate) stop: Arc<AtomicBool>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A server's ring threads, created on demand.
#[derive(Debug)]
pub(crate) struct Pool {
    limits: Limits,
    /// Unpinned ring threads at most: one per CPU the process may use.
    lanes: usize,
    workers: Mutex<Vec<Arc<Worker>>>,
    threads: Mutex<Vec<JoinHandle<()>>>,
}

/// One ring thread as the other threads see it.
#[derive(Debug)]
struct Worker {
    /// The CPU it was asked to pin itself to, and whether it spins.
    cpu: Option<usize>,
    spin: bool,
    /// Where it ran once placed, and why pinning failed, if it did (for the Welcomes).
    ran_on: Option<usize>,
    pin_error: Option<String>,
    /// Connections placed on it and not yet ended.
    connections: AtomicUsize,
    /// Connections handed over and not yet adopted.
    incoming: Mutex<Vec<Handoff>>,
    wake: EventFd,
    /// Set when the server has ended: exit once no connection is left.
    closing: AtomicBool,
    /// Set when the thread has exited (or panicked): place nothing more on it.
    dead: AtomicBool,
}

/// A connection handed to a ring thread.
#[derive(Debug)]
struct Handoff {
    /// A duplicate of the connection's socket: the ring thread drops it only once nothing of
    /// the connection is left on the ring.
    stream: TcpStream,
    request_len: u32,
    reply_len: u32,
    watch: Watch,
    done: mpsc::SyncSender<Finished>,
}

/// How a handed-over connection ended, and the requests it was answered.
#[derive(Debug)]
struct Finished {
    result: Result<(), Ended>,
    requests: u64,
}

impl Pool {
    pub(crate) fn new(limits: Limits) -> Pool {
        let lanes = thread::available_parallelism().map_or(1, usize::from);
        Pool { limits, lanes, workers: Mutex::new(Vec::new()), threads: Mutex::new(Vec::new()) }
    }

    /// The ring thread for a connection that asked for `cpu` (the vetted Hello or the
    /// server's default) and `spin`: the one pinned there, or for unpinned connections the
    /// least busy of up to one per usable CPU; created (ring set up, pinned) when missing.
    /// Fails when a new ring thread cannot set its ring up (no usable io_uring).
    pub(crate) fn place(&self, cpu: Option<usize>, spin: bool) -> io::Result<Placed> {
        let mut workers = lock(&self.workers);
        workers.retain(|w| !w.dead.load(Ordering::Acquire));
        let mut matching = workers.iter().filter(|w| w.cpu == cpu && w.spin == spin);
        let chosen = if cpu.is_some() {
            matching.next().cloned()
        } else {
            let count = matching.clone().count();
            let least = matching.min_by_key(|w| w.connections.load(Ordering::Relaxed));
            match least {
                Some(w) if w.connections.load(Ordering::Relaxed) == 0 || count >= self.lanes => {
                    Some(Arc::clone(w))
                }
                _ => None,
            }
        };
        let worker = match chosen {
            Some(worker) => worker,
            None => {
                let worker = self.spawn(cpu, spin)?;
                workers.push(Arc::clone(&worker));
                worker
            }
        };
        worker.connections.fetch_add(1, Ordering::Relaxed);
        Ok(Placed { worker })
    }

    fn spawn(&self, cpu: Option<usize>, spin: bool) -> io::Result<Arc<Worker>> {
        let limits = self.limits.clone();
        let (started, start) = mpsc::channel();
        let name = format!("tcptail-ring-{}", lock(&self.threads).len());
        let handle = thread::Builder::new().name(name).spawn(move || {
            let pin_error = cpu.and_then(|cpu| {
                sys::pin_current_thread(cpu)
                    .err()
                    .map(|e| format!("pinning to CPU {cpu} failed: {e}"))
            });
            // Set up on this thread: the ring takes its only submitter from its creator. A send
            // slot for every connection the server may hold; queues and receive buffers for
            // up to RING_SIZED_FOR of them at a time (more share them: a receive that finds
            // no buffer is re-armed next turn, after this turn's buffers came back).
            let sized = limits.max_connections.min(RING_SIZED_FOR);
            let options = RingOptions {
                send_slots: limits.max_connections,
                ..ring_options(sized, 0, limits.sqpoll)
            };
            let setup = Ring::new(options).and_then(|ring| Ok((ring, EventFd::new()?)));
            let (ring, wake) = match setup {
                Ok(setup) => setup,
                Err(e) => {
                    let _ = started.send(Err(e));
                    return;
                }
            };
            let worker = Arc::new(Worker {
                cpu,
                spin,
                ran_on: sys::current_cpu(),
                pin_error,
                connections: AtomicUsize::new(0),
                incoming: Mutex::new(Vec::new()),
                wake,
                closing: AtomicBool::new(false),
                dead: AtomicBool::new(false),
            });
            if started.send(Ok(Arc::clone(&worker))).is_ok() {
                run(ring, &worker, &limits);
            }
        })?;
        let worker = start
            .recv()
            .map_err(|_| io::Error::other("the io_uring ring thread ended while starting"))?;
        lock(&self.threads).push(handle);
        worker
    }

    /// Ends every ring thread and waits for it; called once no connection thread is left
    /// (every connection has ended, none can be handed over any more).
    pub(crate) fn shutdown(&self) {
        for worker in lock(&self.workers).drain(..) {
            worker.closing.store(true, Ordering::Release);
            worker.wake.signal();
        }
        for handle in lock(&self.threads).drain(..) {
            let _ = handle.join();
        }
    }
}

/// A connection's place on a ring thread; dropping it frees the place.
#[derive(Debug)]
pub(crate) struct Placed {
    worker: Arc<Worker>,
}

impl Drop for Placed {
    fn drop(&mut self) {
        self.worker.connections.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Placed {
    /// The CPU the ring thread ran on once pinned (or, unpinned, when it started).
    pub(crate) fn server_cpu(&self) -> Option<usize> {
        self.worker.ran_on
    }

    /// Why pinning the ring thread failed, if it did.
    pub(crate) fn pin_error(&self) -> Option<String> {
        self.worker.pin_error.clone()
    }

    /// Hands the connection (a duplicate of `stream`) to the ring thread and waits until it
    /// ended there: how, and the requests it was answered.
    pub(crate) fn serve(
        &self,
        stream: &TcpStream,
        request_len: u32,
        reply_len: u32,
        watch: Watch,
    ) -> (Result<(), Ended>, u64) {
        let stream = match stream.try_clone() {
            Ok(stream) => stream,
            Err(e) => return (Err(Ended::Io(e)), 0),
        };
        let (done, finished) = mpsc::sync_channel(1);
        lock(&self.worker.incoming).push(Handoff { stream, request_len, reply_len, watch, done });
        self.worker.wake.signal();
        match finished.recv() {
            Ok(Finished { result, requests }) => (result, requests),
            Err(_) => (Err(Ended::Io(io::Error::other("the io_uring ring thread ended"))), 0),
        }
    }
}

/// Marks the ring thread dead when it exits, however: connections handed over and not yet
/// adopted are dropped, so their threads hear of it instead of waiting for ever.
struct Exit<'a>(&'a Worker);

impl Drop for Exit<'_> {
    fn drop(&mut self) {
        self.0.dead.store(true, Ordering::Release);
        lock(&self.0.incoming).clear();
    }
}

/// What the connection owes its peer, in the order the requests came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owed {
    /// A response of `len` bytes to request `seq`, completed by the receive reaped at
    /// `received` (the start of its service time).
    Response { seq: u64, len: usize, received: Instant },
    /// A StatsReply: this connection's window, reported once every earlier response is sent.
    Stats,
}

/// What is owed, front first.
type Backlog = VecDeque<Owed>;

/// The send in flight and what it still owes after the bytes in the slot.
#[derive(Debug, Default)]
struct Sending {
    /// The slot's bytes of the send in flight.
    range: std::ops::Range<usize>,
    /// A long response's zeros still owed after the slot (sent from the slot's zeros).
    zeros_left: usize,
    /// A StatsReply's bytes still owed after the slot.
    reply: Vec<u8>,
    reply_at: usize,
    /// The responses this send completes: when each one's request was received, and how
    /// many share that instant (their service times end when the send does).
    serving: Vec<(Instant, u64)>,
    /// When the send in flight was submitted; `None` when nothing is in flight.
    since: Option<Instant>,
}

impl Sending {
    fn busy(&self) -> bool {
        self.since.is_some() || self.zeros_left > 0 || self.reply_at < self.reply.len()
    }
}

/// One connection on a ring thread; its index is its send slot and its tokens'.
struct Conn {
    stream: TcpStream,
    /// Fires (shuts the read side down) after the idle timeout without a request.
    watch: Watch,
    splitter: Splitter,
    window: StatsWindow,
    backlog: Backlog,
    out: Sending,
    /// The multishot receive is armed (its last completion said more would come).
    armed: bool,
    requests: u64,
    done: mpsc::SyncSender<Finished>,
    /// How it ended, once it has: it leaves the ring when nothing of it is left in flight.
    ending: Option<Result<(), Ended>>,
}

/// What one ring thread does with its connections in a turn.
struct Connections {
    /// Indexed by send slot; grown on demand up to the server's limit, never shrunk.
    conns: Vec<Option<Conn>>,
    /// The occupied indices: a turn visits these, not the whole table (`bench local` allows
    /// 1024 connections; scanning that many entries twice per request doubled a one-connection
    /// round trip).
    live: Vec<usize>,
    /// Room for this many connections (the ring's send slots).
    capacity: usize,
    /// Requests answered by this thread so far (for the CPU shares of the windows).
    answered: u64,
    /// The server's stop flag: a peer that goes away while it is set was closed by it.
    stop: Arc<AtomicBool>,
}

/// The ring thread's loop, until the server ends (or the ring fails: then every
/// connection on it ends with the error).
fn run(mut ring: Ring, worker: &Worker, limits: &Limits) {
    let _exit = Exit(worker);
    let mut all = Connections {
        conns: Vec::new(),
        live: Vec::new(),
        capacity: limits.max_connections,
        answered: 0,
        stop: Arc::clone(&limits.stop),
    };
    let mut completions: Vec<Completion> = Vec::with_capacity(64);
    let mut wake_armed = false;
    let mut adopt = true;
    let mut last_request = Instant::now();
    // The clock of the latest turn that reaped completions.
    let mut reaped = last_request;
    let mut turns = 0u32;
    let failed = loop {
        if adopt {
            adopt = false;
            worker.wake.drain();
            let handed = std::mem::take(&mut *lock(&worker.incoming));
            for handoff in handed {
                all.adopt(&mut ring, handoff);
            }
            if worker.closing.load(Ordering::Acquire) && all.live.is_empty() {
                return;
            }
        }
        if !wake_armed {
            if let Err(e) = ring.poll_readable(worker.wake.as_fd(), WAKE_TOKEN) {
                break e;
            }
            wake_armed = true;
        }
        let mut staged = false;
        let mut oldest_send: Option<Instant> = None;
        for &i in &all.live {
            let Some(conn) = all.conns[i].as_mut() else { continue };
            if conn.ending.is_some() {
                continue;
            }
            if let Err(e) = conn.turn(&mut ring, i, reaped, all.answered, &mut staged) {
                conn.end(&mut ring, e);
                continue;
            }
            if let Some(since) = conn.out.since {
                oldest_send = Some(oldest_send.map_or(since, |o| o.min(since)));
            }
        }
        // Wait: spinning polls the queue; sends just staged are submitted without waiting;
        // otherwise the wait lasts until a completion, or until the oldest send in flight
        // reaches the write timeout.
        let timeout = oldest_send.map(|since| {
            limits.write_timeout.saturating_sub(since.elapsed()).max(Duration::from_millis(1))
        });
        let entered = if worker.spin {
            turns = turns.wrapping_add(1);
            if turns.is_multiple_of(1024) && last_request.elapsed() >= limits.spin_cap {
                ring.submit_and_wait(timeout)
            } else {
                ring.submit()
            }
        } else if staged {
            ring.submit()
        } else {
            ring.submit_and_wait(timeout)
        };
        if let Err(e) = entered {
            break e;
        }
        ring.completions(&mut completions);
        let now = if completions.is_empty() { None } else { Some(Instant::now()) };
        if let Some(now) = now {
            reaped = now;
        }
        for done in completions.drain(..) {
            if done.token == WAKE_TOKEN {
                wake_armed &= done.more;
                adopt = true;
                continue;
            }
            if all.complete(&mut ring, done, reaped) {
                last_request = reaped;
            }
        }
        if oldest_send.is_some() {
            all.end_stalled(&mut ring, now.unwrap_or_else(Instant::now), limits);
        }
        if worker.spin && turns.is_multiple_of(1024) && limits.stop.load(Ordering::Relaxed) {
            all.end_every(&mut ring, || Ended::Stopping);
        }
        all.finish_ended(&ring);
    };
    // The ring failed: nothing more can be waited for; every connection ends with the error
    // (the ring's drop cancels what is in flight, or leaks its buffers).
    all.end_every(&mut ring, || Ended::Io(io::Error::new(failed.kind(), failed.to_string())));
    for i in std::mem::take(&mut all.live) {
        let conn = all.conns[i].take().expect("a live index holds a connection");
        conn.finish();
    }
}

impl Connections {
    /// Takes a handed-over connection into a free index; its receive is armed next turn.
    fn adopt(&mut self, ring: &mut Ring, handoff: Handoff) {
        let Handoff { stream, request_len, reply_len, mut watch, done } = handoff;
        // Room for a response, and for a StatsReply in a few sends whatever the response size.
        let slot_len = (reply_len as usize).clamp(MIN_SLOT_LEN, RESPONSE_BUF_LEN);
        let free = (0..self.conns.len())
            .find(|&i| self.conns[i].is_none() && ring.resize_slot(i, slot_len))
            .or_else(|| {
                let next = self.conns.len();
                (next < self.capacity && ring.resize_slot(next, slot_len)).then(|| {
                    self.conns.push(None);
                    next
                })
            });
        let Some(i) = free else {
            // Cannot happen: every ring thread has room for the server's limit.
            let result = Err(Ended::Io(io::Error::other("no free connection on the ring")));
            let _ = done.send(Finished { result, requests: 0 });
            return;
        };
        watch.waiting();
        self.live.push(i);
        self.conns[i] = Some(Conn {
            stream,
            watch,
            splitter: Splitter::new(
                FrameParser::new(FrameKind::Request, request_len)
                    .with_max_reply_len(reply_len)
                    .with_stats_requests(),
            ),
            window: StatsWindow::start_shared(self.answered),
            backlog: Backlog::new(),
            out: Sending::default(),
            armed: false,
            requests: 0,
            done,
            ending: None,
        });
    }

    /// Hands a completion to its connection; true when it brought requests.
    fn complete(&mut self, ring: &mut Ring, done: Completion, reaped: Instant) -> bool {
        let op = Op::from_token(done.token);
        let i = match op {
            Op::Recv(i) | Op::Send(i) => i,
        };
        let Some(conn) = self.conns.get_mut(i).and_then(Option::as_mut) else {
            return false;
        };
        let stopping = self.stop.load(Ordering::Relaxed);
        match conn.complete(ring, i, done, reaped, &mut self.answered, stopping) {
            Ok(got) => got,
            Err(e) => {
                conn.end(ring, e);
                false
            }
        }
    }

    /// Ends every connection whose send in flight has made no progress for the write
    /// timeout (as of `now`).
    fn end_stalled(&mut self, ring: &mut Ring, now: Instant, limits: &Limits) {
        for &i in &self.live {
            let Some(conn) = self.conns[i].as_mut() else { continue };
            if conn.ending.is_none()
                && conn
                    .out
                    .since
                    .is_some_and(|since| now.duration_since(since) >= limits.write_timeout)
            {
                let stopping = limits.stop.load(Ordering::Relaxed);
                conn.end(ring, if stopping { Ended::Stopping } else { Ended::WriteStalled });
            }
        }
    }

    fn end_every(&mut self, ring: &mut Ring, why: impl Fn() -> Ended) {
        for &i in &self.live {
            if let Some(conn) = self.conns[i].as_mut() {
                conn.end(ring, why());
            }
        }
    }

    /// Lets every ended connection with nothing left on the ring go.
    fn finish_ended(&mut self, ring: &Ring) {
        let conns = &mut self.conns;
        self.live.retain(|&i| {
            let left = conns[i]
                .as_ref()
                .is_some_and(|c| c.ending.is_some() && !c.armed && ring.slot_free(i));
            if left {
                conns[i].take().expect("checked above").finish();
            }
            !left
        });
    }
}

impl Conn {
    /// Re-arms the receive if the kernel disarmed it, and stages the next send of what is
    /// owed if the last one is done.
    fn turn(
        &mut self,
        ring: &mut Ring,
        i: usize,
        reaped: Instant,
        answered_by_thread: u64,
        staged: &mut bool,
    ) -> Result<(), Ended> {
        let fd = self.stream.as_fd();
        if !self.armed {
            ring.arm_recv(fd, Op::Recv(i).token()).map_err(Ended::Io)?;
            self.armed = true;
        }
        if !self.out.busy() && !self.backlog.is_empty() {
            let slot = ring.send_slot(i).expect("no send is in flight");
            let len = stage(
                slot,
                &mut self.backlog,
                &mut self.out,
                &mut self.window,
                fd,
                answered_by_thread,
            )?;
            self.out.range = 0..len;
            ring.send(fd, i, self.out.range.clone(), Op::Send(i).token(), false)
                .map_err(Ended::Io)?;
            // The write timeout runs from this turn's clock (a few µs early at most).
            self.out.since = Some(reaped);
            *staged = true;
        }
        Ok(())
    }

    /// One completion of this connection's; `Ok(true)` when it brought requests.
    fn complete(
        &mut self,
        ring: &mut Ring,
        i: usize,
        done: Completion,
        reaped: Instant,
        answered_by_thread: &mut u64,
        stopping: bool,
    ) -> Result<bool, Ended> {
        let fd = self.stream.as_fd();
        match Op::from_token(done.token) {
            Op::Send(_) => {
                ring.sent(i);
                if self.ending.is_some() {
                    return Ok(false);
                }
                if done.result < 0 {
                    return Err(ended_by(done.result, stopping));
                }
                self.out.range.start += done.result as usize;
                if self.out.range.is_empty() {
                    let slot = ring.send_slot(i).expect("the send completed");
                    match next_chunk(slot, &mut self.out) {
                        Some(range) => self.out.range = range,
                        None => {
                            // Every byte of the send's responses is with the kernel.
                            self.out.since = None;
                            for (received, count) in self.out.serving.drain(..) {
                                self.window.answered_at(received, reaped, count);
                                *answered_by_thread += count;
                            }
                            return Ok(false);
                        }
                    }
                }
                // The next chunk, or the rest of a short send.
                ring.send(fd, i, self.out.range.clone(), Op::Send(i).token(), false)
                    .map_err(Ended::Io)?;
                self.out.since = Some(Instant::now());
                Ok(false)
            }
            Op::Recv(_) => {
                self.armed &= done.more;
                if self.ending.is_some() {
                    if let Some(bid) = done.buffer {
                        ring.recycle(bid);
                    }
                    return Ok(false);
                }
                match done.result {
                    n if n > 0 => {
                        let bid = done.buffer.expect("a receive with bytes names its buffer");
                        let mut got = 0u64;
                        let backlog = &mut self.backlog;
                        let r = self.splitter.feed(ring.received(bid, n as usize), |h: Header| {
                            if h.kind == FrameKind::StatsRequest {
                                backlog.push_back(Owed::Stats);
                            } else {
                                let len = h.reply_len as usize;
                                backlog.push_back(Owed::Response {
                                    seq: h.seq,
                                    len,
                                    received: reaped,
                                });
                                got += 1;
                            }
                            Ok::<(), Ended>(())
                        });
                        ring.recycle(bid);
                        r?;
                        if got > 0 {
                            self.requests += got;
                            self.watch.answered();
                            self.watch.waiting();
                        }
                        Ok(got > 0)
                    }
                    0 => Err(if self.watch.fired() {
                        Ended::Idle
                    } else if stopping {
                        Ended::Stopping
                    } else {
                        Ended::PeerClosed
                    }),
                    e if e == -libc::ENOBUFS => Ok(false),
                    e => Err(ended_by(e, stopping)),
                }
            }
        }
    }

    /// The connection ends with `why` (the first reason counts): what it has armed on the
    /// ring is cancelled, and it leaves once the kernel completed all of it.
    fn end(&mut self, ring: &mut Ring, why: Ended) {
        if self.ending.is_some() {
            return;
        }
        if ring.cancel_fd(self.stream.as_fd()).is_err() {
            // The cancel could not be queued: shutting the socket down completes its receive
            // (end-of-file) and a send in flight (an error) instead.
            let _ = self.stream.shutdown(std::net::Shutdown::Both);
        }
        self.ending = Some(Err(why));
    }

    /// Tells the connection's thread how it ended; the duplicate socket is closed here.
    fn finish(self) {
        let result = match self.ending {
            Some(Err(Ended::PeerClosed)) | None => Ok(()),
            Some(result) => result,
        };
        let _ = self.done.send(Finished { result, requests: self.requests });
    }
}

/// Smallest send slot: a StatsReply (up to a few KiB in practice) goes out in a few sends
/// however short the responses are.
const MIN_SLOT_LEN: usize = 4096;

/// Writes what is owed from the front of `backlog` into `slot` and returns the staged
/// length: as many whole responses as fit; a response longer than the slot alone (header and
/// the slot's zeros, the rest owed in `out.zeros_left`); a StatsReply alone, once every
/// earlier response is sent (its window then holds their service times), its bytes past the
/// slot owed in `out.reply`. The staged responses' receive instants go to `out.serving`.
fn stage(
    slot: &mut [u8],
    backlog: &mut Backlog,
    out: &mut Sending,
    window: &mut StatsWindow,
    fd: BorrowedFd<'_>,
    answered_by_thread: u64,
) -> Result<usize, Ended> {
    let mut used = 0;
    while let Some(&owed) = backlog.front() {
        let (seq, len, received) = match owed {
            Owed::Stats if used > 0 => break,
            Owed::Stats => {
                backlog.pop_front();
                out.reply = wire::stats_reply_frame(&window.report_shared(fd, answered_by_thread))
                    .map_err(|e| Ended::Io(io::Error::other(e.to_string())))?;
                out.reply_at = 0;
                return Ok(next_chunk(slot, out).expect("a StatsReply has bytes").end);
            }
            Owed::Response { seq, len, received } => (seq, len, received),
        };
        if len > slot.len() {
            if used > 0 {
                break;
            }
            backlog.pop_front();
            zero_payload(slot);
            let head: &mut [u8; HEADER_LEN] =
                (&mut slot[..HEADER_LEN]).try_into().expect("a slot holds a header");
            Header::response(seq, len as u32).encode(head);
            out.zeros_left = len - slot.len();
            serving(out, received);
            return Ok(slot.len());
        }
        if used + len > slot.len() {
            break;
        }
        backlog.pop_front();
        let frame = &mut slot[used..used + len];
        frame[HEADER_LEN..].fill(0);
        crate::wire::encode_response(frame, seq);
        serving(out, received);
        used += len;
    }
    Ok(used)
}

/// One more response in the send being staged, its request received at `received`.
fn serving(out: &mut Sending, received: Instant) {
    match out.serving.last_mut() {
        Some((at, count)) if *at == received => *count += 1,
        _ => out.serving.push((received, 1)),
    }
}

/// The next part of what the send in flight still owes, written into `slot`: a long
/// response's zeros after the header (the slot already holds zeros there) or a StatsReply's
/// next bytes; `None` when nothing is owed.
fn next_chunk(slot: &mut [u8], out: &mut Sending) -> Option<std::ops::Range<usize>> {
    if out.zeros_left > 0 {
        let chunk = out.zeros_left.min(slot.len() - HEADER_LEN);
        out.zeros_left -= chunk;
        return Some(HEADER_LEN..HEADER_LEN + chunk);
    }
    let rest = &out.reply[out.reply_at..];
    if rest.is_empty() {
        return None;
    }
    let chunk = rest.len().min(slot.len());
    slot[..chunk].copy_from_slice(&rest[..chunk]);
    out.reply_at += chunk;
    if out.reply_at == out.reply.len() {
        out.reply.clear();
        out.reply_at = 0;
    }
    Some(0..chunk)
}

fn zero_payload(slot: &mut [u8]) {
    slot[HEADER_LEN..].fill(0);
}

/// A failed operation's errno as the loop's end: a peer that went away is a close.
fn ended_by(result: i32, stopping: bool) -> Ended {
    let e = io::Error::from_raw_os_error(-result);
    use io::ErrorKind as K;
    match e.kind() {
        K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::NotConnected => {
            if stopping {
                Ended::Stopping
            } else {
                Ended::PeerClosed
            }
        }
        _ => Ended::Io(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn responses(now: Instant, owed: &[(u64, usize)]) -> Backlog {
        owed.iter().map(|&(seq, len)| Owed::Response { seq, len, received: now }).collect()
    }

    fn stage_some(slot: &mut [u8], backlog: &mut Backlog, out: &mut Sending) -> usize {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut window = StatsWindow::start_shared(0);
        stage(slot, backlog, out, &mut window, a.as_fd(), 0).unwrap()
    }

    #[test]
    fn responses_are_batched_until_the_slot_is_full() {
        let now = Instant::now();
        let mut slot = vec![7u8; 200];
        let mut backlog = responses(now, &[(1, 64), (2, 64), (3, 64), (4, 64)]);
        let mut out = Sending::default();
        assert_eq!(stage_some(&mut slot, &mut backlog, &mut out), 192);
        assert_eq!(backlog.len(), 1);
        assert_eq!(out.serving, [(now, 3)], "one receive completed all three");
        let h = Header::decode(slot[64..88].try_into().unwrap()).unwrap();
        assert_eq!((h.seq, h.frame_len), (2, 64));
        assert!(slot[88..128].iter().all(|&b| b == 0), "payload zeroed");
    }

    #[test]
    fn a_long_response_goes_alone_and_owes_the_rest() {
        let now = Instant::now();
        let mut slot = vec![7u8; 100];
        let mut backlog = responses(now, &[(1, 64), (2, 1000)]);
        let mut out = Sending::default();
        assert_eq!(stage_some(&mut slot, &mut backlog, &mut out), 64);
        assert_eq!(stage_some(&mut slot, &mut backlog, &mut out), 100);
        assert_eq!(out.zeros_left, 900);
        let h = Header::decode(slot[..24].try_into().unwrap()).unwrap();
        assert_eq!((h.seq, h.frame_len), (2, 1000));
        assert!(backlog.is_empty());
        let mut sent = 100;
        while let Some(range) = next_chunk(&mut slot, &mut out) {
            assert!(slot[range.clone()].iter().all(|&b| b == 0), "zeros after the header");
            sent += range.len();
        }
        assert_eq!(sent, 1000);
    }

    #[test]
    fn a_stats_reply_waits_for_earlier_responses_and_goes_out_whole() {
        let now = Instant::now();
        let mut slot = vec![7u8; 64];
        let mut backlog = responses(now, &[(1, 24)]);
        backlog.push_back(Owed::Stats);
        backlog.extend(responses(now, &[(2, 24)]));
        let mut out = Sending::default();
        assert_eq!(stage_some(&mut slot, &mut backlog, &mut out), 24, "the reply waits");
        out.serving.clear();
        let staged = stage_some(&mut slot, &mut backlog, &mut out);
        let mut bytes = slot[..staged].to_vec();
        assert!(out.busy(), "a reply longer than the slot owes the rest");
        while let Some(range) = next_chunk(&mut slot, &mut out) {
            bytes.extend_from_slice(&slot[range]);
        }
        assert!(out.serving.is_empty(), "a StatsReply answers no request");
        let stats = wire::read_stats_reply(&mut &bytes[..], 0).unwrap();
        assert_eq!(stats.requests, 0);
        assert_eq!(backlog.len(), 1, "the next response stays owed");
    }
}
