//! The properties the fuzz targets in `fuzz/` check, here so that `cargo fuzz` and the replay
//! of the checked-in seeds and crash regressions in the ordinary `cargo test`
//! (`crates/cli/tests/fuzz_regressions.rs`) run the same code. Compiled only with the
//! `fuzzing` feature (the fuzz crate and that test turn it on).
//!
//! Each function takes the fuzzer's bytes and panics when a property fails.

/// `fuzz_targets/units.rs`: every human-unit parser returns, whatever the input.
pub fn parsers(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = text.parse::<crate::ByteSize>();
        let _ = text.parse::<crate::BitRate>();
        let _ = text.parse::<crate::Percent>();
        let _ = text.parse::<crate::MessageRate>();
        let _ = text.parse::<crate::Bdp>();
        let _ = crate::parse_duration(text);
    }
}
