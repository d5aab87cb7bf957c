//! The open-loop measuring loop: requests leave on a fixed schedule whatever the responses do,
//! and each one's latency runs from its *intended* send time.
//!
//! One thread per connection multiplexes three things on a non-blocking socket: taking every
//! response that has arrived (timestamped as soon as it is read), writing the request in
//! progress (a full socket never blocks the reading side, so client and server cannot
//! deadlock on each other's full buffers), and starting the next request when it is due.
//! Between events it sleeps until `spin_window` before the next send and then spins (timer
//! wake-ups here run tens to hundreds of microseconds late).
//!
//! With attribution on, every request gets its "before" kernel snapshot: early in the spin
//! window when the pacer is on time, just before the send when it is not (the snapshot's
//! cost then shows in the send lateness, which is reported). Requests that never get an
//! answer are handled as the parent module describes.

use std::collections::VecDeque;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use super::{Connection, Limit, LoopError, Outstanding, POLL_SLICE, STOP_GRACE, check_seq};
use crate::attribution::KernelSnapshot;
use crate::config::{BenchConfig, Load};
use crate::pacer::Schedule;
use crate::run::RunControl;
use crate::sys;
use crate::wire;

/// Why the loop ended.
enum Ending {
    /// Every request of the run was answered.
    Complete,
    /// A stop was asked for; whatever was still outstanding after [`STOP_GRACE`] is not.
    Stopped(Instant),
    /// The oldest outstanding request waited the whole response timeout.
    TimedOut,
}

impl Connection {
    pub(super) fn open_loop(
        &mut self,
        config: &BenchConfig,
        control: &RunControl,
        start: Instant,
        limit: Limit,
        rate: f64,
        index: usize,
    ) -> Result<(), LoopError> {
        let Load::Open { spacing, .. } = config.load else { unreachable!("open loop config") };
        let n = config.connections as f64;
        let per_connection = tcptail_units::MessageRate::per_second(rate / n)
            .ok_or_else(|| LoopError::Protocol(format!("invalid rate {rate}")))?;
        let stagger = Duration::from_secs_f64(index as f64 / rate);
        let mut schedule =
            Schedule::new(per_connection, spacing, stagger, config.seed.wrapping_add(index as u64));
        let mut next_due = start + schedule.next_offset();
        let mut outstanding: VecDeque<Outstanding> = VecDeque::new();
        let mut seq = 0u64;
        // Bytes of the newest request already written, while it is only partly written.
        let mut writing: Option<usize> = None;
        let mut stopped_at: Option<Instant> = None;
        let mut pending_snapshot: Option<KernelSnapshot> = None;
        let ending = loop {
            let now = Instant::now();
            if stopped_at.is_none() && control.stopped() {
                stopped_at = Some(now);
            }
            let sending = stopped_at.is_none() && limit.includes(seq, next_due);
            if !sending && outstanding.is_empty() {
                break match stopped_at {
                    Some(at) => Ending::Stopped(at),
                    None => Ending::Complete,
                };
            }
            let timeout_at = outstanding.front().map(|o| o.sent + config.response_timeout);
            let grace_at = stopped_at.map(|at| at + STOP_GRACE);
            if let Some(at) = grace_at
                && now >= at
            {
                break Ending::Stopped(stopped_at.expect("grace implies a stop"));
            }
            if timeout_at.is_some_and(|at| now >= at) {
                break Ending::TimedOut;
            }
            // Answer side first: take every response that is already here.
            if let Some(header) = self.reader.next(self.stream.as_fd(), self.policy)? {
                let done = Instant::now();
                let Some(req) = outstanding.pop_front() else {
                    return Err(LoopError::Protocol(format!(
                        "response with sequence {} to no outstanding request",
                        header.seq
                    )));
                };
                check_seq(&header, req.seq)?;
                self.record_answer(config, control, start, index, req, done);
                continue;
            }
            if let Some(written) = writing {
                let written = self.write_some(written)?;
                writing = (written < self.request.len()).then_some(written);
                if writing.is_some() {
                    // Full socket: wait for room or for a response, whichever comes first.
                    let wake = [timeout_at, grace_at].into_iter().flatten().min();
                    let slice = wake.map_or(POLL_SLICE, |w| w.saturating_duration_since(now));
                    if !self.spin {
                        sys::wait_readable_or_writable(self.stream.as_fd(), slice.min(POLL_SLICE))?;
                    }
                }
                continue;
            }
            if sending && now >= next_due {
                let before = match pending_snapshot.take() {
                    Some(snap) => Some(snap),
                    // Late for the spin window (timer woke late, or the sender is catching
                    // up): the snapshot is taken now, and its cost is part of the lateness.
                    None if config.attribute => self.snapshot(),
                    None => None,
                };
                let sent = Instant::now();
                wire::encode_request(&mut self.request, seq, config.reply_len);
                let written = self.write_some(0)?;
                writing = (written < self.request.len()).then_some(written);
                self.m.send_lateness.record((sent - next_due).as_nanos() as u64);
                self.m.first_send.get_or_insert(sent);
                self.m.last_send = Some(sent);
                self.m.sent += 1;
                outstanding.push_back(Outstanding { seq, intended: next_due, sent, before });
                seq += 1;
                next_due = start + schedule.next_offset();
                if seq.is_multiple_of(4096) {
                    self.note_cpu();
                }
                continue;
            }
            if sending && now + config.spin_window >= next_due {
                // Inside the spin window: take the attribution snapshot once, early, then keep
                // polling the socket (responses are timestamped as they come) until the send.
                if config.attribute && pending_snapshot.is_none() {
                    pending_snapshot = self.snapshot();
                }
                std::hint::spin_loop();
                continue;
            }
            // Nothing to do yet: sleep on the socket until a response, the spin window, or a
            // deadline.
            let wake = [
                sending.then(|| next_due.checked_sub(config.spin_window).unwrap_or(next_due)),
                timeout_at,
                grace_at,
                Some(now + POLL_SLICE),
            ]
            .into_iter()
            .flatten()
            .min()
            .expect("one wake-up time is always there");
            let sleep = wake.saturating_duration_since(now);
            if self.spin {
                std::hint::spin_loop();
            } else if !sleep.is_zero() {
                sys::wait_readable(self.stream.as_fd(), sleep)?;
            }
        };
        let gave_up = Instant::now();
        // Requests due before the end (or the stop) that never left: charged from their
        // intended time too, or a sender stuck on a full socket would hide the stall.
        let cutoff = match ending {
            Ending::Complete => None,
            Ending::Stopped(at) => Some(at),
            Ending::TimedOut => Some(gave_up),
        };
        let unsent_from = seq;
        while let Some(cutoff) = cutoff
            && limit.includes(seq, next_due)
            && next_due <= cutoff
        {
            self.record_unanswered(config, start, index, (seq, next_due, None), gave_up);
            seq += 1;
            next_due = start + schedule.next_offset();
        }
        let waiting = outstanding.len() as u64;
        for req in outstanding {
            self.record_unanswered(
                config,
                start,
                index,
                (req.seq, req.intended, Some(req.sent)),
                gave_up,
            );
        }
        let unsent = seq - unsent_from;
        match ending {
            Ending::TimedOut => self.m.warnings.push(format!(
                "connection {index}: no response within {:?}; gave up with {waiting} request(s) \
                 sent and unanswered and {unsent} due but never sent (the socket stayed full)",
                config.response_timeout
            )),
            Ending::Stopped(_) if waiting + unsent > 0 => self.m.warnings.push(format!(
                "connection {index}: stopped with {waiting} request(s) still unanswered after \
                 {STOP_GRACE:?} and {unsent} due but not sent"
            )),
            _ => {}
        }
        Ok(())
    }

    /// Records an answered open-loop request: latency from its intended time, service time
    /// from its actual send, and its attribution sample.
    fn record_answer(
        &mut self,
        config: &BenchConfig,
        control: &RunControl,
        start: Instant,
        index: usize,
        req: Outstanding,
        done: Instant,
    ) {
        let after = if req.before.is_some() { self.snapshot() } else { None };
        self.m.answered(config, control, start, index, req, done, true, after);
    }
}
