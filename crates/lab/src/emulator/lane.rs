//! One direction of forwarding: read packets from one TUN device, pass their segments through
//! the model, write them to the other TUN device when they come due.
//!
//! The reading side is an [`Intake`]: the input device, pools of packet buffers and the read
//! counters. The rest is a [`Lane`]: its [`Direction`] model, a [`RunAssembler`], a write
//! backlog and its counters. A lane either owns its intake ([`Lane::with_device`]: one thread
//! reads and releases) or takes its packets from a reader thread through a
//! [`super::handoff`] ([`Lane::split`]). Neither blocks nor sleeps: reads and writes are
//! non-blocking, and the event loops ([`super::run`]) decide when to call them and how long
//! to wait.
//!
//! # Segmentation offload
//!
//! A device opened with `IFF_VNET_HDR` ([`Endpoint::vnet_hdr`]) hands out GSO packets of up to
//! 64 KiB behind a `virtio_net_hdr`. Each is parsed once into a shared [`GsoPacket`] and enters
//! the model as its MTU-sized [`Segment`]s, one by one, each with its own wire length: loss,
//! queue limits, CoDel, the link rate, the delay line and the observers (statistics, Mahimahi
//! logs) see exactly the packets a wire would carry. On release, the [`RunAssembler`] gathers
//! consecutive surviving segments of one packet into a run of at most 100 µs of serialisation
//! at the link's rate and writes it in one `writev`: the original bytes when the whole packet
//! leaves together, else rewritten headers (sequence number, IP id, lengths, flags, partial
//! checksum) in front of a slice of the original payload. Nothing is copied but headers and
//! packets shorter than [`SMALL_PACKET`] (moved out of their 64 KiB read buffer so that ACKs in
//! flight do not pin large buffers). A device without `IFF_VNET_HDR` carries one segment per
//! packet, whose bytes are never looked at.
//!
//! # Invariants
//!
//! - Every segment read is exactly one of: dropped by the model (counted in its stats), dropped
//!   with its packet as oversize or malformed (counted), held (model, run assembler or write
//!   backlog), written (counted in `forwarded`), or lost to a failed write (counted in
//!   `write_errors`, one per frame). Nothing disappears silently.
//! - A write that finds the device busy (`EAGAIN`) keeps the run at the head of the write
//!   backlog; later runs queue behind it, so order is kept.
//! - Lateness is measured for every segment on the clock read just before its frame's write.
//! - Buffers circulate: read buffer -> shared packet -> written (last run) -> back to the
//!   intake's pool (through a [`Recycler`], also within one thread). Pools allocate only when
//!   they run dry and no buffer has come back, and keep a bounded number of spare buffers.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{BufWriter, IoSlice};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;
use std::time::Duration;

use rustix::io::Errno;
use tcptail_emu::runs::{Run, RunAssembler, RunPolicy};
use tcptail_emu::segment::{GsoPacket, MAX_FRAME_HEADER, Segment, VNET_HDR_LEN};
use tcptail_emu::{Count, Direction, Event, MahimahiLog, Observer, Packet};
use tcptail_emu::{Nanos, Stats};
use tcptail_netns::TunDevice;

use super::clock::MonoClock;
use super::handoff::{self, Arrival, Buf, Receiving, Recycler, Returns, Sending};
use super::report::{DirectionReport, LatenessHistogram};
use super::sched::Attribution;

/// A packet device: a non-blocking descriptor that reads and writes one packet per call (a
/// TUN device; a datagram socket in tests), whether each packet carries a `virtio_net_hdr`,
/// and a name for messages.
#[derive(Debug)]
pub(crate) struct Endpoint {
    fd: OwnedFd,
    name: String,
    vnet_hdr: bool,
    /// `(namespace, interface)` of a network device, whose kernel counters can be read.
    device: Option<(String, String)>,
}

impl Endpoint {
    /// `fd` must be non-blocking and packet-oriented; `vnet_hdr` if every packet read from or
    /// written to it starts with a `virtio_net_hdr`.
    #[cfg(test)]
    pub(crate) fn new(fd: OwnedFd, name: String, vnet_hdr: bool) -> Endpoint {
        Endpoint { fd, name, vnet_hdr, device: None }
    }

    /// `tcptail-tun in tcptail-123-client-0`.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// Whether packets carry a `virtio_net_hdr` (GSO packets of up to 64 KiB).
    pub(crate) fn vnet_hdr(&self) -> bool {
        self.vnet_hdr
    }

    /// `(namespace, interface)` if this is a network device.
    pub(crate) fn device(&self) -> Option<(String, String)> {
        self.device.clone()
    }
}

impl From<TunDevice> for Endpoint {
    fn from(dev: TunDevice) -> Endpoint {
        let name = format!("{} in {}", dev.ifname(), dev.netns());
        let device = Some((dev.netns().to_owned(), dev.ifname().to_owned()));
        let vnet_hdr = dev.offloads().vnet_hdr;
        Endpoint { fd: dev.into_fd(), name, vnet_hdr, device }
    }
}

impl AsFd for Endpoint {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Most bytes one lane reads, or writes, in one turn (besides the packet count `max`): 32
/// GSO packets would be 2 MiB, 1.7 ms at 10 Gbit/s, during which the other lane's releases
/// wait. 256 KiB is 210 µs at 10 Gbit/s and still four 64 KiB packets per turn.
pub(crate) const TURN_BYTES: usize = 256 * 1024;

/// Spare buffers kept for reuse; beyond this they are freed.
pub(crate) const POOL_MAX: usize = 8192;

/// Buffers allocated up front per lane.
const POOL_INITIAL: usize = 256;

/// Read buffer of a `virtio_net_hdr` device: the header and a 64 KiB GSO packet.
pub(crate) const GSO_READ_SIZE: usize = VNET_HDR_LEN + 65536;

/// Spare 64 KiB read buffers kept per lane (64 MiB); a full queue holds its packets' buffers
/// in any case, this only bounds the idle ones.
const GSO_POOL_MAX: usize = 1024;

/// Up-front 64 KiB read buffers per lane.
const GSO_POOL_INITIAL: usize = 32;

/// Packets up to this many bytes (`virtio_net_hdr` included) read from a `virtio_net_hdr`
/// device are copied into a buffer of this size, so that the 64 KiB read buffer is reused at
/// once: a pure ACK would otherwise pin 64 KiB for a whole one-way delay.
pub(crate) const SMALL_PACKET: usize = 2048;

/// The observers of one direction: statistics, and optionally a Mahimahi log.
#[derive(Debug)]
pub(crate) struct LaneObserver {
    pub(crate) stats: Stats,
    pub(crate) log: Option<MahimahiLog<BufWriter<File>>>,
}

impl Observer for LaneObserver {
    #[inline]
    fn on_event(&mut self, event: &Event) {
        self.stats.on_event(event);
        if let Some(log) = &mut self.log {
            log.on_event(event);
        }
    }
}

/// A free list of equally sized packet buffers.
#[derive(Debug)]
struct Pool {
    size: usize,
    max: usize,
    free: Vec<Buf>,
}

impl Pool {
    fn new(size: usize) -> Pool {
        Pool::with_limits(size, POOL_INITIAL, POOL_MAX)
    }

    fn with_limits(size: usize, initial: usize, max: usize) -> Pool {
        let mut pool = Pool { size, max, free: Vec::with_capacity(initial) };
        pool.free.extend((0..initial).map(|_| vec![0u8; size].into_boxed_slice()));
        pool
    }

    #[inline]
    fn get(&mut self) -> Buf {
        self.free.pop().unwrap_or_else(|| vec![0u8; self.size].into_boxed_slice())
    }

    /// Keeps `buf` if it has this pool's size and there is room; hands it back otherwise.
    #[inline]
    fn put(&mut self, buf: Buf) -> Option<Buf> {
        if buf.len() != self.size {
            return Some(buf);
        }
        if self.free.len() < self.max {
            self.free.push(buf);
        }
        None
    }
}

/// The read buffers of one intake: full-size reads, and (on a `virtio_net_hdr` device) small
/// buffers that short packets are copied into.
#[derive(Debug)]
struct Buffers {
    read: Pool,
    small: Option<Pool>,
    /// Buffers handed back by the lane once their packets are written or dropped.
    returns: Returns,
}

impl Buffers {
    fn new(vnet_hdr: bool, buffer_size: usize, returns: Returns) -> Buffers {
        if vnet_hdr {
            Buffers {
                read: Pool::with_limits(GSO_READ_SIZE, GSO_POOL_INITIAL, GSO_POOL_MAX),
                small: Some(Pool::new(SMALL_PACKET)),
                returns,
            }
        } else {
            Buffers { read: Pool::new(buffer_size), small: None, returns }
        }
    }

    /// Takes back what the lane returned, into the pools of their sizes.
    fn collect_returns(&mut self) {
        while let Some(buf) = self.returns.take() {
            self.put(buf);
        }
    }

    /// A full-size read buffer.
    #[inline]
    fn read_buffer(&mut self) -> Buf {
        if self.read.free.is_empty() {
            self.collect_returns();
        }
        self.read.get()
    }

    /// A small buffer (a `virtio_net_hdr` device only).
    #[inline]
    fn small_buffer(&mut self) -> Option<Buf> {
        if self.small.as_ref()?.free.is_empty() {
            self.collect_returns();
        }
        self.small.as_mut().map(Pool::get)
    }

    /// Returns `buf` to the pool of its size.
    fn put(&mut self, buf: Buf) {
        let rest = self.read.put(buf);
        if let (Some(buf), Some(small)) = (rest, &mut self.small) {
            let _ = small.put(buf);
        }
    }
}

/// Counters of the reading side.
#[derive(Debug, Default, Clone)]
pub(crate) struct IntakeCounters {
    reads: u64,
    empty_reads: u64,
    copied_bytes: u64,
    read_errors: u64,
    oversize_drops: u64,
    malformed_drops: u64,
    last_error: Option<String>,
}

/// Counters of the releasing side.
#[derive(Debug, Default)]
struct Counters {
    forwarded: Count,
    writes: u64,
    copied_bytes: u64,
    write_errors: u64,
    write_retries: u64,
}

/// What a write attempt did.
enum Written {
    /// Written, or failed for good (counted); the buffer can be reused.
    Done,
    /// The device is busy: keep the run and retry when writable.
    Busy,
}

/// The reading side of one direction: reads packets from the input device, stamps and parses
/// them, and delivers them (to its own lane, or through a hand-off to a releaser thread).
#[derive(Debug)]
pub(crate) struct Intake {
    label: &'static str,
    from: Arc<Endpoint>,
    buffers: Buffers,
    spare: Option<Buf>,
    counters: IntakeCounters,
    input_closed: bool,
}

impl Intake {
    fn new(
        label: &'static str,
        from: Arc<Endpoint>,
        buffer_size: usize,
        returns: Returns,
    ) -> Intake {
        Intake {
            label,
            buffers: Buffers::new(from.vnet_hdr(), buffer_size, returns),
            from,
            spare: None,
            counters: IntakeCounters::default(),
            input_closed: false,
        }
    }

    /// `up` or `down`.
    pub(crate) fn label(&self) -> &'static str {
        self.label
    }

    /// The device packets are read from.
    pub(crate) fn input(&self) -> &Endpoint {
        &self.from
    }

    /// Whether the input device went away (no more reads are attempted).
    pub(crate) fn input_closed(&self) -> bool {
        self.input_closed
    }

    /// Stops reading from the input device, recording why.
    pub(crate) fn close_input(&mut self, why: String) {
        self.input_closed = true;
        self.counters.last_error = Some(why);
    }

    /// Reads up to `max` packets (and about [`TURN_BYTES`]), stamps each right after its read
    /// and hands it, parsed, to `deliver`. Returns how many packets were read.
    pub(crate) fn read_batch(
        &mut self,
        clock: &MonoClock,
        max: usize,
        mut deliver: impl FnMut(Nanos, Arc<GsoPacket>),
    ) -> usize {
        if self.input_closed {
            return 0;
        }
        let (mut read, mut bytes) = (0, 0);
        while read < max && bytes < TURN_BYTES {
            let mut buf = self.spare.take().unwrap_or_else(|| self.buffers.read_buffer());
            match rustix::io::read(&*self.from, &mut buf[..]) {
                Ok(n) if n > 0 && n < buf.len() => {
                    read += 1;
                    bytes += n;
                    self.counters.reads += 1;
                    let now = clock.now();
                    let buf = match self.buffers.small.is_some() && n <= SMALL_PACKET {
                        true => {
                            let mut copy = self.buffers.small_buffer().expect("a small pool");
                            copy[..n].copy_from_slice(&buf[..n]);
                            self.counters.copied_bytes += n as u64;
                            self.spare = Some(buf);
                            copy
                        }
                        false => buf,
                    };
                    if let Some(packet) = self.parse(buf, n) {
                        deliver(now, packet);
                    }
                }
                Ok(0) => {
                    self.spare = Some(buf);
                    break;
                }
                Ok(n) => {
                    // Filled the whole buffer: the packet may have been cut. Never forward it.
                    read += 1;
                    self.counters.reads += 1;
                    self.counters.oversize_drops += 1;
                    self.counters.last_error = Some(format!(
                        "{}: a {n}-byte read filled the {}-byte buffer (MTU larger than \
                         buffer_size?); packet dropped",
                        self.label,
                        buf.len()
                    ));
                    self.spare = Some(buf);
                }
                Err(Errno::INTR) => self.spare = Some(buf),
                Err(e) => {
                    self.spare = Some(buf);
                    if e == Errno::AGAIN {
                        self.counters.empty_reads += 1;
                    } else {
                        self.counters.read_errors += 1;
                        self.counters.last_error = Some(format!("{}: read: {e}", self.label));
                    }
                    break;
                }
            }
        }
        read
    }

    /// Parses the `n` bytes read into `buf`; a malformed packet is counted and dropped.
    fn parse(&mut self, buf: Buf, n: usize) -> Option<Arc<GsoPacket>> {
        match GsoPacket::parse(buf, n, self.from.vnet_hdr()) {
            Ok(packet) => Some(Arc::new(packet)),
            Err(rejected) => {
                self.counters.malformed_drops += 1;
                self.counters.last_error = Some(format!(
                    "{}: a {n}-byte packet from {} could not be segmented ({}); dropped",
                    self.label,
                    self.from.name(),
                    rejected.error
                ));
                self.buffers.put(rejected.buffer);
                None
            }
        }
    }

    /// The counters, for the direction's report.
    pub(crate) fn into_counters(self) -> IntakeCounters {
        self.counters
    }
}

/// A reader thread's share of a split direction: its intake and the hand-off's sending end.
#[derive(Debug)]
pub(crate) struct Reader {
    pub(crate) intake: Intake,
    handoff: Sending,
}

impl Reader {
    /// Reads a batch (see [`Intake::read_batch`]) into the hand-off and wakes the releaser if
    /// it sleeps. Returns how many packets were read.
    pub(crate) fn read_batch(&mut self, clock: &MonoClock, max: usize) -> usize {
        let handoff = &self.handoff;
        let n = self.intake.read_batch(clock, max, |now, packet| {
            // The releaser only goes away when the emulator stops.
            let _ = handoff.send((now, packet));
        });
        if n > 0 {
            handoff.notify();
        }
        n
    }
}

/// Where a lane's packets come from.
#[derive(Debug)]
enum Input {
    /// Read by the lane itself.
    Device(Intake),
    /// Read by a reader thread.
    Handoff(Receiving),
}

/// One direction of forwarding; see the [module docs](self).
#[derive(Debug)]
pub(crate) struct Lane {
    label: &'static str,
    input: Input,
    to: Arc<Endpoint>,
    model: Direction<Segment, LaneObserver>,
    runs: RunAssembler,
    recycler: Recycler,
    /// Packets read in this turn, before they enter the model (reused).
    arrivals: Vec<Arrival>,
    backlog: VecDeque<Run>,
    scratch: [u8; MAX_FRAME_HEADER],
    next_id: u64,
    counters: Counters,
    lateness: LatenessHistogram,
    last_error: Option<String>,
}

impl Lane {
    /// A lane that reads `from` itself and writes `to` (both with or both without
    /// `virtio_net_hdr`s; the caller checks). `buffer_size` is the read buffer of a device
    /// without them.
    pub(crate) fn with_device(
        label: &'static str,
        from: Arc<Endpoint>,
        to: Arc<Endpoint>,
        model: Direction<Segment, LaneObserver>,
        buffer_size: usize,
    ) -> Lane {
        let (recycler, returns) = handoff::returns();
        let intake = Intake::new(label, from, buffer_size, returns);
        Lane::new(label, Input::Device(intake), to, model, recycler)
    }

    /// A direction split over two threads: the [`Reader`] reads `from`, the lane releases to
    /// `to`.
    pub(crate) fn split(
        label: &'static str,
        from: Arc<Endpoint>,
        to: Arc<Endpoint>,
        model: Direction<Segment, LaneObserver>,
        buffer_size: usize,
    ) -> std::io::Result<(Reader, Lane)> {
        let (recycler, returns) = handoff::returns();
        let (sending, receiving) = handoff::channel()?;
        let reader =
            Reader { intake: Intake::new(label, from, buffer_size, returns), handoff: sending };
        Ok((reader, Lane::new(label, Input::Handoff(receiving), to, model, recycler)))
    }

    fn new(
        label: &'static str,
        input: Input,
        to: Arc<Endpoint>,
        model: Direction<Segment, LaneObserver>,
        recycler: Recycler,
    ) -> Lane {
        let policy = RunPolicy::for_rate(&model.spec().rate);
        Lane {
            label,
            input,
            to,
            model,
            runs: RunAssembler::new(policy),
            recycler,
            arrivals: Vec::new(),
            backlog: VecDeque::new(),
            scratch: [0; MAX_FRAME_HEADER],
            next_id: 0,
            counters: Counters::default(),
            lateness: LatenessHistogram::default(),
            last_error: None,
        }
    }

    /// `up` or `down`.
    pub(crate) fn label(&self) -> &'static str {
        self.label
    }

    /// Whether the lane reads its own device (rather than a reader thread's hand-off).
    pub(crate) fn reads_itself(&self) -> bool {
        matches!(self.input, Input::Device(_))
    }

    /// The device packets are written to.
    pub(crate) fn output(&self) -> &Endpoint {
        &self.to
    }

    /// The descriptor to poll for new packets while sleeping: the input device, or the
    /// hand-off's eventfd. `None` once the input device went away.
    pub(crate) fn wake_fd(&self) -> Option<BorrowedFd<'_>> {
        match &self.input {
            Input::Device(intake) if intake.input_closed() => None,
            Input::Device(intake) => Some(intake.input().as_fd()),
            Input::Handoff(receiving) => Some(receiving.wake_fd().as_fd()),
        }
    }

    /// About to sleep: `false` if a packet is already waiting in the hand-off.
    pub(crate) fn prepare_sleep(&self) -> bool {
        match &self.input {
            Input::Device(_) => true,
            Input::Handoff(receiving) => receiving.prepare_sleep(),
        }
    }

    /// After a sleep, with what polling [`Lane::wake_fd`] reported. An input device that
    /// reported an error or hang-up is no longer read; the message says why.
    pub(crate) fn woke(&mut self, revents: rustix::event::PollFlags) -> Option<String> {
        use rustix::event::PollFlags;
        match &mut self.input {
            Input::Handoff(receiving) => {
                receiving.woke(revents.contains(PollFlags::IN));
                None
            }
            Input::Device(intake) => {
                if !revents.intersects(PollFlags::ERR | PollFlags::HUP | PollFlags::NVAL) {
                    return None;
                }
                let why = format!(
                    "{}: input device {} reported {revents:?}; no longer reading it",
                    self.label,
                    intake.input().name()
                );
                intake.close_input(why.clone());
                Some(why)
            }
        }
    }

    /// Whether releases are waiting for the output device to become writable.
    pub(crate) fn blocked(&self) -> bool {
        !self.backlog.is_empty()
    }

    /// When the lane next needs attention (`None`: nothing in flight): the model's next
    /// release, or the moment a run held for its next segment must go.
    pub(crate) fn next_wakeup(&self) -> Option<Nanos> {
        self.runs.next_wakeup(&self.model)
    }

    /// Takes up to `max` new packets (and about [`TURN_BYTES`] read from a device) into the
    /// model: reads its device, or takes what the reader thread handed over. Returns how many
    /// packets came in.
    pub(crate) fn read_batch(&mut self, clock: &MonoClock, max: usize) -> usize {
        match &mut self.input {
            Input::Device(intake) => {
                let mut arrivals = std::mem::take(&mut self.arrivals);
                let n = intake.read_batch(clock, max, |now, p| arrivals.push((now, p)));
                for (now, packet) in arrivals.drain(..) {
                    self.admit(now, packet);
                }
                self.arrivals = arrivals;
                n
            }
            Input::Handoff(_) => self.take_handoff(max),
        }
    }

    /// Admits up to `max` packets waiting in the hand-off, in order at their stamps.
    fn take_handoff(&mut self, max: usize) -> usize {
        let mut n = 0;
        while n < max {
            let Input::Handoff(receiving) = &self.input else { break };
            let Some((now, packet)) = receiving.try_recv() else { break };
            self.admit(now, packet);
            n += 1;
        }
        n
    }

    /// Enqueues each segment of `packet`, read at `now`, in one step of the model
    /// ([`Direction::enqueue_burst`]: per segment only where segments can be treated
    /// differently).
    fn admit(&mut self, now: Nanos, packet: Arc<GsoPacket>) {
        let first = self.next_id;
        self.next_id += u64::from(packet.layout().segments());
        let segments = Segment::all(&packet).zip(first..).map(|(segment, id)| {
            let len = segment.len();
            Packet { id, len, payload: segment }
        });
        // A dropped segment's handle is released here; the packet's buffer goes when the
        // last of its segments does.
        self.model.enqueue_burst(now, segments, |_, _| {});
        self.recycler.reclaim(packet);
    }

    /// The next run due at `now`. Packets the reader thread stamped up to now enter the model
    /// first, so that the model never runs ahead of an arrival it has not seen.
    fn poll_run(&mut self, now: Nanos) -> Option<Run> {
        if matches!(self.input, Input::Handoff(_)) {
            self.take_handoff(usize::MAX);
        }
        self.runs.poll(now, &mut self.model)
    }

    /// Writes up to `max` runs (and about [`TURN_BYTES`]) that have come due (the write
    /// backlog first). Returns how many frames left the lane (written or lost to a write
    /// error). Bounded so that one busy direction cannot starve the other direction's
    /// releases or the reads.
    /// Releases later than [`Attribution::late_after`] are handed to `late`.
    pub(crate) fn release_due(
        &mut self,
        clock: &MonoClock,
        max: usize,
        late: &mut Attribution,
    ) -> usize {
        let (mut done, mut bytes) = (0, 0);
        while done < max && bytes < TURN_BYTES {
            let run = match self.backlog.pop_front() {
                Some(run) => run,
                None => match self.poll_run(clock.now()) {
                    Some(run) => run,
                    None => return done,
                },
            };
            match self.write(&run, clock, late) {
                Written::Done => {
                    bytes += run.wire_bytes() as usize;
                    self.recycler.reclaim(run.into_packet());
                    done += 1;
                }
                Written::Busy => {
                    self.backlog.push_front(run);
                    // Move what is due behind the blocked head, so the model's clock and the
                    // observer keep up; it is written in order once the device drains.
                    let now = clock.now();
                    while let Some(r) = self.poll_run(now) {
                        self.backlog.push_back(r);
                    }
                    return done;
                }
            }
        }
        done
    }

    fn write(&mut self, run: &Run, clock: &MonoClock, late: &mut Attribution) -> Written {
        let frame = run.frame(&mut self.scratch);
        loop {
            let now = clock.now();
            let result = if frame.payload.is_empty() {
                rustix::io::write(&*self.to, frame.head)
            } else {
                rustix::io::writev(
                    &*self.to,
                    &[IoSlice::new(frame.head), IoSlice::new(frame.payload)],
                )
            };
            match result {
                Ok(_) => {
                    // A TUN write takes the whole frame or fails.
                    let bound = late.late_after();
                    let (mut segments, mut sum, mut due) = (0, Duration::ZERO, None::<Nanos>);
                    for info in run.releases() {
                        let lateness = info.lateness(now);
                        self.lateness.record(lateness);
                        if lateness > bound {
                            segments += 1;
                            sum += lateness;
                            due = Some(due.map_or(info.scheduled, |d| d.min(info.scheduled)));
                        }
                    }
                    if let Some(due) = due {
                        late.late_run(due, segments, sum);
                    }
                    self.counters.writes += 1;
                    if !frame.payload.is_empty() {
                        self.counters.copied_bytes += frame.head.len() as u64;
                    }
                    self.counters.forwarded.packets += u64::from(run.segments());
                    self.counters.forwarded.bytes += u64::from(run.wire_bytes());
                    return Written::Done;
                }
                Err(Errno::INTR) => continue,
                Err(Errno::AGAIN) => {
                    self.counters.write_retries += 1;
                    return Written::Busy;
                }
                Err(e) => {
                    self.counters.write_errors += 1;
                    self.last_error = Some(format!(
                        "{}: write of {} segment(s), {} bytes: {e}",
                        self.label,
                        run.segments(),
                        frame.len()
                    ));
                    return Written::Done;
                }
            }
        }
    }

    /// The lane's lateness histogram (for the both-directions summary).
    pub(crate) fn lateness(&self) -> &LatenessHistogram {
        &self.lateness
    }

    /// Ends the lane at `now`: processes link events up to `now` so the statistics are
    /// complete, flushes the log, and returns the report and any log error. A split lane
    /// gets its reader's counters in `intake` (its threads have all stopped).
    pub(crate) fn finish(
        self,
        now: Nanos,
        intake: Option<IntakeCounters>,
    ) -> (DirectionReport, Option<String>) {
        let mut model = self.model;
        model.advance(now);
        let in_backlog: u64 = self.backlog.iter().map(|r| u64::from(r.segments())).sum();
        // Packets the reader handed over that never reached the model.
        let mut in_handoff = 0u64;
        let intake = match self.input {
            Input::Device(intake) => intake.into_counters(),
            Input::Handoff(receiving) => {
                while let Some((_, packet)) = receiving.try_recv() {
                    in_handoff += u64::from(packet.layout().segments());
                }
                intake.unwrap_or_default()
            }
        };
        let held =
            model.backlog().packets() as u64 + in_backlog + in_handoff + self.runs.held() as u64;
        let LaneObserver { stats, log } = model.into_observer();
        let log_error = log
            .and_then(|log| log.finish().err())
            .map(|e| format!("{}: writing the Mahimahi log: {e}", self.label));
        let report = DirectionReport {
            stats: stats.summary(),
            forwarded: self.counters.forwarded,
            reads: intake.reads,
            empty_reads: intake.empty_reads,
            writes: self.counters.writes,
            copied_bytes: intake.copied_bytes + self.counters.copied_bytes,
            lateness: self.lateness.summary(),
            read_errors: intake.read_errors,
            oversize_drops: intake.oversize_drops,
            malformed_drops: intake.malformed_drops,
            write_errors: self.counters.write_errors,
            write_retries: self.counters.write_retries,
            kernel_drops_before_read: None,
            kernel_drops_after_write: None,
            held_at_stop: held,
            last_error: self.last_error.or(intake.last_error),
        };
        (report, log_error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use std::os::unix::net::UnixDatagram;

    use tcptail_emu::{DirectionSpec, QueueLimit, QueueSpec};
    use tcptail_units::{BitRate, ByteSize};

    #[test]
    fn a_split_lane_counts_what_is_still_in_the_hand_off_and_its_readers_reads() {
        let (input, app) = UnixDatagram::pair().unwrap();
        input.set_nonblocking(true).unwrap();
        let (output, _peer) = UnixDatagram::pair().unwrap();
        let endpoint = |s: UnixDatagram, name: &str| {
            Arc::new(Endpoint::new(OwnedFd::from(s), name.to_owned(), false))
        };
        let queue = QueueSpec::drop_tail(QueueLimit::Bytes(ByteSize(1_000_000)));
        let spec = DirectionSpec::constant(BitRate(1_000_000), Duration::from_secs(1), queue);
        let stats = Stats::new(Duration::from_millis(100), Nanos::ZERO);
        let model =
            Direction::try_new(spec, 1).unwrap().with_observer(LaneObserver { stats, log: None });
        let (mut reader, lane) =
            Lane::split("up", endpoint(input, "in"), endpoint(output, "out"), model, 2048).unwrap();
        for _ in 0..3 {
            app.send(&[0u8; 100]).unwrap();
        }
        let clock = MonoClock::start();
        assert_eq!(reader.read_batch(&clock, 32), 3);
        let counters = reader.intake.into_counters();
        // The releaser never ran: all three are in the hand-off, none in the model.
        let (report, log_error) = lane.finish(clock.now(), Some(counters));
        assert!(log_error.is_none());
        assert_eq!((report.reads, report.empty_reads), (3, 1));
        assert_eq!(report.held_at_stop, 3);
        assert_eq!(report.stats.arrivals.packets, 0);
    }

    #[test]
    fn pool_reuses_and_caps() {
        let mut pool = Pool::new(64);
        assert_eq!(pool.free.len(), POOL_INITIAL);
        let bufs: Vec<Buf> = (0..POOL_INITIAL + 3).map(|_| pool.get()).collect();
        assert!(pool.free.is_empty());
        assert!(bufs.iter().all(|b| b.len() == 64));
        for b in bufs {
            assert!(pool.put(b).is_none());
        }
        assert_eq!(pool.free.len(), POOL_INITIAL + 3);
        for _ in 0..POOL_MAX {
            assert!(pool.put(vec![0; 64].into_boxed_slice()).is_none());
        }
        assert_eq!(pool.free.len(), POOL_MAX);
        // A buffer of another size is handed back, not kept.
        pool.free.clear();
        assert!(pool.put(vec![0; 65].into_boxed_slice()).is_some());
        assert!(pool.free.is_empty());
    }
}
