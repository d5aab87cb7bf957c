//! The `split-write` workload: a request written in two `write` calls (header, then body),
//! the response awaited, back to back — the pattern where Nagle's algorithm and the peer's
//! delayed ACK meet.
//!
//! With Nagle on (no `TCP_NODELAY`), the header leaves at once but the body is held while the
//! header is unacknowledged. The server cannot answer a half request, so it sends no data the
//! ACK could ride on; the ACK waits for the server's delayed-ACK timer (40 ms minimum on
//! Linux once the connection is in "pingpong" mode, which request/response traffic puts it
//! in). `TCP_QUICKACK` therefore matters on the side that *receives the split request*: the
//! server. Re-arming it there after every receive sends the header's ACK at once and frees
//! the body; re-arming it on the client only speeds the ACKs of responses, which nobody waits
//! for. `quickack_side` chooses where it is applied, so an experiment can show both.
//! `quickack = "once"` sets it once when the connection is made and never again (seed 000's
//! failure mode 3, "QUICKACK silently disarms").
//!
//! `body = "0B"` writes the request in one `write` (the seed's single order message).
//! `reconnect = true` measures seed 000's failure mode 2 ("Nagle delay on reconnect"): instead
//! of one long connection, the client opens fresh connections one after another for the whole
//! duration and sends `orders_per_connection` requests on each; the first request of each
//! connection is reported apart from the later ones.
//!
//! | key | meaning | default |
//! |---|---|---|
//! | `path`, `rate`, ... | the path ([`crate::path`]) | veth |
//! | `nodelay` | `TCP_NODELAY` on the client (the writer) | `false` |
//! | `quickack` | `off`, `once` (at connect/accept) or `rearm` (after every receive) | `off` |
//! | `quickack_side` | `server`, `client` or `both` | `server` |
//! | `header`, `body`, `response_size` | bytes per write (`body = "0B"`: one write) and of the response | `32B`, `32B`, `64B` |
//! | `reconnect` | a fresh connection every `orders_per_connection` requests | `false` |
//! | `orders_per_connection` | requests per connection with `reconnect` (2 to 1000) | `10` |
//! | `duration`, `warmup` | measured part, unmeasured warm-up | `2s`, `200ms` |
//! | `placement`, `cpu` | see [`super::rr::placement`] | `same-cpu` |
//!
//! Metrics: `p50_us`, `p95_us`, `p99_us`, `max_us`, `min_us`, `mean_us`, `tx_per_s`,
//! `samples_count`, `over_10ms_pct` (requests that waited for a timer), `server_ato_us` (the
//! server socket's delayed-ACK timeout from `TCP_INFO` at the end). With `reconnect`:
//! `first_p50_us`, `first_p95_us` (each connection's first request), `later_p50_us`,
//! `later_p95_us` (its other requests), `first_over_later_us` (the difference of the two
//! medians), `connections_count`, `samples_count`. Series: `latency_us` (with `reconnect`:
//! `first_us` and `later_us`).

use std::io::{self, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockAddr, SockRef, Socket, Type};
use tcptail_bench::sys;
use tcptail_report::Series;
use tcptail_sock::QuickAck;
use tcptail_sock::recv::recv_with_policy;

use super::rr::durations;
use super::rr::placement::{Placement, cpus_phrase};
use crate::params::{ParamError, Params};
use crate::path::{LivePath, PathPlan};
use crate::round::{Measurement, RoundContext, RunError};
use crate::workload::{VariantPlan, Workload};

/// A blocked read or write longer than this means the peer is gone.
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// The `split-write` engine.
pub struct SplitWrite;

/// A checked `split-write` variant.
#[derive(Debug, Clone)]
struct Plan {
    path: PathPlan,
    nodelay: bool,
    client_quickack: QuickAck,
    server_quickack: QuickAck,
    header: usize,
    body: usize,
    response: usize,
    /// `Some(orders per connection)` with `reconnect`.
    reconnect: Option<usize>,
    duration: Duration,
    warmup: Duration,
    placement: Placement,
}

impl Workload for SplitWrite {
    fn name(&self) -> &'static str {
        "split-write"
    }

    fn plan(&self, params: &Params) -> Result<Box<dyn VariantPlan>, ParamError> {
        let path = PathPlan::from_params(params)?;
        let nodelay = params.bool("nodelay")?.unwrap_or(false);
        let quickack = match params.choice("quickack", &["off", "once", "rearm"])?.as_deref() {
            Some("rearm") => QuickAck::Rearm,
            Some("once") => QuickAck::Once,
            _ => QuickAck::Off,
        };
        let side = params
            .choice("quickack_side", &["server", "client", "both"])?
            .unwrap_or_else(|| "server".into());
        if quickack == QuickAck::Off && params.has("quickack_side") {
            return Err(ParamError::new("quickack_side", "has no effect with quickack = \"off\""));
        }
        let on = |s: &str| if side == s || side == "both" { quickack } else { QuickAck::Off };
        let size = |key: &str, default: u64, least: u64| -> Result<usize, ParamError> {
            match params.bytes(key)?.unwrap_or(default) {
                n if (least..=65536).contains(&n) => Ok(n as usize),
                n => Err(ParamError::new(key, format!("{n} B is outside {least}..=65536 B"))),
            }
        };
        let (header, body, response) =
            (size("header", 32, 1)?, size("body", 32, 0)?, size("response_size", 64, 1)?);
        let reconnect = params.bool("reconnect")?.unwrap_or(false);
        let orders = match params.uint("orders_per_connection", u64::MAX)? {
            None => 10,
            Some(_) if !reconnect => {
                return Err(ParamError::new(
                    "orders_per_connection",
                    "has no effect without reconnect = true",
                ));
            }
            Some(n @ 2..=1000) => n as usize,
            Some(n) => {
                return Err(ParamError::new(
                    "orders_per_connection",
                    format!(
                        "{n} is outside 2..=1000 (the first request of a connection is \
                         compared with its later ones)"
                    ),
                ));
            }
        };
        let (duration, warmup) =
            durations(params, Duration::from_secs(2), Duration::from_millis(200))?;
        let placement = Placement::from_params(params, "same-cpu")?;
        Ok(Box::new(Plan {
            path,
            nodelay,
            client_quickack: on("client"),
            server_quickack: on("server"),
            header,
            body,
            response,
            reconnect: reconnect.then_some(orders),
            duration,
            warmup,
            placement,
        }))
    }
}

impl VariantPlan for Plan {
    fn metrics(&self) -> Vec<String> {
        if self.reconnect.is_some() {
            let names = ["first_p50_us", "first_p95_us", "later_p50_us", "later_p95_us"];
            let more = ["first_over_later_us", "connections_count", "samples_count"];
            return names.into_iter().chain(more).map(str::to_owned).collect();
        }
        let names = ["min_us", "mean_us", "p50_us", "p95_us", "p99_us", "max_us", "samples_count"];
        let more = ["tx_per_s", "over_10ms_pct", "server_ato_us"];
        names.into_iter().chain(more).map(str::to_owned).collect()
    }

    fn run(&self, ctx: &RoundContext<'_>) -> Result<Measurement, RunError> {
        let (mut m, lateness) = self.path.round(ctx, |live| self.run_on(live, ctx))?;
        m.lateness = lateness;
        Ok(m)
    }

    fn planned(&self) -> Duration {
        self.warmup + self.duration
    }

    fn describe(&self) -> String {
        let request = if self.body == 0 {
            format!("request written as one {} B write", self.header)
        } else {
            format!("request written as {} B + {} B", self.header, self.body)
        };
        let connections = match self.reconnect {
            Some(k) => format!("a fresh connection every {k} requests"),
            None => "one connection".to_owned(),
        };
        format!(
            "{}; closed loop on {connections}, {request}, {} B response; client \
             TCP_NODELAY {}, QUICKACK client {} / server {}; {}",
            self.path.describe(),
            self.response,
            if self.nodelay { "on" } else { "off (Nagle on)" },
            self.client_quickack,
            self.server_quickack,
            self.placement.describe()
        )
    }
}

/// What the two loops report.
struct Loops {
    latencies_ns: Vec<u64>,
    elapsed: Duration,
    client_cpus: Vec<usize>,
    server_cpus: Vec<usize>,
    server_ato_us: Option<u32>,
}

impl Plan {
    fn run_on(&self, live: &LivePath, ctx: &RoundContext<'_>) -> Result<Measurement, RunError> {
        let io_err = |what: &'static str| move |e: io::Error| RunError::io(what, e);
        let listener = live
            .server()
            .run(|| TcpListener::bind((live.server_addr(), 0)))?
            .map_err(io_err("split-write: listen"))?;
        let addr = listener.local_addr().map_err(io_err("split-write: listen"))?;
        if let Some(orders) = self.reconnect {
            return self.run_reconnecting(live, ctx, &listener, addr, orders);
        }
        let client = self.connect(live, addr)?;
        let server = self.accept(&listener)?;
        let loops = std::thread::scope(|s| {
            let serve = s.spawn(|| self.serve(&server));
            let measured = self.client_loop(&client, ctx);
            // EOF for the server, also after a failed client.
            let _ = client.shutdown(Shutdown::Write);
            let served = serve.join().map_err(|_| io::Error::other("server thread panicked"));
            let (server_cpus, server_ato_us) = served??;
            let (latencies_ns, elapsed, client_cpus) = measured?;
            Ok::<_, io::Error>(Loops {
                latencies_ns,
                elapsed,
                client_cpus,
                server_cpus,
                server_ato_us,
            })
        })
        .map_err(io_err("split-write round"))?;
        if (ctx.stop_requested)() {
            return Err(RunError::Interrupted);
        }
        self.summarise(loops)
    }

    /// A client connection from the client's namespace: `TCP_NODELAY` as planned, QUICKACK
    /// set once under `once`, I/O timeouts.
    fn connect(&self, live: &LivePath, addr: SocketAddr) -> Result<TcpStream, RunError> {
        let (nodelay, once) = (self.nodelay, self.client_quickack == QuickAck::Once);
        live.client()
            .run(|| -> io::Result<TcpStream> {
                let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
                s.set_tcp_nodelay(nodelay)?;
                s.connect_timeout(&SockAddr::from(addr), IO_TIMEOUT)?;
                if once {
                    s.set_tcp_quickack(true)?;
                }
                s.set_read_timeout(Some(IO_TIMEOUT))?;
                s.set_write_timeout(Some(IO_TIMEOUT))?;
                Ok(s.into())
            })?
            .map_err(|e| RunError::io("split-write: connect", e))
    }

    /// The server's end of the next connection: it never replies early, whatever the segments
    /// look like (`TCP_NODELAY`); QUICKACK set once under `once`; I/O timeouts.
    fn accept(&self, listener: &TcpListener) -> Result<TcpStream, RunError> {
        let prepare = || -> io::Result<TcpStream> {
            let (server, _) = listener.accept()?;
            server.set_nodelay(true)?;
            if self.server_quickack == QuickAck::Once {
                SockRef::from(&server).set_tcp_quickack(true)?;
            }
            server.set_read_timeout(Some(IO_TIMEOUT))?;
            server.set_write_timeout(Some(IO_TIMEOUT))?;
            Ok(server)
        };
        prepare().map_err(|e| RunError::io("split-write: accept", e))
    }

    /// Answers each complete request; returns the CPUs it ran on and its final delayed-ACK
    /// timeout.
    fn serve(&self, stream: &TcpStream) -> io::Result<(Vec<usize>, Option<u32>)> {
        if let Some(cpu) = self.placement.server_cpu() {
            sys::pin_current_thread(cpu)?;
        }
        self.serve_pinned(stream)
    }

    /// [`Plan::serve`] on a thread already placed.
    fn serve_pinned(&self, stream: &TcpStream) -> io::Result<(Vec<usize>, Option<u32>)> {
        let request_len = self.header + self.body;
        let mut buf = vec![0u8; request_len];
        let response = vec![0x42u8; self.response];
        let mut cpus = Vec::new();
        let mut writer = stream;
        let mut ato = None;
        'serve: for n in 0u64.. {
            let mut got = 0;
            while got < request_len {
                match recv_with_policy(stream.as_fd(), &mut buf[got..], self.server_quickack) {
                    Ok(0) => break 'serve,
                    Ok(k) => got += k,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
            writer.write_all(&response)?;
            if n.is_multiple_of(1024) {
                note_cpu(&mut cpus);
                ato = tcptail_sock::tcp_info::tcp_info(stream.as_fd()).ok().map(|i| i.ato_us);
            }
        }
        note_cpu(&mut cpus);
        Ok((cpus, ato))
    }

    /// Warm-up, then the measured loop; returns latencies, the measured time and the CPUs.
    fn client_loop(
        &self,
        stream: &TcpStream,
        ctx: &RoundContext<'_>,
    ) -> io::Result<(Vec<u64>, Duration, Vec<usize>)> {
        if let Some(cpu) = self.placement.client_cpu() {
            sys::pin_current_thread(cpu)?;
        }
        let mut buffers = self.buffers();
        let mut cpus = Vec::new();
        let mut one = || self.request(stream, &mut buffers);
        let warm_end = Instant::now() + self.warmup;
        while Instant::now() < warm_end {
            one()?;
        }
        let start = Instant::now();
        let end = start + self.duration;
        let mut latencies = Vec::new();
        while Instant::now() < end && !(ctx.stop_requested)() {
            latencies.push(one()?);
            if latencies.len() % 256 == 1 {
                note_cpu(&mut cpus);
                (ctx.progress)(start.elapsed().as_secs_f64() / self.duration.as_secs_f64());
            }
        }
        Ok((latencies, start.elapsed(), cpus))
    }

    /// The request's two writes (the body empty for a single write) and the response buffer.
    fn buffers(&self) -> [Vec<u8>; 3] {
        [vec![0x11u8; self.header], vec![0x22u8; self.body], vec![0u8; self.response]]
    }

    /// One request written as planned and its whole response read; returns the nanoseconds
    /// from the first write to the response's last byte.
    fn request(
        &self,
        stream: &TcpStream,
        [header, body, response]: &mut [Vec<u8>; 3],
    ) -> io::Result<u64> {
        let mut writer = stream;
        let t0 = Instant::now();
        writer.write_all(header)?;
        if !body.is_empty() {
            writer.write_all(body)?;
        }
        let mut got = 0;
        while got < response.len() {
            match recv_with_policy(stream.as_fd(), &mut response[got..], self.client_quickack) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(k) => got += k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(t0.elapsed().as_nanos() as u64)
    }

    /// Seed 000's failure mode 2: fresh connections one after another for the warm-up and the
    /// duration, `orders` requests on each; each connection's first request is kept apart.
    fn run_reconnecting(
        &self,
        live: &LivePath,
        ctx: &RoundContext<'_>,
        listener: &TcpListener,
        addr: SocketAddr,
        orders: usize,
    ) -> Result<Measurement, RunError> {
        let finished = AtomicBool::new(false);
        let (first, later, connections) = std::thread::scope(|s| {
            let serve = s.spawn(|| -> Result<(), RunError> {
                if let Some(cpu) = self.placement.server_cpu() {
                    sys::pin_current_thread(cpu)
                        .map_err(|e| RunError::io("split-write: pin", e))?;
                }
                loop {
                    let server = self.accept(listener)?;
                    if finished.load(Ordering::Acquire) {
                        return Ok(());
                    }
                    self.serve_pinned(&server)
                        .map_err(|e| RunError::io("split-write: serve", e))?;
                }
            });
            let measured = self.reconnect_loop(live, ctx, addr, orders);
            // The server waits in accept: one last connection, closed at once, ends it.
            finished.store(true, Ordering::Release);
            let last = self.connect(live, addr);
            let served = serve.join().map_err(|_| {
                RunError::io("split-write: serve", io::Error::other("server thread panicked"))
            });
            drop(last);
            served??;
            measured
        })?;
        if (ctx.stop_requested)() {
            return Err(RunError::Interrupted);
        }
        let nothing = || RunError::NothingCompleted {
            what: "split-write round",
            detail: "no connection completed its requests",
        };
        let mut first: Vec<f64> = first.iter().map(|&n| n as f64 / 1e3).collect();
        let mut later: Vec<f64> = later.iter().map(|&n| n as f64 / 1e3).collect();
        if first.is_empty() || later.is_empty() {
            return Err(nothing());
        }
        first.sort_by(f64::total_cmp);
        later.sort_by(f64::total_cmp);
        let p = super::flows::percentile;
        let mut m = Measurement::default();
        m.metric("first_p50_us", p(&first, 0.50))
            .metric("first_p95_us", p(&first, 0.95))
            .metric("later_p50_us", p(&later, 0.50))
            .metric("later_p95_us", p(&later, 0.95))
            .metric("first_over_later_us", p(&first, 0.50) - p(&later, 0.50))
            .metric("connections_count", connections as f64)
            .metric("samples_count", (first.len() + later.len()) as f64);
        m.series.push(Series::cdf("first_us", &mut first));
        m.series.push(Series::cdf("later_us", &mut later));
        m.notes.push(format!(
            "{connections} fresh connections, {orders} requests each; placement: {}",
            self.placement.describe()
        ));
        Ok(m)
    }

    /// The client side of [`Plan::run_reconnecting`]: the first requests' and the later
    /// requests' latencies (ns) and the number of measured connections.
    fn reconnect_loop(
        &self,
        live: &LivePath,
        ctx: &RoundContext<'_>,
        addr: SocketAddr,
        orders: usize,
    ) -> Result<(Vec<u64>, Vec<u64>, usize), RunError> {
        if let Some(cpu) = self.placement.client_cpu() {
            sys::pin_current_thread(cpu).map_err(|e| RunError::io("split-write: pin", e))?;
        }
        let mut buffers = self.buffers();
        let (mut first, mut later, mut connections) = (Vec::new(), Vec::new(), 0);
        let warm_end = Instant::now() + self.warmup;
        let mut measuring_from = None;
        loop {
            let now = Instant::now();
            let start = match measuring_from {
                None if now >= warm_end => *measuring_from.insert(now),
                None => now,
                Some(start) => start,
            };
            let measuring = measuring_from.is_some();
            if measuring && (now >= start + self.duration || (ctx.stop_requested)()) {
                return Ok((first, later, connections));
            }
            let stream = self.connect(live, addr)?;
            for i in 0..orders {
                let ns = self
                    .request(&stream, &mut buffers)
                    .map_err(|e| RunError::io("split-write: request", e))?;
                if measuring {
                    if i == 0 { first.push(ns) } else { later.push(ns) }
                }
            }
            if measuring {
                connections += 1;
                (ctx.progress)(start.elapsed().as_secs_f64() / self.duration.as_secs_f64());
            }
        }
    }

    fn summarise(&self, loops: Loops) -> Result<Measurement, RunError> {
        let mut us: Vec<f64> = loops.latencies_ns.iter().map(|&n| n as f64 / 1e3).collect();
        if us.is_empty() {
            return Err(RunError::NothingCompleted {
                what: "split-write round",
                detail: "no request completed",
            });
        }
        us.sort_by(f64::total_cmp);
        let n = us.len();
        let q = |p: f64| super::flows::percentile(&us, p);
        let mut m = Measurement::default();
        m.metric("min_us", us[0])
            .metric("mean_us", us.iter().sum::<f64>() / n as f64)
            .metric("p50_us", q(0.50))
            .metric("p95_us", q(0.95))
            .metric("p99_us", q(0.99))
            .metric("max_us", us[n - 1])
            .metric("samples_count", n as f64)
            .metric("tx_per_s", n as f64 / loops.elapsed.as_secs_f64())
            .metric(
                "over_10ms_pct",
                100.0 * us.iter().filter(|&&v| v > 10_000.0).count() as f64 / n as f64,
            );
        if let Some(ato) = loops.server_ato_us {
            m.metric("server_ato_us", f64::from(ato));
        }
        m.series.push(Series::cdf("latency_us", &mut us));
        m.notes.push(format!(
            "placement: {}; client seen on {}, server on {}",
            self.placement.describe(),
            cpus_phrase(&loops.client_cpus),
            cpus_phrase(&loops.server_cpus)
        ));
        Ok(m)
    }
}

fn note_cpu(cpus: &mut Vec<usize>) {
    if let Some(c) = sys::current_cpu()
        && !cpus.contains(&c)
    {
        cpus.push(c);
        cpus.sort_unstable();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload;
    use crate::workload::rr::tests::assert_sane;
    use crate::workload::test_support::run_once;

    fn refused(pairs: &[(&str, toml::Value)]) -> ParamError {
        let p = Params::from_pairs(pairs.iter().cloned());
        workload::plan(&SplitWrite, &p).err().expect("refused")
    }

    #[test]
    fn bad_parameters_are_named_by_key() {
        assert_eq!(refused(&[("nodelay", "yes".into())]).key, "nodelay");
        assert_eq!(refused(&[("quickack", "sometimes".into())]).key, "quickack");
        assert_eq!(refused(&[("orders_per_connection", 10.into())]).key, "orders_per_connection");
        let one = [("reconnect", true.into()), ("orders_per_connection", 1.into())];
        assert_eq!(refused(&one).key, "orders_per_connection");
        assert_eq!(refused(&[("quickack_side", "server".into())]).key, "quickack_side");
        let side = [("quickack", "rearm".into()), ("quickack_side", "router".into())];
        assert_eq!(refused(&side).key, "quickack_side");
        assert_eq!(refused(&[("header", "0B".into())]).key, "header");
        assert_eq!(refused(&[("body", "1MB".into())]).key, "body");
        assert_eq!(refused(&[("duration", "5ms".into())]).key, "duration");
        assert_eq!(refused(&[("placement", "far".into())]).key, "placement");
        assert_eq!(refused(&[("cc", "bbr".into())]).key, "cc");
    }

    #[test]
    fn quickack_goes_to_the_chosen_side() {
        let p = Params::from_pairs([("quickack", toml::Value::from("rearm"))]);
        let d = workload::plan(&SplitWrite, &p).unwrap().describe();
        assert!(d.contains("QUICKACK client off / server rearm"), "{d}");
        let p = Params::from_pairs([
            ("quickack", toml::Value::from("rearm")),
            ("quickack_side", "both".into()),
        ]);
        let d = workload::plan(&SplitWrite, &p).unwrap().describe();
        assert!(d.contains("QUICKACK client rearm / server rearm"), "{d}");
    }

    /// Fresh connections: every measured connection contributes one first request and
    /// `orders_per_connection - 1` later ones, in one real round on veth.
    #[test]
    fn reconnect_keeps_each_connections_first_request_apart() {
        let p = Params::from_pairs([
            ("reconnect", toml::Value::from(true)),
            ("orders_per_connection", 5.into()),
            ("body", "0B".into()),
            ("header", "64B".into()),
            ("duration", "300ms".into()),
            ("warmup", "50ms".into()),
        ]);
        let plan = workload::plan(&SplitWrite, &p).unwrap();
        assert!(
            plan.describe().contains("a fresh connection every 5 requests"),
            "{}",
            plan.describe()
        );
        assert!(plan.describe().contains("one 64 B write"), "{}", plan.describe());
        let m = run_once(plan.as_ref(), 3);
        let connections = m.metrics["connections_count"];
        assert!(connections >= 1.0, "{:?}", m.metrics);
        assert_eq!(m.metrics["samples_count"], 5.0 * connections, "{:?}", m.metrics);
        for k in ["first_p50_us", "later_p50_us", "first_p95_us", "later_p95_us"] {
            assert!(m.metrics[k] > 0.0 && m.metrics[k] < 1e6, "{k}: {:?}", m.metrics);
        }
        let diff = m.metrics["first_p50_us"] - m.metrics["later_p50_us"];
        assert!((m.metrics["first_over_later_us"] - diff).abs() < 1e-9, "{:?}", m.metrics);
    }

    /// Nagle on, no QUICKACK: the body waits for the server's delayed ACK; with TCP_NODELAY
    /// it does not. A real round of each on veth.
    #[test]
    fn nagle_with_delayed_ack_stalls_the_second_write() {
        let round = |nodelay: bool| {
            let p = Params::from_pairs([
                ("nodelay", toml::Value::from(nodelay)),
                ("duration", "500ms".into()),
                ("warmup", "100ms".into()),
            ]);
            run_once(workload::plan(&SplitWrite, &p).unwrap().as_ref(), 3)
        };
        let (nagle, nodelay) = (round(false), round(true));
        assert_sane(&nagle);
        assert_sane(&nodelay);
        assert!(
            nagle.metrics["p50_us"] > 5.0 * nodelay.metrics["p50_us"],
            "{:?} vs {:?}",
            nagle.metrics,
            nodelay.metrics
        );
    }
}
