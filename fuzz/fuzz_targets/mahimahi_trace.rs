//! Fuzzes the Mahimahi trace parser: it must never panic, and every trace it accepts must be
//! valid, print back to the same trace, and drive a link without panicking.
//!
//! The checks live in `tcptail_emu::fuzzing::mahimahi_trace` so that `cargo test`
//! replays `fuzz/seeds/mahimahi_trace` and `fuzz/regressions/mahimahi_trace` through exactly
//! this code.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tcptail_emu::fuzzing::mahimahi_trace(data));
