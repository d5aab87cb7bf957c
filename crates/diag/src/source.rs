//! Where a dump comes from: sock_diag ([`Dumper`]) or the BPF socket iterator
//! ([`IterDumper`]), chosen by the user (`--source bpf|sock-diag|auto`) or, for `auto`, by what
//! the host allows. Both give the same [`Socket`]s, so a consumer is written once against
//! [`Dump`].
//!
//! `auto` keeps both and routes each request to the cheaper one, as `scripts/bench-exporter`
//! measured them (Linux 6.18, 20,000-60,000 sockets): a dump of the whole table (no filter)
//! costs ~1.0 us per socket through the iterator against ~1.2 us through sock_diag. A filtered
//! dump goes to sock_diag: its kernel walk skips a socket its bytecode rejects for ~0.14 us,
//! where the iterator's walk alone costs ~0.5 us per socket (it locks each socket and runs the
//! program on it) even with the filter inside the program, which then copies only the sockets
//! that match (a scrape of 100 of 20,000 sockets: 2.9 ms through sock_diag, 10 ms through the
//! iterator). `--source bpf` uses the iterator, filter in the program, for every dump.
//!
//! A scrape with aggregates ([`Dump::dump_for_scrape`]) through the iterator gets the sockets
//! no selector matches as [`Brief`] records (what the aggregates read, nine `tcp_sock` fields):
//! ~0.65 us per socket against ~1.0 us with full records, ~0.14x `ss -tin`.

use std::fmt;
use std::str::FromStr;

use crate::bpf::{BpfError, IterDumper};
use crate::dump::{DiagError, DumpRequest, DumpStats, Dumper};
use crate::filter::Filter;
use crate::wire::Socket;
use tcptail_sock::tcp_info::TcpInfo;

/// A dump of sockets, whichever the source.
pub trait Dump {
    /// Dumps `req`, calling `each` for every socket; `tcp_info` is decoded into
    /// [`Socket::info`] only when `decode_info` ([`Socket::info_raw`] always holds it).
    fn dump_with(
        &mut self,
        req: &DumpRequest,
        decode_info: bool,
        each: &mut dyn FnMut(&Socket<'_>),
    ) -> Result<DumpStats, DiagError>;

    /// Dumps `req` (`tcp_info` decoded) for a scrape whose selectors' union is `selected`:
    /// every socket `selected` matches goes to [`ScrapeSink::socket`], and the others too or,
    /// where the source can make them cheaper, to [`ScrapeSink::brief`] ([`IterDumper`] for
    /// a request without a filter). `stats.sockets` counts both.
    fn dump_for_scrape(
        &mut self,
        req: &DumpRequest,
        selected: Option<&Filter>,
        sink: &mut dyn ScrapeSink,
    ) -> Result<DumpStats, DiagError> {
        let _ = selected;
        self.dump_with(req, true, &mut |s| sink.socket(s))
    }
}

impl Dump for Dumper {
    fn dump_with(
        &mut self,
        req: &DumpRequest,
        decode_info: bool,
        each: &mut dyn FnMut(&Socket<'_>),
    ) -> Result<DumpStats, DiagError> {
        if decode_info { self.dump(req, each) } else { self.dump_undecoded(req, each) }
    }

    /// `tcp_info` is decoded in full only for the sockets `selected` matches; the others are
    /// brief, with the few fields the aggregates read ([`TcpInfo::parse_delay_inputs`]).
    fn dump_for_scrape(
        &mut self,
        req: &DumpRequest,
        selected: Option<&Filter>,
        sink: &mut dyn ScrapeSink,
    ) -> Result<DumpStats, DiagError> {
        let Some(selected) = selected.filter(|_| req.attrs.info) else {
            return self.dump(req, |s| sink.socket(s));
        };
        self.dump_undecoded(req, |s| {
            if selected.matches(&s.id) {
                let decoded = Socket { info: TcpInfo::parse(s.info_raw).ok(), ..s.clone() };
                sink.socket(&decoded);
            } else {
                let info = TcpInfo::parse_delay_inputs(s.info_raw).ok();
                sink.brief(&Brief { state: s.state, cong: s.cong, info });
            }
        })
    }
}

impl Dump for IterDumper {
    fn dump_with(
        &mut self,
        req: &DumpRequest,
        decode_info: bool,
        each: &mut dyn FnMut(&Socket<'_>),
    ) -> Result<DumpStats, DiagError> {
        let stats = if decode_info { self.dump(req, each) } else { self.dump_undecoded(req, each) };
        stats.map_err(DiagError::from)
    }

    fn dump_for_scrape(
        &mut self,
        req: &DumpRequest,
        selected: Option<&Filter>,
        sink: &mut dyn ScrapeSink,
    ) -> Result<DumpStats, DiagError> {
        self.dump_briefly(req, selected, sink).map_err(DiagError::from)
    }
}

/// What a scrape's aggregates need of a socket no selector matches
/// ([`Dump::dump_for_scrape`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Brief<'a> {
    /// The state as sock_diag reports it (`tcp_states.h`).
    pub state: u8,
    /// The congestion control, for a full socket that has one.
    pub cong: Option<&'a str>,
    /// For a full socket: `tcp_info`'s state, `rtt_us` and the inputs of
    /// [`TcpInfo::send_queue_delay`] as a full dump gives them; every other field its
    /// default.
    pub info: Option<TcpInfo>,
}

/// Where [`Dump::dump_for_scrape`] delivers: full sockets and brief ones.
pub trait ScrapeSink {
    /// A socket as [`Dump::dump_with`] gives it.
    fn socket(&mut self, s: &Socket<'_>);
    /// A socket no selector matches, briefly.
    fn brief(&mut self, b: &Brief<'_>);
}

/// Which source the user asked for.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum SourceChoice {
    /// The BPF iterator where the host allows it, else sock_diag.
    #[default]
    Auto,
    /// The BPF iterator, or an error.
    Bpf,
    /// sock_diag.
    SockDiag,
}

impl FromStr for SourceChoice {
    type Err = String;

    fn from_str(s: &str) -> Result<SourceChoice, String> {
        match s {
            "auto" => Ok(SourceChoice::Auto),
            "bpf" => Ok(SourceChoice::Bpf),
            "sock-diag" | "sock_diag" => Ok(SourceChoice::SockDiag),
            _ => Err(format!("unknown dump source {s:?}: use bpf, sock-diag or auto")),
        }
    }
}

impl fmt::Display for SourceChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SourceChoice::Auto => "auto",
            SourceChoice::Bpf => "bpf",
            SourceChoice::SockDiag => "sock-diag",
        })
    }
}

/// An open source of dumps.
#[derive(Debug)]
pub enum SocketSource {
    /// sock_diag.
    SockDiag(Dumper),
    /// The BPF socket iterator (boxed: its layout tables are a kilobyte).
    Bpf(Box<IterDumper>),
    /// Both: whole-table dumps through the iterator, filtered ones through sock_diag.
    Auto {
        /// For requests with a filter.
        diag: Dumper,
        /// For requests without one.
        iter: Box<IterDumper>,
    },
}

/// A source opened by [`SocketSource::open`], with why `auto` fell back to sock_diag.
#[derive(Debug)]
pub struct Opened {
    /// The source.
    pub source: SocketSource,
    /// Set when `auto` could not use the iterator: the reason, for one line to the user.
    pub fell_back: Option<BpfError>,
}

impl SocketSource {
    /// Opens `choice` in this network namespace or the named one (`/run/netns/NAME`).
    pub fn open(choice: SourceChoice, netns: Option<&str>) -> Result<Opened, DiagError> {
        let diag = || match netns {
            Some(name) => Dumper::in_netns(name),
            None => Dumper::new(),
        };
        let iter = || match netns {
            Some(name) => IterDumper::in_netns(name),
            None => IterDumper::new(),
        };
        let opened = |source| Opened { source, fell_back: None };
        match choice {
            SourceChoice::SockDiag => Ok(opened(SocketSource::SockDiag(diag()?))),
            SourceChoice::Bpf => Ok(opened(SocketSource::Bpf(Box::new(iter()?)))),
            SourceChoice::Auto => match iter() {
                Ok(iter) => Ok(opened(SocketSource::Auto { diag: diag()?, iter: Box::new(iter) })),
                // A namespace that cannot be opened fails sock_diag the same way: say so.
                Err(e @ BpfError::Netns { .. }) => Err(e.into()),
                Err(e) => {
                    Ok(Opened { source: SocketSource::SockDiag(diag()?), fell_back: Some(e) })
                }
            },
        }
    }

    /// `bpf`, `sock-diag` or `auto`.
    pub fn name(&self) -> &'static str {
        match self {
            SocketSource::SockDiag(_) => "sock-diag",
            SocketSource::Bpf(_) => "bpf",
            SocketSource::Auto { .. } => "auto",
        }
    }

    /// The source that dumps `req`: `auto` sends filtered requests to sock_diag, which
    /// measured cheaper for them than the iterator (`scripts/bench-exporter`).
    fn for_request(&mut self, req: &DumpRequest) -> &mut dyn Dump {
        match self {
            SocketSource::SockDiag(d) => d,
            SocketSource::Bpf(d) => d.as_mut(),
            SocketSource::Auto { diag, .. } if req.filter.is_some() => diag,
            SocketSource::Auto { iter, .. } => iter.as_mut(),
        }
    }

    /// Dumps `req` with `tcp_info` decoded, like [`Dumper::dump`].
    pub fn dump(
        &mut self,
        req: &DumpRequest,
        mut each: impl FnMut(&Socket<'_>),
    ) -> Result<DumpStats, DiagError> {
        self.dump_with(req, true, &mut each)
    }

    /// Dumps into owned [`crate::Connection`]s.
    pub fn collect(&mut self, req: &DumpRequest) -> Result<Vec<crate::Connection>, DiagError> {
        let mut out = Vec::new();
        self.dump(req, |s| out.push(crate::Connection::from_socket(s)))?;
        Ok(out)
    }
}

impl Dump for SocketSource {
    fn dump_with(
        &mut self,
        req: &DumpRequest,
        decode_info: bool,
        each: &mut dyn FnMut(&Socket<'_>),
    ) -> Result<DumpStats, DiagError> {
        self.for_request(req).dump_with(req, decode_info, each)
    }

    fn dump_for_scrape(
        &mut self,
        req: &DumpRequest,
        selected: Option<&Filter>,
        sink: &mut dyn ScrapeSink,
    ) -> Result<DumpStats, DiagError> {
        self.for_request(req).dump_for_scrape(req, selected, sink)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_parse_and_print() {
        for c in [SourceChoice::Auto, SourceChoice::Bpf, SourceChoice::SockDiag] {
            assert_eq!(c.to_string().parse::<SourceChoice>().unwrap(), c);
        }
        let e = "netlink".parse::<SourceChoice>().unwrap_err();
        assert!(e.contains("bpf, sock-diag or auto"), "{e}");
    }
}
