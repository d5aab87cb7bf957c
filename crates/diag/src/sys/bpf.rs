//! The `bpf(2)` calls of the socket iterator: load a tracing program for a BPF iterator,
//! link it, open iterator instances (in this or a named network namespace) and read them.
//!
//! `union bpf_attr` is passed as a zeroed, fixed-size byte block with the fields each command
//! reads written at their offsets (`include/uapi/linux/bpf.h`); the kernel accepts a shorter
//! attr than its own as long as the bytes it does not know are zero.

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_ITER_CREATE: libc::c_long = 33;
const BPF_PROG_TYPE_TRACING: u32 = 26;
const BPF_TRACE_ITER: u32 = 28;

/// `union bpf_attr` as bytes, 8-aligned.
#[repr(C, align(8))]
struct Attr([u8; 144]);

impl Attr {
    fn new() -> Attr {
        Attr([0; 144])
    }
    fn u32(&mut self, at: usize, v: u32) -> &mut Attr {
        self.0[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(&mut self, at: usize, v: u64) -> &mut Attr {
        self.0[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
}

fn bpf(cmd: libc::c_long, attr: &mut Attr) -> io::Result<OwnedFd> {
    loop {
        // SAFETY: `attr` is a valid, writable block of the size passed; every pointer written
        // into it (instructions, license, log buffer) points to memory the caller keeps alive
        // and correctly sized for the duration of the call.
        let rc = unsafe {
            libc::syscall(libc::SYS_bpf, cmd, attr.0.as_mut_ptr(), attr.0.len() as libc::c_uint)
        };
        if rc >= 0 {
            // SAFETY: on success these commands return a new file descriptor we now own.
            return Ok(unsafe { OwnedFd::from_raw_fd(rc as libc::c_int) });
        }
        let err = io::Error::last_os_error();
        // The verifier can be interrupted by a signal; the load is simply retried.
        if err.raw_os_error() != Some(libc::EAGAIN) && err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// Loads `insns` as a `BPF_PROG_TYPE_TRACING` program for the BPF iterator whose
/// `bpf_iter_<target>` function has BTF id `attach_btf_id`. `log` receives the verifier's log
/// (level 1 when `verbose`, else only on failure a retry fills it).
pub fn load_iter_program(
    insns: &[u64],
    attach_btf_id: u32,
    license: &std::ffi::CStr,
    log: &mut Vec<u8>,
) -> io::Result<OwnedFd> {
    let load = |log: Option<&mut Vec<u8>>| {
        let mut attr = Attr::new();
        attr.u32(0, BPF_PROG_TYPE_TRACING)
            .u32(4, insns.len() as u32)
            .u64(8, insns.as_ptr() as u64)
            .u64(16, license.as_ptr() as u64)
            .u32(68, BPF_TRACE_ITER)
            .u32(108, attach_btf_id);
        attr.0[48..48 + 11].copy_from_slice(b"tcptail_tcp");
        if let Some(log) = log {
            log.clear();
            log.resize(1 << 20, 0);
            attr.u32(24, 1).u32(28, log.len() as u32).u64(32, log.as_mut_ptr() as u64);
        }
        bpf(BPF_PROG_LOAD, &mut attr)
    };
    match load(None) {
        Ok(fd) => Ok(fd),
        Err(first) => {
            // Load again with the verifier's log so the error can say why.
            let again = load(Some(log));
            let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
            log.truncate(end);
            match again {
                Ok(fd) => Ok(fd),
                Err(_) => Err(first),
            }
        }
    }
}

/// Links a loaded iterator program (`BPF_LINK_CREATE` with `BPF_TRACE_ITER`).
pub fn link_iter(prog: &OwnedFd) -> io::Result<OwnedFd> {
    let mut attr = Attr::new();
    attr.u32(0, prog.as_raw_fd() as u32).u32(8, BPF_TRACE_ITER);
    bpf(BPF_LINK_CREATE, &mut attr)
}

/// Opens one iteration over the calling thread's network namespace (`BPF_ITER_CREATE`).
pub fn iter_create(link: &OwnedFd) -> io::Result<OwnedFd> {
    let mut attr = Attr::new();
    attr.u32(0, link.as_raw_fd() as u32);
    bpf(BPF_ITER_CREATE, &mut attr)
}

/// [`iter_create`] from a helper thread inside the network namespace bound at `path`: an
/// iterator walks the namespace of the thread that created it.
pub fn iter_create_in_netns(link: &OwnedFd, path: &Path) -> io::Result<OwnedFd> {
    let ns = File::open(path)?;
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                // SAFETY: `ns` is an open namespace file for the duration of the call; setns
                // only changes this helper thread's namespace, which exits right after.
                if unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
                    return Err(io::Error::last_os_error());
                }
                iter_create(link)
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("netns helper thread panicked")))
    })
}

/// Reads the next bytes of an iterator into `buf`: 0 at the end of the iteration.
pub fn read(fd: &OwnedFd, buf: &mut [u8]) -> io::Result<usize> {
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
