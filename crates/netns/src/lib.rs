//! Platform plumbing for `tcptail lab`: network namespaces, the links between them, TUN
//! devices for the userspace link emulator, child processes, and teardown that happens on
//! every exit path.
//!
//! # What it provides
//!
//! - [`Netns`]: a uniquely named namespace (`tcptail-<pid>-<role>-<n>`, [`PREFIX`]) with
//!   closures run inside it on scratch threads ([`Netns::run`]), `ip`/commands inside it, and
//!   per-namespace sysctls written and read back ([`Netns::set_sysctl`], [`NetSysctl`]), and
//!   its statistics counters as `nstat` names them ([`Netns::nstat`]).
//! - [`Topology`]: `veth_pair`, `tun_pair` (the emulator's two TUN descriptors) and `routed`
//!   (client ─ router ─ server, forwarding on in the router only). The client is always
//!   [`addr::CLIENT_ADDR`] 10.77.0.1 and the server [`addr::SERVER_ADDR`] 10.77.0.2.
//! - [`Processes`]: commands spawned inside namespaces, tracked, SIGTERM then SIGKILL, reaped.
//! - [`Cleanup`]: the per-run registry every resource is entered in; [`signal::install`]
//!   makes SIGINT/SIGTERM/SIGHUP run it; [`clean_stale`] removes what SIGKILLed runs left.
//! - [`ensure_root`] and latency helpers for the emulator thread ([`set_timer_slack`],
//!   [`set_fifo_priority`]) that report [`Tuning::NotPermitted`] instead of failing.
//! - [`procfs`]: the one set of parsers for procfs text about tasks and the machine (a task's
//!   `stat`, `schedstat`, `status`/`io` fields, `/proc/stat`'s `cpu` line, CPU pressure).
//!
//! # Invariants
//!
//! - Nothing is created in, or changed on, the host's network namespace: links are created
//!   directly inside lab namespaces, sysctls are written from threads inside them and only
//!   `net.` keys are accepted. The only host-visible artefacts are the namespace mounts under
//!   `/run/netns`, all named with [`PREFIX`].
//! - No thread of the caller changes namespace; only short-lived scratch threads do.
//! - Every namespace and process is registered in a [`Cleanup`] before or as it is created and
//!   removed by its owner's `Drop`, by the registry, or by [`clean_stale`] after a SIGKILL.
//!
//! # Usage sketch (what `tcptail lab path` does)
//!
//! ```no_run
//! use std::time::Duration;
//! use tcptail_netns::{Cleanup, Group, NetSysctl, Topology, ensure_root, signal};
//!
//! # fn main() -> Result<(), tcptail_netns::Error> {
//! ensure_root()?;
//! signal::install(signal::DEFAULT_GRACE)?;
//! let cleanup = Cleanup::new();
//! let mut topo = Topology::tun_pair("client", "server")
//!     .sysctl(NetSysctl::TcpWmem, "4096 16384 33554432")
//!     .build(&cleanup)?;
//! let tun = topo.take_tun().expect("tun topology");
//! // ... start the emulator thread on tun.client / tun.server, stopping when
//! //     signal::shutdown_requested(); register its stop with cleanup.defer(...)
//! let mut server = topo.server_command("iperf3");
//! server.args(["-s", "-1"]);
//! topo.processes().spawn("server", server, Group::Own)?;
//! let mut client = topo.client_command("sh");
//! client.args(["-c", "iperf3 -c $TCPTAIL_SERVER_ADDR"]);
//! let pid = topo.processes().spawn("client", client, Group::Inherit)?;
//! let exited = topo.processes().wait(pid)?;
//! // ... stop the emulator, drop `tun`; then `topo` drops: processes, TUNs, namespaces.
//! # drop((tun, exited)); Ok(()) }
//! ```
//!
//! All `unsafe` code lives in [`sys`].

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod addr;
pub mod cleanup;
mod error;
pub mod netns;
pub mod nstat;
pub mod privilege;
pub mod process;
pub mod procfs;
pub mod signal;
pub mod stale;
pub mod sys;
pub mod sysctl;
pub mod tcp_memory;
pub mod topology;

pub use cleanup::{Cleanup, Token};
pub use error::Error;
pub use netns::{Netns, PREFIX};
pub use privilege::ensure_root;
pub use process::{Exited, Group, Processes};
pub use stale::{Scope, StaleReport, clean_stale};
pub use sys::{TUN_VNET_HDR_LEN, TunMode, TunOffloads, Tuning, set_fifo_priority, set_timer_slack};
pub use sysctl::NetSysctl;
pub use topology::{Kind, Topology, TopologyBuilder, TunDevice, TunPair};
