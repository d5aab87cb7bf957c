//! Stable `conn` labels: each exported socket keeps the slot number it was first given for as
//! long as it lives and is exported, so a label's counters always belong to one socket.
//!
//! Slots are per `(selector, peer)` group. A socket seen for the first time gets the lowest
//! slot free in its group (sockets are assigned oldest first, by cookie); a slot is freed when
//! its socket is no longer exported (closed, or no longer matched). A freed slot may go to a
//! newer socket later: its counters then start again from that socket's values, which
//! Prometheus' `rate()`/`increase()` treat as a counter reset, exactly as for a restarted
//! process. The map holds only exported sockets, so it is bounded by the cap.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;

/// Slot numbers by group and socket cookie.
#[derive(Debug, Clone, Default)]
pub struct Slots {
    groups: HashMap<(usize, IpAddr), BTreeMap<u64, u32>>,
}

impl Slots {
    /// The slot of every socket of this scrape, given as `(selector, peer, cookie)` in the
    /// order returned; sockets not in `exported` lose their slots.
    pub fn assign(&mut self, exported: &[(usize, IpAddr, u64)]) -> Vec<u32> {
        let mut live: HashMap<(usize, IpAddr), BTreeSet<u64>> = HashMap::new();
        for &(sel, peer, cookie) in exported {
            live.entry((sel, peer)).or_default().insert(cookie);
        }
        self.groups.retain(|group, slots| {
            let alive = live.get(group);
            slots.retain(|cookie, _| alive.is_some_and(|a| a.contains(cookie)));
            !slots.is_empty()
        });
        // Newcomers in cookie order (oldest first), each taking the lowest free slot.
        let mut newcomers: Vec<(u64, usize, IpAddr)> = exported
            .iter()
            .filter(|(sel, peer, cookie)| {
                !self.groups.get(&(*sel, *peer)).is_some_and(|s| s.contains_key(cookie))
            })
            .map(|&(sel, peer, cookie)| (cookie, sel, peer))
            .collect();
        newcomers.sort();
        // Per group: the slots taken and a cursor that only moves up, so assigning k
        // newcomers to a group of m costs O((k + m) log m), not O(k m).
        let mut free: HashMap<(usize, IpAddr), (BTreeSet<u32>, u32)> = HashMap::new();
        for (cookie, sel, peer) in newcomers {
            let slots = self.groups.entry((sel, peer)).or_default();
            let (taken, cursor) =
                free.entry((sel, peer)).or_insert_with(|| (slots.values().copied().collect(), 0));
            while taken.contains(cursor) {
                *cursor += 1;
            }
            taken.insert(*cursor);
            slots.insert(cookie, *cursor);
        }
        exported.iter().map(|(sel, peer, cookie)| self.groups[&(*sel, *peer)][cookie]).collect()
    }

    /// Sockets holding a slot.
    pub fn len(&self) -> usize {
        self.groups.values().map(BTreeMap::len).sum()
    }

    /// Whether no socket holds a slot.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_keeps_its_slot_and_freed_slots_are_reused_lowest_first() {
        let peer: IpAddr = [10, 0, 0, 1].into();
        let other: IpAddr = [10, 0, 0, 2].into();
        let mut s = Slots::default();
        assert_eq!(s.assign(&[(0, peer, 30), (0, peer, 10), (0, peer, 20)]), [2, 0, 1]);
        // 10 closed: 20 and 30 keep 1 and 2; a newcomer takes the freed 0.
        assert_eq!(s.assign(&[(0, peer, 20), (0, peer, 30), (0, peer, 40)]), [1, 2, 0]);
        // Groups are independent.
        assert_eq!(s.assign(&[(0, peer, 20), (1, peer, 50), (0, other, 60)]), [1, 0, 0]);
        assert_eq!(s.len(), 3);
        assert_eq!(s.assign(&[]), Vec::<u32>::new());
        assert!(s.is_empty());
    }
}
