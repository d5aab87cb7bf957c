//! `tcptail record`: the flight recorder. Polls every selected connection's `tcp_info`, BBR
//! model, queues and socket memory at `--interval` and writes what changed into a compressed
//! file rotated by size (`tcptail_diag::record` has the format). `tcptail record show` lists
//! a recording's connections, prints one connection's timeline (`--conn`, `--around`), the
//! closed connections' summaries (`--closed`), or exports either as CSV.
//!
//! With `--source auto` (the default) the recorder polls only the connections it tracks
//! (`tcptail_diag::bpf::tracked`: socket storage, new connections from the
//! `inet_sock_set_state` tracepoint, changes found in the kernel) where the host allows it
//! and the request is for established connections; otherwise, said in one line, and with
//! `--source bpf|sock-diag`, each poll walks the socket table.
//!
//! Closes are summarised from the kernel's destroy notifications when the recorder may join
//! their group (CAP_NET_ADMIN), else from the polls (see `tcptail_diag::record::recorder`).
//!
//! The recorder stops at `--duration` or on Ctrl-C (SIGINT), writing what it holds; killed
//! otherwise, it loses at most the last `--block-every` of records, and the reader reports
//! the cut. Exit codes: 1 when the dump, the file or a recording is unusable; 2 for bad flags.

use std::collections::HashMap;
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::{Args, Subcommand};
use tcptail_diag::DumpRequest;
use tcptail_diag::bpf::BpfError;
use tcptail_diag::bpf::tracked::TrackedDumper;
use tcptail_diag::closed::{ClosedSummary, DestroyListener};
use tcptail_diag::record::fields::{FIELDS, VOLATILE_MASK};
use tcptail_diag::record::file::rotated_files;
use tcptail_diag::record::{Event, Recorder, RecorderOptions, Replay, Tracked, WriterOptions};
use tcptail_diag::source::{SocketSource, SourceChoice};
use tcptail_units::{ByteSize, HumanDuration};

use crate::select::Selection;

/// Flags of `tcptail record`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct RecordArgs {
    #[command(subcommand)]
    show: Option<RecordCommand>,
    /// The recording; rotated files become FILE.1, FILE.2, ...
    #[arg(long, value_name = "FILE", required = true)]
    out: Option<PathBuf>,
    /// Poll interval.
    #[arg(long, default_value = "100ms")]
    interval: HumanDuration,
    /// Full snapshot of every connection this often (each file also starts with one).
    #[arg(long, default_value = "60s")]
    full_every: HumanDuration,
    /// Rotate the file at this size.
    #[arg(long, default_value = "64MiB")]
    max_size: ByteSize,
    /// Rotated files kept (older ones are deleted).
    #[arg(long, default_value_t = 8)]
    keep: usize,
    /// Records wait at most this long in memory before they are written.
    #[arg(long, default_value = "1s")]
    block_every: HumanDuration,
    /// With the tracked-sockets poll: read every tracked connection this often (a sweep);
    /// the polls between read only the connections the kernel marked changed. A change no
    /// tracepoint marks (setsockopt, a timer that sends nothing) is recorded within this
    /// period.
    #[arg(long, default_value = "1s")]
    sweep: HumanDuration,
    /// Stop after this long (default: until Ctrl-C).
    #[arg(long)]
    duration: Option<HumanDuration>,
    /// Which connections.
    #[command(flatten)]
    select: Selection,
}

#[derive(Debug, Subcommand)]
enum RecordCommand {
    /// List a recording's connections, print one's timeline, or export CSV.
    Show(ShowArgs),
}

/// Flags of `tcptail record show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// Recording files (FILE also reads its rotated FILE.N, oldest first, with --rotated).
    #[arg(required = true)]
    files: Vec<PathBuf>,
    /// Also read the rotated files FILE.N of each FILE, oldest first.
    #[arg(long)]
    rotated: bool,
    /// The connection: its socket cookie, or an address of either end (IP:PORT, IP, or :PORT).
    #[arg(long)]
    conn: Option<String>,
    /// Only records within --window of this time: UTC `2026-11-26T06:30:00.5Z` or
    /// `06:30:00` (the recording's day), or `+12.5s` after the recording's start.
    #[arg(long)]
    around: Option<String>,
    /// Half-width of the --around window.
    #[arg(long, default_value = "1s")]
    window: HumanDuration,
    /// CSV: one row per record of the selected connections, with every field's value after it
    /// (with --closed: one row per closed connection).
    #[arg(long)]
    csv: bool,
    /// The closed connections' summaries (lifetime, bytes, retransmissions, RTTs, limited
    /// times), one per close.
    #[arg(long)]
    closed: bool,
}

/// The columns of `record show --closed --csv`.
const CLOSED_COLUMNS: &str = "time,time_unix_ns,cookie,local,remote,cc,seen,lifetime_s,final_state,\
bytes_acked,bytes_received,bytes_retrans,total_retrans_segs,min_rtt_us,max_rtt_us,busy_time_us,\
rwnd_limited_us,sndbuf_limited_us";

fn closed_csv(wall: u64, c: &ClosedSummary) -> String {
    let o = |v: Option<u64>| v.map_or(String::new(), |v| v.to_string());
    let o32 = |v: Option<u32>| o(v.map(u64::from));
    format!(
        "{},{wall},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
        format_utc(wall),
        c.cookie,
        c.local,
        c.remote,
        c.cc.as_deref().unwrap_or(""),
        c.seen.as_str(),
        c.lifetime.map_or(String::new(), |d| format!("{:.6}", d.as_secs_f64())),
        c.final_state,
        o(c.bytes_acked),
        o(c.bytes_received),
        o(c.bytes_retrans),
        o32(c.total_retrans_segs),
        o32(c.min_rtt_us),
        o32(c.max_rtt_us),
        o(c.busy_time_us),
        o(c.rwnd_limited_us),
        o(c.sndbuf_limited_us),
    )
}

/// Runs `tcptail record` or `tcptail record show`.
pub fn run(args: RecordArgs) -> Result<ExitCode> {
    match args.show {
        Some(RecordCommand::Show(show)) => run_show(show),
        None => run_record(args),
    }
}

fn run_record(args: RecordArgs) -> Result<ExitCode> {
    let out = args.out.clone().context("--out FILE is required")?;
    let interval = args.interval.0;
    if interval < Duration::from_millis(1) {
        bail!("--interval {} is below the 1ms the recorder can keep", args.interval);
    }
    if args.sweep.0 < interval {
        bail!(
            "--sweep {} is shorter than --interval {}: a sweep is one of the polls (use a \
             --sweep of at least the interval)",
            args.sweep,
            args.interval
        );
    }
    if args.max_size.0 < 4096 {
        bail!("--max-size {} is too small for a file (at least 4KiB)", args.max_size);
    }
    let req = args.select.request()?;
    let mut poller = Poller::open(&args.select, &req)?;
    let options = RecorderOptions {
        interval,
        full_every: args.full_every.0,
        block_every: args.block_every.0,
        writer: WriterOptions { max_file_bytes: args.max_size.0, keep: args.keep, level: 3 },
    };
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    ctrlc::set_handler(move || flag.store(true, Ordering::SeqCst))
        .context("installing the Ctrl-C handler")?;
    let mut rec = Recorder::create(&out, options)?;
    rec.set_sweep_every(args.sweep.0);
    let listener = match &args.select.netns {
        Some(ns) => DestroyListener::in_netns(ns),
        None => DestroyListener::new(),
    };
    match listener {
        Ok(l) => rec.listen_for_closes(l, req.filter.clone()),
        Err(e) => eprintln!(
            "tcptail record: warning: the kernel's destroy notifications are not available ({}; \
             they need CAP_NET_ADMIN); closes are summarised from the polls",
            crate::chain_line(&e)
        ),
    }
    let mut warned = false;
    let sweeps = match poller {
        Poller::Tracked(_) => {
            format!("; every one of them each {}, only the changed ones between", args.sweep)
        }
        Poller::Table(_) => String::new(),
    };
    eprintln!(
        "tcptail record: polling every {} ({}) into {}{sweeps} (Ctrl-C stops)",
        args.interval,
        poller.describe(),
        out.display()
    );
    let started = Instant::now();
    let until = |d: HumanDuration| started.elapsed() >= d.0;
    let stop = || stop.load(Ordering::SeqCst) || args.duration.is_some_and(until);
    let dump_failed = |e: &tcptail_diag::DiagError| {
        if !warned {
            warned = true;
            eprintln!(
                "tcptail record: warning: a dump failed ({}); that poll is \
                 skipped (the count is printed at the end)",
                crate::chain_line(e)
            );
        }
    };
    let run = match &mut poller {
        Poller::Tracked(t) => rec.run_tracked(t, stop, dump_failed)?,
        Poller::Table(d) => rec.run(d, &req, stop, dump_failed)?,
    };
    let live = rec.live();
    let bytes = rec.file_bytes();
    let stats = rec.finish()?;
    eprintln!(
        "tcptail record: {} polls in {:.1} s ({} late, {} sweeps), {} sockets in the last, \
         {live} live; {} full and {} change records, {} gone, {} closes summarised ({} \
         notifications lost), {} rotations, {} dump errors; {} in the current file; CPU {:.2} % \
         of one core",
        stats.polls,
        run.wall.as_secs_f64(),
        run.late,
        stats.sweeps,
        stats.sockets,
        stats.full,
        stats.changes,
        stats.gone,
        stats.closed,
        stats.lost_closes,
        stats.rotations,
        run.dump_errors,
        ByteSize(bytes),
        run.cpu_percent(),
    );
    Ok(ExitCode::SUCCESS)
}

/// How the recorder polls.
enum Poller {
    /// Only the tracked connections.
    Tracked(Box<TrackedDumper>),
    /// A dump of the socket table.
    Table(SocketSource),
}

impl Poller {
    /// The tracked poll for `--source auto` where it can run, else the chosen dump source.
    fn open(select: &Selection, req: &DumpRequest) -> Result<Poller> {
        if select.source == SourceChoice::Auto {
            match TrackedDumper::new(req, select.netns.as_deref()) {
                Ok(t) => return Ok(Poller::Tracked(Box::new(t))),
                Err(e @ BpfError::Netns { .. }) => {
                    return Err(e).context("cannot open the tracked-sockets poll");
                }
                Err(e) => eprintln!(
                    "tcptail record: each poll walks the socket table: the tracked-sockets poll \
                     is unavailable ({})",
                    crate::chain_line(&e)
                ),
            }
        }
        Ok(Poller::Table(select.dumper("tcptail record")?))
    }

    /// What each poll reads, for the first line.
    fn describe(&self) -> String {
        match self {
            Poller::Tracked(_) => "tracked connections".into(),
            Poller::Table(d) => format!("the socket table, source {}", d.name()),
        }
    }
}

/// The recording files of `args`, each with its rotated predecessors when asked, oldest first
/// by start time.
pub fn recording_files(files: &[PathBuf], rotated: bool) -> Result<Vec<Replay>> {
    let mut all = Vec::new();
    for f in files {
        if rotated {
            all.extend(rotated_files(f).into_iter().map(|(_, p)| p));
        }
        all.push(f.clone());
    }
    let mut replays = all.iter().map(|p| Replay::open(p)).collect::<Result<Vec<_>, _>>()?;
    replays.sort_by_key(|r| r.header().start_wall_ns);
    Ok(replays)
}

/// Which connection `--conn` names.
#[derive(Debug, Clone, PartialEq, Eq)]
enum ConnMatch {
    Cookie(u64),
    Addr(SocketAddr),
    Ip(IpAddr),
    Port(u16),
}

impl ConnMatch {
    fn parse(s: &str) -> Result<ConnMatch> {
        if let Ok(c) = s.parse() {
            return Ok(ConnMatch::Cookie(c));
        }
        if let Ok(a) = s.parse() {
            return Ok(ConnMatch::Addr(a));
        }
        if let Ok(ip) = s.parse() {
            return Ok(ConnMatch::Ip(ip));
        }
        if let Some(Ok(p)) = s.strip_prefix(':').map(str::parse) {
            return Ok(ConnMatch::Port(p));
        }
        bail!("--conn {s:?}: want a socket cookie, IP:PORT, IP or :PORT")
    }

    fn matches(&self, t: &Tracked) -> bool {
        let c = t.connection();
        self.matches_ends(t.id.cookie, c.local, c.remote)
    }

    fn matches_ends(&self, cookie: u64, local: SocketAddr, remote: SocketAddr) -> bool {
        let ends = [local, remote];
        match self {
            ConnMatch::Cookie(k) => cookie == *k,
            ConnMatch::Addr(a) => ends.contains(a),
            ConnMatch::Ip(ip) => ends.iter().any(|e| e.ip() == *ip),
            ConnMatch::Port(p) => ends.iter().any(|e| e.port() == *p),
        }
    }
}

/// Days since 1970-01-01 of a civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The civil date of a day count since 1970-01-01.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

/// `2026-11-26T06:30:00.123Z` for ns since the Unix epoch.
pub fn format_utc(unix_ns: u64) -> String {
    let secs = (unix_ns / 1_000_000_000) as i64;
    let (y, mo, d) = civil_from_days(secs.div_euclid(86_400));
    let s = secs.rem_euclid(86_400);
    let ms = unix_ns % 1_000_000_000 / 1_000_000;
    format!("{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}.{ms:03}Z", s / 3600, s / 60 % 60, s % 60)
}

/// Parses `--around`: ns since the Unix epoch, given the recording's start.
pub fn parse_time(s: &str, start_wall_ns: u64) -> Result<u64> {
    let bad = || format!("--around {s:?}: want 2026-11-26T06:30:00Z, 06:30:00 or +12.5s");
    if let Some(offset) = s.strip_prefix('+') {
        let d = tcptail_units::parse_duration(offset).with_context(bad)?;
        return Ok(start_wall_ns + d.as_nanos() as u64);
    }
    let s = s.trim_end_matches('Z');
    let (day, clock) = match s.split_once(['T', ' ']) {
        Some((date, clock)) => {
            let parts: Vec<&str> = date.split('-').collect();
            let [y, m, d] = parts[..] else { bail!(bad()) };
            let (y, m, d) = (y.parse::<i64>(), m.parse::<u32>(), d.parse::<u32>());
            let (Ok(y), Ok(m @ 1..=12), Ok(d @ 1..=31)) = (y, m, d) else { bail!(bad()) };
            (days_from_civil(y, m, d), clock)
        }
        None => ((start_wall_ns / 1_000_000_000 / 86_400) as i64, s),
    };
    let parts: Vec<&str> = clock.split(':').collect();
    let [h, m, sec] = parts[..] else { bail!(bad()) };
    let (Ok(h @ 0..=23), Ok(m @ 0..=59), Ok(sec)) =
        (h.parse::<u64>(), m.parse::<u64>(), sec.parse::<f64>())
    else {
        bail!(bad())
    };
    if !(0.0..61.0).contains(&sec) {
        bail!(bad());
    }
    let secs = day * 86_400 + (h * 3600 + m * 60) as i64;
    let ns = u64::try_from(secs).with_context(bad)? * 1_000_000_000 + (sec * 1e9) as u64;
    Ok(ns)
}

/// One line of a timeline: the changed fields with their new values.
fn describe(t: &Tracked, mask: u128) -> String {
    let mut s = String::new();
    for (i, f) in FIELDS.iter().enumerate().filter(|(i, _)| mask >> i & 1 == 1) {
        if !s.is_empty() {
            s.push(' ');
        }
        match t.values.get(i) {
            Some(v) => s.push_str(&format!("{}={v}", f.name)),
            None => s.push_str(&format!("{}=-", f.name)),
        }
    }
    s
}

/// A connection's summary in the listing.
struct Listed {
    id: tcptail_diag::record::Identity,
    first_ns: u64,
    last_ns: u64,
    records: u64,
    gone: bool,
    closed: bool,
}

fn run_show(args: ShowArgs) -> Result<ExitCode> {
    let conn = args.conn.as_deref().map(ConnMatch::parse).transpose()?;
    let mut replays = recording_files(&args.files, args.rotated)?;
    let window = args.window.0.as_nanos() as u64;
    let around = match &args.around {
        Some(t) => {
            let start = replays.first().map_or(0, |r| r.header().start_wall_ns);
            Some(parse_time(t, start)?)
        }
        None => None,
    };
    let in_window = |wall: u64| around.is_none_or(|a| wall.abs_diff(a) <= window);
    let mut out = std::io::stdout().lock();
    let listing = conn.is_none() && !args.csv && !args.closed;
    if args.csv && args.closed {
        writeln!(out, "{CLOSED_COLUMNS}")?;
    } else if args.csv {
        write!(out, "time,time_unix_ns,cookie,event,local,remote,cc")?;
        for f in FIELDS {
            write!(out, ",{}", f.name)?;
        }
        writeln!(out)?;
    }
    let mut listed: HashMap<u64, Listed> = HashMap::new();
    let mut order = Vec::new();
    for replay in &mut replays {
        while let Some(event) = replay.next_event() {
            let event = event?;
            let wall = replay.header().wall_ns(replay.now_ns());
            if let Event::Closed(c) = &event {
                if let Some(l) = listed.get_mut(&c.cookie) {
                    l.closed = true;
                }
                let wanted =
                    conn.as_ref().is_none_or(|m| m.matches_ends(c.cookie, c.local, c.remote));
                if listing || !wanted || !in_window(wall) || (args.csv && !args.closed) {
                    continue;
                }
                if args.csv {
                    writeln!(out, "{}", closed_csv(wall, c))?;
                } else {
                    writeln!(out, "{} {} closed   {}", format_utc(wall), c.cookie, c.line())?;
                }
                continue;
            }
            if args.closed {
                continue;
            }
            let (cookie, kind, mask) = match &event {
                Event::Tick | Event::Closed(_) => continue,
                Event::Full { cookie, matched: None } => (*cookie, "open", u128::MAX),
                Event::Full { cookie, matched: Some(_) } => (*cookie, "snapshot", 0),
                Event::Change { cookie, mask } => (*cookie, "change", *mask),
                Event::Gone(t) => (t.id.cookie, "gone", 0),
            };
            let gone_state;
            let t = match &event {
                Event::Gone(t) => {
                    gone_state = t.as_ref().clone();
                    &gone_state
                }
                _ => replay.get(cookie).expect("a connection with a record is live"),
            };
            if listing {
                let e = listed.entry(cookie).or_insert_with(|| {
                    order.push(cookie);
                    Listed {
                        id: t.id.clone(),
                        first_ns: wall,
                        last_ns: wall,
                        records: 0,
                        gone: false,
                        closed: false,
                    }
                });
                e.last_ns = wall;
                e.records += 1;
                e.gone |= kind == "gone";
                continue;
            }
            if conn.as_ref().is_some_and(|c| !c.matches(t)) || !in_window(wall) {
                continue;
            }
            let c = t.connection();
            if args.csv {
                write!(
                    out,
                    "{},{wall},{cookie},{kind},{},{},{}",
                    format_utc(wall),
                    c.local,
                    c.remote,
                    c.cc.as_deref().unwrap_or("")
                )?;
                for i in 0..FIELDS.len() {
                    match t.values.get(i) {
                        Some(v) => write!(out, ",{v}")?,
                        None => write!(out, ",")?,
                    }
                }
                writeln!(out)?;
            } else {
                let what = match kind {
                    "open" => format!(
                        "open {} -> {} cc={} {}",
                        c.local,
                        c.remote,
                        c.cc.as_deref().unwrap_or("-"),
                        describe(t, t.values.present() & !VOLATILE_MASK)
                    ),
                    "snapshot" => "full snapshot (matches the changes before it)".into(),
                    "gone" => "gone (no longer in the dump)".into(),
                    _ => describe(t, mask),
                };
                writeln!(out, "{} {cookie} {kind:<8} {what}", format_utc(wall))?;
            }
        }
        if replay.mismatches > 0 {
            bail!(
                "{}: {} full snapshots disagree with the change records before them (a bug \
                 in the recorder that wrote it, or damage zstd's checksum missed)",
                replay.path().display(),
                replay.mismatches
            );
        }
    }
    if listing {
        writeln!(
            out,
            "{:<20} {:<45} {:<45} {:<6} {:<24} {:<24} {:>8} ENDED",
            "COOKIE", "LOCAL", "REMOTE", "CC", "FIRST", "LAST", "RECORDS"
        )?;
        for cookie in order {
            let l = &listed[&cookie];
            if !in_window(l.first_ns) && !in_window(l.last_ns) {
                continue;
            }
            writeln!(
                out,
                "{cookie:<20} {:<45} {:<45} {:<6} {:<24} {:<24} {:>8} {}",
                l.id.local.to_string(),
                l.id.remote.to_string(),
                l.id.cc.as_deref().unwrap_or("-"),
                format_utc(l.first_ns),
                format_utc(l.last_ns),
                l.records,
                match (l.closed, l.gone) {
                    (true, _) => "closed",
                    (false, true) => "gone",
                    _ => "no",
                },
            )?;
        }
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn utc_times_round_trip_through_the_civil_calendar() {
        for (text, ns) in [
            ("1970-01-01T00:00:00.000Z", 0),
            ("2026-11-26T06:30:00.500Z", 1_795_674_600_500_000_000),
            ("2000-02-29T23:59:59.000Z", 951_868_799_000_000_000),
        ] {
            assert_eq!(format_utc(ns), text);
            assert_eq!(parse_time(text, 0).unwrap(), ns, "{text}");
        }
        let start = parse_time("2026-11-26T06:00:00Z", 0).unwrap();
        assert_eq!(parse_time("06:30:00", start).unwrap(), start + 1800 * 1_000_000_000);
        assert_eq!(parse_time("+1.5s", start).unwrap(), start + 1_500_000_000);
        for bad in ["6:30", "25:00:00", "2026-13-01T00:00:00Z", "+3", "yesterday"] {
            assert!(parse_time(bad, start).is_err(), "{bad}");
        }
    }

    #[test]
    fn conn_accepts_cookies_addresses_and_ports() {
        assert_eq!(ConnMatch::parse("123").unwrap(), ConnMatch::Cookie(123));
        assert!(matches!(ConnMatch::parse("127.0.0.1:80").unwrap(), ConnMatch::Addr(_)));
        assert!(matches!(ConnMatch::parse("[::1]:80").unwrap(), ConnMatch::Addr(_)));
        assert!(matches!(ConnMatch::parse("10.0.0.1").unwrap(), ConnMatch::Ip(_)));
        assert_eq!(ConnMatch::parse(":443").unwrap(), ConnMatch::Port(443));
        assert!(ConnMatch::parse("host").is_err());
    }
}
