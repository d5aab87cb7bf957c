//! `--emulator netem`: the lab's path on kernel netem qdiscs, for hosts that have `sch_netem`.
//!
//! # Placement
//!
//! netem sits on the **router** namespace of a [`tcptail_netns::Topology::routed`] topology:
//! client-to-server traffic is shaped on the router's egress towards the server
//! ([`ROUTER_SERVER_IF`]) and server-to-client traffic on its egress towards the client
//! ([`ROUTER_CLIENT_IF`]). Never on the sender's own interface: a qdisc there is charged to the
//! sending socket by TCP Small Queues, so a sender never fills the buffer (emulation.md: CUBIC
//! at 32 ms instead of 94 ms, no drops). After the forwarding hop the packet is detached from
//! its socket, as on a real path.
//!
//! # What maps to what
//!
//! | spec | netem |
//! |---|---|
//! | rate | `rate <bits>bit` |
//! | delay, jitter | `delay <us>us [<us>us] [distribution normal\|pareto\|paretonormal]` (uniform is netem's default) |
//! | Bernoulli loss | `loss random <p>%` |
//! | Gilbert-Elliott | `loss gemodel <p>% <r>% <1-h>% <1-k>%` |
//! | bottleneck buffer | `limit <packets>` = buffer in packets + 2 x BDP in packets |
//!
//! netem's `limit` counts every packet it holds, including those in the delay line, so the
//! limit is the buffer plus twice the path's BDP in packets ([`limit_packets`]); netem's
//! default of 1000 packets would otherwise silently cap fast, long paths. The buffer is thereby
//! approximate (netem has one limit, not a queue in front of a delay line), traces and CoDel
//! are not available ([`crate::path::PathFlags::check`] rejects them for netem).
//!
//! # Missing netem
//!
//! A kernel without `sch_netem` (like the development machine's) fails the first
//! `tc qdisc add ... netem` with "Specified qdisc kind is unknown"; [`install`] turns that into
//! [`NetemError::Unavailable`], which names the missing module and suggests the built-in
//! emulator. It happens while the lab is being set up, before any command runs.

use std::time::Duration;

use tcptail_emu::{DirectionSpec, Jitter, LossModel, PathSpec, QueueLimit};
use tcptail_netns::Netns;
use tcptail_netns::addr::{ROUTER_CLIENT_IF, ROUTER_SERVER_IF};
use tcptail_units::Bdp;

/// Bytes per packet when converting byte sizes to netem's packet limit.
const PACKET_BYTES: u64 = 1500;

/// Why netem could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum NetemError {
    /// The kernel has no netem qdisc.
    #[error(
        "--emulator netem: this kernel has no netem qdisc (the sch_netem module is not built or \
         cannot be loaded; `tc qdisc add dev {ifname} root netem ...` in namespace {netns} \
         said: {stderr}); use the built-in emulator instead (--emulator builtin, the default)"
    )]
    Unavailable {
        /// The namespace the qdisc was added in.
        netns: String,
        /// The interface.
        ifname: String,
        /// What `tc` printed.
        stderr: String,
    },
    /// `tc` is not installed.
    #[error("--emulator netem needs `tc` from iproute2, which was not found on PATH")]
    TcMissing,
    /// `tc` failed for another reason.
    #[error("--emulator netem: setting up the qdisc on {ifname}")]
    Tc {
        /// The interface.
        ifname: String,
        /// What failed.
        #[source]
        source: Box<tcptail_netns::Error>,
    },
}

/// netem's `limit` for one direction: its buffer in packets plus twice the path's BDP in
/// packets (netem counts packets in the delay line too).
pub fn limit_packets(dir: &DirectionSpec, rtt: Duration) -> u64 {
    let rate = dir.rate.mean();
    let buffer = match dir.queue.limit {
        QueueLimit::Packets(n) => n,
        QueueLimit::Bytes(b) => b.bytes().div_ceil(PACKET_BYTES),
        QueueLimit::Time(t) => Bdp { rate, rtt: t }.bytes().bytes().div_ceil(PACKET_BYTES),
    };
    let bdp = Bdp { rate, rtt }.bytes().bytes().div_ceil(PACKET_BYTES);
    buffer.saturating_add(bdp.saturating_mul(2)).max(1)
}

fn pct(fraction: f64) -> String {
    format!("{:.6}%", fraction * 100.0)
}

/// The netem parameters (after `netem`) for one direction of a path with base RTT `rtt`.
pub fn netem_args(dir: &DirectionSpec, rtt: Duration) -> Vec<String> {
    let mut args = vec!["limit".to_owned(), limit_packets(dir, rtt).to_string()];
    args.push("delay".to_owned());
    args.push(format!("{}us", dir.delay.as_micros()));
    match dir.jitter {
        Some(Jitter::Uniform { max }) => args.push(format!("{}us", max.as_micros())),
        Some(j) => {
            args.push(format!("{}us", j.scale().as_micros()));
            args.extend(["distribution".to_owned(), j.name().to_owned()]);
        }
        None => {}
    }
    match dir.loss {
        Some(LossModel::Bernoulli { p }) => {
            args.extend(["loss".to_owned(), "random".to_owned(), pct(p)]);
        }
        Some(LossModel::GilbertElliott { p, r, h, k }) => {
            args.extend(["loss".to_owned(), "gemodel".to_owned()]);
            args.extend([pct(p), pct(r), pct(1.0 - h), pct(1.0 - k)]);
        }
        None => {}
    }
    args.push("rate".to_owned());
    args.push(format!("{}bit", dir.rate.mean().bits_per_second()));
    args
}

/// Whether `tc`'s complaint means the kernel lacks the qdisc.
pub fn means_unavailable(stderr: &str) -> bool {
    let s = stderr.to_ascii_lowercase();
    s.contains("qdisc kind is unknown")
        || s.contains("unknown qdisc")
        || (s.contains("netem") && s.contains("not found"))
        // Kernels before extended acks answered an unknown kind with ENOENT.
        || s.contains("rtnetlink answers: no such file or directory")
}

/// Installs netem for both directions on `router` (see the [module docs](self)) and returns
/// the `tc` command lines it ran, for the report.
pub fn install(router: &Netns, path: &PathSpec) -> Result<Vec<String>, NetemError> {
    let rtt = path.up.delay + path.down.delay;
    let mut lines = Vec::new();
    for (ifname, dir) in [(ROUTER_SERVER_IF, &path.up), (ROUTER_CLIENT_IF, &path.down)] {
        let mut args: Vec<String> =
            ["qdisc", "add", "dev", ifname, "root", "netem"].map(str::to_owned).to_vec();
        args.extend(netem_args(dir, rtt));
        match router.exec("tc", &args) {
            Ok(_) => lines.push(format!("tc {}", args.join(" "))),
            Err(tcptail_netns::Error::Command { stderr, .. }) if means_unavailable(&stderr) => {
                return Err(NetemError::Unavailable {
                    netns: router.name().to_owned(),
                    ifname: ifname.to_owned(),
                    stderr,
                });
            }
            Err(tcptail_netns::Error::Spawn { source, .. })
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                return Err(NetemError::TcMissing);
            }
            Err(source) => {
                return Err(NetemError::Tc { ifname: ifname.to_owned(), source: Box::new(source) });
            }
        }
    }
    Ok(lines)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcptail_emu::{Discipline, QueueSpec, Rate};
    use tcptail_units::{BitRate, ByteSize};

    #[test]
    fn args_cover_rate_delay_jitter_loss_and_a_limit_for_the_path() {
        let dir = DirectionSpec {
            rate: Rate::Constant(BitRate(30_000_000)),
            delay: Duration::from_millis(5),
            jitter: Some(Jitter::Normal { sigma: Duration::from_micros(500) }),
            loss: Some(LossModel::Bernoulli { p: 0.01 }),
            queue: QueueSpec {
                limit: QueueLimit::Bytes(ByteSize(375_000)),
                discipline: Discipline::Fifo,
            },
            ecn_blackhole: None,
            reorder: None,
        };
        let rtt = Duration::from_millis(10);
        // 375000 B = 250 packets; BDP 37500 B = 25 packets.
        assert_eq!(limit_packets(&dir, rtt), 250 + 50);
        assert_eq!(
            netem_args(&dir, rtt).join(" "),
            "limit 300 delay 5000us 500us distribution normal loss random 1.000000% rate 30000000bit"
        );
        let pareto = DirectionSpec {
            jitter: Some(Jitter::ParetoNormal { sigma: Duration::from_micros(700) }),
            ..dir.clone()
        };
        assert!(
            netem_args(&pareto, rtt)
                .join(" ")
                .contains("delay 5000us 700us distribution paretonormal")
        );
        let ge = DirectionSpec { loss: Some(LossModel::gilbert(0.01, 4.0)), jitter: None, ..dir };
        let args = netem_args(&ge, rtt).join(" ");
        assert!(args.contains("loss gemodel 0.252525% 25.000000% 100.000000% 0.000000%"), "{args}");
    }

    #[test]
    fn limit_grows_with_bdp() {
        let dir = DirectionSpec {
            rate: Rate::Constant(BitRate(10_000_000_000)),
            delay: Duration::from_millis(25),
            jitter: None,
            loss: None,
            queue: QueueSpec { limit: QueueLimit::Packets(100), discipline: Discipline::Fifo },
            ecn_blackhole: None,
            reorder: None,
        };
        // 10 Gbit/s x 50 ms = 62.5 MB = 41667 packets, twice.
        assert_eq!(limit_packets(&dir, Duration::from_millis(50)), 100 + 2 * 41_667);
    }

    #[test]
    fn recognises_missing_netem() {
        assert!(means_unavailable("Error: Specified qdisc kind is unknown."));
        assert!(!means_unavailable("Error: Exclusivity flag on, cannot modify."));
    }
}
