//! Loss models: rates within statistical bounds, bursts of the configured length, seeded.

use std::time::Duration;

use tcptail_emu::{Admission, Direction, DropReason, LossModel, Nanos, Packet};

use crate::util::{assert_close, constant};

/// Loss pattern (true = lost) of `n` packets spaced far enough apart that the queue never fills.
fn pattern(loss: LossModel, seed: u64, n: usize) -> Vec<bool> {
    let mut spec = constant(1_000_000_000);
    spec.loss = Some(loss);
    let mut dir = Direction::<u64>::new(spec, seed);
    (0..n)
        .map(|i| {
            let now = Nanos::ZERO + Duration::from_micros(20) * i as u32;
            while dir.poll_release(now).is_some() {}
            match dir.enqueue(now, Packet { id: i as u64, len: 1500, payload: 0 }) {
                Admission::Queued => false,
                Admission::Dropped { reason, .. } => {
                    assert_eq!(reason, DropReason::Loss);
                    true
                }
            }
        })
        .collect()
}

fn bursts(pattern: &[bool]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut run = 0;
    for &lost in pattern {
        if lost {
            run += 1;
        } else if run > 0 {
            out.push(run);
            run = 0;
        }
    }
    out
}

#[test]
fn bernoulli_rate_is_within_statistical_bounds() {
    let n = 100_000;
    for seed in [1, 2, 3] {
        let lost =
            pattern(LossModel::Bernoulli { p: 0.01 }, seed, n).iter().filter(|&&l| l).count();
        // Mean 1000, sigma = sqrt(n p (1-p)) = 31.5: allow 5 sigma.
        assert!((1000 - 158..=1000 + 158).contains(&lost), "seed {seed}: {lost}");
    }
}

#[test]
fn loss_is_reproducible_and_seed_dependent() {
    let model = LossModel::Bernoulli { p: 0.05 };
    assert_eq!(pattern(model, 42, 10_000), pattern(model, 42, 10_000));
    assert_ne!(pattern(model, 42, 10_000), pattern(model, 43, 10_000));
}

#[test]
fn gilbert_elliott_bursts_have_the_configured_mean_length() {
    // p = 1 %, r = 25 %: mean burst 1/r = 4 packets, loss rate p/(p+r) = 3.85 %.
    let model = LossModel::GilbertElliott { p: 0.01, r: 0.25, h: 0.0, k: 1.0 };
    let pat = pattern(model, 5, 400_000);
    let b = bursts(&pat);
    let mean_burst = b.iter().sum::<usize>() as f64 / b.len() as f64;
    assert_close(mean_burst, 4.0, 0.05);
    let rate = pat.iter().filter(|&&l| l).count() as f64 / pat.len() as f64;
    assert_close(rate, 0.01 / 0.26, 0.05);
    // Far burstier than Bernoulli at the same rate, whose mean burst is 1/(1-0.0385) = 1.04.
    let bern = bursts(&pattern(LossModel::Bernoulli { p: 0.0385 }, 5, 400_000));
    assert!((bern.iter().sum::<usize>() as f64 / bern.len() as f64) < 1.1);
}

#[test]
fn gilbert_helper_reaches_rate_and_burst() {
    let pat = pattern(LossModel::gilbert(0.02, 8.0), 9, 400_000);
    let b = bursts(&pat);
    assert_close(b.iter().sum::<usize>() as f64 / b.len() as f64, 8.0, 0.08);
    assert_close(pat.iter().filter(|&&l| l).count() as f64 / pat.len() as f64, 0.02, 0.08);
}

#[test]
fn gilbert_elliott_with_partial_loss_in_both_states() {
    // pi_B = p/(p+r) = 0.2; loss = 0.8 * (1-k) + 0.2 * (1-h) = 0.8*0.01 + 0.2*0.5 = 0.108.
    let model = LossModel::GilbertElliott { p: 0.05, r: 0.2, h: 0.5, k: 0.99 };
    let pat = pattern(model, 11, 400_000);
    let rate = pat.iter().filter(|&&l| l).count() as f64 / pat.len() as f64;
    assert_close(rate, 0.108, 0.04);
}
