//! Mahimahi packet-delivery traces: parsing, validation and the opportunity timetable.
//!
//! A trace file holds one integer per line: a millisecond timestamp at which the link may
//! deliver up to [`OPPORTUNITY_BYTES`] (1504) bytes. Several lines may share a timestamp (several
//! opportunities in the same millisecond); timestamps never decrease. The trace loops forever
//! with its **last** timestamp as the period, exactly as `mm-link` does: lines `[5, 10]` give
//! opportunities at 5, 10, 15, 20, ... ms; a single line `1` gives one opportunity every
//! millisecond (12.032 Mbit/s).
//!
//! Invariants of a [`DeliveryTrace`] (checked by every constructor, so holders never re-check):
//! at least one timestamp, non-decreasing, the last one non-zero, all below [`MAX_TIMESTAMP_MS`].
//!
//! Parsing never panics; errors name the source (file) and the 1-based line. Blank lines and
//! surrounding whitespace (including `\r` from CRLF files) are tolerated, which is slightly more
//! lenient than `mm-link` (it rejects empty lines); anything else that is not a decimal integer
//! is an error. This module never writes files.

use std::fmt;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tcptail_units::BitRate;

/// Bytes one delivery opportunity can carry: Mahimahi's `PACKET_SIZE` (the TUN MTU, 1500, plus
/// the 4-byte packet-information header it was measured with).
pub const OPPORTUNITY_BYTES: u32 = 1504;

/// Largest accepted timestamp (about 31 years in ms): keeps all later arithmetic overflow-free.
pub const MAX_TIMESTAMP_MS: u64 = 1 << 40;

/// A validated, looping packet-delivery trace. Cheap to clone (the timestamps are shared).
#[derive(Clone, PartialEq, Eq)]
pub struct DeliveryTrace {
    source: Arc<str>,
    timestamps_ms: Arc<[u64]>,
}

/// Why a trace was rejected. Every variant names the source and, where one exists, the line.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The trace file could not be read.
    #[error("{source_name}: cannot read trace: {error}")]
    Io {
        /// The path as given.
        source_name: String,
        /// The underlying error.
        #[source]
        error: std::io::Error,
    },
    /// A line is not a non-negative decimal integer.
    #[error("{source_name}:{line}: '{text}' is not a timestamp (expected whole milliseconds)")]
    NotAnInteger {
        /// File or other source name.
        source_name: String,
        /// 1-based line number.
        line: usize,
        /// The offending text (truncated to 40 characters).
        text: String,
    },
    /// A timestamp is too large to be a sensible trace.
    #[error("{source_name}:{line}: timestamp {value} ms is too large (limit {MAX_TIMESTAMP_MS})")]
    TooLarge {
        /// File or other source name.
        source_name: String,
        /// 1-based line number.
        line: usize,
        /// The value given.
        value: String,
    },
    /// A timestamp is smaller than the one before it.
    #[error(
        "{source_name}:{line}: timestamp {value} ms is smaller than the previous one ({previous} ms); \
         timestamps must not decrease"
    )]
    Decreasing {
        /// File or other source name.
        source_name: String,
        /// 1-based line number.
        line: usize,
        /// The timestamp on the line before.
        previous: u64,
        /// The timestamp on this line.
        value: u64,
    },
    /// The trace has no timestamps at all.
    #[error("{source_name}: trace is empty (expected one millisecond timestamp per line)")]
    Empty {
        /// File or other source name.
        source_name: String,
    },
    /// Every timestamp is zero: the trace has no duration to loop over.
    #[error("{source_name}: trace lasts zero milliseconds (its last timestamp must be > 0)")]
    ZeroDuration {
        /// File or other source name.
        source_name: String,
    },
}

impl DeliveryTrace {
    /// Parses trace text; `source_name` (usually the file name) is used in errors and logs.
    pub fn parse(text: &str, source_name: &str) -> Result<DeliveryTrace, TraceError> {
        let mut stamps = Vec::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let s = raw.trim();
            if s.is_empty() {
                continue;
            }
            if !s.bytes().all(|b| b.is_ascii_digit()) {
                return Err(TraceError::NotAnInteger {
                    source_name: source_name.to_string(),
                    line,
                    text: s.chars().take(40).collect(),
                });
            }
            let value = match s.parse::<u64>() {
                Ok(v) if v <= MAX_TIMESTAMP_MS => v,
                _ => {
                    return Err(TraceError::TooLarge {
                        source_name: source_name.to_string(),
                        line,
                        value: s.chars().take(40).collect(),
                    });
                }
            };
            if let Some(&previous) = stamps.last()
                && value < previous
            {
                return Err(TraceError::Decreasing {
                    source_name: source_name.to_string(),
                    line,
                    previous,
                    value,
                });
            }
            stamps.push(value);
        }
        Self::finish(stamps, source_name)
    }

    /// Reads and parses a trace file; errors name the path.
    pub fn from_file(path: impl AsRef<Path>) -> Result<DeliveryTrace, TraceError> {
        let path = path.as_ref();
        let name = path.display().to_string();
        let text = std::fs::read_to_string(path)
            .map_err(|error| TraceError::Io { source_name: name.clone(), error })?;
        Self::parse(&text, &name)
    }

    /// Builds a trace from timestamps already in memory, with the same checks as [`parse`]
    /// (line numbers in errors are 1-based indices into `timestamps_ms`).
    ///
    /// [`parse`]: DeliveryTrace::parse
    pub fn from_timestamps(
        timestamps_ms: Vec<u64>,
        source_name: &str,
    ) -> Result<DeliveryTrace, TraceError> {
        for (i, pair) in timestamps_ms.windows(2).enumerate() {
            if pair[1] < pair[0] {
                return Err(TraceError::Decreasing {
                    source_name: source_name.to_string(),
                    line: i + 2,
                    previous: pair[0],
                    value: pair[1],
                });
            }
        }
        if let Some(i) = timestamps_ms.iter().position(|&t| t > MAX_TIMESTAMP_MS) {
            return Err(TraceError::TooLarge {
                source_name: source_name.to_string(),
                line: i + 1,
                value: timestamps_ms[i].to_string(),
            });
        }
        Self::finish(timestamps_ms, source_name)
    }

    fn finish(stamps: Vec<u64>, source_name: &str) -> Result<DeliveryTrace, TraceError> {
        match stamps.last() {
            None => Err(TraceError::Empty { source_name: source_name.to_string() }),
            Some(0) => Err(TraceError::ZeroDuration { source_name: source_name.to_string() }),
            Some(_) => {
                Ok(DeliveryTrace { source: source_name.into(), timestamps_ms: stamps.into() })
            }
        }
    }

    /// Where the trace came from (file name or the name given to [`DeliveryTrace::parse`]).
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The timestamps of one period, in milliseconds.
    pub fn timestamps_ms(&self) -> &[u64] {
        &self.timestamps_ms
    }

    /// Number of delivery opportunities per period (lines in the file).
    pub fn opportunities_per_period(&self) -> usize {
        self.timestamps_ms.len()
    }

    /// The loop period: the last timestamp.
    pub fn period(&self) -> Duration {
        Duration::from_millis(self.period_ms())
    }

    fn period_ms(&self) -> u64 {
        // Never empty, by construction.
        self.timestamps_ms[self.timestamps_ms.len() - 1]
    }

    /// The long-run capacity: opportunities x 1504 bytes x 8 / period, rounded down.
    pub fn mean_rate(&self) -> BitRate {
        let bits = self.timestamps_ms.len() as u128 * OPPORTUNITY_BYTES as u128 * 8 * 1000;
        BitRate((bits / self.period_ms() as u128).min(u64::MAX as u128) as u64)
    }

    /// Time of the `k`-th opportunity (0-based, counting across loops) after the trace epoch.
    pub(crate) fn opportunity_offset(&self, k: u64) -> Duration {
        let n = self.timestamps_ms.len() as u64;
        let loops = k / n;
        let within = self.timestamps_ms[(k % n) as usize];
        // loops <= u64::MAX / n and period <= 2^40: compute in u128 and saturate.
        let ms = loops as u128 * self.period_ms() as u128 + within as u128;
        let ns = ms.saturating_mul(1_000_000).min(u64::MAX as u128) as u64;
        Duration::from_nanos(ns)
    }
}

impl fmt::Debug for DeliveryTrace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeliveryTrace")
            .field("source", &self.source)
            .field("opportunities_per_period", &self.timestamps_ms.len())
            .field("period_ms", &self.period_ms())
            .finish()
    }
}

impl fmt::Display for DeliveryTrace {
    /// The trace in Mahimahi's file format: one timestamp per line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for t in self.timestamps_ms.iter() {
            writeln!(f, "{t}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        DeliveryTrace::parse(text, "t.trace").unwrap_err().to_string()
    }

    #[test]
    fn parses_and_loops() {
        let t = DeliveryTrace::parse("5\r\n10\n\n", "t.trace").unwrap();
        assert_eq!(t.timestamps_ms(), &[5, 10]);
        assert_eq!(t.period(), Duration::from_millis(10));
        let offsets: Vec<u64> =
            (0..5).map(|k| t.opportunity_offset(k).as_millis() as u64).collect();
        assert_eq!(offsets, [5, 10, 15, 20, 25]);
    }

    #[test]
    fn mean_rate_of_one_line_per_ms() {
        let t = DeliveryTrace::parse("1\n", "one").unwrap();
        assert_eq!(t.mean_rate(), BitRate(12_032_000));
        let t = DeliveryTrace::from_timestamps((1..=1000).collect(), "1000").unwrap();
        assert_eq!(t.mean_rate(), BitRate(12_032_000));
    }

    #[test]
    fn errors_name_file_and_line() {
        assert_eq!(
            err("1\n2\nx3\n"),
            "t.trace:3: 'x3' is not a timestamp (expected whole milliseconds)"
        );
        assert_eq!(
            err("1\n-2\n"),
            "t.trace:2: '-2' is not a timestamp (expected whole milliseconds)"
        );
        assert_eq!(
            err("1.5\n"),
            "t.trace:1: '1.5' is not a timestamp (expected whole milliseconds)"
        );
        assert!(err("4\n\n3\n").starts_with("t.trace:3: timestamp 3 ms is smaller"));
        assert!(err("99999999999999999999999\n").starts_with("t.trace:1: timestamp 9999"));
        assert_eq!(
            err(""),
            "t.trace: trace is empty (expected one millisecond timestamp per line)"
        );
        assert_eq!(
            err("\n \n"),
            "t.trace: trace is empty (expected one millisecond timestamp per line)"
        );
        assert!(err("0\n0\n").contains("lasts zero milliseconds"));
    }

    #[test]
    fn from_timestamps_checks_the_same_things() {
        assert!(matches!(
            DeliveryTrace::from_timestamps(vec![3, 2], "v"),
            Err(TraceError::Decreasing { line: 2, .. })
        ));
        assert!(matches!(
            DeliveryTrace::from_timestamps(vec![], "v"),
            Err(TraceError::Empty { .. })
        ));
        assert!(matches!(
            DeliveryTrace::from_timestamps(vec![0], "v"),
            Err(TraceError::ZeroDuration { .. })
        ));
    }

    #[test]
    fn from_file_names_the_path() {
        let e = DeliveryTrace::from_file("/nonexistent/x.trace").unwrap_err().to_string();
        assert!(e.starts_with("/nonexistent/x.trace: cannot read trace"), "{e}");
    }

    #[test]
    fn display_round_trips() {
        let t = DeliveryTrace::from_timestamps(vec![0, 0, 3, 7], "v").unwrap();
        assert_eq!(DeliveryTrace::parse(&t.to_string(), "v").unwrap(), t);
    }
}
