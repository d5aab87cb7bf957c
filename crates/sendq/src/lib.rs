//! `tcptail-sendq`: keep the delay of data waiting in a TCP socket's send buffer under a bound,
//! and keep what the application sends fresh.
//!
//! After Park and Meng, *Controlling TCP Socket Queueing Delay* (SIGCOMM '24 poster): a socket's
//! send buffer can hold hundreds of milliseconds of unsent data on a path whose RTT is 10 ms.
//! The poster estimates that delay from `tcp_info` (`notsent / delivery rate`) and holds the
//! writer back while it exceeds a threshold. This crate does that and goes further:
//!
//! - [`governor`]: the sans-IO decision core (time is an input; tested with a virtual clock):
//!   no control, static `TCP_NOTSENT_LOWAT`, the poster's threshold, and an *adaptive* LOWAT of
//!   `threshold × rate` so the kernel itself wakes a waiting writer (when half the bound is
//!   free), without polling `tcp_info`. In both threshold modes every write is capped to the
//!   room left, so `notsent ≤ threshold × rate` holds after every write, on every path.
//! - [`freshness`]: a keyed latest-value queue in front of the socket (conflation) with
//!   drop-stale, because bounding the socket queue alone only moves the wait into the
//!   application.
//! - [`sender`]: [`BoundedSender`], the thin adapter over a real socket: a blocking socket
//!   waits, a non-blocking one returns `WouldBlock` (`EAGAIN`); its stats count every wait,
//!   the kernel's included, and keep the estimate fresh in every mode.
//! - [`fresh_sender`]: [`FreshSender`], the queue and the wrapper together: offer messages
//!   by key, pump them out as the bound allows, read merged/dropped counts.
//!
//! The poster's lab experiment on an emulated path between two network namespaces (`tcptail
//! sendq`) is `tcptail_experiments::workload::sendq::experiment`, beside the other lab
//! experiments; this crate holds only what an application links.
//!
//! ```
//! use std::time::Duration;
//! use tcptail_sendq::{BoundedSender, GovernorConfig, GovernorMode};
//!
//! # fn main() -> std::io::Result<()> {
//! # let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
//! # let stream = std::net::TcpStream::connect(listener.local_addr()?)?;
//! # let _peer = listener.accept()?;
//! // Keep at most ~10 ms of unsent data in the socket; a blocking socket waits for it.
//! let mode = GovernorMode::Threshold(Duration::from_millis(10));
//! let mut sender = BoundedSender::new(stream, GovernorConfig::new(mode))?;
//! sender.send_all(b"the freshest price")?;
//! let stats = sender.stats();
//! assert_eq!(stats.bytes_written, 18);
//! println!("estimate {:?}, blocked {:?}", stats.estimate, stats.time_blocked);
//! # Ok(())
//! # }
//! ```
//!
//! The library never changes host settings.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod fresh_sender;
pub mod freshness;
pub mod governor;
pub mod sender;

pub use fresh_sender::{FreshSender, FreshSenderStats};
pub use freshness::{FreshnessPolicy, FreshnessQueue, FreshnessStats};
pub use governor::{
    Admission, Estimate, Governor, GovernorConfig, GovernorMode, Inputs, Observation,
};
pub use sender::{BoundedSender, SenderStats};
