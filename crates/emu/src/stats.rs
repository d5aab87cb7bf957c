//! Per-direction statistics: an [`Observer`] that counts what happened and serialises to JSON.
//!
//! Counts packets and bytes in (arrivals) and out (departures from the link), drops by reason,
//! ECN marks, delivery opportunities (trace mode; unused ones separately), keeps a histogram of queueing
//! delay (`start - arrival`, the time spent waiting before serialisation, which is also what
//! CoDel controls) and bins arrivals, departures and trace capacity over time for throughput
//! plots. Everything is derived from events, so the numbers describe the virtual schedule, not
//! the adapter's lateness (which the adapter measures from [`crate::ReleaseInfo`]).
//!
//! Memory is bounded: at most [`MAX_BINS`] time bins; events beyond are counted as `unbinned`.

use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Serialize, Serializer};

use crate::event::{DropReason, Event, Observer};
use crate::time::{Nanos, duration_nanos};

/// Upper bound on the number of throughput bins kept (4M bins of 24 bytes: 100 MB worst case).
pub const MAX_BINS: usize = 1 << 22;

#[derive(Debug, Clone, Copy, Default)]
struct Bin {
    bytes_in: u64,
    bytes_out: u64,
    capacity: u64,
}

/// Packet and byte counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Count {
    /// Packets.
    pub packets: u64,
    /// Bytes.
    pub bytes: u64,
}

impl Count {
    fn add(&mut self, len: u32) {
        self.packets += 1;
        self.bytes += u64::from(len);
    }
}

/// Statistics for one direction. Feed it events (it is an [`Observer`]).
#[derive(Debug, Clone)]
pub struct Stats {
    bin: Duration,
    origin: Nanos,
    arrivals: Count,
    departures: Count,
    drops: [Count; 5],
    changes: Vec<AppliedChange>,
    marks: Count,
    opportunities: u64,
    unused_opportunities: u64,
    unused_opportunity_bytes: u64,
    capacity_bytes: u64,
    queue_delay: Histogram<u64>,
    bins: Vec<Bin>,
    unbinned: u64,
    first: Option<Nanos>,
    last: Nanos,
}

impl Default for Stats {
    /// 100 ms bins from `Nanos::ZERO`.
    fn default() -> Stats {
        Stats::new(Duration::from_millis(100), Nanos::ZERO)
    }
}

impl Stats {
    /// Statistics with throughput bins of `bin` (at least 1 µs) counted from `origin`.
    pub fn new(bin: Duration, origin: Nanos) -> Stats {
        Stats {
            bin: bin.max(Duration::from_micros(1)),
            origin,
            arrivals: Count::default(),
            departures: Count::default(),
            drops: [Count::default(); 5],
            changes: Vec::new(),
            marks: Count::default(),
            opportunities: 0,
            unused_opportunities: 0,
            unused_opportunity_bytes: 0,
            capacity_bytes: 0,
            // Auto-resizing, 3 significant digits: ~0.1 % resolution at any delay.
            queue_delay: Histogram::new(3).expect("3 significant figures is a valid precision"),
            bins: Vec::new(),
            unbinned: 0,
            first: None,
            last: Nanos::ZERO,
        }
    }

    /// Packets and bytes that arrived.
    pub fn arrivals(&self) -> Count {
        self.arrivals
    }

    /// Packets and bytes that left the link.
    pub fn departures(&self) -> Count {
        self.departures
    }

    /// Drops for one reason.
    pub fn drops(&self, reason: DropReason) -> Count {
        self.drops[reason.index()]
    }

    /// Packets marked CE (ECN) instead of dropped.
    pub fn marks(&self) -> Count {
        self.marks
    }

    /// Queueing delay at quantile `q` in `[0, 1]` (zero when nothing departed).
    pub fn queue_delay_quantile(&self, q: f64) -> Duration {
        Duration::from_nanos(self.queue_delay.value_at_quantile(q.clamp(0.0, 1.0)))
    }

    /// Largest queueing delay seen.
    pub fn queue_delay_max(&self) -> Duration {
        Duration::from_nanos(self.queue_delay.max())
    }

    fn bin_mut(&mut self, at: Nanos) -> Option<&mut Bin> {
        let index = (at - self.origin).as_nanos() / self.bin.as_nanos();
        let index = usize::try_from(index).ok().filter(|&i| i < MAX_BINS);
        let Some(index) = index else {
            self.unbinned += 1;
            return None;
        };
        if index >= self.bins.len() {
            self.bins.resize(index + 1, Bin::default());
        }
        Some(&mut self.bins[index])
    }

    /// A JSON-friendly summary (what `Serialize` writes).
    pub fn summary(&self) -> StatsSummary {
        let bin_s = self.bin.as_secs_f64();
        let mbps = |bytes: u64| bytes as f64 * 8.0 / bin_s / 1e6;
        let span_s = self.first.map_or(0.0, |f| (self.last - f).as_secs_f64());
        let mean = |bytes: u64| if span_s > 0.0 { bytes as f64 * 8.0 / span_s / 1e6 } else { 0.0 };
        let ms = |ns: u64| ns as f64 / 1e6;
        let h = &self.queue_delay;
        let trace = self.opportunities > 0;
        StatsSummary {
            arrivals: self.arrivals,
            departures: self.departures,
            drops: DropCounts {
                loss: self.drops(DropReason::Loss),
                queue_full: self.drops(DropReason::QueueFull),
                codel: self.drops(DropReason::Codel),
                ecn_blackhole: self.drops(DropReason::EcnBlackhole),
                blackhole: self.drops(DropReason::Blackhole),
            },
            path_changes: self.changes.clone(),
            ecn_marks: self.marks,
            opportunities: trace.then_some(Opportunities {
                total: self.opportunities,
                unused: self.unused_opportunities,
                unused_bytes: self.unused_opportunity_bytes,
                capacity_bytes: self.capacity_bytes,
            }),
            queue_delay_ms: DelaySummary {
                count: h.len(),
                mean: if h.is_empty() { 0.0 } else { h.mean() / 1e6 },
                p50: ms(h.value_at_quantile(0.5)),
                p90: ms(h.value_at_quantile(0.9)),
                p99: ms(h.value_at_quantile(0.99)),
                max: ms(h.max()),
            },
            span_s,
            mean_in_mbps: mean(self.arrivals.bytes),
            mean_out_mbps: mean(self.departures.bytes),
            throughput: Throughput {
                bin_ms: ms(duration_nanos(self.bin)),
                origin_ns: self.origin.as_nanos(),
                in_mbps: self.bins.iter().map(|b| mbps(b.bytes_in)).collect(),
                out_mbps: self.bins.iter().map(|b| mbps(b.bytes_out)).collect(),
                capacity_mbps: trace.then(|| self.bins.iter().map(|b| mbps(b.capacity)).collect()),
                unbinned_events: self.unbinned,
            },
        }
    }
}

impl Observer for Stats {
    fn on_event(&mut self, event: &Event) {
        let at = event.at();
        self.first.get_or_insert(at);
        self.last = self.last.max(at);
        match *event {
            Event::Arrival { len, .. } => {
                self.arrivals.add(len);
                if let Some(b) = self.bin_mut(at) {
                    b.bytes_in += u64::from(len);
                }
            }
            Event::Drop { len, reason, .. } => self.drops[reason.index()].add(len),
            Event::Mark { len, .. } => self.marks.add(len),
            Event::PathChange { at, applied, index } => self.changes.push(AppliedChange {
                index,
                at_s: at.as_nanos() as f64 / 1e9,
                applied_s: applied.as_nanos() as f64 / 1e9,
            }),
            Event::Departure { len, arrival, start, .. } => {
                self.departures.add(len);
                let ns = duration_nanos(start - arrival);
                if self.queue_delay.record(ns).is_err() {
                    // Beyond what the histogram can grow to (about 2^63 ns): clamp.
                    self.queue_delay.saturating_record(ns);
                }
                if let Some(b) = self.bin_mut(at) {
                    b.bytes_out += u64::from(len);
                }
            }
            Event::Opportunity { capacity, used, .. } => {
                self.opportunities += 1;
                self.capacity_bytes += u64::from(capacity);
                if used == 0 {
                    self.unused_opportunities += 1;
                }
                self.unused_opportunity_bytes += u64::from(capacity.saturating_sub(used));
                if let Some(b) = self.bin_mut(at) {
                    b.capacity += u64::from(capacity);
                }
            }
        }
    }
}

impl Serialize for Stats {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.summary().serialize(s)
    }
}

/// Serialisable snapshot of [`Stats`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StatsSummary {
    /// Packets/bytes that arrived (before loss).
    pub arrivals: Count,
    /// Packets/bytes that left the link.
    pub departures: Count,
    /// Drops by reason.
    pub drops: DropCounts,
    /// Packets marked CE by the queue (ECN) instead of dropped.
    pub ecn_marks: Count,
    /// Scheduled path events as they took effect, in time order.
    pub path_changes: Vec<AppliedChange>,
    /// Trace mode only: delivery opportunities.
    pub opportunities: Option<Opportunities>,
    /// Queueing delay (`start - arrival`) of departed packets, in milliseconds.
    pub queue_delay_ms: DelaySummary,
    /// Seconds from the first to the last event.
    pub span_s: f64,
    /// Arrival rate over the span, Mbit/s.
    pub mean_in_mbps: f64,
    /// Departure rate over the span, Mbit/s.
    pub mean_out_mbps: f64,
    /// Binned rates over time.
    pub throughput: Throughput,
}

/// Drops by reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct DropCounts {
    /// Lost by the loss model.
    pub loss: Count,
    /// Tail drops at a full queue.
    pub queue_full: Count,
    /// CoDel drops (fq_codel's per-flow CoDel included).
    pub codel: Count,
    /// Dropped by an ECN blackhole for carrying ECT or CE.
    pub ecn_blackhole: Count,
    /// Dropped by a blackhole event (an outage).
    pub blackhole: Count,
}

/// A path event that took effect.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct AppliedChange {
    /// Its position in the scheduled list.
    pub index: u32,
    /// When it took effect in the virtual schedule, seconds from the emulator's start.
    pub at_s: f64,
    /// When the adapter's call applied it (its clock), seconds from the emulator's start.
    pub applied_s: f64,
}

/// Delivery opportunities (trace mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Opportunities {
    /// Opportunities that passed.
    pub total: u64,
    /// Opportunities that carried nothing.
    pub unused: u64,
    /// Capacity left unused, in bytes (including partly used opportunities).
    pub unused_bytes: u64,
    /// Total capacity offered, in bytes.
    pub capacity_bytes: u64,
}

/// Delay percentiles in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DelaySummary {
    /// Samples.
    pub count: u64,
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Maximum.
    pub max: f64,
}

/// Rates per time bin, in Mbit/s; bin `i` covers `[origin + i * bin, origin + (i+1) * bin)`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Throughput {
    /// Bin width in milliseconds.
    pub bin_ms: f64,
    /// Start of bin 0, in the emulator's nanoseconds.
    pub origin_ns: u64,
    /// Offered load (arrivals).
    pub in_mbps: Vec<f64>,
    /// Link output (departures).
    pub out_mbps: Vec<f64>,
    /// Trace capacity (trace mode only).
    pub capacity_mbps: Option<Vec<f64>>,
    /// Events too far from `origin` to be binned.
    pub unbinned_events: u64,
}
