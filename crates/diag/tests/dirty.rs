//! The tracked poll's dirty marks (`tcptail_diag::bpf::dirty`) on real connections in a
//! throwaway network namespace (needs root). Each scripted change on an idle connection
//! (data either way, a shutdown, a close, a reset) must be read by the next *dirty* poll,
//! which visits only marked sockets; a second tracked poll with no hooks attached must miss
//! the data (so the first assertion tests the hooks, not a sweep or a leftover mark); once
//! the connections are idle again the dirty map is empty; a change no hook sees (SO_SNDBUF)
//! is left to the sweep, as `dirty::UNHOOKED` says; and the recorder, with a sweep period far
//! beyond the test, records a transfer at the poll after it.

use std::collections::{BTreeSet, HashMap};
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener};
use std::time::Duration;

use tcptail_diag::bpf::tracked::{Dirty, Polled, TrackedDumper};
use tcptail_diag::record::fields::VOLATILE_MASK;
use tcptail_diag::record::{Event, Recorder, RecorderOptions, Replay};
use tcptail_diag::{DumpRequest, wire};
use tcptail_netns::{Cleanup, Netns};

mod common;
use common::{Pair, pair, transfer};

/// What one dirty poll read: the cookies it wrote in full, and those it reported gone.
#[derive(Debug, Default)]
struct Read1 {
    changed: BTreeSet<u64>,
    gone: BTreeSet<u64>,
}

fn dirty_poll(t: &mut TrackedDumper) -> Read1 {
    let mut r = Read1::default();
    t.poll_dirty(|d| match d {
        Dirty::Socket(s) => {
            r.changed.insert(s.id.cookie);
        }
        Dirty::Gone(c) => {
            r.gone.insert(c);
        }
    })
    .expect("dirty poll");
    r
}

/// Dirty polls until one reads nothing and leaves no socket marked.
fn settle(t: &mut TrackedDumper) {
    for _ in 0..100 {
        std::thread::sleep(Duration::from_millis(10));
        let r = dirty_poll(t);
        if r.changed.is_empty() && r.gone.is_empty() && t.marked().unwrap().is_empty() {
            return;
        }
    }
    panic!("idle connections settle within a second: marked {:?}", t.marked().unwrap());
}

/// Cookie of each tracked end by (local port, remote port), from a sweep that writes all.
fn cookies(t: &mut TrackedDumper) -> HashMap<(u16, u16), u64> {
    let mut by_ports = HashMap::new();
    t.poll(true, |p| {
        if let Polled::Socket(s) = p {
            by_ports.insert((s.id.sport, s.id.dport), s.id.cookie);
        }
    })
    .unwrap();
    by_ports
}

/// The cookies of a pair's client and server ends.
fn ends(by_ports: &HashMap<(u16, u16), u64>, p: &Pair) -> (u64, u64) {
    let c = p.client.local_addr().unwrap().port();
    let s = p.server.local_addr().unwrap().port();
    (by_ports[&(c, s)], by_ports[&(s, c)])
}

#[test]
fn every_change_of_an_idle_connection_is_read_by_the_next_dirty_poll() {
    tcptail_netns::ensure_root().expect("the dirty-mark test needs root (CI runs as root)");
    let cleanup = Cleanup::new();
    let ns = Netns::create(&cleanup, "dirty").unwrap();
    ns.ip(["link", "set", "lo", "up"]).unwrap();
    let listener = ns.run(|| TcpListener::bind("127.0.0.1:0").unwrap()).unwrap();
    let mut pairs: Vec<Pair> = ns.run(|| (0..5).map(|_| pair(&listener)).collect()).unwrap();
    let req = DumpRequest { states: wire::ESTABLISHED, ..DumpRequest::default() };
    let mut hooked = TrackedDumper::new(&req, Some(ns.name())).expect("root with BPF");
    let mut blind = TrackedDumper::with_hooks(&req, Some(ns.name()), &[]).unwrap();
    let by_ports = cookies(&mut hooked);
    assert_eq!(by_ports.len(), 10, "both ends of five connections: {by_ports:?}");
    cookies(&mut blind);
    settle(&mut hooked);
    settle(&mut blind);
    assert_eq!(hooked.marked().unwrap(), Vec::<u64>::new(), "idle: the dirty map is empty");

    // Data client -> server, then server -> client: both ends moved.
    for (i, what) in [(0, "data client to server"), (1, "data server to client")] {
        let p = &mut pairs[i];
        if i == 0 {
            transfer(p, 3000);
        } else {
            p.server.write_all(&[5u8; 3000]).unwrap();
            p.client.read_exact(&mut [0u8; 3000]).unwrap();
        }
        let both: BTreeSet<u64> = [ends(&by_ports, p).0, ends(&by_ports, p).1].into();
        let seen = dirty_poll(&mut hooked);
        assert!(both.is_subset(&seen.changed), "{what}: {both:?} read, got {seen:?}");
        let missed = dirty_poll(&mut blind);
        assert!(
            both.is_disjoint(&missed.changed),
            "{what}: without hooks no dirty poll reads it ({missed:?})"
        );
        settle(&mut hooked);
        settle(&mut blind);
    }

    // A shutdown: the client leaves ESTABLISHED (FIN_WAIT), the server on the FIN
    // (CLOSE_WAIT): both are gone at the next dirty poll.
    let (client, server) = ends(&by_ports, &pairs[2]);
    pairs[2].client.shutdown(Shutdown::Write).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let seen = dirty_poll(&mut hooked);
    assert!(seen.gone.contains(&client) && seen.gone.contains(&server), "shutdown: {seen:?}");
    settle(&mut hooked);

    // A close: the server end is gone at the next dirty poll; the client's, orphaned, is
    // gone too or already freed (FIN_WAIT2 hands an orphan to a TIME_WAIT socket at once).
    let (client, server) = ends(&by_ports, &pairs[3]);
    let p = pairs.remove(3);
    drop(p.client);
    std::thread::sleep(Duration::from_millis(20));
    let seen = dirty_poll(&mut hooked);
    assert!(seen.gone.contains(&server), "close: {seen:?}");
    let freed = !cookies(&mut hooked).values().any(|&c| c == client);
    assert!(seen.gone.contains(&client) || freed, "close, client end: {seen:?}");
    drop(p.server);
    settle(&mut hooked);

    // A reset: the client's end is freed at once (its storage with it); the server's, still
    // held open, is reset to CLOSE.
    let (_, server_rst) = ends(&by_ports, &pairs[3]);
    let mut p = pairs.remove(3);
    socket2::SockRef::from(&p.client).set_linger(Some(Duration::ZERO)).unwrap();
    drop(p.client);
    assert!(p.server.read(&mut [0u8; 16]).is_err(), "the server sees the reset");
    let seen = dirty_poll(&mut hooked);
    assert!(seen.gone.contains(&server_rst), "reset: {seen:?}");
    settle(&mut hooked);
    assert_eq!(hooked.marked().unwrap(), Vec::<u64>::new(), "idle again: the dirty map is empty");

    // SO_SNDBUF passes no hook: a dirty poll misses it, the sweep records it.
    let (_, server) = ends(&by_ports, &pairs[0]);
    socket2::SockRef::from(&pairs[0].server).set_send_buffer_size(40_000).unwrap();
    let seen = dirty_poll(&mut hooked);
    assert!(!seen.changed.contains(&server), "setsockopt is left to the sweep: {seen:?}");
    let mut swept = BTreeSet::new();
    hooked
        .poll(false, |p| {
            if let Polled::Socket(s) = p {
                swept.insert(s.id.cookie);
            }
        })
        .unwrap();
    assert!(swept.contains(&server), "the sweep reads the new send buffer: {swept:?}");
    drop((pairs, p.server, listener));
    drop(ns);
}

/// A mark whose dirty element the kernel refuses (the socket's option memory would pass the
/// namespace's `optmem_max`) leaves the socket marked with no element: the hooks then skip it
/// and no dirty poll reaches it. The next sweep gives it its element back, so dirty polls read
/// its changes again.
#[test]
fn a_sweep_gives_a_socket_marked_without_an_element_its_element_back() {
    tcptail_netns::ensure_root().expect("the dirty-mark test needs root (CI runs as root)");
    let cleanup = Cleanup::new();
    let ns = Netns::create(&cleanup, "dirtyom").unwrap();
    ns.ip(["link", "set", "lo", "up"]).unwrap();
    let listener = ns.run(|| TcpListener::bind("127.0.0.1:0").unwrap()).unwrap();
    let mut p = ns.run(|| pair(&listener)).unwrap();
    let req = DumpRequest { states: wire::ESTABLISHED, ..DumpRequest::default() };
    let mut hooked = TrackedDumper::new(&req, Some(ns.name())).expect("root with BPF");
    let by_ports = cookies(&mut hooked);
    let both: BTreeSet<u64> = [ends(&by_ports, &p).0, ends(&by_ports, &p).1].into();
    settle(&mut hooked);

    // No option memory to spare in this namespace: this transfer's marks get no element.
    ns.exec("sysctl", ["-qw", "net.core.optmem_max=0"]).unwrap();
    transfer(&mut p, 3000);
    let seen = dirty_poll(&mut hooked);
    assert!(both.is_disjoint(&seen.changed), "no element, no dirty read: {seen:?}");
    assert_eq!(hooked.marked().unwrap(), Vec::<u64>::new(), "the elements were refused");
    ns.exec("sysctl", ["-qw", "net.core.optmem_max=131072"]).unwrap();

    // Still marked, so a transfer now creates nothing either; the sweep reads the sockets
    // and gives each its element back.
    hooked.poll(false, |_| {}).unwrap();
    settle(&mut hooked);
    transfer(&mut p, 3000);
    let seen = dirty_poll(&mut hooked);
    assert!(both.is_subset(&seen.changed), "after the sweep, marks are read again: {seen:?}");
    settle(&mut hooked);
    drop((p, listener));
    drop(ns);
}

/// The recorder with a sweep period far beyond the test: every poll after the first is a
/// dirty poll, and a transfer on an idle connection is still recorded by the poll after it.
#[test]
fn the_recorder_records_a_change_of_an_idle_connection_at_the_next_dirty_poll() {
    tcptail_netns::ensure_root().expect("the dirty-mark test needs root (CI runs as root)");
    let cleanup = Cleanup::new();
    let ns = Netns::create(&cleanup, "dirtyrec").unwrap();
    ns.ip(["link", "set", "lo", "up"]).unwrap();
    let listener = ns.run(|| TcpListener::bind("127.0.0.1:0").unwrap()).unwrap();
    let mut pairs: Vec<Pair> = ns.run(|| (0..3).map(|_| pair(&listener)).collect()).unwrap();
    let req = DumpRequest { states: wire::ESTABLISHED, ..DumpRequest::default() };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec");
    let mut rec = Recorder::create(&path, RecorderOptions::default()).unwrap();
    rec.set_sweep_every(Duration::from_secs(3600));
    let mut tracked = TrackedDumper::new(&req, Some(ns.name())).expect("root with BPF");
    let by_ports = cookies(&mut TrackedDumper::new(&req, Some(ns.name())).unwrap());
    for _ in 0..10 {
        rec.poll_tracked(&mut tracked).unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(tracked.marked().unwrap().is_empty(), "the idle connections settled");
    transfer(&mut pairs[1], 5000);
    rec.poll_tracked(&mut tracked).unwrap();
    let stats = rec.finish().unwrap();
    assert_eq!(stats.sweeps, 1, "only the first poll swept: {stats:?}");
    // Per tick: the connections with a change record.
    let mut replay = Replay::open(&path).unwrap();
    let mut ticks: Vec<BTreeSet<u64>> = Vec::new();
    while let Some(e) = replay.next_event() {
        match e.unwrap() {
            Event::Tick => ticks.push(BTreeSet::new()),
            Event::Change { cookie, mask } if mask & !VOLATILE_MASK != 0 => {
                ticks.last_mut().unwrap().insert(cookie);
            }
            _ => {}
        }
    }
    let (client, server) = ends(&by_ports, &pairs[1]);
    let last = ticks.last().unwrap();
    assert!(last.contains(&client) && last.contains(&server), "the last poll: {ticks:?}");
    let quiet = &ticks[ticks.len() - 4..ticks.len() - 1];
    assert!(quiet.iter().all(BTreeSet::is_empty), "idle polls before it: {ticks:?}");
    drop((pairs, listener));
    drop(ns);
}
