//! The poster's figures as standalone SVG files, drawn by the report's chart code
//! ([`tcptail_report::svg`]): the ECDF of chunk latency on a log axis (the poster's Figure 3)
//! and median latency against bandwidth (its Figure 4).
//!
//! The report's charts are inline (no `xmlns`); a file of its own needs the namespace, added
//! here. A figure without a drawable point is a small SVG that says so under its title.

use tcptail_report::Series;
use tcptail_report::svg::{self, Axis, Line, PALETTE, escape};

use super::{RateResults, VariantSummary};

const SVG_NS: &str = r#"<svg xmlns="http://www.w3.org/2000/svg" "#;

/// The chart as a file of its own, or a "no data" figure under `title`.
fn standalone(title: &str, chart: Option<String>) -> String {
    let mut s = match chart {
        Some(chart) => chart.replacen("<svg ", SVG_NS, 1),
        None => format!(
            r#"{SVG_NS}viewBox="0 0 640 60" width="640" height="60" font-family="sans-serif" font-size="12"><text x="10" y="20" font-size="14">{}</text><text x="10" y="44">no data</text></svg>"#,
            escape(title)
        ),
    };
    s.push('\n');
    s
}

/// ECDF of `samples(variant)` (ms, log axis) for every variant.
pub fn ecdf_svg(
    title: &str,
    variants: &[VariantSummary],
    samples: impl Fn(&VariantSummary) -> Vec<f64>,
) -> String {
    let series: Vec<Series> =
        variants.iter().map(|v| Series::cdf(&v.name, &mut samples(v))).collect();
    let lines: Vec<Line<'_>> = variants
        .iter()
        .zip(&series)
        .enumerate()
        .map(|(index, (v, s))| Line { label: &v.name, index, points: &s.points })
        .collect();
    let x = Axis { label: "latency (ms, log)".into(), log: true, fixed: None };
    let y = Axis { label: "fraction ≤ x".into(), log: false, fixed: Some((0.0, 1.0)) };
    standalone(title, svg::line_chart(title, &x, &y, &lines))
}

/// Median latency from send start (solid) and from schedule (dashed, same colour) against
/// bandwidth, one pair of lines per variant name.
pub fn sweep_svg(title: &str, sweep: &[RateResults]) -> String {
    let mut names: Vec<&str> = Vec::new();
    for r in sweep {
        for v in &r.variants {
            if !names.contains(&v.name.as_str()) {
                names.push(&v.name);
            }
        }
    }
    let points = |name: &str, from_schedule: bool| -> Vec<[f64; 2]> {
        sweep
            .iter()
            .filter_map(|r| {
                let v = r.variants.iter().find(|v| v.name == name)?;
                let y = if from_schedule { v.from_schedule_ms.p50 } else { v.from_start_ms.p50 };
                Some([r.rate_bps as f64 / 1e6, y])
            })
            .collect()
    };
    let mut labelled: Vec<(String, usize, Vec<[f64; 2]>)> = Vec::new();
    for (i, name) in names.iter().enumerate() {
        labelled.push((format!("{name} from start"), i, points(name, false)));
        // One palette round later: the same colour, dashed.
        labelled.push((format!("{name} from schedule"), i + PALETTE.len(), points(name, true)));
    }
    let lines: Vec<Line<'_>> = labelled
        .iter()
        .map(|(label, index, points)| Line { label, index: *index, points })
        .collect();
    let x = Axis { label: "bandwidth (Mbit/s)".into(), log: false, fixed: None };
    let y = Axis { label: "median latency (ms)".into(), log: false, fixed: None };
    standalone(title, svg::line_chart(title, &x, &y, &lines))
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
