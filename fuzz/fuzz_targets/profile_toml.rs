//! Fuzzes the profile-file loader: no input may panic it, and whatever it accepts must pass
//! the same semantic checks `apply_profile` runs.
//!
//! The checks live in `tcptail_sock::fuzzing::profile_toml` so that `cargo test`
//! replays `fuzz/seeds/profile_toml` and `fuzz/regressions/profile_toml` through exactly this code.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tcptail_sock::fuzzing::profile_toml(data));
