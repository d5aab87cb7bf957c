//! `tcptail exporter`: serves `/metrics` (Prometheus text or OpenMetrics, by the `Accept`
//! header) computed at scrape time from one dump (the BPF socket iterator where the host
//! allows it, else sock_diag: `--source`); the collector lives in `tcptail_diag::metrics`.
//!
//! HTTP is `tcptail_diag::http` (hyper): bounded connections, read/write timeouts, a header size
//! limit, optional TLS and basic auth from `--web-config` (node_exporter's format), gzip.
//!
//! Exit codes: 1 when the selector file, the web config, the namespace or the listen address is
//! unusable; 2 for a bad command line. A failed dump during a scrape answers 500 and counts in
//! `tcptail_scrape_errors_total`; the exporter keeps serving.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::Args;
use clap::builder::TypedValueParser;
use tcptail_diag::closed::{CloseWatcher, DestroyListener};
use tcptail_diag::http::{Handler, Limits, Request, Response, Server, WebConfig};
use tcptail_diag::metrics::closed::ClosedMetrics;
use tcptail_diag::metrics::{self, Format, Scrape, State};
use tcptail_diag::source::{SocketSource, SourceChoice};
use tcptail_diag::{DumpRequest, Dumper, Selectors};
use tcptail_units::HumanDuration;

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
and max RTT, rwnd/sndbuf-limited fractions (--no-closed turns them off).

Web config (--web-config, node_exporter's --web.config.file format; paths relative to it):
  tls_server_config:
    cert_file: server.crt
    key_file: server.key
  basic_auth_users:
    prometheus: $2y$10$...         # bcrypt hash: htpasswd -nBC 10 prometheus
Responses are gzipped when the client asks (Accept-Encoding: gzip).";

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
    /// Where sockets are read from: bpf (a BPF socket iterator: cheaper per socket; needs
    /// root and kernel BTF; port/address filters run inside its program), sock-diag, or auto
    /// (where BPF is available: bpf for whole-table dumps, sock-diag for filtered ones, whose
    /// kernel walk skips a rejected socket ~3x cheaper than the iterator visits one; else
    /// sock-diag, said in one line).
    #[arg(long, default_value_t = SourceChoice::Auto)]
    source: SourceChoice,
    /// Dump only the selected sockets (kernel-filtered; cost follows the matches) and skip the
    /// aggregates of all other sockets.
    #[arg(long)]
    no_aggregates: bool,
    /// Do not listen for closes (the tcptail_closed_* histograms).
    #[arg(long)]
    no_closed: bool,
    /// TLS and basic-auth users, node_exporter's format (YAML: tls_server_config: {cert_file,
    /// key_file}, basic_auth_users: {NAME: BCRYPT-HASH}).
    #[arg(long, value_name = "FILE", alias = "web.config.file")]
    web_config: Option<PathBuf>,
    /// Open HTTP connections at most; at the limit the oldest one not being answered is
    /// closed to make room.
    #[arg(long, default_value_t = Limits::default().max_connections,
          value_parser = clap::value_parser!(u16).range(1..).map(usize::from))]
    web_max_connections: usize,
    /// Requests answered at once at most; more get 503.
    #[arg(long, default_value_t = Limits::default().max_requests,
          value_parser = clap::value_parser!(u16).range(1..=1024).map(usize::from))]
    web_max_requests: usize,
    /// Time a client has to send a request's headers (also closes idle connections).
    #[arg(long, default_value = "10s")]
    web_read_timeout: HumanDuration,
    /// Time a client has to read a response.
    #[arg(long, default_value = "10s")]
    web_write_timeout: HumanDuration,
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
            let mut metrics = shared.lock().unwrap_or_else(PoisonError::into_inner);
            metrics.lost = watcher.lost();
            metrics.tracked = watcher.tracked() as u64;
            drop(metrics);
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

/// Opens the dump source `choice` in the current or the named namespace; when `auto` falls
/// back to sock_diag, one line on stderr says why (`who` names the command).
pub fn open_source(choice: SourceChoice, netns: Option<&str>, who: &str) -> Result<SocketSource> {
    let opened = SocketSource::open(choice, netns)
        .with_context(|| format!("cannot open the {choice} dump source (--source)"))?;
    if let Some(why) = opened.fell_back {
        eprintln!("{who}: reading sockets with sock_diag ({})", crate::chain_line(&why));
    }
    Ok(opened.source)
}

/// The scrape-time state behind `/metrics`: one dump source, the counters that live across
/// scrapes. Scrapes take turns (the HTTP server answers on at most two threads).
struct Exporter {
    selectors: Selectors,
    request: DumpRequest,
    scraping: Mutex<(SocketSource, State)>,
}

impl Handler for Exporter {
    fn handle(&self, request: &Request) -> Response {
        match request.path.as_str() {
            "/metrics" => self.scrape(Format::from_accept(request.accept.as_deref())),
            "/" => Response::text(200, "tcptail exporter: see /metrics\n"),
            _ => Response::text(404, "not found\n"),
        }
    }
}

impl Exporter {
    fn scrape(&self, format: Format) -> Response {
        let mut guard = self.scraping.lock().unwrap_or_else(PoisonError::into_inner);
        let (dumper, state) = &mut *guard;
        let start = Instant::now();
        let mut scrape = Scrape::new(&self.selectors);
        match scrape.dump(dumper, &self.request) {
            Ok(stats) => {
                if stats.interrupted {
                    state.totals.incomplete += 1;
                    eprintln!(
                        "tcptail exporter: warning: the kernel flagged a dump as interrupted \
                         (NLM_F_DUMP_INTR); sockets may be missing or repeated in this scrape \
                         (tcptail_scrapes_incomplete_total)"
                    );
                }
                let body = scrape.render(state, format, start.elapsed());
                Response {
                    status: 200,
                    content_type: format.content_type(),
                    body: body.into_bytes(),
                }
            }
            Err(e) => {
                state.totals.errors += 1;
                Response::text(500, format!("{} dump failed: {e}\n", dumper.name()))
            }
        }
    }
}

/// Runs the exporter until killed.
pub fn run(args: ExporterArgs) -> Result<ExitCode> {
    let selectors = load_selectors(args.selectors.as_ref(), args.max_connections)?;
    let dumper = open_source(args.source, args.netns.as_deref(), "tcptail exporter")?;
    let request = metrics::dump_request(&selectors, !args.no_aggregates);
    let web = match &args.web_config {
        Some(path) => WebConfig::load(path)?,
        None => WebConfig::default(),
    };
    let limits = Limits {
        max_connections: args.web_max_connections,
        max_requests: args.web_max_requests,
        read_timeout: args.web_read_timeout.0,
        write_timeout: args.web_write_timeout.0,
        ..Limits::default()
    };
    let server = Server::bind(&args.listen, web, limits)
        .with_context(|| format!("cannot listen on {}", args.listen))?;
    let addr = server.local_addr().map_or(args.listen.clone(), |a| a.to_string());
    eprintln!("tcptail exporter: serving {}://{addr}/metrics", server.scheme());
    let mut state = State::default();
    if !args.no_closed {
        state.closed = watch_closes(&args, &selectors);
    }
    let exporter = Exporter { selectors, request, scraping: Mutex::new((dumper, state)) };
    server.serve(exporter).context("the HTTP server stopped")?;
    Ok(ExitCode::SUCCESS)
}
