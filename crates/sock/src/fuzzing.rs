//! The properties the fuzz targets in `fuzz/` check, here so that `cargo fuzz` and the replay
//! of the checked-in seeds and crash regressions in the ordinary `cargo test`
//! (`crates/cli/tests/fuzz_regressions.rs`) run the same code. Compiled only with the
//! `fuzzing` feature (the fuzz crate and that test turn it on).
//!
//! Each function takes the fuzzer's bytes and panics when a property fails.

use std::path::Path;

use crate::cc_info::CcInfo;
use crate::{BbrInfo, Profile, TcpInfo};

/// `fuzz_targets/profile_toml.rs`: the profile-file loader never panics, and whatever it
/// accepts passes the same semantic checks `apply_profile` runs.
pub fn profile_toml(data: &[u8]) {
    if let Ok(text) = std::str::from_utf8(data) {
        match Profile::from_toml(text, Path::new("fuzz.toml")) {
            Ok(profile) => assert!(profile.validate().is_ok(), "accepted an invalid profile"),
            Err(e) => {
                let _ = e.to_string();
            }
        }
    }
}

/// `fuzz_targets/tcp_info.rs`: the `struct tcp_info` and `struct tcp_bbr_info` parsers and
/// what is derived from them never panic, and a parsed struct keeps its length.
pub fn tcp_info(data: &[u8]) {
    match TcpInfo::parse(data) {
        Ok(info) => {
            assert_eq!(info.len, data.len());
            let _ = info.send_queue_delay();
            let _ = (info.state.to_string(), info.ca_state.to_string(), info.rtt());
        }
        Err(_) => assert!(data.len() < TcpInfo::BASE_LEN),
    }
    if let Some(bbr) = BbrInfo::parse(data) {
        let _ = (bbr.phase().to_string(), bbr.min_rtt(), bbr.pacing_gain_ratio());
    }
    let _ = CcInfo::from_parts("bbr", data);
}
