//! `index.html`: the self-contained report (owned by the report work; placeholder signature).

use crate::results::Results;

/// Renders the whole report as one HTML document.
pub fn render(results: &Results) -> String {
    let _ = results;
    String::new()
}
