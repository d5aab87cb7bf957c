//! `index.html`: the self-contained report of one run.
//!
//! One document, inline CSS, inline SVG plots (drawn by [`crate::svg`]), no script and no
//! request of any kind: a `Content-Security-Policy` meta tag (`default-src 'none'`) makes any
//! stray reference fail loudly in the browser instead of fetching. All text from experiment
//! files and the machine (claims, setups, reasons, notes, names) is escaped.
//!
//! Layout: run information and a table of contents with each experiment's verdict badge, the
//! environment (with a warning when the emulator's lateness flagged paths), then one section
//! per experiment: claim, setup, verdict, every verdict rule evaluated on the run's values
//! (the deciding one marked), the findings, error, lateness, the metrics table (with each
//! variant's emulator lateness, late rounds marked, and rows for variants this host cannot
//! run), the plots the experiment file asks for, and the notes. A plot whose data is missing in every
//! variant is a one-line "no data" note, not an empty frame.

use std::fmt::Write as _;

use crate::failure_modes::{self, FailureModeRow};
use crate::results::{
    Environment, ExperimentResult, Lateness, PlotSpec, Results, SeriesKind, Verdict, unit_of,
};
use crate::svg::{self, Axis, BarGroup, Line, escape, fmt_num};

/// Renders the whole report as one HTML document.
pub fn render(results: &Results) -> String {
    let run = &results.run;
    let mut h = String::with_capacity(64 * 1024);
    let _ = write!(
        h,
        r#"<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy" content="default-src 'none'; style-src 'unsafe-inline'">
<title>tcptail lab run: {mode}, {date}</title>
<style>{CSS}</style>
</head>
<body>
<main>
<header>
<h1>tcptail lab run</h1>
"#,
        mode = escape(&run.mode),
        date = iso_utc(run.started_unix_s),
    );
    if run.interrupted {
        h.push_str(
            r#"<div class="banner" role="alert"><strong>Interrupted.</strong> The run was stopped before every experiment finished; this report shows what had finished.</div>
"#,
        );
    }
    let _ = write!(
        h,
        r#"<dl class="kv">
<dt>Mode</dt><dd>{}</dd>
<dt>Started</dt><dd>{}</dd>
<dt>Duration</dt><dd>{}</dd>
<dt>Command</dt><dd><code>{}</code></dd>
<dt>Version</dt><dd>tcptail {}</dd>
<dt>Verdicts</dt><dd>{}</dd>
</dl>
</header>
"#,
        escape(&run.mode),
        iso_utc(run.started_unix_s),
        fmt_duration(run.duration_s),
        escape(&run.command),
        escape(&run.tool_version),
        verdict_counts(&results.experiments),
    );
    let modes = failure_modes::applies(results).then(|| failure_modes::rows(results));
    toc(&mut h, &results.experiments, modes.is_some());
    environment(&mut h, &results.environment);
    if let Some(rows) = &modes {
        failure_mode_section(&mut h, rows, &results.experiments);
    }
    for (i, exp) in results.experiments.iter().enumerate() {
        experiment(&mut h, i, exp);
    }
    let _ = write!(
        h,
        "<footer class=\"page-footer\">Made by tcptail {} from <code>results.json</code>; <code>tcptail lab report DIR</code> draws it again.</footer>\n</main>\n</body>\n</html>\n",
        escape(&run.tool_version)
    );
    h
}

const CSS: &str = "\
:root{color-scheme:light}\
body{margin:0;background:#f6f6f4;color:#222;font:15px/1.5 system-ui,-apple-system,'Segoe UI',Roboto,sans-serif}\
main{max-width:1000px;margin:0 auto;padding:1rem 1.5rem 3rem}\
h1{margin:.4em 0 .2em}h2{margin:.2em 0 .5em}h3{margin:1.2em 0 .4em;font-size:1.05em}\
code{font-family:ui-monospace,'DejaVu Sans Mono',Menlo,monospace;font-size:.9em;background:#efefec;padding:0 .25em;border-radius:3px;overflow-wrap:anywhere}\
dl.kv{display:grid;grid-template-columns:max-content 1fr;gap:.15em 1em;margin:.6em 0}\
dl.kv dt{font-weight:600;color:#555}dl.kv dd{margin:0}\
.badge{display:inline-block;padding:0 .6em;border-radius:1em;font-size:.8em;font-weight:600;white-space:nowrap;vertical-align:.1em}\
.v-reproduced{background:#1a7f37;color:#fff}.v-partly{background:#f0b429;color:#222}\
.v-not-reproduced{background:#c62828;color:#fff}.v-not-applicable{background:#6e6e6e;color:#fff}\
.v-inconclusive{background:#5b5fc7;color:#fff}\
.banner,.error,.warn{padding:.5em .9em;border-radius:6px;margin:.8em 0}\
.banner,.error{background:#fdecea;border:1px solid #c62828}\
.warn{background:#fff6dc;border:1px solid #d49b00}\
nav ol{padding-left:1.4em}nav li{margin:.15em 0}\
section{background:#fff;border:1px solid #e0e0dc;border-radius:8px;padding:.8rem 1.3rem 1.2rem;margin:1.4rem 0}\
.meta{color:#666;font-size:.9em;margin-top:0}\
blockquote{margin:.8em 0;padding:.4em 1em;border-left:4px solid #8aa4c8;background:#f3f6fa}\
blockquote p{margin:.2em 0}blockquote footer{color:#555;font-size:.9em}\
.text{white-space:pre-wrap}\
.table-wrap{overflow-x:auto}\
table{border-collapse:collapse;margin:.5em 0;font-variant-numeric:tabular-nums}\
th,td{padding:.3em .7em;border-bottom:1px solid #e3e3e0;text-align:right;vertical-align:top;white-space:nowrap}\
th:first-child,td:first-child{text-align:left;white-space:normal}th{font-weight:600;background:#f3f3f0}\
.unit,.spread{color:#666;font-size:.85em}\
.vlabel{display:block;font-size:.85em;color:#555;font-weight:normal}\
.swatch{display:inline-block;width:.8em;height:.8em;border-radius:2px;margin-right:.4em}\
figure{margin:1em 0}svg.plot{display:block;max-width:100%;height:auto}\
.nodata{color:#666;font-style:italic}\
.flagged{color:#a03000;font-weight:600}\
table.rules td,table.rules th{white-space:normal;text-align:left}\
table.rules tr.fired td{background:#eef6ee;font-weight:600}table.rules tr.fired td code{font-weight:normal}\
.outcome-holds{color:#1a7f37}.outcome-fails{color:#777}.outcome-unknown{color:#a03000}.outcome-undecided{color:#5b5fc7}\
.ci{color:#555;font-size:.85em}.excluded li{color:#a03000}\
table.conditions td,table.conditions th{white-space:normal;text-align:left}tr.deviates td{background:#fff6dc}\
p.decidability{margin:.6em 0}p.decides-partly,p.decides-no{background:#fff6dc;padding:.3em .5em}\
td.na{text-align:left;color:#555;font-style:italic;white-space:normal}\
table.failure-modes td,table.failure-modes th{white-space:normal;text-align:left}table.failure-modes td.why{font-size:.9em;color:#444}\
.v-not-run{background:#e0e0dc;color:#444}\
.page-footer{color:#777;font-size:.85em;margin-top:2em}";

fn badge(v: Verdict) -> String {
    format!(r#"<span class="badge v-{v}">{v}</span>"#)
}

fn anchor(i: usize, exp: &ExperimentResult) -> String {
    let name: String = exp
        .name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '-' })
        .collect();
    format!("exp-{}-{name}", i + 1)
}

/// A variant's colour beside its name; lighter and outlined once the palette has gone round,
/// like its bars.
fn swatch(i: usize) -> String {
    let c = svg::color(i);
    if i < svg::PALETTE.len() {
        format!(r#"<span class="swatch" style="background:{c}"></span>"#)
    } else {
        format!(
            r#"<span class="swatch" style="background:{c}73;box-shadow:inset 0 0 0 1.5px {c}"></span>"#
        )
    }
}

fn verdict_counts(exps: &[ExperimentResult]) -> String {
    let parts: Vec<String> = Verdict::ALL
        .into_iter()
        .filter_map(|v| {
            let n = exps.iter().filter(|e| e.verdict == v).count();
            (n > 0).then(|| format!("{n} {}", badge(v)))
        })
        .collect();
    if parts.is_empty() { "no experiments".into() } else { parts.join(" ") }
}

fn flagged(l: &Lateness) -> bool {
    l.worst_p99_us > l.bound_us
}

fn toc(h: &mut String, exps: &[ExperimentResult], failure_modes: bool) {
    h.push_str(
        "<nav>\n<h2>Contents</h2>\n<ol>\n<li><a href=\"#environment\">Environment</a></li>\n",
    );
    if failure_modes {
        h.push_str("<li><a href=\"#failure-modes\">Seed 000's six failure modes</a></li>\n");
    }
    for (i, exp) in exps.iter().enumerate() {
        let mut marks = String::new();
        if exp.error.is_some() {
            marks.push_str(r#" <span class="flagged">error</span>"#);
        }
        if exp.lateness.as_ref().is_some_and(flagged) {
            marks.push_str(r#" <span class="flagged">lateness</span>"#);
        }
        let _ = writeln!(
            h,
            r##"<li><a href="#{}">{}</a> {}{marks}</li>"##,
            anchor(i, exp),
            escape(&exp.title),
            badge(exp.verdict),
        );
    }
    h.push_str("</ol>\n</nav>\n");
}

/// Seed 000's failure modes, one row each: the experiment that tests it (linked when it ran)
/// and its verdict, or "not run"; a mode judged by a finding shows the finding's outcome.
fn failure_mode_section(h: &mut String, rows: &[FailureModeRow], exps: &[ExperimentResult]) {
    h.push_str(
        r#"<section class="failure-modes" id="failure-modes">
<h2>Seed 000's six failure modes</h2>
<p class="meta">"How This Breaks in Production" in seed 000 (TCP Tuning for Trading), each with the experiment that tests it in this run.</p>
<div class="table-wrap"><table class="failure-modes">
<thead><tr><th>#</th><th>Failure mode</th><th>Experiment</th><th>Verdict</th><th>Why</th></tr></thead>
<tbody>
"#,
    );
    for row in rows {
        let m = row.mode;
        let (experiment, verdict, why) = match &row.experiment {
            None => (
                format!(r#"<code class="name">{}</code>"#, escape(m.experiment)),
                r#"<span class="badge v-not-run">not run</span>"#.to_owned(),
                format!("not in this run: <code>tcptail lab run {}</code>", escape(m.experiment)),
            ),
            Some((i, v, reason)) => {
                let link = format!(
                    r##"<a href="#{}"><code class="name">{}</code></a>"##,
                    anchor(*i, &exps[*i]),
                    escape(m.experiment)
                );
                match (m.finding, &row.finding) {
                    // The rule's reason, without the statistics that follow it.
                    (None, _) => {
                        let reason = reason.split(" [at 95 % confidence").next().unwrap_or("");
                        (link, badge(*v), escape(reason))
                    }
                    (Some(prefix), Some((outcome, text))) => (
                        link,
                        format!(
                            r#"<span class="outcome-{o}">finding {o}</span><br>experiment: {}"#,
                            badge(*v),
                            o = outcome.as_str()
                        ),
                        format!("{}: {}", escape(prefix), escape(text)),
                    ),
                    (Some(prefix), None) => (
                        link,
                        format!("experiment: {}", badge(*v)),
                        format!(
                            "its finding \u{201c}{}\u{201d} is not in these results",
                            escape(prefix)
                        ),
                    ),
                }
            }
        };
        let _ = writeln!(
            h,
            r#"<tr data-failure-mode="{n}" data-experiment="{e}" data-status="{s}"><td>{n}</td><td>{t}</td><td>{experiment}</td><td>{verdict}</td><td class="why">{why}</td></tr>"#,
            n = m.number,
            e = escape(m.experiment),
            s = row.status(),
            t = escape(m.title),
        );
    }
    h.push_str("</tbody>\n</table></div>\n</section>\n");
}

fn list(items: &[String]) -> String {
    if items.is_empty() {
        "none".into()
    } else {
        items.iter().map(|s| escape(s)).collect::<Vec<_>>().join(", ")
    }
}

fn lateness_text(l: &Lateness) -> String {
    format!(
        "worst p99 {} µs, max {} µs, bound {} µs; {} of {} paths flagged",
        fmt_num(l.worst_p99_us),
        fmt_num(l.max_us),
        fmt_num(l.bound_us),
        l.flagged_paths,
        l.paths
    )
}

fn environment(h: &mut String, env: &Environment) {
    let or_unknown = |s: &str| if s.is_empty() { "unknown".into() } else { escape(s) };
    let _ = write!(
        h,
        r#"<section id="environment">
<h2>Environment</h2>
<dl class="kv">
<dt>Kernel</dt><dd>{}</dd>
<dt>CPUs</dt><dd>{} × {}</dd>
<dt>Congestion control</dt><dd>default <code>{}</code>; available: {}; allowed: {}</dd>
<dt>Qdiscs</dt><dd>{}</dd>
<dt>Emulator</dt><dd>{}</dd>
<dt>Emulator lateness</dt><dd>{}</dd>
"#,
        or_unknown(&env.kernel),
        env.cpus,
        or_unknown(&env.cpu_model),
        or_unknown(&env.default_congestion_control),
        list(&env.congestion_controls_available),
        list(&env.congestion_controls_allowed),
        list(&env.qdiscs),
        or_unknown(&env.emulator),
        env.emulator_lateness.as_ref().map_or("not measured".into(), lateness_text),
    );
    for (k, v) in &env.notes {
        let _ = writeln!(h, "<dt>{}</dt><dd class=\"text\">{}</dd>", escape(k), escape(v));
    }
    h.push_str("</dl>\n");
    if let Some(l) = env.emulator_lateness.as_ref().filter(|l| l.flagged_paths > 0) {
        let _ = writeln!(
            h,
            r#"<div class="warn" role="alert"><strong>Emulator lateness:</strong> {} of {} emulated paths released packets later than the {} µs p99 bound; runs with too much lateness are marked, and their numbers say more about this machine than about TCP.</div>"#,
            l.flagged_paths,
            l.paths,
            fmt_num(l.bound_us),
        );
    }
    h.push_str("</section>\n");
}

fn experiment(h: &mut String, i: usize, exp: &ExperimentResult) {
    let _ = write!(
        h,
        r#"<section class="experiment" id="{id}">
<h2>{title} {badge}</h2>
<p class="meta"><code>{name}</code> · {rounds} round{s}{excluded} · {dur}</p>
<blockquote><p class="text">{claim}</p><footer>Claim from <cite>{seed}</cite></footer></blockquote>
<h3>Setup</h3>
<p class="text">{setup}</p>
<h3>Verdict</h3>
<p>{badge} <span class="text">{reason}</span></p>
"#,
        id = anchor(i, exp),
        title = escape(&exp.title),
        badge = badge(exp.verdict),
        name = escape(&exp.name),
        rounds = exp.rounds,
        excluded = match exp.variants.iter().map(|v| v.excluded_rounds().count()).sum::<usize>() {
            0 => String::new(),
            n => format!(" ({n} variant-round{} excluded)", if n == 1 { "" } else { "s" }),
        },
        s = if exp.rounds == 1 { "" } else { "s" },
        dur = fmt_duration(exp.duration_s),
        claim = escape(&exp.claim),
        seed = escape(&exp.seed),
        setup = escape(&exp.setup),
        reason = escape(&exp.verdict_reason),
    );
    verdict::rules(h, exp);
    verdict::findings(h, exp);
    table::conditions(h, exp);
    if let Some(err) = &exp.error {
        let _ = writeln!(
            h,
            r#"<div class="error" role="alert"><strong>Error:</strong> <span class="text">{}</span></div>"#,
            escape(err)
        );
    }
    if let Some(l) = &exp.lateness {
        let (class, mark) = if flagged(l) {
            (" class=\"flagged\"", " — above the bound: these results are marked")
        } else {
            ("", "")
        };
        let _ = writeln!(h, "<p{class}>Emulator lateness: {}{mark}</p>", lateness_text(l));
    }
    metrics_table(h, exp);
    table::excluded_rounds(h, exp);
    table::path_events(h, exp);
    for spec in &exp.plots {
        match plot(exp, spec) {
            Ok(svg) => {
                let _ = writeln!(h, "<figure>{svg}</figure>");
            }
            Err(what) => {
                let _ = writeln!(
                    h,
                    r#"<p class="nodata">No data for {what} (plot “{}”).</p>"#,
                    escape(plot_title(spec))
                );
            }
        }
    }
    notes(h, exp);
    h.push_str("</section>\n");
}

fn plot_title(spec: &PlotSpec) -> &str {
    match spec {
        PlotSpec::Ecdf { title, .. }
        | PlotSpec::Timeseries { title, .. }
        | PlotSpec::Bars { title, .. } => title,
    }
}

fn with_unit(name: &str) -> String {
    match unit_of(name) {
        "" => name.to_owned(),
        unit => format!("{name} ({unit})"),
    }
}

/// One plot's SVG, or (as the error) an escaped description of the data it lacks.
fn plot(exp: &ExperimentResult, spec: &PlotSpec) -> Result<String, String> {
    let lines = |series: &str, kind: SeriesKind| -> Vec<Line<'_>> {
        exp.variants
            .iter()
            .enumerate()
            .filter_map(|(index, v)| {
                let s = v.series(series).filter(|s| s.kind == kind)?;
                Some(Line { label: &v.name, index, points: &s.points })
            })
            .collect()
    };
    let missing = |what: &str| format!("<code>{}</code>", escape(what));
    match spec {
        PlotSpec::Ecdf { series, title, log_x } => {
            let x = Axis { label: with_unit(series), log: *log_x, fixed: None };
            let y = Axis { label: "fraction ≤ x".into(), log: false, fixed: Some((0.0, 1.0)) };
            svg::line_chart(title, &x, &y, &lines(series, SeriesKind::Cdf))
                .ok_or_else(|| missing(series))
        }
        PlotSpec::Timeseries { series, title } => {
            let x = Axis { label: "time (s)".into(), ..Axis::default() };
            let y = Axis { label: with_unit(series), ..Axis::default() };
            svg::line_chart(title, &x, &y, &lines(series, SeriesKind::Time))
                .ok_or_else(|| missing(series))
        }
        PlotSpec::Bars { metrics, title, log_y } => {
            let groups: Vec<BarGroup<'_>> = metrics
                .iter()
                .map(|m| BarGroup {
                    label: m,
                    bars: exp
                        .variants
                        .iter()
                        .enumerate()
                        .filter_map(|(i, v)| v.metrics.get(m).map(|x| (i, x.median, x.min, x.max)))
                        .collect(),
                })
                .collect();
            let legend: Vec<(usize, &str)> = exp
                .variants
                .iter()
                .enumerate()
                .filter(|(_, v)| metrics.iter().any(|m| v.metrics.contains_key(m)))
                .map(|(i, v)| (i, v.name.as_str()))
                .collect();
            // The units of the metrics that have data, for the axis label.
            let mut units: Vec<&str> = groups
                .iter()
                .filter(|g| !g.bars.is_empty())
                .map(|g| unit_of(g.label))
                .filter(|u| !u.is_empty())
                .collect();
            units.dedup();
            let label = match (&metrics[..], &units[..]) {
                ([m], _) => with_unit(m),
                (_, [u]) => (*u).to_owned(),
                _ => units.join(", "),
            };
            let y = Axis { label, log: *log_y, fixed: None };
            svg::bar_chart(title, &y, &groups, &legend)
                .ok_or_else(|| metrics.iter().map(|m| missing(m)).collect::<Vec<_>>().join(", "))
        }
    }
}

fn notes(h: &mut String, exp: &ExperimentResult) {
    if !exp.notes.is_empty() {
        h.push_str("<h3>Notes</h3>\n<ul>\n");
        for n in &exp.notes {
            let _ = writeln!(h, "<li class=\"text\">{}</li>", escape(n));
        }
        h.push_str("</ul>\n");
    }
    if exp.variants.iter().any(|v| !v.notes.is_empty()) {
        h.push_str("<h3>Variant notes</h3>\n<ul>\n");
        for (i, v) in exp.variants.iter().enumerate() {
            for n in &v.notes {
                let _ = writeln!(
                    h,
                    "<li>{}<strong>{}</strong>: <span class=\"text\">{}</span></li>",
                    swatch(i),
                    escape(&v.name),
                    escape(n)
                );
            }
        }
        h.push_str("</ul>\n");
    }
    if exp.variants.iter().any(|v| !v.config.is_empty()) {
        h.push_str("<details><summary>Variant configuration</summary>\n<ul>\n");
        for (i, v) in exp.variants.iter().enumerate() {
            let config: Vec<String> = v
                .config
                .iter()
                .map(|(k, val)| {
                    let val = match val {
                        serde_json::Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    format!("<code>{}={}</code>", escape(k), escape(&val))
                })
                .collect();
            let _ = writeln!(
                h,
                "<li>{}<strong>{}</strong>: {}</li>",
                swatch(i),
                escape(&v.name),
                config.join(" ")
            );
        }
        h.push_str("</ul>\n</details>\n");
    }
}

/// Orders names with their digit runs compared as numbers: `p99_us` before `p999_us`.
fn natural_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    fn chunks(s: &str) -> Vec<(bool, &str)> {
        let mut out = vec![];
        let mut start = 0;
        for (i, c) in s.char_indices().skip(1) {
            let prev = s[..i].chars().next_back().is_some_and(|p| p.is_ascii_digit());
            if prev != c.is_ascii_digit() {
                out.push((prev, &s[start..i]));
                start = i;
            }
        }
        if !s.is_empty() {
            out.push((s[start..].starts_with(|c: char| c.is_ascii_digit()), &s[start..]));
        }
        out
    }
    let key = |(digits, text): (bool, &str)| {
        if digits {
            let t = text.trim_start_matches('0');
            (0, t.len(), t.to_owned())
        } else {
            (1, 0, text.to_owned())
        }
    };
    let (ka, kb) = (chunks(a), chunks(b));
    ka.into_iter().map(key).cmp(kb.into_iter().map(key)).then_with(|| a.cmp(b))
}

/// Seconds since the Unix epoch as an ISO 8601 UTC time (`2026-11-01T09:30:00Z`); `unknown`
/// for 0 (never set).
pub fn iso_utc(unix_s: u64) -> String {
    if unix_s == 0 {
        return "unknown".into();
    }
    let days = (unix_s / 86_400) as i64;
    let secs = unix_s % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// A wall-clock length: `12.3 s`, `4 min 05 s`, `1 h 02 min`.
fn fmt_duration(s: f64) -> String {
    if !s.is_finite() || s < 0.0 {
        return "unknown".into();
    }
    if s < 60.0 {
        return format!("{s:.1} s");
    }
    let whole = s.round() as u64;
    if whole < 3600 {
        format!("{} min {:02} s", whole / 60, whole % 60)
    } else {
        format!("{} h {:02} min", whole / 3600, whole / 60 % 60)
    }
}

mod table;
#[cfg(test)]
mod tests;
mod verdict;

use table::metrics_table;
