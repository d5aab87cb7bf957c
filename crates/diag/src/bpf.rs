//! Dumping TCP sockets with a BPF socket iterator (`iter/tcp`) instead of sock_diag: a small
//! program, assembled here from the running kernel's BTF (no compiler involved), visits every
//! socket of the network namespace and writes one fixed-size record of raw kernel fields per
//! selected socket; user space reads the records in large batches and rebuilds the very
//! [`Socket`] a sock_diag dump gives, `struct tcp_info` included, so every consumer (exporter,
//! recorder, `top`) works unchanged.
//!
//! Why: sock_diag pays per socket for a netlink message, attribute framing, and a full
//! `tcp_info` fill under the socket lock; the iterator copies ~100 fields straight into a
//! `seq_file` buffer. `scripts/bench-exporter` measures both in one run.
//!
//! Needs: root (CAP_BPF + CAP_PERFMON + CAP_SYS_ADMIN for the iterator), kernel BTF at
//! `/sys/kernel/btf/vmlinux`, `bpf_iter_tcp`, the kernel's tick rate (`CONFIG_HZ`, from
//! `/proc/config.gz` or `/boot/config-RELEASE`), a little-endian CPU. Without any of them
//! [`IterDumper::new`] returns [`BpfError::Unavailable`] naming what is missing, and callers
//! fall back to sock_diag.
//!
//! What differs from sock_diag, by design or by necessity:
//! - `inode` is read as `sk_socket->file->f_inode->i_ino` (BTF pointer loads; `sock_i_ino`
//!   reaches the same inode through `struct socket_alloc`, outside any type the verifier lets
//!   a load leave): equal for every socket a process holds, 0 for a kernel socket without a
//!   file; the uid comes from the iterator's context as sock_diag's does.
//! - `tcpi_ato` uses the socket's `icsk_rto_min`, not a route's locked `rto_min` metric.
//! - Request sockets (`SYN_RECV`) carry their header (addresses, ports, state, cookie) but no
//!   timer; TIME_WAIT sockets carry their substate and timer as sock_diag reports them.
//! - Fields newer than this crate knows are absent (`tcp_info` ends at [`TcpInfo::KNOWN_LEN`]).
//! - The port/address filter runs in the program ([`select`]), so a filtered dump copies only
//!   the sockets it selects; a filter too large to compile ([`select::expressible`]) is
//!   evaluated in user space ([`Filter::matches`]) after the program has copied every socket.

/// The instruction assembler, from `tcptail-bpf` (one for the whole workspace).
pub use tcptail_bpf::asm;
pub mod btf;
pub mod convert;
pub mod dirty;
pub mod fields;
pub mod program;
pub mod record;
pub mod select;
pub mod tracked;
pub mod witness;

use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::path::PathBuf;

use tcptail_sock::tcp_info::TcpInfo;

use crate::dump::{DumpRequest, DumpStats};
use crate::filter::Filter;
use crate::wire::{Attrs, Socket};
use btf::Btf;
use convert::Hz;
use record::{Layout, header};
use select::Selection;

/// Why the iterator cannot be used or a dump failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BpfError {
    /// This host cannot run the iterator (no BTF, no privileges, an older kernel, unknown HZ):
    /// use sock_diag.
    #[error("the BPF socket iterator is unavailable: {0}")]
    Unavailable(String),
    /// The kernel's verifier rejected the generated program (a bug: please report the log).
    #[error("the kernel rejected the socket iterator program: {source}\nverifier log:\n{log}")]
    Rejected {
        /// The load error.
        #[source]
        source: io::Error,
        /// The verifier's log.
        log: String,
    },
    /// Opening or reading an iteration failed.
    #[error("reading the BPF socket iterator failed")]
    Io(#[source] io::Error),
    /// The named network namespace could not be joined.
    #[error("cannot open a socket iterator in network namespace {path}")]
    Netns {
        /// `/run/netns/NAME`.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
}

/// A loaded, linked iterator program for one selection.
#[derive(Debug)]
struct Linked {
    selection: Selection,
    link: OwnedFd,
    /// Kept open: the link holds the program, this keeps its id stable for tools.
    _prog: OwnedFd,
}

/// A reusable socket-iterator client bound to one network namespace.
#[derive(Debug)]
pub struct IterDumper {
    layout: Layout,
    hz: Hz,
    info_len: usize,
    attach_btf_id: u32,
    /// The programs of the last few selections, most recent first (a consumer alternating
    /// requests does not reload a program per dump).
    linked: Vec<Linked>,
    /// The benchmark's minimal program ([`IterDumper::read_minimal`]).
    minimal: Option<Linked>,
    netns: Option<PathBuf>,
    buf: Vec<u8>,
    info: Box<[u8; TcpInfo::KNOWN_LEN]>,
}

/// The kernel's `CONFIG_HZ`, from its config.
fn kernel_hz() -> Result<Hz, BpfError> {
    let mut text = String::new();
    if let Ok(f) = std::fs::File::open("/proc/config.gz") {
        let _ = flate2::read::GzDecoder::new(f).read_to_string(&mut text);
    }
    if text.is_empty() {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        text =
            std::fs::read_to_string(format!("/boot/config-{}", release.trim())).unwrap_or_default();
    }
    text.lines()
        .find_map(|l| l.strip_prefix("CONFIG_HZ="))
        .and_then(|v| v.trim().parse().ok())
        .filter(|&hz: &u32| hz > 0)
        .map(Hz)
        .ok_or_else(|| {
            BpfError::Unavailable(
                "the kernel's CONFIG_HZ is unknown (no /proc/config.gz or /boot/config-RELEASE)"
                    .into(),
            )
        })
}

/// `1 << state` bits the program passes: sock_diag's `TCPF_SYN_RECV` covers request sockets
/// (`TCP_NEW_SYN_RECV`) too.
fn kernel_states(states: u32) -> u32 {
    if states & (1 << 3) != 0 { states | 1 << 12 } else { states }
}

impl IterDumper {
    /// An iterator client for the current network namespace.
    pub fn new() -> Result<IterDumper, BpfError> {
        if cfg!(target_endian = "big") {
            return Err(BpfError::Unavailable("big-endian CPU (bitfield layout)".into()));
        }
        let blob = std::fs::read("/sys/kernel/btf/vmlinux").map_err(|e| {
            BpfError::Unavailable(format!("no kernel BTF at /sys/kernel/btf/vmlinux ({e})"))
        })?;
        let unavailable = |e: btf::BtfError| BpfError::Unavailable(format!("kernel BTF: {e}"));
        let btf = Btf::parse(&blob).map_err(unavailable)?;
        let attach_btf_id = btf.func_id("bpf_iter_tcp").map_err(unavailable)?;
        let layout = Layout::new(&btf).map_err(unavailable)?;
        let info_len = btf.struct_size("tcp_info").map_err(unavailable)? as usize;
        let hz = kernel_hz()?;
        let buf = vec![0; (64 * 1024usize).next_multiple_of(layout.record_len)];
        let mut d = IterDumper {
            layout,
            hz,
            info_len,
            attach_btf_id,
            linked: Vec::new(),
            minimal: None,
            netns: None,
            buf,
            info: Box::new([0; TcpInfo::KNOWN_LEN]),
        };
        // Load now, so a host that cannot run it is found out before the first dump.
        d.link_for(Selection {
            states: kernel_states(crate::wire::ESTABLISHED),
            ipv4: true,
            ipv6: true,
            filter: None,
            attrs: crate::wire::Attrs::ALL,
            brief: false,
        })?;
        Ok(d)
    }

    /// An iterator client for the named network namespace (`/run/netns/NAME`).
    pub fn in_netns(name: &str) -> Result<IterDumper, BpfError> {
        let path = PathBuf::from("/run/netns").join(name);
        if let Err(source) = std::fs::metadata(&path) {
            return Err(BpfError::Netns { path, source });
        }
        let mut d = IterDumper::new()?;
        d.netns = Some(path);
        Ok(d)
    }

    /// The size of one record, bytes.
    pub fn record_len(&self) -> usize {
        self.layout.record_len
    }

    /// How many linked programs are kept.
    const LINKS_KEPT: usize = 4;

    /// Links the program of `selection` (reusing a kept one) and moves it to the front.
    fn link_for(&mut self, selection: Selection) -> Result<(), BpfError> {
        if let Some(i) = self.linked.iter().position(|l| l.selection == selection) {
            let kept = self.linked.remove(i);
            self.linked.insert(0, kept);
            return Ok(());
        }
        let insns = self
            .layout
            .program(&selection)
            .ok_or_else(|| BpfError::Unavailable("a BBR field straddles a word".into()))?;
        let prog = load_iter_program(&insns, self.attach_btf_id).map_err(
            |tcptail_bpf::LoadError { source, log }| match source.raw_os_error() {
                Some(libc::EPERM) | Some(libc::EACCES) => BpfError::Unavailable(format!(
                    "loading a BPF program needs CAP_BPF and CAP_PERFMON ({source})"
                )),
                Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP) => {
                    BpfError::Unavailable(format!("loading a BPF program: {source}"))
                }
                _ => BpfError::Rejected { source, log },
            },
        )?;
        let link = link_iter(&prog)
            .map_err(|e| BpfError::Unavailable(format!("linking the iterator: {e}")))?;
        self.linked.truncate(Self::LINKS_KEPT - 1);
        self.linked.insert(0, Linked { selection, link, _prog: prog });
        Ok(())
    }

    /// What the program selects for `req`: its states and families, and its filter when the
    /// program can evaluate it.
    fn selection_of(req: &DumpRequest) -> Selection {
        Selection {
            states: kernel_states(req.states),
            ipv4: req.ipv4,
            ipv6: req.ipv6,
            filter: req.filter.clone().filter(select::expressible),
            attrs: req.attrs,
            brief: false,
        }
    }

    /// Dumps the requested sockets, calling `each` for every one, like
    /// [`crate::Dumper::dump`]. `req.attrs` limits what is rebuilt, not what is read.
    pub fn dump(
        &mut self,
        req: &DumpRequest,
        mut each: impl FnMut(&Socket<'_>),
    ) -> Result<DumpStats, BpfError> {
        self.dump_decoding(req, true, &mut each)
    }

    /// [`IterDumper::dump`] leaving `tcp_info` undecoded ([`Socket::info_raw`] only), like
    /// [`crate::Dumper::dump_undecoded`].
    pub fn dump_undecoded(
        &mut self,
        req: &DumpRequest,
        mut each: impl FnMut(&Socket<'_>),
    ) -> Result<DumpStats, BpfError> {
        self.dump_decoding(req, false, &mut each)
    }

    fn dump_decoding(
        &mut self,
        req: &DumpRequest,
        decode_info: bool,
        each: &mut impl FnMut(&Socket<'_>),
    ) -> Result<DumpStats, BpfError> {
        let mut stats = DumpStats::default();
        if !req.ipv4 && !req.ipv6 {
            return Ok(stats);
        }
        let selection = Self::selection_of(req);
        // The program filtered: user space need not.
        let filtered = selection.filter.is_some();
        let iter = self.open_iter(selection)?;
        let IterDumper { layout, hz, info_len, buf, info, .. } = self;
        let mut sockets = 0;
        read_iter(&iter, buf, Lens::fixed(layout.record_len), &mut stats, |record| {
            if convert_one(layout, *hz, *info_len, record, info, req, filtered, decode_info, each) {
                sockets += 1;
            }
        })?;
        stats.sockets = sockets;
        Ok(stats)
    }

    /// A dump of `req` for a scrape whose selectors' union is `selected`: the sockets it
    /// matches go to `sink` as [`IterDumper::dump`] gives them, every other one as a brief
    /// record ([`record::brief`]: what the scrape's aggregates read, for a fraction
    /// of a full record's cost). A request with its own filter, no `selected` filter or one
    /// the program cannot split on ([`select::depends_on_the_socket`]) is a plain dump.
    pub fn dump_briefly(
        &mut self,
        req: &DumpRequest,
        selected: Option<&Filter>,
        sink: &mut dyn crate::source::ScrapeSink,
    ) -> Result<DumpStats, BpfError> {
        let Some(selection) = Self::brief_selection(req, selected) else {
            return self.dump_decoding(req, true, &mut |s| sink.socket(s));
        };
        let iter = self.open_iter(selection)?;
        let IterDumper { layout, hz, info_len, buf, info, .. } = self;
        let mut stats = DumpStats::default();
        let mut sockets = 0;
        let lens = Lens { full: layout.record_len, brief: Some(layout.brief_len) };
        read_iter(&iter, buf, lens, &mut stats, |record| {
            sockets += 1;
            scrape_one(layout, *hz, *info_len, record, info, req, sink);
        })?;
        stats.sockets = sockets;
        Ok(stats)
    }

    /// The selection of [`IterDumper::dump_briefly`] when it splits.
    fn brief_selection(req: &DumpRequest, selected: Option<&Filter>) -> Option<Selection> {
        let split = selected
            .filter(|f| req.filter.is_none() && req.attrs.info && select::depends_on_the_socket(f));
        let (Some(selected), true) = (split, req.ipv4 || req.ipv6) else {
            return None;
        };
        Some(Selection { filter: Some(selected.clone()), brief: true, ..Self::selection_of(req) })
    }

    /// Reads the iteration [`IterDumper::dump_briefly`] would, appending the records to
    /// `into` unconverted (for the benchmark: the kernel's share of a scrape). Sockets read.
    pub fn read_scrape_records(
        &mut self,
        req: &DumpRequest,
        selected: Option<&Filter>,
        into: &mut Vec<u8>,
    ) -> Result<u64, BpfError> {
        let selection = Self::brief_selection(req, selected).unwrap_or(Self::selection_of(req));
        let lens = Lens {
            full: self.layout.record_len,
            brief: selection.brief.then_some(self.layout.brief_len),
        };
        let iter = self.open_iter(selection)?;
        let mut stats = DumpStats::default();
        let mut sockets = 0;
        read_iter(&iter, &mut self.buf, lens, &mut stats, |r| {
            sockets += 1;
            into.extend_from_slice(r);
        })?;
        Ok(sockets)
    }

    /// Delivers records read by [`IterDumper::read_scrape_records`] as
    /// [`IterDumper::dump_briefly`] does (for the benchmark: user space's share).
    pub fn scrape_records(
        &mut self,
        records: &[u8],
        req: &DumpRequest,
        selected: Option<&Filter>,
        sink: &mut dyn crate::source::ScrapeSink,
    ) {
        let brief = Self::brief_selection(req, selected).is_some();
        let IterDumper { layout, hz, info_len, info, .. } = self;
        let lens = Lens { full: layout.record_len, brief: brief.then_some(layout.brief_len) };
        let mut at = 0;
        while let Some(len) = lens.of(&records[at..]).filter(|len| at + len <= records.len()) {
            scrape_one(layout, *hz, *info_len, &records[at..at + len], info, req, sink);
            at += len;
        }
    }

    fn open_iter(&mut self, selection: Selection) -> Result<OwnedFd, BpfError> {
        self.link_for(selection)?;
        let Some(Linked { link, .. }) = self.linked.first() else {
            return Err(BpfError::Unavailable("no linked iterator program".into()));
        };
        match &self.netns {
            None => tcptail_bpf::iter_create(link).map_err(BpfError::Io),
            Some(path) => tcptail_bpf::iter_create_in_netns(link, path)
                .map_err(|source| BpfError::Netns { path: path.clone(), source }),
        }
    }

    /// Reads one iteration as [`IterDumper::dump`] of `req` would (the same program), handing
    /// each raw record to `each` unconverted (for the benchmark: the iterator's kernel share).
    /// `stats.sockets` counts records.
    pub fn read_records(
        &mut self,
        req: &DumpRequest,
        mut each: impl FnMut(&[u8]),
    ) -> Result<DumpStats, BpfError> {
        let iter = self.open_iter(Self::selection_of(req))?;
        let mut stats = DumpStats::default();
        let len = self.layout.record_len;
        read_iter(&iter, &mut self.buf, Lens::fixed(len), &mut stats, &mut each)?;
        stats.sockets = stats.bytes / len as u64;
        Ok(stats)
    }

    /// One iteration with [`record::Layout::minimal_program`] (16 bytes per socket, read and
    /// dropped): the floor of an iterator dump, for the benchmark. Sockets returned.
    pub fn read_minimal(&mut self, states: u32) -> Result<u64, BpfError> {
        let states = kernel_states(states);
        if self.minimal.as_ref().is_none_or(|l| l.selection.states != states) {
            let insns = self.layout.minimal_program(states).ok_or_else(|| {
                BpfError::Unavailable("the minimal program did not assemble".into())
            })?;
            let prog = load_iter_program(&insns, self.attach_btf_id).map_err(
                |tcptail_bpf::LoadError { source, log }| BpfError::Rejected { source, log },
            )?;
            let link = link_iter(&prog).map_err(BpfError::Io)?;
            let selection = Selection {
                states,
                ipv4: true,
                ipv6: true,
                filter: None,
                attrs: Attrs::NONE,
                brief: false,
            };
            self.minimal = Some(Linked { selection, link, _prog: prog });
        }
        let Some(Linked { link, .. }) = &self.minimal else {
            return Err(BpfError::Unavailable("no linked minimal program".into()));
        };
        let iter = tcptail_bpf::iter_create(link).map_err(BpfError::Io)?;
        let mut stats = DumpStats::default();
        read_iter(&iter, &mut self.buf, Lens::fixed(16), &mut stats, |r| {
            std::hint::black_box(r);
        })?;
        Ok(stats.bytes / 16)
    }

    /// Converts records captured by [`IterDumper::read_records`] as a dump of `req` would,
    /// calling `each` for every socket `req` selects; the number of those.
    pub fn convert_records(
        &mut self,
        records: &[u8],
        req: &DumpRequest,
        decode_info: bool,
        mut each: impl FnMut(&Socket<'_>),
    ) -> u64 {
        let IterDumper { layout, hz, info_len, info, .. } = self;
        let len = layout.record_len;
        let mut n = 0;
        for record in records.chunks_exact(len) {
            if convert_one(layout, *hz, *info_len, record, info, req, false, decode_info, &mut each)
            {
                n += 1;
            }
        }
        n
    }
}

/// Converts one record and hands it to `each` if `req` selects it; whether it did.
#[allow(clippy::too_many_arguments)]
fn convert_one(
    layout: &Layout,
    hz: Hz,
    info_len: usize,
    record: &[u8],
    info: &mut [u8; TcpInfo::KNOWN_LEN],
    req: &DumpRequest,
    program_filtered: bool,
    decode_info: bool,
    each: &mut impl FnMut(&Socket<'_>),
) -> bool {
    // The filter first, on the identity alone, unless the program applied it.
    let (family, id) = convert::identity(layout, record);
    let family_ok = if family == libc::AF_INET6 as u8 { req.ipv6 } else { req.ipv4 };
    let matches =
        || program_filtered || req.filter.as_ref().is_none_or(|f: &Filter| f.matches(&id));
    if !family_ok || !matches() {
        return false;
    }
    let sock =
        convert::socket((family, id), layout, hz, info_len, record, info, req.attrs, decode_info);
    each(&sock);
    true
}

/// Hands one record of a scrape's iteration to `sink`: a brief one as it is, a full one as
/// its socket.
fn scrape_one(
    layout: &Layout,
    hz: Hz,
    info_len: usize,
    record: &[u8],
    info: &mut [u8; TcpInfo::KNOWN_LEN],
    req: &DumpRequest,
    sink: &mut dyn crate::source::ScrapeSink,
) {
    if record[header::KIND] != 0 {
        sink.brief(&convert::brief(layout, info_len, record));
    } else {
        let each = &mut |s: &Socket<'_>| sink.socket(s);
        convert_one(layout, hz, info_len, record, info, req, true, true, each);
    }
}

/// Loads `insns` as the `BPF_PROG_TYPE_TRACING` program of the BPF iterator whose
/// `bpf_iter_<target>` function has BTF id `attach_btf_id`.
fn load_iter_program(insns: &[u64], attach_btf_id: u32) -> Result<OwnedFd, tcptail_bpf::LoadError> {
    tcptail_bpf::prog_load(&tcptail_bpf::ProgLoad {
        prog_type: tcptail_bpf::PROG_TYPE_TRACING,
        insns,
        license: c"Dual MIT/GPL",
        name: "tcptail_tcp",
        expected_attach_type: tcptail_bpf::TRACE_ITER,
        attach_btf_id,
    })
}

/// Links a loaded iterator program (`BPF_LINK_CREATE` with `BPF_TRACE_ITER`).
fn link_iter(prog: &OwnedFd) -> io::Result<OwnedFd> {
    tcptail_bpf::link_create(prog, 0, tcptail_bpf::TRACE_ITER, 0)
}

/// The lengths of an iteration's records.
#[derive(Debug, Clone, Copy)]
struct Lens {
    /// Every record's, or a full record's when `brief` is set.
    full: usize,
    /// A brief record's: records are then told apart by [`header::KIND`].
    brief: Option<usize>,
}

impl Lens {
    fn fixed(len: usize) -> Lens {
        Lens { full: len, brief: None }
    }

    /// The length of the record starting `rest`, if enough of it is there to tell.
    fn of(self, rest: &[u8]) -> Option<usize> {
        match self.brief {
            None => Some(self.full),
            Some(brief) => match rest.get(header::KIND)? {
                0 => Some(self.full),
                _ => Some(brief),
            },
        }
    }
}

/// Reads an iteration to its end in `buf`-sized reads, handing whole records to `each` (a
/// read may end inside a record: its start waits for the next read).
fn read_iter(
    iter: &OwnedFd,
    buf: &mut [u8],
    lens: Lens,
    stats: &mut DumpStats,
    mut each: impl FnMut(&[u8]),
) -> Result<(), BpfError> {
    let mut filled = 0;
    loop {
        let n = tcptail_bpf::read(iter, &mut buf[filled..]).map_err(BpfError::Io)?;
        if n == 0 {
            return Ok(());
        }
        stats.batches += 1;
        stats.bytes += n as u64;
        filled += n;
        let mut at = 0;
        while let Some(len) = lens.of(&buf[at..filled]).filter(|len| at + len <= filled) {
            each(&buf[at..at + len]);
            at += len;
        }
        buf.copy_within(at..filled, 0);
        filled -= at;
    }
}
