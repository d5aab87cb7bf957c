//! The `keepalive` workload: established connections through one emulated path, then the path
//! blackholes (a path event); how long until the application learns the peer is gone (seed
//! 000, "TCP Keepalives for Exchange Connections").
//!
//! Every variant runs at once ([`Workload::joint`]): each is a *case* (how the detecting socket
//! is configured and whether it has data in flight), with `connections` independent
//! connections per case, all through the same path and the same blackhole. Each connection is
//! a replica: its detection time is folded like a round, so one round of the slowest case
//! (the seed's sysctl 30/5/3, 45 s) gives every case several samples.
//!
//! Per connection:
//!
//! - **idle** cases: the peer sends one 64-byte message, the detecting socket reads it (that
//!   read is the reference: the kernel counts keepalive idle time from the last packet
//!   received), then blocks in `recv` until it returns an error;
//! - **in-flight** cases (`inflight = true`, client side only): the client sends a 64-byte order
//!   every 50 ms and waits for its echo; the first order the blackhole swallows stays
//!   unacknowledged, retransmissions back off, and `tcp_retries2` (or `TCP_USER_TIMEOUT`)
//!   decides when `recv` fails. The reference is that order's `send`.
//!
//! `detect_s` runs from the reference to the error; `expected_s` is what the kernel's rules
//! give for the case's settings (below); `floor_s` and `bound_s` bracket it by the measured
//! resolution: the kernel arms each keepalive or retransmission timer on its timer wheel, which
//! rounds an expiry up to the wheel level's granularity (8^level ticks; the tick is
//! `CLOCK_MONOTONIC_COARSE`'s resolution, measured: 4 ms at HZ=250), so every timer of the
//! case's chain may fire up to one granularity plus one tick late; 50 ms is added for this
//! process's wake-up on a busy machine, and `floor_s` allows 50 ms early for the reference
//! (the read returns after the kernel saw the packet).
//!
//! Expected times (Linux `tcp_keepalive_timer`, `tcp_write_timeout`):
//!
//! - keepalive `idle/interval/count`, no user timeout: `idle + interval x count`;
//! - keepalive with `TCP_USER_TIMEOUT` u: the connection is dropped at the first keepalive
//!   timer at or after u with at least one probe out: `idle + interval x max(1, ceil((u -
//!   idle) / interval))` (the probe count no longer matters);
//! - data in flight, no user timeout: keepalive never fires while data is unacknowledged; the
//!   connection is dropped at the first retransmission timeout at which the time since the
//!   order was sent reaches `tcp_model_timeout(tcp_retries2)` (`(2^(n+1) - 1) x 200 ms` up to
//!   the 120 s backoff cap); the timeouts fall at `rto x (2^k - 1)` with the RTO read from
//!   `tcp_info` before the blackhole;
//! - data in flight with `TCP_USER_TIMEOUT` u: u (the kernel clamps the last RTO to it).
//!
//! | key | values | default |
//! |---|---|---|
//! | `side` | `client`, `server`: which end detects (namespace sysctls differ per end) | `client` |
//! | `keepalive` | `"10s/5s/3"` (per socket: `TCP_KEEPIDLE`/`TCP_KEEPINTVL`/`TCP_KEEPCNT`), `"sysctl"` (`SO_KEEPALIVE` only: the namespace's `net.ipv4.tcp_keepalive_*`), `"off"` | `off` |
//! | `user_timeout` | `TCP_USER_TIMEOUT` | none |
//! | `inflight` | data unacknowledged at the blackhole | `false` |
//! | `connections` | connections per case (1..=16) | 3 |
//! | `time_scale` | multiplies per-socket keepalive times and `user_timeout` (smoke runs; whole seconds must stay whole) | 1 |
//! | `keepalive_unscaled` | the `idle/interval/count` a scaled `sysctl` case stands for (`expected_unscaled_s`) | none |
//! | `retries2_unscaled` | the `tcp_retries2` a scaled in-flight case stands for (`expected_unscaled_s`) | none |
//! | `client_sysctl`, `server_sysctl` | `net.` sysctls for one end's namespace only (same for every variant) | none |
//! | path keys | `path = "emulated"` (required), `rate`, `rtt`, `event` with exactly one `blackhole` (same for every variant), `sysctl` | |
//!
//! Metrics per connection: `detect_s`, `expected_s`, `floor_s`, `bound_s`, `after_outage_s`
//! (from the blackhole, as placed on this process's clock when the emulator started), and
//! `expected_unscaled_s` where a case is scaled.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use socket2::{SockRef, TcpKeepalive};
use tcptail_emu::PathChange;

use crate::params::{ParamError, Params};
use crate::path::PathPlan;
use crate::round::{Measurement, RoundContext, RunError};
use crate::workload::flows;
use crate::workload::{JointPlan, VariantPlan, Workload};

/// The `keepalive` engine.
pub struct KeepaliveEngine;

/// Kernel defaults of `net.ipv4.tcp_keepalive_{time,intvl,probes}` and `tcp_retries2`.
pub const KERNEL_KEEPALIVE: KeepaliveTimes =
    KeepaliveTimes { idle: Duration::from_secs(7200), interval: Duration::from_secs(75), count: 9 };
/// The kernel's default `net.ipv4.tcp_retries2`.
pub const KERNEL_RETRIES2: u32 = 15;
/// `TCP_RTO_MIN`, the base of `tcp_model_timeout`.
const RTO_MIN: Duration = Duration::from_millis(200);
/// `TCP_RTO_MAX`, the backoff cap.
const RTO_MAX: Duration = Duration::from_secs(120);
/// This process's wake-up allowance after the kernel reports the error.
const WAKE_MARGIN: Duration = Duration::from_millis(50);
/// How early the reference may be read after the kernel saw the packet.
const EARLY_MARGIN: Duration = Duration::from_millis(50);
/// How often an in-flight connection waiting for its echo reads `tcp_info`.
const RTO_POLL: Duration = Duration::from_millis(2);
/// Interval between orders on in-flight connections.
const ORDER_EVERY: Duration = Duration::from_millis(50);
/// Message size.
const MESSAGE: usize = 64;

/// Keepalive idle time, probe interval and probe count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeepaliveTimes {
    /// Idle time before the first probe.
    pub idle: Duration,
    /// Between probes.
    pub interval: Duration,
    /// Unanswered probes before the connection is dropped.
    pub count: u32,
}

impl KeepaliveTimes {
    /// `"10s/5s/3"`.
    fn parse(s: &str) -> Result<KeepaliveTimes, String> {
        let parts: Vec<&str> = s.split('/').map(str::trim).collect();
        let [idle, interval, count] = parts.as_slice() else {
            return Err(format!("'{s}': expected IDLE/INTERVAL/COUNT, e.g. \"10s/5s/3\""));
        };
        let secs = |what: &str, v: &str| -> Result<Duration, String> {
            let d = tcptail_units::parse_duration(v).map_err(|e| format!("{what} '{v}': {e}"))?;
            if d.subsec_nanos() != 0 || d.is_zero() || d.as_secs() > 32767 {
                return Err(format!(
                    "{what} '{v}': whole seconds from 1 to 32767 (the socket option's unit)"
                ));
            }
            Ok(d)
        };
        let count: u32 = count.parse().map_err(|_| format!("count '{count}': a whole number"))?;
        if !(1..=127).contains(&count) {
            return Err(format!("count {count}: from 1 to 127"));
        }
        Ok(KeepaliveTimes {
            idle: secs("idle", idle)?,
            interval: secs("interval", interval)?,
            count,
        })
    }

    /// Reads them from a sysctl table, with the kernel's defaults for missing keys.
    fn from_sysctls(sysctls: &std::collections::BTreeMap<String, String>) -> Result<Self, String> {
        let get = |key: &str, default: u64| -> Result<u64, String> {
            match sysctls.get(key) {
                None => Ok(default),
                Some(v) => v.trim().parse().map_err(|_| format!("{key} = '{v}': a whole number")),
            }
        };
        Ok(KeepaliveTimes {
            idle: Duration::from_secs(get("net.ipv4.tcp_keepalive_time", 7200)?),
            interval: Duration::from_secs(get("net.ipv4.tcp_keepalive_intvl", 75)?),
            count: get("net.ipv4.tcp_keepalive_probes", 9)? as u32,
        })
    }

    fn describe(&self) -> String {
        format!("{}/{}/{}", self.idle.as_secs(), self.interval.as_secs(), self.count)
    }
}

/// How the detecting socket's keepalive is set.
#[derive(Debug, Clone, PartialEq)]
enum KeepaliveSetting {
    Off,
    /// `SO_KEEPALIVE` only: the namespace's sysctls.
    Sysctl,
    /// Per-socket values.
    Socket(KeepaliveTimes),
}

/// Which end detects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Client,
    Server,
}

/// One case (one variant).
#[derive(Debug, Clone, PartialEq)]
struct Case {
    side: Side,
    keepalive: KeepaliveSetting,
    user_timeout: Option<Duration>,
    inflight: bool,
    connections: usize,
    keepalive_unscaled: Option<KeepaliveTimes>,
    retries2_unscaled: Option<u32>,
}

/// What every case shares: the path, its blackhole, the per-end sysctls.
#[derive(Debug, Clone, PartialEq)]
struct Shared {
    path: PathPlan,
    blackhole_at: Duration,
    client_sysctl: std::collections::BTreeMap<String, String>,
    server_sysctl: std::collections::BTreeMap<String, String>,
}

impl Shared {
    fn from_params(params: &Params) -> Result<Shared, ParamError> {
        let path = PathPlan::emulated_from_params(params, "keepalive")?;
        let blackholes: Vec<Duration> = path
            .events
            .iter()
            .filter(|e| e.change == PathChange::Blackhole)
            .map(|e| e.at)
            .collect();
        let [blackhole_at] = blackholes.as_slice() else {
            return Err(ParamError::new(
                "event",
                "exactly one blackhole event, e.g. event = [\"3s:blackhole\"]",
            ));
        };
        if path.events.iter().any(|e| e.change == PathChange::Restore) {
            return Err(ParamError::new(
                "event",
                "no restore: the peer must stay gone until every case has detected it",
            ));
        }
        if *blackhole_at < Duration::from_secs(1) {
            return Err(ParamError::new(
                "event",
                "the blackhole at 1 s or later, so every connection is set up before it",
            ));
        }
        let table = |key: &str| -> Result<_, ParamError> {
            let t = params.string_table(key)?.unwrap_or_default();
            if let Some(k) = t.keys().find(|k| !k.starts_with("net.")) {
                return Err(ParamError::new(
                    key,
                    format!("`{k}`: only net.* sysctls are per namespace"),
                ));
            }
            Ok(t)
        };
        Ok(Shared {
            path,
            blackhole_at: *blackhole_at,
            client_sysctl: table("client_sysctl")?,
            server_sysctl: table("server_sysctl")?,
        })
    }

    /// The sysctls in effect in one end's namespace: the path's, then that end's own.
    fn sysctls(&self, side: Side) -> std::collections::BTreeMap<String, String> {
        let mut all = self.path.sysctls.clone();
        all.extend(match side {
            Side::Client => self.client_sysctl.clone(),
            Side::Server => self.server_sysctl.clone(),
        });
        all
    }
}

impl Case {
    fn from_params(params: &Params) -> Result<Case, ParamError> {
        let side = match params.choice("side", &["client", "server"])?.as_deref() {
            Some("server") => Side::Server,
            _ => Side::Client,
        };
        let keepalive = match params.str("keepalive")?.as_deref() {
            None | Some("off") => KeepaliveSetting::Off,
            Some("sysctl") => KeepaliveSetting::Sysctl,
            Some(s) => KeepaliveSetting::Socket(
                KeepaliveTimes::parse(s).map_err(|e| ParamError::new("keepalive", e))?,
            ),
        };
        let scale = params
            .parsed("time_scale", |s| s.parse::<f64>().map_err(|e| format!("'{s}': {e}")))?
            .unwrap_or(1.0);
        if !(scale > 0.0 && scale <= 1.0) {
            return Err(ParamError::new("time_scale", "above 0 and at most 1"));
        }
        let keepalive = match keepalive {
            KeepaliveSetting::Socket(t) if scale < 1.0 => {
                let scaled = |d: Duration| -> Result<Duration, ParamError> {
                    let v = d.as_secs_f64() * scale;
                    if (v - v.round()).abs() > 1e-9 || v.round() < 1.0 {
                        return Err(ParamError::new(
                            "time_scale",
                            format!(
                                "scales {} s to {v} s: per-socket keepalive times are whole seconds",
                                d.as_secs()
                            ),
                        ));
                    }
                    Ok(Duration::from_secs(v.round() as u64))
                };
                KeepaliveSetting::Socket(KeepaliveTimes {
                    idle: scaled(t.idle)?,
                    interval: scaled(t.interval)?,
                    count: t.count,
                })
            }
            other => other,
        };
        let user_timeout = params.duration("user_timeout")?.map(|u| u.mul_f64(scale));
        if let Some(u) = user_timeout
            && (u < Duration::from_millis(1) || u > Duration::from_secs(3600))
        {
            return Err(ParamError::new("user_timeout", "from 1ms to 1h"));
        }
        let inflight = params.bool("inflight")?.unwrap_or(false);
        let connections = params.uint("connections", 16)?.unwrap_or(3) as usize;
        if connections == 0 {
            return Err(ParamError::new("connections", "at least one connection per case"));
        }
        if inflight && side == Side::Server {
            return Err(ParamError::new(
                "side",
                "in-flight cases detect on the client (the sender)",
            ));
        }
        if !inflight && keepalive == KeepaliveSetting::Off {
            return Err(ParamError::new(
                "keepalive",
                "an idle connection without keepalive never learns the peer is gone: set \
                 keepalive, or inflight = true",
            ));
        }
        let keepalive_unscaled = params.parsed("keepalive_unscaled", KeepaliveTimes::parse)?;
        let retries2_unscaled = params.uint("retries2_unscaled", 255)?.map(|n| n as u32);
        if keepalive_unscaled.is_some() && (inflight || user_timeout.is_some()) {
            return Err(ParamError::new(
                "keepalive_unscaled",
                "only for an idle case without a user timeout (the keepalive formula)",
            ));
        }
        if retries2_unscaled.is_some() && (!inflight || user_timeout.is_some()) {
            return Err(ParamError::new(
                "retries2_unscaled",
                "only for an in-flight case without a user timeout (tcp_retries2 decides)",
            ));
        }
        Ok(Case {
            side,
            keepalive,
            user_timeout,
            inflight,
            connections,
            keepalive_unscaled,
            retries2_unscaled,
        })
    }

    /// The keepalive values in effect for this case's socket.
    fn keepalive_times(&self, shared: &Shared) -> Result<Option<KeepaliveTimes>, String> {
        Ok(match &self.keepalive {
            KeepaliveSetting::Off => None,
            KeepaliveSetting::Socket(t) => Some(*t),
            KeepaliveSetting::Sysctl => {
                Some(KeepaliveTimes::from_sysctls(&shared.sysctls(self.side))?)
            }
        })
    }

    /// `tcp_retries2` in the detecting end's namespace.
    fn retries2(&self, shared: &Shared) -> Result<u32, String> {
        match shared.sysctls(self.side).get("net.ipv4.tcp_retries2") {
            None => Ok(KERNEL_RETRIES2),
            Some(v) => v.trim().parse().map_err(|_| format!("net.ipv4.tcp_retries2 = '{v}'")),
        }
    }

    fn describe(&self, shared: &Shared) -> String {
        let ka = match (&self.keepalive, self.keepalive_times(shared)) {
            (KeepaliveSetting::Off, _) => "keepalive off".to_owned(),
            (KeepaliveSetting::Socket(t), _) => format!("keepalive {} per socket", t.describe()),
            (KeepaliveSetting::Sysctl, Ok(Some(t))) => {
                format!("keepalive {} from the namespace's sysctls", t.describe())
            }
            (KeepaliveSetting::Sysctl, _) => "keepalive from sysctls".to_owned(),
        };
        let uto = self
            .user_timeout
            .map_or_else(String::new, |u| format!(", TCP_USER_TIMEOUT {} ms", u.as_millis()));
        let what = if self.inflight {
            format!(
                "an order in flight (tcp_retries2 = {})",
                self.retries2(shared).map_or_else(|e| e, |n| n.to_string())
            )
        } else {
            "idle".to_owned()
        };
        format!(
            "{}; {} connection(s), {}, {ka}{uto}, detected on the {}; blackhole at {:.1} s",
            shared.path.describe(),
            self.connections,
            what,
            if self.side == Side::Client { "client" } else { "server" },
            shared.blackhole_at.as_secs_f64()
        )
    }
}

/// `tcp_model_timeout(boundary, 200 ms)`: the time `tcp_retries2` allows from the first send.
pub fn retries_timeout(retries2: u32) -> Duration {
    let thresh = (RTO_MAX.as_millis() / RTO_MIN.as_millis()).ilog2();
    if retries2 <= thresh {
        RTO_MIN * ((2u32 << retries2) - 1)
    } else {
        RTO_MIN * ((2u32 << thresh) - 1) + RTO_MAX * (retries2 - thresh)
    }
}

/// Where an in-flight connection's retransmissions stood: when the first retransmission
/// timeout fired (from the order's send; the kernel's `retrans_stamp`, from which both
/// `tcp_retries2` and `TCP_USER_TIMEOUT` count), and the backed-off RTO it armed next.
#[derive(Debug, Clone, Copy, PartialEq)]
struct FirstRto {
    at: Duration,
    next: Duration,
}

/// When a case is expected to detect the blackhole, and the timers on the way (for the
/// resolution). `flight` is `None` for an idle connection.
fn expected(
    keepalive: Option<KeepaliveTimes>,
    user_timeout: Option<Duration>,
    flight: Option<FirstRto>,
    retries2: u32,
) -> (Duration, Vec<Duration>) {
    if let Some(first) = flight {
        let mut timers = vec![first.at];
        let (mut since, mut next) = (Duration::ZERO, first.next);
        if let Some(u) = user_timeout {
            // Backed-off timeouts until the one the kernel clamps to end at u.
            while since + next < u {
                timers.push(next);
                since += next;
                next = (next * 2).min(RTO_MAX);
            }
            timers.push(u - since);
            return (first.at + u, timers);
        }
        let limit = retries_timeout(retries2);
        loop {
            since += next;
            timers.push(next);
            if since >= limit || timers.len() > 64 {
                return (first.at + since, timers);
            }
            next = (next * 2).min(RTO_MAX);
        }
    }
    let k = keepalive.expect("idle cases have keepalive (checked when planned)");
    let probes = match user_timeout {
        None => k.count,
        Some(u) => {
            let past = u.saturating_sub(k.idle).as_secs_f64() / k.interval.as_secs_f64();
            (past.ceil() as u32).max(1)
        }
    };
    let mut timers = vec![k.idle];
    timers.extend(std::iter::repeat_n(k.interval, probes as usize));
    (k.idle + k.interval * probes, timers)
}

/// How late the kernel's timer wheel may fire a timer of `d` with a tick of `tick`: the
/// granularity of the wheel level it lands in (levels of 64 buckets, each 8x coarser) plus one
/// tick for the jiffy arithmetic.
pub fn timer_granularity(d: Duration, tick: Duration) -> Duration {
    let ticks = (d.as_nanos() / tick.as_nanos().max(1)) as u64;
    let mut level = 0u32;
    // LVL_START(n + 1) = 63 << (3n): the first delta that lands on level n + 1.
    while level < 8 && ticks >= 63u64 << (3 * level) {
        level += 1;
    }
    tick * 8u32.pow(level) + tick
}

/// The kernel's tick: the resolution of `CLOCK_MONOTONIC_COARSE` (1/HZ).
fn kernel_tick() -> Duration {
    let t = rustix::time::clock_getres(rustix::time::ClockId::MonotonicCoarse);
    let d = Duration::new(t.tv_sec.max(0) as u64, t.tv_nsec.clamp(0, 999_999_999) as u32);
    if d.is_zero() { Duration::from_millis(10) } else { d }
}

/// A checked variant.
#[derive(Debug)]
struct Plan {
    shared: Shared,
    case: Case,
}

impl Workload for KeepaliveEngine {
    fn name(&self) -> &'static str {
        "keepalive"
    }

    fn plan(&self, params: &Params) -> Result<Box<dyn VariantPlan>, ParamError> {
        let shared = Shared::from_params(params)?;
        let case = Case::from_params(params)?;
        // The figures the expectation needs must be readable now, not after the round.
        case.keepalive_times(&shared).map_err(|e| ParamError::new(side_key(case.side), e))?;
        case.retries2(&shared).map_err(|e| ParamError::new(side_key(case.side), e))?;
        Ok(Box::new(Plan { shared, case }))
    }

    fn joint(
        &self,
        variants: &[(&str, &Params)],
    ) -> Result<Option<Box<dyn JointPlan>>, (usize, ParamError)> {
        let mut shared: Option<Shared> = None;
        let mut cases = Vec::new();
        for (i, (_, params)) in variants.iter().enumerate() {
            let s = Shared::from_params(params).map_err(|e| (i, e))?;
            match &shared {
                None => shared = Some(s),
                Some(first) if *first != s => {
                    let key = if first.path != s.path { "path" } else { "client_sysctl" };
                    return Err((
                        i,
                        ParamError::new(
                            key,
                            "every variant of a keepalive experiment shares one path, its \
                             events, sysctls and per-end sysctls (they run on it together)",
                        ),
                    ));
                }
                Some(_) => {}
            }
            cases.push(Case::from_params(params).map_err(|e| (i, e))?);
        }
        let Some(shared) = shared else { return Ok(None) };
        Ok(Some(Box::new(Joint { shared, cases })))
    }
}

fn side_key(side: Side) -> &'static str {
    if side == Side::Client { "client_sysctl" } else { "server_sysctl" }
}

impl VariantPlan for Plan {
    fn run(&self, ctx: &RoundContext<'_>) -> Result<Measurement, RunError> {
        let joint = Joint { shared: self.shared.clone(), cases: vec![self.case.clone()] };
        let mut all = joint.run(ctx)?;
        let mut replicas = all.pop().unwrap_or_default();
        // On its own, a variant's round is its first connection.
        replicas.truncate(1);
        replicas.pop().ok_or_else(|| RunError::failed("the keepalive round", "no connection"))
    }

    fn describe(&self) -> String {
        self.case.describe(&self.shared)
    }

    fn planned(&self) -> Duration {
        Joint { shared: self.shared.clone(), cases: vec![self.case.clone()] }.planned()
    }

    fn metrics(&self) -> Vec<String> {
        let mut names = vec!["detect_s", "expected_s", "floor_s", "bound_s", "after_outage_s"];
        if self.case.keepalive_unscaled.is_some() || self.case.retries2_unscaled.is_some() {
            names.push("expected_unscaled_s");
        }
        names.into_iter().map(str::to_owned).collect()
    }
}

/// Every case at once on one path.
struct Joint {
    shared: Shared,
    cases: Vec<Case>,
}

/// One connection's end as seen by its watcher thread.
struct Detection {
    /// When the reference happened (last reception, or the unanswered order's send).
    reference: Instant,
    /// When `recv` failed, and how.
    error: Option<(Instant, std::io::Error)>,
    /// In-flight cases: the first retransmission timeout after the reference.
    first_rto: Option<FirstRto>,
}

/// Everything a connection's watcher needs.
struct Connection {
    case: usize,
    /// The detecting end.
    detector: TcpStream,
    /// The other end.
    peer: TcpStream,
}

impl Joint {
    fn connect(&self, live: &crate::path::LivePath) -> Result<Vec<Connection>, RunError> {
        let listener: TcpListener = flows::listen(live)?;
        let mut out = Vec::new();
        for (i, case) in self.cases.iter().enumerate() {
            for _ in 0..case.connections {
                let (client, server) = flows::connect(live, &listener, None, true)?;
                let (detector, peer) = match case.side {
                    Side::Client => (client, server),
                    Side::Server => (server, client),
                };
                configure(&detector, case)?;
                out.push(Connection { case: i, detector, peer });
            }
        }
        Ok(out)
    }
}

/// Applies a case's socket options to the detecting end.
fn configure(s: &TcpStream, case: &Case) -> Result<(), RunError> {
    let sock = SockRef::from(s);
    let opt = |what: &'static str| move |e: std::io::Error| RunError::io(what, e);
    match &case.keepalive {
        KeepaliveSetting::Off => {}
        KeepaliveSetting::Sysctl => sock.set_keepalive(true).map_err(opt("SO_KEEPALIVE"))?,
        KeepaliveSetting::Socket(t) => {
            let ka = TcpKeepalive::new()
                .with_time(t.idle)
                .with_interval(t.interval)
                .with_retries(t.count);
            sock.set_tcp_keepalive(&ka).map_err(opt("TCP_KEEPIDLE/KEEPINTVL/KEEPCNT"))?;
        }
    }
    if let Some(u) = case.user_timeout {
        sock.set_tcp_user_timeout(Some(u)).map_err(opt("TCP_USER_TIMEOUT"))?;
    }
    Ok(())
}

/// An idle connection: the peer sends one message, the detector reads it (the reference), then
/// waits in `recv` for the error.
fn watch_idle(mut c: Connection) -> std::io::Result<Detection> {
    c.peer.write_all(&[0x5a; MESSAGE])?;
    let mut buf = [0u8; MESSAGE];
    c.detector.read_exact(&mut buf)?;
    let reference = Instant::now();
    let error = wait_error(&mut c.detector, &mut buf);
    Ok(Detection { reference, error, first_rto: None })
}

/// Blocks in `recv` until it fails (or the connection ends some other way).
fn wait_error(s: &mut TcpStream, buf: &mut [u8]) -> Option<(Instant, std::io::Error)> {
    loop {
        match s.read(buf) {
            Ok(0) => return None,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Some((Instant::now(), e)),
        }
    }
}

/// An in-flight connection: orders every [`ORDER_EVERY`], each waiting for its echo; the one
/// the blackhole swallows is the reference. While waiting, `tcp_info` is read every
/// [`RTO_POLL`] (the read times out that often) until the first retransmission timeout shows
/// (`tcpi_retransmits`, which a tail loss probe does not raise).
fn watch_inflight(mut c: Connection, stop: &AtomicBool) -> std::io::Result<Detection> {
    let mut peer = c.peer.try_clone()?;
    // The peer echoes until its socket is shut down at the end of the round.
    let echo = std::thread::spawn(move || {
        let mut buf = [0u8; MESSAGE];
        while peer.read_exact(&mut buf).is_ok() {
            if peer.write_all(&buf).is_err() {
                break;
            }
        }
    });
    c.detector.set_read_timeout(Some(RTO_POLL))?;
    let mut buf = [0u8; MESSAGE];
    let result = 'orders: loop {
        if stop.load(Ordering::Relaxed) {
            break Err(std::io::Error::other("stopped before the blackhole"));
        }
        let sent = Instant::now();
        if let Err(e) = c.detector.write_all(&[0xa5; MESSAGE]) {
            break Err(e);
        }
        let (mut got, mut first_rto) = (0, None);
        while got < MESSAGE {
            match c.detector.read(&mut buf[got..]) {
                Ok(0) => {
                    let e = std::io::Error::other("end of stream");
                    break 'orders Ok(Detection {
                        reference: sent,
                        error: Some((Instant::now(), e)),
                        first_rto,
                    });
                }
                Ok(n) => got += n,
                Err(e)
                    if matches!(
                        e.kind(),
                        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                    ) =>
                {
                    if first_rto.is_none()
                        && let Ok(info) = flows::tcp_info(&c.detector)
                        && info.retransmits > 0
                    {
                        first_rto = Some(FirstRto {
                            at: sent.elapsed(),
                            next: Duration::from_micros(u64::from(info.rto_us)),
                        });
                        // Found: block from here on.
                        c.detector.set_read_timeout(None)?;
                    }
                    if stop.load(Ordering::Relaxed) {
                        break 'orders Ok(Detection { reference: sent, error: None, first_rto });
                    }
                }
                Err(e) => {
                    break 'orders Ok(Detection {
                        reference: sent,
                        error: Some((Instant::now(), e)),
                        first_rto,
                    });
                }
            }
        }
        std::thread::sleep(ORDER_EVERY.saturating_sub(sent.elapsed()));
    };
    let _ = c.peer.shutdown(Shutdown::Both);
    let _ = echo.join();
    result
}

impl Joint {
    /// The latest a case's detection is expected after the blackhole, timer slack included.
    fn longest_expected(&self, tick: Duration) -> Result<Duration, RunError> {
        let shared = &self.shared;
        let mut limits = Vec::new();
        for case in &self.cases {
            let k = case.keepalive_times(shared).map_err(|e| RunError::failed("keepalive", e))?;
            let r2 = case.retries2(shared).map_err(|e| RunError::failed("tcp_retries2", e))?;
            // A generous guess of an in-flight connection's first timeout on this path.
            let rto = RTO_MIN + shared.path.rtt() * 4 + Duration::from_millis(100);
            let guess = FirstRto { at: rto * 3, next: rto * 2 };
            let (at, timers) = expected(k, case.user_timeout, case.inflight.then_some(guess), r2);
            let slack: Duration = timers.iter().map(|&t| timer_granularity(t, tick)).sum();
            limits.push(at + slack);
        }
        Ok(limits.into_iter().max().unwrap_or_default())
    }
}

impl JointPlan for Joint {
    fn planned(&self) -> Duration {
        // The connections' setup before the blackhole, then the slowest case's detection.
        self.shared.blackhole_at + self.longest_expected(kernel_tick()).unwrap_or_default()
    }

    fn run(&self, ctx: &RoundContext<'_>) -> Result<Vec<Vec<Measurement>>, RunError> {
        let tick = kernel_tick();
        let shared = &self.shared;
        let longest = self.longest_expected(tick)?;
        // Give up on a connection this long after the blackhole.
        let deadline_after = longest + longest / 4 + Duration::from_secs(5);
        let (detections, lateness) = shared.path.round(ctx, |live| {
            let outage = Instant::now() + shared.blackhole_at;
            for (side, table) in
                [(live.client(), &shared.client_sysctl), (live.server(), &shared.server_sysctl)]
            {
                for (k, v) in table {
                    side.set_sysctl(k, v)?;
                }
            }
            let connections = self.connect(live)?;
            let stop = Arc::new(AtomicBool::new(false));
            let mut unblock = Vec::new();
            let mut watchers = Vec::new();
            for c in connections {
                let case = c.case;
                unblock.push((
                    c.detector.try_clone().map_err(|e| RunError::io("clone a socket", e))?,
                    c.peer.try_clone().map_err(|e| RunError::io("clone a socket", e))?,
                ));
                let inflight = self.cases[case].inflight;
                let stop = Arc::clone(&stop);
                let handle = std::thread::Builder::new()
                    .name("tcptail-keepalive".into())
                    .spawn(move || {
                        let d = if inflight { watch_inflight(c, &stop) } else { watch_idle(c) };
                        (case, d)
                    })
                    .map_err(|e| RunError::io("start a connection thread", e))?;
                watchers.push(handle);
            }
            let give_up = outage + deadline_after;
            let started = Instant::now();
            let interrupted = loop {
                if watchers.iter().all(|w| w.is_finished()) {
                    break false;
                }
                if (ctx.stop_requested)() {
                    break true;
                }
                if Instant::now() >= give_up {
                    break false;
                }
                let total = give_up.saturating_duration_since(started).as_secs_f64().max(1.0);
                (ctx.progress)((started.elapsed().as_secs_f64() / total).min(1.0));
                std::thread::sleep(Duration::from_millis(100));
            };
            stop.store(true, Ordering::Relaxed);
            for (d, p) in &unblock {
                let _ = d.shutdown(Shutdown::Both);
                let _ = p.shutdown(Shutdown::Both);
            }
            let mut out = Vec::new();
            for w in watchers {
                out.push(
                    w.join().map_err(|_| RunError::panicked("a connection thread", "panicked"))?,
                );
            }
            if interrupted {
                return Err(RunError::Interrupted);
            }
            Ok((out, outage))
        })?;
        let (detections, outage) = detections;
        let mut per_case: Vec<Vec<Measurement>> = self.cases.iter().map(|_| Vec::new()).collect();
        for (case_index, d) in detections {
            let case = &self.cases[case_index];
            let d = d.map_err(|e| RunError::io("a connection before the blackhole", e))?;
            // (An in-flight connection's reference is the order the blackhole swallowed.)
            if !case.inflight && d.reference >= outage {
                return Err(RunError::failed(
                    "set up the connections",
                    format!(
                        "a connection's last exchange came after the blackhole at {:.1} s: \
                         move the event later",
                        shared.blackhole_at.as_secs_f64()
                    ),
                ));
            }
            let k = case.keepalive_times(shared).map_err(|e| RunError::failed("keepalive", e))?;
            if let Some(k) = k.filter(|k| !case.inflight && d.reference + k.idle <= outage) {
                return Err(RunError::failed(
                    "place the blackhole",
                    format!(
                        "the first keepalive probe ({} s after the last exchange) went out before \
                         the blackhole at {:.1} s and was answered: make the idle time longer \
                         than the blackhole's time",
                        k.idle.as_secs(),
                        shared.blackhole_at.as_secs_f64()
                    ),
                ));
            }
            let r2 = case.retries2(shared).map_err(|e| RunError::failed("tcp_retries2", e))?;
            if case.inflight && d.first_rto.is_none() {
                return Err(RunError::failed(
                    "an in-flight connection",
                    "no retransmission timeout was seen before the error",
                ));
            }
            let (at, timers) = expected(k, case.user_timeout, d.first_rto, r2);
            let slack: Duration =
                timers.iter().map(|&t| timer_granularity(t, tick)).sum::<Duration>() + WAKE_MARGIN;
            let mut m = Measurement { lateness, ..Measurement::default() };
            m.metric("expected_s", at.as_secs_f64())
                .metric("floor_s", at.saturating_sub(EARLY_MARGIN).as_secs_f64())
                .metric("bound_s", (at + slack).as_secs_f64());
            if let Some(u) = case.keepalive_unscaled {
                m.metric("expected_unscaled_s", expected(Some(u), None, None, 0).0.as_secs_f64());
            }
            if let Some(n) = case.retries2_unscaled {
                m.metric(
                    "expected_unscaled_s",
                    expected(None, None, d.first_rto, n).0.as_secs_f64(),
                );
            }
            match d.error {
                Some((when, e)) => {
                    m.metric("detect_s", when.saturating_duration_since(d.reference).as_secs_f64())
                        .metric(
                            "after_outage_s",
                            when.saturating_duration_since(outage).as_secs_f64(),
                        );
                    m.notes.push(format!("the application saw: {e}"));
                }
                None => m.notes.push(format!(
                    "not detected within {:.0} s of the blackhole",
                    deadline_after.as_secs_f64()
                )),
            }
            per_case[case_index].push(m);
        }
        Ok(per_case)
    }
}

#[cfg(test)]
mod tests;
