//! `libtcptail_preload.so`: applies a tcptail socket profile to every TCP socket of an
//! unmodified, dynamically linked program, loaded with `LD_PRELOAD` (what `tcptail run` does).
//!
//! The library interposes `socket`, `connect`, `accept`, `accept4`, `close`, the descriptor
//! calls that move or close sockets (`dup`, `dup2`, `dup3`, `close_range`, `closefrom`) and the
//! receive calls `recv`, `recvfrom`, `recvmsg`, `recvmmsg`, `read` and `readv`, plus glibc's
//! `_FORTIFY_SOURCE` forms `__recv_chk`, `__recvfrom_chk` and `__read_chk` (what a program
//! built with `-D_FORTIFY_SOURCE` calls instead of `recv`, `recvfrom` and `read` when the
//! buffer's size is known at compile time), each forwarding to the real libc function found
//! with `dlsym(RTLD_NEXT, ..)`. The profile is the same [`tcptail_sock::Profile`] the rest
//! of tcptail uses, applied and verified by the same [`tcptail_sock::apply_profile`]:
//!
//! - **`socket()`** of an `AF_INET`/`AF_INET6` `SOCK_STREAM` (TCP) socket: the whole profile,
//!   before the program connects or listens, so buffer sizes shape the window scale offered in
//!   the SYN and congestion control is in place from the first segment.
//! - **`connect()`** (success or `EINPROGRESS`): `TCP_QUICKACK` again when the profile's
//!   policy is `once` or `rearm`; a TCP socket this library did not see created (inherited,
//!   received over a Unix socket) gets the whole profile here instead.
//! - **`accept()`/`accept4()`**: the whole profile on the accepted socket (the listener already
//!   had it, so the accepted socket inherits the right window).
//! - **receives** that return bytes on a tracked socket, when the policy is `rearm`: one
//!   `setsockopt(TCP_QUICKACK, 1)`, the kernel having cleared it.
//!
//! Configuration comes from the environment, read once at the first TCP socket ([`config`]):
//! `TCPTAIL_PROFILE` (a built-in name or a TOML file) and `TCPTAIL_LOG=1`, which logs one line
//! per socket to stderr with what was applied (requested vs actual, capped, unsupported). A
//! profile that does not load is reported in one line on stderr, always, and the library then
//! passes everything through untouched.
//!
//! Invariants, the reason this crate exists as its own piece:
//!
//! - **It never breaks the program.** The real call always runs first and its return value is
//!   returned unchanged; `errno` is saved before and restored after the library's own work; no
//!   panic crosses the C boundary (`catch_unwind` at every hook); a thread-local guard makes
//!   calls the library itself makes (reading a profile file, `/proc/sys`) go straight to libc.
//!   A failed option is a row in the log, never an error for the program.
//! - **The receive path is cheap**: one atomic load in a fixed table indexed by fd
//!   ([`table`]), plus one `setsockopt` when the socket is tracked and the policy is `rearm`.
//!   Receives on anything else (files, pipes, UDP, Unix sockets) cost the load only.
//! - **Non-TCP sockets are untouched**: UDP, Unix, raw, SCTP and MPTCP sockets never see a
//!   `setsockopt` from here.
//! - **Silent unless asked**: a panic inside the library is caught at the hook, and the
//!   library's panic hook prints nothing into the program's stderr unless `TCPTAIL_LOG` is on
//!   (then one line).
//! - **Safe across `fork`**: no lock a `fork` on another thread could leave held (the
//!   configuration is published lock-free, log lines are single `write(2)`s, the fd table is
//!   atomics), so a child never waits for a thread it does not have.
//! - **Inert in setuid programs**: loaded into a secure-execution process (`AT_SECURE`), it
//!   prints one warning and does nothing else (the environment belongs to the caller, not to
//!   the program's owner).
//! - **Raw fallbacks**: a hook that cannot call the real function (this thread is inside
//!   `dlsym`) makes the system call itself ([`sys::raw`], tested against the kernel).
//!
//! What it cannot reach: statically linked programs and Go programs (which make system calls
//! directly), io_uring and other paths that do not call these libc functions, sockets whose fd
//! is 65536 or more (profile applied, no re-arm), sockets duplicated with `fcntl(F_DUPFD)`
//! (no re-arm on the copy), and a signal handler that creates sockets (applying allocates). Receive paths
//! that do not re-arm QUICKACK: `preadv2` (which can read a socket with offset -1), `splice`
//! from a socket, stdio streams over a socket (`fdopen` then `fread`/`fgets`: glibc reads
//! through its internal `read`, which no preload can interpose), `syscall(SYS_recvfrom, ..)`
//! and io_uring; `pread`/`preadv` fail on sockets (`ESPIPE`) and need no hook. For those,
//! watch connections from outside with `tcptail exporter` and check the host with
//! `tcptail audit`. Options the program sets itself after `socket()` override the profile's.
//!
//! Do not link this crate into a binary: its hooks are `#[no_mangle]` and would replace libc's
//! `read` and `socket` in that binary. The hooks are left out of its own unit tests.

#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod engine;
pub mod log;
pub mod sys;
pub mod table;

pub use config::{LIB_FILE_NAME, LOG_ENV, PROFILE_ENV};
