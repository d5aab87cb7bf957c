//! The tuning ladder's datagram rungs: a UDP request/response over kernel UDP sockets or
//! AF_XDP sockets ([`tcptail_bench::xdp`]) on the round's veth pair, each end opened in its
//! own namespace, sleeping or busy-polling. The AF_XDP rungs also report the seed's point,
//! the transmit side's system calls: `kicks_per_request` (both ends' `sendto()` kicks per
//! answered request, 2 when every request and every response needed one) and the time one
//! kick takes (`kick_p50_us`, `kick_p99_us`, the client's).

use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tcptail_bench::xdp::{
    DatagramConfig, DatagramEngine, DatagramError, Endpoint, PairPlacement, run_pair,
};
use tcptail_lab::live::PathShape;
use tcptail_netns::addr::{CLIENT_ADDR, SERVER_ADDR, VETH_IF};
use tcptail_report::Series;

use crate::round::{Measurement, RoundContext, RunError};
use crate::workload::rr::round::{RoundSpec, put_summary};

const SERVER_PORT: u16 = 9300;
const CLIENT_PORT: u16 = 9301;
/// A datagram unanswered this long is lost (a veth pair does not lose them; a stall might).
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(200);

/// The metrics the AF_XDP rungs add to the ladder's.
pub const XDP_METRICS: [&str; 3] = ["kicks_per_request", "kick_p50_us", "kick_p99_us"];

/// One round of a datagram rung.
pub fn measure(
    spec: &RoundSpec,
    engine: DatagramEngine,
    spin: bool,
    ctx: &RoundContext<'_>,
) -> Result<Measurement, RunError> {
    let (m, lateness) = spec.path.round(ctx, |live| {
        if !matches!(live.shape(), PathShape::Veth) {
            return Err(RunError::NotApplicable(format!(
                "the {} rungs run on the plain veth pair (path = \"veth\"), where XDP sits on \
                 the path's own interfaces",
                engine.name()
            )));
        }
        let server_at = SocketAddrV4::new(SERVER_ADDR, SERVER_PORT);
        let client_at = SocketAddrV4::new(CLIENT_ADDR, CLIENT_PORT);
        let open = |ns: &tcptail_netns::Netns, local, peer| {
            ns.run(|| Endpoint::open(engine, VETH_IF, local, peer, spin))
                .map_err(|e| RunError::failed("entering a namespace", e))?
                .map_err(datagram_error)
        };
        let server = open(live.server(), server_at, client_at)?;
        let client = open(live.client(), client_at, server_at)?;
        let mode = server.xdp_mode;
        let config = DatagramConfig {
            request_len: spec.request_len,
            reply_len: spec.reply_len,
            warmup: spec.warmup,
            duration: spec.duration,
            response_timeout: RESPONSE_TIMEOUT,
        };
        let placement = PairPlacement {
            client_cpu: spec.placement.client_cpu(),
            server_cpu: spec.placement.server_cpu(),
        };
        let stop = AtomicBool::new(false);
        let total = (spec.warmup + spec.duration).as_secs_f64();
        let done = AtomicBool::new(false);
        let run = std::thread::scope(|s| {
            s.spawn(|| {
                let start = Instant::now();
                while !done.load(Ordering::Relaxed) {
                    if (ctx.stop_requested)() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    (ctx.progress)((start.elapsed().as_secs_f64() / total).min(1.0));
                    std::thread::sleep(Duration::from_millis(50));
                }
            });
            let r = run_pair(server, client, &config, placement, &stop);
            done.store(true, Ordering::Relaxed);
            r
        })
        .map_err(datagram_error)?;
        if (ctx.stop_requested)() {
            return Err(RunError::Interrupted);
        }
        let c = &run.client;
        let s = c.latency.summary().ok_or(RunError::NothingCompleted {
            what: "datagram round",
            detail: "no request completed in the round",
        })?;
        let mut m = Measurement::default();
        put_summary(&mut m, "", &s);
        let secs = c.elapsed.as_secs_f64();
        m.metric("tx_per_s", if secs > 0.0 { c.requests as f64 / secs } else { 0.0 });
        let mut samples: Vec<f64> = c.samples_ns.iter().map(|&ns| ns as f64 / 1e3).collect();
        m.series.push(Series::cdf("latency_us", &mut samples));
        m.notes.push(format!("placement: {}", spec.placement.describe()));
        m.notes.push(format!(
            "{} over the veth pair, {}; {} answered, {} lost (unanswered within {:?}, kept in \
             the percentiles at that wait)",
            engine.name(),
            if spin { "busy-polling" } else { "sleeping until a datagram comes" },
            c.requests,
            c.lost,
            RESPONSE_TIMEOUT
        ));
        if engine == DatagramEngine::AfXdp {
            // Per answered request over the whole run: the client's kicks of the measured
            // part, and the server's per response it sent.
            let server_per = run.server_kicks as f64 / run.server_answered.max(1) as f64;
            let client_per = c.client_kicks as f64 / (c.requests + c.lost).max(1) as f64;
            m.metric("kicks_per_request", client_per + server_per);
            if !c.kick_ns.is_empty() {
                m.metric("kick_p50_us", c.kick_ns.quantile_nanos(0.5) as f64 / 1e3);
                m.metric("kick_p99_us", c.kick_ns.quantile_nanos(0.99) as f64 / 1e3);
            }
            m.notes.push(format!(
                "XDP program attached in {} mode at both ends; AF_XDP sockets in copy mode: the \
                 client made {} sendto() kicks for {} requests, the server {} for {} responses \
                 (every frame sent needs one: the seed's transmit-side system call)",
                mode.unwrap_or("unknown"),
                c.client_kicks,
                c.requests + c.lost,
                run.server_kicks,
                run.server_answered
            ));
        }
        Ok(m)
    })?;
    let mut m = m;
    m.lateness = lateness;
    Ok(m)
}

/// AF_XDP missing here is a row with the reason, not a failure of the experiment.
fn datagram_error(e: DatagramError) -> RunError {
    match e {
        DatagramError::Unavailable(why) => RunError::NotApplicable(format!("AF_XDP: {why}")),
        other => RunError::failed("datagram request/response", other),
    }
}
