//! Replaying a recording: the state of every connection as the records rebuild it, tick by
//! tick, with each full snapshot checked against the state the changes before it built.

use std::collections::HashMap;
use std::path::Path;

use super::codec::{ClosedRecord, Record, apply_change};
use super::fields::{Identity, VOLATILE_MASK, Values};
use super::file::{Header, RecordError, RecordReader};
use crate::Connection;
use crate::closed::ClosedSummary;

/// One connection as replayed so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tracked {
    /// Who it is.
    pub id: Identity,
    /// Its fields as of its last record.
    pub values: Values,
    /// Monotonic ns of its first record in this file.
    pub first_ns: u64,
    /// Monotonic ns of its last record.
    pub last_ns: u64,
}

impl Tracked {
    /// The connection as a live dump would have shown it at its last record.
    pub fn connection(&self) -> Connection {
        self.id.connection(&self.values)
    }
}

/// What one record did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A poll happened (the replay's time moved on).
    Tick,
    /// A full snapshot of `cookie`; `matched` says whether the state the change records built
    /// agreed with it (volatile ages aside), `None` for a connection new to the file.
    Full {
        /// The connection.
        cookie: u64,
        /// Agreement of the rebuilt state with the snapshot.
        matched: Option<bool>,
    },
    /// Fields of `cookie` changed (bit `i` of `mask`: [`super::fields::FIELDS`]`[i]`).
    Change {
        /// The connection.
        cookie: u64,
        /// The changed fields.
        mask: u128,
    },
    /// The connection is gone; its last state.
    Gone(Box<Tracked>),
    /// A connection's close, with what it lived through.
    Closed(Box<ClosedSummary>),
}

/// Replays one file.
#[derive(Debug)]
pub struct Replay {
    reader: RecordReader,
    now_ns: u64,
    table: HashMap<u64, Tracked>,
    /// A tick read ahead by [`Replay::advance_to`] and not applied yet.
    peeked: Option<Record>,
    /// Full snapshots that disagreed with the rebuilt state.
    pub mismatches: u64,
}

impl Replay {
    /// Opens a recording.
    pub fn open(path: &Path) -> Result<Replay, RecordError> {
        let reader = RecordReader::open(path)?;
        let now_ns = reader.header().start_mono_ns;
        Ok(Replay { reader, now_ns, table: HashMap::new(), peeked: None, mismatches: 0 })
    }

    /// The file's header.
    pub fn header(&self) -> &Header {
        self.reader.header()
    }

    /// The file.
    pub fn path(&self) -> &Path {
        self.reader.path()
    }

    /// Monotonic ns of the latest tick.
    pub fn now_ns(&self) -> u64 {
        self.now_ns
    }

    /// A live connection's replayed state.
    pub fn get(&self, cookie: u64) -> Option<&Tracked> {
        self.table.get(&cookie)
    }

    /// Every live connection.
    pub fn connections(&self) -> impl Iterator<Item = &Tracked> {
        self.table.values()
    }

    /// Applies the next record; `None` at the end of the file (and after an error).
    pub fn next_event(&mut self) -> Option<Result<Event, RecordError>> {
        if let Some(r) = self.peeked.take() {
            return Some(self.apply(r));
        }
        let record = match self.reader.next_record()? {
            Ok(r) => r,
            Err(e) => return Some(Err(e)),
        };
        Some(self.apply(record))
    }

    /// Applies every record up to monotonic time `mono_ns` (the state of the last poll at or
    /// before it); `Ok(false)` once the file has ended.
    pub fn advance_to(&mut self, mono_ns: u64) -> Result<bool, RecordError> {
        loop {
            let record = match self.peeked.take() {
                Some(r) => r,
                None => match self.reader.next_record() {
                    None => return Ok(false),
                    Some(r) => r?,
                },
            };
            if let Record::Tick { delta_ns } = record
                && self.now_ns.wrapping_add(delta_ns) > mono_ns
            {
                self.peeked = Some(record);
                return Ok(true);
            }
            self.apply(record)?;
        }
    }

    fn apply(&mut self, record: Record) -> Result<Event, RecordError> {
        let now = self.now_ns;
        match record {
            Record::Tick { delta_ns } => {
                self.now_ns = self.now_ns.wrapping_add(delta_ns);
                Ok(Event::Tick)
            }
            Record::Full { id, fields } => {
                let mut values = Values::default();
                for (i, v) in fields {
                    if let Some(i) = self.reader.field(i) {
                        values.set(i, Some(v));
                    }
                }
                let cookie = id.cookie;
                let matched = self.table.get(&cookie).map(|old| {
                    old.id.local == id.local
                        && old.id.remote == id.remote
                        && old.values.changed(&values) & !VOLATILE_MASK == 0
                });
                if matched == Some(false) {
                    self.mismatches += 1;
                }
                let first_ns = self.table.get(&cookie).map_or(now, |t| t.first_ns);
                self.table.insert(cookie, Tracked { id, values, first_ns, last_ns: now });
                Ok(Event::Full { cookie, matched })
            }
            Record::Change { cookie, changes } => {
                let reader = &self.reader;
                let mapped: Vec<(usize, Option<u64>)> =
                    changes.into_iter().filter_map(|(i, d)| Some((reader.field(i)?, d))).collect();
                let Some(t) = self.table.get_mut(&cookie) else {
                    let what =
                        format!("a change of connection {cookie}, which the file never opened");
                    return Err(self.reader.inconsistent(what));
                };
                let before = t.values;
                apply_change(&mut t.values, mapped);
                t.last_ns = now;
                Ok(Event::Change { cookie, mask: t.values.changed(&before) })
            }
            Record::Closed { id, fields, seen, lifetime_ns, max_rtt_us } => {
                let mut values = Values::default();
                for (i, v) in fields {
                    if let Some(i) = self.reader.field(i) {
                        values.set(i, Some(v));
                    }
                }
                let record = ClosedRecord { id, values, seen, lifetime_ns, max_rtt_us };
                Ok(Event::Closed(Box::new(record.summary())))
            }
            Record::Gone { cookie } => match self.table.remove(&cookie) {
                Some(t) => Ok(Event::Gone(Box::new(t))),
                None => {
                    let what =
                        format!("the end of connection {cookie}, which the file never opened");
                    Err(self.reader.inconsistent(what))
                }
            },
        }
    }
}

/// A recording of one or more files (rotated ones included), replayed by wall-clock time.
#[derive(Debug)]
pub struct Recording {
    /// The files, oldest first; the first is the current one.
    files: std::collections::VecDeque<Replay>,
    ended: bool,
}

impl Recording {
    /// Opens `paths` and orders them by start time.
    pub fn open(paths: &[std::path::PathBuf]) -> Result<Recording, RecordError> {
        let mut files = paths.iter().map(|p| Replay::open(p)).collect::<Result<Vec<_>, _>>()?;
        files.sort_by_key(|r| r.header().start_wall_ns);
        Ok(Recording { files: files.into(), ended: false })
    }

    /// Wall-clock ns when the oldest file started.
    pub fn start_wall_ns(&self) -> u64 {
        self.files.front().map_or(0, |r| r.header().start_wall_ns)
    }

    /// The current file.
    pub fn current(&self) -> Option<&Replay> {
        self.files.front()
    }

    /// Wall-clock ns of the latest poll applied.
    pub fn now_wall_ns(&self) -> u64 {
        self.current().map_or(0, |r| r.header().wall_ns(r.now_ns()))
    }

    /// Whether the last file has ended.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// Replays up to wall-clock time `wall_ns`, moving on to the next file once it has started
    /// (a file's connections are those of its own polls).
    pub fn advance_to_wall(&mut self, wall_ns: u64) -> Result<(), RecordError> {
        while let Some(r) = self.files.front_mut() {
            let h = r.header();
            if wall_ns < h.start_wall_ns {
                return Ok(());
            }
            let more = r.advance_to(h.start_mono_ns.saturating_add(wall_ns - h.start_wall_ns))?;
            if r.mismatches > 0 {
                let what = format!(
                    "{} full snapshots disagree with the changes before them",
                    r.mismatches
                );
                return Err(RecordError::Corrupt { path: r.path().to_owned(), offset: 0, what });
            }
            // The next file takes over from its start; until then an ended file shows its
            // last poll.
            let next_starts = self.files.get(1).map(|n| n.header().start_wall_ns);
            match next_starts {
                Some(start) if start <= wall_ns => {
                    self.files.pop_front();
                }
                next => {
                    self.ended = !more && next.is_none();
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// The connections live at the current time.
    pub fn connections(&self) -> impl Iterator<Item = &Tracked> {
        self.files.front().into_iter().flat_map(Replay::connections)
    }
}
