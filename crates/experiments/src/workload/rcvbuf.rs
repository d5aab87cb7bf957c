//! The `rcvbuf` workload: a receiver that asks for a large `SO_RCVBUF` on a long fat path
//! (seed 000, failure mode 4, "Buffer size exceeds rmem_max - silently capped"): the buffer
//! requested, the buffer the kernel holds, the throughput each gives, and whether tcptail's
//! socket profile verification (`sock::apply_profile`) flags the shortfall.
//!
//! Per round, one bulk flow from the client to the server. The server's listening socket gets
//! the receive buffer before `listen` (the window scale is fixed in the SYN-ACK, and accepted
//! sockets inherit the buffer):
//!
//! - `rcvbuf_mode = "request"`: `SO_RCVBUF = rcvbuf` through a socket profile, as an
//!   application would; the kernel stores `2 x min(rcvbuf, net.core.rmem_max)`;
//! - `"capped"`: `SO_RCVBUF = min(rcvbuf, cap)`: the buffer the kernel would leave of the
//!   request under `net.core.rmem_max = cap` (the seed's kernel default, 212992), for hosts
//!   whose `rmem_max` is global and cannot be set in a namespace (Linux: `net.core.rmem_max`
//!   is writable only in the initial network namespace, and tests never change the host's);
//! - `"force"`: `SO_RCVBUFFORCE = rcvbuf` (root), what a raised `rmem_max` gives;
//! - `"auto"`: no `SO_RCVBUF`: the kernel's autotuning up to the namespace's `tcp_rmem` max
//!   (sized for the path's BDP).
//!
//! For `request` and `capped`, the profile with the full `rcvbuf` is also applied to a probe
//! socket in the server namespace and its verification read: `verify_flagged` is 1 when the
//! report's `SO_RCVBUF` row is not `applied` (on this host's real `rmem_max`).
//!
//! | key | values | default |
//! |---|---|---|
//! | `rcvbuf_mode` | `request`, `capped`, `force`, `auto` | `request` |
//! | `rcvbuf` | the requested size | `16MiB` |
//! | `cap` | the `rmem_max` a `capped` variant stands for | `212992` |
//! | `cc` | `cubic`, `bbr`, `reno` | `cubic` |
//! | `duration`, `warmup` | the measured window after the warm-up | `4s`, `1s` |
//! | path keys | `path = "emulated"` (required), `rate`, `rtt`, `buffer`, `sysctl` | |
//!
//! Metrics: `requested_bytes`, `actual_bytes` (`getsockopt(SO_RCVBUF)` on the accepted socket,
//! the kernel's doubled figure), `rmem_max_bytes` (the host's, read in the server namespace),
//! `goodput_mbps`, `link_pct`, `rwnd_limited_pct` (the sender's `tcpi_rwnd_limited` over
//! `tcpi_busy_time` in the window), and `verify_flagged` where a profile requested the size.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, Socket, Type};
use tcptail_sock::{BufferSize, OptionOutcome, Profile, apply_profile};
use tcptail_units::ByteSize;

use crate::params::{ParamError, Params};
use crate::path::{LivePath, PathPlan};
use crate::round::{Measurement, RoundContext, RunError};
use crate::workload::flows;
use crate::workload::{VariantPlan, Workload};

/// The `rcvbuf` engine.
pub struct Rcvbuf;

/// The kernel's default `net.core.rmem_max`.
pub const KERNEL_RMEM_MAX: u64 = 212_992;

/// How the receiver's buffer is set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Request,
    Capped,
    Force,
    Auto,
}

#[derive(Debug)]
struct Plan {
    path: PathPlan,
    cc: String,
    mode: Mode,
    rcvbuf: u64,
    cap: u64,
    duration: Duration,
    warmup: Duration,
}

impl Workload for Rcvbuf {
    fn name(&self) -> &'static str {
        "rcvbuf"
    }

    fn plan(&self, params: &Params) -> Result<Box<dyn VariantPlan>, ParamError> {
        let cc = flows::cc_param(params)?;
        let mode =
            match params.choice("rcvbuf_mode", &["request", "capped", "force", "auto"])?.as_deref()
            {
                Some("capped") => Mode::Capped,
                Some("force") => Mode::Force,
                Some("auto") => Mode::Auto,
                _ => Mode::Request,
            };
        let rcvbuf = params.bytes("rcvbuf")?.unwrap_or(16 << 20);
        if !(4096..=1 << 30).contains(&rcvbuf) {
            return Err(ParamError::new("rcvbuf", "between 4KiB and 1GiB"));
        }
        let cap = params.bytes("cap")?.unwrap_or(KERNEL_RMEM_MAX);
        if cap < 2304 || cap > rcvbuf {
            return Err(ParamError::new("cap", "between 2304 bytes (SOCK_MIN_RCVBUF) and rcvbuf"));
        }
        let duration = params.duration("duration")?.unwrap_or(Duration::from_secs(4));
        let warmup = params.duration("warmup")?.unwrap_or(Duration::from_secs(1));
        if duration < Duration::from_millis(500) || duration > Duration::from_secs(600) {
            return Err(ParamError::new("duration", "between 500ms and 10min"));
        }
        if warmup >= duration {
            return Err(ParamError::new("warmup", "shorter than duration"));
        }
        let path = PathPlan::emulated_from_params(params, "rcvbuf")?;
        Ok(Box::new(Plan { path, cc, mode, rcvbuf, cap, duration, warmup }))
    }
}

/// The profile an application would apply: `SO_RCVBUF = bytes`.
fn profile(bytes: u64) -> Profile {
    Profile {
        receive_buffer: Some(BufferSize::Bytes(ByteSize(bytes))),
        ..Profile::named(format!("rcvbuf-{bytes}"))
    }
}

impl Plan {
    /// The server's listener with its receive buffer set before `listen`.
    fn listener(&self, live: &LivePath) -> Result<TcpListener, RunError> {
        let addr = SocketAddr::from((live.server_addr(), 0));
        let (mode, rcvbuf, cap) = (self.mode, self.rcvbuf, self.cap);
        let socket = live
            .server()
            .run(move || -> Result<Socket, String> {
                let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))
                    .map_err(|e| e.to_string())?;
                let requested = match mode {
                    Mode::Request => Some(rcvbuf),
                    Mode::Capped => Some(rcvbuf.min(cap)),
                    Mode::Force | Mode::Auto => None,
                };
                if let Some(bytes) = requested {
                    let report = apply_profile(s.as_fd(), &profile(bytes));
                    let row = report.option("SO_RCVBUF").ok_or("no SO_RCVBUF row")?;
                    // Capped is expected here; anything else means the buffer was not set.
                    if !matches!(row.outcome, OptionOutcome::Applied | OptionOutcome::Capped { .. })
                    {
                        return Err(format!("SO_RCVBUF: {:?}", row.outcome));
                    }
                }
                if mode == Mode::Force {
                    rustix::net::sockopt::set_socket_recv_buffer_size_force(&s, rcvbuf as usize)
                        .map_err(|e| format!("SO_RCVBUFFORCE (needs CAP_NET_ADMIN): {e}"))?;
                }
                s.bind(&addr.into()).map_err(|e| e.to_string())?;
                s.listen(8).map_err(|e| e.to_string())?;
                Ok(s)
            })?
            .map_err(|e| RunError::failed("set up the receiver", e))?;
        Ok(socket.into())
    }

    /// Applies the full request on a probe socket in the server namespace: whether the
    /// profile verification flags it, and its note.
    fn verify(&self, live: &LivePath) -> Result<(bool, String), RunError> {
        let rcvbuf = self.rcvbuf;
        live.server()
            .run(move || -> std::io::Result<(bool, String)> {
                let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
                let report = apply_profile(s.as_fd(), &profile(rcvbuf));
                let row = report.option("SO_RCVBUF").cloned();
                Ok(match row {
                    Some(r) => {
                        let flagged = r.outcome != OptionOutcome::Applied;
                        let what = match &r.outcome {
                            OptionOutcome::Capped { note, .. } => note.clone(),
                            other => format!("{other:?}"),
                        };
                        let actual = r.actual.unwrap_or_else(|| "?".into());
                        (
                            flagged,
                            format!(
                                "verification: requested {}, kernel holds {actual}: {what}",
                                r.requested
                            ),
                        )
                    }
                    None => (true, "verification: no SO_RCVBUF row".into()),
                })
            })?
            .map_err(|e| RunError::io("apply the profile to a probe socket", e))
    }
}

/// Sends until `stop`.
fn send(mut s: TcpStream, stop: &AtomicBool) -> std::io::Result<()> {
    let chunk = vec![0x5au8; 256 * 1024];
    while !stop.load(Ordering::Relaxed) {
        if let Err(e) = s.write_all(&chunk) {
            return if stop.load(Ordering::Relaxed) { Ok(()) } else { Err(e) };
        }
    }
    Ok(())
}

/// Reads and counts until the connection ends or `stop`.
fn receive(mut s: TcpStream, count: &AtomicU64, stop: &AtomicBool) -> std::io::Result<()> {
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                count.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(_) if stop.load(Ordering::Relaxed) => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

/// `net.core.rmem_max` as the server namespace sees it (the host's: it is not per namespace).
fn rmem_max(live: &LivePath) -> Result<u64, RunError> {
    let text = live
        .server()
        .run(|| std::fs::read_to_string("/proc/sys/net/core/rmem_max"))?
        .map_err(|e| RunError::io("read net.core.rmem_max", e))?;
    text.trim().parse().map_err(|_| RunError::failed("read net.core.rmem_max", text))
}

impl VariantPlan for Plan {
    fn metrics(&self) -> Vec<String> {
        let mut names = vec![
            "requested_bytes",
            "actual_bytes",
            "rmem_max_bytes",
            "goodput_mbps",
            "link_pct",
            "rwnd_limited_pct",
        ];
        if matches!(self.mode, Mode::Request | Mode::Capped) {
            names.push("verify_flagged");
        }
        names.into_iter().map(str::to_owned).collect()
    }

    fn run(&self, ctx: &RoundContext<'_>) -> Result<Measurement, RunError> {
        let (m, lateness) = self.path.round(ctx, |live| {
            let listener = self.listener(live)?;
            let (client, server) = flows::connect(live, &listener, Some(&self.cc), false)?;
            let actual = rustix::net::sockopt::socket_recv_buffer_size(&server)
                .map_err(|e| RunError::io("getsockopt(SO_RCVBUF)", e.into()))?;
            let mut m = Measurement::default();
            if matches!(self.mode, Mode::Request | Mode::Capped) {
                let (flagged, note) = self.verify(live)?;
                m.metric("verify_flagged", if flagged { 1.0 } else { 0.0 });
                m.notes.push(note);
            }
            let count = Arc::new(AtomicU64::new(0));
            let stop = Arc::new(AtomicBool::new(false));
            let sender = client.try_clone().map_err(|e| RunError::io("clone the sender", e))?;
            let unblock = server.try_clone().map_err(|e| RunError::io("clone the receiver", e))?;
            let reader = {
                let (count, stop) = (Arc::clone(&count), Arc::clone(&stop));
                std::thread::spawn(move || receive(server, &count, &stop))
            };
            let writer = {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || send(sender, &stop))
            };
            let start = Instant::now();
            let mut interrupted = false;
            let mut at_warmup = None;
            while start.elapsed() < self.duration {
                if (ctx.stop_requested)() {
                    interrupted = true;
                    break;
                }
                if at_warmup.is_none() && start.elapsed() >= self.warmup {
                    at_warmup = Some((
                        Instant::now(),
                        count.load(Ordering::Relaxed),
                        flows::tcp_info(&client)?,
                    ));
                }
                (ctx.progress)(start.elapsed().as_secs_f64() / self.duration.as_secs_f64());
                std::thread::sleep(Duration::from_millis(20));
            }
            let (end, bytes, info) =
                (Instant::now(), count.load(Ordering::Relaxed), flows::tcp_info(&client)?);
            stop.store(true, Ordering::Relaxed);
            let _ = client.shutdown(std::net::Shutdown::Both);
            let _ = unblock.shutdown(std::net::Shutdown::Both);
            let sent = writer.join().map_err(|_| RunError::panicked("sender", "panicked"))?;
            let read = reader.join().map_err(|_| RunError::panicked("receiver", "panicked"))?;
            if interrupted {
                return Err(RunError::Interrupted);
            }
            sent.map_err(|e| RunError::io("send", e))?;
            read.map_err(|e| RunError::io("receive", e))?;
            let (t0, b0, i0) =
                at_warmup.ok_or_else(|| RunError::failed("measure", "no warm-up"))?;
            let secs = end.duration_since(t0).as_secs_f64();
            let goodput = (bytes - b0) as f64 * 8.0 / secs / 1e6;
            m.metric(
                "requested_bytes",
                if self.mode == Mode::Auto { 0.0 } else { self.rcvbuf as f64 },
            )
            .metric("actual_bytes", actual as f64)
            .metric("rmem_max_bytes", rmem_max(live)? as f64)
            .metric("goodput_mbps", goodput);
            if let Some(rate) = self.path.rate() {
                m.metric("link_pct", 100.0 * goodput * 1e6 / rate.0 as f64);
            }
            let share = match (
                i0.rwnd_limited_us,
                info.rwnd_limited_us,
                i0.busy_time_us,
                info.busy_time_us,
            ) {
                (Some(r0), Some(r1), Some(b0), Some(b1)) if b1 > b0 => {
                    100.0 * r1.saturating_sub(r0) as f64 / (b1 - b0) as f64
                }
                _ => f64::NAN,
            };
            m.metric("rwnd_limited_pct", share);
            Ok(m)
        })?;
        Ok(Measurement { lateness, ..m })
    }

    fn planned(&self) -> Duration {
        // The warm-up is the start of `duration`, not time before it.
        self.duration
    }

    fn describe(&self) -> String {
        let buffer = match self.mode {
            Mode::Request => {
                format!("SO_RCVBUF {} requested (host's rmem_max applies)", ByteSize(self.rcvbuf))
            }
            Mode::Capped => format!(
                "SO_RCVBUF {} requested under rmem_max {}: {} set",
                ByteSize(self.rcvbuf),
                self.cap,
                self.rcvbuf.min(self.cap)
            ),
            Mode::Force => format!("SO_RCVBUFFORCE {} (rmem_max raised)", ByteSize(self.rcvbuf)),
            Mode::Auto => "no SO_RCVBUF (autotuning)".into(),
        };
        format!(
            "{}; one {} flow, {buffer}; {:.0} s measured after {:.0} s",
            self.path.describe(),
            self.cc,
            (self.duration - self.warmup).as_secs_f64(),
            self.warmup.as_secs_f64()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{self, test_support};

    fn params(pairs: &[(&str, toml::Value)]) -> Params {
        test_support::emulated("100mbit", "50ms", pairs)
    }

    #[test]
    fn bad_parameters_are_named() {
        let err = |p: Params| workload::plan(&Rcvbuf, &p).err().expect("refused");
        assert_eq!(err(params(&[("rcvbuf_mode", "max".into())])).key, "rcvbuf_mode");
        assert_eq!(err(params(&[("rcvbuf", "1KB".into())])).key, "rcvbuf");
        assert_eq!(err(params(&[("cap", "32MiB".into())])).key, "cap");
        assert_eq!(err(params(&[("warmup", "9s".into())])).key, "warmup");
        assert_eq!(err(Params::from_pairs([("rcvbuf", toml::Value::from("1MiB"))])).key, "path");
        assert!(workload::plan(&Rcvbuf, &params(&[])).is_ok());
    }

    /// The warm-up is the first part of `duration` (the window starts at it), so the plan
    /// is `duration`: counting the warm-up again overstated quick mode's 12 rounds by 12 s.
    #[test]
    fn the_plan_counts_the_warm_up_once() {
        let p = params(&[("duration", "2s".into()), ("warmup", "1s".into())]);
        let plan = workload::plan(&Rcvbuf, &p).unwrap();
        assert_eq!(plan.planned(), Duration::from_secs(2));
    }

    /// One short round per mode on a 100 Mbit/s x 50 ms path (needs root and TUN): the capped
    /// buffer is the kernel's double of 212992, its flow is window-limited and slower than the
    /// forced 16 MiB one, and the verification flags a 16 MiB request above this host's
    /// rmem_max.
    #[test]
    fn the_cap_shows_in_the_buffer_the_goodput_and_the_verification() {
        let run = |mode: &str| {
            let p = params(&[
                ("rcvbuf_mode", mode.into()),
                ("duration", "2s".into()),
                ("warmup", "1s".into()),
            ]);
            let plan = workload::plan(&Rcvbuf, &p).unwrap();
            test_support::run_once(plan.as_ref(), 5)
        };
        let capped = run("capped");
        let forced = run("force");
        let get = |m: &Measurement, k: &str| m.metrics[k];
        assert_eq!(get(&capped, "actual_bytes"), 2.0 * KERNEL_RMEM_MAX as f64, "{capped:?}");
        assert_eq!(get(&forced, "actual_bytes"), 2.0 * (16 << 20) as f64, "{forced:?}");
        assert!(
            get(&capped, "goodput_mbps") < 0.7 * get(&forced, "goodput_mbps"),
            "{capped:?} {forced:?}"
        );
        assert!(get(&capped, "rwnd_limited_pct") > 20.0, "{capped:?}");
        let rmem_max = get(&capped, "rmem_max_bytes");
        assert_eq!(
            get(&capped, "verify_flagged"),
            f64::from(u8::from(rmem_max < (16 << 20) as f64))
        );
    }
}
