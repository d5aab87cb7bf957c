//! Fuzzes every human-unit parser: none may panic, whatever the input.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = text.parse::<tcptail_units::ByteSize>();
        let _ = text.parse::<tcptail_units::BitRate>();
        let _ = text.parse::<tcptail_units::Percent>();
        let _ = text.parse::<tcptail_units::MessageRate>();
        let _ = text.parse::<tcptail_units::Bdp>();
        let _ = tcptail_units::parse_duration(text);
    }
});
