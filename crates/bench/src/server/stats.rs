//! One connection's statistics window on the server: its thread's CPU time, each request's
//! service time, and its socket's state when the client asks (a StatsRequest, see
//! [`crate::wire::stats`]).
//!
//! A connection served by a thread it shares with others (the io_uring engine's ring threads)
//! reports the thread's CPU time and context switches in proportion to the requests it was
//! answered among all the thread answered in the same time ([`StatsWindow::start_shared`]),
//! so the client's sum over connections stays the threads' own total, not a multiple of it.
//!
//! Recording costs the request loop one clock read per receive and one per send. Memory is
//! fixed per connection (a histogram of [`SERVICE_SIGNIFICANT_DIGITS`] digits over
//! 1 ns..=[`MAX_SERVICE_NS`], ~32 KiB), and so is the reply: whatever a client sends, it can
//! only make its own connection's window report, and each StatsRequest starts a new window.

use std::os::fd::BorrowedFd;
use std::time::Instant;

use hdrhistogram::Histogram;
use tcptail_sock::apply::congestion_control;

use crate::sys::{self, ThreadUsage};
use crate::wire::stats::{
    MAX_SERVICE_NS, SERVICE_SIGNIFICANT_DIGITS, STATS_VERSION, ServerStats, SocketState,
};

/// What one connection did since its window started.
pub(crate) struct StatsWindow {
    started: Instant,
    usage: ThreadUsage,
    service: Histogram<u64>,
    requests: u64,
    /// A shared thread: how many requests it had answered when the window started.
    shared_since: Option<u64>,
}

impl StatsWindow {
    /// A window starting now, on the calling thread (the connection's).
    pub(crate) fn start() -> StatsWindow {
        Self::starting(None)
    }

    /// A window starting now on a thread that serves other connections too, which had
    /// answered `answered_by_thread` requests so far (the count [`StatsWindow::report_shared`]
    /// is given later).
    pub(crate) fn start_shared(answered_by_thread: u64) -> StatsWindow {
        Self::starting(Some(answered_by_thread))
    }

    fn starting(shared_since: Option<u64>) -> StatsWindow {
        let service = Histogram::new_with_bounds(1, MAX_SERVICE_NS, SERVICE_SIGNIFICANT_DIGITS)
            .expect("fixed, valid histogram bounds");
        StatsWindow {
            started: Instant::now(),
            usage: sys::thread_usage().unwrap_or_default(),
            service,
            requests: 0,
            shared_since,
        }
    }

    /// `count` requests whose responses finished sending now, completed by the receive
    /// that returned at `received`.
    pub(crate) fn answered(&mut self, received: Instant, count: u64) {
        self.answered_at(received, Instant::now(), count);
    }

    /// `count` requests whose responses finished sending at `sent` (a clock the caller
    /// already read), completed by the receive that returned at `received`.
    pub(crate) fn answered_at(&mut self, received: Instant, sent: Instant, count: u64) {
        if count > 0 {
            self.record(sent.saturating_duration_since(received).as_nanos(), count);
        }
    }

    /// `count` requests served in `nanos` each.
    fn record(&mut self, nanos: u128, count: u64) {
        let nanos = nanos.clamp(1, u128::from(MAX_SERVICE_NS)) as u64;
        self.service.saturating_record_n(nanos, count);
        self.requests += count;
    }

    /// The window's statistics with `fd`'s socket state now; a new window starts.
    pub(crate) fn report(&mut self, fd: BorrowedFd<'_>) -> ServerStats {
        self.report_with(fd, None)
    }

    /// As [`StatsWindow::report`] on a shared thread that has answered `answered_by_thread`
    /// requests so far: the thread's usage since the window started, times this window's
    /// share of the requests the thread answered in it (none answered: no share).
    pub(crate) fn report_shared(
        &mut self,
        fd: BorrowedFd<'_>,
        answered_by_thread: u64,
    ) -> ServerStats {
        self.report_with(fd, Some(answered_by_thread))
    }

    fn report_with(&mut self, fd: BorrowedFd<'_>, answered_by_thread: Option<u64>) -> ServerStats {
        let now = Instant::now();
        let usage = sys::thread_usage().unwrap_or(self.usage);
        let mut used = usage.since(&self.usage);
        if let (Some(since), Some(total)) = (self.shared_since, answered_by_thread) {
            let all = total.saturating_sub(since);
            used = share_of(used, self.requests, all);
            self.shared_since = Some(total);
        }
        let mut service_ns: Vec<(u64, u64)> = self
            .service
            .iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_since_last_iteration()))
            .collect();
        // Only the top bucket can reach past the range (values are clamped to it).
        if let Some(last) = service_ns.last_mut() {
            last.0 = last.0.min(MAX_SERVICE_NS);
        }
        let socket = tcptail_sock::tcp_info::tcp_info(fd)
            .ok()
            .map(|info| SocketState::from_tcp_info(&info, congestion_control(fd).ok()));
        let stats = ServerStats {
            version: STATS_VERSION,
            window_seconds: now.duration_since(self.started).as_secs_f64(),
            requests: self.requests,
            cpu_user_us: used.user_us,
            cpu_system_us: used.system_us,
            voluntary_switches: used.voluntary_switches,
            involuntary_switches: used.involuntary_switches,
            service_ns,
            socket,
        };
        self.started = now;
        self.usage = usage;
        self.service.reset();
        self.requests = 0;
        stats
    }
}

/// `part` of `all` of `used` (integer arithmetic, rounded down; nothing when `all` is 0).
fn share_of(used: ThreadUsage, part: u64, all: u64) -> ThreadUsage {
    let scale = |v: u64| {
        if all == 0 {
            0
        } else {
            (u128::from(v) * u128::from(part.min(all)) / u128::from(all)) as u64
        }
    };
    ThreadUsage {
        user_us: scale(used.user_us),
        system_us: scale(used.system_us),
        voluntary_switches: scale(used.voluntary_switches),
        involuntary_switches: scale(used.involuntary_switches),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::stats::MAX_SERVICE_BUCKETS;
    use std::os::fd::AsFd;

    #[test]
    fn a_window_reports_what_it_recorded_and_starts_again() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut w = StatsWindow::start();
        w.record(5_000, 3);
        w.record(2_000_000, 1);
        w.answered(Instant::now(), 0);
        let s = w.report(a.as_fd());
        s.validate().unwrap();
        assert_eq!(s.requests, 4);
        assert_eq!(s.service_ns.len(), 2);
        assert_eq!(s.service_ns[0].1, 3);
        // 2 significant digits: within 1 % above the value recorded.
        assert!((5_000..5_050).contains(&s.service_ns[0].0), "{:?}", s.service_ns);
        assert!(s.socket.is_none(), "a Unix socket has no tcp_info");
        let again = w.report(a.as_fd());
        assert_eq!((again.requests, again.service_ns.len()), (0, 0));
    }

    #[test]
    fn a_shared_thread_charges_each_window_its_share_of_the_requests() {
        let used = ThreadUsage {
            user_us: 1000,
            system_us: 3000,
            voluntary_switches: 40,
            involuntary_switches: 4,
        };
        let quarter = share_of(used, 25, 100);
        assert_eq!((quarter.user_us, quarter.system_us), (250, 750));
        assert_eq!((quarter.voluntary_switches, quarter.involuntary_switches), (10, 1));
        assert_eq!(share_of(used, 0, 0), ThreadUsage::default(), "nothing answered: no share");
        assert_eq!(share_of(used, 5, 3), used, "never more than the thread's own");
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut w = StatsWindow::start_shared(1000);
        w.record(5_000, 2);
        let s = w.report_shared(a.as_fd(), 1000);
        assert_eq!((s.requests, s.cpu_user_us, s.cpu_system_us), (2, 0, 0));
        assert_eq!(w.shared_since, Some(1000), "the next window counts from here");
    }

    #[test]
    fn service_time_runs_from_the_receive_to_the_given_send_end() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut w = StatsWindow::start();
        let received = Instant::now();
        w.answered_at(received, received + std::time::Duration::from_micros(40), 2);
        // A send end read before the receive (clocks read out of order) counts as the
        // shortest time, not as a wrap-around.
        w.answered_at(received + std::time::Duration::from_micros(1), received, 1);
        w.answered_at(received, received, 0);
        let s = w.report(a.as_fd());
        assert_eq!(s.requests, 3);
        assert_eq!(s.service_ns.len(), 2, "{:?}", s.service_ns);
        assert_eq!(s.service_ns[0], (1, 1), "{:?}", s.service_ns);
        assert!((40_000..40_400).contains(&s.service_ns[1].0), "{:?}", s.service_ns);
        assert_eq!(s.service_ns[1].1, 2);
    }

    #[test]
    fn the_densest_histogram_fits_the_reply() {
        let mut w = StatsWindow::start();
        let mut v = 1u64;
        // A value in every bucket the histogram has.
        while v <= MAX_SERVICE_NS {
            w.service.saturating_record(v);
            w.requests += 1;
            v = w.service.next_non_equivalent(v);
        }
        w.service.saturating_record(u64::MAX);
        w.requests += 1;
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut s = w.report(a.as_fd());
        assert!(s.service_ns.len() <= MAX_SERVICE_BUCKETS, "{}", s.service_ns.len());
        s.validate().unwrap();
        s.socket = Some(SocketState {
            congestion: Some("x".repeat(64)),
            ca_state: "y".repeat(64),
            cwnd_segs: u32::MAX,
            rtt_us: u32::MAX,
            rttvar_us: u32::MAX,
            min_rtt_us: Some(u32::MAX),
            total_retrans_segs: u32::MAX,
            bytes_sent: Some(u64::MAX),
            bytes_retrans: Some(u64::MAX),
            bytes_acked: Some(u64::MAX),
            bytes_received: Some(u64::MAX),
            delivery_rate_bytes_per_sec: Some(u64::MAX),
            pacing_rate_bytes_per_sec: Some(u64::MAX),
        });
        s.requests = u64::MAX;
        s.cpu_user_us = u64::MAX;
        s.cpu_system_us = u64::MAX;
        s.voluntary_switches = u64::MAX;
        s.involuntary_switches = u64::MAX;
        s.window_seconds = f64::MAX;
        for b in &mut s.service_ns {
            b.1 = u64::MAX;
        }
        let frame = crate::wire::stats_reply_frame(&s).expect("the densest reply fits the limit");
        assert!(frame.len() <= crate::wire::HEADER_LEN + crate::wire::MAX_STATS_PAYLOAD);
    }
}
