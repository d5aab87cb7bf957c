//! Comparisons with stated confidence: how a verdict rule's `a < b` is decided over rounds.
//!
//! A comparison between a measured value and another (`cubic.p99_us > 2 * bbr.p99_us`) is
//! decided by the exact one-sided Mann-Whitney rank-sum test over the two variants' rounds
//! (each side's rounds scaled by its constant factor); one against a constant
//! (`bbr.link_pct >= 80`) by the one-sample Student t-test over the variant's rounds (a
//! round's figure is an average or percentile over many samples; a distribution-free sign
//! test would need five rounds before it could decide anything). Either way the comparison
//! is
//! - *true* when the test accepts it at [`ALPHA`] (95 % confidence),
//! - *false* when the test accepts the opposite comparison at the same level,
//! - *undecided* otherwise: the rounds cannot tell, and the verdict is `inconclusive`, with
//!   about how many rounds would decide it.
//!
//! The statistic a reference names (`.min`, `.max` or the median) only matters for the printed
//! value: the test reads every faithful round of the variant. A comparison the test cannot
//! decide stays undecided whichever way the two sides' medians lean: "false" needs evidence
//! against it (the opposite comparison accepted at the same level, i.e. an effect as large as
//! the one compared with is excluded), never only medians that point the other way; the test's
//! description says when they do. Comparisons of compound
//! expressions (`a - b < 3`, `max(a, b)`), `==`/`!=`, and values without per-round data keep
//! the plain comparison of the values shown; a `min(...)` or `max(...)` of values on one side
//! is the comparisons with each of its arguments (`a > max(b, c)` is `a > b and a > c`). Three rounds against three, every round of one
//! beyond every round of the other, is the least that decides a rank test at 95 %
//! (p = 1/20); a t-test needs two rounds and a difference large against their spread.

use tcptail_units::stats;

use super::condition::{Cond, Num, Unknown, both};
use super::{Ref, Values, format_value};

/// The significance level of every test: 1 - the confidence verdicts are stated at.
pub const ALPHA: f64 = 1.0 - tcptail_report::CONFIDENCE;

/// A condition's value with stated confidence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tri {
    /// Holds (at the stated confidence).
    Yes,
    /// Does not hold (the opposite holds at the stated confidence).
    No,
    /// The rounds cannot tell.
    Undecided,
}

impl From<bool> for Tri {
    fn from(b: bool) -> Tri {
        if b { Tri::Yes } else { Tri::No }
    }
}

impl Tri {
    fn not(self) -> Tri {
        match self {
            Tri::Yes => Tri::No,
            Tri::No => Tri::Yes,
            Tri::Undecided => Tri::Undecided,
        }
    }
}

/// One side of a tested comparison.
enum Side {
    Const(f64),
    /// A variant's rounds, each multiplied by a factor.
    Rounds(Vec<f64>),
}

/// A comparison decided by a test.
#[derive(Debug, Clone, PartialEq)]
pub struct Tested {
    /// What it came to.
    pub truth: Tri,
    /// The test, its sample sizes and p-values, e.g. `rank test over 3 and 3 rounds:
    /// p = 0.05 for, 1 against`.
    pub test: String,
    /// For an undecided comparison: about what would decide it.
    pub needs: Option<String>,
}

fn side(n: &Num, values: &dyn Values) -> Option<Side> {
    let rounds = |r: &Ref, k: f64| {
        let xs = values.rounds(&r.variant, &r.metric)?;
        Some(Side::Rounds(xs.iter().map(|x| x * k).filter(|x| x.is_finite()).collect()))
    };
    match n {
        Num::Lit(x) => Some(Side::Const(*x)),
        Num::Ref(r) => rounds(r, 1.0),
        Num::Arith("*", a, b) => match (&**a, &**b) {
            (Num::Lit(k), Num::Ref(r)) | (Num::Ref(r), Num::Lit(k)) => rounds(r, *k),
            _ => None,
        },
        Num::Arith("/", a, b) => match (&**a, &**b) {
            (Num::Ref(r), Num::Lit(k)) if *k != 0.0 => rounds(r, 1.0 / k),
            _ => None,
        },
        _ => None,
    }
}

fn p(x: f64) -> String {
    if x < 0.001 {
        "< 0.001".into()
    } else {
        format!("{x:.3}").trim_end_matches('0').trim_end_matches('.').into()
    }
}

/// Decides `a op b` with a test, or `None` when the comparison is not one a test applies to
/// (see the module documentation).
pub(super) fn test(op: &str, a: &Num, b: &Num, values: &dyn Values) -> Option<Tested> {
    if !matches!(op, "<" | "<=" | ">" | ">=") {
        return None;
    }
    let (l, r) = (side(a, values)?, side(b, values)?);
    // Normalise to "left above right".
    let (l, r) = if op.starts_with('>') { (l, r) } else { (r, l) };
    let neg = |xs: &[f64]| xs.iter().map(|x| -x).collect::<Vec<f64>>();
    let rounds_on_a_side = matches!(l, Side::Rounds(_)) || matches!(r, Side::Rounds(_));
    if let (true, Some(x), Some(y)) = (rounds_on_a_side, constant(&l), constant(&r)) {
        // No spread on either side (a count the configuration fixes, e.g. the ports of a
        // narrowed range): nothing for a test to weigh; the rounds show the comparison exactly.
        let holds = if op.ends_with('=') { x >= y } else { x > y };
        let test = format!(
            "every round the same on each side ({} and {}): compared exactly",
            format_value(x),
            format_value(y)
        );
        return Some(Tested { truth: holds.into(), test, needs: None });
    }
    let (yes, no, test, needs) = match (&l, &r) {
        (Side::Rounds(x), Side::Rounds(y)) => {
            let yes = stats::rank_test_greater(x, y)?;
            let no = stats::rank_test_greater(y, x)?;
            let share = stats::share_greater(x, y)?;
            let needs = stats::rounds_needed_rank(share.max(1.0 - share), ALPHA);
            let test = format!("rank test over {} and {} rounds", x.len(), y.len());
            (yes, no, test, needs.map(|n| (n, format!("{} and {}", x.len(), y.len()))))
        }
        (Side::Rounds(x), Side::Const(c)) => t_test(x, *c, *c),
        (Side::Const(c), Side::Rounds(y)) => t_test(&neg(y), -c, *c),
        (Side::Const(_), Side::Const(_)) => return None,
    };
    let (cl, cr) = (centre(&l), centre(&r));
    let leans_for = cl >= cr;
    let truth = if yes <= ALPHA {
        Tri::Yes
    } else if no <= ALPHA {
        Tri::No
    } else {
        Tri::Undecided
    };
    let needs = (truth == Tri::Undecided).then(|| match needs {
        // The rounds that would decide it in the direction the medians lean.
        Some((n, has)) if leans_for => format!("about {n} rounds per variant (has {has})"),
        Some((n, has)) => {
            format!("about {n} rounds per variant (has {has}) to show it does not hold")
        }
        None => "a larger effect: more rounds would not decide it".to_owned(),
    });
    let mut test = format!("{test}: p = {} for, {} against", p(yes), p(no));
    if truth == Tri::Undecided && !leans_for {
        // Medians pointing away are no evidence against the comparison: it stays undecided
        // (issue 14: "not-reproduced" needs the opposite shown), and the reader sees the lean.
        test.push_str(", the medians lean against it");
    }
    Some(Tested { truth, test, needs })
}

/// The one value of a side without spread: a constant, or rounds that all measured the same
/// (two at least, or a single round against a constant would count as exact).
fn constant(s: &Side) -> Option<f64> {
    match s {
        Side::Const(c) => Some(*c),
        Side::Rounds(xs) if xs.len() >= 2 && xs.iter().all(|x| *x == xs[0]) => Some(xs[0]),
        Side::Rounds(_) => None,
    }
}

/// The median of a side (its rounds', or the constant).
fn centre(s: &Side) -> f64 {
    match s {
        Side::Const(c) => *c,
        Side::Rounds(xs) => stats::median(xs).unwrap_or(f64::NAN),
    }
}

/// The t-test of "the mean of `xs` is above `c`" both ways, its description and the rounds it
/// would need; one round gives no test (p = 1 both ways).
fn t_test(xs: &[f64], c: f64, shown: f64) -> (f64, f64, String, Option<(usize, String)>) {
    let neg: Vec<f64> = xs.iter().map(|x| -x).collect();
    let yes = stats::t_test_greater(xs, c).unwrap_or(1.0);
    let no = stats::t_test_greater(&neg, -c).unwrap_or(1.0);
    let n = xs.len();
    let mean = xs.iter().sum::<f64>() / n.max(1) as f64;
    let sd = (xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n.max(2) - 1) as f64).sqrt();
    let needs = if n < 2 { Some(2) } else { stats::rounds_needed_t((mean - c).abs() / sd, ALPHA) };
    let test = format!(
        "t-test over {n} round{} against {}",
        if n == 1 { "" } else { "s" },
        format_value(shown)
    );
    (yes, no, test, needs.map(|k| (k, n.to_string())))
}

/// `k * max(a, b)` or `max(a, b) * k` (k > 0, or no factor): the function, its arguments each
/// scaled by k.
fn extremum(n: &Num) -> Option<(&'static str, Vec<Num>)> {
    let scaled = |k: f64, f: &'static str, args: &[Num]| {
        let args = args
            .iter()
            .map(|a| {
                if k == 1.0 {
                    a.clone()
                } else {
                    Num::Arith("*", Box::new(Num::Lit(k)), Box::new(a.clone()))
                }
            })
            .collect();
        Some((f, args))
    };
    match n {
        Num::Call(f @ ("min" | "max"), args) => scaled(1.0, f, args),
        Num::Arith("*", a, b) => match (&**a, &**b) {
            (Num::Lit(k), Num::Call(f @ ("min" | "max"), args))
            | (Num::Call(f @ ("min" | "max"), args), Num::Lit(k))
                if *k > 0.0 =>
            {
                scaled(*k, f, args)
            }
            _ => None,
        },
        _ => None,
    }
}

/// A comparison with a `min(...)` or `max(...)` on one side as the comparisons of each
/// argument it stands for: `a > max(b, c)` is `a > b and a > c`, `a < max(b, c)` is
/// `a < b or a < c`, and so on; `None` when neither side is one.
fn expand(op: &'static str, a: &Num, b: &Num) -> Option<Cond> {
    if !matches!(op, "<" | "<=" | ">" | ">=") {
        return None;
    }
    let greater = op.starts_with('>');
    let (all, parts): (bool, Vec<Cond>) = if let Some((f, args)) = extremum(b) {
        // x > max(..) needs every argument below x; x < min(..) likewise.
        let all = (f == "max") == greater;
        (all, args.into_iter().map(|arg| Cond::Cmp(op, a.clone(), arg)).collect())
    } else if let Some((f, args)) = extremum(a) {
        // max(..) < x needs every argument below x; min(..) > x likewise.
        let all = (f == "max") != greater;
        (all, args.into_iter().map(|arg| Cond::Cmp(op, arg, b.clone())).collect())
    } else {
        return None;
    };
    parts.into_iter().reduce(|l, r| {
        if all { Cond::And(Box::new(l), Box::new(r)) } else { Cond::Or(Box::new(l), Box::new(r)) }
    })
}

impl Cond {
    /// The condition with stated confidence: tested comparisons are true, false or
    /// undecided; `and`, `or`, `not` follow Kleene's logic with "undecided" as the third
    /// value. `Err` when a value is missing, as for [`Cond::eval`].
    pub(super) fn decide(&self, values: &dyn Values) -> Result<Tri, Unknown> {
        match self {
            Cond::Cmp(op, a, b) => {
                let point = self.eval(values)?;
                if let Some(each) = expand(op, a, b) {
                    return each.decide(values);
                }
                Ok(test(op, a, b, values).map_or(point.into(), |t| t.truth))
            }
            Cond::Has(_) => self.eval(values).map(Tri::from),
            Cond::Not(a) => a.decide(values).map(Tri::not),
            Cond::And(a, b) | Cond::Or(a, b) => {
                let absorbing = if matches!(self, Cond::Or(..)) { Tri::Yes } else { Tri::No };
                let (a, b) = (a.decide(values), b.decide(values));
                if a == Ok(absorbing) || b == Ok(absorbing) {
                    return Ok(absorbing);
                }
                let (a, b) = both(a, b)?;
                Ok(if a == Tri::Undecided || b == Tri::Undecided {
                    Tri::Undecided
                } else {
                    absorbing.not()
                })
            }
        }
    }

    /// Every tested comparison in the condition, written out with its test, in order.
    pub(super) fn tests(&self, values: &dyn Values, out: &mut Vec<(String, Tested)>) {
        match self {
            Cond::Cmp(op, a, b) => {
                if let Some(each) = expand(op, a, b) {
                    return each.tests(values, out);
                }
                if let (Ok(_), Some(t)) = (self.eval(values), test(op, a, b, values)) {
                    out.push((format!("{} {op} {}", a.text(), b.text()), t));
                }
            }
            Cond::Has(_) => {}
            Cond::Not(a) => a.tests(values, out),
            Cond::And(a, b) | Cond::Or(a, b) => {
                a.tests(values, out);
                b.tests(values, out);
            }
        }
    }
}
