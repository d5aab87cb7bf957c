//! Path events: scheduled changes to a running path ([`PathEvent`]), such as an outage, a rate
//! step, a loss burst or a delay change, and their text syntax.
//!
//! A direction applies each event at its virtual time (`Nanos` since the emulator's start),
//! between the link events before and after it, so the change takes effect exactly then
//! whatever time the adapter calls at; [`crate::Event::PathChange`] reports both the virtual
//! time and the `now` of the call that applied it (how late the adapter noticed).
//!
//! | syntax | change |
//! |---|---|
//! | `5s:blackhole` | from 5 s, drop everything: arrivals, the queue, packets in flight |
//! | `30s:restore` | end a blackhole |
//! | `10s:rate=1gbit` | constant rate from then on; on a trace link, the trace scaled to that mean |
//! | `3s:loss=20%,for=200ms` | independent loss at 20 % for 200 ms, instead of the path's loss |
//! | `8s:delay=+50ms`, `delay=-5ms`, `delay=80ms` | one-way delay changes by, or to, a value |
//!
//! A rate step on a trace-driven direction keeps the trace: replacing a recorded cellular link
//! by a constant rate would throw away the very variability it was chosen for, and refusing
//! the step would leave no way to emulate a downgrade on it. So `rate=R` scales the trace
//! until its long-run mean is `R` (relative to the trace as recorded, so `rate=` the trace's
//! own mean restores it): delivery opportunities keep their recorded times and their 1504
//! bytes, an evenly spread share of them is kept (below the mean) or each is repeated within
//! its millisecond (above it). The Mahimahi log then shows the scaled opportunities.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use tcptail_units::{BitRate, HumanDuration, Percent, parse_duration};

use crate::spec::{DirectionSpec, Rate, SpecError};
use crate::syntax::SyntaxError;

/// The largest factor a rate step may scale a trace by (its opportunities repeated this many
/// times per recorded one): beyond it the step is a different link, not the trace.
pub const MAX_TRACE_SCALE: f64 = 1000.0;

/// A change at a time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PathEvent {
    /// When, from the emulator's start.
    pub at: Duration,
    /// What changes.
    pub change: PathChange,
}

/// What a [`PathEvent`] changes, in the direction(s) it applies to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PathChange {
    /// Drop every packet: those arriving, queued, being serialised, and those in flight not yet
    /// due (an outage of the whole path).
    Blackhole,
    /// End a blackhole.
    Restore,
    /// A new constant rate; on a trace-driven direction, the trace scaled to this mean,
    /// keeping its shape.
    Rate(BitRate),
    /// Independent loss with probability `p` for `duration`, replacing the path's loss model.
    LossBurst {
        /// Loss probability.
        p: f64,
        /// How long.
        duration: Duration,
    },
    /// The one-way delay changes by this many nanoseconds (negative: shorter).
    DelayBy(i64),
    /// The one-way delay becomes this.
    DelayTo(Duration),
}

impl FromStr for PathEvent {
    type Err = SyntaxError;
    /// `TIME:CHANGE`, e.g. `5s:blackhole`, `30s:restore`, `10s:rate=1gbit`,
    /// `3s:loss=20%,for=200ms`, `8s:delay=+50ms` (or `-5ms`, or `80ms`).
    fn from_str(s: &str) -> Result<Self, SyntaxError> {
        let s = s.trim();
        let forms = "blackhole, restore, rate=1gbit, loss=20%,for=200ms or delay=+50ms";
        let Some((at, change)) = s.split_once(':') else {
            return Err(SyntaxError::new(format!("'{s}' is not TIME:CHANGE (e.g. 5s:blackhole)")));
        };
        let at = parse_duration(at.trim())
            .map_err(|e| SyntaxError::new(format!("event time '{}': {e}", at.trim())))?;
        let change = change.trim();
        let change = match change.split_once('=') {
            None if change == "blackhole" => PathChange::Blackhole,
            None if change == "restore" => PathChange::Restore,
            Some(("rate", v)) => PathChange::Rate(
                v.trim().parse().map_err(|e| SyntaxError::new(format!("rate '{v}': {e}")))?,
            ),
            Some(("loss", v)) => {
                let (p, rest) = v.split_once(',').unwrap_or((v, ""));
                let p = p
                    .trim()
                    .parse::<Percent>()
                    .map_err(|e| SyntaxError::new(format!("loss '{p}': {e}")))?
                    .fraction();
                let duration = match rest.trim().split_once('=') {
                    Some(("for", d)) => parse_duration(d.trim())
                        .map_err(|e| SyntaxError::new(format!("for '{d}': {e}")))?,
                    _ => {
                        return Err(SyntaxError::new(
                            "a loss event needs its duration, e.g. loss=20%,for=200ms",
                        ));
                    }
                };
                PathChange::LossBurst { p, duration }
            }
            Some(("delay", v)) => {
                let v = v.trim();
                let parse = |d: &str| {
                    parse_duration(d).map_err(|e| SyntaxError::new(format!("delay '{v}': {e}")))
                };
                let ns = |d: Duration| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX);
                if let Some(d) = v.strip_prefix('+') {
                    PathChange::DelayBy(ns(parse(d)?))
                } else if let Some(d) = v.strip_prefix('-') {
                    PathChange::DelayBy(-ns(parse(d)?))
                } else {
                    PathChange::DelayTo(parse(v)?)
                }
            }
            _ => return Err(SyntaxError::new(format!("unknown change '{change}' ({forms})"))),
        };
        Ok(PathEvent { at, change })
    }
}

impl fmt::Display for PathEvent {
    /// The syntax it parses from.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:", HumanDuration(self.at))?;
        match self.change {
            PathChange::Blackhole => write!(f, "blackhole"),
            PathChange::Restore => write!(f, "restore"),
            PathChange::Rate(r) => write!(f, "rate={r}"),
            PathChange::LossBurst { p, duration } => {
                write!(f, "loss={}%,for={}", p * 100.0, HumanDuration(duration))
            }
            PathChange::DelayBy(ns) if ns < 0 => {
                write!(f, "delay=-{}", HumanDuration(Duration::from_nanos(ns.unsigned_abs())))
            }
            PathChange::DelayBy(ns) => {
                write!(f, "delay=+{}", HumanDuration(Duration::from_nanos(ns.unsigned_abs())))
            }
            PathChange::DelayTo(d) => write!(f, "delay={}", HumanDuration(d)),
        }
    }
}

/// Checks a timeline against the direction it will change: times in range, probabilities,
/// rates (on a trace link, at most [`MAX_TRACE_SCALE`] times its mean), and no delay (after every change, in time order) that the
/// jitter could push below zero or beyond the spec's bounds. The error's field is
/// `event[i]` (the i-th event as given).
pub fn validate_events(spec: &DirectionSpec, events: &[PathEvent]) -> Result<(), SpecError> {
    let bad = |i: usize, problem: String| SpecError { field: format!("event[{i}]"), problem };
    let mut order: Vec<usize> = (0..events.len()).collect();
    order.sort_by_key(|&i| events[i].at);
    let mut delay = spec.delay;
    for i in order {
        let PathEvent { at, change } = events[i];
        if at > crate::MAX_SPEC_DURATION {
            return Err(bad(i, format!("{} is more than an hour in", HumanDuration(at))));
        }
        match change {
            PathChange::Rate(r) if r.bits_per_second() == 0 => {
                return Err(bad(i, "a zero rate; use blackhole for an outage".to_owned()));
            }
            PathChange::Rate(r) => {
                if let Rate::Trace(trace) = &spec.rate {
                    let mean = trace.mean_rate();
                    if r.bits_per_second() as f64 > MAX_TRACE_SCALE * mean.bits_per_second() as f64
                    {
                        return Err(bad(
                            i,
                            format!(
                                "{r} is more than {MAX_TRACE_SCALE}x the mean of trace {} \
                                 ({mean}); a rate step scales a trace (each delivery \
                                 opportunity repeated) rather than replacing it",
                                trace.source()
                            ),
                        ));
                    }
                }
            }
            PathChange::LossBurst { p, duration } => {
                if !(p.is_finite() && (0.0..=1.0).contains(&p)) {
                    return Err(bad(i, format!("{}% is not a probability", p * 100.0)));
                }
                if duration.is_zero() {
                    return Err(bad(i, "a loss burst needs a duration above zero".to_owned()));
                }
            }
            PathChange::DelayBy(ns) => {
                let new = i128::from(crate::time::duration_nanos(delay)) + i128::from(ns);
                if new < 0 {
                    return Err(bad(
                        i,
                        format!("takes the delay ({}) below zero", HumanDuration(delay)),
                    ));
                }
                delay = Duration::from_nanos(u64::try_from(new).unwrap_or(u64::MAX));
            }
            PathChange::DelayTo(d) => delay = d,
            _ => {}
        }
        if delay > crate::MAX_SPEC_DURATION {
            return Err(bad(i, format!("a delay of {} (unit mistake?)", HumanDuration(delay))));
        }
        if let Some(j) = spec.jitter
            && j.below() > delay
        {
            return Err(bad(
                i,
                format!(
                    "leaves a delay of {} that the {} jitter (down to -{}) would make negative",
                    HumanDuration(delay),
                    j.name(),
                    HumanDuration(j.below())
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_syntax_round_trips() {
        for text in [
            "5s:blackhole",
            "30s:restore",
            "10s:rate=1gbit",
            "3s:loss=20%,for=200ms",
            "8s:delay=+50ms",
            "8s:delay=-5ms",
            "8s:delay=80ms",
        ] {
            let event: PathEvent = text.parse().unwrap();
            assert_eq!(event.to_string(), text);
        }
        let loss: PathEvent = "3s:loss=20%,for=200ms".parse().unwrap();
        assert_eq!(
            loss.change,
            PathChange::LossBurst { p: 0.2, duration: Duration::from_millis(200) }
        );
        for (bad, says) in [
            ("blackhole", "TIME:CHANGE"),
            ("5x:blackhole", "event time"),
            ("5s:outage", "unknown change"),
            ("5s:loss=20%", "needs its duration"),
            ("5s:rate=fast", "rate 'fast'"),
            ("5s:delay=+soon", "delay '+soon'"),
        ] {
            let e = bad.parse::<PathEvent>().unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn timelines_are_checked_in_time_order() {
        let spec = DirectionSpec::constant(
            BitRate(10_000_000),
            Duration::from_millis(10),
            crate::QueueSpec::drop_tail(crate::QueueLimit::Packets(100)),
        );
        let ev = |s: &str| s.parse::<PathEvent>().unwrap();
        validate_events(&spec, &[ev("1s:delay=+50ms"), ev("2s:delay=-55ms")]).unwrap();
        // Given out of order, checked in order: -55 ms comes first and goes below zero.
        let e = validate_events(&spec, &[ev("2s:delay=+50ms"), ev("1s:delay=-55ms")]).unwrap_err();
        assert_eq!(e.field, "event[1]");
        assert!(e.problem.contains("below zero"), "{e}");
        let e = validate_events(&spec, &[ev("1s:rate=0bit")]).unwrap_err();
        assert!(e.problem.contains("blackhole"), "{e}");
        let mut jittery = spec.clone();
        jittery.jitter = Some(crate::Jitter::Uniform { max: Duration::from_millis(5) });
        let e = validate_events(&jittery, &[ev("1s:delay=2ms")]).unwrap_err();
        assert!(e.problem.contains("uniform jitter"), "{e}");
        let e = validate_events(&spec, &[ev("2h:restore")]).unwrap_err();
        assert_eq!(e.field, "event[0]");
    }
}
