//! The `sysctl-claim` workload: one claimed effect of a TCP sysctl checked on a workload that
//! can show it (seed 002's tuning table, seed 000's sysctl file). The sysctl itself is the
//! variant's `sysctl` key, written in the lab's namespaces only.
//!
//! | `claim =` | workload | metrics |
//! |---|---|---|
//! | `"frto"` | one bulk flow through an emulated path with a little loss and a delay spike (path events): a retransmission timeout fires during the spike although nothing was lost | `spurious_rtos` (`TcpExtTCPSpuriousRTOs`, F-RTO's undos), `loss_undos` (`TcpExtTCPLossUndo`, every undo of a timeout's recovery), `fast_recoveries` (`TcpExtTCPSackRecovery` + `TcpExtTCPRenoRecovery`), `timeouts` (`TcpExtTCPTimeouts`), `retrans_pct` |
//! | `"metrics"` | a bulk flow through a loss burst (path event) that cuts its ssthresh, closed; then a new connection to the same server | `next_ssthresh_cached` (1 when the new connection starts with a finite ssthresh, i.e. the closed one's), `next_ssthresh_segs` (0 when not cached), `lossy_ssthresh_segs` |
//! | `"fin_timeout"` | `connections` connections closed by the client while the server keeps its end open (orphans in FIN_WAIT2), and as many closed by both (TIME_WAIT); counted just after and once `net.ipv4.tcp_fin_timeout` (at most 30 s here) has passed | `finwait2_early`, `finwait2_after`, `timewait_early`, `timewait_after`, `fin_timeout_s` |
//! | `"timewait"` | `connections` short connections, each closed by the client first (the client holds TIME_WAIT) | `timewait_count` (client sockets in TIME_WAIT 200 ms after the last close), `tw_overflow` (`TcpExtTCPTimeWaitOverflow`) |
//!
//! Other keys: `connections` (timewait, default 64), `duration` (frto and the lossy flow of
//! metrics, default 4s), `cc` (default `cubic`), and the path keys (`path`, `rate`, `rtt`,
//! `loss`, `event`, `sysctl`).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::params::{ParamError, Params};
use crate::path::{LivePath, PathPlan, PathShape};
use crate::round::{Measurement, RoundContext, RunError};
use crate::workload::flows;
use crate::workload::{VariantPlan, Workload};

/// The `sysctl-claim` engine.
pub struct SysctlClaim;

/// What the variant checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Claim {
    Frto,
    Metrics,
    Timewait,
    FinTimeout,
}

#[derive(Debug)]
struct Plan {
    path: PathPlan,
    claim: Claim,
    cc: String,
    connections: usize,
    duration: Duration,
}

/// `tcpi_snd_ssthresh` of a connection that has none yet (`TCP_INFINITE_SSTHRESH`).
const INFINITE_SSTHRESH: u32 = 0x7fff_ffff;

impl Workload for SysctlClaim {
    fn name(&self) -> &'static str {
        "sysctl-claim"
    }

    fn plan(&self, params: &Params) -> Result<Box<dyn VariantPlan>, ParamError> {
        let claims = ["frto", "metrics", "timewait", "fin_timeout"];
        let claim = match params.choice("claim", &claims)?.as_deref() {
            Some("frto") => Claim::Frto,
            Some("metrics") => Claim::Metrics,
            Some("timewait") => Claim::Timewait,
            Some("fin_timeout") => Claim::FinTimeout,
            _ => {
                return Err(ParamError::new(
                    "claim",
                    "required: frto, metrics, timewait or fin_timeout",
                ));
            }
        };
        let cc = flows::cc_param(params)?;
        let connections = params.uint("connections", 4096)?.unwrap_or(64) as usize;
        if connections == 0 {
            return Err(ParamError::new("connections", "at least one"));
        }
        let duration = params.duration("duration")?.unwrap_or(Duration::from_secs(4));
        if duration < Duration::from_millis(500) || duration > Duration::from_secs(120) {
            return Err(ParamError::new("duration", "between 500ms and 2min"));
        }
        let path = PathPlan::from_params(params)?;
        let emulated = matches!(path.kind, PathShape::Emulated(_));
        if matches!(claim, Claim::Frto | Claim::Metrics) && !emulated {
            return Err(ParamError::new(
                "path",
                "the frto and metrics claims need path = \"emulated\" (loss and events)",
            ));
        }
        if claim == Claim::FinTimeout {
            let fin = fin_timeout(&path).map_err(|e| ParamError::new("sysctl", e))?;
            if fin > Duration::from_secs(30) {
                return Err(ParamError::new(
                    "sysctl",
                    "net.ipv4.tcp_fin_timeout at most 30 s here: the round waits it out",
                ));
            }
        }
        Ok(Box::new(Plan { path, claim, cc, connections, duration }))
    }
}

/// Sends as fast as the path lets until `stop`.
fn sender(mut s: TcpStream, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let chunk = vec![0xa5u8; 64 * 1024];
        while !stop.load(Ordering::Relaxed) && s.write_all(&chunk).is_ok() {}
    })
}

/// Reads until the connection ends.
fn drain(mut s: TcpStream) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        while matches!(s.read(&mut buf), Ok(n) if n > 0) {}
    })
}

/// One bulk flow for `duration`; returns the sender's last `tcp_info`.
fn bulk(
    live: &LivePath,
    listener: &std::net::TcpListener,
    cc: &str,
    duration: Duration,
    ctx: &RoundContext<'_>,
) -> Result<tcptail_sock::TcpInfo, RunError> {
    let (client, server) = flows::connect(live, listener, Some(cc), false)?;
    let stop = Arc::new(AtomicBool::new(false));
    let w = sender(client.try_clone().map_err(|e| RunError::io("clone", e))?, Arc::clone(&stop));
    let r = drain(server.try_clone().map_err(|e| RunError::io("clone", e))?);
    let start = Instant::now();
    while start.elapsed() < duration {
        if (ctx.stop_requested)() {
            break;
        }
        (ctx.progress)(start.elapsed().as_secs_f64() / duration.as_secs_f64());
        std::thread::sleep(Duration::from_millis(20));
    }
    let info = flows::tcp_info(&client);
    // A graceful close, so the client's metrics are saved (a reset would skip that): stop
    // writing, send the FIN, let the receiver read everything up to it, then close both.
    stop.store(true, Ordering::Relaxed);
    let _ = w.join();
    let _ = client.shutdown(Shutdown::Write);
    let _ = r.join();
    drop(server);
    drop(client);
    if (ctx.stop_requested)() {
        return Err(RunError::Interrupted);
    }
    info
}

/// Client sockets in `state` (`/proc/net/tcp`'s hex code: 05 FIN_WAIT2, 06 TIME_WAIT), in
/// the client namespace.
fn state_count(live: &LivePath, state: &str) -> Result<usize, RunError> {
    let text = live
        .client()
        .run(|| std::fs::read_to_string("/proc/thread-self/net/tcp"))?
        .map_err(|e| RunError::io("read /proc/net/tcp", e))?;
    Ok(text.lines().skip(1).filter(|l| l.split_whitespace().nth(3) == Some(state)).count())
}

/// Client sockets in TIME_WAIT.
fn timewait_count(live: &LivePath) -> Result<usize, RunError> {
    state_count(live, "06")
}

/// `net.ipv4.tcp_fin_timeout` as the variant sets it (the kernel's 60 s otherwise).
fn fin_timeout(path: &PathPlan) -> Result<Duration, String> {
    match path.sysctls.get("net.ipv4.tcp_fin_timeout") {
        None => Ok(Duration::from_secs(60)),
        Some(v) => v
            .trim()
            .parse()
            .map(Duration::from_secs)
            .map_err(|_| format!("net.ipv4.tcp_fin_timeout = '{v}': whole seconds")),
    }
}

impl Plan {
    fn frto(&self, live: &LivePath, ctx: &RoundContext<'_>) -> Result<Measurement, RunError> {
        let listener = flows::listen(live)?;
        let before = live.client().nstat()?;
        let info = bulk(live, &listener, &self.cc, self.duration, ctx)?;
        let d = live.client().nstat()?.since(&before);
        let get = |k: &str| d.get(k).unwrap_or(0) as f64;
        let mut m = Measurement::default();
        m.metric("spurious_rtos", get("TcpExtTCPSpuriousRTOs"))
            .metric("fast_recoveries", get("TcpExtTCPSackRecovery") + get("TcpExtTCPRenoRecovery"))
            .metric("timeouts", get("TcpExtTCPTimeouts"))
            .metric("loss_undos", get("TcpExtTCPLossUndo"));
        let out = get("TcpOutSegs").max(1.0);
        m.metric("retrans_pct", 100.0 * get("TcpRetransSegs") / out);
        m.notes.push(format!("sender's last tcpi_total_retrans {}", info.total_retrans_segs));
        Ok(m)
    }

    fn metrics(&self, live: &LivePath, ctx: &RoundContext<'_>) -> Result<Measurement, RunError> {
        let listener = flows::listen(live)?;
        let lossy = bulk(live, &listener, &self.cc, self.duration, ctx)?;
        // The closed connection's metrics are written when it ends; give the FINs an RTT.
        std::thread::sleep(self.path.rtt() * 4 + Duration::from_millis(100));
        let (client, _server) = flows::connect(live, &listener, Some(&self.cc), false)?;
        let next = flows::tcp_info(&client)?;
        let mut m = Measurement::default();
        let cached = next.snd_ssthresh_segs < INFINITE_SSTHRESH;
        m.metric("lossy_ssthresh_segs", f64::from(lossy.snd_ssthresh_segs.min(INFINITE_SSTHRESH)))
            .metric("next_ssthresh_cached", if cached { 1.0 } else { 0.0 })
            .metric(
                "next_ssthresh_segs",
                if cached { f64::from(next.snd_ssthresh_segs) } else { 0.0 },
            );
        Ok(m)
    }

    fn timewait(&self, live: &LivePath) -> Result<Measurement, RunError> {
        let listener = flows::listen(live)?;
        let before = live.client().nstat()?;
        for _ in 0..self.connections {
            let (client, mut server) = flows::connect(live, &listener, None, true)?;
            // The client closes first: its socket goes to TIME_WAIT once the server's FIN
            // arrives.
            drop(client);
            let mut buf = [0u8; 16];
            let _ = server.read(&mut buf);
            drop(server);
        }
        std::thread::sleep(Duration::from_millis(200));
        let d = live.client().nstat()?.since(&before);
        let mut m = Measurement::default();
        m.metric("timewait_count", timewait_count(live)? as f64)
            .metric("tw_overflow", d.get("TcpExtTCPTimeWaitOverflow").unwrap_or(0) as f64);
        Ok(m)
    }
}

impl Plan {
    /// `connections` orphaned by the client while the server keeps its end open (FIN_WAIT2,
    /// which tcp_fin_timeout limits) and as many closed by both (TIME_WAIT, which it does not):
    /// how many of each are left just after closing and once tcp_fin_timeout has passed.
    fn fin_timeout(
        &self,
        live: &LivePath,
        ctx: &RoundContext<'_>,
    ) -> Result<Measurement, RunError> {
        let wait = fin_timeout(&self.path).map_err(|e| RunError::failed("tcp_fin_timeout", e))?;
        let listener = flows::listen(live)?;
        let mut held = Vec::new();
        for _ in 0..self.connections {
            let (client, server) = flows::connect(live, &listener, None, true)?;
            drop(client);
            held.push(server);
            let (client, mut server) = flows::connect(live, &listener, None, true)?;
            drop(client);
            let mut buf = [0u8; 16];
            let _ = server.read(&mut buf);
        }
        std::thread::sleep(Duration::from_millis(300));
        let (fw_early, tw_early) = (state_count(live, "05")?, timewait_count(live)?);
        let until = Instant::now() + wait + Duration::from_millis(1500);
        while Instant::now() < until {
            if (ctx.stop_requested)() {
                return Err(RunError::Interrupted);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        let mut m = Measurement::default();
        m.metric("finwait2_early", fw_early as f64)
            .metric("finwait2_after", state_count(live, "05")? as f64)
            .metric("timewait_early", tw_early as f64)
            .metric("timewait_after", timewait_count(live)? as f64)
            .metric("fin_timeout_s", wait.as_secs_f64());
        drop(held);
        Ok(m)
    }
}

impl VariantPlan for Plan {
    fn metrics(&self) -> Vec<String> {
        let names: &[&str] = match self.claim {
            Claim::Frto => {
                &["spurious_rtos", "loss_undos", "fast_recoveries", "timeouts", "retrans_pct"]
            }
            Claim::Metrics => {
                &["lossy_ssthresh_segs", "next_ssthresh_cached", "next_ssthresh_segs"]
            }
            Claim::Timewait => &["timewait_count", "tw_overflow"],
            Claim::FinTimeout => &[
                "finwait2_early",
                "finwait2_after",
                "timewait_early",
                "timewait_after",
                "fin_timeout_s",
            ],
        };
        names.iter().map(|s| (*s).to_owned()).collect()
    }

    fn run(&self, ctx: &RoundContext<'_>) -> Result<Measurement, RunError> {
        let (m, lateness) = self.path.round(ctx, |live| match self.claim {
            Claim::Frto => self.frto(live, ctx),
            Claim::Metrics => self.metrics(live, ctx),
            Claim::Timewait => self.timewait(live),
            Claim::FinTimeout => self.fin_timeout(live, ctx),
        })?;
        Ok(Measurement { lateness, ..m })
    }

    fn planned(&self) -> Duration {
        match self.claim {
            Claim::Frto => self.duration,
            // The lossy flow, its FIN exchange, the next connection.
            Claim::Metrics => self.duration + self.path.rtt() * 6 + Duration::from_millis(100),
            Claim::Timewait => {
                self.path.rtt() * 2 * self.connections as u32 + Duration::from_millis(200)
            }
            // Connections, then tcp_fin_timeout and 1.8 s.
            Claim::FinTimeout => {
                fin_timeout(&self.path).unwrap_or(Duration::from_secs(60))
                    + Duration::from_millis(1800)
            }
        }
    }

    fn describe(&self) -> String {
        let what = match self.claim {
            Claim::Frto => {
                format!("one {} bulk flow for {:.0} s", self.cc, self.duration.as_secs_f64())
            }
            Claim::Metrics => format!(
                "a {} bulk flow for {:.0} s through a loss burst, closed, then a new connection",
                self.cc,
                self.duration.as_secs_f64()
            ),
            Claim::Timewait => {
                format!("{} connections closed by the client first", self.connections)
            }
            Claim::FinTimeout => format!(
                "{} connections orphaned in FIN_WAIT2 and {} closed into TIME_WAIT",
                self.connections, self.connections
            ),
        };
        format!("{}; {what}", self.path.describe())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{self, test_support};

    #[test]
    fn bad_parameters_are_named() {
        let err = |p: Params| workload::plan(&SysctlClaim, &p).err().expect("refused");
        assert_eq!(err(Params::from_pairs([("cc", toml::Value::from("cubic"))])).key, "claim");
        assert_eq!(err(Params::from_pairs([("claim", toml::Value::from("frto"))])).key, "path");
        let veth = |pairs: Vec<(&str, toml::Value)>| Params::from_pairs(pairs);
        assert_eq!(
            err(veth(vec![("claim", "timewait".into()), ("connections", 0.into())])).key,
            "connections"
        );
        assert!(workload::plan(&SysctlClaim, &veth(vec![("claim", "timewait".into())])).is_ok());
        let fin = |v: &str| {
            let mut t = toml::map::Map::new();
            t.insert("net.ipv4.tcp_fin_timeout".into(), v.into());
            veth(vec![("claim", "fin_timeout".into()), ("sysctl", toml::Value::Table(t))])
        };
        assert_eq!(err(fin("60")).key, "sysctl", "the round would wait a minute");
        assert_eq!(err(fin("2s")).key, "sysctl");
        assert!(workload::plan(&SysctlClaim, &fin("2")).is_ok());
        let p = test_support::emulated("10mbit", "10ms", &[("claim", "metrics".into())]);
        assert!(workload::plan(&SysctlClaim, &p).is_ok());
    }

    /// tcp_max_tw_buckets 8 in the client namespace: 32 connections closed by the client leave
    /// at most 8 in TIME_WAIT, and the overflow is counted (needs root and namespaces).
    #[test]
    fn timewait_buckets_cap_the_count() {
        let mut sysctl = toml::map::Map::new();
        sysctl.insert("net.ipv4.tcp_max_tw_buckets".into(), "8".into());
        let p = Params::from_pairs([
            ("claim", toml::Value::from("timewait")),
            ("connections", 32.into()),
            ("sysctl", toml::Value::Table(sysctl)),
        ]);
        let plan = workload::plan(&SysctlClaim, &p).unwrap();
        let m = test_support::run_once(plan.as_ref(), 3);
        assert!(m.metrics["timewait_count"] <= 8.0, "{m:?}");
        assert!(m.metrics["tw_overflow"] >= 24.0, "{m:?}");
    }
}
