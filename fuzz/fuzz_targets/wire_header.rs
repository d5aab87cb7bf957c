//! Fuzzes the bench wire protocol's readers: the header decoder, the blocking frame reader and
//! the handshake readers over arbitrary bytes, and the sans-IO request parser fed in arbitrary
//! chunks. None may panic; whatever the decoder accepts must re-encode to the same bytes; the
//! parser must never claim more bytes than it was given.
//!
//! The checks live in `tcptail_bench::fuzzing::wire_header` so that `cargo test`
//! replays `fuzz/seeds/wire_header` and `fuzz/regressions/wire_header` through exactly this code.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tcptail_bench::fuzzing::wire_header(data));
