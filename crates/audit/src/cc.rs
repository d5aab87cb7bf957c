//! Congestion-control settings judged from the kernel's own lists, never by a trial write.
//!
//! Setting `net.ipv4.tcp_congestion_control` (the namespace's default algorithm) works in the
//! kernel like this (`net/ipv4/tcp_cong.c`, `tcp_set_default_congestion_control`):
//!
//! - the algorithm must be registered (`tcp_available_congestion_control`), or be a module
//!   `tcp_NAME` that the write loads (`request_module`, root only);
//! - in a **child** network namespace it must also be non-restricted, i.e. listed in the
//!   host-wide `tcp_allowed_congestion_control`; otherwise the write fails with EPERM;
//! - in the **initial** namespace root may choose any available algorithm, and the kernel then
//!   marks it non-restricted: it joins `tcp_allowed_congestion_control` by itself.
//!
//! So a trial write in a throwaway namespace answers the wrong question for the host: on a
//! host whose allowed list is "reno bbr", cubic is refused there (EPERM) although applying it
//! on the host works. [`Facts`] holds the lists (and the loadable modules); [`assess`] says
//! what a write of the default would do; [`check`] refuses what cannot work, before anything
//! is written; [`side_effects`] names the lists the kernel will change by itself, so that the
//! dry run shows them and `tune --revert` restores the allowed list exactly.
//!
//! Decision: tune never writes `tcp_allowed_congestion_control` on its own. The kernel already
//! allows the initial namespace's default in every namespace when it is set (at apply and at
//! boot, from the same `sysctl.d` line), so writing the list would only freeze this host's
//! other entries into the profile's file. The change the kernel makes is recorded and undone by
//! revert. Inside a child namespace (a container) the list is read-only and the host's: a
//! restricted default is skipped there with the reason, as host-scope keys are.

use serde::Serialize;

use crate::Error;
use crate::profile::normalize;
use crate::view::HostView;

/// The namespace's default congestion control.
pub const DEFAULT: &str = "net.ipv4.tcp_congestion_control";
/// Registered algorithms (read-only).
pub const AVAILABLE: &str = "net.ipv4.tcp_available_congestion_control";
/// Non-restricted algorithms (host-wide; read-only in a child namespace).
pub const ALLOWED: &str = "net.ipv4.tcp_allowed_congestion_control";

/// What decides whether an algorithm can become a namespace's default.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Facts {
    /// `tcp_available_congestion_control`, in the kernel's order.
    pub available: Vec<String>,
    /// `tcp_allowed_congestion_control`.
    pub allowed: Vec<String>,
    /// Whether we run in a child network namespace.
    pub child_netns: bool,
    /// Algorithms that are not registered but whose module `tcp_NAME` is installed for the
    /// running kernel and may be loaded; `None` when modules cannot be loaded here (no module
    /// support, `kernel.modules_disabled = 1`, or no `lib/modules/RELEASE/modules.dep`).
    pub loadable: Option<Vec<String>>,
}

impl Facts {
    /// Reads the lists and the loadable modules under `view`.
    pub fn read(view: &HostView) -> Facts {
        let words = |key: &str| -> Vec<String> {
            view.sysctl(key)
                .map(|v| v.split_whitespace().map(str::to_owned).collect())
                .unwrap_or_default()
        };
        let available = words(AVAILABLE);
        let loadable = loadable_modules(view)
            .map(|names| names.into_iter().filter(|n| !available.contains(n)).collect());
        Facts { available, allowed: words(ALLOWED), child_netns: view.child_netns(), loadable }
    }
}

impl Facts {
    /// Registered algorithms that are not allowed: a child namespace cannot make them its
    /// default (cubic on a host whose allowed list is "reno bbr").
    pub fn restricted(&self) -> Vec<&str> {
        self.available.iter().filter(|a| !self.allowed.contains(a)).map(String::as_str).collect()
    }
}

/// Algorithms with a `tcp_NAME` module listed in `lib/modules/RELEASE/modules.dep` (the
/// modules `request_module("tcp_NAME")` can load); `None` when modules cannot be loaded.
pub fn loadable_modules(view: &HostView) -> Option<Vec<String>> {
    // kernel.modprobe exists only with CONFIG_MODULES.
    view.sysctl("kernel.modprobe").filter(|p| !p.is_empty())?;
    if view.sysctl("kernel.modules_disabled").as_deref() == Some("1") {
        return None;
    }
    let release = view.sysctl("kernel.osrelease")?;
    let deps = view.read(&format!("lib/modules/{release}/modules.dep"))?;
    let mut names: Vec<String> = deps
        .lines()
        .filter_map(|l| {
            let file = l.split(':').next()?.rsplit('/').next()?;
            let module = file.split(".ko").next()?;
            Some(module.strip_prefix("tcp_")?.to_owned())
        })
        .collect();
    names.sort();
    names.dedup();
    Some(names)
}

/// What writing `name` as the default would do here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Assessment {
    /// Registered and allowed here: nothing else changes.
    Allowed,
    /// Registered but restricted, in the initial namespace: the write works and the kernel adds
    /// it to the allowed list.
    RestrictedInInitialNetns,
    /// Not registered; the write loads module `tcp_NAME` (initial namespace).
    LoadsModule,
    /// Restricted (or only loadable) in a child namespace: the kernel answers EPERM.
    RestrictedHere,
    /// Neither registered nor loadable.
    Unavailable,
}

/// What writing `name` as the default would do, given `facts`.
pub fn assess(name: &str, facts: &Facts) -> Assessment {
    let available = facts.available.iter().any(|a| a == name);
    let loadable = facts.loadable.as_ref().is_some_and(|l| l.iter().any(|a| a == name));
    let allowed = facts.allowed.iter().any(|a| a == name);
    match (available, loadable, facts.child_netns) {
        (true, _, _) if allowed => Assessment::Allowed,
        (true, _, false) => Assessment::RestrictedInInitialNetns,
        (false, true, false) => Assessment::LoadsModule,
        (true, _, true) | (false, true, true) => Assessment::RestrictedHere,
        (false, false, _) => Assessment::Unavailable,
    }
}

/// Why a restricted default is not changeable in this child namespace (the plan's skip
/// reason).
pub fn restricted_here(name: &str, facts: &Facts) -> String {
    format!(
        "restricted here: {name} is not in tcp_allowed_congestion_control ({}), and only the \
         initial network namespace may make a restricted algorithm its default (the kernel \
         answers EPERM); apply it on the host, which also allows it in every namespace",
        quoted(&facts.allowed)
    )
}

fn quoted(list: &[String]) -> String {
    format!("{:?}", list.join(" "))
}

/// Refuses, before anything is written, a default congestion control the kernel cannot take
/// here, and an allowed list that names an algorithm that is not registered or leaves out the
/// profile's own default. `entries` are `(key, value)` of the keys to write.
pub fn check<'a>(
    entries: impl IntoIterator<Item = (&'a str, &'a str)> + Clone,
    facts: &Facts,
) -> Result<(), Error> {
    let refuse = |key: &str, value: &str, problem: String| Error::CongestionControl {
        key: key.to_owned(),
        value: value.to_owned(),
        problem,
    };
    let default = entries.clone().into_iter().find(|(k, _)| *k == DEFAULT).map(|(_, v)| v);
    if let Some(name) = default {
        match assess(name, facts) {
            Assessment::Unavailable => {
                let modules = match &facts.loadable {
                    Some(_) => format!("no module tcp_{name} is installed for this kernel"),
                    None => "modules cannot be loaded here".to_owned(),
                };
                return Err(refuse(
                    DEFAULT,
                    name,
                    format!(
                        "{name} is not available: tcp_available_congestion_control is {} and \
                         {modules}; choose one of those, or install and load tcp_{name} first",
                        quoted(&facts.available)
                    ),
                ));
            }
            Assessment::RestrictedHere => {
                return Err(refuse(DEFAULT, name, restricted_here(name, facts)));
            }
            _ => {}
        }
    }
    if let Some((_, list)) = entries.into_iter().find(|(k, _)| *k == ALLOWED) {
        let names: Vec<&str> = list.split_whitespace().collect();
        if let Some(missing) = names.iter().find(|n| !facts.available.iter().any(|a| a == *n)) {
            return Err(refuse(
                ALLOWED,
                list,
                format!(
                    "{missing} is not registered (tcp_available_congestion_control is {}): the \
                     kernel refuses the whole list",
                    quoted(&facts.available)
                ),
            ));
        }
        if let Some(name) = default.filter(|d| !names.contains(d)) {
            return Err(refuse(
                ALLOWED,
                list,
                format!(
                    "leaves out the profile's default {name}, which the kernel adds back when it \
                     sets the default: add {name} to the list"
                ),
            ));
        }
    }
    Ok(())
}

/// A change the kernel makes by itself when tune writes a key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SideEffect {
    /// The key that changes.
    pub key: String,
    /// Its value now.
    pub before: String,
    /// Its value after the write (predicted in a plan; as read back after an apply).
    pub after: String,
    /// Why it changes, and whether revert restores it.
    pub why: String,
}

/// The lists the kernel changes by itself when `name` becomes the default here: the allowed
/// list (restored by revert) and, when a module is loaded, the available list (not restored:
/// revert does not unload modules).
pub fn side_effects(name: &str, facts: &Facts) -> Vec<SideEffect> {
    let joined = |l: &[String]| normalize(&l.join(" "));
    let mut available = facts.available.clone();
    let loads = assess(name, facts) == Assessment::LoadsModule;
    let mut out = Vec::new();
    if loads {
        // A loaded module registers at the end of the kernel's list.
        available.push(name.to_owned());
        out.push(SideEffect {
            key: AVAILABLE.to_owned(),
            before: joined(&facts.available),
            after: joined(&available),
            why: format!(
                "the kernel loads module tcp_{name}; revert does not unload it (`modprobe -r \
                 tcp_{name}` does, once no socket uses it)"
            ),
        });
    }
    if loads || assess(name, facts) == Assessment::RestrictedInInitialNetns {
        // The allowed list prints in the kernel's registration order, as the available one.
        let after: Vec<String> =
            available.iter().filter(|a| *a == name || facts.allowed.contains(a)).cloned().collect();
        out.push(SideEffect {
            key: ALLOWED.to_owned(),
            before: joined(&facts.allowed),
            after: joined(&after),
            why: "the kernel allows the initial namespace's default in every namespace; revert \
                  restores the list"
                .to_owned(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::FakeRoot;

    fn facts(available: &str, allowed: &str, child_netns: bool) -> Facts {
        let words = |s: &str| s.split_whitespace().map(str::to_owned).collect();
        Facts { available: words(available), allowed: words(allowed), child_netns, loadable: None }
    }

    #[test]
    fn this_hosts_lists_allow_cubic_on_the_host_only() {
        let host = facts("reno bbr cubic", "reno bbr", false);
        assert_eq!(host.restricted(), ["cubic"]);
        assert_eq!(assess("cubic", &host), Assessment::RestrictedInInitialNetns);
        assert_eq!(assess("bbr", &host), Assessment::Allowed);
        check([(DEFAULT, "cubic")], &host).unwrap();
        let effects = side_effects("cubic", &host);
        assert_eq!(effects.len(), 1, "{effects:?}");
        assert_eq!(
            (effects[0].key.as_str(), effects[0].before.as_str(), effects[0].after.as_str()),
            (ALLOWED, "reno bbr", "reno bbr cubic")
        );
        assert!(side_effects("bbr", &host).is_empty());
        let child = Facts { child_netns: true, ..host };
        assert_eq!(assess("cubic", &child), Assessment::RestrictedHere);
        let err = check([(DEFAULT, "cubic")], &child).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("net.ipv4.tcp_congestion_control = cubic: restricted here"),
            "{msg}"
        );
        assert!(msg.contains("(\"reno bbr\")") && msg.contains("EPERM"), "{msg}");
        check([(DEFAULT, "reno")], &child).unwrap();
    }

    #[test]
    fn unavailable_algorithms_and_modules() {
        let host = facts("reno cubic", "reno cubic", false);
        let err = check([(DEFAULT, "bbr")], &host).unwrap_err().to_string();
        assert!(err.contains("bbr is not available"), "{err}");
        assert!(err.contains("modules cannot be loaded here"), "{err}");
        let with_module = Facts { loadable: Some(vec!["bbr".into()]), ..host.clone() };
        assert_eq!(assess("bbr", &with_module), Assessment::LoadsModule);
        check([(DEFAULT, "bbr")], &with_module).unwrap();
        let effects = side_effects("bbr", &with_module);
        let keys: Vec<(&str, &str)> =
            effects.iter().map(|e| (e.key.as_str(), e.after.as_str())).collect();
        assert_eq!(keys, [(AVAILABLE, "reno cubic bbr"), (ALLOWED, "reno cubic bbr")]);
        assert!(effects[0].why.contains("does not unload"), "{effects:?}");
        let no_module = Facts { loadable: Some(vec![]), ..host.clone() };
        let err = check([(DEFAULT, "bbr")], &no_module).unwrap_err().to_string();
        assert!(err.contains("no module tcp_bbr is installed"), "{err}");
        // Loadable but in a child namespace: a newly loaded algorithm is restricted.
        let child = Facts { child_netns: true, ..with_module };
        assert_eq!(assess("bbr", &child), Assessment::RestrictedHere);
    }

    #[test]
    fn an_allowed_list_is_checked_against_the_registered_algorithms() {
        let host = facts("reno bbr cubic", "reno bbr", false);
        check([(ALLOWED, "reno cubic")], &host).unwrap();
        let err = check([(ALLOWED, "reno vegas")], &host).unwrap_err().to_string();
        assert!(err.contains("vegas is not registered"), "{err}");
        let err = check([(DEFAULT, "cubic"), (ALLOWED, "reno bbr")], &host).unwrap_err();
        assert!(err.to_string().contains("leaves out the profile's default cubic"), "{err}");
        check([(DEFAULT, "cubic"), (ALLOWED, "reno bbr cubic")], &host).unwrap();
    }

    #[test]
    fn facts_from_a_fixture_tree() {
        let dir = tempfile::tempdir().unwrap();
        let f = FakeRoot::linux_6_18(dir.path());
        let view = HostView::at(f.path());
        assert_eq!(loadable_modules(&view), None, "the fixture has no module support");
        f.sysctl("kernel.modprobe", "/sbin/modprobe").sysctl("kernel.osrelease", "6.18.0-test");
        f.file(
            "lib/modules/6.18.0-test/modules.dep",
            "kernel/net/ipv4/tcp_htcp.ko.zst:\nkernel/net/ipv4/tcp_bbr.ko.xz:\nkernel/fs/x.ko:\n",
        );
        assert_eq!(loadable_modules(&view), Some(vec!["bbr".into(), "htcp".into()]));
        let facts = Facts::read(&view);
        assert_eq!(facts.loadable, Some(vec!["htcp".to_owned()]), "bbr is already registered");
        assert!(!facts.child_netns);
        f.sysctl("kernel.modules_disabled", "1");
        assert_eq!(loadable_modules(&view), None);
        f.child_netns();
        assert!(Facts::read(&view).child_netns);
    }
}
