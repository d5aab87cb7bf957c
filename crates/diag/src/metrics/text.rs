//! The exposition text writer: family headers and sample lines appended piecewise to one
//! buffer, with numbers written exactly from the integers the kernel reports.
//!
//! Nothing here allocates per sample: labels are written straight into the output (escaped on
//! the way), and a value is a [`Num`], an integer with a decimal scale (microseconds are
//! `units / 10^6` seconds, BBR gains `units / 256`), printed with integer arithmetic, never
//! through float formatting. A full scrape writes about 30 samples per exported connection, so
//! this is where its time goes.

use std::fmt::Write as _;

use super::Format;

/// Metric type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Gauge,
    Counter,
    Info,
}

impl Kind {
    /// The sample-name suffix of this type in both formats.
    pub(crate) fn suffix(self) -> &'static str {
        match self {
            Kind::Gauge => "",
            Kind::Counter => "_total",
            Kind::Info => "_info",
        }
    }
}

/// A sample value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Num {
    /// `units / 10^decimals`, printed exactly (`decimals` at most 19).
    Scaled { units: u64, decimals: u8 },
    /// A measured float (histogram sums).
    Float(f64),
}

impl Num {
    /// An integer.
    pub(crate) fn int(v: impl Into<u64>) -> Num {
        Num::Scaled { units: v.into(), decimals: 0 }
    }
    /// Microseconds as seconds.
    pub(crate) fn micros(us: impl Into<u64>) -> Num {
        Num::Scaled { units: us.into(), decimals: 6 }
    }
    /// Milliseconds as seconds.
    pub(crate) fn millis(ms: impl Into<u64>) -> Num {
        Num::Scaled { units: ms.into(), decimals: 3 }
    }
    /// Nanoseconds as seconds (saturating at `u64::MAX` ns, 584 years).
    pub(crate) fn nanos(ns: u128) -> Num {
        Num::Scaled { units: u64::try_from(ns).unwrap_or(u64::MAX), decimals: 9 }
    }
    /// A ×256 fixed-point ratio (BBR's gains): `x / 256 = x * 390625 / 10^8` exactly.
    pub(crate) fn ratio256(x: u32) -> Num {
        Num::Scaled { units: u64::from(x) * 390_625, decimals: 8 }
    }
}

/// Appends `v` in decimal.
pub(crate) fn push_u64(out: &mut String, mut v: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    // Only ASCII digits were written.
    out.push_str(std::str::from_utf8(&buf[i..]).unwrap_or_default());
}

/// Appends `v` as the exposition formats spell it: shortest exact decimal, no exponent for
/// scaled integers; `NaN`, `+Inf`, `-Inf` for the special floats.
pub(crate) fn push_num(out: &mut String, v: Num) {
    match v {
        Num::Scaled { units, decimals: 0 } => push_u64(out, units),
        Num::Scaled { units, decimals } => {
            let scale = 10u64.pow(u32::from(decimals.min(19)));
            push_u64(out, units / scale);
            let mut frac = units % scale;
            if frac == 0 {
                return;
            }
            let mut digits = decimals.min(19);
            while frac % 10 == 0 {
                frac /= 10;
                digits -= 1;
            }
            out.push('.');
            let mut buf = [b'0'; 19];
            let mut i = usize::from(digits);
            while frac > 0 {
                i -= 1;
                buf[i] = b'0' + (frac % 10) as u8;
                frac /= 10;
            }
            out.push_str(std::str::from_utf8(&buf[..usize::from(digits)]).unwrap_or_default());
        }
        Num::Float(f) if f.is_nan() => out.push_str("NaN"),
        Num::Float(f) if f.is_infinite() => out.push_str(if f > 0.0 { "+Inf" } else { "-Inf" }),
        Num::Float(f) if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 => {
            // Integral (most sums of integral values): through the integer path, no `.0`.
            if f < 0.0 {
                out.push('-');
            }
            push_u64(out, f.abs() as u64);
        }
        Num::Float(f) => {
            let _ = write!(out, "{f}");
        }
    }
}

/// Appends `v` escaped as a label value (`\`, `"`, newline).
pub(crate) fn push_escaped(out: &mut String, v: &str) {
    if !v.contains(['\\', '"', '\n']) {
        out.push_str(v);
        return;
    }
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// The exposition being written.
pub(crate) struct Writer {
    pub(crate) out: String,
    pub(crate) format: Format,
}

impl Writer {
    /// `# HELP` and `# TYPE` of a family, named as `format` wants (`_total` and `_info` are
    /// part of a Prometheus family name, not of an OpenMetrics one).
    pub(crate) fn header(&mut self, name: &str, help: &str, kind: Kind) {
        let (suffix, ty) = match (self.format, kind) {
            (_, Kind::Gauge) => ("", "gauge"),
            (Format::Prometheus, Kind::Counter) => ("_total", "counter"),
            (Format::OpenMetrics, Kind::Counter) => ("", "counter"),
            (Format::Prometheus, Kind::Info) => ("_info", "gauge"),
            (Format::OpenMetrics, Kind::Info) => ("", "info"),
        };
        for (what, text) in [("# HELP ", help), ("# TYPE ", ty)] {
            self.out.push_str(what);
            self.out.push_str(name);
            self.out.push_str(suffix);
            self.out.push(' ');
            self.out.push_str(text);
            self.out.push('\n');
        }
    }

    /// Starts a sample line of `name` + `suffix`; finish it with [`Line::value`].
    pub(crate) fn line(&mut self, name: &str, suffix: &str) -> Line<'_> {
        self.out.push_str(name);
        self.out.push_str(suffix);
        Line { out: &mut self.out, open: false }
    }

    /// One sample with labels already formatted (`a="x",b="y"`, or empty).
    pub(crate) fn sample(&mut self, name: &str, suffix: &str, labels: &str, v: Num) {
        self.line(name, suffix).raw(labels).value(v);
    }
}

/// A sample line being written: labels, then the value.
pub(crate) struct Line<'w> {
    out: &'w mut String,
    open: bool,
}

impl Line<'_> {
    fn sep(&mut self) {
        self.out.push(if self.open { ',' } else { '{' });
        self.open = true;
    }

    /// Labels already formatted and escaped (`a="x",b="y"`); nothing when empty.
    pub(crate) fn raw(mut self, labels: &str) -> Self {
        if !labels.is_empty() {
            self.sep();
            self.out.push_str(labels);
        }
        self
    }

    /// One label, its value escaped.
    pub(crate) fn label(mut self, key: &str, value: &str) -> Self {
        self.sep();
        self.out.push_str(key);
        self.out.push_str("=\"");
        push_escaped(self.out, value);
        self.out.push('"');
        self
    }

    /// One label whose value is a number (a histogram's `le`).
    pub(crate) fn label_num(mut self, key: &str, value: Num) -> Self {
        self.sep();
        self.out.push_str(key);
        self.out.push_str("=\"");
        push_num(self.out, value);
        self.out.push('"');
        self
    }

    /// Ends the line with its value.
    pub(crate) fn value(self, v: Num) {
        if self.open {
            self.out.push('}');
        }
        self.out.push(' ');
        push_num(self.out, v);
        self.out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(v: Num) -> String {
        let mut s = String::new();
        push_num(&mut s, v);
        s
    }

    #[test]
    fn scaled_integers_print_as_the_shortest_exact_decimal() {
        assert_eq!(text(Num::int(0u64)), "0");
        assert_eq!(text(Num::int(u64::MAX)), "18446744073709551615");
        assert_eq!(text(Num::micros(2000u32)), "0.002");
        assert_eq!(text(Num::micros(1_000_000u32)), "1");
        assert_eq!(text(Num::micros(1_234_567u32)), "1.234567");
        assert_eq!(text(Num::micros(1u32)), "0.000001");
        assert_eq!(text(Num::millis(1500u32)), "1.5");
        assert_eq!(text(Num::nanos(1)), "0.000000001");
        assert_eq!(text(Num::ratio256(739)), "2.88671875");
        assert_eq!(text(Num::ratio256(256)), "1");
        assert_eq!(text(Num::Float(f64::INFINITY)), "+Inf");
        assert_eq!(text(Num::Float(-2.0)), "-2");
        assert_eq!(text(Num::Float(0.25)), "0.25");
    }

    #[test]
    fn scaled_values_read_back_as_the_same_float() {
        // What a scraper parses equals the float the old formatter printed.
        for units in [0u64, 1, 7, 999, 1000, 123_456, 4_294_967_295, 10_000_000_000_001] {
            for (v, f) in [
                (Num::micros(units), units as f64 / 1e6),
                (Num::millis(units), units as f64 / 1e3),
                (Num::nanos(u128::from(units)), units as f64 / 1e9),
            ] {
                let parsed: f64 = text(v).parse().unwrap();
                assert!((parsed - f).abs() <= f.abs() * 1e-15, "{units}: {parsed} vs {f}");
            }
        }
    }

    #[test]
    fn labels_are_escaped_and_joined() {
        let mut w = Writer { out: String::new(), format: Format::Prometheus };
        w.line("m", "_total").raw("a=\"1\"").label("b", "x\"y\\z\n").value(Num::int(3u32));
        w.line("n", "").value(Num::micros(5u32));
        w.line("h", "_bucket")
            .label("le", "x")
            .label_num("q", Num::micros(250u32))
            .value(Num::Float(f64::NAN));
        assert_eq!(
            w.out,
            "m_total{a=\"1\",b=\"x\\\"y\\\\z\\n\"} 3\nn 0.000005\nh_bucket{le=\"x\",q=\"0.00025\"} NaN\n"
        );
    }
}
