//! The recorder's table: each poll counts the entries it has seen exactly once, whatever
//! marked them seen.

use std::net::IpAddr;

use super::*;
use crate::wire::SockId;

/// An established connection with a `tcp_info` of `raw`.
fn socket(cookie: u64, raw: &[u8]) -> Socket<'_> {
    Socket {
        family: 2,
        state: 1,
        timer: 0,
        retrans: 0,
        id: SockId {
            sport: 40000 + cookie as u16,
            dport: 443,
            src: IpAddr::from([10, 0, 0, 1]),
            dst: IpAddr::from([10, 1, 0, cookie as u8]),
            ifindex: 0,
            cookie,
        },
        expires_ms: 0,
        rqueue: 0,
        wqueue: 0,
        uid: 0,
        inode: 0,
        info: None,
        info_raw: raw,
        cong: Some("cubic"),
        bbr: None,
        skmem: None,
    }
}

#[test]
fn an_interrupted_dump_counts_every_entry_it_keeps_as_seen() {
    let dir = tempfile::tempdir().unwrap();
    let mut rec = Recorder::create(&dir.path().join("rec"), RecorderOptions::default()).unwrap();
    let mut raw = vec![0u8; TcpInfo::BASE_LEN];
    raw[0] = 1;
    let (a, b) = (socket(1, &raw), socket(2, &raw));
    rec.poll_sockets(1_000, [&a, &b], true).unwrap();
    assert_eq!((rec.live(), rec.table.seen), (2, 2));
    // The kernel flagged this dump interrupted after `a`: `b` may still live, so it is kept
    // as seen, and counted as such.
    rec.poll_sockets(2_000, [&a], false).unwrap();
    assert_eq!((rec.live(), rec.table.seen), (2, 2));
    // Both close before the next poll (as when a stopping recorder drains the destroy
    // notifications after its last poll): each leaves the count of entries seen.
    let mut out = Vec::new();
    rec.table.destroyed(&b, &mut out);
    rec.table.destroyed(&a, &mut out);
    assert_eq!((rec.live(), rec.table.seen), (0, 0));
    assert_eq!(rec.stats().closed, 2);
}
