//! Minimal hand-written SVG plots (no plotting dependency): the ECDF of chunk latency on a log
//! axis (the poster's Figure 3) and median latency against bandwidth (its Figure 4).

use std::fmt::Write as _;

use super::{RateResults, VariantSummary};

const W: f64 = 760.0;
const H: f64 = 460.0;
const LEFT: f64 = 60.0;
const RIGHT: f64 = 230.0;
const TOP: f64 = 30.0;
const BOTTOM: f64 = 50.0;
const COLORS: [&str; 10] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

fn header(title: &str) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="18" text-anchor="middle" font-size="14">{}</text>
<rect x="{LEFT}" y="{TOP}" width="{}" height="{}" fill="none" stroke="black"/>
"#,
        W / 2.0,
        escape(title),
        W - LEFT - RIGHT,
        H - TOP - BOTTOM
    );
    s
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

fn legend(s: &mut String, i: usize, name: &str, dashed: bool) {
    let y = TOP + 14.0 + 16.0 * i as f64;
    let x = W - RIGHT + 10.0;
    let dash = if dashed { r#" stroke-dasharray="5,3""# } else { "" };
    let _ = writeln!(
        s,
        r#"<line x1="{x}" y1="{y}" x2="{}" y2="{y}" stroke="{}" stroke-width="2"{dash}/><text x="{}" y="{}">{}</text>"#,
        x + 20.0,
        COLORS[i % COLORS.len()],
        x + 25.0,
        y + 4.0,
        escape(name)
    );
}

/// ECDF of `samples(variant)` (ms, log axis from 1 ms to 10 s) for every variant.
pub fn ecdf_svg(
    title: &str,
    variants: &[VariantSummary],
    samples: impl Fn(&VariantSummary) -> Vec<f64>,
) -> String {
    let mut s = header(title);
    let (lo, hi) = (0.0_f64, 4.0_f64); // log10 ms: 1 ms .. 10 s
    let px =
        |ms: f64| LEFT + (ms.max(1.0).log10().clamp(lo, hi) - lo) / (hi - lo) * (W - LEFT - RIGHT);
    let py = |f: f64| H - BOTTOM - f * (H - TOP - BOTTOM);
    for d in 0..=4 {
        let x = px(10f64.powi(d));
        let _ = writeln!(
            s,
            r##"<line x1="{x}" y1="{TOP}" x2="{x}" y2="{}" stroke="#ddd"/><text x="{x}" y="{}" text-anchor="middle">{}</text>"##,
            H - BOTTOM,
            H - BOTTOM + 16.0,
            10u64.pow(d as u32)
        );
    }
    for q in [0.0, 0.25, 0.5, 0.75, 1.0] {
        let y = py(q);
        let _ =
            writeln!(s, r#"<text x="{}" y="{}" text-anchor="end">{q}</text>"#, LEFT - 5.0, y + 4.0);
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">latency (ms, log)</text>"#,
        (LEFT + W - RIGHT) / 2.0,
        H - 12.0
    );
    for (i, v) in variants.iter().enumerate() {
        let mut xs = samples(v);
        xs.sort_by(f64::total_cmp);
        let n = xs.len().max(1) as f64;
        let mut d = String::new();
        for (k, &x) in xs.iter().enumerate() {
            let cmd = if k == 0 { 'M' } else { 'L' };
            let _ = write!(
                d,
                "{cmd}{:.1},{:.1} L{:.1},{:.1} ",
                px(x),
                py(k as f64 / n),
                px(x),
                py((k + 1) as f64 / n)
            );
        }
        // Colours repeat after ten variants; the repeats are dashed.
        let dashed = i >= COLORS.len();
        let dash = if dashed { r#" stroke-dasharray="5,3""# } else { "" };
        let _ = writeln!(
            s,
            r#"<path d="{d}" fill="none" stroke="{}" stroke-width="1.5"{dash}/>"#,
            COLORS[i % COLORS.len()]
        );
        legend(&mut s, i, &v.name, dashed);
    }
    s.push_str("</svg>\n");
    s
}

/// Median latency from send start (solid) and from schedule (dashed) against bandwidth, one
/// line per variant name.
pub fn sweep_svg(title: &str, sweep: &[RateResults]) -> String {
    let mut s = header(title);
    let mut names: Vec<String> = Vec::new();
    for r in sweep {
        for v in &r.variants {
            if !names.contains(&v.name) {
                names.push(v.name.clone());
            }
        }
    }
    let rates: Vec<f64> = sweep.iter().map(|r| r.rate_bps as f64 / 1e6).collect();
    let (x0, x1) = (
        rates.iter().copied().fold(f64::INFINITY, f64::min),
        rates.iter().copied().fold(0.0, f64::max),
    );
    let ymax = sweep
        .iter()
        .flat_map(|r| r.variants.iter().flat_map(|v| [v.from_start_ms.p50, v.from_schedule_ms.p50]))
        .filter(|y| y.is_finite())
        .fold(1.0, f64::max)
        * 1.1;
    let px = |m: f64| LEFT + if x1 > x0 { (m - x0) / (x1 - x0) } else { 0.5 } * (W - LEFT - RIGHT);
    let py = |y: f64| H - BOTTOM - y / ymax * (H - TOP - BOTTOM);
    for &m in &rates {
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="middle">{m}</text>"#,
            px(m),
            H - BOTTOM + 16.0
        );
    }
    for k in 0..=4 {
        let y = ymax * f64::from(k) / 4.0;
        let _ = writeln!(
            s,
            r#"<text x="{}" y="{}" text-anchor="end">{y:.0}</text>"#,
            LEFT - 5.0,
            py(y) + 4.0
        );
    }
    let _ = writeln!(
        s,
        r#"<text x="{}" y="{}" text-anchor="middle">bandwidth (Mbit/s); median latency (ms): solid from send start, dashed from schedule</text>"#,
        (LEFT + W - RIGHT) / 2.0,
        H - 12.0
    );
    for (i, name) in names.iter().enumerate() {
        for (dashed, pick) in [(false, 0), (true, 1)] {
            let pts: Vec<String> = sweep
                .iter()
                .filter_map(|r| {
                    let v = r.variants.iter().find(|v| &v.name == name)?;
                    let y = if pick == 0 { v.from_start_ms.p50 } else { v.from_schedule_ms.p50 };
                    y.is_finite()
                        .then(|| format!("{:.1},{:.1}", px(r.rate_bps as f64 / 1e6), py(y)))
                })
                .collect();
            let dash = if dashed { r#" stroke-dasharray="5,3""# } else { "" };
            let _ = writeln!(
                s,
                r#"<polyline points="{}" fill="none" stroke="{}" stroke-width="2"{dash}/>"#,
                pts.join(" "),
                COLORS[i % COLORS.len()]
            );
        }
        legend(&mut s, i, name, false);
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_inputs_still_make_valid_svg() {
        let s = ecdf_svg("t", &[], |_| Vec::new());
        assert!(s.starts_with("<svg") && s.ends_with("</svg>\n"));
        let s = sweep_svg("a < b", &[]);
        assert!(s.contains("a &lt; b"));
    }
}
