//! A namespace's network statistics counters, as `nstat -az` names them (`TcpExtTCPTimeouts`,
//! `TcpRetransSegs`): read from `/proc/thread-self/net/{netstat,snmp}` on a thread inside the
//! namespace.
//!
//! `/proc/net` is a link to `/proc/self/net`, which shows the namespace of the process's main
//! thread, not of the thread reading it; `thread-self` is the one that follows a thread that
//! entered another namespace with `setns`, which is what [`Netns::run`] does.

use std::collections::BTreeMap;
use std::fs;

use crate::{Error, Netns};

/// The files read, in order.
const FILES: [&str; 2] = ["/proc/thread-self/net/netstat", "/proc/thread-self/net/snmp"];

/// Counter values by `nstat` name: the group prefix joined to the field (`TcpExtTCPTimeouts`,
/// `TcpRetransSegs`, `IpExtInCEPkts`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters(pub BTreeMap<String, u64>);

impl Counters {
    /// The counter `name`, or `None` when this kernel has no such counter.
    pub fn get(&self, name: &str) -> Option<u64> {
        self.0.get(name).copied()
    }

    /// How much each counter grew since `earlier` (counters absent from either are left out;
    /// a counter that went down, which a namespace's counters never do, counts as 0).
    pub fn since(&self, earlier: &Counters) -> Counters {
        Counters(
            self.0
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.saturating_sub(*earlier.0.get(k)?))))
                .collect(),
        )
    }
}

/// Parses `/proc/net/netstat` or `/proc/net/snmp` text: pairs of lines, a header
/// (`TcpExt: SyncookiesSent ...`) then its values (`TcpExt: 0 ...`). Signed fields (snmp's
/// `Tcp: MaxConn -1`) and anything that is not a non-negative integer are left out.
pub fn parse(text: &str) -> Counters {
    let mut out = BTreeMap::new();
    let mut lines = text.lines();
    while let (Some(names), Some(values)) = (lines.next(), lines.next()) {
        let (Some((group, names)), Some((group2, values))) =
            (names.split_once(':'), values.split_once(':'))
        else {
            continue;
        };
        if group != group2 {
            continue;
        }
        for (name, value) in names.split_whitespace().zip(values.split_whitespace()) {
            if let Ok(v) = value.parse::<u64>() {
                out.insert(format!("{group}{name}"), v);
            }
        }
    }
    Counters(out)
}

impl Netns {
    /// Every `TcpExt`, `IpExt`, `MPTcpExt`, `Ip`, `Icmp`, `Tcp` and `Udp` counter of this
    /// namespace, as `nstat -az` names them.
    pub fn nstat(&self) -> Result<Counters, Error> {
        let texts = self.run(|| FILES.map(fs::read_to_string))?;
        let mut all = Counters::default();
        for (text, path) in texts.into_iter().zip(FILES) {
            let text = text.map_err(|source| Error::Sysctl {
                key: "nstat".to_owned(),
                netns: self.name().to_owned(),
                op: "read",
                path: path.into(),
                source,
            })?;
            all.0.extend(parse(&text).0);
        }
        Ok(all)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_of_lines_become_prefixed_names() {
        let text = "TcpExt: SyncookiesSent TCPTimeouts TCPSackFailures\n\
                    TcpExt: 0 17 3\n\
                    IpExt: InNoRoutes InCEPkts\n\
                    IpExt: 1 42\n";
        let c = parse(text);
        assert_eq!(c.get("TcpExtTCPTimeouts"), Some(17));
        assert_eq!(c.get("TcpExtTCPSackFailures"), Some(3));
        assert_eq!(c.get("IpExtInCEPkts"), Some(42));
        assert_eq!(c.get("TcpExtNope"), None);
        let snmp = "Tcp: RtoAlgorithm MaxConn RetransSegs\nTcp: 1 -1 9\n";
        let s = parse(snmp);
        assert_eq!(s.get("TcpRetransSegs"), Some(9));
        assert_eq!(s.get("TcpMaxConn"), None);
    }

    #[test]
    fn since_subtracts_counter_by_counter() {
        let a = parse("TcpExt: A B\nTcpExt: 1 5\n");
        let b = parse("TcpExt: A B C\nTcpExt: 4 5 7\n");
        let d = b.since(&a);
        assert_eq!(d.get("TcpExtA"), Some(3));
        assert_eq!(d.get("TcpExtB"), Some(0));
        assert_eq!(d.get("TcpExtC"), None);
    }

    #[test]
    fn this_hosts_counters_parse() {
        // The caller's own namespace: the format this kernel writes.
        let text = fs::read_to_string(FILES[0]).expect("netstat");
        let c = parse(&text);
        assert!(c.get("TcpExtTCPTimeouts").is_some(), "{c:?}");
    }
}
