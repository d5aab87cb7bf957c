//! One connection's life on the server: handshake, request loop, and the way it ends.
//!
//! The request loop is the server's hot path: one `recv`, then one `send` per request in the
//! common case (the default engine; on the io_uring engine the connection is served on a ring
//! thread, `crate::engine::uring::server`, with the same limits). Its limits against a hostile or broken peer, all enforced here:
//!
//! - the Hello must arrive within [`HANDSHAKE_TIMEOUT`] and may not ask for responses longer
//!   than [`ServerConfig::max_reply_len`];
//! - every Request must fit the `request_len` and `reply_len` its Hello negotiated, so one
//!   24-byte request cannot buy a 16 MiB response the client never announced;
//! - a connection that sends nothing for [`ServerConfig::idle_timeout`] is closed;
//! - a response that makes no progress for [`ServerConfig::write_timeout`] (the peer does not
//!   read) closes the connection, so a peer that sends requests and never reads cannot hold a
//!   thread and a connection slot for ever;
//! - the Hello's requests pass the server's [`ServerPolicy`](super::ServerPolicy) first: what
//!   it refuses is not attempted and is reported in the Welcome;
//! - a spinning connection (when allowed) that receives nothing for the policy's spin cap
//!   sleeps in `poll` until its next request, so an idle client cannot keep a CPU busy.
//!
//! - a StatsRequest (a bare header) is answered with this connection's own window only
//!   (`server::stats`): bounded work and a bounded reply per 24 bytes received, sent
//!   under the same write timeout as responses.
//!
//! Memory per connection is bounded whatever the peer asks: a [`RECV_BUF_LEN`] receive buffer
//! and a response buffer of at most [`RESPONSE_BUF_LEN`]; longer responses are written from
//! that buffer's zero padding in chunks.

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use tcptail_sock::apply::{apply_profile, congestion_control};
use tcptail_sock::recv::recv_with_policy;

use super::policy::HostLimits;
use super::stats::StatsWindow;
use super::{
    HANDSHAKE_TIMEOUT, LINGER, RECV_BUF_LEN, RejectReason, Server, ServerConfig, ServerEvent,
    Shared,
};
use crate::engine::uring::server::{Ended, Placed};
use crate::sys;
use crate::watchdog::Watch;
use crate::wire::{self, FrameError, FrameKind, FrameParser, HEADER_LEN, Header, HelloConfig};
use crate::wire::{Welcome, WireError};

/// The largest response written from one buffer; longer ones go out in chunks of it.
pub const RESPONSE_BUF_LEN: usize = 64 * 1024;
/// Largest batch of gathered responses to pipelined requests written in one send.
const BATCH_LEN: usize = 64 * 1024;

/// How a connection ended, when not by the peer closing it.
pub(super) enum End {
    /// The peer went away or the server is shutting down: a normal close.
    Closed,
    /// The server cuts the connection.
    Reject(RejectReason),
}

impl From<WireError> for End {
    fn from(e: WireError) -> End {
        End::Reject(RejectReason::Wire(e))
    }
}

impl From<io::Error> for End {
    fn from(e: io::Error) -> End {
        use io::ErrorKind as K;
        match e.kind() {
            K::UnexpectedEof | K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe => {
                End::Closed
            }
            _ => End::Reject(RejectReason::Io(e.to_string())),
        }
    }
}

/// One connection's thread: handshake, serve, close. Returns the event that tells how it
/// ended, for the caller to emit once the socket is closed.
pub(super) fn connection(
    server: &Server,
    stream: TcpStream,
    peer: SocketAddr,
    events: &dyn Fn(ServerEvent),
) -> ServerEvent {
    let shared = &*server.shared;
    let mut requests = 0;
    let end = handshake(server, &stream, peer, events).and_then(|(hello, placed)| {
        serve(&stream, &hello, placed, shared, &server.config, &mut requests)
    });
    match end {
        Err(End::Reject(reason)) if !shared.stopping() => {
            // Best effort: the reason, then FIN, then a short drain before closing.
            let _ = stream.set_nonblocking(false);
            let _ = stream.set_write_timeout(Some(LINGER));
            let _ = wire::write_error(&mut &stream, &reason.to_string());
            let _ = stream.shutdown(Shutdown::Write);
            linger(&stream);
            ServerEvent::Rejected { peer, reason, requests }
        }
        _ => ServerEvent::Closed { peer, requests },
    }
}

/// Reads and discards what the peer still sends, for at most [`LINGER`], so that closing
/// does not reset the connection while the Error frame may still be unread.
fn linger(stream: &TcpStream) {
    let mut reader = DeadlineReader { stream, deadline: Instant::now() + LINGER };
    let mut sink = [0u8; 4096];
    while let Ok(1..) = reader.read(&mut sink) {}
}

/// Refuses a connection from the accept thread without blocking it.
pub(super) fn refuse_busy(stream: &TcpStream, reason: &RejectReason) {
    let _ = stream.set_nonblocking(true);
    let _ = wire::write_error(&mut &*stream, &reason.to_string());
    let _ = stream.shutdown(Shutdown::Write);
    let mut sink = [0u8; 4096];
    while let Ok(1..) = (&*stream).read(&mut sink) {}
}

/// A reader that fails with `TimedOut` once `deadline` has passed, however the bytes trickle
/// in, so a client cannot hold a connection thread by sending its Hello slowly.
struct DeadlineReader<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
}

impl Read for DeadlineReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        (&*self.stream).read(buf)
    }
}

/// Reads the Hello, applies what the policy allows, places the connection (pins this thread,
/// or on the io_uring engine picks the ring thread of the CPU asked for) and writes the
/// Welcome.
fn handshake(
    server: &Server,
    stream: &TcpStream,
    peer: SocketAddr,
    events: &dyn Fn(ServerEvent),
) -> Result<(HelloConfig, Option<Placed>), End> {
    // Before anything else, so that the Welcome itself is not held back by Nagle.
    stream.set_nodelay(true)?;
    let mut reader = DeadlineReader { stream, deadline: Instant::now() + HANDSHAKE_TIMEOUT };
    let hello = match wire::read_hello(&mut reader) {
        Ok(hello) => hello,
        Err(FrameError::Wire(e)) => return Err(e.into()),
        Err(FrameError::Io(e))
            if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) =>
        {
            return Err(End::Reject(RejectReason::HandshakeTimeout(HANDSHAKE_TIMEOUT)));
        }
        Err(FrameError::Io(e)) => return Err(e.into()),
        // read_hello treats an Error frame from the client as a peer message: it is a frame
        // the client may not send.
        Err(FrameError::Peer(_)) => {
            return Err(WireError::UnexpectedKind {
                found: FrameKind::Error,
                expected: FrameKind::Hello,
            }
            .into());
        }
    };
    let limit = server.config.max_reply_len;
    if hello.reply_len > limit {
        return Err(End::Reject(RejectReason::ReplyLimit { asked: hello.reply_len, limit }));
    }
    stream.set_read_timeout(None)?;

    let fd = stream.as_fd();
    let vetted =
        server.config.policy.vet(&hello.profile, hello.spin, hello.server_cpu, &HostLimits::read());
    let mut apply = apply_profile(fd, &vetted.profile);
    apply.options.extend(vetted.refused);
    let congestion = congestion_control(fd).ok();
    let requested_cpu = vetted.server_cpu.or(server.config.cpu);
    let (server_cpu, pinned, placed) = match &server.shared.rings {
        // The ring thread is pinned (once, when it starts), not this one.
        Some(rings) => {
            let placed = rings
                .place(requested_cpu, vetted.spin)
                .map_err(|e| End::Reject(RejectReason::Io(format!("io_uring: {e}"))))?;
            (placed.server_cpu(), placed.pin_error(), Some(placed))
        }
        None => {
            let pinned = requested_cpu.and_then(|cpu| {
                sys::pin_current_thread(cpu)
                    .err()
                    .map(|e| format!("pinning to CPU {cpu} failed: {e}"))
            });
            (sys::current_cpu(), pinned, None)
        }
    };
    let welcome = Welcome {
        apply,
        congestion,
        server_cpu,
        requested_cpu,
        pinned,
        spin: vetted.spin,
        kernel: server.kernel.clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        idle_timeout_seconds: Some(server.config.idle_timeout.as_secs_f64()),
        // Both serve loops answer StatsRequests.
        stats_version: Some(wire::STATS_VERSION),
    };
    match wire::write_welcome(&mut &*stream, &welcome) {
        Ok(()) => {}
        Err(FrameError::Io(e)) => return Err(e.into()),
        Err(e) => return Err(End::Reject(RejectReason::Io(e.to_string()))),
    }
    events(ServerEvent::Configured { peer, welcome: Box::new(welcome) });
    // What the serve loop follows: the profile's QUICKACK policy (never refused) and the
    // vetted spin decision.
    Ok((HelloConfig { spin: vetted.spin, ..hello }, placed))
}

/// Notices "no progress for `limit`" in a busy loop without reading the clock on every turn.
struct Stall {
    limit: Duration,
    since: Option<Instant>,
    turns: u32,
}

impl Stall {
    /// Turns between clock reads: a few microseconds of spinning.
    const CHECK_EVERY: u32 = 1024;

    fn new(limit: Duration) -> Stall {
        Stall { limit, since: None, turns: 0 }
    }

    fn progress(&mut self) {
        self.since = None;
        self.turns = 0;
    }

    /// Called on every turn without progress; true once none was made for `limit`.
    fn expired(&mut self) -> bool {
        self.turns = self.turns.wrapping_add(1);
        if !self.turns.is_multiple_of(Self::CHECK_EVERY) {
            return false;
        }
        let now = Instant::now();
        now.duration_since(*self.since.get_or_insert(now)) >= self.limit
    }
}

/// The request loop. Returns `Ok` when the peer closes the connection.
fn serve(
    stream: &TcpStream,
    hello: &HelloConfig,
    placed: Option<Placed>,
    shared: &Shared,
    config: &ServerConfig,
    requests: &mut u64,
) -> Result<(), End> {
    if let Some(placed) = placed {
        return serve_uring(stream, hello, &placed, shared, config, requests);
    }
    let fd = stream.as_fd();
    let policy = hello.profile.quickack;
    let spin = hello.spin;
    // Blocking: the watchdog shuts the read side of a connection idle for `idle_timeout` down
    // (the receive then sees end-of-file); a send's timeout costs nothing until it waits.
    let mut watch = None;
    if spin {
        stream.set_nonblocking(true)?;
    } else {
        watch = Some(shared.watchdog.watch(stream, config.idle_timeout)?);
        stream.set_write_timeout(Some(config.write_timeout))?;
    }
    let idle_timeout = || End::Reject(RejectReason::IdleTimeout(config.idle_timeout));
    let mut rbuf = vec![0u8; RECV_BUF_LEN];
    // Invariant: resp[HEADER_LEN..] is all zeros; only the header is ever written.
    let mut resp = vec![0u8; (hello.reply_len as usize).min(RESPONSE_BUF_LEN)];
    let mut parser = FrameParser::new(FrameKind::Request, hello.request_len)
        .with_max_reply_len(hello.reply_len)
        .with_stats_requests();
    let mut window = StatsWindow::start();
    // Responses to pipelined requests, sent together (bounded: at most BATCH_LEN + one), and
    // how many requests they answer.
    let mut batch: Vec<u8> = Vec::new();
    let mut batched = 0u64;
    let mut idle = Stall::new(config.idle_timeout);
    let mut spinning_idle = Stall::new(config.policy.spin_cap);
    let out = Sender { stream, spin, shared, timeout: config.write_timeout };
    // rbuf[start..end] holds received bytes not yet consumed by the parser.
    let (mut start, mut end) = (0, 0);
    loop {
        if let Some(watch) = &mut watch {
            watch.waiting();
        }
        let n = match recv_with_policy(fd, &mut rbuf[end..], policy) {
            Ok(0) if watch.as_ref().is_some_and(Watch::fired) => return Err(idle_timeout()),
            Ok(0) => return Ok(()),
            Ok(n) => n,
            // Only a spinning (non-blocking) socket gets here: a blocking receive has no
            // timeout, the watchdog ends its waits.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if shared.stopping() {
                    return Err(End::Closed);
                }
                if idle.expired() {
                    return Err(idle_timeout());
                }
                if spinning_idle.expired() {
                    // Spun for the cap without a request: sleep until one arrives or the rest
                    // of the idle timeout passes (a shutdown wakes the poll with a hang-up).
                    let left = config.idle_timeout.saturating_sub(config.policy.spin_cap);
                    if !sys::wait_readable(fd, left)? && !shared.stopping() {
                        return Err(idle_timeout());
                    }
                    spinning_idle.progress();
                    continue;
                }
                std::hint::spin_loop();
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        // Every request completed by this receive is served from here.
        let received = Instant::now();
        idle.progress();
        spinning_idle.progress();
        end += n;
        loop {
            let (used, request) = parser.advance(&rbuf[start..end])?;
            start += used;
            let Some(request) = request else { break };
            if request.kind == FrameKind::StatsRequest {
                // Responses to earlier requests go first: the reply is in order too.
                out.flush(&mut batch, &mut batched, &mut window, received)?;
                let reply = wire::stats_reply_frame(&window.report(fd))
                    .map_err(|e| End::Reject(RejectReason::Io(e.to_string())))?;
                out.all(&reply)?;
                continue;
            }
            let len = request.reply_len as usize;
            // Pipelined requests (more bytes behind this one) get their small responses
            // gathered into one send; a lone request is answered straight from `resp`, as
            // before, so a ping-pong costs what it did.
            let gather = len <= resp.len() && (!batch.is_empty() || start < end);
            if gather {
                if batch.len() + len > BATCH_LEN {
                    out.flush(&mut batch, &mut batched, &mut window, received)?;
                }
                wire::encode_response(&mut resp[..len], request.seq);
                batch.extend_from_slice(&resp[..len]);
                batched += 1;
            } else {
                out.flush(&mut batch, &mut batched, &mut window, received)?;
                out.response(&mut resp, len, request.seq)?;
                window.answered(received, 1);
            }
            *requests += 1;
        }
        out.flush(&mut batch, &mut batched, &mut window, received)?;
        // What is left is either nothing or a partial header (< HEADER_LEN bytes): move it to
        // the front so the next receive has the whole buffer minus at most 23 bytes.
        if start == end {
            (start, end) = (0, 0);
        } else if start > 0 {
            rbuf.copy_within(start..end, 0);
            (start, end) = (0, end - start);
        }
    }
}

/// The request loop on the io_uring engine: the connection is served on its ring thread
/// (`crate::engine::uring::server`) with the same limits, its ends mapped to the same ones.
fn serve_uring(
    stream: &TcpStream,
    hello: &HelloConfig,
    placed: &Placed,
    shared: &Shared,
    config: &ServerConfig,
    requests: &mut u64,
) -> Result<(), End> {
    let watch = shared.watchdog.watch(stream, config.idle_timeout)?;
    let (result, answered) = placed.serve(stream, hello.request_len, hello.reply_len, watch);
    *requests += answered;
    match result {
        Ok(()) | Err(Ended::PeerClosed) => Ok(()),
        Err(Ended::Stopping) => Err(End::Closed),
        Err(Ended::Idle) => Err(End::Reject(RejectReason::IdleTimeout(config.idle_timeout))),
        Err(Ended::WriteStalled) => {
            Err(End::Reject(RejectReason::WriteStalled(config.write_timeout)))
        }
        Err(Ended::Wire(e)) => Err(e.into()),
        Err(Ended::Io(e)) => Err(End::Reject(RejectReason::Io(format!("io_uring: {e}")))),
    }
}

/// Writes responses, blocking (with the socket's send timeout) or spinning.
struct Sender<'a> {
    stream: &'a TcpStream,
    spin: bool,
    shared: &'a Shared,
    timeout: Duration,
}

impl Sender<'_> {
    /// Sends the gathered responses, if any, and records their service times.
    fn flush(
        &self,
        batch: &mut Vec<u8>,
        batched: &mut u64,
        window: &mut StatsWindow,
        received: Instant,
    ) -> Result<(), End> {
        if batch.is_empty() {
            return Ok(());
        }
        self.all(batch)?;
        window.answered(received, *batched);
        batch.clear();
        *batched = 0;
        Ok(())
    }

    /// Sends a `len`-byte Response to `seq` from `resp` (header written in place, payload its
    /// zeros): in one write when it fits, else the header and first chunk, then more zeros.
    fn response(&self, resp: &mut [u8], len: usize, seq: u64) -> Result<(), End> {
        if len <= resp.len() {
            wire::encode_response(&mut resp[..len], seq);
            return self.all(&resp[..len]);
        }
        let head: &mut [u8; HEADER_LEN] =
            (&mut resp[..HEADER_LEN]).try_into().expect("the buffer holds a header");
        Header::response(seq, len as u32).encode(head);
        self.all(resp)?;
        let zeros = &resp[HEADER_LEN..];
        let mut left = len - resp.len();
        while left > 0 {
            let n = left.min(zeros.len());
            self.all(&zeros[..n])?;
            left -= n;
        }
        Ok(())
    }

    fn all(&self, mut buf: &[u8]) -> Result<(), End> {
        let stalled = || End::Reject(RejectReason::WriteStalled(self.timeout));
        if !self.spin {
            return match (&*self.stream).write_all(buf) {
                Ok(()) => Ok(()),
                // SO_SNDTIMEO passed without the peer taking a byte.
                Err(e)
                    if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) =>
                {
                    Err(if self.shared.stopping() { End::Closed } else { stalled() })
                }
                Err(e) => Err(e.into()),
            };
        }
        let mut stall = Stall::new(self.timeout);
        while !buf.is_empty() {
            match (&*self.stream).write(buf) {
                Ok(0) => return Err(End::Closed),
                Ok(n) => {
                    buf = &buf[n..];
                    stall.progress();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if self.shared.stopping() {
                        return Err(End::Closed);
                    }
                    if stall.expired() {
                        return Err(stalled());
                    }
                    std::hint::spin_loop();
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}
