//! [`LivePath`]: one emulated (or plain) network path between two namespaces, alive from
//! [`LivePathBuilder::start`] until [`LivePath::stop`] or `Drop`.
//!
//! Every front end that needs a path builds it here: `tcptail lab path` ([`crate::path`]),
//! `tcptail lab run`'s rounds, the send-queue experiment and `tcptail tune --verify-with`.
//!
//! Order of events in [`LivePathBuilder::start`], each step only after the previous one
//! succeeded (a pending termination signal, [`tcptail_netns::signal::shutdown_requested`],
//! stops it between steps with [`LabError::Interrupted`]):
//!
//! 1. the topology for the [`PathShape`]: a TUN pair (built-in emulator), client ─ router ─
//!    server (netem, tbf) or a veth pair, registered in the path's own [`Cleanup`];
//! 2. on a path with a known [`PathSpec`], the maxima of `net.ipv4.tcp_rmem`/`tcp_wmem` in the
//!    client and server namespaces raised to fit it ([`tcp_buffers`]; never lowered);
//! 3. the caller's extra `net.` sysctls in both ends (after 2, so an explicit one wins);
//! 4. the shaping: the built-in emulator on the TUN pair (its stop registered in the cleanup
//!    registry, so a signal stops it before the namespaces go), netem qdiscs, or `tbf` on the
//!    router.
//!
//! [`LivePath::stop`] stops the emulator, returning its self-measurement
//! ([`EmulatorReport`]: lateness against its bound, drops, ...), then tears the topology down
//! and says whether that worked. `Drop` does the same for a path that ends any other way: the
//! emulator first (it holds the TUN descriptors), then processes and namespaces.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::net::Ipv4Addr;
use std::process::Command;

use tcptail_emu::PathSpec;
use tcptail_netns::addr::SERVER_ADDR;
use tcptail_netns::{Cleanup, NetSysctl, Netns, Processes, Token, Topology, signal};
use tcptail_units::BitRate;

use crate::emulator::{Emulator, EmulatorHandle, EmulatorOptions, EmulatorReport};
use crate::path::{LabError, TcpBuffers, tcp_buffers};
use crate::placement::Placement;

/// What carries the path between the two namespaces.
#[derive(Debug, Clone, PartialEq)]
pub enum PathShape {
    /// client ─veth─ server, no shaping: a datacenter path.
    Veth,
    /// client ─TUN┄built-in emulator┄TUN─ server.
    Emulated(PathSpec),
    /// client ─veth─ router ─veth─ server with netem qdiscs on the router (needs `sch_netem`).
    Netem(PathSpec),
    /// client ─veth─ router ─veth─ server with a kernel `tbf` on the router's egress towards
    /// the server, never on the sender.
    Tbf {
        /// Token rate.
        rate: BitRate,
        /// Bucket / queue size in bytes.
        buffer_bytes: u64,
    },
}

impl PathShape {
    /// The path's model, where it has one (emulated and netem paths).
    pub fn spec(&self) -> Option<&PathSpec> {
        match self {
            PathShape::Emulated(p) | PathShape::Netem(p) => Some(p),
            PathShape::Veth | PathShape::Tbf { .. } => None,
        }
    }
}

/// How a [`LivePath`] is built; from [`LivePath::builder`].
#[derive(Debug, Clone)]
#[must_use = "call .start()"]
pub struct LivePathBuilder {
    shape: PathShape,
    roles: [String; 3],
    emulator: EmulatorOptions,
    sysctls: BTreeMap<String, String>,
    placement: Option<Placement>,
}

impl LivePathBuilder {
    /// Namespace roles (part of the names `tcptail-<pid>-<role>-<n>`) of the client, router
    /// (used by netem and tbf only) and server. Default `path-client`, `path-router`,
    /// `path-server`.
    pub fn roles(mut self, client: &str, router: &str, server: &str) -> Self {
        self.roles = [client, router, server].map(str::to_owned);
        self
    }

    /// The built-in emulator's options (seed, lateness bound, logs); default
    /// [`EmulatorOptions::default`]. Ignored by the other shapes.
    pub fn emulator(mut self, options: EmulatorOptions) -> Self {
        self.emulator = options;
        self
    }

    /// Where the built-in emulator and the path's endpoints run ([`crate::placement`]):
    /// the emulator's thread(s) pinned to [`Placement::emulator_cpu`], both TUN devices'
    /// receive processing steered to [`Placement::receive_cpus`] (inside the lab's
    /// namespaces, read back), and [`LivePath::client_command`] /
    /// [`LivePath::server_command`] confined to [`Placement::endpoint_cpus`]. Only the
    /// built-in emulator has threads to place: other shapes refuse it at start.
    pub fn placement(mut self, placement: Option<Placement>) -> Self {
        self.placement = placement;
        self
    }

    /// `net.` sysctls written in the client and server namespaces after the TCP buffers.
    pub fn sysctls<K: Into<String>, V: Into<String>>(
        mut self,
        sysctls: impl IntoIterator<Item = (K, V)>,
    ) -> Self {
        self.sysctls.extend(sysctls.into_iter().map(|(k, v)| (k.into(), v.into())));
        self
    }

    /// Builds the path; see the [module docs](self). Needs root. On error, whatever was
    /// created is removed before this returns.
    pub fn start(self) -> Result<LivePath, LabError> {
        tcptail_netns::ensure_root()?;
        if self.placement.is_some() && !matches!(self.shape, PathShape::Emulated(_)) {
            return Err(LabError::flag(
                crate::placement::PlacementOption::EmulatorCpu.flag(),
                "only the built-in emulator has threads to place",
            ));
        }
        let cleanup = Cleanup::new();
        let [client, router, server] = &self.roles;
        let builder = match &self.shape {
            PathShape::Veth => Topology::veth_pair(client, server),
            PathShape::Emulated(_) => Topology::tun_pair(client, server),
            PathShape::Netem(_) | PathShape::Tbf { .. } => Topology::routed(client, router, server),
        };
        let topo = builder.build(&cleanup)?;
        let mut live = LivePath {
            emulator: None,
            topo,
            shape: self.shape,
            tcp_buffers: None,
            qdiscs: Vec::new(),
            placement: self.placement,
            cleanup,
        };
        interrupted()?;
        live.size_tcp_buffers()?;
        for ns in [live.topo.client(), live.topo.server()] {
            for (k, v) in &self.sysctls {
                ns.set_sysctl(k, v)?;
            }
        }
        live.shape_path(self.emulator)?;
        interrupted()?;
        Ok(live)
    }
}

fn interrupted() -> Result<(), LabError> {
    if signal::shutdown_requested() { Err(LabError::Interrupted) } else { Ok(()) }
}

/// The built-in emulator of a live path, stopped on drop.
#[derive(Debug)]
struct RunningEmulator {
    handle: Option<EmulatorHandle>,
    /// Its stop in the cleanup registry (for the signal path), cancelled once stopped.
    token: Token,
    cleanup: Cleanup,
}

impl RunningEmulator {
    fn stop(&mut self) -> Option<EmulatorReport> {
        let report = self.handle.take().map(EmulatorHandle::stop);
        // Owners tear down first and deregister afterwards (see tcptail_netns::cleanup).
        let _ = self.cleanup.cancel(self.token);
        report
    }
}

impl Drop for RunningEmulator {
    fn drop(&mut self) {
        // Dropping the handle stops the thread(s) without propagating a panic.
        drop(self.handle.take());
        let _ = self.cleanup.cancel(self.token);
    }
}

/// A live path between a client and a server namespace; see the [module docs](self).
#[derive(Debug)]
pub struct LivePath {
    // Fields drop in this order: the emulator (holding the TUN descriptors) before the
    // topology, the registry last so it runs whatever the topology left.
    emulator: Option<RunningEmulator>,
    topo: Topology,
    shape: PathShape,
    tcp_buffers: Option<TcpBuffers>,
    qdiscs: Vec<String>,
    placement: Option<Placement>,
    cleanup: Cleanup,
}

/// What [`LivePath::stop`] found.
#[derive(Debug)]
pub struct StoppedPath {
    /// The built-in emulator's self-measurement (lateness against its bound, drops, timing);
    /// `None` for other shapes, or when [`LivePath::stop_emulator`] already took it.
    pub emulator: Option<EmulatorReport>,
    /// Whether every process, link and namespace was removed.
    pub teardown: Result<(), tcptail_netns::Error>,
}

impl LivePath {
    /// A builder for a path of `shape`.
    pub fn builder(shape: PathShape) -> LivePathBuilder {
        LivePathBuilder {
            shape,
            roles: ["path-client", "path-router", "path-server"].map(str::to_owned),
            emulator: EmulatorOptions::default(),
            sysctls: BTreeMap::new(),
            placement: None,
        }
    }

    /// The client namespace (10.77.0.1).
    pub fn client(&self) -> &Netns {
        self.topo.client()
    }

    /// The server namespace (10.77.0.2).
    pub fn server(&self) -> &Netns {
        self.topo.server()
    }

    /// The router namespace (netem and tbf paths).
    pub fn router(&self) -> Option<&Netns> {
        self.topo.router()
    }

    /// The server's address (the client's is [`tcptail_netns::addr::CLIENT_ADDR`]).
    pub fn server_addr(&self) -> Ipv4Addr {
        SERVER_ADDR
    }

    /// What carries the path.
    pub fn shape(&self) -> &PathShape {
        &self.shape
    }

    /// `program` prepared to run in the client namespace, with the lab's address variables
    /// (on the placement's endpoint CPUs, if it names any).
    pub fn client_command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = self.topo.client_command(program);
        self.confine(&mut cmd);
        cmd
    }

    /// `program` prepared to run in the server namespace, with the lab's address variables
    /// (on the placement's endpoint CPUs, if it names any).
    pub fn server_command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = self.topo.server_command(program);
        self.confine(&mut cmd);
        cmd
    }

    /// Where the emulator and the endpoints run, as applied ([`LivePathBuilder::placement`]).
    pub fn placement(&self) -> Option<&Placement> {
        self.placement.as_ref()
    }

    fn confine(&self, cmd: &mut Command) {
        if let Some(p) = &self.placement {
            tcptail_netns::sys::run_on_cpus(cmd, &p.endpoint_cpus);
        }
    }

    /// The path's child processes: spawn commands here so teardown stops them first.
    pub fn processes(&mut self) -> &mut Processes {
        self.topo.processes()
    }

    /// The TCP buffer limits written into both ends, on a path with a model.
    pub fn tcp_buffers(&self) -> Option<&TcpBuffers> {
        self.tcp_buffers.as_ref()
    }

    /// The `tc` command lines that shaped the path (netem).
    pub fn qdiscs(&self) -> &[String] {
        &self.qdiscs
    }

    /// The kernel thread ids of the built-in emulator's running threads (empty without one,
    /// or once stopped); see [`EmulatorHandle::thread_ids`].
    pub fn emulator_thread_ids(&self) -> Vec<i32> {
        let handle = self.emulator.as_ref().and_then(|e| e.handle.as_ref());
        handle.map(EmulatorHandle::thread_ids).unwrap_or_default()
    }

    /// Stops the built-in emulator now and returns its self-measurement; `None` without one
    /// or when already stopped. The namespaces stay until [`LivePath::stop`] or `Drop`.
    pub fn stop_emulator(&mut self) -> Option<EmulatorReport> {
        self.emulator.as_mut()?.stop()
    }

    /// Stops the emulator and tears everything down.
    pub fn stop(mut self) -> StoppedPath {
        let emulator = self.stop_emulator();
        let LivePath { topo, .. } = self;
        StoppedPath { emulator, teardown: topo.teardown() }
    }

    fn size_tcp_buffers(&mut self) -> Result<(), LabError> {
        let Some(path) = self.shape.spec() else {
            return Ok(());
        };
        for ns in [self.topo.client(), self.topo.server()] {
            let rmem = ns.sysctl(NetSysctl::TcpRmem.key())?;
            let wmem = ns.sysctl(NetSysctl::TcpWmem.key())?;
            let buffers = tcp_buffers(path, &rmem, &wmem);
            ns.set_sysctl(NetSysctl::TcpRmem.key(), &buffers.tcp_rmem)?;
            ns.set_sysctl(NetSysctl::TcpWmem.key(), &buffers.tcp_wmem)?;
            self.tcp_buffers.get_or_insert(buffers);
        }
        Ok(())
    }

    fn shape_path(&mut self, options: EmulatorOptions) -> Result<(), LabError> {
        match &self.shape {
            PathShape::Veth => Ok(()),
            PathShape::Emulated(spec) => {
                let tun = self.topo.take_tun().ok_or(LabError::NoTunPair)?;
                let mut options = options;
                if let Some(p) = &self.placement {
                    options.cpu = Some(p.emulator_cpu);
                    if !p.receive_cpus.is_empty() {
                        // Written inside the lab's namespaces: the setting goes with them.
                        self.topo
                            .client()
                            .set_receive_cpus(tun.client.ifname(), &p.receive_cpus)?;
                        self.topo
                            .server()
                            .set_receive_cpus(tun.server.ifname(), &p.receive_cpus)?;
                    }
                }
                let handle =
                    Emulator::start(tun, spec.clone(), options).map_err(LabError::Emulator)?;
                let stopper = handle.stopper();
                // Runs before the namespaces go on the forced (signal) path: registered last.
                let token = self.cleanup.defer("stop the emulator", move || stopper.stop());
                self.emulator = Some(RunningEmulator {
                    handle: Some(handle),
                    token,
                    cleanup: self.cleanup.clone(),
                });
                Ok(())
            }
            PathShape::Netem(spec) => {
                let router = self.topo.router().ok_or(LabError::NoRouter)?;
                self.qdiscs = crate::netem::install(router, spec)?;
                Ok(())
            }
            PathShape::Tbf { rate, buffer_bytes } => {
                let (router, ifname) = self.topo.bottleneck().ok_or(LabError::NoRouter)?;
                // burst: enough tokens for a few full-size packets at this rate, at least one
                // 64 KB TSO segment so the qdisc never stalls a GSO packet.
                let burst = (rate.bytes_per_second() / 1000).max(64 * 1024);
                let out = router
                    .command("tc")
                    .args(["qdisc", "replace", "dev", ifname, "root", "tbf"])
                    .args(["rate", &format!("{}bit", rate.0)])
                    .args(["burst", &burst.to_string(), "limit", &buffer_bytes.to_string()])
                    .output()
                    .map_err(|e| LabError::Tbf { detail: format!("run tc: {e}") })?;
                if !out.status.success() {
                    let detail = String::from_utf8_lossy(&out.stderr).trim().to_owned();
                    return Err(LabError::Tbf { detail });
                }
                Ok(())
            }
        }
    }
}

#[cfg(test)]
mod tests;
