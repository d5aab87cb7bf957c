//! The recorder: one sock_diag dump per poll, compared socket by socket with the table of live
//! connections (one entry each, removed when the connection is gone), writing only what
//! changed.
//!
//! A poll writes a tick, then for each dumped socket: a change record when a non-volatile
//! field changed (nothing when none did), then a full record when the connection is new to
//! the file, when its congestion control changed or when the full-snapshot period came round
//! (after the change, so a reader checks the state its changes built against it).
//! Connections the dump no longer returned get a gone record, except after a dump the kernel
//! flagged interrupted (its tables changed mid-dump, so a missing socket may still live).
//!
//! Each connection's close is summarised once in a closed record ([`crate::closed`]): from
//! the kernel's destroy notification when [`Recorder::listen_for_closes`] was called (a
//! connection that left the dump waits for it up to 120 s); otherwise from the
//! last poll that saw it, when it entered TIME_WAIT or left the dump. A stopping recorder polls
//! once more, waits up to a second for the notifications of the closes it knows of, and
//! summarises any still missing from their last poll, so no close is lost at the end.
//!
//! [`Recorder::poll_tracked`] polls through [`TrackedDumper`] instead, compared with the table
//! exactly as dumped sockets are, so the file is the same. Most of its polls are dirty polls:
//! only the connections the kernel marked changed are read, and a connection not read is
//! unchanged (still seen); one that left the tracked states is reported and ends as a
//! vanished one does. Every sweep period ([`Recorder::set_sweep_every`]), at the first poll,
//! after a failed poll, and where the full-snapshot period comes round or the file rotated,
//! a sweep visits every tracked connection (the changed ones arrive as sockets, the others
//! as their cookie); the sweep where the full-snapshot period comes round (or the file
//! rotated, or the table met a cookie it does not know) asks for every socket. A storage walk
//! can miss an entry while connections come and go around it (the kernel resumes a bucket by
//! position), so a connection is gone only when two sweeps in a row missed it; a close is
//! summarised from its destroy notification as soon as it comes, whatever the walks saw.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::path::Path;
use std::time::{Duration, Instant};

use tcptail_sock::tcp_info::TcpInfo;

use super::codec::{ClosedRecord, put_change, put_closed, put_full, put_gone, put_tick};
use super::fields::{Identity, RawRow, Values, field_index};
use super::file::{Header, RecordError, RecordWriter, WriterOptions};
use crate::bpf::tracked::{Dirty, Polled, TrackedDumper};
use crate::closed::{CloseSeen, DestroyListener};
use crate::filter::Filter;
use crate::source::Dump;
use crate::wire::Socket;
use crate::{DumpRequest, sys};

/// How the recorder polls and writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecorderOptions {
    /// Poll interval (written in the header; the caller paces the polls).
    pub interval: Duration,
    /// Period of full snapshots of every connection.
    pub full_every: Duration,
    /// Longest time records wait in memory before their block is written.
    pub block_every: Duration,
    /// Rotation and compression.
    pub writer: WriterOptions,
}

impl Default for RecorderOptions {
    fn default() -> Self {
        RecorderOptions {
            interval: Duration::from_millis(100),
            full_every: Duration::from_secs(60),
            block_every: Duration::from_secs(1),
            writer: WriterOptions::default(),
        }
    }
}

/// Totals since the recorder started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RecorderStats {
    /// Polls made.
    pub polls: u64,
    /// Tracked polls that read every tracked connection (sweeps); the other tracked polls
    /// read only the connections marked changed.
    pub sweeps: u64,
    /// Sockets the last poll saw (a dirty poll: the changed ones).
    pub sockets: u64,
    /// Full records written.
    pub full: u64,
    /// Change records written.
    pub changes: u64,
    /// Gone records written.
    pub gone: u64,
    /// Dumps the kernel flagged interrupted.
    pub interrupted: u64,
    /// Files rotated away.
    pub rotations: u64,
    /// Closes summarised.
    pub closed: u64,
    /// Destroy notifications lost to a full socket buffer.
    pub lost_closes: u64,
}

/// What [`Recorder::run`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RunStats {
    /// Polls dropped because the previous one ended after their time.
    pub late: u64,
    /// Failed dumps (their polls skipped).
    pub dump_errors: u64,
    /// Wall-clock time of the run.
    pub wall: Duration,
    /// CPU time (user + system) this process used during the run.
    pub cpu: Duration,
    /// Polls the run made.
    pub polls: u64,
    /// Sweeps among them ([`Recorder::set_sweep_every`]).
    pub sweeps: u64,
    /// CPU time the sweeps used (part of `cpu`).
    pub sweep_cpu: Duration,
}

impl RunStats {
    /// CPU used as a percentage of one core.
    pub fn cpu_percent(&self) -> f64 {
        self.cpu.as_secs_f64() * 100.0 / self.wall.as_secs_f64().max(1e-9)
    }
}

#[derive(Debug)]
struct Entry {
    id: Identity,
    /// The socket as last written (what a replay has rebuilt). Boxed: a tracked poll looks
    /// up every connection but reads this only for the changed ones, and a table of small
    /// entries stays in the CPU's caches.
    row: Box<RawRow>,
    /// Poll that last saw it.
    seen: u64,
    /// Full-snapshot generation of its last full record.
    generation: u64,
    /// File its first record went to.
    epoch: u64,
    /// Monotonic ns of the first poll that saw it.
    first_ns: u64,
    /// Largest smoothed RTT a poll saw, µs.
    max_rtt_us: u32,
    /// Its close was summarised (by the poll that saw it enter TIME_WAIT).
    summarised: bool,
    /// A tracked walk missed it once ([`Table::forgive_one_miss`]).
    missed: bool,
}

impl Entry {
    /// Marks the entry seen by poll `poll`, adding it to `seen` (the entries that poll has
    /// seen so far) the first time: each entry is counted once per poll, which lets the sweep
    /// skip its walk when every entry was seen.
    fn mark_seen(&mut self, poll: u64, seen: &mut usize) {
        if self.seen != poll {
            self.seen = poll;
            *seen += 1;
        }
    }

    fn closed(&self, values: Values, seen: CloseSeen, now: u64) -> ClosedRecord {
        ClosedRecord {
            id: self.id.clone(),
            values,
            seen,
            lifetime_ns: Some(now.saturating_sub(self.first_ns)),
            max_rtt_us: (self.max_rtt_us > 0).then_some(self.max_rtt_us),
        }
    }

    /// Writes this connection's close as its last poll saw it (no destroy notification for
    /// it) and counts it.
    fn summarise_vanished(&self, out: &mut Vec<u8>, stats: &mut RecorderStats, now: u64) {
        put_closed(out, &self.closed(self.row.values(), CloseSeen::Vanished, now));
        stats.closed += 1;
    }
}

/// A connection that left the dump (closing, or out of the selected states) while the kernel's
/// destroy notifications are listened to: kept until its notification or [`DEPARTED_FOR`].
#[derive(Debug)]
struct Departed {
    entry: Entry,
    since_ns: u64,
}

/// How long a connection that left the dump waits for its destroy notification before it is
/// summarised from its last poll: longer than FIN_WAIT2's and TIME_WAIT's 60 s.
const DEPARTED_FOR: Duration = Duration::from_secs(120);

/// How long a stopping recorder waits for the destroy notifications of closes it knows of.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// `TCP_TIME_WAIT`, `TCP_LISTEN`.
const TIME_WAIT: u32 = 6;
const LISTEN: u32 = 10;

/// Hashes socket cookies (kernel-assigned counters, not chosen by anyone) with one multiply:
/// SipHash's protection against chosen keys costs a measurable share of a poll.
#[derive(Debug, Default, Clone, Copy)]
struct CookieHasher(u64);

impl Hasher for CookieHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0 ^ v).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// The live-connection table and its position in the snapshot cycle.
#[derive(Debug, Default)]
struct Table {
    entries: HashMap<u64, Entry, BuildHasherDefault<CookieHasher>>,
    /// Connections waiting for their destroy notification.
    departed: HashMap<u64, Departed, BuildHasherDefault<CookieHasher>>,
    /// Destroy notifications are listened to.
    listening: bool,
    now: u64,
    poll: u64,
    /// Entries this poll has seen so far (each counted once).
    seen: usize,
    generation: u64,
    epoch: u64,
    stats: RecorderStats,
}

impl Table {
    fn observe(&mut self, s: &Socket<'_>, out: &mut Vec<u8>) {
        self.stats.sockets += 1;
        let (poll, generation, epoch) = (self.poll, self.generation, self.epoch);
        let cookie = s.id.cookie;
        match self.entries.get_mut(&cookie) {
            Some(e) => {
                e.mark_seen(poll, &mut self.seen);
                e.missed = false;
                e.max_rtt_us = e.max_rtt_us.max(rtt_us(s));
                // Without destroy notifications, the close of the side that closed first is
                // its entering TIME_WAIT (its full socket, with the tcp_info, is gone then).
                if !self.listening
                    && !e.summarised
                    && u32::from(s.state) == TIME_WAIT
                    && e.row.state() != TIME_WAIT
                {
                    e.summarise_vanished(out, &mut self.stats, self.now);
                    e.summarised = true;
                }
                // The common case, an idle connection, ends at this byte comparison. A
                // connection new to this file (after a rotation) starts with a full record.
                if e.epoch == epoch && !e.row.same_as(s) {
                    let old = e.row.values();
                    *e.row = RawRow::of(s);
                    let new = e.row.values();
                    put_change(out, cookie, &old, &new, new.changed(&old));
                    self.stats.changes += 1;
                }
                // A snapshot after the change, so a reader can check the changes it applied
                // against it field by field.
                let cc_changed = e.id.cc.as_deref() != s.cong;
                if e.epoch != epoch || e.generation != generation || cc_changed {
                    if cc_changed {
                        e.id.cc = s.cong.map(str::to_owned);
                    }
                    e.epoch = epoch;
                    e.generation = generation;
                    *e.row = RawRow::of(s);
                    put_full(out, &e.id, &e.row.values());
                    self.stats.full += 1;
                }
            }
            None => {
                let row = Box::new(RawRow::of(s));
                let e = Entry {
                    id: Identity::of(s),
                    row,
                    seen: poll,
                    generation,
                    epoch,
                    first_ns: self.now,
                    max_rtt_us: rtt_us(s),
                    // A socket first seen in TIME_WAIT closed before the recorder knew it.
                    summarised: u32::from(s.state) == TIME_WAIT,
                    missed: false,
                };
                put_full(out, &e.id, &e.row.values());
                self.stats.full += 1;
                self.entries.insert(cookie, e);
                self.seen += 1;
            }
        }
    }

    /// Marks a connection a tracked poll found unchanged as seen; false when the table does
    /// not know it (a poll that failed after the kernel stored its record).
    fn still(&mut self, cookie: u64) -> bool {
        self.stats.sockets += 1;
        let Some(e) = self.entries.get_mut(&cookie) else {
            return false;
        };
        e.mark_seen(self.poll, &mut self.seen);
        e.missed = false;
        true
    }

    /// Keeps as seen every connection this poll missed that the previous one saw: a tracked
    /// walk can skip an entry when others are freed beside it, so a connection is gone only
    /// when two walks in a row missed it.
    fn forgive_one_miss(&mut self) {
        if self.seen == self.entries.len() {
            return;
        }
        let poll = self.poll;
        for e in self.entries.values_mut() {
            if !e.missed && e.seen + 1 == poll {
                e.missed = true;
                e.mark_seen(poll, &mut self.seen);
            }
        }
    }

    /// Writes the end of every connection the last poll did not see and forgets it; its
    /// close is summarised now, or (with destroy notifications) when its notification comes.
    fn sweep(&mut self, out: &mut Vec<u8>) {
        let poll = self.poll;
        // Usually every entry was seen: then there is nothing to look for (the table is
        // megabytes at 10,000 connections; walking it again would cost a poll a tenth more).
        let vanished: Vec<u64> = if self.seen == self.entries.len() {
            Vec::new()
        } else {
            self.entries.iter().filter(|(_, e)| e.seen != poll).map(|(&c, _)| c).collect()
        };
        for cookie in vanished {
            let e = self.entries.remove(&cookie).expect("listed above");
            self.vanish(cookie, e, out);
        }
        self.expire_departed(out);
    }

    /// Writes the end of a connection a dirty poll saw leave the tracked states, as
    /// [`Table::sweep`] writes one no poll saw.
    fn left(&mut self, cookie: u64, out: &mut Vec<u8>) {
        if let Some(e) = self.forget(cookie) {
            self.vanish(cookie, e, out);
        }
    }

    /// Writes the end of a connection removed from the table, and summarises its close now
    /// or (with destroy notifications) when its notification comes.
    fn vanish(&mut self, cookie: u64, e: Entry, out: &mut Vec<u8>) {
        // A connection whose first record went to an earlier file, and which ended before
        // this file's first poll saw it, is not in this file at all.
        if e.epoch == self.epoch {
            put_gone(out, cookie);
            self.stats.gone += 1;
        }
        let state = e.row.state();
        if e.summarised || state == TIME_WAIT || state == LISTEN {
            return;
        }
        if self.listening {
            self.departed.insert(cookie, Departed { entry: e, since_ns: self.now });
        } else {
            e.summarise_vanished(out, &mut self.stats, self.now);
        }
    }

    /// Summarises from their last poll the departed connections whose destroy notification
    /// did not come within [`DEPARTED_FOR`].
    fn expire_departed(&mut self, out: &mut Vec<u8>) {
        if self.departed.is_empty() {
            return;
        }
        let now = self.now;
        let late = DEPARTED_FOR.as_nanos() as u64;
        let expired: Vec<u64> = self
            .departed
            .iter()
            .filter(|(_, d)| now.saturating_sub(d.since_ns) >= late)
            .map(|(&c, _)| c)
            .collect();
        for cookie in expired {
            let d = self.departed.remove(&cookie).expect("listed above");
            d.entry.summarise_vanished(out, &mut self.stats, now);
        }
    }

    /// Whether a close is known whose destroy notification has not come: a connection that
    /// left the dump, or one a poll saw enter TIME_WAIT (its full socket was freed then).
    fn awaiting_notifications(&self) -> bool {
        self.listening
            && (!self.departed.is_empty()
                || self.entries.values().any(|e| !e.summarised && e.row.state() == TIME_WAIT))
    }

    /// Summarises from its last poll every close [`Table::awaiting_notifications`] found (the
    /// recorder stops and cannot wait longer).
    fn summarise_awaiting(&mut self, out: &mut Vec<u8>) {
        if !self.listening {
            return;
        }
        let now = self.now;
        for (_, d) in self.departed.drain() {
            d.entry.summarise_vanished(out, &mut self.stats, now);
        }
        for e in self.entries.values_mut() {
            if !e.summarised && e.row.state() == TIME_WAIT {
                e.summarise_vanished(out, &mut self.stats, now);
                e.summarised = true;
            }
        }
    }

    /// Removes a live entry outside the sweep, keeping the count of entries seen exact.
    fn forget(&mut self, cookie: u64) -> Option<Entry> {
        let e = self.entries.remove(&cookie)?;
        if e.seen == self.poll {
            self.seen -= 1;
        }
        Some(e)
    }

    /// Summarises the close of a socket the kernel destroyed.
    fn destroyed(&mut self, s: &Socket<'_>, out: &mut Vec<u8>) {
        let cookie = s.id.cookie;
        let values = RawRow::of(s).values();
        // A listener's end (or a socket that never connected) is not a connection's; the
        // polls that knew an aborted connection kept its addresses.
        let known = self.entries.get(&cookie).or(self.departed.get(&cookie).map(|d| &d.entry));
        if known.map_or(crate::closed::never_connected(s), |e| e.row.state() == LISTEN) {
            self.forget(cookie);
            return;
        }
        let known = match self.forget(cookie) {
            Some(e) => {
                if e.epoch == self.epoch {
                    put_gone(out, cookie);
                    self.stats.gone += 1;
                }
                Some(e)
            }
            None => self.departed.remove(&cookie).map(|d| d.entry),
        };
        let record = match known {
            Some(e) if e.summarised => return,
            Some(e) => {
                let mut values = values;
                keep_counters(&mut values, &e.row.values());
                e.closed(values, CloseSeen::Destroyed, self.now)
            }
            // Opened and closed between two polls.
            None => ClosedRecord {
                id: Identity::of(s),
                values,
                seen: CloseSeen::Destroyed,
                lifetime_ns: None,
                max_rtt_us: None,
            },
        };
        put_closed(out, &record);
        self.stats.closed += 1;
    }
}

/// The smoothed RTT of a dumped socket's `tcp_info` bytes, µs (0 without `tcp_info`), read
/// without decoding the rest (the recorder's dumps leave it undecoded).
fn rtt_us(s: &Socket<'_>) -> u32 {
    let raw = s.info_raw;
    match raw.get(68..72) {
        Some(b) if raw.len() >= TcpInfo::BASE_LEN => u32::from_ne_bytes([b[0], b[1], b[2], b[3]]),
        _ => s.info.as_ref().map_or(0, |i| i.rtt_us),
    }
}

/// Counters that only grow while a connection lives. An aborted connection's final
/// `tcp_info` has them zeroed (tcp_disconnect resets them), so its summary keeps what the
/// last poll saw.
const COUNTERS: [&str; 18] = [
    "bytes_acked",
    "bytes_received",
    "bytes_sent",
    "bytes_retrans",
    "total_retrans_segs",
    "segs_out",
    "segs_in",
    "data_segs_in",
    "data_segs_out",
    "delivered_segs",
    "busy_time_us",
    "rwnd_limited_us",
    "sndbuf_limited_us",
    "total_rto",
    "total_rto_recoveries",
    "total_rto_time_ms",
    "dsack_dups",
    "reord_seen",
];

/// Keeps in `last` the larger of its and `polled`'s counters, and the polled minimum RTT when
/// the final one was reset.
fn keep_counters(last: &mut Values, polled: &Values) {
    for name in COUNTERS.iter().chain(&["min_rtt_us"]) {
        let i = field_index(name).expect("a recorded field");
        let (now, then) = (last.get(i), polled.get(i));
        let keep = if *name == "min_rtt_us" {
            now.filter(|&r| r > 0 && r < u64::from(u32::MAX)).or(then)
        } else {
            now.max(then)
        };
        last.set(i, keep);
    }
}

/// The default period of the tracked poll's sweeps ([`Recorder::set_sweep_every`]).
pub const DEFAULT_SWEEP_EVERY: Duration = Duration::from_secs(1);

/// Records connections into a rotating file.
#[derive(Debug)]
pub struct Recorder {
    writer: RecordWriter,
    closes: Option<(DestroyListener, Option<Filter>)>,
    options: RecorderOptions,
    table: Table,
    last_tick_ns: u64,
    last_full_ns: u64,
    last_block_ns: u64,
    /// Monotonic ns of the last sweep ([`Recorder::poll_tracked`]).
    last_sweep_ns: u64,
    /// Period of the sweeps.
    sweep_every: Duration,
    /// The next tracked poll writes every socket ([`Recorder::poll_tracked`]).
    resync: bool,
}

/// What a poll's end may conclude about the connections it did not see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Seen {
    /// Every live connection was dumped or walked: one not seen is gone.
    All,
    /// The dump may have missed some (the kernel flagged it interrupted): all are kept.
    Interrupted,
    /// Only changed connections were read (a dirty poll): one not seen is unchanged.
    Changed,
}

fn header(options: &RecorderOptions, mono_ns: u64) -> Header {
    let wall = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    Header::new(
        wall,
        mono_ns,
        options.interval.as_nanos() as u64,
        options.full_every.as_nanos() as u64,
    )
}

impl Recorder {
    /// Starts a recording at `path` (truncated if it exists).
    pub fn create(path: &Path, options: RecorderOptions) -> Result<Recorder, RecordError> {
        let now = sys::monotonic_ns();
        let writer = RecordWriter::create(path, &header(&options, now), options.writer)?;
        Ok(Recorder {
            writer,
            closes: None,
            options,
            table: Table::default(),
            last_tick_ns: now,
            last_full_ns: now,
            last_block_ns: now,
            last_sweep_ns: now,
            sweep_every: DEFAULT_SWEEP_EVERY,
            resync: true,
        })
    }

    /// Summarises closes from the kernel's destroy notifications (of the sockets `filter`
    /// selects) instead of from the polls.
    pub fn listen_for_closes(&mut self, listener: DestroyListener, filter: Option<Filter>) {
        self.closes = Some((listener, filter));
        self.table.listening = true;
    }

    /// Sets the period of the tracked poll's sweeps ([`Recorder::poll_tracked`]): a poll of
    /// every tracked connection, which finds what changed through a path no hook marks
    /// ([`crate::bpf::dirty::UNHOOKED`]) within this period. The polls between read only the
    /// connections the kernel marked changed.
    pub fn set_sweep_every(&mut self, period: Duration) {
        self.sweep_every = period;
    }

    /// Totals so far.
    pub fn stats(&self) -> RecorderStats {
        self.table.stats
    }

    /// Live connections in the table.
    pub fn live(&self) -> usize {
        self.table.entries.len()
    }

    /// Memory the live table holds (its slots, their boxed rows and congestion-control
    /// names), bytes: one entry per live connection.
    pub fn table_bytes(&self) -> usize {
        let entries = &self.table.entries;
        entries.capacity() * (size_of::<u64>() + size_of::<Entry>() + 1)
            + entries.len() * size_of::<RawRow>()
            + entries.values().map(|e| e.id.cc.as_ref().map_or(0, String::capacity)).sum::<usize>()
    }

    /// Bytes in the current file.
    pub fn file_bytes(&self) -> u64 {
        self.writer.file_bytes()
    }

    /// One poll: dumps `req` with `dumper` and records what changed.
    pub fn poll(&mut self, dumper: &mut impl Dump, req: &DumpRequest) -> Result<(), RecordError> {
        let now = sys::monotonic_ns();
        self.begin(now, Seen::All)?;
        let (table, out) = (&mut self.table, &mut self.writer.records);
        // The table compares `tcp_info` bytes and reads one field: no need to decode it.
        let stats = dumper.dump_with(req, false, &mut |s| table.observe(s, out))?;
        self.drain_closes()?;
        self.end(now, if stats.interrupted { Seen::Interrupted } else { Seen::All })
    }

    /// One poll of the tracked connections ([`TrackedDumper`]): what changed is recorded as
    /// [`Recorder::poll`] records it from a dump. A sweep (the first poll, one after a
    /// failure, a full-snapshot or rotation poll, and one every sweep period,
    /// [`Recorder::set_sweep_every`]) walks every tracked connection; the polls between
    /// are dirty polls ([`TrackedDumper::poll_dirty`]): they read only the connections the
    /// kernel marked changed, record those and the ones that left, and take every other one
    /// as unchanged.
    pub fn poll_tracked(&mut self, tracked: &mut TrackedDumper) -> Result<(), RecordError> {
        let now = sys::monotonic_ns();
        let sweep_due =
            now.saturating_sub(self.last_sweep_ns) >= self.sweep_every.as_nanos() as u64;
        if self.resync || sweep_due || self.cycle_due(now) {
            return self.sweep_tracked(tracked, now);
        }
        self.begin(now, Seen::Changed)?;
        let (table, out) = (&mut self.table, &mut self.writer.records);
        // A failed poll may have cleared marks whose records never arrived: sweep next.
        self.resync = true;
        tracked
            .poll_dirty(|d| match d {
                Dirty::Socket(s) => table.observe(s, out),
                Dirty::Gone(cookie) => table.left(cookie, out),
            })
            .map_err(crate::DiagError::from)?;
        self.resync = false;
        self.drain_closes()?;
        self.end(now, Seen::Changed)
    }

    /// A tracked poll of every tracked connection (see [`Recorder::poll_tracked`]).
    fn sweep_tracked(&mut self, tracked: &mut TrackedDumper, now: u64) -> Result<(), RecordError> {
        let cycle = (self.table.generation, self.table.epoch);
        self.begin(now, Seen::All)?;
        self.last_sweep_ns = now;
        self.table.stats.sweeps += 1;
        // The first poll, a full-snapshot or rotation poll, or one after a failure.
        let all = std::mem::replace(&mut self.resync, true)
            || cycle != (self.table.generation, self.table.epoch);
        let (table, out) = (&mut self.table, &mut self.writer.records);
        let mut unknown = false;
        tracked
            .poll(all, |p| match p {
                Polled::Socket(s) => table.observe(s, out),
                Polled::Unchanged(cookie) => unknown |= !table.still(cookie),
            })
            .map_err(crate::DiagError::from)?;
        self.resync = unknown;
        self.drain_closes()?;
        self.table.forgive_one_miss();
        self.end(now, Seen::All)
    }

    /// Summarises the closes whose destroy notifications are queued now.
    fn drain_closes(&mut self) -> Result<(), RecordError> {
        let (table, out) = (&mut self.table, &mut self.writer.records);
        if let Some((listener, filter)) = &mut self.closes {
            listener.drain(|s| {
                if filter.as_ref().is_none_or(|f| f.matches(&s.id)) {
                    table.destroyed(s, out);
                }
            })?;
            table.stats.lost_closes = listener.overruns;
        }
        Ok(())
    }

    /// One poll over sockets handed to `feed` (tests and replays of captured dumps): `now_ns`
    /// is its monotonic time, `complete` whether absent sockets are gone.
    pub fn poll_sockets<'s>(
        &mut self,
        now_ns: u64,
        sockets: impl IntoIterator<Item = &'s Socket<'s>>,
        complete: bool,
    ) -> Result<(), RecordError> {
        self.begin(now_ns, Seen::All)?;
        for s in sockets {
            self.table.observe(s, &mut self.writer.records);
        }
        self.end(now_ns, if complete { Seen::All } else { Seen::Interrupted })
    }

    /// Whether a poll at `now` rotates the file or starts a full-snapshot generation.
    fn cycle_due(&self, now: u64) -> bool {
        self.writer.full()
            || now.saturating_sub(self.last_full_ns) >= self.options.full_every.as_nanos() as u64
    }

    /// Starts a poll. A dirty poll ([`Seen::Changed`]) continues the count of the last
    /// complete one: the connections it did not read count as seen by that one.
    fn begin(&mut self, now: u64, seen: Seen) -> Result<(), RecordError> {
        let t = &mut self.table;
        if self.writer.full() {
            self.writer.rotate(&header(&self.options, now))?;
            t.stats.rotations += 1;
            t.epoch += 1;
            t.generation += 1;
            self.last_tick_ns = now;
            self.last_full_ns = now;
        } else if now.saturating_sub(self.last_full_ns) >= self.options.full_every.as_nanos() as u64
        {
            t.generation += 1;
            self.last_full_ns = now;
        }
        if seen != Seen::Changed {
            t.poll += 1;
            t.seen = 0;
        }
        t.now = now;
        t.stats.polls += 1;
        t.stats.sockets = 0;
        put_tick(&mut self.writer.records, now.saturating_sub(self.last_tick_ns));
        self.last_tick_ns = now;
        Ok(())
    }

    fn end(&mut self, now: u64, seen: Seen) -> Result<(), RecordError> {
        match seen {
            Seen::All => self.table.sweep(&mut self.writer.records),
            Seen::Interrupted => {
                // The dump may have missed sockets: keep them all as seen.
                let t = &mut self.table;
                t.entries.values_mut().for_each(|e| e.mark_seen(t.poll, &mut t.seen));
                self.table.stats.interrupted += 1;
            }
            Seen::Changed => self.table.expire_departed(&mut self.writer.records),
        }
        let due =
            now.saturating_sub(self.last_block_ns) >= self.options.block_every.as_nanos() as u64;
        if due || self.writer.records.len() >= 1 << 20 {
            self.writer.flush_block()?;
            self.last_block_ns = now;
        }
        Ok(())
    }

    /// Polls every `interval` until `stop` says so, calling `dump_failed` for each failed dump
    /// (that poll is skipped; the dumper reopens its socket). Polls the machine could not keep
    /// up with are dropped and counted, not made up in a burst.
    pub fn run(
        &mut self,
        dumper: &mut impl Dump,
        req: &DumpRequest,
        stop: impl FnMut() -> bool,
        dump_failed: impl FnMut(&crate::DiagError),
    ) -> Result<RunStats, RecordError> {
        self.run_polls(|rec| rec.poll(dumper, req), stop, dump_failed)
    }

    /// [`Recorder::run`] with [`Recorder::poll_tracked`]'s polls.
    pub fn run_tracked(
        &mut self,
        tracked: &mut TrackedDumper,
        stop: impl FnMut() -> bool,
        dump_failed: impl FnMut(&crate::DiagError),
    ) -> Result<RunStats, RecordError> {
        self.run_polls(|rec| rec.poll_tracked(tracked), stop, dump_failed)
    }

    fn run_polls(
        &mut self,
        mut poll_once: impl FnMut(&mut Recorder) -> Result<(), RecordError>,
        mut stop: impl FnMut() -> bool,
        mut dump_failed: impl FnMut(&crate::DiagError),
    ) -> Result<RunStats, RecordError> {
        let interval = self.options.interval.max(Duration::from_micros(100));
        let started = Instant::now();
        let cpu_before = sys::process_cpu_time();
        let mut run = RunStats::default();
        let mut next = started;
        let mut poll = |rec: &mut Recorder, run: &mut RunStats| {
            let (sweeps, cpu) = (rec.table.stats.sweeps, sys::process_cpu_time());
            let polled = match poll_once(rec) {
                Ok(()) => Ok(()),
                Err(RecordError::Dump(e)) => {
                    run.dump_errors += 1;
                    dump_failed(&e);
                    Ok(())
                }
                Err(e) => Err(e),
            };
            run.polls += 1;
            if rec.table.stats.sweeps != sweeps {
                run.sweeps += 1;
                run.sweep_cpu += sys::process_cpu_time().saturating_sub(cpu);
            }
            polled
        };
        while !stop() {
            poll(self, &mut run)?;
            next += interval;
            let now = Instant::now();
            if now > next {
                let behind = ((now - next).as_nanos() / interval.as_nanos()) as u32;
                run.late += u64::from(behind) + 1;
                next += interval * (behind + 1);
            }
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
        // Closes since the last poll: one more poll sees which connections left, then their
        // destroy notifications (sent from a kernel work queue after the close) get a moment
        // to arrive, so a stop right after a close still summarises it from the kernel.
        if self.closes.is_some() {
            poll(self, &mut run)?;
            let deadline = Instant::now() + CLOSE_GRACE;
            while self.table.awaiting_notifications() && Instant::now() < deadline {
                std::thread::sleep(interval.min(Duration::from_millis(2)));
                self.drain_closes()?;
            }
        }
        run.wall = started.elapsed();
        run.cpu = sys::process_cpu_time() - cpu_before;
        Ok(run)
    }

    /// Writes what is pending and closes the file. Closes still waiting for their destroy
    /// notification are summarised from the last poll that saw them.
    pub fn finish(mut self) -> Result<RecorderStats, RecordError> {
        self.table.summarise_awaiting(&mut self.writer.records);
        let stats = self.table.stats;
        self.writer.finish()?;
        Ok(stats)
    }
}

#[cfg(test)]
mod tests;
