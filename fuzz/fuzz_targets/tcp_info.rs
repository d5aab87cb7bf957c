//! Fuzzes the `struct tcp_info` and `struct tcp_bbr_info` parsers and what is derived from
//! them: none may panic, whatever the bytes, and a parsed struct must keep its length.
//!
//! The checks live in `tcptail_sock::fuzzing::tcp_info` so that `cargo test`
//! replays `fuzz/seeds/tcp_info` and `fuzz/regressions/tcp_info` through exactly this code.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tcptail_sock::fuzzing::tcp_info(data));
