//! Fuzzes the profile-file loader: no input may panic it, and whatever it accepts must pass
//! the same semantic checks `apply_profile` runs.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;
use tcptail_sock::Profile;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        match Profile::from_toml(text, Path::new("fuzz.toml")) {
            Ok(profile) => assert!(profile.validate().is_ok(), "accepted an invalid profile"),
            Err(e) => {
                let _ = e.to_string();
            }
        }
    }
});
