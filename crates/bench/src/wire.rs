//! The benchmark's wire protocol, version 1: fixed 24-byte headers, a JSON handshake, and
//! request/response frames whose payloads are padding.
//!
//! # Frames
//!
//! Every frame starts with a [`Header`] of [`HEADER_LEN`] bytes, all integers big-endian:
//!
//! | bytes  | field       | meaning                                                        |
//! |--------|-------------|----------------------------------------------------------------|
//! | 0..2   | `magic`     | [`MAGIC`], `0x5454` ("TT")                                      |
//! | 2      | `version`   | [`VERSION`], 1                                                  |
//! | 3      | `kind`      | [`FrameKind`]                                                   |
//! | 4..8   | `frame_len` | the whole frame, header included                                |
//! | 8..12  | `reply_len` | Request only: the `frame_len` of the Response to send; else 0   |
//! | 12..16 | `flags`     | reserved, must be 0 in version 1                                |
//! | 16..24 | `seq`       | sequence number; a Response echoes its Request's                 |
//!
//! A connection is: client `Hello` (JSON [`HelloConfig`]) → server `Welcome` (JSON [`Welcome`])
//! → any number of `Request`s, each answered in order by one `Response` (clients may pipeline).
//! The Hello bounds both directions: no Request may be longer than its `request_len`, nor ask
//! for a Response longer than its `reply_len`.
//! A server that rejects a connection sends an `Error` frame (UTF-8 reason), best effort, and
//! closes it.
//!
//! # Server statistics (added within version 1)
//!
//! Between requests (none outstanding) the client may send a `StatsRequest` (a bare header,
//! no payload); the server answers with one `StatsReply` (JSON [`ServerStats`]): what it did
//! for **this connection** since the handshake or the previous `StatsRequest` (its thread's
//! CPU time, each request's service time, its socket's `tcp_info`), and starts a new window.
//! A client sends one after its warm-up and one at the end of the run, so the second reply
//! covers the measured part. A server that answers stats says so in its Welcome
//! ([`Welcome::stats_version`]); one built before them answers a `StatsRequest` with an Error
//! frame ("unknown frame kind 6") and closes the connection, so a client sends one to such a
//! server only when the run is over ([`stats_unsupported`] words what it then reports).
//!
//! # Invariants
//!
//! - [`Header::decode`] accepts exactly the headers [`Header::validate`] accepts, and
//!   `encode` ∘ `decode` is the identity on accepted bytes (the encoding is canonical).
//! - No length read from the wire is trusted before it is checked against [`MAX_FRAME_LEN`]
//!   (and [`MAX_CONTROL_PAYLOAD`] for Hello, Welcome and Error), so a hostile peer can make a
//!   reader allocate at most that much, and only as its bytes actually arrive.
//! - [`FrameParser`] is sans-IO: it never buffers payloads, so a reader's memory does not grow
//!   with the frames it is sent.
//!
//! This module never opens sockets, reads clocks or spawns threads; the helpers that do I/O
//! take any [`Read`]/[`Write`] and do exactly the reads and writes documented.

use std::fmt;
use std::io::{self, Read, Write};

use serde::{Deserialize, Serialize};
use tcptail_sock::Profile;
use tcptail_sock::apply::ApplyReport;

mod parser;
pub mod stats;
#[cfg(test)]
mod tests;

pub use parser::FrameParser;
pub use stats::{STATS_VERSION, ServerStats, read_stats_reply, stats_unsupported};

/// First two bytes of every frame: "TT".
pub const MAGIC: u16 = 0x5454;
/// The protocol version this build speaks.
pub const VERSION: u8 = 1;
/// Length of every frame header in bytes.
pub const HEADER_LEN: usize = 24;
/// The largest frame (header included) either side may send: 16 MiB.
pub const MAX_FRAME_LEN: u32 = 16 * 1024 * 1024;
/// [`MAX_FRAME_LEN`] as a buffer length.
const MAX_FRAME: usize = MAX_FRAME_LEN as usize;
/// The largest payload of a Hello, Welcome or Error frame: 64 KiB.
pub const MAX_CONTROL_PAYLOAD: usize = 64 * 1024;
/// The largest payload of a StatsReply: 256 KiB, room for the densest service-time
/// histogram a reply can carry ([`stats::MAX_SERVICE_BUCKETS`] buckets) with its socket state.
pub const MAX_STATS_PAYLOAD: usize = 256 * 1024;

/// What a frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameKind {
    /// Client → server, first frame: payload is a JSON [`HelloConfig`].
    Hello = 1,
    /// Server → client, answer to Hello: payload is a JSON [`Welcome`].
    Welcome = 2,
    /// Client → server: payload is padding up to `frame_len`.
    Request = 3,
    /// Server → client: echoes the request's `seq`, `frame_len` is the request's `reply_len`,
    /// payload is zeros.
    Response = 4,
    /// Server → client before closing a connection that broke the rules: UTF-8 reason.
    Error = 5,
    /// Client → server, between requests: report this connection's statistics and start a
    /// new window. No payload.
    StatsRequest = 6,
    /// Server → client, answer to a StatsRequest: payload is a JSON [`ServerStats`].
    StatsReply = 7,
}

impl FrameKind {
    /// The kind for a wire byte, if it names one.
    pub fn from_u8(byte: u8) -> Option<FrameKind> {
        Some(match byte {
            1 => FrameKind::Hello,
            2 => FrameKind::Welcome,
            3 => FrameKind::Request,
            4 => FrameKind::Response,
            5 => FrameKind::Error,
            6 => FrameKind::StatsRequest,
            7 => FrameKind::StatsReply,
            _ => return None,
        })
    }

    /// The wire byte for this kind.
    pub fn as_u8(self) -> u8 {
        self as u8
    }

    /// The largest payload a frame of this kind may carry.
    pub fn max_payload(self) -> usize {
        match self {
            FrameKind::Hello | FrameKind::Welcome | FrameKind::Error => MAX_CONTROL_PAYLOAD,
            FrameKind::Request | FrameKind::Response => MAX_FRAME - HEADER_LEN,
            // A bare header: asking costs the server no payload to read.
            FrameKind::StatsRequest => 0,
            FrameKind::StatsReply => MAX_STATS_PAYLOAD,
        }
    }
}

impl fmt::Display for FrameKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FrameKind::Hello => "Hello",
            FrameKind::Welcome => "Welcome",
            FrameKind::Request => "Request",
            FrameKind::Response => "Response",
            FrameKind::Error => "Error",
            FrameKind::StatsRequest => "StatsRequest",
            FrameKind::StatsReply => "StatsReply",
        })
    }
}

/// Which length a [`WireError`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LengthField {
    /// A header's `frame_len`.
    FrameLen,
    /// A Request header's `reply_len`.
    ReplyLen,
    /// [`HelloConfig::request_len`].
    HelloRequestLen,
    /// [`HelloConfig::reply_len`].
    HelloReplyLen,
}

impl fmt::Display for LengthField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            LengthField::FrameLen => "frame_len",
            LengthField::ReplyLen => "reply_len",
            LengthField::HelloRequestLen => "Hello request_len",
            LengthField::HelloReplyLen => "Hello reply_len",
        })
    }
}

/// A frame that breaks the protocol. Each variant names the field at fault and its value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The first two bytes are not "TT": the peer does not speak this protocol.
    #[error(
        "bad magic {:#04x} {:#04x} (expected 0x54 0x54, \"TT\"): not a tcptail bench peer",
        found[0],
        found[1]
    )]
    BadMagic {
        /// The two bytes received.
        found: [u8; 2],
    },
    /// A version this build does not speak.
    #[error("unsupported protocol version {found} (this build speaks version {VERSION})")]
    UnsupportedVersion {
        /// The version byte received.
        found: u8,
    },
    /// A kind byte that names no [`FrameKind`].
    #[error("unknown frame kind {found}")]
    UnknownKind {
        /// The kind byte received.
        found: u8,
    },
    /// A length below [`HEADER_LEN`].
    #[error("{field} {len} is shorter than the {HEADER_LEN}-byte header")]
    FrameTooShort {
        /// Which length.
        field: LengthField,
        /// Its value.
        len: u32,
    },
    /// A length above [`MAX_FRAME_LEN`].
    #[error("{field} {len} exceeds the {MAX_FRAME_LEN}-byte frame limit")]
    FrameTooLong {
        /// Which length.
        field: LengthField,
        /// Its value.
        len: u32,
    },
    /// Reserved header flags set.
    #[error("reserved flags {flags:#010x} are set (they must be 0 in version {VERSION})")]
    ReservedFlags {
        /// The flags received.
        flags: u32,
    },
    /// A `reply_len` on a frame that is not a Request.
    #[error("{kind} frame carries reply_len {reply_len} (only a Request may)")]
    UnexpectedReplyLen {
        /// The frame's kind.
        kind: FrameKind,
        /// The `reply_len` received.
        reply_len: u32,
    },
    /// A payload beyond its kind's limit ([`FrameKind::max_payload`]).
    #[error("{kind} payload of {len} bytes exceeds the {}-byte limit", kind.max_payload())]
    PayloadTooLarge {
        /// The frame's kind.
        kind: FrameKind,
        /// The payload length the header announced.
        len: usize,
    },
    /// A Request larger than the `request_len` the client promised in its Hello.
    #[error("{kind} frame of {len} bytes is larger than the {promised} bytes promised")]
    LargerThanPromised {
        /// The frame's kind.
        kind: FrameKind,
        /// Its `frame_len`.
        len: u32,
        /// The promised maximum.
        promised: u32,
    },
    /// A Request asking for a larger reply than the `reply_len` its Hello negotiated: one
    /// 24-byte request could otherwise make the server send 16 MiB.
    #[error(
        "Request asks for a reply_len of {reply_len} bytes, more than the {negotiated} bytes \
         negotiated in the Hello"
    )]
    ReplyLargerThanNegotiated {
        /// The Request's `reply_len`.
        reply_len: u32,
        /// The Hello's `reply_len`.
        negotiated: u32,
    },
    /// A Hello or Welcome payload that does not parse.
    #[error("{kind} payload is not valid JSON for protocol version {VERSION}: {message}")]
    BadJson {
        /// The frame's kind.
        kind: FrameKind,
        /// The parser's message.
        message: String,
    },
    /// A StatsReply whose content a client cannot rely on ([`ServerStats::validate`]).
    #[error("StatsReply is not valid: {message}")]
    BadStats {
        /// What is wrong with it.
        message: String,
    },
    /// A valid frame of the wrong kind for the state of the connection (a Request before the
    /// Hello, a Hello after the handshake, ...).
    #[error("unexpected {found} frame (expected {expected})")]
    UnexpectedKind {
        /// The kind received.
        found: FrameKind,
        /// The kind this state allows.
        expected: FrameKind,
    },
}

/// A decoded, validated frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// What the frame is.
    pub kind: FrameKind,
    /// Length of the whole frame, header included.
    pub frame_len: u32,
    /// Request: `frame_len` of the Response to send. 0 for every other kind.
    pub reply_len: u32,
    /// Sequence number; a Response echoes its Request's.
    pub seq: u64,
}

impl Header {
    /// A Request header for a frame of `frame_len` bytes asking for a `reply_len`-byte reply.
    pub fn request(seq: u64, frame_len: u32, reply_len: u32) -> Header {
        Header { kind: FrameKind::Request, frame_len, reply_len, seq }
    }

    /// A Response header for a frame of `frame_len` bytes.
    pub fn response(seq: u64, frame_len: u32) -> Header {
        Header { kind: FrameKind::Response, frame_len, reply_len: 0, seq }
    }

    /// Payload bytes that follow the header.
    pub fn payload_len(&self) -> usize {
        (self.frame_len as usize).saturating_sub(HEADER_LEN)
    }

    /// Checks the lengths against the limits for this kind; `decode` applies the same checks.
    pub fn validate(&self) -> Result<(), WireError> {
        check_len(LengthField::FrameLen, self.frame_len)?;
        if self.kind == FrameKind::Request {
            check_len(LengthField::ReplyLen, self.reply_len)?;
        } else if self.reply_len != 0 {
            return Err(WireError::UnexpectedReplyLen {
                kind: self.kind,
                reply_len: self.reply_len,
            });
        }
        if self.payload_len() > self.kind.max_payload() {
            return Err(WireError::PayloadTooLarge { kind: self.kind, len: self.payload_len() });
        }
        Ok(())
    }

    /// Writes the header's 24 bytes. Does not validate: encoding an invalid header produces
    /// bytes that `decode` rejects, which is how tests build hostile frames.
    pub fn encode(&self, out: &mut [u8; HEADER_LEN]) {
        out[0..2].copy_from_slice(&MAGIC.to_be_bytes());
        out[2] = VERSION;
        out[3] = self.kind.as_u8();
        out[4..8].copy_from_slice(&self.frame_len.to_be_bytes());
        out[8..12].copy_from_slice(&self.reply_len.to_be_bytes());
        out[12..16].copy_from_slice(&0u32.to_be_bytes());
        out[16..24].copy_from_slice(&self.seq.to_be_bytes());
    }

    /// Parses and validates 24 header bytes. Never panics.
    pub fn decode(bytes: &[u8; HEADER_LEN]) -> Result<Header, WireError> {
        let be32 = |at: usize| {
            u32::from_be_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
        };
        if u16::from_be_bytes([bytes[0], bytes[1]]) != MAGIC {
            return Err(WireError::BadMagic { found: [bytes[0], bytes[1]] });
        }
        if bytes[2] != VERSION {
            return Err(WireError::UnsupportedVersion { found: bytes[2] });
        }
        let kind =
            FrameKind::from_u8(bytes[3]).ok_or(WireError::UnknownKind { found: bytes[3] })?;
        let flags = be32(12);
        if flags != 0 {
            return Err(WireError::ReservedFlags { flags });
        }
        let mut seq = [0u8; 8];
        seq.copy_from_slice(&bytes[16..24]);
        let header =
            Header { kind, frame_len: be32(4), reply_len: be32(8), seq: u64::from_be_bytes(seq) };
        header.validate()?;
        Ok(header)
    }
}

fn check_len(field: LengthField, len: u32) -> Result<(), WireError> {
    if (len as usize) < HEADER_LEN {
        Err(WireError::FrameTooShort { field, len })
    } else if len > MAX_FRAME_LEN {
        Err(WireError::FrameTooLong { field, len })
    } else {
        Ok(())
    }
}

fn head_mut(buf: &mut [u8]) -> &mut [u8; HEADER_LEN] {
    let len = buf.len();
    assert!(
        (HEADER_LEN..=MAX_FRAME).contains(&len),
        "frame buffer of {len} bytes is outside {HEADER_LEN}..={MAX_FRAME_LEN}"
    );
    (&mut buf[..HEADER_LEN]).try_into().expect("slice is HEADER_LEN long")
}

/// Writes a Request header into the first 24 bytes of `buf`, whose length is the frame's
/// length; the payload bytes are left as they are, so a client allocates its buffer once.
/// `reply_len` must lie in `HEADER_LEN..=MAX_FRAME_LEN` (the server rejects anything else).
///
/// # Panics
///
/// If `buf.len()` is outside `HEADER_LEN..=MAX_FRAME_LEN`.
pub fn encode_request(buf: &mut [u8], seq: u64, reply_len: u32) {
    let frame_len = buf.len() as u32;
    Header::request(seq, frame_len, reply_len).encode(head_mut(buf));
}

/// Writes a Response header into the first 24 bytes of `buf`, whose length is the frame's
/// length; the payload bytes are left as they are.
///
/// # Panics
///
/// If `buf.len()` is outside `HEADER_LEN..=MAX_FRAME_LEN`.
pub fn encode_response(buf: &mut [u8], seq: u64) {
    let frame_len = buf.len() as u32;
    Header::response(seq, frame_len).encode(head_mut(buf));
}

/// What the client asks of the server for one connection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HelloConfig {
    /// Applied by the server to its end of the connection, and read back into the Welcome.
    pub profile: Profile,
    /// CPU the server's connection thread should pin itself to; `None`: the server's default.
    #[serde(default)]
    pub server_cpu: Option<usize>,
    /// Serve with a non-blocking socket and a busy loop instead of blocking receives.
    #[serde(default)]
    pub spin: bool,
    /// The largest Request `frame_len` the client will send. The server rejects a larger one.
    pub request_len: u32,
    /// The largest Response `frame_len` the client will ask for. Each Request's own
    /// `reply_len` decides its Response, up to this; the server rejects a Request asking for
    /// more ([`WireError::ReplyLargerThanNegotiated`]) and may refuse a Hello asking for more
    /// than it serves.
    pub reply_len: u32,
}

impl HelloConfig {
    /// Checks both lengths lie in `HEADER_LEN..=MAX_FRAME_LEN`.
    pub fn validate(&self) -> Result<(), WireError> {
        check_len(LengthField::HelloRequestLen, self.request_len)?;
        check_len(LengthField::HelloReplyLen, self.reply_len)
    }
}

/// What the server did with the Hello: the profile as applied and read back, and where its
/// connection thread runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Welcome {
    /// The profile as requested and as read back from the server's socket.
    pub apply: ApplyReport,
    /// `TCP_CONGESTION` read back from the server's socket after applying the profile.
    pub congestion: Option<String>,
    /// The CPU the connection thread runs on (`sched_getcpu`) after pinning.
    pub server_cpu: Option<usize>,
    /// The CPU the server tried to pin to: the Hello's, else its own default.
    #[serde(default)]
    pub requested_cpu: Option<usize>,
    /// Why pinning failed, if it did.
    pub pinned: Option<String>,
    /// Whether the server serves this connection by spinning.
    #[serde(default)]
    pub spin: bool,
    /// The server's kernel release (`uname -r`).
    pub kernel: String,
    /// The server's tcptail version.
    pub version: String,
    /// The [`ServerStats`] version this server answers a StatsRequest with on this
    /// connection (every engine's serve loop answers it); `None` from a server that does not
    /// report stats (one built before them): a StatsRequest would end the connection.
    #[serde(default)]
    pub stats_version: Option<u32>,
    /// After this many seconds without a request the server closes the connection; a client
    /// whose requests are further apart than that cannot run against it.
    #[serde(default)]
    pub idle_timeout_seconds: Option<f64>,
}

impl Welcome {
    /// One line for logs: congestion control, CPU, spin, and whether the profile applied.
    pub fn summary(&self) -> String {
        let cc = self.congestion.as_deref().unwrap_or("unknown");
        let cpu = match (self.server_cpu, self.requested_cpu, &self.pinned) {
            (_, Some(want), Some(err)) => format!("not pinned to CPU {want} ({err})"),
            (Some(cpu), Some(_), None) => format!("pinned to CPU {cpu}"),
            (Some(cpu), None, _) => format!("on CPU {cpu} (unpinned)"),
            (None, _, _) => "CPU unknown".to_string(),
        };
        let mode = if self.spin { "spin" } else { "blocking" };
        let apply = if self.apply.is_clean() { "profile applied" } else { "profile differs" };
        format!("congestion {cc}, {cpu}, {mode}, {apply}")
    }
}

/// A failure to read or write a frame.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The transport failed (an unexpected EOF is [`io::ErrorKind::UnexpectedEof`]).
    #[error("I/O error: {0}")]
    Io(#[from] io::Error),
    /// The peer broke the protocol.
    #[error("protocol error: {0}")]
    Wire(#[from] WireError),
    /// The peer sent an Error frame with this reason.
    #[error("the peer closed the connection: {0}")]
    Peer(String),
}

/// Writes one whole frame (header and payload) with a single `write_all`. For frames without
/// a `reply_len`: Hello, Welcome, Error, Response.
pub fn write_frame<W: Write + ?Sized>(
    w: &mut W,
    kind: FrameKind,
    seq: u64,
    payload: &[u8],
) -> Result<(), FrameError> {
    if payload.len() > kind.max_payload() {
        return Err(WireError::PayloadTooLarge { kind, len: payload.len() }.into());
    }
    let header = Header { kind, frame_len: (HEADER_LEN + payload.len()) as u32, reply_len: 0, seq };
    header.validate()?;
    let mut frame = vec![0u8; HEADER_LEN + payload.len()];
    header.encode(head_mut(&mut frame));
    frame[HEADER_LEN..].copy_from_slice(payload);
    w.write_all(&frame)?;
    Ok(w.flush()?)
}

/// Reads and validates one header (exactly 24 bytes).
pub fn read_header<R: Read + ?Sized>(r: &mut R) -> Result<Header, FrameError> {
    let mut bytes = [0u8; HEADER_LEN];
    r.read_exact(&mut bytes)?;
    Ok(Header::decode(&bytes)?)
}

/// Reads `header`'s payload into `payload` (cleared first). The buffer grows only as bytes
/// arrive, and never past the validated `frame_len`.
pub fn read_payload<R: Read + ?Sized>(
    r: &mut R,
    header: &Header,
    payload: &mut Vec<u8>,
) -> Result<(), FrameError> {
    payload.clear();
    let want = header.payload_len();
    r.take(want as u64).read_to_end(payload)?;
    if payload.len() < want {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("{} frame ended after {} of {want} payload bytes", header.kind, payload.len()),
        )
        .into());
    }
    Ok(())
}

/// Reads one whole frame of any kind: header, then payload into `payload`.
pub fn read_frame<R: Read + ?Sized>(
    r: &mut R,
    payload: &mut Vec<u8>,
) -> Result<Header, FrameError> {
    let header = read_header(r)?;
    read_payload(r, &header, payload)?;
    Ok(header)
}

fn to_json<T: Serialize>(kind: FrameKind, value: &T) -> Result<Vec<u8>, FrameError> {
    let json = serde_json::to_vec(value)
        .map_err(|e| WireError::BadJson { kind, message: e.to_string() })?;
    if json.len() > kind.max_payload() {
        return Err(WireError::PayloadTooLarge { kind, len: json.len() }.into());
    }
    Ok(json)
}

fn from_json<T: for<'de> Deserialize<'de>>(kind: FrameKind, json: &[u8]) -> Result<T, WireError> {
    serde_json::from_slice(json).map_err(|e| WireError::BadJson { kind, message: e.to_string() })
}

/// Reads one frame that must be `expected`; an Error frame becomes [`FrameError::Peer`]. The
/// payload of a frame of the wrong kind is not read.
fn read_control<R: Read + ?Sized>(r: &mut R, expected: FrameKind) -> Result<Vec<u8>, FrameError> {
    let header = read_header(r)?;
    if header.kind != expected && header.kind != FrameKind::Error {
        return Err(WireError::UnexpectedKind { found: header.kind, expected }.into());
    }
    let mut payload = Vec::new();
    read_payload(r, &header, &mut payload)?;
    if header.kind == FrameKind::Error {
        return Err(FrameError::Peer(String::from_utf8_lossy(&payload).into_owned()));
    }
    Ok(payload)
}

/// Client side: sends the Hello (one write).
pub fn write_hello<W: Write + ?Sized>(w: &mut W, hello: &HelloConfig) -> Result<(), FrameError> {
    write_frame(w, FrameKind::Hello, 0, &to_json(FrameKind::Hello, hello)?)
}

/// Server side: reads the Hello and validates it. Any other first frame is
/// [`WireError::UnexpectedKind`], detected before its payload is read.
pub fn read_hello<R: Read + ?Sized>(r: &mut R) -> Result<HelloConfig, FrameError> {
    let payload = read_control(r, FrameKind::Hello)?;
    let hello: HelloConfig = from_json(FrameKind::Hello, &payload)?;
    hello.validate()?;
    Ok(hello)
}

/// Server side: sends the Welcome (one write).
pub fn write_welcome<W: Write + ?Sized>(w: &mut W, welcome: &Welcome) -> Result<(), FrameError> {
    write_frame(w, FrameKind::Welcome, 0, &to_json(FrameKind::Welcome, welcome)?)
}

/// Client side: reads the server's answer to the Hello. An Error frame (the server refused
/// the connection) is [`FrameError::Peer`] with the server's reason.
pub fn read_welcome<R: Read + ?Sized>(r: &mut R) -> Result<Welcome, FrameError> {
    let payload = read_control(r, FrameKind::Welcome)?;
    Ok(from_json(FrameKind::Welcome, &payload)?)
}

/// Server side: sends an Error frame with `reason`, cut to [`MAX_CONTROL_PAYLOAD`] bytes at a
/// character boundary.
pub fn write_error<W: Write + ?Sized>(w: &mut W, reason: &str) -> Result<(), FrameError> {
    let mut end = reason.len().min(MAX_CONTROL_PAYLOAD);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    write_frame(w, FrameKind::Error, 0, &reason.as_bytes()[..end])
}

/// Client side: asks for this connection's statistics (a bare header, one write).
pub fn write_stats_request<W: Write + ?Sized>(w: &mut W) -> Result<(), FrameError> {
    write_frame(w, FrameKind::StatsRequest, 0, &[])
}

/// Server side: the StatsReply frame for `stats`, encoded (header and JSON payload).
pub fn stats_reply_frame(stats: &ServerStats) -> Result<Vec<u8>, FrameError> {
    let json = to_json(FrameKind::StatsReply, stats)?;
    let mut frame = Vec::with_capacity(HEADER_LEN + json.len());
    write_frame(&mut frame, FrameKind::StatsReply, 0, &json)?;
    Ok(frame)
}
