//! The scrape-time collector: turns one sock_diag dump into bounded Prometheus metrics.
//!
//! Cardinality is bounded by construction:
//! - connections matched by a [`Selectors`] selector get per-connection series labelled
//!   `selector`, `peer` (the remote address, never a port) and `conn` (the connection's ordinal
//!   among those of the same selector and peer, oldest first by socket cookie), up to
//!   `max_connections`; the rest are counted in `tcptail_connections_unexported_total`;
//! - every other socket (and every capped one) goes into per-`group` aggregates: counts per
//!   state and congestion control, and RTT and estimated send-queue-delay histograms
//!   (`group` is the selector's name, or `other`).
//!
//! Memory is the exported connections plus a fixed amount per group. Rendering supports the
//! Prometheus text format 0.0.4 and OpenMetrics 1.0 (`# EOF`, `info`, `gaugehistogram`); the
//! histograms describe the current snapshot, so they are gauge histograms. Pure code: the
//! caller measures the scrape's duration and passes it in.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use tcptail_sock::tcp_info::TcpState;

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

/// One scrape in progress: feed it every socket of a dump, then render it.
#[derive(Debug)]
pub struct Scrape<'s> {
    selectors: &'s Selectors,
    exported: Vec<(usize, Connection)>,
    groups: BTreeMap<String, Group>,
    /// Sockets seen in this scrape.
    pub sockets_seen: u64,
    /// Matched connections left out by the cap in this scrape.
    pub unexported: u64,
}

/// Number of series one exported connection produces (for the dropped-series counter).
pub const SERIES_PER_CONNECTION: u64 = 33;

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
            exported: Vec::new(),
            groups: BTreeMap::new(),
            sockets_seen: 0,
            unexported: 0,
        }
    }

    /// Adds one socket of the dump.
    pub fn add(&mut self, s: &Socket<'_>) {
        self.sockets_seen += 1;
        let listening = TcpState::from_raw(s.state) == TcpState::Listen;
        let sel = if listening { None } else { self.selectors.classify(&s.id) };
        if let Some(i) = sel {
            if self.exported.len() < self.selectors.max_connections {
                self.exported.push((i, Connection::from_socket(s)));
                return;
            }
            self.unexported += 1;
        }
        let name = sel.map_or("other", |i| self.selectors.selectors[i].name.as_str());
        let group = match self.groups.get_mut(name) {
            Some(g) => g,
            None => self.groups.entry(name.to_owned()).or_default(),
        };
        let state = TcpState::from_raw(s.state).name();
        let cc = s.cong.unwrap_or("");
        match group.counts.iter_mut().find(|((st, c), _)| *st == state && c == cc) {
            Some((_, n)) => *n += 1,
            None => {
                group.counts.insert((state, cc.to_owned()), 1);
            }
        }
        if let (false, Some(info)) = (listening, s.info.as_ref()) {
            if info.rtt_us > 0 {
                group.rtt.add(&RTT_BUCKETS, f64::from(info.rtt_us) / 1e6);
            }
            if let Some(d) = Derived::compute(Some(info), None).send_queue_delay {
                group.delay.add(&DELAY_BUCKETS, d.delay.as_secs_f64());
            }
        }
    }

    /// Renders the scrape and updates `totals`.
    pub fn render(mut self, totals: &mut Totals, format: Format, duration: Duration) -> String {
        totals.scrapes += 1;
        totals.unexported += self.unexported;
        totals.series_dropped += self.unexported * SERIES_PER_CONNECTION;
        let names: Vec<&str> = self.selectors.selectors.iter().map(|s| s.name.as_str()).collect();
        self.exported.sort_by(|(a, x), (b, y)| {
            (a, x.remote.ip(), x.cookie).cmp(&(b, y.remote.ip(), y.cookie))
        });
        let mut labels = Vec::with_capacity(self.exported.len());
        let mut prev: Option<(usize, std::net::IpAddr)> = None;
        let mut ordinal = 0u32;
        for (i, c) in &self.exported {
            let key = (*i, c.remote.ip());
            ordinal = if prev == Some(key) { ordinal + 1 } else { 0 };
            prev = Some(key);
            labels.push(format!(
                "selector=\"{}\",peer=\"{}\",conn=\"{ordinal}\"",
                escape(names[*i]),
                c.remote.ip()
            ));
        }
        let mut w = Writer { out: String::with_capacity(4096 + labels.len() * 2048), format };
        for (name, help, kind, get) in connection_families() {
            w.header(name, help, kind);
            for ((_, c), l) in self.exported.iter().zip(&labels) {
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
        for ((_, c), l) in self.exported.iter().zip(&labels) {
            if let Some(p) = c.derived.bbr_phase {
                w.sample("tcptail_connection_bbr_phase", "", &format!("{l},phase=\"{p}\""), 1.0);
            }
        }
        w.header(
            "tcptail_connection_congestion",
            "Congestion control of the connection.",
            Kind::Info,
        );
        for ((_, c), l) in self.exported.iter().zip(&labels) {
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
        w.sample("tcptail_connections_exported", "", "", self.exported.len() as f64);
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
enum Kind {
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

type Getter = fn(&Connection) -> Option<f64>;

fn us(v: u32) -> f64 {
    f64::from(v) / 1e6
}

fn connection_families() -> [(&'static str, &'static str, Kind, Getter); 29] {
    use Kind::{Counter as C, Gauge as G};
    [
        ("tcptail_connection_rtt_seconds", "Smoothed RTT.", G, |c| {
            c.info.as_ref().map(|i| us(i.rtt_us))
        }),
        ("tcptail_connection_min_rtt_seconds", "Minimum RTT seen.", G, |c| {
            c.info.as_ref()?.min_rtt_us.map(us)
        }),
        ("tcptail_connection_rtt_variance_seconds", "RTT mean deviation (rttvar).", G, |c| {
            c.info.as_ref().map(|i| us(i.rttvar_us))
        }),
        ("tcptail_connection_cwnd_segments", "Congestion window.", G, |c| {
            c.info.as_ref().map(|i| f64::from(i.snd_cwnd_segs))
        }),
        ("tcptail_connection_ssthresh_segments", "Slow-start threshold.", G, |c| {
            c.info.as_ref().map(|i| f64::from(i.snd_ssthresh_segs))
        }),
        ("tcptail_connection_mss_bytes", "Sender MSS.", G, |c| {
            c.info.as_ref().map(|i| f64::from(i.snd_mss_bytes))
        }),
        (
            "tcptail_connection_delivery_rate_bytes_per_second",
            "Latest delivery-rate sample.",
            G,
            |c| c.info.as_ref()?.delivery_rate_bytes_per_sec.map(|v| v as f64),
        ),
        (
            "tcptail_connection_delivery_rate_app_limited",
            "1 when the latest delivery-rate sample was application-limited.",
            G,
            |c| c.info.as_ref()?.delivery_rate_app_limited.map(|v| f64::from(u8::from(v))),
        ),
        (
            "tcptail_connection_pacing_rate_bytes_per_second",
            "Pacing rate (absent when unpaced).",
            G,
            |c| {
                c.info
                    .as_ref()?
                    .pacing_rate_bytes_per_sec
                    .filter(|&v| v != u64::MAX)
                    .map(|v| v as f64)
            },
        ),
        (
            "tcptail_connection_bbr_bandwidth_bytes_per_second",
            "BBR bottleneck bandwidth estimate.",
            G,
            |c| c.bbr.map(|b| b.bw_bytes_per_sec as f64),
        ),
        ("tcptail_connection_bbr_min_rtt_seconds", "BBR windowed min RTT.", G, |c| {
            c.bbr?.min_rtt().map(|d| d.as_secs_f64())
        }),
        ("tcptail_connection_bbr_pacing_gain_ratio", "BBR pacing gain.", G, |c| {
            c.bbr.map(|b| b.pacing_gain_ratio())
        }),
        ("tcptail_connection_bbr_cwnd_gain_ratio", "BBR cwnd gain.", G, |c| {
            c.bbr.map(|b| b.cwnd_gain_ratio())
        }),
        ("tcptail_connection_unsent_bytes", "Bytes written but not yet sent (notsent).", G, |c| {
            c.info.as_ref()?.notsent_bytes.map(f64::from)
        }),
        ("tcptail_connection_send_queue_bytes", "Send queue: unacked + unsent bytes.", G, |c| {
            Some(f64::from(c.send_queue_bytes))
        }),
        ("tcptail_connection_receive_queue_bytes", "Receive queue: unread bytes.", G, |c| {
            Some(f64::from(c.recv_queue_bytes))
        }),
        (
            "tcptail_connection_send_queue_delay_seconds",
            "Estimated send-queue delay: unsent / rate.",
            G,
            |c| c.derived.send_queue_delay.map(|d| d.delay.as_secs_f64()),
        ),
        (
            "tcptail_connection_send_queue_delay_rate_bytes_per_second",
            "Rate the send-queue delay was computed with.",
            G,
            |c| c.derived.send_queue_delay.map(|d| d.rate_bytes_per_sec as f64),
        ),
        ("tcptail_connection_retransmitted_segments", "Segments retransmitted.", C, |c| {
            c.info.as_ref().map(|i| f64::from(i.total_retrans_segs))
        }),
        ("tcptail_connection_retransmitted_bytes", "Bytes retransmitted.", C, |c| {
            c.info.as_ref()?.bytes_retrans.map(|v| v as f64)
        }),
        ("tcptail_connection_sent_segments", "Segments sent.", C, |c| {
            c.info.as_ref()?.segs_out.map(f64::from)
        }),
        ("tcptail_connection_sent_bytes", "Bytes sent (including retransmissions).", C, |c| {
            c.info.as_ref()?.bytes_sent.map(|v| v as f64)
        }),
        ("tcptail_connection_rto", "Retransmission timeouts.", C, |c| {
            c.info.as_ref()?.total_rto.map(f64::from)
        }),
        ("tcptail_connection_rto_seconds", "Time spent in RTO recovery.", C, |c| {
            c.info.as_ref()?.total_rto_time_ms.map(|v| f64::from(v) / 1e3)
        }),
        ("tcptail_connection_busy_seconds", "Time with data in flight.", C, |c| {
            c.info.as_ref()?.busy_time_us.map(|v| v as f64 / 1e6)
        }),
        (
            "tcptail_connection_rwnd_limited_seconds",
            "Time limited by the receive window.",
            C,
            |c| c.info.as_ref()?.rwnd_limited_us.map(|v| v as f64 / 1e6),
        ),
        ("tcptail_connection_sndbuf_limited_seconds", "Time limited by the send buffer.", C, |c| {
            c.info.as_ref()?.sndbuf_limited_us.map(|v| v as f64 / 1e6)
        }),
        ("tcptail_connection_lost_segments", "Segments currently considered lost.", G, |c| {
            c.info.as_ref().map(|i| f64::from(i.lost_segs))
        }),
        ("tcptail_connection_unacked_segments", "Segments in flight.", G, |c| {
            c.info.as_ref().map(|i| f64::from(i.unacked_segs))
        }),
    ]
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

    fn sample(&mut self, name: &str, suffix: &str, labels: &str, v: f64) {
        let _ = if labels.is_empty() {
            writeln!(self.out, "{name}{suffix} {}", num(v))
        } else {
            writeln!(self.out, "{name}{suffix}{{{labels}}} {}", num(v))
        };
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
