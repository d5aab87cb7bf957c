use std::collections::BTreeMap;

use proptest::prelude::*;
use tcptail_report::{Metric, Outcome, VariantResult, Verdict};

use super::condition::*;
use super::*;
use crate::spec::{Experiment, RuleSpec};

const VARIANTS: &[&str] = &["a", "b", "c", "gone"];

/// `a.x = 1`, `a.y = 2`, `b.x = 10` (min 8, max 12), `c.zero = 0`, `c.nan = NaN`; `gone` has
/// no values at all.
fn values() -> Vec<VariantResult> {
    vec![
        result("a", &[("x", 1.0, 1.0, 1.0), ("y", 2.0, 2.0, 2.0)]),
        result("b", &[("x", 10.0, 8.0, 12.0)]),
        result("c", &[("zero", 0.0, 0.0, 0.0), ("nan", f64::NAN, f64::NAN, f64::NAN)]),
    ]
}

fn result(name: &str, metrics: &[(&str, f64, f64, f64)]) -> VariantResult {
    VariantResult {
        name: name.to_string(),
        config: BTreeMap::new(),
        metrics: metrics
            .iter()
            .map(|&(m, median, min, max)| {
                let metric = Metric {
                    median,
                    min,
                    max,
                    // Three rounds: the smallest, the median and the largest.
                    values: vec![min, median, max],
                    unit: String::new(),
                    ci: None,
                    confidence: None,
                };
                (m.to_string(), metric)
            })
            .collect(),
        series: Vec::new(),
        notes: Vec::new(),
        not_applicable: None,
        expected_metrics: Vec::new(),
        rounds: Vec::new(),
    }
}

fn spec(when: Option<&str>, reason: &str) -> RuleSpec {
    RuleSpec {
        verdict: Verdict::Reproduced,
        when: when.map(str::to_string),
        reason: reason.to_string(),
        line: 7,
    }
}

fn cond(text: &str) -> Cond {
    parse_condition(text, VARIANTS).unwrap_or_else(|e| panic!("`{text}`: {e}"))
}

fn error(text: &str) -> RuleError {
    match parse_condition(text, VARIANTS) {
        Ok(c) => panic!("`{text}` parsed as {c:?}"),
        Err(e) => e,
    }
}

/// `Some(b)` or `None` for unknown.
fn eval(text: &str) -> Option<bool> {
    cond(text).eval(&values()).ok()
}

fn num(text: &str) -> Option<f64> {
    match cond(&format!("{text} == 0")) {
        Cond::Cmp("==", n, _) => n.eval(&values()).ok(),
        c => panic!("{c:?}"),
    }
}

fn r(variant: &str, metric: &str) -> Ref {
    Ref { variant: variant.into(), metric: metric.into(), stat: Stat::Median }
}

#[test]
fn arithmetic_precedence_and_unary_minus() {
    assert_eq!(num("1 + 2 * 3"), Some(7.0));
    assert_eq!(num("(1 + 2) * 3"), Some(9.0));
    assert_eq!(num("10 - 4 - 3"), Some(3.0));
    assert_eq!(num("12 / 3 / 2"), Some(2.0));
    assert_eq!(num("-2 * 3"), Some(-6.0));
    assert_eq!(num("- -2"), Some(2.0));
    assert_eq!(num("2 - -a.y"), Some(4.0));
    assert_eq!(num("1.5e2 + 2E-1 + 0.25"), Some(150.45));
    assert_eq!(num("b.x.max / b.x.min"), Some(1.5));
    assert_eq!(num("min(b.x, a.y, 7) + max(a.x, a.y) + abs(-3)"), Some(7.0));
    assert_eq!(num("max(a.x)"), Some(1.0));
}

#[test]
fn logic_precedence() {
    // `or` binds looser than `and`: true or (true and false).
    assert_eq!(eval("1 < 2 or 1 < 2 and 1 > 2"), Some(true));
    assert_eq!(eval("(1 < 2 or 1 < 2) and 1 > 2"), Some(false));
    // `not` binds tighter than `and` and looser than comparisons.
    assert_eq!(eval("not 1 > 2 and 1 < 2"), Some(true));
    assert_eq!(eval("not (1 < 2 and 1 > 2)"), Some(true));
    assert_eq!(eval("not not a.x == 1"), Some(true));
    assert_eq!(eval("a.x + 1 <= a.y * 1"), Some(true));
    assert_eq!(eval("a.x != a.y and a.x >= 1 and a.y > 1"), Some(true));
    let Cond::Or(_, right) = cond("a.x < 1 or a.x < 2 and a.x < 3") else { panic!() };
    assert!(matches!(*right, Cond::And(..)));
}

#[test]
fn references_and_stats() {
    let refs = |text: &str| {
        let rule = Rule::compile(&spec(Some(text), "{c.zero} {a.x}"), VARIANTS).unwrap();
        rule.references().iter().map(Ref::to_string).collect::<Vec<_>>()
    };
    assert_eq!(
        refs("a.rtt_min.min < b.x_max.max and has(a.min) or a.x > 0"),
        ["a.rtt_min.min", "b.x_max.max", "a.min", "a.x", "c.zero"]
    );
    assert_eq!(
        cond("has(b.x.min)"),
        Cond::Has(Ref { variant: "b".into(), metric: "x".into(), stat: Stat::Min })
    );
}

#[test]
fn kleene_truth_tables() {
    let (t, f, u) = ("1 < 2", "1 > 2", "gone.x > 0");
    let atoms = [(t, Some(true)), (f, Some(false)), (u, None)];
    for (a, va) in atoms {
        assert_eq!(eval(&format!("not {a}")), va.map(|v| !v), "not {a}");
        for (b, vb) in atoms {
            let and = match (va, vb) {
                (Some(false), _) | (_, Some(false)) => Some(false),
                (Some(true), Some(true)) => Some(true),
                _ => None,
            };
            let or = match (va, vb) {
                (Some(true), _) | (_, Some(true)) => Some(true),
                (Some(false), Some(false)) => Some(false),
                _ => None,
            };
            assert_eq!(eval(&format!("{a} and {b}")), and, "{a} and {b}");
            assert_eq!(eval(&format!("{a} or {b}")), or, "{a} or {b}");
        }
    }
}

#[test]
fn missing_nan_and_division_by_zero_are_unknown() {
    assert_eq!(eval("a.nothing > 0"), None);
    assert_eq!(eval("c.nan > 0"), None);
    assert_eq!(eval("c.nan != c.nan"), None);
    assert_eq!(eval("a.x / c.zero > 0"), None);
    assert_eq!(eval("0 / 0 == 0"), None);
    assert_eq!(eval("min(a.x, gone.x) < 5"), None);
    assert_eq!(eval("has(a.x)"), Some(true));
    assert_eq!(eval("has(c.nan)"), Some(false));
    assert_eq!(eval("has(gone.x)"), Some(false));
    assert_eq!(eval("not has(gone.x) or gone.x > 1"), Some(true));
    // Which references made it unknown, and only those.
    let c = cond("(gone.x > 1 or 1 < 2) and gone.y > a.x and c.nan > 0 and a.x > 0");
    assert_eq!(c.eval(&values()), Err(Unknown(vec![r("gone", "y"), r("c", "nan")])));
    assert_eq!(cond("a.x / c.zero > 0").eval(&values()), Err(Unknown(vec![])));
}

#[test]
fn syntax_errors_name_the_column() {
    let cases = [
        ("a.x >", "column 6 (at the end of `a.x >`): expected a value"),
        ("a.x > > 1", "column 7 (`> 1`): expected a value, found `>`"),
        (
            "(a.x > 1",
            "column 9 (at the end of `(a.x > 1`): expected `)` to close the `(` at column 1",
        ),
        ("a.x > 1)", "column 8 (`)`): expected `and`, `or`, an operator or the end"),
        ("a.x = 1", "column 5 (`= 1`): unexpected `=` (compare with `==`)"),
        (
            "a.x > 1 && a.y",
            "column 9 (`&& a.y`): unexpected `&` (join conditions with `and` and `or`)",
        ),
        ("a.x > 10ms", "column 7 (`10ms`): `10ms` is not a number"),
        ("a.x > 1.2.3", "column 7 (`1.2.3`): `1.2.3` is not a number"),
        ("a.x < a.y < 3", "column 11 (`< 3`): comparisons do not chain: join them with `and`"),
        ("a.x > 1 and", "column 12 (at the end of `a.x > 1 and`): expected a value"),
        ("and a.x > 1", "column 1 (`and a.x > 1`): expected a value, found `and`"),
        (
            "foo(a.x) > 1",
            "column 1 (`foo(a.x) > 1`): unknown function `foo`; the functions are min, max, abs \
             and has",
        ),
        (
            "nodelay > 1",
            "column 1 (`nodelay > 1`): `nodelay` is not a reference: write `variant.metric` (or \
             a number)",
        ),
        ("abs(a.x, a.y) > 1", "column 1 (`abs(a.x, a.y) > 1`): `abs` takes exactly one argument"),
        ("has(1)", "column 5 (`1)`): `has` takes one `variant.metric` reference"),
        ("min > 1", "column 1 (`min > 1`): `min` needs its arguments in `(...)`"),
        (
            "a.x.p99 > 1",
            "column 1 (`a.x.p99 > 1`): `.p99` is not a statistic: write `.min` or `.max`, or \
             nothing for the median",
        ),
        (
            "a.x.min.max > 1",
            "column 1 (`a.x.min.max > 1`): `a.x.min.max` is not a reference: write \
             `variant.metric`, `variant.metric.min` or `variant.metric.max`",
        ),
        (
            "A.x > 1",
            "column 1 (`A.x > 1`): `A` in `A.x` is not a valid name (lowercase letters, digits \
             and `_`, starting with a letter)",
        ),
        ("a.x µs > 1", "column 5 (`µs > 1`): unexpected `µ`"),
        ("1e999 > 1", "column 1 (`1e999 > 1`): number out of range"),
    ];
    for (text, message) in cases {
        let e = error(text);
        assert_eq!(e.message, message, "`{text}`");
        assert_eq!(e.key, "when");
        assert_eq!(e.to_string(), message);
    }
    let long = error("a.x > 1 and b.x > 2 and c.x > 3 and ) and b.x > 4");
    assert_eq!(long.column, 37);
    assert_eq!(long.message, "column 37 (`) and b.x > 4`): expected a value, found `)`");
    let end = error("a.x > 1 and b.x > 2 and c.x > 3 and");
    assert_eq!(
        end.message,
        "column 36 (at the end of `…b.x > 2 and c.x > 3 and`): expected a value"
    );
    assert_eq!(error(" ").message, "column 2 (the text is empty): expected a value");
    let deep = format!("{}a.x > 1{}", "(".repeat(100), ")".repeat(100));
    assert!(error(&deep).message.ends_with("nested too deeply"));
}

#[test]
fn type_errors() {
    let cases = [
        (
            "a.x",
            "column 1 (`a.x`): this is a number, not a condition: compare it with `<`, `>`, ...",
        ),
        (
            "a.x and a.y > 1",
            "column 1 (`a.x and a.y > 1`): `and` needs a condition, not a number: compare it \
             with `<`, `>`, ...",
        ),
        (
            "a.x > 1 or 2",
            "column 12 (`2`): `or` needs a condition, not a number: compare it with `<`, `>`, ...",
        ),
        (
            "not a.x",
            "column 5 (`a.x`): `not` needs a condition, not a number: compare it with `<`, `>`, \
             ...",
        ),
        (
            "(a.x > 1) + 1 > 0",
            "column 1 (`(a.x > 1) + 1 > 0`): `+` needs a number, not a condition",
        ),
        ("2 * has(a.x) > 0", "column 5 (`has(a.x) > 0`): `*` needs a number, not a condition"),
        ("-(a.x > 1) > 0", "column 2 (`(a.x > 1) > 0`): unary `-` needs a number, not a condition"),
        ("min(a.x > 1) > 0", "column 5 (`a.x > 1) > 0`): `min` needs a number, not a condition"),
        ("has(a.x) == 1", "column 1 (`has(a.x) == 1`): `==` needs a number, not a condition"),
    ];
    for (text, message) in cases {
        assert_eq!(error(text).message, message, "`{text}`");
    }
}

#[test]
fn unknown_variants_are_named_with_the_known_ones() {
    let e = Rule::compile(&spec(Some("a.x > 1 and bbr.x > 1"), "ok"), VARIANTS).unwrap_err();
    assert_eq!(e.key, "when");
    assert_eq!(e.column, 13);
    assert_eq!(
        e.message,
        "column 13 (`bbr.x > 1`): unknown variant `bbr`; this experiment's variants are a, b, \
         c, gone"
    );
    let e = Rule::compile(&spec(Some("a.x > 1"), "µs: {a.x} vs { bbr.x }"), VARIANTS).unwrap_err();
    assert_eq!(e.key, "reason");
    assert_eq!(e.column, 16);
    assert!(e.message.contains("unknown variant `bbr`"), "{}", e.message);
}

#[test]
fn templates() {
    let fill =
        |text: &str| Rule::compile(&spec(None, text), VARIANTS).map(|rule| rule.reason(&values()));
    assert_eq!(fill("b {b.x} in [{b.x.min}, {b.x.max}]").unwrap(), "b 10 in [8, 12]");
    // `gone` is a variant of the file that this mode did not run; `c` ran without a value.
    assert_eq!(
        fill("{gone.x}, {c.nan}, {c.none} and { a.y }").unwrap(),
        "(not run in this mode), n/a, n/a and 2"
    );
    assert_eq!(fill("{{literal}} {{{a.x}}} µs").unwrap(), "{literal} {1} µs");
    assert_eq!(fill("").unwrap(), "");
    let err = |text: &str| fill(text).unwrap_err().message;
    assert_eq!(
        err("p50 {a.x"),
        "column 5 (`{a.x`): `{` is not closed: write `{{` for a literal brace"
    );
    assert_eq!(
        err("{a.x {b.x}"),
        "column 1 (`{a.x {b.x}`): `{` is not closed: write `{{` for a literal brace"
    );
    assert_eq!(err("a } b"), "column 3 (`} b`): a lone `}`: write `}}` for a literal brace");
    assert!(err("{}").contains("is not a reference"));
    assert!(err("{a}").contains("is not a reference"));
    assert!(err("{a.x.p50}").contains("is not a statistic"));
}

/// A placeholder may be an arithmetic expression over values (the ladder's wake-up part of a
/// rung is `{split_cpus.mean_us - same_cpu.mean_us}`); it reads `n/a` without a value, and its
/// references count as the reason's.
#[test]
fn template_expressions() {
    let rule = |text: &str| Rule::compile(&spec(None, text), VARIANTS);
    let fill = |text: &str| rule(text).map(|rule| rule.reason(&values()));
    assert_eq!(fill("{b.x - a.y} of {b.x}").unwrap(), "8 of 10");
    assert_eq!(fill("{100 * (b.x - a.y) / b.x} %").unwrap(), "80 %");
    assert_eq!(fill("{max(a.x, a.y) * 2} {b.x.max - b.x.min}").unwrap(), "4 4");
    assert_eq!(fill("{gone.x - a.x}, {a.x / c.zero}").unwrap(), "n/a, n/a");
    let refs: Vec<String> =
        rule("{b.x - a.y}").unwrap().references().iter().map(Ref::to_string).collect();
    assert_eq!(refs, ["b.x", "a.y"]);
    let err = |text: &str| fill(text).unwrap_err();
    let e = err("d {b.x - bbr.x}");
    assert_eq!(e.key, "reason");
    assert!(e.message.contains("in the expression: column 7 (`bbr.x`): unknown variant `bbr`"));
    assert_eq!(e.column, 10, "{}", e.message);
    assert!(err("{b.x - }").message.contains("in the expression"));
    // A comparison is not a value: refused (as a malformed reference).
    assert_eq!(err("{b.x < a.x}").key, "reason");
}

#[test]
fn formats_three_significant_digits() {
    let cases = [
        (118.0, "118"),
        (61.2, "61.2"),
        (61.0, "61"),
        (0.0123, "0.0123"),
        (12345.0, "12300"),
        (1234567.0, "1230000"),
        (9999.0, "10000"),
        (9.996, "10"),
        (1.5, "1.5"),
        (0.0, "0"),
        (-61.24, "-61.2"),
        (0.0001234, "0.000123"),
        (0.00001234, "1.23e-5"),
        (12345678.0, "1.23e7"),
        (10_000_000.0, "1e7"),
        (f64::NAN, "n/a"),
    ];
    for (x, text) in cases {
        assert_eq!(format_value(x), text, "{x}");
    }
}

#[test]
fn decide_in_order_with_unknown_stopping() {
    let rules = |whens: &[Option<&str>]| -> Vec<Rule> {
        whens
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let verdict = [Verdict::Reproduced, Verdict::Partly, Verdict::NotReproduced][i];
                let s = RuleSpec { verdict, line: 10 * (i + 1), ..spec(*w, "{a.x} {gone.x}") };
                Rule::compile(&s, VARIANTS).unwrap()
            })
            .collect()
    };
    let v = values();
    let d = decide(&rules(&[Some("a.x > 5"), Some("a.x < 5"), None]), &v);
    assert_eq!(d.verdict, Verdict::Partly);
    assert_eq!(d.rule, "when: a.x < 5");
    assert_eq!(d.reason, "1 (not run in this mode)");
    assert_eq!(d.missing, ["gone.x"]);
    let d = decide(&rules(&[Some("a.x > 5"), Some("a.x > 6"), None]), &v);
    assert_eq!((d.verdict, d.rule.as_str()), (Verdict::NotReproduced, "otherwise"));
    let d = decide(&rules(&[Some("a.x > 5"), Some("gone.x > a.x or gone.y.max > 1"), None]), &v);
    assert_eq!(d.verdict, Verdict::NotApplicable);
    assert_eq!(
        d.reason,
        "the rule at line 20 (`gone.x > a.x or gone.y.max > 1`) needs gone.x and gone.y.max \
         which this run did not measure. Values read: a.x 1"
    );
    assert_eq!(d.missing, ["gone.x", "gone.y.max"]);
    let d = decide(&rules(&[Some("a.x / c.zero > 1"), None]), &v);
    assert_eq!(d.verdict, Verdict::NotApplicable);
    assert!(
        d.reason.ends_with(
            "cannot be decided: it divides by zero or overflows. Values read: a.x 1, c.zero 0"
        ),
        "{}",
        d.reason
    );
    let d = decide(&rules(&[Some("a.x > 5")]), &v);
    assert_eq!((d.verdict, d.rule.as_str()), (Verdict::NotApplicable, "none"));
}

#[test]
fn deep_nesting_is_an_error_not_a_stack_overflow() {
    for open in ["(", "min(", "abs(", "-(", "not (", "- - ", "not not "] {
        let close = if open.contains('(') { ")" } else { "" };
        let nest = |depth: usize| format!("{}a.x > 1{}", open.repeat(depth), close.repeat(depth));
        for depth in 0..=MAX_DEPTH + 1 {
            let _ = parse_condition(&nest(depth), VARIANTS);
        }
        let e = parse_condition(&nest(1000), VARIANTS).unwrap_err();
        assert!(e.message.ends_with("nested too deeply"), "{open}: {e}");
    }
    let parens = MAX_DEPTH - 1;
    let text = format!("{}a.x > 1{}", "(".repeat(parens), ")".repeat(parens));
    assert_eq!(eval(&text), Some(false));
}

fn token() -> impl Strategy<Value = String> {
    const FIXED: &[&str] = &[
        "a.x", "b.x.min", "b.x.max", "gone.x", "c.zero", "1", "0", "2.5e1", "-", "+", "*", "/",
        "(", ")", ",", "<", "<=", ">", ">=", "==", "!=", "and", "or", "not", "min(", "max(",
        "abs(", "has(", "{", "}", ".", "z.x",
    ];
    prop_oneof![
        3 => proptest::sample::select(FIXED).prop_map(str::to_string),
        1 => "[ -~µ]{0,4}",
    ]
}

proptest! {
    #[test]
    fn parser_never_panics_on_any_string(text in "\\PC{0,60}") {
        let _ = parse_condition(&text, VARIANTS);
        let _ = parse_template(&text, VARIANTS, "reason");
    }

    #[test]
    fn parser_and_evaluation_never_panic_on_token_soup(
        tokens in proptest::collection::vec(token(), 0..24),
        glue in proptest::bool::ANY,
    ) {
        let text = tokens.join(if glue { "" } else { " " });
        if let Ok(c) = parse_condition(&text, VARIANTS) {
            let _ = c.eval(&values());
        }
        if let Ok(pieces) = parse_template(&text, VARIANTS, "reason") {
            let rule = Rule { verdict: Verdict::Partly, when: None, reason: pieces, line: 1 };
            let _ = rule.reason(&values());
        }
    }
}

mod bbr_burst;
mod builtins;
mod reconnect_storm;
mod rwin_limited;
mod tenant_isolation;

#[test]
fn conditions_explain_themselves_with_the_values() {
    let v = values();
    let explain = |text: &str| cond(text).explain(&v.as_slice());
    assert_eq!(explain("b.x >= 2 * a.y"), "10 >= 4 ✓");
    assert_eq!(explain("b.x.min > a.y and b.x.max < 11"), "8 > 2 ✓ and 12 < 11 ✗");
    // A different connective nested in another is grouped; the same one is not.
    assert_eq!(explain("a.x < 0 or b.x > 9 and a.y == 2"), "1 < 0 ✗ or (10 > 9 ✓ and 2 == 2 ✓)");
    assert_eq!(explain("(a.x < 0 or b.x > 9) and a.y == 2"), "(1 < 0 ✗ or 10 > 9 ✓) and 2 == 2 ✓");
    assert_eq!(explain("a.x < 0 or a.x < 1 or a.x < 2"), "1 < 0 ✗ or 1 < 1 ✗ or 1 < 2 ✓");
    // Missing values, division by zero, has() and not.
    assert_eq!(explain("gone.x > a.x"), "n/a > 1 ?");
    assert_eq!(explain("a.x / c.zero > 1"), "n/a > 1 ?");
    assert_eq!(
        explain("not has(gone.x) and not (a.x > max(b.x, 3))"),
        "not (has(gone.x) ✗) and not (1 > 10 ✗)"
    );
}

#[test]
fn rule_results_mark_the_decider_and_keep_evaluating_the_rest() {
    let v = values();
    let rules: Vec<Rule> = [
        (Verdict::Reproduced, Some("b.x > 100")),
        (Verdict::Partly, Some("b.x > 5")),
        (Verdict::NotApplicable, Some("gone.x > 1")),
        (Verdict::NotReproduced, None),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, (verdict, when))| {
        Rule::compile(&RuleSpec { verdict, line: i + 1, ..spec(when, "r") }, VARIANTS).unwrap()
    })
    .collect();
    let d = decide(&rules, &v.as_slice());
    assert_eq!(d.verdict, Verdict::Partly);
    let outcomes: Vec<(Outcome, bool)> = d.rules.iter().map(|r| (r.outcome, r.fired)).collect();
    assert_eq!(
        outcomes,
        [
            (Outcome::Fails, false),
            (Outcome::Holds, true),
            (Outcome::Unknown, false),
            (Outcome::Holds, false)
        ]
    );
    assert_eq!(d.rules[0].evaluated.as_deref(), Some("10 > 100 ✗"));
    assert_eq!((d.rules[3].when.as_deref(), d.rules[3].evaluated.as_deref()), (None, None));
    assert_eq!(d.rules[2].line, 3);
}

#[test]
fn findings_give_the_text_for_their_outcome_or_say_what_is_missing() {
    let v = values();
    let finding = |when: &str| {
        let spec = crate::spec::FindingSpec {
            title: "t".into(),
            when: when.into(),
            then: "yes {b.x}".into(),
            otherwise: "no {a.x.max}".into(),
            line: 3,
        };
        FindingRule::compile(&spec, VARIANTS).unwrap().evaluate(&v.as_slice())
    };
    let f = finding("b.x > a.x");
    assert_eq!(
        (f.outcome, f.text.as_str(), f.evaluated.as_str()),
        (Outcome::Holds, "yes 10", "10 > 1 ✓")
    );
    assert_eq!(finding("b.x < a.x").text, "no 1");
    let f = finding("gone.x > a.x");
    assert_eq!(f.outcome, Outcome::Unknown);
    assert_eq!(f.text, "not decided: needs gone.x, which this run did not measure");
    let bad = crate::spec::FindingSpec {
        title: "t".into(),
        when: "a.x > 1".into(),
        then: "{nope.x}".into(),
        otherwise: "".into(),
        line: 3,
    };
    assert_eq!(FindingRule::compile(&bad, VARIANTS).unwrap_err().key(), "then");
}

/// Variants `a` and `b` with the given rounds of metric `x`.
fn rounds(a: &[f64], b: &[f64]) -> Vec<VariantResult> {
    let variant = |name: &str, xs: &[f64]| {
        let mut v = result(name, &[]);
        v.metrics.insert("x".into(), Metric::from_rounds("x", xs).unwrap());
        v
    };
    vec![variant("a", a), variant("b", b)]
}

/// `[[verdict]]` rules in file order, at lines 10, 20, 30 ..., each with the reason
/// `{a.x} vs {b.x}`.
fn ladder(rules: &[(Verdict, Option<&str>)]) -> Vec<Rule> {
    let rule = |i: usize, verdict, when| {
        let s = RuleSpec { verdict, line: 10 * (i + 1), ..spec(when, "{a.x} vs {b.x}") };
        Rule::compile(&s, VARIANTS).unwrap()
    };
    rules.iter().enumerate().map(|(i, &(verdict, when))| rule(i, verdict, when)).collect()
}

fn decided(text: &str, values: &[VariantResult]) -> Result<Tri, Vec<Ref>> {
    let rule = Rule::compile(&spec(Some(text), "r"), VARIANTS).unwrap();
    rule.holds(&values)
}

#[test]
fn comparisons_of_variants_are_rank_tests_over_their_rounds() {
    let separated = rounds(&[30.0, 31.0, 32.0], &[10.0, 11.0, 12.0]);
    assert_eq!(decided("a.x > 2 * b.x", &separated), Ok(Tri::Yes));
    assert_eq!(decided("a.x > 4 * b.x", &separated), Ok(Tri::No), "the opposite is shown");
    // Two rounds each cannot reach 95 % (p = 1/6): the data leans toward it, undecided.
    let two = rounds(&[30.0, 32.0], &[10.0, 12.0]);
    assert_eq!(decided("a.x > 2 * b.x", &two), Ok(Tri::Undecided));
    // Overlapping rounds whose medians point the other way: no evidence against it either, so
    // undecided (this changed: it used to count as false), saying which way the medians lean.
    let against = rounds(&[9.0, 10.0, 13.0], &[8.0, 11.0, 12.0]);
    assert_eq!(decided("a.x > b.x", &against), Ok(Tri::Undecided));
    let rule = Rule::compile(&spec(Some("a.x > b.x"), "r"), VARIANTS).unwrap();
    let t = &rule.tests(&against.as_slice())[0].1;
    assert!(t.test.ends_with(", the medians lean against it"), "{}", t.test);
    // The statistic named only changes the printed value: the test reads every round.
    assert_eq!(decided("a.x.min > 2 * b.x.max", &separated), Ok(Tri::Yes));
    let rule = Rule::compile(&spec(Some("a.x > 2 * b.x"), "r"), VARIANTS).unwrap();
    let tests = rule.tests(&separated.as_slice());
    assert_eq!(tests.len(), 1);
    assert_eq!(tests[0].0, "a.x > 2 * b.x");
    assert_eq!(tests[0].1.test, "rank test over 3 and 3 rounds: p = 0.05 for, 1 against");
}

#[test]
fn comparisons_with_a_constant_are_t_tests() {
    let v = rounds(&[88.0, 90.0, 92.0], &[1.0]);
    assert_eq!(decided("a.x >= 80", &v), Ok(Tri::Yes));
    assert_eq!(decided("a.x < 80", &v), Ok(Tri::No));
    assert_eq!(decided("80 <= a.x", &v), Ok(Tri::Yes));
    // Close to the threshold and noisy: undecided, with the rounds it would need.
    let noisy = rounds(&[70.0, 85.0, 100.0], &[1.0]);
    assert_eq!(decided("a.x >= 80", &noisy), Ok(Tri::Undecided));
    let rule = Rule::compile(&spec(Some("a.x >= 80"), "r"), VARIANTS).unwrap();
    let t = &rule.tests(&noisy.as_slice())[0].1;
    assert!(t.test.starts_with("t-test over 3 rounds against 80"), "{}", t.test);
    assert!(t.needs.as_deref().unwrap_or("").starts_with("about "), "{:?}", t.needs);
    // One round decides nothing.
    assert_eq!(decided("b.x < 80", &v), Ok(Tri::Undecided));
}

#[test]
fn min_and_max_of_variants_are_each_compared() {
    let v = vec![
        rounds(&[30.0, 31.0, 32.0], &[10.0, 11.0, 12.0]).remove(0),
        rounds(&[1.0], &[10.0, 11.0, 12.0]).remove(1),
        {
            let mut c = result("c", &[]);
            c.metrics.insert("x".into(), Metric::from_rounds("x", &[5.0, 6.0, 7.0]).unwrap());
            c
        },
    ];
    assert_eq!(decided("a.x > 2 * max(b.x, c.x)", &v), Ok(Tri::Yes));
    assert_eq!(decided("a.x > 4 * max(b.x, c.x)", &v), Ok(Tri::No));
    assert_eq!(decided("a.x > 3 * min(b.x, c.x)", &v), Ok(Tri::Yes), "30 > 3 x c's 5-7");
    assert_eq!(decided("max(b.x, c.x) < a.x", &v), Ok(Tri::Yes));
    let rule = Rule::compile(&spec(Some("a.x > 2 * max(b.x, c.x)"), "r"), VARIANTS).unwrap();
    let names: Vec<String> = rule.tests(&v.as_slice()).into_iter().map(|t| t.0).collect();
    assert_eq!(names, ["a.x > 2 * b.x", "a.x > 2 * c.x"]);
}

#[test]
fn undecided_follows_kleene_and_makes_the_verdict_inconclusive() {
    let two = rounds(&[30.0, 32.0], &[10.0, 12.0]);
    assert_eq!(decided("a.x > 2 * b.x and 1 > 2", &two), Ok(Tri::No));
    assert_eq!(decided("a.x > 2 * b.x or 1 < 2", &two), Ok(Tri::Yes));
    assert_eq!(decided("a.x > 2 * b.x and 1 < 2", &two), Ok(Tri::Undecided));
    assert_eq!(decided("not a.x > 2 * b.x", &two), Ok(Tri::Undecided));
    let rules = ladder(&[
        (Verdict::Reproduced, Some("a.x > 2 * b.x")),
        (Verdict::Partly, Some("a.x > b.x")),
        (Verdict::NotReproduced, None),
    ]);
    let d = decide(&rules, &two);
    assert_eq!(d.verdict, Verdict::Inconclusive, "{}", d.reason);
    assert_eq!(
        d.reason,
        "the rule at line 10 (reproduced when `a.x > 2 * b.x`) cannot be decided at 95 % \
         confidence from these rounds: `a.x > 2 * b.x` (rank test over 2 and 2 rounds: \
         p = 0.167 for, 1 against; needs about 5 rounds per variant (has 2 and 2)). Values \
         read: a.x 31, b.x 11. Intervals of the medians: a.x 31 [30–32] (50 %), b.x 11 \
         [10–12] (50 %)"
    );
    assert_eq!(d.rules[0].outcome, Outcome::Undecided);
    assert_eq!(d.rules[0].evaluated.as_deref(), Some("31 > 22 ~"));
    // Three rounds each decide it, and the reason's evidence quotes the test and intervals.
    let three = rounds(&[30.0, 31.0, 32.0], &[10.0, 11.0, 12.0]);
    let d = decide(&rules, &three);
    assert_eq!((d.verdict, d.reason.as_str()), (Verdict::Reproduced, "31 vs 11"));
    assert_eq!(
        d.evidence,
        " [at 95 % confidence: `a.x > 2 * b.x` holds (rank test over 3 and 3 rounds: p = 0.05 \
         for, 1 against). Intervals of the medians: a.x 31 [30–32] (75 %), b.x 11 [10–12] (75 %)]"
    );
    // No effect: the seed's 2x is excluded by the test, and the final rule quotes it; the
    // smaller effect `partly` claims can be neither shown nor excluded, which is said, but
    // not claimed.
    let none = rounds(&[10.0, 11.0, 12.0], &[10.5, 11.0, 11.5]);
    let d = decide(&rules, &none);
    assert_eq!(d.verdict, Verdict::NotReproduced, "{}", d.reason);
    assert!(d.evidence.contains("`a.x > 2 * b.x` fails (rank test"), "{}", d.evidence);
    assert!(
        d.evidence.contains(
            "A smaller effect than the seed's can be neither shown nor excluded from these \
             rounds: the rule at line 20 (partly when `a.x > b.x`): `a.x > b.x` (rank test"
        ),
        "{}",
        d.evidence
    );
    assert_eq!(d.rules[1].outcome, Outcome::Undecided);
    // The opposite shown: not reproduced on the partly rule's own test.
    let opposite = rounds(&[5.0, 5.5, 6.0], &[10.0, 11.0, 12.0]);
    let d = decide(&rules, &opposite);
    assert_eq!(d.verdict, Verdict::NotReproduced, "{}", d.reason);
    assert!(d.evidence.contains("`a.x > b.x` fails"), "{}", d.evidence);
    assert!(!d.evidence.contains("smaller effect"), "{}", d.evidence);
}

/// Medians that lean against the claim without a test excluding the seed's effect are no
/// evidence against it: `inconclusive`, with the rounds that would show it does not hold
/// (this changed: such data used to give `not-reproduced`).
#[test]
fn a_lean_against_the_claim_is_inconclusive_not_a_refutation() {
    let rules = ladder(&[
        (Verdict::Reproduced, Some("a.x >= 1.5 * b.x")),
        (Verdict::Partly, Some("a.x > b.x")),
        (Verdict::NotReproduced, None),
    ]);
    // Wide, overlapping rounds with a's median below b's (a rank test p = 0.5 or so).
    let noisy = rounds(&[6.0, 10.0, 25.0], &[5.0, 12.0, 20.0]);
    let d = decide(&rules, &noisy);
    assert_eq!(d.verdict, Verdict::Inconclusive, "{}", d.reason);
    assert!(d.reason.contains("the rule at line 10 (reproduced when"), "{}", d.reason);
    assert!(d.reason.contains("the medians lean against it; needs about"), "{}", d.reason);
    // A `reproduced` rule that is false without a test (a variant this mode did not run) does
    // not exclude the seed's effect: an undecided `partly` below it stays inconclusive.
    let rules = ladder(&[
        (Verdict::Reproduced, Some("has(c.x) and c.x > 2 * b.x")),
        (Verdict::Partly, Some("a.x > b.x")),
        (Verdict::NotReproduced, None),
    ]);
    let d = decide(&rules, &noisy);
    assert_eq!(d.verdict, Verdict::Inconclusive, "{}", d.reason);
    assert!(d.reason.contains("the rule at line 20 (partly when"), "{}", d.reason);
}
