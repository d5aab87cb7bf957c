//! The governor: a sans-IO decision core that keeps the delay of unsent data in a TCP socket
//! under a bound.
//!
//! It never reads the clock or touches a socket. The caller gives it `now` (any monotonic
//! [`Duration`] since an arbitrary zero, a virtual clock in tests), the socket's state as
//! [`Inputs`] (from `tcp_info`) through [`Governor::observe`], and the bytes it wants to write
//! through [`Governor::admit`]; the answer is an [`Admission`]: write at most so many bytes,
//! wait (a time, or for the kernel's `POLLOUT`), or read `tcp_info` first.
//!
//! # The estimate (the poster's equations 1-3)
//!
//! `delay = notsent / R`: `notsent` is `tcpi_notsent_bytes` (the poster's "occupied buffer
//! minus BDP", measured directly). `R` is `tcpi_delivery_rate` when its latest sample was not
//! application-limited, otherwise `min(pacing_rate, cwnd × mss / srtt)` over whichever is known
//! (`min_rtt` replaces a zero `srtt`).
//!
//! # Modes
//!
//! - [`GovernorMode::NoControl`]: the governor never holds a write back (the baseline); the
//!   kernel's send buffer alone decides.
//! - [`GovernorMode::StaticLowat`]: set `TCP_NOTSENT_LOWAT` once; the kernel alone decides.
//! - [`GovernorMode::Threshold`]: the poster's proposal, polling `tcp_info`: the byte bound is
//!   `B = T × R` with `R` from the latest `tcp_info` read.
//! - [`GovernorMode::AdaptiveLowat`]: beyond the poster: `TCP_NOTSENT_LOWAT` is kept at
//!   `L = T × R` (re-computed when `R` moves by more than
//!   [`GovernorConfig::lowat_hysteresis`]) and the byte bound is `B = L`, the value set on the
//!   socket. The kernel then does the waiting:
//!   it withholds `POLLOUT` while `2 × notsent ≥ L` and wakes a writer when `2 × notsent < L`,
//!   so no `tcp_info` polling is needed while the writer waits.
//!
//! In both threshold modes `B` is clamped to [`GovernorConfig::min_bound`] ..
//! [`GovernorConfig::max_bound`] (a bound of a few bytes would wake the writer too often to keep
//! the pipe full, and a LOWAT of 0 means "no LOWAT" to the kernel).
//!
//! # The guarantee
//!
//! In the threshold modes every admitted write is capped to the room left under the bound:
//! [`Admission::Admit`]`(n)` has `u + n ≤ B`, where `u` is an upper bound of `notsent`: the
//! `notsent` of the latest observation plus everything written since (the kernel only sends,
//! so `notsent` can only have shrunk apart from what the caller wrote). Hence, for a writer
//! that writes only what it is admitted:
//!
//! > after every write, `notsent ≤ B`, i.e. the estimate `notsent / R` is at most the threshold
//! > `T` (or `min_bound / R` when that is larger), with `R` the rate of the latest `tcp_info`
//! > read (adaptive mode: the rate the LOWAT was last computed from, within
//! > `lowat_hysteresis` of the latest).
//!
//! The kernel's own rule is weaker: it refuses a new segment only once `notsent ≥ LOWAT`, and
//! a write that starts below LOWAT may end above it by up to one segment (up to 64 KB with
//! GSO). Capping each write to the room left means the kernel's overshoot never happens
//! through the governor; it still bounds writes that bypass it (at `L` plus one segment).
//!
//! A writer that waits is admitted again once at least half the bound is free (`u ≤ B - B/2`,
//! or less when it wants fewer bytes): the kernel's LOWAT wake-up rule. So in adaptive mode
//! the governor and the kernel agree: a wait ([`Admission::WaitWritable`]) is only ever asked
//! on a fresh observation with `2 × notsent ≥ L` (the kernel withholds `POLLOUT`, so polling
//! for it does not spin), and a fresh observation with `2 × notsent < L` (what `POLLOUT`
//! reports) is always admitted (so the writer the kernel wakes is never sent back to wait).
//!
//! Without a usable rate, threshold mode has no bound and admits (capabilities degrade, they
//! never wedge the writer); adaptive mode keeps the LOWAT it has (at first `min_bound`).
//!
//! # Invariants (property-tested)
//!
//! - An admitted write never takes the upper bound of `notsent` above `B` (see above).
//! - A wait is only asked on a fresh observation, never on the cached upper bound, and every
//!   timed wait lies in `[min_wait, max_wait]`: the writer never blocks forever once the queue
//!   drains, and an empty queue is always admitted.
//! - Observations are at most [`GovernorConfig::refresh`] old when a write is admitted, in
//!   every mode, so [`Governor::last_estimate`] (the sender's stats) is never staler than that
//!   while the writer writes.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tcptail_sock::TcpInfo;
use tcptail_sock::tcp_info::RateSource;

/// How a sender bounds its socket's send queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "value")]
pub enum GovernorMode {
    /// No control: the kernel's send buffer alone decides.
    NoControl,
    /// A fixed `TCP_NOTSENT_LOWAT` in bytes.
    StaticLowat(u32),
    /// Keep `notsent / rate` at most this (the poster's design, polling `tcp_info`).
    Threshold(Duration),
    /// The same bound with `TCP_NOTSENT_LOWAT` kept at `threshold × rate`, so the kernel
    /// wakes a waiting writer (when half of it is free) without `tcp_info` polling.
    AdaptiveLowat(Duration),
}

impl GovernorMode {
    /// The delay bound, for the threshold-based modes.
    pub fn threshold(&self) -> Option<Duration> {
        match *self {
            GovernorMode::Threshold(t) | GovernorMode::AdaptiveLowat(t) => Some(t),
            GovernorMode::NoControl | GovernorMode::StaticLowat(_) => None,
        }
    }
}

/// The socket state the governor decides on (a subset of `tcp_info`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Inputs {
    /// `tcpi_notsent_bytes`: written but not yet sent.
    pub notsent_bytes: u32,
    /// `tcpi_delivery_rate`, bytes/s.
    pub delivery_rate: Option<u64>,
    /// Whether the delivery-rate sample was application-limited.
    pub app_limited: Option<bool>,
    /// `tcpi_pacing_rate`, bytes/s (`u64::MAX` means unpaced and is ignored).
    pub pacing_rate: Option<u64>,
    /// `tcpi_snd_cwnd`, segments.
    pub cwnd_segs: u32,
    /// `tcpi_snd_mss`, bytes.
    pub mss_bytes: u32,
    /// Smoothed RTT (`tcpi_rtt`).
    pub srtt: Duration,
    /// `tcpi_min_rtt`.
    pub min_rtt: Option<Duration>,
}

/// An estimate of the send-queue delay with the rate it used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Estimate {
    /// `notsent / rate`.
    pub delay: Duration,
    /// Bytes not yet sent.
    pub notsent_bytes: u32,
    /// The rate divided by, bytes/s (never zero).
    pub rate: u64,
    /// Where the rate came from.
    pub source: RateSource,
}

impl Inputs {
    /// The governor's inputs from a parsed `tcp_info`; absent fields stay absent
    /// (`notsent_bytes` absent, before Linux 4.6, reads as 0: nothing known to be queued).
    pub fn from_tcp_info(info: &TcpInfo) -> Inputs {
        Inputs {
            notsent_bytes: info.notsent_bytes.unwrap_or(0),
            delivery_rate: info.delivery_rate_bytes_per_sec,
            app_limited: info.delivery_rate_app_limited,
            pacing_rate: info.pacing_rate_bytes_per_sec,
            cwnd_segs: info.snd_cwnd_segs,
            mss_bytes: info.snd_mss_bytes,
            srtt: info.rtt(),
            min_rtt: info.min_rtt_us.map(|us| Duration::from_micros(u64::from(us))),
        }
    }

    /// The rate the estimate divides by, with its source; `None` when nothing usable is known.
    pub fn rate(&self) -> Option<(u64, RateSource)> {
        let delivery = self.delivery_rate.filter(|&r| r > 0);
        if let (Some(false), Some(r)) = (self.app_limited, delivery) {
            return Some((r, RateSource::DeliveryRate));
        }
        let pacing = self.pacing_rate.filter(|&r| r > 0 && r != u64::MAX);
        let rtt = if self.srtt.is_zero() { self.min_rtt.unwrap_or_default() } else { self.srtt };
        let cwnd = (!rtt.is_zero())
            .then(|| {
                let per_rtt = u128::from(self.cwnd_segs) * u128::from(self.mss_bytes);
                u64::try_from(per_rtt * 1_000_000_000 / rtt.as_nanos()).unwrap_or(u64::MAX)
            })
            .filter(|&r| r > 0);
        match (pacing, cwnd) {
            (Some(p), Some(c)) if c < p => Some((c, RateSource::CwndPerSrtt)),
            (Some(p), _) => Some((p, RateSource::PacingRate)),
            (None, Some(c)) => Some((c, RateSource::CwndPerSrtt)),
            (None, None) => None,
        }
    }

    /// `notsent / rate`, or `None` without a usable rate.
    pub fn estimate(&self) -> Option<Estimate> {
        let (rate, source) = self.rate()?;
        Some(Estimate {
            delay: delay_of(u64::from(self.notsent_bytes), rate),
            notsent_bytes: self.notsent_bytes,
            rate,
            source,
        })
    }
}

/// `bytes / rate` (rate > 0), saturating.
fn delay_of(bytes: u64, rate: u64) -> Duration {
    let nanos = u128::from(bytes) * 1_000_000_000 / u128::from(rate.max(1));
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// Tunables of a [`Governor`]; `GovernorConfig::new(mode)` gives the defaults.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GovernorConfig {
    /// The policy.
    pub mode: GovernorMode,
    /// Shortest wait (default 100 µs): below it, sleeping costs more than it saves.
    pub min_wait: Duration,
    /// Longest wait before re-reading `tcp_info` (default 5 ms): bounds how long a writer can
    /// oversleep a drained queue or a wrong rate.
    pub max_wait: Duration,
    /// How old an observation may be when a write is admitted without a new `tcp_info` read
    /// (default 2 ms), in every mode: it bounds the age of the rate the threshold modes
    /// use and of the estimate the stats report.
    pub refresh: Duration,
    /// Smallest byte bound in the threshold modes (default 4096 bytes; at least 1): below a
    /// few segments the writer would be woken too often to keep the pipe full.
    pub min_bound: u32,
    /// Largest byte bound in the threshold modes (default 16 MiB).
    pub max_bound: u32,
    /// Relative change of the adaptive LOWAT that triggers a new `setsockopt` (default 1/8).
    pub lowat_hysteresis: f64,
}

impl GovernorConfig {
    /// The defaults for `mode`.
    pub fn new(mode: GovernorMode) -> GovernorConfig {
        GovernorConfig {
            mode,
            min_wait: Duration::from_micros(100),
            max_wait: Duration::from_millis(5),
            refresh: Duration::from_millis(2),
            min_bound: 4096,
            max_bound: 16 << 20,
            lowat_hysteresis: 0.125,
        }
    }
}

/// What to do before the next write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Admission {
    /// Write at most this many bytes now (never more than asked for).
    Admit(u64),
    /// The cached observation cannot decide (none yet, older than `refresh`, or its upper
    /// bound leaves too little room): read `tcp_info`, [`Governor::observe`] it, ask again.
    Refresh,
    /// Threshold mode: wait this long (within `[min_wait, max_wait]`), then refresh.
    Wait(Duration),
    /// Adaptive mode: wait for the kernel's `POLLOUT` (withheld now; it comes when
    /// `2 × notsent < LOWAT`), at most `max_wait`, then refresh.
    WaitWritable,
}

/// What one observation changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observation {
    /// Apply this `TCP_NOTSENT_LOWAT` before writing (then report it with
    /// [`Governor::lowat_applied`]).
    pub set_lowat: Option<u32>,
    /// The estimate of the observed inputs.
    pub estimate: Option<Estimate>,
}

/// The latest observation.
#[derive(Debug, Clone, Copy)]
struct Snapshot {
    at: Duration,
    notsent: u64,
    rate: Option<u64>,
}

/// The decision core; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct Governor {
    config: GovernorConfig,
    lowat: Option<u32>,
    last: Option<Snapshot>,
    /// Bytes written since `last`.
    written_since: u64,
    /// Nothing was written and no wait was asked since `last`: its `notsent` is exact.
    exact: bool,
    /// No decision was made on `last` yet: it is used whatever its age, so a `refresh` shorter
    /// than a `tcp_info` read cannot send the writer round in circles.
    unused: bool,
    last_estimate: Option<Estimate>,
}

impl Governor {
    /// A governor with `config`.
    pub fn new(config: GovernorConfig) -> Governor {
        Governor {
            config,
            lowat: None,
            last: None,
            written_since: 0,
            exact: false,
            unused: false,
            last_estimate: None,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &GovernorConfig {
        &self.config
    }

    /// The LOWAT last applied, if any.
    pub fn lowat(&self) -> Option<u32> {
        self.lowat
    }

    /// The estimate of the latest observation.
    pub fn last_estimate(&self) -> Option<Estimate> {
        self.last_estimate
    }

    /// When the latest observation was made.
    pub fn observed_at(&self) -> Option<Duration> {
        self.last.map(|s| s.at)
    }

    /// Records fresh `inputs` observed at `now`; says which LOWAT to apply.
    pub fn observe(&mut self, now: Duration, inputs: &Inputs) -> Observation {
        let estimate = inputs.estimate();
        self.last_estimate = estimate;
        self.written_since = 0;
        self.exact = true;
        self.unused = true;
        self.last = Some(Snapshot {
            at: now,
            notsent: u64::from(inputs.notsent_bytes),
            rate: estimate.map(|e| e.rate),
        });
        let set_lowat = match self.config.mode {
            GovernorMode::NoControl | GovernorMode::Threshold(_) => None,
            GovernorMode::StaticLowat(bytes) => (self.lowat != Some(bytes)).then_some(bytes),
            GovernorMode::AdaptiveLowat(threshold) => {
                let target = estimate.map(|e| self.bound_for(threshold, e.rate));
                match (target, self.lowat) {
                    (Some(t), Some(cur)) => {
                        let change = (f64::from(t) - f64::from(cur)).abs() / f64::from(cur.max(1));
                        (change > self.config.lowat_hysteresis).then_some(t)
                    }
                    (Some(t), None) => Some(t),
                    // No rate yet: start from the smallest bound, so the very first burst
                    // cannot fill the buffer.
                    (None, None) => Some(self.min_bound()),
                    (None, Some(_)) => None,
                }
            }
        };
        Observation { set_lowat, estimate }
    }

    fn min_bound(&self) -> u32 {
        self.config.min_bound.max(1)
    }

    /// `threshold × rate` in bytes, clamped to `[min_bound, max_bound]`.
    pub fn bound_for(&self, threshold: Duration, rate: u64) -> u32 {
        let bytes = u128::from(rate) * threshold.as_nanos() / 1_000_000_000;
        let bytes = u32::try_from(bytes).unwrap_or(u32::MAX);
        bytes.clamp(self.min_bound(), self.config.max_bound.max(self.min_bound()))
    }

    /// The byte bound on `notsent` now: `None` without one (no control, static LOWAT, or
    /// threshold mode without a rate).
    pub fn bound(&self) -> Option<u64> {
        match self.config.mode {
            GovernorMode::NoControl | GovernorMode::StaticLowat(_) => None,
            GovernorMode::Threshold(t) => {
                let rate = self.last?.rate?;
                Some(u64::from(self.bound_for(t, rate)))
            }
            GovernorMode::AdaptiveLowat(_) => self.lowat.map(u64::from),
        }
    }

    /// Records that `lowat` is now set on the socket.
    pub fn lowat_applied(&mut self, lowat: u32) {
        self.lowat = Some(lowat);
    }

    /// Records `bytes` written since the last observation (for the cached upper bound).
    pub fn on_written(&mut self, bytes: u64) {
        self.written_since = self.written_since.saturating_add(bytes);
        if bytes > 0 {
            self.exact = false;
        }
    }

    /// Decides on a write of up to `want` bytes at `now` (see the [module docs](self)).
    ///
    /// A wait is only asked on an exact observation, and asking it spends that observation:
    /// the next call after a [`Admission::Wait`] or [`Admission::WaitWritable`] answers
    /// [`Admission::Refresh`]. The first call after an observation decides on it whatever
    /// its age; later ones ask for a refresh once it is older than `refresh`.
    pub fn admit(&mut self, now: Duration, want: u64) -> Admission {
        let Some(last) = self.last else { return Admission::Refresh };
        if !std::mem::take(&mut self.unused) && now.saturating_sub(last.at) > self.config.refresh {
            return Admission::Refresh;
        }
        let bound = match self.config.mode {
            GovernorMode::NoControl => return Admission::Admit(want),
            GovernorMode::StaticLowat(b) if self.lowat == Some(b) => return Admission::Admit(want),
            // Not applied yet (the caller skipped `lowat_applied`): observe again.
            GovernorMode::StaticLowat(_) => return Admission::Refresh,
            GovernorMode::AdaptiveLowat(_) if self.lowat.is_none() => return Admission::Refresh,
            GovernorMode::Threshold(_) | GovernorMode::AdaptiveLowat(_) => match self.bound() {
                Some(b) => b,
                None => return Admission::Admit(want),
            },
        };
        let upper = last.notsent.saturating_add(self.written_since);
        let room = bound.saturating_sub(upper);
        // Half the bound free, or all of what is wanted: the kernel's LOWAT wake-up rule.
        let need = want.min(bound / 2).max(1);
        if room >= need {
            return Admission::Admit(want.min(room));
        }
        if !self.exact {
            return Admission::Refresh;
        }
        self.exact = false;
        match (self.config.mode, last.rate) {
            (GovernorMode::Threshold(_), Some(rate)) => {
                let excess = upper - (bound - need);
                let wait = delay_of(excess, rate).clamp(self.config.min_wait, self.config.max_wait);
                Admission::Wait(wait)
            }
            _ => Admission::WaitWritable,
        }
    }
}

#[cfg(test)]
mod tests;
