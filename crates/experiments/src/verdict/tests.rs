use std::collections::BTreeMap;

use proptest::prelude::*;
use tcptail_report::{Metric, VariantResult, Verdict};

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
                let metric = Metric { median, min, max, values: vec![median], unit: String::new() };
                (m.to_string(), metric)
            })
            .collect(),
        series: Vec::new(),
        notes: Vec::new(),
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
    assert_eq!(fill("{gone.x}, {c.nan} and { a.y }").unwrap(), "n/a, n/a and 2");
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
    assert_eq!(d.reason, "1 n/a");
    assert_eq!(d.missing, ["gone.x"]);
    let d = decide(&rules(&[Some("a.x > 5"), Some("a.x > 6"), None]), &v);
    assert_eq!((d.verdict, d.rule.as_str()), (Verdict::NotReproduced, "otherwise"));
    let d = decide(&rules(&[Some("a.x > 5"), Some("gone.x > a.x or gone.y.max > 1"), None]), &v);
    assert_eq!(d.verdict, Verdict::NotApplicable);
    assert_eq!(
        d.reason,
        "the rule at line 20 (`gone.x > a.x or gone.y.max > 1`) needs gone.x and gone.y.max \
         which this run did not measure"
    );
    assert_eq!(d.missing, ["gone.x", "gone.y.max"]);
    let d = decide(&rules(&[Some("a.x / c.zero > 1"), None]), &v);
    assert_eq!(d.verdict, Verdict::NotApplicable);
    assert!(
        d.reason.ends_with("cannot be decided: it divides by zero or overflows"),
        "{}",
        d.reason
    );
    let d = decide(&rules(&[Some("a.x > 5")]), &v);
    assert_eq!((d.verdict, d.rule.as_str()), (Verdict::NotApplicable, "none"));
}

#[test]
fn every_builtin_rule_compiles() {
    let experiments = Experiment::builtins();
    assert!(experiments.len() >= 9);
    for e in &experiments {
        let variants: Vec<&str> = e.variants.iter().map(|v| v.name.as_str()).collect();
        assert!(!e.rules.is_empty(), "{}", e.name);
        for rule in &e.rules {
            let compiled = Rule::compile(rule, &variants).unwrap_or_else(|err| {
                panic!("{} line {}: `{}`: {err}", e.file, rule.line, err.key)
            });
            assert_eq!(compiled.when(), rule.when.as_deref());
            assert!(compiled.references().iter().all(|r| variants.contains(&r.variant.as_str())));
        }
        assert!(e.rules.last().unwrap().when.is_none(), "{}: final rule has a `when`", e.name);
    }
}

fn builtin(name: &str) -> (Experiment, Vec<Rule>) {
    let e = Experiment::builtin(name).unwrap();
    let variants: Vec<&str> = e.variants.iter().map(|v| v.name.as_str()).collect();
    let rules = e.rules.iter().map(|r| Rule::compile(r, &variants).unwrap()).collect();
    (e, rules)
}

/// Results where every listed variant has the given medians, with a ±5 % spread.
fn results(values: &[(&str, &[(&str, f64)])]) -> Vec<VariantResult> {
    values
        .iter()
        .map(|(name, metrics)| {
            let m: Vec<_> = metrics.iter().map(|&(m, x)| (m, x, 0.95 * x, 1.05 * x)).collect();
            result(name, &m)
        })
        .collect()
}

#[test]
fn nagle_delack() {
    let (e, rules) = builtin("nagle-delack");
    let run = |nagle: f64, nodelay: f64| {
        let delack = [("p50_us", nagle), ("server_ato_us", 40000.0)];
        let nodelay = [("p50_us", nodelay)];
        let vs: Vec<(&str, &[(&str, f64)])> = e
            .variants
            .iter()
            .map(|v| match v.name.as_str() {
                "nagle_delack" => ("nagle_delack", &delack[..]),
                "nodelay" => ("nodelay", &nodelay[..]),
                name => (name, &[("p50_us", 60.0)][..]),
            })
            .collect();
        decide(&rules, &results(&vs))
    };
    let d = run(40123.0, 52.0);
    assert_eq!(d.verdict, Verdict::Reproduced);
    assert!(d.reason.contains("takes 40100 µs at p50 against 52 µs"), "{}", d.reason);
    assert!(d.missing.is_empty(), "{:?}", d.missing);
    assert_eq!(run(150.0, 52.0).verdict, Verdict::Partly);
    let d = run(55.0, 52.0);
    assert_eq!((d.verdict, d.rule.as_str()), (Verdict::NotReproduced, "otherwise"));
    assert!(d.reason.contains("55 µs with Nagle on, 52 µs with TCP_NODELAY"), "{}", d.reason);
    // Smoke mode runs only two variants; those decide the rules on their own.
    let smoke =
        results(&[("nagle_delack", &[("p50_us", 40000.0)]), ("nodelay", &[("p50_us", 50.0)])]);
    let d = decide(&rules, &smoke);
    assert_eq!(d.verdict, Verdict::Reproduced);
    assert!(d.reason.contains("(server ato n/a µs)"), "{}", d.reason);
    assert!(d.missing.contains(&"nagle_delack.server_ato_us".to_string()));
}

#[test]
fn loss() {
    let (_, rules) = builtin("loss");
    let run = |bbr5: f64, link_pct: f64| {
        let bbr5 = [("goodput_mbps", bbr5), ("link_pct", link_pct)];
        results(&[
            ("cubic_0", &[("goodput_mbps", 95.0)]),
            ("bbr_0", &[("goodput_mbps", 94.0)]),
            ("cubic_1", &[("goodput_mbps", 30.0)]),
            ("bbr_1", &[("goodput_mbps", 90.0)]),
            ("cubic_2", &[("goodput_mbps", 20.0)]),
            ("bbr_2", &[("goodput_mbps", 88.0)]),
            ("cubic_5", &[("goodput_mbps", 10.0)]),
            ("bbr_5", &bbr5),
        ])
    };
    let d = decide(&rules, &run(85.0, 89.0));
    assert_eq!(d.verdict, Verdict::Reproduced);
    assert!(
        d.reason.starts_with("At 5 % loss BBR keeps 85 Mbit/s (89 % of the link)"),
        "{}",
        d.reason
    );
    assert_eq!(decide(&rules, &run(25.0, 26.0)).verdict, Verdict::Partly);
    let d = decide(&rules, &run(9.0, 9.5));
    assert_eq!(d.verdict, Verdict::NotReproduced);
    assert!(d.reason.contains("5 % 9 vs 10 Mbit/s"), "{}", d.reason);
    // Smoke mode runs cubic_1 and bbr_1 only: the first rule cannot be decided.
    let smoke =
        results(&[("cubic_1", &[("goodput_mbps", 30.0)]), ("bbr_1", &[("goodput_mbps", 90.0)])]);
    let d = decide(&rules, &smoke);
    assert_eq!(d.verdict, Verdict::NotApplicable);
    assert_eq!(d.missing, ["bbr_5.link_pct", "bbr_5.goodput_mbps", "cubic_5.goodput_mbps"]);
    assert!(
        d.reason.starts_with("the rule at line 114 (`bbr_5.link_pct >= 80 and"),
        "{}",
        d.reason
    );
    assert!(
        d.reason.ends_with(
            "needs bbr_5.link_pct, bbr_5.goodput_mbps and cubic_5.goodput_mbps which this run did \
             not measure"
        ),
        "{}",
        d.reason
    );
}

#[test]
fn bloat_guards_full_mode_variants_with_has() {
    let (_, rules) = builtin("bloat");
    let vs = results(&[
        ("cubic_tail_10m", &[("probe_p50_ms", 900.0), ("goodput_mbps", 9.5)]),
        ("bbr_tail_10m", &[("probe_p50_ms", 40.0), ("goodput_mbps", 9.4)]),
        ("cubic_codel_10m", &[("probe_p50_ms", 20.0)]),
    ]);
    let d = decide(&rules, &vs);
    assert_eq!(d.verdict, Verdict::Reproduced);
    assert!(d.rule.starts_with("when: not has(bbr_tail_128k.probe_p50_ms)"), "{}", d.rule);
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
        let _ = parse_template(&text, VARIANTS);
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
        if let Ok(pieces) = parse_template(&text, VARIANTS) {
            let rule = Rule { verdict: Verdict::Partly, when: None, reason: pieces, line: 1 };
            let _ = rule.reason(&values());
        }
    }
}

/// Full-mode results for a built-in experiment: every (variant, metric) any of its rules
/// references gets `default` (with a ±5 % spread) unless `set` gives (median, min, max).
fn synthetic(
    e: &Experiment,
    rules: &[Rule],
    default: f64,
    set: &[(&str, &str, f64, f64, f64)],
) -> Vec<VariantResult> {
    let refs: Vec<Ref> = rules.iter().flat_map(Rule::references).collect();
    e.variants
        .iter()
        .map(|v| {
            let mut metrics: Vec<(&str, f64, f64, f64)> = Vec::new();
            for r in refs.iter().filter(|r| r.variant == v.name) {
                if metrics.iter().any(|m| m.0 == r.metric) {
                    continue;
                }
                let given = set.iter().find(|s| s.0 == v.name && s.1 == r.metric);
                metrics.push(match given {
                    Some(&(_, m, median, min, max)) => (m, median, min, max),
                    None => (r.metric.as_str(), default, 0.95 * default, 1.05 * default),
                });
            }
            result(&v.name, &metrics)
        })
        .collect()
}

/// Every built-in experiment not covered above gives `reproduced` on data that shows its
/// claim, and falls to its final `not-reproduced` rule on data where every variant measured
/// the same (a claim about a difference must not hold without one).
#[test]
fn every_builtin_reproduces_on_a_difference_and_not_without_one() {
    type Case = (&'static str, &'static [(&'static str, &'static str, f64, f64, f64)]);
    let cases: [Case; 7] = [
        (
            "trading-cc",
            &[("bbr_x", "p99_us", 200.0, 190.0, 210.0), ("cubic_x", "p99_us", 100.0, 95.0, 105.0)],
        ),
        (
            "idle-restart",
            &[
                ("cubic_ssai1", "burst_ms", 50.0, 48.0, 52.0),
                ("cubic_ssai0", "burst_ms", 30.0, 29.0, 31.0),
            ],
        ),
        (
            "tuning-ladder",
            &[
                ("baseline", "p99_us", 100.0, 80.0, 150.0),
                ("same_cpu", "p99_us", 60.0, 55.0, 70.0),
                ("spin", "p99_us", 50.0, 49.0, 51.0),
            ],
        ),
        (
            "sendq",
            &[
                ("cubic_t10", "start_p50_ms", 35.0, 34.0, 36.0),
                ("cubic_unbounded", "start_p50_ms", 233.0, 230.0, 236.0),
            ],
        ),
        (
            "bloat",
            &[
                ("cubic_tail_10m", "probe_p50_ms", 1000.0, 950.0, 1050.0),
                ("bbr_tail_10m", "probe_p50_ms", 190.0, 180.0, 200.0),
                ("cubic_tail_128k", "probe_p50_ms", 3000.0, 2900.0, 3100.0),
                ("bbr_tail_128k", "probe_p50_ms", 400.0, 390.0, 410.0),
            ],
        ),
        (
            "wan",
            &[
                ("bbr_loss", "goodput_mbps", 280.0, 270.0, 290.0),
                ("cubic_loss", "goodput_mbps", 50.0, 45.0, 55.0),
                ("bbr_loss", "rtt_p95_ms", 110.0, 105.0, 115.0),
                ("cubic_loss", "rtt_p95_ms", 150.0, 140.0, 160.0),
            ],
        ),
        (
            "rwin-limited",
            &[
                ("rmem_8mb", "goodput_mbps", 140.0, 135.0, 145.0),
                ("rmem_64mb", "goodput_mbps", 300.0, 295.0, 305.0),
                ("rmem_8mb", "rwnd_limited_pct", 45.0, 40.0, 50.0),
                ("rmem_64mb", "rwnd_limited_pct", 0.0, 0.0, 0.0),
            ],
        ),
    ];
    for (name, set) in cases {
        let (e, rules) = builtin(name);
        assert_eq!(rules.last().map(Rule::verdict), Some(Verdict::NotReproduced), "{name}");
        let d = decide(&rules, &synthetic(&e, &rules, 100.0, set));
        assert_eq!(d.verdict, Verdict::Reproduced, "{name}: {} ({})", d.reason, d.rule);
        assert!(!d.reason.contains("n/a"), "{name}: {}", d.reason);
        let d = decide(&rules, &synthetic(&e, &rules, 100.0, &[]));
        assert_eq!(d.verdict, Verdict::NotReproduced, "{name}: {} ({})", d.reason, d.rule);
        assert_eq!(d.rule, "otherwise", "{name}");
    }
}
