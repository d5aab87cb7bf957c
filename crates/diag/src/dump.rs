//! Dumping TCP sockets over sock_diag: one request per address family, replies parsed in
//! place from a reused buffer and handed to a callback, so a dump allocates nothing per socket.

use std::io;
use std::path::PathBuf;

use crate::filter::Filter;
use crate::sys::NetlinkSocket;
use crate::wire::{self, Message, ParseError, Socket};

/// Why a dump failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DiagError {
    /// The sock_diag socket could not be opened.
    #[error("cannot open a NETLINK_SOCK_DIAG socket")]
    Open(#[source] io::Error),
    /// The named network namespace could not be joined.
    #[error("cannot open a sock_diag socket in network namespace {path}")]
    Netns {
        /// `/run/netns/NAME`.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Sending the request or receiving a reply failed.
    #[error("sock_diag dump I/O failed")]
    Io(#[source] io::Error),
    /// The kernel answered with an error (for example EINVAL for rejected filter bytecode).
    #[error("the kernel rejected the sock_diag request")]
    Kernel(#[source] io::Error),
    /// A reply could not be parsed.
    #[error("malformed sock_diag reply")]
    Parse(#[from] ParseError),
}

/// What to dump.
#[derive(Debug, Clone)]
pub struct DumpRequest {
    /// State bitmask (`1 << state`), e.g. [`wire::ALL_STATES`] or [`wire::ESTABLISHED`].
    pub states: u32,
    /// Kernel-side filter; `None` dumps every socket.
    pub filter: Option<Filter>,
    /// Dump IPv4 sockets.
    pub ipv4: bool,
    /// Dump IPv6 sockets (including IPv4-mapped ones).
    pub ipv6: bool,
}

impl Default for DumpRequest {
    fn default() -> Self {
        DumpRequest { states: wire::ALL_STATES, filter: None, ipv4: true, ipv6: true }
    }
}

/// Counters of one dump.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DumpStats {
    /// Sockets returned by the kernel.
    pub sockets: u64,
    /// Reply datagrams received.
    pub batches: u64,
    /// Bytes received.
    pub bytes: u64,
}

/// A reusable sock_diag client bound to one network namespace.
#[derive(Debug)]
pub struct Dumper {
    sock: NetlinkSocket,
    buf: Vec<u8>,
    seq: u32,
    any_family: bool,
}

impl Dumper {
    /// A client for the current network namespace.
    pub fn new() -> Result<Dumper, DiagError> {
        Ok(Dumper::with_socket(NetlinkSocket::open().map_err(DiagError::Open)?))
    }

    /// A client for the named network namespace (`/run/netns/NAME`).
    pub fn in_netns(name: &str) -> Result<Dumper, DiagError> {
        let path = PathBuf::from("/run/netns").join(name);
        let sock = NetlinkSocket::open_in_netns(&path)
            .map_err(|source| DiagError::Netns { path, source })?;
        Ok(Dumper::with_socket(sock))
    }

    fn with_socket(sock: NetlinkSocket) -> Dumper {
        Dumper { sock, buf: vec![0; 32 * 1024], seq: 0, any_family: true }
    }

    /// Dumps the requested sockets, calling `each` for every one. The `Socket` borrows the
    /// receive buffer and is only valid during the call.
    ///
    /// Both families are dumped with one `TCPDIAG_GETSOCK` request (one walk of the kernel's
    /// hash tables instead of two); a kernel that refuses it gets one `SOCK_DIAG_BY_FAMILY`
    /// request per family, and later dumps go straight to that.
    pub fn dump(
        &mut self,
        req: &DumpRequest,
        mut each: impl FnMut(&Socket<'_>),
    ) -> Result<DumpStats, DiagError> {
        let code = req.filter.as_ref().and_then(Filter::bytecode);
        let mut stats = DumpStats::default();
        if req.ipv4 && req.ipv6 && self.any_family {
            self.seq = self.seq.wrapping_add(1);
            let msg = wire::dump_request_any_family(req.states, self.seq, code.as_deref());
            match self.run(&msg, &mut stats, &mut each) {
                Err(DiagError::Kernel(_)) if stats.sockets == 0 => self.any_family = false,
                other => return other.map(|()| stats),
            }
        }
        let families = [(req.ipv4, libc::AF_INET as u8), (req.ipv6, libc::AF_INET6 as u8)];
        for (_, family) in families.into_iter().filter(|(on, _)| *on) {
            self.seq = self.seq.wrapping_add(1);
            let msg = wire::dump_request(family, req.states, self.seq, code.as_deref());
            self.run(&msg, &mut stats, &mut each)?;
        }
        Ok(stats)
    }

    fn run(
        &mut self,
        msg: &[u8],
        stats: &mut DumpStats,
        each: &mut impl FnMut(&Socket<'_>),
    ) -> Result<(), DiagError> {
        self.sock.send(msg).map_err(DiagError::Io)?;
        loop {
            let n = self.sock.recv(&mut self.buf).map_err(DiagError::Io)?;
            stats.batches += 1;
            stats.bytes += n as u64;
            for m in wire::messages(&self.buf[..n]) {
                match m? {
                    Message::Socket(s) => {
                        stats.sockets += 1;
                        each(&s);
                    }
                    Message::Done => return Ok(()),
                    Message::Error(0) | Message::Other(_) => {}
                    Message::Error(errno) => {
                        return Err(DiagError::Kernel(io::Error::from_raw_os_error(-errno)));
                    }
                }
            }
            if n == 0 {
                return Ok(());
            }
        }
    }

    /// Dumps into owned [`crate::Connection`]s.
    pub fn collect(&mut self, req: &DumpRequest) -> Result<Vec<crate::Connection>, DiagError> {
        let mut out = Vec::new();
        self.dump(req, |s| out.push(crate::Connection::from_socket(s)))?;
        Ok(out)
    }

    /// Dumps once capturing the raw reply datagrams (for test fixtures).
    pub fn capture(&mut self, req: &DumpRequest) -> Result<Vec<Vec<u8>>, DiagError> {
        let code = req.filter.as_ref().and_then(Filter::bytecode);
        let mut out = Vec::new();
        let families = [(req.ipv4, libc::AF_INET as u8), (req.ipv6, libc::AF_INET6 as u8)];
        for (_, family) in families.into_iter().filter(|(on, _)| *on) {
            self.seq = self.seq.wrapping_add(1);
            let msg = wire::dump_request(family, req.states, self.seq, code.as_deref());
            self.sock.send(&msg).map_err(DiagError::Io)?;
            loop {
                let n = self.sock.recv(&mut self.buf).map_err(DiagError::Io)?;
                out.push(self.buf[..n].to_vec());
                let done = wire::messages(&self.buf[..n])
                    .any(|m| matches!(m, Ok(Message::Done) | Ok(Message::Error(_)) | Err(_)));
                if done || n == 0 {
                    break;
                }
            }
        }
        Ok(out)
    }
}
