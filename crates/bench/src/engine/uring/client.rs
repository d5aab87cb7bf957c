//! The io_uring client: a thread's connections on one ring, with the default engine's load
//! shapes (`crate::connection::event_loop`): closed loop with `--depth` requests outstanding
//! per connection, open loop (`--rate`, each connection on its own schedule, latency from
//! each request's intended send time), connect-per-request (`--mode crr`, closed or open
//! loop: one transaction per slot at a time, failures counted by cause and charged from
//! their due time by the default engine's own accounting) and `--attribute`.
//!
//! What is measured and how it is recorded is shared with the default engine: the slot core
//! (`crate::connection::slot_loop`) runs the load shapes, matches responses to requests,
//! keeps the results and charges failures; this module is the I/O under it
//! (`crate::connection::slot_loop::EngineIo`):
//!
//! - Each long-lived socket has one multishot receive armed (provided buffers); a
//!   connect-per-request socket has one single-shot receive at a time, so nothing is armed on
//!   it when it is closed.
//! - Requests are encoded into the connection's output and copied into its send slot; one send
//!   per connection is in flight at a time (two sends on one TCP socket could be reordered).
//! - Closed loop at depth 1 **lends** its sends (`crate::sys::uring::Ring::send`): they post
//!   no completion when they succeed, the answer proves the bytes were taken, so one
//!   `io_uring_enter` per loop turn both submits every connection's next request and waits for
//!   the next answers. Other shapes take the send's completion (the next bytes may be due
//!   before any answer).
//!
//! Deadlines: on long-lived connections the run's watchdog (`crate::watchdog`) shuts the read
//! side of a socket that waited too long without progress, which ends its receive with
//! end-of-file, so a closed-loop wait needs no kernel timer. Open loop and connect-per-request
//! wait with a timer anyway (the next intended send time, the connect), and check the oldest
//! request's age on every slice like the default engine's loop. A request that gets no answer
//! is counted and kept as a lower bound (see `crate::connection`).

use std::io;
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use socket2::SockAddr;

use super::ring_options;
use crate::config::{BenchConfig, Engine, TxMode};
use crate::connection::slot_loop::{
    EngineIo, Slot, SlotLoop, Turn, Wait, connect_error, crr_socket, setup_error,
};
use crate::connection::{LoopError, Shared, hello_frame};
use crate::run::{BenchError, RawRun};
use crate::server_stats;
use crate::sys::uring::{Completion, MAX_TOKEN, Ring};
use crate::watchdog::Watch;
use crate::wire::{self, FrameError, ServerStats};

/// Largest send slot: longer output goes out in several sends.
const SEND_SLOT_MAX: usize = 64 * 1024;
/// Spinning: completion-queue polls between looks at the stop flag and the clock.
const SPIN_TURNS_PER_CHECK: u32 = 256;

/// What a completion is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Recv,
    Send,
    Connect,
}

/// A completion's token: the operation, the slot and the slot's socket generation (a
/// connect-per-request slot gets a new socket per transaction; completions for an older one
/// are recognised and ignored).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Token {
    kind: Kind,
    slot: usize,
    generation: u32,
}

impl Token {
    fn encode(self) -> u64 {
        let kind = match self.kind {
            Kind::Recv => 0,
            Kind::Send => 1,
            Kind::Connect => 2,
        };
        let token = u64::from(self.generation & 0x3fff_ffff) << 32
            | (self.slot as u64 & 0x3fff_ffff) << 2
            | kind;
        debug_assert!(token <= MAX_TOKEN);
        token
    }

    fn decode(token: u64) -> Token {
        let kind = match token & 3 {
            0 => Kind::Recv,
            1 => Kind::Send,
            _ => Kind::Connect,
        };
        Token {
            kind,
            slot: ((token >> 2) & 0x3fff_ffff) as usize,
            generation: (token >> 32) as u32,
        }
    }
}

/// Runs the connections `indices` of the run on this thread and its ring.
pub(crate) fn run_thread(
    config: &BenchConfig,
    indices: &[usize],
    shared: &Shared<'_>,
) -> Result<RawRun, BenchError> {
    crate::connection::slot_loop::run_thread::<UringIo>(config, indices, shared)
}

/// A thread's ring.
pub(crate) struct UringIo {
    ring: Ring,
    /// Length of each slot's send slot in the ring.
    slot_len: usize,
    server: SockAddr,
    /// This phase lends its sends (closed loop, depth 1).
    lend: bool,
    completions: Vec<Completion>,
}

/// The io_uring engine's own state per slot.
#[derive(Default)]
pub(crate) struct UringSlot {
    /// Long-lived connections: the watchdog's view of this connection's waits.
    watch: Option<Watch>,
    /// The socket's generation (see [`Token`]), masked to the token's width.
    generation: u32,
    /// Where in `out` the send in flight began.
    send_from: usize,
    /// A send whose completion is due is in flight.
    send_busy: bool,
    /// A lent send is in flight: freed by the next answer.
    lent: bool,
    recv_armed: bool,
    /// A StatsRequest is out (between phases): the bytes received since, until they hold
    /// its StatsReply.
    stats_reply: Option<Vec<u8>>,
}

impl EngineIo for UringIo {
    type Slot = UringSlot;
    const SPIN_TURNS_PER_LOOK: u32 = SPIN_TURNS_PER_CHECK;
    const TIMED_CLOSED_LOOP: bool = false;
    const STAMP_EACH_REQUEST: bool = true;

    fn open(config: &BenchConfig, slots: usize) -> Result<Self, (&'static str, io::Error)> {
        let Engine::IoUring { sqpoll } = config.engine else {
            unreachable!("the io_uring client runs io_uring configurations only")
        };
        let crr = config.mode == TxMode::Crr;
        let hello_len = if crr { hello_frame(config).len() } else { 0 };
        // Room for a whole pipeline (and a Hello before it), up to the largest slot.
        let wanted = config.request_len as usize * config.depth as usize + hello_len;
        let slot_len = wanted.clamp(wire::HEADER_LEN, SEND_SLOT_MAX);
        let ring = Ring::new(ring_options(slots, slot_len, sqpoll))
            .map_err(|e| ("setting up io_uring (--engine io_uring)", e))?;
        Ok(UringIo {
            ring,
            slot_len,
            server: SockAddr::from(config.server),
            lend: false,
            completions: Vec::with_capacity(64),
        })
    }

    fn adopt(
        &mut self,
        config: &BenchConfig,
        shared: &Shared<'_>,
        stream: &TcpStream,
        _i: usize,
    ) -> Result<UringSlot, (&'static str, io::Error)> {
        let watch = shared
            .watchdog
            .watch(stream, config.response_timeout)
            .map_err(|e| ("watching the socket", e))?;
        Ok(UringSlot { watch: Some(watch), ..UringSlot::default() })
    }

    fn ready(t: &mut SlotLoop<'_, Self>) -> Result<(), BenchError> {
        for i in 0..t.slots.len() {
            t.arm(i).map_err(|e| e.into_bench_error(t.slots[i].index))?;
        }
        Ok(())
    }

    fn warmed_up(t: &mut SlotLoop<'_, Self>) -> Result<(), BenchError> {
        // The servers' windows start with the measured part.
        let asking: Vec<usize> = (0..t.slots.len())
            .filter(|&i| {
                let slot = &t.slots[i];
                slot.stream.is_some() && !slot.dead && server_stats::reports_stats(&slot.outcome)
            })
            .collect();
        for (i, answer) in t.ask_stats(&asking, server_stats::STATS_TIMEOUT) {
            if let Err(e) = answer {
                let source = server_stats::window_not_started(e);
                return Err(setup_error(t.config, t.slots[i].index, "after the warm-up", source));
            }
        }
        Ok(())
    }

    fn collect_server_stats(t: &mut SlotLoop<'_, Self>) {
        t.collect_stats();
    }

    fn phase_starts(&mut self, config: &BenchConfig, open: bool) {
        self.lend = !open && config.depth == 1;
    }

    /// Hands the next part of slot `i`'s output to the kernel, unless a send is in flight.
    fn flush(t: &mut SlotLoop<'_, Self>, i: usize) -> Result<(), LoopError> {
        let token = t.token(Kind::Send, i);
        let slot = &mut t.slots[i];
        let Some(stream) = &slot.stream else { return Ok(()) };
        if slot.io.send_busy
            || slot.io.lent
            || slot.connecting.is_some()
            || slot.out_pos == slot.out.len()
        {
            return Ok(());
        }
        let rest = slot.out.len() - slot.out_pos;
        let chunk = rest.min(t.io.slot_len);
        let buf = t.io.ring.send_slot(i).expect("no send is in flight on this slot");
        buf[..chunk].copy_from_slice(&slot.out[slot.out_pos..slot.out_pos + chunk]);
        // Lent only when the answer to come proves this send done: it carries the rest of
        // the one request in flight.
        let lend = t.io.lend && chunk == rest;
        t.io.ring.send(stream.as_fd(), i, 0..chunk, token, lend)?;
        slot.io.send_from = slot.out_pos;
        if lend {
            slot.io.lent = true;
            slot.out_pos += chunk;
        } else {
            slot.io.send_busy = true;
        }
        Ok(())
    }

    /// A new socket for slot `i`, profile applied, connect submitted.
    fn start_connect(t: &mut SlotLoop<'_, Self>, i: usize) -> io::Result<()> {
        let stream: TcpStream = crr_socket(t.config)?.into();
        let slot = &mut t.slots[i];
        slot.io.generation = slot.io.generation.wrapping_add(1) & 0x3fff_ffff;
        let token = t.token(Kind::Connect, i);
        t.io.ring.connect(stream.as_fd(), &t.io.server, token)?;
        let slot = &mut t.slots[i];
        slot.io.recv_armed = false;
        slot.begin_connect(stream, Instant::now());
        Ok(())
    }

    fn first_in_flight(slot: &mut Slot<UringSlot>) {
        if let Some(watch) = &mut slot.io.watch {
            watch.waiting();
        }
    }

    /// Nothing is armed on a connect-per-request socket by the time it closes: its receive
    /// was single-shot, its send lent and answered, or `abandon` cancelled them.
    fn closing(&mut self, _slot: &mut Slot<UringSlot>, _i: usize) {}

    /// Cancels what is armed on the socket; a send still in flight keeps the slot's send
    /// buffer until its (ignored) completion.
    fn abandon(&mut self, slot: &mut Slot<UringSlot>, _i: usize) {
        slot.io.recv_armed = false;
        // Completions still to come for this socket are ignored from here on.
        slot.io.generation = slot.io.generation.wrapping_add(1) & 0x3fff_ffff;
        if let Some(stream) = &slot.stream {
            let _ = self.ring.cancel_fd(stream.as_fd());
            let _ = self.ring.submit();
        }
    }

    /// Closes slot `i`'s socket, cancelling whatever is armed on it first.
    fn drop_socket(&mut self, slot: &mut Slot<UringSlot>, _i: usize) {
        slot.io.watch = None;
        if let Some(stream) = slot.stream.take() {
            let _ = self.ring.cancel_fd(stream.as_fd());
            let _ = self.ring.submit();
        }
        slot.io.recv_armed = false;
        slot.io.send_busy = false;
    }

    fn wait(t: &mut SlotLoop<'_, Self>, wait: Wait) -> io::Result<bool> {
        t.wait_ring(match wait {
            Wait::Look => None,
            Wait::For(d) => Some(d),
            Wait::Forever => Some(Duration::MAX),
        })?;
        Ok(!t.io.completions.is_empty())
    }

    fn dispatch(t: &mut SlotLoop<'_, Self>, turn: Turn) -> Result<(), (usize, LoopError)> {
        let Turn { done, start, sending, measured, .. } = turn;
        let mut batch = std::mem::take(&mut t.io.completions);
        let mut result = Ok(());
        for c in batch.drain(..) {
            if result.is_ok() {
                let i = Token::decode(c.token).slot;
                let handled = t.complete(c, done, start, sending, measured);
                result = t.settle(i, handled, turn);
            } else if let Some(bid) = c.buffer {
                t.io.ring.recycle(bid);
            }
        }
        t.io.completions = batch;
        result
    }
}

impl SlotLoop<'_, UringIo> {
    /// Asks each connection's server for the measured part's stats (`crate::server_stats`),
    /// all at once over the ring, and keeps the answers in the connections' outcomes.
    fn collect_stats(&mut self) {
        let stopping = self.shared.control.stopped();
        let mut asking = Vec::new();
        let mut budget = Duration::ZERO;
        for (i, slot) in self.slots.iter_mut().enumerate() {
            if slot.dead || slot.stream.is_none() {
                continue;
            }
            let outstanding = slot.pipeline.len() as u64;
            if let Some(b) = server_stats::end_budget(&mut slot.outcome, outstanding, stopping) {
                asking.push(i);
                budget = budget.max(b);
            }
        }
        for (i, answer) in self.ask_stats(&asking, budget) {
            server_stats::keep(&mut self.slots[i].outcome, answer);
        }
    }

    /// Sends a StatsRequest on each of `slots` (long-lived, idle, connected) and waits at
    /// most `budget` for their StatsReplies, decoded by the wire's own reader; returns each
    /// slot's answer. The multishot receives stay armed: bytes are routed to the reply.
    fn ask_stats(
        &mut self,
        slots: &[usize],
        budget: Duration,
    ) -> Vec<(usize, Result<ServerStats, FrameError>)> {
        let deadline = Instant::now() + budget;
        let lend = std::mem::replace(&mut self.io.lend, false);
        let mut answers = Vec::with_capacity(slots.len());
        let mut pending = Vec::with_capacity(slots.len());
        for &i in slots {
            let slot = &mut self.slots[i];
            if slot.out_pos == slot.out.len() {
                slot.out.clear();
                slot.out_pos = 0;
            }
            wire::write_stats_request(&mut slot.out).expect("a frame encodes into memory");
            slot.io.stats_reply = Some(Vec::new());
            match UringIo::flush(self, i) {
                Ok(()) => pending.push(i),
                Err(e) => answers.push((i, Err(loop_error_as_frame(e)))),
            }
        }
        while !pending.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            if let Err(e) = self.wait_ring(Some(left)) {
                for i in pending.drain(..) {
                    answers.push((i, Err(FrameError::Io(io::Error::new(e.kind(), e.to_string())))));
                }
                break;
            }
            let mut batch = std::mem::take(&mut self.io.completions);
            let done = Instant::now();
            let mut failed = Vec::new();
            for c in batch.drain(..) {
                let i = Token::decode(c.token).slot;
                if let Err(e) = self.complete(c, done, done, false, false) {
                    failed.push((i, e));
                }
            }
            self.io.completions = batch;
            pending.retain(|&i| {
                let bytes = self.slots[i].io.stats_reply.as_deref().unwrap_or_default();
                let answer = match wire::read_stats_reply(&mut &bytes[..], 0) {
                    // Not all there yet: an error on the socket (a close after an Error
                    // frame is read above) ends the wait, else more bytes will come.
                    Err(FrameError::Io(e)) if e.kind() == io::ErrorKind::UnexpectedEof => {
                        match failed.iter().position(|(f, _)| *f == i) {
                            Some(at) => Err(loop_error_as_frame(failed.swap_remove(at).1)),
                            None => return true,
                        }
                    }
                    answer => answer,
                };
                answers.push((i, answer));
                false
            });
        }
        for i in pending {
            let late = io::Error::new(io::ErrorKind::TimedOut, "no answer in time");
            answers.push((i, Err(FrameError::Io(late))));
        }
        for &i in slots {
            self.slots[i].io.stats_reply = None;
        }
        self.io.lend = lend;
        answers
    }

    /// Submits what is queued and waits for completions: spinning looks once; `timeout` of
    /// `Duration::MAX` waits for the next completion without a timer.
    fn wait_ring(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        match timeout {
            None => {
                self.io.ring.submit()?;
                std::hint::spin_loop();
            }
            Some(Duration::MAX) => self.io.ring.submit_and_wait(None)?,
            Some(t) if t.is_zero() => self.io.ring.submit()?,
            Some(t) => self.io.ring.submit_and_wait(Some(t))?,
        }
        self.io.ring.completions(&mut self.io.completions);
        Ok(())
    }

    fn token(&self, kind: Kind, i: usize) -> u64 {
        Token { kind, slot: i, generation: self.slots[i].io.generation }.encode()
    }

    /// Arms slot `i`'s receive if its socket has none: multishot on a long-lived connection,
    /// single-shot on a connect-per-request one.
    fn arm(&mut self, i: usize) -> Result<(), LoopError> {
        let token = self.token(Kind::Recv, i);
        let crr = self.config.mode == TxMode::Crr;
        let slot = &mut self.slots[i];
        let Some(stream) = &slot.stream else { return Ok(()) };
        if slot.io.recv_armed || slot.dead || slot.connecting.is_some() {
            return Ok(());
        }
        if crr {
            self.io.ring.arm_recv_once(stream.as_fd(), token)?;
        } else {
            self.io.ring.arm_recv(stream.as_fd(), token)?;
        }
        slot.io.recv_armed = true;
        Ok(())
    }

    /// Handles one completion.
    fn complete(
        &mut self,
        c: Completion,
        done: Instant,
        start: Instant,
        sending: bool,
        measured: bool,
    ) -> Result<(), LoopError> {
        let token = Token::decode(c.token);
        let i = token.slot;
        let current = self.slots[i].io.generation == token.generation && !self.slots[i].dead;
        match token.kind {
            Kind::Send => {
                // Any send completion frees the slot's buffer: the kernel is done with it.
                self.io.ring.sent(i);
                let slot = &mut self.slots[i];
                if !current {
                    // A failed transaction's send: the slot's next one may go now.
                    slot.io.send_busy = false;
                    return if slot.dead { Ok(()) } else { UringIo::flush(self, i) };
                }
                if slot.io.lent {
                    // A lent send posts a completion only when it failed.
                    slot.io.lent = false;
                    return Err(send_failed(c.result));
                }
                slot.io.send_busy = false;
                if c.result < 0 {
                    return Err(send_failed(c.result));
                }
                slot.out_pos = slot.io.send_from + c.result as usize;
                UringIo::flush(self, i)
            }
            Kind::Connect => {
                if !current {
                    return Ok(());
                }
                if c.result < 0 {
                    let e = io::Error::from_raw_os_error(-c.result);
                    // Open loop: the caller counts it; closed loop stops with it.
                    return Err(if self.slots[i].due.is_some() {
                        LoopError::Io(e)
                    } else {
                        connect_error(e)
                    });
                }
                self.connected(i, done, measured)
            }
            Kind::Recv => {
                if current && !c.more {
                    self.slots[i].io.recv_armed = false;
                }
                let outcome = match (current, c.result, c.buffer) {
                    (false, _, buffer) => {
                        if let Some(bid) = buffer {
                            self.io.ring.recycle(bid);
                        }
                        return Ok(());
                    }
                    (true, n, Some(bid)) if n > 0 && self.slots[i].io.stats_reply.is_some() => {
                        let bytes = self.io.ring.received(bid, n as usize);
                        self.slots[i]
                            .io
                            .stats_reply
                            .as_mut()
                            .expect("checked")
                            .extend_from_slice(bytes);
                        self.io.ring.recycle(bid);
                        Ok(0)
                    }
                    (true, n, Some(bid)) if n > 0 => {
                        let r = self.received(i, bid, n as usize, done, start, measured);
                        self.io.ring.recycle(bid);
                        r
                    }
                    // Out of provided buffers: re-armed below once they are back.
                    (true, n, _) if n == -libc::ENOBUFS => Ok(0),
                    (true, n, _) => return self.lost(i, n, start, done, measured),
                };
                let answered = outcome?;
                if answered > 0 && sending && self.slots[i].schedule.is_none() {
                    self.refill(i, done, None, measured)?;
                }
                let slot = &self.slots[i];
                // A connect-per-request socket is re-armed only while its answer is due.
                let wanted = self.config.mode == TxMode::Rr || slot.pipeline.len() > 0;
                if wanted && slot.stream.is_some() && !slot.io.recv_armed {
                    self.arm(i)?;
                }
                Ok(())
            }
        }
    }

    /// The `len` bytes of provided buffer `bid` arrived on slot `i`: every response they
    /// complete is matched and recorded. Returns how many were answered.
    fn received(
        &mut self,
        i: usize,
        bid: u16,
        len: usize,
        done: Instant,
        start: Instant,
        measured: bool,
    ) -> Result<u32, LoopError> {
        let mut at = 0;
        let mut answered = 0u32;
        while at < len && self.slots[i].stream.is_some() {
            let slot = &mut self.slots[i];
            let space = slot.reader.space();
            let take = space.len().min(len - at);
            space[..take].copy_from_slice(&self.io.ring.received(bid, len)[at..at + take]);
            slot.reader.commit(take);
            at += take;
            while let Some(header) = self.slots[i].reader.take_frame()? {
                let slot = &mut self.slots[i];
                let req = slot.pipeline.answer(&header)?;
                answered += 1;
                if slot.io.lent {
                    // The answer proves the lent send's bytes were taken.
                    slot.io.lent = false;
                    self.io.ring.sent(i);
                }
                if let Some(watch) = &mut slot.io.watch {
                    watch.answered();
                    if slot.pipeline.len() > 0 {
                        watch.waiting();
                    }
                }
                let after = if req.before.is_some() { self.snapshot(i) } else { None };
                let (control, index) = (self.shared.control, self.slots[i].index);
                self.m.answered(self.config, control, start, index, req, done, measured, after);
                if (self.m.requests & 4095) == 0 {
                    self.note_cpu();
                }
                if self.config.mode == TxMode::Crr {
                    self.close_transaction(i);
                    break;
                }
            }
        }
        Ok(answered)
    }

    /// Slot `i` can receive nothing more (end-of-file or an error, `result`): the watchdog's
    /// doing (timeout or stop grace: what is in flight is unanswered) or the server's.
    fn lost(
        &mut self,
        i: usize,
        result: i32,
        start: Instant,
        now: Instant,
        measured: bool,
    ) -> Result<(), LoopError> {
        let slot = &mut self.slots[i];
        slot.io.recv_armed = false;
        if slot.due.is_some() {
            // An open-loop transaction's connection: the caller counts its failure.
            return Err(if result == 0 {
                LoopError::Closed
            } else {
                LoopError::Io(io::Error::from_raw_os_error(-result))
            });
        }
        if !slot.io.watch.as_ref().is_some_and(Watch::fired) {
            return Err(if result == 0 {
                LoopError::Protocol("server closed the connection".into())
            } else {
                LoopError::Io(io::Error::from_raw_os_error(-result))
            });
        }
        let (index, waiting) = (slot.index, slot.pipeline.oldest().map(|r| r.seq));
        let count = slot.pipeline.len();
        if !measured && !self.shared.control.stopped() && count > 0 {
            return Err(LoopError::Protocol(format!(
                "no response within {:?} during the warm-up",
                self.config.response_timeout
            )));
        }
        self.give_up(i, start, now, measured);
        let timeout = self.config.response_timeout;
        let warning = match (waiting, self.shared.control.stopped()) {
            (None, _) => format!(
                "connection {index}: answered at its response timeout ({timeout:?}); the \
                 connection stopped there"
            ),
            (Some(seq), true) => format!("connection {index}: stopped while request {seq} waited"),
            (Some(seq), false) if count == 1 => format!(
                "connection {index}: request {seq} got no response within {timeout:?}; the \
                 connection stopped there"
            ),
            (Some(seq), false) => format!(
                "connection {index}: request {seq} got no response within {timeout:?}; gave up \
                 with {count} request(s) unanswered and the connection stopped there"
            ),
        };
        if measured {
            self.m.warnings.push(warning);
        }
        Ok(())
    }

    /// Connect-per-request: slot `i`'s connect finished; Hello and request leave together.
    fn connected(&mut self, i: usize, done: Instant, measured: bool) -> Result<(), LoopError> {
        let began = self.slots[i].connecting.take().expect("connecting");
        self.queue_first_request(i, began, done, measured);
        self.arm(i)?;
        UringIo::flush(self, i)
    }
}

/// A loop error met while asking for stats, as the stats exchange's error.
fn loop_error_as_frame(e: LoopError) -> FrameError {
    match e {
        LoopError::Io(e) => FrameError::Io(e),
        LoopError::Protocol(message) => FrameError::Io(io::Error::other(message)),
        LoopError::Closed => FrameError::Io(io::ErrorKind::UnexpectedEof.into()),
    }
}

/// A send that failed (`result`: a negative errno, or the bytes a lent send took before it
/// stopped).
fn send_failed(result: i32) -> LoopError {
    if result < 0 {
        LoopError::Io(io::Error::from_raw_os_error(-result))
    } else {
        LoopError::Protocol(format!("a send stopped after {result} bytes"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_round_trip() {
        for kind in [Kind::Recv, Kind::Send, Kind::Connect] {
            for (slot, generation) in [(0, 0), (1023, 7), (5, 0x3fff_ffff)] {
                let t = Token { kind, slot, generation };
                assert_eq!(Token::decode(t.encode()), t);
                assert!(t.encode() <= MAX_TOKEN);
            }
        }
    }
}
