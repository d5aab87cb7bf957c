//! The `bpf(2)` calls themselves: `union bpf_attr` passed as a zeroed, fixed-size byte block
//! with the fields each command reads written at their offsets (`include/uapi/linux/bpf.h`);
//! the kernel accepts a shorter attr than its own as long as the bytes it does not know are
//! zero. The only `unsafe` code of this crate.

#![allow(unsafe_code)]

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::path::Path;

pub(crate) const BPF_MAP_CREATE: libc::c_long = 0;
pub(crate) const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
pub(crate) const BPF_PROG_LOAD: libc::c_long = 5;
pub(crate) const BPF_BTF_LOAD: libc::c_long = 18;
pub(crate) const BPF_LINK_CREATE: libc::c_long = 28;
pub(crate) const BPF_ITER_CREATE: libc::c_long = 33;

/// `union bpf_attr` as bytes, 8-aligned.
#[repr(C, align(8))]
pub(crate) struct Attr(pub(crate) [u8; 144]);

impl Attr {
    pub(crate) fn new() -> Attr {
        Attr([0; 144])
    }
    pub(crate) fn u32(&mut self, at: usize, v: u32) -> &mut Attr {
        self.0[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    pub(crate) fn u64(&mut self, at: usize, v: u64) -> &mut Attr {
        self.0[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
}

/// One `bpf(cmd, attr)` call; the non-negative result. Every pointer the caller wrote into
/// `attr` must point to memory alive and correctly sized for the call (the callers in
/// [`crate`] keep that promise: slices they borrow, lengths they write beside them).
pub(crate) fn bpf(cmd: libc::c_long, attr: &mut Attr) -> io::Result<libc::c_long> {
    // SAFETY: `attr` is a valid, writable block of the size passed; every pointer written
    // into it (instructions, license, log buffer, key, value) points to memory the caller
    // keeps alive and correctly sized for the duration of the call.
    let rc = unsafe {
        libc::syscall(libc::SYS_bpf, cmd, attr.0.as_mut_ptr(), attr.0.len() as libc::c_uint)
    };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(rc) }
}

/// [`bpf`] for a command that returns a new descriptor.
pub(crate) fn bpf_fd(cmd: libc::c_long, attr: &mut Attr) -> io::Result<OwnedFd> {
    let rc = bpf(cmd, attr)?;
    // SAFETY: on success these commands return a new file descriptor we now own.
    Ok(unsafe { OwnedFd::from_raw_fd(rc as libc::c_int) })
}

/// Runs `f` on a helper thread inside the network namespace bound at `path` (an iterator
/// walks the namespace of the thread that created it); the calling thread never moves.
pub(crate) fn in_netns<T: Send>(
    path: &Path,
    f: impl FnOnce() -> io::Result<T> + Send,
) -> io::Result<T> {
    let ns = File::open(path)?;
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                // SAFETY: `ns` is an open namespace file for the duration of the call; setns
                // only changes this helper thread's namespace, which exits right after.
                if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    return Err(io::Error::last_os_error());
                }
                f()
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("netns helper thread panicked")))
    })
}

/// Reads the next bytes of `fd` into `buf`, retrying on EINTR: 0 at the end.
pub(crate) fn read(fd: BorrowedFd<'_>, buf: &mut [u8]) -> io::Result<usize> {
    loop {
        // SAFETY: `buf` is valid for writes of `buf.len()` bytes.
        let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
        if n >= 0 {
            return Ok(n as usize);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}
