//! The benchmark's configuration: everything the command line can say, checked before any
//! socket is opened.
//!
//! [`BenchConfig`] is the checked form; [`BenchConfig::validate`] names the flag at fault
//! ([`ConfigError`]). The client ([`crate::client`]), its connections ([`crate::connection`]) and
//! the result ([`crate::report`]) all read it; it depends on none of them.

use std::net::SocketAddr;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tcptail_sock::Profile;
use tcptail_units::MessageRate;

use crate::pacer::Spacing;
use crate::{sys, wire};

/// How requests are issued.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "kebab-case")]
pub enum Load {
    /// Each request is sent as soon as the previous response arrived (netperf TCP_RR).
    Closed,
    /// Requests are sent at a fixed rate whatever the responses do.
    Open {
        /// Requests per second, over all connections.
        rate: f64,
        /// Constant or Poisson spacing.
        spacing: Spacing,
    },
}

/// Which I/O engine drives the sockets after the handshake.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "engine", rename_all = "kebab-case")]
pub enum Engine {
    /// Blocking (or spinning non-blocking) `send`/`recv` calls, one thread per connection.
    #[default]
    Default,
    /// io_uring: one ring per thread, a multishot receive into provided buffers per
    /// connection, sends queued on the ring; the send and the wait for the next completion
    /// are one system call (`crate::engine::uring`).
    IoUring {
        /// A kernel thread polls the submission queue (`IORING_SETUP_SQPOLL`).
        sqpoll: bool,
    },
}

impl Engine {
    /// The engine's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Engine::Default => "default",
            Engine::IoUring { .. } => "io_uring",
        }
    }
}

/// When the measured part of a run ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopAfter {
    /// After this long.
    Duration(#[serde(with = "crate::config::duration_secs")] Duration),
    /// After this many requests (over all connections).
    Count(u64),
}

/// What one transaction is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TxMode {
    /// Request and response on a connection kept open for the whole run (netperf TCP_RR).
    #[default]
    Rr,
    /// Connect, request, response, close, per transaction (neper's tcp_crr): the connect time
    /// is reported apart from the request's latency.
    Crr,
}

impl std::str::FromStr for TxMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "rr" => Ok(TxMode::Rr),
            "crr" => Ok(TxMode::Crr),
            other => Err(format!("{other:?}: expected rr or crr")),
        }
    }
}

/// Largest `--depth`: requests outstanding per connection.
pub const MAX_DEPTH: u32 = 1024;
/// Largest memory the pipelined requests of one connection may hold queued (depth x size).
pub const MAX_PIPELINE_BYTES: u64 = 64 * 1024 * 1024;

/// A checked benchmark configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BenchConfig {
    /// The server's address.
    pub server: SocketAddr,
    /// The socket profile applied at both ends.
    pub profile: Profile,
    /// Request frame size in bytes (header included).
    pub request_len: u32,
    /// Response frame size in bytes (header included).
    pub reply_len: u32,
    /// Closed or open loop.
    pub load: Load,
    /// End of the measured part.
    pub stop: StopAfter,
    /// Unmeasured warm-up before it.
    pub warmup: StopAfter,
    /// Parallel connections.
    pub connections: usize,
    /// Client threads the connections are spread over (connection `i` on thread
    /// `i % threads`); 0 means one per connection.
    #[serde(default)]
    pub threads: usize,
    /// Requests outstanding per connection (closed loop; 1 = no pipelining).
    #[serde(default = "one")]
    pub depth: u32,
    /// Request/response on long connections, or connect-request-response-close.
    #[serde(default)]
    pub mode: TxMode,
    /// Read every connection's `tcp_info` this often during the measured part
    /// ([`crate::tcp_sampler`]).
    #[serde(default, with = "crate::config::opt_duration_secs")]
    pub tcp_info_interval: Option<Duration>,
    /// Pin the client's threads to this CPU.
    pub client_cpu: Option<usize>,
    /// Ask the server to pin its connection threads to this CPU.
    pub server_cpu: Option<usize>,
    /// Busy-poll non-blocking sockets at both ends instead of sleeping in `recv`.
    pub spin: bool,
    /// Sample kernel state around each request and explain the tail.
    pub attribute: bool,
    /// Keep every sample for `--samples` (memory grows with the run).
    pub keep_samples: bool,
    /// Open loop: the pacer spins for this long before each send instead of trusting timers.
    #[serde(with = "crate::config::duration_secs")]
    pub spin_window: Duration,
    /// Seed for Poisson spacing.
    pub seed: u64,
    /// A request unanswered this long after it was sent is given up: counted as unanswered,
    /// recorded at the time it waited, and its connection stops.
    #[serde(with = "crate::config::duration_secs")]
    pub response_timeout: Duration,
    /// The I/O engine of the client (and of `bench local`'s server).
    #[serde(default)]
    pub engine: Engine,
}

fn one() -> u32 {
    1
}

/// Default [`BenchConfig::response_timeout`]: longer than several retransmission timeouts
/// back to back (200 ms, 400 ms, 800 ms, ...), so only a server that stopped answering hits it.
pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

impl BenchConfig {
    /// A closed-loop, 64/64-byte, 5-second configuration with the given profile.
    pub fn new(server: SocketAddr, profile: Profile) -> BenchConfig {
        BenchConfig {
            server,
            profile,
            request_len: 64,
            reply_len: 64,
            load: Load::Closed,
            stop: StopAfter::Duration(Duration::from_secs(5)),
            warmup: StopAfter::Duration(Duration::from_millis(500)),
            connections: 1,
            threads: 0,
            depth: 1,
            mode: TxMode::Rr,
            tcp_info_interval: None,
            client_cpu: None,
            server_cpu: None,
            spin: false,
            attribute: false,
            keep_samples: false,
            spin_window: Duration::from_micros(200),
            seed: 1,
            response_timeout: DEFAULT_RESPONSE_TIMEOUT,
            engine: Engine::Default,
        }
    }

    /// Client threads in use: [`BenchConfig::threads`], or by default one per connection
    /// (the io_uring engine: one thread, one ring, for all of them).
    pub fn thread_count(&self) -> usize {
        match (self.threads, self.engine) {
            (0, Engine::IoUring { .. }) => 1,
            (0, Engine::Default) => self.connections,
            (t, _) => t.min(self.connections),
        }
    }

    /// Whether the run keeps the one-blocking-thread-per-connection loops (the floor's shape,
    /// which one connection's numbers are measured with); anything else runs each thread's
    /// connections on an event loop (`connection::event_loop`).
    pub fn one_thread_per_connection(&self) -> bool {
        self.thread_count() == self.connections && self.depth == 1 && self.mode == TxMode::Rr
    }

    /// Checks the configuration before any socket is opened.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let frame_range = wire::HEADER_LEN as u32..=wire::MAX_FRAME_LEN;
        for (flag, value) in [("--size", self.request_len), ("--response-size", self.reply_len)] {
            if !frame_range.contains(&value) {
                return Err(ConfigError::FrameSize {
                    flag,
                    value,
                    min: *frame_range.start(),
                    max: *frame_range.end(),
                });
            }
        }
        if self.connections == 0 || self.connections > 1024 {
            return Err(ConfigError::Connections(self.connections));
        }
        if self.threads > self.connections {
            return Err(ConfigError::Threads(self.threads, self.connections));
        }
        if self.depth == 0 || self.depth > MAX_DEPTH {
            return Err(ConfigError::Depth(self.depth));
        }
        if u64::from(self.depth) * u64::from(self.request_len) > MAX_PIPELINE_BYTES {
            return Err(ConfigError::PipelineBytes(self.depth, self.request_len));
        }
        if let Some(every) = self.tcp_info_interval {
            if every.is_zero() {
                return Err(ConfigError::TcpInfoInterval("must be longer than zero".into()));
            }
            if self.mode == TxMode::Crr {
                return Err(ConfigError::TcpInfoInterval(
                    "needs connections that live through the run; --mode crr closes each after \
                     one request (use --mode rr)"
                        .into(),
                ));
            }
        }
        if self.depth > 1 && (matches!(self.load, Load::Open { .. }) || self.mode == TxMode::Crr) {
            return Err(ConfigError::DepthWithout);
        }
        match self.stop {
            StopAfter::Duration(d) if d.is_zero() => return Err(ConfigError::EmptyRun),
            StopAfter::Count(0) => return Err(ConfigError::EmptyRun),
            StopAfter::Count(n) if n < self.connections as u64 => {
                return Err(ConfigError::CountBelowConnections(n, self.connections));
            }
            _ => {}
        }
        if let Load::Open { rate, .. } = self.load
            && MessageRate::per_second(rate).is_none()
        {
            return Err(ConfigError::Rate(rate));
        }
        if self.response_timeout.is_zero() {
            return Err(ConfigError::ResponseTimeout);
        }
        // The server's CPU can be checked here only when it runs on this machine; a remote
        // server reports a failed pin in its Welcome, which the result shows.
        let local_server = self.server.ip().is_loopback();
        for (flag, cpu) in [("--cpu", self.client_cpu), ("--server-cpu", self.server_cpu)] {
            let Some(cpu) = cpu else { continue };
            if flag == "--server-cpu" && !local_server {
                continue;
            }
            let allowed = sys::allowed_cpus().unwrap_or_default();
            if !allowed.contains(&cpu) {
                return Err(ConfigError::Cpu { flag, cpu, allowed });
            }
        }
        Ok(())
    }
}

/// A configuration that cannot run, named by the flag at fault.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    /// Request or response size outside the frame limits.
    #[error("{flag} {value}: must be between {min} and {max} bytes (the header alone is {min})")]
    FrameSize {
        /// The flag.
        flag: &'static str,
        /// The value given.
        value: u32,
        /// Smallest frame.
        min: u32,
        /// Largest frame.
        max: u32,
    },
    /// Zero or absurdly many connections.
    #[error("--connections {0}: must be between 1 and 1024")]
    Connections(usize),
    /// More threads than connections.
    #[error("--threads {0}: more threads than the {1} connections (each thread needs one)")]
    Threads(usize, usize),
    /// Depth out of range.
    #[error("--depth {0}: must be between 1 and {MAX_DEPTH}")]
    Depth(u32),
    /// Pipelined requests that would hold too much memory.
    #[error(
        "--depth {0} x --size {1}: more than {MAX_PIPELINE_BYTES} bytes of requests queued per \
         connection; lower one of them"
    )]
    PipelineBytes(u32, u32),
    /// Depth with open loop or connect-per-request.
    #[error(
        "--depth applies to the closed loop on long connections (open loop already keeps as \
         many requests outstanding as its rate needs; --mode crr has one per connection)"
    )]
    DepthWithout,
    /// A `--tcp-info-interval` that cannot be sampled.
    #[error("--tcp-info-interval: {0}")]
    TcpInfoInterval(String),
    /// Zero duration or count.
    #[error("--duration/--count: the run would measure nothing")]
    EmptyRun,
    /// Fewer requests than connections.
    #[error("--count {0} is smaller than --connections {1}")]
    CountBelowConnections(u64, usize),
    /// Rate not positive.
    #[error("--rate {0}: must be a positive number of requests per second")]
    Rate(f64),
    /// A zero response timeout.
    #[error("--response-timeout: must be longer than zero")]
    ResponseTimeout,
    /// A CPU this process may not use.
    #[error("{flag} {cpu}: not one of the CPUs this process may run on ({allowed:?})")]
    Cpu {
        /// The flag.
        flag: &'static str,
        /// The CPU asked for.
        cpu: usize,
        /// CPUs allowed.
        allowed: Vec<usize>,
    },
}

/// Serde helper: an optional `Duration` as floating-point seconds or null.
pub mod opt_duration_secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes seconds or null.
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&d.as_secs_f64()),
            None => s.serialize_none(),
        }
    }

    /// Reads seconds or null.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Option::<f64>::deserialize(d)?
            .map(|secs| Duration::try_from_secs_f64(secs).map_err(serde::de::Error::custom))
            .transpose()
    }
}

/// Serde helper: a `Duration` as floating-point seconds.
pub mod duration_secs {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes seconds.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }

    /// Reads seconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let secs = f64::deserialize(d)?;
        Duration::try_from_secs_f64(secs).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> BenchConfig {
        let profile = Profile { congestion: Some("bbr".into()), ..Profile::default() };
        let mut c = BenchConfig::new("127.0.0.1:9".parse().unwrap(), profile);
        c.connections = 2;
        c.client_cpu = Some(0);
        c.server_cpu = Some(1);
        c
    }

    #[test]
    fn server_cpu_is_validated_for_a_server_on_this_machine_only() {
        let mut c = config();
        c.client_cpu = None;
        c.server_cpu = Some(100_000);
        let err = c.validate().unwrap_err();
        assert!(err.to_string().starts_with("--server-cpu 100000: not one of the CPUs"), "{err}");
        c.server = "192.0.2.1:9".parse().unwrap();
        assert_eq!(c.validate(), Ok(()), "a remote server's CPUs are not this machine's");
        c.response_timeout = Duration::ZERO;
        assert_eq!(c.validate(), Err(ConfigError::ResponseTimeout));
    }

    #[test]
    fn an_open_loop_of_connect_per_request_runs_on_both_engines() {
        let mut c = config();
        c.client_cpu = None;
        c.server_cpu = None;
        c.mode = TxMode::Crr;
        assert_eq!(c.validate(), Ok(()));
        c.load = Load::Open { rate: 100.0, spacing: Spacing::Constant };
        assert_eq!(c.validate(), Ok(()));
        c.engine = Engine::IoUring { sqpoll: false };
        assert_eq!(c.validate(), Ok(()));
        c.load = Load::Closed;
        assert_eq!(c.validate(), Ok(()));
    }
}
