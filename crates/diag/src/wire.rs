//! The sock_diag wire format: building `SOCK_DIAG_BY_FAMILY` dump requests and parsing the
//! kernel's replies (`nlmsghdr` + `inet_diag_msg` + `nlattr`s) from raw bytes.
//!
//! Parsing never panics and never trusts a length: every header and attribute is bounds-checked
//! and a message or attribute that claims more bytes than remain is an error
//! ([`ParseError`]), not a read past the buffer. `INET_DIAG_INFO` goes to
//! [`TcpInfo::parse`] (length-aware through 6.18) and `INET_DIAG_BBRINFO` to
//! [`BbrInfo::parse`]; this module only walks the framing. Pure code: no I/O.
//!
//! Layouts (`include/uapi/linux/{netlink,inet_diag,sock_diag}.h`, native endianness except
//! ports, which are big-endian): `nlmsghdr` 16 bytes; `inet_diag_req_v2` 56 bytes;
//! `inet_diag_msg` 72 bytes (family, state, timer, retrans, sockid 48, expires, rqueue,
//! wqueue, uid, inode); attributes are `{u16 len, u16 type}` padded to 4 bytes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use tcptail_sock::cc_info::BbrInfo;
use tcptail_sock::tcp_info::TcpInfo;

/// `SOCK_DIAG_BY_FAMILY`.
pub const SOCK_DIAG_BY_FAMILY: u16 = 20;
/// `TCPDIAG_GETSOCK`: the original (v1) inet_diag request, which accepts `AF_UNSPEC` and so
/// dumps IPv4 and IPv6 sockets in one walk of the kernel's hash tables. Not used by
/// [`crate::Dumper::dump`] (which speaks v2, `SOCK_DIAG_BY_FAMILY`, per family); kept so the
/// benchmark can compare the two.
pub const TCPDIAG_GETSOCK: u16 = 18;
const NLMSG_ERROR: u16 = 2;
const NLMSG_DONE: u16 = 3;
const NLM_F_REQUEST: u16 = 1;
/// `NLM_F_DUMP_INTR`: the kernel's tables changed during the dump, so it may be inconsistent.
pub const NLM_F_DUMP_INTR: u16 = 0x10;
const NLM_F_DUMP: u16 = 0x300;
const NLMSG_HDRLEN: usize = 16;
/// Size of `struct inet_diag_msg`.
pub const INET_DIAG_MSG_LEN: usize = 72;
const INET_DIAG_REQ_BYTECODE: u16 = 1;
const INET_DIAG_INFO: u16 = 2;
const INET_DIAG_VEGASINFO: u16 = 3;
const INET_DIAG_CONG: u16 = 4;
const INET_DIAG_SKMEMINFO: u16 = 7;
const INET_DIAG_BBRINFO: u16 = 16;

/// Every TCP state (`TCPF_ALL`).
pub const ALL_STATES: u32 = 0xfff;
/// Only `TCP_ESTABLISHED`.
pub const ESTABLISHED: u32 = 1 << 1;

/// Why a reply could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// A netlink header or its declared length runs past the received bytes.
    #[error("netlink message at byte {offset} is truncated ({len} bytes left)")]
    TruncatedMessage {
        /// Offset of the message in the batch.
        offset: usize,
        /// Bytes left from that offset.
        len: usize,
    },
    /// A `SOCK_DIAG_BY_FAMILY` reply shorter than `struct inet_diag_msg`.
    #[error("inet_diag_msg of {len} bytes, need {INET_DIAG_MSG_LEN}")]
    ShortDiagMsg {
        /// Payload length.
        len: usize,
    },
    /// An attribute whose length is below its header or beyond the message.
    #[error("attribute at byte {offset} of the message has bad length {len}")]
    BadAttribute {
        /// Offset in the message payload.
        offset: usize,
        /// The declared length.
        len: usize,
    },
}

/// A socket's identity: addresses, ports, interface and cookie.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SockId {
    /// Local port.
    pub sport: u16,
    /// Remote port.
    pub dport: u16,
    /// Local address.
    pub src: IpAddr,
    /// Remote address.
    pub dst: IpAddr,
    /// Bound interface index (0: none).
    pub ifindex: u32,
    /// The kernel's socket cookie (unique while the socket lives, increasing over time).
    pub cookie: u64,
}

/// `INET_DIAG_SKMEMINFO`: the socket's memory accounting, bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SkMemInfo {
    /// Receive memory allocated.
    pub rmem_alloc: u32,
    /// Receive buffer size.
    pub rcvbuf: u32,
    /// Transmit memory allocated (in flight to the device).
    pub wmem_alloc: u32,
    /// Send buffer size.
    pub sndbuf: u32,
    /// Forward-allocated memory.
    pub fwd_alloc: u32,
    /// Memory queued for transmit.
    pub wmem_queued: u32,
    /// Option memory.
    pub optmem: u32,
    /// Backlog length.
    pub backlog: u32,
    /// Packets dropped before reaching the socket.
    pub drops: u32,
}

/// One socket of a dump, borrowing the congestion-control name from the receive buffer.
#[derive(Debug, Clone, PartialEq)]
pub struct Socket<'a> {
    /// Address family (`AF_INET` or `AF_INET6`).
    pub family: u8,
    /// Raw TCP state (`1` = established).
    pub state: u8,
    /// Pending timer (0 none, 1 retransmit, 2 keepalive, 3 TIME_WAIT, 4 zero-window probe).
    pub timer: u8,
    /// Retransmit timer backoff count.
    pub retrans: u8,
    /// Addresses and ports.
    pub id: SockId,
    /// Milliseconds until the pending timer fires (`idiag_expires`; for a TIME_WAIT socket,
    /// until it is removed and its port is free again); 0 without a timer.
    pub expires_ms: u32,
    /// Bytes in the receive queue (unread).
    pub rqueue: u32,
    /// Bytes in the send queue (unacked + unsent).
    pub wqueue: u32,
    /// Owner uid.
    pub uid: u32,
    /// Inode of the socket.
    pub inode: u32,
    /// `INET_DIAG_INFO`, parsed; `None` when absent or shorter than the base struct, or when
    /// the dump left it undecoded ([`crate::Dumper::dump_undecoded`]).
    pub info: Option<TcpInfo>,
    /// `INET_DIAG_INFO` as the kernel sent it (empty when absent), for the flight recorder,
    /// which records `struct tcp_info` field by field.
    pub info_raw: &'a [u8],
    /// `INET_DIAG_CONG`: the congestion-control name.
    pub cong: Option<&'a str>,
    /// `INET_DIAG_BBRINFO`, for BBR sockets.
    pub bbr: Option<BbrInfo>,
    /// `INET_DIAG_SKMEMINFO`.
    pub skmem: Option<SkMemInfo>,
}

/// One message of a reply batch.
///
/// Not boxed on purpose: a dump yields one `Socket` per socket and an allocation each would
/// be a measurable part of the per-socket cost.
#[derive(Debug, Clone, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub enum Message<'a> {
    /// A socket.
    Socket(Socket<'a>),
    /// End of the dump, with the dump's status (0, or a negative errno when it failed).
    Done(i32),
    /// A netlink error (negative errno; 0 is an ACK).
    Error(i32),
    /// Any other message type (ignored).
    Other(u16),
}

/// The attributes a dump asks the kernel for (`idiag_ext`). Each one costs kernel work per
/// socket (`tcp_info` is the dearest: the socket is locked and 280 bytes are filled and
/// copied), so a caller asks only for what it reads. The socket header (addresses, state,
/// queues, cookie) always comes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attrs {
    /// `INET_DIAG_INFO`: `struct tcp_info`.
    pub info: bool,
    /// `INET_DIAG_CONG`: the congestion-control name.
    pub cong: bool,
    /// `INET_DIAG_VEGASINFO` request bit: the congestion control's own info, which BBR sockets
    /// answer with `INET_DIAG_BBRINFO`.
    pub cc_info: bool,
    /// `INET_DIAG_SKMEMINFO`: socket memory.
    pub skmem: bool,
}

impl Attrs {
    /// Every attribute this crate parses.
    pub const ALL: Attrs = Attrs { info: true, cong: true, cc_info: true, skmem: true };
    /// The socket header alone.
    pub const NONE: Attrs = Attrs { info: false, cong: false, cc_info: false, skmem: false };

    /// The `idiag_ext` request byte.
    pub fn ext(self) -> u8 {
        let bit = |on: bool, attr: u16| if on { 1u8 << (attr - 1) } else { 0 };
        bit(self.info, INET_DIAG_INFO)
            | bit(self.cc_info, INET_DIAG_VEGASINFO)
            | bit(self.cong, INET_DIAG_CONG)
            | bit(self.skmem, INET_DIAG_SKMEMINFO)
    }
}

impl Default for Attrs {
    fn default() -> Self {
        Attrs::ALL
    }
}

fn header(v: &mut Vec<u8>, total: usize, kind: u16, seq: u32) {
    v.extend_from_slice(&(total as u32).to_ne_bytes());
    v.extend_from_slice(&kind.to_ne_bytes());
    v.extend_from_slice(&(NLM_F_REQUEST | NLM_F_DUMP).to_ne_bytes());
    v.extend_from_slice(&seq.to_ne_bytes());
    v.extend_from_slice(&0u32.to_ne_bytes());
}

fn bytecode_attr(v: &mut Vec<u8>, total: usize, bytecode: Option<&[u8]>) {
    if let Some(code) = bytecode {
        v.extend_from_slice(&((4 + code.len()) as u16).to_ne_bytes());
        v.extend_from_slice(&INET_DIAG_REQ_BYTECODE.to_ne_bytes());
        v.extend_from_slice(code);
        v.resize(total, 0);
    }
}

/// Builds one `TCPDIAG_GETSOCK` dump request (`struct inet_diag_req`, 60 bytes) for both
/// address families at once (`AF_UNSPEC`), asking for `attrs`. Replies carry the same
/// `inet_diag_msg` layout.
pub fn dump_request_any_family(
    states: u32,
    attrs: Attrs,
    seq: u32,
    bytecode: Option<&[u8]>,
) -> Vec<u8> {
    let attr_len = bytecode.map_or(0, |b| 4 + b.len().next_multiple_of(4));
    let total = NLMSG_HDRLEN + 60 + attr_len;
    let mut v = Vec::with_capacity(total);
    header(&mut v, total, TCPDIAG_GETSOCK, seq);
    // idiag_family AF_UNSPEC, src_len, dst_len, ext
    v.extend_from_slice(&[0, 0, 0, attrs.ext()]);
    v.extend_from_slice(&[0u8; 48]);
    v.extend_from_slice(&states.to_ne_bytes());
    v.extend_from_slice(&0u32.to_ne_bytes());
    bytecode_attr(&mut v, total, bytecode);
    v
}

/// Builds one `SOCK_DIAG_BY_FAMILY` dump request for `family` (`AF_INET`/`AF_INET6`) asking
/// for every attribute ([`Attrs::ALL`]), with optional filter bytecode.
pub fn dump_request(family: u8, states: u32, seq: u32, bytecode: Option<&[u8]>) -> Vec<u8> {
    dump_request_for(family, states, Attrs::ALL, seq, bytecode)
}

/// [`dump_request`] asking for `attrs` only.
pub fn dump_request_for(
    family: u8,
    states: u32,
    attrs: Attrs,
    seq: u32,
    bytecode: Option<&[u8]>,
) -> Vec<u8> {
    let attr_len = bytecode.map_or(0, |b| 4 + b.len().next_multiple_of(4));
    let total = NLMSG_HDRLEN + 56 + attr_len;
    let mut v = Vec::with_capacity(total);
    header(&mut v, total, SOCK_DIAG_BY_FAMILY, seq);
    v.extend_from_slice(&[family, libc::IPPROTO_TCP as u8, attrs.ext(), 0]);
    v.extend_from_slice(&states.to_ne_bytes());
    v.extend_from_slice(&[0u8; 48]);
    bytecode_attr(&mut v, total, bytecode);
    v
}

/// The netlink header fields a dump client checks on every reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// `nlmsg_type`.
    pub kind: u16,
    /// `nlmsg_flags` (`NLM_F_MULTI`, [`NLM_F_DUMP_INTR`], ...).
    pub flags: u16,
    /// `nlmsg_seq`: the sequence number of the request this answers.
    pub seq: u32,
    /// `nlmsg_pid`: the port id of the socket the request came from.
    pub pid: u32,
}

/// One message of a batch: its header, and its payload parsed (or why not).
#[derive(Debug, Clone, PartialEq)]
pub struct Frame<'a> {
    /// The header.
    pub header: Header,
    /// The parsed payload; an error here leaves the framing intact (the next message parses).
    pub message: Result<Message<'a>, ParseError>,
}

impl<'a> Frame<'a> {
    /// Parses the payload of a raw frame.
    pub fn parse(raw: RawFrame<'a>) -> Frame<'a> {
        Frame { header: raw.header, message: raw.message() }
    }
}

/// One message of a batch with its payload still unparsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawFrame<'a> {
    /// The header.
    pub header: Header,
    /// The payload (after the 16-byte header, up to the message's declared length).
    pub payload: &'a [u8],
}

impl<'a> RawFrame<'a> {
    /// Whether the payload is an `inet_diag_msg` (a socket).
    pub fn is_socket(&self) -> bool {
        matches!(self.header.kind, SOCK_DIAG_BY_FAMILY | TCPDIAG_GETSOCK)
    }

    /// Parses the payload.
    pub fn message(&self) -> Result<Message<'a>, ParseError> {
        let status = || self.payload.get(..4).map_or(0, |b| i32_at(b, 0));
        match self.header.kind {
            NLMSG_DONE => Ok(Message::Done(status())),
            NLMSG_ERROR => Ok(Message::Error(status())),
            SOCK_DIAG_BY_FAMILY | TCPDIAG_GETSOCK => {
                parse_socket(self.payload).map(Message::Socket)
            }
            other => Ok(Message::Other(other)),
        }
    }
}

/// Iterates over the messages of one received batch with their headers; a framing error
/// (a header or length past the received bytes) ends it.
pub fn frames(buf: &[u8]) -> impl Iterator<Item = Result<Frame<'_>, ParseError>> {
    raw_frames(buf).map(|f| f.map(Frame::parse))
}

/// Iterates over the messages of one received batch without parsing their payloads (a dump
/// parses each socket once, in place, rather than moving it through an iterator).
pub fn raw_frames(buf: &[u8]) -> RawFrames<'_> {
    RawFrames { buf, pos: 0 }
}

/// Iterator returned by [`raw_frames`]; stops after the first framing error.
#[derive(Debug)]
pub struct RawFrames<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Iterator for RawFrames<'a> {
    type Item = Result<RawFrame<'a>, ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        let rest = self.buf.get(self.pos..)?;
        if rest.is_empty() {
            return None;
        }
        let truncated = ParseError::TruncatedMessage { offset: self.pos, len: rest.len() };
        if rest.len() < NLMSG_HDRLEN {
            self.pos = self.buf.len();
            return Some(Err(truncated));
        }
        let len = u32_at(rest, 0) as usize;
        let header = Header {
            kind: u16::from_ne_bytes([rest[4], rest[5]]),
            flags: u16::from_ne_bytes([rest[6], rest[7]]),
            seq: u32_at(rest, 8),
            pid: u32_at(rest, 12),
        };
        if len < NLMSG_HDRLEN || len > rest.len() {
            self.pos = self.buf.len();
            return Some(Err(truncated));
        }
        self.pos += len.next_multiple_of(4);
        Some(Ok(RawFrame { header, payload: &rest[NLMSG_HDRLEN..len] }))
    }
}

/// Iterates over the netlink messages of one received batch (payloads only).
pub fn messages(buf: &[u8]) -> Messages<'_> {
    Messages { frames: raw_frames(buf), failed: false }
}

/// Iterator returned by [`messages`]; stops after the first error.
#[derive(Debug)]
pub struct Messages<'a> {
    frames: RawFrames<'a>,
    failed: bool,
}

impl<'a> Iterator for Messages<'a> {
    type Item = Result<Message<'a>, ParseError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed {
            return None;
        }
        let item = self.frames.next()?.and_then(|f| f.message());
        self.failed = item.is_err();
        Some(item)
    }
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_ne_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

fn i32_at(b: &[u8], off: usize) -> i32 {
    i32::from_ne_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

fn addr(family: u8, b: &[u8]) -> IpAddr {
    if i32::from(family) == libc::AF_INET6 {
        let mut o = [0u8; 16];
        o.copy_from_slice(&b[..16]);
        IpAddr::V6(Ipv6Addr::from(o))
    } else {
        IpAddr::V4(Ipv4Addr::new(b[0], b[1], b[2], b[3]))
    }
}

/// Parses one `inet_diag_msg` with its attributes.
pub fn parse_socket(p: &[u8]) -> Result<Socket<'_>, ParseError> {
    parse_socket_with(p, true)
}

/// [`parse_socket`], decoding `INET_DIAG_INFO` into [`Socket::info`] only when `decode_info`
/// (else `info` is `None` and [`Socket::info_raw`] holds the bytes): `struct tcp_info` is
/// most of a message, and a caller that compares its bytes or reads a field or two (the
/// flight recorder) need not pay for decoding all of it.
pub fn parse_socket_with(p: &[u8], decode_info: bool) -> Result<Socket<'_>, ParseError> {
    if p.len() < INET_DIAG_MSG_LEN {
        return Err(ParseError::ShortDiagMsg { len: p.len() });
    }
    let family = p[0];
    let id = SockId {
        sport: u16::from_be_bytes([p[4], p[5]]),
        dport: u16::from_be_bytes([p[6], p[7]]),
        src: addr(family, &p[8..24]),
        dst: addr(family, &p[24..40]),
        ifindex: u32_at(p, 40),
        cookie: u64::from(u32_at(p, 44)) | u64::from(u32_at(p, 48)) << 32,
    };
    let mut sock = Socket {
        family,
        state: p[1],
        timer: p[2],
        retrans: p[3],
        id,
        expires_ms: u32_at(p, 52),
        rqueue: u32_at(p, 56),
        wqueue: u32_at(p, 60),
        uid: u32_at(p, 64),
        inode: u32_at(p, 68),
        info: None,
        info_raw: &[],
        cong: None,
        bbr: None,
        skmem: None,
    };
    let mut off = INET_DIAG_MSG_LEN;
    while off + 4 <= p.len() {
        let len = usize::from(u16::from_ne_bytes([p[off], p[off + 1]]));
        let kind = u16::from_ne_bytes([p[off + 2], p[off + 3]]) & 0x3fff;
        if len < 4 || off + len > p.len() {
            return Err(ParseError::BadAttribute { offset: off, len });
        }
        let data = &p[off + 4..off + len];
        match kind {
            INET_DIAG_INFO => {
                if decode_info {
                    sock.info = TcpInfo::parse(data).ok();
                }
                sock.info_raw = data;
            }
            INET_DIAG_CONG => {
                let name = data.split(|&b| b == 0).next().unwrap_or_default();
                sock.cong = std::str::from_utf8(name).ok();
            }
            INET_DIAG_BBRINFO => sock.bbr = BbrInfo::parse(data),
            INET_DIAG_SKMEMINFO if data.len() >= 36 => {
                let w = |i: usize| u32_at(data, i * 4);
                sock.skmem = Some(SkMemInfo {
                    rmem_alloc: w(0),
                    rcvbuf: w(1),
                    wmem_alloc: w(2),
                    sndbuf: w(3),
                    fwd_alloc: w(4),
                    wmem_queued: w(5),
                    optmem: w(6),
                    backlog: w(7),
                    drops: w(8),
                });
            }
            _ => {}
        }
        off += len.next_multiple_of(4);
    }
    Ok(sock)
}
