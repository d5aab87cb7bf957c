//! The flight recorder: every selected connection's `tcp_info`, BBR model, queues and socket
//! memory, polled at a fixed interval and written only when something changed, into
//! compressed, size-rotated files; and the reader that replays them.
//!
//! - [`fields`]: what is recorded per connection, and the conversions from a dumped socket
//!   and back to a [`crate::Connection`].
//! - [`codec`]: the records (tick, full snapshot, change, gone) as bytes.
//! - [`file`](mod@file): the file format (header, zstd blocks), the rotating writer, the checked reader.
//! - [`recorder`]: the poll loop's state: one table entry per live connection.
//! - [`replay`]: connection state rebuilt from a file, full snapshots checked against it.
//!
//! Like M-Lab's tcp-info, a connection costs a record only when it changes; ages that grow
//! while nothing happens (`last_data_sent_ms`, ...) do not count as a change.

pub mod codec;
pub mod fields;
pub mod file;
pub mod recorder;
pub mod replay;

pub use fields::{FIELDS, Field, Identity, RawRow, Values};
pub use file::{Header, RecordError, RecordReader, RecordWriter, WriterOptions};
pub use recorder::{DEFAULT_SWEEP_EVERY, Recorder, RecorderOptions, RecorderStats, RunStats};
pub use replay::{Event, Replay, Tracked};
