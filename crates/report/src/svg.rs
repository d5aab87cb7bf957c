//! Inline SVG plots for the report: number formatting, scales, nice and logarithmic ticks,
//! path building, and the two chart shapes the report draws (lines, grouped bars).
//!
//! Invariants:
//! - Every number written into markup is finite: points with a NaN or infinite coordinate (or a
//!   non-positive one on a log axis) are skipped, never written, so a chart is valid SVG
//!   whatever the data holds. A chart with no drawable point is `None`, not an empty frame.
//! - Every piece of text is escaped with [`escape`] (titles, labels and variant names are user
//!   text from experiment files).
//! - Charts carry a `viewBox`, so they scale with the page, and no `xmlns` or other URL: the
//!   report makes no request of any kind.

use std::fmt::Write as _;

/// Okabe–Ito's colour-blind-safe palette, darkest-first so the first variants contrast most
/// with a white page (yellow, the faintest, comes last but one).
pub const PALETTE: [&str; 8] =
    ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"];

/// Dash patterns used once the palette has gone round, so the ninth variant differs from the
/// first.
const DASHES: [&str; 3] = ["", "6 3", "2 2"];

/// The colour of the `i`th variant of an experiment.
pub fn color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

fn dash(i: usize) -> &'static str {
    DASHES[(i / PALETTE.len()) % DASHES.len()]
}

/// A bar's or legend block's fill: solid for the first round of the palette, then lighter with
/// an outline (fills cannot be dashed).
fn fill_attrs(i: usize) -> String {
    match (i / PALETTE.len()) % DASHES.len() {
        0 => format!(r#"fill="{}""#, color(i)),
        round => format!(
            r#"fill="{c}" fill-opacity="{}" stroke="{c}" stroke-width="1.5""#,
            if round == 1 { "0.45" } else { "0.2" },
            c = color(i)
        ),
    }
}

/// How the legend shows a variant: as a line (line charts) or a block (bars).
#[derive(Debug, Clone, Copy, PartialEq)]
enum Swatch {
    Line,
    Block,
}

/// Escapes `&<>"'` for HTML and SVG text and attribute values.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A number to 3 significant digits, without an exponent between 1e-6 and 1e9 (`0.000123`,
/// `12300`, `1.5`); `NaN`, `∞` and `-∞` for the non-finite.
pub fn fmt_num(v: f64) -> String {
    if v.is_nan() {
        return "NaN".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "∞".into() } else { "-∞".into() };
    }
    if v == 0.0 {
        return "0".into();
    }
    let mag = v.abs().log10().floor() as i32;
    if !(-6..9).contains(&mag) {
        let s = format!("{v:.2e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        return format!("{}e{exp}", trim_zeros(mantissa));
    }
    if mag >= 2 {
        let unit = 10f64.powi(mag - 2);
        return tidy(format!("{:.0}", (v / unit).round() * unit));
    }
    tidy(trim_zeros(&format!("{:.*}", (2 - mag) as usize, v)).to_owned())
}

/// A tick label on a linear axis whose ticks are `step` apart: as many decimals as the step
/// needs and no more, so neighbouring labels always differ.
pub fn fmt_tick(v: f64, step: f64) -> String {
    if !v.is_finite() || !step.is_finite() || step <= 0.0 || v.abs() >= 1e9 {
        return fmt_num(v);
    }
    let decimals = (-step.log10().floor()).clamp(0.0, 12.0) as usize;
    tidy(format!("{v:.decimals$}"))
}

fn trim_zeros(s: &str) -> &str {
    if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.') } else { s }
}

/// Turns `-0` (from rounding a tiny negative number) into `0`.
fn tidy(s: String) -> String {
    if s.starts_with('-') && s[1..].chars().all(|c| c == '0' || c == '.') {
        s[1..].into()
    } else {
        s
    }
}

/// A coordinate in user units, one decimal.
fn c(v: f64) -> String {
    let s = format!("{v:.1}");
    s.strip_suffix(".0").map_or(s.clone(), str::to_owned)
}

/// An axis' domain and where its ticks go.
#[derive(Debug, Clone, PartialEq)]
pub struct Ticks {
    /// Low end of the domain (a tick).
    pub lo: f64,
    /// High end of the domain (a tick).
    pub hi: f64,
    /// Tick values, ascending, within `lo..=hi`.
    pub values: Vec<f64>,
    /// One label per value.
    pub labels: Vec<String>,
    /// Whether the axis is logarithmic.
    pub log: bool,
}

/// The "nice" number (1, 2, 5 or 10 times a power of ten) near `x`: the nearest when `round`,
/// else the smallest at least `x`.
fn nice_num(x: f64, round: bool) -> f64 {
    let exp = x.log10().floor();
    let f = x / 10f64.powf(exp);
    let nf = if round {
        if f < 1.5 {
            1.0
        } else if f < 3.0 {
            2.0
        } else if f < 7.0 {
            5.0
        } else {
            10.0
        }
    } else if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    nf * 10f64.powf(exp)
}

/// About `target` evenly spaced ticks at nice numbers covering `lo..=hi`; the domain is widened
/// to the outer ticks. A single value gets a domain around it; non-finite input gives `0..=1`.
pub fn nice_ticks(lo: f64, hi: f64, target: usize) -> Ticks {
    let (mut lo, mut hi) =
        if lo.is_finite() && hi.is_finite() { (lo.min(hi), lo.max(hi)) } else { (0.0, 1.0) };
    if hi - lo <= hi.abs().max(lo.abs()) * 1e-12 {
        let pad = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
        (lo, hi) = (lo - pad, hi + pad);
    }
    let range = nice_num(hi - lo, false);
    let step = nice_num(range / (target.max(2) - 1) as f64, true);
    let first = (lo / step).floor();
    let last = (hi / step).ceil();
    let values: Vec<f64> = (0..=(last - first) as usize)
        .map(|i| {
            let v = (first + i as f64) * step;
            if v == 0.0 { 0.0 } else { v }
        })
        .collect();
    let labels = values.iter().map(|&v| fmt_tick(v, step)).collect();
    Ticks { lo: first * step, hi: last * step, values, labels, log: false }
}

/// Ticks for a logarithmic axis over `lo..=hi` (both > 0): the domain is widened to whole
/// decades; ticks at each decade, plus 2× and 5× when the axis spans two decades or less, and
/// only every other (third...) decade when it spans more than eight. Returns `None` when
/// `lo` or `hi` is not a positive finite number.
pub fn log_ticks(lo: f64, hi: f64) -> Option<Ticks> {
    if !(lo.is_finite() && hi.is_finite() && lo > 0.0 && hi > 0.0) {
        return None;
    }
    let (lo, hi) = (lo.min(hi), lo.max(hi));
    let e0 = lo.log10().floor() as i32;
    let mut e1 = hi.log10().ceil() as i32;
    if e1 <= e0 {
        e1 = e0 + 1;
    }
    let decades = e1 - e0;
    let stride = ((decades + 7) / 8).max(1);
    let mut values = Vec::new();
    for e in e0..=e1 {
        let p = 10f64.powi(e);
        if (e - e0) % stride == 0 || e == e1 {
            values.push(p);
        }
        if decades <= 2 && e < e1 {
            values.extend([2.0 * p, 5.0 * p]);
        }
    }
    let labels = values.iter().map(|&v| fmt_num(v)).collect();
    Some(Ticks { lo: 10f64.powi(e0), hi: 10f64.powi(e1), values, labels, log: true })
}

/// Maps a domain (linear or logarithmic) onto a pixel range.
#[derive(Debug, Clone, Copy)]
pub struct Scale {
    lo: f64,
    hi: f64,
    log: bool,
    r0: f64,
    r1: f64,
}

impl Scale {
    /// A scale over `ticks`' domain onto `r0..r1` (`r1 < r0` for a y axis).
    pub fn new(ticks: &Ticks, r0: f64, r1: f64) -> Scale {
        Scale { lo: ticks.lo, hi: ticks.hi, log: ticks.log, r0, r1 }
    }

    /// The pixel position of `v`; `None` when `v` is not finite, or not positive on a log
    /// scale.
    pub fn map(&self, v: f64) -> Option<f64> {
        let (v, lo, hi) = if self.log {
            if v.is_nan() || v <= 0.0 {
                return None;
            }
            (v.log10(), self.lo.log10(), self.hi.log10())
        } else {
            (v, self.lo, self.hi)
        };
        let t = if hi > lo { (v - lo) / (hi - lo) } else { 0.5 };
        let p = self.r0 + t * (self.r1 - self.r0);
        p.is_finite().then_some(p)
    }
}

/// The `d` of a polyline through `points` (already in pixels), skipping non-finite ones.
/// `None` when no point is left.
pub fn path_d(points: impl IntoIterator<Item = (f64, f64)>) -> Option<String> {
    let mut d = String::new();
    for (x, y) in points.into_iter().filter(|(x, y)| x.is_finite() && y.is_finite()) {
        let _ = write!(d, "{}{} {}", if d.is_empty() { "M" } else { "L" }, c(x), c(y));
    }
    (!d.is_empty()).then_some(d)
}

/// Rough width of `s` in 12 px sans-serif, for layout.
fn text_width(s: &str, size: f64) -> f64 {
    s.chars().count() as f64 * size * 0.6
}

/// Shortens `s` to about `width` pixels, with an ellipsis.
fn fit(s: &str, width: f64, size: f64) -> String {
    let max = (width / (size * 0.6)).floor().max(1.0) as usize;
    if s.chars().count() <= max {
        s.into()
    } else {
        s.chars().take(max - 1).chain(['…']).collect()
    }
}

/// One axis: its label, whether it is logarithmic, and (optionally) a fixed domain.
#[derive(Debug, Clone, Default)]
pub struct Axis {
    /// Label, with its unit.
    pub label: String,
    /// Logarithmic.
    pub log: bool,
    /// A fixed domain instead of one fitted to the data (an ECDF's `0..=1`).
    pub fixed: Option<(f64, f64)>,
}

impl Axis {
    fn ticks(&self, lo: f64, hi: f64, target: usize) -> Option<Ticks> {
        let (lo, hi) = self.fixed.unwrap_or((lo, hi));
        if self.log { log_ticks(lo, hi) } else { Some(nice_ticks(lo, hi, target)) }
    }

    /// Whether `v` can be drawn on this axis.
    fn accepts(&self, v: f64) -> bool {
        v.is_finite() && (!self.log || v > 0.0)
    }
}

/// One line of a line chart.
#[derive(Debug, Clone)]
pub struct Line<'a> {
    /// Legend entry (the variant).
    pub label: &'a str,
    /// Index of the variant, for its colour.
    pub index: usize,
    /// `[x, y]` in data units.
    pub points: &'a [[f64; 2]],
}

/// A group of bars (one metric) in a bar chart.
#[derive(Debug, Clone)]
pub struct BarGroup<'a> {
    /// Group label under the axis (the metric).
    pub label: &'a str,
    /// `(variant index, median, min, max)`; a variant without the metric has no entry.
    pub bars: Vec<(usize, f64, f64, f64)>,
}

const WIDTH: f64 = 640.0;
const PLOT_HEIGHT: f64 = 200.0;
const FONT: f64 = 12.0;

/// The frame shared by both chart shapes: title, legend, axes, grid, tick labels.
struct Frame {
    svg: String,
    left: f64,
    right: f64,
    top: f64,
    bottom: f64,
    height: f64,
}

impl Frame {
    fn new(
        title: &str,
        legend: &[(usize, &str)],
        swatch: Swatch,
        y: &Ticks,
        y_label: &str,
    ) -> Frame {
        let widest = y.labels.iter().map(|l| text_width(l, FONT)).fold(0.0, f64::max);
        let left = (widest + 34.0).max(52.0);
        // Room for half the last x tick label.
        let right = WIDTH - 30.0;
        // Legend rows under the title, wrapped to the plot's width.
        let mut rows: Vec<Vec<(f64, usize, &str)>> = vec![];
        let mut x = right + 1.0;
        for &(i, name) in legend {
            let name_w = text_width(name, FONT).min(right - left - 30.0);
            if x + 26.0 + name_w > right {
                rows.push(vec![]);
                x = left;
            }
            rows.last_mut().expect("a row was pushed").push((x, i, name));
            x += 26.0 + name_w + 14.0;
        }
        let top = 30.0 + rows.len() as f64 * 16.0 + 8.0;
        let bottom = top + PLOT_HEIGHT;
        let height = bottom + 42.0;
        let mut svg = String::new();
        let _ = write!(
            svg,
            r##"<svg class="plot" viewBox="0 0 {w} {h}" width="{w}" height="{h}" role="img" font-family="system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif" font-size="{FONT}"><title>{t}</title><rect x="0" y="0" width="{w}" height="{h}" fill="#fff"/><text x="{tx}" y="18" font-size="14" font-weight="600" fill="#222">{t}</text>"##,
            w = WIDTH,
            h = c(height),
            t = escape(title),
            tx = c(left),
        );
        for (r, row) in rows.iter().enumerate() {
            let ly = 34.0 + r as f64 * 16.0;
            for &(lx, i, name) in row {
                let max_w = right - lx - 26.0;
                if swatch == Swatch::Line {
                    let _ = write!(
                        svg,
                        r#"<path d="M{} {}h20" stroke="{}" stroke-width="3"{}/>"#,
                        c(lx),
                        c(ly),
                        color(i),
                        dash_attr(i),
                    );
                } else {
                    let _ = write!(
                        svg,
                        r#"<rect x="{}" y="{}" width="20" height="10" {}/>"#,
                        c(lx),
                        c(ly - 5.0),
                        fill_attrs(i),
                    );
                }
                let _ = write!(
                    svg,
                    r##"<text x="{}" y="{}" fill="#222">{}</text>"##,
                    c(lx + 26.0),
                    c(ly + 4.0),
                    escape(&fit(name, max_w, FONT)),
                );
            }
        }
        let mut frame = Frame { svg, left, right, top, bottom, height };
        let ys = Scale::new(y, bottom, top);
        for (v, label) in y.values.iter().zip(&y.labels) {
            let Some(py) = ys.map(*v) else { continue };
            let _ = write!(
                frame.svg,
                r##"<path d="M{l} {p}H{r}" stroke="#e3e3e3"/><text x="{tx}" y="{ty}" text-anchor="end" fill="#333">{label}</text>"##,
                l = c(left),
                r = c(right),
                p = c(py),
                tx = c(left - 6.0),
                ty = c(py + 4.0),
                label = escape(label),
            );
        }
        let _ = write!(
            frame.svg,
            r##"<text transform="translate(14 {cy}) rotate(-90)" text-anchor="middle" fill="#222">{label}</text>"##,
            cy = c((top + bottom) / 2.0),
            label = escape(&fit(y_label, PLOT_HEIGHT, FONT)),
        );
        frame
    }

    fn x_ticks(&mut self, x: &Ticks, xs: &Scale, x_label: &str) {
        for (v, label) in x.values.iter().zip(&x.labels) {
            let Some(px) = xs.map(*v) else { continue };
            let _ = write!(
                self.svg,
                r##"<path d="M{p} {t}V{b}" stroke="#eeeeee"/><text x="{p}" y="{ly}" text-anchor="middle" fill="#333">{label}</text>"##,
                p = c(px),
                t = c(self.top),
                b = c(self.bottom),
                ly = c(self.bottom + 16.0),
                label = escape(label),
            );
        }
        self.x_label(x_label);
    }

    fn x_label(&mut self, label: &str) {
        let _ = write!(
            self.svg,
            r##"<text x="{cx}" y="{y}" text-anchor="middle" fill="#222">{label}</text>"##,
            cx = c((self.left + self.right) / 2.0),
            y = c(self.height - 8.0),
            label = escape(&fit(label, self.right - self.left, FONT)),
        );
    }

    fn finish(mut self) -> String {
        let _ = write!(
            self.svg,
            r##"<path d="M{l} {t}V{b}H{r}" fill="none" stroke="#555"/></svg>"##,
            l = c(self.left),
            t = c(self.top),
            b = c(self.bottom),
            r = c(self.right),
        );
        self.svg
    }
}

fn dash_attr(i: usize) -> String {
    match dash(i) {
        "" => String::new(),
        d => format!(r#" stroke-dasharray="{d}""#),
    }
}

/// Low and high ends of `values`; `None` when there are none.
fn extent(values: impl IntoIterator<Item = f64>) -> Option<(f64, f64)> {
    values.into_iter().fold(None, |acc, v| match acc {
        None => Some((v, v)),
        Some((lo, hi)) => Some((lo.min(v), hi.max(v))),
    })
}

/// A line chart, one line per entry of `lines`; `None` when no line has a drawable point.
/// A linear y axis starts at zero when every value is positive and zero is not far away.
pub fn line_chart(title: &str, x: &Axis, y: &Axis, lines: &[Line<'_>]) -> Option<String> {
    let drawable = |p: &&[f64; 2]| x.accepts(p[0]) && y.accepts(p[1]);
    let drawn: Vec<(&Line<'_>, Vec<[f64; 2]>)> = lines
        .iter()
        .map(|l| (l, l.points.iter().filter(drawable).copied().collect::<Vec<_>>()))
        .filter(|(_, pts)| !pts.is_empty())
        .collect();
    let all = || drawn.iter().flat_map(|(_, pts)| pts.iter());
    let (x_lo, x_hi) = extent(all().map(|p| p[0]))?;
    let (mut y_lo, y_hi) = extent(all().map(|p| p[1]))?;
    if !y.log && y_lo > 0.0 && y_lo < y_hi * 0.5 {
        y_lo = 0.0;
    }
    let xt = x.ticks(x_lo, x_hi, 7)?;
    let yt = y.ticks(y_lo, y_hi, 5)?;
    let legend: Vec<(usize, &str)> = drawn.iter().map(|(l, _)| (l.index, l.label)).collect();
    let mut frame = Frame::new(title, &legend, Swatch::Line, &yt, &y.label);
    let xs = Scale::new(&xt, frame.left, frame.right);
    let ys = Scale::new(&yt, frame.bottom, frame.top);
    frame.x_ticks(&xt, &xs, &x.label);
    for (line, pts) in &drawn {
        let pixels: Vec<(f64, f64)> =
            pts.iter().filter_map(|p| Some((xs.map(p[0])?, ys.map(p[1])?))).collect();
        let Some(d) = path_d(pixels.iter().copied()) else { continue };
        let _ = write!(
            frame.svg,
            r#"<path class="line" d="{d}" fill="none" stroke="{}" stroke-width="2" stroke-linejoin="round"{}><title>{}</title></path>"#,
            color(line.index),
            dash_attr(line.index),
            escape(line.label),
        );
        if let [(px, py)] = pixels[..] {
            let _ = write!(
                frame.svg,
                r#"<circle cx="{}" cy="{}" r="3" fill="{}"/>"#,
                c(px),
                c(py),
                color(line.index)
            );
        }
    }
    Some(frame.finish())
}

/// Grouped bars of medians with min–max whiskers, one group per [`BarGroup`], one colour per
/// variant; `legend` names the variants. `None` when no bar is drawable.
pub fn bar_chart(
    title: &str,
    y: &Axis,
    groups: &[BarGroup<'_>],
    legend: &[(usize, &str)],
) -> Option<String> {
    let groups: Vec<BarGroup<'_>> = groups
        .iter()
        .map(|g| BarGroup {
            label: g.label,
            bars: g.bars.iter().copied().filter(|b| y.accepts(b.1)).collect(),
        })
        .filter(|g| !g.bars.is_empty())
        .collect();
    let values = groups.iter().flat_map(|g| g.bars.iter().flat_map(|b| [b.1, b.2, b.3]));
    let (mut lo, mut hi) = extent(values.filter(|&v| y.accepts(v)))?;
    if !y.log {
        (lo, hi) = (lo.min(0.0), hi.max(0.0));
    }
    let yt = y.ticks(lo, hi, 5)?;
    let mut frame = Frame::new(title, legend, Swatch::Block, &yt, &y.label);
    let ys = Scale::new(&yt, frame.bottom, frame.top);
    let base = if y.log { frame.bottom } else { ys.map(0.0).unwrap_or(frame.bottom) };
    let group_w = (frame.right - frame.left) / groups.len() as f64;
    let slots = legend.len().max(1) as f64;
    let bar_w = ((group_w * 0.8) / slots).min(48.0);
    for (g, group) in groups.iter().enumerate() {
        let gx = frame.left + g as f64 * group_w;
        let start = gx + (group_w - bar_w * slots) / 2.0;
        for &(i, median, min, max) in &group.bars {
            let slot = legend.iter().position(|&(li, _)| li == i).unwrap_or(0) as f64;
            let x = start + slot * bar_w;
            let Some(py) = ys.map(median) else { continue };
            let _ = write!(
                frame.svg,
                r##"<rect class="bar" x="{}" y="{}" width="{}" height="{}" {}><title>{}: {}</title></rect>"##,
                c(x + 1.0),
                c(py.min(base)),
                c(bar_w - 2.0),
                c((py - base).abs().max(0.5)),
                fill_attrs(i),
                escape(legend.iter().find(|l| l.0 == i).map_or("", |l| l.1)),
                fmt_num(median),
            );
            if let (Some(p_min), Some(p_max)) = (ys.map(min), ys.map(max)) {
                let cx = x + bar_w / 2.0;
                let cap = (bar_w / 4.0).min(6.0);
                let _ = write!(
                    frame.svg,
                    r##"<path d="M{} {}V{}M{} {}h{}M{} {}h{}" stroke="#222" stroke-width="1.5"/>"##,
                    c(cx),
                    c(p_min),
                    c(p_max),
                    c(cx - cap),
                    c(p_min),
                    c(2.0 * cap),
                    c(cx - cap),
                    c(p_max),
                    c(2.0 * cap),
                );
            }
        }
        let _ = write!(
            frame.svg,
            r##"<text x="{}" y="{}" text-anchor="middle" fill="#333">{}<title>{}</title></text>"##,
            c(gx + group_w / 2.0),
            c(frame.bottom + 16.0),
            escape(&fit(group.label, group_w - 4.0, FONT)),
            escape(group.label),
        );
    }
    Some(frame.finish())
}

#[cfg(test)]
mod tests;
