//! [`MahimahiLog`]: an [`Observer`] that writes Mahimahi's `mm-link --*-log` format, so
//! `mm-throughput-graph`, `mm-delay-graph` and the many scripts built on them read our runs.
//!
//! The format, as `src/frontend/link_queue.cc` writes it (all times whole milliseconds):
//!
//! ```text
//! # mahimahi mm-link (uplink) [trace.up] > up.log
//! # command line: ...
//! # queue: droptail [bytes=375000]
//! # init timestamp: 1700000000000
//! # base timestamp: 0
//! 12 + 1500            arrival: time, bytes
//! 13 # 1504            delivery opportunity: time, capacity (trace mode, used or not)
//! 13 - 1500 1          departure: time, bytes, departure ms - arrival ms
//! 20 d 1 1500          drop: time, packets, bytes
//! ```
//!
//! `init timestamp` is the wall-clock time (ms since the Unix epoch) the adapter supplies;
//! event times are milliseconds since [`LogHeader::origin`], rounded down, and the delay column
//! is the difference of the two rounded times, as Mahimahi computes it. Every opportunity gets a
//! `#` line (Mahimahi's capacity series), not only unused ones. Drop lines follow `mm-link`'s
//! `d <packets> <bytes>` and are written per packet, for every drop reason (Mahimahi logs only
//! tail drops there; CoDel drops and random loss are ours). Stock `mm-throughput-graph` dies on
//! `d` lines ("Unknown event type"), so [`MahimahiLog::without_drop_lines`] exists for it.
//!
//! Writing never panics: the first I/O error is kept, later events are ignored, and
//! [`MahimahiLog::finish`] returns it.

use std::io::{self, Write};

use crate::event::{Event, Observer};
use crate::spec::{DirectionSpec, Rate};
use crate::time::Nanos;

/// The header lines of a Mahimahi log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogHeader {
    /// `uplink` or `downlink` in Mahimahi; any label.
    pub link_name: String,
    /// The trace file, or a description of the rate.
    pub source: String,
    /// Where the log is written (informational).
    pub log_name: String,
    /// The command line that started the run, if known.
    pub command_line: Option<String>,
    /// Queue description, e.g. `droptail [bytes=375000]`.
    pub queue: String,
    /// Wall-clock time of `origin`, in ms since the Unix epoch (the adapter knows it; the core
    /// never reads clocks).
    pub init_timestamp_ms: u64,
    /// The instant log times are counted from.
    pub origin: Nanos,
    /// When the link started (written as `# base timestamp:`, ms since `origin`; graphing
    /// scripts subtract it).
    pub base: Nanos,
}

impl LogHeader {
    /// A header describing `spec`, with origin and base at `Nanos::ZERO`; set
    /// `init_timestamp_ms`, `log_name` and `command_line` as known.
    pub fn for_direction(link_name: &str, spec: &DirectionSpec) -> LogHeader {
        let source = match &spec.rate {
            Rate::Constant(r) => format!("constant {r}"),
            Rate::Trace(t) => t.source().to_string(),
        };
        LogHeader {
            link_name: link_name.to_string(),
            source,
            log_name: "-".to_string(),
            command_line: None,
            queue: spec.queue.to_string(),
            init_timestamp_ms: 0,
            origin: Nanos::ZERO,
            base: Nanos::ZERO,
        }
    }
}

/// Writes events in Mahimahi's log format.
#[derive(Debug)]
pub struct MahimahiLog<W: Write> {
    out: W,
    origin: Nanos,
    drop_lines: bool,
    error: Option<io::Error>,
}

impl<W: Write> MahimahiLog<W> {
    /// Writes the header and returns the log. Wrap files in a `BufWriter`: one line per event.
    pub fn new(mut out: W, header: &LogHeader) -> io::Result<MahimahiLog<W>> {
        writeln!(
            out,
            "# mahimahi mm-link ({}) [{}] > {}",
            header.link_name, header.source, header.log_name
        )?;
        if let Some(cmd) = &header.command_line {
            writeln!(out, "# command line: {cmd}")?;
        }
        writeln!(out, "# queue: {}", header.queue)?;
        writeln!(out, "# init timestamp: {}", header.init_timestamp_ms)?;
        writeln!(out, "# base timestamp: {}", (header.base - header.origin).as_millis())?;
        Ok(MahimahiLog { out, origin: header.origin, drop_lines: true, error: None })
    }

    /// Omits `d` lines (for stock `mm-throughput-graph`, which rejects them).
    pub fn without_drop_lines(mut self) -> MahimahiLog<W> {
        self.drop_lines = false;
        self
    }

    /// The first write error, if any.
    pub fn error(&self) -> Option<&io::Error> {
        self.error.as_ref()
    }

    /// Flushes and returns the writer, or the first error met.
    pub fn finish(mut self) -> io::Result<W> {
        if let Some(e) = self.error.take() {
            return Err(e);
        }
        self.out.flush()?;
        Ok(self.out)
    }

    fn ms(&self, t: Nanos) -> u64 {
        (t.as_nanos().saturating_sub(self.origin.as_nanos())) / 1_000_000
    }

    fn write_event(&mut self, event: &Event) -> io::Result<()> {
        match *event {
            Event::Arrival { at, len, .. } => writeln!(self.out, "{} + {len}", self.ms(at)),
            Event::Departure { at, len, arrival, .. } => {
                let (dep, arr) = (self.ms(at), self.ms(arrival));
                writeln!(self.out, "{dep} - {len} {}", dep.saturating_sub(arr))
            }
            Event::Opportunity { at, capacity, .. } => {
                writeln!(self.out, "{} # {capacity}", self.ms(at))
            }
            Event::Drop { at, len, .. } if self.drop_lines => {
                writeln!(self.out, "{} d 1 {len}", self.ms(at))
            }
            // Mahimahi's format has no drop reasons (without drop lines) and no marks.
            Event::Drop { .. } | Event::Mark { .. } | Event::PathChange { .. } => Ok(()),
        }
    }
}

impl<W: Write> Observer for MahimahiLog<W> {
    fn on_event(&mut self, event: &Event) {
        if self.error.is_none()
            && let Err(e) = self.write_event(event)
        {
            self.error = Some(e);
        }
    }
}
