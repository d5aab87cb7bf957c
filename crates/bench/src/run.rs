//! What one benchmark run is made of, below the client that starts it ([`crate::client`]) and
//! the connections that do the work ([`crate::connection`]): the [`RunControl`] another
//! thread stops and watches it with, the [`RawRun`] it measured (merged with [`Combine`]),
//! each connection's [`ConnectionOutcome`], and the [`BenchError`] it fails with.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tcptail_sock::ApplyReport;

use crate::attribution::AttributedSample;
use crate::config::ConfigError;
use crate::interval::{IntervalRecorder, IntervalSlot};
use crate::report::SampleRecord;
use crate::stats::LatencyHistogram;
use crate::wire::Welcome;

/// A run that failed: the step and the cause.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Connecting or handshaking failed.
    #[error("connection {connection} to {server}: {step}: {source}")]
    Connect {
        /// Connection index.
        connection: usize,
        /// Server address.
        server: SocketAddr,
        /// What was being done.
        step: &'static str,
        /// The cause.
        source: std::io::Error,
    },
    /// The server broke the protocol or the connection failed mid-run.
    #[error("connection {connection}: {message}")]
    Protocol {
        /// Connection index.
        connection: usize,
        /// What went wrong.
        message: String,
    },
}

/// Shared between a run and whoever watches it: a stop flag, a progress counter and, when
/// asked for, the interval histograms.
#[derive(Debug, Default)]
pub struct RunControl {
    stop: AtomicBool,
    completed: AtomicU64,
    intervals: Option<IntervalRecorder>,
}

impl RunControl {
    /// A fresh control.
    pub fn new() -> Arc<RunControl> {
        Arc::new(RunControl::default())
    }
    /// A fresh control whose runs also record interval histograms ([`RunControl::intervals`]).
    pub fn with_intervals() -> Arc<RunControl> {
        Arc::new(RunControl { intervals: Some(IntervalRecorder::new()), ..RunControl::default() })
    }
    /// The interval histograms, if this control records them.
    pub fn intervals(&self) -> Option<&IntervalRecorder> {
        self.intervals.as_ref()
    }
    /// The measured part starts now: an interval that has recorded nothing yet starts here,
    /// not at the warm-up. Returns the moment.
    pub(crate) fn measuring_starts(&self) -> Instant {
        let now = Instant::now();
        if let Some(r) = &self.intervals {
            r.restart_if_empty(now);
        }
        now
    }
    pub(crate) fn interval_slot(&self) -> Option<IntervalSlot> {
        self.intervals.as_ref().map(IntervalRecorder::slot)
    }
    /// Asks the run to stop; it returns what it measured so far.
    pub fn stop(&self) {
        self.stop.store(true, Ordering::Relaxed);
    }
    /// Whether a stop was asked for.
    pub fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
    /// Measured requests completed so far (all connections).
    pub fn completed(&self) -> u64 {
        self.completed.load(Ordering::Relaxed)
    }
    pub(crate) fn add_completed(&self, n: u64) {
        self.completed.fetch_add(n, Ordering::Relaxed);
    }
}

/// Everything a run measured, before it is summarised; matrix runs merge these.
#[derive(Debug, Default)]
pub struct RawRun {
    /// Latency (closed loop: send to response; open loop: intended send to response).
    pub latency: LatencyHistogram,
    /// Open loop: actual send to response.
    pub service: LatencyHistogram,
    /// Open loop: how late each request was sent against its schedule.
    pub send_lateness: LatencyHistogram,
    /// Connect-per-request (`--mode crr`): each transaction's connect time, from `connect`
    /// to the socket being writable.
    pub connect: LatencyHistogram,
    /// Requests sent and answered in the measured part.
    pub requests: u64,
    /// Requests sent in the measured part.
    pub sent: u64,
    /// Requests of the measured part that got no response: sent and still waited for when
    /// their connection gave up or was stopped, or (open loop) due but never sent because the
    /// socket stayed full. Each is in `latency` at the time it had waited: a lower bound.
    pub unanswered: u64,
    /// Wall time of the measured part.
    pub elapsed: Duration,
    /// Achieved send rate (open loop), per second.
    pub achieved_rate: Option<f64>,
    /// `--tcp-info-interval`: every connection's kernel state over the run.
    pub tcp_info: Vec<crate::tcp_sampler::TcpInfoSample>,
    /// Attribution inputs.
    pub attributed: Vec<AttributedSample>,
    /// Median cost of one kernel snapshot, ns, per connection that took snapshots.
    pub snapshot_costs_ns: Vec<f64>,
    /// Every sample, when asked for.
    pub samples: Vec<SampleRecord>,
    /// Per-connection handshake outcomes (client report, server welcome, CPUs seen).
    pub connections: Vec<ConnectionOutcome>,
    /// Runs merged one after another into this one (matrix rounds); 1 for a plain run.
    pub rounds: u32,
    /// Whether the run was stopped early.
    pub interrupted: bool,
    /// What went wrong on the way that the numbers alone do not say (a connection that gave
    /// up on its server, requests left unanswered at a stop).
    pub warnings: Vec<String>,
    /// Open-loop connect-per-request: transactions that waited for their slot, never started
    /// or failed.
    pub crr: CrrCounts,
}

/// What became of the transactions of an open-loop connect-per-request run (`--mode crr
/// --rate`) beyond the answered ones. Every --connections slot runs one transaction at a time,
/// so the transactions in flight never exceed --connections; one that falls due while its slot
/// is still busy waits for it, and the wait is part of its latency (measured from when it was
/// due). A failed transaction is counted in [`RawRun::unanswered`] and kept in the latency at
/// the time it had waited (a lower bound); its slot goes on with the next.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CrrCounts {
    /// Started late because their slot was still busy with the previous transaction when they
    /// fell due (the rate needed more transactions in flight than --connections).
    pub queued: u64,
    /// Fell due during the run but never started: still waiting for their slot when the run
    /// ended or was stopped.
    pub not_started: u64,
    /// `connect` refused (`ECONNREFUSED`: nothing listening, or the listen queue overflowed).
    pub connect_refused: u64,
    /// `connect` found no free local port (`EADDRNOTAVAIL`).
    pub no_local_port: u64,
    /// `connect` did not complete within the connect timeout.
    pub connect_timeout: u64,
    /// `connect` failed otherwise.
    pub connect_failed: u64,
    /// Connected, but no response within `--response-timeout`.
    pub response_timeout: u64,
    /// The server closed or reset the connection before answering.
    pub closed_by_server: u64,
}

impl CrrCounts {
    /// Transactions that failed, whatever the cause.
    pub fn failed(&self) -> u64 {
        self.connect_refused
            + self.no_local_port
            + self.connect_timeout
            + self.connect_failed
            + self.response_timeout
            + self.closed_by_server
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &CrrCounts) {
        self.queued += other.queued;
        self.not_started += other.not_started;
        self.connect_refused += other.connect_refused;
        self.no_local_port += other.no_local_port;
        self.connect_timeout += other.connect_timeout;
        self.connect_failed += other.connect_failed;
        self.response_timeout += other.response_timeout;
        self.closed_by_server += other.closed_by_server;
    }

    /// What the counts say that the percentiles do not, one line each (none when all went
    /// well).
    pub fn warnings(&self, connections: usize) -> Vec<String> {
        let mut out = Vec::new();
        if self.queued > 0 {
            out.push(format!(
                "{} transaction(s) fell due while their slot was still busy with the previous one \
                 and started late (the rate needs more than --connections {connections} \
                 transactions in flight; raise --connections): their wait is in the latency, \
                 measured from when each was due",
                self.queued
            ));
        }
        if self.not_started > 0 {
            out.push(format!(
                "{} transaction(s) fell due but never started (waiting for a busy slot when the \
                 run ended, or due just before a stop); counted as unanswered, each at the time \
                 it had waited",
                self.not_started
            ));
        }
        let causes = [
            (
                self.connect_refused,
                "connect refused (is the server running, its listen queue full?)",
            ),
            (
                self.no_local_port,
                "no free local port (the ephemeral port range is used up; lower --connections or \
                 widen net.ipv4.ip_local_port_range)",
            ),
            (self.connect_timeout, "connect timed out"),
            (self.connect_failed, "connect failed otherwise"),
            (self.response_timeout, "no response within --response-timeout"),
            (self.closed_by_server, "closed or reset by the server before the response"),
        ];
        let failed: Vec<String> =
            causes.iter().filter(|(n, _)| *n > 0).map(|(n, why)| format!("{n} {why}")).collect();
        if !failed.is_empty() {
            out.push(format!(
                "{} transaction(s) failed: {}; each is counted as unanswered and kept in the \
                 latency at the time it had waited (a lower bound)",
                self.failed(),
                failed.join(", ")
            ));
        }
        out
    }
}

/// How two sets of measurements combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Combine {
    /// Side by side (connections of one run): rates add up, elapsed is the longest.
    Parallel,
    /// One after another (rounds of a matrix row): rates average, elapsed adds up.
    Sequential,
}

impl RawRun {
    /// Adds `other`'s measurements to these.
    pub fn absorb(&mut self, other: RawRun, how: Combine) {
        self.latency.merge(&other.latency);
        self.service.merge(&other.service);
        self.send_lateness.merge(&other.send_lateness);
        self.connect.merge(&other.connect);
        self.requests += other.requests;
        self.sent += other.sent;
        self.unanswered += other.unanswered;
        match how {
            Combine::Parallel => {
                self.elapsed = self.elapsed.max(other.elapsed);
                if let Some(rate) = other.achieved_rate {
                    *self.achieved_rate.get_or_insert(0.0) += rate;
                }
                self.rounds = self.rounds.max(other.rounds);
            }
            Combine::Sequential => {
                self.elapsed += other.elapsed;
                self.achieved_rate = match (self.achieved_rate, other.achieved_rate) {
                    (Some(a), Some(b)) => Some(
                        (a * self.rounds as f64 + b * other.rounds as f64)
                            / (self.rounds + other.rounds) as f64,
                    ),
                    (a, b) => a.or(b),
                };
                self.rounds += other.rounds;
            }
        }
        self.attributed.extend(other.attributed);
        self.tcp_info.extend(other.tcp_info);
        self.snapshot_costs_ns.extend(other.snapshot_costs_ns);
        self.samples.extend(other.samples);
        self.connections.extend(other.connections);
        self.interrupted |= other.interrupted;
        self.warnings.extend(other.warnings);
        self.crr.add(&other.crr);
    }
}

/// What the handshake of one connection established.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ConnectionOutcome {
    /// The client's own profile report (requested vs actual).
    pub client_apply: ApplyReport,
    /// The server's answer, with its profile report.
    pub welcome: Welcome,
    /// Congestion control read back from the client socket.
    pub congestion: Option<String>,
    /// CPUs the client thread was seen running on.
    pub client_cpus_seen: Vec<usize>,
    /// The connection's index in the run.
    #[serde(default)]
    pub index: usize,
    /// What the server reported for this connection's measured part.
    #[serde(skip)]
    pub server_stats: crate::server_stats::Asked,
}

#[cfg(test)]
mod crr_tests {
    use super::*;

    #[test]
    fn crr_counts_add_up_and_say_what_the_percentiles_do_not() {
        assert!(CrrCounts::default().warnings(4).is_empty(), "nothing to say when all went well");
        let mut a = CrrCounts { queued: 3, connect_refused: 1, ..CrrCounts::default() };
        a.add(&CrrCounts {
            queued: 2,
            not_started: 4,
            response_timeout: 2,
            ..CrrCounts::default()
        });
        assert_eq!((a.queued, a.not_started, a.failed()), (5, 4, 3));
        let w = a.warnings(4);
        assert_eq!(w.len(), 3, "{w:?}");
        assert!(w[0].starts_with("5 transaction(s) fell due while their slot was still busy"));
        assert!(w[0].contains("--connections 4"), "{}", w[0]);
        assert!(w[1].starts_with("4 transaction(s) fell due but never started"), "{}", w[1]);
        assert!(
            w[2].starts_with(
                "3 transaction(s) failed: 1 connect refused (is the server running, its listen \
                 queue full?), 2 no response within --response-timeout;"
            ),
            "{}",
            w[2]
        );
    }
}
