//! The link emulator's pure model: what happens to a packet between two TUN devices.
//!
//! Each direction of an emulated path is a pipeline of four stages, modelled on smoltcp's
//! middleware devices and driven sans-IO like quinn-proto:
//!
//! ```text
//! enqueue(now, pkt) -> loss -> bottleneck queue -> link rate -> propagation delay -> poll_release(now)
//!                      Bernoulli /  drop-tail by     constant bit   fixed + jitter
//!                      Gilbert-     bytes, packets,  rate, or a     (uniform, normal, pareto,
//!                      Elliott;     time; CoDel or   Mahimahi trace paretonormal), never
//!                      ECN          fq_codel, ECN                   reordering; optional
//!                      blackhole    marking                         explicit reordering
//! ```
//!
//! # Contract
//!
//! - **Time is an input.** Every call takes `now: Nanos`; the crate never reads a clock, sleeps,
//!   spawns threads, or touches a socket or file (except [`DeliveryTrace::from_file`], which
//!   reads the trace it is asked to). The TUN/namespace adapter maps `CLOCK_MONOTONIC` to
//!   [`Nanos`], feeds packets in with [`Direction::enqueue`], drains them with
//!   [`Direction::poll_release`] and sleeps until [`Direction::next_wakeup`].
//! - **The schedule is virtual.** Departures follow `t_start = max(arrival, link free)` and
//!   `t_dep = t_start + len * 8 / rate` (or the trace's delivery opportunities), computed in
//!   virtual time whatever `now` the adapter calls with; a late call never becomes rate error.
//!   [`ReleaseInfo::scheduled`] tells the adapter how late it is.
//! - **Deterministic.** Loss and jitter draw from an RNG seeded from a `u64` (`StdRng`): the
//!   same spec, seed, arrivals and rand version give the same run, independent of when the
//!   adapter polls.
//! - **Measured.** Every arrival, drop (with its [`DropReason`]), departure and trace delivery
//!   opportunity goes to an [`Observer`] as an [`Event`]: [`Stats`] (JSON summary),
//!   [`MahimahiLog`] (Mahimahi's log format), a `Vec<Event>`, or `()` for nothing at no cost.
//! - **Checked configuration.** [`DirectionSpec::validate`] and [`PathSpec::validate`] reject
//!   nonsense with errors naming the field; trace files fail with file and line.
//! - No `unsafe`, no panics on any input reachable from a validated spec.
//!
//! # Adapter sketch
//!
//! ```
//! use std::time::Duration;
//! use tcptail_emu::*;
//! use tcptail_units::{BitRate, ByteSize};
//!
//! let spec = DirectionSpec {
//!     rate: Rate::Constant(BitRate(30_000_000)),
//!     delay: Duration::from_millis(5),
//!     jitter: None,
//!     loss: None,
//!     queue: QueueSpec { limit: QueueLimit::Bytes(ByteSize(375_000)), discipline: Discipline::Fifo },
//!     ecn_blackhole: None,
//!     reorder: None,
//! };
//! spec.validate()?;
//! let mut dir = Direction::<Vec<u8>>::new(spec, 42).with_observer(Stats::default());
//!
//! // In the event loop (now = CLOCK_MONOTONIC mapped to Nanos):
//! let now = Nanos::from_millis(1);
//! if let Admission::Dropped { payload, .. } = dir.enqueue(now, Packet { id: 1, len: 1500, payload: vec![0; 1500] }) {
//!     drop(payload); // or return the buffer to a pool
//! }
//! let later = Nanos::from_millis(7);
//! while let Some((payload, info)) = dir.poll_release(later) {
//!     // write payload to the other TUN; record info.lateness(later) as emulator error
//!     assert_eq!(info.scheduled, Nanos(1_000_000 + 400_000 + 5_000_000));
//!     let _ = payload;
//! }
//! let _sleep_until: Option<Nanos> = dir.next_wakeup();
//! let json = serde_json::to_string(dir.observer())?;
//! # let _ = json;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

mod codel;
mod delay;
mod direction;
mod event;
mod fifo;
mod fq_codel;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod headers;
mod jitter;
mod link;
mod loss;
mod mahimahi_log;
mod packet;
mod queue;
pub mod runs;
mod seed;
pub mod segment;
mod spec;
mod stats;
mod syntax;
mod time;
mod timeline;
mod trace;
pub mod wire;

pub use codel::CODEL_MTU;
pub use direction::{Admission, Backlog, Direction, Path};
pub use event::{DropReason, Event, FnObserver, Observer};
pub use headers::Headers;
pub use mahimahi_log::{LogHeader, MahimahiLog};
pub use packet::{Packet, ReleaseInfo};
pub use spec::{
    DirectionSpec, Discipline, EcnBlackhole, FQ_CODEL_DEFAULT_LIMIT, Jitter, LossModel,
    MAX_SPEC_DURATION, MIN_BDP_QUEUE_BYTES, PathSpec, QueueLimit, QueueSpec, Rate, Reorder,
    SpecError,
};
pub use stats::{
    AppliedChange, Count, DelaySummary, DropCounts, MAX_BINS, Opportunities, Stats, StatsSummary,
    Throughput,
};
pub use syntax::{BufferSize, SyntaxError};
pub use time::Nanos;
pub use timeline::{MAX_TRACE_SCALE, PathChange, PathEvent, validate_events};
pub use trace::{DeliveryTrace, MAX_TIMESTAMP_MS, OPPORTUNITY_BYTES, TraceError};
