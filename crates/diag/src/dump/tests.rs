//! [`receive_dump`] on scripted datagram streams: the captured Linux 6.18 replies re-stamped
//! with other sequence numbers, port ids and flags, and synthetic error messages.

use super::*;

const BBR_V4: &[u8] = include_bytes!("../../tests/fixtures/bbr_v4.bin");
const OURS: u32 = 4242;

/// `batch` with every message's seq, pid and extra flags replaced.
fn restamp(batch: &[u8], seq: u32, pid: u32, flags: u16) -> Vec<u8> {
    let mut b = batch.to_vec();
    let mut pos = 0;
    while pos + 16 <= b.len() {
        let len = u32::from_ne_bytes(b[pos..pos + 4].try_into().unwrap()) as usize;
        let old = u16::from_ne_bytes([b[pos + 6], b[pos + 7]]);
        b[pos + 6..pos + 8].copy_from_slice(&(old | flags).to_ne_bytes());
        b[pos + 8..pos + 12].copy_from_slice(&seq.to_ne_bytes());
        b[pos + 12..pos + 16].copy_from_slice(&pid.to_ne_bytes());
        pos += len.next_multiple_of(4);
    }
    b
}

/// One netlink message.
fn msg(kind: u16, seq: u32, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(&((16 + payload.len()) as u32).to_ne_bytes());
    v.extend_from_slice(&kind.to_ne_bytes());
    v.extend_from_slice(&2u16.to_ne_bytes()); // NLM_F_MULTI
    v.extend_from_slice(&seq.to_ne_bytes());
    v.extend_from_slice(&OURS.to_ne_bytes());
    v.extend_from_slice(payload);
    v
}

/// Runs [`receive_dump`] for request `seq` over `datagrams`; returns the result, the stats,
/// the sockets' cookies and how many datagrams were read.
fn run(datagrams: Vec<Vec<u8>>, seq: u32) -> (Result<(), DiagError>, DumpStats, Vec<u64>, usize) {
    let mut queue = datagrams.into_iter();
    let mut reads = 0;
    let mut recv = |buf: &mut [u8]| -> io::Result<usize> {
        reads += 1;
        let d = queue.next().unwrap_or_default();
        buf[..d.len()].copy_from_slice(&d);
        Ok(d.len())
    };
    let mut stats = DumpStats::default();
    let mut cookies = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    let r = receive_dump(&mut recv, &mut buf, seq, OURS, &mut stats, true, &mut |s| {
        cookies.push(s.id.cookie)
    });
    (r, stats, cookies, reads)
}

fn fixture_cookies() -> Vec<u64> {
    wire::messages(BBR_V4)
        .filter_map(|m| match m.unwrap() {
            Message::Socket(s) => Some(s.id.cookie),
            _ => None,
        })
        .collect()
}

#[test]
fn the_captured_dump_is_read_to_its_done() {
    let (r, stats, cookies, reads) = run(vec![restamp(BBR_V4, 7, OURS, 0)], 7);
    r.unwrap();
    assert_eq!(cookies, fixture_cookies());
    assert_eq!((stats.sockets, stats.stale, stats.interrupted, reads), (3, 0, false, 1));
}

#[test]
fn the_rest_of_an_earlier_dump_is_skipped_not_taken_for_this_one() {
    // An earlier dump (seq 6) failed part-way and left its replies queued: without the seq
    // check its sockets would be reported and its DONE would end this dump early.
    let old = restamp(BBR_V4, 6, OURS, 0);
    let (r, stats, cookies, reads) = run(vec![old, restamp(BBR_V4, 7, OURS, 0)], 7);
    r.unwrap();
    assert_eq!(cookies, fixture_cookies(), "only this dump's sockets");
    assert_eq!(stats.stale, 4, "three sockets and a DONE of the earlier dump");
    assert_eq!(reads, 2);
}

#[test]
fn replies_to_another_port_are_ignored() {
    let other = restamp(BBR_V4, 7, OURS + 1, 0);
    let (r, stats, cookies, _) = run(vec![other, restamp(BBR_V4, 7, OURS, 0)], 7);
    r.unwrap();
    assert_eq!((cookies.len(), stats.stale), (3, 4));
}

#[test]
fn dump_intr_marks_the_dump_incomplete() {
    let (r, stats, cookies, _) = run(vec![restamp(BBR_V4, 7, OURS, NLM_F_DUMP_INTR)], 7);
    r.unwrap();
    assert!(stats.interrupted);
    assert_eq!(cookies.len(), 3, "what arrived is still delivered");
}

#[test]
fn one_socket_per_datagram_is_read_across_receives() {
    let stamped = restamp(BBR_V4, 9, OURS, 0);
    let datagrams: Vec<Vec<u8>> = {
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < stamped.len() {
            let len = u32::from_ne_bytes(stamped[pos..pos + 4].try_into().unwrap()) as usize;
            let end = pos + len.next_multiple_of(4);
            out.push(stamped[pos..end.min(stamped.len())].to_vec());
            pos = end;
        }
        out
    };
    assert_eq!(datagrams.len(), 4);
    let (r, stats, _, reads) = run(datagrams, 9);
    r.unwrap();
    assert_eq!((stats.sockets, stats.batches, reads), (3, 4, 4));
}

#[test]
fn kernel_errors_end_the_dump_with_the_errno() {
    let eintr = msg(3, 7, &(-libc::EINTR).to_ne_bytes());
    let (r, _, _, _) = run(vec![eintr], 7);
    let Err(DiagError::Kernel(e)) = r else { panic!("{r:?}") };
    assert_eq!(e.raw_os_error(), Some(libc::EINTR));
    let mut einval = (-libc::EINVAL).to_ne_bytes().to_vec();
    einval.extend_from_slice(&[0u8; 16]);
    let (r, _, _, _) = run(vec![msg(2, 7, &einval)], 7);
    let Err(DiagError::Kernel(e)) = r else { panic!("{r:?}") };
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
    // The same error answering an earlier request is not ours.
    let (r, stats, _, _) = run(vec![msg(2, 6, &einval), restamp(BBR_V4, 7, OURS, 0)], 7);
    r.unwrap();
    assert_eq!(stats.stale, 1);
}

#[test]
fn malformed_or_unfinished_dumps_are_errors() {
    let short = msg(wire::SOCK_DIAG_BY_FAMILY, 7, &[0u8; 20]);
    let (r, _, _, _) = run(vec![short], 7);
    assert!(matches!(r, Err(DiagError::Parse(ParseError::ShortDiagMsg { len: 20 }))), "{r:?}");
    let mut cut = restamp(BBR_V4, 7, OURS, 0);
    cut.truncate(100);
    let (r, _, _, _) = run(vec![cut], 7);
    assert!(matches!(r, Err(DiagError::Parse(ParseError::TruncatedMessage { .. }))), "{r:?}");
    // The socket closes (EOF) before DONE.
    let mut no_done = restamp(BBR_V4, 7, OURS, 0);
    let done_at = no_done.len() - 20;
    no_done.truncate(done_at);
    let (r, _, cookies, _) = run(vec![no_done], 7);
    assert!(matches!(r, Err(DiagError::Io(ref e)) if e.kind() == io::ErrorKind::UnexpectedEof));
    assert_eq!(cookies.len(), 3);
}
