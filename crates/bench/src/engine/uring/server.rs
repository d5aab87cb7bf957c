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

use std::collections::VecDeque;
use std::io;
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use super::{Op, ring_options};
use crate::engine::Splitter;
use crate::server::RESPONSE_BUF_LEN;
use crate::sys::uring::{Completion, Ring};
use crate::watchdog::Watch;
use crate::wire::{FrameKind, FrameParser, HEADER_LEN, Header, WireError};

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

/// Responses still to be written, front first: (sequence, length).
type Backlog = VecDeque<(u64, usize)>;

/// Serves requests until the peer closes or a limit ends the connection; counts answered
/// requests in `requests`.
pub(crate) fn serve(mut s: Serve<'_>, requests: &mut u64) -> Result<(), Ended> {
    let slot_len = (s.reply_len as usize).clamp(HEADER_LEN, RESPONSE_BUF_LEN);
    let mut ring = Ring::new(ring_options(1, slot_len, s.sqpoll)).map_err(Ended::Io)?;
    let fd = s.stream.as_fd();
    let mut splitter = Splitter::new(
        FrameParser::new(FrameKind::Request, s.request_len).with_max_reply_len(s.reply_len),
    );
    let mut backlog = Backlog::new();
    // The slot's bytes being sent, and what a long response still owes after them.
    let mut sending = 0..0;
    let mut big_left = 0usize;
    let mut sending_since: Option<Instant> = None;
    let mut armed = false;
    let mut completions: Vec<Completion> = Vec::with_capacity(16);
    let mut last_request = Instant::now();
    let mut turns = 0u32;
    s.watch.waiting();
    loop {
        if !armed {
            ring.arm_recv(fd, Op::Recv(0).token()).map_err(Ended::Io)?;
            armed = true;
        }
        // A send that owes nothing after it: its completion (normally at once) and the next
        // request are waited for together, in one system call.
        let mut owes_nothing_after = false;
        if sending_since.is_none() && big_left == 0 && !backlog.is_empty() {
            let slot = ring.send_slot(0).expect("no send is in flight");
            let staged;
            (staged, big_left) = stage(slot, &mut backlog);
            sending = 0..staged;
            ring.send(fd, 0, sending.clone(), Op::Send(0).token(), false).map_err(Ended::Io)?;
            sending_since = Some(Instant::now());
            owes_nothing_after = big_left == 0 && backlog.is_empty();
        }
        // Wait: spinning polls the queue; a send that did not complete at once is waited
        // for at most the write timeout; otherwise the wait has no timer.
        if s.spin {
            turns = turns.wrapping_add(1);
            ring.submit().map_err(Ended::Io)?;
            if turns.is_multiple_of(1024) && last_request.elapsed() >= s.spin_cap {
                ring.submit_and_wait(None).map_err(Ended::Io)?;
            }
        } else if let Some(since) = sending_since {
            let left = s.write_timeout.saturating_sub(since.elapsed());
            let want = if owes_nothing_after { 2 } else { 1 };
            ring.submit_and_wait_for(want, Some(left.max(Duration::from_millis(1))))
                .map_err(Ended::Io)?;
        } else {
            ring.submit_and_wait(None).map_err(Ended::Io)?;
        }
        ring.completions(&mut completions);
        if completions.is_empty() {
            if let Some(since) = sending_since
                && since.elapsed() >= s.write_timeout
            {
                return Err(if (s.stopping)() { Ended::Stopping } else { Ended::WriteStalled });
            }
            if s.spin && turns.is_multiple_of(1024) && (s.stopping)() {
                return Err(Ended::Stopping);
            }
            continue;
        }
        for done in completions.drain(..) {
            match Op::from_token(done.token) {
                Op::Send(_) => {
                    ring.sent(0);
                    if done.result < 0 {
                        return Err(ended_by(done.result, &s));
                    }
                    sending.start += done.result as usize;
                    if sending.start < sending.end || big_left > 0 {
                        if sending.is_empty() {
                            // The rest of a long response: the slot's zeros after its header.
                            let chunk = big_left.min(slot_len - HEADER_LEN);
                            big_left -= chunk;
                            sending = HEADER_LEN..HEADER_LEN + chunk;
                        }
                        // Else a short send: the rest of the range again.
                        ring.send(fd, 0, sending.clone(), Op::Send(0).token(), false)
                            .map_err(Ended::Io)?;
                        sending_since = Some(Instant::now());
                    } else {
                        sending_since = None;
                    }
                }
                Op::Recv(_) => {
                    armed &= done.more;
                    match done.result {
                        n if n > 0 => {
                            let bid = done.buffer.expect("a receive with bytes names its buffer");
                            let mut got = 0u64;
                            let r = splitter.feed(ring.received(bid, n as usize), |h: Header| {
                                backlog.push_back((h.seq, h.reply_len as usize));
                                got += 1;
                                Ok::<(), Ended>(())
                            });
                            ring.recycle(bid);
                            r?;
                            if got > 0 {
                                *requests += got;
                                last_request = Instant::now();
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

/// Writes as many whole responses from the front of `backlog` into `slot` as fit; a response
/// longer than the slot is started alone (header and the slot's zeros) and the bytes still
/// owed after the slot are returned with the staged length.
fn stage(slot: &mut [u8], backlog: &mut Backlog) -> (usize, usize) {
    let mut used = 0;
    while let Some(&(seq, len)) = backlog.front() {
        if len > slot.len() {
            if used > 0 {
                break;
            }
            backlog.pop_front();
            zero_payload(slot);
            let head: &mut [u8; HEADER_LEN] =
                (&mut slot[..HEADER_LEN]).try_into().expect("a slot holds a header");
            Header::response(seq, len as u32).encode(head);
            return (slot.len(), len - slot.len());
        }
        if used + len > slot.len() {
            break;
        }
        backlog.pop_front();
        let frame = &mut slot[used..used + len];
        frame[HEADER_LEN..].fill(0);
        crate::wire::encode_response(frame, seq);
        used += len;
    }
    (used, 0)
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

    #[test]
    fn responses_are_batched_until_the_slot_is_full() {
        let mut slot = vec![7u8; 200];
        let mut backlog: Backlog = [(1, 64), (2, 64), (3, 64), (4, 64)].into_iter().collect();
        assert_eq!(stage(&mut slot, &mut backlog), (192, 0));
        assert_eq!(backlog.len(), 1);
        let h = Header::decode(slot[64..88].try_into().unwrap()).unwrap();
        assert_eq!((h.seq, h.frame_len), (2, 64));
        assert!(slot[88..128].iter().all(|&b| b == 0), "payload zeroed");
    }

    #[test]
    fn a_long_response_goes_alone_and_owes_the_rest() {
        let mut slot = vec![7u8; 100];
        let mut backlog: Backlog = [(1, 64), (2, 1000)].into_iter().collect();
        assert_eq!(stage(&mut slot, &mut backlog), (64, 0));
        assert_eq!(stage(&mut slot, &mut backlog), (100, 900));
        let h = Header::decode(slot[..24].try_into().unwrap()).unwrap();
        assert_eq!((h.seq, h.frame_len), (2, 1000));
        assert!(backlog.is_empty());
    }
}
