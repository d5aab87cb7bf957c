//! The tables against an independent implementation, and the sampler's moments.

use proptest::prelude::*;
use rand::SeedableRng;
use rand::rngs::StdRng;
use std::time::Duration;

use super::*;

fn moments(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

#[test]
fn the_normal_quantile_matches_known_values() {
    for (p, z) in [
        (0.5, 0.0),
        (0.975, 1.959_963_985),
        (0.841_344_746, 1.0),
        (0.001, -3.090_232_306),
        (1e-6, -4.753_424_309),
    ] {
        assert!((normal_quantile(p) - z).abs() < 1e-6, "{p}: {}", normal_quantile(p));
    }
}

/// Reference values from a separate implementation of iproute2's generators (Python, with
/// `statistics.NormalDist` for the normal quantile), in sigmas.
#[test]
fn the_tables_are_netems() {
    for (shape, min, max, mean, sd, median) in [
        (Shape::Pareto, -0.666_626, 3.999_878, -0.033_491, 0.819_677, -0.320_068),
        (Shape::ParetoNormal, -1.502_075, 3.880_493, -0.025_295, 0.833_945, -0.239_990),
    ] {
        let t: Vec<f64> = table(shape).iter().map(|&v| f64::from(v) / 8192.0).collect();
        assert_eq!(t.len(), 4096);
        assert!(t.windows(2).all(|w| w[0] <= w[1]), "{shape:?} rises");
        let (m, s) = moments(&t);
        assert!((t[0] - min).abs() < 1e-5 && (t[4095] - max).abs() < 1e-5, "{shape:?}");
        assert!((m - mean).abs() < 1e-5 && (s - sd).abs() < 1e-5, "{shape:?}: {m} {s}");
        assert!((t[2048] - median).abs() < 1e-5, "{shape:?}");
        assert_eq!(range(shape), (t[0], t[4095]));
    }
    // And the unclipped Pareto's closed form: shifted to mean 0, its median is
    // (2^(1/3) - 1.5) x 4/3 and clipping at 4 costs 2c^(2/3) - 6c of the mean, c = 4.5^-3.
    let t: Vec<f64> = table(Shape::Pareto).iter().map(|&v| f64::from(v) / 8192.0).collect();
    assert!((t[2048] - (2f64.cbrt() - 1.5) * 4.0 / 3.0).abs() < 1e-3);
    let c = 4.5f64.powi(-3);
    let clipped_mean = -(2.0 * c.powf(2.0 / 3.0) - 6.0 * c);
    assert!((moments(&t).0 - clipped_mean).abs() < 2e-3, "{}", moments(&t).0);
}

fn samples(jitter: Jitter, seed: u64, n: usize) -> Vec<f64> {
    let sampler = Sampler::new(Some(jitter));
    let mut rng = StdRng::seed_from_u64(seed);
    (0..n).map(|_| sampler.sample(&mut rng) as f64 / 1e6).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(12))]

    /// Over 40 000 draws, every distribution's sample mean is within 4 standard errors of its
    /// mean and its standard deviation within 3 %; every sample within the bounds the spec
    /// validates against; the same seed draws the same samples.
    #[test]
    fn samples_have_the_distributions_moments(seed in any::<u64>(), ms in 1u64..50) {
        let n = 40_000;
        let sigma = ms as f64;
        let table_moments = |shape| {
            let t: Vec<f64> = table(shape).iter().map(|&v| f64::from(v) / 8192.0).collect();
            moments(&t)
        };
        // Truncated at 3 sigma: variance 1 - 6 phi(3) / (2 Phi(3) - 1).
        let phi3 = (-4.5f64).exp() / (2.0 * std::f64::consts::PI).sqrt();
        let truncated_sd = (1.0 - 6.0 * phi3 / 0.997_300_203_9).sqrt();
        let d = Duration::from_millis(ms);
        for (jitter, mean, sd) in [
            (Jitter::Uniform { max: d }, 0.0, 1.0 / 3f64.sqrt()),
            (Jitter::Normal { sigma: d }, 0.0, truncated_sd),
            (Jitter::Pareto { sigma: d }, table_moments(Shape::Pareto).0, table_moments(Shape::Pareto).1),
            (Jitter::ParetoNormal { sigma: d }, table_moments(Shape::ParetoNormal).0, table_moments(Shape::ParetoNormal).1),
        ] {
            let v = samples(jitter, seed, n);
            let (m, s) = moments(&v);
            let se = sd * sigma / (n as f64).sqrt();
            prop_assert!((m - mean * sigma).abs() < 4.0 * se, "{:?}: mean {} vs {}", jitter, m, mean * sigma);
            prop_assert!((s / (sd * sigma) - 1.0).abs() < 0.03, "{:?}: sd {} vs {}", jitter, s, sd * sigma);
            let (below, above) = (jitter.below().as_secs_f64() * 1e3, jitter.above().as_secs_f64() * 1e3);
            prop_assert!(v.iter().all(|&x| x >= -below - 1e-6 && x <= above + 1e-6), "{:?}", jitter);
            prop_assert_eq!(samples(jitter, seed, 100), v[..100].to_vec());
        }
    }
}

#[test]
fn pareto_has_the_long_upper_tail() {
    let v = samples(Jitter::Pareto { sigma: Duration::from_millis(10) }, 3, 100_000);
    let mut s = v.clone();
    s.sort_by(f64::total_cmp);
    let q = |p: f64| s[((s.len() - 1) as f64 * p) as usize];
    // Most samples a little below the delay, a few far above: median -3.2 ms, p99 at the clip.
    assert!((q(0.5) + 3.2).abs() < 0.1, "{}", q(0.5));
    assert!(q(0.99) > 35.0 && q(0.01) > -6.7, "{} {}", q(0.99), q(0.01));
}
