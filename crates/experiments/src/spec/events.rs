//! Top-level `[[event]]` tables: path events on the emulator's clock for every variant, or for
//! the variants a table names.
//!
//! ```toml
//! [[event]]
//! at = "5s"
//! change = "blackhole"          # blackhole, restore, rate=1gbit, loss=20%,for=200ms, delay=+50ms
//! [[event]]
//! at = "30s"
//! change = "restore"
//! variants = ["outage"]         # optional: only these variants (default: every variant)
//! ```
//!
//! The syntax of each change is checked here, at its line; whether it fits a variant's path (a
//! delay that would go below zero, an event on a veth path) is checked when the variant is
//! planned, and the error then points at the table's line. A variant's events are the
//! `[[event]]` tables that apply to it followed by its `event` parameter, if any (the
//! parameter form, `event = ["5s:blackhole"]`, keeps working in `[params]`, a variant or a
//! mode).

use toml::Spanned;
use toml::de::DeValue;

use tcptail_emu::PathEvent;

use super::{Experiment, Source, SpecError};
use crate::params::Param;

/// One `[[event]]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct EventSpec {
    /// The change and its time.
    pub event: PathEvent,
    /// The variants it applies to (`None`: every variant).
    pub variants: Option<Vec<String>>,
    /// Line of its `[[event]]` header.
    pub line: usize,
}

impl EventSpec {
    /// Whether the event applies to the variant named `variant`.
    pub fn applies_to(&self, variant: &str) -> bool {
        self.variants.as_ref().is_none_or(|names| names.iter().any(|n| n == variant))
    }
}

impl Experiment {
    /// Reads the `[[event]]` tables (after the variants, whose names they may use).
    pub(super) fn parse_events(
        &mut self,
        src: &Source<'_>,
        v: Option<&Spanned<DeValue<'_>>>,
    ) -> Result<(), SpecError> {
        let Some(v) = v else {
            return Ok(());
        };
        for (item, t) in src.checked_tables("event", v, &["at", "change", "variants"])? {
            let at = src.required_string(item, t, "event", "at")?;
            let change = src.required_string(item, t, "event", "change")?;
            let text = format!("{}:{}", at.trim(), change.trim());
            let event = text.parse::<PathEvent>().map_err(|e| {
                src.at(item, "event", format!("at = \"{at}\", change = \"{change}\": {e}"))
            })?;
            let variants = match t.get("variants") {
                None => None,
                Some(names) => {
                    let list = src.strings("event.variants", names)?;
                    if list.is_empty() {
                        return Err(src.at(
                            names,
                            "event.variants",
                            "an empty list applies the event to no variant: remove the table \
                             or name its variants",
                        ));
                    }
                    for name in &list {
                        if !self.variants.iter().any(|v| &v.name == name) {
                            let known: Vec<&str> =
                                self.variants.iter().map(|v| v.name.as_str()).collect();
                            return Err(src.at(
                                names,
                                "event.variants",
                                format!("no variant named `{name}` (known: {})", known.join(", ")),
                            ));
                        }
                    }
                    Some(list)
                }
            };
            self.events.push(EventSpec { event, variants, line: src.line(item.span()) });
        }
        Ok(())
    }

    /// The `event` parameter a variant's path reads: the `[[event]]` tables that apply to it,
    /// then its own `event` parameter (`params` holds the layered parameters without the
    /// tables). `None` when neither exists. The line is the first table's, or the parameter's
    /// when there are no tables ([`Experiment::param_error`] finds each table's own line).
    pub(super) fn merged_event_param(&self, variant: &str, param: Option<&Param>) -> Option<Param> {
        let tables: Vec<&EventSpec> =
            self.events.iter().filter(|e| e.applies_to(variant)).collect();
        let first = tables.first()?;
        let mut items: Vec<toml::Value> =
            tables.iter().map(|e| toml::Value::String(e.event.to_string())).collect();
        match param.map(|p| &p.value) {
            None => {}
            Some(toml::Value::Array(more)) => items.extend(more.iter().cloned()),
            // A single string or table, or a wrong type: the path's reader reports the latter.
            Some(one) => items.push(one.clone()),
        }
        Some(Param { value: toml::Value::Array(items), line: first.line })
    }

    /// The line of the `[[event]]` table a path error about `problem` is about, if the error
    /// quotes one of them (the path's reader starts its messages with the event's text).
    pub(super) fn event_line(&self, variant: &str, problem: &str) -> Option<usize> {
        self.events
            .iter()
            .filter(|e| e.applies_to(variant))
            .find(|e| problem.starts_with(&format!("{}: ", e.event)))
            .map(|e| e.line)
    }
}
