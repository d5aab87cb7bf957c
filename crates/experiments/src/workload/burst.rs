//! The `order-bursts` workload: bursts of small orders on one connection through a shared
//! bottleneck, beside bulk flows, with every order's latency and the BBR phase of its own
//! socket and of the bulk flow at the moment it was sent (seed 000 failure mode 1: "P99 fill
//! latency has a bimodal distribution. The slow tail cluster is consistently 1.5-2x your
//! P50 ... BBR's PROBE_BW phase fires during your burst").
//!
//! A round builds the path, starts `bulk_flows` bulk flows client → server with `bulk_cc`
//! and lets them run for [`COMPETING_LEAD`] (past STARTUP and DRAIN), then opens the order
//! connection with `cc` and TCP_NODELAY at both ends. Every `burst_interval` the client
//! writes `burst` orders of `size` bytes back to back (one `write` each); the server answers
//! each with a fill of the same size at once. An order's latency runs from just before its
//! `write` to its fill's last byte read by the client (one process, one monotonic clock).
//! Just before each write the client reads `TCP_CC_INFO` of the order socket and of bulk flow
//! 0 (both always, so CUBIC variants pay the same cost): BBR's pacing gain gives the phase
//! (1.25 = PROBE_BW up). Orders sent during `warmup` are not measured.
//!
//! | key | values | default |
//! |---|---|---|
//! | `cc` | the order connection's congestion control: `cubic`, `bbr`, `reno` | `cubic` |
//! | `bulk_cc` | the bulk flows' | `cc` |
//! | `bulk_flows` | bulk flows beside the orders (0..=8) | 1 |
//! | `burst`, `burst_interval` | orders per burst, time between bursts | 16, `10ms` |
//! | `size` | bytes per order and per fill | `64B` |
//! | `duration`, `warmup` | measured part, unmeasured start | `2500ms`, `300ms` |
//! | `resamples` | bootstrap draws of the unimodality test | 200 |
//! | `order_tos` | the order connection's TOS byte (`IP_TOS`, from its SYN), 0 for none | 0 |
//! | `htb_latency`, `htb_bulk`, `htb_borrow` | per-tenant htb classes instead of the `tbf` FIFO ([`TenantClasses`]) | none |
//! | path keys | `path` (`emulated` or `tbf`), `rate`, `rtt`, `buffer`, ... | required |
//!
//! The same engine runs `tenant-isolation` (seed 002's per-tenant classes): the orders are the
//! latency-sensitive tenant, the bulk flows the bursty one, on a `tbf` router path whose single
//! FIFO `htb_latency`/`htb_bulk` replace with one htb class per tenant (the latency tenant
//! found by its TOS byte, the rest in the bulk tenant's default class).
//!
//! Metrics: `p50_us`, `p99_us`, `p999_us`, `max_us`, `orders_count`; `unimodal_p` (Silverman's
//! test on the log latencies, [`tcptail_units::stats::modality`]: small = more than one mode);
//! `slow_ratio` (the median of the slow cluster, the orders above the antimode of the two main
//! modes, over the round's p50), `slow_share_pct`, `antimode_us` (not measurable when the
//! density has one mode even at its two-mode bandwidth); `bulk_mbps` with bulk flows;
//! `slow_own_up_pct` / `all_own_up_pct` with a BBR order socket and `slow_bulk_up_pct` /
//! `all_bulk_up_pct` with a BBR bulk flow: the share of the slow orders (the slow cluster,
//! or above the p99 without one) and of all orders sent in PROBE_BW up. Series: `latency_us`
//! (CDF), `latency_t_us` (every order over time) and `bulk_gain` (bulk flow 0's pacing gain at
//! each order's send).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tcptail_report::Series;
use tcptail_sock::{BbrInfo, BbrPhase};
use tcptail_units::BitRate;
use tcptail_units::stats::modality;

use crate::params::{ParamError, Params};
use crate::path::{LivePath, PathPlan, PathShape};
use crate::round::{Measurement, RoundContext, RunError};
use crate::workload::flows::{self, BulkFlows, percentile};
use crate::workload::rr::round::COMPETING_LEAD;
use crate::workload::{VariantPlan, Workload};

/// The `order-bursts` engine.
pub struct OrderBursts;

/// A checked `order-bursts` variant.
#[derive(Debug, Clone)]
struct Plan {
    path: PathPlan,
    cc: String,
    bulk_cc: String,
    bulk_flows: usize,
    burst: usize,
    interval: Duration,
    size: usize,
    duration: Duration,
    warmup: Duration,
    resamples: usize,
    order_tos: u8,
    classes: Option<TenantClasses>,
}

/// Per-tenant htb classes on the router's bottleneck, replacing its single `tbf` FIFO: the
/// order (latency) tenant's traffic, marked with TOS `order_tos` from its SYN on, in one
/// class, everything else (the bulk tenant) in the default class, each class with its own
/// byte FIFO of the path's buffer size.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TenantClasses {
    /// The link: the htb root class's rate (the path's `rate`).
    pub link: BitRate,
    /// The latency tenant's class rate.
    pub latency: BitRate,
    /// The bulk tenant's class rate.
    pub bulk: BitRate,
    /// Whether a class may borrow up to the link rate (`ceil`) or is capped at its rate.
    pub borrow: bool,
    /// Each class's FIFO, bytes.
    pub buffer_bytes: u64,
    /// The latency tenant's TOS byte, which the filter matches.
    pub order_tos: u8,
}

impl TenantClasses {
    /// The `tc` command lines, each as its arguments, for device `dev`.
    pub fn commands(&self, dev: &str) -> Vec<Vec<String>> {
        let bits = |r: BitRate| format!("{}bit", r.0);
        let ceil = |r: BitRate| if self.borrow { bits(self.link) } else { bits(r) };
        // Bursts fit one 64 KB GSO packet, as the tbf path's do.
        let burst = (self.link.bytes_per_second() / 1000).max(64 * 1024).to_string();
        let line = |text: String| text.split_whitespace().map(str::to_owned).collect();
        vec![
            line(format!("qdisc replace dev {dev} root handle 1: htb default 20")),
            line(format!(
                "class add dev {dev} parent 1: classid 1:1 htb rate {l} ceil {l} burst {burst} \
                 cburst {burst}",
                l = bits(self.link)
            )),
            line(format!(
                "class add dev {dev} parent 1:1 classid 1:10 htb rate {} ceil {} burst {burst} \
                 cburst {burst}",
                bits(self.latency),
                ceil(self.latency)
            )),
            line(format!(
                "class add dev {dev} parent 1:1 classid 1:20 htb rate {} ceil {} burst {burst} \
                 cburst {burst}",
                bits(self.bulk),
                ceil(self.bulk)
            )),
            line(format!(
                "qdisc add dev {dev} parent 1:10 handle 10: bfifo limit {}",
                self.buffer_bytes
            )),
            line(format!(
                "qdisc add dev {dev} parent 1:20 handle 20: bfifo limit {}",
                self.buffer_bytes
            )),
            line(format!(
                "filter add dev {dev} parent 1: protocol ip prio 1 u32 match ip tos {:#04x} 0xfc \
                 flowid 1:10",
                self.order_tos
            )),
        ]
    }

    /// Installs the classes on the router's bottleneck of `live` (a `tbf` path).
    fn install(&self, live: &LivePath) -> Result<(), RunError> {
        let router = live.router().ok_or_else(|| {
            RunError::failed("htb tenant classes", "the path has no router (use path = \"tbf\")")
        })?;
        for args in self.commands(tcptail_netns::addr::ROUTER_SERVER_IF) {
            let out = router
                .command("tc")
                .args(&args)
                .output()
                .map_err(|e| RunError::io("run tc in the router namespace", e))?;
            if !out.status.success() {
                return Err(RunError::failed(
                    format!("tc {}", args.join(" ")),
                    String::from_utf8_lossy(&out.stderr).trim(),
                ));
            }
        }
        Ok(())
    }

    fn describe(&self) -> String {
        let mbit = |r: BitRate| r.0 as f64 / 1e6;
        format!(
            "htb on the router: link {:.0} Mbit/s, latency tenant (TOS {:#04x}) {:.0} Mbit/s, \
             bulk tenant (the default class) {:.0} Mbit/s, {}, {} KB FIFO per class",
            mbit(self.link),
            self.order_tos,
            mbit(self.latency),
            mbit(self.bulk),
            if self.borrow { "each may borrow up to the link" } else { "each capped at its rate" },
            self.buffer_bytes / 1024
        )
    }
}

impl Workload for OrderBursts {
    fn name(&self) -> &'static str {
        "order-bursts"
    }

    fn plan(&self, params: &Params) -> Result<Box<dyn VariantPlan>, ParamError> {
        let path = PathPlan::from_params(params)?;
        if matches!(path.kind, PathShape::Veth) {
            return Err(ParamError::new(
                "path",
                "a burst needs a shared bottleneck: path = \"emulated\" or \"tbf\"",
            ));
        }
        let cc = flows::cc_param(params)?;
        let bulk_cc = params.choice("bulk_cc", flows::CCS)?.unwrap_or_else(|| cc.clone());
        let bulk_flows = params.uint("bulk_flows", 8)?.unwrap_or(1) as usize;
        let burst = params.uint("burst", 1000)?.unwrap_or(16) as usize;
        if burst == 0 {
            return Err(ParamError::new("burst", "at least one order per burst"));
        }
        let interval = params.duration("burst_interval")?.unwrap_or(Duration::from_millis(10));
        if interval < Duration::from_micros(100) {
            return Err(ParamError::new("burst_interval", "at least 100us"));
        }
        let size = params.bytes("size")?.unwrap_or(64);
        if !(8..=1400).contains(&size) {
            return Err(ParamError::new("size", "between 8B and 1400B (one segment)"));
        }
        let (duration, warmup) = crate::workload::rr::durations(
            params,
            Duration::from_millis(2500),
            Duration::from_millis(300),
        )?;
        let resamples = params.uint("resamples", 10_000)?.unwrap_or(200) as usize;
        if resamples < 20 {
            return Err(ParamError::new("resamples", "at least 20"));
        }
        let order_tos = params.uint("order_tos", 255)?.unwrap_or(0) as u8;
        let classes = tenant_classes(params, &path, order_tos)?;
        Ok(Box::new(Plan {
            path,
            cc,
            bulk_cc,
            bulk_flows,
            burst,
            interval,
            size: size as usize,
            duration,
            warmup,
            resamples,
            order_tos,
            classes,
        }))
    }
}

/// Reads `htb_latency`, `htb_bulk` and `htb_borrow`: per-tenant classes on a `tbf` path.
fn tenant_classes(
    params: &Params,
    path: &PathPlan,
    order_tos: u8,
) -> Result<Option<TenantClasses>, ParamError> {
    let latency = params.rate("htb_latency")?;
    let bulk = params.rate("htb_bulk")?;
    let borrow = params.bool("htb_borrow")?;
    let (latency, bulk) = match (latency, bulk) {
        (None, None) => {
            if borrow.is_some() {
                return Err(ParamError::new("htb_borrow", "only with htb_latency and htb_bulk"));
            }
            return Ok(None);
        }
        (Some(l), Some(b)) => (l, b),
        (None, Some(_)) => return Err(ParamError::new("htb_latency", "give both tenants' rates")),
        (Some(_), None) => return Err(ParamError::new("htb_bulk", "give both tenants' rates")),
    };
    let PathShape::Tbf { rate, buffer_bytes } = path.kind else {
        return Err(ParamError::new(
            "htb_latency",
            "tenant classes replace a router's tbf: use path = \"tbf\"",
        ));
    };
    if latency.0 + bulk.0 > rate.0 {
        return Err(ParamError::new(
            "htb_bulk",
            "the two tenants' rates add up to more than the path's rate",
        ));
    }
    if order_tos == 0 {
        return Err(ParamError::new(
            "order_tos",
            "the filter finds the latency tenant by its TOS byte: set order_tos (e.g. 184, EF)",
        ));
    }
    Ok(Some(TenantClasses {
        link: rate,
        latency,
        bulk,
        borrow: borrow.unwrap_or(false),
        buffer_bytes,
        order_tos,
    }))
}

/// One order: when it was sent (from the start of sending), its latency, and the BBR state of
/// the order socket and of bulk flow 0 just before its write.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Order {
    /// Seconds since the first order.
    pub t: f64,
    /// Send to fill, µs.
    pub latency_us: f64,
    /// The order socket's BBR state (BBR only).
    pub own: Option<BbrInfo>,
    /// Bulk flow 0's BBR state (BBR only).
    pub bulk: Option<BbrInfo>,
}

impl VariantPlan for Plan {
    fn metrics(&self) -> Vec<String> {
        let mut names: Vec<String> = [
            "p50_us",
            "p99_us",
            "p999_us",
            "max_us",
            "orders_count",
            "unimodal_p",
            "slow_ratio",
            "slow_share_pct",
            "antimode_us",
        ]
        .map(str::to_owned)
        .to_vec();
        if self.bulk_flows > 0 {
            names.push("bulk_mbps".into());
        }
        if self.cc == "bbr" {
            names.extend(["slow_own_up_pct", "all_own_up_pct"].map(str::to_owned));
        }
        if self.bulk_flows > 0 && self.bulk_cc == "bbr" {
            names.extend(["slow_bulk_up_pct", "all_bulk_up_pct"].map(str::to_owned));
        }
        names
    }

    fn run(&self, ctx: &RoundContext<'_>) -> Result<Measurement, RunError> {
        // The machine's load at the start, for reading the round's timing (the vCPUs are
        // shared; nothing here is pinned).
        let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
        let ((orders, bulk_mbps), lateness) =
            self.path.round(ctx, |live| self.run_on(live, ctx))?;
        let mut m = summarise(&orders, self.resamples);
        m.lateness = lateness;
        if let Some(mbps) = bulk_mbps {
            m.metric("bulk_mbps", mbps);
        }
        m.notes.push(format!(
            "{} orders measured; order socket {}, {} bulk flow(s) {}; threads not pinned, load \
             average at the round's start {}",
            orders.len(),
            self.cc,
            self.bulk_flows,
            self.bulk_cc,
            load.split_whitespace().take(3).collect::<Vec<_>>().join(" ")
        ));
        Ok(m)
    }

    fn planned(&self) -> Duration {
        let lead = if self.bulk_flows > 0 { COMPETING_LEAD } else { Duration::ZERO };
        lead + self.warmup + self.duration
    }

    fn describe(&self) -> String {
        let path = match &self.classes {
            Some(c) => c.describe(),
            None => self.path.describe(),
        };
        let tos = match self.order_tos {
            0 => String::new(),
            t => format!(" (TOS {t:#04x})"),
        };
        format!(
            "{path}; bursts of {} x {} B orders every {:.1} ms on one {} connection{tos} ({:.0} \
             orders/s); {} {} bulk flow(s) beside",
            self.burst,
            self.size,
            self.interval.as_secs_f64() * 1e3,
            self.cc,
            self.burst as f64 / self.interval.as_secs_f64(),
            self.bulk_flows,
            self.bulk_cc
        )
    }
}

impl Plan {
    /// Runs the bursts on `live`; the measured orders and the bulk flows' goodput over them.
    fn run_on(
        &self,
        live: &LivePath,
        ctx: &RoundContext<'_>,
    ) -> Result<(Vec<Order>, Option<f64>), RunError> {
        if let Some(classes) = &self.classes {
            classes.install(live)?;
        }
        let bulk = match self.bulk_flows {
            0 => None,
            n => {
                let flows = BulkFlows::start(live, n, Some(&self.bulk_cc), None)?;
                std::thread::sleep(COMPETING_LEAD);
                Some(flows)
            }
        };
        let listener = flows::listen(live)?;
        let (client, server) =
            flows::connect_marked(live, &listener, Some(&self.cc), true, self.order_tos)?;
        let reader = client.try_clone().map_err(|e| RunError::io("clone the order socket", e))?;
        let stop = AtomicBool::new(false);
        let total = self.warmup + self.duration;
        let bursts = (total.as_secs_f64() / self.interval.as_secs_f64()).ceil() as usize;
        let expected = bursts * self.burst;
        let mark = bulk.as_ref().map(|b| (Instant::now(), b.received()));
        let outcome = std::thread::scope(|s| {
            let echo = s.spawn(|| echo(server, self.size, &stop));
            let fills = s.spawn(|| read_fills(reader, self.size, expected, &stop));
            let sent = self.send(&client, bulk.as_ref(), bursts, ctx);
            // Every fill, or a second past the last order.
            let deadline = Instant::now() + Duration::from_secs(1);
            while !fills.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(5));
            }
            stop.store(true, Ordering::Relaxed);
            let _ = client.shutdown(std::net::Shutdown::Both);
            let fills = fills.join();
            let echoed = echo.join();
            (sent, fills, echoed)
        });
        let bulk_mbps = match (bulk, mark) {
            (Some(b), Some((since, bytes))) => {
                let delta = b.received().saturating_sub(bytes);
                let mbps = delta as f64 * 8.0 / since.elapsed().as_secs_f64() / 1e6;
                b.stop()?;
                Some(mbps)
            }
            _ => None,
        };
        let (sent, fills, echoed) = outcome;
        let sent = sent?;
        let fills = fills.map_err(|_| RunError::panicked("order fills", "thread panicked"))?;
        if let Ok(Some(e)) = echoed {
            return Err(RunError::failed("order server", e));
        }
        if (ctx.stop_requested)() {
            return Err(RunError::Interrupted);
        }
        let warmup = self.warmup.as_secs_f64();
        let orders: Vec<Order> = sent
            .iter()
            .zip(&fills)
            .filter(|(o, _)| o.t >= warmup)
            .map(|(o, filled)| Order {
                latency_us: filled.duration_since(o.at).as_secs_f64() * 1e6,
                t: o.t,
                own: o.own,
                bulk: o.bulk,
            })
            .collect();
        if orders.is_empty() {
            return Err(RunError::NothingCompleted {
                what: "order-bursts round",
                detail: "no order was filled after the warm-up",
            });
        }
        Ok((orders, bulk_mbps))
    }

    /// Sends every burst on schedule; each order's send time and BBR states.
    fn send(
        &self,
        client: &TcpStream,
        bulk: Option<&BulkFlows>,
        bursts: usize,
        ctx: &RoundContext<'_>,
    ) -> Result<Vec<Sent>, RunError> {
        let mut out = Vec::with_capacity(bursts * self.burst);
        let order = vec![0x4f_u8; self.size];
        let bulk_fd = bulk.and_then(|b| b.senders().first());
        let read = |s: &TcpStream| tcptail_sock::sys::info::bbr_info(s.as_fd()).ok().flatten();
        let start = Instant::now();
        let mut writer = client;
        for k in 0..bursts {
            let due = self.interval * k as u32;
            let now = start.elapsed();
            if due > now {
                std::thread::sleep(due - now);
            }
            if (ctx.stop_requested)() {
                return Err(RunError::Interrupted);
            }
            for _ in 0..self.burst {
                let own = read(client);
                let bulk = bulk_fd.and_then(read);
                let at = Instant::now();
                writer.write_all(&order).map_err(|e| RunError::io("send an order", e))?;
                out.push(Sent { t: at.duration_since(start).as_secs_f64(), at, own, bulk });
            }
            (ctx.progress)((k + 1) as f64 / bursts as f64);
        }
        Ok(out)
    }
}

/// An order as sent.
struct Sent {
    t: f64,
    at: Instant,
    own: Option<BbrInfo>,
    bulk: Option<BbrInfo>,
}

/// The server's side: a fill for every order, at once.
fn echo(mut s: TcpStream, size: usize, stop: &AtomicBool) -> Option<String> {
    let mut buf = vec![0u8; size];
    loop {
        match s.read_exact(&mut buf) {
            Ok(()) => {
                if let Err(e) = s.write_all(&buf) {
                    return (!stop.load(Ordering::Relaxed)).then(|| format!("write a fill: {e}"));
                }
            }
            Err(_) => return None, // the client closed: the round is over
        }
    }
}

/// The client's side: when each fill arrived, in order, until `expected` or the stop.
fn read_fills(mut s: TcpStream, size: usize, expected: usize, stop: &AtomicBool) -> Vec<Instant> {
    let mut buf = vec![0u8; size];
    let mut out = Vec::with_capacity(expected);
    while out.len() < expected && !stop.load(Ordering::Relaxed) {
        if s.read_exact(&mut buf).is_err() {
            break;
        }
        out.push(Instant::now());
    }
    out
}

/// Metrics, series and notes of a round's measured orders.
pub fn summarise(orders: &[Order], resamples: usize) -> Measurement {
    let mut m = Measurement::default();
    let mut lat: Vec<f64> = orders.iter().map(|o| o.latency_us).collect();
    lat.sort_by(f64::total_cmp);
    let n = lat.len();
    let p50 = percentile(&lat, 0.5);
    m.percentile("p50_us", 0.5, n, p50)
        .percentile("p99_us", 0.99, n, percentile(&lat, 0.99))
        .percentile("p999_us", 0.999, n, percentile(&lat, 0.999))
        .metric("max_us", lat.last().copied().unwrap_or(f64::NAN))
        .metric("orders_count", n as f64);
    let logs: Vec<f64> = lat.iter().map(|x| x.max(1e-3).ln()).collect();
    match modality::silverman_test(&logs, resamples) {
        Some(t) => {
            m.metric("unimodal_p", t.p_unimodal);
        }
        None => {
            m.not_measurable
                .insert("unimodal_p".into(), format!("not measurable: {n} orders without spread"));
        }
    }
    let clusters = modality::two_clusters(&logs).filter(|c| c.upper_share < 1.0);
    let slow_above = match clusters {
        Some(c) => {
            let antimode = c.antimode.exp();
            m.metric("slow_ratio", c.upper_median.exp() / p50)
                .metric("slow_share_pct", 100.0 * c.upper_share)
                .metric("antimode_us", antimode);
            m.notes.push(format!(
                "two main modes at {:.0} and {:.0} µs, split at {antimode:.0} µs: {:.1} % of the \
                 orders above it",
                c.modes[0].exp(),
                c.modes[1].exp(),
                100.0 * c.upper_share
            ));
            antimode
        }
        None => {
            for name in ["slow_ratio", "slow_share_pct", "antimode_us"] {
                m.not_measurable.insert(
                    name.into(),
                    "not measurable: the latency density has a single mode".into(),
                );
            }
            percentile(&lat, 0.99)
        }
    };
    let up = |b: &Option<BbrInfo>| b.is_some_and(|b| b.phase() == BbrPhase::ProbeBwUp);
    let share = |set: &[&Order], pick: &dyn Fn(&Order) -> bool| {
        if set.is_empty() {
            0.0
        } else {
            100.0 * set.iter().filter(|o| pick(o)).count() as f64 / set.len() as f64
        }
    };
    let all: Vec<&Order> = orders.iter().collect();
    let slow: Vec<&Order> = orders.iter().filter(|o| o.latency_us > slow_above).collect();
    let phases: Vec<BbrPhase> = orders.iter().filter_map(|o| o.own.map(|b| b.phase())).collect();
    if !phases.is_empty() {
        let mut seen: Vec<(BbrPhase, usize)> = Vec::new();
        for p in &phases {
            match seen.iter_mut().find(|(q, _)| q == p) {
                Some((_, n)) => *n += 1,
                None => seen.push((*p, 1)),
            }
        }
        seen.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
        let text: Vec<String> = seen
            .iter()
            .map(|(p, n)| {
                format!("{} {:.1} %", p.as_str(), 100.0 * *n as f64 / phases.len() as f64)
            })
            .collect();
        m.notes.push(format!("the order socket's BBR phase at send: {}", text.join(", ")));
    }
    if orders.iter().any(|o| o.own.is_some()) {
        m.metric("slow_own_up_pct", share(&slow, &|o| up(&o.own)))
            .metric("all_own_up_pct", share(&all, &|o| up(&o.own)));
    }
    if orders.iter().any(|o| o.bulk.is_some()) {
        m.metric("slow_bulk_up_pct", share(&slow, &|o| up(&o.bulk)))
            .metric("all_bulk_up_pct", share(&all, &|o| up(&o.bulk)));
        m.series.push(Series::time(
            "bulk_gain",
            orders.iter().filter_map(|o| o.bulk.map(|b| [o.t, b.pacing_gain_ratio()])).collect(),
        ));
    }
    m.series
        .push(Series::time("latency_t_us", orders.iter().map(|o| [o.t, o.latency_us]).collect()));
    m.series.push(Series::cdf("latency_us", &mut lat));
    m
}

#[cfg(test)]
mod tests;
