//! Fuzzes the `struct tcp_info` and `struct tcp_bbr_info` parsers and what is derived from
//! them: none may panic, whatever the bytes, and a parsed struct must keep its length.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcptail_sock::cc_info::CcInfo;
use tcptail_sock::{BbrInfo, TcpInfo};

fuzz_target!(|data: &[u8]| {
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
});
