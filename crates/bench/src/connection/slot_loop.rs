//! The slot core every client engine shares: a thread's connections ("slots") with their
//! requests in flight, sequence numbers, quota, open-loop schedule and connect-per-request
//! state, and the logic over them: the phase loop, closed-loop refill, open-loop sends,
//! connect-per-request transactions and their failures, response timeouts and giving up.
//! Only the I/O differs between engines and stays behind [`EngineIo`]: how a slot's output
//! reaches the kernel, how a connect-per-request socket is opened and let go, how the loop
//! waits and what it does with what the wait brought.
//!
//! Each thread owns the connections `t, t + T, t + 2T, ...` of the run. Per connection it
//! keeps the requests in flight in send order ([`Pipeline`]): a response must answer the
//! oldest one (TCP delivers in order, and the server answers in order), so a response with any
//! other sequence number is a protocol error naming both. Latency per request runs from the
//! moment it was written (closed loop) or was due (open loop, `--rate`: every connection keeps
//! its own schedule of `rate / connections` with its requests' intended send times, so a slow
//! response never delays the next request and nothing is coordinated away).
//!
//! Closed loop keeps `--depth` requests outstanding: the first `depth` leave together, then
//! each response is replaced by a new request. `--mode crr` opens a new connection per
//! transaction (connect, Hello and request in one write, Welcome skipped, response, close
//! with an RST so the client keeps no TIME_WAIT and its ports are reused at once); its
//! connect time is measured apart.
//!
//! Open-loop connect-per-request (`--mode crr --rate`) keeps the same schedules: each slot
//! (one of --connections) starts its transactions when they fall due, one at a time, so no
//! more than --connections are ever in flight. A transaction's latency runs from when it was
//! due, through any wait for its slot, the connect and the request, to the response (a slow
//! connect or a backlog shows, as in wrk2); its service time is the request's alone, and the
//! connect is measured apart. One that falls due while its slot is busy starts as soon as the
//! slot is free (counted as queued); one that fails (connect refused or timed out, no
//! response, closed by the server) is counted by cause, kept as unanswered at the time it had
//! waited, and its slot goes on with the next. When the measured time is up, transactions due
//! before its end still start for up to [`STOP_GRACE`]; any left are counted as never started.
//! Requests that get no answer are handled as the parent module describes: counted, and kept
//! as lower bounds.

use std::collections::{BTreeSet, VecDeque};
use std::io;
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};
use tcptail_sock::apply_profile;

use super::reader::ResponseReader;
use super::{
    HANDSHAKE_TIMEOUT, LoopError, Outstanding, POLL_SLICE, Partial, STOP_GRACE, Shared, connect,
    hello_frame, kernel_snapshot, outcomes_seen_on,
};
use crate::attribution::KernelSnapshot;
use crate::config::{BenchConfig, Load, StopAfter, TxMode};
use crate::pacer::Schedule;
use crate::run::{BenchError, ConnectionOutcome, CrrCounts, RawRun};
use crate::sys;
use crate::wire::{self, Header};

/// The requests of one connection in flight, oldest first; responses are matched to them.
#[derive(Default)]
pub(crate) struct Pipeline {
    queue: VecDeque<Outstanding>,
}

impl Pipeline {
    /// Requests in flight.
    pub(crate) fn len(&self) -> usize {
        self.queue.len()
    }

    pub(crate) fn push(&mut self, request: Outstanding) {
        self.queue.push_back(request);
    }

    pub(crate) fn oldest(&self) -> Option<&Outstanding> {
        self.queue.front()
    }

    /// The request `header` answers: the oldest in flight, or a protocol error that says
    /// what the server did instead.
    pub(crate) fn answer(&mut self, header: &Header) -> Result<Outstanding, LoopError> {
        let Some(oldest) = self.queue.front() else {
            return Err(LoopError::Protocol(format!(
                "response with sequence {} to no outstanding request",
                header.seq
            )));
        };
        if oldest.seq != header.seq {
            let later = self.queue.iter().any(|r| r.seq == header.seq);
            return Err(LoopError::Protocol(if later {
                format!(
                    "the server answered out of order: response {} arrived while request {} \
                     (sent earlier on the same connection) was still unanswered; a server must \
                     answer pipelined requests in the order they were sent",
                    header.seq, oldest.seq
                )
            } else {
                format!(
                    "response sequence {} where {} was expected (no request with that sequence \
                     is outstanding)",
                    header.seq, oldest.seq
                )
            }));
        }
        Ok(self.queue.pop_front().expect("checked above"))
    }

    pub(crate) fn drain(&mut self) -> impl Iterator<Item = Outstanding> + '_ {
        self.queue.drain(..)
    }
}

/// Why an open-loop connect-per-request transaction failed (counted in
/// [`CrrCounts`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    ConnectRefused,
    NoLocalPort,
    ConnectTimeout,
    ConnectFailed,
    ResponseTimeout,
    ClosedByServer,
}

impl Failure {
    /// A `connect` that failed, by its error.
    pub(crate) fn of_connect(e: &io::Error) -> Failure {
        match e.raw_os_error() {
            Some(libc::ECONNREFUSED) => Failure::ConnectRefused,
            Some(libc::EADDRNOTAVAIL) => Failure::NoLocalPort,
            Some(libc::ETIMEDOUT) => Failure::ConnectTimeout,
            _ => Failure::ConnectFailed,
        }
    }

    /// An error in a transaction (`connecting`: before its connect completed): the
    /// transaction's own failure, or `None` for one that ends the run (the server broke the
    /// protocol, or the client itself failed).
    pub(crate) fn of(e: &LoopError, connecting: bool) -> Option<Failure> {
        match e {
            LoopError::Io(e) if connecting => Some(Failure::of_connect(e)),
            LoopError::Io(e)
                if matches!(e.raw_os_error(), Some(libc::ECONNRESET | libc::EPIPE)) =>
            {
                Some(Failure::ClosedByServer)
            }
            LoopError::Closed => Some(Failure::ClosedByServer),
            LoopError::Io(_) | LoopError::Protocol(_) => None,
        }
    }

    pub(crate) fn count(self, counts: &mut CrrCounts) {
        let counter = match self {
            Failure::ConnectRefused => &mut counts.connect_refused,
            Failure::NoLocalPort => &mut counts.no_local_port,
            Failure::ConnectTimeout => &mut counts.connect_timeout,
            Failure::ConnectFailed => &mut counts.connect_failed,
            Failure::ResponseTimeout => &mut counts.response_timeout,
            Failure::ClosedByServer => &mut counts.closed_by_server,
        };
        *counter += 1;
    }
}

/// One connection slot of a thread: what every engine keeps, and the engine's own state.
pub(crate) struct Slot<S> {
    /// The run's connection index.
    pub(crate) index: usize,
    /// None between two connect-per-request transactions, or once the slot gave up.
    pub(crate) stream: Option<TcpStream>,
    pub(crate) reader: ResponseReader,
    /// Encoded requests not yet handed to the kernel, from `out_pos` on.
    pub(crate) out: Vec<u8>,
    pub(crate) out_pos: usize,
    pub(crate) pipeline: Pipeline,
    pub(crate) next_seq: u64,
    /// Requests this slot may still start in the current phase (`--count`), if limited.
    pub(crate) quota: Option<u64>,
    /// Open loop: this connection's schedule and its next intended send time.
    pub(crate) schedule: Option<(Schedule, Instant)>,
    /// Connect-per-request: when the pending connect started.
    pub(crate) connecting: Option<Instant>,
    /// Open-loop connect-per-request: when the transaction in flight was due.
    pub(crate) due: Option<Instant>,
    /// Open-loop connect-per-request: when the slot last became free (a transaction due
    /// before then waited for it).
    pub(crate) free_since: Instant,
    /// Stopped for good; its waits are already charged.
    pub(crate) dead: bool,
    pub(crate) is_bbr: bool,
    pub(crate) outcome: ConnectionOutcome,
    /// The engine's own state for this slot.
    pub(crate) io: S,
}

impl<S> Slot<S> {
    /// A request in flight or a connect under way.
    fn busy(&self) -> bool {
        self.pipeline.len() > 0 || self.connecting.is_some()
    }

    /// Open loop: the intended time of this slot's next request if it is due by `now` (and
    /// before `until`) and the slot may still send, its schedule moved on past it.
    fn take_due(
        &mut self,
        now: Instant,
        until: Option<Instant>,
        start: Instant,
    ) -> Option<Instant> {
        if self.dead || self.quota == Some(0) {
            return None;
        }
        let (schedule, next) = self.schedule.as_mut()?;
        let due = *next;
        if due > now || until.is_some_and(|t| due >= t) {
            return None;
        }
        *next = start + schedule.next_offset();
        Some(due)
    }

    /// The next sequence number, taken from the quota.
    fn take_seq(&mut self) -> u64 {
        let seq = self.next_seq;
        self.next_seq += 1;
        if let Some(q) = &mut self.quota {
            *q = q.saturating_sub(1);
        }
        seq
    }

    /// Connect-per-request: `stream`'s connect started at `began`; the slot starts afresh.
    pub(crate) fn begin_connect(&mut self, stream: TcpStream, began: Instant) {
        self.stream = Some(stream);
        self.connecting = Some(began);
        self.reader.reset();
        self.out.clear();
        self.out_pos = 0;
    }
}

/// How [`SlotLoop::run_phase`] waits for I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Spinning: look once, without sleeping.
    Look,
    /// At most this long.
    For(Duration),
    /// Until something comes (the watchdog keeps every deadline).
    Forever,
}

/// What differs between client engines: the I/O. Everything else is [`SlotLoop`]'s.
pub(crate) trait EngineIo: Sized {
    /// The engine's own state per slot (its default: a slot with no socket yet).
    type Slot: Default;
    /// Spinning: loop turns between looks at the stop flag and the clock.
    const SPIN_TURNS_PER_LOOK: u32;
    /// Closed loop on long-lived connections still waits with a timer and checks response
    /// timeouts itself (else the run's watchdog keeps those deadlines).
    const TIMED_CLOSED_LOOP: bool;
    /// Closed loop: each request's send time is read as it is queued, because the engine
    /// hands it to the kernel later (the ring at its next enter); an engine that writes at
    /// once takes the time the loop woke, as the floor ping-pong does.
    const STAMP_EACH_REQUEST: bool;

    /// Sets the engine up for `slots` connections; an error names the step.
    fn open(config: &BenchConfig, slots: usize) -> Result<Self, (&'static str, io::Error)>;
    /// Takes on long-lived connection `stream` as slot `i`; an error names the step.
    fn adopt(
        &mut self,
        config: &BenchConfig,
        shared: &Shared<'_>,
        stream: &TcpStream,
        i: usize,
    ) -> Result<Self::Slot, (&'static str, io::Error)>;
    /// Every slot is set up; the warm-up comes next.
    fn ready(_t: &mut SlotLoop<'_, Self>) -> Result<(), BenchError> {
        Ok(())
    }
    /// The warm-up is over: the servers' windows start with the measured part.
    fn warmed_up(t: &mut SlotLoop<'_, Self>) -> Result<(), BenchError>;
    /// The measured part is over: the servers' own stats, kept in the outcomes.
    fn collect_server_stats(t: &mut SlotLoop<'_, Self>);
    /// A phase starts, open loop or not.
    fn phase_starts(&mut self, _config: &BenchConfig, _open: bool) {}
    /// Hands slot `i`'s output (`out` from `out_pos`) to the kernel.
    fn flush(t: &mut SlotLoop<'_, Self>, i: usize) -> Result<(), LoopError>;
    /// Connect-per-request: a new socket for slot `i` (`crr_socket`), its connect started
    /// (`Slot::begin_connect`).
    fn start_connect(t: &mut SlotLoop<'_, Self>, i: usize) -> io::Result<()>;
    /// Slot `slot` gets its first request in flight.
    fn first_in_flight(_slot: &mut Slot<Self::Slot>) {}
    /// Connect-per-request: slot `i`'s socket is about to close; the engine lets go of it.
    fn closing(&mut self, slot: &mut Slot<Self::Slot>, i: usize);
    /// Open-loop connect-per-request: slot `i`'s transaction failed; whatever the engine has
    /// under way on its socket is cancelled.
    fn abandon(&mut self, _slot: &mut Slot<Self::Slot>, _i: usize) {}
    /// Slot `i` stops for good: its socket closed, nothing left under way on it.
    fn drop_socket(&mut self, slot: &mut Slot<Self::Slot>, i: usize);
    /// Waits as told; true when something came.
    fn wait(t: &mut SlotLoop<'_, Self>, wait: Wait) -> io::Result<bool>;
    /// Handles what the wait brought (errors through [`SlotLoop::settle`]).
    fn dispatch(t: &mut SlotLoop<'_, Self>, turn: Turn) -> Result<(), (usize, LoopError)>;
}

/// What the engine handles a wait's harvest with.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Turn {
    /// When the wait returned.
    pub(crate) done: Instant,
    /// The phase's start.
    pub(crate) start: Instant,
    /// The phase still sends new requests.
    pub(crate) sending: bool,
    pub(crate) measured: bool,
    /// Open-loop connect-per-request: a transaction's failure is its own.
    pub(crate) open_crr: bool,
}

/// A thread's connections and its engine.
pub(crate) struct SlotLoop<'a, E: EngineIo> {
    pub(crate) config: &'a BenchConfig,
    pub(crate) shared: &'a Shared<'a>,
    pub(crate) io: E,
    pub(crate) slots: Vec<Slot<E::Slot>>,
    /// One request, encoded (its payload zeros).
    request: Vec<u8>,
    hello: Vec<u8>,
    pub(crate) m: Partial,
    snapshot_costs: Vec<u64>,
    cpus_seen: BTreeSet<usize>,
}

/// A failure while setting up connection `index`, at `step`.
pub(crate) fn setup_error(
    config: &BenchConfig,
    index: usize,
    step: &'static str,
    source: io::Error,
) -> BenchError {
    BenchError::Connect { connection: index, server: config.server, step, source }
}

/// Runs the connections `indices` of the run on this thread with engine `E`: handshakes,
/// warm-up, the barrier every thread passes before measuring, the measured part.
pub(crate) fn run_thread<E: EngineIo>(
    config: &BenchConfig,
    indices: &[usize],
    shared: &Shared<'_>,
) -> Result<RawRun, BenchError> {
    let (mut thread, start) =
        shared.start_measuring(SlotLoop::<E>::prepare(config, indices, shared))?;
    thread.m = Partial::measuring(shared.control);
    thread.run_phase(start, config.stop, true).map_err(|(index, e)| e.into_bench_error(index))?;
    E::collect_server_stats(&mut thread);
    let outcomes = outcomes_seen_on(
        &mut thread.cpus_seen,
        thread.slots.iter_mut().map(|slot| &mut slot.outcome),
    );
    let m = std::mem::take(&mut thread.m);
    Ok(m.into_raw(start, &thread.snapshot_costs, outcomes))
}

impl<'a, E: EngineIo> SlotLoop<'a, E> {
    fn prepare(
        config: &'a BenchConfig,
        indices: &[usize],
        shared: &'a Shared<'a>,
    ) -> Result<SlotLoop<'a, E>, BenchError> {
        let first = indices.first().copied().unwrap_or(0);
        if let Some(cpu) = config.client_cpu {
            sys::pin_current_thread(cpu)
                .map_err(|e| setup_error(config, first, "pinning the client thread", e))?;
        }
        let mut io = E::open(config, indices.len())
            .map_err(|(step, e)| setup_error(config, first, step, e))?;
        let mut slots = Vec::with_capacity(indices.len());
        for &index in indices {
            let (stream, outcome) = connect(config, index)?;
            let is_bbr = outcome.congestion.as_deref() == Some("bbr");
            let mut reader = ResponseReader::new(config.reply_len as usize);
            let (stream, engine_slot) = if config.mode == TxMode::Crr {
                // This first connection only told what the server does with the profile.
                let _ = sys::set_linger_zero(stream.as_fd());
                reader.accept_welcomes();
                (None, E::Slot::default())
            } else {
                let engine_slot = io
                    .adopt(config, shared, &stream, slots.len())
                    .map_err(|(step, e)| setup_error(config, index, step, e))?;
                if let Some(sampler) = shared.sampler {
                    sampler.watch(index, &stream, is_bbr);
                }
                (Some(stream), engine_slot)
            };
            slots.push(Slot {
                index,
                stream,
                reader,
                out: Vec::new(),
                out_pos: 0,
                pipeline: Pipeline::default(),
                next_seq: 0,
                quota: None,
                schedule: None,
                connecting: None,
                due: None,
                free_since: Instant::now(),
                dead: false,
                is_bbr,
                outcome,
                io: engine_slot,
            });
        }
        let mut thread = SlotLoop {
            config,
            shared,
            io,
            slots,
            request: vec![0u8; config.request_len as usize],
            hello: hello_frame(config),
            m: Partial::default(),
            snapshot_costs: Vec::new(),
            cpus_seen: BTreeSet::new(),
        };
        thread.note_cpu();
        E::ready(&mut thread)?;
        // The warm-up is always closed loop at the run's depth; Ctrl-C during it ends the run.
        let warmup = match config.warmup {
            StopAfter::Duration(d) => StopAfter::Duration(d),
            StopAfter::Count(c) => StopAfter::Count(c.div_ceil(config.connections as u64)),
        };
        thread
            .run_phase(Instant::now(), warmup, false)
            .map_err(|(index, e)| e.into_bench_error(index))?;
        E::warmed_up(&mut thread)?;
        Ok(thread)
    }

    /// Notes the CPU this thread runs on now.
    pub(crate) fn note_cpu(&mut self) {
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
        self.io.phase_starts(config, open);
        let timed = open || crr || E::TIMED_CLOSED_LOOP;
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
            let look = !config.spin || turns.is_multiple_of(E::SPIN_TURNS_PER_LOOK);
            let now = Instant::now();
            if look && stopped_at.is_none() && control.stopped() {
                stopped_at = Some(now);
                if !measured {
                    // Ctrl-C during the warm-up: nothing of it is kept or waited for.
                    for i in 0..self.slots.len() {
                        let slot = &mut self.slots[i];
                        self.io.drop_socket(slot, i);
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
                    // A busy connect-per-request slot wakes the loop through its own I/O.
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
            let wait = if config.spin {
                Wait::Look
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
                Wait::For(wake.saturating_duration_since(now))
            } else {
                // Closed loop: answers keep coming, or the watchdog ends the wait.
                Wait::Forever
            };
            let came = E::wait(self, wait)
                .map_err(|e| (self.slots.first().map_or(0, |s| s.index), e.into()))?;
            if !came {
                continue;
            }
            let done = Instant::now();
            let sending = sending && until.is_none_or(|t| done < t);
            E::dispatch(self, Turn { done, start, sending, measured, open_crr })?;
        }
    }

    /// What the engine met on slot `i` while handling its I/O (`turn`): an open-loop
    /// connect-per-request transaction's own failure is counted and the slot goes on with the
    /// next; any other error ends the run.
    pub(crate) fn settle(
        &mut self,
        i: usize,
        result: Result<(), LoopError>,
        turn: Turn,
    ) -> Result<(), (usize, LoopError)> {
        let Turn { start, done, .. } = turn;
        match result {
            Ok(()) => Ok(()),
            Err(e) if turn.open_crr && self.slots[i].due.is_some() => {
                let connecting = self.slots[i].connecting.is_some();
                let cause = Failure::of(&e, connecting).ok_or((self.slots[i].index, e))?;
                self.fail_transaction(i, cause, start, done);
                Ok(())
            }
            Err(e) => Err((self.slots.get(i).map_or(i, |s| s.index), e)),
        }
    }

    /// Nothing in flight anywhere (and nothing connecting).
    fn idle(&self) -> bool {
        self.slots.iter().all(|s| s.dead || !s.busy())
    }

    /// Closed loop: tops slot `i` up to its depth (one new connection in connect-per-request
    /// mode), if the phase still sends.
    pub(crate) fn refill(
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
                E::start_connect(self, i).map_err(connect_error)?;
            }
            return Ok(());
        }
        let depth = self.config.depth as usize;
        let before = self.slots[i].pipeline.len();
        while self.slots[i].pipeline.len() < depth && self.slots[i].quota != Some(0) {
            let before = if measured && self.config.attribute { self.snapshot(i) } else { None };
            let sent = if E::STAMP_EACH_REQUEST { Instant::now() } else { now };
            self.queue_request(i, sent, sent, before);
        }
        if self.slots[i].pipeline.len() > before {
            E::flush(self, i)?;
        }
        Ok(())
    }

    /// Open loop: queues every request of slot `i` that is due by `now`, then hands them on.
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
            E::flush(self, i)?;
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
        let seq = slot.take_seq();
        wire::encode_request(&mut self.request, seq, self.config.reply_len);
        if slot.out_pos == slot.out.len() {
            slot.out.clear();
            slot.out_pos = 0;
        }
        slot.out.extend_from_slice(&self.request);
        if slot.pipeline.len() == 0 {
            E::first_in_flight(slot);
        }
        slot.pipeline.push(Outstanding { seq, intended, sent, before });
        self.m.sent += 1;
        self.m.first_send.get_or_insert(sent);
        self.m.last_send = Some(sent);
    }

    /// The kernel's state on slot `i`'s connection (attribution).
    pub(crate) fn snapshot(&mut self, i: usize) -> Option<KernelSnapshot> {
        let slot = &self.slots[i];
        let stream = slot.stream.as_ref()?;
        kernel_snapshot(stream.as_fd(), slot.is_bbr, &mut self.snapshot_costs)
    }

    /// Connect-per-request: slot `i`'s connect (started at `began`) finished at `done`: its
    /// time is kept, and Hello and request are queued to leave together.
    pub(crate) fn queue_first_request(
        &mut self,
        i: usize,
        began: Instant,
        done: Instant,
        measured: bool,
    ) {
        if measured {
            self.m.connect.record(done.saturating_duration_since(began).as_nanos() as u64);
        }
        self.slots[i].out.extend_from_slice(&self.hello);
        let now = Instant::now();
        // Open loop: the transaction's latency runs from when it was due.
        let intended = self.slots[i].due.unwrap_or(now);
        let before = if measured && self.config.attribute { self.snapshot(i) } else { None };
        self.queue_request(i, intended, now, before);
    }

    /// Connect-per-request: the transaction is over; close with an RST (no TIME_WAIT).
    pub(crate) fn close_transaction(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        self.io.closing(slot, i);
        if let Some(stream) = slot.stream.take() {
            let _ = sys::set_linger_zero(stream.as_fd());
        }
        slot.reader.reset();
        slot.connecting = None;
        if slot.due.take().is_some() {
            slot.free_since = Instant::now();
        }
    }

    /// Open-loop connect-per-request: starts slot `i`'s transactions that are due by `now`
    /// (before `until`), while the slot is free; one whose connect fails at once is counted
    /// and the next due one starts.
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
            match E::start_connect(self, i) {
                Ok(()) => return,
                Err(e) => self.fail_transaction(i, Failure::of_connect(&e), start, began),
            }
        }
    }

    /// Open-loop connect-per-request: slot `i`'s transaction failed at `now` for `cause`:
    /// counted, kept as unanswered from when it was due, whatever is under way on its socket
    /// cancelled, the connection closed; the slot is free for the next.
    fn fail_transaction(&mut self, i: usize, cause: Failure, start: Instant, now: Instant) {
        let Some(due) = self.slots[i].due else { return };
        let config = self.config;
        let slot = &mut self.slots[i];
        let mut charged = false;
        for req in slot.pipeline.drain() {
            self.m.record_unanswered(
                config,
                start,
                slot.index,
                (req.seq, due, Some(req.sent)),
                now,
            );
            charged = true;
        }
        if !charged {
            // Failed before its request left: it takes its sequence number and quota here.
            let seq = slot.take_seq();
            self.m.record_unanswered(config, start, slot.index, (seq, due, None), now);
        }
        cause.count(&mut self.m.crr);
        self.io.abandon(slot, i);
        slot.connecting = None;
        slot.out.clear();
        slot.out_pos = 0;
        self.close_transaction(i);
    }

    /// Open-loop connect-per-request, at the end of the measured part: every transaction due
    /// before its end (`until`, or the stop at `stopped_at`) that never started is counted,
    /// and kept as unanswered at the time it had waited when the run stopped starting
    /// transactions (the stop, or the grace after `until`; `now` at the latest).
    fn charge_not_started(
        &mut self,
        start: Instant,
        until: Option<Instant>,
        stopped_at: Option<Instant>,
        now: Instant,
    ) {
        let Some(end) = [until, stopped_at].into_iter().flatten().min() else { return };
        let last_start = [stopped_at, until.map(|t| t + STOP_GRACE), Some(now)];
        let gave_up = last_start.into_iter().flatten().min().unwrap_or(now);
        let config = self.config;
        for slot in &mut self.slots {
            let Some((schedule, due)) = &mut slot.schedule else { continue };
            while *due < end && slot.quota != Some(0) {
                let at = *due;
                *due = start + schedule.next_offset();
                let seq = slot.next_seq;
                slot.next_seq += 1;
                if let Some(q) = &mut slot.quota {
                    *q -= 1;
                }
                self.m.record_unanswered(config, start, slot.index, (seq, at, None), gave_up);
                self.m.crr.not_started += 1;
            }
        }
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
    pub(crate) fn give_up(&mut self, i: usize, start: Instant, now: Instant, measured: bool) {
        let config = self.config;
        let slot = &mut self.slots[i];
        self.io.drop_socket(slot, i);
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

/// The requests connection `index` may start in a phase that ends at `stop` (`n`
/// connections): the measured count shared by connection index, the warm-up's already
/// divided count, or no limit (a timed phase).
pub(crate) fn phase_quota(stop: StopAfter, measured: bool, index: usize, n: u64) -> Option<u64> {
    match stop {
        StopAfter::Count(c) if measured => Some(c / n + u64::from((index as u64) < c % n)),
        StopAfter::Count(c) => Some(c),
        StopAfter::Duration(_) => None,
    }
}

/// Open loop: connection `index`'s share of the rate as its own schedule, staggered so the
/// connections do not send at once, with its first intended send time after `start`; `None`
/// in closed loop.
pub(crate) fn connection_schedule(
    config: &BenchConfig,
    index: usize,
    start: Instant,
) -> Option<(Schedule, Instant)> {
    let Load::Open { rate, spacing } = config.load else { return None };
    let n = config.connections as f64;
    let per_connection =
        tcptail_units::MessageRate::per_second(rate / n).expect("the rate was validated");
    let stagger = Duration::from_secs_f64(index as f64 / rate);
    let mut schedule =
        Schedule::new(per_connection, spacing, stagger, config.seed.wrapping_add(index as u64));
    let first = start + schedule.next_offset();
    Some((schedule, first))
}

/// Connect-per-request: a new non-blocking socket with the profile applied, not connected.
pub(crate) fn crr_socket(config: &BenchConfig) -> io::Result<Socket> {
    let server = config.server;
    let socket = Socket::new(Domain::for_address(server), Type::STREAM, Some(Protocol::TCP))?;
    // The profile's report was kept from the first connection; each new one gets the same.
    let _ = apply_profile(socket.as_fd(), &config.profile);
    socket.set_nonblocking(true)?;
    Ok(socket)
}

/// A connect that failed, with the next step for the common causes.
pub(crate) fn connect_error(e: io::Error) -> LoopError {
    let hint = match e.raw_os_error() {
        Some(libc::EADDRNOTAVAIL) => {
            " (no free local port: the ephemeral port range is used up; lower --connections or \
             widen net.ipv4.ip_local_port_range)"
        }
        Some(libc::ECONNREFUSED) => " (is the server still running?)",
        _ => "",
    };
    LoopError::Protocol(format!("connect per request failed: {e}{hint}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(errno: i32) -> io::Error {
        io::Error::from_raw_os_error(errno)
    }

    #[test]
    fn a_failed_connect_is_counted_by_its_cause() {
        assert_eq!(Failure::of_connect(&os(libc::ECONNREFUSED)), Failure::ConnectRefused);
        assert_eq!(Failure::of_connect(&os(libc::EADDRNOTAVAIL)), Failure::NoLocalPort);
        assert_eq!(Failure::of_connect(&os(libc::ETIMEDOUT)), Failure::ConnectTimeout);
        assert_eq!(Failure::of_connect(&os(libc::ENETUNREACH)), Failure::ConnectFailed);
        // The same error during the connect is the connect's, after it the server's.
        let refused = LoopError::Io(os(libc::ECONNREFUSED));
        assert_eq!(Failure::of(&refused, true), Some(Failure::ConnectRefused));
        let reset = LoopError::Io(os(libc::ECONNRESET));
        assert_eq!(Failure::of(&reset, false), Some(Failure::ClosedByServer));
        assert_eq!(
            Failure::of(&LoopError::Io(os(libc::EPIPE)), false),
            Some(Failure::ClosedByServer)
        );
        assert_eq!(Failure::of(&LoopError::Closed, false), Some(Failure::ClosedByServer));
    }

    #[test]
    fn a_protocol_error_or_the_clients_own_failure_still_ends_the_run() {
        let wrong = LoopError::Protocol("response sequence 3 where 2 was expected".into());
        assert_eq!(Failure::of(&wrong, false), None);
        assert_eq!(Failure::of(&LoopError::Io(os(libc::EBADF)), false), None);
    }

    #[test]
    fn each_cause_has_its_own_counter() {
        let causes = [
            Failure::ConnectRefused,
            Failure::NoLocalPort,
            Failure::ConnectTimeout,
            Failure::ConnectFailed,
            Failure::ResponseTimeout,
            Failure::ClosedByServer,
        ];
        let mut counts = CrrCounts::default();
        for (n, cause) in causes.iter().enumerate() {
            for _ in 0..=n {
                cause.count(&mut counts);
            }
        }
        let by_field = [
            counts.connect_refused,
            counts.no_local_port,
            counts.connect_timeout,
            counts.connect_failed,
            counts.response_timeout,
            counts.closed_by_server,
        ];
        assert_eq!(by_field, [1, 2, 3, 4, 5, 6]);
        assert_eq!(counts.failed(), 21);
        assert_eq!((counts.queued, counts.not_started), (0, 0));
    }
}
