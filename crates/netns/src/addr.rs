//! The lab's fixed addresses and interface names.
//!
//! Every topology gives the client [`CLIENT_ADDR`] and the server [`SERVER_ADDR`], whatever sits
//! between them, so scripts can rely on `10.77.0.2` being the server. Links are configured
//! point-to-point (`ip addr add 10.77.0.1 peer 10.77.0.2`): each side holds a /32 and the
//! kernel installs a host route to the peer, which lets the same two addresses work over a
//! veth, a TUN device, or through a router (whose two sides are [`ROUTER_CLIENT_SIDE_ADDR`] and
//! [`ROUTER_SERVER_SIDE_ADDR`]).
//!
//! All four addresses lie in [`LAB_NET`] = 10.77.0.0/29, out of RFC 1918 space. They exist only
//! inside the lab's namespaces, so they cannot disturb the host's routing; the only effect of a
//! host network that overlaps them is that it is unreachable from inside the lab (it would be
//! anyway: lab namespaces have no route out). [`host_route_overlap`] lists such routes so the
//! lab can mention it. On the development machine the host's only routes are `default` and
//! 192.0.2.0/24.

use std::net::Ipv4Addr;
use std::process::Command;

use crate::Error;
use crate::netns::run_cmd;

/// The client namespace's address in every topology.
pub const CLIENT_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 1);
/// The server namespace's address in every topology.
pub const SERVER_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 2);
/// The router's address on its link to the client (routed topology).
pub const ROUTER_CLIENT_SIDE_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 3);
/// The router's address on its link to the server (routed topology).
pub const ROUTER_SERVER_SIDE_ADDR: Ipv4Addr = Ipv4Addr::new(10, 77, 0, 4);
/// The block all lab addresses come from: 10.77.0.0/29.
pub const LAB_NET: (Ipv4Addr, u8) = (Ipv4Addr::new(10, 77, 0, 0), 29);

/// Environment variable carrying the server's address to lab commands.
pub const ENV_SERVER_ADDR: &str = "TCPTAIL_SERVER_ADDR";
/// Environment variable carrying the client's address to lab commands.
pub const ENV_CLIENT_ADDR: &str = "TCPTAIL_CLIENT_ADDR";

/// Client/server end of a veth pair (both ends carry the same name in their namespaces).
pub const VETH_IF: &str = "tcptail-veth";
/// The TUN device in the client and in the server namespace.
pub const TUN_IF: &str = "tcptail-tun";
/// The router's interface towards the client.
pub const ROUTER_CLIENT_IF: &str = "tcptail-c";
/// The router's interface towards the server: the egress where a `tbf`/netem bottleneck for
/// client-to-server data belongs.
pub const ROUTER_SERVER_IF: &str = "tcptail-s";

fn parse_prefix(dst: &str) -> Option<(Ipv4Addr, u8)> {
    if dst == "default" {
        return Some((Ipv4Addr::UNSPECIFIED, 0));
    }
    let (addr, len) = dst.split_once('/').unwrap_or((dst, "32"));
    let len: u8 = len.parse().ok().filter(|&l| l <= 32)?;
    Some((addr.parse().ok()?, len))
}

fn overlaps(a: (Ipv4Addr, u8), b: (Ipv4Addr, u8)) -> bool {
    let len = a.1.min(b.1);
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    (u32::from(a.0) & mask) == (u32::from(b.0) & mask)
}

/// The destinations in `ip -j route` JSON output that overlap [`LAB_NET`], ignoring default
/// routes (which overlap everything and are irrelevant).
pub fn overlapping_routes(ip_json: &str) -> Vec<String> {
    let Ok(serde_json::Value::Array(routes)) = serde_json::from_str(ip_json) else {
        return Vec::new();
    };
    routes
        .iter()
        .filter_map(|r| r.get("dst")?.as_str())
        .filter(|dst| parse_prefix(dst).is_some_and(|p| p.1 > 0 && overlaps(p, LAB_NET)))
        .map(str::to_owned)
        .collect()
}

/// Host routes (all tables, read-only) that overlap [`LAB_NET`]; empty on a normal host.
pub fn host_route_overlap() -> Result<Vec<String>, Error> {
    let json =
        run_cmd(Command::new("ip").args(["-j", "-4", "route", "show", "table", "all"]), None)?;
    Ok(overlapping_routes(&json))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_overlaps_but_not_default_or_disjoint_routes() {
        let json = r#"[{"dst":"default","gateway":"192.0.2.1"},{"dst":"192.0.2.0/24"},
            {"dst":"10.0.0.0/8"},{"dst":"10.77.0.5"},{"dst":"10.77.0.9"},{"dst":"10.78.0.0/16"}]"#;
        assert_eq!(overlapping_routes(json), vec!["10.0.0.0/8", "10.77.0.5"]);
        assert!(overlapping_routes("not json").is_empty());
    }

    #[test]
    fn lab_addresses_are_in_lab_net() {
        for a in [CLIENT_ADDR, SERVER_ADDR, ROUTER_CLIENT_SIDE_ADDR, ROUTER_SERVER_SIDE_ADDR] {
            assert!(overlaps((a, 32), LAB_NET), "{a}");
            assert!(a.is_private());
        }
        for name in [VETH_IF, TUN_IF, ROUTER_CLIENT_IF, ROUTER_SERVER_IF] {
            assert!(name.len() <= crate::sys::MAX_IFNAME && name.starts_with(crate::PREFIX));
        }
    }
}
