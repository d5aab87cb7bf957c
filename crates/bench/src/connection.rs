//! One benchmark connection: connect with the profile applied, handshake, warm up, measure.
//!
//! The measuring loops are the hot path. Per request they do one `send`, normally one `recv`
//! (plus one `setsockopt(TCP_QUICKACK)` when the profile re-arms it), two clock reads and a
//! histogram increment; kernel snapshots for attribution are taken outside the timed window in
//! closed loop. Nothing allocates per request unless every sample is being kept.

use std::collections::{BTreeSet, VecDeque};
use std::io::{self, Write};
use std::net::TcpStream;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::{Barrier, OnceLock};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use tcptail_sock::{ApplyReport, QuickAck, apply_profile};

use crate::attribution::{AttributedSample, KernelSnapshot};
use crate::client::{BenchConfig, BenchError, Load, RawRun, RunControl, StopAfter};
use crate::pacer::Schedule;
use crate::report::SampleRecord;
use crate::stats::{self, LatencyHistogram};
use crate::sys;
use crate::wire::{self, FrameKind, Header, HelloConfig, Welcome};

/// What the handshake of one connection established.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConnectionOutcome {
    /// The client's own profile report (requested vs actual).
    pub client_apply: ApplyReport,
    /// The server's answer, with its profile report.
    pub welcome: Welcome,
    /// Congestion control read back from the client socket.
    pub congestion: Option<String>,
    /// CPUs the client thread was seen running on.
    pub client_cpus_seen: Vec<usize>,
}

/// How long the handshake may take before the server is declared unresponsive.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long an open-loop run waits for outstanding responses after its last send.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

pub(crate) fn run_connection(
    config: &BenchConfig,
    index: usize,
    control: &RunControl,
    barrier: &Barrier,
    start: &OnceLock<Instant>,
) -> Result<RawRun, BenchError> {
    let prepared = prepare(config, index);
    let mut conn = match prepared {
        Ok(conn) => conn,
        Err(e) => {
            // Every thread must reach the barrier, or the others would wait forever.
            control.stop();
            barrier.wait();
            return Err(e);
        }
    };
    barrier.wait();
    let start = *start.get_or_init(Instant::now);
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
    Ok(conn.finish(start))
}

fn prepare(config: &BenchConfig, index: usize) -> Result<Connection, BenchError> {
    let connect_err = |step, source| BenchError::Connect {
        connection: index,
        server: config.server,
        step,
        source,
    };
    if let Some(cpu) = config.client_cpu {
        sys::pin_current_thread(cpu).map_err(|e| connect_err("pinning the client thread", e))?;
    }
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
    let hello = HelloConfig {
        profile: config.profile.clone(),
        server_cpu: config.server_cpu,
        spin: config.spin,
        request_len: config.request_len,
        reply_len: config.reply_len,
    };
    wire::write_hello(&mut stream, &hello)
        .map_err(|e| connect_err("sending the hello", io::Error::other(e.to_string())))?;
    let welcome = wire::read_welcome(&mut stream)
        .map_err(|e| connect_err("reading the welcome", io::Error::other(e.to_string())))?;
    stream.set_read_timeout(None).map_err(|e| connect_err("handshake", e))?;
    let congestion = tcptail_sock::apply::congestion_control(stream.as_fd()).ok();
    let nonblocking = config.spin || matches!(config.load, Load::Open { .. });
    stream.set_nonblocking(nonblocking).map_err(|e| connect_err("setting non-blocking", e))?;
    let is_bbr = congestion.as_deref() == Some("bbr");
    let mut conn = Connection {
        request: vec![0u8; config.request_len as usize],
        reader: ResponseReader::new(config.reply_len as usize),
        policy: config.profile.quickack,
        spin: config.spin,
        is_bbr,
        stream,
        cpus_seen: BTreeSet::new(),
        snapshot_costs: Vec::new(),
        m: Partial::default(),
        outcome: ConnectionOutcome {
            client_apply,
            welcome,
            congestion,
            client_cpus_seen: Vec::new(),
        },
    };
    conn.note_cpu();
    let warmup = match config.warmup {
        StopAfter::Duration(d) => Limit::Until(Instant::now() + d),
        StopAfter::Count(c) => Limit::Count(c.div_ceil(config.connections as u64)),
    };
    let warm_start = Instant::now();
    conn.closed_loop(config, &RunControl::default(), warm_start, warmup, false, index)
        .map_err(|e| e.into_bench_error(index))?;
    conn.m = Partial::default();
    Ok(conn)
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
}

/// A failure inside the loops.
enum LoopError {
    Io(io::Error),
    Protocol(String),
}

impl From<io::Error> for LoopError {
    fn from(e: io::Error) -> Self {
        LoopError::Io(e)
    }
}

impl LoopError {
    fn into_bench_error(self, connection: usize) -> BenchError {
        let message = match self {
            LoopError::Io(e) => format!("connection failed during the run: {e}"),
            LoopError::Protocol(m) => m,
        };
        BenchError::Protocol { connection, message }
    }
}

#[derive(Default)]
struct Partial {
    latency: LatencyHistogram,
    service: LatencyHistogram,
    send_lateness: LatencyHistogram,
    requests: u64,
    sent: u64,
    first_send: Option<Instant>,
    last_send: Option<Instant>,
    last_done: Option<Instant>,
    attributed: Vec<AttributedSample>,
    samples: Vec<SampleRecord>,
}

struct Connection {
    stream: TcpStream,
    request: Vec<u8>,
    reader: ResponseReader,
    policy: QuickAck,
    spin: bool,
    is_bbr: bool,
    cpus_seen: BTreeSet<usize>,
    snapshot_costs: Vec<u64>,
    m: Partial,
    outcome: ConnectionOutcome,
}

/// An open-loop request waiting for its response.
struct Outstanding {
    seq: u64,
    intended: Instant,
    sent: Instant,
    before: Option<KernelSnapshot>,
}

impl Connection {
    fn note_cpu(&mut self) {
        if let Some(cpu) = sys::current_cpu() {
            self.cpus_seen.insert(cpu);
        }
    }

    /// Reads TCP_INFO (and BBR info) and times the read; `None` if the kernel refused.
    fn snapshot(&mut self) -> Option<KernelSnapshot> {
        let t = Instant::now();
        let fd = self.stream.as_fd();
        let info = tcptail_sock::tcp_info::tcp_info(fd).ok()?;
        let bbr =
            if self.is_bbr { tcptail_sock::cc_info::bbr_info(fd).ok().flatten() } else { None };
        let snap = KernelSnapshot::from_kernel(&info, bbr.as_ref());
        if self.snapshot_costs.len() < 100_000 {
            self.snapshot_costs.push(t.elapsed().as_nanos() as u64);
        }
        Some(snap)
    }

    fn send_request(&mut self, seq: u64, reply_len: u32) -> Result<(), LoopError> {
        wire::encode_request(&mut self.request, seq, reply_len);
        let mut written = 0;
        while written < self.request.len() {
            match self.stream.write(&self.request[written..]) {
                Ok(0) => return Err(LoopError::Protocol("server closed the connection".into())),
                Ok(n) => written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if !self.spin {
                        sys::wait_writable(self.stream.as_fd(), Duration::from_millis(100))?;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Blocks (or spins) until the next response frame is complete.
    fn await_response(&mut self) -> Result<Header, LoopError> {
        loop {
            let fd = self.stream.as_fd();
            if let Some(h) = self.reader.next(fd, self.policy)? {
                return Ok(h);
            }
            if self.spin {
                std::hint::spin_loop();
            } else {
                sys::wait_readable(fd, Duration::from_millis(100))?;
            }
        }
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
            let before = if attribute { self.snapshot() } else { None };
            let t0 = Instant::now();
            self.send_request(seq, config.reply_len)?;
            let header = self.await_response()?;
            let t1 = Instant::now();
            check_seq(&header, seq)?;
            let latency = (t1 - t0).as_nanos() as u64;
            self.m.latency.record(latency);
            self.m.requests += 1;
            self.m.sent += 1;
            self.m.first_send.get_or_insert(t0);
            self.m.last_send = Some(t0);
            self.m.last_done = Some(t1);
            if measured {
                control.add_completed(1);
                if attribute && let (Some(before), Some(after)) = (before, self.snapshot()) {
                    self.m.attributed.push(AttributedSample {
                        latency_ns: latency,
                        send_late_ns: 0,
                        before,
                        after,
                    });
                }
                if config.keep_samples {
                    self.m.samples.push(SampleRecord {
                        intended_ns: (t0 - start).as_nanos() as u64,
                        connection: index,
                        seq,
                        latency_ns: latency,
                        service_ns: latency,
                    });
                }
                if seq.is_multiple_of(4096) {
                    self.note_cpu();
                }
            }
            seq += 1;
        }
        Ok(())
    }

    fn open_loop(
        &mut self,
        config: &BenchConfig,
        control: &RunControl,
        start: Instant,
        limit: Limit,
        rate: f64,
        index: usize,
    ) -> Result<(), LoopError> {
        let Load::Open { spacing, .. } = config.load else { unreachable!("open loop config") };
        let n = config.connections as f64;
        let per_connection = tcptail_units::MessageRate::per_second(rate / n)
            .ok_or_else(|| LoopError::Protocol(format!("invalid rate {rate}")))?;
        let stagger = Duration::from_secs_f64(index as f64 / rate);
        let mut schedule =
            Schedule::new(per_connection, spacing, stagger, config.seed.wrapping_add(index as u64));
        let mut next_due = start + schedule.next_offset();
        let mut outstanding: VecDeque<Outstanding> = VecDeque::new();
        let mut seq = 0u64;
        let mut sending = true;
        let mut drain_deadline: Option<Instant> = None;
        let mut pending_snapshot: Option<KernelSnapshot> = None;
        loop {
            if control.stopped() {
                break;
            }
            if sending && limit.reached(self.m.sent) {
                sending = false;
            }
            if !sending {
                if outstanding.is_empty() {
                    break;
                }
                let deadline =
                    *drain_deadline.get_or_insert_with(|| Instant::now() + DRAIN_TIMEOUT);
                if Instant::now() >= deadline {
                    break;
                }
            }
            // Answer-side first: take every response that is already here.
            let fd = self.stream.as_fd();
            if let Some(header) = self.reader.next(fd, self.policy)? {
                let done = Instant::now();
                let Some(req) = outstanding.pop_front() else {
                    return Err(LoopError::Protocol(format!(
                        "response with sequence {} to no outstanding request",
                        header.seq
                    )));
                };
                check_seq(&header, req.seq)?;
                let latency = (done - req.intended).as_nanos() as u64;
                let service = (done - req.sent).as_nanos() as u64;
                let late = req.sent.saturating_duration_since(req.intended).as_nanos() as u64;
                self.m.latency.record(latency);
                self.m.service.record(service);
                self.m.requests += 1;
                self.m.last_done = Some(done);
                control.add_completed(1);
                if let Some(before) = req.before
                    && let Some(after) = self.snapshot()
                {
                    self.m.attributed.push(AttributedSample {
                        latency_ns: latency,
                        send_late_ns: late,
                        before,
                        after,
                    });
                }
                if config.keep_samples {
                    self.m.samples.push(SampleRecord {
                        intended_ns: (req.intended - start).as_nanos() as u64,
                        connection: index,
                        seq: req.seq,
                        latency_ns: latency,
                        service_ns: service,
                    });
                }
                continue;
            }
            let now = Instant::now();
            if sending && now >= next_due {
                let sent = Instant::now();
                self.send_request(seq, config.reply_len)?;
                self.m.send_lateness.record((sent - next_due).as_nanos() as u64);
                self.m.first_send.get_or_insert(sent);
                self.m.last_send = Some(sent);
                self.m.sent += 1;
                let before = pending_snapshot.take();
                outstanding.push_back(Outstanding { seq, intended: next_due, sent, before });
                seq += 1;
                next_due = start + schedule.next_offset();
                if seq.is_multiple_of(4096) {
                    self.note_cpu();
                }
                continue;
            }
            if sending && now + config.spin_window >= next_due {
                // Inside the spin window: take the attribution snapshot once, early, then keep
                // polling the socket (responses are timestamped as they come) until the send.
                if config.attribute && pending_snapshot.is_none() {
                    pending_snapshot = self.snapshot();
                }
                std::hint::spin_loop();
                continue;
            }
            // Nothing to do yet: sleep on the socket until a response or the spin window.
            let wake = if sending {
                next_due.saturating_duration_since(now + config.spin_window)
            } else {
                Duration::from_millis(10)
            };
            if self.spin {
                std::hint::spin_loop();
            } else if !wake.is_zero() {
                sys::wait_readable(self.stream.as_fd(), wake)?;
            }
        }
        Ok(())
    }

    fn finish(mut self, start: Instant) -> RawRun {
        self.note_cpu();
        self.outcome.client_cpus_seen = self.cpus_seen.iter().copied().collect();
        let m = self.m;
        let end = m.last_done.unwrap_or(start);
        let achieved_rate = match (m.first_send, m.last_send) {
            (Some(a), Some(b)) if m.sent > 1 && b > a => {
                Some((m.sent - 1) as f64 / (b - a).as_secs_f64())
            }
            _ => None,
        };
        let costs: Vec<f64> = self.snapshot_costs.iter().map(|&c| c as f64).collect();
        RawRun {
            latency: m.latency,
            service: m.service,
            send_lateness: m.send_lateness,
            requests: m.requests,
            sent: m.sent,
            elapsed: end.saturating_duration_since(start),
            achieved_rate,
            attributed: m.attributed,
            snapshot_costs_ns: stats::median(&costs).into_iter().collect(),
            samples: m.samples,
            connections: vec![self.outcome],
            rounds: 1,
            interrupted: false,
        }
    }
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

/// Reassembles response frames from the byte stream without keeping their payloads.
struct ResponseReader {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    current: Option<Header>,
    remaining: usize,
    error_text: Vec<u8>,
}

impl ResponseReader {
    fn new(reply_len: usize) -> ResponseReader {
        ResponseReader {
            buf: vec![0u8; reply_len.clamp(4096, 256 * 1024)],
            start: 0,
            end: 0,
            current: None,
            remaining: 0,
            error_text: Vec::new(),
        }
    }

    /// Returns the next complete response header, or `None` if the socket has nothing more
    /// right now (non-blocking sockets only; a blocking socket waits inside `recv`).
    fn next(&mut self, fd: BorrowedFd<'_>, policy: QuickAck) -> Result<Option<Header>, LoopError> {
        loop {
            if self.current.is_none() && self.end - self.start >= wire::HEADER_LEN {
                let bytes: &[u8; wire::HEADER_LEN] =
                    self.buf[self.start..self.start + wire::HEADER_LEN].try_into().expect("len");
                let header = Header::decode(bytes)
                    .map_err(|e| LoopError::Protocol(format!("bad response header: {e}")))?;
                if !matches!(header.kind, FrameKind::Response | FrameKind::Error) {
                    return Err(LoopError::Protocol(format!(
                        "server sent a {:?} frame where a response was expected",
                        header.kind
                    )));
                }
                self.start += wire::HEADER_LEN;
                self.remaining = header.frame_len as usize - wire::HEADER_LEN;
                self.current = Some(header);
            }
            if let Some(header) = self.current {
                let take = self.remaining.min(self.end - self.start);
                if header.kind == FrameKind::Error && self.error_text.len() < 4096 {
                    self.error_text.extend_from_slice(&self.buf[self.start..self.start + take]);
                }
                self.start += take;
                self.remaining -= take;
                if self.remaining == 0 {
                    self.current = None;
                    if header.kind == FrameKind::Error {
                        let text = String::from_utf8_lossy(&self.error_text).into_owned();
                        return Err(LoopError::Protocol(format!("server refused: {text}")));
                    }
                    return Ok(Some(header));
                }
            }
            if self.start == self.end {
                self.start = 0;
                self.end = 0;
            } else if self.buf.len() - self.end < wire::HEADER_LEN {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            }
            match tcptail_sock::recv::recv_with_policy(fd, &mut self.buf[self.end..], policy) {
                Ok(0) => {
                    return Err(LoopError::Protocol("server closed the connection".into()));
                }
                Ok(n) => self.end += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
}
