//! The AF_XDP engine (seed 001, "AF_XDP to the Rescue?"): a UDP request/response between two
//! AF_XDP sockets on a veth pair, beside the same request/response over kernel UDP sockets,
//! so the two can be measured on the same pair in the same run.
//!
//! Each end attaches [`program`] to its interface: frames to the end's UDP port are
//! redirected to its AF_XDP socket, everything else (ARP, TCP, other ports) is passed to the
//! kernel as usual, the seed's "kernel bypass with kernel stack integration". The sockets run
//! in **copy mode** (veth has no zero-copy), receive from their ring without a system call
//! when busy-polling, or sleep in `poll()` when not, and build whole Ethernet frames
//! ([`frame`]). The transmit side is the seed's point: in copy mode a frame leaves only inside
//! a `sendto()` on the socket, so every request and every response costs one system call
//! (a **kick**); the engine counts them and times each, so the report can say what the
//! transmit side still costs.
//!
//! The payloads are the bench's own wire frames ([`crate::wire`]): a Request header asking
//! for a `reply_len`-byte Response, matched by sequence number. UDP loses datagrams; a
//! request unanswered within the response timeout is counted as lost and kept in the
//! percentiles at the time it waited (a lower bound), and the client goes on.
//!
//! Needs root (creating BPF maps, loading XDP programs and AF_XDP sockets); where the kernel
//! or the privileges do not allow it, [`Endpoint::open`] fails with
//! [`DatagramError::Unavailable`], which says what is missing.

use std::io;
use std::net::{SocketAddrV4, UdpSocket};
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::stats::LatencyHistogram;
use crate::sys::xdp::{self as sys, XdpProgram, Xsk, XskMap};
use crate::wire::{self, FrameKind, HEADER_LEN, Header};

pub mod frame;
pub mod lab;
pub mod program;

use frame::{Flow, HEADERS_LEN, MAX_PAYLOAD};

/// Longest sleep in one wait, so a stop is noticed promptly.
const SLICE: Duration = Duration::from_millis(50);
/// Spinning: ring or socket polls between clock reads.
const SPIN_TURNS: u32 = 256;

/// Which sockets carry the datagrams.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DatagramEngine {
    /// Kernel UDP sockets (`send`/`recv`).
    KernelUdp,
    /// AF_XDP sockets in copy mode behind an XDP redirect program.
    AfXdp,
}

impl DatagramEngine {
    /// A short name.
    pub fn name(self) -> &'static str {
        match self {
            DatagramEngine::KernelUdp => "kernel UDP",
            DatagramEngine::AfXdp => "AF_XDP",
        }
    }
}

/// Why a datagram run failed.
#[derive(Debug, thiserror::Error)]
pub enum DatagramError {
    /// AF_XDP or XDP cannot be used here.
    #[error("AF_XDP is not available: {0}")]
    Unavailable(String),
    /// A step failed.
    #[error("{step}: {source}")]
    Io {
        /// What was being done.
        step: String,
        /// The cause.
        source: io::Error,
    },
    /// A configuration that cannot run.
    #[error("{0}")]
    Config(String),
}

fn io_err(step: impl Into<String>) -> impl FnOnce(io::Error) -> DatagramError {
    let step = step.into();
    move |source| DatagramError::Io { step, source }
}

/// The AF_XDP side of an endpoint: socket, program, map and link (dropping the link detaches
/// the program).
struct XdpSide {
    xsk: Xsk,
    _link: OwnedFd,
    _program: XdpProgram,
    _map: XskMap,
}

enum Socket {
    Udp(UdpSocket),
    Xdp(Box<XdpSide>),
}

/// One end of a datagram request/response, bound to its interface and port.
pub struct Endpoint {
    socket: Socket,
    /// Outgoing flow (MACs filled once the peer's is known).
    flow: Flow,
    ip_id: u16,
    /// Which XDP hook the program went into ("native" or "generic"), AF_XDP only.
    pub xdp_mode: Option<&'static str>,
    /// Busy-poll instead of sleeping.
    spin: bool,
}

impl Endpoint {
    /// Opens an endpoint on interface `ifname` of the **calling thread's namespace**, at
    /// `local`, talking to `peer`. Its sockets may then be used from any thread.
    ///
    /// `spin`: busy-poll. Kernel UDP spins on a non-blocking socket; AF_XDP spins on its
    /// receive ring and, while it is empty, makes the kernel busy-poll the interface's NAPI
    /// context (`SO_BUSY_POLL` with `SO_PREFER_BUSY_POLL`, driven by non-blocking
    /// `recvfrom()` calls). Without it both sleep (`recv`, `poll()`) until a datagram comes.
    pub fn open(
        engine: DatagramEngine,
        ifname: &str,
        local: SocketAddrV4,
        peer: SocketAddrV4,
        spin: bool,
    ) -> Result<Endpoint, DatagramError> {
        let src_mac =
            sys::mac_address(ifname).map_err(io_err(format!("reading {ifname}'s MAC")))?;
        let flow = Flow { src_mac, dst_mac: [0xff; 6], src: local, dst: peer };
        let (socket, xdp_mode) = match engine {
            DatagramEngine::KernelUdp => {
                let s = UdpSocket::bind(local).map_err(io_err(format!("binding UDP {local}")))?;
                s.connect(peer).map_err(io_err(format!("connecting UDP to {peer}")))?;
                s.set_read_timeout(Some(SLICE)).map_err(io_err("SO_RCVTIMEO"))?;
                s.set_nonblocking(spin).map_err(io_err("O_NONBLOCK"))?;
                (Socket::Udp(s), None)
            }
            DatagramEngine::AfXdp => {
                let (side, mode) = open_xdp(ifname, local.port())?;
                if spin {
                    side.xsk.enable_busy_poll(50).map_err(io_err("SO_BUSY_POLL on AF_XDP"))?;
                }
                (Socket::Xdp(Box::new(side)), Some(mode))
            }
        };
        Ok(Endpoint { socket, flow, ip_id: 0, xdp_mode, spin })
    }

    /// This end's MAC address.
    pub fn mac(&self) -> [u8; 6] {
        self.flow.src_mac
    }

    /// Tells the endpoint its peer's MAC (AF_XDP writes whole frames; no ARP here).
    pub fn set_peer_mac(&mut self, mac: [u8; 6]) {
        self.flow.dst_mac = mac;
    }

    /// `sendto()` kicks and transmitted frames so far (AF_XDP).
    pub fn counters(&self) -> sys::XskCounters {
        match &self.socket {
            Socket::Xdp(side) => side.xsk.counters(),
            Socket::Udp(_) => sys::XskCounters::default(),
        }
    }

    /// Sends one payload; returns the time its kick took, ns (AF_XDP; 0 for kernel UDP).
    fn send(&mut self, payload: &[u8]) -> io::Result<u64> {
        match &mut self.socket {
            Socket::Udp(s) => {
                s.send(payload)?;
                Ok(0)
            }
            Socket::Xdp(side) => {
                self.ip_id = self.ip_id.wrapping_add(1);
                let (flow, id) = (self.flow, self.ip_id);
                side.xsk.send(HEADERS_LEN + payload.len(), |buf| {
                    frame::write_headers(buf, &flow, payload.len(), id);
                    buf[HEADERS_LEN..].copy_from_slice(payload);
                })?;
                Ok(side.xsk.last_kick_ns)
            }
        }
    }

    /// Receives one payload from the peer into `out` (its length), spinning or sleeping,
    /// until `deadline`; `None` if none came (or `stop` was set).
    fn recv(
        &mut self,
        out: &mut [u8],
        deadline: Instant,
        stop: &AtomicBool,
    ) -> io::Result<Option<usize>> {
        let incoming = self.flow.reversed();
        let spin = self.spin;
        let mut turns = 0u32;
        loop {
            match &mut self.socket {
                Socket::Udp(s) => {
                    match s.recv(out) {
                        Ok(n) => return Ok(Some(n)),
                        Err(e)
                            if matches!(
                                e.kind(),
                                io::ErrorKind::WouldBlock
                                    | io::ErrorKind::TimedOut
                                    | io::ErrorKind::Interrupted
                            ) => {}
                        // An ICMP error from an earlier datagram: not this one's answer.
                        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {}
                        Err(e) => return Err(e),
                    }
                }
                Socket::Xdp(side) => {
                    if let Some(rx) = side.xsk.try_recv() {
                        let got = frame::payload(side.xsk.frame(&rx), &incoming).ok().map(|p| {
                            let n = p.len().min(out.len());
                            out[..n].copy_from_slice(&p[..n]);
                            n
                        });
                        side.xsk.release(rx);
                        match got {
                            Some(n) => return Ok(Some(n)),
                            None => continue, // a frame of no concern: next
                        }
                    }
                    if spin {
                        side.xsk.busy_poll();
                    } else {
                        let left = deadline.saturating_duration_since(Instant::now());
                        side.xsk.wait_readable(left.min(SLICE))?;
                    }
                }
            }
            turns = turns.wrapping_add(1);
            if (!spin || turns.is_multiple_of(SPIN_TURNS))
                && (Instant::now() >= deadline || stop.load(Ordering::Relaxed))
            {
                return Ok(None);
            }
            if spin {
                std::hint::spin_loop();
            }
        }
    }
}

fn open_xdp(ifname: &str, port: u16) -> Result<(XdpSide, &'static str), DatagramError> {
    let unavailable = |what: &str, e: io::Error| {
        let hint = match e.raw_os_error() {
            Some(libc::EPERM | libc::EACCES) => " (needs root: CAP_NET_ADMIN and CAP_BPF)",
            Some(libc::ENOSYS | libc::EAFNOSUPPORT | libc::EOPNOTSUPP) => {
                " (this kernel was built without it)"
            }
            _ => "",
        };
        DatagramError::Unavailable(format!("{what}: {e}{hint}"))
    };
    let ifindex = sys::ifindex(ifname).map_err(io_err(format!("interface {ifname}")))?;
    let map = XskMap::new(64).map_err(|e| unavailable("creating an XSKMAP", e))?;
    let program = XdpProgram::load(&program::redirect_udp_port(port, map.raw_fd()))
        .map_err(|e| unavailable("loading the XDP program", e))?;
    let xsk = Xsk::open(ifindex, 0).map_err(|e| unavailable("opening an AF_XDP socket", e))?;
    map.insert(0, &xsk).map_err(io_err("putting the socket in the XSKMAP"))?;
    let (link, mode) = program
        .attach(ifindex)
        .map_err(|e| unavailable(&format!("attaching the XDP program to {ifname}"), e))?;
    Ok((XdpSide { xsk, _link: link, _program: program, _map: map }, mode))
}

/// A client run's settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DatagramConfig {
    /// Request payload (a wire Request frame), bytes.
    pub request_len: u32,
    /// Response payload (a wire Response frame), bytes.
    pub reply_len: u32,
    /// Unmeasured warm-up.
    pub warmup: Duration,
    /// Measured part.
    pub duration: Duration,
    /// A request unanswered this long is lost.
    pub response_timeout: Duration,
}

impl DatagramConfig {
    /// Checks the sizes against the MTU and the wire header.
    pub fn validate(&self) -> Result<(), DatagramError> {
        for (what, len) in [("request", self.request_len), ("response", self.reply_len)] {
            if !(HEADER_LEN as u32..=MAX_PAYLOAD as u32).contains(&len) {
                return Err(DatagramError::Config(format!(
                    "{what} size {len}: a datagram request/response carries {HEADER_LEN} to \
                     {MAX_PAYLOAD} bytes (one unfragmented UDP datagram on a 1500-byte MTU)"
                )));
            }
        }
        Ok(())
    }
}

/// What a client measured.
#[derive(Debug, Default)]
pub struct DatagramRun {
    /// Round-trip latency, ns (lost requests at the time they waited).
    pub latency: LatencyHistogram,
    /// Every measured latency, ns, in order.
    pub samples_ns: Vec<u64>,
    /// Answered requests.
    pub requests: u64,
    /// Requests whose answer never came within the response timeout.
    pub lost: u64,
    /// Length of the measured part.
    pub elapsed: Duration,
    /// `sendto()` kicks made by the client in the measured part (AF_XDP).
    pub client_kicks: u64,
    /// Time each client kick took, ns (AF_XDP).
    pub kick_ns: LatencyHistogram,
}

/// Answers requests on `ep` until `stop`; returns how many.
pub fn serve(ep: &mut Endpoint, stop: &AtomicBool) -> Result<u64, DatagramError> {
    let mut buf = vec![0u8; MAX_PAYLOAD];
    let mut resp = vec![0u8; MAX_PAYLOAD];
    let mut answered = 0;
    while !stop.load(Ordering::Relaxed) {
        let deadline = Instant::now() + SLICE;
        let Some(n) = ep.recv(&mut buf, deadline, stop).map_err(io_err("receiving"))? else {
            continue;
        };
        let Some(head) = buf[..n].first_chunk::<HEADER_LEN>() else { continue };
        let Ok(h) = Header::decode(head) else { continue };
        if h.kind != FrameKind::Request || h.reply_len as usize > MAX_PAYLOAD {
            continue;
        }
        let out = &mut resp[..h.reply_len as usize];
        wire::encode_response(out, h.seq);
        ep.send(out).map_err(io_err("sending a response"))?;
        answered += 1;
    }
    Ok(answered)
}

/// The client's closed loop on `ep`: a warm-up, then the measured part; stops early when
/// `stop` is set.
pub fn client(
    ep: &mut Endpoint,
    config: &DatagramConfig,
    stop: &AtomicBool,
) -> Result<DatagramRun, DatagramError> {
    config.validate()?;
    let mut req = vec![0u8; config.request_len as usize];
    let mut buf = vec![0u8; MAX_PAYLOAD];
    let mut run = DatagramRun::default();
    let mut seq = 0u64;
    let warm_end = Instant::now() + config.warmup;
    let mut start = None;
    let mut end = Instant::now();
    let mut kicks_at_start = ep.counters().tx_kicks;
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        let measured = now >= warm_end;
        if measured && start.is_none() {
            start = Some(now);
            kicks_at_start = ep.counters().tx_kicks;
        }
        if start.is_some_and(|s| now >= s + config.duration) {
            break;
        }
        wire::encode_request(&mut req, seq, config.reply_len);
        let t0 = Instant::now();
        let kick = ep.send(&req).map_err(io_err("sending a request"))?;
        let deadline = t0 + config.response_timeout;
        let answered = loop {
            match ep.recv(&mut buf, deadline, stop).map_err(io_err("receiving"))? {
                None => break false,
                Some(n) => {
                    let Some(head) = buf[..n].first_chunk::<HEADER_LEN>() else { continue };
                    match Header::decode(head) {
                        Ok(h) if h.kind == FrameKind::Response && h.seq == seq => break true,
                        _ => continue, // a late answer to an earlier request, or junk
                    }
                }
            }
        };
        let t1 = Instant::now();
        seq += 1;
        if !answered && stop.load(Ordering::Relaxed) {
            break; // stopped while waiting: neither an answer nor a loss
        }
        end = t1;
        if !measured {
            continue;
        }
        let ns = t1.saturating_duration_since(t0).as_nanos() as u64;
        run.latency.record(ns);
        run.samples_ns.push(ns);
        if kick > 0 {
            run.kick_ns.record(kick);
        }
        if answered {
            run.requests += 1;
        } else {
            run.lost += 1;
        }
    }
    run.elapsed = start.map_or(Duration::ZERO, |s| end.saturating_duration_since(s));
    run.client_kicks = ep.counters().tx_kicks - kicks_at_start;
    Ok(run)
}

/// Where the two ends of a pair run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PairPlacement {
    /// Pin the client's thread here.
    pub client_cpu: Option<usize>,
    /// Pin the server's thread here.
    pub server_cpu: Option<usize>,
}

/// What a pair run measured: the client's run, and the kicks of both ends.
#[derive(Debug, Default)]
pub struct PairRun {
    /// The client's measurements.
    pub client: DatagramRun,
    /// Requests the server answered (warm-up included).
    pub server_answered: u64,
    /// `sendto()` kicks the server made (warm-up included; one per response on AF_XDP).
    pub server_kicks: u64,
    /// Frames the server transmitted through its ring (AF_XDP).
    pub server_frames: u64,
}

/// Runs a request/response between two endpoints opened in their namespaces
/// ([`Endpoint::open`]): tells each the other's MAC, serves from a thread of its own, runs
/// the client on the calling thread (pinned as `placement` says), then stops the server.
pub fn run_pair(
    mut server: Endpoint,
    mut client_end: Endpoint,
    config: &DatagramConfig,
    placement: PairPlacement,
    stop: &AtomicBool,
) -> Result<PairRun, DatagramError> {
    config.validate()?;
    server.set_peer_mac(client_end.mac());
    client_end.set_peer_mac(server.mac());
    // The server stops once the client is done (which a stop ends early).
    let server_done = AtomicBool::new(false);
    let pin = |cpu: Option<usize>| -> Result<(), DatagramError> {
        match cpu {
            Some(cpu) => {
                crate::sys::pin_current_thread(cpu).map_err(io_err(format!("pinning to CPU {cpu}")))
            }
            None => Ok(()),
        }
    };
    std::thread::scope(|s| {
        let served = std::thread::Builder::new()
            .name("tcptail-dgram-server".into())
            .spawn_scoped(s, || {
                pin(placement.server_cpu)?;
                let n = serve(&mut server, &server_done)?;
                Ok::<_, DatagramError>((n, server.counters()))
            })
            .expect("spawning the datagram server thread");
        let measured: Result<DatagramRun, DatagramError> = std::thread::Builder::new()
            .name("tcptail-dgram-client".into())
            .spawn_scoped(s, || {
                pin(placement.client_cpu)?;
                client(&mut client_end, config, stop)
            })
            .expect("spawning the datagram client thread")
            .join()
            .expect("datagram client thread panicked");
        server_done.store(true, Ordering::Relaxed);
        let (answered, counters) = served.join().expect("datagram server thread panicked")?;
        Ok(PairRun {
            client: measured?,
            server_answered: answered,
            server_kicks: counters.tx_kicks,
            server_frames: counters.tx_frames,
        })
    })
}
