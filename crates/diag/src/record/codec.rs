//! The records inside a block, encoded and decoded (pure, no I/O).
//!
//! Every record starts with a kind byte; integers are LEB128 varints.
//!
//! - `1` **tick** `Δt`: a poll at `Δt` ns after the previous tick of the file (the first one
//!   after the file's start time). The records that follow happened at this tick.
//! - `2` **full** `cookie local remote cc n (index value)×n`: a connection's whole state
//!   (its first record in a file, every full-snapshot period, and when its congestion control
//!   changes). An address is `4` + 4 bytes or `6` + 16 bytes, then the port (2 bytes, big
//!   endian); `cc` is its length + 1 (0: none) and the name.
//! - `3` **change** `cookie n (index·2 + absent, [zigzag(new − old)])×n`: the fields that
//!   changed since the connection's previous record, as wrapping differences (counters grow
//!   by small amounts, so the varints stay short).
//! - `4` **gone** `cookie`: the poll no longer saw the connection.
//! - `5` **closed** `seen lifetime+1 max_rtt+1` then a full record's body: a connection's end
//!   and its final state ([`crate::closed::ClosedSummary`]); `seen` is 1 for the kernel's
//!   destroy notification, 2 for a poll's; 0 stands for unknown lifetime or RTT.
//!
//! Field indices are positions in the file's own field list (its header), so a reader maps
//! them to [`super::fields::FIELDS`] by name.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use std::time::Duration;

use super::fields::{FIELD_COUNT, Identity, Values};
use crate::closed::{CloseSeen, ClosedSummary};

const TICK: u8 = 1;
const FULL: u8 = 2;
const CHANGE: u8 = 3;
const GONE: u8 = 4;
const CLOSED: u8 = 5;

/// Why a block's records could not be decoded (the offset is within the block's records).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{what} at byte {offset} of the block's records")]
pub struct DecodeError {
    /// Offset in the decompressed block.
    pub offset: usize,
    /// What was wrong.
    pub what: String,
}

/// Appends `v` as an unsigned LEB128 varint.
pub fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push(v as u8 | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// Zigzag-maps a wrapping difference so that small negative ones stay short.
pub fn zigzag(d: u64) -> u64 {
    let d = d as i64;
    ((d << 1) ^ (d >> 63)) as u64
}

/// The inverse of [`zigzag`].
pub fn unzigzag(z: u64) -> u64 {
    (z >> 1) ^ (z & 1).wrapping_neg()
}

/// Appends a tick `delta_ns` after the previous one.
pub fn put_tick(buf: &mut Vec<u8>, delta_ns: u64) {
    buf.push(TICK);
    put_varint(buf, delta_ns);
}

fn put_addr(buf: &mut Vec<u8>, a: SocketAddr) {
    match a.ip() {
        IpAddr::V4(v4) => {
            buf.push(4);
            buf.extend_from_slice(&v4.octets());
        }
        IpAddr::V6(v6) => {
            buf.push(6);
            buf.extend_from_slice(&v6.octets());
        }
    }
    buf.extend_from_slice(&a.port().to_be_bytes());
}

/// Appends a full snapshot of one connection.
pub fn put_full(buf: &mut Vec<u8>, id: &Identity, v: &Values) {
    buf.push(FULL);
    put_full_body(buf, id, v);
}

/// Appends the end of a connection with its final state.
pub fn put_closed(buf: &mut Vec<u8>, c: &ClosedRecord) {
    buf.push(CLOSED);
    buf.push(c.seen.to_byte());
    put_varint(buf, c.lifetime_ns.map_or(0, |l| l.saturating_add(1)));
    put_varint(buf, c.max_rtt_us.map_or(0, |r| u64::from(r) + 1));
    put_full_body(buf, &c.id, &c.values);
}

/// What a closed record holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClosedRecord {
    /// Who it was.
    pub id: Identity,
    /// Its final values.
    pub values: Values,
    /// How the close was learnt.
    pub seen: CloseSeen,
    /// From its first poll to the close.
    pub lifetime_ns: Option<u64>,
    /// The largest smoothed RTT seen, µs.
    pub max_rtt_us: Option<u32>,
}

impl ClosedRecord {
    /// The summary of what the connection lived through.
    pub fn summary(&self) -> ClosedSummary {
        let lifetime = self.lifetime_ns.map(Duration::from_nanos);
        ClosedSummary::new(&self.id, &self.values, self.seen, lifetime, self.max_rtt_us)
    }
}

fn put_full_body(buf: &mut Vec<u8>, id: &Identity, v: &Values) {
    put_varint(buf, id.cookie);
    put_addr(buf, id.local);
    put_addr(buf, id.remote);
    match &id.cc {
        // A name longer than 254 bytes cannot come from the kernel (TCP_CA_NAME_MAX is 16).
        Some(cc) => {
            let name = &cc.as_bytes()[..cc.len().min(254)];
            buf.push(name.len() as u8 + 1);
            buf.extend_from_slice(name);
        }
        None => buf.push(0),
    }
    let present = v.present();
    put_varint(buf, u64::from(present.count_ones()));
    for i in (0..FIELD_COUNT).filter(|&i| present >> i & 1 == 1) {
        put_varint(buf, i as u64);
        put_varint(buf, v.get(i).unwrap_or(0));
    }
}

/// Appends the fields in `mask` that changed from `old` to `new`.
pub fn put_change(buf: &mut Vec<u8>, cookie: u64, old: &Values, new: &Values, mask: u128) {
    buf.push(CHANGE);
    put_varint(buf, cookie);
    put_varint(buf, u64::from(mask.count_ones()));
    for i in (0..FIELD_COUNT).filter(|&i| mask >> i & 1 == 1) {
        match new.get(i) {
            Some(v) => {
                put_varint(buf, (i as u64) << 1);
                put_varint(buf, zigzag(v.wrapping_sub(old.get(i).unwrap_or(0))));
            }
            None => put_varint(buf, (i as u64) << 1 | 1),
        }
    }
}

/// Appends the end of a connection.
pub fn put_gone(buf: &mut Vec<u8>, cookie: u64) {
    buf.push(GONE);
    put_varint(buf, cookie);
}

/// One decoded record. Field indices are the file's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Record {
    /// A poll, `delta_ns` after the previous tick.
    Tick {
        /// Nanoseconds since the previous tick (or the file's start).
        delta_ns: u64,
    },
    /// A connection's whole state.
    Full {
        /// Who it is.
        id: Identity,
        /// `(file field index, value)` of every present field.
        fields: Vec<(usize, u64)>,
    },
    /// Fields that changed.
    Change {
        /// The connection.
        cookie: u64,
        /// `(file field index, Some(wrapping difference) | None for absent)`.
        changes: Vec<(usize, Option<u64>)>,
    },
    /// The connection is gone.
    Gone {
        /// The connection.
        cookie: u64,
    },
    /// The connection closed (`fields` as in [`Record::Full`]).
    Closed {
        /// Who it was.
        id: Identity,
        /// `(file field index, value)` of every present field of its final state.
        fields: Vec<(usize, u64)>,
        /// How the close was learnt.
        seen: CloseSeen,
        /// From its first poll to the close.
        lifetime_ns: Option<u64>,
        /// The largest smoothed RTT seen, µs.
        max_rtt_us: Option<u32>,
    },
}

/// Reads records from one decompressed block.
#[derive(Debug)]
pub struct Decoder<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Fields the file declares: indices at or past it are corrupt.
    field_count: usize,
}

impl<'a> Decoder<'a> {
    /// A decoder over `buf`, for a file that declares `field_count` fields.
    pub fn new(buf: &'a [u8], field_count: usize) -> Decoder<'a> {
        Decoder { buf, pos: 0, field_count }
    }

    /// Bytes consumed so far.
    pub fn position(&self) -> usize {
        self.pos
    }

    fn fail<T>(&self, at: usize, what: impl Into<String>) -> Result<T, DecodeError> {
        Err(DecodeError { offset: at, what: what.into() })
    }

    fn byte(&mut self) -> Result<u8, DecodeError> {
        let b = *self
            .buf
            .get(self.pos)
            .ok_or(DecodeError { offset: self.pos, what: "record cut short".into() })?;
        self.pos += 1;
        Ok(b)
    }

    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let at = self.pos;
        match self.buf.get(at..at + N) {
            Some(b) => {
                self.pos += N;
                Ok(b.try_into().expect("N bytes"))
            }
            None => self.fail(at, "record cut short"),
        }
    }

    fn varint(&mut self) -> Result<u64, DecodeError> {
        let at = self.pos;
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            let part = u64::from(b & 0x7f);
            if shift == 63 && part > 1 {
                break;
            }
            v |= part << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        self.fail(at, "varint longer than 64 bits")
    }

    fn index(&mut self, raw: u64) -> Result<usize, DecodeError> {
        let at = self.pos;
        match usize::try_from(raw) {
            Ok(i) if i < self.field_count => Ok(i),
            _ => self.fail(at, format!("field index {raw} beyond the file's {}", self.field_count)),
        }
    }

    fn count(&mut self) -> Result<usize, DecodeError> {
        let at = self.pos;
        let n = self.varint()?;
        // Each entry takes at least one byte: a larger count is corrupt, not a reason to
        // reserve memory.
        match usize::try_from(n) {
            Ok(n) if n <= self.field_count && n <= self.buf.len() - self.pos => Ok(n),
            _ => self.fail(at, format!("field count {n} beyond the file's {}", self.field_count)),
        }
    }

    fn addr(&mut self) -> Result<SocketAddr, DecodeError> {
        let at = self.pos;
        let ip = match self.byte()? {
            4 => IpAddr::V4(Ipv4Addr::from(self.bytes::<4>()?)),
            6 => IpAddr::V6(Ipv6Addr::from(self.bytes::<16>()?)),
            other => return self.fail(at, format!("address family tag {other}")),
        };
        Ok(SocketAddr::new(ip, u16::from_be_bytes(self.bytes::<2>()?)))
    }

    fn full_body(&mut self) -> Result<(Identity, Vec<(usize, u64)>), DecodeError> {
        let cookie = self.varint()?;
        let local = self.addr()?;
        let remote = self.addr()?;
        let cc = match usize::from(self.byte()?) {
            0 => None,
            n => {
                let start = self.pos;
                let Some(name) = self.buf.get(start..start + n - 1) else {
                    return self.fail(start, "congestion control name cut short");
                };
                self.pos += n - 1;
                match std::str::from_utf8(name) {
                    Ok(s) => Some(s.to_owned()),
                    Err(_) => return self.fail(start, "congestion control not UTF-8"),
                }
            }
        };
        let n = self.count()?;
        let mut fields = Vec::with_capacity(n);
        for _ in 0..n {
            let raw = self.varint()?;
            let i = self.index(raw)?;
            fields.push((i, self.varint()?));
        }
        Ok((Identity { cookie, local, remote, cc }, fields))
    }

    /// The next record, `None` at the end of the block.
    pub fn next_record(&mut self) -> Option<Result<Record, DecodeError>> {
        if self.pos >= self.buf.len() {
            return None;
        }
        let result = self.record();
        if result.is_err() {
            // One error per block: what follows a bad record cannot be framed.
            self.pos = self.buf.len();
        }
        Some(result)
    }

    fn record(&mut self) -> Result<Record, DecodeError> {
        let at = self.pos;
        match self.byte()? {
            TICK => Ok(Record::Tick { delta_ns: self.varint()? }),
            FULL => {
                let (id, fields) = self.full_body()?;
                Ok(Record::Full { id, fields })
            }
            CLOSED => {
                let at = self.pos;
                let Some(seen) = CloseSeen::from_byte(self.byte()?) else {
                    return self.fail(at, "unknown close kind");
                };
                let lifetime_ns = self.varint()?.checked_sub(1);
                let max_rtt_us =
                    self.varint()?.checked_sub(1).map(|r| r.min(u32::MAX.into()) as u32);
                let (id, fields) = self.full_body()?;
                Ok(Record::Closed { id, fields, seen, lifetime_ns, max_rtt_us })
            }
            CHANGE => {
                let cookie = self.varint()?;
                let n = self.count()?;
                let mut changes = Vec::with_capacity(n);
                for _ in 0..n {
                    let tagged = self.varint()?;
                    let i = self.index(tagged >> 1)?;
                    let delta = if tagged & 1 == 1 { None } else { Some(self.varint()?) };
                    changes.push((i, delta));
                }
                Ok(Record::Change { cookie, changes })
            }
            GONE => Ok(Record::Gone { cookie: self.varint()? }),
            other => self.fail(at, format!("unknown record kind {other}")),
        }
    }
}

/// Applies a change record's entries (already mapped to [`super::fields::FIELDS`] indices) to
/// `v`.
pub fn apply_change(v: &mut Values, changes: impl IntoIterator<Item = (usize, Option<u64>)>) {
    for (i, delta) in changes {
        let new = delta.map(|d| v.get(i).unwrap_or(0).wrapping_add(unzigzag(d)));
        v.set(i, new);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn values() -> impl Strategy<Value = Values> {
        proptest::collection::vec(proptest::option::of(any::<u64>()), FIELD_COUNT).prop_map(|vs| {
            let mut v = Values::default();
            for (i, x) in vs.into_iter().enumerate() {
                v.set(i, x);
            }
            v
        })
    }

    fn identity() -> impl Strategy<Value = Identity> {
        let addr = prop_oneof![
            (any::<[u8; 4]>(), any::<u16>()).prop_map(|(a, p)| SocketAddr::from((a, p))),
            (any::<[u8; 16]>(), any::<u16>()).prop_map(|(a, p)| SocketAddr::from((a, p))),
        ];
        (any::<u64>(), addr.clone(), addr, proptest::option::of("[a-z0-9_]{0,16}"))
            .prop_map(|(cookie, local, remote, cc)| Identity { cookie, local, remote, cc })
    }

    fn decode_all(buf: &[u8]) -> Vec<Record> {
        let mut d = Decoder::new(buf, FIELD_COUNT);
        std::iter::from_fn(|| d.next_record()).map(|r| r.expect("decodes")).collect()
    }

    proptest! {
        #[test]
        fn varints_and_zigzag_round_trip(v in any::<u64>(), d in any::<u64>()) {
            let mut buf = Vec::new();
            put_varint(&mut buf, v);
            let mut dec = Decoder::new(&buf, 0);
            prop_assert_eq!(dec.varint().unwrap(), v);
            prop_assert_eq!(dec.pos, buf.len());
            prop_assert_eq!(unzigzag(zigzag(d)), d);
        }

        #[test]
        fn a_chain_of_changes_rebuilds_every_row(
            id in identity(),
            rows in proptest::collection::vec(values(), 1..6),
            ticks in proptest::collection::vec(any::<u64>(), 1..6),
        ) {
            let mut buf = Vec::new();
            put_full(&mut buf, &id, &rows[0]);
            for pair in rows.windows(2) {
                put_change(&mut buf, id.cookie, &pair[0], &pair[1], pair[1].changed(&pair[0]));
            }
            for &t in &ticks {
                put_tick(&mut buf, t);
            }
            put_gone(&mut buf, id.cookie);
            let closed = ClosedRecord {
                id: id.clone(),
                values: rows[rows.len() - 1],
                seen: if ticks.len() % 2 == 0 { CloseSeen::Destroyed } else { CloseSeen::Vanished },
                lifetime_ns: ticks.first().copied().filter(|t| t % 3 != 0),
                max_rtt_us: ticks.last().map(|&t| t as u32).filter(|t| t % 5 != 0),
            };
            put_closed(&mut buf, &closed);
            let mut records = decode_all(&buf);
            match records.pop() {
                Some(Record::Closed { id: got, fields, seen, lifetime_ns, max_rtt_us }) => {
                    let mut v = Values::default();
                    for (i, x) in fields {
                        v.set(i, Some(x));
                    }
                    let back = ClosedRecord { id: got, values: v, seen, lifetime_ns, max_rtt_us };
                    prop_assert_eq!(back, closed);
                }
                other => prop_assert!(false, "last record {:?}", other),
            }
            prop_assert_eq!(records.len(), rows.len() + ticks.len() + 1);
            let mut v = Values::default();
            match &records[0] {
                Record::Full { id: got, fields } => {
                    prop_assert_eq!(got, &id);
                    for &(i, x) in fields {
                        v.set(i, Some(x));
                    }
                }
                other => prop_assert!(false, "first record {:?}", other),
            }
            prop_assert_eq!(&v, &rows[0]);
            for (record, want) in records[1..rows.len()].iter().zip(&rows[1..]) {
                match record {
                    Record::Change { cookie, changes } => {
                        prop_assert_eq!(*cookie, id.cookie);
                        apply_change(&mut v, changes.iter().copied());
                    }
                    other => prop_assert!(false, "expected a change, got {:?}", other),
                }
                prop_assert_eq!(&v, want);
            }
            for (record, &t) in records[rows.len()..].iter().zip(&ticks) {
                prop_assert_eq!(record, &Record::Tick { delta_ns: t });
            }
            prop_assert_eq!(records.last().unwrap(), &Record::Gone { cookie: id.cookie });
        }

        #[test]
        fn garbage_never_panics_and_errors_stop_the_block(
            bytes in proptest::collection::vec(any::<u8>(), 0..512),
            fields in 0..200usize,
        ) {
            let mut d = Decoder::new(&bytes, fields);
            let mut n = 0;
            while let Some(r) = d.next_record() {
                n += 1;
                if r.is_err() {
                    prop_assert!(d.next_record().is_none());
                    break;
                }
            }
            prop_assert!(n <= bytes.len());
        }
    }

    #[test]
    fn only_changed_fields_are_written() {
        let mut a = Values::default();
        a.set(3, Some(100));
        a.set(7, Some(5));
        let mut b = a;
        b.set(3, Some(98));
        b.set(7, None);
        let mut buf = Vec::new();
        put_change(&mut buf, 1, &a, &b, b.changed(&a));
        // kind, cookie, count, (3<<1, zigzag(-2) = 3), (7<<1 | 1)
        assert_eq!(buf, [CHANGE, 1, 2, 6, 3, 15]);
    }
}
