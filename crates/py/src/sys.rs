//! The only `unsafe` of the crate: borrowing a file descriptor that a Python object owns.
//!
//! CPython's `socket.socket` owns its descriptor and closes it in `close()` or when it is
//! collected. We never close it; we only borrow it for a call, while holding a reference to
//! the Python object (so it cannot be collected) and after checking that it still reports the
//! same, open descriptor. What we cannot rule out is another Python thread closing the socket
//! while the GIL is released during our call, exactly as for CPython's own socket methods; a
//! closed descriptor then fails with `EBADF`.

#![allow(unsafe_code)]

use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, RawFd};

use pyo3::exceptions::{PyOSError, PyTypeError};
use pyo3::prelude::*;
use socket2::SockRef;

/// The descriptor of a Python socket (anything with `fileno()`, or an `int`), checked open.
pub(crate) fn raw_fd(sock: &Bound<'_, PyAny>) -> PyResult<RawFd> {
    let fd: i64 = if let Ok(n) = sock.extract::<i64>() {
        n
    } else if sock.hasattr("fileno")? {
        sock.call_method0("fileno")?.extract()?
    } else {
        return Err(PyTypeError::new_err(format!(
            "expected a socket (an object with fileno()) or a file descriptor, got {}",
            sock.get_type().name()?
        )));
    };
    if fd < 0 {
        return Err(PyOSError::new_err((EBADF, "the socket is closed (fileno() is -1)")));
    }
    RawFd::try_from(fd).map_err(|_| PyOSError::new_err((EBADF, "not a file descriptor")))
}

/// `EBADF` on Linux.
const EBADF: i32 = 9;

/// Runs `f` with `sock`'s descriptor borrowed, the GIL released.
pub(crate) fn with_fd<T: Send>(
    sock: &Bound<'_, PyAny>,
    f: impl FnOnce(BorrowedFd<'_>) -> T + Send,
) -> PyResult<T> {
    let fd = raw_fd(sock)?;
    Ok(sock.py().detach(|| {
        // SAFETY: `fd` was just read from the live Python socket `sock`, which the caller holds
        // a reference to for the whole call, so the descriptor stays open unless another
        // thread closes the socket meanwhile (see the module docs: then the call fails with
        // EBADF or acts on a reused descriptor, as CPython's socket methods would). The borrow
        // ends with `f`; nothing here closes it.
        let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
        f(borrowed)
    }))
}

/// A Python socket's descriptor, as a stream for `tcptail-sendq`'s senders. The sender that
/// owns one also keeps the Python socket object alive and re-checks [`raw_fd`] before use
/// ([`PyFd::check`]).
#[derive(Debug)]
pub(crate) struct PyFd(RawFd);

impl PyFd {
    pub(crate) fn new(sock: &Bound<'_, PyAny>) -> PyResult<PyFd> {
        raw_fd(sock).map(PyFd)
    }

    /// Fails unless `sock` still reports this descriptor (closed, or replaced by `detach()`).
    pub(crate) fn check(&self, sock: &Bound<'_, PyAny>) -> PyResult<()> {
        let now = sock.call_method0("fileno")?.extract::<i64>()?;
        if now != i64::from(self.0) {
            return Err(PyOSError::new_err((
                EBADF,
                "the socket this sender wraps was closed or detached",
            )));
        }
        Ok(())
    }
}

impl AsFd for PyFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: a `PyFd` lives inside a sender that holds a strong reference to the Python
        // socket owning this descriptor, and every use is preceded by `PyFd::check` (the
        // socket still reports this descriptor). Nothing closes it through this borrow.
        unsafe { BorrowedFd::borrow_raw(self.0) }
    }
}

impl Write for PyFd {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        SockRef::from(&self.as_fd()).send(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
