//! The properties the fuzz targets in `fuzz/` check, here so that `cargo fuzz` and the replay
//! of the checked-in seeds and crash regressions in the ordinary `cargo test`
//! (`crates/cli/tests/fuzz_regressions.rs`) run the same code. Compiled only with the
//! `fuzzing` feature (the fuzz crate and that test turn it on).
//!
//! Each function takes the fuzzer's bytes and panics when a property fails.

use std::time::Duration;

use crate::{
    DeliveryTrace, Direction, DirectionSpec, Discipline, Nanos, Packet, QueueLimit, QueueSpec, Rate,
};

/// `fuzz_targets/mahimahi_trace.rs`: the Mahimahi trace parser never panics, and every trace
/// it accepts is valid, prints back to the same trace, and drives a link without panicking.
pub fn mahimahi_trace(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(trace) = DeliveryTrace::parse(text, "fuzz") else { return };
    let stamps = trace.timestamps_ms();
    assert!(!stamps.is_empty());
    assert!(stamps.windows(2).all(|w| w[0] <= w[1]));
    assert!(*stamps.last().unwrap() > 0);
    assert_eq!(DeliveryTrace::parse(&trace.to_string(), "fuzz").unwrap(), trace);

    let spec = DirectionSpec {
        rate: Rate::Trace(trace),
        delay: Duration::from_millis(1),
        jitter: None,
        loss: None,
        queue: QueueSpec { limit: QueueLimit::Packets(64), discipline: Discipline::codel() },
        ecn_blackhole: None,
        reorder: None,
    };
    let mut dir = Direction::<()>::new(spec, 0);
    let mut released = 0;
    for i in 0..200u64 {
        let now = Nanos::from_micros(i * 250);
        let _ = dir.enqueue(now, Packet { id: i, len: 1 + (i as u32 * 97) % 1500, payload: () });
        while dir.poll_release(now).is_some() {
            released += 1;
        }
        assert!(dir.next_wakeup().is_none_or(|w| w > now));
    }
    assert!(released <= 200);
}
