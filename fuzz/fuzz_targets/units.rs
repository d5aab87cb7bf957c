//! Fuzzes every human-unit parser: none may panic, whatever the input.
//!
//! The checks live in `tcptail_units::fuzzing::parsers` so that `cargo test`
//! replays `fuzz/seeds/units` and `fuzz/regressions/units` through exactly this code.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tcptail_units::fuzzing::parsers(data));
