//! Fuzzes the sock_diag reply parser (netlink framing, `inet_diag_msg`, attributes) and the
//! derived values of every socket it yields: nothing may panic, whatever the bytes, and the
//! iterator must terminate.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcptail_diag::Connection;
use tcptail_diag::wire::{self, Message};

fuzz_target!(|data: &[u8]| {
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
});
