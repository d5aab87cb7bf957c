//! Explicit reordering: chosen packets are held back by the gap and overtaken; everything else
//! keeps its order, and jitter alone never reorders.

use std::time::Duration;

use tcptail_emu::{Direction, Jitter, Nanos, Reorder};

use crate::util::{Lateness, cbr, constant, drive};

#[test]
fn held_packets_leave_one_gap_late_and_are_overtaken() {
    let mut spec = constant(100_000_000);
    spec.delay = Duration::from_millis(10);
    spec.reorder = Some(Reorder { p: 0.05, gap: Duration::from_millis(2) });
    // 1500 B every 200 us: 60 Mbit/s, no queue; in order, packet i is due at 10.12 ms + 0.2 i.
    let arrivals = cbr(Nanos::ZERO, Duration::from_micros(200), 20_000, 1500);
    let mut dir = Direction::<u64>::new(spec, 9);
    let run = drive(&mut dir, &arrivals, Lateness::None, Nanos::MAX);
    assert_eq!(run.released.len(), 20_000, "nothing lost");
    let in_order_due = |id: u64| Nanos::from_micros(200 * id + 120) + Duration::from_millis(10);
    let mut held = 0;
    for (info, _) in &run.released {
        let due = in_order_due(info.id);
        if info.scheduled == due + Duration::from_millis(2) {
            held += 1;
        } else {
            assert_eq!(info.scheduled, due, "packet {} neither in order nor held", info.id);
        }
    }
    // 5 % of 20 000, within 4 standard deviations (sqrt(950) = 31).
    assert!((876..=1124).contains(&held), "{held} held");
    // Every held packet is overtaken by the ten that follow it (2 ms / 200 us), and the
    // packets that were not held keep their order.
    let mut position = vec![0; 20_000];
    for (at, (info, _)) in run.released.iter().enumerate() {
        position[info.id as usize] = at;
    }
    let is_held = |id: u64| run.released[position[id as usize]].0.scheduled != in_order_due(id);
    for id in (0..19_990).filter(|&id| is_held(id)) {
        for next in (id + 1..id + 10).filter(|&n| !is_held(n)) {
            assert!(position[next as usize] < position[id as usize], "{next} overtakes {id}");
        }
    }
    let unheld: Vec<u64> = run
        .released
        .iter()
        .filter(|(i, _)| i.scheduled == in_order_due(i.id))
        .map(|(i, _)| i.id)
        .collect();
    assert!(unheld.windows(2).all(|w| w[0] < w[1]));
}

#[test]
fn no_reordering_without_the_option_even_with_heavy_jitter() {
    for jitter in [
        Jitter::Uniform { max: Duration::from_millis(5) },
        Jitter::Pareto { sigma: Duration::from_millis(5) },
        Jitter::ParetoNormal { sigma: Duration::from_millis(5) },
    ] {
        let mut spec = constant(100_000_000);
        spec.delay = Duration::from_millis(10);
        spec.jitter = Some(jitter);
        let arrivals = cbr(Nanos::ZERO, Duration::from_micros(200), 5_000, 1500);
        let mut dir = Direction::<u64>::new(spec, 4);
        let run = drive(&mut dir, &arrivals, Lateness::None, Nanos::MAX);
        let order: Vec<u64> = run.released.iter().map(|(i, _)| i.id).collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{jitter:?} reordered");
        assert_eq!(order.len(), 5_000);
    }
}

#[test]
fn reordering_is_deterministic_for_a_seed() {
    let run = |seed| {
        let mut spec = constant(50_000_000);
        spec.delay = Duration::from_millis(5);
        spec.jitter = Some(Jitter::Normal { sigma: Duration::from_millis(1) });
        spec.reorder = Some(Reorder { p: 0.1, gap: Duration::from_millis(1) });
        let arrivals = cbr(Nanos::ZERO, Duration::from_micros(300), 3_000, 1200);
        let mut dir = Direction::<u64>::new(spec, seed);
        drive(&mut dir, &arrivals, Lateness::None, Nanos::MAX).infos()
    };
    assert_eq!(run(5), run(5));
    assert_ne!(run(5), run(6));
}
