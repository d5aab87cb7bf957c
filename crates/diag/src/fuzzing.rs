//! The properties the fuzz targets in `fuzz/` check, here so that `cargo fuzz` and the replay
//! of the checked-in seeds and crash regressions in the ordinary `cargo test`
//! (`crates/cli/tests/fuzz_regressions.rs`) run the same code. Compiled only with the
//! `fuzzing` feature (the fuzz crate and that test turn it on).
//!
//! Each function takes the fuzzer's bytes and panics when a property fails.

use crate::Connection;
use crate::wire::{self, Message};

/// `fuzz_targets/sock_diag.rs`: the sock_diag reply parser (netlink framing, `inet_diag_msg`,
/// attributes) and the derived values of every socket it yields never panic, and the
/// iterator terminates.
pub fn sock_diag(data: &[u8]) {
    let mut n = 0usize;
    for m in wire::messages(data) {
        n += 1;
        assert!(n <= data.len() / 16 + 1, "more messages than headers fit");
        if let Ok(Message::Socket(s)) = m {
            let c = Connection::from_socket(&s);
            let _ = (c.queue_delay_secs(), c.rtt_secs(), c.retrans());
        }
    }
    if let Ok(s) = wire::parse_socket(data) {
        let _ = Connection::from_socket(&s);
    }
}
