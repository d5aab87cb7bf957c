//! Finding lab runs that are alive right now, for `tcptail lab exec`.
//!
//! A lab run's namespaces are named `tcptail-<owner pid>-lab-<side>-<n>`
//! ([`super::CLIENT_ROLE`] and friends). A run is *running* while its owner pid is alive;
//! namespaces of dead owners are leftovers for `tcptail lab clean`, never exec targets.
//! Namespaces of other `tcptail-` users (tests of the netns crate, say) have other roles and
//! are ignored.

use std::process::Command;

use tcptail_netns::addr::{CLIENT_ADDR, ENV_CLIENT_ADDR, ENV_SERVER_ADDR, SERVER_ADDR};
use tcptail_netns::netns::{PREFIX, owner_pid};
use tcptail_netns::process::is_alive;

use super::{CLIENT_ROLE, LabError, ROUTER_ROLE, SERVER_ROLE};

/// A side of a lab run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The client namespace (10.77.0.1).
    Client,
    /// The server namespace (10.77.0.2).
    Server,
    /// The router between them (`--emulator netem` only).
    Router,
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Side::Client => "client",
            Side::Server => "server",
            Side::Router => "router",
        })
    }
}

/// One live lab run's namespaces.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunningLab {
    /// The pid of the `tcptail lab path` process that owns the run.
    pub owner: u32,
    /// Client namespace name.
    pub client: Option<String>,
    /// Server namespace name.
    pub server: Option<String>,
    /// Router namespace name.
    pub router: Option<String>,
}

impl RunningLab {
    /// The namespace of `side`, if the run has one.
    pub fn namespace(&self, side: Side) -> Option<&str> {
        match side {
            Side::Client => self.client.as_deref(),
            Side::Server => self.server.as_deref(),
            Side::Router => self.router.as_deref(),
        }
    }
}

/// `(owner, side)` of a lab namespace name; `None` for anything else.
pub(crate) fn parse_lab_name(name: &str) -> Option<(u32, Side)> {
    let owner = owner_pid(name)?;
    let rest = name.strip_prefix(PREFIX)?.split_once('-')?.1;
    let (role, n) = rest.rsplit_once('-')?;
    n.parse::<u64>().ok()?;
    let side = match role {
        CLIENT_ROLE => Side::Client,
        SERVER_ROLE => Side::Server,
        ROUTER_ROLE => Side::Router,
        _ => return None,
    };
    Some((owner, side))
}

/// Groups lab namespace names by owner (in `names` order of first appearance), keeping only
/// owners for which `alive` holds.
pub(crate) fn group_labs(names: &[String], alive: impl Fn(u32) -> bool) -> Vec<RunningLab> {
    let mut labs: Vec<RunningLab> = Vec::new();
    for name in names {
        let Some((owner, side)) = parse_lab_name(name) else {
            continue;
        };
        if !alive(owner) {
            continue;
        }
        let i = match labs.iter().position(|l| l.owner == owner) {
            Some(i) => i,
            None => {
                labs.push(RunningLab { owner, ..RunningLab::default() });
                labs.len() - 1
            }
        };
        let slot = match side {
            Side::Client => &mut labs[i].client,
            Side::Server => &mut labs[i].server,
            Side::Router => &mut labs[i].router,
        };
        *slot = Some(name.clone());
    }
    labs
}

/// Every lab run whose owner is alive.
pub fn running_labs() -> Result<Vec<RunningLab>, LabError> {
    let names = tcptail_netns::netns::list()?;
    let me = std::process::id();
    Ok(group_labs(&names, |pid| pid != me && is_alive(pid)))
}

/// The run `run` (an owner pid) names, or the only one running.
pub fn select_lab(labs: Vec<RunningLab>, run: Option<u32>) -> Result<RunningLab, LabError> {
    let owners = || labs.iter().map(|l| l.owner.to_string()).collect::<Vec<_>>().join(", ");
    match run {
        Some(pid) => {
            let list = owners();
            labs.into_iter().find(|l| l.owner == pid).ok_or_else(|| {
                LabError::NoRunningLab(if list.is_empty() {
                    format!("--run {pid}: no lab run is running")
                } else {
                    format!("--run {pid}: no running lab has that owner pid (running: {list})")
                })
            })
        }
        None if labs.len() == 1 => Ok(labs.into_iter().next().expect("one lab")),
        None if labs.is_empty() => Err(LabError::NoRunningLab(
            "no lab run is running (start one with `tcptail lab path ... -- COMMAND`)".to_owned(),
        )),
        None => Err(LabError::NoRunningLab(format!(
            "{} lab runs are running (owner pids {}); choose one with --run PID",
            labs.len(),
            owners()
        ))),
    }
}

/// `ip netns exec NS program args...` in `side` of `lab`, with `TCPTAIL_SERVER_ADDR` and
/// `TCPTAIL_CLIENT_ADDR` set. Stdio is inherited; the caller spawns and waits.
pub fn exec_command(lab: &RunningLab, side: Side, command: &[String]) -> Result<Command, LabError> {
    let ns = lab.namespace(side).ok_or_else(|| {
        LabError::NoRunningLab(format!(
            "lab run {} has no {side} namespace (a router exists only with --emulator netem)",
            lab.owner
        ))
    })?;
    let Some((program, args)) = command.split_first() else {
        return Err(LabError::flag("COMMAND", "missing: put the command after --"));
    };
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", ns, program])
        .args(args)
        .env(ENV_SERVER_ADDR, SERVER_ADDR.to_string())
        .env(ENV_CLIENT_ADDR, CLIENT_ADDR.to_string());
    Ok(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_only_lab_names() {
        assert_eq!(parse_lab_name("tcptail-42-lab-client-0"), Some((42, Side::Client)));
        assert_eq!(parse_lab_name("tcptail-42-lab-server-11"), Some((42, Side::Server)));
        assert_eq!(parse_lab_name("tcptail-42-lab-router-1"), Some((42, Side::Router)));
        for other in
            ["tcptail-42-client-0", "tcptail-42-lab-client", "tcptail-x-lab-client-0", "foo"]
        {
            assert_eq!(parse_lab_name(other), None, "{other}");
        }
    }

    #[test]
    fn groups_by_live_owner_and_selects() {
        let names: Vec<String> = [
            "tcptail-7-lab-client-0",
            "tcptail-7-lab-server-1",
            "tcptail-9-lab-client-0",
            "tcptail-9-lab-router-1",
            "tcptail-9-lab-server-2",
            "tcptail-8-lab-client-0",
            "tcptail-7-other-3",
        ]
        .map(String::from)
        .to_vec();
        let labs = group_labs(&names, |pid| pid != 8);
        assert_eq!(labs.len(), 2);
        assert_eq!(labs[0].server.as_deref(), Some("tcptail-7-lab-server-1"));
        assert_eq!(labs[1].router.as_deref(), Some("tcptail-9-lab-router-1"));

        let err = select_lab(labs.clone(), None).unwrap_err().to_string();
        assert!(err.contains("--run PID") && err.contains("7, 9"), "{err}");
        assert_eq!(select_lab(labs.clone(), Some(9)).unwrap().owner, 9);
        assert!(
            select_lab(labs.clone(), Some(8)).unwrap_err().to_string().contains("running: 7, 9")
        );
        assert_eq!(select_lab(labs[..1].to_vec(), None).unwrap().owner, 7);
        assert!(select_lab(Vec::new(), None).unwrap_err().to_string().contains("no lab run"));
    }

    #[test]
    fn exec_sets_addresses() {
        let lab = RunningLab {
            owner: 7,
            client: Some("c".into()),
            server: Some("s".into()),
            router: None,
        };
        let cmd = exec_command(&lab, Side::Server, &["iperf3".into(), "-s".into()]).unwrap();
        let args: Vec<_> = cmd.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(args, ["netns", "exec", "s", "iperf3", "-s"]);
        assert!(
            cmd.get_envs().any(|(k, v)| k == ENV_SERVER_ADDR && v == Some("10.77.0.2".as_ref()))
        );
        assert!(exec_command(&lab, Side::Router, &["true".into()]).is_err());
    }
}
