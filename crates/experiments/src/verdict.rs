//! Verdict rules: the small language that turns an experiment's medians into a verdict and
//! its reason.
//!
//! An experiment file ends with `[[verdict]]` rules, tried in order. Each has a `verdict`, a
//! `when` condition (absent on the final rule, which applies otherwise) and a `reason`
//! template. [`Rule::compile`] checks both strings against the experiment's variants before
//! anything runs; [`decide`] applies the compiled rules to the measured values.
//!
//! # Conditions
//!
//! - `variant.metric` is the metric's median over rounds; `variant.metric.min` and
//!   `variant.metric.max` its spread. Names are `[a-z][a-z0-9_]*`; `.min`/`.max` are only
//!   recognised as a third dotted part, so a metric may be called `rtt_min`.
//! - Numbers (`2`, `0.9`, `1e-3`), `+ - * /`, unary `-`, parentheses, `min(a, b, ...)`,
//!   `max(...)`, `abs(x)`.
//! - Comparisons `< <= > >= == !=` (they do not chain), `has(variant.metric)`, and
//!   `not`, `and`, `or`, binding in that order (`a or b and c` is `a or (b and c)`).
//! - Numbers and conditions are distinct types: a number used as a condition, or a condition
//!   used in arithmetic, is an error when the rule is compiled.
//!
//! # Confidence
//!
//! A verdict rule's comparisons are decided with stated confidence ([`confidence`]): a
//! comparison of two variants' values is an exact one-sided rank test over their faithful
//! rounds, one against a constant a t-test, each at 95 %. A comparison the rounds cannot
//! decide either way is *undecided*, whichever way its medians lean: a rule is false only on
//! evidence against it. The first rule whose condition is undecided stops the rules with
//! [`Verdict::Inconclusive`], whose reason names the comparisons and about how many rounds
//! would decide them, with one exception: once a test has shown a `reproduced` rule false
//! (the seed's effect is excluded), an undecided `partly` rule below it is passed over and
//! named in the evidence ("a smaller effect can be neither shown nor excluded"), since
//! `partly` claims an effect the rounds must show. So `not-reproduced` needs the seed's effect
//! excluded or the opposite shown, and otherwise the verdict is `inconclusive`. A deciding
//! rule's reason is followed by the tests that decided it and the 95 % intervals of the
//! medians it read. Findings keep the plain comparison of the values shown.
//!
//! # Unknown values
//!
//! A reference without a value (the variant did not run in this mode, the metric is absent,
//! or it is not finite) makes the arithmetic and comparisons that use it *unknown*, as does a
//! division by zero. `and`, `or` and `not` follow Kleene's three-valued logic: `false and
//! unknown` is false, `true or unknown` is true, `not unknown` is unknown. `has(...)` is never
//! unknown, so a rule can guard on a variant that only some modes run. When a rule's condition
//! is unknown, [`decide`] stops there with [`Verdict::NotApplicable`] and names the missing
//! references, rather than falling through to a verdict the data did not support.
//!
//! # Reason templates
//!
//! `{variant.metric}` (and `.min`/`.max`) is replaced by the value to three significant digits
//! ([`format_value`]), or `n/a` when it has none; so is an arithmetic expression over values
//! (`{split_cpus.mean_us - same_cpu.mean_us}`, the condition syntax's numbers: `+ - * /`,
//! parentheses, `min`, `max`, `abs`), `n/a` when a value it needs is missing or it divides by
//! zero; `{{` and `}}` are literal braces.
//!
//! This module never reads files or the clock: it sees values only through [`Values`].

use std::fmt;

use tcptail_report::{Outcome, RuleResult, VariantResult, Verdict};

use crate::spec::RuleSpec;

mod condition;
pub mod confidence;
mod finding;
#[cfg(test)]
mod tests;

use condition::{Cond, Num, parse_condition, parse_number};
pub use confidence::{ALPHA, Tested, Tri};
pub use finding::FindingRule;

/// Which statistic over rounds a reference reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Stat {
    /// The median (`variant.metric`).
    Median,
    /// The smallest round (`variant.metric.min`).
    Min,
    /// The largest round (`variant.metric.max`).
    Max,
}

/// A reference to a measured value, as written in a rule.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ref {
    /// The variant's name.
    pub variant: String,
    /// The metric's name.
    pub metric: String,
    /// Which statistic.
    pub stat: Stat,
}

impl fmt::Display for Ref {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.variant, self.metric)?;
        match self.stat {
            Stat::Median => Ok(()),
            Stat::Min => f.write_str(".min"),
            Stat::Max => f.write_str(".max"),
        }
    }
}

/// Where rules read measured values from.
pub trait Values {
    /// The value of `variant.metric`'s statistic; `None` when it was not measured.
    /// Non-finite values are treated as missing by the rules.
    fn value(&self, variant: &str, metric: &str, stat: Stat) -> Option<f64>;

    /// Every faithful round's value of `variant.metric`, for the tests that decide
    /// comparisons; `None` when these values carry no rounds (comparisons are then plain).
    fn rounds(&self, _variant: &str, _metric: &str) -> Option<Vec<f64>> {
        None
    }

    /// The confidence interval of the median of `variant.metric` and its confidence.
    fn interval(&self, _variant: &str, _metric: &str) -> Option<([f64; 2], f64)> {
        None
    }

    /// Whether `variant` ran in this mode at all; a reason then says "not run in this mode"
    /// for its values instead of `n/a` (which means it ran without giving one).
    fn ran(&self, _variant: &str) -> bool {
        true
    }
}

impl Values for &[VariantResult] {
    fn value(&self, variant: &str, metric: &str, stat: Stat) -> Option<f64> {
        let m = self.iter().find(|v| v.name == variant)?.metrics.get(metric)?;
        Some(match stat {
            Stat::Median => m.median,
            Stat::Min => m.min,
            Stat::Max => m.max,
        })
    }

    fn rounds(&self, variant: &str, metric: &str) -> Option<Vec<f64>> {
        Some(self.iter().find(|v| v.name == variant)?.metrics.get(metric)?.values.clone())
    }

    fn interval(&self, variant: &str, metric: &str) -> Option<([f64; 2], f64)> {
        let m = self.iter().find(|v| v.name == variant)?.metrics.get(metric)?;
        Some((m.ci?, m.confidence?))
    }

    fn ran(&self, variant: &str) -> bool {
        self.iter().any(|v| v.name == variant)
    }
}

impl Values for Vec<VariantResult> {
    fn value(&self, variant: &str, metric: &str, stat: Stat) -> Option<f64> {
        self.as_slice().value(variant, metric, stat)
    }

    fn rounds(&self, variant: &str, metric: &str) -> Option<Vec<f64>> {
        self.as_slice().rounds(variant, metric)
    }

    fn interval(&self, variant: &str, metric: &str) -> Option<([f64; 2], f64)> {
        self.as_slice().interval(variant, metric)
    }

    fn ran(&self, variant: &str) -> bool {
        self.as_slice().ran(variant)
    }
}

fn lookup(values: &dyn Values, r: &Ref) -> Option<f64> {
    values.value(&r.variant, &r.metric, r.stat).filter(|v| v.is_finite())
}

/// A rule that does not compile. Its message names the column and the text there, as in
/// ``column 7 (`> > 1`): expected a value, found `>` ``; the caller adds the file and line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct RuleError {
    key: &'static str,
    column: usize,
    message: String,
}

impl RuleError {
    /// The key at fault: `when` or `reason` (`then` or `otherwise` in a finding).
    pub fn key(&self) -> &'static str {
        self.key
    }

    /// 1-based column, in characters, within that key's string.
    pub fn column(&self) -> usize {
        self.column
    }

    /// An error at byte offset `at` (a char boundary) of `text`.
    fn new(key: &'static str, text: &str, at: usize, problem: impl fmt::Display) -> RuleError {
        let column = text[..at].chars().count() + 1;
        let rest = text[at..].trim_end();
        let message = if text.trim().is_empty() {
            format!("column {column} (the text is empty): {problem}")
        } else if rest.is_empty() {
            let start = text.char_indices().rev().nth(23).map_or(0, |(i, _)| i);
            let dots = if start > 0 { "…" } else { "" };
            format!("column {column} (at the end of `{dots}{}`): {problem}", text[start..].trim())
        } else {
            let snippet: String = rest.chars().take(24).collect();
            let dots = if snippet.len() < rest.len() { "…" } else { "" };
            format!("column {column} (`{snippet}{dots}`): {problem}")
        };
        RuleError { key, column, message }
    }
}

/// A compiled verdict rule.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    verdict: Verdict,
    when: Option<(String, Cond)>,
    reason: Vec<Piece>,
    line: usize,
}

impl Rule {
    /// Compiles a rule, checking that every reference names one of `variants`.
    pub fn compile(spec: &RuleSpec, variants: &[&str]) -> Result<Rule, RuleError> {
        let when = match &spec.when {
            Some(text) => Some((text.clone(), parse_condition(text, variants)?)),
            None => None,
        };
        let reason = parse_template(&spec.reason, variants, "reason")?;
        Ok(Rule { verdict: spec.verdict, when, reason, line: spec.line })
    }

    /// The verdict it gives.
    pub fn verdict(&self) -> Verdict {
        self.verdict
    }

    /// Its condition as written; `None` for the final rule.
    pub fn when(&self) -> Option<&str> {
        self.when.as_ref().map(|(text, _)| text.as_str())
    }

    /// Line of its `[[verdict]]` header.
    pub fn line(&self) -> usize {
        self.line
    }

    /// `when: <condition>`, or `otherwise` for the final rule.
    pub fn describe(&self) -> String {
        match self.when() {
            Some(text) => format!("when: {text}"),
            None => "otherwise".to_string(),
        }
    }

    /// Every reference it uses, in the condition and then the reason, each once, in order.
    pub fn references(&self) -> Vec<Ref> {
        let mut refs = Vec::new();
        if let Some((_, cond)) = &self.when {
            cond.refs(&mut refs);
        }
        for p in &self.reason {
            match p {
                Piece::Ref(r) => refs.push(r.clone()),
                Piece::Expr(n) => n.refs(&mut refs),
                Piece::Text(_) => {}
            }
        }
        dedup(refs)
    }

    /// Its condition's value with stated confidence: `Ok(Tri::Yes)` for the final rule,
    /// `Err(missing)` when unknown (`missing` may be empty when a division by zero made it so).
    pub fn holds(&self, values: &dyn Values) -> Result<Tri, Vec<Ref>> {
        match &self.when {
            None => Ok(Tri::Yes),
            Some((_, cond)) => cond.decide(values).map_err(|u| dedup(u.0)),
        }
    }

    /// Every value its condition reads that this run has, as `ref value` the way templates
    /// print them.
    pub fn values_read(&self, values: &dyn Values) -> Vec<String> {
        let mut read = Vec::new();
        if let Some((_, cond)) = &self.when {
            cond.refs(&mut read);
        }
        dedup(read)
            .iter()
            .filter_map(|r| Some(format!("{r} {}", format_value(lookup(values, r)?))))
            .collect()
    }

    /// Every comparison of its condition that a test decides, written out, with the test.
    pub fn tests(&self, values: &dyn Values) -> Vec<(String, Tested)> {
        let mut out = Vec::new();
        if let Some((_, cond)) = &self.when {
            cond.tests(values, &mut out);
        }
        out
    }

    /// The reason with its placeholders filled.
    pub fn reason(&self, values: &dyn Values) -> String {
        fill(&self.reason, values)
    }

    /// The rule evaluated on `values`, for the report's rule list.
    pub fn result(&self, values: &dyn Values, fired: bool) -> RuleResult {
        RuleResult {
            verdict: self.verdict,
            when: self.when().map(str::to_owned),
            evaluated: self.when.as_ref().map(|(_, cond)| cond.explain_decided(values)),
            outcome: match self.holds(values) {
                Ok(Tri::Yes) => Outcome::Holds,
                Ok(Tri::No) => Outcome::Fails,
                Ok(Tri::Undecided) => Outcome::Undecided,
                Err(_) => Outcome::Unknown,
            },
            fired,
            line: self.line,
        }
    }
}

fn outcome<E>(held: Result<bool, E>) -> Outcome {
    match held {
        Ok(true) => Outcome::Holds,
        Ok(false) => Outcome::Fails,
        Err(_) => Outcome::Unknown,
    }
}

/// What a template says for a variant the mode did not run (the full mode's cases in a
/// quick run).
pub const NOT_RUN: &str = "(not run in this mode)";

/// A template with its placeholders filled (`n/a` where a value is missing, [`NOT_RUN`]
/// where its variant did not run in this mode).
fn fill(pieces: &[Piece], values: &dyn Values) -> String {
    pieces
        .iter()
        .map(|p| match p {
            Piece::Text(t) => t.clone(),
            Piece::Ref(r) if !values.ran(&r.variant) => NOT_RUN.to_string(),
            Piece::Ref(r) => lookup(values, r).map_or_else(|| "n/a".to_string(), format_value),
            Piece::Expr(n) => n.eval(values).map_or_else(|_| "n/a".to_string(), format_value),
        })
        .collect()
}

/// The outcome of applying an experiment's rules.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The verdict.
    pub verdict: Verdict,
    /// Why, with the numbers filled in.
    pub reason: String,
    /// The tests that decided, with the intervals of the medians the rule read (empty when no
    /// test applied); the report prints it after the reason.
    pub evidence: String,
    /// The rule that decided: `when: <condition>` or `otherwise`.
    pub rule: String,
    /// References without a value: those that left the deciding condition unknown, or, when a
    /// rule applied, those its reason prints as `n/a`.
    pub missing: Vec<String>,
    /// Every rule evaluated, in order, the deciding one marked.
    pub rules: Vec<RuleResult>,
}

/// Applies `rules` in order: the first whose condition holds gives the verdict. A condition
/// that is unknown stops there with [`Verdict::NotApplicable`] and a reason naming what this
/// run did not measure and quoting the values the condition did have.
pub fn decide(rules: &[Rule], values: &dyn Values) -> Decision {
    let (mut decision, fired) = first_applicable(rules, values);
    decision.rules =
        rules.iter().enumerate().map(|(i, r)| r.result(values, Some(i) == fired)).collect();
    decision
}

/// The deciding rule's decision (its `rules` still empty) and that rule's index.
fn first_applicable(rules: &[Rule], values: &dyn Values) -> (Decision, Option<usize>) {
    // A `reproduced` rule that a test showed false: the seed's effect is excluded.
    let mut refuted = false;
    // `partly` rules passed over undecided after that, with their undecided comparisons.
    let mut unshown: Vec<String> = Vec::new();
    for (i, rule) in rules.iter().enumerate() {
        match rule.holds(values) {
            Ok(Tri::No) => {
                refuted |= rule.verdict == Verdict::Reproduced
                    && rule.tests(values).iter().any(|(_, t)| t.truth == Tri::No);
                continue;
            }
            Ok(Tri::Undecided) if refuted && rule.verdict == Verdict::Partly => {
                // The seed's effect is excluded; a smaller one that the rounds can neither
                // show nor exclude is not claimed ("partly" needs evidence for it), but said.
                unshown.push(format!(
                    "the rule at line {} ({} when `{}`): {}",
                    rule.line,
                    rule.verdict,
                    rule.when().unwrap_or_default(),
                    undecided_tests(rule, values).join("; ")
                ));
                continue;
            }
            Ok(Tri::Undecided) => {
                let text = rule.when().unwrap_or_default();
                let undecided = undecided_tests(rule, values);
                let read = rule.values_read(values);
                let reason = format!(
                    "the rule at line {} ({} when `{text}`) cannot be decided at {:.0} % \
                     confidence from these rounds: {}. Values read: {}.{}",
                    rule.line,
                    rule.verdict,
                    (1.0 - ALPHA) * 100.0,
                    undecided.join("; "),
                    read.join(", "),
                    intervals(rule, values),
                );
                let decision = Decision {
                    verdict: Verdict::Inconclusive,
                    reason,
                    evidence: String::new(),
                    rule: rule.describe(),
                    missing: Vec::new(),
                    rules: Vec::new(),
                };
                return (decision, Some(i));
            }
            Ok(Tri::Yes) => {
                let missing = rule
                    .reason
                    .iter()
                    .filter_map(|p| match p {
                        Piece::Ref(r) if lookup(values, r).is_none() => Some(r.to_string()),
                        _ => None,
                    })
                    .collect::<Vec<_>>();
                // The evidence: this rule's tests, or for the final rule those that ruled out
                // the rules above it.
                let tested: Vec<(String, Tested)> = if rule.when.is_some() {
                    rule.tests(values)
                } else {
                    rules[..i].iter().flat_map(|r| r.tests(values)).collect()
                };
                let evidence: Vec<String> = tested
                    .into_iter()
                    .filter(|(_, t)| t.truth != Tri::Undecided)
                    .map(|(cmp, t)| {
                        let holds = if t.truth == Tri::Yes { "holds" } else { "fails" };
                        format!("`{cmp}` {holds} ({})", t.test)
                    })
                    .collect();
                // Rules above the final one often repeat a comparison: quote each once.
                let evidence = dedup(evidence);
                let mut evidence = if evidence.is_empty() {
                    String::new()
                } else {
                    format!(
                        " [at {:.0} % confidence: {}.{}]",
                        (1.0 - ALPHA) * 100.0,
                        evidence.join("; "),
                        intervals(rule, values)
                    )
                };
                if !unshown.is_empty() {
                    evidence.push_str(&format!(
                        " [A smaller effect than the seed's can be neither shown nor excluded \
                         from these rounds: {}.]",
                        unshown.join("; ")
                    ));
                }
                let decision = Decision {
                    verdict: rule.verdict,
                    reason: rule.reason(values),
                    evidence,
                    rule: rule.describe(),
                    missing: dedup(missing),
                    rules: Vec::new(),
                };
                return (decision, Some(i));
            }
            Err(missing) => {
                let missing: Vec<String> = missing.iter().map(Ref::to_string).collect();
                let text = rule.when().unwrap_or_default();
                let why = if missing.is_empty() {
                    "cannot be decided: it divides by zero or overflows".to_string()
                } else {
                    format!("needs {} which this run did not measure", join_and(&missing))
                };
                // The values it did have, so the reader sees how far the rule got.
                let read = rule.values_read(values);
                let read = if read.is_empty() {
                    String::new()
                } else {
                    format!(". Values read: {}", read.join(", "))
                };
                let reason = format!("the rule at line {} (`{text}`) {why}{read}", rule.line);
                let decision = Decision {
                    verdict: Verdict::NotApplicable,
                    reason,
                    evidence: String::new(),
                    rule: rule.describe(),
                    missing,
                    rules: Vec::new(),
                };
                return (decision, Some(i));
            }
        }
    }
    let decision = Decision {
        verdict: Verdict::NotApplicable,
        reason: "no verdict rule applies (the experiment has no final rule without `when`)".into(),
        evidence: String::new(),
        rule: "none".into(),
        missing: Vec::new(),
        rules: Vec::new(),
    };
    (decision, None)
}

/// `rule`'s comparisons that the rounds cannot decide, each with its test and what would
/// decide it.
fn undecided_tests(rule: &Rule, values: &dyn Values) -> Vec<String> {
    rule.tests(values)
        .into_iter()
        .filter(|(_, t)| t.truth == Tri::Undecided)
        .map(|(cmp, t)| format!("`{cmp}` ({}; needs {})", t.test, t.needs.unwrap_or_default()))
        .collect()
}

/// The intervals of the medians `rule` reads, as ` Intervals of the medians: a.x 120
/// [110–130] (97 %), ...`; empty when none has one.
fn intervals(rule: &Rule, values: &dyn Values) -> String {
    let mut seen: Vec<(String, String)> = Vec::new();
    for r in rule.references() {
        let key = (r.variant.clone(), r.metric.clone());
        if seen.contains(&key) {
            continue;
        }
        seen.push(key);
    }
    let parts: Vec<String> = seen
        .iter()
        .filter_map(|(v, m)| {
            let median = values.value(v, m, Stat::Median)?;
            let ([low, high], confidence) = values.interval(v, m)?;
            Some(format!(
                "{v}.{m} {} [{}–{}] ({:.0} %)",
                format_value(median),
                format_value(low),
                format_value(high),
                confidence * 100.0
            ))
        })
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!(" Intervals of the medians: {}", parts.join(", "))
    }
}

/// Formats a value to three significant digits without an exponent between 1e-4 and 1e7
/// (`118`, `61.2`, `0.0123`, `12300`), with one outside (`1.23e7`).
pub fn format_value(x: f64) -> String {
    if !x.is_finite() {
        return "n/a".to_string();
    }
    if x == 0.0 {
        return "0".to_string();
    }
    let sci = format!("{x:.2e}");
    let (mantissa, exp) = sci.split_once('e').expect("`{:e}` has an exponent");
    let exp: i32 = exp.parse().expect("`{:e}` has an integer exponent");
    let (sign, mantissa) = mantissa.strip_prefix('-').map_or(("", mantissa), |m| ("-", m));
    if !(-4..7).contains(&exp) {
        let mantissa = mantissa.trim_end_matches('0').trim_end_matches('.');
        return format!("{sign}{mantissa}e{exp}");
    }
    // Inside the plain range the report's own formatter gives the same three digits, so the
    // reason and the report's tables print a value alike.
    tcptail_report::svg::fmt_num(x)
}

fn dedup<T: PartialEq>(items: Vec<T>) -> Vec<T> {
    let mut out = Vec::with_capacity(items.len());
    for item in items {
        if !out.contains(&item) {
            out.push(item);
        }
    }
    out
}

fn join_and(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// Parses `variant.metric[.min|.max]`; the error is the problem, without its position.
fn parse_ref(text: &str, variants: &[&str]) -> Result<Ref, String> {
    let parts: Vec<&str> = text.split('.').collect();
    let (variant, metric, stat) = match parts[..] {
        [v, m] => (v, m, Stat::Median),
        [v, m, "min"] => (v, m, Stat::Min),
        [v, m, "max"] => (v, m, Stat::Max),
        [_, _, s] => {
            return Err(format!(
                "`.{s}` is not a statistic: write `.min` or `.max`, or nothing for the median"
            ));
        }
        _ => {
            return Err(format!(
                "`{text}` is not a reference: write `variant.metric`, `variant.metric.min` or \
                 `variant.metric.max`"
            ));
        }
    };
    for name in [variant, metric] {
        let mut chars = name.chars();
        let valid = chars.next().is_some_and(|c| c.is_ascii_lowercase())
            && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !valid {
            return Err(format!(
                "`{name}` in `{text}` is not a valid name (lowercase letters, digits and `_`, \
                 starting with a letter)"
            ));
        }
    }
    if !variants.contains(&variant) {
        return Err(format!(
            "unknown variant `{variant}`; this experiment's variants are {}",
            variants.join(", ")
        ));
    }
    Ok(Ref { variant: variant.to_string(), metric: metric.to_string(), stat })
}

// ---- Templates ----

#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Text(String),
    Ref(Ref),
    /// An arithmetic expression over values (`{a.x - b.x}`), printed like a value.
    Expr(Num),
}

fn parse_template(
    text: &str,
    variants: &[&str],
    key: &'static str,
) -> Result<Vec<Piece>, RuleError> {
    let err = |at: usize, problem: &str| RuleError::new(key, text, at, problem);
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut rest = text.char_indices().peekable();
    while let Some((i, c)) = rest.next() {
        match c {
            '{' if text[i + 1..].starts_with('{') => {
                rest.next();
                literal.push('{');
            }
            '}' if text[i + 1..].starts_with('}') => {
                rest.next();
                literal.push('}');
            }
            '}' => return Err(err(i, "a lone `}`: write `}}` for a literal brace")),
            '{' => {
                let close = text[i + 1..]
                    .find(['{', '}'])
                    .filter(|&j| text[i + 1 + j..].starts_with('}'))
                    .ok_or_else(|| err(i, "`{` is not closed: write `{{` for a literal brace"))?;
                let inner = &text[i + 1..i + 1 + close];
                let start = i + 1 + (inner.len() - inner.trim_start().len());
                let piece = match parse_ref(inner.trim(), variants) {
                    Ok(r) => Piece::Ref(r),
                    // Not a plain reference: an expression, if it has an operator.
                    Err(_) if inner.contains(['+', '-', '*', '/', '(']) => {
                        let n = parse_number(inner.trim(), variants).map_err(|e| {
                            err(start + e.column() - 1, &format!("in the expression: {e}"))
                        })?;
                        Piece::Expr(n)
                    }
                    Err(p) => return Err(err(start, &p)),
                };
                if !literal.is_empty() {
                    pieces.push(Piece::Text(std::mem::take(&mut literal)));
                }
                pieces.push(piece);
                while rest.next_if(|&(j, _)| j <= i + 1 + close).is_some() {}
            }
            c => literal.push(c),
        }
    }
    if !literal.is_empty() {
        pieces.push(Piece::Text(literal));
    }
    Ok(pieces)
}
