//! Fuzzes the sock_diag reply parser (netlink framing, `inet_diag_msg`, attributes) and the
//! derived values of every socket it yields: nothing may panic, whatever the bytes, and the
//! iterator must terminate.
//!
//! The checks live in `tcptail_diag::fuzzing::sock_diag` so that `cargo test`
//! replays `fuzz/seeds/sock_diag` and `fuzz/regressions/sock_diag` through exactly this code.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tcptail_diag::fuzzing::sock_diag(data));
