//! What the server and engine tests share: a server on 127.0.0.1 with its events on a
//! channel, a client connection from a chosen local address with the handshake done, and
//! whether this kernel can set up the io_uring engine's ring.

#![allow(dead_code)] // each test binary uses its own part

use std::net::{SocketAddr, TcpStream};
use std::sync::mpsc::{self, Receiver};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use socket2::{Domain, Socket, Type};
use tcptail_bench::server::{
    HANDSHAKE_TIMEOUT, RunningServer, Server, ServerConfig, ServerEvent, ShutdownHandle,
};
use tcptail_bench::sys::uring::{Ring, RingOptions};
use tcptail_bench::wire::{self, HelloConfig, Welcome};

/// How long a test waits for a server event or a reply before it fails.
pub const WAIT: Duration = Duration::from_secs(10);

/// Binds and spawns the server; its events arrive on the returned channel.
pub fn start(config: ServerConfig) -> (RunningServer, Receiver<ServerEvent>) {
    let (tx, rx) = mpsc::channel();
    let running = Server::bind(config).expect("bind 127.0.0.1:0").spawn_with_events(move |e| {
        let _ = tx.send(e);
    });
    (running, rx)
}

/// Waits for the first event `pick` accepts, skipping the others.
pub fn wait_for<T>(
    rx: &Receiver<ServerEvent>,
    mut pick: impl FnMut(ServerEvent) -> Option<T>,
) -> T {
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let event = rx.recv_timeout(left).expect("the expected server event never came");
        if let Some(found) = pick(event) {
            return found;
        }
    }
}

/// Shuts the server down and requires `Server::run` (on `runner`, which sends on `done` when
/// it returns) to return promptly: not waiting for any of the server's own timeouts to end a
/// connection (the shortest, a Hello's, is 5 s; an idle one's 60 s). Half the shortest is the
/// bound, so a loaded host's slow wake-ups pass and a shutdown that waits for a timeout does
/// not.
pub fn shutdown_promptly(handle: &ShutdownHandle, done: &Receiver<()>, runner: JoinHandle<()>) {
    let bound = HANDSHAKE_TIMEOUT / 2;
    let asked = Instant::now();
    handle.shutdown();
    done.recv_timeout(bound).expect("run did not return promptly");
    assert!(asked.elapsed() < bound);
    runner.join().unwrap();
}

/// A connection to `addr` from `local` (any 127/8 address: the per-peer limits count by it),
/// with NODELAY and a read timeout of [`WAIT`].
pub fn connect_from(local: [u8; 4], addr: SocketAddr) -> TcpStream {
    let socket = Socket::new(Domain::IPV4, Type::STREAM, None).unwrap();
    socket.bind(&SocketAddr::from((local, 0)).into()).unwrap();
    socket.connect(&addr.into()).unwrap();
    let stream = TcpStream::from(socket);
    stream.set_read_timeout(Some(WAIT)).unwrap();
    stream.set_nodelay(true).unwrap();
    stream
}

/// A connection from 127.0.0.1 that has sent `hello` and read the server's Welcome.
pub fn handshake(addr: SocketAddr, hello: &HelloConfig) -> (TcpStream, Welcome) {
    let mut stream = connect_from([127, 0, 0, 1], addr);
    wire::write_hello(&mut stream, hello).unwrap();
    let welcome = wire::read_welcome(&mut stream).expect("a Welcome");
    (stream, welcome)
}

/// Whether this kernel lets us set up a ring with provided buffers; prints why not.
pub fn uring_available(test: &str) -> bool {
    let options = RingOptions {
        entries: 8,
        recv_buffers: 8,
        recv_buffer_len: 4096,
        send_slots: 1,
        send_slot_len: 64,
        sqpoll_idle_ms: None,
    };
    match Ring::new(options) {
        Ok(_) => true,
        Err(e) => {
            let code = e.raw_os_error();
            // ENOSYS: no io_uring; EPERM: io_uring_disabled=2. Anything else is a failure.
            assert!(
                matches!(code, Some(libc::ENOSYS | libc::EPERM))
                    || e.kind() == std::io::ErrorKind::Unsupported,
                "io_uring setup failed unexpectedly: {e}"
            );
            eprintln!("SKIPPED {test}: this kernel has no usable io_uring ({e})");
            false
        }
    }
}
