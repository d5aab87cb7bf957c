//! Socket profiles for latency-sensitive TCP, applied and **verified**, and the kernel's own
//! per-connection state (`TCP_INFO`, `TCP_CC_INFO`) read length-aware.
//!
//! This crate is the one place where tcptail sets and reads TCP socket options. Everything else
//! (the benchmark, the lab, the exporter, the Python package, the preload library) goes through
//! it, so a profile means the same thing everywhere.
//!
//! - [`profile`]: a [`Profile`] is plain data (congestion control, NODELAY, QUICKACK policy,
//!   buffers, keepalive, ...). Built-in profiles and user TOML files live in [`profile_file`].
//! - [`apply`]: applies a profile to a socket and reads every option back with `getsockopt`,
//!   returning requested-vs-actual: a buffer capped at `rmem_max`, a congestion control that is
//!   not allowed, an option the kernel lacks. Nothing is assumed to have worked.
//! - [`recv`]: a receive helper that re-arms `TCP_QUICKACK` after every receive when the
//!   profile asks for it (the kernel clears it silently).
//! - [`tcp_info`] and [`cc_info`]: `struct tcp_info` through Linux 6.18 and BBR's
//!   `tcp_bbr_info`, parsed from raw bytes so a shorter (older kernel) struct gives absent
//!   fields rather than zeros. The same parsers serve `getsockopt` and sock_diag.
//!
//! All `libc` calls live in [`sys`]; the rest of the crate is safe code.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod apply;
pub mod cc_info;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub mod profile;
pub mod profile_file;
pub mod recv;
pub mod sys;
pub mod tcp_info;

pub use apply::{ApplyReport, OptionOutcome, OptionReport, apply_profile};
pub use cc_info::{BbrInfo, BbrPhase};
pub use profile::{BufferSize, Keepalive, Profile, QuickAck};
pub use tcp_info::TcpInfo;
