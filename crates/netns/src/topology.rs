//! Lab topologies: builders that return a [`Topology`] owning every namespace, link, TUN
//! descriptor and child process of one run, torn down in reverse order on `Drop`.
//!
//! | builder | shape | bottleneck goes |
//! |---|---|---|
//! | [`Topology::veth_pair`] | client ─veth─ server | nowhere (plain path) |
//! | [`Topology::tun_pair`] | client ─TUN┄emulator┄TUN─ server | in the userspace emulator reading [`TunPair`] |
//! | [`Topology::routed`] | client ─veth─ router ─veth─ server | `tbf`/netem on the router's [`ROUTER_SERVER_IF`] egress, never on the sender |
//!
//! Addresses are the same in all three ([`crate::addr`]): client 10.77.0.1, server 10.77.0.2.
//! Links are created directly inside the namespaces (`ip -n A link add ... peer ... netns B`),
//! so nothing ever appears in the host's namespace, and every link carries its namespace's
//! name as `ifalias` (which names the owning pid). IPv6 is turned off on every lab link so the
//! path carries only the experiment's packets. Only the router has `ip_forward = 1`.
//!
//! TUN devices are opened from a thread inside each namespace with `IFF_TUN | IFF_NO_PI`,
//! by default ([`TopologyBuilder::tun_mode`]) also `IFF_VNET_HDR` with checksum and
//! segmentation offload (the emulator then moves 64 KiB GSO packets per system call),
//! non-blocking, MTU 1500 by default and a transmit queue of [`DEFAULT_TUN_TXQUEUELEN`]
//! packets (the kernel's default of 500 drops at the TUN before the emulator's own queue
//! sees the packet). They are not persistent: closing both descriptors removes them.
//!
//! Partial failures are safe: the topology is assembled in place, so an error halfway through
//! drops what exists so far.

use std::ffi::OsStr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::process::Command;

use crate::addr::{
    CLIENT_ADDR, ENV_CLIENT_ADDR, ENV_SERVER_ADDR, ROUTER_CLIENT_IF, ROUTER_CLIENT_SIDE_ADDR,
    ROUTER_SERVER_IF, ROUTER_SERVER_SIDE_ADDR, SERVER_ADDR, TUN_IF, VETH_IF,
};
use crate::process::Processes;
use crate::sys::{TunMode, TunOffloads};
use crate::{Cleanup, Error, NetSysctl, Netns, sys};

/// Default TUN transmit queue length, in packets.
pub const DEFAULT_TUN_TXQUEUELEN: u32 = 10_000;
/// Default MTU of every lab link.
pub const DEFAULT_MTU: u32 = 1500;

/// Which shape a [`Topology`] has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// client ─veth─ server.
    VethPair,
    /// client ─TUN┄(emulator)┄TUN─ server.
    TunPair,
    /// client ─veth─ router ─veth─ server.
    Routed,
}

/// One TUN device: a non-blocking descriptor carrying raw IP packets (no packet-info header),
/// each behind a `virtio_net_hdr` if [`TunDevice::offloads`] says so.
#[derive(Debug)]
pub struct TunDevice {
    fd: OwnedFd,
    ifname: String,
    netns: String,
    offloads: TunOffloads,
}

impl TunDevice {
    /// The offloads it was opened with (`vnet_hdr`: every read and write starts with a
    /// [`sys::TUN_VNET_HDR_LEN`]-byte `virtio_net_hdr`).
    pub fn offloads(&self) -> TunOffloads {
        self.offloads
    }
    /// The interface name inside its namespace.
    pub fn ifname(&self) -> &str {
        &self.ifname
    }
    /// The namespace the device lives in.
    pub fn netns(&self) -> &str {
        &self.netns
    }
    /// Gives up ownership of the descriptor (the device disappears when it is closed).
    pub fn into_fd(self) -> OwnedFd {
        self.fd
    }
}

impl AsFd for TunDevice {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for TunDevice {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// The emulator's two ends: packets read from `client` travel towards the server and must be
/// written to `server`, and vice versa.
#[derive(Debug)]
pub struct TunPair {
    /// The TUN device in the client namespace.
    pub client: TunDevice,
    /// The TUN device in the server namespace.
    pub server: TunDevice,
}

/// Options for building a [`Topology`]; start from [`Topology::veth_pair`],
/// [`Topology::tun_pair`] or [`Topology::routed`].
#[derive(Debug, Clone)]
#[must_use = "call .build(&cleanup)"]
pub struct TopologyBuilder {
    kind: Kind,
    roles: Vec<String>,
    mtu: u32,
    tun_txqueuelen: u32,
    tun_mode: TunMode,
    sysctls: Vec<(String, String)>,
}

impl TopologyBuilder {
    /// How the TUN devices are opened (default [`TunMode::Offload`]: GSO packets of up to
    /// 64 KiB behind a `virtio_net_hdr`; [`TunMode::Plain`]: one MTU packet per read).
    pub fn tun_mode(mut self, mode: TunMode) -> Self {
        self.tun_mode = mode;
        self
    }

    /// MTU of every lab link (default 1500).
    pub fn mtu(mut self, mtu: u32) -> Self {
        self.mtu = mtu;
        self
    }

    /// Transmit queue length of the TUN devices (default [`DEFAULT_TUN_TXQUEUELEN`]).
    pub fn tun_txqueuelen(mut self, packets: u32) -> Self {
        self.tun_txqueuelen = packets;
        self
    }

    /// A `net.` sysctl to set (and verify) in the client and the server namespace, e.g.
    /// `.sysctl(NetSysctl::TcpWmem, "4096 16384 33554432")`. Not applied to the router.
    pub fn sysctl(mut self, key: impl AsRef<str>, value: impl Into<String>) -> Self {
        self.sysctls.push((key.as_ref().to_owned(), value.into()));
        self
    }

    /// Creates everything, registered in `cleanup`.
    pub fn build(self, cleanup: &Cleanup) -> Result<Topology, Error> {
        for role in &self.roles {
            crate::netns::validate_role(role)?;
        }
        let mut topo = Topology {
            kind: self.kind,
            processes: Processes::new(cleanup),
            tun: None,
            namespaces: Vec::new(),
        };
        for role in &self.roles {
            topo.namespaces.push(Netns::create(cleanup, role)?);
        }
        match self.kind {
            Kind::VethPair => self.wire_veth(&topo)?,
            Kind::Routed => self.wire_routed(&topo)?,
            Kind::TunPair => topo.tun = Some(self.wire_tun(&topo)?),
        }
        for ns in [topo.client(), topo.server()] {
            for (key, value) in &self.sysctls {
                ns.set_sysctl(key, value)?;
            }
        }
        Ok(topo)
    }

    fn link_up(&self, ns: &Netns, ifname: &str, extra: &str) -> String {
        format!("link set {ifname} mtu {} {extra} alias {} up", self.mtu, ns.name())
    }

    /// `ifname` in `ns` gets `local` with a host route to `peer`.
    fn p2p(local: std::net::Ipv4Addr, peer: std::net::Ipv4Addr, ifname: &str) -> String {
        format!("addr add {local}/32 peer {peer}/32 dev {ifname}")
    }

    fn wire_veth(&self, topo: &Topology) -> Result<(), Error> {
        let (c, s) = (topo.client(), topo.server());
        c.ip(["link", "add", VETH_IF, "type", "veth", "peer", "name", VETH_IF, "netns", s.name()])?;
        c.disable_ipv6(VETH_IF)?;
        s.disable_ipv6(VETH_IF)?;
        c.ip_batch(&[
            "link set lo up".to_owned(),
            self.link_up(c, VETH_IF, ""),
            Self::p2p(CLIENT_ADDR, SERVER_ADDR, VETH_IF),
        ])?;
        s.ip_batch(&[
            "link set lo up".to_owned(),
            self.link_up(s, VETH_IF, ""),
            Self::p2p(SERVER_ADDR, CLIENT_ADDR, VETH_IF),
        ])
    }

    fn wire_routed(&self, topo: &Topology) -> Result<(), Error> {
        let (c, s) = (topo.client(), topo.server());
        let r = topo.router().expect("a routed topology has a router");
        for (rif, peer) in [(ROUTER_CLIENT_IF, c), (ROUTER_SERVER_IF, s)] {
            r.ip([
                "link",
                "add",
                rif,
                "type",
                "veth",
                "peer",
                "name",
                VETH_IF,
                "netns",
                peer.name(),
            ])?;
            r.disable_ipv6(rif)?;
            peer.disable_ipv6(VETH_IF)?;
        }
        r.set_sysctl(NetSysctl::IpForward.key(), "1")?;
        r.ip_batch(&[
            "link set lo up".to_owned(),
            self.link_up(r, ROUTER_CLIENT_IF, ""),
            self.link_up(r, ROUTER_SERVER_IF, ""),
            Self::p2p(ROUTER_CLIENT_SIDE_ADDR, CLIENT_ADDR, ROUTER_CLIENT_IF),
            Self::p2p(ROUTER_SERVER_SIDE_ADDR, SERVER_ADDR, ROUTER_SERVER_IF),
        ])?;
        c.ip_batch(&[
            "link set lo up".to_owned(),
            self.link_up(c, VETH_IF, ""),
            Self::p2p(CLIENT_ADDR, ROUTER_CLIENT_SIDE_ADDR, VETH_IF),
            format!("route add {SERVER_ADDR}/32 via {ROUTER_CLIENT_SIDE_ADDR} dev {VETH_IF}"),
        ])?;
        s.ip_batch(&[
            "link set lo up".to_owned(),
            self.link_up(s, VETH_IF, ""),
            Self::p2p(SERVER_ADDR, ROUTER_SERVER_SIDE_ADDR, VETH_IF),
            format!("route add {CLIENT_ADDR}/32 via {ROUTER_SERVER_SIDE_ADDR} dev {VETH_IF}"),
        ])
    }

    fn wire_tun(&self, topo: &Topology) -> Result<TunPair, Error> {
        let open = |ns: &Netns, local, peer| -> Result<TunDevice, Error> {
            let tun_err = |op, source| Error::Tun {
                ifname: TUN_IF.to_owned(),
                netns: ns.name().to_owned(),
                op,
                source,
            };
            let mode = self.tun_mode;
            let (fd, ifname, offloads) = ns
                .run(move || sys::open_tun(TUN_IF, mode))?
                .map_err(|e| tun_err("open /dev/net/tun + TUNSETIFF (+ offloads)", e))?;
            ns.disable_ipv6(&ifname)?;
            let txq = format!("txqueuelen {}", self.tun_txqueuelen);
            ns.ip_batch(&[
                "link set lo up".to_owned(),
                self.link_up(ns, &ifname, &txq),
                Self::p2p(local, peer, &ifname),
            ])?;
            Ok(TunDevice { fd, ifname, netns: ns.name().to_owned(), offloads })
        };
        Ok(TunPair {
            client: open(topo.client(), CLIENT_ADDR, SERVER_ADDR)?,
            server: open(topo.server(), SERVER_ADDR, CLIENT_ADDR)?,
        })
    }
}

/// A built topology that owns everything it created; see the [module docs](self).
#[derive(Debug)]
pub struct Topology {
    kind: Kind,
    processes: Processes,
    tun: Option<TunPair>,
    /// In creation order: client, [router,] server.
    namespaces: Vec<Netns>,
}

impl Topology {
    fn builder(kind: Kind, roles: &[&str]) -> TopologyBuilder {
        TopologyBuilder {
            kind,
            roles: roles.iter().map(|r| (*r).to_owned()).collect(),
            mtu: DEFAULT_MTU,
            tun_txqueuelen: DEFAULT_TUN_TXQUEUELEN,
            tun_mode: TunMode::Offload,
            sysctls: Vec::new(),
        }
    }

    /// client ─veth─ server. `client`/`server` are the namespace roles (part of their names).
    pub fn veth_pair(client: &str, server: &str) -> TopologyBuilder {
        Self::builder(Kind::VethPair, &[client, server])
    }

    /// client ─TUN┄┄TUN─ server; the two TUN descriptors are for the emulator
    /// ([`Topology::take_tun`]). Nothing passes until something forwards between them.
    pub fn tun_pair(client: &str, server: &str) -> TopologyBuilder {
        Self::builder(Kind::TunPair, &[client, server])
    }

    /// client ─veth─ router ─veth─ server, with forwarding on in the router only.
    pub fn routed(client: &str, router: &str, server: &str) -> TopologyBuilder {
        Self::builder(Kind::Routed, &[client, router, server])
    }

    /// The shape.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The client namespace.
    pub fn client(&self) -> &Netns {
        &self.namespaces[0]
    }

    /// The server namespace.
    pub fn server(&self) -> &Netns {
        self.namespaces.last().expect("a topology has a server")
    }

    /// The router namespace ([`Kind::Routed`] only).
    pub fn router(&self) -> Option<&Netns> {
        (self.kind == Kind::Routed).then(|| &self.namespaces[1])
    }

    /// Where a kernel bottleneck (`tbf`, netem) for client-to-server traffic belongs: the
    /// router's egress towards the server ([`Kind::Routed`] only).
    pub fn bottleneck(&self) -> Option<(&Netns, &'static str)> {
        self.router().map(|r| (r, ROUTER_SERVER_IF))
    }

    /// The environment lab commands get: `TCPTAIL_SERVER_ADDR`, `TCPTAIL_CLIENT_ADDR`.
    pub fn env(&self) -> [(&'static str, String); 2] {
        [(ENV_SERVER_ADDR, SERVER_ADDR.to_string()), (ENV_CLIENT_ADDR, CLIENT_ADDR.to_string())]
    }

    /// `program` prepared to run in the client namespace with [`Topology::env`] set.
    pub fn client_command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = self.client().command(program);
        cmd.envs(self.env());
        cmd
    }

    /// `program` prepared to run in the server namespace with [`Topology::env`] set.
    pub fn server_command(&self, program: impl AsRef<OsStr>) -> Command {
        let mut cmd = self.server().command(program);
        cmd.envs(self.env());
        cmd
    }

    /// The run's child processes (spawn commands here so teardown stops them first).
    pub fn processes(&mut self) -> &mut Processes {
        &mut self.processes
    }

    /// Takes the TUN descriptors ([`Kind::TunPair`]; `None` afterwards or for other kinds).
    /// Stop the emulator and close them before the topology drops: an open TUN descriptor
    /// keeps its (by then nameless) namespace alive until it is closed.
    pub fn take_tun(&mut self) -> Option<TunPair> {
        self.tun.take()
    }

    /// Tears everything down now, reporting the first error (after attempting every step).
    pub fn teardown(mut self) -> Result<(), Error> {
        self.teardown_inner()
    }

    fn teardown_inner(&mut self) -> Result<(), Error> {
        let grace = self.processes.grace();
        self.processes.kill_all(grace);
        self.tun = None;
        let mut first = None;
        while let Some(ns) = self.namespaces.pop() {
            if let Err(e) = ns.delete() {
                first.get_or_insert(e);
            }
        }
        first.map_or(Ok(()), Err)
    }
}

impl Drop for Topology {
    fn drop(&mut self) {
        if let Err(e) = self.teardown_inner() {
            eprintln!("tcptail: {e}");
        }
    }
}

impl AsRef<str> for NetSysctl {
    fn as_ref(&self) -> &str {
        self.key()
    }
}
