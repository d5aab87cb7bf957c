use super::*;
use proptest::prelude::*;

#[test]
fn median_of_odd_even_and_empty() {
    assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
    assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
    assert_eq!(median(&[]), None);
}

#[test]
fn median_ignores_nan_and_orders_infinity() {
    assert_eq!(median(&[f64::NAN]), None);
    assert_eq!(median(&[1.0, f64::NAN, 3.0]), Some(2.0));
    assert_eq!(median(&[1.0, f64::INFINITY, 2.0]), Some(2.0));
}

#[test]
fn percentiles_are_nearest_rank() {
    let xs: Vec<f64> = (1..=100).map(f64::from).collect();
    assert_eq!(percentile_of_sorted(&xs, 0.5), Some(50.0));
    assert_eq!(percentile_of_sorted(&xs, 0.99), Some(99.0));
    assert_eq!(percentile_of_sorted(&xs, 1.0), Some(100.0));
    assert_eq!(percentile_of_sorted(&xs, 0.0), Some(1.0));
    assert_eq!(percentile_of_sorted(&[], 0.5), None);
}

#[test]
fn a_median_needs_six_values_for_95_percent() {
    assert_eq!(quantile_ranks(5, 0.5, 0.95), None);
    let (l, u, coverage) = quantile_ranks(6, 0.5, 0.95).unwrap();
    assert_eq!((l, u), (1, 6));
    assert!((coverage - (1.0 - 2.0 / 64.0)).abs() < 1e-12, "{coverage}");
    let xs = [5.0, 1.0, 3.0, 4.0, 2.0, 6.0];
    let i = interval_of_median(&xs, 0.95).unwrap();
    assert_eq!((i.low, i.high), (1.0, 6.0));
    assert!(i.contains(3.5));
}

#[test]
fn a_percentile_beyond_the_sample_is_not_measurable() {
    assert!(!quantile_measurable(500, 0.999, 0.95), "p99.9 from 500 samples");
    assert!(quantile_measurable(500, 0.99, 0.95));
    assert!(quantile_measurable(10_000, 0.999, 0.95));
    assert!(!quantile_measurable(0, 0.5, 0.95));
    // The p99 of 500 samples lies between two high order statistics.
    let (l, u, c) = quantile_ranks(500, 0.99, 0.95).unwrap();
    assert!((485..495).contains(&l) && u <= 500 && c >= 0.95, "{l} {u} {c}");
}

#[test]
fn samples_needed_is_where_a_quantile_becomes_measurable() {
    assert_eq!(samples_needed(0.999, 0.95), 3688);
    assert_eq!(samples_needed(0.99, 0.95), 368);
    assert_eq!(samples_needed(0.5, 0.95), 6);
    for (q, c) in [(0.999, 0.95), (0.99, 0.95), (0.5, 0.95), (0.9, 0.99), (0.05, 0.95)] {
        let n = samples_needed(q, c);
        assert!(quantile_measurable(n, q, c), "{q} {c} {n}");
        assert!(!quantile_measurable(n - 1, q, c), "{q} {c} {n}");
    }
}

#[test]
fn the_range_of_three_rounds_holds_the_median_three_times_in_four() {
    assert_eq!(spread_confidence(3), 0.75);
    assert_eq!(spread_confidence(1), 0.0);
}

#[test]
fn rank_test_of_complete_separation() {
    assert!((rank_test_greater(&[4.0, 5.0, 6.0], &[1.0, 2.0, 3.0]).unwrap() - 0.05).abs() < 1e-12);
    assert!((rank_test_greater(&[3.0, 4.0], &[1.0, 2.0]).unwrap() - 1.0 / 6.0).abs() < 1e-12);
    assert_eq!(rank_test_greater(&[1.0, 2.0, 3.0], &[4.0, 5.0, 6.0]), Some(1.0));
    // Identical samples: half the mass or more at or above.
    assert!(rank_test_greater(&[1.0, 2.0, 3.0], &[1.0, 2.0, 3.0]).unwrap() >= 0.5);
    assert_eq!(rank_test_greater(&[], &[1.0]), None);
}

#[test]
fn sign_test_counts_rounds_on_the_claimed_side() {
    let p = sign_test_greater(&[81.0, 85.0, 90.0, 95.0, 99.0], 80.0, true).unwrap();
    assert!((p - 1.0 / 32.0).abs() < 1e-12, "{p}");
    assert!((sign_test_greater(&[81.0, 85.0, 90.0], 80.0, true).unwrap() - 0.125).abs() < 1e-12);
    assert_eq!(sign_test_greater(&[80.0], 80.0, false), Some(1.0));
    assert!((sign_test_greater(&[80.0], 80.0, true).unwrap() - 0.5).abs() < 1e-12);
}

#[test]
fn rounds_needed_grow_as_the_effect_shrinks() {
    let all = rounds_needed_rank(1.0, 0.05).unwrap();
    assert!((3..=6).contains(&all), "{all}");
    assert!(rounds_needed_rank(0.75, 0.05).unwrap() > all);
    assert_eq!(rounds_needed_rank(0.5, 0.05), None);
    assert_eq!(rounds_needed_sign(1.0, 0.05), Some(5));
    assert!(rounds_needed_sign(0.7, 0.05).unwrap() > 5);
    assert_eq!(rounds_needed_sign(0.4, 0.05), None);
}

#[test]
fn normal_deviates() {
    assert!((z_one_sided(0.05) - 1.645).abs() < 1e-3);
    assert!((z_one_sided(0.2) - 0.842).abs() < 1e-3);
    assert!((z_one_sided(0.025) - 1.960).abs() < 1e-3);
}

#[test]
fn bootstrap_is_deterministic_and_brackets_the_statistic() {
    let a: Vec<f64> = (0..40).map(|i| 100.0 + f64::from(i % 7)).collect();
    let b: Vec<f64> = (0..40).map(|i| 50.0 + f64::from(i % 5)).collect();
    let ratio = |s: &[Vec<f64>]| Some(median(&s[0])? / median(&s[1])?);
    let i = bootstrap_interval(&[&a, &b], &ratio, 0.95, 2000).unwrap();
    let j = bootstrap_interval(&[&a, &b], &ratio, 0.95, 2000).unwrap();
    assert_eq!(i, j);
    let point = ratio(&[a.clone(), b.clone()]).unwrap();
    assert!(i.low <= point && point <= i.high, "{i:?} {point}");
    assert!(i.low > 1.5 && i.high < 2.5, "{i:?}");
    assert_eq!(bootstrap_interval(&[&[]], &ratio, 0.95, 100), None);
}

/// The order-statistic interval covers the true median at least as often as it claims:
/// 4,000 samples of 10 uniform values (true median 0.5).
#[test]
fn the_interval_of_a_median_covers_as_claimed() {
    let mut rng = SplitMix(42);
    let mut covered = 0;
    let trials = 4000;
    let mut claimed = 0.0;
    for _ in 0..trials {
        let xs: Vec<f64> =
            (0..10).map(|_| (rng.next() >> 11) as f64 / (1u64 << 53) as f64).collect();
        let i = interval_of_median(&xs, 0.95).unwrap();
        claimed = i.confidence;
        covered += usize::from(i.contains(0.5));
    }
    let rate = covered as f64 / trials as f64;
    // Binomial noise of 4,000 trials: 3 standard deviations below the claimed coverage.
    assert!(
        rate >= claimed - 3.0 * (claimed * (1.0 - claimed) / trials as f64).sqrt(),
        "{rate} < {claimed}"
    );
}

#[test]
fn t_test_against_a_constant() {
    // Three rounds at 40, 45, 50 against 20: t = 8.66 with 2 degrees of freedom.
    let p = t_test_greater(&[40.0, 45.0, 50.0], 20.0).unwrap();
    assert!((p - 0.006_536).abs() < 1e-4, "{p}");
    assert!((t_test_greater(&[40.0, 45.0, 50.0], 45.0).unwrap() - 0.5).abs() < 1e-12);
    assert_eq!(t_test_greater(&[0.0, 0.0, 0.0], 5.0), Some(1.0));
    assert_eq!(t_test_greater(&[6.0, 6.0], 5.0), Some(0.0));
    assert_eq!(t_test_greater(&[6.0], 5.0), None);
    // Student's t with 10 degrees of freedom: P(T >= 1.812) = 0.05.
    assert!((student_upper_tail(1.812_461, 10.0) - 0.05).abs() < 1e-5);
    assert!((student_upper_tail(-1.812_461, 10.0) - 0.95).abs() < 1e-5);
    assert!(rounds_needed_t(3.0, 0.05).unwrap() >= 2);
    assert!(rounds_needed_t(0.5, 0.05).unwrap() > rounds_needed_t(2.0, 0.05).unwrap());
    assert_eq!(rounds_needed_t(0.0, 0.05), None);
}

proptest! {
    #[test]
    fn t_tests_of_both_directions_add_to_one(
        xs in prop::collection::vec(-1e3f64..1e3, 2..30), c in -1e3f64..1e3,
    ) {
        let up = t_test_greater(&xs, c).unwrap();
        let down = t_test_greater(&xs.iter().map(|x| -x).collect::<Vec<_>>(), -c).unwrap();
        prop_assert!((0.0..=1.0).contains(&up));
        prop_assert!((up + down - 1.0).abs() < 1e-9 || (up, down) == (1.0, 1.0), "{up} {down}");
    }

    #[test]
    fn median_splits_the_values(xs in prop::collection::vec(-1e9f64..1e9, 1..200)) {
        let m = median(&xs).unwrap();
        let below = xs.iter().filter(|&&x| x <= m).count();
        let above = xs.iter().filter(|&&x| x >= m).count();
        prop_assert!(2 * below >= xs.len() && 2 * above >= xs.len(), "{m} of {xs:?}");
        let lo = xs.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        prop_assert!(lo <= m && m <= hi);
    }

    #[test]
    fn quantile_intervals_bracket_the_estimate(
        xs in prop::collection::vec(-1e6f64..1e6, 1..400),
        q in 0.01f64..0.99,
        confidence in 0.5f64..0.99,
    ) {
        let mut sorted = xs.clone();
        sorted.sort_by(f64::total_cmp);
        let point = percentile_of_sorted(&sorted, q).unwrap();
        match quantile_interval(&xs, q, confidence) {
            Some(i) => {
                prop_assert!(i.low <= i.high);
                prop_assert!(i.confidence >= confidence - 1e-9 && i.confidence <= 1.0 + 1e-9);
                prop_assert!(i.low <= point && point <= i.high, "{i:?} {point}");
            }
            None => prop_assert!(!quantile_measurable(xs.len(), q, confidence)),
        }
        // More samples never make a measurable quantile unmeasurable.
        if quantile_measurable(xs.len(), q, confidence) {
            prop_assert!(quantile_measurable(xs.len() + 1, q, confidence));
        }
    }

    #[test]
    fn rank_tests_of_both_directions_cover_everything(
        a in prop::collection::vec(-1e3f64..1e3, 1..8),
        b in prop::collection::vec(-1e3f64..1e3, 1..8),
    ) {
        let up = rank_test_greater(&a, &b).unwrap();
        let down = rank_test_greater(&b, &a).unwrap();
        prop_assert!(up > 0.0 && up <= 1.0 + 1e-12);
        // P(U >= u) + P(U <= u) >= 1 (the observed U counted twice).
        prop_assert!(up + down >= 1.0 - 1e-9, "{up} + {down}");
    }

    #[test]
    fn u_distribution_counts_every_arrangement(n in 1usize..9, m in 1usize..9) {
        let total: f64 = u_distribution(n, m).iter().sum();
        let mut choose = 1.0;
        for i in 0..n {
            choose = choose * (m + n - i) as f64 / (i + 1) as f64;
        }
        prop_assert!((total - choose).abs() < 1e-6 * choose, "{total} vs {choose}");
    }

    #[test]
    fn sign_test_p_values_are_probabilities(
        xs in prop::collection::vec(-10f64..10.0, 1..60), c in -10f64..10.0,
    ) {
        let strict = sign_test_greater(&xs, c, false).unwrap();
        let loose = sign_test_greater(&xs, c, true).unwrap();
        prop_assert!(strict > 0.0 && strict <= 1.0 + 1e-12);
        prop_assert!(loose <= strict + 1e-12, "counting ties for can only lower p");
    }
}

#[test]
fn share_greater_is_the_rank_tests_u_over_the_pairs() {
    assert_eq!(share_greater(&[3.0, 4.0], &[1.0, 2.0]), Some(1.0));
    assert_eq!(share_greater(&[1.0, 2.0], &[3.0, 4.0]), Some(0.0));
    // Ties count half: 1 win, 2 ties, 1 loss of 4 pairs.
    assert_eq!(share_greater(&[1.0, 2.0], &[1.0, 2.0]), Some(0.5));
    assert_eq!(share_greater(&[2.0, f64::NAN], &[1.0]), Some(1.0));
    assert_eq!(share_greater(&[], &[1.0]), None);
    assert_eq!(share_greater(&[f64::NAN], &[1.0]), None);
}
