//! Closes summarised once each, in a throwaway network namespace (needs root): connections
//! closed by the client first, by the server first, by a reset, and one opened and closed
//! between two polls; from the kernel's destroy notifications, and from the polls alone.

use std::io::Read;
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use tcptail_diag::closed::{CloseSeen, ClosedSummary, DestroyListener};
use tcptail_diag::record::{Event, Recorder, RecorderOptions, Replay};
use tcptail_diag::{DumpRequest, Dumper, wire};
use tcptail_netns::{Cleanup, Netns};

mod common;
use common::{Pair, pair, transfer};

/// Runs the scenario in a fresh namespace; the summaries the recording holds and the client
/// addresses of the four connections (client first, server first, reset, between polls).
fn scenario(listen: bool, states: u32) -> (Vec<ClosedSummary>, [SocketAddr; 4]) {
    tcptail_netns::ensure_root().expect("the close tests need root (CI runs them as root)");
    let cleanup = Cleanup::new();
    let ns = Netns::create(&cleanup, "closed").unwrap();
    ns.ip(["link", "set", "lo", "up"]).unwrap();
    let (listener, mut pairs) = ns
        .run(|| {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let pairs: Vec<Pair> = (0..3).map(|_| pair(&listener)).collect();
            (listener, pairs)
        })
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec");
    let mut rec = Recorder::create(&path, RecorderOptions::default()).unwrap();
    if listen {
        rec.listen_for_closes(DestroyListener::in_netns(ns.name()).unwrap(), None);
    }
    let mut dumper = Dumper::in_netns(ns.name()).unwrap();
    let req = DumpRequest { states, ..DumpRequest::default() };
    let mut poll = |rec: &mut Recorder| {
        rec.poll(&mut dumper, &req).unwrap();
        std::thread::sleep(Duration::from_millis(20));
    };
    for p in &mut pairs {
        transfer(p, 100_000);
    }
    poll(&mut rec);
    poll(&mut rec);
    let addrs: Vec<SocketAddr> = pairs.iter().map(|p| p.client.local_addr().unwrap()).collect();
    let mut pairs = pairs.into_iter();
    // Client first, then server.
    let p = pairs.next().unwrap();
    drop(p.client);
    poll(&mut rec);
    drop(p.server);
    poll(&mut rec);
    // Server first, then client.
    let p = pairs.next().unwrap();
    drop(p.server);
    poll(&mut rec);
    drop(p.client);
    poll(&mut rec);
    // A reset: the client aborts (linger 0), the server reads the reset, then closes.
    let mut p = pairs.next().unwrap();
    socket2::SockRef::from(&p.client).set_linger(Some(Duration::ZERO)).unwrap();
    drop(p.client);
    let mut buf = [0u8; 16];
    assert!(p.server.read(&mut buf).is_err(), "the server sees the reset");
    poll(&mut rec);
    drop(p.server);
    poll(&mut rec);
    // Opened, used and closed between two polls.
    let quick = ns.run(|| pair(&listener)).unwrap();
    let quick_addr = quick.client.local_addr().unwrap();
    let mut quick = quick;
    transfer(&mut quick, 1000);
    drop(quick);
    for _ in 0..5 {
        poll(&mut rec);
    }
    drop(listener);
    poll(&mut rec);
    let stats = rec.finish().unwrap();
    assert_eq!(stats.lost_closes, 0);

    let mut replay = Replay::open(&path).unwrap();
    let mut summaries = Vec::new();
    while let Some(e) = replay.next_event() {
        if let Event::Closed(c) = e.unwrap() {
            summaries.push(*c);
        }
    }
    assert_eq!(replay.mismatches, 0);
    drop(ns);
    (summaries, [addrs[0], addrs[1], addrs[2], quick_addr])
}

/// The summary of the end at `local` (the client) or the end whose peer is `local` (server).
fn end(all: &[ClosedSummary], addr: SocketAddr, client: bool) -> &ClosedSummary {
    let mut found = all.iter().filter(|c| if client { c.local == addr } else { c.remote == addr });
    let one = found.next().unwrap_or_else(|| panic!("no summary of {addr} ({client}): {all:#?}"));
    assert!(found.next().is_none(), "{addr} ({client}) summarised twice: {all:#?}");
    one
}

#[test]
fn destroy_notifications_summarise_every_close_once() {
    let (all, [client_first, server_first, reset, quick]) = scenario(true, wire::ESTABLISHED);
    // Four connections, two ends each; the listener's own end is not a connection.
    assert_eq!(all.len(), 8, "{all:#?}");
    let mut cookies: Vec<u64> = all.iter().map(|c| c.cookie).collect();
    cookies.sort_unstable();
    cookies.dedup();
    assert_eq!(cookies.len(), 8, "each socket once");
    assert!(all.iter().all(|c| c.seen == CloseSeen::Destroyed), "{all:#?}");
    for addr in [client_first, server_first, reset] {
        for client in [true, false] {
            let c = end(&all, addr, client);
            assert!(c.lifetime.is_some_and(|l| l >= Duration::from_millis(20)), "{c:#?}");
            assert!(c.max_rtt_us.is_some() && c.min_rtt_us.is_some(), "{c:#?}");
            assert!(c.busy_time_us.is_some() && c.rwnd_limited_us.is_some(), "{c:#?}");
            assert!(c.cc.is_some(), "the polls knew its congestion control: {c:#?}");
            if client {
                assert!(c.bytes_acked.unwrap() > 100_000, "{c:#?}");
            } else {
                assert!(c.bytes_received.unwrap() >= 100_000, "{c:#?}");
            }
        }
    }
    // The quick one was never polled: summarised from the notification alone.
    let q = end(&all, quick, true);
    assert_eq!(q.lifetime, None);
    assert!(q.bytes_acked.unwrap() > 1000, "{q:#?}");
}

#[test]
fn without_notifications_the_polls_summarise_every_close_once() {
    let (all, [client_first, server_first, reset, _quick]) = scenario(false, wire::ALL_STATES);
    assert!(all.iter().all(|c| c.seen == CloseSeen::Vanished), "{all:#?}");
    let mut cookies: Vec<u64> = all.iter().map(|c| c.cookie).collect();
    cookies.sort_unstable();
    let n = cookies.len();
    cookies.dedup();
    assert_eq!(cookies.len(), n, "each socket at most once: {all:#?}");
    // Every polled end of the three polled connections; the quick one lived between polls.
    for addr in [client_first, server_first, reset] {
        for client in [true, false] {
            let c = end(&all, addr, client);
            assert!(c.lifetime.is_some(), "{c:#?}");
            if client {
                assert!(c.bytes_acked.unwrap() > 100_000, "{c:#?}");
            }
        }
    }
}

#[test]
fn a_stop_right_after_closes_waits_for_their_notifications() {
    // Connections closed after the last poll and before the stop: the stopping recorder
    // polls once more and waits for their destroy notifications, so both ends are summarised
    // from the kernel (the stop used to end the loop with the notifications unread).
    tcptail_netns::ensure_root().expect("the close tests need root (CI runs them as root)");
    let cleanup = Cleanup::new();
    let ns = Netns::create(&cleanup, "closed-stop").unwrap();
    ns.ip(["link", "set", "lo", "up"]).unwrap();
    let (_listener, p) = ns
        .run(|| {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let p = pair(&listener);
            (listener, p)
        })
        .unwrap();
    let mut p = Some(p);
    if let Some(p) = &mut p {
        transfer(p, 100_000);
    }
    let addr = p.as_ref().unwrap().client.local_addr().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec");
    let options = RecorderOptions { interval: Duration::from_millis(10), ..Default::default() };
    let mut rec = Recorder::create(&path, options).unwrap();
    rec.listen_for_closes(DestroyListener::in_netns(ns.name()).unwrap(), None);
    let mut dumper = Dumper::in_netns(ns.name()).unwrap();
    let req = DumpRequest { states: wire::ESTABLISHED, ..DumpRequest::default() };
    // The first poll sees the connection; before the second, both ends close and the run
    // is told to stop.
    let mut asked = 0;
    let stop = || {
        asked += 1;
        if asked < 2 {
            return false;
        }
        let Pair { client, mut server } = p.take().expect("closed once");
        drop(client);
        assert_eq!(server.read(&mut [0u8; 16]).unwrap(), 0, "the server reads the client's FIN");
        drop(server);
        true
    };
    rec.run(&mut dumper, &req, stop, |e| panic!("dump failed: {e}")).unwrap();
    let stats = rec.finish().unwrap();
    assert_eq!((stats.polls, stats.lost_closes), (2, 0), "{stats:?}");
    let mut replay = Replay::open(&path).unwrap();
    let mut all = Vec::new();
    while let Some(e) = replay.next_event() {
        if let Event::Closed(c) = e.unwrap() {
            all.push(*c);
        }
    }
    assert_eq!(all.len(), 2, "{all:#?}");
    for client in [true, false] {
        let c = end(&all, addr, client);
        assert_eq!(c.seen, CloseSeen::Destroyed, "{c:#?}");
        assert!(c.lifetime.is_some(), "the first poll knew it: {c:#?}");
    }
    drop(ns);
}
