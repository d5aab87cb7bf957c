//! The rendered report of a synthetic run: structure, escaping, self-containment, verdicts,
//! and plots that carry real coordinates.

mod common;

use common::{HOSTILE, HOSTILE_ESCAPED, plots_with_data, sample};
use proptest::prelude::*;
use tcptail_report::svg::{self, Axis, Line};
use tcptail_report::{Results, Series, SeriesKind, html};

/// The tags of `html` in order: `(name, closing, self_closing, attributes text)`.
fn tags(html: &str) -> Vec<(String, bool, bool, String)> {
    let mut out = vec![];
    let mut rest = html;
    while let Some(start) = rest.find('<') {
        let end = rest[start..].find('>').expect("every tag is closed") + start;
        let inner = &rest[start + 1..end];
        rest = &rest[end + 1..];
        if inner.starts_with('!') {
            continue;
        }
        let closing = inner.starts_with('/');
        let inner = inner.trim_start_matches('/');
        let name_end = inner.find(|c: char| c.is_whitespace() || c == '/').unwrap_or(inner.len());
        let self_closing = inner.ends_with('/');
        out.push((
            inner[..name_end].to_owned(),
            closing,
            self_closing,
            inner[name_end..].to_owned(),
        ));
    }
    out
}

/// Every element is closed, in order (HTML void elements aside).
fn assert_nested(html: &str) {
    const VOID: [&str; 5] = ["meta", "br", "hr", "link", "input"];
    let mut stack: Vec<String> = vec![];
    for (name, closing, self_closing, _) in tags(html) {
        if self_closing || (!closing && VOID.contains(&name.as_str())) {
            continue;
        }
        if closing {
            let open = stack.pop().unwrap_or_else(|| panic!("</{name}> closes nothing"));
            assert_eq!(open, name, "<{open}> closed by </{name}>");
        } else {
            stack.push(name);
        }
    }
    assert!(stack.is_empty(), "unclosed: {stack:?}");
}

/// The `<svg>...</svg>` pieces of `html`.
fn svgs(html: &str) -> Vec<&str> {
    html.match_indices("<svg")
        .map(|(i, _)| &html[i..i + html[i..].find("</svg>").expect("svg closed") + 6])
        .collect()
}

/// Every number inside the `d` attributes of an SVG's paths.
fn path_numbers(svg: &str) -> Vec<String> {
    svg.split(" d=\"")
        .skip(1)
        .flat_map(|s| {
            s[..s.find('"').unwrap()]
                .split(|c: char| c.is_ascii_alphabetic() || c == ' ')
                .filter(|n| !n.is_empty())
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

fn render_sample() -> (Results, String) {
    let results = sample();
    let html = html::render(&results);
    (results, html)
}

#[test]
fn the_document_is_well_formed() {
    let (_, html) = render_sample();
    assert!(html.starts_with("<!DOCTYPE html>\n<html lang=\"en\">"), "{}", &html[..80]);
    assert!(html.trim_end().ends_with("</html>"));
    assert_nested(&html);
    // Environment, seed 000's failure modes (the sample runs nagle-delack), the experiments.
    assert_eq!(html.matches("<section").count(), 2 + sample().experiments.len());
}

#[test]
fn one_svg_per_plot_with_data() {
    let (results, html) = render_sample();
    let expected = plots_with_data(&results);
    assert_eq!(expected, 7, "the sample's own count changed");
    assert_eq!(html.matches("<svg").count(), expected);
    assert_eq!(html.matches("</svg>").count(), expected);
    // The plots with no data are notes instead.
    for missing in ["missing_us", "ghost_us", "latency_us</code> (plot “Wrong kind”)"] {
        assert!(html.contains(&format!("No data for <code>{missing}")), "{missing}");
    }
    assert!(html.contains("No data for <code>goodput_mbps</code> (plot “Goodput”)"));
}

#[test]
fn plots_have_real_coordinates() {
    let (_, html) = render_sample();
    for svg in svgs(&html) {
        assert!(svg.contains("viewBox=\"0 0 640 "), "{svg}");
        for bad in ["NaN", "inf"] {
            assert!(!svg.contains(bad), "{bad} in {svg}");
        }
        let numbers = path_numbers(svg);
        assert!(numbers.iter().all(|n| n.parse::<f64>().is_ok_and(f64::is_finite)), "{numbers:?}");
        let lines = svg.matches(r#"<path class="line" d="M"#).count();
        let bars = svg.matches(r#"<rect class="bar""#).count();
        assert!(lines + bars > 0, "a plot with nothing drawn: {svg}");
        if lines > 0 {
            // A data line has many points, not only an axis' two.
            let longest = svg
                .split(r#"class="line" d="M"#)
                .skip(1)
                .map(|s| s.split('"').next().unwrap().matches('L').count());
            assert!(longest.max().unwrap() > 10, "{svg}");
        }
    }
}

#[test]
fn user_text_is_escaped() {
    let (_, html) = render_sample();
    assert!(!html.contains(HOSTILE));
    assert!(!html.contains("<script") && !html.contains("<img"));
    assert!(html.contains(HOSTILE_ESCAPED));
    assert!(html.contains("a &quot;quoted&quot; &amp; &#39;single&#39; value"));
    // In attributes too: no tag carries an event handler or a source.
    for (name, _, _, attrs) in tags(&html) {
        for attr in attrs.split_whitespace() {
            let attr = attr.to_ascii_lowercase();
            assert!(!attr.starts_with("on") && !attr.starts_with("src="), "<{name} {attrs}>");
        }
    }
}

#[test]
fn nothing_is_fetched() {
    let (_, html) = render_sample();
    assert!(!html.contains("http://") && !html.contains("https://"));
    assert!(!html.contains("url(") && !html.contains("@import"));
    assert!(html.contains("default-src 'none'"), "the CSP is there");
    // Every link is to an anchor in the document.
    for (_, _, _, attrs) in tags(&html) {
        if let Some(i) = attrs.find("href=\"") {
            let target = attrs[i + 6..].split('"').next().unwrap();
            let id = target.strip_prefix('#').unwrap_or_else(|| panic!("href {target}"));
            assert!(html.contains(&format!("id=\"{id}\"")), "dangling link {target}");
        }
    }
}

#[test]
fn run_environment_and_verdicts_are_shown() {
    let (_, html) = render_sample();
    for v in ["reproduced", "partly", "not-reproduced", "not-applicable", "inconclusive"] {
        let badge = format!(r#"<span class="badge v-{v}">{v}</span>"#);
        // In the contents, the summary and the section.
        assert!(html.matches(&badge).count() >= 3, "{v}");
    }
    assert!(html.contains("2026-10-26T07:33:20Z"));
    assert!(html.contains("1 h 02 min"));
    assert!(html.contains("<strong>Interrupted.</strong>"));
    assert!(html.contains("runs with too much lateness are marked"));
    assert!(html.contains("2 of 5 paths flagged"));
    assert!(html.contains("Synthetic CPU @ 2.0GHz") && html.contains("fq_codel"));
    assert!(html.contains("virtualisation</dt>"));
}

#[test]
fn experiments_show_claim_error_lateness_table_and_notes() {
    let (results, html) = render_sample();
    assert!(html.contains("<cite>000_trading-cc.txt</cite>"));
    assert!(html.contains("<code>bbr.p99_us &lt; 0.8 * cubic.p99_us</code>"));
    assert!(html.contains(&format!(
        "<div class=\"error\" role=\"alert\"><strong>Error:</strong> <span class=\"text\">bench client exited with status 1: {HOSTILE_ESCAPED}"
    )));
    // nagle-delack's and trading-cc's lateness are above their bound, the others have none.
    assert_eq!(html.matches("above the bound: these results are marked").count(), 2);
    // trading-cc's table has the chosen columns; nagle-delack (no `table`) has all four.
    let section = |name: &str| {
        let start = html.find(&format!("<code>{name}</code>")).unwrap();
        &html[start..start + html[start..].find("</section>").unwrap()]
    };
    let cc = section("trading-cc");
    let results_table = |s: &str| {
        let start = s.find("<h3>Results</h3>").expect("a results table");
        s[start..start + s[start..].find("</table>").unwrap()].to_owned()
    };
    let cc_table = results_table(cc);
    assert_eq!(cc_table.matches("<th>").count(), 5, "variant + 3 metrics + lateness");
    assert!(!cc_table.contains("<th>p999_us"));
    // nagle-delack (no `table`) shows all four metrics; none of its variants has lateness.
    assert_eq!(results_table(section("nagle-delack")).matches("<th>").count(), 5);
    // The median's interval with its confidence (5 rounds: their range, 93.8 %) replaces the
    // bare min-max spread.
    let p99 = &results.experiments[0].variants[0].metrics["p99_us"];
    let [low, high] = p99.ci.expect("5 rounds have an interval");
    assert_eq!((low, high), (p99.min, p99.max));
    assert!(
        cc.contains(&format!(
            "{} <span class=\"unit\">µs</span> <span class=\"ci\" title=\"93.8 % confidence \
         interval of the median over rounds\">[{}–{}] 93.8 %</span>",
            svg::fmt_num(p99.median),
            svg::fmt_num(low),
            svg::fmt_num(high)
        )),
        "{cc}"
    );
    assert!(cc.contains("round 3 was lateness-flagged"));
    assert!(html.contains("TCP_QUICKACK is not available here"));
    assert!(section("broken").contains("No variant finished."));
}

#[test]
fn colours_are_per_variant_and_stable_across_plots() {
    let (_, html) = render_sample();
    let cc = &html[html.find("id=\"exp-1-").unwrap()..html.find("id=\"exp-2-").unwrap()];
    for (i, colour) in svg::PALETTE.iter().take(3).enumerate() {
        // The table's swatch, and in each of the 3 plots a legend entry and a line or bars.
        let uses = cc.matches(&format!("=\"{colour}\"")).count()
            + cc.matches(&format!(":{colour}\"")).count();
        assert!(uses >= 7, "variant {i}: {uses}");
        assert!(cc.contains(&format!("background:{colour}")), "variant {i}'s table swatch");
    }
    // The fourth variant could not run: its colour marks only its table row and its
    // configuration, no plot.
    assert_eq!(cc.matches(svg::PALETTE[3]).count(), 2, "only three variants have data");
    assert!(!cc.contains(svg::PALETTE[4]));
}

#[test]
fn the_sample_survives_results_json() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("results.json");
    let results = sample();
    results.write(&path).unwrap();
    assert_eq!(html::render(&Results::read(&path).unwrap()), html::render(&results));
}

#[test]
fn non_finite_data_never_reaches_the_svg() {
    let mut results = sample();
    let exp = &mut results.experiments[0];
    for v in &mut exp.variants {
        for s in &mut v.series {
            s.points.extend([[f64::NAN, 0.5], [f64::INFINITY, 1.0], [1.0, f64::NEG_INFINITY]]);
        }
        if let Some(m) = v.metrics.get_mut("p99_us") {
            (m.min, m.max) = (f64::NAN, f64::INFINITY);
        }
    }
    // A variant with only nonsense.
    let mut junk = exp.variants[0].clone();
    junk.name = "junk".into();
    junk.series = vec![Series {
        name: "latency_us".into(),
        kind: SeriesKind::Cdf,
        points: vec![[f64::NAN, f64::NAN]],
    }];
    exp.variants.push(junk);
    let html = html::render(&results);
    assert_nested(&html);
    assert_eq!(html.matches("<svg").count(), 7);
    for svg in svgs(&html) {
        assert!(!svg.contains("NaN") && !svg.contains("inf"), "{svg}");
    }
}

proptest! {
    #[test]
    fn any_points_make_a_valid_chart_or_none(
        points in prop::collection::vec(
            prop::array::uniform2(prop_oneof![
                Just(f64::NAN), Just(f64::INFINITY), Just(0.0), Just(-1.0),
                -1e12..1e12f64, 1e-9..1e-3f64,
            ]),
            0..40,
        ),
        log in any::<bool>(),
    ) {
        let x = Axis { label: "x".into(), log, fixed: None };
        let y = Axis { label: "y".into(), log: false, fixed: None };
        let lines = [Line { label: "v", index: 9, points: &points }];
        if let Some(svg) = svg::line_chart("t", &x, &y, &lines) {
            prop_assert!(!svg.contains("NaN") && !svg.contains("inf"));
            assert_nested(&svg);
            prop_assert!(path_numbers(&svg).iter().all(|n| n.parse::<f64>().is_ok_and(f64::is_finite)));
        } else {
            prop_assert!(!points.iter().any(|p| p[0].is_finite() && p[1].is_finite() && (!log || p[0] > 0.0)));
        }
    }
}

#[test]
fn every_rule_is_listed_with_this_runs_values_and_the_deciding_one_marked() {
    let (_, html) = render_sample();
    let cc = &html[html.find("id=\"exp-1-").unwrap()..html.find("id=\"exp-2-").unwrap()];
    let rules = &cc[cc.find("<table class=\"rules\">").expect("the rule table")..];
    let rules = &rules[..rules.find("</table>").unwrap()];
    let rows: Vec<&str> = rules.split("<tr").skip(2).collect();
    assert_eq!(rows.len(), 2, "{rules}");
    assert!(rows[0].starts_with(" class=\"fired\""), "{}", rows[0]);
    assert!(rows[0].contains("<code>bbr.p99_us &lt; 0.8 * cubic.p99_us</code>"), "{}", rows[0]);
    assert!(rows[0].contains("640 &lt; 1280 ✓"), "{}", rows[0]);
    assert!(rows[0].contains("holds</span> ← decided the verdict"), "{}", rows[0]);
    assert!(rows[0].contains("(line 40)"));
    assert!(!rows[1].contains("fired") && rows[1].contains("otherwise"), "{}", rows[1]);
    assert!(rows[1].contains(r#"<span class="badge v-not-reproduced">"#), "{}", rows[1]);
}

#[test]
fn findings_late_rounds_and_steps_this_host_cannot_take_are_shown() {
    let (_, html) = render_sample();
    let cc = &html[html.find("id=\"exp-1-").unwrap()..html.find("id=\"exp-2-").unwrap()];
    assert!(cc.contains("<h3>Findings</h3>"));
    assert!(cc.contains("<strong>BBR phase of slow requests</strong>"), "{cc}");
    assert!(cc.contains("PROBE_BW up is not over-represented among slow requests"));
    assert!(cc.contains("9 &gt; 25 ✗"));
    // bbr's second round was above the 200 µs bound, reno's never.
    assert!(cc.contains("emulator lateness p99<span class=\"unit\"> (µs, bound 200)"), "{cc}");
    assert!(cc.contains("late in round 2</span>"), "{cc}");
    assert_eq!(cc.matches("late in round").count(), 1);
    assert_eq!(cc.matches(r#"<span class="flagged">late</span>"#).count(), 1);
    let bbr_row = &cc[cc.find("</span>bbr").unwrap()..];
    assert!(bbr_row[..bbr_row.find("</tr>").unwrap()].contains("late in round 2"));
    // The isolcpus row says why, across the metric columns.
    assert!(cc.contains(
        "<td class=\"na\" colspan=\"4\"><strong>not applicable here:</strong> no CPU is isolated"
    ), "{cc}");
}

#[test]
fn excluded_rounds_are_listed_with_their_reason_and_counted() {
    let (_, html) = render_sample();
    let cc = &html[html.find("id=\"exp-1-").unwrap()..html.find("id=\"exp-2-").unwrap()];
    assert!(cc.contains("5 rounds (1 variant-round excluded)"), "{cc}");
    assert!(cc.contains("<h3>Excluded rounds</h3>"));
    assert!(
        cc.contains(
            "<li data-excluded-round=\"bbr-r6\"><code>bbr</code> round 6: <span class=\"text\">\
         emulator lateness p99 350 µs, over the experiment tolerance of 200 µs</span></li>"
        ),
        "{cc}"
    );
    assert!(cc.contains("<code>bbr</code>: 5 of 6 rounds faithful."));
    // The round's path event and when it took effect.
    assert!(
        cc.contains(
            "<li><code>bbr</code> <code>5s:blackhole</code>: took effect 0.040 ms after its time \
             (1 round)</li>"
        ),
        "{cc}"
    );
    let undecided = &html[html.find("<code>undecided</code>").unwrap()..];
    assert_eq!(undecided.matches("data-excluded-round=").count(), 2);
    assert!(undecided.contains("outcome-undecided"));
    // Experiments without excluded rounds say nothing about them.
    let nagle = &html[html.find("id=\"exp-2-").unwrap()..html.find("id=\"exp-3-").unwrap()];
    assert!(!nagle.contains("Excluded rounds") && !nagle.contains("excluded)"));
    assert!(!nagle.contains("Path events"));
}

#[test]
fn seed_conditions_stand_beside_the_runs_with_deviations_marked() {
    let (_, html) = render_sample();
    let cc = &html[html.find("id=\"exp-1-").unwrap()..html.find("id=\"exp-2-").unwrap()];
    assert!(cc.contains("<h3>Conditions: the seed's and this run's</h3>"));
    assert!(cc.contains("<tr><td>rate</td><td>1 Gbit/s</td><td>1 Gbit/s</td><td>same</td></tr>"));
    assert!(
        cc.contains(
            "<tr class=\"deviates\"><td>duration</td><td>30 min</td><td>3 s x 5 rounds</td>\
         <td><strong>differs</strong>: quick mode; the full mode runs 60 s rounds</td></tr>"
        ),
        "{cc}"
    );
    assert!(
        cc.contains(
            "<p class=\"decidability decides-partly\"><strong>Can quick mode decide this at the \
             seed's effect size? partly.</strong> the seed&#39;s 30-minute average needs full mode \
             &amp; more</p>"
        ),
        "{cc}"
    );
}

/// A results.json written before intervals, rounds and conditions existed reads and renders:
/// no interval (the min-max spread instead), no excluded rounds, no conditions table.
#[test]
fn results_from_before_intervals_still_render() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/results-before-intervals.json");
    let results = Results::read(&path).expect("an old results.json reads");
    let exp = &results.experiments[0];
    assert!(exp.conditions.is_empty());
    let v = &exp.variants[1];
    assert!(v.rounds.is_empty() && v.metrics["p50_us"].ci.is_none());
    let html = tcptail_report::html::render(&results);
    assert_nested(&html);
    assert!(html.contains("<span class=\"spread\">[39800–40100]</span>"), "{html}");
    assert!(!html.contains("Excluded rounds") && !html.contains("Conditions: the seed"));
    assert!(exp.decidability.is_none() && !html.contains("Can quick mode decide"));
    assert!(html.contains(r#"<span class="badge v-reproduced">reproduced</span>"#));
}

/// Seed 000's failure modes: one row per mode, linked to the experiment where it ran, "not run"
/// where it did not; absent when the run holds none of their experiments.
#[test]
fn the_failure_mode_section_maps_every_mode() {
    let (mut results, html) = render_sample();
    let rows: Vec<&str> = html.split("<tr data-failure-mode=").skip(1).collect();
    assert_eq!(rows.len(), 6, "{html}");
    let not_run = rows.iter().filter(|r| r.contains("data-status=\"not-run\"")).count();
    assert_eq!(not_run, 4);
    assert!(rows[1].contains("href=\"#exp-2-nagle-delack\""), "{}", rows[1]);
    assert!(rows[0].contains("not run") && rows[0].contains("tcptail lab run bbr-burst"));
    assert!(html.contains("<a href=\"#failure-modes\">"));
    results.experiments.retain(|e| e.name != "nagle-delack");
    let html = tcptail_report::html::render(&results);
    assert!(!html.contains("data-failure-mode"), "no mapped experiment, no section");
    assert_nested(&html);
}
