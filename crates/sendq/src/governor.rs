//! The governor: a sans-IO decision core that keeps the delay of unsent data in a TCP socket
//! under a bound.
//!
//! It never reads the clock or touches a socket. The caller gives it `now` (any monotonic
//! [`Duration`] since an arbitrary zero, a virtual clock in tests) and the socket's state as
//! [`Inputs`] (from `tcp_info`), and it answers with a [`Verdict`]: admit the next write or wait
//! a given time and ask again, and possibly a new `TCP_NOTSENT_LOWAT` value to apply.
//!
//! # The estimate (the poster's equations 1-3)
//!
//! `delay = notsent / R`: `notsent` is `tcpi_notsent_bytes` (the poster's "occupied buffer
//! minus BDP", measured directly). `R` is `tcpi_delivery_rate` when its latest sample was not
//! application-limited, otherwise `min(pacing_rate, cwnd × mss / srtt)` over whichever is known
//! (`min_rtt` replaces a zero `srtt`). No usable rate means no estimate, and the governor then
//! admits: capabilities degrade, they never wedge the writer.
//!
//! # Modes
//!
//! - [`Mode::NoControl`]: always admit (the baseline).
//! - [`Mode::StaticLowat`]: set `TCP_NOTSENT_LOWAT` once; the kernel blocks the writer.
//! - [`Mode::Threshold`]: the poster's proposal: admit iff the estimate is at most the
//!   threshold, else wait `estimate - threshold` (clamped to `[min_wait, max_wait]`) and
//!   re-read `tcp_info`.
//! - [`Mode::AdaptiveLowat`]: beyond the poster: keep `TCP_NOTSENT_LOWAT` at
//!   `2 × threshold × R`. The kernel withholds `POLLOUT` and blocks writes while
//!   `notsent ≥ lowat`, and wakes the writer when `2 × notsent < lowat`, i.e. exactly when the
//!   estimate falls below the threshold; no polling. The value is re-computed when the rate
//!   moves by more than [`GovernorConfig::lowat_hysteresis`].
//!
//! # Invariants (property-tested)
//!
//! - In threshold mode a write is never admitted while the freshest estimate exceeds the
//!   threshold; the cached fast path ([`Governor::admit_cached`]) only admits when an *upper
//!   bound* of the estimate (last `notsent` plus everything written since, at the last rate)
//!   is within the threshold and the snapshot is younger than [`GovernorConfig::refresh`].
//! - Every wait is finite (at most [`GovernorConfig::max_wait`]), and an empty queue is always
//!   admitted: the writer never blocks forever once the queue drains.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use tcptail_sock::TcpInfo;
use tcptail_sock::tcp_info::RateSource;

/// How a sender bounds its socket's send queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "kind", content = "value")]
pub enum Mode {
    /// No control: the kernel's send buffer alone decides.
    NoControl,
    /// A fixed `TCP_NOTSENT_LOWAT` in bytes.
    StaticLowat(u32),
    /// Wait while `notsent / rate` exceeds this (the poster's design, polling `tcp_info`).
    Threshold(Duration),
    /// `TCP_NOTSENT_LOWAT` kept at `2 × threshold × rate`, so the kernel wakes the writer when
    /// the estimate falls below this threshold.
    AdaptiveLowat(Duration),
}

impl Mode {
    /// The delay bound, for the threshold-based modes.
    pub fn threshold(&self) -> Option<Duration> {
        match *self {
            Mode::Threshold(t) | Mode::AdaptiveLowat(t) => Some(t),
            Mode::NoControl | Mode::StaticLowat(_) => None,
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
    pub mode: Mode,
    /// Shortest wait (default 100 µs): below it, sleeping costs more than it saves.
    pub min_wait: Duration,
    /// Longest wait before re-reading `tcp_info` (default 5 ms): bounds how long a writer can
    /// oversleep a drained queue or a wrong rate.
    pub max_wait: Duration,
    /// How old a `tcp_info` snapshot may be for the cached fast path and for re-computing the
    /// adaptive LOWAT (default 2 ms).
    pub refresh: Duration,
    /// Smallest adaptive LOWAT (default 4096 bytes): below a few segments the kernel would wake
    /// the writer too often to keep the pipe full.
    pub min_lowat: u32,
    /// Largest adaptive LOWAT (default 16 MiB).
    pub max_lowat: u32,
    /// Relative change of the adaptive LOWAT that triggers a new `setsockopt` (default 1/8).
    pub lowat_hysteresis: f64,
}

impl GovernorConfig {
    /// The defaults for `mode`.
    pub fn new(mode: Mode) -> GovernorConfig {
        GovernorConfig {
            mode,
            min_wait: Duration::from_micros(100),
            max_wait: Duration::from_millis(5),
            refresh: Duration::from_millis(2),
            min_lowat: 4096,
            max_lowat: 16 << 20,
            lowat_hysteresis: 0.125,
        }
    }
}

/// Whether the next write may go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Admission {
    /// Write now.
    Admit,
    /// Wait this long (finite, at least `min_wait`), then ask again with fresh inputs.
    Wait(Duration),
}

/// The governor's answer to one observation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdict {
    /// Write or wait.
    pub admission: Admission,
    /// Apply this `TCP_NOTSENT_LOWAT` before writing (then report it with
    /// [`Governor::lowat_applied`]).
    pub set_lowat: Option<u32>,
    /// The estimate this verdict was based on.
    pub estimate: Option<Estimate>,
}

#[derive(Debug, Clone, Copy)]
struct Snapshot {
    at: Duration,
    notsent: u64,
    rate: u64,
}

/// The decision core; see the [module docs](self).
#[derive(Debug, Clone)]
pub struct Governor {
    config: GovernorConfig,
    lowat: Option<u32>,
    last: Option<Snapshot>,
    written_since: u64,
    last_estimate: Option<Estimate>,
}

impl Governor {
    /// A governor with `config`.
    pub fn new(config: GovernorConfig) -> Governor {
        Governor { config, lowat: None, last: None, written_since: 0, last_estimate: None }
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

    /// Decides on fresh `inputs` observed at `now`.
    pub fn observe(&mut self, now: Duration, inputs: &Inputs) -> Verdict {
        let estimate = inputs.estimate();
        self.last_estimate = estimate;
        self.written_since = 0;
        self.last = estimate.map(|e| Snapshot {
            at: now,
            notsent: u64::from(inputs.notsent_bytes),
            rate: e.rate,
        });
        let (admission, set_lowat) = match self.config.mode {
            Mode::NoControl => (Admission::Admit, None),
            Mode::StaticLowat(bytes) => {
                (Admission::Admit, (self.lowat != Some(bytes)).then_some(bytes))
            }
            Mode::Threshold(threshold) => match estimate {
                Some(e) if e.delay > threshold => {
                    let wait =
                        (e.delay - threshold).clamp(self.config.min_wait, self.config.max_wait);
                    (Admission::Wait(wait), None)
                }
                _ => (Admission::Admit, None),
            },
            Mode::AdaptiveLowat(threshold) => {
                let target = estimate.map(|e| self.adaptive_lowat(threshold, e.rate));
                let set = match (target, self.lowat) {
                    (Some(t), Some(cur)) => {
                        let change = (f64::from(t) - f64::from(cur)).abs() / f64::from(cur.max(1));
                        (change > self.config.lowat_hysteresis).then_some(t)
                    }
                    (Some(t), None) => Some(t),
                    // No rate yet: start from the smallest bound, so the very first burst
                    // cannot fill the buffer.
                    (None, None) => Some(self.config.min_lowat),
                    (None, Some(_)) => None,
                };
                (Admission::Admit, set)
            }
        };
        Verdict { admission, set_lowat, estimate }
    }

    /// `2 × threshold × rate`, clamped to the configured bounds.
    pub fn adaptive_lowat(&self, threshold: Duration, rate: u64) -> u32 {
        let bytes = 2 * u128::from(rate) * threshold.as_nanos() / 1_000_000_000;
        let bytes = u32::try_from(bytes).unwrap_or(u32::MAX);
        bytes.clamp(self.config.min_lowat, self.config.max_lowat.max(self.config.min_lowat))
    }

    /// Records that `lowat` is now set on the socket.
    pub fn lowat_applied(&mut self, lowat: u32) {
        self.lowat = Some(lowat);
    }

    /// Records `bytes` written since the last observation (for the cached upper bound).
    pub fn on_written(&mut self, bytes: u64) {
        self.written_since = self.written_since.saturating_add(bytes);
    }

    /// Whether a write may go at `now` without reading `tcp_info` again.
    ///
    /// True for the modes that need no per-write decision once their LOWAT is set. In
    /// threshold mode, true only with a snapshot younger than `refresh` whose upper bound
    /// `(notsent + written since) / rate` is within the threshold (the queue can only have
    /// shrunk since, apart from what we wrote).
    pub fn admit_cached(&self, now: Duration) -> bool {
        let fresh = |s: &Snapshot| now.saturating_sub(s.at) <= self.config.refresh;
        match self.config.mode {
            Mode::NoControl => true,
            Mode::StaticLowat(b) => self.lowat == Some(b),
            Mode::AdaptiveLowat(_) => self.lowat.is_some() && self.last.as_ref().is_some_and(fresh),
            Mode::Threshold(threshold) => self.last.as_ref().is_some_and(|s| {
                fresh(s)
                    && delay_of(s.notsent.saturating_add(self.written_since), s.rate) <= threshold
            }),
        }
    }
}

#[cfg(test)]
mod tests;
