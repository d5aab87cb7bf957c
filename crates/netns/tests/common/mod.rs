//! Shared helpers for the namespace tests. These tests need root (CI runs as root); when a
//! capability is missing they fail with the reason instead of passing silently.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tcptail_netns::addr::{CLIENT_ADDR, SERVER_ADDR};
use tcptail_netns::{Netns, TunPair, ensure_root};

/// Fails the test with the reason if this process cannot create namespaces.
pub fn require_root() {
    if let Err(e) = ensure_root() {
        panic!("this test needs root with CAP_NET_ADMIN + CAP_SYS_ADMIN and iproute2: {e}");
    }
    if !std::path::Path::new("/dev/net/tun").exists() {
        panic!("this test needs /dev/net/tun (the tun module)");
    }
}

/// Whether `pid` is gone or a zombie (a zombie has released its namespaces).
pub fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => tcptail_netns::procfs::parse_task_stat(&stat).is_some_and(|t| t.state == 'Z'),
    }
}

/// Polls `cond` until it holds or `timeout` passes.
pub fn eventually(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Opens a TCP connection from the client namespace to the server namespace's fixed address,
/// sends `len` bytes, expects them echoed back, and checks the peer addresses.
pub fn tcp_echo(client: &Netns, server: &Netns, len: usize) {
    let listener = server
        .run(|| TcpListener::bind((SERVER_ADDR, 0)))
        .expect("enter server namespace")
        .unwrap_or_else(|e| panic!("bind {SERVER_ADDR} in {}: {e}", server.name()));
    let port = listener.local_addr().unwrap().port();
    listener.set_nonblocking(true).unwrap();
    let echo = std::thread::spawn(move || {
        let deadline = Instant::now() + Duration::from_secs(10);
        let (mut conn, peer) = loop {
            match listener.accept() {
                Ok(c) => break c,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    assert!(Instant::now() < deadline, "no connection arrived within 10 s");
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => panic!("accept: {e}"),
            }
        };
        conn.set_nonblocking(false).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let n = conn.read(&mut buf).expect("echo read");
            if n == 0 {
                break;
            }
            conn.write_all(&buf[..n]).expect("echo write");
        }
        peer
    });
    let target = SocketAddr::from((SERVER_ADDR, port));
    let stream = client
        .run(|| TcpStream::connect_timeout(&target, Duration::from_secs(5)))
        .expect("enter client namespace")
        .unwrap_or_else(|e| panic!("connect {target} from {}: {e}", client.name()));
    assert_eq!(stream.local_addr().unwrap().ip(), CLIENT_ADDR);
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let payload: Vec<u8> = (0..len).map(|i| (i * 7 + 3) as u8).collect();
    let mut writer = stream.try_clone().unwrap();
    let to_send = payload.clone();
    let send = std::thread::spawn(move || {
        writer.write_all(&to_send).expect("client write");
        writer.shutdown(std::net::Shutdown::Write).unwrap();
    });
    let mut back = Vec::with_capacity(len);
    (&stream).read_to_end(&mut back).expect("client read");
    send.join().unwrap();
    assert!(back == payload, "echo mismatch: {} of {len} bytes back", back.len());
    let peer = echo.join().unwrap();
    assert_eq!(peer.ip(), std::net::IpAddr::V4(CLIENT_ADDR));
}

/// A minimal emulator: copies packets between the two TUN descriptors until stopped.
pub struct Forwarder {
    stop: Arc<AtomicBool>,
    packets: Arc<AtomicU64>,
    largest: Arc<AtomicU64>,
    handle: Option<JoinHandle<TunPair>>,
}

impl Forwarder {
    pub fn start(pair: TunPair) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let packets = Arc::new(AtomicU64::new(0));
        let largest = Arc::new(AtomicU64::new(0));
        let (s, p, l) = (Arc::clone(&stop), Arc::clone(&packets), Arc::clone(&largest));
        let handle = std::thread::spawn(move || {
            use rustix::event::{PollFd, PollFlags, poll};
            let timeout = rustix::time::Timespec { tv_sec: 0, tv_nsec: 50_000_000 };
            // Room for a 64 KiB GSO packet behind its virtio_net_hdr.
            let mut buf = vec![0u8; 65536 + 64];
            while !s.load(Ordering::Relaxed) {
                let mut fds = [
                    PollFd::new(&pair.client, PollFlags::IN),
                    PollFd::new(&pair.server, PollFlags::IN),
                ];
                poll(&mut fds, Some(&timeout)).expect("poll");
                let ready = [!fds[0].revents().is_empty(), !fds[1].revents().is_empty()];
                for (i, (from, to)) in [(&pair.client, &pair.server), (&pair.server, &pair.client)]
                    .into_iter()
                    .enumerate()
                {
                    if !ready[i] {
                        continue;
                    }
                    while let Ok(n) = rustix::io::read(from.as_fd(), &mut buf) {
                        let _ = rustix::io::write(to.as_fd(), &buf[..n]);
                        p.fetch_add(1, Ordering::Relaxed);
                        l.fetch_max(n as u64, Ordering::Relaxed);
                    }
                }
            }
            pair
        });
        Forwarder { stop, packets, largest, handle: Some(handle) }
    }

    /// The longest read so far, in bytes (a `virtio_net_hdr` included).
    pub fn largest(&self) -> u64 {
        self.largest.load(Ordering::Relaxed)
    }

    pub fn packets(&self) -> u64 {
        self.packets.load(Ordering::Relaxed)
    }

    /// Stops the thread and hands the TUN devices back.
    pub fn stop(mut self) -> TunPair {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().unwrap().join().expect("forwarder panicked")
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}
