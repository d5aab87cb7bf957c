//! The tune plan in other forms: the plain `sysctl.d` file, and an Ansible task list that
//! deploys it, loads it and verifies every value (the fleet rollout of seed 002, with the
//! verification it lacked for every key, not just the congestion control).
//!
//! Pure string rendering: never touches the host. YAML scalars are always double-quoted
//! (JSON string escaping is valid YAML), so keys and values cannot break the document.

use crate::tune::{Plan, file_name, render_file};

/// The plain `sysctl.d` file (`--emit sysctl`).
pub fn sysctl(plan: &Plan) -> String {
    render_file(plan)
}

fn q(s: &str) -> String {
    serde_json::to_string(s).expect("strings serialise")
}

/// An Ansible task list (`--emit ansible`): include it from a play with `become: true`.
pub fn ansible(plan: &Plan) -> String {
    let dest = format!("/etc/sysctl.d/{}", file_name(&plan.profile));
    let mut out = format!(
        "# tcptail tune --profile {} --emit ansible\n# Include from a play with become: true.\n",
        plan.profile
    );
    out.push_str(&format!(
        "- name: {}\n  ansible.builtin.copy:\n    dest: {}\n    owner: root\n    group: root\n    mode: \"0644\"\n    content: |\n",
        q(&format!("Deploy tcptail sysctl profile {}", plan.profile)),
        q(&dest)
    ));
    for line in render_file(plan).lines() {
        out.push_str(&format!("      {line}\n"));
    }
    out.push_str("  register: tcptail_sysctl_file\n");
    out.push_str(&format!(
        "- name: {}\n  ansible.builtin.command:\n    argv: [\"sysctl\", \"-p\", {}]\n  when: tcptail_sysctl_file.changed\n",
        q(&format!("Load {dest}")),
        q(&dest)
    ));
    out.push_str(&format!(
        "- name: {}\n  ansible.builtin.command:\n    argv: [\"sysctl\", \"-n\", \"{{{{ item.key }}}}\"]\n  register: tcptail_sysctl_verify\n  changed_when: false\n  failed_when: \"(tcptail_sysctl_verify.stdout.split() | join(' ')) != item.value\"\n  loop:\n",
        q("Verify every value by re-reading /proc/sys")
    ));
    for e in &plan.entries {
        out.push_str(&format!("    - {{ key: {}, value: {} }}\n", q(&e.key), q(&e.value)));
    }
    if plan.entries.is_empty() {
        out.push_str("    []\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::Scope;
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
        }
    }

    #[test]
    fn ansible_lists_every_key_and_the_file() {
        let y = ansible(&plan());
        assert!(y.contains("/etc/sysctl.d/99-tcptail-trading-latency.conf"));
        assert!(y.contains(r#"- { key: "net.ipv4.tcp_rmem", value: "4096 131072 33554432" }"#));
        assert!(y.contains("      net.ipv4.tcp_rmem = 4096 131072 33554432"));
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
