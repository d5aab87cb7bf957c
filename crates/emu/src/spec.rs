//! What an emulated path looks like: [`DirectionSpec`], [`PathSpec`] and their parts.
//!
//! Specs are plain data, built by the CLI or a profile and checked once with `validate()` before
//! any emulation starts. `validate()` rejects nonsense (zero rate, probabilities outside
//! [0, 1], zero-size queues, jitter larger than the delay it varies, CoDel target not below its
//! interval) with a [`SpecError`] naming the field, e.g. `down.loss.p`. A [`crate::Direction`]
//! refuses to be built from a spec that does not validate.
//!
//! This module computes nothing at run time and never touches I/O; a trace is parsed before it
//! becomes part of a spec (see [`crate::DeliveryTrace`]).

use std::fmt;
use std::time::Duration;

use tcptail_units::{Bdp, BitRate, ByteSize, HumanDuration};

use crate::trace::{DeliveryTrace, OPPORTUNITY_BYTES};

/// Durations in specs above this are treated as unit mistakes (and keep arithmetic in range).
pub const MAX_SPEC_DURATION: Duration = Duration::from_secs(3600);

/// The smallest buffer [`QueueLimit::from_bdp`] returns: ten full-size packets.
pub const MIN_BDP_QUEUE_BYTES: u64 = 10 * OPPORTUNITY_BYTES as u64;

/// One direction of an emulated path: loss, then the bottleneck queue, then the link rate, then
/// propagation delay.
#[derive(Debug, Clone, PartialEq)]
pub struct DirectionSpec {
    /// How fast the bottleneck drains.
    pub rate: Rate,
    /// Fixed one-way propagation delay added after serialisation.
    pub delay: Duration,
    /// Optional variation of `delay`; never reorders packets.
    pub jitter: Option<Jitter>,
    /// Optional random loss, applied before the queue.
    pub loss: Option<LossModel>,
    /// The bottleneck queue in front of the link.
    pub queue: QueueSpec,
}

/// Both directions of a path. `up` carries traffic from the client namespace to the server.
#[derive(Debug, Clone, PartialEq)]
pub struct PathSpec {
    /// Client to server.
    pub up: DirectionSpec,
    /// Server to client.
    pub down: DirectionSpec,
}

/// The bottleneck's service rate.
#[derive(Debug, Clone, PartialEq)]
pub enum Rate {
    /// A constant bit rate: a packet of `len` bytes occupies the link for `len * 8 / rate`.
    Constant(BitRate),
    /// A Mahimahi packet-delivery trace (looping).
    Trace(DeliveryTrace),
}

/// Variation added to the propagation delay of each packet, sampled independently per packet.
///
/// The release time is `max(previous release, departure + delay + sample)`: packets are never
/// reordered, so samples below the previous packet's are effectively raised (like a real path
/// whose delay varies but which keeps order).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Jitter {
    /// Uniform in `[-max, +max]` (netem's default distribution).
    Uniform {
        /// Half-width of the distribution.
        max: Duration,
    },
    /// Normal with standard deviation `sigma`, truncated to `[-3 sigma, +3 sigma]`.
    Normal {
        /// Standard deviation.
        sigma: Duration,
    },
}

impl Jitter {
    /// The largest deviation a sample can have from zero, either way.
    pub fn bound(self) -> Duration {
        match self {
            Jitter::Uniform { max } => max,
            Jitter::Normal { sigma } => sigma.saturating_mul(3),
        }
    }
}

/// Random loss applied to packets as they arrive, before the queue. Probabilities are fractions
/// in `[0, 1]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum LossModel {
    /// Each packet is lost independently with probability `p`.
    Bernoulli {
        /// Loss probability.
        p: f64,
    },
    /// Gilbert-Elliott two-state bursty loss, with netem's parameter names (`loss gemodel p r
    /// 1-h 1-k`): per packet, the current state decides the loss, then the state moves.
    ///
    /// With `h = 0, k = 1` (simple Gilbert) every packet in the bad state is lost: the mean loss
    /// burst is `1 / r` packets and the mean loss rate `p / (p + r)`.
    GilbertElliott {
        /// Probability of moving from Good to Bad.
        p: f64,
        /// Probability of moving from Bad to Good.
        r: f64,
        /// Probability that a packet is *delivered* in the Bad state (netem's `1-h` is the loss).
        h: f64,
        /// Probability that a packet is *delivered* in the Good state (netem's `1-k` is the loss).
        k: f64,
    },
}

impl LossModel {
    /// Simple Gilbert model with a mean loss burst of `burst` packets and a long-run loss rate
    /// `rate` (both as fractions/packets; `validate()` rejects impossible combinations).
    pub fn gilbert(rate: f64, burst: f64) -> LossModel {
        let r = 1.0 / burst;
        // rate = p / (p + r)  =>  p = rate * r / (1 - rate)
        let p = rate * r / (1.0 - rate);
        LossModel::GilbertElliott { p, r, h: 0.0, k: 1.0 }
    }
}

/// The bottleneck queue: how much it holds and how it decides what to drop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QueueSpec {
    /// Arrivals that would exceed this are dropped (tail drop), whatever the discipline.
    pub limit: QueueLimit,
    /// What happens at dequeue.
    pub discipline: Discipline,
}

/// The capacity of the bottleneck queue. The packet being serialised is not in the queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QueueLimit {
    /// At most this many bytes waiting.
    Bytes(ByteSize),
    /// At most this many packets waiting.
    Packets(u64),
    /// An arriving packet is dropped if it would wait longer than this before its serialisation
    /// starts (computed exactly from the link schedule; with CoDel the actual wait can only be
    /// shorter).
    Time(Duration),
}

/// The queue discipline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Discipline {
    /// First in, first out; drops only at the tail when the limit is reached.
    Fifo,
    /// CoDel (RFC 8289): drops at dequeue when the sojourn time stayed above `target` for at
    /// least `interval`, at the control-law spacing `interval / sqrt(count)`.
    Codel {
        /// Acceptable standing queue delay (RFC default 5 ms).
        target: Duration,
        /// Sliding window for the minimum delay (RFC default 100 ms, about a worst-case RTT).
        interval: Duration,
    },
}

impl Discipline {
    /// CoDel with the RFC 8289 defaults: target 5 ms, interval 100 ms.
    pub const fn codel() -> Discipline {
        Discipline::Codel { target: Duration::from_millis(5), interval: Duration::from_millis(100) }
    }
}

impl QueueLimit {
    /// `multiple` times the bandwidth-delay product in bytes, but never below
    /// [`MIN_BDP_QUEUE_BYTES`] (a non-finite or negative `multiple` counts as zero).
    pub fn from_bdp(bdp: Bdp, multiple: f64) -> QueueLimit {
        let multiple = if multiple.is_finite() && multiple > 0.0 { multiple } else { 0.0 };
        let bytes = (bdp.bytes().bytes() as f64 * multiple).ceil();
        let bytes = if bytes >= u64::MAX as f64 { u64::MAX } else { bytes as u64 };
        QueueLimit::Bytes(ByteSize(bytes.max(MIN_BDP_QUEUE_BYTES)))
    }
}

impl QueueSpec {
    /// A drop-tail FIFO with the given limit.
    pub fn drop_tail(limit: QueueLimit) -> QueueSpec {
        QueueSpec { limit, discipline: Discipline::Fifo }
    }

    /// The default bottleneck buffer: a drop-tail FIFO of one bandwidth-delay product (the
    /// classic router sizing rule), at least [`MIN_BDP_QUEUE_BYTES`].
    pub fn default_for(bdp: Bdp) -> QueueSpec {
        QueueSpec { limit: QueueLimit::from_bdp(bdp, 1.0), discipline: Discipline::Fifo }
    }
}

impl Rate {
    /// The long-run rate: the constant rate, or a trace's mean capacity.
    pub fn mean(&self) -> BitRate {
        match self {
            Rate::Constant(r) => *r,
            Rate::Trace(t) => t.mean_rate(),
        }
    }
}

/// A spec field that makes no sense, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field}: {problem}")]
pub struct SpecError {
    /// Dotted path of the field, e.g. `up.queue.limit` or `loss.p`.
    pub field: String,
    /// What is wrong, phrased so the user can fix it.
    pub problem: String,
}

fn bad(field: &str, problem: impl Into<String>) -> SpecError {
    SpecError { field: field.to_string(), problem: problem.into() }
}

fn check_probability(field: &str, value: f64) -> Result<(), SpecError> {
    if value.is_finite() && (0.0..=1.0).contains(&value) {
        Ok(())
    } else {
        Err(bad(field, format!("{}% is not a probability (must be 0% to 100%)", value * 100.0)))
    }
}

fn check_duration(field: &str, d: Duration) -> Result<(), SpecError> {
    if d > MAX_SPEC_DURATION {
        return Err(bad(
            field,
            format!("{} is longer than {} (unit mistake?)", human(d), human(MAX_SPEC_DURATION)),
        ));
    }
    Ok(())
}

fn human(d: Duration) -> HumanDuration {
    HumanDuration(d)
}

impl DirectionSpec {
    /// A constant-rate direction with no loss and no jitter: the common case.
    pub fn constant(rate: BitRate, delay: Duration, queue: QueueSpec) -> DirectionSpec {
        DirectionSpec { rate: Rate::Constant(rate), delay, jitter: None, loss: None, queue }
    }

    /// Checks every field; the error names the first field at fault.
    pub fn validate(&self) -> Result<(), SpecError> {
        if let Rate::Constant(rate) = self.rate
            && rate.bits_per_second() == 0
        {
            return Err(bad("rate", "must be greater than zero"));
        }
        check_duration("delay", self.delay)?;
        if let Some(jitter) = self.jitter {
            let bound = jitter.bound();
            check_duration("jitter", bound)?;
            if bound > self.delay {
                return Err(bad(
                    "jitter",
                    format!(
                        "can move the delay by up to {} but the delay is only {}: jitter varies \
                         the delay in both directions and delays cannot be negative",
                        human(bound),
                        human(self.delay)
                    ),
                ));
            }
        }
        match self.loss {
            None => {}
            Some(LossModel::Bernoulli { p }) => check_probability("loss.p", p)?,
            Some(LossModel::GilbertElliott { p, r, h, k }) => {
                check_probability("loss.p", p)?;
                check_probability("loss.r", r)?;
                check_probability("loss.h", h)?;
                check_probability("loss.k", k)?;
                if p > 0.0 && r == 0.0 {
                    return Err(bad(
                        "loss.r",
                        "is 0 while p > 0: once in the bad state the path would never recover",
                    ));
                }
            }
        }
        match self.queue.limit {
            QueueLimit::Bytes(ByteSize(0)) | QueueLimit::Packets(0) => {
                return Err(bad("queue.limit", "a zero-size queue drops every packet"));
            }
            QueueLimit::Time(d) if d.is_zero() => {
                return Err(bad("queue.limit", "a zero-size queue drops every packet"));
            }
            QueueLimit::Bytes(ByteSize(b)) if b < OPPORTUNITY_BYTES as u64 => {
                return Err(bad(
                    "queue.limit",
                    format!("{b} bytes cannot hold one full-size packet ({OPPORTUNITY_BYTES})"),
                ));
            }
            QueueLimit::Time(d) => check_duration("queue.limit", d)?,
            _ => {}
        }
        if let Discipline::Codel { target, interval } = self.queue.discipline {
            if target.is_zero() {
                return Err(bad("queue.codel.target", "must be greater than zero"));
            }
            check_duration("queue.codel.interval", interval)?;
            if target >= interval {
                return Err(bad(
                    "queue.codel.target",
                    format!(
                        "{} must be below the interval ({}); RFC 8289 suggests 5-10% of it",
                        human(target),
                        human(interval)
                    ),
                ));
            }
        }
        Ok(())
    }
}

impl PathSpec {
    /// The same specification in both directions.
    pub fn symmetric(direction: DirectionSpec) -> PathSpec {
        PathSpec { up: direction.clone(), down: direction }
    }

    /// Validates both directions; field names are prefixed with `up.` or `down.`.
    pub fn validate(&self) -> Result<(), SpecError> {
        for (name, spec) in [("up", &self.up), ("down", &self.down)] {
            spec.validate().map_err(|e| SpecError { field: format!("{name}.{}", e.field), ..e })?;
        }
        Ok(())
    }
}

impl fmt::Display for QueueLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QueueLimit::Bytes(b) => write!(f, "bytes={}", b.bytes()),
            QueueLimit::Packets(p) => write!(f, "packets={p}"),
            QueueLimit::Time(d) => write!(f, "time={}", human(*d)),
        }
    }
}

impl fmt::Display for QueueSpec {
    /// Shaped like Mahimahi's queue description: `droptail [bytes=375000]`,
    /// `codel [target=5ms, interval=100ms, packets=1000]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.discipline {
            Discipline::Fifo => write!(f, "droptail [{}]", self.limit),
            Discipline::Codel { target, interval } => write!(
                f,
                "codel [target={}, interval={}, {}]",
                human(target),
                human(interval),
                self.limit
            ),
        }
    }
}

impl fmt::Display for DirectionSpec {
    /// One line for logs: `rate=30mbit delay=5ms queue=droptail [bytes=375000]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.rate {
            Rate::Constant(r) => write!(f, "rate={r}")?,
            Rate::Trace(t) => write!(f, "trace={} (mean {})", t.source(), t.mean_rate())?,
        }
        write!(f, " delay={}", human(self.delay))?;
        match self.jitter {
            Some(Jitter::Uniform { max }) => write!(f, " jitter=uniform(+-{})", human(max))?,
            Some(Jitter::Normal { sigma }) => write!(f, " jitter=normal(sigma={})", human(sigma))?,
            None => {}
        }
        match self.loss {
            Some(LossModel::Bernoulli { p }) => write!(f, " loss={}%", p * 100.0)?,
            Some(LossModel::GilbertElliott { p, r, h, k }) => {
                write!(f, " loss=gemodel(p={p}, r={r}, h={h}, k={k})")?
            }
            None => {}
        }
        write!(f, " queue={}", self.queue)
    }
}

#[cfg(test)]
mod tests;
