//! The tune plan in other forms: the plain `sysctl.d` file, and an Ansible task list that
//! deploys the profile to a fleet, loads it and verifies every value (the fleet rollout of
//! seed 002, with the verification it lacked for every key, not just the congestion control).
//!
//! The Ansible tasks come from the profile, never from the host they were generated on: an
//! exact value is written as it is; a bound (`at_least`/`at_most`) is resolved on each fleet
//! host at run time, which keeps its own value when it already meets the bound and gets the
//! bound otherwise (the other fields of a multi-value key, e.g. `tcp_rmem`'s min and default,
//! stay that host's own). Host-scope keys are included: the fleet's hosts are hosts, whatever
//! this machine is.
//!
//! Pure string rendering: never touches the host. YAML scalars are always double-quoted
//! (JSON string escaping is valid YAML), so keys and values cannot break the document.

use crate::profile::{HostProfile, Want};
use crate::tune::{Plan, file_name, render_file};

/// The plain `sysctl.d` file (`--emit sysctl`).
pub fn sysctl(plan: &Plan) -> String {
    render_file(plan)
}

fn q(s: &str) -> String {
    serde_json::to_string(s).expect("strings serialise")
}

/// The variable the read task registers.
const CURRENT: &str = "tcptail_sysctl_current";

/// The Jinja expression for a bounded key: the host's current value (result `index` of the
/// read task) with field `field` raised to at least (`max`) or lowered to at most (`min`)
/// `bound`.
fn bounded_value(index: usize, field: usize, bound: u64, pick: &str) -> String {
    format!(
        "{{% set f = {CURRENT}.results[{index}].stdout.split() %}}{{{{ (f[:{field}] + \
         [([f[{field}] | int, {bound}] | {pick}) | string] + f[{}:]) | join(' ') }}}}",
        field + 1
    )
}

/// An Ansible task list (`--emit ansible`): include it from a play with `become: true`.
pub fn ansible(profile: &HostProfile) -> String {
    let dest = format!("/etc/sysctl.d/{}", file_name(&profile.name));
    let mut out = format!(
        "# tcptail tune --profile {name} --emit ansible\n# Include from a play with become: \
         true.\n# Values are the profile's, not those of the host this was generated on: exact \
         values\n# are written as they are; a bound (at least / at most) is resolved on each \
         host, which\n# keeps its own value when it meets the bound and gets the bound \
         otherwise.\n",
        name = profile.name
    );
    let bounded: Vec<&str> = profile
        .settings
        .iter()
        .filter(|s| !matches!(s.want, Want::Exact(_)))
        .map(|s| s.key.as_str())
        .collect();
    if !bounded.is_empty() {
        out.push_str(&format!(
            "- name: {}\n  ansible.builtin.command:\n    argv: [\"sysctl\", \"-n\", \"{{{{ item }}}}\"]\n  register: {CURRENT}\n  changed_when: false\n  loop:\n",
            q("Read the current values of the profile's bounded keys")
        ));
        for key in &bounded {
            out.push_str(&format!("    - {}\n", q(key)));
        }
    }
    out.push_str(&format!(
        "- name: {}\n  ansible.builtin.copy:\n    dest: {}\n    owner: root\n    group: root\n    mode: \"0644\"\n    content: |\n",
        q(&format!("Deploy tcptail sysctl profile {}", profile.name)),
        q(&dest)
    ));
    out.push_str(&format!(
        "      # Written by tcptail tune --profile {} --emit ansible. Bounded keys were \
         resolved on this host.\n",
        profile.name
    ));
    let mut verify = Vec::new();
    let mut index = 0;
    for s in &profile.settings {
        let (value, bound_note, item) = match &s.want {
            Want::Exact(v) => {
                (v.clone(), String::new(), format!("{{ key: {}, value: {} }}", q(&s.key), q(v)))
            }
            Want::AtLeast { field, value } | Want::AtMost { field, value } => {
                let (pick, word, op) = match s.want {
                    Want::AtLeast { .. } => ("max", "at least", "at_least"),
                    _ => ("min", "at most", "at_most"),
                };
                let expr = bounded_value(index, *field, *value, pick);
                index += 1;
                let note = format!(" ({word} {value} in field {field}, kept if the host's is)");
                let item = format!("{{ key: {}, field: {field}, {op}: {value} }}", q(&s.key));
                (expr, note, item)
            }
        };
        out.push_str(&format!("      # {}{bound_note} [{}]\n", s.rationale, s.source));
        out.push_str(&format!("      {} = {value}\n", s.key));
        verify.push(item);
    }
    out.push_str("  register: tcptail_sysctl_file\n");
    out.push_str(&format!(
        "- name: {}\n  ansible.builtin.command:\n    argv: [\"sysctl\", \"-p\", {}]\n  when: tcptail_sysctl_file.changed\n",
        q(&format!("Load {dest}")),
        q(&dest)
    ));
    out.push_str(&format!(
        "- name: {}\n  ansible.builtin.command:\n    argv: [\"sysctl\", \"-n\", \"{{{{ item.key }}}}\"]\n  register: tcptail_sysctl_verify\n  changed_when: false\n  failed_when: >-\n    {}\n  loop:\n",
        q("Verify every value by re-reading /proc/sys"),
        VERIFY_FAILED_WHEN
    ));
    for item in &verify {
        out.push_str(&format!("    - {item}\n"));
    }
    if verify.is_empty() {
        out.push_str("    []\n");
    }
    out
}

/// The verify task's `failed_when`: an exact value must read back equal (whitespace
/// normalised); a bounded field must meet its bound.
pub const VERIFY_FAILED_WHEN: &str = "(item.value is defined and (tcptail_sysctl_verify.stdout.split() | join(' ')) != item.value) or (item.at_least is defined and (tcptail_sysctl_verify.stdout.split()[item.field] | int) < item.at_least) or (item.at_most is defined and (tcptail_sysctl_verify.stdout.split()[item.field] | int) > item.at_most)";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Scope, load};
    use crate::tune::Entry;

    fn plan() -> Plan {
        Plan {
            profile: "trading-latency".into(),
            entries: vec![Entry {
                key: "net.ipv4.tcp_rmem".into(),
                scope: Scope::Netns,
                current: Some("4096 131072 6291456".into()),
                value: "4096 131072 33554432".into(),
                changes: true,
                rationale: "cap \"quoted\"".into(),
                source: "seed 000".into(),
            }],
            skipped: vec![],
            side_effects: vec![],
        }
    }

    #[test]
    fn ansible_uses_the_profile_not_this_host() {
        let y = ansible(&load("trading-latency").unwrap());
        assert!(y.contains("/etc/sysctl.d/99-tcptail-trading-latency.conf"));
        assert!(y.contains(r#"- { key: "net.ipv4.tcp_slow_start_after_idle", value: "0" }"#));
        assert!(y.contains(r#"- { key: "net.ipv4.tcp_rmem", field: 2, at_least: 33554432 }"#));
        assert!(y.contains(r#"- { key: "net.ipv4.tcp_keepalive_time", field: 0, at_most: 30 }"#));
        // Host-scope keys are for the fleet too.
        assert!(y.contains("      kernel.numa_balancing = 0\n"), "{y}");
        // No value of the machine that generated it: bounded keys are Jinja expressions.
        let rmem = y.lines().find(|l| l.starts_with("      net.ipv4.tcp_rmem = ")).unwrap();
        assert!(rmem.contains("tcptail_sysctl_current.results[0]"), "{rmem}");
        assert!(rmem.contains("| max"), "{rmem}");
    }

    #[test]
    fn sysctl_has_one_comment_per_key() {
        let s = sysctl(&plan());
        let lines: Vec<&str> = s.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[1].starts_with("# cap"));
        assert_eq!(lines[2], "net.ipv4.tcp_rmem = 4096 131072 33554432");
    }
}
