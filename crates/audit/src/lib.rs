//! Host profiles as data, `tcptail audit` checks and `tcptail tune`.
//!
//! # What it provides
//!
//! - [`profile`]: TOML profiles (built-in `trading-latency`, `bulk-throughput`, and the
//!   `baseline` they extend, which carries the seeds' known-bad settings), user profiles that
//!   `extends` a built-in, and errors naming file, line and key.
//! - [`view`]: [`HostView`], every read of the host relative to a root directory (`/` or a
//!   fixture tree).
//! - [`host`]: the [`Snapshot`] the checks run on, read through a view.
//! - [`checks`]: pure functions from a profile and a snapshot to [`AuditFinding`]s (OK / WARN /
//!   FAIL / N/A with current value, recommendation, rationale and evidence), including the
//!   seed's six production failure modes.
//! - [`tune`]: the `sysctl.d` file and diff a profile implies, atomic apply with read-back
//!   verification, rollback on a failure half-way, and the previous values saved durably;
//!   [`revert`]: those values restored, refusing to clobber a change made since unless forced;
//!   [`lock`]: one tune at a time; [`files`]: durable writes; [`cc`]: congestion-control
//!   settings judged from the kernel's lists, never by a trial write.
//! - [`verify`]: `--verify-with`: each per-namespace change measured before and after in a
//!   lab, kept only if the chosen percentile improves beyond run-to-run noise.
//! - [`emit`]: the same change as a plain `sysctl.d` file or an Ansible task list.
//! - [`fixture`]: fake root trees (a stock Linux 6.18 host and variations) for tests.
//!
//! # Invariants
//!
//! - Checks never read the host: they take a [`Snapshot`]. Only [`HostView`] reads, and only
//!   files under its root; it runs commands (`tc`, `ethtool`) only when built for the real
//!   host ([`HostView::live`]), so fixture trees test everything deterministically.
//! - Inside a child network namespace or container (the signals are listed in [`host`]),
//!   host-scope settings are N/A, never failures: "host scope: not changeable here" with the
//!   value when it can be read, "host scope: not visible here" when it cannot; irqbalance is
//!   N/A when processes outside our PID namespace are invisible; `tune` never writes
//!   host-scope keys there and says why.
//! - Every audit reports the whole read-list (governor, irqbalance, isolated CPUs, THP, busy
//!   polling, NUMA balancing, buffer limits, qdiscs, NIC offloads and coalescing), judged only
//!   where the profile recommends something.
//! - `tune` writes nothing unless asked to apply; everything it applies it has read back, and
//!   everything it changed it can restore exactly.
//!
//! # What it never does
//!
//! It never changes a setting during an audit, never writes outside its root, and never
//! writes a host-scope key from inside a child namespace or a container.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod cc;
pub mod checks;
pub mod emit;
mod error;
pub mod files;
pub mod fixture;
pub mod host;
pub mod lock;
pub mod profile;
pub mod revert;
pub mod tune;
pub mod verify;
pub mod view;

pub use checks::{AuditFinding, Report, Status, audit};
pub use error::Error;
pub use host::Snapshot;
pub use profile::{HostProfile, Scope, Severity, Want};
pub use view::HostView;
