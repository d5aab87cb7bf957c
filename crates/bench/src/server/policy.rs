//! What a bench server lets a client change on the server's host.
//!
//! A client's Hello asks for a socket [`Profile`], a busy-polling serve loop and a CPU for the
//! server's connection thread. A server reachable on a network must not let any peer burn its
//! CPUs or change its kernel, so by default ([`ServerPolicy::default`]) it applies only what an
//! unprivileged process could set on its own socket and what the host already allows:
//!
//! - `TCP_NODELAY`, `TCP_QUICKACK`, keepalive, `TCP_USER_TIMEOUT`, `TCP_NOTSENT_LOWAT`,
//!   `SO_REUSEADDR`/`SO_REUSEPORT` (per-socket, no privilege, no CPU cost);
//! - a congestion control listed in `net.ipv4.tcp_allowed_congestion_control` (as root the
//!   server could pick any loaded one, and asking for an unloaded one makes the kernel load
//!   the module `tcp_<name>`);
//! - `SO_SNDBUF`/`SO_RCVBUF` up to `net.core.wmem_max`/`rmem_max`.
//!
//! Everything else is refused **per option**, never the whole Hello: each refusal is a row of
//! the Welcome's [`ApplyReport`](tcptail_sock::ApplyReport) with
//! [`OptionOutcome::RefusedByPolicy`] ("refused: server policy") and a note naming the
//! `--allow` word that would permit it. The server's operator opts in with [`Privilege`]s
//! (`tcptail bench server --allow spin,cpu,busy-poll,priority,cc-load`).
//!
//! Even when spinning is allowed it is bounded: a connection that has received nothing for
//! [`ServerPolicy::spin_cap`] stops busy-polling and sleeps until its next request.
//!
//! [`ServerPolicy::vet`] is pure: it is given the host's limits ([`HostLimits`]) and never
//! touches a socket, so every decision is unit-tested.

use std::collections::BTreeSet;
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use tcptail_sock::apply::{allowed_congestion_controls, available_congestion_controls};
use tcptail_sock::profile::BufferSize;
use tcptail_sock::{OptionOutcome, OptionReport, Profile};

/// Something a client may only have when the server's operator allows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Privilege {
    /// Serve the connection by busy-polling a non-blocking socket (burns a CPU).
    Spin,
    /// Pin the connection thread to the CPU the client names.
    Cpu,
    /// `SO_BUSY_POLL` (the kernel busy-polls the NIC in every blocking receive).
    BusyPoll,
    /// `SO_PRIORITY` (steers the socket's packets into queueing disciplines' bands).
    Priority,
    /// Any congestion control the kernel has or can load as a module, not only those in
    /// `net.ipv4.tcp_allowed_congestion_control`.
    CcLoad,
}

impl Privilege {
    /// Every privilege, in the order they are documented.
    pub const ALL: [Privilege; 5] = [
        Privilege::Spin,
        Privilege::Cpu,
        Privilege::BusyPoll,
        Privilege::Priority,
        Privilege::CcLoad,
    ];

    /// The word `--allow` takes for it.
    pub fn word(self) -> &'static str {
        match self {
            Privilege::Spin => "spin",
            Privilege::Cpu => "cpu",
            Privilege::BusyPoll => "busy-poll",
            Privilege::Priority => "priority",
            Privilege::CcLoad => "cc-load",
        }
    }
}

impl fmt::Display for Privilege {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.word())
    }
}

/// A word `--allow` does not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown privilege '{0}' (one of: spin, cpu, busy-poll, priority, cc-load, all)")]
pub struct UnknownPrivilege(pub String);

impl FromStr for Privilege {
    type Err = UnknownPrivilege;

    fn from_str(s: &str) -> Result<Privilege, UnknownPrivilege> {
        Privilege::ALL
            .into_iter()
            .find(|p| p.word() == s.trim())
            .ok_or_else(|| UnknownPrivilege(s.trim().to_string()))
    }
}

/// Parses a comma-separated `--allow` list (`spin,cpu`, or `all`).
pub fn parse_privileges(list: &str) -> Result<BTreeSet<Privilege>, UnknownPrivilege> {
    let mut set = BTreeSet::new();
    for word in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        if word == "all" {
            set.extend(Privilege::ALL);
        } else {
            set.insert(word.parse()?);
        }
    }
    Ok(set)
}

/// Default [`ServerPolicy::spin_cap`].
pub const DEFAULT_SPIN_CAP: Duration = Duration::from_secs(1);
/// Default [`ServerPolicy::max_per_peer`].
pub const DEFAULT_MAX_PER_PEER: usize = 16;

/// What clients may change, and how much of the server one peer may hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerPolicy {
    /// The privileges the operator granted; empty by default.
    pub allow: BTreeSet<Privilege>,
    /// Connections one peer address may hold at once.
    pub max_per_peer: usize,
    /// A spinning connection that receives nothing for this long stops busy-polling and sleeps
    /// until its next request arrives (then spins again).
    pub spin_cap: Duration,
    /// Refuse `SO_SNDBUF`/`SO_RCVBUF` above `net.core.wmem_max`/`rmem_max` rather than let
    /// the kernel cap them silently (true by default; a server whose client is the caller
    /// itself applies them as asked, so the client sees the kernel's cap).
    pub refuse_buffers_above_max: bool,
}

impl Default for ServerPolicy {
    /// Nothing privileged, [`DEFAULT_MAX_PER_PEER`] connections per peer, [`DEFAULT_SPIN_CAP`].
    fn default() -> ServerPolicy {
        ServerPolicy {
            allow: BTreeSet::new(),
            max_per_peer: DEFAULT_MAX_PER_PEER,
            spin_cap: DEFAULT_SPIN_CAP,
            refuse_buffers_above_max: true,
        }
    }
}

impl ServerPolicy {
    /// Every privilege granted, buffers applied as asked and no per-peer limit below
    /// `max_connections`: for a server whose only client is the caller itself (`bench
    /// local`, the lab's experiments), which behaves as servers did before they had a policy.
    pub fn trusting() -> ServerPolicy {
        ServerPolicy {
            allow: Privilege::ALL.into_iter().collect(),
            max_per_peer: usize::MAX,
            refuse_buffers_above_max: false,
            ..ServerPolicy::default()
        }
    }

    /// Whether `privilege` was granted.
    pub fn allows(&self, privilege: Privilege) -> bool {
        self.allow.contains(&privilege)
    }

    /// Splits what a Hello asks for into what the server will do and what it refuses.
    pub fn vet(
        &self,
        asked: &Profile,
        spin: bool,
        server_cpu: Option<usize>,
        host: &HostLimits,
    ) -> Vetted {
        let mut profile = asked.clone();
        let mut refused = Vec::new();
        let mut refuse = |option: &str, requested: String, why: String| {
            refused.push(OptionReport {
                option: option.to_string(),
                requested,
                actual: None,
                outcome: OptionOutcome::RefusedByPolicy,
                note: Some(why),
            });
        };
        let needs = |p: Privilege| format!("the server allows it with --allow {p}");
        if let Some(cc) = &asked.congestion
            && !self.allows(Privilege::CcLoad)
            && !host.allowed_congestion.iter().any(|a| a == cc)
        {
            let loaded = if host.available_congestion.iter().any(|a| a == cc) {
                "loaded but"
            } else {
                "not loaded (choosing it would load a kernel module) and"
            };
            refuse(
                "TCP_CONGESTION",
                cc.clone(),
                format!(
                    "'{cc}' is {loaded} not in net.ipv4.tcp_allowed_congestion_control ({}); {}",
                    host.allowed_congestion.join(" "),
                    needs(Privilege::CcLoad)
                ),
            );
            profile.congestion = None;
        }
        for (size, option, limit_name, limit) in [
            (&asked.send_buffer, "SO_SNDBUF", "net.core.wmem_max", host.wmem_max),
            (&asked.receive_buffer, "SO_RCVBUF", "net.core.rmem_max", host.rmem_max),
        ] {
            if let Some(size) = size
                && self.refuse_buffers_above_max
                && let Some(reason) = buffer_refusal(size, limit_name, limit)
            {
                refuse(option, size.to_string(), reason);
                match option {
                    "SO_SNDBUF" => profile.send_buffer = None,
                    _ => profile.receive_buffer = None,
                }
            }
        }
        if let Some(d) = asked.busy_poll
            && !self.allows(Privilege::BusyPoll)
        {
            refuse(
                "SO_BUSY_POLL",
                tcptail_units::HumanDuration(d).to_string(),
                needs(Privilege::BusyPoll),
            );
            profile.busy_poll = None;
        }
        if let Some(p) = asked.priority
            && !self.allows(Privilege::Priority)
        {
            refuse("SO_PRIORITY", p.to_string(), needs(Privilege::Priority));
            profile.priority = None;
        }
        let spin = if spin && !self.allows(Privilege::Spin) {
            refuse(
                "spin",
                "on".into(),
                format!("served blocking instead; {}", needs(Privilege::Spin)),
            );
            false
        } else {
            spin
        };
        let server_cpu = match server_cpu {
            Some(cpu) if !self.allows(Privilege::Cpu) => {
                refuse("server CPU", cpu.to_string(), needs(Privilege::Cpu));
                None
            }
            other => other,
        };
        Vetted { profile, spin, server_cpu, refused }
    }
}

/// A buffer request above the host's maximum, explained; `None` when it is within it (or the
/// maximum is unknown and the kernel's own cap will apply).
fn buffer_refusal(size: &BufferSize, limit_name: &str, limit: Option<u64>) -> Option<String> {
    let bytes = size.bytes().0;
    let limit = limit?;
    (bytes > limit).then(|| {
        format!(
            "{bytes} bytes is above {limit_name} = {limit}; the server keeps the kernel's \
             autotuned buffer (no --allow lifts this: raise {limit_name} on the server)"
        )
    })
}

/// The host settings [`ServerPolicy::vet`] decides against.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostLimits {
    /// `net.ipv4.tcp_allowed_congestion_control`.
    pub allowed_congestion: Vec<String>,
    /// `net.ipv4.tcp_available_congestion_control`, to say whether a refused one is loaded.
    pub available_congestion: Vec<String>,
    /// `net.core.rmem_max`, if readable.
    pub rmem_max: Option<u64>,
    /// `net.core.wmem_max`, if readable.
    pub wmem_max: Option<u64>,
}

impl HostLimits {
    /// Reads them from `/proc/sys` (of the caller's network namespace). Unreadable values are
    /// absent: an unknown allowed list refuses every congestion control, an unknown buffer
    /// maximum leaves the kernel's own cap to apply.
    pub fn read() -> HostLimits {
        let number = |name: &str| {
            std::fs::read_to_string(format!("/proc/sys/net/core/{name}"))
                .ok()
                .and_then(|s| s.trim().parse().ok())
        };
        HostLimits {
            allowed_congestion: allowed_congestion_controls(),
            available_congestion: available_congestion_controls(),
            rmem_max: number("rmem_max"),
            wmem_max: number("wmem_max"),
        }
    }
}

/// A Hello after [`ServerPolicy::vet`].
#[derive(Debug, Clone, PartialEq)]
pub struct Vetted {
    /// The profile with every refused option removed: what the server applies.
    pub profile: Profile,
    /// Whether the connection is served by spinning.
    pub spin: bool,
    /// The CPU the client asked for, if the server will honour it.
    pub server_cpu: Option<usize>,
    /// One row per refused request, to append to the Welcome's report.
    pub refused: Vec<OptionReport>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use tcptail_units::ByteSize;

    fn host() -> HostLimits {
        HostLimits {
            allowed_congestion: vec!["reno".into(), "bbr".into()],
            available_congestion: vec!["reno".into(), "cubic".into(), "bbr".into()],
            rmem_max: Some(212_992),
            wmem_max: Some(212_992),
        }
    }

    fn greedy() -> Profile {
        Profile {
            congestion: Some("cubic".into()),
            nodelay: Some(true),
            busy_poll: Some(Duration::from_micros(50)),
            priority: Some(6),
            send_buffer: Some(BufferSize::Bytes(ByteSize(100_000))),
            receive_buffer: Some(BufferSize::Bytes(ByteSize(16 << 20))),
            ..Profile::named("greedy")
        }
    }

    fn refused(v: &Vetted) -> Vec<&str> {
        v.refused.iter().map(|r| r.option.as_str()).collect()
    }

    #[test]
    fn the_default_policy_refuses_each_privileged_request_and_keeps_the_rest() {
        let v = ServerPolicy::default().vet(&greedy(), true, Some(1), &host());
        assert_eq!(
            refused(&v),
            ["TCP_CONGESTION", "SO_RCVBUF", "SO_BUSY_POLL", "SO_PRIORITY", "spin", "server CPU"]
        );
        assert!(v.refused.iter().all(|r| r.outcome == OptionOutcome::RefusedByPolicy));
        assert!(!v.spin && v.server_cpu.is_none());
        let p = &v.profile;
        assert_eq!((p.congestion.as_ref(), p.busy_poll, p.priority), (None, None, None));
        assert!(p.receive_buffer.is_none());
        assert_eq!(p.nodelay, Some(true), "unprivileged options stay");
        assert_eq!(p.send_buffer, greedy().send_buffer, "within wmem_max");
        let note =
            |o: &str| v.refused.iter().find(|r| r.option == o).unwrap().note.clone().unwrap();
        assert!(note("spin").contains("--allow spin"), "{}", note("spin"));
        assert!(note("TCP_CONGESTION").contains("loaded but not in"), "{}", note("TCP_CONGESTION"));
        assert!(note("SO_RCVBUF").contains("net.core.rmem_max = 212992"));
    }

    #[test]
    fn an_allowed_congestion_control_passes_and_an_unloaded_one_is_named_as_such() {
        let policy = ServerPolicy::default();
        let bbr = Profile { congestion: Some("bbr".into()), ..Profile::named("p") };
        assert!(policy.vet(&bbr, false, None, &host()).refused.is_empty());
        let vegas = Profile { congestion: Some("vegas".into()), ..Profile::named("p") };
        let v = policy.vet(&vegas, false, None, &host());
        assert!(v.refused[0].note.as_ref().unwrap().contains("would load a kernel module"));
    }

    #[test]
    fn each_privilege_opens_exactly_its_own_request() {
        for p in Privilege::ALL {
            let policy = ServerPolicy { allow: [p].into(), ..ServerPolicy::default() };
            let v = policy.vet(&greedy(), true, Some(1), &host());
            let opened = match p {
                Privilege::Spin => "spin",
                Privilege::Cpu => "server CPU",
                Privilege::BusyPoll => "SO_BUSY_POLL",
                Privilege::Priority => "SO_PRIORITY",
                Privilege::CcLoad => "TCP_CONGESTION",
            };
            assert!(!refused(&v).contains(&opened), "{p}: {:?}", refused(&v));
            assert_eq!(v.refused.len(), 5, "{p}: {:?}", refused(&v));
        }
        let all = ServerPolicy { allow: Privilege::ALL.into(), ..ServerPolicy::default() };
        let v = all.vet(&greedy(), true, Some(1), &host());
        assert_eq!(refused(&v), ["SO_RCVBUF"], "no privilege lifts rmem_max");
        assert!(v.spin && v.server_cpu == Some(1));
        let trusting = ServerPolicy::trusting().vet(&greedy(), true, Some(1), &host());
        assert!(trusting.refused.is_empty() && trusting.profile == greedy());
    }

    #[test]
    fn allow_lists_parse_and_name_a_bad_word() {
        let set = parse_privileges("spin, cc-load").unwrap();
        assert_eq!(set.into_iter().collect::<Vec<_>>(), [Privilege::Spin, Privilege::CcLoad]);
        assert_eq!(parse_privileges("all").unwrap().len(), 5);
        let e = parse_privileges("spin,root").unwrap_err();
        assert!(e.to_string().contains("'root'"), "{e}");
    }
}
