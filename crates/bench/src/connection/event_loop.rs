//! The default engine: one thread serves several connections on non-blocking sockets through
//! one epoll instance (neper's `tcp_rr` design), with any number of requests outstanding per
//! connection. The load shapes and their accounting are the shared slot core's
//! (`super::slot_loop`); this module is the I/O under it.
//!
//! Output is written at once, as much as the socket takes (requests answered by one receive
//! are replaced by one write), the rest when epoll says there is room. The loop waits in
//! `epoll_wait` (level-triggered; one `recv` per readiness, like the floor), or polls it
//! without sleeping with `--spin`. A connect-per-request socket is connected without
//! blocking and watched for writability until its connect completes.

use std::io::{self, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::time::Instant;

use socket2::SockAddr;

use super::slot_loop::{EngineIo, Slot, SlotLoop, Turn, Wait, connect_error, crr_socket};
use super::{LoopError, Shared};
use crate::config::{BenchConfig, TxMode};
use crate::run::{BenchError, RawRun};
use crate::sys::{EPOLL_IN, EPOLL_OUT, Epoll};

/// Runs the connections `indices` of the run on this thread with the default engine.
pub(crate) fn run_thread(
    config: &BenchConfig,
    indices: &[usize],
    shared: &Shared<'_>,
) -> Result<RawRun, BenchError> {
    super::slot_loop::run_thread::<EpollIo>(config, indices, shared)
}

/// A thread's epoll instance and what its last wait returned.
pub(crate) struct EpollIo {
    epoll: Epoll,
    events: [(u64, u32); 64],
    ready: usize,
}

/// The default engine's own state per slot.
#[derive(Default)]
pub(crate) struct EpollSlot {
    /// Its socket is watched for room to write (output is left over).
    watching_out: bool,
}

impl EngineIo for EpollIo {
    type Slot = EpollSlot;
    const SPIN_TURNS_PER_LOOK: u32 = 1;
    const TIMED_CLOSED_LOOP: bool = true;
    const STAMP_EACH_REQUEST: bool = false;

    fn open(_config: &BenchConfig, _slots: usize) -> Result<Self, (&'static str, io::Error)> {
        let epoll = Epoll::new().map_err(|e| ("creating the epoll instance", e))?;
        Ok(EpollIo { epoll, events: [(0, 0); 64], ready: 0 })
    }

    fn adopt(
        &mut self,
        _config: &BenchConfig,
        _shared: &Shared<'_>,
        stream: &TcpStream,
        i: usize,
    ) -> Result<EpollSlot, (&'static str, io::Error)> {
        stream.set_nonblocking(true).map_err(|e| ("setting non-blocking", e))?;
        stream.set_read_timeout(None).map_err(|e| ("handshake", e))?;
        self.epoll
            .add(stream.as_fd(), i as u64, EPOLL_IN)
            .map_err(|e| ("watching the socket", e))?;
        Ok(EpollSlot::default())
    }

    fn warmed_up(t: &mut SlotLoop<'_, Self>) -> Result<(), BenchError> {
        for slot in &t.slots {
            if let Some(stream) = &slot.stream {
                crate::server_stats::start_window(stream, &slot.outcome).map_err(|e| {
                    super::slot_loop::setup_error(t.config, slot.index, "after the warm-up", e)
                })?;
            }
        }
        Ok(())
    }

    fn collect_server_stats(t: &mut SlotLoop<'_, Self>) {
        let stopping = t.shared.control.stopped();
        for slot in &mut t.slots {
            if let (Some(stream), false) = (&slot.stream, slot.dead) {
                let outstanding = slot.pipeline.len() as u64;
                crate::server_stats::collect(stream, &mut slot.outcome, outstanding, stopping);
            }
        }
    }

    /// Writes as much of slot `i`'s output as the socket takes; watches for room if some is
    /// left.
    fn flush(t: &mut SlotLoop<'_, Self>, i: usize) -> Result<(), LoopError> {
        let slot = &mut t.slots[i];
        let Some(stream) = &mut slot.stream else { return Ok(()) };
        while slot.out_pos < slot.out.len() {
            match stream.write(&slot.out[slot.out_pos..]) {
                Ok(0) => return Err(LoopError::Protocol("server closed the connection".into())),
                Ok(n) => slot.out_pos += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        let want_out = slot.out_pos < slot.out.len();
        if want_out != slot.io.watching_out {
            let events = if want_out { EPOLL_IN | EPOLL_OUT } else { EPOLL_IN };
            t.io.epoll.modify(stream.as_fd(), i as u64, events)?;
            slot.io.watching_out = want_out;
        }
        Ok(())
    }

    /// A new socket for slot `i`, profile applied, connect started without blocking.
    fn start_connect(t: &mut SlotLoop<'_, Self>, i: usize) -> io::Result<()> {
        let socket = crr_socket(t.config)?;
        let began = Instant::now();
        match socket.connect(&SockAddr::from(t.config.server)) {
            Ok(()) => {}
            Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
            Err(e) => return Err(e),
        }
        let stream: TcpStream = socket.into();
        t.io.epoll.add(stream.as_fd(), i as u64, EPOLL_OUT)?;
        let slot = &mut t.slots[i];
        slot.io.watching_out = true;
        slot.begin_connect(stream, began);
        Ok(())
    }

    fn closing(&mut self, slot: &mut Slot<EpollSlot>, _i: usize) {
        if let Some(stream) = &slot.stream {
            let _ = self.epoll.delete(stream.as_fd());
        }
        slot.io.watching_out = false;
    }

    fn drop_socket(&mut self, slot: &mut Slot<EpollSlot>, _i: usize) {
        if let Some(stream) = slot.stream.take() {
            let _ = self.epoll.delete(stream.as_fd());
        }
    }

    fn wait(t: &mut SlotLoop<'_, Self>, wait: Wait) -> io::Result<bool> {
        let timeout = match wait {
            Wait::Look => std::time::Duration::ZERO,
            Wait::For(d) => d,
            Wait::Forever => std::time::Duration::MAX,
        };
        let io = &mut t.io;
        io.ready = io.epoll.wait(&mut io.events, timeout)?;
        Ok(io.ready > 0)
    }

    fn dispatch(t: &mut SlotLoop<'_, Self>, turn: Turn) -> Result<(), (usize, LoopError)> {
        for k in 0..t.io.ready {
            let (token, flags) = t.io.events[k];
            let i = token as usize;
            let result = t.on_ready(i, flags, turn);
            t.settle(i, result, turn)?;
        }
        Ok(())
    }
}

impl SlotLoop<'_, EpollIo> {
    /// Slot `i`'s socket is readable or writable (or failed).
    fn on_ready(&mut self, i: usize, flags: u32, turn: Turn) -> Result<(), LoopError> {
        let Turn { done, start, sending, measured, .. } = turn;
        if self.slots[i].dead {
            return Ok(());
        }
        if self.slots[i].connecting.is_some() {
            if flags & (EPOLL_OUT | libc::EPOLLERR as u32 | libc::EPOLLHUP as u32) != 0 {
                self.connected(i, done, measured)?;
            }
            return Ok(());
        }
        if flags & EPOLL_OUT != 0 {
            EpollIo::flush(self, i)?;
        }
        if flags & !EPOLL_OUT == 0 {
            return Ok(());
        }
        let policy = self.config.profile.quickack;
        let slot = &mut self.slots[i];
        let Some(stream) = &slot.stream else { return Ok(()) };
        if !slot.reader.recv_some(stream.as_fd(), policy)? {
            return Ok(());
        }
        let mut answered = 0u32;
        while let Some(header) = self.slots[i].reader.take_frame()? {
            let req = self.slots[i].pipeline.answer(&header)?;
            answered += 1;
            let after = if req.before.is_some() { self.snapshot(i) } else { None };
            let (control, index) = (self.shared.control, self.slots[i].index);
            self.m.answered(self.config, control, start, index, req, done, measured, after);
            if self.config.mode == TxMode::Crr {
                self.close_transaction(i);
            }
        }
        if answered > 0 && sending && self.slots[i].schedule.is_none() {
            self.refill(i, done, None, measured)?;
        }
        if (self.m.requests & 4095) == 0 {
            self.note_cpu();
        }
        Ok(())
    }

    /// Connect-per-request: slot `i`'s connect finished; Hello and request leave together.
    fn connected(&mut self, i: usize, done: Instant, measured: bool) -> Result<(), LoopError> {
        let slot = &mut self.slots[i];
        let began = slot.connecting.take().expect("connecting");
        let stream = slot.stream.as_ref().expect("a connecting slot has a socket");
        if let Some(e) = stream.take_error()? {
            // Still the connect's failure: the caller counts it (open loop) or stops with it.
            slot.connecting = Some(began);
            return Err(if slot.due.is_some() { LoopError::Io(e) } else { connect_error(e) });
        }
        self.queue_first_request(i, began, done, measured);
        EpollIo::flush(self, i)?;
        // The slot watches for its answer now (and for room, if the write was short).
        let slot = &mut self.slots[i];
        if !slot.io.watching_out {
            return Ok(());
        }
        slot.io.watching_out = slot.out_pos < slot.out.len();
        if !slot.io.watching_out {
            let stream = slot.stream.as_ref().expect("connected");
            self.io.epoll.modify(stream.as_fd(), i as u64, EPOLL_IN)?;
        }
        Ok(())
    }
}
