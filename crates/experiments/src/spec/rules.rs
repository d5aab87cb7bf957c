//! `[[verdict]]`, `[[finding]]` and `[[condition]]` tables and the `[decidability]` table:
//! read and checked for their keys;
//! the conditions and templates themselves are compiled by [`crate::verdict`] once the
//! variants are known.

use toml::Spanned;
use toml::de::DeValue;

use super::{Experiment, FindingSpec, RuleSpec, Source, SpecError};
use tcptail_report::{Decidability, QuickDecides, Verdict};

impl Experiment {
    pub(super) fn parse_rules(
        &mut self,
        src: &Source<'_>,
        v: Option<&Spanned<DeValue<'_>>>,
    ) -> Result<(), SpecError> {
        let Some(v) = v else {
            return Err(src.err(
                None,
                Some("verdict"),
                "at least one [[verdict]] rule is required",
            ));
        };
        let items = src.checked_tables("verdict", v, &["verdict", "when", "reason"])?;
        for (i, &(item, t)) in items.iter().enumerate() {
            let verdict = match t.get("verdict") {
                Some(vv) => {
                    let s = src.string("verdict", vv)?;
                    Verdict::parse(&s).ok_or_else(|| {
                        src.at(vv, "verdict", format!("`{s}`: expected reproduced, partly, not-reproduced, inconclusive or not-applicable"))
                    })?
                }
                None => return Err(src.at(item, "verdict.verdict", "is required")),
            };
            let when = t.get("when").map(|w| src.string("when", w)).transpose()?;
            let reason = src.required_string(item, t, "verdict", "reason")?;
            let last = i + 1 == items.len();
            if when.is_none() && !last {
                return Err(src.at(item, "when", "only the last [[verdict]] rule may omit `when`"));
            }
            if when.is_some() && last {
                return Err(src.at(item, "when", "the last [[verdict]] rule must not have `when`: it is the verdict when no rule holds"));
            }
            self.rules.push(RuleSpec { verdict, when, reason, line: src.line(item.span()) });
        }
        Ok(())
    }

    pub(super) fn parse_findings(
        &mut self,
        src: &Source<'_>,
        v: Option<&Spanned<DeValue<'_>>>,
    ) -> Result<(), SpecError> {
        let Some(v) = v else {
            return Ok(());
        };
        for (item, t) in
            src.checked_tables("finding", v, &["title", "when", "then", "otherwise"])?
        {
            let required = |key: &str| src.required_string(item, t, "finding", key);
            self.findings.push(FindingSpec {
                title: required("title")?,
                when: required("when")?,
                then: required("then")?,
                otherwise: required("otherwise")?,
                line: src.line(item.span()),
            });
        }
        Ok(())
    }

    /// `[[condition]]`: `name`, `seed` (the seed's value), `run` (this file's), optional
    /// `reason` (why they differ). They match when the two texts are the same.
    pub(super) fn parse_conditions(
        &mut self,
        src: &Source<'_>,
        v: Option<&Spanned<DeValue<'_>>>,
    ) -> Result<(), SpecError> {
        let Some(v) = v else {
            return Ok(());
        };
        for (item, t) in src.checked_tables("condition", v, &["name", "seed", "run", "reason"])? {
            let required = |key: &str| src.required_string(item, t, "condition", key);
            let (seed, run) = (required("seed")?, required("run")?);
            let matches = seed == run;
            let reason = t.get("reason").map(|r| src.string("reason", r)).transpose()?;
            if !matches && reason.is_none() {
                return Err(src.at(
                    item,
                    "condition.reason",
                    format!("`{run}` differs from the seed's `{seed}`: say why in `reason`"),
                ));
            }
            self.conditions.push(tcptail_report::SeedCondition {
                name: required("name")?,
                seed,
                run,
                matches,
                reason,
            });
        }
        Ok(())
    }

    /// `[decidability]`: `quick` (`yes`, `partly`, `no`) and the `reason`, both required.
    pub(super) fn parse_decidability(
        &mut self,
        src: &Source<'_>,
        v: Option<&Spanned<DeValue<'_>>>,
    ) -> Result<(), SpecError> {
        let Some(v) = v else {
            return Ok(());
        };
        let t = src.table("decidability", v)?;
        src.check_keys("decidability", "[decidability]", t, &["quick", "reason"])?;
        let quick = src.required_string(v, t, "decidability", "quick")?;
        let quick = match quick.as_str() {
            "yes" => QuickDecides::Yes,
            "partly" => QuickDecides::Partly,
            "no" => QuickDecides::No,
            other => {
                return Err(src.at(
                    t.get("quick").unwrap_or(v),
                    "decidability.quick",
                    format!("`{other}`: expected `yes`, `partly` or `no`"),
                ));
            }
        };
        let reason = src.required_string(v, t, "decidability", "reason")?;
        self.decidability = Some(Decidability { quick, reason });
        Ok(())
    }
}
