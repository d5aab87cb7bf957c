//! Recording files: a header, then zstd-compressed blocks of records; written with size
//! rotation, read back with every offset checked.
//!
//! ```text
//! header  "TCPTREC1"  len:u32  version:u16  start_wall_ns:u64  start_mono_ns:u64
//!         interval_ns:u64  full_every_ns:u64  fields:u16  (name_len:u8 name)×fields
//! block   "TRBK"  compressed_len:u32  raw_len:u32  zstd frame (with its checksum)
//! ```
//!
//! Integers are little endian. A block is one zstd frame of whole records (see
//! [`super::codec`]), written with one `write` call, so a recorder killed mid-write leaves at
//! most one cut-short block at the end, which the reader reports with its offset after
//! handing out every record before it. Each file starts with a full snapshot of every
//! connection (it is readable alone); rotation renames `FILE` to `FILE.N` (N counting up)
//! and keeps the newest `keep` of those.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use super::codec::{DecodeError, Decoder, Record};
use super::fields::{FIELDS, field_index};

const MAGIC: &[u8; 8] = b"TCPTREC1";
const BLOCK_MAGIC: &[u8; 4] = b"TRBK";
const VERSION: u16 = 1;
/// A block larger than this (either way) is corrupt: the writer never makes one.
const MAX_BLOCK: u32 = 64 << 20;
/// A header larger than this is corrupt.
const MAX_HEADER: u32 = 64 << 10;

/// Why a recording could not be written or read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecordError {
    /// Opening, reading or writing a file failed.
    #[error("{}: {what}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        what: &'static str,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A poll's sock_diag dump failed.
    #[error("sock_diag dump failed")]
    Dump(#[from] crate::DiagError),
    /// The file is not a recording, or is damaged at `offset`.
    #[error(
        "{}: at byte {offset}: {what} (not a tcptail recording, or damaged there; records \
         before that offset were read)",
        path.display()
    )]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Byte offset in the file of the header or block that is bad.
        offset: u64,
        /// What is wrong.
        what: String,
    },
}

/// What a file's header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Wall-clock time of the start, ns since the Unix epoch.
    pub start_wall_ns: u64,
    /// `CLOCK_MONOTONIC` at the start, ns; ticks count from it.
    pub start_mono_ns: u64,
    /// The poll interval.
    pub interval_ns: u64,
    /// The full-snapshot period.
    pub full_every_ns: u64,
    /// The file's field names, in its index order.
    pub fields: Vec<String>,
}

impl Header {
    /// A header for this build's fields.
    pub fn new(
        start_wall_ns: u64,
        start_mono_ns: u64,
        interval_ns: u64,
        full_every_ns: u64,
    ) -> Self {
        Header {
            start_wall_ns,
            start_mono_ns,
            interval_ns,
            full_every_ns,
            fields: FIELDS.iter().map(|f| f.name.to_owned()).collect(),
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&VERSION.to_le_bytes());
        for v in [self.start_wall_ns, self.start_mono_ns, self.interval_ns, self.full_every_ns] {
            body.extend_from_slice(&v.to_le_bytes());
        }
        body.extend_from_slice(&(self.fields.len() as u16).to_le_bytes());
        for name in &self.fields {
            body.push(name.len() as u8);
            body.extend_from_slice(name.as_bytes());
        }
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&body);
        out
    }

    /// Wall-clock ns of monotonic time `mono_ns`.
    pub fn wall_ns(&self, mono_ns: u64) -> u64 {
        self.start_wall_ns.wrapping_add(mono_ns.wrapping_sub(self.start_mono_ns))
    }
}

/// How the writer rotates and compresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriterOptions {
    /// Rotate once the current file reaches this many bytes.
    pub max_file_bytes: u64,
    /// Rotated files kept (the oldest beyond are deleted).
    pub keep: usize,
    /// zstd level.
    pub level: i32,
}

impl Default for WriterOptions {
    fn default() -> Self {
        WriterOptions { max_file_bytes: 64 << 20, keep: 8, level: 3 }
    }
}

/// Writes records into blocks of the current file and rotates it.
pub struct RecordWriter {
    path: PathBuf,
    file: File,
    written: u64,
    options: WriterOptions,
    compressor: zstd::bulk::Compressor<'static>,
    compressed: Vec<u8>,
    /// Records of the block being built.
    pub records: Vec<u8>,
    /// Suffix the next rotated file gets.
    next_suffix: u64,
}

impl std::fmt::Debug for RecordWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordWriter")
            .field("path", &self.path)
            .field("written", &self.written)
            .finish()
    }
}

fn io_err(path: &Path, what: &'static str, source: io::Error) -> RecordError {
    RecordError::Io { path: path.to_owned(), what, source }
}

/// `FILE.N` for suffix `n`.
pub fn rotated_path(path: &Path, n: u64) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{n}"));
    PathBuf::from(s)
}

/// The rotated files of `path` that exist, oldest first, with their suffixes.
pub fn rotated_files(path: &Path) -> Vec<(u64, PathBuf)> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else { return Vec::new() };
    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    let prefix = format!("{}.", name.to_string_lossy());
    let mut found: Vec<(u64, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_string_lossy().strip_prefix(&prefix)?.parse().ok()?;
            Some((n, rotated_path(path, n)))
        })
        .collect();
    found.sort();
    found
}

impl RecordWriter {
    /// Creates (truncates) `path` and writes `header`. Rotated files of an earlier recording
    /// to the same path are kept; new ones are numbered after them.
    pub fn create(
        path: &Path,
        header: &Header,
        options: WriterOptions,
    ) -> Result<Self, RecordError> {
        let next_suffix = rotated_files(path).last().map_or(1, |(n, _)| n + 1);
        let compressor = zstd::bulk::Compressor::new(options.level)
            .and_then(|mut c| c.include_checksum(true).map(|()| c))
            .map_err(|e| io_err(path, "setting up zstd", e))?;
        let mut w = RecordWriter {
            path: path.to_owned(),
            file: File::create(path).map_err(|e| io_err(path, "creating the recording", e))?,
            written: 0,
            options,
            compressor,
            compressed: Vec::new(),
            records: Vec::with_capacity(1 << 20),
            next_suffix,
        };
        w.write_all(&header.encode())?;
        Ok(w)
    }

    fn write_all(&mut self, bytes: &[u8]) -> Result<(), RecordError> {
        self.file.write_all(bytes).map_err(|e| io_err(&self.path, "writing the recording", e))?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    /// Compresses the pending records into one block and writes it (nothing when empty).
    pub fn flush_block(&mut self) -> Result<(), RecordError> {
        if self.records.is_empty() {
            return Ok(());
        }
        let bound = zstd::zstd_safe::compress_bound(self.records.len());
        let mut block = std::mem::take(&mut self.compressed);
        block.clear();
        block.extend_from_slice(BLOCK_MAGIC);
        block.resize(12 + bound, 0);
        let n = self
            .compressor
            .compress_to_buffer(&self.records, &mut block[12..])
            .map_err(|e| io_err(&self.path, "compressing a block", e))?;
        block.truncate(12 + n);
        block[4..8].copy_from_slice(&(n as u32).to_le_bytes());
        block[8..12].copy_from_slice(&(self.records.len() as u32).to_le_bytes());
        let result = self.write_all(&block);
        self.compressed = block;
        self.records.clear();
        result
    }

    /// Bytes written to the current file.
    pub fn file_bytes(&self) -> u64 {
        self.written
    }

    /// Whether the current file reached its size limit.
    pub fn full(&self) -> bool {
        self.written >= self.options.max_file_bytes
    }

    /// Flushes, renames the current file to `FILE.N`, deletes the oldest rotated files
    /// beyond `keep`, and starts a new file with `header`.
    pub fn rotate(&mut self, header: &Header) -> Result<(), RecordError> {
        self.flush_block()?;
        self.file.sync_data().map_err(|e| io_err(&self.path, "syncing the recording", e))?;
        let to = rotated_path(&self.path, self.next_suffix);
        std::fs::rename(&self.path, &to)
            .map_err(|e| io_err(&self.path, "rotating the recording", e))?;
        self.next_suffix += 1;
        let old = rotated_files(&self.path);
        for (_, p) in old.iter().take(old.len().saturating_sub(self.options.keep)) {
            std::fs::remove_file(p)
                .map_err(|e| io_err(p, "deleting an old rotated recording", e))?;
        }
        self.file = File::create(&self.path)
            .map_err(|e| io_err(&self.path, "creating the recording", e))?;
        self.written = 0;
        self.write_all(&header.encode())
    }

    /// Writes the pending records and syncs the file.
    pub fn finish(mut self) -> Result<(), RecordError> {
        self.flush_block()?;
        self.file.sync_data().map_err(|e| io_err(&self.path, "syncing the recording", e))
    }
}

/// Reads one recording file's records in order.
pub struct RecordReader {
    path: PathBuf,
    input: io::BufReader<File>,
    /// File offset of the next block.
    offset: u64,
    header: Header,
    /// File field index → index in [`FIELDS`] (`None`: a field this build does not know).
    map: Vec<Option<usize>>,
    block: Vec<u8>,
    compressed: Vec<u8>,
    pos: usize,
    block_offset: u64,
    failed: bool,
}

impl std::fmt::Debug for RecordReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordReader")
            .field("path", &self.path)
            .field("offset", &self.offset)
            .finish()
    }
}

impl RecordReader {
    /// Opens `path` and checks its header.
    pub fn open(path: &Path) -> Result<RecordReader, RecordError> {
        let file = File::open(path).map_err(|e| io_err(path, "opening the recording", e))?;
        let mut input = io::BufReader::with_capacity(1 << 16, file);
        let corrupt = |offset: u64, what: String| RecordError::Corrupt {
            path: path.to_owned(),
            offset,
            what,
        };
        let mut head = [0u8; 12];
        let got = read_up_to(&mut input, &mut head)
            .map_err(|e| io_err(path, "reading the recording", e))?;
        if got < 8 || &head[..8] != MAGIC {
            return Err(corrupt(0, "no TCPTREC1 magic".into()));
        }
        if got < 12 {
            return Err(corrupt(8, "header cut short".into()));
        }
        let len = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
        if len > MAX_HEADER {
            return Err(corrupt(8, format!("header length {len} is implausible")));
        }
        let mut body = vec![0u8; len as usize];
        let got = read_up_to(&mut input, &mut body)
            .map_err(|e| io_err(path, "reading the recording", e))?;
        if got < body.len() {
            return Err(corrupt(12, format!("header cut short ({got} of {len} bytes)")));
        }
        let header = parse_header(&body).map_err(|(at, what)| corrupt(12 + at as u64, what))?;
        let map = header.fields.iter().map(|n| field_index(n)).collect();
        Ok(RecordReader {
            path: path.to_owned(),
            input,
            offset: 12 + u64::from(len),
            header,
            map,
            block: Vec::new(),
            compressed: Vec::new(),
            pos: 0,
            block_offset: 0,
            failed: false,
        })
    }

    /// The file's header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Maps a file field index to this build's ([`FIELDS`]); `None` for an unknown field.
    pub fn field(&self, file_index: usize) -> Option<usize> {
        self.map.get(file_index).copied().flatten()
    }

    /// An error naming the current block: its records contradict each other.
    pub fn inconsistent(&mut self, what: String) -> RecordError {
        let at = self.block_offset;
        self.corrupt(at, what)
    }

    fn corrupt(&mut self, offset: u64, what: String) -> RecordError {
        self.failed = true;
        RecordError::Corrupt { path: self.path.clone(), offset, what }
    }

    /// Reads the next block; `Ok(false)` at a clean end of file.
    fn next_block(&mut self) -> Result<bool, RecordError> {
        let at = self.offset;
        let mut head = [0u8; 12];
        let got =
            read_up_to(&mut self.input, &mut head).map_err(|e| io_err(&self.path, "reading", e))?;
        if got == 0 {
            return Ok(false);
        }
        if got < 12 {
            return Err(self.corrupt(at, format!("block header cut short ({got} of 12 bytes)")));
        }
        if &head[..4] != BLOCK_MAGIC {
            return Err(self.corrupt(at, "no block magic TRBK".into()));
        }
        let clen = u32::from_le_bytes(head[4..8].try_into().expect("4 bytes"));
        let rlen = u32::from_le_bytes(head[8..12].try_into().expect("4 bytes"));
        if clen > MAX_BLOCK || rlen > MAX_BLOCK {
            return Err(self.corrupt(at, format!("block sizes {clen}/{rlen} are implausible")));
        }
        self.compressed.resize(clen as usize, 0);
        let got = read_up_to(&mut self.input, &mut self.compressed)
            .map_err(|e| io_err(&self.path, "reading", e))?;
        if got < clen as usize {
            return Err(self.corrupt(
                at,
                format!("block cut short ({got} of {clen} bytes; was the recorder killed?)"),
            ));
        }
        self.block.resize(rlen as usize, 0);
        let n = zstd::bulk::decompress_to_buffer(&self.compressed, &mut self.block[..]);
        match n {
            Ok(n) if n == rlen as usize => {}
            Ok(n) => {
                return Err(self.corrupt(at, format!("block holds {n} bytes, header says {rlen}")));
            }
            Err(e) => return Err(self.corrupt(at, format!("block does not decompress: {e}"))),
        }
        self.offset += 12 + u64::from(clen);
        self.block_offset = at;
        self.pos = 0;
        Ok(true)
    }

    /// The next record (field indices are the file's: see [`RecordReader::field`]), `None`
    /// at the end; after an error, `None`.
    pub fn next_record(&mut self) -> Option<Result<Record, RecordError>> {
        if self.failed {
            return None;
        }
        while self.pos >= self.block.len() {
            match self.next_block() {
                Ok(true) => {}
                Ok(false) => return None,
                Err(e) => return Some(Err(e)),
            }
        }
        let mut d = Decoder::new(&self.block[self.pos..], self.map.len());
        let result = d.next_record().expect("a record is pending");
        match result {
            Ok(r) => {
                self.pos += d.position();
                Some(Ok(r))
            }
            Err(DecodeError { offset, what }) => {
                let at = self.block_offset;
                let inner = self.pos + offset;
                Some(
                    Err(self.corrupt(at, format!("{what} at byte {inner} of the block's records"))),
                )
            }
        }
    }
}

fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match r.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

fn parse_header(b: &[u8]) -> Result<Header, (usize, String)> {
    let short = |at: usize| (at, "header cut short".to_owned());
    let u16_at = |at: usize| b.get(at..at + 2).map(|x| u16::from_le_bytes([x[0], x[1]]));
    let u64_at =
        |at: usize| b.get(at..at + 8).map(|x| u64::from_le_bytes(x.try_into().expect("8")));
    let version = u16_at(0).ok_or_else(|| short(0))?;
    if version != VERSION {
        return Err((0, format!("format version {version}, this build reads {VERSION}")));
    }
    let word = |i: usize| u64_at(2 + 8 * i).ok_or_else(|| short(2 + 8 * i));
    let (start_wall_ns, start_mono_ns, interval_ns, full_every_ns) =
        (word(0)?, word(1)?, word(2)?, word(3)?);
    let count = u16_at(34).ok_or_else(|| short(34))?;
    let mut at = 36;
    let mut fields = Vec::with_capacity(usize::from(count));
    for _ in 0..count {
        let len = usize::from(*b.get(at).ok_or_else(|| short(at))?);
        let name = b.get(at + 1..at + 1 + len).ok_or_else(|| short(at))?;
        let name =
            std::str::from_utf8(name).map_err(|_| (at, "field name not UTF-8".to_owned()))?;
        fields.push(name.to_owned());
        at += 1 + len;
    }
    Ok(Header { start_wall_ns, start_mono_ns, interval_ns, full_every_ns, fields })
}
