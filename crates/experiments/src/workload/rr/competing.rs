//! Competing bulk TCP flows that share a round's path with the measured connection.
//!
//! Each flow is its own connection from the client namespace to the server namespace (the same
//! direction as the requests, so on a `tbf` path it fills the same bottleneck queue the
//! requests cross), with the congestion control the variant tests. The flows start before the
//! measurement and stop after it; the bytes received while the measurement ran become the
//! round's `competing_mbps`, which shows whether the bottleneck really was saturated.
//!
//! The sender and receiver threads are pinned to a CPU the measured pair does not use when
//! there is one: the question is what a shared *bottleneck* does to the tail, not what a
//! competing CPU hog does (on a real host the bulk flow would come from another machine).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};
use tcptail_bench::sys;

use crate::path::LivePath;
use crate::workload::RunError;

/// Bytes per `write` of a bulk sender.
const CHUNK: usize = 64 * 1024;

/// Bulk flows running on a live path; [`Competing::stop`] (or drop) ends them.
pub struct Competing {
    stop: Arc<AtomicBool>,
    received: Arc<AtomicU64>,
    threads: Vec<JoinHandle<io::Result<()>>>,
    mark: Option<(Instant, u64)>,
}

impl Competing {
    /// Starts `flows` bulk connections client → server with congestion control `cc` (the
    /// namespace default when `None`), their threads pinned to `cpu` when given.
    pub fn start(
        live: &LivePath,
        flows: usize,
        cc: Option<&str>,
        cpu: Option<usize>,
    ) -> Result<Competing, RunError> {
        let io_err = |what: &'static str| move |e: io::Error| RunError::failed(what, e);
        let listener = live
            .server()
            .run(|| TcpListener::bind((live.server_addr(), 0)))?
            .map_err(io_err("competing flow: listen"))?;
        let addr: SocketAddr = listener.local_addr().map_err(io_err("competing flow: listen"))?;
        let mut me = Competing {
            stop: Arc::new(AtomicBool::new(false)),
            received: Arc::new(AtomicU64::new(0)),
            threads: Vec::new(),
            mark: None,
        };
        for _ in 0..flows {
            let sender = live
                .client()
                .run(|| -> io::Result<TcpStream> {
                    let s = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?;
                    if let Some(cc) = cc {
                        s.set_tcp_congestion(cc.as_bytes())?;
                    }
                    s.connect_timeout(&SockAddr::from(addr), Duration::from_secs(5))?;
                    Ok(s.into())
                })?
                .map_err(io_err("competing flow: connect"))?;
            let (receiver, _) = listener.accept().map_err(io_err("competing flow: accept"))?;
            // A timeout lets the sender see the stop flag even while the bottleneck stalls it.
            sender
                .set_write_timeout(Some(Duration::from_millis(50)))
                .map_err(io_err("competing flow: timeout"))?;
            let (stop, received) = (Arc::clone(&me.stop), Arc::clone(&me.received));
            me.threads.push(spawn("tcptail-bulk-rx", cpu, move || receive(receiver, &received)));
            me.threads.push(spawn("tcptail-bulk-tx", cpu, move || send(sender, &stop)));
        }
        Ok(me)
    }

    /// Marks the start of the measurement (for [`Competing::stop`]'s goodput).
    pub fn mark(&mut self) {
        self.mark = Some((Instant::now(), self.received.load(Ordering::Relaxed)));
    }

    /// Stops every flow and returns their combined goodput since [`Competing::mark`], Mbit/s.
    pub fn stop(mut self) -> Result<Option<f64>, RunError> {
        let goodput = self.mark.map(|(t, bytes)| {
            let delta = self.received.load(Ordering::Relaxed).saturating_sub(bytes);
            delta as f64 * 8.0 / t.elapsed().as_secs_f64() / 1e6
        });
        self.stop.store(true, Ordering::Relaxed);
        for t in std::mem::take(&mut self.threads) {
            match t.join() {
                Ok(r) => r.map_err(|e| RunError::failed("competing flow", e))?,
                Err(_) => return Err(RunError::failed("competing flow", "a thread panicked")),
            }
        }
        Ok(goodput)
    }
}

impl Drop for Competing {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in std::mem::take(&mut self.threads) {
            let _ = t.join();
        }
    }
}

fn spawn(
    name: &str,
    cpu: Option<usize>,
    f: impl FnOnce() -> io::Result<()> + Send + 'static,
) -> JoinHandle<io::Result<()>> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            if let Some(cpu) = cpu {
                sys::pin_current_thread(cpu)?;
            }
            f()
        })
        .expect("spawning a competing-flow thread")
}

fn send(mut stream: TcpStream, stop: &AtomicBool) -> io::Result<()> {
    let buf = vec![0x5au8; CHUNK];
    while !stop.load(Ordering::Relaxed) {
        match stream.write(&buf) {
            Ok(_) => {}
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    // EOF for the receiver.
    let _ = stream.shutdown(std::net::Shutdown::Write);
    Ok(())
}

fn receive(mut stream: TcpStream, received: &AtomicU64) -> io::Result<()> {
    let mut buf = vec![0u8; 256 * 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => {
                received.fetch_add(n as u64, Ordering::Relaxed);
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            // The sender stopping mid-stream may reset: the flow is over either way.
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}
