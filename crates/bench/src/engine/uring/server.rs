//! The io_uring serve loop of one server connection, after its handshake: one ring, one
//! multishot receive into provided buffers, responses gathered into one send slot and sent
//! in one operation per batch of requests.
//!
//! Its limits against a broken or hostile peer are those of the default loop
//! (`crate::server::serve`): requests are checked against the Hello by the same parser, the
//! memory is fixed (the provided buffers and one slot of at most
//! [`crate::server::RESPONSE_BUF_LEN`]; longer responses go out from the slot's zeros in
//! chunks), a connection idle for the idle timeout is closed (the watchdog shuts its read
//! side down) and one whose peer takes no byte of a response for the write timeout is cut.
//!
//! StatsRequests are answered as the default loop answers them (`crate::server::stats`, the
//! same window and reply), in order after the responses owed before them. A request's service
//! time ends when its response's send completes: the loop hands the send over with an enter
//! that submits without waiting (the send runs inside it and posts its completion before it
//! returns), reaps that completion and reads the clock, then waits for the next request. A
//! send that could not complete at once is waited for with the write timeout. The clock is
//! read once per loop turn, when completions are reaped: the same instant ends the served
//! requests' service times and starts a new send's write timeout. The window's CPU time is
//! the connection thread's: with `--sqpoll` the kernel thread that issues the sends is not
//! in it.

use std::collections::VecDeque;
use std::io;
use std::net::TcpStream;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};

use super::{Op, ring_options};
use crate::engine::Splitter;
use crate::server::RESPONSE_BUF_LEN;
use crate::server::stats::StatsWindow;
use crate::sys::uring::{Completion, Ring};
use crate::watchdog::Watch;
use crate::wire::{self, FrameKind, FrameParser, HEADER_LEN, Header, WireError};

/// How the serve loop ended, for the server to turn into its own close or reject.
#[derive(Debug)]
pub(crate) enum Ended {
    /// The peer closed the connection (or reset it).
    PeerClosed,
    /// The server is shutting down.
    Stopping,
    /// Nothing received for the idle timeout.
    Idle,
    /// A response made no progress for the write timeout.
    WriteStalled,
    /// The peer broke the protocol.
    Wire(WireError),
    /// Setting the ring up or an operation failed.
    Io(io::Error),
}

impl From<WireError> for Ended {
    fn from(e: WireError) -> Ended {
        Ended::Wire(e)
    }
}

/// What the loop needs from the server.
pub(crate) struct Serve<'a> {
    pub(crate) stream: &'a TcpStream,
    /// The Hello's limits.
    pub(crate) request_len: u32,
    pub(crate) reply_len: u32,
    /// Busy-poll the completion queue (the vetted spin decision), for at most `spin_cap`
    /// without a request before sleeping until the next one.
    pub(crate) spin: bool,
    pub(crate) spin_cap: Duration,
    pub(crate) sqpoll: bool,
    pub(crate) write_timeout: Duration,
    /// Fires (shuts the read side down) after the idle timeout without a request.
    pub(crate) watch: Watch,
    pub(crate) stopping: &'a (dyn Fn() -> bool + Sync),
}

/// What the connection owes its peer, in the order the requests came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owed {
    /// A response of `len` bytes to request `seq`, completed by the receive reaped at
    /// `received` (the start of its service time).
    Response { seq: u64, len: usize, received: Instant },
    /// A StatsReply: this connection's window, reported once every earlier response is sent.
    Stats,
}

/// What is owed, front first.
type Backlog = VecDeque<Owed>;

/// The send in flight and what it still owes after the bytes in the slot.
#[derive(Debug, Default)]
struct Sending {
    /// The slot's bytes of the send in flight.
    range: std::ops::Range<usize>,
    /// A long response's zeros still owed after the slot (sent from the slot's zeros).
    zeros_left: usize,
    /// A StatsReply's bytes still owed after the slot.
    reply: Vec<u8>,
    reply_at: usize,
    /// The responses this send completes: when each one's request was received, and how
    /// many share that instant (their service times end when the send does).
    serving: Vec<(Instant, u64)>,
    /// When the send in flight was submitted; `None` when nothing is in flight.
    since: Option<Instant>,
}

impl Sending {
    fn busy(&self) -> bool {
        self.since.is_some() || self.zeros_left > 0 || self.reply_at < self.reply.len()
    }
}

/// Serves requests until the peer closes or a limit ends the connection; counts answered
/// requests in `requests`.
pub(crate) fn serve(mut s: Serve<'_>, requests: &mut u64) -> Result<(), Ended> {
    // Room for a response, and for a StatsReply in a few sends whatever the response size.
    let slot_len = (s.reply_len as usize).clamp(MIN_SLOT_LEN, RESPONSE_BUF_LEN);
    let mut ring = Ring::new(ring_options(1, slot_len, s.sqpoll)).map_err(Ended::Io)?;
    let fd = s.stream.as_fd();
    let mut splitter = Splitter::new(
        FrameParser::new(FrameKind::Request, s.request_len)
            .with_max_reply_len(s.reply_len)
            .with_stats_requests(),
    );
    let mut window = StatsWindow::start();
    let mut backlog = Backlog::new();
    let mut out = Sending::default();
    let mut armed = false;
    let mut completions: Vec<Completion> = Vec::with_capacity(16);
    let mut last_request = Instant::now();
    // The clock of the latest turn that reaped completions.
    let mut reaped = last_request;
    let mut turns = 0u32;
    s.watch.waiting();
    loop {
        // A send was staged in this turn: the enter below submits it without waiting.
        let mut staged = false;
        if !armed {
            ring.arm_recv(fd, Op::Recv(0).token()).map_err(Ended::Io)?;
            armed = true;
        }
        if !out.busy() && !backlog.is_empty() {
            let slot = ring.send_slot(0).expect("no send is in flight");
            out.range = 0..stage(slot, &mut backlog, &mut out, &mut window, fd)?;
            ring.send(fd, 0, out.range.clone(), Op::Send(0).token(), false).map_err(Ended::Io)?;
            // The write timeout runs from this turn's clock (a few µs early at most).
            out.since = Some(reaped);
            staged = true;
        }
        // Wait: spinning polls the queue; a send just staged is submitted without waiting
        // (normally it completes inside that call: the end of its requests' service time is
        // read right after it, as the default engine reads it after its `send`); a send still
        // in flight is waited for at most the write timeout; otherwise the wait has no timer.
        if s.spin {
            turns = turns.wrapping_add(1);
            ring.submit().map_err(Ended::Io)?;
            if turns.is_multiple_of(1024) && last_request.elapsed() >= s.spin_cap {
                ring.submit_and_wait(None).map_err(Ended::Io)?;
            }
        } else if staged {
            ring.submit().map_err(Ended::Io)?;
        } else if let Some(since) = out.since {
            let left = s.write_timeout.saturating_sub(since.elapsed());
            ring.submit_and_wait(Some(left.max(Duration::from_millis(1)))).map_err(Ended::Io)?;
        } else {
            ring.submit_and_wait(None).map_err(Ended::Io)?;
        }
        ring.completions(&mut completions);
        if completions.is_empty() {
            if let Some(since) = out.since
                && since.elapsed() >= s.write_timeout
            {
                return Err(if (s.stopping)() { Ended::Stopping } else { Ended::WriteStalled });
            }
            if s.spin && turns.is_multiple_of(1024) && (s.stopping)() {
                return Err(Ended::Stopping);
            }
            continue;
        }
        reaped = Instant::now();
        for done in completions.drain(..) {
            match Op::from_token(done.token) {
                Op::Send(_) => {
                    ring.sent(0);
                    if done.result < 0 {
                        return Err(ended_by(done.result, &s));
                    }
                    out.range.start += done.result as usize;
                    if out.range.is_empty() {
                        let slot = ring.send_slot(0).expect("the send completed");
                        match next_chunk(slot, &mut out) {
                            Some(range) => out.range = range,
                            None => {
                                // Every byte of the send's responses is with the kernel.
                                out.since = None;
                                for (received, count) in out.serving.drain(..) {
                                    window.answered_at(received, reaped, count);
                                }
                                continue;
                            }
                        }
                    }
                    // The next chunk, or the rest of a short send.
                    ring.send(fd, 0, out.range.clone(), Op::Send(0).token(), false)
                        .map_err(Ended::Io)?;
                    out.since = Some(Instant::now());
                }
                Op::Recv(_) => {
                    armed &= done.more;
                    match done.result {
                        n if n > 0 => {
                            let bid = done.buffer.expect("a receive with bytes names its buffer");
                            let mut got = 0u64;
                            let r = splitter.feed(ring.received(bid, n as usize), |h: Header| {
                                if h.kind == FrameKind::StatsRequest {
                                    backlog.push_back(Owed::Stats);
                                } else {
                                    let len = h.reply_len as usize;
                                    backlog.push_back(Owed::Response {
                                        seq: h.seq,
                                        len,
                                        received: reaped,
                                    });
                                    got += 1;
                                }
                                Ok::<(), Ended>(())
                            });
                            ring.recycle(bid);
                            r?;
                            if got > 0 {
                                *requests += got;
                                last_request = reaped;
                                s.watch.answered();
                                s.watch.waiting();
                            }
                        }
                        0 => {
                            return Err(if s.watch.fired() {
                                Ended::Idle
                            } else if (s.stopping)() {
                                Ended::Stopping
                            } else {
                                Ended::PeerClosed
                            });
                        }
                        e if e == -libc::ENOBUFS => {}
                        e => return Err(ended_by(e, &s)),
                    }
                }
            }
        }
    }
}

/// Smallest send slot: a StatsReply (up to a few KiB in practice) goes out in a few sends
/// however short the responses are.
const MIN_SLOT_LEN: usize = 4096;

/// Writes what is owed from the front of `backlog` into `slot` and returns the staged
/// length: as many whole responses as fit; a response longer than the slot alone (header and
/// the slot's zeros, the rest owed in `out.zeros_left`); a StatsReply alone, once every
/// earlier response is sent (its window then holds their service times), its bytes past the
/// slot owed in `out.reply`. The staged responses' receive instants go to `out.serving`.
fn stage(
    slot: &mut [u8],
    backlog: &mut Backlog,
    out: &mut Sending,
    window: &mut StatsWindow,
    fd: BorrowedFd<'_>,
) -> Result<usize, Ended> {
    let mut used = 0;
    while let Some(&owed) = backlog.front() {
        let (seq, len, received) = match owed {
            Owed::Stats if used > 0 => break,
            Owed::Stats => {
                backlog.pop_front();
                out.reply = wire::stats_reply_frame(&window.report(fd))
                    .map_err(|e| Ended::Io(io::Error::other(e.to_string())))?;
                out.reply_at = 0;
                return Ok(next_chunk(slot, out).expect("a StatsReply has bytes").end);
            }
            Owed::Response { seq, len, received } => (seq, len, received),
        };
        if len > slot.len() {
            if used > 0 {
                break;
            }
            backlog.pop_front();
            zero_payload(slot);
            let head: &mut [u8; HEADER_LEN] =
                (&mut slot[..HEADER_LEN]).try_into().expect("a slot holds a header");
            Header::response(seq, len as u32).encode(head);
            out.zeros_left = len - slot.len();
            serving(out, received);
            return Ok(slot.len());
        }
        if used + len > slot.len() {
            break;
        }
        backlog.pop_front();
        let frame = &mut slot[used..used + len];
        frame[HEADER_LEN..].fill(0);
        crate::wire::encode_response(frame, seq);
        serving(out, received);
        used += len;
    }
    Ok(used)
}

/// One more response in the send being staged, its request received at `received`.
fn serving(out: &mut Sending, received: Instant) {
    match out.serving.last_mut() {
        Some((at, count)) if *at == received => *count += 1,
        _ => out.serving.push((received, 1)),
    }
}

/// The next part of what the send in flight still owes, written into `slot`: a long
/// response's zeros after the header (the slot already holds zeros there) or a StatsReply's
/// next bytes; `None` when nothing is owed.
fn next_chunk(slot: &mut [u8], out: &mut Sending) -> Option<std::ops::Range<usize>> {
    if out.zeros_left > 0 {
        let chunk = out.zeros_left.min(slot.len() - HEADER_LEN);
        out.zeros_left -= chunk;
        return Some(HEADER_LEN..HEADER_LEN + chunk);
    }
    let rest = &out.reply[out.reply_at..];
    if rest.is_empty() {
        return None;
    }
    let chunk = rest.len().min(slot.len());
    slot[..chunk].copy_from_slice(&rest[..chunk]);
    out.reply_at += chunk;
    if out.reply_at == out.reply.len() {
        out.reply.clear();
        out.reply_at = 0;
    }
    Some(0..chunk)
}

fn zero_payload(slot: &mut [u8]) {
    slot[HEADER_LEN..].fill(0);
}

/// A failed operation's errno as the loop's end: a peer that went away is a close.
fn ended_by(result: i32, s: &Serve<'_>) -> Ended {
    let e = io::Error::from_raw_os_error(-result);
    use io::ErrorKind as K;
    match e.kind() {
        K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe | K::NotConnected => {
            if (s.stopping)() { Ended::Stopping } else { Ended::PeerClosed }
        }
        _ => Ended::Io(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn responses(now: Instant, owed: &[(u64, usize)]) -> Backlog {
        owed.iter().map(|&(seq, len)| Owed::Response { seq, len, received: now }).collect()
    }

    fn stage_some(slot: &mut [u8], backlog: &mut Backlog, out: &mut Sending) -> usize {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut window = StatsWindow::start();
        stage(slot, backlog, out, &mut window, a.as_fd()).unwrap()
    }

    #[test]
    fn responses_are_batched_until_the_slot_is_full() {
        let now = Instant::now();
        let mut slot = vec![7u8; 200];
        let mut backlog = responses(now, &[(1, 64), (2, 64), (3, 64), (4, 64)]);
        let mut out = Sending::default();
        assert_eq!(stage_some(&mut slot, &mut backlog, &mut out), 192);
        assert_eq!(backlog.len(), 1);
        assert_eq!(out.serving, [(now, 3)], "one receive completed all three");
        let h = Header::decode(slot[64..88].try_into().unwrap()).unwrap();
        assert_eq!((h.seq, h.frame_len), (2, 64));
        assert!(slot[88..128].iter().all(|&b| b == 0), "payload zeroed");
    }

    #[test]
    fn a_long_response_goes_alone_and_owes_the_rest() {
        let now = Instant::now();
        let mut slot = vec![7u8; 100];
        let mut backlog = responses(now, &[(1, 64), (2, 1000)]);
        let mut out = Sending::default();
        assert_eq!(stage_some(&mut slot, &mut backlog, &mut out), 64);
        assert_eq!(stage_some(&mut slot, &mut backlog, &mut out), 100);
        assert_eq!(out.zeros_left, 900);
        let h = Header::decode(slot[..24].try_into().unwrap()).unwrap();
        assert_eq!((h.seq, h.frame_len), (2, 1000));
        assert!(backlog.is_empty());
        let mut sent = 100;
        while let Some(range) = next_chunk(&mut slot, &mut out) {
            assert!(slot[range.clone()].iter().all(|&b| b == 0), "zeros after the header");
            sent += range.len();
        }
        assert_eq!(sent, 1000);
    }

    #[test]
    fn a_stats_reply_waits_for_earlier_responses_and_goes_out_whole() {
        let now = Instant::now();
        let mut slot = vec![7u8; 64];
        let mut backlog = responses(now, &[(1, 24)]);
        backlog.push_back(Owed::Stats);
        backlog.extend(responses(now, &[(2, 24)]));
        let mut out = Sending::default();
        assert_eq!(stage_some(&mut slot, &mut backlog, &mut out), 24, "the reply waits");
        out.serving.clear();
        let staged = stage_some(&mut slot, &mut backlog, &mut out);
        let mut bytes = slot[..staged].to_vec();
        assert!(out.busy(), "a reply longer than the slot owes the rest");
        while let Some(range) = next_chunk(&mut slot, &mut out) {
            bytes.extend_from_slice(&slot[range]);
        }
        assert!(out.serving.is_empty(), "a StatsReply answers no request");
        let stats = wire::read_stats_reply(&mut &bytes[..], 0).unwrap();
        assert_eq!(stats.requests, 0);
        assert_eq!(backlog.len(), 1, "the next response stays owed");
    }
}
