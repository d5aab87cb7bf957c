use proptest::prelude::*;

use super::*;

const MS: Duration = Duration::from_millis(1);

fn conflating(max_age: Option<Duration>) -> FreshnessQueue<u8, u32> {
    FreshnessQueue::new(FreshnessPolicy { conflate: true, max_age })
}

#[test]
fn newer_message_replaces_older_in_place() {
    let mut q = conflating(None);
    assert!(!q.push(Duration::ZERO, 1, 10));
    assert!(!q.push(MS, 2, 20));
    assert!(q.push(2 * MS, 1, 11));
    assert_eq!(q.len(), 2);
    let first = q.pop(3 * MS).unwrap();
    assert_eq!((first.key, first.message, first.enqueued_at, first.merged), (1, 11, 2 * MS, 1));
    assert_eq!(q.pop(3 * MS).unwrap().message, 20);
    // Once sent, a key queues anew.
    assert!(!q.push(4 * MS, 1, 12));
    assert_eq!(q.stats(), FreshnessStats { pushed: 4, merged: 1, dropped_stale: 0, popped: 2 });
}

#[test]
fn without_conflation_every_message_is_kept() {
    let mut q: FreshnessQueue<u8, u32> = FreshnessQueue::new(FreshnessPolicy::default());
    q.push(Duration::ZERO, 1, 1);
    q.push(Duration::ZERO, 1, 2);
    assert_eq!(q.len(), 2);
    assert_eq!(q.pop(100 * MS).unwrap().message, 1);
}

#[test]
fn stale_messages_are_dropped_and_counted() {
    let mut q: FreshnessQueue<u8, u32> =
        FreshnessQueue::new(FreshnessPolicy { conflate: false, max_age: Some(10 * MS) });
    q.push(Duration::ZERO, 1, 1);
    q.push(5 * MS, 2, 2);
    q.push(12 * MS, 3, 3);
    let q1 = q.pop(12 * MS).unwrap();
    assert_eq!(q1.message, 2, "message 1 is 12 ms old");
    assert_eq!(q.stats().dropped_stale, 1);
    assert_eq!(q.expire(30 * MS), 1);
    assert!(q.is_empty() && q.pop(30 * MS).is_none());
}

#[test]
fn expire_keeps_the_conflation_index_consistent() {
    let mut q = conflating(Some(10 * MS));
    q.push(Duration::ZERO, 1, 1);
    q.push(8 * MS, 2, 2);
    assert_eq!(q.expire(11 * MS), 1);
    assert!(!q.push(11 * MS, 1, 3), "key 1 was dropped: queued anew");
    assert!(q.push(12 * MS, 2, 4));
    assert_eq!(q.pop(12 * MS).unwrap().message, 4);
    assert_eq!(q.pop(12 * MS).unwrap().message, 3);
}

#[derive(Debug, Clone)]
enum Op {
    Push(u8, u64),
    Pop(u64),
    Expire(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..4, 0u64..5_000).prop_map(|(k, dt)| Op::Push(k, dt)),
        (0u64..5_000).prop_map(Op::Pop),
        (0u64..5_000).prop_map(Op::Expire),
    ]
}

proptest! {
    #[test]
    fn accounting_and_freshness_hold(
        ops in proptest::collection::vec(op(), 0..200),
        conflate in any::<bool>(),
        max_age_us in proptest::option::of(0u64..10_000),
    ) {
        let max_age = max_age_us.map(Duration::from_micros);
        let mut q: FreshnessQueue<u8, u64> = FreshnessQueue::new(FreshnessPolicy { conflate, max_age });
        let mut now = Duration::ZERO;
        for op in ops {
            match op {
                Op::Push(k, dt) => { now += Duration::from_micros(dt); q.push(now, k, now.as_nanos() as u64); }
                Op::Pop(dt) => {
                    now += Duration::from_micros(dt);
                    if let Some(m) = q.pop(now) {
                        prop_assert!(max_age.is_none_or(|a| now - m.enqueued_at <= a));
                        prop_assert_eq!(m.message, m.enqueued_at.as_nanos() as u64, "the latest value");
                    }
                }
                Op::Expire(dt) => { now += Duration::from_micros(dt); q.expire(now); }
            }
            let s = q.stats();
            prop_assert_eq!(s.pushed, s.merged + s.dropped_stale + s.popped + q.len() as u64);
            if conflate {
                prop_assert!(q.len() <= 4, "at most one message per key");
            }
        }
    }
}
