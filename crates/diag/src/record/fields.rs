//! The fields the flight recorder keeps for every connection, and the conversions between a
//! dumped [`Socket`] and a [`Values`] row, and from a row back to a [`Connection`].
//!
//! `struct tcp_info` is recorded field by field from the bytes the kernel sent (the table
//! below is the kernel's layout up to Linux 6.18), so that a replayed row rebuilds those bytes
//! and [`TcpInfo::parse`] gives exactly what a live dump would have given. Around it: the
//! `inet_diag_msg` header (state, timer, queues), `SKMEMINFO` and BBR's model. A field the
//! kernel did not send is absent, never zero.
//!
//! Four fields are ages (`last_*_ms`, milliseconds since an event), which grow on every poll
//! of an idle connection. They are [`Field::volatile`]: a change to them alone writes no
//! record (an idle connection costs nothing), and they are written with the other fields
//! whenever something else changed.

use std::net::SocketAddr;

use tcptail_sock::cc_info::BbrInfo;
use tcptail_sock::tcp_info::{TcpInfo, TcpState};

use crate::wire::{SkMemInfo, Socket};
use crate::{Connection, Derived, unmap};

/// Where a field's value comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    /// `inet_diag_msg`: 0 state, 1 timer, 2 retransmit backoff, 3 receive queue, 4 send queue.
    Header(u8),
    /// Length of the `tcp_info` the kernel sent.
    InfoLen,
    /// A `tcp_info` field: byte offset and width (1, 2, 4 or 8).
    Info(u16, u8),
    /// The n-th word of `SKMEMINFO`.
    Skmem(u8),
    /// BBR: 0 bandwidth, 1 min RTT, 2 pacing gain, 3 cwnd gain.
    Bbr(u8),
}

/// One recorded field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// Its name in files, timelines and CSV headers.
    pub name: &'static str,
    source: Source,
    /// An age that grows while nothing happens: its change alone writes no record.
    pub volatile: bool,
}

const fn f(name: &'static str, source: Source) -> Field {
    Field { name, source, volatile: false }
}

const fn info(name: &'static str, offset: u16, width: u8) -> Field {
    f(name, Source::Info(offset, width))
}

const fn age(name: &'static str, offset: u16) -> Field {
    Field { name, source: Source::Info(offset, 4), volatile: true }
}

/// Every recorded field, in file order (a file lists its own names, so readers map by name).
pub const FIELDS: [Field; 87] = [
    f("state", Source::Header(0)),
    f("timer", Source::Header(1)),
    f("backoff", Source::Header(2)),
    f("recv_queue_bytes", Source::Header(3)),
    f("send_queue_bytes", Source::Header(4)),
    f("info_len", Source::InfoLen),
    info("tcpi_state", 0, 1),
    info("ca_state", 1, 1),
    info("retransmits", 2, 1),
    info("probes", 3, 1),
    info("backoff_info", 4, 1),
    info("options", 5, 1),
    info("wscale", 6, 1),
    info("rate_flags", 7, 1),
    info("rto_us", 8, 4),
    info("ato_us", 12, 4),
    info("snd_mss_bytes", 16, 4),
    info("rcv_mss_bytes", 20, 4),
    info("unacked_segs", 24, 4),
    info("sacked_segs", 28, 4),
    info("lost_segs", 32, 4),
    info("retrans_segs", 36, 4),
    info("fackets_segs", 40, 4),
    age("last_data_sent_ms", 44),
    age("last_ack_sent_ms", 48),
    age("last_data_recv_ms", 52),
    age("last_ack_recv_ms", 56),
    info("pmtu_bytes", 60, 4),
    info("rcv_ssthresh_bytes", 64, 4),
    info("rtt_us", 68, 4),
    info("rttvar_us", 72, 4),
    info("snd_ssthresh_segs", 76, 4),
    info("snd_cwnd_segs", 80, 4),
    info("advmss_bytes", 84, 4),
    info("reordering_segs", 88, 4),
    info("rcv_rtt_us", 92, 4),
    info("rcv_space_bytes", 96, 4),
    info("total_retrans_segs", 100, 4),
    info("pacing_rate_bytes_per_sec", 104, 8),
    info("max_pacing_rate_bytes_per_sec", 112, 8),
    info("bytes_acked", 120, 8),
    info("bytes_received", 128, 8),
    info("segs_out", 136, 4),
    info("segs_in", 140, 4),
    info("notsent_bytes", 144, 4),
    info("min_rtt_us", 148, 4),
    info("data_segs_in", 152, 4),
    info("data_segs_out", 156, 4),
    info("delivery_rate_bytes_per_sec", 160, 8),
    info("busy_time_us", 168, 8),
    info("rwnd_limited_us", 176, 8),
    info("sndbuf_limited_us", 184, 8),
    info("delivered_segs", 192, 4),
    info("delivered_ce_segs", 196, 4),
    info("bytes_sent", 200, 8),
    info("bytes_retrans", 208, 8),
    info("dsack_dups", 216, 4),
    info("reord_seen", 220, 4),
    info("rcv_ooo_segs", 224, 4),
    info("snd_wnd_bytes", 228, 4),
    info("rcv_wnd_bytes", 232, 4),
    info("rehashes", 236, 4),
    info("total_rto", 240, 2),
    info("total_rto_recoveries", 242, 2),
    info("total_rto_time_ms", 244, 4),
    info("received_ce_segs", 248, 4),
    info("delivered_e1_bytes", 252, 4),
    info("delivered_e0_bytes", 256, 4),
    info("delivered_ce_bytes", 260, 4),
    info("received_e1_bytes", 264, 4),
    info("received_e0_bytes", 268, 4),
    info("received_ce_bytes", 272, 4),
    info("accecn_fail_mode", 276, 2),
    info("accecn_opt_seen", 278, 2),
    f("skmem_rmem_alloc", Source::Skmem(0)),
    f("skmem_rcvbuf", Source::Skmem(1)),
    f("skmem_wmem_alloc", Source::Skmem(2)),
    f("skmem_sndbuf", Source::Skmem(3)),
    f("skmem_fwd_alloc", Source::Skmem(4)),
    f("skmem_wmem_queued", Source::Skmem(5)),
    f("skmem_optmem", Source::Skmem(6)),
    f("skmem_backlog", Source::Skmem(7)),
    f("skmem_drops", Source::Skmem(8)),
    f("bbr_bw_bytes_per_sec", Source::Bbr(0)),
    f("bbr_min_rtt_us", Source::Bbr(1)),
    f("bbr_pacing_gain", Source::Bbr(2)),
    f("bbr_cwnd_gain", Source::Bbr(3)),
];

/// Number of recorded fields (at most 128: a row's presence is one `u128`).
pub const FIELD_COUNT: usize = FIELDS.len();

const _: () = assert!(FIELD_COUNT <= 128);

/// The bits of [`FIELDS`] that are volatile.
pub const VOLATILE_MASK: u128 = {
    let mut mask = 0u128;
    let mut i = 0;
    while i < FIELD_COUNT {
        if FIELDS[i].volatile {
            mask |= 1 << i;
        }
        i += 1;
    }
    mask
};

/// The index of the field named `name`.
pub fn field_index(name: &str) -> Option<usize> {
    FIELDS.iter().position(|f| f.name == name)
}

/// One connection's values, one per [`FIELDS`] entry; an absent field holds 0 and its
/// presence bit is clear.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Values {
    values: [u64; FIELD_COUNT],
    present: u128,
}

impl Default for Values {
    fn default() -> Self {
        Values { values: [0; FIELD_COUNT], present: 0 }
    }
}

impl Values {
    /// The value of field `i`, if present.
    pub fn get(&self, i: usize) -> Option<u64> {
        (self.present >> i & 1 == 1).then(|| self.values[i])
    }

    /// Sets (or clears, with `None`) field `i`.
    pub fn set(&mut self, i: usize, value: Option<u64>) {
        match value {
            Some(v) => {
                self.values[i] = v;
                self.present |= 1 << i;
            }
            None => {
                self.values[i] = 0;
                self.present &= !(1 << i);
            }
        }
    }

    /// The value of the field named `name`, if present.
    pub fn by_name(&self, name: &str) -> Option<u64> {
        field_index(name).and_then(|i| self.get(i))
    }

    /// Bit `i` set for every field whose value or presence differs from `other`.
    pub fn changed(&self, other: &Values) -> u128 {
        let mut mask = self.present ^ other.present;
        for i in 0..FIELD_COUNT {
            if self.values[i] != other.values[i] {
                mask |= 1 << i;
            }
        }
        mask
    }

    /// Bit `i` set for every present field.
    pub fn present(&self) -> u128 {
        self.present
    }

    /// Fills the row from a dumped socket.
    pub fn fill(&mut self, s: &Socket<'_>) {
        let len = (!s.info_raw.is_empty()).then_some(s.info_raw.len());
        self.fill_parts(header_of(s), s.info_raw, len, s.skmem.as_ref(), s.bbr.as_ref());
    }

    fn fill_parts(
        &mut self,
        header: [u32; 5],
        raw: &[u8],
        info_len: Option<usize>,
        skmem: Option<&SkMemInfo>,
        bbr: Option<&BbrInfo>,
    ) {
        for (i, field) in FIELDS.iter().enumerate() {
            let value = match field.source {
                Source::Header(n) => Some(u64::from(header[usize::from(n)])),
                Source::InfoLen => info_len.map(|l| l as u64),
                Source::Info(off, width) => read(raw, usize::from(off), width),
                Source::Skmem(n) => skmem.map(|m| u64::from(skmem_words(m)[usize::from(n)])),
                Source::Bbr(n) => bbr.map(|b| match n {
                    0 => b.bw_bytes_per_sec,
                    1 => u64::from(b.min_rtt_us),
                    2 => u64::from(b.pacing_gain),
                    _ => u64::from(b.cwnd_gain),
                }),
            };
            self.set(i, value);
        }
    }

    /// The `tcp_info` bytes this row was recorded from (absent fields zero), parsed.
    pub fn tcp_info(&self) -> Option<TcpInfo> {
        // A corrupt length must not make a replay allocate without bound.
        let len = usize::try_from(self.get(INFO_LEN)?).ok()?.min(4096);
        let mut raw = vec![0u8; len];
        for (i, field) in FIELDS.iter().enumerate() {
            if let (Source::Info(off, width), Some(v)) = (field.source, self.get(i)) {
                let (off, width) = (usize::from(off), usize::from(width));
                if let Some(dst) = raw.get_mut(off..off + width) {
                    dst.copy_from_slice(&v.to_ne_bytes()[native_range(width)]);
                }
            }
        }
        TcpInfo::parse(&raw).ok()
    }

    /// BBR's model, when recorded.
    pub fn bbr(&self) -> Option<BbrInfo> {
        let word = |i: usize| self.get(BBR + i);
        Some(BbrInfo {
            bw_bytes_per_sec: word(0)?,
            min_rtt_us: word(1)? as u32,
            pacing_gain: word(2)? as u32,
            cwnd_gain: word(3)? as u32,
        })
    }

    /// Socket memory, when recorded.
    pub fn skmem(&self) -> Option<SkMemInfo> {
        let w = |i: usize| self.get(SKMEM + i).map(|v| v as u32);
        Some(SkMemInfo {
            rmem_alloc: w(0)?,
            rcvbuf: w(1)?,
            wmem_alloc: w(2)?,
            sndbuf: w(3)?,
            fwd_alloc: w(4)?,
            wmem_queued: w(5)?,
            optmem: w(6)?,
            backlog: w(7)?,
            drops: w(8)?,
        })
    }
}

/// A socket's recorded state as the kernel sent it (the live table keeps one per connection:
/// comparing these bytes is how a poll finds that nothing changed, without decoding fields).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRow {
    header: [u32; 5],
    info: [u8; TcpInfo::KNOWN_LEN],
    /// Length of the `tcp_info` the kernel sent (0: none); bytes past the known struct are
    /// not kept (no field reads them).
    info_len: usize,
    skmem: Option<SkMemInfo>,
    bbr: Option<BbrInfo>,
}

/// The bytes of `tcp_info` that hold the volatile ages (`last_data_sent_ms` ..
/// `last_ack_recv_ms`).
const AGES: std::ops::Range<usize> = 44..60;

const _: () = {
    let mut i = 0;
    while i < FIELD_COUNT {
        if let Source::Info(off, width) = FIELDS[i].source {
            let in_ages = off as usize >= AGES.start && (off as usize) < AGES.end;
            assert!(in_ages == FIELDS[i].volatile && (!in_ages || width == 4));
        }
        i += 1;
    }
};

/// A `tcp_info`'s bytes before and after the ages.
fn outside_ages(b: &[u8]) -> (&[u8], Option<&[u8]>) {
    (b.get(..AGES.start).unwrap_or(b), b.get(AGES.end..))
}

fn header_of(s: &Socket<'_>) -> [u32; 5] {
    [s.state.into(), s.timer.into(), s.retrans.into(), s.rqueue, s.wqueue]
}

impl RawRow {
    /// Copies what the recorder keeps of a dumped socket.
    pub fn of(s: &Socket<'_>) -> RawRow {
        let mut info = [0u8; TcpInfo::KNOWN_LEN];
        let kept = s.info_raw.len().min(TcpInfo::KNOWN_LEN);
        info[..kept].copy_from_slice(&s.info_raw[..kept]);
        RawRow {
            header: header_of(s),
            info,
            info_len: s.info_raw.len(),
            skmem: s.skmem,
            bbr: s.bbr,
        }
    }

    /// Whether `s` has the same values as this row in every field but the volatile ones.
    pub fn same_as(&self, s: &Socket<'_>) -> bool {
        let kept = s.info_raw.len().min(TcpInfo::KNOWN_LEN);
        let (now, then) = (&s.info_raw[..kept], &self.info[..kept]);
        self.info_len == s.info_raw.len()
            && self.header == header_of(s)
            && self.skmem == s.skmem
            && self.bbr == s.bbr
            && outside_ages(now) == outside_ages(then)
    }

    /// The TCP state of the socket header.
    pub fn state(&self) -> u32 {
        self.header[0]
    }

    /// The row's values.
    pub fn values(&self) -> Values {
        let mut v = Values::default();
        let kept = self.info_len.min(TcpInfo::KNOWN_LEN);
        let len = (self.info_len > 0).then_some(self.info_len);
        v.fill_parts(self.header, &self.info[..kept], len, self.skmem.as_ref(), self.bbr.as_ref());
        v
    }
}

/// Index of `info_len`.
const INFO_LEN: usize = 5;
/// Index of the first `SKMEMINFO` word.
const SKMEM: usize = 74;
/// Index of the first BBR field.
const BBR: usize = 83;

const _: () = {
    assert!(matches!(FIELDS[INFO_LEN].source, Source::InfoLen));
    assert!(matches!(FIELDS[SKMEM].source, Source::Skmem(0)));
    assert!(matches!(FIELDS[BBR].source, Source::Bbr(0)));
};

fn skmem_words(m: &SkMemInfo) -> [u32; 9] {
    [
        m.rmem_alloc,
        m.rcvbuf,
        m.wmem_alloc,
        m.sndbuf,
        m.fwd_alloc,
        m.wmem_queued,
        m.optmem,
        m.backlog,
        m.drops,
    ]
}

/// The bytes of a native-endian `u64` that hold a value of `width` bytes.
fn native_range(width: usize) -> std::ops::Range<usize> {
    if cfg!(target_endian = "little") { 0..width } else { 8 - width..8 }
}

fn read(raw: &[u8], off: usize, width: u8) -> Option<u64> {
    let bytes = raw.get(off..off + usize::from(width))?;
    let mut word = [0u8; 8];
    word[native_range(usize::from(width))].copy_from_slice(bytes);
    Some(u64::from_ne_bytes(word))
}

/// Who a recorded connection is: written once per file (and with every full snapshot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// Kernel socket cookie.
    pub cookie: u64,
    /// Local address as dumped (IPv4-mapped addresses stay IPv6).
    pub local: SocketAddr,
    /// Remote address as dumped.
    pub remote: SocketAddr,
    /// Congestion control.
    pub cc: Option<String>,
}

impl Identity {
    /// The identity of a dumped socket.
    pub fn of(s: &Socket<'_>) -> Identity {
        Identity {
            cookie: s.id.cookie,
            local: SocketAddr::new(s.id.src, s.id.sport),
            remote: SocketAddr::new(s.id.dst, s.id.dport),
            cc: s.cong.map(str::to_owned),
        }
    }

    /// The connection a recorded row describes, as a live dump would have shown it.
    pub fn connection(&self, v: &Values) -> Connection {
        let info = v.tcp_info();
        let bbr = v.bbr();
        let queue = |i: usize| v.get(i).unwrap_or(0) as u32;
        Connection {
            local: SocketAddr::new(unmap(self.local.ip()), self.local.port()),
            remote: SocketAddr::new(unmap(self.remote.ip()), self.remote.port()),
            state: TcpState::from_raw(v.get(0).unwrap_or(0) as u8).name(),
            cookie: self.cookie,
            cc: self.cc.clone(),
            recv_queue_bytes: queue(3),
            send_queue_bytes: queue(4),
            derived: Derived::compute(info.as_ref(), bbr.as_ref()),
            info,
            bbr,
            skmem: v.skmem(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_info_fields_tile_the_known_struct() {
        for (i, a) in FIELDS.iter().enumerate() {
            assert!(FIELDS[i + 1..].iter().all(|b| b.name != a.name), "{} twice", a.name);
        }
        let mut covered = [false; TcpInfo::KNOWN_LEN];
        for field in FIELDS {
            if let Source::Info(off, width) = field.source {
                for b in &mut covered[usize::from(off)..usize::from(off) + usize::from(width)] {
                    assert!(!*b, "{} overlaps", field.name);
                    *b = true;
                }
            }
        }
        assert!(covered.iter().all(|&b| b), "every byte of tcp_info is a field");
        assert_eq!(VOLATILE_MASK.count_ones(), 4);
    }

    #[test]
    fn a_row_rebuilds_the_tcp_info_it_was_filled_from() {
        // Every byte distinct, so a field written at the wrong offset or width shows.
        for len in [TcpInfo::BASE_LEN, 232, TcpInfo::KNOWN_LEN, 300] {
            let raw: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
            let sock = Socket {
                family: 2,
                state: 1,
                timer: 0,
                retrans: 0,
                id: crate::SockId {
                    sport: 1,
                    dport: 2,
                    src: [127, 0, 0, 1].into(),
                    dst: [127, 0, 0, 2].into(),
                    ifindex: 0,
                    cookie: 9,
                },
                expires_ms: 0,
                rqueue: 5,
                wqueue: 6,
                uid: 0,
                inode: 0,
                info: TcpInfo::parse(&raw).ok(),
                info_raw: &raw,
                cong: Some("bbr"),
                bbr: Some(BbrInfo {
                    bw_bytes_per_sec: 1 << 40,
                    min_rtt_us: 7,
                    pacing_gain: 256,
                    cwnd_gain: 512,
                }),
                skmem: Some(SkMemInfo { drops: 3, sndbuf: 4, ..SkMemInfo::default() }),
            };
            let mut v = Values::default();
            v.fill(&sock);
            let conn = Identity::of(&sock).connection(&v);
            assert_eq!(conn, Connection::from_socket(&sock), "tcp_info of {len} bytes");
            let row = RawRow::of(&sock);
            assert_eq!(row.values(), v);
            assert!(row.same_as(&sock));
            // An age alone is no change; any other byte is.
            let mut other = raw.clone();
            other[50] ^= 1;
            let aged = Socket { info_raw: &other, ..sock.clone() };
            assert!(row.same_as(&aged));
            for at in [0, 43, 60, len.min(TcpInfo::KNOWN_LEN) - 1] {
                let mut other = raw.clone();
                other[at] ^= 1;
                assert!(!row.same_as(&Socket { info_raw: &other, ..sock.clone() }), "byte {at}");
            }
            assert!(!row.same_as(&Socket { wqueue: 7, ..sock.clone() }));
            assert!(!row.same_as(&Socket { info_raw: &raw[..len - 1], ..sock.clone() }));
        }
    }
}
