//! Statistics over measured values: the one median every crate uses.
//!
//! One rule for every estimator here: NaN is "no value" and is ignored; infinities are ordinary
//! (ordered) values. An estimator with no value left to work on returns `None`, so a caller
//! decides what an empty input means to it instead of receiving a 0 or a NaN it might print.

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

/// [`median`] of values already sorted ascending and free of NaN.
fn middle_of_sorted(sorted: &[f64]) -> Option<f64> {
    let n = sorted.len();
    match n {
        0 => None,
        n if n % 2 == 1 => Some(sorted[n / 2]),
        n => Some((sorted[n / 2 - 1] + sorted[n / 2]) / 2.0),
    }
}

#[cfg(test)]
mod tests {
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

    proptest! {
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
    }
}
