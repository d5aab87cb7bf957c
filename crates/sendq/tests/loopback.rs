//! [`BoundedSender`] on real loopback sockets: the bound holds after every write on every path
//! (`send`, `send_all`, `Write`) in both threshold modes; a non-blocking writer gets
//! `WouldBlock` from the bound (threshold and adaptive LOWAT) or the kernel and recovers once
//! the queue drains; a blocking writer waits but never forever; the stats count the kernel's
//! waits too and keep the estimate fresh in every mode; the LOWAT modes set the socket option.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use socket2::SockRef;
use tcptail_sendq::{BoundedSender, GovernorConfig, GovernorMode};

/// A connected pair whose receiver has a small receive buffer and does not read yet, so the
/// sender's unsent queue builds up.
fn pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    SockRef::from(&listener).set_recv_buffer_size(16 * 1024).unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    (client, server)
}

fn drain(mut server: TcpStream, total: u64) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; 64 * 1024];
        let mut got = 0;
        while got < total {
            match server.read(&mut buf) {
                Ok(0) | Err(_) => break,
                Ok(n) => got += n as u64,
            }
        }
        got
    })
}

#[test]
fn non_blocking_returns_would_block_and_recovers() {
    let (client, server) = pair();
    client.set_nonblocking(true).unwrap();
    // 1 µs at loopback rates is a few KB: the bound trips long before the socket buffer fills.
    let mut sender = BoundedSender::new(
        client,
        GovernorConfig::new(GovernorMode::Threshold(Duration::from_micros(1))),
    )
    .unwrap();
    let chunk = vec![1u8; 8 * 1024];
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match sender.send(&chunk) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if sender.stats().would_block > 0 {
                    break;
                }
            }
            Err(e) => panic!("send: {e}"),
        }
        assert!(Instant::now() < deadline, "the bound never tripped: {:?}", sender.stats());
    }
    let stats = sender.stats();
    assert!(sender.retry_after().is_some_and(|d| d > Duration::ZERO));
    let e = stats.estimate.expect("an estimate");
    // Held back because less than half the bound (8 KB wanted) was free.
    let bound = sender.governor().bound().expect("a bound");
    assert!(u64::from(e.notsent_bytes) + (bound / 2).min(8 * 1024) > bound, "{e:?} {bound}");
    assert_eq!(stats.kernel_refusals, 0, "the bound said no, not the kernel: {stats:?}");
    // Now the receiver drains: the sender must be admitted again.
    let reader = drain(server, stats.bytes_written + 64 * 1024);
    let deadline = Instant::now() + Duration::from_secs(5);
    let sent_more = loop {
        match sender.send(&vec![2u8; 64 * 1024]) {
            Ok(n) => break n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(sender.retry_after().unwrap_or(Duration::from_micros(100)));
            }
            Err(e) => panic!("send after drain: {e}"),
        }
        assert!(Instant::now() < deadline, "never recovered: {:?}", sender.stats());
    };
    assert!(sent_more > 0);
    drop(sender);
    let got = reader.join().unwrap();
    assert_eq!(got, stats.bytes_written + sent_more as u64);
}

#[test]
fn blocking_writer_waits_but_never_forever() {
    let (client, server) = pair();
    let mut sender = BoundedSender::new(
        client,
        GovernorConfig::new(GovernorMode::Threshold(Duration::from_micros(1))),
    )
    .unwrap();
    let total = 4u64 << 20;
    let reader = drain(server, total);
    let chunk = vec![3u8; 16 * 1024];
    let start = Instant::now();
    for _ in 0..total / chunk.len() as u64 {
        sender.send_all(&chunk).unwrap();
    }
    drop(sender.into_inner());
    assert_eq!(reader.join().unwrap(), total);
    assert!(start.elapsed() < Duration::from_secs(20));
}

#[test]
fn lowat_modes_set_the_socket_option() {
    let (client, server) = pair();
    let sender =
        BoundedSender::new(client, GovernorConfig::new(GovernorMode::StaticLowat(16_384))).unwrap();
    assert_eq!(SockRef::from(sender.get_ref()).tcp_notsent_lowat().unwrap(), 16_384);
    assert_eq!(sender.stats().lowat, Some(16_384));
    drop(server);

    let (client, server) = pair();
    let reader = drain(server, 1 << 20);
    let mut sender = BoundedSender::new(
        client,
        GovernorConfig::new(GovernorMode::AdaptiveLowat(Duration::from_millis(1))),
    )
    .unwrap();
    for _ in 0..16 {
        sender.send_all(&[4u8; 64 * 1024]).unwrap();
    }
    let stats = sender.stats();
    let lowat = stats.lowat.expect("a LOWAT was set");
    assert_eq!(SockRef::from(sender.get_ref()).tcp_notsent_lowat().unwrap(), lowat);
    assert!(stats.lowat_sets >= 1 && stats.info_reads >= 1, "{stats:?}");
    drop(sender);
    assert_eq!(reader.join().unwrap(), 1 << 20);
}

#[test]
fn no_control_writes_everything_and_reads_tcp_info_at_a_bounded_rate() {
    let (client, server) = pair();
    let reader = drain(server, 1 << 20);
    let start = Instant::now();
    let mut sender =
        BoundedSender::new(client, GovernorConfig::new(GovernorMode::NoControl)).unwrap();
    for _ in 0..16 {
        sender.send_all(&[5u8; 64 * 1024]).unwrap();
    }
    let stats = sender.stats();
    let elapsed_ms = start.elapsed().as_millis() as u64;
    assert_eq!(stats.bytes_written, 1 << 20);
    assert!(stats.estimate.is_some(), "{stats:?}");
    // One read at construction, at most one per `refresh` (2 ms) while writing, one per wait.
    assert!(stats.info_reads <= 2 + elapsed_ms / 2 + stats.waits, "{stats:?} in {elapsed_ms} ms");
    drop(sender);
    assert_eq!(reader.join().unwrap(), 1 << 20);
}

fn notsent(stream: &TcpStream) -> u64 {
    u64::from(tcptail_sock::tcp_info::tcp_info(stream.as_fd()).unwrap().notsent_bytes.unwrap())
}

/// A reader that takes `step` bytes every `every`, until EOF: the sender's queue builds up.
fn slow_drain(mut server: TcpStream, step: usize, every: Duration) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut buf = vec![0u8; step];
        let mut got = 0;
        loop {
            std::thread::sleep(every);
            match server.read(&mut buf) {
                Ok(0) | Err(_) => return got,
                Ok(n) => got += n as u64,
            }
        }
    })
}

/// After every write, through every path, `notsent` is at most the governor's bound (the
/// bound in force when the write was admitted; the kernel only ever lowers `notsent`).
#[test]
fn the_bound_holds_after_every_write_on_every_path() {
    for mode in [
        GovernorMode::AdaptiveLowat(Duration::from_millis(1)),
        GovernorMode::Threshold(Duration::from_millis(1)),
    ] {
        let (client, server) = pair();
        let reader = slow_drain(server, 8 * 1024, Duration::from_millis(1));
        let mut config = GovernorConfig::new(mode);
        // The rate here is the slow reader's, or loopback's GB/s: pin the bound so the queue
        // really reaches it (the clamp applies to both modes).
        (config.min_bound, config.max_bound) = (24 * 1024, 24 * 1024);
        let mut sender = BoundedSender::new(&client, config).unwrap();
        let chunk = vec![9u8; 40 * 1024];
        let mut total = 0u64;
        let mut worst = 0u64;
        for i in 0..60 {
            match i % 3 {
                0 => total += sender.send(&chunk).unwrap() as u64,
                1 => {
                    sender.send_all(&chunk).unwrap();
                    total += chunk.len() as u64;
                }
                _ => {
                    sender.write_all(&chunk).unwrap();
                    total += chunk.len() as u64;
                }
            }
            let bound = sender.governor().bound().expect("a bound");
            let queued = notsent(&client);
            assert!(queued <= bound, "{mode:?}: notsent {queued} > bound {bound} after write {i}");
            worst = worst.max(queued);
        }
        let stats = sender.stats();
        assert!(worst > 12 * 1024, "{mode:?}: the queue never approached the bound ({worst})");
        assert!(stats.waits > 0 && stats.time_blocked > Duration::ZERO, "{mode:?}: {stats:?}");
        if let GovernorMode::AdaptiveLowat(_) = mode {
            assert_eq!(SockRef::from(&client).tcp_notsent_lowat().unwrap() as u64, {
                sender.governor().bound().unwrap()
            });
        }
        drop(client);
        assert_eq!(reader.join().unwrap(), total, "{mode:?}");
    }
}

/// Adaptive LOWAT on a non-blocking socket: the bound (not the kernel) says `WouldBlock`
/// exactly when the kernel withholds `POLLOUT`; `POLLOUT` comes once half the bound is free,
/// and the next write then goes.
#[test]
fn non_blocking_adaptive_returns_would_block_and_recovers_on_pollout() {
    let (client, server) = pair();
    client.set_nonblocking(true).unwrap();
    let mut config = GovernorConfig::new(GovernorMode::AdaptiveLowat(Duration::from_millis(1)));
    (config.min_bound, config.max_bound) = (16 * 1024, 16 * 1024);
    let mut sender = BoundedSender::new(&client, config).unwrap();
    assert_eq!(SockRef::from(&client).tcp_notsent_lowat().unwrap(), 16 * 1024);
    let chunk = vec![7u8; 8 * 1024];
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut written = 0u64;
    loop {
        match sender.send(&chunk) {
            Ok(n) => {
                written += n as u64;
                assert!(notsent(&client) <= 16 * 1024);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("send: {e}"),
        }
        assert!(Instant::now() < deadline, "the bound never tripped: {:?}", sender.stats());
    }
    let stats = sender.stats();
    assert_eq!((stats.would_block, stats.kernel_refusals), (1, 0), "{stats:?}");
    assert_eq!(sender.retry_after(), None, "adaptive mode waits for POLLOUT");
    let poll_out = |timeout: i32| {
        let mut fds = [libc_poll_fd(&client)];
        rustix::event::poll(&mut fds, Some(&timespec(timeout))).unwrap() > 0
    };
    assert!(!poll_out(0), "WouldBlock while the kernel reports POLLOUT: an event loop would spin");
    // The peer drains; POLLOUT comes, and the write after it is admitted at once.
    let reader = drain(server, written + 8 * 1024);
    assert!(poll_out(5000), "POLLOUT never came");
    let n = sender.send(&chunk).expect("admitted after POLLOUT");
    assert_eq!(n, chunk.len(), "half the bound is free: a whole 8 KB write fits");
    let stats = sender.stats();
    assert_eq!(stats.would_block, 1, "{stats:?}");
    drop(client);
    assert_eq!(reader.join().unwrap(), written + n as u64);
}

fn libc_poll_fd(stream: &TcpStream) -> rustix::event::PollFd<'_> {
    rustix::event::PollFd::new(stream, rustix::event::PollFlags::OUT)
}

fn timespec(ms: i32) -> rustix::time::Timespec {
    rustix::time::Timespec {
        tv_sec: i64::from(ms / 1000),
        tv_nsec: i64::from(ms % 1000) * 1_000_000,
    }
}

/// No control on a blocking socket whose kernel buffer fills: the time the kernel blocks the
/// write is measured and counted, and the estimate is re-read at the refusal.
#[test]
fn no_control_counts_the_kernels_blocking_in_the_stats() {
    let (client, server) = pair();
    SockRef::from(&client).set_send_buffer_size(32 * 1024).unwrap();
    let mut sender =
        BoundedSender::new(&client, GovernorConfig::new(GovernorMode::NoControl)).unwrap();
    let total = 1u64 << 20;
    let reader = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        drain(server, total).join().unwrap()
    });
    let start = Instant::now();
    sender.send_all(&vec![1u8; total as usize]).unwrap();
    let elapsed = start.elapsed();
    let stats = sender.stats();
    assert!(stats.kernel_refusals >= 1 && stats.waits >= 1, "{stats:?}");
    assert!(stats.time_blocked >= Duration::from_millis(200), "{stats:?}");
    assert!(stats.time_blocked <= elapsed, "{stats:?} in {elapsed:?}");
    let e = stats.estimate.expect("re-read at the refusal");
    assert!(e.notsent_bytes > 0, "{e:?}");
    drop(client);
    assert_eq!(reader.join().unwrap(), total);
}

/// Static LOWAT: the estimate follows the queue instead of keeping its construction value.
#[test]
fn static_lowat_keeps_the_estimate_fresh() {
    let (client, server) = pair();
    let mut sender =
        BoundedSender::new(&client, GovernorConfig::new(GovernorMode::StaticLowat(256 * 1024)))
            .unwrap();
    assert_eq!(sender.stats().estimate.map(|e| e.notsent_bytes), Some(0));
    // The peer does not read: what does not fit its window stays unsent.
    sender.send_all(&[3u8; 128 * 1024]).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    sender.send_all(&[3u8; 1024]).unwrap();
    let stats = sender.stats();
    let e = stats.estimate.expect("an estimate");
    assert!(e.notsent_bytes > 32 * 1024, "stale estimate: {stats:?}");
    assert!(stats.info_reads >= 2, "{stats:?}");
    drop(server);
}

#[test]
fn non_blocking_lowat_gets_would_block_from_the_kernel_and_recovers() {
    let (client, server) = pair();
    client.set_nonblocking(true).unwrap();
    let mut sender =
        BoundedSender::new(client, GovernorConfig::new(GovernorMode::StaticLowat(16_384))).unwrap();
    let chunk = vec![6u8; 4096];
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match sender.send(&chunk) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => panic!("send: {e}"),
        }
        assert!(Instant::now() < deadline, "never blocked: {:?}", sender.stats());
    }
    let written = sender.stats().bytes_written;
    let stats = sender.stats();
    assert!(stats.kernel_refusals >= 1 && stats.would_block >= 1, "{stats:?}");
    assert!(stats.estimate.is_some_and(|e| e.notsent_bytes > 0), "re-read at EAGAIN: {stats:?}");
    // The peer's small window plus the 16 KB of unsent data, far below a full send buffer.
    assert!(written < 512 * 1024, "{written} bytes accepted before EAGAIN");
    let reader = drain(server, written + 4096);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match sender.send(&chunk) {
            Ok(n) => {
                let total = written + n as u64;
                drop(sender);
                assert_eq!(reader.join().unwrap(), total);
                return;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => panic!("send after drain: {e}"),
        }
        assert!(Instant::now() < deadline, "never recovered");
    }
}

#[test]
fn fresh_sender_merges_while_blocked_and_delivers_the_latest_value() {
    use tcptail_sendq::{FreshSender, FreshnessPolicy};
    let (client, server) = pair();
    client.set_nonblocking(true).unwrap();
    let policy = FreshnessPolicy { conflate: true, max_age: None };
    let mut fresh = FreshSender::new(
        client,
        GovernorConfig::new(GovernorMode::Threshold(Duration::from_micros(1))),
        policy,
    )
    .unwrap();
    let msg = |key: u8, seq: u32| {
        let mut m = vec![0u8; 64];
        m[0] = key;
        m[1..5].copy_from_slice(&seq.to_le_bytes());
        m
    };
    // Fill the socket until the bound holds the writer back.
    let mut seq = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while fresh.stats().sender.would_block == 0 {
        fresh.offer(0, msg(0, seq));
        seq += 1;
        fresh.pump().unwrap();
        assert!(Instant::now() < deadline, "{:?}", fresh.stats());
    }
    // Blocked: 100 updates for each of two keys merge into one message per key.
    for _ in 0..100 {
        fresh.offer(1, msg(1, seq));
        fresh.offer(2, msg(2, seq));
        seq += 1;
        fresh.pump().unwrap();
    }
    let stats = fresh.stats();
    assert!(stats.queue.merged >= 150, "{stats:?}");
    assert!(stats.queued <= 3, "one message per key: {stats:?}");
    // Drain: everything queued goes out, and the last message of each key is its latest.
    let mut server = server;
    server.set_read_timeout(Some(Duration::from_millis(200))).unwrap();
    let reader = std::thread::spawn(move || {
        let mut all = Vec::new();
        let mut buf = [0u8; 65536];
        while let Ok(n) = server.read(&mut buf) {
            if n == 0 {
                break;
            }
            all.extend_from_slice(&buf[..n]);
        }
        all
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while fresh.stats().queued > 0 {
        fresh.pump().unwrap();
        std::thread::sleep(Duration::from_micros(200));
        assert!(Instant::now() < deadline, "never drained: {:?}", fresh.stats());
    }
    // Finish a partly written message, if any.
    while fresh.pump().unwrap() > 0 {}
    let stats = fresh.stats();
    drop(fresh);
    let bytes = reader.join().unwrap();
    assert_eq!(bytes.len() % 64, 0);
    assert_eq!(bytes.len() as u64, stats.sender.bytes_written);
    assert_eq!(stats.messages_sent, bytes.len() as u64 / 64);
    let last_of = |key: u8| {
        bytes
            .chunks(64)
            .filter(|m| m[0] == key)
            .map(|m| u32::from_le_bytes(m[1..5].try_into().unwrap()))
            .next_back()
    };
    assert_eq!(last_of(1), Some(seq - 1));
    assert_eq!(last_of(2), Some(seq - 1));
    let s = stats.queue;
    assert_eq!(s.pushed, s.merged + s.dropped_stale + s.popped);
}
