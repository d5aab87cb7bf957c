//! `tcptail bench local --engine af_xdp`: the AF_XDP request/response and kernel UDP beside it
//! on one veth pair between two throwaway namespaces of the lab's kind
//! (`tcptail_netns::Topology::veth_pair`, named after this process so that `tcptail lab
//! clean` removes what a killed run left), both in the same run: kernel UDP first, then
//! AF_XDP, on the same pair, with the same sizes, spinning or not, pinned alike.
//!
//! What can be missing is checked in the order it is needed, and the error names it: root (to
//! create the namespaces), then the kernel's AF_XDP and XDP support (from the first endpoint
//! that needs them, [`DatagramError::Unavailable`]).

use std::net::SocketAddrV4;
use std::sync::atomic::AtomicBool;

use serde::{Deserialize, Serialize};
use tcptail_netns::addr::{CLIENT_ADDR, SERVER_ADDR, VETH_IF};
use tcptail_netns::{Cleanup, Netns, Topology};

use super::{DatagramConfig, DatagramEngine, DatagramError, Endpoint, PairPlacement, PairRun};
use crate::stats::LatencySummary;

/// The server end's UDP port (the XDP program redirects it to the AF_XDP socket).
const SERVER_PORT: u16 = 9400;
/// The client end's UDP port.
const CLIENT_PORT: u16 = 9401;

/// What to run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LabConfig {
    /// Sizes, warm-up, duration, response timeout.
    pub datagram: DatagramConfig,
    /// Busy-poll both ends (both engines).
    pub spin: bool,
    /// Where the two ends' threads run.
    pub placement: PairPlacement,
}

/// One engine's row of a [`LabResult`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EngineRow {
    /// `af_xdp` or `kernel_udp`.
    pub engine: String,
    /// Round-trip latency, µs; lost requests count at the time they waited (lower bounds).
    pub latency_us: Option<LatencySummary>,
    /// Requests answered in the measured part.
    pub requests: u64,
    /// Requests unanswered within the response timeout.
    pub lost: u64,
    /// Length of the measured part, seconds.
    pub duration_seconds: f64,
    /// Requests answered per second.
    pub transactions_per_second: f64,
    /// AF_XDP: `sendto()` kicks per answered request at both ends (the seed's point: 2 when
    /// every request and every response needed one).
    pub kicks_per_request: Option<f64>,
    /// AF_XDP: time of one client kick, µs.
    pub kick_us: Option<LatencySummary>,
}

/// The result of [`run_in_lab`]: AF_XDP beside kernel UDP on the same pair.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabResult {
    /// `af_xdp`.
    pub engine: String,
    /// Request and response sizes, bytes (UDP payloads).
    pub request_len: u32,
    /// Response size, bytes.
    pub reply_len: u32,
    /// Busy-polling.
    pub spin: bool,
    /// Which XDP hook the program went into (`native` or `generic`).
    pub xdp_mode: Option<String>,
    /// The namespaces' veth pair (client 10.77.0.1, server 10.77.0.2).
    pub path: String,
    /// AF_XDP's row, then kernel UDP's.
    pub rows: Vec<EngineRow>,
    /// AF_XDP's p50 over kernel UDP's.
    pub p50_ratio: Option<f64>,
    /// AF_XDP's p99 over kernel UDP's.
    pub p99_ratio: Option<f64>,
}

/// Creates the namespaces and runs both engines in them; everything is removed before it
/// returns (and by `tcptail lab clean` if the process is killed).
pub fn run_in_lab(config: &LabConfig, stop: &AtomicBool) -> Result<LabResult, DatagramError> {
    config.datagram.validate()?;
    tcptail_netns::ensure_root().map_err(|e| {
        DatagramError::Unavailable(format!(
            "the AF_XDP engine runs on a veth pair between two namespaces it creates: {e}"
        ))
    })?;
    let cleanup = Cleanup::new();
    let topo = Topology::veth_pair("xdpc", "xdps")
        .build(&cleanup)
        .map_err(|e| DatagramError::Unavailable(format!("creating the lab's veth pair: {e}")))?;
    let mut rows = Vec::new();
    let mut xdp_mode = None;
    // Kernel UDP first: if AF_XDP is missing, the error says so without a half result.
    let udp = pair(&topo, DatagramEngine::KernelUdp, config, stop)?;
    let xdp = pair(&topo, DatagramEngine::AfXdp, config, stop)?;
    if let Some(mode) = xdp.1 {
        xdp_mode = Some(mode.to_string());
    }
    rows.push(row(DatagramEngine::AfXdp, &xdp.0));
    rows.push(row(DatagramEngine::KernelUdp, &udp.0));
    topo.teardown().map_err(|e| DatagramError::Io {
        step: "removing the lab's namespaces".into(),
        source: std::io::Error::other(e.to_string()),
    })?;
    let ratio = |q: fn(&LatencySummary) -> f64| match (&rows[0].latency_us, &rows[1].latency_us) {
        (Some(a), Some(b)) if q(b) > 0.0 => Some(q(a) / q(b)),
        _ => None,
    };
    Ok(LabResult {
        engine: "af_xdp".into(),
        request_len: config.datagram.request_len,
        reply_len: config.datagram.reply_len,
        spin: config.spin,
        xdp_mode,
        path: format!("veth {CLIENT_ADDR} - {SERVER_ADDR} (throwaway namespaces)"),
        p50_ratio: ratio(|s| s.p50),
        p99_ratio: ratio(|s| s.p99),
        rows,
    })
}

/// One engine's run on the pair, its endpoints opened in their namespaces.
fn pair(
    topo: &Topology,
    engine: DatagramEngine,
    config: &LabConfig,
    stop: &AtomicBool,
) -> Result<(PairRun, Option<&'static str>), DatagramError> {
    let server_at = SocketAddrV4::new(SERVER_ADDR, SERVER_PORT);
    let client_at = SocketAddrV4::new(CLIENT_ADDR, CLIENT_PORT);
    let open = |ns: &Netns, local, peer| {
        ns.run(|| Endpoint::open(engine, VETH_IF, local, peer, config.spin)).map_err(|e| {
            DatagramError::Io {
                step: format!("entering namespace {}", ns.name()),
                source: std::io::Error::other(e.to_string()),
            }
        })?
    };
    let server = open(topo.server(), server_at, client_at)?;
    let client = open(topo.client(), client_at, server_at)?;
    let mode = server.xdp_mode;
    let run = super::run_pair(server, client, &config.datagram, config.placement, stop)?;
    Ok((run, mode))
}

fn row(engine: DatagramEngine, run: &PairRun) -> EngineRow {
    let c = &run.client;
    let secs = c.elapsed.as_secs_f64();
    let xdp = engine == DatagramEngine::AfXdp;
    EngineRow {
        engine: match engine {
            DatagramEngine::AfXdp => "af_xdp".into(),
            DatagramEngine::KernelUdp => "kernel_udp".into(),
        },
        latency_us: c.latency.summary(),
        requests: c.requests,
        lost: c.lost,
        duration_seconds: secs,
        transactions_per_second: if secs > 0.0 { c.requests as f64 / secs } else { 0.0 },
        // The server's kicks include its warm-up: count per request it answered.
        kicks_per_request: (xdp && c.requests > 0 && run.server_answered > 0).then(|| {
            c.client_kicks as f64 / (c.requests + c.lost) as f64
                + run.server_kicks as f64 / run.server_answered as f64
        }),
        kick_us: if xdp { c.kick_ns.summary() } else { None },
    }
}

/// The human form of a [`LabResult`].
pub fn render(r: &LabResult) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "tcptail bench: AF_XDP beside kernel UDP, {} B request / {} B response, {}, {}{}",
        r.request_len,
        r.reply_len,
        r.path,
        if r.spin { "busy-polling" } else { "sleeping until a datagram comes" },
        r.xdp_mode.as_deref().map(|m| format!(", XDP {m} mode")).unwrap_or_default()
    );
    let num = |v: f64| if v >= 100.0 { format!("{v:.0}") } else { format!("{v:.1}") };
    let mut table = vec![
        ["", "p50 µs", "p90 µs", "p99 µs", "p99.9 µs", "max µs", "tx/s", "lost", "kicks/req"]
            .map(String::from)
            .to_vec(),
    ];
    for row in &r.rows {
        let name = match row.engine.as_str() {
            "af_xdp" => "AF_XDP",
            _ => "kernel UDP",
        };
        let l = row.latency_us.as_ref();
        let q = |f: fn(&LatencySummary) -> f64| l.map_or("-".into(), |s| num(f(s)));
        table.push(vec![
            name.to_string(),
            q(|s| s.p50),
            q(|s| s.p90),
            q(|s| s.p99),
            q(|s| s.p999),
            q(|s| s.max),
            format!("{:.0}", row.transactions_per_second),
            row.lost.to_string(),
            row.kicks_per_request.map_or("-".into(), |k| format!("{k:.2}")),
        ]);
    }
    out.push_str(&crate::report::align(&table));
    if let (Some(p50), Some(p99)) = (r.p50_ratio, r.p99_ratio) {
        let _ = writeln!(out, "AF_XDP / kernel UDP: p50 {p50:.2}x, p99 {p99:.2}x");
    }
    if let Some(kick) = r.rows.first().and_then(|row| row.kick_us.as_ref()) {
        let _ = writeln!(
            out,
            "transmit: every AF_XDP frame still left through a sendto() kick (copy mode), \
             p50 {} µs, p99 {} µs each",
            num(kick.p50),
            num(kick.p99)
        );
    }
    out
}
