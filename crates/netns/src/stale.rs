//! Removing what crashed runs left behind (`tcptail lab clean`).
//!
//! A run that was SIGKILLed (or lost power) cannot clean up after itself. Its namespaces are
//! still mounted under `/run/netns` as `tcptail-<pid>-<role>-<n>`, possibly with processes
//! inside. [`clean_stale`] removes, for every such namespace whose owner pid no longer exists
//! ([`Scope::DeadOwners`]), the processes inside it and then the namespace, so two concurrent
//! runs never remove each other's namespaces. [`Scope::All`] (`tcptail lab clean --all`)
//! removes every `tcptail-` namespace regardless of owner.
//!
//! Links: the lab creates its links inside its namespaces, where they die with the namespace.
//! As a safety net, links named `tcptail-*` in the caller's namespace whose `ifalias` names a
//! dead owner (the lab sets the alias on every link it creates) are removed too; a
//! `tcptail-*` link without such an alias is left alone unless the scope is `All`.
//!
//! Limits: a dead owner's pid that has been reused by an unrelated process looks alive, so
//! its namespaces are kept (the safe direction; `--all` removes them). Owners are pids of the
//! current pid namespace.

use std::process::Command;

use crate::netns::{self, PREFIX, owner_pid, run_cmd};
use crate::process::is_alive;
use crate::{Error, Netns};

/// Which leftovers to remove.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Only those whose owning pid is dead.
    DeadOwners,
    /// Every `tcptail-` namespace and link, including live runs' (`lab clean --all`).
    All,
}

/// What [`clean_stale`] did.
#[derive(Debug, Default)]
pub struct StaleReport {
    /// Namespaces removed.
    pub namespaces: Vec<String>,
    /// Links removed.
    pub links: Vec<String>,
    /// `tcptail-` namespaces and links kept because their owner is alive (or unknown).
    pub kept: Vec<String>,
    /// Removals that failed; the rest were still attempted.
    pub errors: Vec<Error>,
}

impl StaleReport {
    /// One line naming what was removed (`None` when nothing was), for a lab command to print
    /// before it starts: "removed what dead lab runs left: namespaces a, b; links c".
    pub fn removed_line(&self) -> Option<String> {
        let mut parts = Vec::new();
        if !self.namespaces.is_empty() {
            parts.push(format!("namespaces {}", self.namespaces.join(", ")));
        }
        if !self.links.is_empty() {
            parts.push(format!("links {}", self.links.join(", ")));
        }
        (!parts.is_empty())
            .then(|| format!("removed what dead lab runs left: {}", parts.join("; ")))
    }
}

/// Whether a resource with this owner is removed under `scope`.
pub fn should_remove(owner: Option<u32>, scope: Scope) -> bool {
    match scope {
        Scope::All => true,
        Scope::DeadOwners => owner.is_some_and(|pid| pid != std::process::id() && !is_alive(pid)),
    }
}

/// Removes stale namespaces (with their processes) and stale links in the caller's namespace;
/// see the [module docs](self).
pub fn clean_stale(scope: Scope) -> Result<StaleReport, Error> {
    let mut report = StaleReport::default();
    for name in netns::list()? {
        if !should_remove(owner_pid(&name), scope) {
            report.kept.push(name);
            continue;
        }
        match netns::destroy(&name) {
            Ok(()) => report.namespaces.push(name),
            Err(e) => report.errors.push(e),
        }
    }
    clean_links(None, scope, &mut report)?;
    Ok(report)
}

/// Removes stale `tcptail-*` links inside `ns` (the same rule [`clean_stale`] applies to the
/// caller's namespace).
pub fn clean_stale_links_in(ns: &Netns, scope: Scope) -> Result<StaleReport, Error> {
    let mut report = StaleReport::default();
    clean_links(Some(ns.name()), scope, &mut report)?;
    Ok(report)
}

fn ip_in(ns: Option<&str>) -> Command {
    let mut cmd = Command::new("ip");
    if let Some(ns) = ns {
        cmd.args(["-n", ns]);
    }
    cmd
}

/// `(ifname, ifalias)` of every link whose name starts with [`PREFIX`].
fn prefixed_links(ns: Option<&str>) -> Result<Vec<(String, Option<String>)>, Error> {
    let json = run_cmd(ip_in(ns).args(["-j", "link", "show"]), None)?;
    Ok(parse_links(&json))
}

/// Parses `ip -j link show` output into prefixed `(ifname, ifalias)` pairs.
pub fn parse_links(json: &str) -> Vec<(String, Option<String>)> {
    let Ok(serde_json::Value::Array(links)) = serde_json::from_str(json) else {
        return Vec::new();
    };
    links
        .iter()
        .filter_map(|l| {
            let name = l.get("ifname")?.as_str()?;
            let alias = l.get("ifalias").and_then(|a| a.as_str()).map(str::to_owned);
            name.starts_with(PREFIX).then(|| (name.to_owned(), alias))
        })
        .collect()
}

fn clean_links(ns: Option<&str>, scope: Scope, report: &mut StaleReport) -> Result<(), Error> {
    let before = prefixed_links(ns)?;
    let mut failed = Vec::new();
    for (name, alias) in &before {
        if should_remove(alias.as_deref().and_then(owner_pid), scope) {
            // Deleting one end of a veth pair also removes the other, so a failure here may
            // only mean "already gone": decided below from what is left.
            if let Err(e) = run_cmd(ip_in(ns).args(["link", "del", name]), None) {
                failed.push((name.clone(), e));
            }
        }
    }
    let after = prefixed_links(ns)?;
    for (name, _) in before {
        if !after.iter().any(|(n, _)| *n == name) {
            report.links.push(name);
        } else if let Some(i) = failed.iter().position(|(n, _)| *n == name) {
            report.errors.push(failed.swap_remove(i).1);
        } else {
            report.kept.push(name);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn removal_rule() {
        assert!(should_remove(None, Scope::All));
        assert!(!should_remove(None, Scope::DeadOwners));
        assert!(!should_remove(Some(std::process::id()), Scope::DeadOwners));
        assert!(should_remove(Some(std::process::id()), Scope::All));
        // pid 1 always exists.
        assert!(!should_remove(Some(1), Scope::DeadOwners));
    }

    #[test]
    fn the_removed_line_names_everything_once_or_is_absent() {
        assert_eq!(StaleReport::default().removed_line(), None);
        let kept_only = StaleReport { kept: vec!["tcptail-1-a-0".into()], ..Default::default() };
        assert_eq!(kept_only.removed_line(), None);
        let report = StaleReport {
            namespaces: vec!["tcptail-9-client-0".into(), "tcptail-9-server-1".into()],
            links: vec!["tcptail-v0".into()],
            ..Default::default()
        };
        assert_eq!(
            report.removed_line().unwrap(),
            "removed what dead lab runs left: namespaces tcptail-9-client-0, \
             tcptail-9-server-1; links tcptail-v0"
        );
    }

    #[test]
    fn parses_prefixed_links_with_alias() {
        let json = r#"[{"ifname":"lo"},{"ifname":"tcptail-y"},
            {"ifname":"tcptail-x","ifalias":"tcptail-1-foo-2"}]"#;
        assert_eq!(
            parse_links(json),
            vec![
                ("tcptail-y".to_owned(), None),
                ("tcptail-x".to_owned(), Some("tcptail-1-foo-2".to_owned()))
            ]
        );
    }
}
