//! `tcptail top`: a refreshing terminal table of the matched TCP connections, sorted by RTT,
//! estimated send-queue delay or retransmits; `--once --json` prints one snapshot for scripts.
//!
//! In the live view, the keys `r`, `d` and `t` re-sort by RTT, delay or retransmits; `q` (or
//! Ctrl-C) quits and restores the terminal.
//!
//! Connections are chosen by a selector file and/or `--port`/`--dport`/`--sport`/`--dst`,
//! compiled into a kernel-side filter, so only matching sockets are read. Without any, all
//! established connections are shown (`--all-states` adds listeners, TIME_WAIT and the rest;
//! the STATE column tells them apart). The table shows 40 rows unless `--limit` says
//! otherwise and says how many it left out; `--json` lists every connection unless `--limit`
//! is given. Exit codes: 1 when the dump fails, 2 for bad flags.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, ValueEnum};
use tcptail_diag::filter::Filter;
use tcptail_diag::record::file::rotated_files;
use tcptail_diag::record::replay::Recording;
use tcptail_diag::source::SocketSource;
use tcptail_diag::{Connection, DumpRequest, SockId};

use crate::record::{format_utc, parse_time};
use crate::select::Selection;

/// Sort order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SortKey {
    /// Smoothed RTT, highest first.
    Rtt,
    /// Estimated send-queue delay, highest first.
    Delay,
    /// Total retransmitted segments, highest first.
    Retrans,
}

/// Flags of `tcptail top`.
#[derive(Debug, Args)]
pub struct TopArgs {
    /// Which connections.
    #[command(flatten)]
    select: Selection,
    /// Sort order.
    #[arg(long, value_enum, default_value = "delay")]
    sort: SortKey,
    /// Rows shown (0: all). Default: 40 in the table, every connection with --json (a
    /// truncated table says how many it left out).
    #[arg(long)]
    limit: Option<usize>,
    /// Refresh interval in milliseconds.
    #[arg(long, default_value_t = 1000)]
    interval_ms: u64,
    /// Print one snapshot and exit.
    #[arg(long)]
    once: bool,
    /// JSON output (one array per snapshot).
    #[arg(long)]
    json: bool,
    /// Replay a recording of `tcptail record` instead of reading live sockets (FILE's rotated
    /// FILE.N are read too); the selection flags filter the recorded connections.
    #[arg(long, value_name = "FILE", conflicts_with = "netns")]
    replay: Option<PathBuf>,
    /// With --replay: the time to start at (as `record show --around` takes it); with --once,
    /// the time to show (default: the end of the recording).
    #[arg(long, requires = "replay")]
    at: Option<String>,
    /// With --replay: recording time per refresh, as a multiple of --interval-ms.
    #[arg(long, default_value_t = 1.0, requires = "replay")]
    speed: f64,
}

/// Where the connections come from: the kernel, or a recording.
enum Source {
    Live { dumper: SocketSource, req: DumpRequest },
    Replay { recording: Recording, filter: Option<Filter>, all_states: bool, at: u64, step: u64 },
}

impl Source {
    fn open(args: &TopArgs) -> Result<Source> {
        let Some(file) = &args.replay else {
            let dumper = args.select.dumper("tcptail top")?;
            return Ok(Source::Live { dumper, req: args.select.request()? });
        };
        anyhow::ensure!(
            args.speed.is_finite() && args.speed > 0.0,
            "--speed {} must be a positive number",
            args.speed
        );
        let mut files: Vec<PathBuf> = rotated_files(file).into_iter().map(|(_, p)| p).collect();
        files.push(file.clone());
        let recording = Recording::open(&files)?;
        let start = recording.start_wall_ns();
        let at = match &args.at {
            Some(t) => parse_time(t, start)?,
            None if args.once => u64::MAX,
            None => start,
        };
        let step = (args.interval_ms.max(50) as f64 * 1e6 * args.speed) as u64;
        let filter = args.select.filter()?;
        Ok(Source::Replay { recording, filter, all_states: args.select.all_states, at, step })
    }

    /// The connections of the next frame, and a line saying where a replay is.
    fn frame(&mut self) -> Result<(Vec<Connection>, Option<String>)> {
        match self {
            Source::Live { dumper, req } => Ok((dumper.collect(req)?, None)),
            Source::Replay { recording, filter, all_states, at, step } => {
                recording.advance_to_wall(*at)?;
                *at = at.saturating_add(*step);
                let conns = recording
                    .connections()
                    .filter(|t| {
                        let id = SockId {
                            sport: t.id.local.port(),
                            dport: t.id.remote.port(),
                            src: t.id.local.ip(),
                            dst: t.id.remote.ip(),
                            ifindex: 0,
                            cookie: t.id.cookie,
                        };
                        filter.as_ref().is_none_or(|f| f.matches(&id))
                    })
                    .map(|t| t.connection())
                    .filter(|c| *all_states || c.state == "ESTABLISHED")
                    .collect();
                let file = recording.current().map(|r| r.path().display().to_string());
                let line = format!(
                    "replaying {} at {}{}",
                    file.unwrap_or_default(),
                    format_utc(recording.now_wall_ns()),
                    if recording.ended() { " (end of the recording)" } else { "" }
                );
                Ok((conns, Some(line)))
            }
        }
    }

    fn ended(&self) -> bool {
        matches!(self, Source::Replay { recording, .. } if recording.ended())
    }
}

/// Rows of the table when `--limit` is not given.
const DEFAULT_ROWS: usize = 40;

/// Runs `tcptail top`.
pub fn run(args: TopArgs) -> Result<ExitCode> {
    let mut source = Source::open(&args)?;
    let tty = std::io::stdout().is_terminal();
    let mut key = args.sort;
    // The live view takes single keys: r (RTT), d (queue delay), t (retransmits), q (quit).
    let (tx, commands) = std::sync::mpsc::channel::<char>();
    // Kept for the whole loop so `recv_timeout` waits even when no key is ever read.
    let _keep = tx.clone();
    let _keys = if args.once { None } else { Some(crate::keys::Keys::start(tx)?) };
    loop {
        let (mut conns, replaying) = source.frame()?;
        sort(&mut conns, key);
        let total = conns.len();
        let limit = args.limit.unwrap_or(if args.json { 0 } else { DEFAULT_ROWS });
        if limit > 0 {
            conns.truncate(limit);
        }
        let mut out = std::io::stdout().lock();
        if args.json {
            serde_json::to_writer_pretty(&mut out, &conns)?;
            writeln!(out)?;
        } else {
            if tty && !args.once {
                write!(out, "\x1b[2J\x1b[H")?;
            }
            if let Some(line) = &replaying {
                writeln!(out, "{line}")?;
            }
            write!(out, "{}", table(&conns, key))?;
            if conns.len() < total {
                writeln!(out, "({} more not shown: --limit 0 shows all)", total - conns.len())?;
            }
            if !args.once {
                writeln!(out, "[r]tt [d]elay re[t]rans [q]uit")?;
            }
        }
        out.flush()?;
        if args.once || source.ended() {
            return Ok(ExitCode::SUCCESS);
        }
        let wait = Duration::from_millis(args.interval_ms.max(50));
        if let Ok(cmd) = commands.recv_timeout(wait) {
            match cmd {
                'r' => key = SortKey::Rtt,
                'd' => key = SortKey::Delay,
                't' => key = SortKey::Retrans,
                crate::keys::QUIT => return Ok(ExitCode::SUCCESS),
                _ => {}
            }
        }
    }
}

fn sort(conns: &mut [Connection], key: SortKey) {
    match key {
        SortKey::Rtt => conns.sort_by(|a, b| b.rtt_secs().total_cmp(&a.rtt_secs())),
        SortKey::Delay => {
            conns.sort_by(|a, b| b.queue_delay_secs().total_cmp(&a.queue_delay_secs()))
        }
        SortKey::Retrans => conns.sort_by_key(|c| std::cmp::Reverse(c.retrans())),
    }
}

fn ms(v: Option<f64>) -> String {
    v.map_or("-".into(), |v| format!("{:.3}", v * 1e3))
}

/// Renders the table (pure, for tests).
pub fn table(conns: &[Connection], key: SortKey) -> String {
    let mut s = format!(
        "tcptail top: {} connections, sorted by {key:?} (--sort rtt|delay|retrans)\n\
         {:<24} {:<24} {:<14} {:<6} {:>9} {:>9} {:>6} {:>9} {:>10} {:>8} {:>10} {:<15}\n",
        conns.len(),
        "LOCAL",
        "REMOTE",
        "STATE",
        "CC",
        "RTT_MS",
        "MINRTT_MS",
        "CWND",
        "UNSENT_B",
        "SQDELAY_MS",
        "RETRANS",
        "DELIV_Mbps",
        "BBR_PHASE",
    );
    for c in conns {
        let i = c.info.as_ref();
        s.push_str(&format!(
            "{:<24} {:<24} {:<14} {:<6} {:>9} {:>9} {:>6} {:>9} {:>10} {:>8} {:>10} {:<15}\n",
            c.local.to_string(),
            c.remote.to_string(),
            c.state,
            c.cc.as_deref().unwrap_or("-"),
            ms(i.map(|i| f64::from(i.rtt_us) / 1e6)),
            ms(i.and_then(|i| i.min_rtt_us).map(|v| f64::from(v) / 1e6)),
            i.map_or("-".into(), |i| i.snd_cwnd_segs.to_string()),
            i.and_then(|i| i.notsent_bytes).map_or("-".into(), |v| v.to_string()),
            ms(c.derived.send_queue_delay.map(|d| d.delay.as_secs_f64())),
            c.retrans(),
            i.and_then(|i| i.delivery_rate_bytes_per_sec)
                .map_or("-".into(), |r| format!("{:.1}", r as f64 * 8.0 / 1e6)),
            c.derived.bbr_phase.map_or("-", |p| p.as_str()),
        ));
    }
    s
}
