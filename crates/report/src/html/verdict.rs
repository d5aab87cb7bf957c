//! How the verdict was reached: every rule of the experiment file in order, as written and
//! with this run's values in place (so the thresholds the data was held against are on the
//! page), what each came to, and which one decided; then the findings, the observations the
//! file states as conditions on the data.

use std::fmt::Write as _;

use super::{badge, escape};
use crate::results::{ExperimentResult, Outcome};

fn outcome(o: Outcome) -> String {
    format!(r#"<span class="outcome-{0}">{0}</span>"#, o.as_str())
}

/// The rule table; for a results file without the evaluated rules, the deciding rule's text.
pub(super) fn rules(h: &mut String, exp: &ExperimentResult) {
    if exp.rules.is_empty() {
        if !exp.verdict_rule.is_empty() {
            let _ = writeln!(h, "<p>Rule: <code>{}</code></p>", escape(&exp.verdict_rule));
        }
        return;
    }
    h.push_str(
        "<div class=\"table-wrap\"><table class=\"rules\">\n<thead><tr><th>rule</th>\
         <th>verdict</th><th>condition (as written)</th><th>with this run's values</th>\
         <th>result</th></tr></thead>\n<tbody>\n",
    );
    for (i, rule) in exp.rules.iter().enumerate() {
        let (when, evaluated) = match (&rule.when, &rule.evaluated) {
            (Some(w), Some(e)) => (format!("<code>{}</code>", escape(w)), escape(e)),
            (Some(w), None) => (format!("<code>{}</code>", escape(w)), String::new()),
            _ => ("otherwise (no rule above held)".into(), String::new()),
        };
        let (class, result) = if rule.fired {
            (r#" class="fired""#, format!("{} ← decided the verdict", outcome(rule.outcome)))
        } else {
            ("", outcome(rule.outcome))
        };
        let _ = writeln!(
            h,
            "<tr{class}><td>{} <span class=\"unit\">(line {})</span></td><td>{}</td><td>{when}</td>\
             <td>{evaluated}</td><td>{result}</td></tr>",
            i + 1,
            rule.line,
            badge(rule.verdict),
        );
    }
    h.push_str("</tbody></table></div>\n");
}

/// The findings list, if the experiment has any.
pub(super) fn findings(h: &mut String, exp: &ExperimentResult) {
    if exp.findings.is_empty() {
        return;
    }
    h.push_str("<h3>Findings</h3>\n<ul class=\"findings\">\n");
    for f in &exp.findings {
        let _ = writeln!(
            h,
            "<li><strong>{}</strong> ({}): <span class=\"text\">{}</span><br>\
             <span class=\"unit\"><code>{}</code> → {}</span></li>",
            escape(&f.title),
            outcome(f.outcome),
            escape(&f.text),
            escape(&f.when),
            escape(&f.evaluated),
        );
    }
    h.push_str("</ul>\n");
}
