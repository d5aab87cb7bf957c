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
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Result;
use clap::{Args, ValueEnum};
use tcptail_diag::Connection;

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
}

/// Rows of the table when `--limit` is not given.
const DEFAULT_ROWS: usize = 40;

/// Runs `tcptail top`.
pub fn run(args: TopArgs) -> Result<ExitCode> {
    let req = args.select.request()?;
    let mut dumper = args.select.dumper()?;
    let tty = std::io::stdout().is_terminal();
    let mut key = args.sort;
    // The live view takes single keys: r (RTT), d (queue delay), t (retransmits), q (quit).
    let (tx, commands) = std::sync::mpsc::channel::<char>();
    // Kept for the whole loop so `recv_timeout` waits even when no key is ever read.
    let _keep = tx.clone();
    let _keys = if args.once { None } else { Some(crate::keys::Keys::start(tx)?) };
    loop {
        let mut conns = dumper.collect(&req)?;
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
            write!(out, "{}", table(&conns, key))?;
            if conns.len() < total {
                writeln!(out, "({} more not shown: --limit 0 shows all)", total - conns.len())?;
            }
            if !args.once {
                writeln!(out, "[r]tt [d]elay re[t]rans [q]uit")?;
            }
        }
        out.flush()?;
        if args.once {
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
