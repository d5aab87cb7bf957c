//! The bounded-delay senders of `tcptail-sendq` over a Python socket: `BoundedSender` (every
//! write waits for the bound) and `FreshSender` (a conflating, drop-stale queue in front of
//! it). A blocking socket waits with the GIL released; a non-blocking one raises
//! `BlockingIOError` (`BoundedSender`) or leaves messages queued (`FreshSender.pump`), and
//! `retry_after` says when to try again. The asyncio writer is built on `FreshSender` in
//! Python.

use std::time::Duration;

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict, PyInt, PyString};
use tcptail_sendq::{
    BoundedSender, FreshSender, FreshnessPolicy, GovernorConfig, GovernorMode, SenderStats,
};

use crate::convert::{duration, type_name};
use crate::sys::PyFd;

/// The governor configuration from the Python keywords.
fn config(
    mode: &str,
    threshold: Option<&Bound<'_, PyAny>>,
    lowat: Option<u32>,
    max_wait: Option<&Bound<'_, PyAny>>,
) -> PyResult<GovernorConfig> {
    let threshold = || -> PyResult<Duration> {
        match threshold {
            Some(t) => duration("threshold", t),
            None => Ok(Duration::from_millis(10)),
        }
    };
    let mode = match mode {
        "none" | "no-control" => GovernorMode::NoControl,
        "threshold" => GovernorMode::Threshold(threshold()?),
        "adaptive-lowat" => GovernorMode::AdaptiveLowat(threshold()?),
        "static-lowat" => GovernorMode::StaticLowat(lowat.ok_or_else(|| {
            PyValueError::new_err("`lowat`: mode \"static-lowat\" needs lowat=<bytes>")
        })?),
        other => {
            return Err(PyValueError::new_err(format!(
                "`mode`: unknown mode '{other}' (use none, static-lowat, threshold or \
                 adaptive-lowat)"
            )));
        }
    };
    let mut config = GovernorConfig::new(mode);
    if let Some(w) = max_wait {
        config.max_wait = duration("max_wait", w)?;
        if config.max_wait < config.min_wait {
            return Err(PyValueError::new_err(format!(
                "`max_wait`: must be at least min_wait ({:?})",
                config.min_wait
            )));
        }
    }
    Ok(config)
}

fn sender_stats<'py>(py: Python<'py>, s: &SenderStats) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("bytes_written", s.bytes_written)?;
    d.set_item("writes", s.writes)?;
    d.set_item("time_blocked", s.time_blocked)?;
    d.set_item("waits", s.waits)?;
    d.set_item("would_block", s.would_block)?;
    d.set_item("kernel_refusals", s.kernel_refusals)?;
    d.set_item("info_reads", s.info_reads)?;
    d.set_item("lowat_sets", s.lowat_sets)?;
    d.set_item("lowat", s.lowat)?;
    d.set_item("lowat_unsupported", s.lowat_unsupported)?;
    let estimate = match &s.estimate {
        None => None,
        Some(e) => {
            let ed = PyDict::new(py);
            ed.set_item("delay", e.delay)?;
            ed.set_item("notsent_bytes", e.notsent_bytes)?;
            ed.set_item("rate_bytes_per_sec", e.rate)?;
            let source = serde_json::to_value(e.source).unwrap_or_default();
            ed.set_item("rate_source", source.as_str().unwrap_or("unknown"))?;
            Some(ed)
        }
    };
    d.set_item("estimate", estimate)?;
    Ok(d)
}

/// Keeps the delay of unsent data in a socket's send buffer under a bound; every write waits
/// for it (blocking socket) or raises `BlockingIOError` (non-blocking socket).
#[pyclass(module = "tcptail._native", name = "BoundedSender")]
pub(crate) struct PyBoundedSender {
    sock: Py<PyAny>,
    inner: BoundedSender<PyFd>,
}

#[pymethods]
impl PyBoundedSender {
    #[new]
    #[pyo3(signature = (sock, *, mode = "threshold", threshold = None, lowat = None, max_wait = None))]
    fn new(
        sock: &Bound<'_, PyAny>,
        mode: &str,
        threshold: Option<&Bound<'_, PyAny>>,
        lowat: Option<u32>,
        max_wait: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let config = config(mode, threshold, lowat, max_wait)?;
        let fd = PyFd::new(sock)?;
        let inner = BoundedSender::new(fd, config)?;
        Ok(PyBoundedSender { sock: sock.clone().unbind(), inner })
    }

    /// Waits for the bound, then writes once; returns the bytes written.
    fn send(&mut self, py: Python<'_>, data: PyBackedBytes) -> PyResult<usize> {
        self.inner.get_ref().check(self.sock.bind(py))?;
        let inner = &mut self.inner;
        Ok(py.detach(|| inner.send(&data))?)
    }

    /// Waits for the bound once, then writes all of `data` (blocking sockets).
    fn send_all(&mut self, py: Python<'_>, data: PyBackedBytes) -> PyResult<()> {
        self.inner.get_ref().check(self.sock.bind(py))?;
        let inner = &mut self.inner;
        Ok(py.detach(|| inner.send_all(&data))?)
    }

    /// Returns once a write may go, or raises `BlockingIOError` on a non-blocking socket.
    fn ready(&mut self, py: Python<'_>) -> PyResult<()> {
        self.inner.get_ref().check(self.sock.bind(py))?;
        let inner = &mut self.inner;
        Ok(py.detach(|| inner.ready())?)
    }

    /// After `BlockingIOError` in threshold mode: when to retry (`None`: wait for writability).
    #[getter]
    fn retry_after(&self) -> Option<Duration> {
        self.inner.retry_after()
    }

    /// The socket this sender writes to.
    #[getter]
    fn socket(&self, py: Python<'_>) -> Py<PyAny> {
        self.sock.clone_ref(py)
    }

    /// Counters and the latest estimate, as a dict.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        sender_stats(py, &self.inner.stats())
    }
}

/// A message key: messages with equal keys conflate; `None` gets a key of its own.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Key {
    Int(i64),
    Str(String),
    Bytes(Vec<u8>),
    Unique(u64),
}

/// A freshness queue (conflation by key, drop-stale) in front of a `BoundedSender`.
#[pyclass(module = "tcptail._native", name = "FreshSender")]
pub(crate) struct PyFreshSender {
    sock: Py<PyAny>,
    inner: FreshSender<Key, PyFd>,
    next_unique: u64,
}

#[pymethods]
impl PyFreshSender {
    #[new]
    #[pyo3(signature = (
        sock, *, mode = "threshold", threshold = None, lowat = None, max_wait = None,
        conflate = true, max_age = None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        sock: &Bound<'_, PyAny>,
        mode: &str,
        threshold: Option<&Bound<'_, PyAny>>,
        lowat: Option<u32>,
        max_wait: Option<&Bound<'_, PyAny>>,
        conflate: bool,
        max_age: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let config = config(mode, threshold, lowat, max_wait)?;
        let max_age = max_age.map(|a| duration("max_age", a)).transpose()?;
        let fd = PyFd::new(sock)?;
        let inner = FreshSender::new(fd, config, FreshnessPolicy { conflate, max_age })?;
        Ok(PyFreshSender { sock: sock.clone().unbind(), inner, next_unique: 0 })
    }

    /// Queues `data` under `key` (int, str, bytes, or `None` for a key of its own); returns
    /// `True` when it replaced an unsent message for that key.
    #[pyo3(signature = (data, key = None))]
    fn offer(&mut self, data: &Bound<'_, PyAny>, key: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        let key = self.key(key)?;
        let message: Vec<u8> = if let Ok(b) = data.cast::<PyBytes>() {
            b.as_bytes().to_vec()
        } else {
            data.extract::<PyBackedBytes>()
                .map_err(|_| {
                    PyTypeError::new_err(format!(
                        "data must be bytes or bytearray, got {}",
                        type_name(data)
                    ))
                })?
                .to_vec()
        };
        Ok(self.inner.offer(key, message))
    }

    /// Writes queued messages while the bound admits them; returns how many were completed. A
    /// blocking socket returns when the queue is empty; a non-blocking one as soon as it would
    /// block (see `retry_after` and `pending`).
    fn pump(&mut self, py: Python<'_>) -> PyResult<usize> {
        self.check(py)?;
        let inner = &mut self.inner;
        Ok(py.detach(|| inner.pump())?)
    }

    /// `offer(data, key)` then `pump()`; returns the messages completed by the pump.
    #[pyo3(signature = (data, key = None))]
    fn send(
        &mut self,
        py: Python<'_>,
        data: &Bound<'_, PyAny>,
        key: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<usize> {
        self.offer(data, key)?;
        self.pump(py)
    }

    /// Messages not yet fully written (queued, or partly accepted by the socket).
    #[getter]
    fn pending(&self) -> u64 {
        let s = self.inner.stats();
        s.queued as u64 + s.queue.popped.saturating_sub(s.messages_sent)
    }

    /// After `pump` stopped on the threshold: when to try again (`None`: wait for writability).
    #[getter]
    fn retry_after(&self) -> Option<Duration> {
        self.inner.retry_after()
    }

    /// The socket this sender writes to.
    #[getter]
    fn socket(&self, py: Python<'_>) -> Py<PyAny> {
        self.sock.clone_ref(py)
    }

    /// Counters: the socket side (`sender`), the queue (`pushed`, `merged`, `dropped_stale`,
    /// `popped`), `queued`, `messages_sent`, `pending`.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.inner.stats();
        let d = PyDict::new(py);
        d.set_item("sender", sender_stats(py, &s.sender)?)?;
        d.set_item("pushed", s.queue.pushed)?;
        d.set_item("merged", s.queue.merged)?;
        d.set_item("dropped_stale", s.queue.dropped_stale)?;
        d.set_item("popped", s.queue.popped)?;
        d.set_item("queued", s.queued)?;
        d.set_item("messages_sent", s.messages_sent)?;
        d.set_item("pending", self.pending())?;
        Ok(d)
    }
}

impl PyFreshSender {
    fn check(&self, py: Python<'_>) -> PyResult<()> {
        self.inner.sender().get_ref().check(self.sock.bind(py))
    }

    fn key(&mut self, key: Option<&Bound<'_, PyAny>>) -> PyResult<Key> {
        let Some(key) = key.filter(|k| !k.is_none()) else {
            self.next_unique += 1;
            return Ok(Key::Unique(self.next_unique));
        };
        if let Ok(s) = key.cast::<PyString>() {
            return Ok(Key::Str(s.to_str()?.to_owned()));
        }
        if key.is_instance_of::<PyInt>() {
            return key
                .extract()
                .map(Key::Int)
                .map_err(|_| PyValueError::new_err(format!("`key`: {key} does not fit 64 bits")));
        }
        if let Ok(b) = key.cast::<PyBytes>() {
            return Ok(Key::Bytes(b.as_bytes().to_vec()));
        }
        Err(PyTypeError::new_err(format!(
            "`key`: expected int, str, bytes or None, got {}",
            type_name(key)
        )))
    }
}
