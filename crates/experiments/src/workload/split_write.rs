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
//!
//! | key | meaning | default |
//! |---|---|---|
//! | `path`, `rate`, ... | the path ([`crate::path`]) | veth |
//! | `nodelay` | `TCP_NODELAY` on the client (the writer) | `false` |
//! | `quickack` | `off` or `rearm` (after every receive) | `off` |
//! | `quickack_side` | `server`, `client` or `both` | `server` |
//! | `header`, `body`, `response_size` | bytes per write and of the response | `32B`, `32B`, `64B` |
//! | `duration`, `warmup` | measured part, unmeasured warm-up | `2s`, `200ms` |
//! | `placement`, `cpu` | see [`super::rr::placement`] | `same-cpu` |
//!
//! Metrics: `p50_us`, `p99_us`, `max_us`, `min_us`, `mean_us`, `tx_per_s`, `samples_count`,
//! `over_10ms_pct` (requests that waited for a timer), `server_ato_us` (the server socket's
//! delayed-ACK timeout from `TCP_INFO` at the end). Series: `latency_us`.

use std::io::{self, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
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
        let quickack = match params.choice("quickack", &["off", "rearm"])?.as_deref() {
            Some("rearm") => QuickAck::Rearm,
            _ => QuickAck::Off,
        };
        let side = params
            .choice("quickack_side", &["server", "client", "both"])?
            .unwrap_or_else(|| "server".into());
        if quickack == QuickAck::Off && params.has("quickack_side") {
            return Err(ParamError::new("quickack_side", "has no effect with quickack = \"off\""));
        }
        let on = |s: &str| if side == s || side == "both" { quickack } else { QuickAck::Off };
        let size = |key: &str, default: u64| -> Result<usize, ParamError> {
            match params.bytes(key)?.unwrap_or(default) {
                n @ 1..=65536 => Ok(n as usize),
                n => Err(ParamError::new(key, format!("{n} B is outside 1..=65536 B"))),
            }
        };
        let (header, body, response) =
            (size("header", 32)?, size("body", 32)?, size("response_size", 64)?);
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
            duration,
            warmup,
            placement,
        }))
    }
}

impl VariantPlan for Plan {
    fn metrics(&self) -> Vec<String> {
        let names = ["min_us", "mean_us", "p50_us", "p99_us", "max_us", "samples_count"];
        let more = ["tx_per_s", "over_10ms_pct", "server_ato_us"];
        names.into_iter().chain(more).map(str::to_owned).collect()
    }

    fn run(&self, ctx: &RoundContext<'_>) -> Result<Measurement, RunError> {
        let (mut m, lateness) = self.path.round(ctx, |live| self.run_on(live, ctx))?;
        m.lateness = lateness;
        Ok(m)
    }

    fn describe(&self) -> String {
        format!(
            "{}; closed loop, request written as {} B + {} B, {} B response; client \
             TCP_NODELAY {}, QUICKACK client {} / server {}; {}",
            self.path.describe(),
            self.header,
            self.body,
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
        let nodelay = self.nodelay;
        let client = live
            .client()
            .run(|| -> io::Result<TcpStream> {
                let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
                s.set_tcp_nodelay(nodelay)?;
                s.connect_timeout(&SockAddr::from(addr), IO_TIMEOUT)?;
                Ok(s.into())
            })?
            .map_err(io_err("split-write: connect"))?;
        let (server, _) = listener.accept().map_err(io_err("split-write: accept"))?;
        for s in [&client, &server] {
            s.set_read_timeout(Some(IO_TIMEOUT)).map_err(io_err("split-write: timeout"))?;
            s.set_write_timeout(Some(IO_TIMEOUT)).map_err(io_err("split-write: timeout"))?;
        }
        // The server never replies early, whatever the segments look like.
        server.set_nodelay(true).map_err(io_err("split-write: server nodelay"))?;
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

    /// Answers each complete request; returns the CPUs it ran on and its final delayed-ACK
    /// timeout.
    fn serve(&self, stream: &TcpStream) -> io::Result<(Vec<usize>, Option<u32>)> {
        if let Some(cpu) = self.placement.server_cpu() {
            sys::pin_current_thread(cpu)?;
        }
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
        let header = vec![0x11u8; self.header];
        let body = vec![0x22u8; self.body];
        let mut response = vec![0u8; self.response];
        let mut writer = stream;
        let mut cpus = Vec::new();
        let mut one = || -> io::Result<u64> {
            let t0 = Instant::now();
            writer.write_all(&header)?;
            writer.write_all(&body)?;
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
        };
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
        assert_eq!(refused(&[("quickack", "once".into())]).key, "quickack");
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
