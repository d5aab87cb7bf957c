//! The network path a variant runs on, from its parameters, and the live path for one round.
//!
//! | `path =` | what is built | keys |
//! |---|---|---|
//! | `"veth"` (default) | client ─veth─ server, no shaping: a datacenter path | `sysctl` |
//! | `"emulated"` | client ─TUN┄built-in emulator┄TUN─ server | `rate` (required), `rtt`, `loss`, `buffer` (default `1bdp`), `queue` (`fifo`, `codel`), `sysctl` |
//! | `"tbf"` | client ─veth─ router ─veth─ server, kernel `tbf` on the router's egress towards the server, never on the sender | `rate` (required), `buffer` (bytes, default 1 ms at `rate`, at least 64 KB), `sysctl` |
//!
//! `sysctl = { "net.ipv4.tcp_slow_start_after_idle" = "0" }` is written inside the client and
//! server namespaces (never the host's). On emulated paths the namespaces' `tcp_rmem` and
//! `tcp_wmem` maxima are first raised to fit the path, as `tcptail lab path` does; an explicit
//! `sysctl` entry for them wins.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::time::Duration;

use tcptail_emu::{BufferSize, DirectionSpec, Discipline, LossModel, PathSpec, QueueSpec};
use tcptail_lab::emulator::{EmulatorHandle, EmulatorOptions};
use tcptail_lab::path::tcp_buffers;
use tcptail_netns::addr::SERVER_ADDR;
use tcptail_netns::{Cleanup, NetSysctl, Netns, Topology};
use tcptail_report::Lateness;
use tcptail_units::{Bdp, BitRate};

use crate::params::{ParamError, Params, required};
use crate::round::{RoundContext, RunError};

/// p99 emulator lateness above which a round's results are marked.
pub const LATENESS_BOUND: Duration = Duration::from_micros(500);

/// The shape of a path.
#[derive(Debug, Clone, PartialEq)]
pub enum PathKind {
    /// A plain veth pair.
    Veth,
    /// The built-in emulator between two TUN devices.
    Emulated(Box<PathSpec>),
    /// `tbf` on a forwarding router.
    Tbf {
        /// Token rate.
        rate: BitRate,
        /// Bucket / queue size in bytes.
        buffer_bytes: u64,
    },
}

/// A checked path: what to build for each round.
#[derive(Debug, Clone, PartialEq)]
pub struct PathPlan {
    /// The shape.
    pub kind: PathKind,
    /// Sysctls for the client and server namespaces.
    pub sysctls: BTreeMap<String, String>,
}

impl PathPlan {
    /// Reads `path`, `rate`, `rtt`, `loss`, `buffer`, `queue` and `sysctl`.
    pub fn from_params(params: &Params) -> Result<PathPlan, ParamError> {
        let kind =
            params.choice("path", &["veth", "emulated", "tbf"])?.unwrap_or_else(|| "veth".into());
        let sysctls = params.string_table("sysctl")?.unwrap_or_default();
        for key in sysctls.keys() {
            if !key.starts_with("net.") {
                return Err(ParamError::new(
                    "sysctl",
                    format!("`{key}`: only net.* sysctls are per namespace"),
                ));
            }
        }
        let kind = match kind.as_str() {
            "veth" => {
                for key in ["rate", "rtt", "loss", "buffer", "queue"] {
                    if params.has(key) {
                        return Err(ParamError::new(
                            key,
                            "has no effect on path = \"veth\" (use \"emulated\" or \"tbf\")",
                        ));
                    }
                }
                PathKind::Veth
            }
            "tbf" => {
                let rate = required("rate", params.rate("rate")?)?;
                for key in ["rtt", "loss", "queue"] {
                    if params.has(key) {
                        return Err(ParamError::new(
                            key,
                            "is not supported on path = \"tbf\" (this kernel has no netem)",
                        ));
                    }
                }
                let default = (rate.bytes_per_second() / 1000).max(64 * 1024);
                let buffer_bytes = match params
                    .parsed("buffer", |s| s.parse::<BufferSize>().map_err(|e| e.to_string()))?
                {
                    None => default,
                    Some(BufferSize::Bytes(b)) => b.bytes(),
                    Some(BufferSize::Packets(n)) => n * 1500,
                    Some(BufferSize::Time(d)) => Bdp { rate, rtt: d }.bytes().bytes(),
                    Some(BufferSize::Bdp(_)) => {
                        return Err(ParamError::new(
                            "buffer",
                            "a tbf path has no RTT to size a BDP from; give bytes or a time",
                        ));
                    }
                };
                PathKind::Tbf { rate, buffer_bytes: buffer_bytes.max(1600) }
            }
            _ => {
                let rate = required("rate", params.rate("rate")?)?;
                let rtt = params.duration("rtt")?.unwrap_or(Duration::ZERO);
                let loss =
                    params.parsed("loss", |s| s.parse::<LossModel>().map_err(|e| e.to_string()))?;
                let discipline = params
                    .parsed("queue", |s| s.parse::<Discipline>().map_err(|e| e.to_string()))?
                    .unwrap_or(Discipline::Fifo);
                let bdp = Bdp { rate, rtt };
                let limit = params
                    .parsed("buffer", |s| s.parse::<BufferSize>().map_err(|e| e.to_string()))?
                    .unwrap_or(BufferSize::Bdp(1.0))
                    .limit(bdp);
                let mut dir =
                    DirectionSpec::constant(rate, rtt / 2, QueueSpec { limit, discipline });
                dir.loss = loss;
                // Loss only on the data direction (client to server): losing ACKs is a
                // different experiment.
                let mut down = dir.clone();
                down.loss = None;
                let spec = PathSpec { up: dir, down };
                spec.validate().map_err(|e| ParamError::new("path", e.to_string()))?;
                PathKind::Emulated(Box::new(spec))
            }
        };
        Ok(PathPlan { kind, sysctls })
    }

    /// Base round-trip time of the path (zero for veth and tbf).
    pub fn rtt(&self) -> Duration {
        match &self.kind {
            PathKind::Emulated(p) => p.up.delay + p.down.delay,
            _ => Duration::ZERO,
        }
    }

    /// The bottleneck rate, if there is one.
    pub fn rate(&self) -> Option<BitRate> {
        match &self.kind {
            PathKind::Veth => None,
            PathKind::Emulated(p) => Some(p.up.rate.mean()),
            PathKind::Tbf { rate, .. } => Some(*rate),
        }
    }

    /// One line for the report.
    pub fn describe(&self) -> String {
        let base = match &self.kind {
            PathKind::Veth => "veth pair (no shaping)".to_owned(),
            PathKind::Emulated(p) => format!("emulated path: {}", p.up),
            PathKind::Tbf { rate, buffer_bytes } => {
                format!(
                    "router with tbf {} Mbit/s, {} KB bucket",
                    rate.0 as f64 / 1e6,
                    buffer_bytes / 1024
                )
            }
        };
        if self.sysctls.is_empty() {
            base
        } else {
            let s: Vec<String> = self.sysctls.iter().map(|(k, v)| format!("{k}={v}")).collect();
            format!("{base}; {}", s.join(", "))
        }
    }

    /// One round on this path: unless a stop was asked for, builds the path, runs `measure`
    /// on it, and removes it whatever `measure` returned, giving back the result with the
    /// emulator's lateness (for emulated paths).
    pub fn round<T>(
        &self,
        ctx: &RoundContext<'_>,
        measure: impl FnOnce(&LivePath) -> Result<T, RunError>,
    ) -> Result<(T, Option<Lateness>), RunError> {
        if (ctx.stop_requested)() {
            return Err(RunError::Interrupted);
        }
        let live = self.build(ctx.seed)?;
        let outcome = measure(&live);
        let lateness = live.finish();
        Ok((outcome?, lateness))
    }

    /// Builds the path for one round; `seed` drives the emulator's loss draws.
    pub fn build(&self, seed: u64) -> Result<LivePath, RunError> {
        tcptail_netns::ensure_root()?;
        let cleanup = Cleanup::new();
        let builder = match &self.kind {
            PathKind::Veth => Topology::veth_pair("xc", "xs"),
            PathKind::Emulated(_) => Topology::tun_pair("xc", "xs"),
            PathKind::Tbf { .. } => Topology::routed("xc", "xr", "xs"),
        };
        let mut topo = builder.build(&cleanup)?;
        let mut emulator = None;
        match &self.kind {
            PathKind::Veth => {}
            PathKind::Emulated(spec) => {
                for ns in [topo.client(), topo.server()] {
                    let rmem = ns.sysctl(NetSysctl::TcpRmem.key())?;
                    let wmem = ns.sysctl(NetSysctl::TcpWmem.key())?;
                    let b = tcp_buffers(spec, &rmem, &wmem);
                    ns.set_sysctl(NetSysctl::TcpRmem.key(), &b.tcp_rmem)?;
                    ns.set_sysctl(NetSysctl::TcpWmem.key(), &b.tcp_wmem)?;
                }
                let tun = topo.take_tun().ok_or_else(|| {
                    RunError::failed("emulated path", "the topology has no TUN pair")
                })?;
                let options = EmulatorOptions {
                    seed,
                    lateness_bound: LATENESS_BOUND,
                    ..EmulatorOptions::default()
                };
                let handle = tcptail_lab::emulator::Emulator::start(tun, (**spec).clone(), options)
                    .map_err(|e| RunError::failed("start the emulator", e))?;
                emulator = Some(handle);
            }
            PathKind::Tbf { rate, buffer_bytes } => {
                let (router, ifname) = topo
                    .bottleneck()
                    .ok_or_else(|| RunError::failed("tbf path", "the topology has no router"))?;
                // burst: enough tokens for a few full-size packets at this rate, at least one
                // 64 KB TSO segment so the qdisc never stalls a GSO packet.
                let burst = (rate.bytes_per_second() / 1000).max(64 * 1024);
                let out = router
                    .command("tc")
                    .args(["qdisc", "replace", "dev", ifname, "root", "tbf"])
                    .args(["rate", &format!("{}bit", rate.0)])
                    .args(["burst", &burst.to_string(), "limit", &buffer_bytes.to_string()])
                    .output()
                    .map_err(|e| RunError::failed("run tc", e))?;
                if !out.status.success() {
                    return Err(RunError::failed(
                        "tc qdisc add tbf",
                        String::from_utf8_lossy(&out.stderr).trim(),
                    ));
                }
            }
        }
        for ns in [topo.client(), topo.server()] {
            for (k, v) in &self.sysctls {
                ns.set_sysctl(k, v)?;
            }
        }
        Ok(LivePath { topo: Some(topo), emulator, _cleanup: cleanup })
    }
}

/// A path that exists for one round; dropping it (or [`LivePath::finish`]) removes it.
pub struct LivePath {
    topo: Option<Topology>,
    emulator: Option<EmulatorHandle>,
    // Declared last: dropped after the topology, runs whatever the topology left.
    _cleanup: Cleanup,
}

impl LivePath {
    /// The client namespace.
    pub fn client(&self) -> &Netns {
        self.topo.as_ref().expect("live until finish").client()
    }

    /// The server namespace.
    pub fn server(&self) -> &Netns {
        self.topo.as_ref().expect("live until finish").server()
    }

    /// The server's address (the client's is [`tcptail_netns::addr::CLIENT_ADDR`]).
    pub fn server_addr(&self) -> Ipv4Addr {
        SERVER_ADDR
    }

    /// The topology (namespaces and links).
    pub fn topo(&self) -> &Topology {
        self.topo.as_ref().expect("live until finish")
    }

    /// The topology, for processes started in its namespaces.
    pub fn topology(&mut self) -> &mut Topology {
        self.topo.as_mut().expect("live until finish")
    }

    /// Stops the emulator, removes the namespaces and returns the emulator's lateness.
    pub fn finish(mut self) -> Option<Lateness> {
        let lateness = self.emulator.take().map(|handle| {
            let report = handle.stop();
            Lateness {
                worst_p99_us: report.lateness.p99_us,
                max_us: report.lateness.max_us,
                bound_us: LATENESS_BOUND.as_secs_f64() * 1e6,
                flagged_paths: usize::from(report.lateness_flag.is_some()),
                paths: 1,
            }
        });
        if let Some(topo) = self.topo.take() {
            let _ = topo.teardown();
        }
        lateness
    }
}

impl Drop for LivePath {
    fn drop(&mut self) {
        if let Some(handle) = self.emulator.take() {
            let _ = handle.stop();
        }
        if let Some(topo) = self.topo.take() {
            let _ = topo.teardown();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(pairs: &[(&str, &str)]) -> Params {
        Params::from_pairs(pairs.iter().map(|(k, v)| (*k, toml::Value::String((*v).into()))))
    }

    #[test]
    fn emulated_path_from_params() {
        let p =
            params(&[("path", "emulated"), ("rate", "100mbit"), ("rtt", "10ms"), ("loss", "1%")]);
        let plan = PathPlan::from_params(&p).unwrap();
        assert_eq!(plan.rtt(), Duration::from_millis(10));
        assert_eq!(plan.rate(), Some(BitRate(100_000_000)));
        let PathKind::Emulated(spec) = &plan.kind else { panic!("{plan:?}") };
        assert!(spec.up.loss.is_some() && spec.down.loss.is_none());
        assert!(p.unread().is_empty());
    }

    #[test]
    fn veth_rejects_shaping_keys() {
        let err = PathPlan::from_params(&params(&[("rate", "1gbit")])).unwrap_err();
        assert_eq!(err.key, "rate");
    }

    #[test]
    fn tbf_needs_a_rate_and_rejects_delay() {
        assert_eq!(PathPlan::from_params(&params(&[("path", "tbf")])).unwrap_err().key, "rate");
        let err =
            PathPlan::from_params(&params(&[("path", "tbf"), ("rate", "1gbit"), ("rtt", "1ms")]))
                .unwrap_err();
        assert_eq!(err.key, "rtt");
        let plan = PathPlan::from_params(&params(&[("path", "tbf"), ("rate", "1gbit")])).unwrap();
        assert_eq!(
            plan.kind,
            PathKind::Tbf { rate: BitRate(1_000_000_000), buffer_bytes: 125_000 }
        );
    }

    #[test]
    fn only_net_sysctls() {
        let p = Params::from_pairs([(
            "sysctl",
            toml::Value::Table(
                [("kernel.foo".to_owned(), toml::Value::String("1".into()))].into_iter().collect(),
            ),
        )]);
        assert_eq!(PathPlan::from_params(&p).unwrap_err().key, "sysctl");
    }
}
