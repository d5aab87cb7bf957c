//! `tcptail exporter`: serves `/metrics` (Prometheus text or OpenMetrics, by the `Accept`
//! header) computed at scrape time from one sock_diag dump; the collector lives in
//! `tcptail_diag::metrics`.
//!
//! Exit codes: 1 when the selector file, the namespace or the listen address is unusable; 2 for
//! a bad command line. A failed dump during a scrape answers 500 and counts in
//! `tcptail_scrape_errors_total`; the exporter keeps serving.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use tcptail_diag::closed::{CloseWatcher, DestroyListener};
use tcptail_diag::metrics::closed::ClosedMetrics;
use tcptail_diag::metrics::{self, Format, Scrape, State};
use tcptail_diag::{Dumper, Selectors};

const AFTER_HELP: &str = "\
Selector file (TOML):
  max_connections = 200          # hard cap on connections with their own series
  [[selector]]
  name = \"api\"
  remote_ports = [\"443\", \"8000-8100\"]
  remote_addrs = [\"10.0.0.0/8\"]  # also local_ports, local_addrs

Connections matched by a selector get per-connection series labelled selector, peer (remote
address) and conn (a slot number the socket keeps while it lives, so a series never moves to
another socket); the cap admits the oldest matched sockets. All others are aggregated per
group (counts per state and congestion control, RTT and send-queue-delay histograms).
Closed connections (the kernel's destroy notifications; needs CAP_NET_ADMIN) feed
tcptail_closed_* histograms per congestion control: lifetime, bytes, retransmissions, min
and max RTT, rwnd/sndbuf-limited fractions (--no-closed turns them off).";

/// Flags of `tcptail exporter`.
#[derive(Debug, Args)]
#[command(after_help = AFTER_HELP)]
pub struct ExporterArgs {
    /// Address to serve /metrics on.
    #[arg(long, default_value = "127.0.0.1:9464")]
    listen: String,
    /// Selector file (TOML); without it every socket is aggregated.
    #[arg(long)]
    selectors: Option<PathBuf>,
    /// Override the file's hard cap on connections with their own series.
    #[arg(long)]
    max_connections: Option<usize>,
    /// Read the sockets of this network namespace (/run/netns/NAME).
    #[arg(long)]
    netns: Option<String>,
    /// Dump only the selected sockets (kernel-filtered; cost follows the matches) and skip the
    /// aggregates of all other sockets.
    #[arg(long)]
    no_aggregates: bool,
    /// Do not listen for closes (the tcptail_closed_* histograms).
    #[arg(long)]
    no_closed: bool,
}

/// How often the close watcher learns which connections exist (their lifetimes' resolution).
const TRACK_EVERY: Duration = Duration::from_secs(1);

/// Starts the thread that turns the kernel's destroy notifications of the selected
/// connections into histograms; without CAP_NET_ADMIN it says so and the exporter goes on
/// without them.
fn watch_closes(args: &ExporterArgs, selectors: &Selectors) -> Option<Arc<Mutex<ClosedMetrics>>> {
    let opened = match &args.netns {
        Some(ns) => DestroyListener::in_netns(ns).and_then(|l| Ok((l, Dumper::in_netns(ns)?))),
        None => DestroyListener::new().and_then(|l| Ok((l, Dumper::new()?))),
    };
    let (listener, dumper) = match opened {
        Ok(both) => both,
        Err(e) => {
            eprintln!(
                "tcptail exporter: warning: no tcptail_closed_* histograms: the kernel's destroy \
                 notifications are not available ({}; they need CAP_NET_ADMIN)",
                crate::chain_line(&e)
            );
            return None;
        }
    };
    let filter = selectors.filter();
    let mut watcher = CloseWatcher::new(listener, dumper, filter, TRACK_EVERY);
    let metrics = Arc::new(Mutex::new(ClosedMetrics::default()));
    let shared = metrics.clone();
    std::thread::spawn(move || {
        let mut warned = false;
        loop {
            let result = watcher.step(|c| {
                shared.lock().unwrap_or_else(PoisonError::into_inner).observe(&c);
            });
            shared.lock().unwrap_or_else(PoisonError::into_inner).lost = watcher.lost();
            if let Err(e) = result
                && !std::mem::replace(&mut warned, true)
            {
                eprintln!(
                    "tcptail exporter: warning: watching closes failed ({}); retrying",
                    crate::chain_line(&e)
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    Some(metrics)
}

/// Loads the selector file and applies `--max-connections`.
pub fn load_selectors(path: Option<&PathBuf>, cap: Option<usize>) -> Result<Selectors> {
    let mut selectors = match path {
        Some(p) => Selectors::load(p)?,
        None => Selectors::default(),
    };
    if let Some(cap) = cap {
        anyhow::ensure!(cap > 0, "--max-connections must be at least 1");
        selectors.max_connections = cap;
    }
    Ok(selectors)
}

/// Opens a sock_diag client in the current or the named namespace.
pub fn open_dumper(netns: Option<&str>) -> Result<Dumper> {
    Ok(match netns {
        Some(name) => Dumper::in_netns(name)?,
        None => Dumper::new()?,
    })
}

/// Runs the exporter until killed.
pub fn run(args: ExporterArgs) -> Result<ExitCode> {
    let selectors = load_selectors(args.selectors.as_ref(), args.max_connections)?;
    let mut dumper = open_dumper(args.netns.as_deref())?;
    let request = metrics::dump_request(&selectors, !args.no_aggregates);
    let server = tiny_http::Server::http(&args.listen)
        .map_err(|e| anyhow::anyhow!("{e}"))
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = server.server_addr().to_ip().map_or(args.listen.clone(), |a| a.to_string());
    eprintln!("tcptail exporter: serving http://{addr}/metrics");
    let mut state = State::default();
    if !args.no_closed {
        state.closed = watch_closes(&args, &selectors);
    }
    for req in server.incoming_requests() {
        let path = req.url().split('?').next().unwrap_or("").to_owned();
        let response = match path.as_str() {
            "/metrics" => {
                let accept = req
                    .headers()
                    .iter()
                    .find(|h| h.field.equiv("Accept"))
                    .map(|h| h.value.as_str().to_owned());
                let format = Format::from_accept(accept.as_deref());
                let start = Instant::now();
                let mut scrape = Scrape::new(&selectors);
                match dumper.dump(&request, |s| scrape.add(s)) {
                    Ok(stats) => {
                        if stats.interrupted {
                            state.totals.incomplete += 1;
                            eprintln!(
                                "tcptail exporter: warning: the kernel flagged a dump as \
                                 interrupted (NLM_F_DUMP_INTR); sockets may be missing or \
                                 repeated in this scrape (tcptail_scrapes_incomplete_total)"
                            );
                        }
                        let body = scrape.render(&mut state, format, start.elapsed());
                        let ct =
                            tiny_http::Header::from_bytes("Content-Type", format.content_type())
                                .map_err(|()| anyhow::anyhow!("bad header"))?;
                        tiny_http::Response::from_string(body).with_header(ct).with_status_code(200)
                    }
                    Err(e) => {
                        state.totals.errors += 1;
                        tiny_http::Response::from_string(format!("sock_diag dump failed: {e}\n"))
                            .with_status_code(500)
                    }
                }
            }
            "/" => tiny_http::Response::from_string("tcptail exporter: see /metrics\n"),
            _ => tiny_http::Response::from_string("not found\n").with_status_code(404),
        };
        // A client that went away is not our error.
        let _ = req.respond(response);
    }
    Ok(ExitCode::SUCCESS)
}
