//! Topologies carry TCP between the fixed client and server addresses.

mod common;

use std::time::Duration;

use tcptail_netns::addr::{ROUTER_SERVER_IF, TUN_IF, VETH_IF};
use tcptail_netns::sysctl::host_sysctl;
use tcptail_netns::{Cleanup, Error, Kind, NetSysctl, Netns, Topology, TunMode, netns};

use common::{Forwarder, require_root, tcp_echo};

fn link_line(ns: &Netns, ifname: &str) -> String {
    ns.ip(["-o", "-d", "link", "show", "dev", ifname]).unwrap()
}

fn assert_no_ipv6(ns: &Netns, ifname: &str) {
    let v6 = ns.ip(["-6", "-o", "addr", "show", "dev", ifname]).unwrap();
    assert!(v6.trim().is_empty(), "IPv6 left on {ifname}: {v6}");
}

#[test]
fn veth_pair_carries_tcp_and_is_removed() {
    require_root();
    let cleanup = Cleanup::new();
    let topo = Topology::veth_pair("t-veth-c", "t-veth-s")
        .sysctl(NetSysctl::TcpSlowStartAfterIdle, "0")
        .build(&cleanup)
        .unwrap();
    assert_eq!(topo.kind(), Kind::VethPair);
    assert!(topo.router().is_none() && topo.bottleneck().is_none());
    tcp_echo(topo.client(), topo.server(), 1 << 20);
    for ns in [topo.client(), topo.server()] {
        assert_eq!(ns.sysctl(NetSysctl::TcpSlowStartAfterIdle.key()).unwrap(), "0");
        assert!(link_line(ns, VETH_IF).contains(&format!("alias {}", ns.name())));
        assert_no_ipv6(ns, VETH_IF);
    }
    let names = [topo.client().name().to_owned(), topo.server().name().to_owned()];
    drop(topo);
    for name in &names {
        assert!(!netns::exists(name), "{name} left behind");
    }
    assert_eq!(cleanup.pending(), 0);
}

#[test]
fn tun_pair_with_a_forwarder_carries_tcp() {
    require_root();
    let cleanup = Cleanup::new();
    let mut topo =
        Topology::tun_pair("t-tun-c", "t-tun-s").tun_mode(TunMode::Plain).build(&cleanup).unwrap();
    for ns in [topo.client(), topo.server()] {
        let line = link_line(ns, TUN_IF);
        assert!(line.contains("mtu 1500"), "{line}");
        assert!(line.contains("qlen 10000"), "{line}");
        assert!(line.contains("tun type tun pi off vnet_hdr off"), "{line}");
        assert_no_ipv6(ns, TUN_IF);
    }
    let tun = topo.take_tun().expect("tun topology has a pair");
    assert!(topo.take_tun().is_none());
    assert_eq!(tun.client.netns(), topo.client().name());
    assert_eq!(tun.server.ifname(), TUN_IF);
    assert!(!tun.client.offloads().vnet_hdr);

    let fwd = Forwarder::start(tun);
    tcp_echo(topo.client(), topo.server(), 256 * 1024);
    assert!(fwd.packets() > 10, "forwarder saw {} packets", fwd.packets());
    assert!(fwd.largest() <= 1500, "a {}-byte packet through a 1500-byte MTU", fwd.largest());
    let tun = fwd.stop();

    // Without the forwarder nothing passes: the TUN devices really are the only path.
    let target = std::net::SocketAddr::from((tcptail_netns::addr::SERVER_ADDR, 9));
    let res = topo
        .client()
        .run(|| std::net::TcpStream::connect_timeout(&target, Duration::from_millis(300)))
        .unwrap();
    assert!(res.is_err(), "connected without a forwarder");

    drop(tun);
    let names = [topo.client().name().to_owned(), topo.server().name().to_owned()];
    topo.teardown().unwrap();
    for name in &names {
        assert!(!netns::exists(name), "{name} left behind");
    }
}

#[test]
fn offload_tun_pair_hands_out_gso_packets_and_takes_them_back() {
    require_root();
    let cleanup = Cleanup::new();
    let mut topo = Topology::tun_pair("t-gso-c", "t-gso-s")
        .tun_mode(TunMode::Offload)
        .build(&cleanup)
        .unwrap();
    for ns in [topo.client(), topo.server()] {
        let line = link_line(ns, TUN_IF);
        assert!(line.contains("tun type tun pi off vnet_hdr on"), "{line}");
    }
    let tun = topo.take_tun().expect("tun topology has a pair");
    let offloads = tun.client.offloads();
    assert!(offloads.vnet_hdr && offloads.csum && offloads.tso, "{offloads:?}");

    // The forwarder passes virtio_net_hdr + GSO packet through unchanged: the far kernel
    // accepts what the near one handed out.
    let fwd = Forwarder::start(tun);
    tcp_echo(topo.client(), topo.server(), 4 << 20);
    let largest = fwd.largest();
    assert!(largest > 1500 + 10, "no GSO packet seen; largest read {largest} bytes");
    assert!(largest <= 65536 + 10, "{largest} bytes");
    drop(fwd.stop());
}

#[test]
fn routed_forwards_in_the_router_only_and_takes_a_tbf() {
    require_root();
    let host_forward = host_sysctl(NetSysctl::IpForward.key()).unwrap();
    let cleanup = Cleanup::new();
    let topo = Topology::routed("t-rt-c", "t-rt-r", "t-rt-s").build(&cleanup).unwrap();
    let router = topo.router().expect("routed has a router");
    assert_eq!(router.sysctl(NetSysctl::IpForward.key()).unwrap(), "1");
    for ns in [topo.client(), topo.server()] {
        assert_eq!(ns.sysctl(NetSysctl::IpForward.key()).unwrap(), "0");
    }
    assert_eq!(host_sysctl(NetSysctl::IpForward.key()).unwrap(), host_forward);

    let (bottleneck_ns, ifname) = topo.bottleneck().unwrap();
    assert_eq!((bottleneck_ns.name(), ifname), (router.name(), ROUTER_SERVER_IF));
    bottleneck_ns
        .exec(
            "tc",
            [
                "qdisc", "add", "dev", ifname, "root", "tbf", "rate", "50mbit", "burst", "32kbit",
                "limit", "375000",
            ],
        )
        .unwrap();
    tcp_echo(topo.client(), topo.server(), 512 * 1024);
    let stats = bottleneck_ns.exec("tc", ["-s", "qdisc", "show", "dev", ifname]).unwrap();
    assert!(stats.contains("tbf"), "{stats}");
    assert!(!stats.contains("Sent 0 bytes"), "traffic did not pass the tbf: {stats}");
}

#[test]
fn a_failed_build_leaves_nothing_behind() {
    require_root();
    let cleanup = Cleanup::new();
    let err = Topology::veth_pair("t-fail-c", "t-fail-s")
        .sysctl(NetSysctl::TcpCongestionControl, "no-such-cc")
        .build(&cleanup)
        .unwrap_err();
    assert!(matches!(err, Error::Sysctl { .. }), "{err}");
    let prefix = format!("tcptail-{}-t-fail-", std::process::id());
    let left: Vec<_> =
        netns::list().unwrap().into_iter().filter(|n| n.starts_with(&prefix)).collect();
    assert!(left.is_empty(), "left behind: {left:?}");
    assert_eq!(cleanup.pending(), 0);
}
