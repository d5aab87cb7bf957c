//! The scrape-time collector: turns one sock_diag dump into bounded Prometheus metrics.
//!
//! Cardinality is bounded by construction:
//! - connections matched by a [`Selectors`] selector get per-connection series labelled
//!   `selector`, `peer` (the remote address, never a port) and `conn`, a slot number a socket
//!   keeps for as long as it lives ([`Slots`], kept across scrapes in [`State`]), so a label's
//!   counters never jump to another socket. The cap (`max_connections`) admits the oldest
//!   matched sockets (smallest cookie) whatever the dump order, so the admitted set is stable
//!   too; the rest are counted in `tcptail_connections_unexported_total`, and the series they
//!   would have had (exactly, per connection: [`series_of`]) in
//!   `tcptail_series_dropped_total`;
//! - every other socket (and every capped one) goes into per-`group` aggregates: counts per
//!   state and congestion control, and RTT and estimated send-queue-delay histograms
//!   (`group` is the selector's name, or `other`).
//!
//! Memory is the exported connections (at most the cap, kept in a heap while the dump runs, as
//! fixed-size rows: nothing is allocated per socket or per series) plus a fixed amount per
//! group; the text is written into one buffer (`metrics::text`). Rendering supports the
//! Prometheus text format 0.0.4 and OpenMetrics 1.0 (`# EOF`, `info`, `gaugehistogram`); the
//! histograms describe the current snapshot, so they are gauge histograms. Pure code: the
//! caller measures the scrape's duration and passes it in.

use std::cmp::Ordering;
use std::collections::BinaryHeap;
use std::fmt::Write as _;
use std::net::IpAddr;
use std::time::Duration;

use tcptail_sock::cc_info::BbrInfo;
use tcptail_sock::tcp_info::{TcpInfo, TcpState};

pub mod closed;
mod families;
mod slots;
mod text;

pub use families::series_of;
use families::{Values, connection_families, series_of_values};
pub use slots::Slots;
use text::{Kind, Num, Writer};

use crate::dump::{DiagError, DumpStats};
use crate::selector::Selectors;
use crate::source::{Brief, Dump, ScrapeSink};
use crate::wire::{Attrs, Socket};
use crate::{DumpRequest, Filter};

/// Upper bounds (seconds) of the RTT histogram buckets.
pub const RTT_BUCKETS: [f64; 14] = [
    50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 0.5,
    1.0,
];
/// Upper bounds (seconds) of the send-queue-delay histogram buckets.
pub const DELAY_BUCKETS: [f64; 14] = [
    0.0, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 0.5, 1.0,
];

/// Exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `text/plain; version=0.0.4`.
    Prometheus,
    /// `application/openmetrics-text; version=1.0.0`.
    OpenMetrics,
}

impl Format {
    /// Picks the format from an HTTP `Accept` header.
    pub fn from_accept(accept: Option<&str>) -> Format {
        match accept {
            Some(a) if a.contains("application/openmetrics-text") => Format::OpenMetrics,
            _ => Format::Prometheus,
        }
    }

    /// The `Content-Type` to send.
    pub fn content_type(self) -> &'static str {
        match self {
            Format::Prometheus => "text/plain; version=0.0.4; charset=utf-8",
            Format::OpenMetrics => "application/openmetrics-text; version=1.0.0; charset=utf-8",
        }
    }
}

/// Counters that live across scrapes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Totals {
    /// Scrapes served.
    pub scrapes: u64,
    /// Connections left without their own series because of the cap, summed over scrapes.
    pub unexported: u64,
    /// Series not emitted because of the cap, summed over scrapes.
    pub series_dropped: u64,
    /// Scrapes whose dump failed.
    pub errors: u64,
    /// Scrapes whose dump the kernel flagged as interrupted (`NLM_F_DUMP_INTR`): served, but
    /// possibly missing or repeating sockets.
    pub incomplete: u64,
}

/// What lives across scrapes: the counters and the `conn` slot of every exported socket.
#[derive(Debug, Clone, Default)]
pub struct State {
    /// Counters.
    pub totals: Totals,
    /// Stable `conn` labels.
    pub slots: Slots,
    /// Histograms over closed connections, filled by whoever listens for closes (rendered
    /// when present).
    pub closed: Option<std::sync::Arc<std::sync::Mutex<closed::ClosedMetrics>>>,
}

/// The aggregates of one group (a selector's capped connections, or `other`).
#[derive(Debug, Clone, Default)]
struct Group {
    /// Sockets per (state, congestion control): a handful of entries, scanned linearly.
    counts: Vec<(&'static str, CcName, u64)>,
    rtt: Hist,
    delay: Hist,
}

/// The name of the group of sockets no selector matched.
const OTHER: &str = "other";

#[derive(Debug, Clone, Default)]
struct Hist {
    buckets: [u64; 14],
    count: u64,
    sum: f64,
}

impl Hist {
    fn add(&mut self, bounds: &[f64; 14], v: f64) {
        for (b, bound) in self.buckets.iter_mut().zip(bounds) {
            if v <= *bound {
                *b += 1;
            }
        }
        self.count += 1;
        self.sum += v;
    }
}

/// A congestion-control name held inline (`TCP_CA_NAME_MAX` is 16 bytes), so an admitted
/// connection owns no heap memory.
#[derive(Debug, Clone, Copy, Default)]
struct CcName {
    len: u8,
    bytes: [u8; 16],
}

impl CcName {
    fn new(name: &str) -> CcName {
        let mut end = name.len().min(16);
        while !name.is_char_boundary(end) {
            end -= 1;
        }
        let mut bytes = [0u8; 16];
        bytes[..end].copy_from_slice(&name.as_bytes()[..end]);
        CcName { len: end as u8, bytes }
    }

    fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.bytes[..usize::from(self.len)]).unwrap_or_default()
    }
}

/// A matched connection admitted under the cap: what its series need, owned, fixed-size.
/// Ordered by cookie so the heap's top is the newest, the first to give way to an older one.
#[derive(Debug)]
struct Admitted {
    selector: usize,
    peer: IpAddr,
    cookie: u64,
    state: &'static str,
    cc: CcName,
    send_queue_bytes: u32,
    recv_queue_bytes: u32,
    info: Option<TcpInfo>,
    bbr: Option<BbrInfo>,
}

impl Admitted {
    fn new(selector: usize, s: &Socket<'_>) -> Admitted {
        Admitted {
            selector,
            peer: crate::unmap(s.id.dst),
            cookie: s.id.cookie,
            state: TcpState::from_raw(s.state).name(),
            cc: CcName::new(s.cong.unwrap_or("")),
            send_queue_bytes: s.wqueue,
            recv_queue_bytes: s.rqueue,
            info: s.info.clone(),
            bbr: s.bbr,
        }
    }

    fn values(&self) -> Values<'_> {
        Values {
            info: self.info.as_ref(),
            bbr: self.bbr.as_ref(),
            send_queue_bytes: self.send_queue_bytes,
            recv_queue_bytes: self.recv_queue_bytes,
            delay: self.info.as_ref().and_then(TcpInfo::send_queue_delay),
        }
    }
}

impl PartialEq for Admitted {
    fn eq(&self, other: &Self) -> bool {
        self.cookie == other.cookie
    }
}
impl Eq for Admitted {}
impl PartialOrd for Admitted {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Admitted {
    fn cmp(&self, other: &Self) -> Ordering {
        self.cookie.cmp(&other.cookie)
    }
}

/// One scrape in progress: feed it every socket of a dump, then render it.
#[derive(Debug)]
pub struct Scrape<'s> {
    selectors: &'s Selectors,
    exported: BinaryHeap<Admitted>,
    /// Aggregates by group: one per selector, then `other` (a selector named `other` shares
    /// it); `None` until a socket lands there.
    groups: Vec<Option<Group>>,
    /// Sockets seen in this scrape.
    pub sockets_seen: u64,
    /// Matched connections left out by the cap in this scrape.
    pub unexported: u64,
    /// Series those connections would have had.
    pub series_dropped: u64,
}

/// The dump a scrape needs: everything when aggregates are wanted, else only the selected
/// sockets (kernel-filtered, cost proportional to the matches).
pub fn dump_request(selectors: &Selectors, aggregates: bool) -> DumpRequest {
    let filter =
        if aggregates { None } else { Some(selectors.filter().unwrap_or(Filter::Or(Vec::new()))) };
    DumpRequest { filter, attrs: SCRAPE_ATTRS, ..DumpRequest::default() }
}

/// What a scrape reads: `tcp_info`, the congestion control and BBR's model; not socket memory,
/// which no metric shows (each attribute costs the kernel work per socket).
pub const SCRAPE_ATTRS: Attrs = Attrs { info: true, cong: true, cc_info: true, skmem: false };

impl<'s> Scrape<'s> {
    /// An empty scrape for `selectors`.
    pub fn new(selectors: &'s Selectors) -> Scrape<'s> {
        Scrape {
            selectors,
            exported: BinaryHeap::new(),
            groups: vec![None; selectors.selectors.len() + 1],
            sockets_seen: 0,
            unexported: 0,
            series_dropped: 0,
        }
    }

    /// Adds one socket of the dump.
    pub fn add(&mut self, s: &Socket<'_>) {
        self.sockets_seen += 1;
        let listening = TcpState::from_raw(s.state) == TcpState::Listen;
        let sel = if listening { None } else { self.selectors.classify(&s.id) };
        let Some(i) = sel else {
            let state = TcpState::from_raw(s.state).name();
            let other = self.groups.len() - 1;
            self.aggregate(other, state, s.cong.unwrap_or(""), s.info.as_ref(), listening);
            return;
        };
        let cap = self.selectors.max_connections;
        let newest = self.exported.peek().map(|a| a.cookie);
        let left_out = if self.exported.len() < cap {
            self.exported.push(Admitted::new(i, s));
            None
        } else if newest.is_some_and(|n| s.id.cookie < n) {
            // Older than the newest admitted one: it takes that one's place.
            let out = self.exported.pop().expect("the heap is full");
            self.exported.push(Admitted::new(i, s));
            Some(out)
        } else {
            Some(Admitted::new(i, s))
        };
        if let Some(out) = left_out {
            self.unexported += 1;
            self.series_dropped += series_of_values(&out.values());
            let group = match self.selectors.selectors[out.selector].name.as_str() {
                OTHER => self.groups.len() - 1,
                _ => out.selector,
            };
            self.aggregate(group, out.state, out.cc.as_str(), out.info.as_ref(), false);
        }
    }

    /// Adds a socket of the dump no selector matches, from what the aggregates need of it.
    pub fn add_brief(&mut self, b: &Brief<'_>) {
        self.sockets_seen += 1;
        let state = TcpState::from_raw(b.state);
        let other = self.groups.len() - 1;
        let listening = state == TcpState::Listen;
        self.aggregate(other, state.name(), b.cong.unwrap_or(""), b.info.as_ref(), listening);
    }

    /// Dumps `req` from `source` into this scrape, the sockets no selector matches briefly
    /// where the source can ([`Dump::dump_for_scrape`]).
    pub fn dump(
        &mut self,
        source: &mut dyn Dump,
        req: &DumpRequest,
    ) -> Result<DumpStats, DiagError> {
        let selected = self.selectors.filter();
        source.dump_for_scrape(req, selected.as_ref(), self)
    }

    fn aggregate(
        &mut self,
        group: usize,
        state: &'static str,
        cc: &str,
        info: Option<&TcpInfo>,
        listening: bool,
    ) {
        let group = self.groups[group].get_or_insert_with(Group::default);
        match group
            .counts
            .iter_mut()
            .find(|(st, c, _)| *st == state && c.as_bytes() == cc.as_bytes())
        {
            Some((_, _, n)) => *n += 1,
            None => group.counts.push((state, CcName::new(cc), 1)),
        }
        if let (false, Some(info)) = (listening, info) {
            if info.rtt_us > 0 {
                group.rtt.add(&RTT_BUCKETS, f64::from(info.rtt_us) / 1e6);
            }
            if let Some(d) = info.send_queue_delay() {
                group.delay.add(&DELAY_BUCKETS, d.delay.as_secs_f64());
            }
        }
    }

    /// Renders the scrape, assigning `conn` slots and updating the counters in `state`.
    pub fn render(self, state: &mut State, format: Format, duration: Duration) -> String {
        let totals = &mut state.totals;
        totals.scrapes += 1;
        totals.unexported += self.unexported;
        totals.series_dropped += self.series_dropped;
        let rows = self.exported.into_vec();
        let keys: Vec<(usize, IpAddr, u64)> =
            rows.iter().map(|a| (a.selector, a.peer, a.cookie)).collect();
        let slots = state.slots.assign(&keys);
        let mut rows: Vec<(u32, Admitted)> = slots.into_iter().zip(rows).collect();
        rows.sort_unstable_by_key(|(slot, a)| (a.selector, a.peer, *slot));
        // Each row's label set, written once into one arena: `selector=..,peer=..,conn=..`.
        let mut arena = String::with_capacity(rows.len() * 48);
        let mut labels = Vec::with_capacity(rows.len());
        for (slot, a) in &rows {
            let start = arena.len();
            arena.push_str("selector=\"");
            text::push_escaped(&mut arena, &self.selectors.selectors[a.selector].name);
            let _ = write!(arena, "\",peer=\"{}\",conn=\"", a.peer);
            text::push_u64(&mut arena, u64::from(*slot));
            arena.push('"');
            labels.push(start..arena.len());
        }
        let sorted: Vec<Admitted> = rows.into_iter().map(|(_, a)| a).collect();
        let values: Vec<Values<'_>> = sorted.iter().map(Admitted::values).collect();
        // About 30 samples of ~70 bytes per exported connection.
        let mut w = Writer { out: String::with_capacity(8192 + sorted.len() * 2048), format };
        for (name, help, kind, get) in connection_families() {
            w.header(name, help, kind);
            for (v, l) in values.iter().zip(&labels) {
                if let Some(x) = get(v) {
                    w.sample(name, kind.suffix(), &arena[l.clone()], x);
                }
            }
        }
        w.header(
            "tcptail_connection_bbr_phase",
            "BBR phase inferred from its gains (1 for the current phase).",
            Kind::Gauge,
        );
        for (v, l) in values.iter().zip(&labels) {
            if let Some(b) = v.bbr {
                w.line("tcptail_connection_bbr_phase", "")
                    .raw(&arena[l.clone()])
                    .label("phase", b.phase().as_str())
                    .value(Num::int(1u8));
            }
        }
        w.header(
            "tcptail_connection_congestion",
            "Congestion control of the connection.",
            Kind::Info,
        );
        for (row, l) in sorted.iter().zip(&labels) {
            w.line("tcptail_connection_congestion", Kind::Info.suffix())
                .raw(&arena[l.clone()])
                .label("cc", row.cc.as_str())
                .value(Num::int(1u8));
        }
        w.header(
            "tcptail_sockets",
            "Sockets without their own series, per group, state and congestion control.",
            Kind::Gauge,
        );
        // Groups by name, each one's counts by state and congestion control.
        let mut groups: Vec<(&str, Group)> = self
            .groups
            .into_iter()
            .enumerate()
            .filter_map(|(i, g)| {
                let name = self.selectors.selectors.get(i).map_or(OTHER, |s| s.name.as_str());
                Some((name, g?))
            })
            .collect();
        groups.sort_by_key(|(name, _)| *name);
        for (g, group) in &mut groups {
            group.counts.sort_by(|a, b| (a.0, a.1.as_str()).cmp(&(b.0, b.1.as_str())));
            for (state, cc, n) in &group.counts {
                w.line("tcptail_sockets", "")
                    .label("group", g)
                    .label("state", state)
                    .label("cc", cc.as_str())
                    .value(Num::int(*n));
            }
        }
        hist(
            &mut w,
            "tcptail_rtt_seconds",
            "Smoothed RTT of sockets without their own series.",
            &RTT_BUCKETS,
            groups.iter().map(|(g, x)| (*g, &x.rtt)),
        );
        hist(
            &mut w,
            "tcptail_send_queue_delay_seconds",
            "Estimated send-queue delay of sockets without their own series.",
            &DELAY_BUCKETS,
            groups.iter().map(|(g, x)| (*g, &x.delay)),
        );
        let gauges = [
            (
                "tcptail_scrape_duration_seconds",
                "Wall time of this scrape's dump and rendering so far.",
                Num::nanos(duration.as_nanos()),
            ),
            (
                "tcptail_sockets_seen",
                "Sockets returned by the kernel in this scrape.",
                Num::int(self.sockets_seen),
            ),
            (
                "tcptail_connections_exported",
                "Connections with their own series in this scrape.",
                Num::int(sorted.len() as u64),
            ),
            (
                "tcptail_connections_exported_max",
                "The hard cap on connections with their own series.",
                Num::int(self.selectors.max_connections as u64),
            ),
        ];
        for (name, help, v) in gauges {
            w.header(name, help, Kind::Gauge);
            w.sample(name, "", "", v);
        }
        for (name, help, v) in [
            (
                "tcptail_connections_unexported",
                "Selected connections left without their own series by the cap.",
                totals.unexported,
            ),
            (
                "tcptail_series_dropped",
                "Series not emitted because of the cap.",
                totals.series_dropped,
            ),
            ("tcptail_scrapes", "Scrapes served.", totals.scrapes),
            ("tcptail_scrape_errors", "Scrapes whose sock_diag dump failed.", totals.errors),
            (
                "tcptail_scrapes_incomplete",
                "Scrapes whose dump the kernel flagged as interrupted (NLM_F_DUMP_INTR).",
                totals.incomplete,
            ),
        ] {
            w.header(name, help, Kind::Counter);
            w.sample(name, "_total", "", Num::int(v));
        }
        if let Some(closed) = &state.closed {
            // A poisoned lock only means a listener thread panicked mid-update: the counts
            // it had are still worth showing.
            closed.lock().unwrap_or_else(std::sync::PoisonError::into_inner).render(&mut w);
        }
        if format == Format::OpenMetrics {
            w.out.push_str("# EOF\n");
        }
        w.out
    }
}

impl ScrapeSink for Scrape<'_> {
    fn socket(&mut self, s: &Socket<'_>) {
        self.add(s);
    }

    fn brief(&mut self, b: &Brief<'_>) {
        self.add_brief(b);
    }
}

/// A histogram family over groups: a gauge histogram in OpenMetrics (it describes the current
/// snapshot), a histogram in the Prometheus text format (which has no gauge histograms).
fn hist<'a>(
    w: &mut Writer,
    name: &str,
    help: &str,
    bounds: &[f64; 14],
    groups: impl Iterator<Item = (&'a str, &'a Hist)>,
) {
    let (ty, sum, count) = match w.format {
        Format::Prometheus => ("histogram", "_sum", "_count"),
        Format::OpenMetrics => ("gaugehistogram", "_gsum", "_gcount"),
    };
    for (what, text) in [("# HELP ", help), ("# TYPE ", ty)] {
        w.out.push_str(what);
        w.out.push_str(name);
        w.out.push(' ');
        w.out.push_str(text);
        w.out.push('\n');
    }
    for (g, h) in groups {
        for (b, n) in bounds.iter().zip(h.buckets) {
            w.line(name, "_bucket")
                .label("group", g)
                .label_num("le", Num::Float(*b))
                .value(Num::int(n));
        }
        w.line(name, "_bucket").label("group", g).label("le", "+Inf").value(Num::int(h.count));
        w.line(name, count).label("group", g).value(Num::int(h.count));
        w.line(name, sum).label("group", g).value(Num::Float(h.sum));
    }
}

/// Escapes a label value (`\`, `"`, newline).
pub fn escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    text::push_escaped(&mut out, v);
    out
}
