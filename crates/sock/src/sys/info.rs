//! `getsockopt(TCP_INFO)`, `getsockopt(TCP_CC_INFO)` and `getsockopt(TCP_CONGESTION)`: the
//! only `libc` calls behind [`crate::tcp_info`] and [`crate::cc_info`].
//!
//! The `*_raw` functions copy the kernel's bytes into a caller's buffer and return how many the
//! kernel wrote; they never allocate, so they are fit for a benchmark's hot path around every
//! request. The high-level [`tcp_info`], [`bbr_info`] and [`cc_info`] read into a stack buffer
//! and hand the bytes to the pure parsers ([`TcpInfo::parse`], [`BbrInfo::parse`]); only
//! [`cc_info`] allocates (the algorithm's name).
//!
//! Invariants: a returned length never exceeds the buffer given; the buffer is only written by
//! the kernel; a non-TCP descriptor gives the kernel's error (`EOPNOTSUPP`, `ENOPROTOOPT`,
//! `ENOTSOCK`) unchanged. Nothing here sets an option or caches a result.
//!
//! What the kernel returns for `TCP_CC_INFO` (checked on Linux 6.18): BBR fills a 20-byte
//! `struct tcp_bbr_info`; Vegas and DCTCP fill 16-byte structs of their own; CUBIC and Reno
//! export nothing and the call succeeds with **0 bytes**. [`bbr_info`] therefore needs no extra
//! `TCP_CONGESTION` call to tell BBR apart: only BBR returns 20 bytes or more.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use crate::cc_info::{BbrInfo, CcInfo};
use crate::tcp_info::TcpInfo;

/// Size of the stack buffer [`tcp_info`] reads into. Larger than the 280-byte `struct tcp_info`
/// of Linux 6.18 so that [`TcpInfo::len`] shows when a newer kernel returns more.
pub const TCP_INFO_BUF_LEN: usize = 512;

/// Size of the stack buffer [`bbr_info`] and [`cc_info`] read `TCP_CC_INFO` into
/// (`union tcp_cc_info` is 20 bytes on Linux 6.18).
pub const CC_INFO_BUF_LEN: usize = 64;

/// `TCP_CA_NAME_MAX`: the longest congestion-control name, NUL padding included.
const CA_NAME_MAX: usize = 16;

/// `getsockopt(fd, level, name)` into `buf`; returns the number of bytes the kernel wrote.
fn getsockopt_into(
    fd: BorrowedFd<'_>,
    level: libc::c_int,
    name: libc::c_int,
    buf: &mut [u8],
) -> io::Result<usize> {
    let mut len = libc::socklen_t::try_from(buf.len()).unwrap_or(libc::socklen_t::MAX);
    // SAFETY: `buf` is valid for writes of `len` bytes (`len <= buf.len()`) for the duration of
    // the call, `len` is a valid, initialised `socklen_t` the kernel may update, and `fd` is a
    // descriptor kept open by the `BorrowedFd` borrow. getsockopt writes at most `len` bytes.
    let rc =
        unsafe { libc::getsockopt(fd.as_raw_fd(), level, name, buf.as_mut_ptr().cast(), &mut len) };
    if rc == -1 {
        return Err(io::Error::last_os_error());
    }
    // The kernel never reports more than it was given room for; clamp anyway so a caller's
    // slice `&buf[..n]` can never be out of bounds.
    Ok(usize::try_from(len).map_or(buf.len(), |n| n.min(buf.len())))
}

/// Copies the socket's `struct tcp_info` into `buf` and returns how many bytes the kernel wrote:
/// `min(buf.len(), sizeof(struct tcp_info))` of the running kernel (280 on Linux 6.18).
///
/// Never allocates. Parse the result with [`TcpInfo::parse`]`(&buf[..n])`.
pub fn tcp_info_raw(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    getsockopt_into(fd, libc::IPPROTO_TCP, libc::TCP_INFO, buf)
}

/// Copies the congestion control's `TCP_CC_INFO` into `buf` and returns how many bytes the
/// kernel wrote: 20 for BBR, 16 for Vegas and DCTCP, 0 for algorithms that export nothing
/// (CUBIC, Reno).
///
/// Never allocates.
pub fn cc_info_raw(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    getsockopt_into(fd, libc::IPPROTO_TCP, libc::TCP_CC_INFO, buf)
}

/// Copies the socket's congestion-control name (`TCP_CONGESTION`, NUL padded) into `buf` and
/// returns the name's length without the padding.
fn congestion_name_raw(fd: BorrowedFd<'_>, buf: &mut [u8; CA_NAME_MAX]) -> io::Result<usize> {
    let n = getsockopt_into(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION, buf)?;
    Ok(buf[..n].iter().position(|&b| b == 0).unwrap_or(n))
}

/// Reads and parses the socket's `struct tcp_info`.
///
/// Fields the running kernel does not have are `None`. A reply shorter than the base struct
/// (which no Linux kernel sends) is reported as [`io::ErrorKind::InvalidData`].
pub fn tcp_info(fd: BorrowedFd<'_>) -> io::Result<TcpInfo> {
    let mut buf = [0u8; TCP_INFO_BUF_LEN];
    let n = tcp_info_raw(fd, &mut buf)?;
    TcpInfo::parse(&buf[..n]).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Reads BBR's model (`struct tcp_bbr_info`) from the socket.
///
/// `Ok(None)` when the socket's congestion control is not BBR: the kernel then returns fewer
/// than 20 bytes (0 for CUBIC and Reno, 16 for Vegas and DCTCP).
pub fn bbr_info(fd: BorrowedFd<'_>) -> io::Result<Option<BbrInfo>> {
    let mut buf = [0u8; CC_INFO_BUF_LEN];
    let n = cc_info_raw(fd, &mut buf)?;
    Ok(BbrInfo::parse(&buf[..n]))
}

/// Reads the socket's congestion-control name and, for BBR, its model.
///
/// Two `getsockopt` calls and one small allocation (the name); use [`bbr_info`] on a hot path.
pub fn cc_info(fd: BorrowedFd<'_>) -> io::Result<CcInfo> {
    let mut name = [0u8; CA_NAME_MAX];
    let name_len = congestion_name_raw(fd, &mut name)?;
    let mut buf = [0u8; CC_INFO_BUF_LEN];
    let n = cc_info_raw(fd, &mut buf)?;
    Ok(CcInfo::from_parts(&String::from_utf8_lossy(&name[..name_len]), &buf[..n]))
}
