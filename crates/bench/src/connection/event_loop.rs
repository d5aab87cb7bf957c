//! The default engine's per-thread event loop: one thread serves several connections on
//! non-blocking sockets through one epoll instance (neper's `tcp_rr` design), with any number
//! of requests outstanding per connection.
//!
//! Each thread owns the connections `t, t + T, t + 2T, ...` of the run. Per connection it
//! keeps the requests in flight in send order ([`Pipeline`]): a response must answer the
//! oldest one (TCP delivers in order, and the server answers in order), so a response with any
//! other sequence number is a protocol error naming both. Latency per request runs from the
//! moment it was written (closed loop) or was due (open loop, `--rate`: every connection keeps
//! its own schedule of `rate / connections` with its requests' intended send times, so a slow
//! response never delays the next request and nothing is coordinated away).
//!
//! Closed loop keeps `--depth` requests outstanding: the first `depth` leave in one write,
//! then each response is replaced by a new request; requests answered by one receive are
//! replaced by one write. `--mode crr` opens a new connection per transaction (connect,
//! Hello and request in one write, Welcome skipped, response, close with an RST so the client
//! keeps no TIME_WAIT and its ports are reused at once); its connect time is measured apart.
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
//!
//! The loop waits in `epoll_wait` (level-triggered; one `recv` per readiness, like the
//! floor), or polls it without sleeping with `--spin`. Requests that get no answer are
//! handled as the parent module describes: counted, and kept as lower bounds.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use tcptail_sock::apply_profile;

use super::reader::ResponseReader;
use super::{
    HANDSHAKE_TIMEOUT, LoopError, Outstanding, POLL_SLICE, Partial, STOP_GRACE, Shared, connect,
    hello_frame, kernel_snapshot, outcomes_seen_on,
};
use crate::config::{BenchConfig, Load, StopAfter, TxMode};
use crate::pacer::Schedule;
use crate::run::{BenchError, ConnectionOutcome, CrrCounts, RawRun};
use crate::sys::{self, EPOLL_IN, EPOLL_OUT, Epoll};
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

    fn count(self, counts: &mut CrrCounts) {
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

/// One connection slot of a thread.
struct Slot {
    /// The run's connection index.
    index: usize,
    /// None between two connect-per-request transactions, or once the slot gave up.
    stream: Option<TcpStream>,
    reader: ResponseReader,
    /// Encoded requests not yet written, from `out_pos` on.
    out: Vec<u8>,
    out_pos: usize,
    watching_out: bool,
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
    /// Stopped for good (no answer within the timeout); its waits are already charged.
    dead: bool,
    is_bbr: bool,
    outcome: ConnectionOutcome,
}

/// A thread's connections and its epoll instance.
struct ThreadLoop<'a> {
    config: &'a BenchConfig,
    shared: &'a Shared<'a>,
    epoll: Epoll,
    slots: Vec<Slot>,
    request: Vec<u8>,
    hello: Vec<u8>,
    m: Partial,
    snapshot_costs: Vec<u64>,
    cpus_seen: std::collections::BTreeSet<usize>,
}

/// Runs the connections `indices` of the run on this thread: handshakes, warm-up, the
/// barrier every thread passes before measuring, the measured part.
pub(crate) fn run_thread(
    config: &BenchConfig,
    indices: &[usize],
    shared: &Shared<'_>,
) -> Result<RawRun, BenchError> {
    let (mut thread, start) =
        shared.start_measuring(ThreadLoop::prepare(config, indices, shared))?;
    thread.m = Partial::measuring(shared.control);
    thread.run_phase(start, config.stop, true).map_err(|(index, e)| e.into_bench_error(index))?;
    let stopping = shared.control.stopped();
    for slot in &mut thread.slots {
        if let (Some(stream), false) = (&slot.stream, slot.dead) {
            let outstanding = slot.pipeline.len() as u64;
            crate::server_stats::collect(stream, &mut slot.outcome, outstanding, stopping);
        }
    }
    let outcomes = outcomes_seen_on(
        &mut thread.cpus_seen,
        thread.slots.iter_mut().map(|slot| &mut slot.outcome),
    );
    let m = std::mem::take(&mut thread.m);
    Ok(m.into_raw(start, &thread.snapshot_costs, outcomes))
}

impl Slot {
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

/// Open loop, any engine's slot: the intended time of its next request from `schedule` (its
/// schedule and next intended send time) if it is due by `now` (and before `until`) and the
/// slot `may_send`, the schedule moved on past it.
pub(crate) fn take_due(
    schedule: &mut Option<(Schedule, Instant)>,
    may_send: bool,
    now: Instant,
    until: Option<Instant>,
    start: Instant,
) -> Option<Instant> {
    if !may_send {
        return None;
    }
    let (schedule, next) = schedule.as_mut()?;
    let due = *next;
    if due > now || until.is_some_and(|t| due >= t) {
        return None;
    }
    *next = start + schedule.next_offset();
    Some(due)
}

/// What the open-loop connect-per-request accounting reads and moves on in any engine's
/// slot: its connection, requests in flight, next sequence number, quota and schedule.
pub(crate) struct SlotTurn<'s> {
    pub(crate) index: usize,
    pub(crate) pipeline: &'s mut Pipeline,
    pub(crate) next_seq: &'s mut u64,
    pub(crate) quota: &'s mut Option<u64>,
    pub(crate) schedule: &'s mut Option<(Schedule, Instant)>,
}

/// Open-loop connect-per-request, any engine: the slot's transaction that was due at `due`
/// failed at `now` for `cause`: counted, and kept as unanswered from when it was due (the
/// caller closes its connection; the slot is free for the next).
pub(crate) fn charge_failed_transaction(
    m: &mut Partial,
    config: &BenchConfig,
    start: Instant,
    slot: SlotTurn<'_>,
    due: Instant,
    cause: Failure,
    now: Instant,
) {
    let mut charged = false;
    for req in slot.pipeline.drain() {
        m.record_unanswered(config, start, slot.index, (req.seq, due, Some(req.sent)), now);
        charged = true;
    }
    if !charged {
        // Failed before its request left: it takes its sequence number and quota here.
        let seq = *slot.next_seq;
        *slot.next_seq += 1;
        if let Some(q) = slot.quota.as_mut() {
            *q = q.saturating_sub(1);
        }
        m.record_unanswered(config, start, slot.index, (seq, due, None), now);
    }
    cause.count(&mut m.crr);
}

/// Open-loop connect-per-request, any engine, at the end of the measured part: every
/// transaction of `slots` due before its end (`until`, or the stop at `stopped_at`) that
/// never started is counted, and kept as unanswered at the time it had waited when the run
/// stopped starting transactions (the stop, or the grace after `until`; `now` at the latest).
pub(crate) fn charge_not_started<'s>(
    m: &mut Partial,
    config: &BenchConfig,
    start: Instant,
    slots: impl Iterator<Item = SlotTurn<'s>>,
    until: Option<Instant>,
    stopped_at: Option<Instant>,
    now: Instant,
) {
    let Some(end) = [until, stopped_at].into_iter().flatten().min() else { return };
    let last_start = [stopped_at, until.map(|t| t + STOP_GRACE), Some(now)];
    let gave_up = last_start.into_iter().flatten().min().unwrap_or(now);
    for slot in slots {
        let Some((schedule, due)) = slot.schedule else { continue };
        while *due < end && *slot.quota != Some(0) {
            m.record_unanswered(config, start, slot.index, (*slot.next_seq, *due, None), gave_up);
            m.crr.not_started += 1;
            *slot.next_seq += 1;
            if let Some(q) = slot.quota.as_mut() {
                *q -= 1;
            }
            *due = start + schedule.next_offset();
        }
    }
}

impl<'a> ThreadLoop<'a> {
    fn prepare(
        config: &'a BenchConfig,
        indices: &[usize],
        shared: &'a Shared<'a>,
    ) -> Result<ThreadLoop<'a>, BenchError> {
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
        let epoll = Epoll::new().map_err(|e| err(first, "creating the epoll instance", e))?;
        let mut slots = Vec::with_capacity(indices.len());
        for &index in indices {
            let (stream, outcome) = connect(config, index)?;
            let is_bbr = outcome.congestion.as_deref() == Some("bbr");
            let mut reader = ResponseReader::new(config.reply_len as usize);
            let stream = if config.mode == TxMode::Crr {
                // This first connection only told what the server does with the profile.
                let _ = sys::set_linger_zero(stream.as_fd());
                reader.accept_welcomes();
                None
            } else {
                stream.set_nonblocking(true).map_err(|e| err(index, "setting non-blocking", e))?;
                stream.set_read_timeout(None).map_err(|e| err(index, "handshake", e))?;
                epoll
                    .add(stream.as_fd(), slots.len() as u64, EPOLL_IN)
                    .map_err(|e| err(index, "watching the socket", e))?;
                if let Some(sampler) = shared.sampler {
                    sampler.watch(index, &stream, is_bbr);
                }
                Some(stream)
            };
            slots.push(Slot {
                index,
                stream,
                reader,
                out: Vec::new(),
                out_pos: 0,
                watching_out: false,
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
            });
        }
        let mut thread = ThreadLoop {
            config,
            shared,
            epoll,
            slots,
            request: vec![0u8; config.request_len as usize],
            hello: hello_frame(config),
            m: Partial::default(),
            snapshot_costs: Vec::new(),
            cpus_seen: std::collections::BTreeSet::new(),
        };
        // The warm-up is always closed loop at the run's depth; Ctrl-C during it ends the run.
        let warmup = match config.warmup {
            StopAfter::Duration(d) => StopAfter::Duration(d),
            StopAfter::Count(c) => StopAfter::Count(c.div_ceil(config.connections as u64)),
        };
        let warm_start = Instant::now();
        thread
            .run_phase(warm_start, warmup, false)
            .map_err(|(index, e)| e.into_bench_error(index))?;
        for slot in &thread.slots {
            if let Some(stream) = &slot.stream {
                crate::server_stats::start_window(stream, &slot.outcome)
                    .map_err(|e| err(slot.index, "after the warm-up", e))?;
            }
        }
        Ok(thread)
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
        let open_crr = open && config.mode == TxMode::Crr;
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
        let mut events = [(0u64, 0u32); 64];
        let mut stopped_at: Option<Instant> = None;
        let mut next_check = Instant::now();
        loop {
            let now = Instant::now();
            if stopped_at.is_none() && control.stopped() {
                stopped_at = Some(now);
                if !measured {
                    // Ctrl-C during the warm-up: nothing of it is kept or waited for.
                    for slot in &mut self.slots {
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
                    // A busy connect-per-request slot wakes the loop through its socket.
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
            if now >= next_check {
                self.check_timeouts(start, now, measured)?;
                next_check = now + POLL_SLICE.min(config.response_timeout / 4);
            }
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
            let timeout =
                if config.spin { Duration::ZERO } else { wake.saturating_duration_since(now) };
            let ready = self.epoll.wait(&mut events, timeout).map_err(|e| (0, e.into()))?;
            if ready == 0 {
                continue;
            }
            let done = Instant::now();
            let sending = sending && until.is_none_or(|t| done < t);
            for &(token, flags) in &events[..ready] {
                let i = token as usize;
                let index = self.slots[i].index;
                match self.on_ready(i, flags, done, start, sending, measured) {
                    Ok(()) => {}
                    // An open-loop transaction's failure is its own: counted, and the slot
                    // goes on with the next.
                    Err(e) if open_crr && self.slots[i].due.is_some() => {
                        let connecting = self.slots[i].connecting.is_some();
                        let cause = Failure::of(&e, connecting).ok_or((index, e))?;
                        self.fail_transaction(i, cause, start, done);
                    }
                    Err(e) => return Err((index, e)),
                }
            }
        }
    }

    /// Nothing in flight anywhere (and nothing connecting).
    fn idle(&self) -> bool {
        self.slots.iter().all(|s| s.dead || !s.busy())
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
                self.start_connect(i).map_err(connect_error)?;
            }
            return Ok(());
        }
        let depth = self.config.depth as usize;
        let before = self.slots[i].pipeline.len();
        while self.slots[i].pipeline.len() < depth && self.slots[i].quota != Some(0) {
            let before = if measured && self.config.attribute { self.snapshot(i) } else { None };
            self.queue_request(i, now, now, before);
        }
        if self.slots[i].pipeline.len() > before {
            self.flush(i)?;
        }
        Ok(())
    }

    /// Open loop: queues every request of slot `i` that is due by `now`, then writes.
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
        before: Option<crate::attribution::KernelSnapshot>,
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
        slot.pipeline.push(Outstanding { seq, intended, sent, before });
        self.m.sent += 1;
        self.m.first_send.get_or_insert(sent);
        self.m.last_send = Some(sent);
    }

    /// Writes as much of slot `i`'s output as the socket takes; watches for room if some is
    /// left.
    fn flush(&mut self, i: usize) -> Result<(), LoopError> {
        let slot = &mut self.slots[i];
        let Some(stream) = &mut slot.stream else { return Ok(()) };
        while slot.out_pos < slot.out.len() {
            match stream.write(&slot.out[slot.out_pos..]) {
                Ok(0) => return Err(LoopError::Protocol("server closed the connection".into())),
                Ok(n) => slot.out_pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        let want_out = slot.out_pos < slot.out.len();
        if want_out != slot.watching_out {
            let events = if want_out { EPOLL_IN | EPOLL_OUT } else { EPOLL_IN };
            self.epoll.modify(stream.as_fd(), i as u64, events)?;
            slot.watching_out = want_out;
        }
        Ok(())
    }

    fn snapshot(&mut self, i: usize) -> Option<crate::attribution::KernelSnapshot> {
        let slot = &self.slots[i];
        let stream = slot.stream.as_ref()?;
        kernel_snapshot(stream.as_fd(), slot.is_bbr, &mut self.snapshot_costs)
    }

    /// Slot `i`'s socket is readable or writable (or failed).
    fn on_ready(
        &mut self,
        i: usize,
        flags: u32,
        done: Instant,
        start: Instant,
        sending: bool,
        measured: bool,
    ) -> Result<(), LoopError> {
        if self.slots[i].dead {
            return Ok(());
        }
        if self.slots[i].connecting.is_some() {
            if flags & (EPOLL_OUT | libc::EPOLLERR as u32 | libc::EPOLLHUP as u32) != 0 {
                self.connected(i, done, measured)?;
            }
            return Ok(());
        }
        if flags & EPOLL_OUT != 0 {
            self.flush(i)?;
        }
        if flags & !EPOLL_OUT == 0 {
            return Ok(());
        }
        let policy = self.config.profile.quickack;
        let slot = &mut self.slots[i];
        let Some(stream) = &slot.stream else { return Ok(()) };
        if !slot.reader.recv_some(stream.as_fd(), policy)? {
            return Ok(());
        }
        let mut answered = 0u32;
        while let Some(header) = self.slots[i].reader.take_frame()? {
            let req = self.slots[i].pipeline.answer(&header)?;
            answered += 1;
            let after = if req.before.is_some() { self.snapshot(i) } else { None };
            let (control, index) = (self.shared.control, self.slots[i].index);
            self.m.answered(self.config, control, start, index, req, done, measured, after);
            if self.config.mode == TxMode::Crr {
                self.close_transaction(i);
            }
        }
        if answered > 0 && sending && self.slots[i].schedule.is_none() {
            self.refill(i, done, None, measured)?;
        }
        if (self.m.requests & 4095) == 0
            && let Some(cpu) = sys::current_cpu()
        {
            self.cpus_seen.insert(cpu);
        }
        Ok(())
    }

    /// Connect-per-request: a new socket for slot `i`, profile applied, connect started.
    fn start_connect(&mut self, i: usize) -> io::Result<()> {
        let server = self.config.server;
        let socket = crr_socket(self.config)?;
        let began = Instant::now();
        match socket.connect(&SockAddr::from(server)) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => return Err(e),
        }
        let stream: TcpStream = socket.into();
        self.epoll.add(stream.as_fd(), i as u64, EPOLL_OUT)?;
        let slot = &mut self.slots[i];
        slot.watching_out = true;
        slot.stream = Some(stream);
        slot.connecting = Some(began);
        slot.reader.reset();
        slot.out.clear();
        slot.out_pos = 0;
        Ok(())
    }

    /// Connect-per-request: slot `i`'s connect finished; Hello and request leave together.
    fn connected(&mut self, i: usize, done: Instant, measured: bool) -> Result<(), LoopError> {
        let slot = &mut self.slots[i];
        let began = slot.connecting.take().expect("connecting");
        let stream = slot.stream.as_ref().expect("a connecting slot has a socket");
        if let Some(e) = stream.take_error()? {
            // Still the connect's failure: the caller counts it (open loop) or stops with it.
            slot.connecting = Some(began);
            return Err(if slot.due.is_some() { LoopError::Io(e) } else { connect_error(e) });
        }
        if measured {
            self.m.connect.record(done.saturating_duration_since(began).as_nanos() as u64);
        }
        slot.out.extend_from_slice(&self.hello);
        let now = Instant::now();
        // Open loop: the transaction's latency runs from when it was due.
        let intended = slot.due.unwrap_or(now);
        let before = if measured && self.config.attribute { self.snapshot(i) } else { None };
        self.queue_request(i, intended, now, before);
        self.flush(i)?;
        // The slot watches for its answer now (and for room, if the write was short).
        let slot = &mut self.slots[i];
        if !slot.watching_out {
            return Ok(());
        }
        slot.watching_out = slot.out_pos < slot.out.len();
        if !slot.watching_out {
            let stream = slot.stream.as_ref().expect("connected");
            self.epoll.modify(stream.as_fd(), i as u64, EPOLL_IN)?;
        }
        Ok(())
    }

    /// Connect-per-request: the transaction is over; close with an RST (no TIME_WAIT).
    fn close_transaction(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        if let Some(stream) = slot.stream.take() {
            let _ = self.epoll.delete(stream.as_fd());
            let _ = sys::set_linger_zero(stream.as_fd());
        }
        slot.watching_out = false;
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
            match self.start_connect(i) {
                Ok(()) => return,
                Err(e) => self.fail_transaction(i, Failure::of_connect(&e), start, began),
            }
        }
    }

    /// Open-loop connect-per-request: slot `i`'s transaction failed at `now` for `cause`:
    /// counted, kept as unanswered from when it was due, the connection closed; the slot is
    /// free for the next.
    fn fail_transaction(&mut self, i: usize, cause: Failure, start: Instant, now: Instant) {
        let slot = &mut self.slots[i];
        let Some(due) = slot.due else { return };
        charge_failed_transaction(&mut self.m, self.config, start, slot.turn(), due, cause, now);
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
        let turns = self.slots.iter_mut().map(Slot::turn);
        charge_not_started(&mut self.m, self.config, start, turns, until, stopped_at, now);
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
            let waiting = slot.pipeline.len();
            let index = slot.index;
            self.give_up(i, start, now);
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
            if measured {
                self.give_up(i, start, now);
            }
        }
        if measured && waiting > 0 {
            self.m.warnings.push(format!(
                "{why} with {waiting} request(s) still unanswered after {STOP_GRACE:?} on \
                 connections {}",
                self.slots.iter().map(|s| s.index.to_string()).collect::<Vec<_>>().join(",")
            ));
        }
    }

    fn give_up(&mut self, i: usize, start: Instant, now: Instant) {
        let config = self.config;
        let slot = &mut self.slots[i];
        slot.dead = true;
        if let (Some(_), Some(due)) = (slot.connecting.take(), slot.due) {
            // An open-loop transaction still connecting: unanswered since it was due.
            let seq = slot.next_seq;
            slot.next_seq += 1;
            self.m.record_unanswered(config, start, slot.index, (seq, due, None), now);
        }
        if let Some(stream) = slot.stream.take() {
            let _ = self.epoll.delete(stream.as_fd());
        }
        let index = slot.index;
        for req in slot.pipeline.drain() {
            self.m.record_unanswered(
                config,
                start,
                index,
                (req.seq, req.intended, Some(req.sent)),
                now,
            );
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
