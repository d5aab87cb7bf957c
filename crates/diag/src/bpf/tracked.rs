//! The tracked-sockets poll: the flight recorder's cheap path. Instead of walking the whole
//! socket table every poll (sock_diag or `iter/tcp`, which visits and locks every socket of
//! the namespace), each selected connection gets a socket-storage entry
//! ([`tcptail_bpf::Map::create_sk_storage`]) and a poll walks only those entries
//! (`iter/bpf_sk_storage_map`).
//!
//! - **Tracking.** At start one `iter/tcp` walk gives every selected established socket its
//!   entry; afterwards a `tp_btf/inet_sock_set_state` program gives one to each socket that
//!   enters `ESTABLISHED` (active and passive opens both pass there) in the recorder's network
//!   namespace (`skc_net->ns.inum`) and matching its filter. The program is attached before
//!   the walk, so no connection falls between them. An entry is freed with its socket.
//! - **Dirty polls and sweeps.** Tracepoint programs mark a tracked socket dirty when it may
//!   have changed ([`super::dirty`]); [`TrackedDumper::poll_dirty`] visits only the marked
//!   sockets, so idle connections cost nothing. [`TrackedDumper::poll`], the sweep, visits
//!   every tracked socket as described next; the recorder sweeps at its first poll and every
//!   sweep period, which records what no hook marks ([`super::dirty::UNHOOKED`]).
//! - **Exact change detection, cheaply.** The entry holds the socket's last written record
//!   (the [`Layout`] record `iter/tcp` writes) and its change witness
//!   ([`super::witness`]: a few dozen kernel words on a few cache lines that move whenever a
//!   record value can, with a rebuild flag). Each poll reads the witness first; only a
//!   socket whose witness moved, that is locked, or whose flag the poll before set builds
//!   the record again and compares it word by word with the stored one, leaving out only
//!   the two clock words; a socket whose values grow with the clock alone (a running chrono:
//!   busy, rwnd- and sndbuf-limited time; a timed RTO episode) counts as changed too. A
//!   changed socket's record is stored and written whole, and user space compares it with
//!   the recorder's table exactly as for a sock_diag dump ([`crate::record::recorder`]); an
//!   unchanged one writes a 32-byte [`ALIVE`] record (its cookie), so the recorder knows it
//!   still lives. The records written are those rebuilding every socket would write: a
//!   record value cannot move without its witness moving (the per-value argument is
//!   [`super::witness::COVERAGE`]).
//! - **Closes.** A connection that left `ESTABLISHED` is marked by the state tracepoint, and
//!   the dirty poll writes a [`GONE`] record for it; one freed before the poll (its storage
//!   with it) and one a sweep no longer finds are absent; the recorder's destroy
//!   notifications ([`crate::closed`]) summarise closes as for sock_diag.
//!
//! Only established connections are tracked (request and TIME_WAIT sockets have no storage):
//! a request for other states, or with a filter the program cannot evaluate
//! ([`super::select::expressible`]), is [`BpfError::Unavailable`] and the caller polls the
//! socket table instead. Kernel memory: one record (~500 bytes), its witness (~300 bytes) and
//! a dirty word per tracked socket, and an 80-byte dirty element per socket marked since its
//! last read.

use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;

use tcptail_bpf::Map;
use tcptail_sock::tcp_info::TcpInfo;

use super::asm::{Asm, Cond, R0, R1, R2, R3, R4, R6, R7, Reg, Size};
use super::btf::Btf;
use super::convert::Hz;
use super::dirty::{self, HOOKS, Hook, Marks, Walk};
use super::program::{Target, Tracked};
use super::record::{Layout, header};
use super::select::{self, Selection};
use super::witness::Witness;
use super::{BpfError, Lens, convert_one, kernel_hz, read_iter};
use crate::dump::{DumpRequest, DumpStats};
use crate::wire::{ESTABLISHED, Socket};

/// [`header::KIND`] of the record an unchanged socket writes.
pub const ALIVE: u8 = 2;
/// Length of that record: the header's first 32 bytes (the cookie first).
pub const ALIVE_LEN: usize = 32;
/// [`header::KIND`] of the record a dirty poll writes for a socket that left the tracked
/// states (as long as [`ALIVE`]'s).
pub const GONE: u8 = 3;

const HELPER_SKC_TO_TCP_SOCK: i32 = 137;
/// `BPF_TRACE_RAW_TP`: the attach type of a `tp_btf` program.
const TRACE_RAW_TP: u32 = 23;
const TCP_ESTABLISHED: i32 = 1;

/// What a tracked poll says of one socket.
#[derive(Debug)]
pub enum Polled<'s, 'a> {
    /// Nothing changed since its last written record: its cookie.
    Unchanged(u64),
    /// It changed (or is new, or the poll writes every socket): the socket as a dump gives it.
    Socket(&'s Socket<'a>),
}

/// What a dirty poll ([`TrackedDumper::poll_dirty`]) says of one socket it read.
#[derive(Debug)]
pub enum Dirty<'s, 'a> {
    /// It changed (or is new): the socket as a dump gives it.
    Socket(&'s Socket<'a>),
    /// It left the tracked states: its cookie.
    Gone(u64),
}

/// A program and its link, kept open together.
#[derive(Debug)]
struct Attached {
    link: OwnedFd,
    _prog: OwnedFd,
}

/// The tracked-sockets poll of one [`DumpRequest`], in this or a named network namespace.
#[derive(Debug)]
pub struct TrackedDumper {
    layout: Layout,
    hz: Hz,
    info_len: usize,
    req: DumpRequest,
    /// Writes changed sockets only.
    changed: Attached,
    /// Writes every socket.
    all: Attached,
    /// The dirty poll: walks the dirty map, writes the changed sockets ([`super::dirty`]).
    dirty: Attached,
    /// Deletes the dirty-map elements of the sockets the dirty poll read clean.
    trim: Attached,
    /// The dirty map's cookies.
    cookies: Attached,
    /// Tracks new connections and marks state changes while it lives.
    _set_state: Attached,
    /// The marking tracepoint programs ([`super::dirty::HOOKS`]).
    _hooks: Vec<Attached>,
    _storage: Map,
    _dirty_map: Map,
    buf: Vec<u8>,
    info: Box<[u8; TcpInfo::KNOWN_LEN]>,
}

fn unavailable(what: &str) -> impl Fn(std::io::Error) -> BpfError + '_ {
    move |e| BpfError::Unavailable(format!("{what}: {e}"))
}

fn load(
    insns: &[u64],
    name: &str,
    attach_type: u32,
    attach_btf_id: u32,
) -> Result<OwnedFd, BpfError> {
    tcptail_bpf::prog_load(&tcptail_bpf::ProgLoad {
        prog_type: tcptail_bpf::PROG_TYPE_TRACING,
        insns,
        license: c"Dual MIT/GPL",
        name,
        expected_attach_type: attach_type,
        attach_btf_id,
    })
    .map_err(|tcptail_bpf::LoadError { source, log }| match source.raw_os_error() {
        Some(libc::EPERM) | Some(libc::EACCES) if log.is_empty() => BpfError::Unavailable(format!(
            "loading the {name} program: {source} (it needs CAP_BPF and CAP_PERFMON)"
        )),
        Some(libc::ENOSYS) | Some(libc::EOPNOTSUPP) | Some(libc::ENOENT) => {
            BpfError::Unavailable(format!("loading the {name} program: {source}"))
        }
        _ => BpfError::Rejected { source, log },
    })
}

impl TrackedDumper {
    /// Starts tracking the connections `req` selects in this network namespace or the named
    /// one (`/run/netns/NAME`); [`BpfError::Unavailable`] says why it cannot.
    pub fn new(req: &DumpRequest, netns: Option<&str>) -> Result<TrackedDumper, BpfError> {
        Self::open(req, netns, &[], HOOKS)
    }

    /// [`TrackedDumper::new`] with a witness that leaves out the values `left_out` (tests:
    /// a change of such a value alone must go unseen).
    #[cfg(test)]
    fn with_witness(
        req: &DumpRequest,
        netns: Option<&str>,
        left_out: &[super::fields::K],
    ) -> Result<TrackedDumper, BpfError> {
        Self::open(req, netns, left_out, HOOKS)
    }

    /// [`TrackedDumper::new`] with only the marking hooks `hooks` attached (tests: a change
    /// that passes through no attached hook must go unseen by a dirty poll).
    #[doc(hidden)]
    pub fn with_hooks(
        req: &DumpRequest,
        netns: Option<&str>,
        hooks: &[Hook],
    ) -> Result<TrackedDumper, BpfError> {
        Self::open(req, netns, &[], hooks)
    }

    fn open(
        req: &DumpRequest,
        netns: Option<&str>,
        left_out: &[super::fields::K],
        hooks: &[Hook],
    ) -> Result<TrackedDumper, BpfError> {
        if req.states != ESTABLISHED {
            return Err(BpfError::Unavailable(
                "only established connections are tracked (other states were asked for)".into(),
            ));
        }
        if req.filter.as_ref().is_some_and(|f| !select::expressible(f)) {
            return Err(BpfError::Unavailable("the filter is too large for the program".into()));
        }
        if cfg!(target_endian = "big") {
            return Err(BpfError::Unavailable("big-endian CPU (bitfield layout)".into()));
        }
        let ns_path = match netns {
            Some(name) => PathBuf::from("/run/netns").join(name),
            None => PathBuf::from("/proc/self/ns/net"),
        };
        let ns_inode = match std::fs::metadata(&ns_path) {
            Ok(m) => m.ino(),
            Err(source) => return Err(BpfError::Netns { path: ns_path, source }),
        };
        let blob = std::fs::read("/sys/kernel/btf/vmlinux").map_err(|e| {
            BpfError::Unavailable(format!("no kernel BTF at /sys/kernel/btf/vmlinux ({e})"))
        })?;
        let missing = |e: super::btf::BtfError| BpfError::Unavailable(format!("kernel BTF: {e}"));
        let btf = Btf::parse(&blob).map_err(missing)?;
        let mut layout = Layout::new(&btf).map_err(missing)?;
        if !left_out.is_empty() {
            layout.witness = Witness::new(&btf, &layout.loads, left_out).map_err(missing)?;
        }
        let info_len = btf.struct_size("tcp_info").map_err(missing)? as usize;
        let hz = kernel_hz()?;
        let offset = |s: &str, m: &str| btf.member(s, m).map(|m| m.byte_offset()).map_err(missing);
        let sk_uid = offset("sock", "sk_uid")?;
        let skc_net = offset("sock_common", "skc_net")?;
        let ns_inum = offset("net", "ns.inum")?;
        // The stored record, its witness, then the dirty word.
        let dirty_at = layout.record_len + layout.witness.len;
        let value_len = dirty_at + 8;
        let storage = Map::create_sk_storage(value_len as u32)
            .map_err(unavailable("creating the socket-storage map"))?;
        let dirty_map =
            Map::create_sk_storage(8).map_err(unavailable("creating the dirty-socket map"))?;
        let marks = |walk: Walk| Marks {
            tracked_fd: storage.raw_fd(),
            dirty_fd: dirty_map.raw_fd(),
            dirty_at: dirty_at as i16,
            walk,
        };
        if dirty_at % 8 != 0 || i16::try_from(value_len).is_err() {
            return Err(BpfError::Unavailable("the tracked storage value is misaligned".into()));
        }
        let sel = Selection {
            states: ESTABLISHED,
            ipv4: req.ipv4,
            ipv6: req.ipv6,
            filter: req.filter.clone(),
            attrs: req.attrs,
            brief: false,
        };
        if select::selects_nothing(&sel) {
            return Err(BpfError::Unavailable("the request selects no socket".into()));
        }
        // New connections first, then the walk: a connection established in between is
        // given its entry twice, which is once.
        let insns =
            track_on_set_state(&layout, &sel, &marks(Walk::Sweep), skc_net, ns_inum, ns_inode)
                .ok_or_else(|| {
                    BpfError::Unavailable("the tracking program did not assemble".into())
                })?;
        let tp_id = btf.typedef_id("btf_trace_inet_sock_set_state").map_err(missing)?;
        let prog = load(&insns, "tcptail_track", TRACE_RAW_TP, tp_id)?;
        let link = tcptail_bpf::link_create(&prog, 0, TRACE_RAW_TP, 0)
            .map_err(unavailable("attaching to the inet_sock_set_state tracepoint"))?;
        let set_state = Attached { link, _prog: prog };
        // The hooks before the walk too: a tracked socket is marked from its first change.
        let skb_sk = btf.member("sk_buff", "sk").map_err(missing)?.byte_offset();
        let sk_storage = offset("sock", "sk_bpf_storage")?;
        let mut attached = Vec::new();
        for hook in hooks {
            let typedef = format!("btf_trace_{}", hook.tracepoint);
            let id = btf.typedef_id(&typedef).map_err(missing)?;
            let program = dirty::mark_program(&marks(Walk::Sweep), hook, skb_sk, sk_storage);
            let insns = program.ok_or_else(|| {
                BpfError::Unavailable("the marking program did not assemble".into())
            })?;
            let prog = load(&insns, "tcptail_mark", TRACE_RAW_TP, id)?;
            let link = tcptail_bpf::link_create(&prog, 0, TRACE_RAW_TP, 0).map_err(|e| {
                BpfError::Unavailable(format!(
                    "attaching to the {} tracepoint: {e}",
                    hook.tracepoint
                ))
            })?;
            attached.push(Attached { link, _prog: prog });
        }
        let insns = track_on_walk(&layout, &sel, &storage)
            .ok_or_else(|| BpfError::Unavailable("the walk program did not assemble".into()))?;
        let iter_tcp = btf.func_id("bpf_iter_tcp").map_err(missing)?;
        let prog = load(&insns, "tcptail_walk", tcptail_bpf::TRACE_ITER, iter_tcp)?;
        let link = tcptail_bpf::link_create(&prog, 0, tcptail_bpf::TRACE_ITER, 0)
            .map_err(unavailable("linking the socket iterator"))?;
        let iter = match netns {
            None => tcptail_bpf::iter_create(&link).map_err(BpfError::Io)?,
            Some(_) => tcptail_bpf::iter_create_in_netns(&link, &ns_path)
                .map_err(|source| BpfError::Netns { path: ns_path.clone(), source })?,
        };
        let mut buf = vec![0; (64 * 1024usize).next_multiple_of(layout.record_len)];
        while tcptail_bpf::read(&iter, &mut buf).map_err(BpfError::Io)? > 0 {}
        let storage_iter = btf.func_id("bpf_iter_bpf_sk_storage_map").map_err(missing)?;
        let link_on = |insns: Option<Vec<u64>>, name: &str, map: &Map| {
            let insns = insns.ok_or_else(|| {
                BpfError::Unavailable(format!("the {name} program did not assemble"))
            })?;
            let prog = load(&insns, name, tcptail_bpf::TRACE_ITER, storage_iter)?;
            let link = tcptail_bpf::link_create_map_iter(&prog, map)
                .map_err(unavailable("linking the socket-storage iterator"))?;
            Ok::<_, BpfError>(Attached { link, _prog: prog })
        };
        let poll = |all: bool, walk: Walk| {
            let sel = Selection { filter: None, ipv4: true, ipv6: true, ..sel.clone() };
            let t = Tracked { sk_uid, all, marks: marks(walk) };
            layout.program_for(&sel, Target::Tracked(t))
        };
        let changed = link_on(poll(false, Walk::Sweep), "tcptail_poll", &storage)?;
        let all = link_on(poll(true, Walk::Sweep), "tcptail_poll", &storage)?;
        let dirty = link_on(poll(false, Walk::Dirty), "tcptail_dirty", &dirty_map)?;
        let trim = link_on(poll(false, Walk::Trim), "tcptail_trim", &dirty_map)?;
        let cookies = link_on(dirty::cookies_program(), "tcptail_marked", &dirty_map)?;
        Ok(TrackedDumper {
            layout,
            hz,
            info_len,
            req: req.clone(),
            changed,
            all,
            dirty,
            trim,
            cookies,
            _set_state: set_state,
            _hooks: attached,
            _storage: storage,
            _dirty_map: dirty_map,
            buf,
            info: Box::new([0; TcpInfo::KNOWN_LEN]),
        })
    }

    /// One poll of every tracked socket: each changed one (every one with `all`) goes to
    /// `each` as a [`Polled::Socket`] (`tcp_info` undecoded: [`Socket::info_raw`]), every
    /// other as [`Polled::Unchanged`]. `stats.sockets` counts both.
    pub fn poll(
        &mut self,
        all: bool,
        mut each: impl FnMut(Polled<'_, '_>),
    ) -> Result<DumpStats, BpfError> {
        let link = if all { &self.all.link } else { &self.changed.link };
        let iter = tcptail_bpf::iter_create(link).map_err(BpfError::Io)?;
        let TrackedDumper { layout, hz, info_len, req, buf, info, .. } = self;
        let mut stats = DumpStats::default();
        let mut sockets = 0;
        let lens = Lens { full: layout.record_len, brief: Some(ALIVE_LEN) };
        read_iter(&iter, buf, lens, &mut stats, |record| {
            sockets += 1;
            if record[header::KIND] == ALIVE {
                each(Polled::Unchanged(cookie_of(record)));
            } else {
                let each = &mut |s: &Socket<'_>| each(Polled::Socket(s));
                convert_one(layout, *hz, *info_len, record, info, req, true, false, each);
            }
        })?;
        stats.sockets = sockets;
        Ok(stats)
    }

    /// One dirty poll ([`super::dirty`]): only the tracked sockets marked since their last
    /// read are visited; each that changed goes to `each` as a [`Dirty::Socket`] (`tcp_info`
    /// undecoded), each that left the tracked states as [`Dirty::Gone`], and the others say
    /// nothing (unchanged since their last record). `stats.sockets` counts the records.
    pub fn poll_dirty(
        &mut self,
        mut each: impl FnMut(Dirty<'_, '_>),
    ) -> Result<DumpStats, BpfError> {
        let iter = tcptail_bpf::iter_create(&self.dirty.link).map_err(BpfError::Io)?;
        let TrackedDumper { layout, hz, info_len, req, buf, info, .. } = self;
        let mut stats = DumpStats::default();
        let mut records = 0;
        let lens = Lens { full: layout.record_len, brief: Some(ALIVE_LEN) };
        let mut deliver = |record: &[u8]| {
            records += 1;
            if record[header::KIND] == GONE {
                each(Dirty::Gone(cookie_of(record)));
            } else {
                let each = &mut |s: &Socket<'_>| each(Dirty::Socket(s));
                convert_one(layout, *hz, *info_len, record, info, req, true, false, each);
            }
        };
        read_iter(&iter, buf, lens, &mut stats, &mut deliver)?;
        // The trim: the sockets read clean lose their elements and are read once more.
        let trim = tcptail_bpf::iter_create(&self.trim.link).map_err(BpfError::Io)?;
        read_iter(&trim, buf, lens, &mut stats, &mut deliver)?;
        stats.sockets = records;
        Ok(stats)
    }

    /// The cookies of the sockets marked dirty now (tests, the benchmark): those the next
    /// dirty poll visits.
    pub fn marked(&mut self) -> Result<Vec<u64>, BpfError> {
        let iter = tcptail_bpf::iter_create(&self.cookies.link).map_err(BpfError::Io)?;
        let mut cookies = Vec::new();
        read_iter(&iter, &mut self.buf, Lens::fixed(8), &mut DumpStats::default(), |r| {
            cookies.extend(r.try_into().map(u64::from_ne_bytes));
        })?;
        Ok(cookies)
    }

    /// One poll (changed sockets only) read and counted, not converted (for the benchmark:
    /// the kernel's share of a poll): (records, full records among them).
    pub fn read_poll(&mut self) -> Result<(u64, u64), BpfError> {
        let iter = tcptail_bpf::iter_create(&self.changed.link).map_err(BpfError::Io)?;
        let lens = Lens { full: self.layout.record_len, brief: Some(ALIVE_LEN) };
        let (mut records, mut full) = (0, 0);
        read_iter(&iter, &mut self.buf, lens, &mut DumpStats::default(), |r| {
            records += 1;
            full += u64::from(r[header::KIND] != ALIVE);
        })?;
        Ok((records, full))
    }
}

/// The cookie at the head of a record.
fn cookie_of(record: &[u8]) -> u64 {
    record[header::COOKIE..header::COOKIE + 8].try_into().map_or(0, u64::from_ne_bytes)
}

/// The `tp_btf/inet_sock_set_state` program: a socket of the namespace whose inode is
/// `ns_inode` entering `ESTABLISHED` and kept by `sel` gets its storage entry, and every
/// tracked socket changing state is marked dirty ([`super::dirty`]; the tracepoint fires
/// before the state is stored, inside the socket lock, which the dirty poll checks).
fn track_on_set_state(
    layout: &Layout,
    sel: &Selection,
    marks: &Marks,
    skc_net: u32,
    ns_inum: u32,
    ns_inode: u64,
) -> Option<Vec<u64>> {
    let mut a = Asm::default();
    let out = a.label();
    let other = a.label();
    let mark = a.label();
    a.mov(R6, R1);
    a.load(Size::DW, R7, R6, 0); // sk
    a.jump_if(Cond::Eq, R7, 0, out);
    a.load(Size::DW, R2, R6, 16); // newstate
    a.jump_if(Cond::Ne, R2, TCP_ESTABLISHED, other);
    // Only the recorder's namespace: its inode number as a u32 (sign-extended immediates are
    // shifted back).
    a.load(Size::DW, R2, R7, skc_net as i16);
    a.jump_if(Cond::Eq, R2, 0, out);
    a.load(Size::W, R2, R2, ns_inum as i16);
    a.mov_imm(R3, ns_inode as u32 as i32);
    a.mov_imm(R4, 32);
    a.lsh(R3, R4);
    a.rsh_imm(R3, 32);
    a.jump_if_reg(Cond::Ne, R2, R3, out);
    select::emit_selection(&mut a, &layout.filter_offsets, sel, -8, out);
    emit_track(&mut a, marks.tracked_fd, R7);
    a.jump(mark);
    a.bind(other);
    dirty::emit_storage_get(&mut a, marks.tracked_fd, R7, 0);
    a.bind(mark);
    marks.emit_hook_end(&mut a, out);
    a.finish()
}

/// The `iter/tcp` program of the start: every established socket `sel` keeps gets its
/// storage entry; nothing is written.
fn track_on_walk(layout: &Layout, sel: &Selection, storage: &Map) -> Option<Vec<u64>> {
    let mut a = Asm::default();
    let out = a.label();
    a.mov(R6, R1);
    a.load(Size::DW, R7, R6, 8); // ctx->sk_common
    a.jump_if(Cond::Eq, R7, 0, out);
    a.load(Size::B, R2, R7, layout.state_off as i16);
    a.jump_if(Cond::Ne, R2, TCP_ESTABLISHED, out);
    select::emit_selection(&mut a, &layout.filter_offsets, sel, -8, out);
    a.mov(R1, R7);
    a.call(HELPER_SKC_TO_TCP_SOCK);
    a.jump_if(Cond::Eq, R0, 0, out);
    emit_track(&mut a, storage.raw_fd(), R0);
    a.bind(out);
    a.mov_imm(R0, 0);
    a.exit();
    a.finish()
}

/// `r0 = bpf_sk_storage_get(storage, sk, NULL, F_CREATE)`: the socket in register `sk` gets
/// its entry (the one way a socket becomes tracked, from the walk at start or a state change).
fn emit_track(a: &mut Asm, storage_fd: i32, sk: Reg) {
    dirty::emit_storage_get(a, storage_fd, sk, dirty::F_CREATE);
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};

    use super::*;
    use crate::bpf::fields::K;
    use crate::filter::{Filter, Side};

    /// Needs root (CI runs as root): fails, not skips, without it.
    #[test]
    fn tracks_new_and_existing_connections_and_writes_only_changes() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let connect = || {
            let c = TcpStream::connect(("127.0.0.1", port)).unwrap();
            (c, listener.accept().unwrap().0)
        };
        let before = connect();
        let req = DumpRequest {
            states: ESTABLISHED,
            filter: Some(Filter::Port { side: Side::Local, lo: port, hi: port }),
            ..DumpRequest::default()
        };
        let mut t = TrackedDumper::new(&req, None).expect("root with BPF: run the tests as root");
        let mut after = connect();
        let poll = |t: &mut TrackedDumper, all: bool| {
            let (mut changed, mut unchanged) = (Vec::new(), Vec::new());
            t.poll(all, |p| match p {
                Polled::Socket(s) => changed.push(s.id.cookie),
                Polled::Unchanged(c) => unchanged.push(c),
            })
            .unwrap();
            (changed, unchanged)
        };
        // The two server ends: the one walked at start and the one the tracepoint saw.
        let (changed, unchanged) = poll(&mut t, false);
        assert_eq!((changed.len(), unchanged.len()), (2, 0), "{changed:?} {unchanged:?}");
        let (changed, unchanged) = poll(&mut t, false);
        assert_eq!((changed.len(), unchanged.len()), (0, 2), "{changed:?} {unchanged:?}");
        after.0.write_all(&[7; 1000]).unwrap();
        let mut got = [0; 1000];
        after.1.read_exact(&mut got).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let (changed, unchanged) = poll(&mut t, false);
        assert_eq!((changed.len(), unchanged.len()), (1, 1), "{changed:?} {unchanged:?}");
        let (changed, _) = poll(&mut t, true);
        assert_eq!(changed.len(), 2, "a full poll writes every socket");
        drop(before);
        drop(after);
    }

    /// Cookies of the sockets one poll wrote in full.
    fn changed(t: &mut TrackedDumper) -> Vec<u64> {
        let mut changed = Vec::new();
        t.poll(false, |p| {
            if let Polled::Socket(s) = p {
                changed.push(s.id.cookie)
            }
        })
        .unwrap();
        changed
    }

    /// Polls until a poll writes nothing (the rebuild flags of the first polls cleared).
    fn settle(t: &mut TrackedDumper) {
        let quiet = (0..10).any(|_| changed(t).is_empty());
        assert!(quiet, "an idle connection settles within ten polls");
    }

    /// Needs root (CI runs as root): fails, not skips, without it. Each scripted change moves
    /// one record value of an idle connection (a socket option; no segment, no tick): the
    /// witness must see it, and a witness without that value must not (so the change moves
    /// nothing else the witness reads, and the first assertion tests the witness itself).
    #[test]
    fn a_change_of_one_value_alone_is_seen_by_the_witness_that_holds_it() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let client = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let server = listener.accept().unwrap().0;
        let req = DumpRequest {
            states: ESTABLISHED,
            filter: Some(Filter::Port { side: Side::Local, lo: port, hi: port }),
            ..DumpRequest::default()
        };
        let sock = socket2::SockRef::from(&server);
        type Script = fn(&socket2::SockRef<'_>, usize) -> std::io::Result<()>;
        let cases: [(&str, Script, &[K]); 3] = [
            ("SO_SNDBUF", |s, i| s.set_send_buffer_size(20_000 + 4096 * i), &[K::Sndbuf]),
            ("SO_RCVBUF", |s, i| s.set_recv_buffer_size(20_000 + 4096 * i), &[K::Rcvbuf]),
            (
                "SO_KEEPALIVE",
                |s, i| s.set_keepalive(i % 2 == 0),
                &[K::SkTimerExpires, K::SkTimerPending],
            ),
        ];
        for (i, (what, script, values)) in cases.into_iter().enumerate() {
            let mut witness =
                TrackedDumper::new(&req, None).expect("root with BPF: run the tests as root");
            let mut blind = TrackedDumper::with_witness(&req, None, values).unwrap();
            settle(&mut witness);
            settle(&mut blind);
            script(&sock, i).unwrap();
            assert_eq!(changed(&mut witness).len(), 1, "{what}: the witness sees the change");
            assert_eq!(changed(&mut blind), Vec::<u64>::new(), "{what}: only {values:?} moved");
        }
        drop(client);
    }
}
