//! The metrics table of one experiment: a row per variant, a column per metric (median over
//! rounds with its min–max spread, each round's value in the cell's tooltip).
//!
//! Two things every table shows whatever the experiment file's `table` lists:
//! - the built-in emulator's p99 release lateness per variant ([`LATENESS_METRIC`]) whenever a
//!   variant ran on an emulated path, with the rounds above the experiment's bound named and
//!   the variant's name marked `late`: a reader sees which numbers the machine may have bent;
//! - a row for each variant this host cannot run ([`VariantResult::not_applicable`]), with
//!   the reason across the metric columns, instead of a silent gap.

use std::fmt::Write as _;

use super::{escape, fmt_num, natural_cmp, swatch};
use crate::results::{ExperimentResult, LATENESS_METRIC, Metric, VariantResult, unit_of};

/// The rounds (1-based) of `m` above `bound` µs.
fn late_rounds(m: &Metric, bound: f64) -> Vec<usize> {
    m.values.iter().enumerate().filter(|(_, v)| **v > bound).map(|(i, _)| i + 1).collect()
}

fn rounds_phrase(rounds: &[usize]) -> String {
    let list: Vec<String> = rounds.iter().map(usize::to_string).collect();
    format!("round{} {}", if rounds.len() == 1 { "" } else { "s" }, list.join(", "))
}

/// `97 %`: a confidence as a reader says it.
fn percent(confidence: f64) -> String {
    let p = confidence * 100.0;
    if (p - p.round()).abs() < 0.05 { format!("{p:.0} %") } else { format!("{p:.1} %") }
}

fn cell(m: &Metric) -> String {
    let rounds: Vec<String> = m.values.iter().map(|&x| fmt_num(x)).collect();
    // The interval of the median with its confidence; a file from before intervals shows the
    // min–max spread it has.
    let spread = match (m.ci, m.confidence) {
        (Some([low, high]), Some(c)) if low != high => format!(
            " <span class=\"ci\" title=\"{} confidence interval of the median over rounds\">\
             [{}–{}] {}</span>",
            percent(c),
            fmt_num(low),
            fmt_num(high),
            percent(c)
        ),
        (Some(_), Some(_)) => String::new(),
        _ if m.min == m.max => String::new(),
        _ => format!(" <span class=\"spread\">[{}–{}]</span>", fmt_num(m.min), fmt_num(m.max)),
    };
    format!(
        "<td title=\"rounds: {}\">{} <span class=\"unit\">{}</span>{spread}",
        escape(&rounds.join(", ")),
        fmt_num(m.median),
        escape(&m.unit),
    )
}

/// The rounds left out of the numbers, each with its reason, and how many per variant.
pub(super) fn excluded_rounds(h: &mut String, exp: &ExperimentResult) {
    let excluded: Vec<(&VariantResult, &crate::results::RoundRecord)> =
        exp.variants.iter().flat_map(|v| v.excluded_rounds().map(move |r| (v, r))).collect();
    if excluded.is_empty() {
        return;
    }
    let _ = writeln!(
        h,
        "<h3>Excluded rounds</h3>\n<p>{} variant-round{} did not count: the path or the workload \
         was not what the experiment meant, so {} left out of the medians, intervals and \
         verdict.</p>\n<ul class=\"excluded\">",
        excluded.len(),
        if excluded.len() == 1 { "" } else { "s" },
        if excluded.len() == 1 { "it is" } else { "they are" },
    );
    for (v, r) in excluded {
        let _ = writeln!(
            h,
            "<li data-excluded-round=\"{}-r{}\"><code>{}</code> round {}: <span class=\"text\">{}</span></li>",
            escape(&v.name),
            r.index,
            escape(&v.name),
            r.index,
            escape(r.excluded_reason.as_deref().unwrap_or("not faithful")),
        );
    }
    h.push_str("</ul>\n");
    for v in &exp.variants {
        let total = v.rounds.len();
        let faithful = v.rounds.iter().filter(|r| r.faithful).count();
        if faithful < total {
            let _ = writeln!(
                h,
                "<p class=\"unit\"><code>{}</code>: {faithful} of {total} rounds faithful.</p>",
                escape(&v.name)
            );
        }
    }
}

/// The seed's conditions beside this run's, deviations highlighted with their reason, then
/// whether quick mode can decide the verdict at the seed's effect size.
pub(super) fn conditions(h: &mut String, exp: &ExperimentResult) {
    decidability(h, exp);
    if exp.conditions.is_empty() {
        return;
    }
    h.push_str(
        "<h3>Conditions: the seed's and this run's</h3>\n<div class=\"table-wrap\">\
         <table class=\"conditions\">\n<thead><tr><th>condition</th><th>seed</th><th>this run</th>\
         <th></th></tr></thead>\n<tbody>\n",
    );
    for c in &exp.conditions {
        let (class, mark) = if c.matches {
            ("", "same".to_owned())
        } else {
            (
                " class=\"deviates\"",
                format!(
                    "<strong>differs</strong>{}",
                    c.reason.as_deref().map_or(String::new(), |r| format!(": {}", escape(r)))
                ),
            )
        };
        let _ = writeln!(
            h,
            "<tr{class}><td>{}</td><td>{}</td><td>{}</td><td>{mark}</td></tr>",
            escape(&c.name),
            escape(&c.seed),
            escape(&c.run),
        );
    }
    h.push_str("</tbody></table></div>\n");
}

/// The experiment's statement of what its quick mode can decide.
fn decidability(h: &mut String, exp: &ExperimentResult) {
    let Some(d) = &exp.decidability else {
        return;
    };
    let _ = writeln!(
        h,
        "<p class=\"decidability decides-{q}\"><strong>Can quick mode decide this at the seed's \
         effect size? {q}.</strong> {}</p>",
        escape(&d.reason),
        q = d.quick.as_str(),
    );
}

/// The name cell: swatch, name, the file's label under it, and a `late` mark.
fn name_cell(index: usize, v: &VariantResult, late: bool) -> String {
    // The experiment file's label says what the variant is; the name is what rules use.
    let label = match v.config.get("label") {
        Some(serde_json::Value::String(l)) if *l != v.name => {
            format!("<span class=\"vlabel\">{}</span>", escape(l))
        }
        _ => String::new(),
    };
    let mark = if late { r#" <span class="flagged">late</span>"# } else { "" };
    format!("<td>{}{}{mark}{label}</td>", swatch(index), escape(&v.name))
}

pub(super) fn metrics_table(h: &mut String, exp: &ExperimentResult) {
    h.push_str("<h3>Results</h3>\n");
    if exp.variants.is_empty() {
        h.push_str("<p class=\"nodata\">No variant finished.</p>\n");
        return;
    }
    let mut columns: Vec<&str> = exp.table.iter().map(String::as_str).collect();
    if columns.is_empty() {
        let mut all: Vec<&str> = exp
            .variants
            .iter()
            .flat_map(|v| v.metrics.keys().map(String::as_str))
            .filter(|m| *m != LATENESS_METRIC)
            .collect();
        all.sort_by(|a, b| natural_cmp(a, b));
        all.dedup();
        columns = all;
    }
    let lateness_column = exp.variants.iter().any(|v| v.metrics.contains_key(LATENESS_METRIC))
        && !columns.contains(&LATENESS_METRIC);
    let bound = exp.lateness.map(|l| l.bound_us);
    h.push_str("<div class=\"table-wrap\"><table>\n<thead><tr><th>variant</th>");
    for col in &columns {
        let unit = exp
            .variants
            .iter()
            .find_map(|v| v.metrics.get(*col))
            .map_or(unit_of(col), |m| m.unit.as_str());
        let unit = if unit.is_empty() { String::new() } else { format!(" ({})", escape(unit)) };
        let _ = write!(h, "<th>{}<span class=\"unit\">{unit}</span></th>", escape(col));
    }
    if lateness_column {
        let bound = bound.map_or(String::new(), |b| format!(", bound {}", fmt_num(b)));
        let _ = write!(h, "<th>emulator lateness p99<span class=\"unit\"> (µs{bound})</span></th>");
    }
    h.push_str("</tr></thead>\n<tbody>\n");
    for (vi, v) in exp.variants.iter().enumerate() {
        let lateness = v.metrics.get(LATENESS_METRIC);
        let late = match (lateness, bound) {
            (Some(m), Some(b)) => late_rounds(m, b),
            _ => Vec::new(),
        };
        h.push_str("<tr>");
        h.push_str(&name_cell(vi, v, !late.is_empty()));
        if let Some(why) = &v.not_applicable {
            let span = columns.len() + usize::from(lateness_column);
            let _ = write!(
                h,
                "<td class=\"na\" colspan=\"{span}\"><strong>not applicable here:</strong> {}</td>",
                escape(why)
            );
            h.push_str("</tr>\n");
            continue;
        }
        for col in &columns {
            match v.metrics.get(*col) {
                None => h.push_str("<td>—</td>"),
                Some(m) => {
                    h.push_str(&cell(m));
                    h.push_str("</td>");
                }
            }
        }
        if lateness_column {
            match lateness {
                None => h.push_str("<td>—</td>"),
                Some(m) => {
                    h.push_str(&cell(m));
                    if !late.is_empty() {
                        let _ = write!(
                            h,
                            " <span class=\"flagged\">late in {}</span>",
                            rounds_phrase(&late)
                        );
                    }
                    h.push_str("</td>");
                }
            }
        }
        h.push_str("</tr>\n");
    }
    h.push_str("</tbody></table></div>\n");
}

/// The path events of each variant's rounds (`5s:blackhole`) and how long after its time
/// each took effect on the emulator's clock, over the rounds; nothing without events.
pub(super) fn path_events(h: &mut String, exp: &ExperimentResult) {
    let mut items = Vec::new();
    for v in &exp.variants {
        // In first-seen order: the event, how late it took effect in each round that reached
        // it (ms), and in how many rounds the round ended first.
        let mut events: Vec<(&str, Vec<f64>, usize)> = Vec::new();
        for e in v.rounds.iter().flat_map(|r| &r.path_events) {
            let i = match events.iter().position(|(text, ..)| *text == e.event) {
                Some(i) => i,
                None => {
                    events.push((&e.event, Vec::new(), 0));
                    events.len() - 1
                }
            };
            match e.applied_s {
                Some(applied) => events[i].1.push((applied - e.at_s) * 1e3),
                None => events[i].2 += 1,
            }
        }
        for (text, late, missed) in events {
            let rounds = |n: usize| format!("{n} round{}", if n == 1 { "" } else { "s" });
            let mut what = Vec::new();
            if !late.is_empty() {
                let lo = late.iter().copied().fold(f64::INFINITY, f64::min);
                let hi = late.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                let span = if hi - lo < 0.0005 {
                    format!("{lo:.3} ms")
                } else {
                    format!("{lo:.3}–{hi:.3} ms")
                };
                what.push(format!("took effect {span} after its time ({})", rounds(late.len())));
            }
            if missed > 0 {
                what.push(format!("not reached in {} (the round ended first)", rounds(missed)));
            }
            items.push(format!(
                "<li><code>{}</code> <code>{}</code>: {}</li>",
                escape(&v.name),
                escape(text),
                what.join("; ")
            ));
        }
    }
    if items.is_empty() {
        return;
    }
    let _ = writeln!(
        h,
        "<h3>Path events</h3>\n<p>Scheduled changes to the emulated path, and how long after \
         its time each took effect on the emulator's clock.</p>\n<ul class=\"path-events\">\n{}\n\
         </ul>",
        items.join("\n")
    );
}
