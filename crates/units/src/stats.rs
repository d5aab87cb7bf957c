//! Statistics over measured values: the one median every crate uses, percentiles, their
//! confidence intervals, and the exact tests verdicts are decided with.
//!
//! One rule for every estimator here: NaN is "no value" and is ignored; infinities are ordinary
//! (ordered) values. An estimator with no value left to work on returns `None`, so a caller
//! decides what an empty input means to it instead of receiving a 0 or a NaN it might print.
//!
//! Intervals are distribution-free wherever the sample allows it:
//! - [`quantile_interval`]: the exact order-statistic interval of a quantile (a median over
//!   rounds, or a p99 within a round from its sample count), from the binomial distribution of
//!   the number of samples below the true quantile. When the sample is too small for the
//!   asked confidence (p99.9 from 500 samples, a median from 5 rounds at 95 %) there is no
//!   such interval and the quantile is *not measurable* at that confidence: `None`, never a
//!   number ([`quantile_measurable`]).
//! - [`spread_confidence`]: what the range of a few rounds covers when fewer rounds than a
//!   95 % interval needs were run (3 rounds: the range holds the median with 75 %).
//! - [`bootstrap_interval`]: a percentile bootstrap (deterministic: a fixed-seed generator) for
//!   statistics without an exact interval, such as a ratio of two medians.
//!
//! Comparisons are exact tests, so a verdict can say how sure it is:
//! - [`rank_test_greater`]: Mann-Whitney-Wilcoxon rank-sum test, one-sided, exact null
//!   distribution (3 rounds each, every round of one above every round of the other:
//!   p = 1/20 = 0.05).
//! - [`sign_test_greater`]: exact sign (binomial) test of a median against a constant.
//! - [`t_test_greater`]: one-sample Student t-test of a mean against a constant, for values
//!   that are themselves averages or percentiles over many samples (a round's figure), where
//!   a few rounds cannot reach 95 % with a distribution-free test.
//! - [`rounds_needed_rank`], [`rounds_needed_sign`]: about how many rounds per variant such a
//!   test needs to decide an effect of the size observed.

/// The values of `xs` that are numbers (NaN left out), sorted ascending.
fn sorted_numbers(xs: &[f64]) -> Vec<f64> {
    let mut sorted: Vec<f64> = xs.iter().copied().filter(|x| !x.is_nan()).collect();
    sorted.sort_by(f64::total_cmp);
    sorted
}

/// The median of `xs`: the middle value, or the mean of the middle two for an even count.
/// NaN values are ignored; `None` when no value remains.
pub fn median(xs: &[f64]) -> Option<f64> {
    middle_of_sorted(&sorted_numbers(xs))
}

/// The median of values already sorted ascending and free of NaN.
fn middle_of_sorted(sorted: &[f64]) -> Option<f64> {
    let n = sorted.len();
    match n {
        0 => None,
        n if n % 2 == 1 => Some(sorted[n / 2]),
        n => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

/// The nearest-rank `q`-quantile (0..=1) of `sorted` (ascending, no NaN): the smallest value
/// with at least a fraction `q` of the samples at or below it. `None` when empty.
pub fn percentile_of_sorted(sorted: &[f64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q.clamp(0.0, 1.0) * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1])
}

/// A confidence interval: the true value lies in `[low, high]` with probability at least
/// `confidence` (exact for order-statistic intervals).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Interval {
    /// Lower bound.
    pub low: f64,
    /// Upper bound.
    pub high: f64,
    /// Coverage probability (0..1) the interval actually has, at least the one asked for.
    pub confidence: f64,
}

impl Interval {
    /// Whether `x` lies inside (bounds included).
    pub fn contains(&self, x: f64) -> bool {
        self.low <= x && x <= self.high
    }
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, 9 terms: about 15 significant digits).
fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection keeps the series in its accurate range.
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + G + 0.5;
    for (i, &c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// P(B = k) for B ~ Binomial(n, p).
fn binomial_pmf(n: u64, k: u64, p: f64) -> f64 {
    if k > n {
        return 0.0;
    }
    if p <= 0.0 {
        return if k == 0 { 1.0 } else { 0.0 };
    }
    if p >= 1.0 {
        return if k == n { 1.0 } else { 0.0 };
    }
    let (n, k) = (n as f64, k as f64);
    let ln_choose = ln_gamma(n + 1.0) - ln_gamma(k + 1.0) - ln_gamma(n - k + 1.0);
    (ln_choose + k * p.ln() + (n - k) * (1.0 - p).ln()).exp()
}

/// P(B >= k) for B ~ Binomial(n, p).
fn binomial_upper_tail(n: u64, k: u64, p: f64) -> f64 {
    (k..=n).map(|i| binomial_pmf(n, i, p)).sum::<f64>().min(1.0)
}

/// The 1-based ranks `(l, u)` of the equal-tailed order-statistic interval
/// `[x(l), x(u)]` of the `q`-quantile from `n` samples at `confidence`, and the coverage it
/// has; `None` when `n` samples cannot support it (the interval would need a rank outside
/// 1..=n).
pub fn quantile_ranks(n: usize, q: f64, confidence: f64) -> Option<(usize, usize, f64)> {
    if n == 0 || !(0.0..1.0).contains(&confidence) || !(0.0..=1.0).contains(&q) {
        return None;
    }
    let tail = (1.0 - confidence) / 2.0;
    // B = number of samples below the true quantile, B ~ Binomial(n, q).
    // x(l) <= quantile  <=>  B >= l;  x(u) >= quantile  <=>  B <= u - 1.
    // Largest l with P(B < l) <= tail; smallest u with P(B >= u) <= tail.
    let pmf: Vec<f64> = (0..=n as u64).map(|k| binomial_pmf(n as u64, k, q)).collect();
    let mut below = 0.0;
    let mut l = 0;
    for (k, &p) in pmf.iter().enumerate() {
        // `below` is P(B < k).
        if below <= tail {
            l = k;
        } else {
            break;
        }
        below += p;
    }
    let mut above = 0.0;
    let mut u = n + 1;
    for k in (0..=n).rev() {
        // P(B >= k), accumulating from the top.
        above += pmf[k];
        if above <= tail {
            u = k;
        } else {
            break;
        }
    }
    if l < 1 || u > n || l > u {
        return None;
    }
    let coverage: f64 = pmf[l..u].iter().sum();
    Some((l, u, coverage.min(1.0)))
}

/// Whether the `q`-quantile of `n` samples has an order-statistic interval at `confidence`.
/// p99.9 from 500 samples does not (at 95 %): such a percentile is not measurable and must
/// not be printed as a number.
pub fn quantile_measurable(n: usize, q: f64, confidence: f64) -> bool {
    quantile_ranks(n, q, confidence).is_some()
}

/// The fewest samples whose `q`-quantile has an order-statistic interval at `confidence`:
/// both extreme order statistics must be unlikely to sit on the wrong side of the quantile,
/// q^n and (1-q)^n at most (1 - confidence) / 2. p99.9 at 95 %: 3,688 samples; p99: 368.
pub fn samples_needed(q: f64, confidence: f64) -> usize {
    let tail: f64 = (1.0 - confidence) / 2.0;
    let side = |p: f64| if p <= 0.0 { 1.0 } else { (tail.ln() / p.ln()).ceil().max(1.0) };
    let q = q.clamp(1e-12, 1.0 - 1e-12);
    side(q).max(side(1.0 - q)) as usize
}

/// The exact distribution-free interval of the `q`-quantile of `xs` (NaN ignored) at
/// `confidence`; `None` when the sample is too small for it (not measurable).
pub fn quantile_interval(xs: &[f64], q: f64, confidence: f64) -> Option<Interval> {
    let sorted = sorted_numbers(xs);
    let (l, u, coverage) = quantile_ranks(sorted.len(), q, confidence)?;
    Some(Interval { low: sorted[l - 1], high: sorted[u - 1], confidence: coverage })
}

/// The interval of the median of `xs` at `confidence` ([`quantile_interval`] at 0.5).
pub fn interval_of_median(xs: &[f64], confidence: f64) -> Option<Interval> {
    quantile_interval(xs, 0.5, confidence)
}

/// The probability that the range `[min, max]` of `n` values holds their true median:
/// 1 - 2 * 0.5^n (3 rounds: 0.75). Zero for fewer than two values.
pub fn spread_confidence(n: usize) -> f64 {
    if n < 2 { 0.0 } else { 1.0 - 2.0 * 0.5f64.powi(n.min(1000) as i32) }
}

/// A small deterministic generator (SplitMix64) so a bootstrap gives the same interval for the
/// same data.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// A percentile-bootstrap interval of `statistic` over `samples` (each a set of values,
/// resampled with replacement independently): `resamples` draws, the equal-tailed
/// `confidence` range of the statistic's values. Deterministic (fixed seed). `None` when a
/// sample is empty, or the statistic gave no value often enough. The bootstrap is
/// approximate and too narrow for very small samples; use it where no exact interval exists.
pub fn bootstrap_interval(
    samples: &[&[f64]],
    statistic: &dyn Fn(&[Vec<f64>]) -> Option<f64>,
    confidence: f64,
    resamples: usize,
) -> Option<Interval> {
    if samples.iter().any(|s| s.is_empty()) || resamples == 0 {
        return None;
    }
    let mut rng = SplitMix(0x7463_7074_6169_6c00);
    let mut values = Vec::with_capacity(resamples);
    let mut drawn: Vec<Vec<f64>> = samples.iter().map(|s| Vec::with_capacity(s.len())).collect();
    for _ in 0..resamples {
        for (d, s) in drawn.iter_mut().zip(samples) {
            d.clear();
            d.extend((0..s.len()).map(|_| s[rng.below(s.len())]));
        }
        if let Some(v) = statistic(&drawn).filter(|v| !v.is_nan()) {
            values.push(v);
        }
    }
    if values.len() < resamples / 2 {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let tail = (1.0 - confidence) / 2.0;
    Some(Interval {
        low: percentile_of_sorted(&values, tail)?,
        high: percentile_of_sorted(&values, 1.0 - tail)?,
        confidence,
    })
}

/// The exact one-sided p-value of the Mann-Whitney-Wilcoxon rank-sum test that `a` tends to be
/// greater than `b` (NaN ignored): the probability, were both samples from one distribution,
/// of a U statistic at least the one observed. Ties count half; the p-value is then taken
/// at the next lower integer U (conservative). `None` when either sample is empty.
///
/// Every value of `a` above every value of `b` gives p = 1 / C(n+m, n): 0.05 for 3 and 3,
/// 0.167 for 2 and 2.
pub fn rank_test_greater(a: &[f64], b: &[f64]) -> Option<f64> {
    let a = sorted_numbers(a);
    let b = sorted_numbers(b);
    let (n, m) = (a.len(), b.len());
    if n == 0 || m == 0 {
        return None;
    }
    let u = twice_u(&a, &b) / 2;
    let counts = u_distribution(n, m);
    let total: f64 = counts.iter().sum();
    Some(counts[u..].iter().sum::<f64>() / total)
}

/// The share of pairs (a value of `a`, one of `b`) in which `a`'s is the greater, ties
/// counting half, NaN left out: the rank test's U over n·m, its effect size. `None` when
/// either sample is empty.
pub fn share_greater(a: &[f64], b: &[f64]) -> Option<f64> {
    let (a, b) = (sorted_numbers(a), sorted_numbers(b));
    if a.is_empty() || b.is_empty() {
        return None;
    }
    Some(twice_u(&a, &b) as f64 / (2 * a.len() * b.len()) as f64)
}

/// Twice the Mann-Whitney U statistic of `a` against `b` (a pair counts 2 when `a`'s value
/// is greater, 1 when equal): an integer even with ties.
fn twice_u(a: &[f64], b: &[f64]) -> usize {
    let mut twice_u = 0usize;
    for x in a {
        for y in b {
            twice_u += match x.total_cmp(y) {
                std::cmp::Ordering::Greater => 2,
                std::cmp::Ordering::Equal => 1,
                std::cmp::Ordering::Less => 0,
            };
        }
    }
    twice_u
}

/// Number of arrangements of `n` and `m` values (no ties) giving each U = 0..=n*m.
fn u_distribution(n: usize, m: usize) -> Vec<f64> {
    // f(i, j)[u]: arrangements of i values of a and j of b with U = u. The largest value is
    // either an a (it beats all j b's: U grows by j) or a b.
    let size = n * m + 1;
    let mut prev: Vec<Vec<f64>> = (0..=m)
        .map(|_| {
            let mut v = vec![0.0; size];
            v[0] = 1.0;
            v
        })
        .collect();
    for _i in 1..=n {
        let mut cur: Vec<Vec<f64>> = vec![vec![0.0; size]; m + 1];
        for j in 0..=m {
            for u in 0..size {
                let from_a = if u >= j { prev[j][u - j] } else { 0.0 };
                let from_b = if j > 0 { cur[j - 1][u] } else { 0.0 };
                cur[j][u] = from_a + from_b;
            }
        }
        prev = cur;
    }
    prev.swap_remove(m)
}

/// The exact one-sided p-value of the sign test that the median of `xs` is above `c` (or at
/// least `c` when `or_equal`): the probability of as many values on that side were the
/// median exactly `c`. `None` when `xs` has no value.
pub fn sign_test_greater(xs: &[f64], c: f64, or_equal: bool) -> Option<f64> {
    let xs = sorted_numbers(xs);
    if xs.is_empty() {
        return None;
    }
    let above = xs.iter().filter(|&&x| x > c || (or_equal && x == c)).count();
    Some(binomial_upper_tail(xs.len() as u64, above as u64, 0.5))
}

/// The regularised incomplete beta function I_x(a, b) (Lentz's continued fraction).
fn incomplete_beta(x: f64, a: f64, b: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    // The fraction converges fast for x < (a + 1) / (a + b + 2); use the symmetry otherwise.
    if x > (a + 1.0) / (a + b + 2.0) {
        return 1.0 - incomplete_beta(1.0 - x, b, a);
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    let tiny = 1e-300;
    let (mut c, mut d) = (1.0, 1.0 - (a + b) * x / (a + 1.0));
    if d.abs() < tiny {
        d = tiny;
    }
    d = 1.0 / d;
    let mut h = d;
    for m in 1..300 {
        let m = f64::from(m);
        let m2 = 2.0 * m;
        let mut last = 1.0;
        for num in [
            m * (b - m) * x / ((a + m2 - 1.0) * (a + m2)),
            -(a + m) * (a + b + m) * x / ((a + m2) * (a + m2 + 1.0)),
        ] {
            d = 1.0 + num * d;
            if d.abs() < tiny {
                d = tiny;
            }
            c = 1.0 + num / c;
            if c.abs() < tiny {
                c = tiny;
            }
            d = 1.0 / d;
            last = d * c;
            h *= last;
        }
        if (last - 1.0).abs() < 1e-15 {
            break;
        }
    }
    (ln_front.exp() * h / a).clamp(0.0, 1.0)
}

/// P(T >= t) for Student's t with `df` degrees of freedom.
fn student_upper_tail(t: f64, df: f64) -> f64 {
    if t.is_infinite() {
        return if t > 0.0 { 0.0 } else { 1.0 };
    }
    let tail = 0.5 * incomplete_beta(df / (df + t * t), df / 2.0, 0.5);
    if t >= 0.0 { tail } else { 1.0 - tail }
}

/// The one-sided p-value of the one-sample Student t-test that the mean of `xs` (NaN
/// ignored) is above `c`. Rounds that all agree (no spread) give 0 or 1. `None` for fewer
/// than two values.
pub fn t_test_greater(xs: &[f64], c: f64) -> Option<f64> {
    let xs = sorted_numbers(xs);
    let n = xs.len();
    if n < 2 {
        return None;
    }
    let mean = xs.iter().sum::<f64>() / n as f64;
    let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1) as f64;
    let se = (var / n as f64).sqrt();
    if se == 0.0 || !se.is_finite() {
        return Some(if mean > c { 0.0 } else { 1.0 });
    }
    Some(student_upper_tail((mean - c) / se, (n - 1) as f64))
}

/// About how many rounds a one-sided t-test at `alpha` needs, with 80 % power, for a mean
/// `effect` standard deviations from the constant (at least 2). `None` for no effect.
pub fn rounds_needed_t(effect: f64, alpha: f64) -> Option<usize> {
    if effect.is_nan() || effect <= 0.0 {
        return None;
    }
    let z = z_one_sided(alpha) + z_one_sided(0.2);
    Some((((z / effect).powi(2)).ceil() as usize + 1).max(2))
}

/// The standard normal deviate with upper-tail probability `alpha` (0.05 -> 1.645,
/// 0.2 -> 0.842); Abramowitz and Stegun 26.2.23, error below 5e-4, ample for estimating a
/// number of rounds.
fn z_one_sided(alpha: f64) -> f64 {
    let p = alpha.clamp(1e-300, 0.5);
    let t = (-2.0 * p.ln()).sqrt();
    t - (2.515_517 + 0.802_853 * t + 0.010_328 * t * t)
        / (1.0 + 1.432_788 * t + 0.189_269 * t * t + 0.001_308 * t * t * t)
}

/// About how many rounds per variant a one-sided rank test at level `alpha` needs to detect,
/// with 80 % power, an effect where a round of one variant beats a round of the other with
/// probability `p_greater` (the observed U / (n m)); Noether's formula, never below the
/// smallest sample that can reach `alpha` at all. `None` when the observed effect points the
/// other way or is nil (more rounds would not make it significant).
pub fn rounds_needed_rank(p_greater: f64, alpha: f64) -> Option<usize> {
    if p_greater.is_nan() || p_greater <= 0.5 {
        return None;
    }
    let z = z_one_sided(alpha) + z_one_sided(0.2);
    let total = z * z / (3.0 * (p_greater - 0.5).powi(2));
    let per_variant = (total / 2.0).ceil() as usize;
    // The smallest equal sizes whose most extreme outcome reaches alpha.
    let mut least = 1;
    while u_tail_min(least) > alpha {
        least += 1;
    }
    Some(per_variant.max(least))
}

/// 1 / C(2n, n): the smallest p-value a rank test of n rounds against n can give.
fn u_tail_min(n: usize) -> f64 {
    let mut p = 1.0;
    for i in 0..n {
        p *= (n - i) as f64 / (2 * n - i) as f64;
    }
    p
}

/// About how many rounds a one-sided sign test at `alpha` needs, with 80 % power, when a
/// fraction `p_side` of rounds fall on the claimed side; never below the smallest count that
/// can reach `alpha` (5 at 5 %). `None` when the observed fraction is not above one half.
pub fn rounds_needed_sign(p_side: f64, alpha: f64) -> Option<usize> {
    if p_side.is_nan() || p_side <= 0.5 {
        return None;
    }
    let (za, zb) = (z_one_sided(alpha), z_one_sided(0.2));
    let p = p_side.min(0.99);
    let n = ((za * 0.5 + zb * (p * (1.0 - p)).sqrt()) / (p - 0.5)).powi(2).ceil() as usize;
    let least = (alpha.ln() / 0.5f64.ln()).ceil() as usize;
    Some(n.max(least))
}

pub mod modality;

#[cfg(test)]
mod tests;
