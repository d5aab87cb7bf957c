//! Whether the host's TCP memory was under pressure while something ran.
//!
//! TCP's memory account and its pressure state are one for the whole host, not per network
//! namespace. Once all TCP sockets together hold `tcp_mem`'s low level, TCP stops growing
//! any socket's send and receive buffers (`tcp_should_expand_sndbuf`, `tcp_clamp_window`:
//! "soft pressure"); above its pressure level it also shrinks them, until the total falls
//! below the low level again. A new flow then keeps its initial buffers: measured here, a
//! 10 Gbit/s x 120 ms BBR flow moved 9.4 Gbit/s in a round that started below the low level
//! and 3.1 Mbit/s in the next, started above it (orphans of the first still held 1.3 GB). A
//! lab round that ran in either state did not run the path it meant (its flows were held by
//! the host, not the path), and the experiment runner excludes it. A long fat path comes close on its own: while one 10 Gbit/s x 120 ms round ran, TCP
//! held 1.28 GB, and `tcp_mem`'s defaults scale with RAM (pressure at 1.5 GB on a 24 GiB
//! host).
//!
//! [`Watch`] samples `/proc/net/protocols` on a thread of its own every interval until it is
//! finished; the sampler is a parameter so that a test can script what the kernel says.

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use crate::procfs::{ProtocolMemory, parse_protocol_memory, parse_tcp_mem};

/// How often a [`Watch`] samples by default. Pressure, once entered, lasts until memory falls
/// below `tcp_mem`'s low level, so episodes that clamp a round's flows last far longer; a
/// slower tick also keeps the watcher's wake-ups out of microsecond latency rounds.
pub const DEFAULT_INTERVAL: Duration = Duration::from_millis(100);

/// Reads TCP's row of `/proc/net/protocols` (the same host-wide figures from any namespace).
pub fn read_host() -> Result<ProtocolMemory, String> {
    let path = "/proc/net/protocols";
    let text = std::fs::read_to_string(path).map_err(|e| format!("read {path}: {e}"))?;
    parse_protocol_memory(&text, "TCP").ok_or_else(|| format!("{path} has no TCP memory row"))
}

/// `net.ipv4.tcp_mem` in pages (low, pressure, high), when readable.
pub fn read_limits() -> Option<[u64; 3]> {
    parse_tcp_mem(&std::fs::read_to_string("/proc/sys/net/ipv4/tcp_mem").ok()?)
}

/// A sampler: the host's TCP memory now, or why it could not be read.
pub type Sampler = fn() -> Result<ProtocolMemory, String>;

/// What a [`Watch`] saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Summary {
    /// Samples taken (one at the start, one per interval, one at the end).
    pub samples: u32,
    /// Of those, the ones in which TCP was under memory pressure.
    pub pressure_samples: u32,
    /// Of those, the ones in which TCP held at least `tcp_mem`'s low level (buffers no
    /// longer grow), pressure or not; 0 when the limits are unknown.
    pub over_low_samples: u32,
    /// The most pages TCP held in any sample.
    pub peak_pages: u64,
    /// `tcp_mem` (low, pressure, high) when it was readable.
    pub limits: Option<[u64; 3]>,
    /// Why sampling failed, if it did (the first error; no pressure is then known).
    pub error: Option<String>,
}

impl Summary {
    /// Why a run during which this was seen was not faithful: `None` when TCP's memory stayed
    /// below `tcp_mem`'s low level and never was under pressure (or could not be watched: see
    /// [`Summary::error`]).
    pub fn pressure_reason(&self) -> Option<String> {
        if self.pressure_samples == 0 && self.over_low_samples == 0 {
            return None;
        }
        let mib = |pages: u64| pages as f64 * 4096.0 / (1 << 20) as f64;
        let limit = match self.limits {
            Some([low, pressure, _]) => format!(
                " against tcp_mem's low level of {low} pages ({:.0} MiB) and pressure level of \
                 {pressure} ({:.0} MiB)",
                mib(low),
                mib(pressure)
            ),
            None => String::new(),
        };
        let state = if self.pressure_samples > 0 {
            format!("under pressure in {} of {} samples", self.pressure_samples, self.samples)
        } else {
            format!(
                "at or above tcp_mem's low level in {} of {} samples",
                self.over_low_samples, self.samples
            )
        };
        Some(format!(
            "the host's TCP memory was {state} (peak {} pages, {:.0} MiB{limit}; tcp_mem is one \
             for all namespaces, so this round's own flows or any other TCP user may have \
             caused it): the kernel kept every socket's buffers from growing, so the host, not \
             the path, limited the flows",
            self.peak_pages,
            mib(self.peak_pages),
        ))
    }

    fn add(&mut self, sample: Result<ProtocolMemory, String>) {
        match sample {
            Ok(m) => {
                self.samples += 1;
                self.pressure_samples += u32::from(m.pressure);
                let over_low = self.limits.is_some_and(|[low, _, _]| m.pages >= low);
                self.over_low_samples += u32::from(over_low);
                self.peak_pages = self.peak_pages.max(m.pages);
            }
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
    }
}

/// A running watch: samples until [`Watch::finish`]. Dropped unfinished, its thread sees the
/// stop channel close, takes one last sample and ends on its own.
pub struct Watch {
    stop: mpsc::Sender<()>,
    /// The sampling thread, or why it could not start.
    thread: Result<JoinHandle<Summary>, String>,
}

impl Watch {
    /// Starts sampling with `sampler` every `interval` (the first sample now).
    pub fn start(sampler: Sampler, interval: Duration) -> Watch {
        let (stop, stopped) = mpsc::channel::<()>();
        let limits = read_limits();
        let thread = std::thread::Builder::new().name("tcptail-tcpmem".into()).spawn(move || {
            let mut summary = Summary { limits, ..Summary::default() };
            summary.add(sampler());
            // A stop message or a dropped sender both end the watch, after one last sample.
            while let Err(mpsc::RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                summary.add(sampler());
            }
            summary.add(sampler());
            summary
        });
        let thread = thread.map_err(|e| format!("start the TCP memory watcher's thread: {e}"));
        Watch { stop, thread }
    }

    /// Stops sampling and returns what was seen.
    pub fn finish(self) -> Summary {
        let _ = self.stop.send(());
        let error = match self.thread {
            Ok(thread) => match thread.join() {
                Ok(summary) => return summary,
                Err(_) => "the TCP memory watcher panicked".to_owned(),
            },
            Err(e) => e,
        };
        Summary { error: Some(error), ..Summary::default() }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    #[test]
    fn the_host_is_watched() {
        let s = Watch::start(read_host, Duration::from_millis(5)).finish();
        assert_eq!(s.error, None);
        assert!(s.samples >= 2, "{s:?}");
        assert!(s.limits.is_some());
    }

    static CALLS: AtomicU32 = AtomicU32::new(0);

    /// Pressure in the second and third samples only, memory rising then falling.
    fn scripted() -> Result<ProtocolMemory, String> {
        let n = CALLS.fetch_add(1, Ordering::SeqCst);
        let pages = [100, 400, 500, 200][n.min(3) as usize];
        Ok(ProtocolMemory { pages, pressure: (1..=2).contains(&n) })
    }

    #[test]
    fn pressure_in_any_sample_is_reported_with_the_peak() {
        let watch = Watch::start(scripted, Duration::from_millis(1));
        while CALLS.load(Ordering::SeqCst) < 4 {
            std::thread::sleep(Duration::from_millis(1));
        }
        let s = watch.finish();
        assert_eq!((s.pressure_samples, s.peak_pages), (2, 500), "{s:?}");
        let why = s.pressure_reason().expect("pressure seen");
        assert!(why.contains("under pressure in 2 of"), "{why}");
        assert!(why.contains("peak 500 pages"), "{why}");
    }

    #[test]
    fn memory_at_the_low_level_is_reported_without_pressure() {
        let mut s = Summary { limits: Some([100, 200, 300]), ..Summary::default() };
        s.add(Ok(ProtocolMemory { pages: 99, pressure: false }));
        assert_eq!(s.pressure_reason(), None);
        s.add(Ok(ProtocolMemory { pages: 100, pressure: false }));
        assert_eq!((s.samples, s.over_low_samples, s.pressure_samples), (2, 1, 0));
        let why = s.pressure_reason().expect("soft pressure");
        assert!(why.contains("at or above tcp_mem's low level in 1 of 2 samples"), "{why}");
        assert!(why.contains("low level of 100 pages"), "{why}");
    }

    #[test]
    fn no_pressure_and_unreadable_give_no_reason() {
        let calm = Summary { samples: 3, peak_pages: 9, ..Summary::default() };
        assert_eq!(calm.pressure_reason(), None);
        let s = Watch::start(|| Err("no procfs".into()), Duration::from_millis(1)).finish();
        assert_eq!((s.samples, s.error.as_deref()), (0, Some("no procfs")));
        assert_eq!(s.pressure_reason(), None);
    }

    #[test]
    fn limits_are_quoted_when_known() {
        let s = Summary {
            samples: 10,
            pressure_samples: 1,
            over_low_samples: 1,
            peak_pages: 400_000,
            limits: Some([287_898, 383_867, 575_796]),
            error: None,
        };
        let why = s.pressure_reason().unwrap();
        assert!(
            why.contains(
                "low level of 287898 pages (1125 MiB) and pressure level of 383867 (1499 MiB)"
            ),
            "{why}"
        );
        assert!(why.contains("1562 MiB"), "{why}");
    }
}
