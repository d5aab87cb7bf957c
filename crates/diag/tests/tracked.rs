//! The tracked-sockets recorder against the sock_diag recorder, in a throwaway network
//! namespace (needs root): both poll the same scripted workload at the same moments
//! (connections open before and after the start, a transfer, idle polls, a stalled sender
//! whose limited time grows with the clock, closes by FIN and by RST), and their recordings
//! must hold the same connections with the same values at every poll, the same change
//! records, and each close summarised once. A second sock_diag recorder polls right after the
//! tracked one, so the tracked poll is bracketed: a packet or timer that lands between two
//! readers (a delayed ACK of the stalled pair) moves a connection during the poll, and then
//! the tracked recording must equal the reading before it or the one after it; with nothing
//! in between the two sock_diag readings agree and the comparison is exact.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use tcptail_diag::bpf::tracked::TrackedDumper;
use tcptail_diag::closed::DestroyListener;
use tcptail_diag::record::fields::{VOLATILE_MASK, field_index};
use tcptail_diag::record::{Event, Recorder, RecorderOptions, Replay, Values};
use tcptail_diag::{DumpRequest, Dumper, wire};
use tcptail_netns::{Cleanup, Netns};

mod common;
use common::{Pair, pair, transfer};

/// Fields whose value grows with the clock while a chrono or an RTO episode runs: the two
/// recorders poll microseconds apart, so a jiffy may fall between them.
fn clock_mask() -> u128 {
    ["busy_time_us", "rwnd_limited_us", "sndbuf_limited_us", "total_rto_time_ms"]
        .iter()
        .map(|n| 1u128 << field_index(n).unwrap())
        .sum()
}

/// What a recording says, poll by poll.
#[derive(Debug, Default)]
struct Seen {
    /// Per poll: each connection's values (volatile and clock fields masked).
    polls: Vec<BTreeMap<u64, Vec<Option<u64>>>>,
    /// Per poll: the connections with a change record.
    changes: Vec<BTreeSet<u64>>,
    /// Closes summarised: cookie, final state, bytes acked and received.
    closed: Vec<(u64, &'static str, Option<u64>, Option<u64>)>,
    gone: BTreeSet<u64>,
}

fn masked(v: &Values) -> Vec<Option<u64>> {
    let skip = VOLATILE_MASK | clock_mask();
    (0..tcptail_diag::record::FIELDS.len())
        .filter(|i| skip >> i & 1 == 0)
        .map(|i| v.get(i))
        .collect()
}

fn read(path: &Path) -> Seen {
    let mut replay = Replay::open(path).unwrap();
    let mut seen = Seen::default();
    let mut changes = BTreeSet::new();
    // At a tick the replayed table holds what the polls before it recorded.
    let snapshot = |replay: &Replay, seen: &mut Seen, changes: &mut BTreeSet<u64>| {
        seen.changes.push(std::mem::take(changes));
        seen.polls.push(replay.connections().map(|t| (t.id.cookie, masked(&t.values))).collect());
    };
    while let Some(e) = replay.next_event() {
        match e.unwrap() {
            Event::Tick => snapshot(&replay, &mut seen, &mut changes),
            Event::Change { cookie, mask } if mask & !VOLATILE_MASK != 0 => {
                changes.insert(cookie);
            }
            Event::Gone(t) => {
                seen.gone.insert(t.id.cookie);
            }
            Event::Closed(c) => {
                let c = *c;
                seen.closed.push((c.cookie, c.final_state, c.bytes_acked, c.bytes_received))
            }
            _ => {}
        }
    }
    snapshot(&replay, &mut seen, &mut changes);
    assert_eq!(replay.mismatches, 0, "full snapshots agree with the changes in {path:?}");
    seen
}

#[test]
fn the_tracked_recorder_records_what_the_sock_diag_recorder_records() {
    tcptail_netns::ensure_root().expect("the tracked recorder test needs root (CI runs as root)");
    let cleanup = Cleanup::new();
    let ns = Netns::create(&cleanup, "tracked").unwrap();
    ns.ip(["link", "set", "lo", "up"]).unwrap();
    let listener = ns.run(|| TcpListener::bind("127.0.0.1:0").unwrap()).unwrap();
    let mut pairs: Vec<Pair> = ns.run(|| (0..2).map(|_| pair(&listener)).collect()).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let req = DumpRequest { states: wire::ESTABLISHED, ..DumpRequest::default() };
    let open = |name: &str| {
        let mut rec = Recorder::create(&dir.path().join(name), RecorderOptions::default()).unwrap();
        rec.listen_for_closes(DestroyListener::in_netns(ns.name()).unwrap(), None);
        rec
    };
    let (mut by_diag, mut by_tracking) = (open("diag"), open("tracked"));
    let mut by_diag_after = open("diag_after");
    let mut dumper = Dumper::in_netns(ns.name()).unwrap();
    let mut dumper_after = Dumper::in_netns(ns.name()).unwrap();
    let mut tracked = TrackedDumper::new(&req, Some(ns.name())).expect("root with BPF");
    let mut step = |settle: u64| {
        std::thread::sleep(Duration::from_millis(settle));
        by_diag.poll(&mut dumper, &req).unwrap();
        by_tracking.poll_tracked(&mut tracked).unwrap();
        by_diag_after.poll(&mut dumper_after, &req).unwrap();
    };
    step(0);
    // Two more after the start: the tracepoint tracks them.
    pairs.extend((0..2).map(|_| ns.run(|| pair(&listener)).unwrap()));
    step(20);
    transfer(&mut pairs[0], 100_000);
    transfer(&mut pairs[2], 300_000);
    step(30);
    step(20);
    step(20);
    // A stalled sender: the receiver does not read, the limited time grows with the clock.
    pairs[3].client.set_nonblocking(true).unwrap();
    let mut sent = 0;
    loop {
        match pairs[3].client.write(&[1u8; 65536]) {
            Ok(n) => sent += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => break,
            Err(e) => panic!("{e}"),
        }
    }
    step(20);
    step(20);
    step(20);
    let mut got = vec![0u8; sent];
    pairs[3].server.read_exact(&mut got).unwrap();
    step(40);
    // Closed by FIN, client first; then by RST.
    let p = pairs.remove(0);
    drop(p.client);
    step(20);
    drop(p.server);
    step(20);
    let mut p = pairs.remove(0);
    socket2::SockRef::from(&p.client).set_linger(Some(Duration::ZERO)).unwrap();
    drop(p.client);
    assert!(p.server.read(&mut [0u8; 16]).is_err(), "the server sees the reset");
    drop(p.server);
    step(20);
    step(20);
    step(20);
    drop(pairs);
    drop(listener);
    step(20);
    step(20);
    step(20);
    let (a, b) = (by_diag.finish().unwrap(), by_tracking.finish().unwrap());
    assert_eq!((a.lost_closes, b.lost_closes), (0, 0));
    assert_eq!(by_diag_after.finish().unwrap().lost_closes, 0);
    let (a, b) = (read(&dir.path().join("diag")), read(&dir.path().join("tracked")));
    let after = read(&dir.path().join("diag_after"));
    assert_eq!(a.polls.len(), b.polls.len(), "polls");
    assert_eq!(a.polls.len(), after.polls.len(), "polls");
    assert!(a.polls.iter().map(BTreeMap::len).max() == Some(8), "eight ends: {:?}", a.polls);
    for (i, ((pa, pb), (ca, cb))) in
        a.polls.iter().zip(&b.polls).zip(a.changes.iter().zip(&b.changes)).enumerate()
    {
        let (pc, cc) = (&after.polls[i], &after.changes[i]);
        // A connection that left is gone one poll later from the tracked walk (two walks
        // must miss it) unless its destroy notification came first: compare the ones both
        // hold. A connection that moved during the poll may show either bracketing reading.
        for (cookie, values) in pa {
            if let Some(other) = pb.get(cookie)
                && pc.get(cookie) != Some(other)
            {
                assert_eq!(values, other, "poll {i}: connection {cookie}'s values");
            }
        }
        assert!(pa.keys().all(|c| pb.contains_key(c)), "poll {i}: {pa:?} vs {pb:?}");
        if cc != cb {
            assert_eq!(ca, cb, "poll {i}: the connections with a change record");
        }
    }
    assert!(
        a.changes.iter().filter(|c| !c.is_empty()).count() >= 4,
        "the workload changed connections at several polls: {:?}",
        a.changes
    );
    assert_eq!(a.gone, b.gone, "the same connections ended");
    let (mut ca, mut cb) = (a.closed, b.closed);
    ca.sort();
    cb.sort();
    assert_eq!(ca.len(), 8, "every end closed once: {ca:?}");
    assert_eq!(ca, cb, "the same closes, summarised once each");
    drop(ns);
}
