//! The exporter's HTTP endpoint: hyper (HTTP/1.1) on a small single-threaded tokio runtime,
//! built to keep answering scrapes while other clients misbehave.
//!
//! What bounds what (all in [`Limits`]):
//! - **Connections**: at most `max_connections` are open. When a new one arrives at the limit,
//!   the oldest connection that is not being answered (idle, half-sent headers, or a slow
//!   reader of its response) is closed to make room, so sockets held open by one client
//!   cannot lock the scraper out. Only when every open connection is being answered is the
//!   new one closed.
//! - **Reading**: a request's headers must arrive within `read_timeout` of the connection
//!   opening (or of the previous response); this also closes idle keep-alive connections. A
//!   TLS handshake has the same budget. Headers above `max_header_bytes` are answered
//!   `431 Request Header Fields Too Large` and the connection closed.
//! - **Writing**: a response must be written within `write_timeout` from its first byte
//!   (`timed_io`), so a slow reader holds its response for at most that long.
//! - **Work**: at most `max_requests` requests are being answered at once (the handler and
//!   compression); more get `503` at once. Basic auth costs a bcrypt check only for
//!   credentials not verified before, one at a time (503 beyond), so a flood of wrong
//!   passwords cannot take the slots a scraper with known credentials needs. The handler runs
//!   on a blocking thread (at most two), never on the thread that moves bytes, so one slow
//!   scrape does not stop other connections' I/O.
//!
//! Memory is therefore bounded by `max_connections` × (the read buffer, 64 KiB at most, plus
//! one response body) — the body is the exposition text, gzipped when the client asks.
//!
//! Optional TLS (rustls) and basic auth (bcrypt) come from a node_exporter-style web
//! configuration file ([`web_config`]).

mod encoding;
mod timed_io;
pub mod web_config;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{self, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{Notify, Semaphore};

pub use encoding::{accepts_gzip, gzip};
pub use web_config::{BasicAuth, WebConfig, WebConfigError};

use timed_io::TimedIo;

/// Bounds on what clients may hold (see the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Open connections at most; at the limit the oldest one not being answered is closed.
    pub max_connections: usize,
    /// Requests being answered at once at most; more get 503.
    pub max_requests: usize,
    /// Time to receive a request's headers (and a TLS handshake), from the connection's
    /// start or the previous response.
    pub read_timeout: Duration,
    /// Time to write a response, from its first byte.
    pub write_timeout: Duration,
    /// Size of a request's start line and headers at most; more gets 431.
    pub max_header_bytes: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: 128,
            max_requests: 40,
            read_timeout: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
            max_header_bytes: 16 * 1024,
        }
    }
}

impl Limits {
    /// Checks the limits are usable.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_connections == 0 || self.max_requests == 0 {
            return Err("connection and request limits must be at least 1".to_owned());
        }
        if self.read_timeout.is_zero() || self.write_timeout.is_zero() {
            return Err("read and write timeouts must be above zero".to_owned());
        }
        if !(1024..=1024 * 1024).contains(&self.max_header_bytes) {
            return Err("the header size limit must be between 1 KiB and 1 MiB".to_owned());
        }
        Ok(())
    }
}

/// What the handler sees of a request (GET or HEAD; other methods are answered 405 before).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The path, without the query.
    pub path: String,
    /// The `Accept` header, when present and valid text.
    pub accept: Option<String>,
}

/// The handler's answer; the server adds compression and the framing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// HTTP status code.
    pub status: u16,
    /// `Content-Type`.
    pub content_type: &'static str,
    /// The body.
    pub body: Vec<u8>,
}

impl Response {
    /// A plain-text response.
    pub fn text(status: u16, body: impl Into<String>) -> Response {
        Response {
            status,
            content_type: "text/plain; charset=utf-8",
            body: body.into().into_bytes(),
        }
    }
}

/// Answers requests; called on a blocking thread, one call per request.
pub trait Handler: Send + Sync + 'static {
    /// The response to one request.
    fn handle(&self, request: &Request) -> Response;
}

/// A bound listener with its configuration, ready to [`serve`](Server::serve).
pub struct Server {
    listener: std::net::TcpListener,
    web: WebConfig,
    limits: Limits,
}

impl Server {
    /// Binds the address (`127.0.0.1:9464`, `[::]:9464`).
    pub fn bind(addr: &str, web: WebConfig, limits: Limits) -> std::io::Result<Server> {
        limits.validate().map_err(std::io::Error::other)?;
        let listener = std::net::TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        Ok(Server { listener, web, limits })
    }

    /// The address actually bound (the port chosen for `:0`).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// `https` with TLS, `http` without.
    pub fn scheme(&self) -> &'static str {
        if self.web.tls.is_some() { "https" } else { "http" }
    }

    /// Serves until the process ends; returns only when the runtime cannot start or the
    /// listener fails for good.
    pub fn serve(self, handler: impl Handler) -> std::io::Result<()> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .max_blocking_threads(2)
            .thread_name("tcptail-http")
            .build()?;
        let shared = Arc::new(Shared {
            handler: Box::new(handler),
            users: self.web.users.clone(),
            requests: Arc::new(Semaphore::new(self.limits.max_requests)),
            auth_checks: Arc::new(Semaphore::new(AUTH_CHECKS_AT_ONCE)),
            limits: self.limits,
        });
        let tls = self.web.tls.clone().map(tokio_rustls::TlsAcceptor::from);
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::from_std(self.listener)?;
            let slots = Arc::new(Mutex::new(Slots::default()));
            loop {
                let stream = match listener.accept().await {
                    Ok((stream, _)) => stream,
                    // Out of descriptors or memory: give the open connections time to end.
                    Err(e) if is_resource_error(&e) => {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                    // The peer gave up before we accepted: not our problem.
                    Err(_) => continue,
                };
                let admitted =
                    slots.lock().unwrap_or_else(PoisonError::into_inner).admit(shared.limits);
                let Some(slot) = admitted else { continue };
                let (shared, slots, tls) = (shared.clone(), slots.clone(), tls.clone());
                tokio::spawn(async move {
                    let id = slot.id;
                    tokio::select! {
                        () = connection(stream, tls, shared, slot.answering.clone()) => {}
                        () = slot.close.notified() => {}
                    }
                    slots.lock().unwrap_or_else(PoisonError::into_inner).open.remove(&id);
                });
            }
        })
    }
}

fn is_resource_error(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE | libc::ENOBUFS | libc::ENOMEM))
}

/// New credentials checked with bcrypt at once at most (more get 503): one, so of the two
/// blocking threads one is always free for the handler.
const AUTH_CHECKS_AT_ONCE: usize = 1;

struct Shared {
    handler: Box<dyn Handler>,
    users: Option<Arc<BasicAuth>>,
    requests: Arc<Semaphore>,
    auth_checks: Arc<Semaphore>,
    limits: Limits,
}

/// The open connections, oldest first (ids only grow).
#[derive(Default)]
struct Slots {
    next: u64,
    open: BTreeMap<u64, Slot>,
}

#[derive(Clone)]
struct Slot {
    id: u64,
    /// A request of this connection is in the handler.
    answering: Arc<AtomicBool>,
    /// Closes the connection when notified.
    close: Arc<Notify>,
}

impl Slots {
    /// A slot for a new connection, closing the oldest one not being answered when at the
    /// limit; `None` when every open connection is being answered.
    fn admit(&mut self, limits: Limits) -> Option<Slot> {
        if self.open.len() >= limits.max_connections {
            let victim = self
                .open
                .iter()
                .find(|(_, s)| !s.answering.load(Ordering::Acquire))
                .map(|(id, _)| *id)?;
            if let Some(slot) = self.open.remove(&victim) {
                slot.close.notify_one();
            }
        }
        let slot = Slot {
            id: self.next,
            answering: Arc::new(AtomicBool::new(false)),
            close: Arc::new(Notify::new()),
        };
        self.next += 1;
        self.open.insert(slot.id, slot.clone());
        Some(slot)
    }
}

/// Serves one connection until it ends (or a timeout ends it).
async fn connection(
    stream: tokio::net::TcpStream,
    tls: Option<tokio_rustls::TlsAcceptor>,
    shared: Arc<Shared>,
    answering: Arc<AtomicBool>,
) {
    let _ = stream.set_nodelay(true);
    let limits = shared.limits;
    let io = TimedIo::new(stream, limits.write_timeout);
    let service = service_fn(move |request| respond(shared.clone(), answering.clone(), request));
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.read_timeout)
        .max_header_size(limits.max_header_bytes)
        .max_buf_size((limits.max_header_bytes + 1024).max(64 * 1024));
    match tls {
        None => serve_http(&builder, io, service).await,
        Some(acceptor) => {
            if let Ok(Ok(tls)) =
                tokio::time::timeout(limits.read_timeout, acceptor.accept(io)).await
            {
                serve_http(&builder, tls, service).await;
            }
        }
    }
}

async fn serve_http<I, S>(builder: &http1::Builder, io: I, service: S)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    S: hyper::service::Service<
            hyper::Request<Incoming>,
            Response = hyper::Response<Full<Bytes>>,
            Error = Infallible,
        >,
    S::Future: Send + 'static,
{
    // Errors (timeouts, resets, bad requests already answered by hyper) end this connection
    // only; there is no one to tell.
    let _ = builder.serve_connection(TokioIo::new(io), service).await;
}

/// Clears the connection's "being answered" mark when the answer is ready (or abandoned).
struct Answering(Arc<AtomicBool>);

impl Drop for Answering {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

async fn respond(
    shared: Arc<Shared>,
    answering: Arc<AtomicBool>,
    request: hyper::Request<Incoming>,
) -> Result<hyper::Response<Full<Bytes>>, Infallible> {
    answering.store(true, Ordering::Release);
    let _answering = Answering(answering);
    if request.method() != Method::GET && request.method() != Method::HEAD {
        let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
        r.headers_mut().insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return Ok(r);
    }
    let headers = request.headers();
    if let Some(users) = &shared.users {
        let authorization = headers.get(header::AUTHORIZATION).map(|v| v.as_bytes().to_vec());
        // A scraper's known credentials skip bcrypt; new ones take one of few check slots, so
        // a flood of wrong passwords cannot hold the request slots the scrapes need.
        let allowed = users.verified_before(authorization.as_deref()) || {
            let Ok(_check) = shared.auth_checks.clone().try_acquire_owned() else {
                return Ok(busy());
            };
            let users = users.clone();
            tokio::task::spawn_blocking(move || users.allows(authorization.as_deref()))
                .await
                .unwrap_or(false)
        };
        if !allowed {
            let mut r = plain(StatusCode::UNAUTHORIZED, "unauthorized\n");
            r.headers_mut().insert(
                header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"tcptail exporter\""),
            );
            return Ok(r);
        }
    }
    let Ok(_permit) = shared.requests.clone().try_acquire_owned() else {
        return Ok(busy());
    };
    let text = |name| headers.get(name).and_then(|v: &HeaderValue| v.to_str().ok());
    let compress = accepts_gzip(text(header::ACCEPT_ENCODING));
    let asked = Request {
        path: request.uri().path().to_owned(),
        accept: text(header::ACCEPT).map(str::to_owned),
    };
    let answer = tokio::task::spawn_blocking(move || {
        let mut response = shared.handler.handle(&asked);
        let compressed = compress && !response.body.is_empty();
        if compressed {
            response.body = gzip(&response.body);
        }
        (response, compressed)
    })
    .await;
    let Ok((response, compressed)) = answer else {
        return Ok(plain(StatusCode::INTERNAL_SERVER_ERROR, "the handler failed\n"));
    };
    let mut r = hyper::Response::new(Full::new(Bytes::from(response.body)));
    *r.status_mut() = StatusCode::from_u16(response.status).unwrap_or(StatusCode::OK);
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(response.content_type));
    h.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    if compressed {
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    Ok(r)
}

fn busy() -> hyper::Response<Full<Bytes>> {
    let mut r = plain(StatusCode::SERVICE_UNAVAILABLE, "too many requests at once\n");
    r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

fn plain(status: StatusCode, body: &'static str) -> hyper::Response<Full<Bytes>> {
    let mut r = hyper::Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

#[cfg(test)]
mod tests;
