//! Unit tests of the runtime on Unix datagram socket pairs, which behave like TUN devices for
//! the emulator (one packet per read or write, non-blocking, `EAGAIN` when the peer's queue is
//! full) and need no root. The root-only tests through real TUN devices and namespaces are in
//! `tests/emulator.rs`.

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use tcptail_emu::{DirectionSpec, Discipline, LossModel, PathSpec, QueueLimit, QueueSpec, Rate};
use tcptail_units::{BitRate, ByteSize};

use super::lane::Endpoint;
use super::*;

/// The emulator's side and the application's side of one "device".
fn device(name: &str) -> (Endpoint, UnixDatagram) {
    let (emu, app) = UnixDatagram::pair().expect("socketpair");
    emu.set_nonblocking(true).unwrap();
    app.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    (Endpoint::new(OwnedFd::from(emu), name.to_owned(), false), app)
}

fn direction(delay_ms: u64, loss: Option<LossModel>) -> DirectionSpec {
    DirectionSpec {
        rate: Rate::Constant(BitRate(1_000_000_000)),
        delay: Duration::from_millis(delay_ms),
        jitter: None,
        loss,
        queue: QueueSpec {
            limit: QueueLimit::Bytes(ByteSize(10_000_000)),
            discipline: Discipline::Fifo,
        },
        ecn_blackhole: None,
        reorder: None,
    }
}

fn path(up_ms: u64, down_ms: u64) -> PathSpec {
    PathSpec { up: direction(up_ms, None), down: direction(down_ms, None) }
}

struct Rig {
    handle: EmulatorHandle,
    client: UnixDatagram,
    server: UnixDatagram,
    /// A second descriptor of the emulator's end of the client device: what it holds is
    /// what the emulator has not read yet.
    client_dev: UnixDatagram,
}

impl Rig {
    /// Waits until the emulator has read every packet the client sent, failing after 10 s.
    fn wait_until_read(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while rustix::io::ioctl_fionread(&self.client_dev).expect("FIONREAD") > 0 {
            assert!(Instant::now() < deadline, "the emulator did not read the client's packets");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

fn rig(spec: PathSpec, options: EmulatorOptions) -> Rig {
    let (emu_c, client) = UnixDatagram::pair().expect("socketpair");
    let client_dev = emu_c.try_clone().expect("dup");
    emu_c.set_nonblocking(true).unwrap();
    client.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let emu_c = Endpoint::new(OwnedFd::from(emu_c), "client-dev".to_owned(), false);
    let (emu_s, server) = device("server-dev");
    let handle = Emulator::start_on(emu_c, emu_s, spec, options).expect("start");
    Rig { handle, client, server, client_dev }
}

/// A packet carrying its sequence number.
fn packet(seq: u32, len: usize) -> Vec<u8> {
    let mut p = vec![0u8; len];
    p[..4].copy_from_slice(&seq.to_le_bytes());
    p
}

fn seq_of(p: &[u8]) -> u32 {
    u32::from_le_bytes(p[..4].try_into().unwrap())
}

#[test]
fn default_options_validate() {
    EmulatorOptions::default().validate().unwrap();
}

#[test]
fn bad_options_name_the_field() {
    let d = EmulatorOptions::default;
    let cases: [(EmulatorOptions, &str); 8] = [
        (EmulatorOptions { batch: 0, ..d() }, "batch"),
        (EmulatorOptions { buffer_size: 100, ..d() }, "buffer_size"),
        (EmulatorOptions { fifo_priority: Some(0), ..d() }, "fifo_priority"),
        (EmulatorOptions { spin: Duration::from_secs(1), ..d() }, "spin"),
        (EmulatorOptions { timer_slack: Some(Duration::ZERO), ..d() }, "timer_slack"),
        (EmulatorOptions { lateness_bound: Duration::ZERO, ..d() }, "lateness_bound"),
        (EmulatorOptions { max_busy: Some(Duration::from_nanos(5)), ..d() }, "max_busy"),
        (EmulatorOptions { stats_bin: Duration::ZERO, ..d() }, "stats_bin"),
    ];
    for (options, field) in cases {
        match options.validate() {
            Err(EmulatorError::Option { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{field}: {other:?}"),
        }
    }
}

#[test]
fn invalid_spec_is_rejected_before_anything_starts() {
    let (emu_c, _c) = device("c");
    let (emu_s, _s) = device("s");
    let mut spec = path(1, 1);
    spec.up.rate = Rate::Constant(BitRate(0));
    let err = Emulator::start_on(emu_c, emu_s, spec, EmulatorOptions::default()).unwrap_err();
    assert!(matches!(err, EmulatorError::Spec(_)), "{err}");
}

#[test]
fn forwards_both_ways_in_order_never_early() {
    let layouts = [Threads::Single, Threads::PerDirection, Threads::Split, Threads::Pipeline];
    for threads in layouts {
        for wake in [Wake::Ppoll, Wake::Timerfd] {
            let options = EmulatorOptions { threads, wake, ..Default::default() };
            let r = rig(path(3, 1), options);
            let n = 20;
            let mut sent = Vec::new();
            for i in 0..n {
                sent.push(Instant::now());
                r.client.send(&packet(i, 200)).unwrap();
                r.server.send(&packet(1000 + i, 100)).unwrap();
            }
            let mut buf = [0u8; 2048];
            for i in 0..n {
                let len = r.server.recv(&mut buf).unwrap();
                assert_eq!((len, seq_of(&buf)), (200, i), "{threads:?} {wake:?}");
                assert!(sent[i as usize].elapsed() >= Duration::from_millis(3));
                let len = r.client.recv(&mut buf).unwrap();
                assert_eq!((len, seq_of(&buf)), (100, 1000 + i));
            }
            let report = r.handle.stop();
            assert_eq!(report.up.forwarded.packets, u64::from(n));
            assert_eq!(report.up.forwarded.bytes, u64::from(n) * 200);
            assert_eq!(report.down.forwarded.packets, u64::from(n));
            assert_eq!(report.up.lateness.count, u64::from(n));
            assert_eq!(report.lateness.count, 2 * u64::from(n));
            assert_eq!(report.up.stats.arrivals.packets, u64::from(n));
            assert_eq!((report.up.reads, report.down.reads), (u64::from(n), u64::from(n)));
            assert_eq!(report.up.held_at_stop, 0);
            assert!(report.lateness.p50_us <= report.lateness.max_us);
            assert!(report.errors.is_empty(), "{:?}", report.errors);
            assert_eq!((report.threads, report.wake), (threads, wake));
            let roles: Vec<&str> = report.thread_cpu.iter().map(|t| t.role.as_str()).collect();
            let expected: &[&str] = match threads {
                Threads::Single => &["forward up,down"],
                Threads::PerDirection => &["forward up", "forward down"],
                Threads::Split => &["read up", "release up", "read down", "release down"],
                Threads::Pipeline => &["read up,down", "release up,down"],
            };
            assert_eq!(roles, expected);
            // Every batch of reads ends with one that finds nothing.
            assert!(report.up.empty_reads > 0 && report.down.empty_reads > 0);
        }
    }
}

#[test]
fn busy_output_delays_packets_but_never_drops_or_reorders() {
    for threads in [Threads::Single, Threads::Split] {
        // The server side's queue holds few datagrams (net.unix.max_dgram_qlen): writes hit
        // EAGAIN.
        let r = rig(path(0, 0), EmulatorOptions { threads, ..Default::default() });
        let n = 200;
        for i in 0..n {
            r.client.send(&packet(i, 300)).unwrap();
        }
        // Nothing is read on the server side until the emulator has taken every packet: it
        // then holds more than the output takes.
        r.wait_until_read();
        let mut buf = [0u8; 2048];
        for i in 0..n {
            let len = r.server.recv(&mut buf).unwrap();
            assert_eq!((len, seq_of(&buf)), (300, i), "{threads:?}");
        }
        let report = r.handle.stop();
        assert_eq!(report.up.forwarded.packets, u64::from(n));
        assert!(report.up.write_retries > 0, "the output never filled: {:?}", report.up);
        assert_eq!(report.up.write_errors, 0);
        assert_eq!(report.up.held_at_stop, 0);
    }
}

#[test]
fn late_releases_behind_a_blocked_output_are_attributed_to_waiting_not_work() {
    for threads in [Threads::Single, Threads::Split] {
        let bound = Duration::from_millis(1);
        let options = EmulatorOptions { threads, lateness_bound: bound, ..Default::default() };
        let r = rig(path(0, 0), options);
        let n = 600;
        for i in 0..n {
            r.client.send(&packet(i, 1400)).unwrap();
        }
        r.wait_until_read();
        // The server side's socket holds about 100 such datagrams; the rest wait at least this long
        // for it to be read, with the emulator retrying its write every 50 µs meanwhile.
        let stall = Duration::from_millis(30);
        std::thread::sleep(stall);
        let mut buf = [0u8; 2048];
        for i in 0..n {
            let len = r.server.recv(&mut buf).unwrap();
            assert_eq!((len, seq_of(&buf)), (1400, i), "{threads:?}");
        }
        let report = r.handle.stop();
        let c = report.lateness_causes;
        // Only some datagrams fit the peer's socket buffer: every later one waited out the
        // stall.
        assert!(c.late_segments >= u64::from(n) / 2, "{threads:?}: {c:?}");
        assert!(c.lateness_s >= c.late_segments as f64 * stall.as_secs_f64() / 2.0, "{c:?}");
        assert_eq!(c.late_after_ms, 1.0);
        let shares = [c.on_cpu, c.waiting_for_cpu, c.asleep, c.other, c.unattributed];
        assert!(shares.iter().all(|s| (0.0..=1.0).contains(s)), "{c:?}");
        assert!((shares.iter().sum::<f64>() - 1.0).abs() < 1e-6, "{c:?}");
        // A retry is a poll and a write every 50 µs (0.3 of the stall measured on a 2-vCPU
        // guest): a loaded machine adds waiting, not work, and an attribution that counted
        // the sleeps as work would give ~1.
        assert!(c.on_cpu < 0.8, "{threads:?}: {c:?}");
        let flag = report.lateness_flag.expect("flagged: most releases were 30 ms late");
        assert!(flag.contains("while releases were late, the emulator thread was"), "{flag}");
        for t in &report.thread_cpu {
            assert!(t.run_queue_wait_s.is_some_and(|w| w >= 0.0), "{t:?}");
        }
    }
}

#[test]
fn a_reader_and_its_releaser_pinned_to_one_cpu_keep_forwarding() {
    // The releaser runs one SCHED_FIFO priority above its reader; on one CPU it preempts the
    // reader wherever it is, also in the middle of a hand-off, and must not wait for it.
    // The sender is not paced: the queue holds all 20 MB, so that a reader faster than the
    // link (the sender needs under 0.4 s) never fills it and every packet must arrive.
    let spec = PathSpec::symmetric(DirectionSpec {
        rate: Rate::Constant(BitRate(200_000_000)),
        queue: QueueSpec {
            limit: QueueLimit::Bytes(ByteSize(32_000_000)),
            discipline: Discipline::Fifo,
        },
        ..direction(1, None)
    });
    let options =
        EmulatorOptions { threads: Threads::Pipeline, cpu: Some(0), ..Default::default() };
    let r = rig(spec, options);
    assert!(r.handle.sched_fifo().is_applied(), "tests run as root: SCHED_FIFO must apply");
    let n = 20_000u32;
    let sender = {
        let client = r.client.try_clone().unwrap();
        std::thread::spawn(move || {
            for i in 0..n {
                // A full socket buffer blocks the sender until the emulator reads.
                client.send(&packet(i, 1000)).unwrap();
            }
        })
    };
    let mut buf = [0u8; 2048];
    for i in 0..n {
        match r.server.recv(&mut buf) {
            Ok(len) => assert_eq!((len, seq_of(&buf)), (1000, i)),
            Err(e) => {
                // A releaser spinning on its reader never stops: leave it rather than hang
                // the test on joining it.
                std::mem::forget(r);
                panic!("packet {i} of {n} did not arrive within 5 s: {e}");
            }
        }
    }
    sender.join().unwrap();
    let report = r.handle.stop();
    assert_eq!(report.up.forwarded.packets, u64::from(n));
    assert!(report.cpu_affinity.is_applied(), "{:?}", report.cpu_affinity);
}

#[test]
fn oversize_packets_are_counted_not_forwarded() {
    let options = EmulatorOptions { buffer_size: 256, ..Default::default() };
    let r = rig(path(0, 0), options);
    r.client.send(&packet(1, 300)).unwrap();
    r.client.send(&packet(2, 100)).unwrap();
    let mut buf = [0u8; 2048];
    let len = r.server.recv(&mut buf).unwrap();
    assert_eq!((len, seq_of(&buf)), (100, 2));
    let report = r.handle.stop();
    assert_eq!(report.up.oversize_drops, 1);
    assert_eq!(report.up.forwarded.packets, 1);
    assert!(report.up.last_error.as_deref().unwrap_or("").contains("256-byte buffer"));
    assert!(!report.is_clean());
}

#[test]
fn stop_is_prompt_with_packets_in_flight() {
    for threads in [Threads::Single, Threads::Split] {
        let r = rig(path(10_000, 10_000), EmulatorOptions { threads, ..Default::default() });
        for i in 0..5 {
            r.client.send(&packet(i, 100)).unwrap();
        }
        r.wait_until_read();
        let t = Instant::now();
        let report = r.handle.stop();
        // Prompt means not waiting for the held packets' 10 s delay: half of it as the bound,
        // so only a stop that waits for the delay line (not a slow host) fails it.
        let delay = Duration::from_secs(10);
        assert!(t.elapsed() < delay / 2, "stop took {:?} with {delay:?} held", t.elapsed());
        // Split: held in the model or still in the hand-off, counted either way.
        assert_eq!(report.up.held_at_stop, 5, "{threads:?}");
        assert_eq!(report.up.forwarded.packets, 0);
        assert_eq!(report.up.lateness.count, 0);
        assert_eq!(report.lateness_flag, None);
    }
}

#[test]
fn stopper_stops_the_thread() {
    let r = rig(path(1, 1), EmulatorOptions::default());
    r.handle.stopper().stop();
    let t = Instant::now();
    // A thread that ignores the stopper runs forever; one that obeys ends within a wake-up.
    // The bound only has to tell those apart on a loaded host, where a wake-up can wait for
    // the scheduler far longer than the 1 s this test used to allow.
    while !r.handle.is_finished() {
        assert!(t.elapsed() < Duration::from_secs(30), "the thread ignored the stopper");
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(r.handle);
}

#[test]
fn random_loss_is_counted_exactly() {
    let mut spec = path(0, 0);
    spec.up.loss = Some(LossModel::Bernoulli { p: 0.3 });
    let r = rig(spec, EmulatorOptions { seed: 7, ..Default::default() });
    let n = 300u32;
    let mut received = 0u64;
    let mut buf = [0u8; 2048];
    r.server.set_nonblocking(true).unwrap();
    let mut drain = |received: &mut u64| {
        while r.server.recv(&mut buf).is_ok() {
            *received += 1;
        }
    };
    for i in 0..n {
        r.client.send(&packet(i, 100)).unwrap();
        // Pace so the (tiny) datagram queues never fill.
        if i % 5 == 4 {
            std::thread::sleep(Duration::from_millis(1));
            drain(&mut received);
        }
    }
    // Every packet read by the emulator, then the emulator stopped: whatever it wrote is in
    // the server's queue now, and what it had not released yet is counted as held (no sleep
    // that a loaded host could outlast).
    r.wait_until_read();
    let report = r.handle.stop();
    drain(&mut received);
    let lost = report.up.stats.drops.loss.packets;
    assert_eq!(received, report.up.forwarded.packets, "{:?}", report.up);
    assert_eq!(received + lost + report.up.held_at_stop, u64::from(n), "{:?}", report.up);
    assert!((40..150).contains(&lost), "{lost} of {n} lost at p = 0.3");
}

#[test]
fn report_file_and_mahimahi_logs_are_written_also_on_drop() {
    let dir = tempfile::tempdir().unwrap();
    let options = EmulatorOptions {
        report_path: Some(dir.path().join("report.json")),
        mahimahi_log_dir: Some(dir.path().join("logs")),
        command_line: Some("unit test".to_owned()),
        // Nothing can be that punctual: the run must be flagged.
        lateness_bound: Duration::from_nanos(1),
        ..Default::default()
    };
    let r = rig(path(1, 1), options);
    let mut buf = [0u8; 2048];
    for i in 0..10 {
        r.client.send(&packet(i, 500)).unwrap();
        r.server.recv(&mut buf).unwrap();
    }
    drop(r.handle);
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("report.json")).unwrap())
            .unwrap();
    assert_eq!(json["up"]["forwarded"]["packets"], 10);
    assert!(json["lateness_flag"].as_str().unwrap().contains("exceeds"), "{json}");
    assert!(json["up"]["stats"]["queue_delay_ms"]["p99"].is_f64());
    let up = std::fs::read_to_string(dir.path().join("logs/up.log")).unwrap();
    assert!(up.starts_with("# mahimahi mm-link (uplink)"), "{up}");
    assert!(up.contains("# command line: unit test"));
    assert_eq!(up.lines().filter(|l| l.contains(" + 500")).count(), 10);
    assert_eq!(up.lines().filter(|l| l.contains(" - 500 ")).count(), 10);
    let down = std::fs::read_to_string(dir.path().join("logs/down.log")).unwrap();
    assert!(down.starts_with("# mahimahi mm-link (downlink)"));
}

#[test]
fn unwritable_log_dir_fails_start_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("not-a-dir");
    std::fs::write(&file, b"").unwrap();
    let (emu_c, _c) = device("c");
    let (emu_s, _s) = device("s");
    let options = EmulatorOptions { mahimahi_log_dir: Some(file.clone()), ..Default::default() };
    let err = Emulator::start_on(emu_c, emu_s, path(1, 1), options).unwrap_err();
    assert!(matches!(err, EmulatorError::File { .. }), "{err}");
    assert!(err.to_string().contains("not-a-dir"), "{err}");
}

/// Segmentation offload on `virtio_net_hdr` "devices" (datagram sockets carrying the frames a
/// TUN device with `IFF_VNET_HDR` would).
mod offload {
    use std::net::{IpAddr, Ipv4Addr};

    use tcptail_emu::segment::{VNET_HDR_LEN, VirtioNetHdr, coalesce};
    use tcptail_emu::wire::{self, IpPacket, PROTO_TCP};

    use super::*;

    /// TCP/IPv4 segment `i` of a flow: 20-byte headers, `payload` bytes, complete checksums.
    fn tcp_segment(i: u16, payload: usize, last: bool) -> Vec<u8> {
        let (src, dst) = (Ipv4Addr::new(10, 77, 0, 1), Ipv4Addr::new(10, 77, 0, 2));
        let total = 40 + payload;
        let mut p = vec![0u8; total];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        p[4..6].copy_from_slice(&(7000 + i).to_be_bytes());
        p[6] = 0x40; // DF
        p[8] = 64;
        p[9] = PROTO_TCP;
        p[12..16].copy_from_slice(&src.octets());
        p[16..20].copy_from_slice(&dst.octets());
        let tcp = &mut p[20..];
        tcp[0..2].copy_from_slice(&40000u16.to_be_bytes());
        tcp[2..4].copy_from_slice(&5201u16.to_be_bytes());
        tcp[4..8].copy_from_slice(&(1_000_000 + u32::from(i) * 1000).to_be_bytes());
        tcp[8..12].copy_from_slice(&555u32.to_be_bytes());
        tcp[12] = 5 << 4;
        tcp[13] = if last { 0x18 } else { 0x10 }; // ACK, PSH on the last
        tcp[14..16].copy_from_slice(&1000u16.to_be_bytes());
        for (k, b) in tcp[20..].iter_mut().enumerate() {
            *b = (usize::from(i) * 31 + k) as u8;
        }
        let check = wire::transport_checksum(src.into(), dst.into(), PROTO_TCP, &p[20..]);
        p[36..38].copy_from_slice(&check.to_be_bytes());
        IpPacket::new(&mut p[..]).unwrap().fill_checksum();
        p
    }

    /// A frame written by the emulator as the IP packet a wire would carry: the partial
    /// transport checksum of `F_NEEDS_CSUM` completed, as the receiving kernel would.
    fn on_the_wire(frame: &[u8]) -> Vec<u8> {
        let hdr = VirtioNetHdr::decode(frame).unwrap();
        assert_eq!(hdr.gso_kind(), VirtioNetHdr::GSO_NONE, "one segment per frame: {hdr:?}");
        let mut p = frame[VNET_HDR_LEN..].to_vec();
        if hdr.needs_csum() {
            let (src, dst) = (IpAddr::from([10, 77, 0, 1]), IpAddr::from([10, 77, 0, 2]));
            let at = usize::from(hdr.csum_start) + usize::from(hdr.csum_offset);
            let check = wire::transport_checksum(src, dst, PROTO_TCP, &p[20..]);
            p[at..at + 2].copy_from_slice(&check.to_be_bytes());
        }
        p
    }

    fn vnet_rig(rate: u64) -> Rig {
        let (emu_c, client) = UnixDatagram::pair().expect("socketpair");
        let client_dev = emu_c.try_clone().expect("dup");
        let (emu_s, server) = UnixDatagram::pair().expect("socketpair");
        for s in [&emu_c, &emu_s] {
            s.set_nonblocking(true).unwrap();
        }
        for s in [&client, &server] {
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        }
        let c = Endpoint::new(OwnedFd::from(emu_c), "client-dev".to_owned(), true);
        let s = Endpoint::new(OwnedFd::from(emu_s), "server-dev".to_owned(), true);
        let mut spec = path(0, 0);
        spec.up.rate = Rate::Constant(BitRate(rate));
        let handle = Emulator::start_on(c, s, spec, EmulatorOptions::default()).expect("start");
        Rig { handle, client, server, client_dev }
    }

    fn segments() -> Vec<Vec<u8>> {
        vec![tcp_segment(0, 1000, false), tcp_segment(1, 1000, false), tcp_segment(2, 400, true)]
    }

    #[test]
    fn a_slow_link_splits_a_gso_packet_into_its_wire_segments() {
        // At 30 Mbit/s a 1040-byte segment takes 277 µs: more than a run may carry.
        let r = vnet_rig(30_000_000);
        let segments = segments();
        r.client.send(&coalesce(&segments).unwrap()).unwrap();
        let mut buf = vec![0u8; 70_000];
        for (i, want) in segments.iter().enumerate() {
            let n = r.server.recv(&mut buf).unwrap();
            assert_eq!(on_the_wire(&buf[..n]), *want, "segment {i}");
        }
        let report = r.handle.stop();
        let up = &report.up;
        assert_eq!((up.reads, up.writes, up.forwarded.packets), (1, 3, 3), "{up:?}");
        assert_eq!(up.stats.arrivals.packets, 3);
        assert_eq!(up.forwarded.bytes, segments.iter().map(|s| s.len() as u64).sum::<u64>());
        assert_eq!(up.lateness.count, 3, "one lateness per segment");
        assert!(report.is_clean(), "{report:?}");
    }

    #[test]
    fn a_fast_link_writes_a_gso_packet_back_whole() {
        // At 1 Gbit/s a run may carry 12.5 kB: the three segments leave as the packet read.
        let r = vnet_rig(1_000_000_000);
        let frame = coalesce(&segments()).unwrap();
        r.client.send(&frame).unwrap();
        let mut buf = vec![0u8; 70_000];
        let n = r.server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], &frame[..]);
        let report = r.handle.stop();
        assert_eq!((report.up.reads, report.up.writes, report.up.forwarded.packets), (1, 1, 3));
        assert_eq!(report.up.copied_bytes, 0, "the payload is never copied");
    }

    #[test]
    fn a_malformed_gso_packet_is_counted_and_dropped() {
        let r = vnet_rig(1_000_000_000);
        let mut frame = coalesce(&segments()).unwrap();
        frame[1] = 3; // legacy UFO on a TCP packet
        r.client.send(&frame).unwrap();
        let ok = coalesce(&segments()[..1]).unwrap();
        r.client.send(&ok).unwrap();
        let mut buf = vec![0u8; 70_000];
        let n = r.server.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], &ok[..]);
        let report = r.handle.stop();
        assert_eq!(report.up.malformed_drops, 1);
        assert_eq!(report.up.forwarded.packets, 1);
        let error = report.up.last_error.clone().unwrap_or_default();
        assert!(error.contains("GSO type 3"), "{error}");
        assert!(!report.is_clean());
    }

    #[test]
    fn devices_must_agree_on_virtio_net_hdr() {
        let (a, _a) = UnixDatagram::pair().unwrap();
        let (b, _b) = UnixDatagram::pair().unwrap();
        let c = Endpoint::new(OwnedFd::from(a), "c".to_owned(), true);
        let s = Endpoint::new(OwnedFd::from(b), "s".to_owned(), false);
        let err = Emulator::start_on(c, s, path(0, 0), EmulatorOptions::default()).unwrap_err();
        assert!(err.to_string().contains("virtio_net_hdr"), "{err}");
    }
}

#[test]
fn thread_layouts_parse_by_the_names_they_print_and_serialise() {
    for threads in Threads::ALL {
        assert_eq!(threads.name().parse::<Threads>(), Ok(threads));
        assert_eq!(threads.to_string(), threads.name());
        let json = serde_json::to_value(threads).unwrap();
        assert_eq!(json, threads.name(), "reports name the layout as the flag does");
    }
    assert_eq!(" Split ".parse::<Threads>(), Ok(Threads::Split));
    assert_eq!("per_direction".parse::<Threads>(), Ok(Threads::PerDirection));
    let err = "dual".parse::<Threads>().unwrap_err();
    assert_eq!(err, "unknown thread layout 'dual' (use single, per-direction, split or pipeline)");
}
