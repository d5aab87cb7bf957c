//! The benchmark server: accepts clients, performs the handshake each asks for (socket profile,
//! CPU pinning, blocking or spinning) and answers their requests, one thread per connection.
//!
//! # Why it is shaped like this
//!
//! A ping-pong on this class of machine takes ~13 µs, so the serve loop must add next to
//! nothing to what a minimal C server does: blocking I/O on a dedicated thread (clients are
//! few), one receive buffer and one response buffer allocated per connection and reused, and
//! in the common case exactly one `recv` and one `send` per request. Requests already in the
//! receive buffer (a client may pipeline) are answered in order before the next `recv`.
//!
//! # Invariants
//!
//! - Every header is validated ([`crate::wire`]); a peer that breaks the protocol gets an
//!   Error frame (best effort) and loses **its own** connection, nothing else.
//! - Request payloads are skipped, never buffered: a connection holds a fixed
//!   [`RECV_BUF_LEN`] receive buffer plus a response buffer as large as the largest valid
//!   `reply_len` it was asked for (at most [`MAX_FRAME_LEN`](wire::MAX_FRAME_LEN)), whatever partial frames arrive.
//! - A client that sends no complete Hello within [`HANDSHAKE_TIMEOUT`] is dropped.
//! - [`ShutdownHandle::shutdown`] wakes the accept loop and every connection, blocking or
//!   spinning; [`Server::run`] returns only after every connection thread has finished.
//!
//! The library never prints: what happens is reported through [`ServerEvent`]s, which the
//! caller formats (each has a one-line `Display`). The serve loop emits no per-request events.

use std::collections::HashMap;
use std::fmt;
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockRef, Socket, Type};
use tcptail_sock::Profile;
use tcptail_sock::apply::{ApplyReport, apply_profile, congestion_control};
use tcptail_sock::recv::recv_with_policy;

use crate::sys;
use crate::wire::{self, FrameError, FrameKind, FrameParser, HelloConfig, Welcome, WireError};

/// A client must complete its Hello within this time after connecting.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
/// Size of each connection's receive buffer.
pub const RECV_BUF_LEN: usize = 64 * 1024;
/// How long a rejected connection is drained after its Error frame, so that closing it does
/// not answer unread bytes with a reset that could destroy the Error frame in flight.
const LINGER: Duration = Duration::from_millis(200);

/// How to run a [`Server`].
#[derive(Debug, Clone, PartialEq)]
pub struct ServerConfig {
    /// Address to listen on.
    pub listen: SocketAddr,
    /// Applied to the listening socket before `bind`, so accepted sockets inherit what the
    /// kernel copies on accept (congestion control, buffer sizes, ...). The outcome is in
    /// [`Server::listener_report`].
    pub default_profile: Option<Profile>,
    /// Pin every connection thread to this CPU unless its Hello asks for another.
    pub cpu: Option<usize>,
    /// Connections served at once; more are refused with an Error frame.
    pub max_connections: usize,
}

impl ServerConfig {
    /// Listen on `listen`, no default profile, no pinning, at most 64 connections.
    pub fn new(listen: SocketAddr) -> ServerConfig {
        ServerConfig { listen, default_profile: None, cpu: None, max_connections: 64 }
    }
}

/// Why a connection was refused or cut.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RejectReason {
    /// The peer broke the protocol.
    #[error(transparent)]
    Wire(#[from] WireError),
    /// No complete Hello within the allowed time.
    #[error("no complete Hello within {0:?}")]
    HandshakeTimeout(Duration),
    /// [`ServerConfig::max_connections`] connections are already being served.
    #[error("server busy: {limit} connections already being served")]
    TooManyConnections {
        /// The configured limit.
        limit: usize,
    },
    /// A socket operation failed (other than the peer going away).
    #[error("I/O error: {0}")]
    Io(String),
}

/// What the server reports while it runs.
#[derive(Debug, Clone, PartialEq)]
pub enum ServerEvent {
    /// A client connected.
    Accepted {
        /// The client's address.
        peer: SocketAddr,
    },
    /// The handshake is done; the Welcome as sent.
    Configured {
        /// The client's address.
        peer: SocketAddr,
        /// What the server applied and where it runs.
        welcome: Box<Welcome>,
    },
    /// The client closed the connection (possibly mid-frame), or the server shut down.
    Closed {
        /// The client's address.
        peer: SocketAddr,
        /// Requests answered.
        requests: u64,
    },
    /// The server cut the connection.
    Rejected {
        /// The client's address.
        peer: SocketAddr,
        /// Why.
        reason: RejectReason,
        /// Requests answered before.
        requests: u64,
    },
    /// `accept` failed (e.g. out of file descriptors); the server retries after a pause.
    AcceptFailed {
        /// The error's text.
        error: String,
    },
}

impl fmt::Display for ServerEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerEvent::Accepted { peer } => write!(f, "{peer}: connected"),
            ServerEvent::Configured { peer, welcome } => {
                write!(f, "{peer}: configured: {}", welcome.summary())
            }
            ServerEvent::Closed { peer, requests } => {
                write!(f, "{peer}: closed after {requests} requests")
            }
            ServerEvent::Rejected { peer, reason, requests } => {
                write!(f, "{peer}: rejected after {requests} requests: {reason}")
            }
            ServerEvent::AcceptFailed { error } => write!(f, "accept failed: {error}"),
        }
    }
}

/// State shared by the accept loop, the connection threads and the shutdown handles.
#[derive(Debug)]
struct Shared {
    listener: TcpListener,
    local_addr: SocketAddr,
    stop: AtomicBool,
    /// A clone of every live connection's socket, so shutdown can wake its thread.
    conns: Mutex<HashMap<u64, TcpStream>>,
}

impl Shared {
    fn conns(&self) -> MutexGuard<'_, HashMap<u64, TcpStream>> {
        self.conns.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn close_connections(&self) {
        for stream in self.conns().values() {
            let _ = stream.shutdown(Shutdown::Both);
        }
    }
}

/// Stops a running [`Server`] from any thread. Cheap to clone.
#[derive(Debug, Clone)]
pub struct ShutdownHandle {
    shared: Arc<Shared>,
}

impl ShutdownHandle {
    /// Makes [`Server::run`] return promptly: stops accepting and closes every live
    /// connection. Idempotent; a server that was shut down cannot run again.
    pub fn shutdown(&self) {
        let shared = &self.shared;
        shared.stop.store(true, Ordering::SeqCst);
        // On Linux, shutting a listening socket down wakes a blocked `accept` (EINVAL).
        // Should that ever fail, a connection to ourselves wakes it instead.
        if SockRef::from(&shared.listener).shutdown(Shutdown::Both).is_err() {
            let mut wake = shared.local_addr;
            if wake.ip().is_unspecified() {
                wake.set_ip(match wake {
                    SocketAddr::V4(_) => [127, 0, 0, 1].into(),
                    SocketAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
                });
            }
            let _ = TcpStream::connect_timeout(&wake, Duration::from_millis(200));
        }
        shared.close_connections();
    }

    /// True once [`ShutdownHandle::shutdown`] was called.
    pub fn is_shut_down(&self) -> bool {
        self.shared.stopping()
    }
}

/// A bound, listening benchmark server.
#[derive(Debug)]
pub struct Server {
    shared: Arc<Shared>,
    config: ServerConfig,
    listener_report: Option<ApplyReport>,
    kernel: String,
}

impl Server {
    /// Creates the listening socket: applies [`ServerConfig::default_profile`] to it, then
    /// binds and listens. Fails if the address cannot be bound or `max_connections` is 0.
    pub fn bind(config: ServerConfig) -> io::Result<Server> {
        if config.max_connections == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "max_connections must be at least 1",
            ));
        }
        let socket =
            Socket::new(Domain::for_address(config.listen), Type::STREAM, Some(Protocol::TCP))?;
        socket.set_reuse_address(true)?;
        let listener_report =
            config.default_profile.as_ref().map(|p| apply_profile(socket.as_fd(), p));
        socket.bind(&config.listen.into())?;
        socket.listen(1024)?;
        let listener = TcpListener::from(socket);
        let local_addr = listener.local_addr()?;
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".to_string());
        let shared = Arc::new(Shared {
            listener,
            local_addr,
            stop: AtomicBool::new(false),
            conns: Mutex::new(HashMap::new()),
        });
        Ok(Server { shared, config, listener_report, kernel })
    }

    /// The address actually bound (with the port the kernel chose for port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.shared.local_addr
    }

    /// The configuration it was bound with.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// How the default profile applied to the listening socket, if one was given.
    pub fn listener_report(&self) -> Option<&ApplyReport> {
        self.listener_report.as_ref()
    }

    /// A handle that stops [`Server::run`] from another thread.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        ShutdownHandle { shared: Arc::clone(&self.shared) }
    }

    /// Accepts and serves clients until shut down, then closes every connection and waits
    /// for their threads. `events` is called from the accept loop and from connection
    /// threads (hence `Sync`), never per request. A failing `accept` (e.g. out of file
    /// descriptors) is reported as [`ServerEvent::AcceptFailed`] and retried with a growing
    /// pause, up to one second.
    pub fn run(&self, events: &(dyn Fn(ServerEvent) + Sync)) {
        let shared = &*self.shared;
        thread::scope(|scope| {
            self.accept_loop(scope, events);
            shared.stop.store(true, Ordering::SeqCst);
            shared.close_connections();
        });
    }

    fn accept_loop<'scope, 'env>(
        &'env self,
        scope: &'scope thread::Scope<'scope, 'env>,
        events: &'env (dyn Fn(ServerEvent) + Sync),
    ) {
        let shared = &*self.shared;
        let mut next_id = 0u64;
        let mut backoff = Duration::ZERO;
        loop {
            let accepted = shared.listener.accept();
            if shared.stopping() {
                return;
            }
            let (stream, peer) = match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    events(ServerEvent::AcceptFailed { error: e.to_string() });
                    backoff =
                        (backoff * 2).clamp(Duration::from_millis(10), Duration::from_secs(1));
                    thread::sleep(backoff);
                    continue;
                }
            };
            backoff = Duration::ZERO;
            events(ServerEvent::Accepted { peer });
            let id = next_id;
            next_id += 1;
            {
                let mut conns = shared.conns();
                if conns.len() >= self.config.max_connections {
                    drop(conns);
                    let reason =
                        RejectReason::TooManyConnections { limit: self.config.max_connections };
                    refuse_busy(&stream, &reason);
                    events(ServerEvent::Rejected { peer, reason, requests: 0 });
                    continue;
                }
                match stream.try_clone() {
                    Ok(clone) => conns.insert(id, clone),
                    Err(e) => {
                        drop(conns);
                        events(reject_event(peer, &e));
                        continue;
                    }
                };
            }
            let spawned = thread::Builder::new().name(format!("tcptail-conn-{id}")).spawn_scoped(
                scope,
                move || {
                    let registered = Registered { shared, id };
                    let last = connection(self, stream, peer, events);
                    // Deregistered first, so that when the caller hears of the end the
                    // connection no longer counts against the limit.
                    drop(registered);
                    events(last);
                },
            );
            if let Err(e) = spawned {
                shared.conns().remove(&id);
                events(reject_event(peer, &e));
            }
        }
    }

    /// Runs the server on a background thread, discarding its events.
    ///
    /// # Panics
    ///
    /// If the thread cannot be spawned.
    pub fn spawn(self) -> RunningServer {
        self.spawn_with_events(|_| {})
    }

    /// Runs the server on a background thread, passing its events to `events`.
    ///
    /// # Panics
    ///
    /// If the thread cannot be spawned.
    pub fn spawn_with_events<F>(self, events: F) -> RunningServer
    where
        F: Fn(ServerEvent) + Send + Sync + 'static,
    {
        let addr = self.local_addr();
        let handle = self.shutdown_handle();
        let thread = thread::Builder::new()
            .name("tcptail-server".into())
            .spawn(move || self.run(&events))
            .expect("cannot spawn the server thread");
        RunningServer { addr, handle, thread: Some(thread) }
    }
}

/// A [`Server`] running on a background thread. Dropping it stops the server.
#[derive(Debug)]
pub struct RunningServer {
    addr: SocketAddr,
    handle: ShutdownHandle,
    thread: Option<JoinHandle<()>>,
}

impl RunningServer {
    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// A handle to stop it from elsewhere.
    pub fn shutdown_handle(&self) -> ShutdownHandle {
        self.handle.clone()
    }

    /// Shuts the server down and waits until its thread and every connection thread have
    /// finished. A panic on the server thread is propagated.
    pub fn stop(mut self) {
        self.stop_and_join();
    }

    fn stop_and_join(&mut self) {
        self.handle.shutdown();
        if let Some(Err(panic)) = self.thread.take().map(JoinHandle::join)
            && !thread::panicking()
        {
            std::panic::resume_unwind(panic);
        }
    }
}

impl Drop for RunningServer {
    fn drop(&mut self) {
        self.stop_and_join();
    }
}

/// Removes a connection from the registry when its thread ends, however it ends.
struct Registered<'a> {
    shared: &'a Shared,
    id: u64,
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.shared.conns().remove(&self.id);
    }
}

fn reject_event(peer: SocketAddr, e: &io::Error) -> ServerEvent {
    ServerEvent::Rejected { peer, reason: RejectReason::Io(e.to_string()), requests: 0 }
}

/// How a connection ended, when not by the peer closing it.
enum End {
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
fn connection(
    server: &Server,
    stream: TcpStream,
    peer: SocketAddr,
    events: &dyn Fn(ServerEvent),
) -> ServerEvent {
    let shared = &*server.shared;
    let mut requests = 0;
    let end = handshake(server, &stream, peer, events)
        .and_then(|hello| serve(&stream, &hello, shared, &mut requests));
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
    let deadline = Instant::now() + LINGER;
    let mut sink = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        match (&*stream).read(&mut sink) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// Refuses a connection from the accept thread without blocking it.
fn refuse_busy(stream: &TcpStream, reason: &RejectReason) {
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

fn handshake(
    server: &Server,
    stream: &TcpStream,
    peer: SocketAddr,
    events: &dyn Fn(ServerEvent),
) -> Result<HelloConfig, End> {
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
    stream.set_read_timeout(None)?;

    let fd = stream.as_fd();
    let apply = apply_profile(fd, &hello.profile);
    let congestion = congestion_control(fd).ok();
    let requested_cpu = hello.server_cpu.or(server.config.cpu);
    let pinned = requested_cpu.and_then(|cpu| {
        sys::pin_current_thread(cpu).err().map(|e| format!("pinning to CPU {cpu} failed: {e}"))
    });
    let welcome = Welcome {
        apply,
        congestion,
        server_cpu: sys::current_cpu(),
        requested_cpu,
        pinned,
        spin: hello.spin,
        kernel: server.kernel.clone(),
        version: env!("CARGO_PKG_VERSION").to_string(),
    };
    match wire::write_welcome(&mut &*stream, &welcome) {
        Ok(()) => {}
        Err(FrameError::Io(e)) => return Err(e.into()),
        Err(e) => return Err(End::Reject(RejectReason::Io(e.to_string()))),
    }
    events(ServerEvent::Configured { peer, welcome: Box::new(welcome) });
    Ok(hello)
}

/// The request loop. Returns `Ok` when the peer closes the connection.
fn serve(
    stream: &TcpStream,
    hello: &HelloConfig,
    shared: &Shared,
    requests: &mut u64,
) -> Result<(), End> {
    let fd = stream.as_fd();
    let policy = hello.profile.quickack;
    let spin = hello.spin;
    if spin {
        stream.set_nonblocking(true)?;
    }
    let mut rbuf = vec![0u8; RECV_BUF_LEN];
    // Invariant: resp[HEADER_LEN..] is all zeros; only the header is ever written.
    let mut resp = vec![0u8; hello.reply_len as usize];
    let mut parser = FrameParser::new(FrameKind::Request, hello.request_len);
    // rbuf[start..end] holds received bytes not yet consumed by the parser.
    let (mut start, mut end) = (0, 0);
    loop {
        let n = match recv_with_policy(fd, &mut rbuf[end..], policy) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if shared.stopping() {
                    return Err(End::Closed);
                }
                std::hint::spin_loop();
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        end += n;
        loop {
            let (used, request) = parser.advance(&rbuf[start..end])?;
            start += used;
            let Some(request) = request else { break };
            let len = request.reply_len as usize;
            if resp.len() < len {
                resp.resize(len, 0);
            }
            wire::encode_response(&mut resp[..len], request.seq);
            send_all(stream, &resp[..len], spin, shared)?;
            *requests += 1;
        }
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

fn send_all(stream: &TcpStream, mut buf: &[u8], spin: bool, shared: &Shared) -> Result<(), End> {
    if !spin {
        return Ok((&*stream).write_all(buf)?);
    }
    while !buf.is_empty() {
        match (&*stream).write(buf) {
            Ok(0) => return Err(End::Closed),
            Ok(n) => buf = &buf[n..],
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if shared.stopping() {
                    return Err(End::Closed);
                }
                std::hint::spin_loop();
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
