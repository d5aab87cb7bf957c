//! The audit: pure functions from a [`HostProfile`] and a [`Snapshot`] to [`AuditFinding`]s.
//!
//! One finding per check, each with a status (OK / WARN / FAIL / N/A), the current value, the
//! recommended value, a one-line rationale and, where there is some, the evidence (the config
//! file and line, the interfaces, the counts). The checks cover the profile's settings, its
//! known-bad entries, congestion control availability and pacing ("BBR without fq: internal
//! pacing"), the seed's six production failure modes (`fm1`..`fm6`: the host-visible ones with
//! evidence, the per-socket ones pointing to `tcptail bench` and the `tcptail-sock` checks),
//! CPU governor, irqbalance, isolated CPUs, transparent huge pages and NIC coalescing.
//!
//! Every audit reports the whole read-list, whatever the profile asks: the settings in
//! [`READ_LIST`] (congestion control, default qdisc, busy polling, NUMA balancing, buffer
//! limits), CPU governor, irqbalance, isolated CPUs, transparent huge pages and each
//! interface's offloads and coalescing. A row the profile has no recommendation for is
//! informational: OK with the current value, or N/A when it cannot be read.
//!
//! Invariants: no check reads the host or the clock; inside a child network namespace or a
//! container every host-scope setting is N/A, never WARN or FAIL: "host scope: not changeable
//! here" with the value when it can be read (a child namespace still sees `rmem_max` and
//! `kernel.numa_balancing`, read-only or the host's), "host scope: not visible here" when it
//! cannot; a missing key or an unavailable tool is N/A, never FAIL.

use serde::Serialize;

use crate::host::Snapshot;
use crate::profile::{HostProfile, KnownBad, Scope, Setting, Severity, Want};

/// The outcome of one check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub enum Status {
    /// As recommended.
    #[serde(rename = "OK")]
    Ok,
    /// Not applicable or not visible here.
    #[serde(rename = "N/A")]
    NotApplicable,
    /// Deviates; worth a look.
    #[serde(rename = "WARN")]
    Warn,
    /// Wrong; fails the audit (exit code 1).
    #[serde(rename = "FAIL")]
    Fail,
}

impl Status {
    /// `OK`, `WARN`, `FAIL` or `N/A`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::NotApplicable => "N/A",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        }
    }

    fn of(severity: Severity) -> Self {
        match severity {
            Severity::Warn => Status::Warn,
            Severity::Fail => Status::Fail,
        }
    }
}

/// One row of the audit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AuditFinding {
    /// Stable identifier, e.g. `sysctl:net.ipv4.tcp_frto`, `known-bad:...`, `fm5-time-wait`.
    pub id: String,
    /// The outcome.
    pub status: Status,
    /// What the host has.
    pub current: String,
    /// What the profile recommends.
    pub recommended: String,
    /// One line: why.
    pub rationale: String,
    /// Supporting facts (file:line, interfaces, counts), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub evidence: Option<String>,
    /// The document the recommendation comes from.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub source: String,
}

fn finding(id: impl Into<String>, status: Status, current: impl Into<String>) -> AuditFinding {
    AuditFinding {
        id: id.into(),
        status,
        current: current.into(),
        recommended: String::new(),
        rationale: String::new(),
        evidence: None,
        source: String::new(),
    }
}

impl AuditFinding {
    fn rec(mut self, r: impl Into<String>) -> Self {
        self.recommended = r.into();
        self
    }
    fn why(mut self, r: impl Into<String>) -> Self {
        self.rationale = r.into();
        self
    }
    fn evidence(mut self, e: impl Into<String>) -> Self {
        self.evidence = Some(e.into());
        self
    }
    fn source(mut self, s: impl Into<String>) -> Self {
        self.source = s.into();
        self
    }
}

/// The whole audit.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The profile checked against.
    pub profile: String,
    /// Whether we ran in a child network namespace.
    pub child_netns: bool,
    /// Why we think we run in a container, if we do.
    pub container: Option<String>,
    /// Whether we ran in a PID namespace of our own (processes outside it are invisible).
    pub own_pid_namespace: bool,
    /// One finding per check.
    pub findings: Vec<AuditFinding>,
}

impl Report {
    /// 0 without FAILs, 1 with.
    pub fn exit_code(&self) -> u8 {
        u8::from(self.findings.iter().any(|f| f.status == Status::Fail))
    }

    /// How many findings have `status`.
    pub fn count(&self, status: Status) -> usize {
        self.findings.iter().filter(|f| f.status == status).count()
    }

    /// The finding with `id`.
    pub fn get(&self, id: &str) -> Option<&AuditFinding> {
        self.findings.iter().find(|f| f.id == id)
    }
}

/// Evidence prefix of a host-scope row whose value cannot be read here.
pub const HOST_NOT_VISIBLE: &str = "host scope: not visible here";
/// Evidence prefix of a host-scope row whose value is read but is not ours to change here.
pub const HOST_NOT_CHANGEABLE: &str = "host scope: not changeable here";
const PER_SOCKET: &str = "per socket: not visible host-wide";
/// The kernel's default `rmem_max`/`wmem_max` (208 KiB).
const DEFAULT_MEM_MAX: u64 = 212_992;

/// Runs every check of `profile` against `snap`.
pub fn audit(profile: &HostProfile, snap: &Snapshot) -> Report {
    let mut findings: Vec<AuditFinding> = Vec::new();
    findings.extend(profile.settings.iter().map(|s| check_setting(s, snap)));
    findings.extend(read_list(profile, snap));
    findings.extend(profile.known_bad.iter().map(|k| check_known_bad(k, snap)));
    findings.extend(check_congestion(profile, snap));
    findings.extend(failure_modes(profile, snap));
    findings.extend(host_checks(profile, snap));
    Report {
        profile: profile.name.clone(),
        child_netns: snap.child_netns,
        container: snap.container.clone(),
        own_pid_namespace: snap.own_pid_namespace,
        findings,
    }
}

/// One profile setting against its current value.
pub fn check_setting(s: &Setting, snap: &Snapshot) -> AuditFinding {
    let id = format!("sysctl:{}", s.key);
    let current = snap.sysctl(&s.key);
    let f = |status, cur: &str| {
        finding(id.clone(), status, cur).rec(s.want.to_string()).why(&s.rationale).source(&s.source)
    };
    if s.scope == Scope::Host
        && let Some(hidden) = host_scope_evidence(snap, current, Some(&s.want))
    {
        return f(Status::NotApplicable, current.unwrap_or("-")).evidence(hidden);
    }
    let Some(cur) = current else {
        return f(Status::NotApplicable, "(no such key)")
            .evidence("not present on this kernel or in this namespace");
    };
    // A default congestion control this child namespace may not select is the host's call,
    // as `tune` treats it.
    if s.key == crate::cc::DEFAULT
        && let Some(name) = s.want.target(Some(cur))
        && crate::cc::assess(&name, &snap.cc) == crate::cc::Assessment::RestrictedHere
    {
        return f(Status::NotApplicable, cur).evidence(crate::cc::restricted_here(&name, &snap.cc));
    }
    match s.want.satisfied_by(cur) {
        Some(true) => f(Status::Ok, cur),
        Some(false) => f(Status::of(s.severity), cur),
        None => f(Status::of(s.severity), cur).evidence("current value is not a number"),
    }
}

/// The N/A evidence of a host-scope row when we do not run on the host itself (`None` on the
/// host): "not changeable here" with whether the value read meets `want`, or "not visible
/// here" when there is no value.
fn host_scope_evidence(
    snap: &Snapshot,
    current: Option<&str>,
    want: Option<&Want>,
) -> Option<String> {
    let place = snap.confinement()?;
    Some(match (current, want) {
        (None, _) => format!("{HOST_NOT_VISIBLE} ({place})"),
        (Some(_), None) => {
            format!("{HOST_NOT_CHANGEABLE} ({place}); the host's value, for information")
        }
        (Some(cur), Some(want)) => {
            let verdict = match want.satisfied_by(cur) {
                Some(true) => "meets the recommendation",
                Some(false) => "misses the recommendation: change it on the host",
                None => "is not a number",
            };
            format!("{HOST_NOT_CHANGEABLE} ({place}); the host's value {verdict}")
        }
    })
}

/// Settings every audit reads and reports, with what each one does: informational rows
/// (`sysctl:KEY`) for those the profile makes no recommendation about.
pub const READ_LIST: [(&str, &str); 9] = [
    ("net.ipv4.tcp_congestion_control", "default congestion control of new sockets"),
    ("net.core.default_qdisc", "qdisc new interfaces get; fq paces BBR flows"),
    ("net.core.busy_read", "busy-poll microseconds on blocking reads (0: off)"),
    ("net.core.busy_poll", "busy-poll microseconds in poll/select/epoll (0: off)"),
    ("kernel.numa_balancing", "automatic NUMA page migration (faults under a busy thread)"),
    ("net.core.rmem_max", "ceiling of an explicit SO_RCVBUF"),
    ("net.core.wmem_max", "ceiling of an explicit SO_SNDBUF"),
    ("net.ipv4.tcp_rmem", "receive buffer autotuning: min, default, max"),
    ("net.ipv4.tcp_wmem", "send buffer autotuning: min, default, max"),
];

/// Informational rows for the [`READ_LIST`] settings `profile` does not recommend a value for.
pub fn read_list(profile: &HostProfile, snap: &Snapshot) -> Vec<AuditFinding> {
    READ_LIST
        .iter()
        .filter(|(key, _)| profile.setting(key).is_none())
        .map(|(key, what)| {
            let current = snap.sysctl(key);
            let base = finding(format!("sysctl:{key}"), Status::Ok, current.unwrap_or("-"))
                .rec(format!("(no recommendation in {})", profile.name))
                .why(*what);
            let host_scope = crate::profile::inherent_scope(key) == Some(Scope::Host);
            match current {
                _ if host_scope && snap.host_hidden() => {
                    let ev = host_scope_evidence(snap, current, None).unwrap_or_default();
                    AuditFinding { status: Status::NotApplicable, ..base }.evidence(ev)
                }
                None => AuditFinding {
                    status: Status::NotApplicable,
                    current: "(no such key)".into(),
                    ..base
                }
                .evidence("not present on this kernel or in this namespace"),
                Some(_) => base,
            }
        })
        .collect()
}

/// One known-bad entry against the live value and the sysctl configuration files.
pub fn check_known_bad(k: &KnownBad, snap: &Snapshot) -> AuditFinding {
    let id = match &k.value {
        Some(v) => format!("known-bad:{}={}", k.key, v.replace(' ', ",")),
        None => format!("known-bad:{}", k.key),
    };
    let current = snap.sysctl(&k.key).unwrap_or("(no such key)").to_owned();
    let rec = match &k.value {
        Some(v) => format!("not {v}"),
        None => "not set".to_owned(),
    };
    let base = |status| {
        finding(id.clone(), status, current.clone())
            .rec(rec.clone())
            .why(&k.reason)
            .source(&k.source)
    };
    if let Some(other) = &k.unless_set
        && snap.configured(other).next().is_some()
    {
        return base(Status::Ok).evidence(format!("{other} is configured too"));
    }
    let mut evidence: Vec<String> = snap
        .configured(&k.key)
        .filter(|c| k.value.as_ref().is_none_or(|v| *v == c.value))
        .map(|c| format!("{}:{}: {} = {}", c.file, c.line, c.key, c.value))
        .collect();
    if let Some(v) = &k.value
        && snap.sysctl(&k.key) == Some(v.as_str())
    {
        evidence.push(format!("live /proc/sys value is {v}"));
    }
    if evidence.is_empty() {
        base(Status::Ok)
    } else {
        base(Status::of(k.severity)).evidence(evidence.join("; "))
    }
}

fn words(s: Option<&str>) -> Vec<&str> {
    s.map(|s| s.split_whitespace().collect()).unwrap_or_default()
}

/// Congestion control availability and BBR pacing.
pub fn check_congestion(profile: &HostProfile, snap: &Snapshot) -> Vec<AuditFinding> {
    let mut out = Vec::new();
    let current = snap.sysctl("net.ipv4.tcp_congestion_control");
    let available = words(snap.sysctl("net.ipv4.tcp_available_congestion_control"));
    let allowed = words(snap.sysctl("net.ipv4.tcp_allowed_congestion_control"));
    let wanted = profile.setting("net.ipv4.tcp_congestion_control").and_then(|s| match &s.want {
        Want::Exact(v) => Some(v.as_str()),
        _ => None,
    });
    let f = finding("cc-available", Status::Ok, available.join(" "))
        .rec(wanted.map_or("(no profile choice)".to_owned(), |w| format!("{w} available")))
        .why("a congestion control must be loaded before it can be the default")
        .evidence(format!(
            "default {}; allowed without CAP_NET_ADMIN: {}",
            current.unwrap_or("-"),
            allowed.join(" ")
        ));
    out.push(match wanted {
        _ if available.is_empty() => AuditFinding { status: Status::NotApplicable, ..f },
        // Kernel modules are the host's: a container cannot load one.
        Some(want) if !available.contains(&want) => match snap.container.as_deref() {
            Some(c) => AuditFinding { status: Status::NotApplicable, ..f }.evidence(format!(
                "{HOST_NOT_CHANGEABLE} (container: {c}); {want} is not loaded: modprobe \
                 tcp_{want} on the host"
            )),
            None => AuditFinding { status: Status::Fail, ..f }
                .evidence(format!("{want} is not loaded: modprobe tcp_{want}")),
        },
        _ => f,
    });
    let pacing = finding("bbr-pacing", Status::Ok, current.unwrap_or("-"))
        .rec("fq root qdisc when BBR is the default")
        .why("BBR without fq: internal pacing (TCP-layer hrtimers, more CPU, burstier)")
        .source("seed 002 (Prerequisites); seed 004 (fq/pacing)");
    if current != Some("bbr") {
        out.push(pacing.evidence("default congestion control is not BBR"));
        return out;
    }
    let default_qdisc = snap.sysctl("net.core.default_qdisc");
    let Some(qdiscs) = &snap.qdiscs else {
        let status = match default_qdisc {
            Some("fq") => Status::Ok,
            Some(_) => Status::Warn,
            None => Status::NotApplicable,
        };
        let ev = format!(
            "interface qdiscs not readable; default_qdisc = {}",
            default_qdisc.unwrap_or("(host scope: not visible here)")
        );
        out.push(AuditFinding { status, ..pacing }.evidence(ev));
        return out;
    };
    let unpaced: Vec<String> = qdiscs
        .iter()
        .filter(|(dev, kind)| *dev != "lo" && !is_fq(kind, default_qdisc))
        .map(|(dev, kind)| format!("{dev}: {kind}"))
        .collect();
    if unpaced.is_empty() {
        out.push(pacing.evidence("every interface has an fq root qdisc"));
    } else {
        out.push(
            AuditFinding { status: Status::Warn, ..pacing }
                .evidence(format!("BBR without fq: internal pacing on {}", unpaced.join(", "))),
        );
    }
    out
}

fn is_fq(kind: &str, default_qdisc: Option<&str>) -> bool {
    // `mq` has one child qdisc per hardware queue, created from default_qdisc.
    kind == "fq" || (kind == "mq" && default_qdisc == Some("fq"))
}

/// The six failure modes of seed 000 ("How This Breaks in Production").
pub fn failure_modes(profile: &HostProfile, snap: &Snapshot) -> Vec<AuditFinding> {
    let src = |n: u8| format!("seed 000 (failure mode {n})");
    let cc = snap.sysctl("net.ipv4.tcp_congestion_control").unwrap_or("-");
    let wants_bbr = profile
        .setting("net.ipv4.tcp_congestion_control")
        .is_some_and(|s| s.want == Want::Exact("bbr".into()));
    let fm1_status = if cc == "bbr" && !wants_bbr { Status::Warn } else { Status::Ok };
    let fm1 = finding("fm1-bbr-probe-in-burst", fm1_status, cc)
        .rec(if wants_bbr { "bbr" } else { "cubic for request/response" })
        .why("BBR's PROBE_BW pacing-gain cycle can land on an order burst (bimodal p99)")
        .evidence(format!(
            "default congestion control is {cc}; a socket's own TCP_CONGESTION is {PER_SOCKET}: \
             compare with `tcptail bench local --cc cubic|bbr`"
        ))
        .source(src(1));
    let fm2 = finding("fm2-nagle-on-reconnect", Status::NotApplicable, "-")
        .rec("TCP_NODELAY on every new socket")
        .why("a re-created socket has Nagle on again")
        .evidence(format!(
            "{PER_SOCKET}: tcptail_sock::apply_profile reports it per socket; `tcptail bench` \
             measures it"
        ))
        .source(src(2));
    let fm3 = finding("fm3-quickack-disarms", Status::NotApplicable, "-")
        .rec("re-arm TCP_QUICKACK after every recv()")
        .why("TCP_QUICKACK silently resets; delayed ACKs creep back into p95/p99")
        .evidence(format!("{PER_SOCKET}: tcptail_sock's recv helpers re-arm it; `tcptail bench`"))
        .source(src(3));
    let fm4 = check_rmem_cap(snap).source(src(4));
    let fm5 = check_time_wait(snap).source(src(5));
    let ssai = snap.sysctl("net.ipv4.tcp_slow_start_after_idle");
    let severity = profile
        .setting("net.ipv4.tcp_slow_start_after_idle")
        .map_or(Severity::Warn, |s| s.severity);
    let fm6_status = match ssai {
        None => Status::NotApplicable,
        Some("0") => Status::Ok,
        Some(_) => Status::of(severity),
    };
    let fm6 = finding("fm6-slow-start-after-idle", fm6_status, ssai.unwrap_or("(no such key)"))
        .rec("0")
        .why("after an idle period cwnd restarts from initcwnd; the first burst is rate-limited")
        .evidence("net.ipv4.tcp_slow_start_after_idle")
        .source(src(6));
    vec![fm1, fm2, fm3, fm4, fm5, fm6]
}

fn check_rmem_cap(snap: &Snapshot) -> AuditFinding {
    let max = snap.sysctl("net.core.rmem_max");
    let base = finding("fm4-rcvbuf-silently-capped", Status::Ok, max.unwrap_or("-"))
        .rec(format!(
            "> {DEFAULT_MEM_MAX} and >= every SO_RCVBUF requested; verify with getsockopt"
        ))
        .why("SO_RCVBUF above net.core.rmem_max is capped without an error");
    if let Some(hidden) = host_scope_evidence(snap, max, None) {
        // The value still caps every SO_RCVBUF here: say what it means, change it on the host.
        let effect = match max.and_then(|m| m.parse::<u64>().ok()) {
            Some(m) => format!("; SO_RCVBUF above {m} bytes is silently capped"),
            None => String::new(),
        };
        return AuditFinding { status: Status::NotApplicable, ..base }
            .evidence(format!("{hidden}{effect}"));
    }
    match max.and_then(|m| m.parse::<u64>().ok()) {
        None => AuditFinding { status: Status::NotApplicable, ..base },
        Some(m) if m <= DEFAULT_MEM_MAX => AuditFinding { status: Status::Warn, ..base }.evidence(
            format!("rmem_max = {m}: any SO_RCVBUF above {m} bytes is silently capped"),
        ),
        Some(m) => base.evidence(format!(
            "SO_RCVBUF requests up to {m} bytes are honoured; tcptail_sock::apply_profile reads back"
        )),
    }
}

fn check_time_wait(snap: &Snapshot) -> AuditFinding {
    let range = words(snap.sysctl("net.ipv4.ip_local_port_range"));
    let ports = match range.as_slice() {
        [lo, hi] => match (lo.parse::<u64>(), hi.parse::<u64>()) {
            (Ok(lo), Ok(hi)) if hi >= lo => Some(hi - lo + 1),
            _ => None,
        },
        _ => None,
    };
    let reuse = snap.sysctl("net.ipv4.tcp_tw_reuse").unwrap_or("-");
    let base = |status, current: String| {
        finding("fm5-time-wait-exhaustion", status, current)
            .rec("TIME_WAIT well below the ephemeral port range; tcp_tw_reuse = 1")
            .why("a reconnect storm fails with EADDRINUSE once TIME_WAIT holds every port")
    };
    let (Some(tw), Some(ports)) = (snap.time_wait, ports) else {
        return base(Status::NotApplicable, "-".into())
            .evidence("/proc/net/sockstat or ip_local_port_range not readable");
    };
    let share = tw as f64 / ports as f64;
    let status = if share >= 0.5 {
        Status::Fail
    } else if share >= 0.1 || (ports < 30_000 && reuse != "1") {
        Status::Warn
    } else {
        Status::Ok
    };
    let mut evidence = format!(
        "{:.1}% of ephemeral ports ({}) in TIME_WAIT; tcp_tw_reuse = {reuse}",
        share * 100.0,
        range.join("-")
    );
    if ports < 30_000 && reuse != "1" {
        evidence.push_str(&format!(
            "; a storm of {ports} reconnects within 60 s exhausts the range (widen it, tw_reuse = 1)"
        ));
    }
    base(status, format!("{tw} TIME_WAIT / {ports} ports")).evidence(evidence)
}

/// The audit as a text table: status, check, current, recommended, rationale; evidence below.
pub fn render_table(report: &Report) -> String {
    let mut out = format!("tcptail audit: profile {}", report.profile);
    if report.child_netns {
        out.push_str(" (child network namespace: host-scope settings not changeable here)");
    }
    if let Some(c) = &report.container {
        out.push_str(&format!(" (container: {c}; host-scope settings not changeable here)"));
    }
    out.push('\n');
    let w_id = report.findings.iter().map(|f| f.id.len()).max().unwrap_or(5).max(5);
    let clip = |s: &str, n: usize| -> String {
        if s.chars().count() > n {
            let mut t: String = s.chars().take(n - 1).collect();
            t.push('~');
            t
        } else {
            s.to_owned()
        }
    };
    out.push_str(&format!(
        "{:<6} {:<w_id$} {:<24} {:<24} {}\n",
        "STATUS", "CHECK", "CURRENT", "RECOMMENDED", "RATIONALE"
    ));
    for f in &report.findings {
        out.push_str(&format!(
            "{:<6} {:<w_id$} {:<24} {:<24} {}\n",
            f.status.as_str(),
            f.id,
            clip(&f.current, 24),
            clip(&f.recommended, 24),
            f.rationale
        ));
        if let Some(e) = &f.evidence
            && f.status != Status::Ok
        {
            out.push_str(&format!("{:<6} {:<w_id$} evidence: {e}\n", "", ""));
        }
    }
    out.push_str(&format!(
        "{} OK, {} WARN, {} FAIL, {} N/A\n",
        report.count(Status::Ok),
        report.count(Status::Warn),
        report.count(Status::Fail),
        report.count(Status::NotApplicable)
    ));
    out
}

mod hardware;
pub use hardware::host_checks;

#[cfg(test)]
mod tests;
