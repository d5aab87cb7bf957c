//! Is a sample unimodal? Silverman's critical-bandwidth test, and the split of a sample at the
//! antimode between its two main modes (for "a slow cluster at 1.5-2x the median" claims).
//!
//! A Gaussian kernel density estimate has fewer modes the wider its bandwidth; the *critical
//! bandwidth* `h_k` is the smallest at which it has at most `k` modes. Silverman (1981): if
//! `h_1` is large against what unimodal samples of the same spread give, the sample is not
//! unimodal. The p-value is a smoothed bootstrap: resamples drawn from the KDE at `h_1`
//! (rescaled to the sample's variance) that need a bandwidth above `h_1` to be unimodal. The
//! test is known to be conservative (it rejects a unimodal population less often than its
//! level), so a small p-value is good evidence of more than one mode.
//!
//! Densities are evaluated on a grid of [`GRID`] points from binned data (linear binning), so
//! a test over thousands of samples costs milliseconds. Deterministic (fixed seed).

use super::{SplitMix, median};

/// Grid points of the density estimates.
pub const GRID: usize = 512;

/// A sample binned on a fixed grid for kernel density estimates.
struct Binned {
    lo: f64,
    step: f64,
    weights: Vec<f64>,
}

impl Binned {
    /// `None` for fewer than 10 values or no spread.
    fn new(xs: &[f64]) -> Option<Binned> {
        let xs: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
        if xs.len() < 10 {
            return None;
        }
        let (min, max) =
            xs.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| (a.min(x), b.max(x)));
        let span = max - min;
        if span <= 0.0 {
            return None;
        }
        // A margin so that the density falls off inside the grid.
        let (lo, hi) = (min - 0.1 * span, max + 0.1 * span);
        let step = (hi - lo) / (GRID - 1) as f64;
        let mut weights = vec![0.0; GRID];
        for x in xs {
            let pos = (x - lo) / step;
            let i = (pos.floor() as usize).min(GRID - 2);
            let frac = pos - i as f64;
            weights[i] += 1.0 - frac;
            weights[i + 1] += frac;
        }
        Some(Binned { lo, step, weights })
    }

    /// The (unnormalised) density at every grid point for bandwidth `h`.
    fn density(&self, h: f64) -> Vec<f64> {
        let reach = ((4.0 * h / self.step).ceil() as usize).min(GRID);
        let kernel: Vec<f64> =
            (0..=reach).map(|d| (-0.5 * (d as f64 * self.step / h).powi(2)).exp()).collect();
        let mut out = vec![0.0; GRID];
        for (i, &w) in self.weights.iter().enumerate() {
            if w == 0.0 {
                continue;
            }
            let from = i.saturating_sub(reach);
            let to = (i + reach).min(GRID - 1);
            for (j, slot) in out.iter_mut().enumerate().take(to + 1).skip(from) {
                *slot += w * kernel[i.abs_diff(j)];
            }
        }
        out
    }

    /// Grid indices of the density's local maxima at bandwidth `h` (plateaus count once).
    fn modes(&self, h: f64) -> Vec<usize> {
        local_maxima(&self.density(h))
    }

    /// The critical bandwidth for at most `k` modes, to 0.5 % (bisection).
    fn critical(&self, k: usize) -> f64 {
        let span = self.step * (GRID - 1) as f64;
        let (mut lo, mut hi) = (self.step / 2.0, span);
        if self.modes(lo).len() <= k {
            return lo;
        }
        while hi / lo > 1.005 {
            let mid = (lo * hi).sqrt();
            if self.modes(mid).len() <= k {
                hi = mid;
            } else {
                lo = mid;
            }
        }
        hi
    }
}

fn local_maxima(f: &[f64]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut i = 1;
    while i + 1 < f.len() {
        if f[i] > f[i - 1] {
            // Walk a plateau to its end.
            let mut j = i;
            while j + 1 < f.len() && f[j + 1] == f[i] {
                j += 1;
            }
            if j + 1 < f.len() && f[j + 1] < f[i] {
                out.push((i + j) / 2);
            }
            i = j + 1;
        } else {
            i += 1;
        }
    }
    out
}

/// The outcome of [`silverman_test`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Modality {
    /// The critical bandwidth for one mode.
    pub h_crit: f64,
    /// The bootstrap p-value of "the population is unimodal".
    pub p_unimodal: f64,
}

/// Silverman's test of unimodality of `xs` with `resamples` smoothed bootstrap draws.
/// `None` for fewer than 10 finite values or no spread.
pub fn silverman_test(xs: &[f64], resamples: usize) -> Option<Modality> {
    let binned = Binned::new(xs)?;
    let h = binned.critical(1);
    let xs: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    // Rescaling keeps the resamples' variance at the sample's (Silverman 1981).
    let shrink = 1.0 / (1.0 + h * h / var.max(f64::MIN_POSITIVE)).sqrt();
    let mut rng = SplitMix(0x6d6f_6461_6c69_7479);
    let mut exceed = 0usize;
    let mut draw = Vec::with_capacity(xs.len());
    for _ in 0..resamples {
        draw.clear();
        for _ in 0..xs.len() {
            let y = xs[rng.below(xs.len())];
            draw.push(mean + (y - mean + h * standard_normal(&mut rng)) * shrink);
        }
        // Binned on the draw's own grid: more than one mode at h means its h_1 is above h.
        if Binned::new(&draw).is_some_and(|b| b.modes(h).len() > 1) {
            exceed += 1;
        }
    }
    let p_unimodal = (exceed as f64 + 1.0) / (resamples as f64 + 1.0);
    Some(Modality { h_crit: h, p_unimodal })
}

/// A standard normal draw (Box-Muller from two uniforms in (0, 1]).
fn standard_normal(rng: &mut SplitMix) -> f64 {
    let mut uniform = || ((rng.next() >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
    let (a, b) = (uniform(), uniform());
    (-2.0 * a.ln()).sqrt() * (std::f64::consts::TAU * b).cos()
}

/// The split of a sample at the antimode between its two main modes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Clusters {
    /// Where the density is lowest between the two modes.
    pub antimode: f64,
    /// The modes' locations, lower first.
    pub modes: [f64; 2],
    /// The median of the values above the antimode.
    pub upper_median: f64,
    /// The share of values above the antimode, 0..=1.
    pub upper_share: f64,
}

/// The two main clusters of `xs`: the kernel density at the critical bandwidth for two modes,
/// split at its lowest point between them. `None` when the sample is too small or the
/// density has a single mode even there.
pub fn two_clusters(xs: &[f64]) -> Option<Clusters> {
    let binned = Binned::new(xs)?;
    let h = binned.critical(2);
    let density = binned.density(h);
    let modes = local_maxima(&density);
    let [a, b] = modes[..] else {
        return None;
    };
    let lowest = (a..=b).min_by(|&i, &j| density[i].total_cmp(&density[j]))?;
    let at = |i: usize| binned.lo + i as f64 * binned.step;
    let antimode = at(lowest);
    let upper: Vec<f64> = xs.iter().copied().filter(|&x| x > antimode).collect();
    let finite = xs.iter().filter(|x| x.is_finite()).count();
    Some(Clusters {
        antimode,
        modes: [at(a), at(b)],
        upper_median: median(&upper)?,
        upper_share: upper.len() as f64 / finite as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic normal draws.
    fn normals(n: usize, mean: f64, sd: f64, seed: u64) -> Vec<f64> {
        let mut rng = SplitMix(seed);
        (0..n).map(|_| mean + sd * standard_normal(&mut rng)).collect()
    }

    #[test]
    fn one_normal_is_unimodal() {
        for seed in 1..4 {
            let m = silverman_test(&normals(2000, 50.0, 5.0, seed), 100).unwrap();
            assert!(m.p_unimodal > 0.05, "seed {seed}: {m:?}");
        }
    }

    #[test]
    fn two_separated_clusters_are_not_unimodal_and_split_between_them() {
        // 90 % around 50, 10 % around 120 (the seed's 40-60 µs and 110-150 µs).
        let mut xs = normals(1800, 50.0, 5.0, 7);
        xs.extend(normals(200, 120.0, 8.0, 8));
        let m = silverman_test(&xs, 100).unwrap();
        assert!(m.p_unimodal < 0.05, "{m:?}");
        let c = two_clusters(&xs).unwrap();
        assert!(c.antimode > 65.0 && c.antimode < 105.0, "{c:?}");
        assert!((c.upper_median - 120.0).abs() < 5.0, "{c:?}");
        assert!((c.upper_share - 0.1).abs() < 0.01, "{c:?}");
    }

    #[test]
    fn a_long_right_tail_alone_is_not_a_second_mode() {
        // Log-normal-like: exp of a normal, a skewed but unimodal shape.
        let xs: Vec<f64> = normals(2000, 0.0, 0.5, 11).into_iter().map(f64::exp).collect();
        let m = silverman_test(&xs, 100).unwrap();
        assert!(m.p_unimodal > 0.05, "{m:?}");
    }

    #[test]
    fn too_small_or_flat_samples_have_no_answer() {
        assert!(silverman_test(&[1.0; 5], 10).is_none());
        assert!(silverman_test(&[3.0; 50], 10).is_none());
        assert!(two_clusters(&[f64::NAN; 20]).is_none());
    }
}
