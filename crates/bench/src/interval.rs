//! Interval histograms: the latencies of a run cut into consecutive intervals while it runs,
//! for live interim lines (`--interval`) and HdrHistogram interval logs (`--hdr-log`).
//!
//! Every measuring thread records into its own `IntervalSlot` (an uncontended lock per
//! sample, taken only when intervals are asked for); whoever reports calls
//! [`IntervalRecorder::take`] at each interval's end, which empties every slot into one
//! histogram whose start and end are the moments of the two cuts, so no sample is lost or
//! counted twice whatever the threads are doing. A matrix run names its rows with
//! [`IntervalRecorder::set_tag`], which cuts at the switch so each interval has one tag.
//!
//! [`write_log_header`] and [`LogWriter`] write the standard HdrHistogram interval log (V2
//! compressed base64 histograms, `StartTime`/`BaseTime` headers, a tag per variant), as read by
//! HdrHistogram's own tools (`HistogramLogProcessor`, the `hdrhistogram` Python package).

use std::io::{self, Write};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime};

use hdrhistogram::serialization::V2DeflateSerializer;
use hdrhistogram::serialization::interval_log::{IntervalLogWriterBuilder, Tag};

use crate::stats::LatencyHistogram;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One interval's latencies (nanoseconds).
#[derive(Debug, Clone)]
pub struct Interval {
    /// When the interval began.
    pub start: Instant,
    /// When it ended.
    pub end: Instant,
    /// The matrix row (variant) it belongs to, if any.
    pub tag: Option<String>,
    /// Latencies recorded in it.
    pub latency: LatencyHistogram,
}

/// A measuring thread's share of the current interval.
#[derive(Debug, Clone)]
pub(crate) struct IntervalSlot(Arc<Mutex<LatencyHistogram>>);

impl IntervalSlot {
    pub(crate) fn record(&self, nanos: u64) {
        lock(&self.0).record(nanos);
    }
}

#[derive(Debug)]
struct State {
    slots: Vec<Arc<Mutex<LatencyHistogram>>>,
    since: Instant,
    tag: Option<String>,
    /// Intervals cut by a tag switch, not yet taken.
    cut: Vec<Interval>,
}

/// Collects the interval histograms of a run (see the module docs).
#[derive(Debug)]
pub struct IntervalRecorder {
    state: Mutex<State>,
}

impl Default for IntervalRecorder {
    fn default() -> Self {
        IntervalRecorder::new()
    }
}

impl IntervalRecorder {
    /// A recorder whose first interval starts now.
    pub fn new() -> IntervalRecorder {
        IntervalRecorder {
            state: Mutex::new(State {
                slots: Vec::new(),
                since: Instant::now(),
                tag: None,
                cut: Vec::new(),
            }),
        }
    }

    /// A new slot for one measuring thread.
    pub(crate) fn slot(&self) -> IntervalSlot {
        let slot = Arc::new(Mutex::new(LatencyHistogram::new()));
        lock(&self.state).slots.push(Arc::clone(&slot));
        IntervalSlot(slot)
    }

    /// Moves the current interval's start to `now` if it has recorded nothing yet (the
    /// warm-up before a run's measured part is not an interval of it).
    pub(crate) fn restart_if_empty(&self, now: Instant) {
        let mut state = lock(&self.state);
        if state.cut.is_empty() && state.slots.iter().all(|s| lock(s).is_empty()) {
            state.since = now;
        }
    }

    /// Cuts the current interval and names the ones that follow `tag`.
    pub fn set_tag(&self, tag: Option<String>) {
        let mut state = lock(&self.state);
        if state.tag == tag {
            return;
        }
        let interval = Self::cut(&mut state, Instant::now());
        if !interval.latency.is_empty() {
            state.cut.push(interval);
        }
        state.tag = tag;
    }

    /// Ends the current interval now and returns every interval not taken yet, oldest first.
    pub fn take(&self) -> Vec<Interval> {
        let mut state = lock(&self.state);
        let current = Self::cut(&mut state, Instant::now());
        let mut out = std::mem::take(&mut state.cut);
        out.push(current);
        out
    }

    fn cut(state: &mut State, now: Instant) -> Interval {
        let mut latency = LatencyHistogram::new();
        state.slots.retain(|slot| {
            // Whether its thread has let go is read before the slot is emptied: a slot no one
            // else holds takes no more samples and can go once emptied; one still held may
            // take more after this cut and stays (read after emptying, a sample recorded in
            // between went with the slot).
            let finished = Arc::strong_count(slot) == 1;
            let mut h = lock(slot);
            latency.merge(&h);
            *h = LatencyHistogram::new();
            !finished
        });
        let start = std::mem::replace(&mut state.since, now);
        Interval { start, end: now, tag: state.tag.clone(), latency }
    }
}

/// Writes the log's header: the format version, `StartTime` and `BaseTime` (both `start`,
/// seconds since the epoch, so timestamps are seconds into the run) and the column legend.
pub fn write_log_header<W: Write>(out: &mut W, start: SystemTime, comment: &str) -> io::Result<()> {
    let epoch = start.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default().as_secs_f64();
    writeln!(out, "#[{comment}]")?;
    writeln!(out, "#[Histogram log format version 1.3]")?;
    writeln!(out, "#[StartTime: {epoch:.3} (seconds since epoch)]")?;
    writeln!(out, "#[BaseTime: {epoch:.3} (seconds since epoch)]")?;
    writeln!(out, "#[Values in nanoseconds]")?;
    writeln!(
        out,
        "\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\""
    )
}

/// Appends interval histograms to a log whose header is written.
pub struct LogWriter {
    serializer: V2DeflateSerializer,
}

impl Default for LogWriter {
    fn default() -> Self {
        LogWriter::new()
    }
}

impl LogWriter {
    /// A writer with its own compressor.
    pub fn new() -> LogWriter {
        LogWriter { serializer: V2DeflateSerializer::new() }
    }

    /// Writes `interval`, its start `since_base` into the run. A tag may not contain
    /// commas, spaces or line breaks (the format's separators): they become `_`.
    pub fn write<W: Write>(
        &mut self,
        out: &mut W,
        interval: &Interval,
        since_base: Duration,
    ) -> io::Result<()> {
        let tag = interval
            .tag
            .as_deref()
            .map(|t| t.replace([',', ' ', '\n', '\r'], "_").replace("Tag=", "Tag_"));
        let mut log = IntervalLogWriterBuilder::new()
            .with_max_value_divisor(1.0)
            .begin_log_with(out, &mut self.serializer)?;
        log.write_histogram(
            interval.latency.hdr(),
            since_base,
            interval.end.saturating_duration_since(interval.start),
            tag.as_deref().and_then(Tag::new),
        )
        .map_err(|e| io::Error::other(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
    use hdrhistogram::serialization::{Deserializer, V2DeflateSerializer};

    #[test]
    fn every_sample_lands_in_exactly_one_interval_with_its_tag() {
        let recorder = IntervalRecorder::new();
        let a = recorder.slot();
        let b = recorder.slot();
        a.record(1000);
        b.record(2000);
        recorder.set_tag(Some("cc=bbr".into()));
        a.record(3000);
        let first = recorder.take();
        assert_eq!(first.len(), 2);
        assert_eq!((first[0].tag.as_deref(), first[0].latency.len()), (None, 2));
        assert_eq!((first[1].tag.as_deref(), first[1].latency.len()), (Some("cc=bbr"), 1));
        assert!(first[0].end <= first[1].start);
        drop(a);
        b.record(4000);
        let second = recorder.take();
        assert_eq!(second.len(), 1);
        assert_eq!(second[0].latency.len(), 1);
        assert_eq!(second[0].start, first[1].end);
    }

    /// A thread that records its last samples and lets go of its slot while intervals are
    /// being cut loses none of them (the run's last samples, on a thread finishing while the
    /// reporter cuts an interval, were dropped with the slot before).
    #[test]
    fn a_thread_finishing_during_a_cut_loses_no_sample() {
        let recorder = Arc::new(IntervalRecorder::new());
        let (threads, per_thread) = (2_000u64, 3u64);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let cutter = {
            let (recorder, stop) = (Arc::clone(&recorder), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut taken = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    taken += recorder.take().iter().map(|i| i.latency.len()).sum::<u64>();
                }
                taken
            })
        };
        for _ in 0..threads {
            let slot = recorder.slot();
            std::thread::spawn(move || {
                for v in 0..per_thread {
                    slot.record(1_000 + v);
                }
            })
            .join()
            .unwrap();
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let taken = cutter.join().unwrap();
        let rest: u64 = recorder.take().iter().map(|i| i.latency.len()).sum();
        assert_eq!(taken + rest, threads * per_thread);
    }

    #[test]
    fn the_log_reads_back_with_its_tags_and_counts() {
        let recorder = IntervalRecorder::new();
        let slot = recorder.slot();
        for v in [5_000u64, 6_000, 7_000] {
            slot.record(v);
        }
        recorder.set_tag(Some("cc=reno quickack".into()));
        slot.record(9_000);
        let mut out = Vec::new();
        write_log_header(&mut out, SystemTime::now(), "test").unwrap();
        let mut writer = LogWriter::new();
        for (i, interval) in recorder.take().iter().enumerate() {
            writer.write(&mut out, interval, Duration::from_secs(i as u64)).unwrap();
        }
        let mut seen = Vec::new();
        for entry in IntervalLogIterator::new(&out) {
            if let LogEntry::Interval(h) = entry.unwrap() {
                let bytes = base64_decode(h.encoded_histogram());
                let hist: hdrhistogram::Histogram<u64> =
                    Deserializer::new().deserialize(&mut &bytes[..]).unwrap();
                seen.push((h.tag().map(|t| t.as_str().to_string()), hist.len()));
            }
        }
        assert_eq!(seen, vec![(None, 3), (Some("cc=reno_quickack".into()), 1)]);
        let _ = V2DeflateSerializer::new();
    }

    fn base64_decode(s: &str) -> Vec<u8> {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = Vec::new();
        let (mut acc, mut bits) = (0u32, 0);
        for c in s.bytes().filter(|&c| c != b'=') {
            let v = ALPHABET.iter().position(|&a| a == c).expect("base64") as u32;
            acc = (acc << 6) | v;
            bits += 6;
            if bits >= 8 {
                bits -= 8;
                out.push((acc >> bits) as u8);
            }
        }
        out
    }
}
