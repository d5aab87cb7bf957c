//! Functions over a Python socket's borrowed descriptor: apply-and-verify a profile, receive
//! with a QUICKACK policy, read `tcp_info` and BBR's `tcp_bbr_info`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict};
use tcptail_sock::QuickAck;
use tcptail_sock::recv::{RecvFlags, recv_with_policy_flags};

use crate::convert::to_py;
use crate::profile::resolve;
use crate::sys::with_fd;

/// Applies `profile` (a `Profile`, a built-in name or a TOML path) to `sock` and reads every
/// option back; returns the report as a dict (`profile`, `options`: one dict per option).
#[pyfunction]
pub(crate) fn apply_profile<'py>(
    sock: &Bound<'py, PyAny>,
    profile: &Bound<'py, PyAny>,
) -> PyResult<Bound<'py, PyAny>> {
    let profile = resolve(profile)?;
    let report = with_fd(sock, |fd| tcptail_sock::apply_profile(fd, &profile))?;
    to_py(sock.py(), &report)
}

/// One `recv` of at most `n` bytes, then `TCP_QUICKACK = 1` again when `quickack` is
/// `"rearm"` and bytes arrived. `dontwait` adds `MSG_DONTWAIT`. Releases the GIL.
#[pyfunction]
#[pyo3(signature = (sock, n, quickack = "rearm", dontwait = false))]
pub(crate) fn recv<'py>(
    sock: &Bound<'py, PyAny>,
    n: usize,
    quickack: &str,
    dontwait: bool,
) -> PyResult<Bound<'py, PyBytes>> {
    let policy: QuickAck =
        quickack.parse().map_err(|e: String| PyValueError::new_err(format!("`quickack`: {e}")))?;
    let flags = if dontwait { RecvFlags::DONT_WAIT } else { RecvFlags::NONE };
    let mut buf = vec![0u8; n];
    let got = with_fd(sock, |fd| recv_with_policy_flags(fd, &mut buf, policy, flags))??;
    buf.truncate(got);
    Ok(PyBytes::new(sock.py(), &buf))
}

/// `struct tcp_info` as a dict of fields named with their units (`rtt_us`, `snd_mss_bytes`);
/// fields this kernel does not return are `None`.
#[pyfunction]
pub(crate) fn tcp_info<'py>(sock: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyAny>> {
    let info = with_fd(sock, tcptail_sock::tcp_info::tcp_info)??;
    let dict = to_py(sock.py(), &info)?;
    let estimate = info.send_queue_delay_estimate();
    dict.set_item("send_queue_delay", estimate)?;
    Ok(dict)
}

/// BBR's model (`bw_bytes_per_sec`, `min_rtt_us`, gains, inferred `phase`), or `None` when the
/// socket's congestion control is not BBR.
#[pyfunction]
pub(crate) fn bbr_info<'py>(sock: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Some(info) = with_fd(sock, tcptail_sock::cc_info::bbr_info)?? else {
        return Ok(None);
    };
    let py = sock.py();
    let dict = PyDict::new(py);
    dict.set_item("bw_bytes_per_sec", info.bw_bytes_per_sec)?;
    dict.set_item("min_rtt_us", (info.min_rtt_us != u32::MAX).then_some(info.min_rtt_us))?;
    dict.set_item("pacing_gain", info.pacing_gain_ratio())?;
    dict.set_item("cwnd_gain", info.cwnd_gain_ratio())?;
    dict.set_item("phase", info.phase().as_str())?;
    Ok(Some(dict))
}

/// The congestion control the socket uses (`TCP_CONGESTION` read back).
#[pyfunction]
pub(crate) fn congestion_control(sock: &Bound<'_, PyAny>) -> PyResult<String> {
    Ok(with_fd(sock, tcptail_sock::apply::congestion_control)??)
}
