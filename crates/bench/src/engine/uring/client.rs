//! The io_uring client: a thread's connections on one ring, with the default engine's load
//! shapes (`crate::connection::event_loop`): closed loop with `--depth` requests outstanding
//! per connection, open loop (`--rate`, each connection on its own schedule, latency from
//! each request's intended send time), connect-per-request (`--mode crr`, closed or open
//! loop: one transaction per slot at a time, failures counted by cause and charged from
//! their due time by the default engine's own accounting) and `--attribute`.
//!
//! What is measured and how it is recorded is shared with the default engine: requests in
//! flight are matched to responses by `crate::connection::event_loop::Pipeline`, responses
//! reassembled by `crate::connection::reader::ResponseReader`, results kept in
//! `crate::connection::Partial`, schedules from `crate::pacer`, kernel snapshots from
//! `crate::connection::kernel_snapshot`. Only the I/O differs:
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

use std::collections::BTreeSet;
use std::io;
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use socket2::SockAddr;

use super::ring_options;
use crate::attribution::KernelSnapshot;
use crate::config::{BenchConfig, Engine, Load, StopAfter, TxMode};
use crate::connection::event_loop::{
    Failure, Pipeline, SlotTurn, charge_failed_transaction, charge_not_started, connect_error,
    connection_schedule, crr_socket, phase_quota, take_due,
};
use crate::connection::reader::ResponseReader;
use crate::connection::{
    HANDSHAKE_TIMEOUT, LoopError, Outstanding, POLL_SLICE, Partial, STOP_GRACE, Shared, connect,
    hello_frame, kernel_snapshot, outcomes_seen_on,
};
use crate::pacer::Schedule;
use crate::run::{BenchError, ConnectionOutcome, RawRun};
use crate::server_stats;
use crate::sys;
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

/// One connection slot of a thread.
struct Slot {
    /// The run's connection index.
    index: usize,
    /// None between two connect-per-request transactions, or once the slot gave up.
    stream: Option<TcpStream>,
    /// Long-lived connections: the watchdog's view of this connection's waits.
    watch: Option<Watch>,
    /// The socket's generation (see [`Token`]), masked to the token's width.
    generation: u32,
    reader: ResponseReader,
    /// Encoded requests not yet handed to the kernel, from `out_pos` on.
    out: Vec<u8>,
    out_pos: usize,
    /// Where in `out` the send in flight began.
    send_from: usize,
    /// A send whose completion is due is in flight.
    send_busy: bool,
    /// A lent send is in flight: freed by the next answer.
    lent: bool,
    recv_armed: bool,
    pipeline: Pipeline,
    next_seq: u64,
    /// Requests this slot may still start in the current phase (`--count`), if limited.
    quota: Option<u64>,
    /// Open loop: this connection's schedule and its next intended send time.
    schedule: Option<(Schedule, Instant)>,
    /// Connect-per-request: when the pending connect started.
    connecting: Option<Instant>,
    /// Open-loop connect-per-request: when the transaction in flight was due.
    due: Option<Instant>,
    /// Open-loop connect-per-request: when the slot last became free (a transaction due
    /// before then waited for it).
    free_since: Instant,
    /// Stopped for good; its waits are already charged.
    dead: bool,
    /// A StatsRequest is out (between phases): the bytes received since, until they hold
    /// its StatsReply.
    stats_reply: Option<Vec<u8>>,
    is_bbr: bool,
    outcome: ConnectionOutcome,
}

impl Slot {
    /// Open loop: the intended time of this slot's next request if it is due by `now` (and
    /// before `until`) and the slot may still send, its schedule moved on past it.
    fn take_due(
        &mut self,
        now: Instant,
        until: Option<Instant>,
        start: Instant,
    ) -> Option<Instant> {
        let may_send = !self.dead && self.quota != Some(0);
        take_due(&mut self.schedule, may_send, now, until, start)
    }

    /// What the connect-per-request accounting moves on in this slot.
    fn turn(&mut self) -> SlotTurn<'_> {
        SlotTurn {
            index: self.index,
            pipeline: &mut self.pipeline,
            next_seq: &mut self.next_seq,
            quota: &mut self.quota,
            schedule: &mut self.schedule,
        }
    }
}

/// A thread's connections and its ring.
struct ThreadLoop<'a> {
    config: &'a BenchConfig,
    shared: &'a Shared<'a>,
    ring: Ring,
    slots: Vec<Slot>,
    /// Length of each slot's send slot in the ring.
    slot_len: usize,
    /// One request, encoded (its payload zeros).
    request: Vec<u8>,
    hello: Vec<u8>,
    server: SockAddr,
    /// This phase lends its sends (closed loop, depth 1).
    lend: bool,
    completions: Vec<Completion>,
    m: Partial,
    snapshot_costs: Vec<u64>,
    cpus_seen: BTreeSet<usize>,
}

/// Runs the connections `indices` of the run on this thread and its ring: handshakes,
/// warm-up, the barrier every thread passes before measuring, the measured part.
pub(crate) fn run_thread(
    config: &BenchConfig,
    indices: &[usize],
    shared: &Shared<'_>,
) -> Result<RawRun, BenchError> {
    let (mut thread, start) =
        shared.start_measuring(ThreadLoop::prepare(config, indices, shared))?;
    thread.m = Partial::measuring(shared.control);
    thread.run_phase(start, config.stop, true).map_err(|(index, e)| e.into_bench_error(index))?;
    thread.collect_server_stats();
    let outcomes = outcomes_seen_on(
        &mut thread.cpus_seen,
        thread.slots.iter_mut().map(|slot| &mut slot.outcome),
    );
    let m = std::mem::take(&mut thread.m);
    Ok(m.into_raw(start, &thread.snapshot_costs, outcomes))
}

impl<'a> ThreadLoop<'a> {
    fn prepare(
        config: &'a BenchConfig,
        indices: &[usize],
        shared: &'a Shared<'a>,
    ) -> Result<ThreadLoop<'a>, BenchError> {
        let Engine::IoUring { sqpoll } = config.engine else {
            unreachable!("the io_uring client runs io_uring configurations only")
        };
        let first = indices.first().copied().unwrap_or(0);
        let err = |index, step, source| BenchError::Connect {
            connection: index,
            server: config.server,
            step,
            source,
        };
        if let Some(cpu) = config.client_cpu {
            sys::pin_current_thread(cpu).map_err(|e| err(first, "pinning the client thread", e))?;
        }
        let hello = hello_frame(config);
        let crr = config.mode == TxMode::Crr;
        // Room for a whole pipeline (and a Hello before it), up to the largest slot.
        let wanted =
            config.request_len as usize * config.depth as usize + if crr { hello.len() } else { 0 };
        let slot_len = wanted.clamp(wire::HEADER_LEN, SEND_SLOT_MAX);
        let ring = Ring::new(ring_options(indices.len(), slot_len, sqpoll))
            .map_err(|e| err(first, "setting up io_uring (--engine io_uring)", e))?;
        let mut slots = Vec::with_capacity(indices.len());
        for &index in indices {
            let (stream, outcome) = connect(config, index)?;
            let is_bbr = outcome.congestion.as_deref() == Some("bbr");
            let mut reader = ResponseReader::new(config.reply_len as usize);
            let (stream, watch) = if crr {
                // This first connection only told what the server does with the profile.
                let _ = sys::set_linger_zero(stream.as_fd());
                reader.accept_welcomes();
                (None, None)
            } else {
                let watch = shared
                    .watchdog
                    .watch(&stream, config.response_timeout)
                    .map_err(|e| err(index, "watching the socket", e))?;
                if let Some(sampler) = shared.sampler {
                    sampler.watch(index, &stream, is_bbr);
                }
                (Some(stream), Some(watch))
            };
            slots.push(Slot {
                index,
                stream,
                watch,
                generation: 0,
                reader,
                out: Vec::new(),
                out_pos: 0,
                send_from: 0,
                send_busy: false,
                lent: false,
                recv_armed: false,
                pipeline: Pipeline::default(),
                next_seq: 0,
                quota: None,
                schedule: None,
                connecting: None,
                due: None,
                free_since: Instant::now(),
                dead: false,
                stats_reply: None,
                is_bbr,
                outcome,
            });
        }
        let mut thread = ThreadLoop {
            config,
            shared,
            ring,
            slots,
            slot_len,
            request: vec![0u8; config.request_len as usize],
            hello,
            server: SockAddr::from(config.server),
            lend: false,
            completions: Vec::with_capacity(64),
            m: Partial::default(),
            snapshot_costs: Vec::new(),
            cpus_seen: BTreeSet::new(),
        };
        thread.note_cpu();
        for i in 0..thread.slots.len() {
            thread.arm(i).map_err(|e| e.into_bench_error(thread.slots[i].index))?;
        }
        // The warm-up is always closed loop at the run's depth; Ctrl-C during it ends the run.
        let warmup = match config.warmup {
            StopAfter::Duration(d) => StopAfter::Duration(d),
            StopAfter::Count(c) => StopAfter::Count(c.div_ceil(config.connections as u64)),
        };
        thread
            .run_phase(Instant::now(), warmup, false)
            .map_err(|(index, e)| e.into_bench_error(index))?;
        // The servers' windows start with the measured part.
        let asking: Vec<usize> = (0..thread.slots.len())
            .filter(|&i| {
                let slot = &thread.slots[i];
                slot.stream.is_some() && !slot.dead && server_stats::reports_stats(&slot.outcome)
            })
            .collect();
        for (i, answer) in thread.ask_stats(&asking, server_stats::STATS_TIMEOUT) {
            if let Err(e) = answer {
                let source = server_stats::window_not_started(e);
                return Err(err(thread.slots[i].index, "after the warm-up", source));
            }
        }
        Ok(thread)
    }

    fn note_cpu(&mut self) {
        if let Some(cpu) = sys::current_cpu() {
            self.cpus_seen.insert(cpu);
        }
    }

    /// One phase (warm-up or measured) until its limit, then until every request sent in it
    /// is answered (or given up). Errors carry the connection index.
    fn run_phase(
        &mut self,
        start: Instant,
        stop: StopAfter,
        measured: bool,
    ) -> Result<(), (usize, LoopError)> {
        let config = self.config;
        let control = self.shared.control;
        let n = config.connections as u64;
        let until = match stop {
            StopAfter::Duration(d) => Some(start + d),
            StopAfter::Count(_) => None,
        };
        let open = measured && matches!(config.load, Load::Open { .. });
        let crr = config.mode == TxMode::Crr;
        let open_crr = open && crr;
        self.lend = !open && config.depth == 1;
        // Waits without a timer only where the watchdog keeps every deadline.
        let timed = open || crr;
        for slot in &mut self.slots {
            // The previous phase is drained, so sequence numbers start again (as samples show).
            slot.next_seq = 0;
            slot.quota = phase_quota(stop, measured, slot.index, n);
            slot.schedule =
                if open { connection_schedule(config, slot.index, start) } else { None };
            slot.free_since = start;
        }
        // Closed loop: every connection starts with its full depth.
        if !open {
            for i in 0..self.slots.len() {
                let now = Instant::now();
                self.refill(i, now, until, measured).map_err(|e| (self.slots[i].index, e))?;
            }
        }
        let mut stopped_at: Option<Instant> = None;
        let mut next_check = Instant::now();
        let mut turns = 0u32;
        loop {
            turns = turns.wrapping_add(1);
            let look = !config.spin || turns.is_multiple_of(SPIN_TURNS_PER_CHECK);
            let now = Instant::now();
            if look && stopped_at.is_none() && control.stopped() {
                stopped_at = Some(now);
                if !measured {
                    // Ctrl-C during the warm-up: nothing of it is kept or waited for.
                    for i in 0..self.slots.len() {
                        self.drop_socket(i);
                        let slot = &mut self.slots[i];
                        slot.dead = true;
                        slot.connecting = None;
                        slot.pipeline.drain().for_each(drop);
                    }
                    return Ok(());
                }
            }
            let sending = stopped_at.is_none() && until.is_none_or(|t| now < t);
            // Open-loop connect-per-request: transactions due before the end that waited for
            // their slot still start for a grace period after it.
            let starting = sending
                || (open_crr
                    && stopped_at.is_none()
                    && until.is_some_and(|t| now < t + STOP_GRACE));
            if let Some(at) = stopped_at
                && now >= at + STOP_GRACE
            {
                self.give_up_all(start, now, measured, "stopped");
                if open_crr {
                    self.charge_not_started(start, until, stopped_at, now);
                }
                return Ok(());
            }
            // Open loop: every request that is due leaves now.
            let mut next_due: Option<Instant> = None;
            if open {
                for i in 0..self.slots.len() {
                    if starting {
                        self.send_due(i, now, until, start)
                            .map_err(|e| (self.slots[i].index, e))?;
                    }
                    let slot = &self.slots[i];
                    // A busy connect-per-request slot wakes the loop through its completions.
                    if !slot.dead
                        && slot.due.is_none()
                        && let Some((_, due)) = &slot.schedule
                        && slot.quota != Some(0)
                    {
                        next_due = Some(next_due.map_or(*due, |d| d.min(*due)));
                    }
                }
            }
            let open_pending = starting && next_due.is_some_and(|d| until.is_none_or(|t| d < t));
            if !open_pending && self.idle() {
                if open_crr {
                    self.charge_not_started(start, until, stopped_at, now);
                }
                return Ok(());
            }
            if timed && now >= next_check {
                self.check_timeouts(start, now, measured)?;
                next_check = now + POLL_SLICE.min(config.response_timeout / 4);
            }
            let timeout = if config.spin {
                None
            } else if timed || stopped_at.is_some() {
                let mut wake = next_check;
                if let Some(due) = next_due.filter(|_| open_pending) {
                    wake = wake.min(due.checked_sub(config.spin_window).unwrap_or(due));
                }
                if let Some(t) = until.filter(|_| sending) {
                    wake = wake.min(t);
                }
                if let Some(at) = stopped_at {
                    wake = wake.min(at + STOP_GRACE);
                }
                Some(wake.saturating_duration_since(now))
            } else {
                // Closed loop: answers keep coming, or the watchdog ends the wait.
                Some(Duration::MAX)
            };
            self.wait(timeout)
                .map_err(|e| (self.slots.first().map_or(0, |s| s.index), e.into()))?;
            if self.completions.is_empty() {
                continue;
            }
            let done = Instant::now();
            let sending = sending && until.is_none_or(|t| done < t);
            let mut batch = std::mem::take(&mut self.completions);
            let mut result = Ok(());
            for c in batch.drain(..) {
                if result.is_ok() {
                    let i = Token::decode(c.token).slot;
                    result = match self.complete(c, done, start, sending, measured) {
                        Ok(()) => Ok(()),
                        // An open-loop transaction's failure is its own: counted, and the
                        // slot goes on with the next.
                        Err(e) if open_crr && self.slots[i].due.is_some() => {
                            let connecting = self.slots[i].connecting.is_some();
                            match Failure::of(&e, connecting) {
                                Some(cause) => {
                                    self.fail_transaction(i, cause, start, done);
                                    Ok(())
                                }
                                None => Err((self.slots[i].index, e)),
                            }
                        }
                        Err(e) => Err((self.slots.get(i).map_or(i, |s| s.index), e)),
                    };
                } else if let Some(bid) = c.buffer {
                    self.ring.recycle(bid);
                }
            }
            self.completions = batch;
            result?;
        }
    }

    /// Asks each connection's server for the measured part's stats (`crate::server_stats`),
    /// all at once over the ring, and keeps the answers in the connections' outcomes.
    fn collect_server_stats(&mut self) {
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
        let lend = std::mem::replace(&mut self.lend, false);
        let mut answers = Vec::with_capacity(slots.len());
        let mut pending = Vec::with_capacity(slots.len());
        for &i in slots {
            let slot = &mut self.slots[i];
            if slot.out_pos == slot.out.len() {
                slot.out.clear();
                slot.out_pos = 0;
            }
            wire::write_stats_request(&mut slot.out).expect("a frame encodes into memory");
            slot.stats_reply = Some(Vec::new());
            match self.flush(i) {
                Ok(()) => pending.push(i),
                Err(e) => answers.push((i, Err(loop_error_as_frame(e)))),
            }
        }
        while !pending.is_empty() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            if let Err(e) = self.wait(Some(left)) {
                for i in pending.drain(..) {
                    answers.push((i, Err(FrameError::Io(io::Error::new(e.kind(), e.to_string())))));
                }
                break;
            }
            let mut batch = std::mem::take(&mut self.completions);
            let done = Instant::now();
            let mut failed = Vec::new();
            for c in batch.drain(..) {
                let i = Token::decode(c.token).slot;
                if let Err(e) = self.complete(c, done, done, false, false) {
                    failed.push((i, e));
                }
            }
            self.completions = batch;
            pending.retain(|&i| {
                let bytes = self.slots[i].stats_reply.as_deref().unwrap_or_default();
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
            self.slots[i].stats_reply = None;
        }
        self.lend = lend;
        answers
    }

    /// Submits what is queued and waits for completions: spinning looks once; `timeout` of
    /// `Duration::MAX` waits for the next completion without a timer.
    fn wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        match timeout {
            None => {
                self.ring.submit()?;
                std::hint::spin_loop();
            }
            Some(Duration::MAX) => self.ring.submit_and_wait(None)?,
            Some(t) if t.is_zero() => self.ring.submit()?,
            Some(t) => self.ring.submit_and_wait(Some(t))?,
        }
        self.ring.completions(&mut self.completions);
        Ok(())
    }

    /// Nothing in flight anywhere (and nothing connecting).
    fn idle(&self) -> bool {
        self.slots.iter().all(|s| s.dead || (s.pipeline.len() == 0 && s.connecting.is_none()))
    }

    fn token(&self, kind: Kind, i: usize) -> u64 {
        Token { kind, slot: i, generation: self.slots[i].generation }.encode()
    }

    /// Arms slot `i`'s receive if its socket has none: multishot on a long-lived connection,
    /// single-shot on a connect-per-request one.
    fn arm(&mut self, i: usize) -> Result<(), LoopError> {
        let token = self.token(Kind::Recv, i);
        let crr = self.config.mode == TxMode::Crr;
        let slot = &mut self.slots[i];
        let Some(stream) = &slot.stream else { return Ok(()) };
        if slot.recv_armed || slot.dead || slot.connecting.is_some() {
            return Ok(());
        }
        if crr {
            self.ring.arm_recv_once(stream.as_fd(), token)?;
        } else {
            self.ring.arm_recv(stream.as_fd(), token)?;
        }
        slot.recv_armed = true;
        Ok(())
    }

    /// Closed loop: tops slot `i` up to its depth (one new connection in connect-per-request
    /// mode), if the phase still sends.
    fn refill(
        &mut self,
        i: usize,
        now: Instant,
        until: Option<Instant>,
        measured: bool,
    ) -> Result<(), LoopError> {
        let sending = !self.shared.control.stopped() && until.is_none_or(|t| now < t);
        if !sending || self.slots[i].dead {
            return Ok(());
        }
        if self.config.mode == TxMode::Crr {
            if self.slots[i].stream.is_none() && self.slots[i].quota != Some(0) {
                self.start_connect(i)?;
            }
            return Ok(());
        }
        let depth = self.config.depth as usize;
        let before = self.slots[i].pipeline.len();
        while self.slots[i].pipeline.len() < depth && self.slots[i].quota != Some(0) {
            let before = if measured && self.config.attribute { self.snapshot(i) } else { None };
            let now = Instant::now();
            self.queue_request(i, now, now, before);
        }
        if self.slots[i].pipeline.len() > before {
            self.flush(i)?;
        }
        Ok(())
    }

    /// Open loop: queues every request of slot `i` that is due by `now`, then sends.
    fn send_due(
        &mut self,
        i: usize,
        now: Instant,
        until: Option<Instant>,
        start: Instant,
    ) -> Result<(), LoopError> {
        if self.config.mode == TxMode::Crr {
            self.start_due_transactions(i, now, until, start);
            return Ok(());
        }
        let mut queued = false;
        while let Some(due) = self.slots[i].take_due(now, until, start) {
            let before = if self.config.attribute { self.snapshot(i) } else { None };
            let sent = Instant::now();
            self.m.send_lateness.record(sent.saturating_duration_since(due).as_nanos() as u64);
            self.queue_request(i, due, sent, before);
            queued = true;
        }
        if queued {
            self.flush(i)?;
        }
        Ok(())
    }

    /// Encodes the next request of slot `i` into its output and puts it in flight.
    fn queue_request(
        &mut self,
        i: usize,
        intended: Instant,
        sent: Instant,
        before: Option<KernelSnapshot>,
    ) {
        let slot = &mut self.slots[i];
        let seq = slot.next_seq;
        slot.next_seq += 1;
        if let Some(q) = &mut slot.quota {
            *q -= 1;
        }
        wire::encode_request(&mut self.request, seq, self.config.reply_len);
        if slot.out_pos == slot.out.len() {
            slot.out.clear();
            slot.out_pos = 0;
        }
        slot.out.extend_from_slice(&self.request);
        if slot.pipeline.len() == 0
            && let Some(watch) = &mut slot.watch
        {
            watch.waiting();
        }
        slot.pipeline.push(Outstanding { seq, intended, sent, before });
        self.m.sent += 1;
        self.m.first_send.get_or_insert(sent);
        self.m.last_send = Some(sent);
    }

    /// Hands the next part of slot `i`'s output to the kernel, unless a send is in flight.
    fn flush(&mut self, i: usize) -> Result<(), LoopError> {
        let token = self.token(Kind::Send, i);
        let slot = &mut self.slots[i];
        let Some(stream) = &slot.stream else { return Ok(()) };
        if slot.send_busy
            || slot.lent
            || slot.connecting.is_some()
            || slot.out_pos == slot.out.len()
        {
            return Ok(());
        }
        let rest = slot.out.len() - slot.out_pos;
        let chunk = rest.min(self.slot_len);
        let buf = self.ring.send_slot(i).expect("no send is in flight on this slot");
        buf[..chunk].copy_from_slice(&slot.out[slot.out_pos..slot.out_pos + chunk]);
        // Lent only when the answer to come proves this send done: it carries the rest of
        // the one request in flight.
        let lend = self.lend && chunk == rest;
        self.ring.send(stream.as_fd(), i, 0..chunk, token, lend)?;
        slot.send_from = slot.out_pos;
        if lend {
            slot.lent = true;
            slot.out_pos += chunk;
        } else {
            slot.send_busy = true;
        }
        Ok(())
    }

    fn snapshot(&mut self, i: usize) -> Option<KernelSnapshot> {
        let slot = &self.slots[i];
        let stream = slot.stream.as_ref()?;
        kernel_snapshot(stream.as_fd(), slot.is_bbr, &mut self.snapshot_costs)
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
        let current = self.slots[i].generation == token.generation && !self.slots[i].dead;
        match token.kind {
            Kind::Send => {
                // Any send completion frees the slot's buffer: the kernel is done with it.
                self.ring.sent(i);
                let slot = &mut self.slots[i];
                if !current {
                    // A failed transaction's send: the slot's next one may go now.
                    slot.send_busy = false;
                    return if slot.dead { Ok(()) } else { self.flush(i) };
                }
                if slot.lent {
                    // A lent send posts a completion only when it failed.
                    slot.lent = false;
                    return Err(send_failed(c.result));
                }
                slot.send_busy = false;
                if c.result < 0 {
                    return Err(send_failed(c.result));
                }
                slot.out_pos = slot.send_from + c.result as usize;
                self.flush(i)
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
                    self.slots[i].recv_armed = false;
                }
                let outcome = match (current, c.result, c.buffer) {
                    (false, _, buffer) => {
                        if let Some(bid) = buffer {
                            self.ring.recycle(bid);
                        }
                        return Ok(());
                    }
                    (true, n, Some(bid)) if n > 0 && self.slots[i].stats_reply.is_some() => {
                        let bytes = self.ring.received(bid, n as usize);
                        self.slots[i]
                            .stats_reply
                            .as_mut()
                            .expect("checked")
                            .extend_from_slice(bytes);
                        self.ring.recycle(bid);
                        Ok(0)
                    }
                    (true, n, Some(bid)) if n > 0 => {
                        let r = self.received(i, bid, n as usize, done, start, measured);
                        self.ring.recycle(bid);
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
                if wanted && slot.stream.is_some() && !slot.recv_armed {
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
            space[..take].copy_from_slice(&self.ring.received(bid, len)[at..at + take]);
            slot.reader.commit(take);
            at += take;
            while let Some(header) = self.slots[i].reader.take_frame()? {
                let slot = &mut self.slots[i];
                let req = slot.pipeline.answer(&header)?;
                answered += 1;
                if slot.lent {
                    // The answer proves the lent send's bytes were taken.
                    slot.lent = false;
                    self.ring.sent(i);
                }
                if let Some(watch) = &mut slot.watch {
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
        slot.recv_armed = false;
        if slot.due.is_some() {
            // An open-loop transaction's connection: the caller counts its failure.
            return Err(if result == 0 {
                LoopError::Closed
            } else {
                LoopError::Io(io::Error::from_raw_os_error(-result))
            });
        }
        if !slot.watch.as_ref().is_some_and(Watch::fired) {
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

    /// Connect-per-request: a new socket for slot `i`, profile applied, connect submitted.
    fn start_connect(&mut self, i: usize) -> Result<(), LoopError> {
        let stream: TcpStream = crr_socket(self.config)?.into();
        let slot = &mut self.slots[i];
        slot.generation = slot.generation.wrapping_add(1) & 0x3fff_ffff;
        let token = self.token(Kind::Connect, i);
        self.ring.connect(stream.as_fd(), &self.server, token)?;
        let slot = &mut self.slots[i];
        slot.stream = Some(stream);
        slot.connecting = Some(Instant::now());
        slot.recv_armed = false;
        slot.reader.reset();
        slot.out.clear();
        slot.out_pos = 0;
        Ok(())
    }

    /// Connect-per-request: slot `i`'s connect finished; Hello and request leave together.
    fn connected(&mut self, i: usize, done: Instant, measured: bool) -> Result<(), LoopError> {
        let slot = &mut self.slots[i];
        let began = slot.connecting.take().expect("connecting");
        if measured {
            self.m.connect.record(done.saturating_duration_since(began).as_nanos() as u64);
        }
        slot.out.extend_from_slice(&self.hello);
        let now = Instant::now();
        // Open loop: the transaction's latency runs from when it was due.
        let intended = slot.due.unwrap_or(now);
        let before = if measured && self.config.attribute { self.snapshot(i) } else { None };
        self.queue_request(i, intended, now, before);
        self.arm(i)?;
        self.flush(i)
    }

    /// Connect-per-request: the transaction is answered; close with an RST (no TIME_WAIT).
    /// Nothing is armed on the socket any more (its receive was single-shot, its send lent
    /// and answered).
    fn close_transaction(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        if let Some(stream) = slot.stream.take() {
            let _ = sys::set_linger_zero(stream.as_fd());
        }
        slot.reader.reset();
        if slot.due.take().is_some() {
            slot.free_since = Instant::now();
        }
    }

    /// Open-loop connect-per-request: starts slot `i`'s transactions that are due by `now`
    /// (before `until`), while the slot is free; one whose connect cannot even be submitted
    /// is counted and the next due one starts.
    fn start_due_transactions(
        &mut self,
        i: usize,
        now: Instant,
        until: Option<Instant>,
        start: Instant,
    ) {
        // One transaction at a time per slot.
        while self.slots[i].due.is_none() {
            let slot = &mut self.slots[i];
            let Some(due) = slot.take_due(now, until, start) else { return };
            if due < slot.free_since {
                self.m.crr.queued += 1;
            }
            slot.due = Some(due);
            let began = Instant::now();
            self.m.send_lateness.record(began.saturating_duration_since(due).as_nanos() as u64);
            match self.start_connect(i) {
                Ok(()) => return,
                Err(e) => {
                    let cause = match &e {
                        LoopError::Io(e) => Failure::of_connect(e),
                        _ => Failure::ConnectFailed,
                    };
                    self.fail_transaction(i, cause, start, began);
                }
            }
        }
    }

    /// Open-loop connect-per-request: slot `i`'s transaction failed at `now` for `cause`:
    /// counted and charged (`charge_failed_transaction`), whatever is armed on its socket
    /// cancelled, the socket closed with an RST; the slot is free for the next. A send still
    /// in flight keeps the slot's send buffer until its (ignored) completion.
    fn fail_transaction(&mut self, i: usize, cause: Failure, start: Instant, now: Instant) {
        let slot = &mut self.slots[i];
        let Some(due) = slot.due else { return };
        charge_failed_transaction(&mut self.m, self.config, start, slot.turn(), due, cause, now);
        let slot = &mut self.slots[i];
        slot.connecting = None;
        slot.recv_armed = false;
        slot.out.clear();
        slot.out_pos = 0;
        // Completions still to come for this socket are ignored from here on.
        slot.generation = slot.generation.wrapping_add(1) & 0x3fff_ffff;
        if let Some(stream) = &slot.stream {
            let _ = self.ring.cancel_fd(stream.as_fd());
            let _ = self.ring.submit();
        }
        self.close_transaction(i);
    }

    /// Open-loop connect-per-request, at the end of the measured part: the transactions
    /// that never started are charged (`charge_not_started`).
    fn charge_not_started(
        &mut self,
        start: Instant,
        until: Option<Instant>,
        stopped_at: Option<Instant>,
        now: Instant,
    ) {
        let turns = self.slots.iter_mut().map(Slot::turn);
        charge_not_started(&mut self.m, self.config, start, turns, until, stopped_at, now);
    }

    /// Closes slot `i`'s socket, cancelling whatever is armed on it first.
    fn drop_socket(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        slot.watch = None;
        if let Some(stream) = slot.stream.take() {
            let _ = self.ring.cancel_fd(stream.as_fd());
            let _ = self.ring.submit();
        }
        slot.recv_armed = false;
        slot.send_busy = false;
    }

    /// Gives up on connections whose oldest request (or connect) waited the response timeout.
    fn check_timeouts(
        &mut self,
        start: Instant,
        now: Instant,
        measured: bool,
    ) -> Result<(), (usize, LoopError)> {
        let timeout = self.config.response_timeout;
        for i in 0..self.slots.len() {
            let slot = &self.slots[i];
            if slot.dead {
                continue;
            }
            let own_failure = measured && slot.due.is_some();
            if let Some(began) = slot.connecting
                && now >= began + HANDSHAKE_TIMEOUT.min(timeout)
            {
                if own_failure {
                    self.fail_transaction(i, Failure::ConnectTimeout, start, now);
                    continue;
                }
                return Err((
                    slot.index,
                    LoopError::Protocol(format!(
                        "connect did not complete within {:?}",
                        HANDSHAKE_TIMEOUT.min(timeout)
                    )),
                ));
            }
            let Some(oldest) = slot.pipeline.oldest() else { continue };
            if now < oldest.sent + timeout {
                continue;
            }
            if own_failure {
                self.fail_transaction(i, Failure::ResponseTimeout, start, now);
                continue;
            }
            if !measured {
                return Err((
                    slot.index,
                    LoopError::Protocol(format!(
                        "no response within {timeout:?} during the warm-up"
                    )),
                ));
            }
            let (waiting, index) = (slot.pipeline.len(), slot.index);
            self.give_up(i, start, now, measured);
            self.m.warnings.push(format!(
                "connection {index}: no response within {timeout:?}; gave up with {waiting} \
                 request(s) unanswered and the connection stopped there"
            ));
        }
        Ok(())
    }

    /// Charges every request still in flight as unanswered at `now` (the stop grace ran out).
    fn give_up_all(&mut self, start: Instant, now: Instant, measured: bool, why: &str) {
        let mut waiting = 0;
        for i in 0..self.slots.len() {
            if self.slots[i].dead {
                continue;
            }
            let slot = &self.slots[i];
            waiting += slot.pipeline.len();
            waiting += usize::from(slot.connecting.is_some() && slot.due.is_some());
            self.give_up(i, start, now, measured);
        }
        if measured && waiting > 0 {
            self.m.warnings.push(format!(
                "{why} with {waiting} request(s) still unanswered after {STOP_GRACE:?} on \
                 connections {}",
                self.slots.iter().map(|s| s.index.to_string()).collect::<Vec<_>>().join(",")
            ));
        }
    }

    /// Slot `i` stops for good: its socket closed, what it had in flight charged as
    /// unanswered at `now` (measured part).
    fn give_up(&mut self, i: usize, start: Instant, now: Instant, measured: bool) {
        self.drop_socket(i);
        let config = self.config;
        let slot = &mut self.slots[i];
        slot.dead = true;
        if let (Some(_), Some(due), true) = (slot.connecting.take(), slot.due, measured) {
            // An open-loop transaction still connecting: unanswered since it was due.
            let seq = slot.next_seq;
            slot.next_seq += 1;
            self.m.record_unanswered(config, start, slot.index, (seq, due, None), now);
        }
        let index = slot.index;
        for req in slot.pipeline.drain() {
            if measured {
                let request = (req.seq, req.intended, Some(req.sent));
                self.m.record_unanswered(config, start, index, request, now);
            }
        }
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
