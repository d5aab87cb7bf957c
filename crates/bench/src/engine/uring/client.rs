//! The io_uring client: every connection of the run on one thread and one ring, closed loop.
//!
//! Each connection has one request in flight; its response's arrival sends the next one.
//! Latency runs from just before the submission that carries the request to the moment its
//! response's completion is reaped. A request the watchdog gives up on (response timeout, or
//! the stop grace after Ctrl-C) is counted as unanswered and kept in the percentiles as a
//! lower bound, and its connection stops, as in the default engine.

use std::collections::BTreeSet;
use std::io;
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::sync::{Barrier, OnceLock};
use std::time::Instant;

use super::{Op, ring_options};
use crate::config::{BenchConfig, Engine, StopAfter};
use crate::connection::{self, POLL_SLICE, STOP_GRACE};
use crate::engine::Splitter;
use crate::report::SampleRecord;
use crate::run::{BenchError, Combine, RawRun, RunControl};
use crate::stats::LatencyHistogram;
use crate::sys;
use crate::sys::uring::{Completion, Ring};
use crate::watchdog::{Closer, Watch, Watchdog};
use crate::wire::{FrameKind, FrameParser, HEADER_LEN, Header, WireError};

/// Largest send slot: longer requests go out as this slot's header and then its zeros.
const SEND_SLOT_MAX: usize = 64 * 1024;
/// Spinning: completion-queue polls between looks at the stop flag and the clock.
const SPIN_TURNS_PER_CHECK: u32 = 256;

/// Runs the benchmark on the io_uring engine: `--threads` threads (one unless asked), each
/// with a ring of its own and its share of the connections (connection `i` on thread
/// `i % threads`), all measuring from the same moment after every thread's warm-up.
pub(crate) fn run_raw(config: &BenchConfig, control: &RunControl) -> Result<RawRun, BenchError> {
    let Engine::IoUring { sqpoll } = config.engine else {
        unreachable!("the io_uring client runs io_uring configurations only")
    };
    let threads = config.threads.clamp(1, config.connections);
    let tick = Watchdog::tick_for(config.response_timeout, POLL_SLICE);
    let watchdog = Watchdog::new(tick);
    let barrier = Barrier::new(threads);
    let start = OnceLock::new();
    let outcomes: Vec<Result<RawRun, BenchError>> = std::thread::scope(|scope| {
        let _closer = Closer(&watchdog);
        std::thread::Builder::new()
            .name("tcptail-watchdog".into())
            .spawn_scoped(scope, || watchdog.run(&|| control.stopped(), STOP_GRACE))
            .expect("spawning the watchdog thread");
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let indices: Vec<usize> = (t..config.connections).step_by(threads).collect();
                let shared = Together { barrier: &barrier, start: &start };
                let watchdog = &watchdog;
                std::thread::Builder::new()
                    .name(format!("tcptail-uring-{t}"))
                    .spawn_scoped(scope, move || {
                        drive(config, control, watchdog, sqpoll, &indices, shared)
                    })
                    .expect("spawning an io_uring client thread")
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("io_uring client thread panicked")).collect()
    });
    let mut raw = RawRun::default();
    for outcome in outcomes {
        raw.absorb(outcome?, Combine::Parallel);
    }
    raw.samples.sort_by_key(|s| s.intended_ns);
    raw.interrupted = control.stopped();
    Ok(raw)
}

/// What the threads of a run share: every thread starts measuring at once, after all warmed
/// up, from the moment the first one past the barrier sets.
#[derive(Clone, Copy)]
struct Together<'a> {
    barrier: &'a Barrier,
    start: &'a OnceLock<Instant>,
}

/// One connection's state on the ring.
struct Conn {
    /// The connection's number in the run.
    index: usize,
    stream: TcpStream,
    watch: Watch,
    splitter: Splitter,
    /// Sequence number of the request in flight (or the next one).
    seq: u64,
    /// When the request in flight was submitted.
    sent_at: Instant,
    /// A request is in flight (sent or being sent, answer not yet in).
    outstanding: bool,
    /// Bytes of the request in flight that the kernel has taken.
    written: usize,
    /// Requests answered in this phase.
    answered: u64,
    /// This phase's share of a counted run.
    quota: Option<u64>,
    /// No more requests on this connection (it gave up, or the phase ended for it).
    done: bool,
    /// The connection can never be used again (its read side was shut down).
    dead: bool,
    recv_armed: bool,
    /// The next request waits for the previous send's completion to free the slot.
    send_after_completion: bool,
    outcome: crate::run::ConnectionOutcome,
}

/// What a phase (warm-up or measured part) collects.
#[derive(Default)]
struct Tally {
    latency: LatencyHistogram,
    samples: Vec<SampleRecord>,
    requests: u64,
    sent: u64,
    unanswered: u64,
    end: Option<Instant>,
    warnings: Vec<String>,
}

struct Driver<'a> {
    config: &'a BenchConfig,
    control: &'a RunControl,
    ring: Ring,
    conns: Vec<Conn>,
    completions: Vec<Completion>,
    /// The batch being handled (kept to reuse its allocation).
    batch: Vec<Completion>,
    /// The measured part's start (samples are timed from it).
    start: Instant,
    cpus_seen: BTreeSet<usize>,
}

fn drive(
    config: &BenchConfig,
    control: &RunControl,
    watchdog: &std::sync::Arc<Watchdog>,
    sqpoll: bool,
    indices: &[usize],
    together: Together<'_>,
) -> Result<RawRun, BenchError> {
    let prepared = prepare(config, control, watchdog, sqpoll, indices);
    let mut d = match prepared {
        Ok(d) => d,
        Err(e) => {
            // Every thread must reach the barrier, or the others would wait forever.
            control.stop();
            together.barrier.wait();
            return Err(e);
        }
    };
    together.barrier.wait();
    let start = *together.start.get_or_init(Instant::now);
    d.start = start;
    let n = config.connections as u64;
    let share = |total: u64, index: usize| total / n + u64::from((index as u64) < total % n);
    let (until, counted) = match config.stop {
        StopAfter::Duration(t) => (Some(start + t), None),
        StopAfter::Count(c) => (None, Some(c)),
    };
    let m = if control.stopped() {
        Tally::default()
    } else {
        d.phase(until, |i| counted.map(|c| share(c, i)), true)?
    };
    d.note_cpu();
    let cpus: Vec<usize> = d.cpus_seen.iter().copied().collect();
    let mut raw = RawRun {
        rounds: 1,
        elapsed: m.end.unwrap_or(start).saturating_duration_since(start),
        ..RawRun::default()
    };
    for conn in d.conns.drain(..) {
        let mut outcome = conn.outcome;
        outcome.client_cpus_seen = cpus.clone();
        raw.absorb(
            RawRun { connections: vec![outcome], rounds: 1, ..RawRun::default() },
            Combine::Parallel,
        );
    }
    raw.latency = m.latency;
    raw.requests = m.requests;
    raw.sent = m.sent;
    raw.unanswered = m.unanswered;
    raw.warnings = m.warnings;
    raw.samples = m.samples;
    Ok(raw)
}

/// Pins the thread, sets its ring up, connects its connections and warms them up.
fn prepare<'a>(
    config: &'a BenchConfig,
    control: &'a RunControl,
    watchdog: &std::sync::Arc<Watchdog>,
    sqpoll: bool,
    indices: &[usize],
) -> Result<Driver<'a>, BenchError> {
    let first = indices.first().copied().unwrap_or(0);
    let setup_err = |step: &'static str, source: io::Error| BenchError::Connect {
        connection: first,
        server: config.server,
        step,
        source,
    };
    if let Some(cpu) = config.client_cpu {
        sys::pin_current_thread(cpu).map_err(|e| setup_err("pinning the client thread", e))?;
    }
    let slot_len = (config.request_len as usize).min(SEND_SLOT_MAX);
    let ring = Ring::new(ring_options(indices.len(), slot_len, sqpoll))
        .map_err(|e| setup_err("setting up io_uring (--engine io_uring)", e))?;
    let mut conns = Vec::with_capacity(indices.len());
    for &index in indices {
        let (stream, outcome) = connection::connect(config, index)?;
        let watch = watchdog
            .watch(&stream, config.response_timeout)
            .map_err(|e| setup_err("watching the socket", e))?;
        conns.push(Conn {
            index,
            stream,
            watch,
            splitter: Splitter::new(FrameParser::new(FrameKind::Response, config.reply_len)),
            seq: 0,
            sent_at: Instant::now(),
            outstanding: false,
            written: 0,
            answered: 0,
            quota: None,
            done: false,
            dead: false,
            recv_armed: false,
            send_after_completion: false,
            outcome,
        });
    }
    let mut d = Driver {
        config,
        control,
        ring,
        conns,
        completions: Vec::with_capacity(64),
        batch: Vec::with_capacity(64),
        start: Instant::now(),
        cpus_seen: BTreeSet::new(),
    };
    d.note_cpu();
    // Warm-up: its own phase, every connection drained before the measured part starts.
    let (until, quota) = match config.warmup {
        StopAfter::Duration(t) => (Some(Instant::now() + t), None),
        StopAfter::Count(c) => (None, Some(c.div_ceil(config.connections as u64))),
    };
    let warm = d.phase(until, |_| quota, false)?;
    if let Some(w) = warm.warnings.first()
        && !control.stopped()
    {
        return Err(BenchError::Protocol {
            connection: first,
            message: format!("during the warm-up: {w}"),
        });
    }
    Ok(d)
}

/// A failure that ends the run.
enum Failure {
    Io(usize, io::Error),
    Protocol(usize, String),
}

impl Failure {
    /// The failure with the connection's number in the run instead of its place on the ring.
    fn globalize(self, conns: &[Conn]) -> Failure {
        let index = |i: usize| conns.get(i).map_or(i, |c| c.index);
        match self {
            Failure::Io(i, e) => Failure::Io(index(i), e),
            Failure::Protocol(i, m) => Failure::Protocol(index(i), m),
        }
    }

    fn into_bench_error(self) -> BenchError {
        match self {
            Failure::Io(connection, e) => BenchError::Protocol {
                connection,
                message: format!("connection failed during the run: {e}"),
            },
            Failure::Protocol(connection, message) => BenchError::Protocol { connection, message },
        }
    }
}

impl Driver<'_> {
    fn note_cpu(&mut self) {
        if let Some(cpu) = sys::current_cpu() {
            self.cpus_seen.insert(cpu);
        }
    }

    /// Runs one phase: every live connection sends until `until` passes or its `quota` is
    /// answered, then the requests in flight are waited for.
    fn phase(
        &mut self,
        until: Option<Instant>,
        quota: impl Fn(usize) -> Option<u64>,
        measured: bool,
    ) -> Result<Tally, BenchError> {
        let mut tally = Tally::default();
        for c in &mut self.conns {
            c.answered = 0;
            // Each phase numbers its requests from 0, as the default engine's loops do.
            c.seq = 0;
            c.quota = quota(c.index);
            c.done = c.dead || c.quota == Some(0);
        }
        for i in 0..self.conns.len() {
            self.arm(i).map_err(|f| f.globalize(&self.conns).into_bench_error())?;
            if !self.conns[i].done {
                self.send(i).map_err(|f| f.globalize(&self.conns).into_bench_error())?;
            }
        }
        let mut turns = 0u32;
        let mut ended = false;
        while self.conns.iter().any(|c| c.outstanding) {
            if !ended {
                turns = turns.wrapping_add(1);
                let look = !self.config.spin || turns.is_multiple_of(SPIN_TURNS_PER_CHECK);
                if look && (self.control.stopped() || until.is_some_and(|t| Instant::now() >= t)) {
                    ended = true;
                    for c in &mut self.conns {
                        c.done = true;
                    }
                }
            }
            self.wait().map_err(|e| Failure::Io(0, e).into_bench_error())?;
            std::mem::swap(&mut self.completions, &mut self.batch);
            let mut batch = std::mem::take(&mut self.batch);
            for done in batch.drain(..) {
                self.complete(done, measured, &mut tally)
                    .map_err(|f| f.globalize(&self.conns).into_bench_error())?;
            }
            self.batch = batch;
        }
        Ok(tally)
    }

    /// Submits what is queued and waits for a completion (or, spinning, looks once).
    fn wait(&mut self) -> io::Result<()> {
        if self.config.spin {
            self.ring.submit()?;
            std::hint::spin_loop();
        } else {
            self.ring.submit_and_wait(None)?;
        }
        self.ring.completions(&mut self.completions);
        Ok(())
    }

    fn arm(&mut self, i: usize) -> Result<(), Failure> {
        let c = &mut self.conns[i];
        if c.recv_armed || c.dead {
            return Ok(());
        }
        self.ring.arm_recv(c.stream.as_fd(), Op::Recv(i).token()).map_err(|e| Failure::Io(i, e))?;
        c.recv_armed = true;
        Ok(())
    }

    /// Queues the next request of connection `i` (its first bytes, or all of it).
    fn send(&mut self, i: usize) -> Result<(), Failure> {
        let (seq, request_len, reply_len) =
            (self.conns[i].seq, self.config.request_len, self.config.reply_len);
        let slot = self.ring.send_slot(i).expect("a connection sends one request at a time");
        let head: &mut [u8; HEADER_LEN] =
            (&mut slot[..HEADER_LEN]).try_into().expect("a slot holds a header");
        Header::request(seq, request_len, reply_len).encode(head);
        let c = &mut self.conns[i];
        c.outstanding = true;
        c.written = 0;
        c.watch.waiting();
        c.sent_at = Instant::now();
        self.push_send(i)
    }

    /// Queues the part of connection `i`'s request the kernel has not taken yet.
    fn push_send(&mut self, i: usize) -> Result<(), Failure> {
        let total = self.config.request_len as usize;
        let slot_len = total.min(SEND_SLOT_MAX);
        let written = self.conns[i].written;
        // Past the slot, the rest of a long request is the slot's zeros again.
        let range = if written < slot_len {
            written..slot_len
        } else {
            HEADER_LEN..HEADER_LEN + (total - written).min(slot_len - HEADER_LEN)
        };
        let fd = self.conns[i].stream.as_fd();
        self.ring.send(fd, i, range, Op::Send(i).token()).map_err(|e| Failure::Io(i, e))
    }

    fn complete(
        &mut self,
        done: Completion,
        measured: bool,
        tally: &mut Tally,
    ) -> Result<(), Failure> {
        match Op::from_token(done.token) {
            Op::Send(i) => {
                self.ring.sent(i);
                if done.result < 0 {
                    return self.lost(i, done.result, measured, tally);
                }
                let c = &mut self.conns[i];
                c.written += done.result as usize;
                if c.send_after_completion {
                    c.send_after_completion = false;
                    return self.send(i);
                }
                if c.outstanding && c.written < self.config.request_len as usize {
                    return self.push_send(i);
                }
                Ok(())
            }
            Op::Recv(i) => {
                if !done.more {
                    self.conns[i].recv_armed = false;
                }
                match done.result {
                    n if n > 0 => {
                        let bid = done.buffer.expect("a receive with bytes names its buffer");
                        let r = self.received(i, bid, n as usize, measured, tally);
                        self.ring.recycle(bid);
                        r?;
                    }
                    0 => return self.lost(i, 0, measured, tally),
                    e if e == -libc::ENOBUFS => {} // re-armed below once buffers are back
                    e => return self.lost(i, e, measured, tally),
                }
                if !self.conns[i].recv_armed && !self.conns[i].dead {
                    self.arm(i)?;
                }
                Ok(())
            }
        }
    }

    /// The bytes of one receive on connection `i`.
    fn received(
        &mut self,
        i: usize,
        bid: u16,
        len: usize,
        measured: bool,
        tally: &mut Tally,
    ) -> Result<(), Failure> {
        let bytes = self.ring.received(bid, len);
        let c = &mut self.conns[i];
        let mut answers = 0u32;
        let mut seq = c.seq;
        c.splitter
            .feed(bytes, |h: Header| {
                if h.seq != seq || answers > 0 {
                    return Err(SeqError::Unexpected(h.seq, seq));
                }
                answers += 1;
                seq += 1;
                Ok(())
            })
            .map_err(|e| Failure::Protocol(i, e.to_string()))?;
        if answers == 0 {
            return Ok(());
        }
        let now = Instant::now();
        c.watch.answered();
        c.outstanding = false;
        let latency = now.saturating_duration_since(c.sent_at).as_nanos() as u64;
        if measured && self.config.keep_samples {
            tally.samples.push(SampleRecord {
                intended_ns: c.sent_at.saturating_duration_since(self.start).as_nanos() as u64,
                connection: c.index,
                seq: c.seq,
                latency_ns: latency,
                service_ns: Some(latency),
                answered: true,
            });
        }
        c.seq += 1;
        c.answered += 1;
        tally.latency.record(latency);
        tally.requests += 1;
        tally.sent += 1;
        tally.end = Some(now);
        if measured {
            self.control.add_completed(1);
            if c.seq.is_multiple_of(4096) {
                self.note_cpu();
            }
        }
        let c = &mut self.conns[i];
        if c.quota.is_some_and(|q| c.answered >= q) {
            c.done = true;
        }
        if !c.done {
            if self.ring.slot_free(i) {
                self.send(i)?;
            } else {
                // The last send's completion is not reaped yet (it is in this batch or the
                // next): the slot is the kernel's until then.
                c.send_after_completion = true;
                c.outstanding = true;
            }
        }
        Ok(())
    }

    /// Connection `i` can receive nothing more (end-of-file or an error, `result`): the
    /// watchdog's doing (timeout or stop grace: the request in flight is unanswered) or the
    /// server's (an error).
    fn lost(
        &mut self,
        i: usize,
        result: i32,
        measured: bool,
        tally: &mut Tally,
    ) -> Result<(), Failure> {
        let c = &mut self.conns[i];
        c.dead = true;
        c.done = true;
        c.recv_armed = false;
        if !c.watch.fired() {
            return Err(if result == 0 {
                Failure::Protocol(i, "server closed the connection".into())
            } else {
                Failure::Io(i, io::Error::from_raw_os_error(-result))
            });
        }
        if !c.outstanding {
            return Ok(());
        }
        let now = Instant::now();
        c.outstanding = false;
        if measured {
            let latency = now.saturating_duration_since(c.sent_at).as_nanos() as u64;
            if self.config.keep_samples {
                tally.samples.push(SampleRecord {
                    intended_ns: c.sent_at.saturating_duration_since(self.start).as_nanos() as u64,
                    connection: c.index,
                    seq: c.seq,
                    latency_ns: latency,
                    service_ns: Some(latency),
                    answered: false,
                });
            }
            tally.latency.record(latency);
            tally.unanswered += 1;
            tally.sent += 1;
            tally.end = Some(tally.end.map_or(now, |e| e.max(now)));
        }
        let (seq, index) = (c.seq, c.index);
        tally.warnings.push(if self.control.stopped() {
            format!("connection {index}: stopped while request {seq} waited")
        } else {
            format!(
                "connection {index}: request {seq} got no response within {:?}; the connection \
                 stopped there",
                self.config.response_timeout
            )
        });
        Ok(())
    }
}

/// A response out of turn: with one request in flight, only its answer may come.
#[derive(Debug, thiserror::Error)]
enum SeqError {
    #[error("response sequence {0} where {1} was expected")]
    Unexpected(u64, u64),
    #[error(transparent)]
    Wire(#[from] WireError),
}
