//! The client's side of the server statistics (issue 16: the final JSON's `server`): asking
//! each connection's server for its window ([`crate::wire::stats`]) after the warm-up and at
//! the end of the run, and merging the replies into one [`ServerReport`].
//!
//! Any engine that keeps a connected stream can ask: `start_window` once the warm-up is
//! over (nothing outstanding), `collect` once the measured part is. Neither changes the
//! socket's blocking mode (the exchange uses `MSG_DONTWAIT` and `poll`), so the run's own
//! loops are unaffected. An engine that owns the socket's receives (io_uring) asks over its
//! own ring with the same frames and the same decisions (`end_budget`, `keep`). A server
//! that does not report stats costs the run nothing: it is asked only at the end, and its
//! answer (an Error frame from a server built before the stats frames) becomes one warning.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::run::ConnectionOutcome;
use crate::stats::{LatencyHistogram, LatencySummary};
use crate::sys;
use crate::wire::stats::SocketState;
use crate::wire::{self, FrameError, ServerStats};

/// How long a stats exchange may take; a stop (Ctrl-C) cuts it to the stop grace.
pub(crate) const STATS_TIMEOUT: Duration = Duration::from_secs(2);

/// What a connection's server said about its measured part.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Asked {
    /// Not asked: the engine or mode does not collect server stats.
    #[default]
    NotAsked,
    /// The server's window for the measured part.
    Reported(Box<ServerStats>),
    /// Asked, but no stats came: why.
    Unavailable(String),
}

/// The final JSON's `server`: what the server did for this run's connections in the measured
/// part, each connection's own report summed (CPU time, requests), merged (service time) or
/// listed (socket state).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerReport {
    /// Connections whose server reported.
    pub connections: usize,
    /// Requests those connections' servers answered in the measured part.
    pub requests: u64,
    /// The longest reported window, seconds (the server's clock).
    pub window_seconds: f64,
    /// CPU time of the server's connection threads, seconds (user + system).
    pub cpu_seconds: f64,
    /// User CPU time, seconds.
    pub cpu_user_seconds: f64,
    /// System CPU time, seconds.
    pub cpu_system_seconds: f64,
    /// Server CPU time per answered request, µs.
    pub cpu_us_per_request: Option<f64>,
    /// Server CPU time over the window: 1.0 is one CPU busy all the time.
    pub cpus_busy: Option<f64>,
    /// Voluntary context switches of the connection threads (waits for a request).
    pub voluntary_switches: u64,
    /// Involuntary context switches (preemptions).
    pub involuntary_switches: u64,
    /// Service time per request, µs, from the server's receive that completed the request to
    /// the end of the send that completed its response (histogram of 2 significant digits).
    pub service_us: Option<LatencySummary>,
    /// Each reporting connection's server socket at the end of the run.
    pub sockets: Vec<ServerSocket>,
}

/// One connection's server socket at the end of the run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerSocket {
    /// The connection's index in the run.
    pub connection: usize,
    /// Its `tcp_info` summary; `None` where the server could not read it.
    #[serde(flatten)]
    pub state: Option<SocketState>,
}

/// Whether `outcome`'s server reports stats (its Welcome says so): only then is its window
/// started after the warm-up.
pub(crate) fn reports_stats(outcome: &ConnectionOutcome) -> bool {
    outcome.welcome.stats_version.is_some()
}

/// Starts the server's window for the measured part on `stream` (after the warm-up, nothing
/// outstanding), if its Welcome says it reports stats; its reply (the warm-up) is dropped.
pub(crate) fn start_window(stream: &TcpStream, outcome: &ConnectionOutcome) -> io::Result<()> {
    if !reports_stats(outcome) {
        return Ok(());
    }
    exchange(stream, 0, STATS_TIMEOUT).map(drop).map_err(window_not_started)
}

/// The error of a window that could not be started (the run cannot go on without it).
pub(crate) fn window_not_started(e: FrameError) -> io::Error {
    io::Error::other(format!("starting the server's stats window: {e}"))
}

/// Asks the server for the measured part's stats on `stream` and keeps the answer in
/// `outcome`. `outstanding`: requests of the run still unanswered; after a stop (`stopping`,
/// Ctrl-C) their responses may still come first and the wait is cut to the stop grace,
/// otherwise the connection gave up on its server and it is not asked.
pub(crate) fn collect(
    stream: &TcpStream,
    outcome: &mut ConnectionOutcome,
    outstanding: u64,
    stopping: bool,
) {
    if let Some(budget) = end_budget(outcome, outstanding, stopping) {
        keep(outcome, exchange(stream, outstanding, budget));
    }
}

/// How long the end-of-run question may wait, or `None` (the reason kept in `outcome`) when
/// the connection is not to ask: see [`collect`].
pub(crate) fn end_budget(
    outcome: &mut ConnectionOutcome,
    outstanding: u64,
    stopping: bool,
) -> Option<Duration> {
    if outstanding > 0 && !stopping {
        // It gave up on its server: asking again would only wait as long once more.
        outcome.server_stats = Asked::Unavailable(
            "the server was not asked for stats: a connection gave up waiting for it".into(),
        );
        return None;
    }
    Some(if stopping { crate::connection::STOP_GRACE } else { STATS_TIMEOUT })
}

/// Keeps the server's answer to the end-of-run question in `outcome`: its stats, or why
/// there are none.
pub(crate) fn keep(outcome: &mut ConnectionOutcome, answer: Result<ServerStats, FrameError>) {
    outcome.server_stats = match answer {
        Ok(stats) => Asked::Reported(Box::new(stats)),
        Err(e) => Asked::Unavailable(match outcome.welcome.stats_version {
            None => wire::stats_unsupported(&outcome.welcome.version, &e.to_string()),
            Some(_) => format!("the server did not report stats: {e}"),
        }),
    };
}

/// One StatsRequest and its reply within `budget`.
fn exchange(
    stream: &TcpStream,
    outstanding: u64,
    budget: Duration,
) -> Result<ServerStats, FrameError> {
    let mut io = Deadline { stream, deadline: Instant::now() + budget };
    wire::write_stats_request(&mut io)?;
    wire::read_stats_reply(&mut io, outstanding)
}

/// Reads and writes `stream` without blocking in the call, waiting in `poll` until
/// `deadline` (then `TimedOut`).
struct Deadline<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
}

impl Deadline<'_> {
    fn wait(&self, writable: bool) -> io::Result<()> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "no answer in time"));
        }
        let fd = self.stream.as_fd();
        if writable { sys::wait_writable(fd, left) } else { sys::wait_readable(fd, left) }.map(drop)
    }
}

impl Read for Deadline<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match sys::recv_nowait(self.stream.as_fd(), buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.wait(false)?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => return other,
            }
        }
    }
}

impl Write for Deadline<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        loop {
            match sys::send_nowait(self.stream.as_fd(), buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.wait(true)?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                other => return other,
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Merges what the connections' servers reported; `None` when none did. Each distinct reason
/// a server did not report is returned once, with how many connections it concerns.
pub fn summarise(outcomes: &[ConnectionOutcome]) -> (Option<ServerReport>, Vec<String>) {
    let mut reasons: Vec<(String, usize)> = Vec::new();
    let mut reported: Vec<(usize, &ServerStats)> = Vec::new();
    for o in outcomes {
        match &o.server_stats {
            Asked::NotAsked => {}
            Asked::Reported(s) => reported.push((o.index, s)),
            Asked::Unavailable(why) => match reasons.iter_mut().find(|(r, _)| r == why) {
                Some((_, n)) => *n += 1,
                None => reasons.push((why.clone(), 1)),
            },
        }
    }
    let warnings = reasons
        .into_iter()
        .map(|(why, n)| if n == 1 { why } else { format!("{why} ({n} connections)") })
        .collect();
    if reported.is_empty() {
        return (None, warnings);
    }
    let mut service = LatencyHistogram::new();
    let mut report = ServerReport {
        connections: reported.len(),
        requests: 0,
        window_seconds: 0.0,
        cpu_seconds: 0.0,
        cpu_user_seconds: 0.0,
        cpu_system_seconds: 0.0,
        cpu_us_per_request: None,
        cpus_busy: None,
        voluntary_switches: 0,
        involuntary_switches: 0,
        service_us: None,
        sockets: Vec::with_capacity(reported.len()),
    };
    let (mut user_us, mut system_us) = (0u64, 0u64);
    for (connection, s) in &reported {
        report.requests = report.requests.saturating_add(s.requests);
        report.window_seconds = report.window_seconds.max(s.window_seconds);
        user_us = user_us.saturating_add(s.cpu_user_us);
        system_us = system_us.saturating_add(s.cpu_system_us);
        report.voluntary_switches = report.voluntary_switches.saturating_add(s.voluntary_switches);
        report.involuntary_switches =
            report.involuntary_switches.saturating_add(s.involuntary_switches);
        for &(value, count) in &s.service_ns {
            service.record_n(value, count);
        }
        report.sockets.push(ServerSocket { connection: *connection, state: s.socket.clone() });
    }
    report.sockets.sort_by_key(|s| s.connection);
    report.cpu_user_seconds = user_us as f64 / 1e6;
    report.cpu_system_seconds = system_us as f64 / 1e6;
    report.cpu_seconds = report.cpu_user_seconds + report.cpu_system_seconds;
    report.cpu_us_per_request =
        (report.requests > 0).then(|| (user_us + system_us) as f64 / report.requests as f64);
    report.cpus_busy =
        (report.window_seconds > 0.0).then(|| report.cpu_seconds / report.window_seconds);
    // The servers' histograms keep fewer digits than the merged one: say theirs.
    report.service_us = service.summary().map(|summary| LatencySummary {
        significant_digits: crate::wire::stats::SERVICE_SIGNIFICANT_DIGITS,
        ..summary
    });
    (Some(report), warnings)
}

/// The short line the text output prints for `r`.
pub fn render(r: &ServerReport) -> String {
    let num = |v: Option<f64>, digits: usize| v.map_or("-".into(), |v| format!("{v:.digits$}"));
    let service = r.service_us.as_ref().map_or("service time -".to_string(), |s| {
        format!("service p50 {:.1} µs, p99 {:.1} µs", s.p50, s.p99)
    });
    let states: Vec<&SocketState> = r.sockets.iter().filter_map(|s| s.state.as_ref()).collect();
    let socket = match states.as_slice() {
        [] => String::new(),
        [s] => format!(
            "; socket cwnd {}, rtt {} µs, retrans {}",
            s.cwnd_segs, s.rtt_us, s.total_retrans_segs
        ),
        all => {
            let cwnd_min = all.iter().map(|s| s.cwnd_segs).min().unwrap_or(0);
            let cwnd_max = all.iter().map(|s| s.cwnd_segs).max().unwrap_or(0);
            let rtt = all.iter().map(|s| s.rtt_us).max().unwrap_or(0);
            let retrans: u64 = all.iter().map(|s| u64::from(s.total_retrans_segs)).sum();
            format!(
                "; {} sockets cwnd {cwnd_min}-{cwnd_max}, rtt up to {rtt} µs, retrans {retrans}",
                all.len()
            )
        }
    };
    format!(
        "server: {} CPU s ({} µs/request, {} CPUs busy), {service}{socket}",
        num(Some(r.cpu_seconds), 3),
        num(r.cpu_us_per_request, 2),
        num(r.cpus_busy, 2),
    )
}
