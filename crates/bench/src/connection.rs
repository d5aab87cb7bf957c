//! One benchmark connection: connect with the profile applied, handshake, warm up, measure.
//!
//! The measuring loops are the hot path. Per request they do one `send`, normally one `recv`
//! (plus one `setsockopt(TCP_QUICKACK)` when the profile re-arms it), two clock reads and a
//! histogram increment; kernel snapshots for attribution are taken outside the timed window in
//! closed loop, and before the send (its cost shows as send lateness) in open loop. Nothing
//! allocates per request unless every sample is being kept. A blocking receive has no
//! `SO_RCVTIMEO` (a kernel timer armed per receive costs ~4 % of loopback transactions/s):
//! its deadlines are kept by the run's watchdog thread (the crate-private `watchdog` module),
//! which the loop tells of each wait with two relaxed atomic stores.
//!
//! # Requests that get no answer
//!
//! A request is waited for at most [`BenchConfig::response_timeout`] after it was sent (and at
//! most [`STOP_GRACE`] once a stop was asked for). A request still unanswered then is **not
//! dropped**: it is counted in [`RawRun::unanswered`] and recorded in the latency histogram
//! (and, if it was sent, the service histogram) at the time it had waited when the connection
//! gave up: a lower bound of its real latency, so the percentiles stay honest lower bounds
//! instead of describing only the requests that were lucky enough to be answered. In open loop
//! the same holds for requests that were due but could not be sent at all because the socket
//! stayed full (the server stopped reading): they are charged from their intended send time.
//! A connection that gave up on a request stops (responses arrive in order, so nothing after
//! it could be matched) and says so in [`RawRun::warnings`].

use std::collections::BTreeSet;
use std::io::{self, Write};
use std::net::TcpStream;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::{Arc, Barrier, OnceLock};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use tcptail_sock::{QuickAck, apply_profile};

use crate::attribution::{AttributedSample, KernelSnapshot};
use crate::config::{BenchConfig, Load, StopAfter};
use crate::report::SampleRecord;
use crate::run::{BenchError, ConnectionOutcome, RawRun, RunControl};
use crate::stats::LatencyHistogram;
use crate::sys;
use crate::watchdog::{Watch, Watchdog};
use crate::wire::{self, Header, HelloConfig, Welcome};

pub(crate) mod event_loop;
mod open_loop;
pub(crate) mod reader;
pub(crate) mod slot_loop;

use reader::ResponseReader;

/// How long the handshake may take before the server is declared unresponsive.
pub(crate) const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Once a stop is asked for (Ctrl-C), requests already sent are waited for this long at most.
pub const STOP_GRACE: Duration = Duration::from_millis(500);
/// Longest single sleep in a wait, so that a stop or a deadline is noticed promptly; also
/// the send timeout of blocking sockets and the longest watchdog tick.
pub(crate) const POLL_SLICE: Duration = Duration::from_millis(100);
/// Busy-loop turns between clock reads while spinning on a socket that has nothing.
const SPIN_TURNS_PER_CHECK: u32 = 256;

/// What the connections of one run share.
pub(crate) struct Shared<'a> {
    pub(crate) control: &'a RunControl,
    /// Every connection starts measuring at once, after all warmed up.
    pub(crate) barrier: &'a Barrier,
    /// The run's start, set by the first connection past the barrier.
    pub(crate) start: &'a OnceLock<Instant>,
    /// Keeps the deadlines of blocking receives.
    pub(crate) watchdog: &'a Arc<Watchdog>,
    /// Reads every connection's `tcp_info` on a period, when asked for.
    pub(crate) sampler: Option<&'a crate::tcp_sampler::Sampler>,
}

impl Shared<'_> {
    /// Passes the barrier every connection thread passes before measuring, with what this
    /// thread `prepared` (handshakes, warm-up), and returns it with the run's start (set by
    /// the first thread past). A thread that failed stops the run, passes the barrier all
    /// the same (or the others would wait forever) and returns its error.
    pub(crate) fn start_measuring<T>(
        &self,
        prepared: Result<T, BenchError>,
    ) -> Result<(T, Instant), BenchError> {
        let prepared = prepared.inspect_err(|_| self.control.stop());
        self.barrier.wait();
        let prepared = prepared?;
        Ok((prepared, *self.start.get_or_init(|| self.control.measuring_starts())))
    }
}

/// Each connection's outcome, with every CPU its client thread was seen on (`cpus_seen`
/// and the one it runs on now).
pub(crate) fn outcomes_seen_on<'o>(
    cpus_seen: &mut BTreeSet<usize>,
    outcomes: impl Iterator<Item = &'o mut ConnectionOutcome>,
) -> Vec<ConnectionOutcome> {
    if let Some(cpu) = sys::current_cpu() {
        cpus_seen.insert(cpu);
    }
    outcomes
        .map(|outcome| {
            outcome.client_cpus_seen = cpus_seen.iter().copied().collect();
            outcome.clone()
        })
        .collect()
}

pub(crate) fn run_connection(
    config: &BenchConfig,
    index: usize,
    shared: &Shared<'_>,
) -> Result<RawRun, BenchError> {
    let control = shared.control;
    let (mut conn, start) = shared.start_measuring(prepare(config, index, shared))?;
    let n = config.connections as u64;
    let share = |total: u64| total / n + u64::from((index as u64) < total % n);
    let stop = match config.stop {
        StopAfter::Duration(d) => Limit::Until(start + d),
        StopAfter::Count(c) => Limit::Count(share(c)),
    };
    match config.load {
        Load::Closed => conn.closed_loop(config, control, start, stop, true, index),
        Load::Open { rate, .. } => conn.open_loop(config, control, start, stop, rate, index),
    }
    .map_err(|e| e.into_bench_error(index))?;
    crate::server_stats::collect(
        &conn.stream,
        &mut conn.outcome,
        conn.m.unanswered,
        control.stopped(),
    );
    Ok(conn.finish(start))
}

/// The Hello this configuration sends, encoded as a frame.
pub(crate) fn hello_frame(config: &BenchConfig) -> Vec<u8> {
    let mut frame = Vec::new();
    wire::write_hello(&mut frame, &hello(config)).expect("a Hello always encodes into memory");
    frame
}

/// What this configuration asks of the server for each connection.
fn hello(config: &BenchConfig) -> HelloConfig {
    HelloConfig {
        profile: config.profile.clone(),
        server_cpu: config.server_cpu,
        spin: config.spin,
        request_len: config.request_len,
        reply_len: config.reply_len,
    }
}

fn prepare(
    config: &BenchConfig,
    index: usize,
    shared: &Shared<'_>,
) -> Result<Connection, BenchError> {
    let control = shared.control;
    let connect_err = |step, source| BenchError::Connect {
        connection: index,
        server: config.server,
        step,
        source,
    };
    if let Some(cpu) = config.client_cpu {
        sys::pin_current_thread(cpu).map_err(|e| connect_err("pinning the client thread", e))?;
    }
    let (stream, outcome) = connect(config, index)?;
    let nonblocking = config.spin || matches!(config.load, Load::Open { .. });
    stream.set_nonblocking(nonblocking).map_err(|e| connect_err("setting non-blocking", e))?;
    // A blocking receive waits without a timeout (the watchdog keeps its deadline); a blocking
    // send's timeout costs nothing until the socket is full, and then lets it notice stops.
    stream.set_read_timeout(None).map_err(|e| connect_err("handshake", e))?;
    stream.set_write_timeout(Some(POLL_SLICE)).map_err(|e| connect_err("handshake", e))?;
    let watch = if nonblocking {
        None
    } else {
        let watch = shared.watchdog.watch(&stream, config.response_timeout);
        Some(watch.map_err(|e| connect_err("watching the socket", e))?)
    };
    let is_bbr = outcome.congestion.as_deref() == Some("bbr");
    let mut conn = Connection {
        request: vec![0u8; config.request_len as usize],
        reader: ResponseReader::new(config.reply_len as usize),
        policy: config.profile.quickack,
        spin: config.spin,
        nonblocking,
        is_bbr,
        stream,
        watch,
        cpus_seen: BTreeSet::new(),
        snapshot_costs: Vec::new(),
        m: Partial::default(),
        outcome,
    };
    conn.note_cpu();
    let warmup = match config.warmup {
        StopAfter::Duration(d) => Limit::Until(Instant::now() + d),
        StopAfter::Count(c) => Limit::Count(c.div_ceil(config.connections as u64)),
    };
    let warm_start = Instant::now();
    // The run's own control: Ctrl-C during the warm-up ends it (and then the run) at once.
    conn.closed_loop(config, control, warm_start, warmup, false, index)
        .map_err(|e| e.into_bench_error(index))?;
    crate::server_stats::start_window(&conn.stream, &conn.outcome)
        .map_err(|e| connect_err("after the warm-up", e))?;
    conn.m = Partial::measuring(control);
    if let Some(sampler) = shared.sampler {
        sampler.watch(index, &conn.stream, conn.is_bbr);
    }
    Ok(conn)
}

/// Connects connection `index` with the profile applied before `connect`, and performs the
/// handshake: Hello sent, Welcome read and checked. Shared by every engine.
pub(crate) fn connect(
    config: &BenchConfig,
    index: usize,
) -> Result<(TcpStream, ConnectionOutcome), BenchError> {
    let connect_err = |step, source| BenchError::Connect {
        connection: index,
        server: config.server,
        step,
        source,
    };
    let socket = Socket::new(Domain::for_address(config.server), Type::STREAM, Some(Protocol::TCP))
        .map_err(|e| connect_err("creating the socket", e))?;
    // Buffers and congestion control must be in place before the SYN (window scaling is
    // negotiated there), so the profile is applied before connect.
    let client_apply = apply_profile(socket.as_fd(), &config.profile);
    socket
        .connect_timeout(&SockAddr::from(config.server), HANDSHAKE_TIMEOUT)
        .map_err(|e| connect_err("connecting", e))?;
    let mut stream: TcpStream = socket.into();
    stream.set_read_timeout(Some(HANDSHAKE_TIMEOUT)).map_err(|e| connect_err("handshake", e))?;
    wire::write_hello(&mut stream, &hello(config))
        .map_err(|e| connect_err("sending the hello", io::Error::other(e.to_string())))?;
    let welcome = wire::read_welcome(&mut stream)
        .map_err(|e| connect_err("reading the welcome", io::Error::other(e.to_string())))?;
    check_idle_timeout(config, &welcome).map_err(|e| connect_err("handshake", e))?;
    let congestion = tcptail_sock::apply::congestion_control(stream.as_fd()).ok();
    let outcome = ConnectionOutcome {
        client_apply,
        welcome,
        congestion,
        client_cpus_seen: Vec::new(),
        index,
        server_stats: Default::default(),
    };
    Ok((stream, outcome))
}

/// Refuses, before measuring, a run whose requests on one connection would be further apart
/// than the server lets a connection stay idle: the server would cut it mid-run.
fn check_idle_timeout(config: &BenchConfig, welcome: &Welcome) -> io::Result<()> {
    let (Load::Open { rate, spacing }, Some(idle)) = (config.load, welcome.idle_timeout_seconds)
    else {
        return Ok(());
    };
    if config.mode == crate::config::TxMode::Crr {
        // Each transaction has a connection of its own, idle for no longer than it takes.
        return Ok(());
    }
    let gap = config.connections as f64 / rate;
    // Poisson gaps exceed ten times their mean with probability e^-10 (4.5e-5) each.
    let worst = match spacing {
        crate::pacer::Spacing::Constant => gap,
        crate::pacer::Spacing::Poisson => gap * 10.0,
    };
    if worst >= idle {
        return Err(io::Error::other(format!(
            "requests on each connection would be {worst:.1} s apart, but the server closes \
             connections idle for {idle:.1} s (raise --rate, or the server's --idle-timeout)"
        )));
    }
    Ok(())
}

/// When a loop ends.
#[derive(Debug, Clone, Copy)]
enum Limit {
    Until(Instant),
    Count(u64),
}

impl Limit {
    fn reached(self, done: u64) -> bool {
        match self {
            Limit::Until(t) => Instant::now() >= t,
            Limit::Count(n) => done >= n,
        }
    }

    /// Open loop: whether the request numbered `seq`, due at `due`, belongs to the run.
    fn includes(self, seq: u64, due: Instant) -> bool {
        match self {
            Limit::Until(t) => due < t,
            Limit::Count(n) => seq < n,
        }
    }
}

/// A failure inside the loops.
pub(crate) enum LoopError {
    Io(io::Error),
    Protocol(String),
    /// The server closed the connection (end of file where a response was due).
    Closed,
}

impl From<io::Error> for LoopError {
    fn from(e: io::Error) -> Self {
        LoopError::Io(e)
    }
}

impl LoopError {
    pub(crate) fn into_bench_error(self, connection: usize) -> BenchError {
        let message = match self {
            LoopError::Io(e) => format!("connection failed during the run: {e}"),
            LoopError::Protocol(m) => m,
            LoopError::Closed => "server closed the connection".into(),
        };
        BenchError::Protocol { connection, message }
    }
}

/// What one loop measured so far (every engine's loops fill one the same way).
#[derive(Default)]
pub(crate) struct Partial {
    pub(crate) latency: LatencyHistogram,
    pub(crate) service: LatencyHistogram,
    pub(crate) send_lateness: LatencyHistogram,
    pub(crate) connect: LatencyHistogram,
    pub(crate) requests: u64,
    pub(crate) sent: u64,
    pub(crate) unanswered: u64,
    pub(crate) first_send: Option<Instant>,
    pub(crate) last_send: Option<Instant>,
    /// The last response, or the moment the connection stopped waiting for one.
    pub(crate) end: Option<Instant>,
    pub(crate) attributed: Vec<AttributedSample>,
    pub(crate) samples: Vec<SampleRecord>,
    pub(crate) warnings: Vec<String>,
    /// The run's interval histograms, when asked for (measured part only).
    pub(crate) interval: Option<crate::interval::IntervalSlot>,
    /// Open-loop connect-per-request: transactions queued, not started, failed.
    pub(crate) crr: crate::run::CrrCounts,
}

impl Partial {
    /// A fresh measurement for the measured part of a run.
    pub(crate) fn measuring(control: &RunControl) -> Partial {
        Partial { interval: control.interval_slot(), ..Partial::default() }
    }

    /// Records one request's latency, in the interval histogram too when there is one.
    pub(crate) fn record_latency(&mut self, nanos: u64) {
        self.latency.record(nanos);
        if let Some(slot) = &self.interval {
            slot.record(nanos);
        }
    }

    /// Counts and records a request that got no answer, as a lower bound: the time it had
    /// waited at `gave_up` since it was due (latency) and since it was sent (service).
    pub(crate) fn record_unanswered(
        &mut self,
        config: &BenchConfig,
        start: Instant,
        index: usize,
        (seq, intended, sent): (u64, Instant, Option<Instant>),
        gave_up: Instant,
    ) {
        let latency = gave_up.saturating_duration_since(intended).as_nanos() as u64;
        let service = sent.map(|s| gave_up.saturating_duration_since(s).as_nanos() as u64);
        self.record_latency(latency);
        if let (Some(service), Load::Open { .. }) = (service, config.load) {
            self.service.record(service);
        }
        self.unanswered += 1;
        self.end = Some(self.end.map_or(gave_up, |e| e.max(gave_up)));
        if config.keep_samples {
            self.samples.push(SampleRecord {
                intended_ns: intended.saturating_duration_since(start).as_nanos() as u64,
                connection: index,
                seq,
                latency_ns: latency,
                service_ns: service,
                answered: false,
            });
        }
    }

    /// Keeps what an answered request adds beyond the histograms: its attribution sample
    /// (`after`: the kernel's state read again after the answer) and, when every sample is
    /// kept, its record. `latency` runs from `req.intended`, `service` from `req.sent`
    /// (nanoseconds).
    fn keep_answered(
        &mut self,
        config: &BenchConfig,
        start: Instant,
        index: usize,
        req: Outstanding,
        (latency, service): (u64, u64),
        after: Option<KernelSnapshot>,
    ) {
        if let (Some(before), Some(after)) = (req.before, after) {
            let send_late_ns = req.sent.saturating_duration_since(req.intended).as_nanos() as u64;
            self.attributed.push(AttributedSample {
                latency_ns: latency,
                send_late_ns,
                before,
                after,
            });
        }
        if config.keep_samples {
            self.samples.push(SampleRecord {
                intended_ns: req.intended.saturating_duration_since(start).as_nanos() as u64,
                connection: index,
                seq: req.seq,
                latency_ns: latency,
                service_ns: Some(service),
                answered: true,
            });
        }
    }
}

struct Connection {
    stream: TcpStream,
    /// Blocking sockets only: the watchdog's view of this connection's waits.
    watch: Option<Watch>,
    request: Vec<u8>,
    reader: ResponseReader,
    policy: QuickAck,
    spin: bool,
    nonblocking: bool,
    is_bbr: bool,
    cpus_seen: BTreeSet<usize>,
    snapshot_costs: Vec<u64>,
    m: Partial,
    outcome: ConnectionOutcome,
}

/// A request sent and waiting for its response.
pub(crate) struct Outstanding {
    pub(crate) seq: u64,
    /// When it was due (closed loop: when it was sent).
    pub(crate) intended: Instant,
    pub(crate) sent: Instant,
    /// The kernel's state before it was sent (attribution on).
    pub(crate) before: Option<KernelSnapshot>,
}

/// How long a wait for the server may last: until `deadline`, cut to [`STOP_GRACE`] from the
/// moment a stop is noticed.
struct Patience<'a> {
    deadline: Instant,
    control: &'a RunControl,
    stop_noticed: bool,
}

impl<'a> Patience<'a> {
    fn new(deadline: Instant, control: &'a RunControl) -> Patience<'a> {
        Patience { deadline, control, stop_noticed: false }
    }

    /// True once the wait should end without an answer.
    fn expired(&mut self, now: Instant) -> bool {
        if !self.stop_noticed && self.control.stopped() {
            self.stop_noticed = true;
            self.deadline = self.deadline.min(now + STOP_GRACE);
        }
        now >= self.deadline
    }

    /// How long to sleep before looking again.
    fn slice(&self, now: Instant) -> Duration {
        self.deadline.saturating_duration_since(now).min(POLL_SLICE)
    }
}

impl Connection {
    fn note_cpu(&mut self) {
        if let Some(cpu) = sys::current_cpu() {
            self.cpus_seen.insert(cpu);
        }
    }

    /// The kernel's state of this connection now ([`kernel_snapshot`]).
    fn snapshot(&mut self) -> Option<KernelSnapshot> {
        kernel_snapshot(self.stream.as_fd(), self.is_bbr, &mut self.snapshot_costs)
    }

    /// Writes the next bytes of the encoded request from `written` on; returns how many are
    /// written in all, without waiting if the socket is full (non-blocking sockets).
    fn write_some(&mut self, mut written: usize) -> Result<usize, LoopError> {
        while written < self.request.len() {
            match self.stream.write(&self.request[written..]) {
                Ok(0) => return Err(LoopError::Closed),
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(written)
    }

    /// Sends request `seq` whole; false if the socket stayed full until `patience` ran out.
    fn send_request(
        &mut self,
        seq: u64,
        reply_len: u32,
        patience: &mut Patience<'_>,
    ) -> Result<bool, LoopError> {
        wire::encode_request(&mut self.request, seq, reply_len);
        let mut written = 0;
        let mut turns = 0u32;
        loop {
            written = self.write_some(written)?;
            if written == self.request.len() {
                return Ok(true);
            }
            if !self.keep_waiting(&mut turns, patience, sys::wait_writable)? {
                return Ok(false);
            }
        }
    }

    /// Between two tries at a socket that was not ready: a spinning loop spins on, looking at
    /// the clock only every [`SPIN_TURNS_PER_CHECK`] turns; a non-blocking one sleeps in `wait`
    /// (poll for readable or writable) for at most one slice. False once `patience` ran out.
    fn keep_waiting(
        &self,
        turns: &mut u32,
        patience: &mut Patience<'_>,
        wait: fn(BorrowedFd<'_>, Duration) -> io::Result<bool>,
    ) -> Result<bool, LoopError> {
        if self.spin {
            *turns = turns.wrapping_add(1);
            if !turns.is_multiple_of(SPIN_TURNS_PER_CHECK) {
                std::hint::spin_loop();
                return Ok(true);
            }
        }
        let now = Instant::now();
        if patience.expired(now) {
            return Ok(false);
        }
        if self.nonblocking && !self.spin {
            wait(self.stream.as_fd(), patience.slice(now))?;
        }
        Ok(true)
    }

    /// Blocks (or spins) until the next response frame is complete; `None` if `patience` ran
    /// out first.
    fn await_response(&mut self, patience: &mut Patience<'_>) -> Result<Option<Header>, LoopError> {
        let mut turns = 0u32;
        loop {
            let fd = self.stream.as_fd();
            // A blocking socket waits inside recv until the answer comes or the watchdog
            // shuts its read side down (end-of-file: the response timeout or the stop grace).
            match self.reader.next(fd, self.policy) {
                Ok(Some(h)) => return Ok(Some(h)),
                Ok(None) => {}
                Err(_) if self.watch.as_ref().is_some_and(Watch::fired) => return Ok(None),
                Err(e) => return Err(e),
            }
            if !self.keep_waiting(&mut turns, patience, sys::wait_readable)? {
                return Ok(None);
            }
        }
    }

    /// Counts and records a request that got no answer ([`Partial::record_unanswered`]).
    fn record_unanswered(
        &mut self,
        config: &BenchConfig,
        start: Instant,
        index: usize,
        request: (u64, Instant, Option<Instant>),
        gave_up: Instant,
    ) {
        self.m.record_unanswered(config, start, index, request, gave_up);
    }

    /// Keeps what an answered request adds beyond the histograms ([`Partial::keep_answered`]),
    /// reading the kernel's state again now, after the answer, when it has a "before".
    fn keep_answered(
        &mut self,
        config: &BenchConfig,
        start: Instant,
        index: usize,
        req: Outstanding,
        times: (u64, u64),
    ) {
        let after = if req.before.is_some() { self.snapshot() } else { None };
        self.m.keep_answered(config, start, index, req, times, after);
    }

    fn closed_loop(
        &mut self,
        config: &BenchConfig,
        control: &RunControl,
        start: Instant,
        limit: Limit,
        measured: bool,
        index: usize,
    ) -> Result<(), LoopError> {
        let attribute = measured && config.attribute;
        let mut seq = 0u64;
        while !control.stopped() && !limit.reached(self.m.requests) {
            if self.watch.as_ref().is_some_and(Watch::fired) {
                // The watchdog gave up on the previous request just as its answer came in:
                // this socket can receive nothing more.
                self.m.warnings.push(format!(
                    "connection {index}: answered at its response timeout ({:?}); the \
                     connection stopped there",
                    config.response_timeout
                ));
                break;
            }
            let before = if attribute { self.snapshot() } else { None };
            let t0 = Instant::now();
            let mut patience = Patience::new(t0 + config.response_timeout, control);
            if let Some(watch) = &mut self.watch {
                watch.waiting();
            }
            let whole = self.send_request(seq, config.reply_len, &mut patience)?;
            let answer = if whole { self.await_response(&mut patience)? } else { None };
            if let Some(watch) = &mut self.watch {
                watch.answered();
            }
            let Some(header) = answer else {
                let gave_up = Instant::now();
                if !measured {
                    if control.stopped() {
                        return Ok(());
                    }
                    return Err(LoopError::Protocol(format!(
                        "no response within {:?} during the warm-up",
                        config.response_timeout
                    )));
                }
                self.m.sent += u64::from(whole);
                let sent = whole.then_some(t0);
                self.record_unanswered(config, start, index, (seq, t0, sent), gave_up);
                let what =
                    if whole { "got no response" } else { "could not be sent (full socket)" };
                self.m.warnings.push(if control.stopped() {
                    format!("connection {index}: stopped while request {seq} waited")
                } else {
                    format!(
                        "connection {index}: request {seq} {what} within {:?}; the connection \
                         stopped there",
                        config.response_timeout
                    )
                });
                break;
            };
            let t1 = Instant::now();
            check_seq(&header, seq)?;
            let latency = (t1 - t0).as_nanos() as u64;
            self.m.record_latency(latency);
            self.m.requests += 1;
            self.m.sent += 1;
            self.m.first_send.get_or_insert(t0);
            self.m.last_send = Some(t0);
            self.m.end = Some(t1);
            if measured {
                control.add_completed(1);
                let req = Outstanding { seq, intended: t0, sent: t0, before };
                self.keep_answered(config, start, index, req, (latency, latency));
                if seq.is_multiple_of(4096) {
                    self.note_cpu();
                }
            }
            seq += 1;
        }
        Ok(())
    }

    fn finish(mut self, start: Instant) -> RawRun {
        self.note_cpu();
        self.outcome.client_cpus_seen = self.cpus_seen.iter().copied().collect();
        self.m.into_raw(start, &self.snapshot_costs, vec![self.outcome])
    }
}

impl Partial {
    /// Records the answer to `req` that arrived at `done` on connection `index`: latency
    /// from its intended send time, service time from its send (open loop), the request
    /// counted, and (measured part) its progress, attribution sample and record. `after`:
    /// the kernel's state read after the answer, when the request has a "before".
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn answered(
        &mut self,
        config: &BenchConfig,
        control: &RunControl,
        start: Instant,
        index: usize,
        req: Outstanding,
        done: Instant,
        measured: bool,
        after: Option<KernelSnapshot>,
    ) {
        let latency = done.saturating_duration_since(req.intended).as_nanos() as u64;
        let service = done.saturating_duration_since(req.sent).as_nanos() as u64;
        self.record_latency(latency);
        if matches!(config.load, Load::Open { .. }) && measured {
            self.service.record(service);
        }
        self.requests += 1;
        self.end = Some(done);
        if measured {
            control.add_completed(1);
            self.keep_answered(config, start, index, req, (latency, service), after);
        }
    }

    /// What was measured since `start`, for the connections in `outcomes`.
    pub(crate) fn into_raw(
        self,
        start: Instant,
        snapshot_costs: &[u64],
        outcomes: Vec<ConnectionOutcome>,
    ) -> RawRun {
        let m = self;
        let end = m.end.unwrap_or(start);
        let achieved_rate = match (m.first_send, m.last_send) {
            (Some(a), Some(b)) if m.sent > 1 && b > a => {
                Some((m.sent - 1) as f64 / (b - a).as_secs_f64())
            }
            _ => None,
        };
        let costs: Vec<f64> = snapshot_costs.iter().map(|&c| c as f64).collect();
        RawRun {
            latency: m.latency,
            service: m.service,
            send_lateness: m.send_lateness,
            connect: m.connect,
            requests: m.requests,
            sent: m.sent,
            unanswered: m.unanswered,
            elapsed: end.saturating_duration_since(start),
            achieved_rate,
            attributed: m.attributed,
            tcp_info: Vec::new(),
            snapshot_costs_ns: tcptail_units::stats::median(&costs).into_iter().collect(),
            samples: m.samples,
            connections: outcomes,
            rounds: 1,
            interrupted: false,
            warnings: m.warnings,
            crr: m.crr,
        }
    }
}

/// Reads TCP_INFO, the send queue (SIOCOUTQ) and, on BBR, TCP_CC_INFO, and times the reads
/// into `costs` (the first 100 000); `None` if the kernel refused TCP_INFO.
pub(crate) fn kernel_snapshot(
    fd: BorrowedFd<'_>,
    is_bbr: bool,
    costs: &mut Vec<u64>,
) -> Option<KernelSnapshot> {
    let t = Instant::now();
    let info = tcptail_sock::tcp_info::tcp_info(fd).ok()?;
    let bbr = if is_bbr { tcptail_sock::cc_info::bbr_info(fd).ok().flatten() } else { None };
    let queued = sys::send_queue_bytes(fd).ok();
    let snap = KernelSnapshot::from_kernel(&info, bbr.as_ref(), queued);
    if costs.len() < 100_000 {
        costs.push(t.elapsed().as_nanos() as u64);
    }
    Some(snap)
}

fn check_seq(header: &Header, expected: u64) -> Result<(), LoopError> {
    if header.seq != expected {
        return Err(LoopError::Protocol(format!(
            "response sequence {} where {expected} was expected",
            header.seq
        )));
    }
    Ok(())
}
