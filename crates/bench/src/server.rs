//! The benchmark server: accepts clients, performs the handshake each asks for (socket profile,
//! CPU pinning, blocking or spinning) as far as its [`ServerPolicy`] allows, and answers their
//! requests: one thread per connection, or with the io_uring engine, each connection's thread
//! handing its connection after the handshake to a ring thread that serves many
//! ([`crate::engine::uring::server`]).
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
//!   Error frame (best effort) and loses **its own** connection, nothing else. So does a peer
//!   that asks for a response longer than its Hello negotiated.
//! - Request payloads are skipped, never buffered: a connection holds a fixed
//!   [`RECV_BUF_LEN`] receive buffer plus a response buffer of at most
//!   [`RESPONSE_BUF_LEN`], whatever partial frames arrive and whatever sizes it asks for.
//! - A client that sends no complete Hello within [`HANDSHAKE_TIMEOUT`] is dropped; after the
//!   handshake, one that sends nothing for [`ServerConfig::idle_timeout`], or does not read
//!   its responses for [`ServerConfig::write_timeout`], is dropped too (details in
//!   [`serve`]).
//! - What a client may change on the server's host is decided by [`ServerConfig::policy`]
//!   ([`policy`]): by default nothing privileged (no spinning, pinning, busy polling,
//!   priority, module-loading congestion control), each refusal reported per option in the
//!   Welcome. One peer address holds at most [`ServerPolicy::max_per_peer`] of the
//!   [`ServerConfig::max_connections`] connections.
//! - [`ShutdownHandle::shutdown`] wakes the accept loop and every connection, blocking or
//!   spinning; [`Server::run`] returns only after every connection thread has finished.
//!
//! The library never prints: what happens is reported through [`ServerEvent`]s, which the
//! caller formats (each has a one-line `Display`). The serve loop emits no per-request events.

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use socket2::{Domain, Protocol, SockRef, Socket, Type};
use tcptail_sock::Profile;
use tcptail_sock::apply::{ApplyReport, apply_profile};

use crate::config::Engine;
use crate::watchdog::{Closer, Watchdog};
use crate::wire::{MAX_FRAME_LEN, Welcome, WireError};

pub mod policy;
pub mod serve;
pub(crate) mod stats;

pub use policy::{Privilege, ServerPolicy};
pub use serve::RESPONSE_BUF_LEN;

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
    /// After the handshake, a connection that sends nothing for this long is closed.
    pub idle_timeout: Duration,
    /// A response the peer does not take any byte of for this long (it stopped reading)
    /// closes the connection.
    pub write_timeout: Duration,
    /// The longest response a client may negotiate in its Hello (`reply_len`).
    pub max_reply_len: u32,
    /// What clients may change on this host, and how much of the server one peer may hold.
    pub policy: ServerPolicy,
    /// The I/O engine of the serve loops (the handshake is the same in every engine).
    pub engine: Engine,
}

/// Default [`ServerConfig::idle_timeout`]: longer than any gap between requests of a run
/// at 1 request per second or more, short enough that a forgotten connection goes away.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default [`ServerConfig::write_timeout`]: a benchmark client reads continuously, so ten
/// seconds without taking a byte means it stopped reading.
pub const DEFAULT_WRITE_TIMEOUT: Duration = Duration::from_secs(10);

impl ServerConfig {
    /// Listen on `listen`, no default profile, no pinning, at most 64 connections, the
    /// default timeouts, responses up to the protocol's [`MAX_FRAME_LEN`], the default
    /// (refusing) [`ServerPolicy`].
    pub fn new(listen: SocketAddr) -> ServerConfig {
        ServerConfig {
            listen,
            default_profile: None,
            cpu: None,
            max_connections: 64,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            write_timeout: DEFAULT_WRITE_TIMEOUT,
            max_reply_len: MAX_FRAME_LEN,
            policy: ServerPolicy::default(),
            engine: Engine::Default,
        }
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
    /// The Hello asks for responses longer than [`ServerConfig::max_reply_len`].
    #[error("Hello reply_len {asked} exceeds this server's {limit}-byte response limit")]
    ReplyLimit {
        /// The Hello's `reply_len`.
        asked: u32,
        /// The server's limit.
        limit: u32,
    },
    /// Nothing received for [`ServerConfig::idle_timeout`] after the handshake.
    #[error("idle: nothing received for {0:?}")]
    IdleTimeout(Duration),
    /// The peer took no byte of a response for [`ServerConfig::write_timeout`].
    #[error("write stalled: the peer read nothing for {0:?} (it stopped reading its responses)")]
    WriteStalled(Duration),
    /// [`ServerConfig::max_connections`] connections are already being served.
    #[error("server busy: {limit} connections already being served")]
    TooManyConnections {
        /// The configured limit.
        limit: usize,
    },
    /// This peer address already holds [`ServerPolicy::max_per_peer`] connections.
    #[error("server busy: {peer} already holds {limit} connections (the per-peer limit)")]
    TooManyFromPeer {
        /// The peer's address.
        peer: IpAddr,
        /// The configured per-peer limit.
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
    /// Shared with the io_uring engine's ring threads, which outlive no server but are not
    /// scoped to [`Server::run`].
    stop: Arc<AtomicBool>,
    /// The io_uring engine's ring threads (`None` on the default engine).
    rings: Option<crate::engine::uring::server::Pool>,
    /// Every live connection's peer address and a clone of its socket, so the per-peer
    /// limit can be counted and shutdown can wake its thread.
    conns: Mutex<HashMap<u64, (IpAddr, TcpStream)>>,
    /// Keeps [`ServerConfig::idle_timeout`] for blocking connections, which receive without
    /// `SO_RCVTIMEO` (a kernel timer per receive; see `crate::watchdog`).
    watchdog: Arc<Watchdog>,
}

impl Shared {
    fn conns(&self) -> MutexGuard<'_, HashMap<u64, (IpAddr, TcpStream)>> {
        self.conns.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    fn close_connections(&self) {
        for (_, stream) in self.conns().values() {
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
    /// binds and listens. Fails if the address cannot be bound, `max_connections` is 0, a
    /// timeout is zero or `max_reply_len` is outside the frame limits.
    pub fn bind(config: ServerConfig) -> io::Result<Server> {
        let invalid = |what: &str| Err(io::Error::new(io::ErrorKind::InvalidInput, what));
        if config.max_connections == 0 || config.policy.max_per_peer == 0 {
            return invalid("max_connections and the per-peer limit must be at least 1");
        }
        if config.policy.spin_cap.is_zero() {
            return invalid("the spin cap must be longer than zero");
        }
        if config.idle_timeout.is_zero() || config.write_timeout.is_zero() {
            return invalid("the idle and write timeouts must be longer than zero");
        }
        if !(crate::wire::HEADER_LEN as u32..=MAX_FRAME_LEN).contains(&config.max_reply_len) {
            return invalid("max_reply_len must lie between the header length and 16 MiB");
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
        let stop = Arc::new(AtomicBool::new(false));
        let rings = match config.engine {
            Engine::Default => None,
            Engine::IoUring { sqpoll } => Some(crate::engine::uring::server::Pool::new(
                crate::engine::uring::server::Limits {
                    max_connections: config.max_connections,
                    spin_cap: config.policy.spin_cap,
                    sqpoll,
                    write_timeout: config.write_timeout,
                    stop: Arc::clone(&stop),
                },
            )),
        };
        let shared = Arc::new(Shared {
            listener,
            local_addr,
            stop: Arc::clone(&stop),
            rings,
            conns: Mutex::new(HashMap::new()),
            watchdog: Watchdog::new(Watchdog::tick_for(
                config.idle_timeout,
                Duration::from_secs(1),
            )),
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
            let _closer = Closer(&shared.watchdog);
            thread::Builder::new()
                .name("tcptail-server-watchdog".into())
                .spawn_scoped(scope, || shared.watchdog.run(&|| false, Duration::ZERO))
                .expect("cannot spawn the server's watchdog thread");
            self.accept_loop(scope, events);
            shared.stop.store(true, Ordering::SeqCst);
            shared.close_connections();
        });
        // Every connection thread has finished, so no connection is left on a ring thread and
        // none can be handed to one any more.
        if let Some(rings) = &shared.rings {
            rings.shutdown();
        }
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
                let per_peer = self.config.policy.max_per_peer;
                let busy = if conns.len() >= self.config.max_connections {
                    Some(RejectReason::TooManyConnections { limit: self.config.max_connections })
                } else if conns.values().filter(|(ip, _)| *ip == peer.ip()).count() >= per_peer {
                    Some(RejectReason::TooManyFromPeer { peer: peer.ip(), limit: per_peer })
                } else {
                    None
                };
                if let Some(reason) = busy {
                    drop(conns);
                    serve::refuse_busy(&stream, &reason);
                    events(ServerEvent::Rejected { peer, reason, requests: 0 });
                    continue;
                }
                match stream.try_clone() {
                    Ok(clone) => conns.insert(id, (peer.ip(), clone)),
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
                    let last = serve::connection(self, stream, peer, events);
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

    /// Binds a server that grants whatever its clients ask for ([`ServerPolicy::trusting`])
    /// inside `ns`, and runs it ([`Server::spawn`]): for a lab's or an experiment's own
    /// namespace, which only its namespace pair can reach. `config`'s policy is replaced.
    ///
    /// # Panics
    ///
    /// If the server's thread cannot be spawned.
    pub fn spawn_trusting_in(
        ns: &tcptail_netns::Netns,
        config: ServerConfig,
    ) -> io::Result<RunningServer> {
        let config = ServerConfig { policy: ServerPolicy::trusting(), ..config };
        let server = ns.run(|| Server::bind(config)).map_err(io::Error::other)??;
        Ok(server.spawn())
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
