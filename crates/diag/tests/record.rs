//! The flight recorder end to end: synthetic polls written with rotation and replayed exactly;
//! damaged files refused with their name and offset, once; real loopback connections recorded.

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tcptail_diag::filter::{Filter, Side};
use tcptail_diag::record::fields::VOLATILE_MASK;
use tcptail_diag::record::file::{rotated_files, rotated_path};
use tcptail_diag::record::replay::Recording;
use tcptail_diag::record::{
    Event, RecordError, Recorder, RecorderOptions, Replay, Values, WriterOptions,
};
use tcptail_diag::sys::monotonic_ns;
use tcptail_diag::{DumpRequest, Dumper, SockId, Socket, wire};
use tcptail_sock::cc_info::BbrInfo;
use tcptail_sock::tcp_info::TcpInfo;

/// A synthetic connection: raw `tcp_info` bytes the test mutates between polls.
#[derive(Clone)]
struct Conn {
    cookie: u64,
    raw: Vec<u8>,
    cc: &'static str,
    wqueue: u32,
}

impl Conn {
    fn new(cookie: u64, len: usize) -> Conn {
        let mut raw = vec![0u8; len];
        raw[0] = 1;
        Conn { cookie, raw, cc: "bbr", wqueue: 0 }
    }

    fn put(&mut self, off: usize, v: u32) {
        if off + 4 <= self.raw.len() {
            self.raw[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        }
    }

    fn socket(&self) -> Socket<'_> {
        let c = self.cookie;
        Socket {
            family: 2,
            state: 1,
            timer: 0,
            retrans: 0,
            id: SockId {
                sport: 40000 + (c % 1000) as u16,
                dport: 443,
                src: IpAddr::from([10, 0, 0, 1]),
                dst: IpAddr::from([10, 1, (c >> 8) as u8, c as u8]),
                ifindex: 0,
                cookie: c,
            },
            expires_ms: 0,
            rqueue: 0,
            wqueue: self.wqueue,
            uid: 0,
            inode: 0,
            info: TcpInfo::parse(&self.raw).ok(),
            info_raw: &self.raw,
            cong: Some(self.cc),
            bbr: (self.cc == "bbr").then_some(BbrInfo {
                bw_bytes_per_sec: u64::from(self.wqueue) * 10,
                min_rtt_us: 100,
                pacing_gain: 256,
                cwnd_gain: 512,
            }),
            skmem: None,
        }
    }
}

/// A small deterministic generator (the test must be repeatable).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 33
    }
}

fn values_of(s: &Socket<'_>) -> Values {
    let mut v = Values::default();
    v.fill(s);
    v
}

/// The recording files of `path`, oldest first.
fn files(path: &Path) -> Vec<PathBuf> {
    let mut all: Vec<PathBuf> = rotated_files(path).into_iter().map(|(_, p)| p).collect();
    all.push(path.to_owned());
    all
}

#[test]
fn recorded_polls_replay_exactly_across_rotations() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rec");
    let options = RecorderOptions {
        interval: Duration::from_millis(10),
        full_every: Duration::from_millis(250),
        block_every: Duration::ZERO,
        writer: WriterOptions { max_file_bytes: 6_000, keep: 1000, level: 3 },
    };
    let mut rec = Recorder::create(&path, options).unwrap();
    let mut rng = Lcg(7);
    let mut conns: Vec<Conn> =
        (0..20).map(|i| Conn::new(i + 1, [104, 232, 280][i as usize % 3])).collect();
    let mut next_cookie = 100;
    let start = monotonic_ns() + 1_000_000;
    // The truth after every poll: time and each live connection's values.
    let mut truth: Vec<(u64, Vec<(u64, Values)>)> = Vec::new();
    for poll in 0..300u64 {
        let now = start + poll * 10_000_000;
        for c in &mut conns {
            // Ages move on every poll; other fields now and then.
            c.put(44, (poll * 10) as u32);
            c.put(56, (poll * 10 + 3) as u32);
            match rng.next() % 8 {
                0 => c.put(68, rng.next() as u32),
                1 if c.raw.len() >= 128 => {
                    let acked = u64::from_ne_bytes(c.raw[120..128].try_into().unwrap());
                    c.raw[120..128].copy_from_slice(&(acked + rng.next() % 100_000).to_ne_bytes());
                }
                2 => c.wqueue = rng.next() as u32,
                3 if rng.next().is_multiple_of(20) => {
                    c.cc = if c.cc == "bbr" { "cubic" } else { "bbr" }
                }
                _ => {}
            }
        }
        if rng.next().is_multiple_of(4) {
            conns.remove(rng.next() as usize % conns.len());
            next_cookie += 1;
            conns.push(Conn::new(next_cookie, 280));
        }
        let sockets: Vec<Socket<'_>> = conns.iter().map(Conn::socket).collect();
        rec.poll_sockets(now, &sockets, true).unwrap();
        truth.push((now, sockets.iter().map(|s| (s.id.cookie, values_of(s))).collect()));
    }
    let stats = rec.finish().unwrap();
    assert_eq!(stats.polls, 300);
    assert!(stats.rotations >= 3, "{stats:?}");
    assert!(stats.changes > 1000 && stats.full > 100, "{stats:?}");

    // Replay every file in turn: the state at each tick boundary is that poll's.
    let all = files(&path);
    assert_eq!(all.len() as u64, stats.rotations + 1);
    let mut replayed: Vec<(u64, Vec<(u64, Values)>)> = Vec::new();
    let mut fulls_checked = 0;
    let state = |r: &Replay| {
        let mut v: Vec<(u64, Values)> = r.connections().map(|t| (t.id.cookie, t.values)).collect();
        v.sort_by_key(|(c, _)| *c);
        v
    };
    for file in &all {
        let mut replay = Replay::open(file).unwrap();
        let mut tick = None;
        while let Some(event) = replay.next_event() {
            match event.unwrap() {
                Event::Tick => {
                    if let Some(t) = tick {
                        replayed.push((t, state(&replay)));
                    }
                    tick = Some(replay.now_ns());
                }
                Event::Full { matched: Some(m), .. } => {
                    assert!(m, "a full snapshot disagrees with the changes before it");
                    fulls_checked += 1;
                }
                _ => {}
            }
        }
        replayed.push((tick.expect("a tick per file"), state(&replay)));
        assert_eq!(replay.mismatches, 0);
    }
    assert_eq!(replayed.len(), truth.len(), "every poll replayed");
    for ((t_got, got), (t_want, want)) in replayed.iter().zip(&mut truth) {
        assert_eq!(t_got, t_want, "tick times");
        want.sort_by_key(|(c, _)| *c);
        let cookies = |v: &[(u64, Values)]| v.iter().map(|(c, _)| *c).collect::<Vec<_>>();
        assert_eq!(cookies(got), cookies(want), "live connections at {t_want}");
        for ((cookie, g), (_, w)) in got.iter().zip(want.iter()) {
            // Exact but for the ages, which only move with a record of another change.
            assert_eq!(g.changed(w) & !VOLATILE_MASK, 0, "connection {cookie} at {t_want}");
        }
    }
    assert!(fulls_checked > 20, "{fulls_checked} full snapshots checked");
}

/// A short valid recording of a few synthetic connections, one block per poll.
fn small_recording(path: &Path) {
    let options = RecorderOptions { block_every: Duration::ZERO, ..RecorderOptions::default() };
    let mut rec = Recorder::create(path, options).unwrap();
    let mut conns: Vec<Conn> = (1..=4).map(|i| Conn::new(i, 280)).collect();
    let start = monotonic_ns();
    for poll in 0..10u64 {
        for c in &mut conns {
            c.put(68, 1000 + poll as u32 * c.cookie as u32);
        }
        let sockets: Vec<Socket<'_>> = conns.iter().map(Conn::socket).collect();
        rec.poll_sockets(start + poll * 1_000_000, &sockets, true).unwrap();
    }
    rec.finish().unwrap();
}

/// Replays `path` to the end: the events read and the errors met.
fn replay_all(path: &Path) -> Result<(usize, Vec<RecordError>), RecordError> {
    let mut replay = Replay::open(path)?;
    let (mut events, mut errors) = (0, Vec::new());
    while let Some(e) = replay.next_event() {
        match e {
            Ok(_) => events += 1,
            Err(e) => errors.push(e),
        }
    }
    Ok((events, errors))
}

fn corrupt_offset(e: &RecordError) -> u64 {
    match e {
        RecordError::Corrupt { offset, .. } => *offset,
        other => panic!("expected a corrupt-file error, got {other:?}"),
    }
}

#[test]
fn damaged_files_are_refused_with_their_name_and_offset_once() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good");
    small_recording(&good);
    let bytes = std::fs::read(&good).unwrap();
    let (events, errors) = replay_all(&good).unwrap();
    assert!(errors.is_empty() && events > 40, "{events} events, {errors:?}");

    let bad = dir.path().join("bad");
    // Not a recording at all, empty, or garbage after the magic.
    for (content, offset) in [
        (b"hello, world, this is text".to_vec(), 0),
        (Vec::new(), 0),
        (b"TCPTREC1\xff\xff\xff\xff".to_vec(), 8),
    ] {
        std::fs::write(&bad, &content).unwrap();
        let e = Replay::open(&bad).unwrap_err();
        assert_eq!(corrupt_offset(&e), offset, "{e}");
        let text = e.to_string();
        assert!(text.contains(bad.to_str().unwrap()) && text.contains("at byte"), "{text}");
    }

    // Cut anywhere: the records before the cut are read, then one error, then nothing.
    let header_len = 12 + u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize;
    for cut in (1..bytes.len()).step_by(7) {
        std::fs::write(&bad, &bytes[..cut]).unwrap();
        match replay_all(&bad) {
            Err(e) => assert!(cut < header_len, "cut at {cut}: {e}"),
            Ok((n, errors)) => {
                assert!(n <= events);
                // A cut at a block boundary is a shorter, valid recording.
                assert!(errors.len() <= 1, "cut at {cut}: {errors:?}");
                if let Some(e) = errors.first() {
                    let at = corrupt_offset(e);
                    assert!(at as usize >= header_len && (at as usize) < cut, "cut {cut}: {e}");
                    assert!(e.to_string().contains("bad"), "{e}");
                }
            }
        }
    }

    // A flipped byte inside the first block: its checksum fails, at that block's offset.
    let mut flipped = bytes.clone();
    flipped[header_len + 20] ^= 0x55;
    std::fs::write(&bad, &flipped).unwrap();
    let (n, errors) = replay_all(&bad).unwrap();
    assert_eq!(n, 0);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(corrupt_offset(&errors[0]), header_len as u64, "{}", errors[0]);

    // Garbage appended after the last block: everything before it reads, then one error there.
    let mut tail = bytes.clone();
    tail.extend_from_slice(b"\x00garbage garbage garbage");
    std::fs::write(&bad, &tail).unwrap();
    let (n, errors) = replay_all(&bad).unwrap();
    assert_eq!(n, events);
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!(corrupt_offset(&errors[0]), bytes.len() as u64);
    assert!(errors[0].to_string().contains("TRBK"), "{}", errors[0]);
}

#[test]
fn rotation_keeps_the_newest_files_and_each_replays_alone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rot");
    let options = RecorderOptions {
        block_every: Duration::ZERO,
        writer: WriterOptions { max_file_bytes: 2_000, keep: 2, level: 1 },
        ..RecorderOptions::default()
    };
    let mut rec = Recorder::create(&path, options).unwrap();
    let mut conns: Vec<Conn> = (1..=30).map(|i| Conn::new(i, 280)).collect();
    let start = monotonic_ns();
    for poll in 0..60u64 {
        for c in &mut conns {
            c.put(68, (poll * 7919 + c.cookie * 104729) as u32);
        }
        let sockets: Vec<Socket<'_>> = conns.iter().map(Conn::socket).collect();
        rec.poll_sockets(start + poll * 1_000_000, &sockets, true).unwrap();
    }
    let stats = rec.finish().unwrap();
    assert!(stats.rotations > 3, "{stats:?}");
    let kept = rotated_files(&path);
    let suffixes: Vec<u64> = kept.iter().map(|(n, _)| *n).collect();
    assert_eq!(suffixes, [stats.rotations - 1, stats.rotations], "the newest two are kept");
    assert!(!rotated_path(&path, 1).exists());
    for file in files(&path) {
        let mut replay = Replay::open(&file).unwrap();
        let mut opened = 0;
        while let Some(e) = replay.next_event() {
            if let Event::Full { matched: None, .. } = e.unwrap() {
                opened += 1;
            }
        }
        assert_eq!(opened, 30, "{}: every connection opens in every file", file.display());
    }

    // Replayed by time across the kept files: nothing before the first poll, then the 30
    // connections with the values of the poll at or before the time asked.
    let mut recording = Recording::open(&files(&path)).unwrap();
    let first = Replay::open(&files(&path)[0]).unwrap();
    let start = first.header().start_wall_ns;
    recording.advance_to_wall(start.saturating_sub(1)).unwrap();
    assert_eq!(recording.connections().count(), 0);
    let mut last_rtt = 0;
    for ms in (0..80).step_by(3) {
        recording.advance_to_wall(start + ms * 1_000_000).unwrap();
        if ms > 0 {
            assert_eq!(recording.connections().count(), 30, "at +{ms} ms");
            let rtt = recording.connections().map(|t| t.connection().info.unwrap().rtt_us).max();
            assert!(rtt.unwrap() >= last_rtt, "time moves forward");
            last_rtt = rtt.unwrap();
        }
    }
    recording.advance_to_wall(u64::MAX).unwrap();
    assert!(recording.ended());
    let poll = (recording.now_wall_ns() - start) / 1_000_000;
    let c = recording.connections().find(|t| t.id.cookie == 1).unwrap().connection();
    assert!(c.info.unwrap().rtt_us > 0, "{poll}");
}

/// A loopback pair: (client, server).
fn pair(listener: &TcpListener) -> (TcpStream, TcpStream) {
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    (client, server)
}

#[test]
fn real_loopback_connections_are_recorded_until_they_close() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (mut busy, mut busy_peer) = pair(&listener);
    let (quiet, quiet_peer) = pair(&listener);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live");
    let options = RecorderOptions {
        interval: Duration::from_millis(10),
        block_every: Duration::from_millis(50),
        ..RecorderOptions::default()
    };
    let mut rec = Recorder::create(&path, options).unwrap();
    let mut dumper = Dumper::new().unwrap();
    // The client ends only: remote port = the listener's.
    let req = DumpRequest {
        filter: Some(Filter::Port { side: Side::Remote, lo: port, hi: port }),
        states: wire::ALL_STATES,
        ..DumpRequest::default()
    };
    let reader = std::thread::spawn(move || {
        let mut sink = Vec::new();
        busy_peer.read_to_end(&mut sink).unwrap();
        sink.len()
    });
    let quiet_addr: SocketAddr = quiet.local_addr().unwrap();
    let busy_addr: SocketAddr = busy.local_addr().unwrap();
    let mut quiet = Some((quiet, quiet_peer));
    let mut sent = 0u64;
    for poll in 0..40 {
        if poll < 30 {
            busy.write_all(&[1u8; 64 * 1024]).unwrap();
            sent += 64 * 1024;
        }
        if poll == 20 {
            drop(quiet.take());
        }
        rec.poll(&mut dumper, &req).unwrap();
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(busy);
    assert_eq!(reader.join().unwrap() as u64, sent);
    let stats = rec.finish().unwrap();
    assert_eq!(stats.polls, 40);

    let mut replay = Replay::open(&path).unwrap();
    let mut acked = Vec::new();
    let mut quiet_gone = None;
    let mut quiet_states = Vec::new();
    let mut busy_cookie = None;
    while let Some(e) = replay.next_event() {
        match e.unwrap() {
            Event::Change { cookie, .. } | Event::Full { cookie, .. } => {
                let t = replay.get(cookie).unwrap();
                // The filter (remote port = the listener's) also matches other processes'
                // TIME_WAIT sockets left from an earlier listener on the same port (they
                // have no tcp_info): only this test's two connections are judged.
                if t.id.local == quiet_addr {
                    quiet_states.push(t.values.by_name("state").unwrap());
                } else if t.id.local == busy_addr {
                    busy_cookie = Some(cookie);
                    acked.push(t.values.by_name("bytes_acked").unwrap());
                }
            }
            Event::Gone(t) if t.id.local == quiet_addr => quiet_gone = Some(replay.now_ns()),
            _ => {}
        }
    }
    assert_eq!(replay.mismatches, 0);
    // Closed first by this end: FIN_WAIT2 then TIME_WAIT (which the kernel keeps a while),
    // every state change recorded, or the end of the socket.
    assert_eq!(quiet_states.first(), Some(&1), "established first");
    assert!(
        quiet_gone.is_some() || quiet_states.contains(&6),
        "the close is recorded: states {quiet_states:?}"
    );
    assert!(acked.windows(2).all(|w| w[0] <= w[1]), "bytes_acked never goes back: {acked:?}");
    assert!(acked.len() >= 10, "the busy connection changed on most polls: {acked:?}");
    // Its last state is the whole transfer acknowledged (plus the SYN's byte), unless its
    // close was recorded after the transfer.
    let last = replay.get(busy_cookie.unwrap()).map(|t| t.connection());
    if let Some(c) = last {
        let info = c.info.expect("tcp_info replayed");
        assert!(info.bytes_acked.unwrap() >= sent, "{info:?}");
        assert_eq!(c.remote.port(), port);
    }
}
