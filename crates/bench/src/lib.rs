//! The engines behind `tcptail bench`: a request/response latency benchmark over real TCP
//! sockets that reports full percentiles, records the machine context every result depends on,
//! and explains its slowest samples with the kernel's own per-connection state.
//!
//! - [`wire`]: the versioned frame format and the handshake in which the client asks the
//!   server to apply a socket profile and pin itself to a CPU. Parsing never trusts the peer.
//! - [`server`]: serves many clients at once; a malformed or hostile peer (a bad frame, a
//!   reply larger than its Hello negotiated, silence, not reading its responses) loses its own
//!   connection and nothing else.
//! - [`connection`]: one connection's handshake, warm-up and measuring loops (the hot path),
//!   and what happens to requests that never get an answer (counted, and kept in the
//!   percentiles as lower bounds).
//! - [`config`]: the checked benchmark configuration ([`config::BenchConfig`]), which names the
//!   flag at fault; every other module reads it and it reads none of them.
//! - [`run`]: what one run is made of, shared by the client and its connections: the stop
//!   and progress control, the raw measurements and how they merge, each handshake's outcome,
//!   the error.
//! - [`client`]: closed-loop (back-to-back) and open-loop (fixed rate, constant or Poisson
//!   spacing, latency from the *intended* send time) request loops, blocking or spinning.
//! - [`pacer`]: sleeps until shortly before a deadline, then spins, because timer wake-ups on
//!   a virtual machine run tens to hundreds of microseconds late.
//! - [`interval`]: interval histograms while a run goes (live lines, HdrHistogram logs).
//! - [`stats`]: HDR-histogram percentiles and summaries; pure functions of the samples.
//! - [`server_stats`]: the server's own account of a run (CPU time, service time per
//!   request, socket state), asked for over the wire and merged into the result's `server`.
//! - [`tcp_sampler`]: `tcp_info` of every connection on a fixed period, on the requests' clock.
//! - [`attribution`]: which kernel state (BBR phase, cwnd, retransmits, ...) sets the slowest
//!   requests apart from the typical ones.
//! - [`context`]: CPU placement, steal, competing load, cpuidle driver, kernel version.
//! - [`engine`]: the engines beside the default blocking one: io_uring (`--engine io_uring`).
//! - [`xdp`]: the AF_XDP engine: a UDP request/response over AF_XDP sockets behind an XDP
//!   redirect program, beside kernel UDP on the same interfaces.
//! - [`matrix`]: several configurations compared in one run, rounds interleaved.
//! - [`report`]: the result types and their human table, JSON and CSV forms.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod attribution;
pub mod client;
pub mod config;
pub mod connection;
pub mod context;
pub mod engine;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod interval;
pub mod matrix;
pub mod pacer;
pub mod report;
pub mod run;
pub mod server;
pub mod server_stats;
pub mod stats;
pub mod sys;
pub mod tcp_sampler;
mod watchdog;
pub mod wire;
pub mod xdp;
