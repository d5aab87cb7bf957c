//! The io_uring engine's platform layer, over the maintained `io-uring` crate: a [`Ring`] that
//! owns every buffer the kernel may read or write for it, so the engine above submits sends
//! and multishot receives without `unsafe`.
//!
//! - Receives use a **provided-buffer ring** ([`Ring::arm_recv`]): one multishot receive per
//!   socket stays armed, the kernel picks a buffer from the ring for each completion, and the
//!   engine gives it back ([`Ring::recycle`]) once it has parsed the bytes.
//! - Sends come from **send slots** the ring owns ([`Ring::send_slot`]); a slot is not handed
//!   out for writing again until the kernel completed the send that used it. A send can be
//!   **lent** ([`Ring::send`] with `lend`): it posts no completion when it succeeds (all its
//!   bytes taken), so a round trip costs one `io_uring_enter` instead of two; the engine frees
//!   the slot ([`Ring::sent`]) once the peer's answer proves the bytes were taken. A lent send
//!   that fails still posts its completion.
//! - Single-shot receives ([`Ring::arm_recv_once`]) and connects ([`Ring::connect`]) serve
//!   connections that live for one transaction; [`Ring::cancel_fd`] ends what a socket still
//!   has armed before it is closed.
//! - Each enter costs the kernel less where it can: the submission queue has no index array
//!   (`IORING_SETUP_NO_SQARRAY`) and the ring's descriptor is registered with the thread that
//!   submits (`IORING_REGISTER_RING_FDS`), so `io_uring_enter` skips the descriptor lookup;
//!   a kernel without them gets the ring without them.
//! - Dropping a ring with operations in flight cancels them and waits for their completions;
//!   should the kernel not complete them within a second, the buffers are leaked rather than
//!   freed under it.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

use io_uring::{IoUring, cqueue, opcode, squeue, types};

/// The provided-buffer group every ring registers (one group per ring).
const BUF_GROUP: u16 = 0;
/// Token of the cancel requests (on drop, and [`Ring::cancel_fd`]).
const CANCEL_TOKEN: u64 = u64::MAX;
/// Marks the completion of a lent send (a failure): it was never counted in flight. Callers'
/// tokens stay below it ([`MAX_TOKEN`]).
const LENT_BIT: u64 = 1 << 62;
/// Largest token a caller may give an operation.
pub const MAX_TOKEN: u64 = LENT_BIT - 1;

/// One completion, copied out of the completion queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The token the operation was submitted with.
    pub token: u64,
    /// The kernel's result: bytes moved, or a negative errno.
    pub result: i32,
    /// Receives: the provided buffer holding the bytes.
    pub buffer: Option<u16>,
    /// Multishot receives: false once the receive is no longer armed (re-arm it).
    pub more: bool,
}

/// How to set a ring up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingOptions {
    /// Submission and completion queue entries.
    pub entries: u32,
    /// Provided receive buffers (a power of two) and the size of each.
    pub recv_buffers: u16,
    /// Size of each provided receive buffer.
    pub recv_buffer_len: usize,
    /// Send slots and the size of each.
    pub send_slots: usize,
    /// Size of each send slot.
    pub send_slot_len: usize,
    /// A kernel thread polls the submission queue (`IORING_SETUP_SQPOLL`), idling after this
    /// many milliseconds without work.
    pub sqpoll_idle_ms: Option<u32>,
}

/// Anonymous, page-aligned memory the kernel may access through the ring.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    fn new(len: usize) -> io::Result<Mapping> {
        // SAFETY: an anonymous private mapping with no address hint; the result is checked.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
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
        if self.len == 0 {
            return; // leaked on purpose: the kernel may still use it
        }
        // SAFETY: `ptr`/`len` are exactly what mmap returned; nothing refers to it any more
        // (the ring that lent it to the kernel is gone, or it was leaked instead).
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

/// An io_uring instance with its provided receive buffers and its send slots.
pub struct Ring {
    ring: IoUring,
    /// The buffer ring's entries (16 bytes each; the tail sits in entry 0's last 2 bytes).
    buf_ring: Mapping,
    /// The receive buffers, `recv_buffer_len` each.
    recv_bufs: Mapping,
    recv_buffer_len: usize,
    recv_buffers: u16,
    /// Our copy of the buffer ring's tail (the kernel only reads it).
    tail: u16,
    send_slots: Vec<Box<[u8]>>,
    /// Whether each slot's last send is still with the kernel (completion due, or lent).
    slot_busy: Vec<bool>,
    /// The address of the last connect, kept until its submission has been read.
    connect_addr: Box<socket2::SockAddr>,
    /// Operations submitted and not yet completed for good (multishot receives count once).
    in_flight: usize,
    sqpoll: bool,
    /// The ring's descriptor registered with the thread that set it up, which alone submits
    /// (`SINGLE_ISSUER`): its place in that thread's registered ring descriptors
    /// (`IORING_REGISTER_RING_FDS`).
    registered: Option<u32>,
}

// A ring is not `Send` (its mappings' raw pointers keep it so, and no `unsafe impl` says
// otherwise): it is tied to the thread that set it up, whose table its registered index names
// a place in; from another thread the same index could name that thread's own ring. Each
// engine thread sets up its own ring.

impl Ring {
    /// Sets a ring up, registers its provided buffers and checks that the kernel has the
    /// operations the engine uses; the error names what is missing.
    pub fn new(options: RingOptions) -> io::Result<Ring> {
        let n = options.recv_buffers;
        if !n.is_power_of_two() || options.recv_buffer_len == 0 || options.send_slots == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "bad io_uring ring options"));
        }
        let build = |no_sqarray: bool| {
            let mut builder = IoUring::builder();
            if let Some(idle) = options.sqpoll_idle_ms {
                builder.setup_sqpoll(idle);
            } else {
                // One thread submits and reaps; the receive's task work (the copy into a
                // provided buffer) is deferred to that thread's next wait for completions,
                // which the kernel wakes it for, instead of interrupting it. The flag tells a
                // spinning loop that work is waiting (the crate's submit then enters to run it).
                builder.setup_single_issuer().setup_defer_taskrun().setup_taskrun_flag();
            }
            if no_sqarray {
                // Entries are consumed in order, without the index array's indirection.
                builder.setup_no_sqarray();
            }
            builder.build(options.entries)
        };
        // NO_SQARRAY is 6.6's: an older kernel refuses the flag, and gets the ring without it.
        let ring = build(true)
            .or_else(|e| if e.raw_os_error() == Some(libc::EINVAL) { build(false) } else { Err(e) })
            .map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!("io_uring_setup: {e} (is io_uring disabled here?)"),
                )
            })?;
        // The ring's descriptor registered with this thread (5.18): an enter then skips the
        // descriptor's lookup. Without it (an older kernel, or the thread's 16 places taken)
        // the ring enters by its descriptor as before. Measured with NO_SQARRAY: README.
        let registered = if options.sqpoll_idle_ms.is_none() {
            register_ring_fd(ring.as_raw_fd()).ok()
        } else {
            None
        };
        let mut probe = io_uring::Probe::new();
        ring.submitter().register_probe(&mut probe)?;
        for (code, name) in [
            (opcode::RecvMulti::CODE, "multishot recv"),
            (opcode::Send::CODE, "send"),
            (opcode::AsyncCancel::CODE, "cancel"),
        ] {
            if !probe.is_supported(code) {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!("this kernel's io_uring has no {name} operation"),
                ));
            }
        }
        let buf_ring = Mapping::new(usize::from(n) * 16)?;
        let recv_bufs = Mapping::new(usize::from(n) * options.recv_buffer_len)?;
        // SAFETY: `buf_ring` is page-aligned, holds `n` 16-byte entries and lives as long as
        // the ring (it is dropped after `ring`, or leaked with it).
        unsafe {
            ring.submitter().register_buf_ring_with_flags(buf_ring.ptr as u64, n, BUF_GROUP, 0)
        }
        .map_err(|e| {
            io::Error::new(e.kind(), format!("registering a provided-buffer ring: {e}"))
        })?;
        let mut ring = Ring {
            ring,
            buf_ring,
            recv_bufs,
            recv_buffer_len: options.recv_buffer_len,
            recv_buffers: n,
            tail: 0,
            send_slots: (0..options.send_slots)
                .map(|_| vec![0u8; options.send_slot_len].into_boxed_slice())
                .collect(),
            slot_busy: vec![false; options.send_slots],
            connect_addr: Box::new(socket2::SockAddr::from(std::net::SocketAddr::from((
                [0, 0, 0, 0],
                0,
            )))),
            in_flight: 0,
            sqpoll: options.sqpoll_idle_ms.is_some(),
            registered,
        };
        for bid in 0..n {
            ring.recycle(bid);
        }
        Ok(ring)
    }

    /// Whether a kernel thread polls the submission queue.
    pub fn sqpoll(&self) -> bool {
        self.sqpoll
    }

    /// Arms a multishot receive on `fd` into the provided buffers; its completions carry
    /// `token` until one says it is no longer armed ([`Completion::more`] false).
    pub fn arm_recv(&mut self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()> {
        let entry =
            opcode::RecvMulti::new(types::Fd(fd.as_raw_fd()), BUF_GROUP).build().user_data(token);
        // SAFETY: the receive writes only into provided buffers, which the ring owns and keeps
        // until every operation completed (see Drop).
        unsafe { self.push(&entry, true) }
    }

    /// Send slot `slot` for writing, unless the kernel still has its last send.
    pub fn send_slot(&mut self, slot: usize) -> Option<&mut [u8]> {
        if self.slot_busy[slot] { None } else { Some(&mut self.send_slots[slot]) }
    }

    /// Whether send slot `slot` is free to write.
    pub fn slot_free(&self, slot: usize) -> bool {
        !self.slot_busy[slot]
    }

    /// Sends `range` of slot `slot` on `fd`; the slot is busy until its completion is
    /// reaped with [`Ring::completions`] (`token`'s completion frees it: pass the slot to
    /// [`Ring::sent`]).
    ///
    /// `lend`: the send takes every byte or fails (`MSG_WAITALL`) and posts a completion only
    /// if it fails; the caller frees the slot with [`Ring::sent`] once it knows the bytes
    /// were taken (the peer answered them). A ring dropped with a lent slot not freed leaks
    /// its send slots rather than free memory the kernel may still read.
    pub fn send(
        &mut self,
        fd: BorrowedFd<'_>,
        slot: usize,
        range: std::ops::Range<usize>,
        token: u64,
        lend: bool,
    ) -> io::Result<()> {
        let buf = &self.send_slots[slot][range];
        let flags = if lend { libc::MSG_NOSIGNAL | libc::MSG_WAITALL } else { libc::MSG_NOSIGNAL };
        let entry = opcode::Send::new(types::Fd(fd.as_raw_fd()), buf.as_ptr(), buf.len() as u32)
            .flags(flags)
            .build();
        debug_assert!(token <= MAX_TOKEN, "token {token:#x} above MAX_TOKEN");
        let entry = if lend {
            entry.flags(squeue::Flags::SKIP_SUCCESS).user_data(token | LENT_BIT)
        } else {
            entry.user_data(token)
        };
        // SAFETY: the slot's memory is owned by the ring and not written again until this
        // send's completion (or, lent, the caller's proof) marks it free (`sent`); Drop waits
        // for in-flight sends and leaks the slots while any is lent.
        unsafe { self.push(&entry, !lend) }?;
        self.slot_busy[slot] = true;
        Ok(())
    }

    /// Arms a single-shot receive on `fd` into the provided buffers: one completion, with
    /// `token`.
    pub fn arm_recv_once(&mut self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()> {
        let entry = opcode::Recv::new(types::Fd(fd.as_raw_fd()), std::ptr::null_mut(), 0)
            .buf_group(BUF_GROUP)
            .build()
            .flags(squeue::Flags::BUFFER_SELECT)
            .user_data(token);
        // SAFETY: the receive writes only into provided buffers, which the ring owns and keeps
        // until every operation completed (see Drop).
        unsafe { self.push(&entry, true) }
    }

    /// Connects `fd` (a fresh stream socket) to `addr`; one completion with `token`.
    pub fn connect(
        &mut self,
        fd: BorrowedFd<'_>,
        addr: &socket2::SockAddr,
        token: u64,
    ) -> io::Result<()> {
        // The kernel copies the address when it reads the entry (at the next submission); the
        // ring keeps it until then and beyond.
        *self.connect_addr = addr.clone();
        let entry = opcode::Connect::new(
            types::Fd(fd.as_raw_fd()),
            self.connect_addr.as_ptr().cast(),
            self.connect_addr.len(),
        )
        .build()
        .user_data(token);
        // SAFETY: the address lives in the ring (boxed, so it does not move with it) until
        // the next connect, which can only be pushed after this one was submitted (`push`
        // submits a full queue before taking a new entry, and the caller submits between).
        unsafe { self.push(&entry, true) }
    }

    /// Arms a multishot poll for `fd` turning readable: a completion with `token` each time
    /// it does, until one says it is no longer armed ([`Completion::more`] false; re-arm it).
    /// How a thread waiting on the ring hears of work from other threads (an [`EventFd`]).
    ///
    /// [`EventFd`]: crate::sys::EventFd
    pub fn poll_readable(&mut self, fd: BorrowedFd<'_>, token: u64) -> io::Result<()> {
        let entry = opcode::PollAdd::new(types::Fd(fd.as_raw_fd()), libc::POLLIN as u32)
            .multi(true)
            .build()
            .user_data(token);
        // SAFETY: a poll names no buffer.
        unsafe { self.push(&entry, true) }
    }

    /// Gives send slot `slot` a length of `len` bytes (zeroed), for the socket that uses it
    /// next. False, and nothing changes, while the kernel still has the slot's last send.
    pub fn resize_slot(&mut self, slot: usize, len: usize) -> bool {
        if self.slot_busy[slot] {
            return false;
        }
        if self.send_slots[slot].len() != len {
            self.send_slots[slot] = vec![0u8; len].into_boxed_slice();
        }
        true
    }

    /// Cancels everything armed on `fd` (before the socket is closed): each cancelled
    /// operation completes with `-ECANCELED` under its own token.
    pub fn cancel_fd(&mut self, fd: BorrowedFd<'_>) -> io::Result<()> {
        let entry =
            opcode::AsyncCancel2::new(types::CancelBuilder::fd(types::Fd(fd.as_raw_fd())).all())
                .build()
                .user_data(CANCEL_TOKEN);
        // SAFETY: a cancel names no buffer.
        unsafe { self.push(&entry, true) }
    }

    /// Marks slot `slot` free: its send's completion was reaped.
    pub fn sent(&mut self, slot: usize) {
        self.slot_busy[slot] = false;
    }

    /// Pushes an entry, submitting first if the queue is full; `completes`: it posts a
    /// completion the ring must see before it may free its buffers.
    ///
    /// # Safety
    /// Every buffer `entry` names must stay valid until its completion.
    unsafe fn push(&mut self, entry: &squeue::Entry, completes: bool) -> io::Result<()> {
        // SAFETY: forwarded from the caller.
        if unsafe { self.ring.submission().push(entry) }.is_err() {
            self.ring.submit()?;
            // SAFETY: as above.
            unsafe { self.ring.submission().push(entry) }
                .map_err(|_| io::Error::other("io_uring submission queue full"))?;
        }
        self.in_flight += usize::from(completes);
        Ok(())
    }

    /// Submits what was pushed and waits until at least one completion is there, or (with
    /// `timeout`) that long at most.
    pub fn submit_and_wait(&mut self, timeout: Option<Duration>) -> io::Result<()> {
        self.submit_and_wait_for(1, timeout)
    }

    /// Submits what was pushed and waits until at least `want` completions are there, or
    /// (with `timeout`) that long at most: a loop that just submitted a send that completes
    /// at once waits for it and the next receive in one system call.
    pub fn submit_and_wait_for(
        &mut self,
        want: usize,
        timeout: Option<Duration>,
    ) -> io::Result<()> {
        let result = match timeout {
            None => self.enter_registered(want),
            Some(t) => {
                let ts = types::Timespec::from(t);
                let args = types::SubmitArgs::new().timespec(&ts);
                self.ring.submitter().submit_with_args(want, &args)
            }
        };
        match result {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ETIME | libc::EINTR | libc::EBUSY)) => {
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Submits what was pushed without waiting (spinning loops).
    pub fn submit(&mut self) -> io::Result<()> {
        match self.enter_registered(0) {
            Ok(_) => Ok(()),
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::EBUSY)) => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// `io_uring_enter` through the registered descriptor (the crate's own submit, by the
    /// descriptor, where there is none): submits what was pushed and waits for `want`
    /// completions, entering for deferred task work or an overflowed completion queue as the
    /// crate's own submit does (it keeps no registered descriptor across calls).
    fn enter_registered(&mut self, want: usize) -> io::Result<usize> {
        let Some(index) = self.registered else {
            return self.ring.submit_and_wait(want);
        };
        let sq = self.ring.submission();
        let to_submit = sq.len() as libc::c_uint;
        let mut flags = IORING_ENTER_REGISTERED_RING;
        if want > 0 || sq.taskrun() || sq.cq_overflow() {
            flags |= IORING_ENTER_GETEVENTS;
        }
        drop(sq);
        // SAFETY: io_uring_enter with the index this thread registered for this ring (a ring
        // never leaves its thread: it is not `Send`) and no argument pointer; the entries it
        // submits were pushed with their buffers' lifetimes checked (`push`).
        let r = unsafe {
            libc::syscall(
                libc::SYS_io_uring_enter,
                index,
                to_submit,
                want as libc::c_uint,
                flags,
                std::ptr::null::<libc::c_void>(),
                0usize,
            )
        };
        if r < 0 { Err(io::Error::last_os_error()) } else { Ok(r as usize) }
    }

    /// Moves every completion waiting in the queue to `out`.
    pub fn completions(&mut self, out: &mut Vec<Completion>) {
        let mut cq = self.ring.completion();
        cq.sync();
        for cqe in &mut cq {
            let flags = cqe.flags();
            let more = cqueue::more(flags);
            let data = cqe.user_data();
            let lent = data != CANCEL_TOKEN && data & LENT_BIT != 0;
            if !more && !lent {
                self.in_flight = self.in_flight.saturating_sub(1);
            }
            if data == CANCEL_TOKEN {
                continue;
            }
            out.push(Completion {
                token: data & !LENT_BIT,
                result: cqe.result(),
                buffer: cqueue::buffer_select(flags),
                more,
            });
        }
    }

    /// The `len` bytes a receive completion left in provided buffer `bid`.
    pub fn received(&self, bid: u16, len: usize) -> &[u8] {
        assert!(bid < self.recv_buffers && len <= self.recv_buffer_len, "buffer out of range");
        // SAFETY: the buffer lies inside `recv_bufs`; the kernel is done with it (its
        // completion was reaped) and gets it back only through `recycle`, which needs
        // `&mut self` and so cannot run while this borrow lives.
        unsafe {
            std::slice::from_raw_parts(
                self.recv_bufs.ptr.add(usize::from(bid) * self.recv_buffer_len),
                len,
            )
        }
    }

    /// Gives provided buffer `bid` back to the kernel.
    pub fn recycle(&mut self, bid: u16) {
        let mask = self.recv_buffers - 1;
        let index = usize::from(self.tail & mask);
        let addr = self.recv_bufs.ptr as u64 + u64::from(bid) * self.recv_buffer_len as u64;
        // SAFETY: `index` < recv_buffers, so the entry lies inside `buf_ring`; the kernel only
        // reads entries between its head and our tail, and this one is past the tail.
        unsafe {
            let entry = self.buf_ring.ptr.add(index * 16).cast::<types::BufRingEntry>();
            (*entry).set_addr(addr);
            (*entry).set_len(self.recv_buffer_len as u32);
            (*entry).set_bid(bid);
        }
        self.tail = self.tail.wrapping_add(1);
        // SAFETY: the tail is entry 0's last u16 (io_uring_buf_ring); a release store
        // publishes the entry written above before the kernel can see the new tail.
        unsafe {
            let tail = types::BufRingEntry::tail(self.buf_ring.ptr.cast()).cast_mut();
            std::sync::atomic::AtomicU16::from_ptr(tail)
                .store(self.tail, std::sync::atomic::Ordering::Release);
        }
    }
}

impl Drop for Ring {
    fn drop(&mut self) {
        if self.in_flight > 0 {
            let cancel = opcode::AsyncCancel2::new(types::CancelBuilder::any())
                .build()
                .user_data(CANCEL_TOKEN);
            // SAFETY: a cancel names no buffer.
            let pushed = unsafe { self.ring.submission().push(&cancel) }.is_ok();
            // Its own completion is counted down like any other.
            self.in_flight += usize::from(pushed);
            let deadline = Instant::now() + Duration::from_secs(1);
            let mut sink = Vec::new();
            while pushed && self.in_flight > 0 && Instant::now() < deadline {
                if self.submit_and_wait(Some(Duration::from_millis(50))).is_err() {
                    break;
                }
                self.completions(&mut sink);
                sink.clear();
            }
        }
        if self.in_flight > 0 || self.slot_busy.iter().any(|&busy| busy) {
            // The kernel may still write into these (or read a lent send slot): never free
            // them under it.
            std::mem::forget(std::mem::take(&mut self.send_slots));
            self.recv_bufs.len = 0;
            self.buf_ring.len = 0;
        }
        // Registered, the ring outlives its descriptor until its thread lets it go (or ends);
        // a ring is dropped on its own thread (it is not `Send`).
        if let Some(index) = self.registered.take() {
            let _ = update_ring_fds(self.ring.as_raw_fd(), IORING_UNREGISTER_RING_FDS, index, 0);
        }
    }
}

/// `io_uring_register` opcodes and an `io_uring_enter` flag the `io-uring` crate has but
/// does not keep across its submitters.
const IORING_REGISTER_RING_FDS: libc::c_uint = 20;
const IORING_UNREGISTER_RING_FDS: libc::c_uint = 21;
const IORING_ENTER_GETEVENTS: libc::c_uint = 1;
const IORING_ENTER_REGISTERED_RING: libc::c_uint = 1 << 4;

/// `struct io_uring_rsrc_update`.
#[repr(C)]
struct RsrcUpdate {
    offset: u32,
    resv: u32,
    data: u64,
}

/// Registers ring descriptor `fd` with the calling thread; its index.
fn register_ring_fd(fd: std::os::fd::RawFd) -> io::Result<u32> {
    // The kernel picks a free place (offset -1) and writes it back.
    update_ring_fds(fd, IORING_REGISTER_RING_FDS, u32::MAX, fd as u64)
}

/// One `io_uring_register` of the calling thread's ring descriptors (`opcode`: register or
/// give back) at place `offset` with `data`; the place the kernel used. A failed give-back
/// leaves the registration to the thread's exit, which the kernel then releases.
fn update_ring_fds(
    fd: std::os::fd::RawFd,
    opcode: libc::c_uint,
    offset: u32,
    data: u64,
) -> io::Result<u32> {
    let mut update = RsrcUpdate { offset, resv: 0, data };
    // SAFETY: one io_uring_rsrc_update, alive for the call, which the kernel reads and
    // writes its offset into.
    let r = unsafe {
        libc::syscall(
            libc::SYS_io_uring_register,
            fd,
            opcode,
            &mut update as *mut RsrcUpdate,
            1 as libc::c_uint,
        )
    };
    if r != 1 {
        return Err(io::Error::last_os_error());
    }
    Ok(update.offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    const OPTIONS: RingOptions = RingOptions {
        entries: 8,
        recv_buffers: 8,
        recv_buffer_len: 4096,
        send_slots: 1,
        send_slot_len: 64,
        sqpoll_idle_ms: None,
    };

    #[test]
    fn rings_register_their_descriptor_and_give_it_back() {
        // A thread holds at most 16 registered ring descriptors: a ring that kept its place
        // after its drop would leave the 17th of these unregistered.
        let (a, mut b) = std::os::unix::net::UnixStream::pair().unwrap();
        for round in 0..40 {
            let mut ring = match Ring::new(OPTIONS) {
                Ok(ring) => ring,
                Err(e) => {
                    eprintln!("SKIPPED: no usable io_uring here ({e})");
                    return;
                }
            };
            assert!(ring.registered.is_some(), "round {round}: not registered");
            ring.send_slot(0).unwrap()[..4].copy_from_slice(b"ping");
            ring.send(a.as_fd(), 0, 0..4, 7, false).unwrap();
            ring.submit_and_wait(None).unwrap();
            let mut done = Vec::new();
            ring.completions(&mut done);
            assert_eq!(done.len(), 1, "round {round}");
            assert_eq!((done[0].token, done[0].result), (7, 4));
            ring.sent(0);
            let mut got = [0u8; 4];
            std::io::Read::read_exact(&mut b, &mut got).unwrap();
            assert_eq!(&got, b"ping");
        }
    }

    /// A ring never leaves the thread that set it up: its registered index names a place in
    /// that thread's table, where from another thread it could name that thread's own ring.
    /// This compiles only while `Ring` is not `Send` (were it, the call below would be
    /// ambiguous between the two implementations).
    const _RING_IS_NOT_SEND: fn() = || {
        trait AmbiguousIfSend<A> {
            fn some_item() {}
        }
        impl<T: ?Sized> AmbiguousIfSend<()> for T {}
        impl<T: ?Sized + Send> AmbiguousIfSend<u8> for T {}
        <Ring as AmbiguousIfSend<_>>::some_item();
    };
}
