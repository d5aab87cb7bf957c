//! The AF_XDP engine's platform layer: the XSKMAP, the program ([`crate::xdp::program`])
//! loaded and attached to an interface through a BPF link (closed with its descriptor:
//! nothing stays attached after the process) — the `bpf(2)` calls are `tcptail-bpf`'s — and
//! an AF_XDP socket in copy mode with its UMEM and four rings, behind a safe API.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use tcptail_bpf::{LoadError, Map, ProgLoad};

/// `XDP_FLAGS_SKB_MODE` (generic XDP) and `XDP_FLAGS_DRV_MODE` (the driver's own hook).
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// An XSKMAP: receive queue index → AF_XDP socket.
pub struct XskMap {
    map: Map,
}

impl XskMap {
    /// A map for queues `0..queues`.
    pub fn new(queues: u32) -> io::Result<XskMap> {
        Ok(XskMap { map: Map::create(tcptail_bpf::MAP_TYPE_XSKMAP, 4, 4, queues)? })
    }

    /// The map's descriptor, for the program's map load.
    pub fn raw_fd(&self) -> RawFd {
        self.map.raw_fd()
    }

    /// Points queue `queue` at `socket`.
    pub fn insert(&self, queue: u32, socket: &Xsk) -> io::Result<()> {
        let value = socket.fd.as_raw_fd() as u32;
        self.map.update(&queue.to_ne_bytes(), &value.to_ne_bytes())
    }
}

/// A loaded XDP program.
pub struct XdpProgram {
    fd: OwnedFd,
}

impl XdpProgram {
    /// Loads `insns` ([`crate::xdp::program`]); a verifier refusal comes back with the
    /// verifier's log.
    pub fn load(insns: &[u64]) -> io::Result<XdpProgram> {
        let load = ProgLoad {
            prog_type: tcptail_bpf::PROG_TYPE_XDP,
            insns,
            license: c"Dual MIT/GPL",
            name: "tcptail_xsk",
            expected_attach_type: tcptail_bpf::ATTACH_XDP,
            attach_btf_id: 0,
        };
        match tcptail_bpf::prog_load(&load) {
            Ok(fd) => Ok(XdpProgram { fd }),
            Err(LoadError { source, log }) => Err(io::Error::new(
                source.kind(),
                format!("loading the XDP program: {source}; verifier: {}", log.trim()),
            )),
        }
    }

    /// Attaches the program to interface `ifindex` (of the calling thread's namespace) through
    /// a BPF link: in the driver's hook if it has one (veth does), else generic XDP. Returns
    /// the link (detached when dropped) and which mode was taken.
    pub fn attach(&self, ifindex: u32) -> io::Result<(OwnedFd, &'static str)> {
        let mut first = None;
        for (flags, mode) in [(XDP_FLAGS_DRV_MODE, "native"), (XDP_FLAGS_SKB_MODE, "generic")] {
            match tcptail_bpf::link_create(&self.fd, ifindex, tcptail_bpf::ATTACH_XDP, flags) {
                Ok(link) => return Ok((link, mode)),
                Err(e) => {
                    first.get_or_insert(e);
                }
            }
        }
        Err(first.expect("two attempts were made"))
    }
}

/// The index of interface `name` in the calling thread's namespace.
pub fn ifindex(name: &str) -> io::Result<u32> {
    let c = std::ffi::CString::new(name).map_err(|_| io::ErrorKind::InvalidInput)?;
    // SAFETY: `c` is a valid NUL-terminated string.
    let index = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if index == 0 { Err(io::Error::last_os_error()) } else { Ok(index) }
}

/// The MAC address of interface `name` in the calling thread's namespace.
pub fn mac_address(name: &str) -> io::Result<[u8; 6]> {
    if name.len() >= libc::IFNAMSIZ {
        return Err(io::ErrorKind::InvalidInput.into());
    }
    // SAFETY: a plain datagram socket, checked below and closed by OwnedFd.
    let sock = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if sock < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `sock` is a new descriptor we own.
    let sock = unsafe { OwnedFd::from_raw_fd(sock) };
    // SAFETY: ifreq is plain data; all-zero is valid.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in req.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    // SAFETY: SIOCGIFHWADDR writes an ifreq, which `req` is.
    let rc = unsafe { libc::ioctl(sock.as_raw_fd(), libc::SIOCGIFHWADDR, &mut req) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: after SIOCGIFHWADDR the union holds ifru_hwaddr.
    let data = unsafe { req.ifr_ifru.ifru_hwaddr.sa_data };
    let mut mac = [0u8; 6];
    for (m, d) in mac.iter_mut().zip(data) {
        *m = d as u8;
    }
    Ok(mac)
}

/// Anonymous memory, or a ring mapped from the socket.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    fn map(len: usize, fd: RawFd, offset: i64, flags: i32) -> io::Result<Mapping> {
        // SAFETY: a fresh shared/private mapping, no address hint; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping { ptr: ptr.cast(), len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: exactly what mmap returned.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// One of the four single-producer single-consumer rings shared with the kernel.
struct XskRing {
    _map: Mapping,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    descs: *mut u8,
    mask: u32,
    /// Our side's cached index (producer for fill/tx, consumer for rx/completion).
    cached: u32,
}

impl XskRing {
    fn map(
        fd: RawFd,
        off: &libc::xdp_ring_offset,
        entries: u32,
        desc_len: usize,
        pgoff: i64,
    ) -> io::Result<XskRing> {
        let len = off.desc as usize + entries as usize * desc_len;
        let map = Mapping::map(len, fd, pgoff, libc::MAP_SHARED | libc::MAP_POPULATE)?;
        // SAFETY: the kernel's offsets lie inside the mapping it sized.
        let (producer, consumer, flags, descs) = unsafe {
            (
                map.ptr.add(off.producer as usize).cast::<AtomicU32>(),
                map.ptr.add(off.consumer as usize).cast::<AtomicU32>(),
                map.ptr.add(off.flags as usize).cast::<AtomicU32>(),
                map.ptr.add(off.desc as usize),
            )
        };
        Ok(XskRing { _map: map, producer, consumer, flags, descs, mask: entries - 1, cached: 0 })
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: points into the live mapping, aligned by the kernel; shared with it through
        // atomics only.
        unsafe { &*self.producer }
    }
    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as in `producer`.
        unsafe { &*self.consumer }
    }
    fn needs_wakeup(&self) -> bool {
        // SAFETY: as in `producer`.
        unsafe { &*self.flags }.load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }
    /// Address of entry `index` (masked), `desc_len` bytes each.
    fn entry(&self, index: u32, desc_len: usize) -> *mut u8 {
        // SAFETY: masked indices stay inside the ring's descriptor array.
        unsafe { self.descs.add((index & self.mask) as usize * desc_len) }
    }
}

/// Frame size in the UMEM (one frame per packet; the MTU fits).
pub const FRAME_LEN: usize = 2048;
/// Frames in the UMEM: half for receiving (the fill ring), half for sending.
const FRAMES: u32 = 512;
const RING_ENTRIES: u32 = 256;

/// A received frame, until it is given back with [`Xsk::release`].
#[derive(Debug)]
pub struct RxFrame {
    addr: u64,
    len: usize,
}

/// What the socket counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XskCounters {
    /// `sendto()` calls made to get a transmit going (the seed's transmit-side system call).
    pub tx_kicks: u64,
    /// Frames put on the transmit ring.
    pub tx_frames: u64,
}

/// An AF_XDP socket in copy mode bound to one queue of one interface, with its UMEM.
pub struct Xsk {
    fd: OwnedFd,
    umem: Mapping,
    rx: XskRing,
    tx: XskRing,
    fill: XskRing,
    comp: XskRing,
    /// Transmit frames not on the kernel's side.
    free_tx: Vec<u64>,
    counters: XskCounters,
    /// Bound in copy mode (always, here).
    copy_mode: bool,
    /// Time spent in each transmit kick, ns (the caller's histogram).
    pub last_kick_ns: u64,
}

// SAFETY: the pointers are into mappings this value owns; it is used by one thread at a time.
unsafe impl Send for Xsk {}

fn setsockopt<T>(fd: RawFd, opt: i32, value: &T) -> io::Result<()> {
    // SAFETY: `value` is a plain struct or integer of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_XDP,
            opt,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as u32,
        )
    };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

impl Xsk {
    /// Opens a socket bound to queue `queue` of interface `ifindex` (calling thread's
    /// namespace) in copy mode, with the need-wakeup protocol, its fill ring full.
    pub fn open(ifindex: u32, queue: u32) -> io::Result<Xsk> {
        // SAFETY: plain socket(2); checked below.
        let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        if raw < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("socket(AF_XDP): {e}")));
        }
        // SAFETY: a new descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let umem = Mapping::map(
            FRAMES as usize * FRAME_LEN,
            -1,
            0,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
        )?;
        let reg = libc::xdp_umem_reg {
            addr: umem.ptr as u64,
            len: umem.len as u64,
            chunk_size: FRAME_LEN as u32,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setsockopt(raw, libc::XDP_UMEM_REG, &reg)?;
        for opt in [
            libc::XDP_UMEM_FILL_RING,
            libc::XDP_UMEM_COMPLETION_RING,
            libc::XDP_RX_RING,
            libc::XDP_TX_RING,
        ] {
            setsockopt(raw, opt, &RING_ENTRIES)?;
        }
        // SAFETY: xdp_mmap_offsets is plain data; the kernel fills it.
        let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::xdp_mmap_offsets>() as u32;
        // SAFETY: `off` has the size passed in `len`.
        let rc = unsafe {
            libc::getsockopt(
                raw,
                libc::SOL_XDP,
                libc::XDP_MMAP_OFFSETS,
                (&mut off as *mut libc::xdp_mmap_offsets).cast(),
                &mut len,
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        let desc = std::mem::size_of::<libc::xdp_desc>();
        let rx = XskRing::map(raw, &off.rx, RING_ENTRIES, desc, libc::XDP_PGOFF_RX_RING)?;
        let tx = XskRing::map(raw, &off.tx, RING_ENTRIES, desc, libc::XDP_PGOFF_TX_RING)?;
        let fill =
            XskRing::map(raw, &off.fr, RING_ENTRIES, 8, libc::XDP_UMEM_PGOFF_FILL_RING as i64)?;
        let comp = XskRing::map(
            raw,
            &off.cr,
            RING_ENTRIES,
            8,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING as i64,
        )?;
        let sxdp = libc::sockaddr_xdp {
            sxdp_family: libc::AF_XDP as u16,
            sxdp_flags: libc::XDP_COPY | libc::XDP_USE_NEED_WAKEUP,
            sxdp_ifindex: ifindex,
            sxdp_queue_id: queue,
            sxdp_shared_umem_fd: 0,
        };
        // A socket just closed on the same queue releases it asynchronously: EBUSY for a
        // moment. Retried for up to a second.
        let deadline = Instant::now() + Duration::from_secs(1);
        loop {
            // SAFETY: `sxdp` is a sockaddr_xdp of the size passed.
            let rc = unsafe {
                libc::bind(
                    raw,
                    (&sxdp as *const libc::sockaddr_xdp).cast(),
                    std::mem::size_of::<libc::sockaddr_xdp>() as u32,
                )
            };
            if rc == 0 {
                break;
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EBUSY) && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
                continue;
            }
            return Err(io::Error::new(
                e.kind(),
                format!("binding the AF_XDP socket (copy mode): {e}"),
            ));
        }
        let half = FRAMES / 2;
        let mut xsk = Xsk {
            fd,
            umem,
            rx,
            tx,
            fill,
            comp,
            free_tx: (half..FRAMES).map(|f| u64::from(f) * FRAME_LEN as u64).collect(),
            counters: XskCounters::default(),
            copy_mode: true,
            last_kick_ns: 0,
        };
        // Receive frames 0..half go to the kernel through the fill ring.
        for f in 0..half.min(RING_ENTRIES) {
            xsk.refill(u64::from(f) * FRAME_LEN as u64);
        }
        Ok(xsk)
    }

    /// What the socket counted so far.
    pub fn counters(&self) -> XskCounters {
        self.counters
    }

    fn refill(&mut self, addr: u64) {
        let at = self.fill.cached;
        // SAFETY: the fill ring has room: it holds at most the receive frames, fewer than its
        // entries, and each frame is on it at most once.
        unsafe { self.fill.entry(at, 8).cast::<u64>().write(addr) };
        self.fill.cached = at.wrapping_add(1);
        self.fill.producer().store(self.fill.cached, Ordering::Release);
    }

    /// A received frame, if one is waiting (no system call).
    pub fn try_recv(&mut self) -> Option<RxFrame> {
        let produced = self.rx.producer().load(Ordering::Acquire);
        if produced == self.rx.cached {
            return None;
        }
        // SAFETY: entries between our consumer index and the kernel's producer index are
        // written by the kernel and ours to read.
        let desc = unsafe { self.rx.entry(self.rx.cached, 16).cast::<libc::xdp_desc>().read() };
        self.rx.cached = self.rx.cached.wrapping_add(1);
        self.rx.consumer().store(self.rx.cached, Ordering::Release);
        Some(RxFrame { addr: desc.addr, len: desc.len as usize })
    }

    /// Turns on the kernel's busy polling for this socket: a receive call on an empty ring
    /// then runs the interface's NAPI poll on the calling CPU for up to `usecs` instead of
    /// waiting for a softirq to do it (`SO_BUSY_POLL`, `SO_PREFER_BUSY_POLL`).
    pub fn enable_busy_poll(&self, usecs: u32) -> io::Result<()> {
        let fd = self.fd.as_raw_fd();
        for (opt, value) in [
            (libc::SO_BUSY_POLL, usecs as i32),
            (libc::SO_PREFER_BUSY_POLL, 1),
            (libc::SO_BUSY_POLL_BUDGET, 16),
        ] {
            // SAFETY: an int option of the size passed.
            let rc = unsafe {
                libc::setsockopt(fd, libc::SOL_SOCKET, opt, (&value as *const i32).cast(), 4)
            };
            if rc < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(())
    }

    /// One busy-poll pass (a non-blocking `recvfrom()`): with busy polling on, the kernel
    /// polls the interface's NAPI context for frames for this socket's ring.
    pub fn busy_poll(&self) {
        // SAFETY: a zero-length receive with no buffer and no address is the AF_XDP wake-up;
        // its result (EAGAIN when nothing came) does not matter.
        unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
    }

    /// Sleeps in `poll()` until a frame is there or `timeout` passes.
    pub fn wait_readable(&self, timeout: Duration) -> io::Result<bool> {
        super::wait_readable(std::os::fd::AsFd::as_fd(&self.fd), timeout)
    }

    /// The bytes of a received frame.
    pub fn frame(&self, rx: &RxFrame) -> &[u8] {
        let (addr, len) = (rx.addr as usize, rx.len.min(FRAME_LEN));
        assert!(addr + len <= self.umem.len, "kernel descriptor outside the UMEM");
        // SAFETY: inside the UMEM (checked); the kernel gave this frame to us and gets it back
        // only through `release`, which consumes the RxFrame.
        unsafe { std::slice::from_raw_parts(self.umem.ptr.add(addr), len) }
    }

    /// Gives a received frame back to the kernel (fill ring).
    pub fn release(&mut self, rx: RxFrame) {
        // Copy mode hands out chunk-aligned addresses; re-align anyway.
        self.refill(rx.addr - rx.addr % FRAME_LEN as u64);
    }

    /// Frames the kernel finished sending come back to the free list.
    fn reap_completions(&mut self) {
        let produced = self.comp.producer().load(Ordering::Acquire);
        while self.comp.cached != produced {
            // SAFETY: as in `try_recv`, for the completion ring.
            let addr = unsafe { self.comp.entry(self.comp.cached, 8).cast::<u64>().read() };
            self.free_tx.push(addr);
            self.comp.cached = self.comp.cached.wrapping_add(1);
        }
        self.comp.consumer().store(self.comp.cached, Ordering::Release);
    }

    /// Sends one frame of `len` bytes written by `fill` into a free transmit frame. In copy
    /// mode the kernel transmits only inside a `sendto()` on the socket (the seed's point:
    /// the transmit side still needs a system call), so every send kicks; the kicks are
    /// counted and each is timed in [`Xsk::last_kick_ns`].
    pub fn send(&mut self, len: usize, fill: impl FnOnce(&mut [u8])) -> io::Result<()> {
        assert!(len <= FRAME_LEN, "frame longer than a UMEM frame");
        self.reap_completions();
        let Some(addr) = self.free_tx.pop() else {
            return Err(io::Error::new(io::ErrorKind::WouldBlock, "no free transmit frame"));
        };
        // SAFETY: a transmit frame on our free list is not the kernel's; inside the UMEM.
        let buf = unsafe { std::slice::from_raw_parts_mut(self.umem.ptr.add(addr as usize), len) };
        fill(buf);
        let at = self.tx.cached;
        let desc = libc::xdp_desc { addr, len: len as u32, options: 0 };
        // SAFETY: the transmit ring has as many entries as there are transmit frames, so it
        // has room for one we hold.
        unsafe { self.tx.entry(at, 16).cast::<libc::xdp_desc>().write(desc) };
        self.tx.cached = at.wrapping_add(1);
        self.tx.producer().store(self.tx.cached, Ordering::Release);
        self.counters.tx_frames += 1;
        self.last_kick_ns = 0;
        // Copy mode: the ring may not even flag it, but nothing leaves without the call.
        if self.tx.needs_wakeup() || self.copy_mode {
            let t = Instant::now();
            // SAFETY: a zero-length sendto with no address is the documented AF_XDP kick.
            let rc = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    std::ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null(),
                    0,
                )
            };
            self.last_kick_ns = t.elapsed().as_nanos() as u64;
            self.counters.tx_kicks += 1;
            if rc < 0 {
                let e = io::Error::last_os_error();
                // Busy or out of buffers: the frame stays queued and goes with the next kick.
                if !matches!(e.raw_os_error(), Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS)) {
                    return Err(e);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_loopback_interface_has_index_and_a_zero_mac() {
        assert_eq!(ifindex("lo").unwrap(), 1);
        assert_eq!(mac_address("lo").unwrap(), [0; 6]);
        assert!(ifindex("no-such-if0").is_err());
    }
}
