//! `tcptail._native`: the Python bindings of tcptail, a thin PyO3 layer over the same Rust
//! crates the `tcptail` binary uses (`tcptail-sock`, `tcptail-sendq`). Nothing here decides
//! anything about sockets: profiles, verification, `tcp_info` parsing, QUICKACK re-arming and
//! the send-queue governor all live in those crates; this crate only converts values and
//! errors between Rust and Python.
//!
//! The public Python API is the `tcptail` package (`python/tcptail/__init__.py`), which wraps
//! these functions in typed dataclasses and a `socket.socket` subclass; `_native` is private.
//!
//! Invariants:
//! - A Python socket's file descriptor is **borrowed**, never owned: it is taken from
//!   `sock.fileno()` for the length of one call (or, for the senders, while the sender holds a
//!   reference to the socket object and the socket still reports the same descriptor), and it
//!   is never closed here. All of that `unsafe` lives in [`sys`].
//! - The GIL is released around every call that can block (receive, the senders' waits).
//! - Errors: `OSError` subclasses for the kernel's errors (`EAGAIN` is `BlockingIOError`),
//!   `tcptail.ProfileError` for a profile that cannot be loaded, `TypeError`/`ValueError` for a
//!   bad override, each naming the option at fault.

#![deny(unsafe_code)]
#![warn(missing_docs)]

use pyo3::prelude::*;

mod convert;
mod profile;
mod sender;
mod sock;
mod sys;

pyo3::create_exception!(
    _native,
    TcptailError,
    pyo3::exceptions::PyException,
    "Base class of every error tcptail raises itself (OS errors stay OSError)."
);
pyo3::create_exception!(
    _native,
    ProfileError,
    TcptailError,
    "A profile could not be loaded: unknown built-in name, unreadable or invalid TOML file."
);

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("TcptailError", py.get_type::<TcptailError>())?;
    m.add("ProfileError", py.get_type::<ProfileError>())?;
    m.add_class::<profile::PyProfile>()?;
    m.add_function(wrap_pyfunction!(sock::apply_profile, m)?)?;
    m.add_function(wrap_pyfunction!(sock::recv, m)?)?;
    m.add_function(wrap_pyfunction!(sock::tcp_info, m)?)?;
    m.add_function(wrap_pyfunction!(sock::bbr_info, m)?)?;
    m.add_function(wrap_pyfunction!(sock::congestion_control, m)?)?;
    m.add_class::<sender::PyBoundedSender>()?;
    m.add_class::<sender::PyFreshSender>()?;
    Ok(())
}
