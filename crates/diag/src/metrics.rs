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
//! Memory is the exported connections (at most the cap, kept in a heap while the dump runs)
//! plus a fixed amount per group. Rendering supports the
//! Prometheus text format 0.0.4 and OpenMetrics 1.0 (`# EOF`, `info`, `gaugehistogram`); the
//! histograms describe the current snapshot, so they are gauge histograms. Pure code: the
//! caller measures the scrape's duration and passes it in.

use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap};
use std::fmt::Write as _;
use std::time::Duration;

use tcptail_sock::tcp_info::{TcpInfo, TcpState};

mod families;
mod slots;

use families::connection_families;
pub use families::series_of;
pub use slots::Slots;

use crate::selector::Selectors;
use crate::wire::Socket;
use crate::{Connection, Derived, DumpRequest, Filter};

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
}

#[derive(Debug, Clone, Default)]
struct Group {
    counts: BTreeMap<(&'static str, String), u64>,
    rtt: Hist,
    delay: Hist,
}

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

/// A matched connection admitted under the cap; ordered by cookie so the heap's top is the
/// newest, the first to give way to an older one.
#[derive(Debug)]
struct Admitted {
    selector: usize,
    conn: Connection,
}

impl PartialEq for Admitted {
    fn eq(&self, other: &Self) -> bool {
        self.conn.cookie == other.conn.cookie
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
        self.conn.cookie.cmp(&other.conn.cookie)
    }
}

/// One scrape in progress: feed it every socket of a dump, then render it.
#[derive(Debug)]
pub struct Scrape<'s> {
    selectors: &'s Selectors,
    exported: BinaryHeap<Admitted>,
    groups: BTreeMap<String, Group>,
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
    DumpRequest { filter, ..DumpRequest::default() }
}

impl<'s> Scrape<'s> {
    /// An empty scrape for `selectors`.
    pub fn new(selectors: &'s Selectors) -> Scrape<'s> {
        Scrape {
            selectors,
            exported: BinaryHeap::new(),
            groups: BTreeMap::new(),
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
            self.aggregate("other", state, s.cong.unwrap_or(""), s.info.as_ref(), listening);
            return;
        };
        let cap = self.selectors.max_connections;
        let newest = self.exported.peek().map(|a| a.conn.cookie);
        let left_out = if self.exported.len() < cap {
            self.exported.push(Admitted { selector: i, conn: Connection::from_socket(s) });
            None
        } else if newest.is_some_and(|n| s.id.cookie < n) {
            // Older than the newest admitted one: it takes that one's place.
            let out = self.exported.pop().expect("the heap is full");
            self.exported.push(Admitted { selector: i, conn: Connection::from_socket(s) });
            Some(out)
        } else {
            Some(Admitted { selector: i, conn: Connection::from_socket(s) })
        };
        if let Some(out) = left_out {
            self.unexported += 1;
            self.series_dropped += series_of(&out.conn);
            let name = self.selectors.selectors[out.selector].name.as_str();
            let c = &out.conn;
            self.aggregate(name, c.state, c.cc.as_deref().unwrap_or(""), c.info.as_ref(), false);
        }
    }

    fn aggregate(
        &mut self,
        name: &str,
        state: &'static str,
        cc: &str,
        info: Option<&TcpInfo>,
        listening: bool,
    ) {
        let group = match self.groups.get_mut(name) {
            Some(g) => g,
            None => self.groups.entry(name.to_owned()).or_default(),
        };
        match group.counts.iter_mut().find(|((st, c), _)| *st == state && c == cc) {
            Some((_, n)) => *n += 1,
            None => {
                group.counts.insert((state, cc.to_owned()), 1);
            }
        }
        if let (false, Some(info)) = (listening, info) {
            if info.rtt_us > 0 {
                group.rtt.add(&RTT_BUCKETS, f64::from(info.rtt_us) / 1e6);
            }
            if let Some(d) = Derived::compute(Some(info), None).send_queue_delay {
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
        let names: Vec<&str> = self.selectors.selectors.iter().map(|s| s.name.as_str()).collect();
        let admitted = self.exported.into_vec();
        let keys: Vec<(usize, std::net::IpAddr, u64)> =
            admitted.iter().map(|a| (a.selector, a.conn.remote.ip(), a.conn.cookie)).collect();
        let slots = state.slots.assign(&keys);
        let mut rows: Vec<(usize, std::net::IpAddr, u32, Connection)> = admitted
            .into_iter()
            .zip(slots)
            .map(|(a, slot)| (a.selector, a.conn.remote.ip(), slot, a.conn))
            .collect();
        rows.sort_by_key(|&(sel, peer, slot, _)| (sel, peer, slot));
        let labels: Vec<String> = rows
            .iter()
            .map(|(i, peer, slot, _)| {
                format!("selector=\"{}\",peer=\"{peer}\",conn=\"{slot}\"", escape(names[*i]))
            })
            .collect();
        let exported: Vec<(usize, Connection)> =
            rows.into_iter().map(|(i, _, _, c)| (i, c)).collect();
        let mut w = Writer { out: String::with_capacity(4096 + labels.len() * 2048), format };
        for (name, help, kind, get) in connection_families() {
            w.header(name, help, kind);
            for ((_, c), l) in exported.iter().zip(&labels) {
                if let Some(v) = get(c) {
                    w.sample(name, kind.suffix(), l, v);
                }
            }
        }
        w.header(
            "tcptail_connection_bbr_phase",
            "BBR phase inferred from its gains (1 for the current phase).",
            Kind::Gauge,
        );
        for ((_, c), l) in exported.iter().zip(&labels) {
            if let Some(p) = c.derived.bbr_phase {
                w.sample("tcptail_connection_bbr_phase", "", &format!("{l},phase=\"{p}\""), 1.0);
            }
        }
        w.header(
            "tcptail_connection_congestion",
            "Congestion control of the connection.",
            Kind::Info,
        );
        for ((_, c), l) in exported.iter().zip(&labels) {
            let cc = escape(c.cc.as_deref().unwrap_or(""));
            w.sample(
                "tcptail_connection_congestion",
                Kind::Info.suffix(),
                &format!("{l},cc=\"{cc}\""),
                1.0,
            );
        }
        w.header(
            "tcptail_sockets",
            "Sockets without their own series, per group, state and congestion control.",
            Kind::Gauge,
        );
        for (g, group) in &self.groups {
            for ((state, cc), n) in &group.counts {
                let l = format!("group=\"{}\",state=\"{state}\",cc=\"{}\"", escape(g), escape(cc));
                w.sample("tcptail_sockets", "", &l, *n as f64);
            }
        }
        w.hist(
            "tcptail_rtt_seconds",
            "Smoothed RTT of sockets without their own series.",
            &RTT_BUCKETS,
            self.groups.iter().map(|(g, x)| (g, &x.rtt)),
        );
        w.hist(
            "tcptail_send_queue_delay_seconds",
            "Estimated send-queue delay of sockets without their own series.",
            &DELAY_BUCKETS,
            self.groups.iter().map(|(g, x)| (g, &x.delay)),
        );
        w.header(
            "tcptail_scrape_duration_seconds",
            "Wall time of this scrape's dump and rendering so far.",
            Kind::Gauge,
        );
        w.sample("tcptail_scrape_duration_seconds", "", "", duration.as_secs_f64());
        w.header(
            "tcptail_sockets_seen",
            "Sockets returned by the kernel in this scrape.",
            Kind::Gauge,
        );
        w.sample("tcptail_sockets_seen", "", "", self.sockets_seen as f64);
        w.header(
            "tcptail_connections_exported",
            "Connections with their own series in this scrape.",
            Kind::Gauge,
        );
        w.sample("tcptail_connections_exported", "", "", exported.len() as f64);
        w.header(
            "tcptail_connections_exported_max",
            "The hard cap on connections with their own series.",
            Kind::Gauge,
        );
        w.sample("tcptail_connections_exported_max", "", "", self.selectors.max_connections as f64);
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
            w.sample(name, "_total", "", v as f64);
        }
        if format == Format::OpenMetrics {
            w.out.push_str("# EOF\n");
        }
        w.out
    }
}

/// Metric type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Gauge,
    Counter,
    Info,
}

impl Kind {
    fn suffix(self) -> &'static str {
        match self {
            Kind::Gauge => "",
            Kind::Counter => "_total",
            Kind::Info => "_info",
        }
    }
}

struct Writer {
    out: String,
    format: Format,
}

impl Writer {
    fn header(&mut self, name: &str, help: &str, kind: Kind) {
        let (family, ty) = match (self.format, kind) {
            (_, Kind::Gauge) => (name.to_owned(), "gauge"),
            (Format::Prometheus, Kind::Counter) => (format!("{name}_total"), "counter"),
            (Format::OpenMetrics, Kind::Counter) => (name.to_owned(), "counter"),
            (Format::Prometheus, Kind::Info) => (format!("{name}_info"), "gauge"),
            (Format::OpenMetrics, Kind::Info) => (name.to_owned(), "info"),
        };
        let _ = writeln!(self.out, "# HELP {family} {help}\n# TYPE {family} {ty}");
    }

    /// One sample line, appended piecewise: a full scrape writes about 30 per exported
    /// connection, so the formatting machinery and a temporary string per value would be most
    /// of its cost.
    fn sample(&mut self, name: &str, suffix: &str, labels: &str, v: f64) {
        self.out.push_str(name);
        self.out.push_str(suffix);
        if !labels.is_empty() {
            self.out.push('{');
            self.out.push_str(labels);
            self.out.push('}');
        }
        self.out.push(' ');
        write_num(&mut self.out, v);
        self.out.push('\n');
    }

    fn hist<'a>(
        &mut self,
        name: &str,
        help: &str,
        bounds: &[f64; 14],
        groups: impl Iterator<Item = (&'a String, &'a Hist)>,
    ) {
        let (ty, sum, count) = match self.format {
            Format::Prometheus => ("histogram", "_sum", "_count"),
            Format::OpenMetrics => ("gaugehistogram", "_gsum", "_gcount"),
        };
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {ty}");
        for (g, h) in groups {
            let g = escape(g);
            for (b, n) in bounds.iter().zip(h.buckets) {
                self.sample(
                    name,
                    "_bucket",
                    &format!("group=\"{g}\",le=\"{}\"", num(*b)),
                    n as f64,
                );
            }
            self.sample(name, "_bucket", &format!("group=\"{g}\",le=\"+Inf\""), h.count as f64);
            self.sample(name, count, &format!("group=\"{g}\""), h.count as f64);
            self.sample(name, sum, &format!("group=\"{g}\""), h.sum);
        }
    }
}

/// Appends `v` as the exposition formats spell it; integral values (most of them: counts,
/// bytes, segments) through the integer formatter, which is several times faster.
fn write_num(out: &mut String, v: f64) {
    const EXACT: f64 = 9_007_199_254_740_992.0; // 2^53: every integer below is exact
    if v.fract() == 0.0 && v.abs() < EXACT {
        let _ = write!(out, "{}", v as i64);
    } else if v.is_finite() {
        let _ = write!(out, "{v}");
    } else {
        out.push_str(&num(v));
    }
}

fn num(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf".into() } else { "-Inf".into() }
    } else {
        format!("{v}")
    }
}

/// Escapes a label value (`\`, `"`, newline).
pub fn escape(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}
