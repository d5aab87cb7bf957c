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

use crate::headers::Headers;
use crate::jitter::{self, Shape};
use crate::trace::{DeliveryTrace, OPPORTUNITY_BYTES};
use crate::wire::{Ecn, TcpFlags};

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
    /// A middlebox that discards ECN traffic on arrival instead of passing or clearing it:
    /// which packets it drops, `None` for none.
    pub ecn_blackhole: Option<EcnBlackhole>,
    /// Optional reordering: some packets are held back after the delay so later ones overtake
    /// them.
    pub reorder: Option<Reorder>,
}

/// What an ECN-hostile middlebox drops (RFC 3168 section 6.1.1.1 and the "ECN without
/// downstream support" of deployment reports): the two kinds of broken boxes found in the wild,
/// and both at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EcnBlackhole {
    /// ECN-setup SYNs: a TCP SYN (without ACK) carrying both ECE and CWR, however its IP
    /// header is marked. Linux's `tcp_ecn_fallback` answers exactly this box: the SYN it
    /// retransmits after the SYN timeout carries neither flag, so it passes.
    Syn,
    /// Every ECN-capable packet: ECT(0), ECT(1) or CE in the IP header. Linux sends its SYN
    /// Not-ECT, so the handshake passes, ECN is negotiated, and then every new data segment
    /// (sent ECT) is dropped while retransmissions and pure ACKs (Not-ECT) pass.
    Data,
    /// Both: ECN-setup SYNs and ECN-capable packets.
    All,
}

impl EcnBlackhole {
    /// Every mode, in the order help texts list them.
    pub const ALL: [EcnBlackhole; 3] = [EcnBlackhole::Syn, EcnBlackhole::Data, EcnBlackhole::All];

    /// The mode's name as flags and experiment files write it: `syn`, `data`, `all`.
    pub fn name(self) -> &'static str {
        match self {
            EcnBlackhole::Syn => "syn",
            EcnBlackhole::Data => "data",
            EcnBlackhole::All => "all",
        }
    }

    /// Whether this box drops `packet` (one that has no IP header is never dropped).
    pub fn drops(self, packet: &impl Headers) -> bool {
        let ecn_capable = || packet.ecn().is_some_and(Ecn::is_capable);
        let ecn_setup_syn = || {
            packet.tcp_flags().is_some_and(|f| {
                f.contains(TcpFlags::SYN | TcpFlags::ECE | TcpFlags::CWR)
                    && !f.contains(TcpFlags::ACK)
            })
        };
        match self {
            EcnBlackhole::Syn => ecn_setup_syn(),
            EcnBlackhole::Data => ecn_capable(),
            EcnBlackhole::All => ecn_setup_syn() || ecn_capable(),
        }
    }
}

impl fmt::Display for EcnBlackhole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Reordering: each packet, with probability `p`, is released `gap` after the time it would
/// have been released in order, and the packets behind it are not held for it, so those
/// released within `gap` overtake it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reorder {
    /// Probability that a packet is held back.
    pub p: f64,
    /// How long a chosen packet is held back.
    pub gap: Duration,
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
///
/// The names are netem's (`distribution normal|pareto|paretonormal`). The heavy-tailed two are
/// netem's tables: a sample is `sigma x t`, with `t` read at one of 4096 equally likely
/// quantiles of the distribution iproute2 tabulates, clipped to the tables' 16-bit range
/// (`-4 <= t <= 4`): pareto is `(u^(-1/3) - 1.5) x 4/3` for `u = 1 - k/4096`, paretonormal
/// `(n + 3p) / 4` of the normal quantile and that Pareto value at the same `k`.
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
    /// netem's `pareto`: a Pareto distribution of shape 3, shifted and scaled to mean 0;
    /// samples lie in `[-2/3 sigma, +4 sigma]`, a long tail upwards.
    Pareto {
        /// netem's jitter parameter (the scale of the table).
        sigma: Duration,
    },
    /// netem's `paretonormal`: a quarter normal, three quarters Pareto (same quantile);
    /// samples lie in `[-3 sigma, +4 sigma]`.
    ParetoNormal {
        /// netem's jitter parameter (the scale of the table).
        sigma: Duration,
    },
}

impl Jitter {
    /// The largest deviation a sample can have from zero, either way.
    pub fn bound(self) -> Duration {
        self.below().max(self.above())
    }

    /// How far below the delay a sample can go.
    pub fn below(self) -> Duration {
        match self {
            Jitter::Uniform { max } => max,
            Jitter::Normal { sigma } => sigma.saturating_mul(3),
            Jitter::Pareto { sigma } => sigma.mul_f64(-jitter::range(Shape::Pareto).0),
            Jitter::ParetoNormal { sigma } => sigma.mul_f64(-jitter::range(Shape::ParetoNormal).0),
        }
    }

    /// How far above the delay a sample can go.
    pub fn above(self) -> Duration {
        match self {
            Jitter::Uniform { max } => max,
            Jitter::Normal { sigma } => sigma.saturating_mul(3),
            Jitter::Pareto { sigma } => sigma.mul_f64(jitter::range(Shape::Pareto).1),
            Jitter::ParetoNormal { sigma } => sigma.mul_f64(jitter::range(Shape::ParetoNormal).1),
        }
    }

    /// netem's name for the distribution.
    pub fn name(self) -> &'static str {
        match self {
            Jitter::Uniform { .. } => "uniform",
            Jitter::Normal { .. } => "normal",
            Jitter::Pareto { .. } => "pareto",
            Jitter::ParetoNormal { .. } => "paretonormal",
        }
    }

    /// The distribution's parameter: the half-width (uniform) or sigma.
    pub fn scale(self) -> Duration {
        match self {
            Jitter::Uniform { max } => max,
            Jitter::Normal { sigma }
            | Jitter::Pareto { sigma }
            | Jitter::ParetoNormal { sigma } => sigma,
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
        /// Mark ECN-capable packets CE instead of dropping them (Linux `codel ecn`).
        ecn: bool,
    },
    /// fq_codel (RFC 8290, as Linux's `sch_fq_codel`): packets are hashed by 5-tuple into
    /// `flows` queues served by deficit round robin with a byte `quantum`, new flows before
    /// old ones, each queue under its own CoDel. When the limit is exceeded, packets are
    /// dropped from the head of the fattest queue (up to half of it, at most 64), not from the
    /// tail.
    FqCodel {
        /// CoDel target per flow (default 5 ms).
        target: Duration,
        /// CoDel interval per flow (default 100 ms).
        interval: Duration,
        /// Bytes a flow may send per round (default 1514).
        quantum: u32,
        /// Number of flow queues (default 1024).
        flows: u32,
        /// Mark ECN-capable packets CE instead of dropping them (Linux's default is on;
        /// here off unless asked for, like `codel`).
        ecn: bool,
    },
}

/// fq_codel's packet limit when no buffer is given: Linux's default `limit`.
pub const FQ_CODEL_DEFAULT_LIMIT: u64 = 10_240;

impl Discipline {
    /// CoDel with the RFC 8289 defaults: target 5 ms, interval 100 ms, no ECN.
    pub const fn codel() -> Discipline {
        Discipline::Codel {
            target: Duration::from_millis(5),
            interval: Duration::from_millis(100),
            ecn: false,
        }
    }

    /// fq_codel with Linux's defaults: target 5 ms, interval 100 ms, quantum 1514, 1024
    /// flows; no ECN.
    pub const fn fq_codel() -> Discipline {
        Discipline::FqCodel {
            target: Duration::from_millis(5),
            interval: Duration::from_millis(100),
            quantum: 1514,
            flows: 1024,
            ecn: false,
        }
    }

    /// Whether ECN-capable packets are marked instead of dropped.
    pub fn ecn(&self) -> bool {
        match *self {
            Discipline::Fifo => false,
            Discipline::Codel { ecn, .. } | Discipline::FqCodel { ecn, .. } => ecn,
        }
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
        DirectionSpec {
            rate: Rate::Constant(rate),
            delay,
            jitter: None,
            loss: None,
            queue,
            ecn_blackhole: None,
            reorder: None,
        }
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
            check_duration("jitter", jitter.bound())?;
            let below = jitter.below();
            if below > self.delay {
                return Err(bad(
                    "jitter",
                    format!(
                        "can move the delay by up to {} downwards with {} jitter, but the delay \
                         is only {}: delays cannot be negative",
                        human(below),
                        jitter.name(),
                        human(self.delay)
                    ),
                ));
            }
        }
        if let Some(Reorder { p, gap }) = self.reorder {
            check_probability("reorder.p", p)?;
            if gap.is_zero() {
                return Err(bad("reorder.gap", "must be greater than zero"));
            }
            check_duration("reorder.gap", gap)?;
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
        let (target, interval) = match self.queue.discipline {
            Discipline::Fifo => return Ok(()),
            Discipline::Codel { target, interval, .. } => (target, interval),
            Discipline::FqCodel { target, interval, quantum, flows, .. } => {
                if quantum < 256 {
                    return Err(bad(
                        "queue.codel.quantum",
                        format!("{quantum} bytes is below 256 (Linux's minimum)"),
                    ));
                }
                if !(1..=65536).contains(&flows) {
                    return Err(bad(
                        "queue.codel.flows",
                        format!("{flows} is outside 1..=65536 (Linux's range)"),
                    ));
                }
                (target, interval)
            }
        };
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
        let ecn = if self.discipline.ecn() { ", ecn" } else { "" };
        match self.discipline {
            Discipline::Fifo => write!(f, "droptail [{}]", self.limit),
            Discipline::Codel { target, interval, .. } => write!(
                f,
                "codel [target={}, interval={}{ecn}, {}]",
                human(target),
                human(interval),
                self.limit
            ),
            Discipline::FqCodel { target, interval, quantum, flows, .. } => write!(
                f,
                "fq_codel [target={}, interval={}, quantum={quantum}, flows={flows}{ecn}, {}]",
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
            Some(j) => write!(f, " jitter={}(sigma={})", j.name(), human(j.scale()))?,
            None => {}
        }
        match self.loss {
            Some(LossModel::Bernoulli { p }) => write!(f, " loss={}%", p * 100.0)?,
            Some(LossModel::GilbertElliott { p, r, h, k }) => {
                write!(f, " loss=gemodel(p={p}, r={r}, h={h}, k={k})")?
            }
            None => {}
        }
        write!(f, " queue={}", self.queue)?;
        if let Some(Reorder { p, gap }) = self.reorder {
            write!(f, " reorder={}%,gap={}", p * 100.0, human(gap))?;
        }
        if let Some(mode) = self.ecn_blackhole {
            write!(f, " ecn-blackhole={mode}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
