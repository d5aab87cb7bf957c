//! Jitter samples: uniform, truncated normal, and netem's heavy-tailed tables.
//!
//! netem draws a delay as `mu + sigma x t / 8192`, with `t` one of 4096 16-bit entries of a
//! table that iproute2 generates (`netem/pareto.c`, `netem/paretonormal.c`) and the kernel
//! indexes with a uniform random number (`tabledist` in `sch_netem.c`). This module builds the
//! same tables from the same formulas, so a `pareto` or `paretonormal` jitter here has netem's
//! shape, quantisation and clipping:
//!
//! - `pareto`, entry `k`: `(u^(-1/3) - 1.5) x 4/3` with `u = 1 - k/4096`, a Pareto of shape 3
//!   and scale 1 shifted to mean 0 and scaled by 4/3; from -2/3 up, clipped at 32767/8192.
//! - `paretonormal`, entry `k`: `(n + 3 p) / 4` of the normal quantile `n` at
//!   `(4k + 0.5) / 16384` (what iproute2's scan of the normal CDF finds) and the Pareto entry
//!   `p` at the same `k`: one quarter normal, three quarters Pareto, comonotone.
//!
//! `uniform` is `[-max, +max]` as netem's default; `normal` keeps this crate's truncated
//! normal (`[-3 sigma, 3 sigma]`, Box-Muller), close to netem's table, which stops at 4 sigma.
//! Every draw comes from the caller's seeded RNG: one per packet (two for `normal`).

use rand::Rng;

use crate::spec::Jitter;
use crate::time::duration_nanos;

/// Entries in a netem distribution table.
pub(crate) const TABLE_SIZE: usize = 4096;
/// netem's fixed-point scale: a table entry of 8192 is one sigma.
const TABLE_SCALE: f64 = 8192.0;

/// The shapes that come from a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Pareto,
    ParetoNormal,
}

/// A jitter distribution ready to sample.
#[derive(Debug, Clone)]
pub(crate) struct Sampler {
    jitter: Option<Jitter>,
    table: Option<Box<[i16]>>,
}

impl Sampler {
    pub(crate) fn new(jitter: Option<Jitter>) -> Sampler {
        let table = match jitter {
            Some(Jitter::Pareto { .. }) => Some(table(Shape::Pareto)),
            Some(Jitter::ParetoNormal { .. }) => Some(table(Shape::ParetoNormal)),
            _ => None,
        };
        Sampler { jitter, table }
    }

    /// A sample in nanoseconds, to add to the delay.
    pub(crate) fn sample(&self, rng: &mut impl Rng) -> i64 {
        let Some(jitter) = self.jitter else { return 0 };
        // Validated specs bound jitter by one hour, well inside i64 (and f64's exact range).
        let scale = duration_nanos(jitter.scale());
        match (jitter, &self.table) {
            (Jitter::Uniform { .. }, _) => {
                let m = i64::try_from(scale).unwrap_or(i64::MAX / 2);
                if m == 0 { 0 } else { rng.random_range(-m..=m) }
            }
            (Jitter::Normal { .. }, _) => {
                // Box-Muller; 1 - u keeps the logarithm finite.
                let u1: f64 = 1.0 - rng.random::<f64>();
                let u2: f64 = rng.random::<f64>();
                let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
                (z.clamp(-3.0, 3.0) * scale as f64) as i64
            }
            (_, Some(table)) => {
                let t = table[rng.random_range(0..TABLE_SIZE)];
                (f64::from(t) / TABLE_SCALE * scale as f64).round() as i64
            }
            (_, None) => 0,
        }
    }
}

/// The smallest and largest value of a table, in sigmas.
pub(crate) fn range(shape: Shape) -> (f64, f64) {
    // Both tables rise with k.
    let at = |k| f64::from(entry(shape, k)) / TABLE_SCALE;
    (at(0), at(TABLE_SIZE - 1))
}

/// netem's table for `shape`, as iproute2 generates it.
pub(crate) fn table(shape: Shape) -> Box<[i16]> {
    (0..TABLE_SIZE).map(|k| entry(shape, k)).collect()
}

fn entry(shape: Shape, k: usize) -> i16 {
    let value = match shape {
        Shape::Pareto => pareto_entry(k),
        Shape::ParetoNormal => {
            let normal = (normal_quantile((4 * k) as f64 / 16384.0 + 0.5 / 16384.0) * TABLE_SCALE)
                .round() as i64;
            // C integer division: truncates toward zero.
            (normal + 3 * pareto_entry(k)) / 4
        }
    };
    value.clamp(i64::from(i16::MIN), i64::from(i16::MAX)) as i16
}

/// iproute2's `pareto.c` / `paretovalue()`: entry `k` of the shape-3 Pareto table, before the
/// final 16-bit clip (already clipped at 32767 above, as iproute2 does).
fn pareto_entry(k: usize) -> i64 {
    let u = (65536 - 16 * k) as f64 / 65536.0;
    let value = (u.powf(-1.0 / 3.0) - 1.5) * (4.0 / 3.0) * TABLE_SCALE;
    value.min(32767.0).round() as i64
}

/// The standard normal quantile (inverse CDF) for `p` in (0, 1): Acklam's rational
/// approximation, relative error below 1.2e-9, far finer than the tables' 1/8192 step.
pub(crate) fn normal_quantile(p: f64) -> f64 {
    const A: [f64; 6] = [
        -3.969_683_028_665_376e1,
        2.209_460_984_245_205e2,
        -2.759_285_104_469_687e2,
        1.383_577_518_672_69e2,
        -3.066_479_806_614_716e1,
        2.506_628_277_459_239,
    ];
    const B: [f64; 5] = [
        -5.447_609_879_822_406e1,
        1.615_858_368_580_409e2,
        -1.556_989_798_598_866e2,
        6.680_131_188_771_972e1,
        -1.328_068_155_288_572e1,
    ];
    const C: [f64; 6] = [
        -7.784_894_002_430_293e-3,
        -3.223_964_580_411_365e-1,
        -2.400_758_277_161_838,
        -2.549_732_539_343_734,
        4.374_664_141_464_968,
        2.938_163_982_698_783,
    ];
    const D: [f64; 4] = [
        7.784_695_709_041_462e-3,
        3.224_671_290_700_398e-1,
        2.445_134_137_142_996,
        3.754_408_661_907_416,
    ];
    const LOW: f64 = 0.024_25;
    let p = p.clamp(f64::MIN_POSITIVE, 1.0 - f64::EPSILON);
    let tail = |q: f64| {
        (((((C[0] * q + C[1]) * q + C[2]) * q + C[3]) * q + C[4]) * q + C[5])
            / ((((D[0] * q + D[1]) * q + D[2]) * q + D[3]) * q + 1.0)
    };
    if p < LOW {
        tail((-2.0 * p.ln()).sqrt())
    } else if p > 1.0 - LOW {
        -tail((-2.0 * (1.0 - p).ln()).sqrt())
    } else {
        let q = p - 0.5;
        let r = q * q;
        (((((A[0] * r + A[1]) * r + A[2]) * r + A[3]) * r + A[4]) * r + A[5]) * q
            / (((((B[0] * r + B[1]) * r + B[2]) * r + B[3]) * r + B[4]) * r + 1.0)
    }
}

#[cfg(test)]
mod tests;
