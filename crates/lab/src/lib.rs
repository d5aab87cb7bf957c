//! `tcptail lab`: emulated network paths between network namespaces on one machine.
//!
//! - [`emulator`]: the runtime around `tcptail-emu`'s pure model: reads packets from the two
//!   TUN devices, feeds each direction's model, releases packets on time (SCHED_FIFO, 1 ns timer
//!   slack where allowed), and measures its own lateness.
//! - [`path`]: a checked path specification from the command line's flags, and a lab run that
//!   builds the namespaces, sets per-namespace TCP buffers for the path's BDP, starts the
//!   emulator and the commands, and tears everything down on every exit path.
//! - [`live`]: [`LivePath`], the one live path between two namespaces every front end builds
//!   (lab path, lab run's rounds, the send-queue experiment, tune --verify-with): topology,
//!   TCP buffers for the BDP, emulator or qdisc, handles for each end, the emulator's
//!   self-measurement at stop, teardown on drop.
//! - [`placement`]: where the path's work runs: the emulator pinned to a CPU, the
//!   namespaces' receive processing and the endpoints steered to the others.
//! - [`netem`]: the same path on kernel qdiscs behind a forwarding hop, where the host has
//!   netem.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod emulator;
pub mod live;
pub mod netem;
pub mod path;
pub mod placement;

pub use live::{LivePath, LivePathBuilder, PathShape, StoppedPath};
