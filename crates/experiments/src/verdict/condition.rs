//! `when` conditions: the syntax tree, its three-valued evaluation, the lexer and the parser.

use super::confidence::Tri;
use super::*;

/// A number-valued expression. Operators and functions are kept as written (`"+"`, `"min"`);
/// the parser only builds those it knows.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Num {
    Lit(f64),
    Ref(Ref),
    Neg(Box<Num>),
    Arith(&'static str, Box<Num>, Box<Num>),
    Call(&'static str, Vec<Num>),
}

/// A condition: true, false or unknown.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Cond {
    Cmp(&'static str, Num, Num),
    Has(Ref),
    Not(Box<Cond>),
    And(Box<Cond>, Box<Cond>),
    Or(Box<Cond>, Box<Cond>),
}

/// Why a value is unknown: the references without a value (none for a division by zero or an
/// overflow).
#[derive(Debug, PartialEq)]
pub(super) struct Unknown(pub(super) Vec<Ref>);

pub(super) fn both<A, B>(a: Result<A, Unknown>, b: Result<B, Unknown>) -> Result<(A, B), Unknown> {
    match (a, b) {
        (Ok(a), Ok(b)) => Ok((a, b)),
        (Err(Unknown(mut x)), Err(Unknown(y))) => {
            x.extend(y);
            Err(Unknown(x))
        }
        (Err(x), _) | (_, Err(x)) => Err(x),
    }
}

impl Num {
    pub(super) fn eval(&self, values: &dyn Values) -> Result<f64, Unknown> {
        let x = match self {
            Num::Lit(x) => *x,
            Num::Ref(r) => return lookup(values, r).ok_or_else(|| Unknown(vec![r.clone()])),
            Num::Neg(a) => -a.eval(values)?,
            Num::Arith(op, a, b) => {
                let (a, b) = both(a.eval(values), b.eval(values))?;
                match *op {
                    "+" => a + b,
                    "-" => a - b,
                    "*" => a * b,
                    _ => a / b,
                }
            }
            Num::Call(func, args) => {
                let mut xs = Ok(Vec::new());
                for arg in args {
                    xs = both(xs, arg.eval(values)).map(|(mut xs, x)| {
                        xs.push(x);
                        xs
                    });
                }
                let xs = xs?;
                match *func {
                    "min" => xs.into_iter().fold(f64::INFINITY, f64::min),
                    "max" => xs.into_iter().fold(f64::NEG_INFINITY, f64::max),
                    _ => xs[0].abs(), // `abs`: the parser checked it has one argument
                }
            }
        };
        if x.is_finite() { Ok(x) } else { Err(Unknown(Vec::new())) }
    }

    /// The expression written out (`2 * b.x`, `max(a.x, 3)`), for a test's description.
    pub(super) fn text(&self) -> String {
        match self {
            Num::Lit(x) => format_value(*x),
            Num::Ref(r) => r.to_string(),
            Num::Neg(a) => format!("-{}", a.text()),
            Num::Arith(op, a, b) => format!("{} {op} {}", a.text(), b.text()),
            Num::Call(f, args) => {
                format!("{f}({})", args.iter().map(Num::text).collect::<Vec<_>>().join(", "))
            }
        }
    }

    pub(super) fn refs(&self, out: &mut Vec<Ref>) {
        match self {
            Num::Lit(_) => {}
            Num::Ref(r) => out.push(r.clone()),
            Num::Neg(a) => a.refs(out),
            Num::Arith(_, a, b) => [a, b].iter().for_each(|n| n.refs(out)),
            Num::Call(_, args) => args.iter().for_each(|n| n.refs(out)),
        }
    }
}

impl Cond {
    pub(super) fn eval(&self, values: &dyn Values) -> Result<bool, Unknown> {
        match self {
            Cond::Cmp(op, a, b) => {
                let (a, b) = both(a.eval(values), b.eval(values))?;
                Ok(match *op {
                    "<" => a < b,
                    "<=" => a <= b,
                    ">" => a > b,
                    ">=" => a >= b,
                    "==" => a == b,
                    _ => a != b,
                })
            }
            Cond::Has(r) => Ok(lookup(values, r).is_some()),
            Cond::Not(a) => a.eval(values).map(|x| !x),
            // Kleene: a decided operand equal to the absorbing value decides; else unknown wins.
            Cond::And(a, b) | Cond::Or(a, b) => {
                let absorbing = matches!(self, Cond::Or(..));
                let (a, b) = (a.eval(values), b.eval(values));
                if a == Ok(absorbing) || b == Ok(absorbing) {
                    return Ok(absorbing);
                }
                both(a, b).map(|_| !absorbing)
            }
        }
    }

    pub(super) fn refs(&self, out: &mut Vec<Ref>) {
        match self {
            Cond::Cmp(_, a, b) => [a, b].iter().for_each(|n| n.refs(out)),
            Cond::Has(r) => out.push(r.clone()),
            Cond::Not(a) => a.refs(out),
            Cond::And(a, b) | Cond::Or(a, b) => [a, b].iter().for_each(|c| c.refs(out)),
        }
    }
}

// ---- Explaining a condition with a run's values ----

impl Cond {
    /// The condition with every comparison's two sides replaced by their values and marked
    /// `✓` (holds), `✗` (fails) or `?` (unknown), keeping `and`, `or`, `not` and the
    /// grouping: `same_cpu.p99_us < 0.8 * baseline.p99_us and spin.p99_us < 40` becomes
    /// `21.3 < 64.1 ✓ and 45 < 40 ✗`. A side without a value reads `n/a`.
    pub(super) fn explain(&self, values: &dyn Values) -> String {
        self.explain_in(values, None, false)
    }

    /// [`Cond::explain`] with the marks of [`Cond::decide`]: a comparison a test decided is
    /// marked by the test's outcome, `~` when the rounds cannot decide it.
    pub(super) fn explain_decided(&self, values: &dyn Values) -> String {
        self.explain_in(values, None, true)
    }

    /// `parent` is the enclosing `and`/`or`, if any: a different connective nested in it
    /// gets parentheses, so `a or (b and c)` reads as it evaluates.
    fn explain_in(
        &self,
        values: &dyn Values,
        parent: Option<&'static str>,
        decided: bool,
    ) -> String {
        let mark = |c: &Cond| match (decided, c.eval(values)) {
            (_, Err(_)) => "?",
            (false, Ok(true)) => "✓",
            (false, Ok(false)) => "✗",
            (true, Ok(_)) => match c.decide(values) {
                Ok(Tri::Yes) => "✓",
                Ok(Tri::No) => "✗",
                Ok(Tri::Undecided) => "~",
                Err(_) => "?",
            },
        };
        match self {
            Cond::Cmp(op, a, b) => {
                let side = |n: &Num| n.eval(values).map_or_else(|_| "n/a".into(), format_value);
                format!("{} {op} {} {}", side(a), side(b), mark(self))
            }
            Cond::Has(r) => format!("has({r}) {}", mark(self)),
            Cond::Not(inner) => format!("not ({})", inner.explain_in(values, None, decided)),
            Cond::And(a, b) | Cond::Or(a, b) => {
                let op = if matches!(self, Cond::And(..)) { "and" } else { "or" };
                let text = format!(
                    "{} {op} {}",
                    a.explain_in(values, Some(op), decided),
                    b.explain_in(values, Some(op), decided)
                );
                match parent {
                    Some(p) if p != op => format!("({text})"),
                    _ => text,
                }
            }
        }
    }
}

// ---- Conditions: lexer and parser ----

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Num(f64),
    Ref(Ref),
    /// An identifier that is not a keyword: a function's name, or an error.
    Word(String),
    /// An operator, punctuation or keyword (`and`, `or`, `not`).
    Sym(&'static str),
    End,
}

const SYMBOLS: &[&str] = &["<=", ">=", "==", "!=", "<", ">", "+", "-", "*", "/", "(", ")", ","];
const KEYWORDS: &[&str] = &["and", "or", "not"];

fn lex(text: &str, variants: &[&str]) -> Result<Vec<(Tok, usize)>, RuleError> {
    let err = |at: usize, problem: &str| RuleError::new("when", text, at, problem);
    let bytes = text.as_bytes();
    let byte = |i: usize| bytes.get(i).copied().unwrap_or(0);
    let word_byte =
        |i: usize| bytes.get(i).is_some_and(|&b| b.is_ascii_alphanumeric() || b == b'_');
    let mut toks = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        if bytes[i].is_ascii_whitespace() {
            i += 1;
        } else if bytes[i].is_ascii_digit() {
            while word_byte(i)
                || byte(i) == b'.'
                || (matches!(byte(i), b'+' | b'-') && matches!(byte(i - 1), b'e' | b'E'))
            {
                i += 1;
            }
            let number = &text[start..i];
            match number.parse::<f64>() {
                Ok(x) if x.is_finite() => toks.push((Tok::Num(x), start)),
                Ok(_) => return Err(err(start, "number out of range")),
                Err(_) => return Err(err(start, &format!("`{number}` is not a number"))),
            }
        } else if word_byte(i) {
            while word_byte(i) || (byte(i) == b'.' && word_byte(i + 1)) {
                i += 1;
            }
            let word = &text[start..i];
            let tok = if let Some(k) = KEYWORDS.iter().find(|&&k| k == word) {
                Tok::Sym(k)
            } else if word.contains('.') {
                Tok::Ref(parse_ref(word, variants).map_err(|p| err(start, &p))?)
            } else {
                Tok::Word(word.to_string())
            };
            toks.push((tok, start));
        } else if let Some(sym) = SYMBOLS.iter().find(|s| text[i..].starts_with(*s)) {
            i += sym.len();
            toks.push((Tok::Sym(sym), start));
        } else {
            let c = text[i..].chars().next().expect("not at the end");
            let hint = match c {
                '=' => " (compare with `==`)",
                '!' => " (negate with `not`)",
                '&' | '|' => " (join conditions with `and` and `or`)",
                _ => "",
            };
            return Err(err(i, &format!("unexpected `{c}`{hint}")));
        }
    }
    toks.push((Tok::End, text.len()));
    Ok(toks)
}

/// A parsed operand and the byte offset where it starts.
type Parsed = Result<(Node, usize), RuleError>;

enum Node {
    Num(Num),
    Cond(Cond),
}

/// Binary operators by level, loosest first; `not` sits between `and` and the comparisons.
const LEVELS: [&[&str]; 5] =
    [&["or"], &["and"], &["<", "<=", ">", ">=", "==", "!="], &["+", "-"], &["*", "/"]];

/// Nesting deeper than this is an error rather than a stack overflow.
pub(super) const MAX_DEPTH: usize = 32;

struct Parser<'a> {
    text: &'a str,
    toks: Vec<(Tok, usize)>,
    pos: usize,
    depth: usize,
}

pub(super) fn parse_condition(text: &str, variants: &[&str]) -> Result<Cond, RuleError> {
    let toks = lex(text, variants)?;
    let mut p = Parser { text, toks, pos: 0, depth: 0 };
    let (node, start) = p.binary(0)?;
    if p.peek() != &Tok::End {
        return Err(p.err(p.at(), "expected `and`, `or`, an operator or the end"));
    }
    match node {
        Node::Cond(c) => Ok(c),
        Node::Num(_) => {
            Err(p.err(start, "this is a number, not a condition: compare it with `<`, `>`, ..."))
        }
    }
}

/// A number-valued expression (`a.x - b.x`, `100 * (a.x - b.x) / a.x`), for a reason's
/// `{...}` placeholder; errors name `when` and are re-keyed by the caller.
pub(super) fn parse_number(text: &str, variants: &[&str]) -> Result<Num, RuleError> {
    let toks = lex(text, variants)?;
    let mut p = Parser { text, toks, pos: 0, depth: 0 };
    let (node, start) = p.binary(0)?;
    if p.peek() != &Tok::End {
        return Err(p.err(p.at(), "expected an operator or the end"));
    }
    p.num(node, start, "a placeholder")
}

impl Parser<'_> {
    fn err(&self, at: usize, problem: &str) -> RuleError {
        RuleError::new("when", self.text, at, problem)
    }

    fn peek(&self) -> &Tok {
        &self.toks[self.pos].0
    }

    fn at(&self) -> usize {
        self.toks[self.pos].1
    }

    fn next(&mut self) -> (Tok, usize) {
        let tok = self.toks[self.pos].clone();
        self.pos += usize::from(tok.0 != Tok::End);
        tok
    }

    fn eat(&mut self, sym: &str) -> bool {
        let found = matches!(self.peek(), Tok::Sym(s) if *s == sym);
        self.pos += usize::from(found);
        found
    }

    fn num(&self, node: Node, at: usize, what: &str) -> Result<Num, RuleError> {
        match node {
            Node::Num(n) => Ok(n),
            Node::Cond(_) => Err(self.err(at, &format!("{what} needs a number, not a condition"))),
        }
    }

    fn cond(&self, node: Node, at: usize, what: &str) -> Result<Cond, RuleError> {
        match node {
            Node::Cond(c) => Ok(c),
            Node::Num(_) => Err(self.err(
                at,
                &format!("{what} needs a condition, not a number: compare it with `<`, `>`, ..."),
            )),
        }
    }

    /// Nests a level deeper for the duration of `f`.
    fn nested<T>(
        &mut self,
        at: usize,
        f: impl FnOnce(&mut Self) -> Result<T, RuleError>,
    ) -> Result<T, RuleError> {
        if self.depth == MAX_DEPTH {
            return Err(self.err(at, "nested too deeply"));
        }
        self.depth += 1;
        let out = f(self);
        self.depth -= 1;
        out
    }

    fn operand(&mut self, level: usize) -> Parsed {
        match level {
            1 => self.not(),
            4 => self.unary(),
            _ => self.binary(level + 1),
        }
    }

    fn binary(&mut self, level: usize) -> Parsed {
        let (mut left, start) = self.operand(level)?;
        while let Some(&op) = LEVELS[level].iter().find(|&&op| self.peek() == &Tok::Sym(op)) {
            self.next();
            let (right, at) = self.operand(level)?;
            let what = format!("`{op}`");
            left = match level {
                0 | 1 => {
                    let (l, r) = (self.cond(left, start, &what)?, self.cond(right, at, &what)?);
                    let (l, r) = (Box::new(l), Box::new(r));
                    Node::Cond(if op == "or" { Cond::Or(l, r) } else { Cond::And(l, r) })
                }
                2 => {
                    let (l, r) = (self.num(left, start, &what)?, self.num(right, at, &what)?);
                    if LEVELS[2].iter().any(|&op| self.peek() == &Tok::Sym(op)) {
                        let problem = "comparisons do not chain: join them with `and`";
                        return Err(self.err(self.at(), problem));
                    }
                    Node::Cond(Cond::Cmp(op, l, r))
                }
                _ => {
                    let (l, r) = (self.num(left, start, &what)?, self.num(right, at, &what)?);
                    Node::Num(Num::Arith(op, Box::new(l), Box::new(r)))
                }
            };
        }
        Ok((left, start))
    }

    fn not(&mut self) -> Parsed {
        let start = self.at();
        if !self.eat("not") {
            return self.binary(2);
        }
        let (inner, at) = self.nested(start, Self::not)?;
        let c = self.cond(inner, at, "`not`")?;
        Ok((Node::Cond(Cond::Not(Box::new(c))), start))
    }

    fn unary(&mut self) -> Parsed {
        let start = self.at();
        if !self.eat("-") {
            return self.primary();
        }
        let (inner, at) = self.nested(start, Self::unary)?;
        let n = self.num(inner, at, "unary `-`")?;
        Ok((Node::Num(Num::Neg(Box::new(n))), start))
    }

    fn close(&mut self, open: usize) -> Result<(), RuleError> {
        if self.eat(")") {
            return Ok(());
        }
        let column = self.text[..open].chars().count() + 1;
        Err(self.err(self.at(), &format!("expected `)` to close the `(` at column {column}")))
    }

    fn primary(&mut self) -> Parsed {
        let (tok, start) = self.next();
        let func = ["min", "max", "abs"].into_iter().find(|&f| tok == Tok::Word(f.into()));
        if let Some(func) = func {
            return self.call(func, start);
        }
        match tok {
            Tok::Num(x) => Ok((Node::Num(Num::Lit(x)), start)),
            Tok::Ref(r) => Ok((Node::Num(Num::Ref(r)), start)),
            Tok::Sym("(") => {
                let (inner, _) = self.nested(start, |p| p.binary(0))?;
                self.close(start)?;
                Ok((inner, start))
            }
            Tok::Word(w) if w == "has" => {
                let open = self.at();
                if !self.eat("(") {
                    return Err(self.err(start, "`has` needs its argument in `(...)`"));
                }
                let at = self.at();
                let Tok::Ref(r) = self.next().0 else {
                    return Err(self.err(at, "`has` takes one `variant.metric` reference"));
                };
                self.close(open)?;
                Ok((Node::Cond(Cond::Has(r)), start))
            }
            Tok::Word(w) if self.peek() == &Tok::Sym("(") => Err(self.err(
                start,
                &format!("unknown function `{w}`; the functions are min, max, abs and has"),
            )),
            Tok::Word(w) => Err(self.err(
                start,
                &format!("`{w}` is not a reference: write `variant.metric` (or a number)"),
            )),
            Tok::End => Err(self.err(start, "expected a value")),
            Tok::Sym(s) => Err(self.err(start, &format!("expected a value, found `{s}`"))),
        }
    }

    /// `min(...)`, `max(...)` or `abs(...)`, after its name.
    fn call(&mut self, func: &'static str, start: usize) -> Parsed {
        let open = self.at();
        if !self.eat("(") {
            return Err(self.err(start, &format!("`{func}` needs its arguments in `(...)`")));
        }
        let args = self.nested(start, |p| {
            let mut args = Vec::new();
            loop {
                let (arg, at) = p.binary(0)?;
                args.push(p.num(arg, at, &format!("`{func}`"))?);
                if !p.eat(",") {
                    return Ok(args);
                }
            }
        })?;
        self.close(open)?;
        if func == "abs" && args.len() != 1 {
            return Err(self.err(start, "`abs` takes exactly one argument"));
        }
        Ok((Node::Num(Num::Call(func, args)), start))
    }
}
