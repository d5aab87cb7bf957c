//! `tcptail bench server|client|local`: flags, their conversion into a checked
//! [`BenchConfig`], progress display and output. The measuring lives in `tcptail-bench`.

use std::collections::BTreeSet;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use clap::{Args, Subcommand};
use tcptail_bench::client;
use tcptail_bench::config::{BenchConfig, Engine, Load, StopAfter, TxMode};
use tcptail_bench::matrix::{self, MatrixSpec};
use tcptail_bench::pacer::Spacing;
use tcptail_bench::report;
use tcptail_bench::run::RunControl;
use tcptail_bench::server::policy::{self, Privilege};
use tcptail_bench::server::{Server, ServerConfig, ServerEvent, ServerPolicy};
use tcptail_bench::wire::{HEADER_LEN, MAX_FRAME_LEN};
use tcptail_sock::{Profile, QuickAck};
use tcptail_units::{ByteSize, HumanDuration, MessageRate};

#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Serve benchmark clients: applies the unprivileged part of the profile each client asks
    /// for; spinning, pinning, busy polling, priority and module-loading congestion controls
    /// only with --allow.
    Server(ServerArgs),
    /// Measure against a running `tcptail bench server`.
    Client(ClientArgs),
    /// Start a server on loopback in this process and measure against it.
    Local(LocalArgs),
}

#[derive(Debug, Args)]
pub struct ServerArgs {
    /// Address to listen on.
    #[arg(long, default_value = "127.0.0.1:7878")]
    listen: SocketAddr,
    /// Pin connection threads to this CPU unless a client asks for another.
    #[arg(long)]
    cpu: Option<usize>,
    /// Profile applied to the listening socket (accepted sockets inherit it).
    #[arg(long)]
    profile: Option<String>,
    /// Close a connection that sends nothing for this long after its handshake.
    #[arg(long, default_value = "60s", value_name = "DURATION")]
    idle_timeout: HumanDuration,
    /// Close a connection whose peer takes no byte of a response for this long (it stopped
    /// reading).
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    write_timeout: HumanDuration,
    /// Refuse clients asking for responses longer than this (header included).
    #[arg(long, default_value = "16MiB", value_name = "BYTES")]
    max_response_size: ByteSize,
    /// Let clients have these (comma-separated): spin (busy-poll the serve loop), cpu (pin
    /// the connection thread where the client asks), busy-poll (SO_BUSY_POLL), priority
    /// (SO_PRIORITY), cc-load (any congestion control, loading its module if needed), or
    /// all. Without them each such request is refused and reported to the client.
    #[arg(long, value_name = "LIST", value_parser = parse_allow, default_value = "")]
    allow: BTreeSet<Privilege>,
    /// Connections served at once; more are refused.
    #[arg(long, default_value_t = 64, value_name = "N")]
    max_connections: usize,
    /// Connections one client address may hold at once.
    #[arg(long, default_value_t = policy::DEFAULT_MAX_PER_PEER, value_name = "N")]
    max_per_peer: usize,
    /// With --allow spin: a connection that receives nothing for this long stops spinning
    /// and sleeps until its next request.
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    spin_cap: HumanDuration,
    #[command(flatten)]
    engine: EngineArgs,
}

/// The I/O engine flags, shared by the server and the client.
#[derive(Debug, Args)]
struct EngineArgs {
    /// I/O engine after the handshake: default (blocking send/recv, a thread per
    /// connection) or io_uring (multishot receive into provided buffers; the client drives
    /// its connections from one thread and ring, or --threads of them; every load shape).
    /// `bench local` also takes af_xdp: a UDP request/response over AF_XDP sockets on a veth
    /// pair between two namespaces it creates (root), beside kernel UDP on the same pair.
    #[arg(long, default_value = "default", value_name = "ENGINE")]
    engine: EngineName,
    /// With --engine io_uring: a kernel thread polls the submission queue (SQPOLL); it
    /// keeps a CPU busy while the run lasts.
    #[arg(long)]
    sqpoll: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum EngineName {
    Default,
    #[value(name = "io_uring", alias = "io-uring")]
    IoUring,
    #[value(name = "af_xdp", alias = "af-xdp")]
    AfXdp,
}

impl EngineArgs {
    fn engine(&self) -> Result<Engine> {
        match self.engine {
            EngineName::Default => {
                anyhow::ensure!(!self.sqpoll, "--sqpoll needs --engine io_uring");
                Ok(Engine::Default)
            }
            EngineName::IoUring => Ok(Engine::IoUring { sqpoll: self.sqpoll }),
            EngineName::AfXdp => anyhow::bail!(
                "--engine af_xdp runs both ends itself, on a veth pair between two namespaces \
                 it creates: use `tcptail bench local --engine af_xdp`"
            ),
        }
    }
}

fn parse_allow(list: &str) -> Result<BTreeSet<Privilege>, String> {
    policy::parse_privileges(list).map_err(|e| e.to_string())
}

#[derive(Debug, Args)]
pub struct ClientArgs {
    /// The server, ADDR:PORT.
    server: SocketAddr,
    #[command(flatten)]
    opts: MeasureArgs,
}

#[derive(Debug, Args)]
pub struct LocalArgs {
    #[command(flatten)]
    opts: MeasureArgs,
}

/// A warm-up given as a duration (`500ms`) or a request count (`1000`).
#[derive(Debug, Clone, Copy)]
struct Warmup(StopAfter);

impl std::str::FromStr for Warmup {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if let Ok(n) = s.parse::<u64>() {
            return Ok(Warmup(StopAfter::Count(n)));
        }
        tcptail_units::parse_duration(s)
            .map(|d| Warmup(StopAfter::Duration(d)))
            .map_err(|e| format!("{e} (or give a number of requests)"))
    }
}

#[derive(Debug, Args)]
struct MeasureArgs {
    /// Socket profile for both ends: a built-in name (trading, throughput, kernel-default) or
    /// a TOML file.
    #[arg(long, default_value = "kernel-default")]
    profile: String,
    /// Congestion control for both ends (overrides the profile).
    #[arg(long)]
    cc: Option<String>,
    /// TCP_NODELAY on or off (overrides the profile).
    #[arg(long, num_args = 0..=1, default_missing_value = "true", value_name = "BOOL")]
    nodelay: Option<bool>,
    /// TCP_QUICKACK policy: off, once, rearm (overrides the profile).
    #[arg(long)]
    quickack: Option<QuickAck>,
    /// SO_BUSY_POLL time per blocking receive, e.g. 50us (overrides the profile).
    #[arg(long, value_name = "DURATION")]
    busy_poll: Option<HumanDuration>,
    /// Pin the client's measuring thread(s) to this CPU.
    #[arg(long)]
    cpu: Option<usize>,
    /// Ask the server to pin its connection thread to this CPU.
    #[arg(long)]
    server_cpu: Option<usize>,
    /// Pin client and server to the same CPU (the last one this process may use, unless --cpu
    /// names one): the stable configuration on small virtual machines.
    #[arg(long, conflicts_with = "server_cpu")]
    same_cpu: bool,
    /// Busy-poll non-blocking sockets at both ends instead of sleeping in recv.
    #[arg(long)]
    spin: bool,
    /// Request size in bytes, header included (at least 24).
    #[arg(long, default_value = "64")]
    size: ByteSize,
    /// Response size in bytes, header included (at least 24).
    #[arg(long, default_value = "64")]
    response_size: ByteSize,
    /// Measure for this long.
    #[arg(long, default_value = "5s", conflicts_with = "count")]
    duration: HumanDuration,
    /// Measure this many requests instead of a duration.
    #[arg(long)]
    count: Option<u64>,
    /// Unmeasured warm-up: a duration or a number of requests.
    #[arg(long, default_value = "500ms")]
    warmup: Warmup,
    /// Parallel connections.
    #[arg(long, default_value_t = 1)]
    connections: usize,
    /// Client threads the connections are spread over, each with its own epoll loop (and
    /// pinned with --cpu); default one thread per connection.
    #[arg(long, value_name = "N")]
    threads: Option<usize>,
    /// Requests outstanding per connection in closed loop (pipelining; responses are matched
    /// to requests in order, latency per request).
    #[arg(long, default_value_t = 1, value_name = "K")]
    depth: u32,
    /// rr: requests on long-lived connections; crr: connect, request, response, close per
    /// transaction (connect time reported separately; the client closes with an RST so its
    /// ports are reused at once; with --rate, each transaction's latency runs from when it was
    /// due, its connect included).
    #[arg(long, default_value = "rr", value_name = "MODE")]
    mode: TxMode,
    /// Open loop at this rate (e.g. 1000/s), spread over the connections; without it, closed
    /// loop. With --mode crr: transactions started per second, at most --connections of them
    /// in flight (one that falls due while its slot is busy waits, and the wait counts).
    #[arg(long)]
    rate: Option<MessageRate>,
    /// Open-loop spacing: constant or poisson.
    #[arg(long, default_value = "constant", requires = "rate")]
    spacing: Spacing,
    /// Open loop: spin this long before each send instead of trusting timer wake-ups.
    #[arg(long, default_value = "200us")]
    spin_window: HumanDuration,
    /// Sample TCP_INFO around each request and explain the slowest 1 %.
    #[arg(long)]
    attribute: bool,
    /// Compare settings in one run, e.g. "cc=cubic,bbr,reno quickack=off,rearm".
    #[arg(long)]
    matrix: Option<MatrixSpec>,
    /// Interleaved rounds for --matrix.
    #[arg(long, default_value_t = 5, requires = "matrix")]
    rounds: usize,
    /// Print the result as JSON on stdout.
    #[arg(long)]
    json: bool,
    /// Write every sample to this CSV file.
    #[arg(long, value_name = "FILE", conflicts_with = "matrix")]
    samples: Option<PathBuf>,
    /// Print an interim line every DURATION while the run goes (with --json: one JSON object
    /// per line, and the final result as the last line).
    #[arg(long, value_name = "DURATION")]
    interval: Option<HumanDuration>,
    /// Write interval histograms to FILE in the HdrHistogram log format (V2 compressed,
    /// nanoseconds; one per --interval, 1s by default; matrix rows tagged).
    #[arg(long, value_name = "FILE")]
    hdr_log: Option<PathBuf>,
    /// Read every connection's tcp_info (and BBR's state) this often during the run, e.g.
    /// 10ms: into the JSON (`tcp_info`, on the requests' clock) and the attribution (keeps
    /// every request's sample in memory).
    #[arg(long, value_name = "DURATION")]
    tcp_info_interval: Option<HumanDuration>,
    /// Write the --tcp-info-interval samples to this CSV file.
    #[arg(long, value_name = "FILE", requires = "tcp_info_interval", conflicts_with = "matrix")]
    tcp_info_csv: Option<PathBuf>,
    /// Seed for Poisson spacing.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Give up on a request unanswered for this long: it is counted as unanswered, kept in the
    /// percentiles at the time it waited (a lower bound), and its connection stops.
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    response_timeout: HumanDuration,
    #[command(flatten)]
    engine: EngineArgs,
}

pub fn run(cmd: BenchCommand) -> Result<ExitCode> {
    match cmd {
        BenchCommand::Server(args) => serve(args),
        BenchCommand::Client(args) => measure(args.server, &args.opts),
        BenchCommand::Local(args) => local(&args.opts),
    }
}

/// `tcptail bench client`'s measuring flags (`--duration 2s --cc bbr ...`, without the server
/// address) as a checked configuration for `server`: how `tune --verify-with` runs the bench
/// library on its own lab. `--matrix` and `--samples` are refused (it measures one
/// configuration and keeps one number); `--json` changes nothing.
pub fn client_config(server: SocketAddr, flags: &[String]) -> Result<BenchConfig> {
    #[derive(Debug, clap::Parser)]
    #[command(name = "tcptail bench client")]
    struct Flags {
        #[command(flatten)]
        opts: MeasureArgs,
    }
    let argv = std::iter::once("tcptail bench client").chain(flags.iter().map(String::as_str));
    let flags = <Flags as clap::Parser>::try_parse_from(argv).map_err(|e| {
        // clap's first line and its tip; its usage line names this internal parser.
        let text = e.render().to_string();
        let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
        let first = lines.next().unwrap_or("invalid bench flags");
        let tip = lines.find(|l| l.starts_with("tip:")).map(|t| format!(" ({t})"));
        anyhow::anyhow!("{}{}", first.trim_start_matches("error: "), tip.unwrap_or_default())
    })?;
    anyhow::ensure!(
        flags.opts.matrix.is_none(),
        "--matrix compares settings itself; measure one configuration here"
    );
    anyhow::ensure!(flags.opts.samples.is_none(), "--samples is not kept here; drop it");
    flags.opts.config(server)
}

fn load_profile(name: &str) -> Result<Profile> {
    Profile::load(name).with_context(|| format!("--profile {name}"))
}

impl MeasureArgs {
    /// Flags to a checked configuration; nothing is opened yet.
    fn config(&self, server: SocketAddr) -> Result<BenchConfig> {
        let mut profile = load_profile(&self.profile)?;
        if let Some(cc) = &self.cc {
            profile.congestion = Some(cc.clone());
        }
        if let Some(nodelay) = self.nodelay {
            profile.nodelay = Some(nodelay);
        }
        if let Some(q) = self.quickack {
            profile.quickack = q;
        }
        if let Some(bp) = self.busy_poll {
            profile.busy_poll = Some(bp.0);
        }
        let frame = |flag: &str, size: ByteSize| {
            u32::try_from(size.bytes()).with_context(|| format!("{flag} {size}: too large"))
        };
        let (client_cpu, server_cpu) = if self.same_cpu {
            let cpu = match self.cpu {
                Some(cpu) => cpu,
                None => *tcptail_bench::sys::allowed_cpus()
                    .context("reading this process's CPU affinity")?
                    .last()
                    .context("no CPU allowed")?,
            };
            (Some(cpu), Some(cpu))
        } else {
            (self.cpu, self.server_cpu)
        };
        let mut config = BenchConfig::new(server, profile);
        config.request_len = frame("--size", self.size)?;
        config.reply_len = frame("--response-size", self.response_size)?;
        config.load = match self.rate {
            None => Load::Closed,
            Some(rate) => Load::Open { rate: rate.as_per_second(), spacing: self.spacing },
        };
        config.stop = match self.count {
            Some(n) => StopAfter::Count(n),
            None => StopAfter::Duration(self.duration.0),
        };
        config.warmup = self.warmup.0;
        config.connections = self.connections;
        if let Some(threads) = self.threads {
            anyhow::ensure!(threads > 0, "--threads 0: must be at least 1");
            config.threads = threads;
        }
        config.depth = self.depth;
        config.mode = self.mode;
        config.client_cpu = client_cpu;
        config.server_cpu = server_cpu;
        config.spin = self.spin;
        config.attribute = self.attribute;
        config.tcp_info_interval = self.tcp_info_interval.map(|d| d.0);
        // The timeline attribution pairs each request with the samples around it.
        config.keep_samples = self.samples.is_some() || self.tcp_info_interval.is_some();
        config.spin_window = self.spin_window.0;
        config.seed = self.seed;
        config.response_timeout = self.response_timeout.0;
        config.engine = self.engine.engine()?;
        config.validate()?;
        if let Some(spec) = &self.matrix {
            spec.configs(&config)?;
        }
        Ok(config)
    }
}

fn serve(args: ServerArgs) -> Result<ExitCode> {
    let default_profile = args.profile.as_deref().map(load_profile).transpose()?;
    let max_reply_len = u32::try_from(args.max_response_size.bytes())
        .ok()
        .filter(|&n| (HEADER_LEN as u32..=MAX_FRAME_LEN).contains(&n))
        .with_context(|| {
            format!(
                "--max-response-size {}: must be between {HEADER_LEN} and {MAX_FRAME_LEN} bytes",
                args.max_response_size
            )
        })?;
    for (flag, d) in [
        ("--idle-timeout", args.idle_timeout),
        ("--write-timeout", args.write_timeout),
        ("--spin-cap", args.spin_cap),
    ] {
        anyhow::ensure!(!d.0.is_zero(), "{flag} {d}: must be longer than zero");
    }
    for (flag, n) in
        [("--max-connections", args.max_connections), ("--max-per-peer", args.max_per_peer)]
    {
        anyhow::ensure!(n > 0, "{flag} {n}: must be at least 1");
    }
    let policy = ServerPolicy {
        allow: args.allow.clone(),
        max_per_peer: args.max_per_peer,
        spin_cap: args.spin_cap.0,
        ..ServerPolicy::default()
    };
    let server = Server::bind(ServerConfig {
        default_profile,
        cpu: args.cpu,
        max_connections: args.max_connections,
        idle_timeout: args.idle_timeout.0,
        write_timeout: args.write_timeout.0,
        max_reply_len,
        policy,
        engine: args.engine.engine()?,
        ..ServerConfig::new(args.listen)
    })
    .with_context(|| format!("listening on {}", args.listen))?;
    let addr = server.local_addr();
    let allowed = if args.allow.is_empty() {
        "nothing privileged".to_string()
    } else {
        args.allow.iter().map(|p| p.word()).collect::<Vec<_>>().join(",")
    };
    eprintln!(
        "tcptail bench server listening on {addr} (clients may have: {allowed}; at most {} \
         connections, {} per client address)",
        args.max_connections, args.max_per_peer
    );
    let handle = server.shutdown_handle();
    ctrlc::set_handler(move || handle.shutdown()).context("installing the Ctrl-C handler")?;
    server.run(&print_event);
    Ok(ExitCode::SUCCESS)
}

fn print_event(event: ServerEvent) {
    eprintln!("{event}");
}

fn local(opts: &MeasureArgs) -> Result<ExitCode> {
    if opts.engine.engine == EngineName::AfXdp {
        return local_xdp(opts);
    }
    // Bind first to learn the port; the server's CPU comes from each client's hello. Its only
    // client is this process, so it grants everything the client asks for, and it runs the
    // client's engine.
    let server = Server::bind(ServerConfig {
        max_connections: 1024,
        policy: ServerPolicy::trusting(),
        engine: opts.engine.engine()?,
        ..ServerConfig::new("127.0.0.1:0".parse().expect("literal address"))
    })
    .context("starting the loopback server")?;
    let addr = server.local_addr();
    let running = server.spawn();
    let outcome = measure(addr, opts);
    running.stop();
    outcome
}

/// `bench local --engine af_xdp`: AF_XDP beside kernel UDP in throwaway namespaces.
fn local_xdp(opts: &MeasureArgs) -> Result<ExitCode> {
    use tcptail_bench::xdp::lab::{self, LabConfig};
    use tcptail_bench::xdp::{DatagramConfig, PairPlacement};
    // What a UDP request/response between two AF_XDP sockets has no use for.
    let unsupported = [
        ("--connections", opts.connections != 1),
        ("--threads", opts.threads.is_some()),
        ("--depth", opts.depth != 1),
        ("--mode", opts.mode != TxMode::Rr),
        ("--rate", opts.rate.is_some()),
        ("--count (use --duration)", opts.count.is_some()),
        ("--warmup as a count (use a duration)", matches!(opts.warmup.0, StopAfter::Count(_))),
        ("--attribute", opts.attribute),
        ("--matrix", opts.matrix.is_some()),
        ("--samples", opts.samples.is_some()),
        ("--interval", opts.interval.is_some()),
        ("--hdr-log", opts.hdr_log.is_some()),
        ("--tcp-info-interval", opts.tcp_info_interval.is_some()),
        ("--sqpoll", opts.engine.sqpoll),
        ("--profile", opts.profile != "kernel-default"),
        ("--cc", opts.cc.is_some()),
        ("--nodelay", opts.nodelay.is_some()),
        ("--quickack", opts.quickack.is_some()),
        ("--busy-poll (--spin busy-polls AF_XDP)", opts.busy_poll.is_some()),
    ];
    if let Some((flag, _)) = unsupported.iter().find(|(_, given)| *given) {
        anyhow::bail!(
            "{flag} does not apply to --engine af_xdp (one UDP request/response between two \
             AF_XDP sockets; TCP settings and load shapes are the other engines')"
        );
    }
    let frame = |flag: &str, size: ByteSize| {
        u32::try_from(size.bytes()).with_context(|| format!("{flag} {size}: too large"))
    };
    let StopAfter::Duration(warmup) = opts.warmup.0 else { unreachable!("refused above") };
    let placement = if opts.same_cpu {
        let cpu = match opts.cpu {
            Some(cpu) => cpu,
            None => *tcptail_bench::sys::allowed_cpus()
                .context("reading this process's CPU affinity")?
                .last()
                .context("no CPU allowed")?,
        };
        PairPlacement { client_cpu: Some(cpu), server_cpu: Some(cpu) }
    } else {
        PairPlacement { client_cpu: opts.cpu, server_cpu: opts.server_cpu }
    };
    let config = LabConfig {
        datagram: DatagramConfig {
            request_len: frame("--size", opts.size)?,
            reply_len: frame("--response-size", opts.response_size)?,
            warmup,
            duration: opts.duration.0,
            response_timeout: opts.response_timeout.0,
        },
        spin: opts.spin,
        placement,
    };
    config.datagram.validate()?;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    {
        let stop = Arc::clone(&stop);
        ctrlc::set_handler(move || stop.store(true, std::sync::atomic::Ordering::Relaxed))
            .context("installing the Ctrl-C handler")?;
    }
    let result = lab::run_in_lab(&config, &stop)?;
    if opts.json {
        println!("{}", serde_json::to_string_pretty(&result)?);
    } else {
        print!("{}", lab::render(&result));
    }
    Ok(exit_code(stop.load(std::sync::atomic::Ordering::Relaxed)))
}

fn measure(server: SocketAddr, opts: &MeasureArgs) -> Result<ExitCode> {
    let config = opts.config(server)?;
    if let Some(d) = opts.interval {
        anyhow::ensure!(!d.0.is_zero(), "--interval {d}: must be longer than zero");
    }
    let live = opts.interval.is_some() || opts.hdr_log.is_some();
    let control = if live { RunControl::with_intervals() } else { RunControl::new() };
    let log = opts
        .hdr_log
        .as_ref()
        .map(|path| {
            std::fs::File::create(path).with_context(|| format!("--hdr-log {}", path.display()))
        })
        .transpose()?;
    {
        let control = Arc::clone(&control);
        let mut presses = 0;
        ctrlc::set_handler(move || {
            presses += 1;
            if presses > 1 {
                std::process::exit(130);
            }
            control.stop();
        })
        .context("installing the Ctrl-C handler")?;
    }
    let expected = expected_requests(&config, opts);
    // Interim lines and a progress bar would write over each other.
    let progress =
        (opts.interval.is_none()).then(|| Progress::start(Arc::clone(&control), expected));
    let reporter = live.then(|| {
        Reporter::start(
            Arc::clone(&control),
            opts.interval.map_or(Duration::from_secs(1), |d| d.0),
            opts.interval.is_some(),
            opts.json,
            log,
        )
    });
    let finish = |progress: Option<Progress>, reporter: Option<Reporter>| -> Result<()> {
        if let Some(p) = progress {
            p.finish();
        }
        if let Some(r) = reporter {
            r.finish().context("writing the --hdr-log file")?;
        }
        Ok(())
    };
    // With interim JSON lines, the final result is one line too (a JSON-lines stream).
    let one_line = opts.json && opts.interval.is_some();
    if let Some(spec) = &opts.matrix {
        let result = matrix::run_matrix(&config, spec, opts.rounds, &control);
        finish(progress, reporter)?;
        let result = result?;
        print_result(&result, opts.json, one_line, matrix::render_matrix)?;
        return Ok(exit_code(result.rows.iter().any(|r| r.result.interrupted)));
    }
    let raw_probe = tcptail_bench::context::ContextProbe::start();
    let raw = client::run_raw(&config, &control);
    finish(progress, reporter)?;
    let raw = raw?;
    let result = client::summarise(&config, &raw, &raw_probe);
    if let Some(path) = &opts.samples {
        write_samples(path, &raw.samples)?;
    }
    if let Some(path) = &opts.tcp_info_csv {
        let file = std::fs::File::create(path)
            .with_context(|| format!("--tcp-info-csv {}", path.display()))?;
        report::write_tcp_info_csv(&raw.tcp_info, std::io::BufWriter::new(file))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    print_result(&result, opts.json, one_line, report::render_result)?;
    Ok(exit_code(result.interrupted))
}

/// Prints a final result on stdout: as one JSON line (`one_line`, after interim JSON lines),
/// as pretty JSON (`json`), or as the human text `render` makes of it.
fn print_result<T: serde::Serialize>(
    result: &T,
    json: bool,
    one_line: bool,
    render: fn(&T) -> String,
) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    if one_line {
        serde_json::to_writer(&mut stdout, result)?;
        writeln!(stdout)?;
    } else if json {
        serde_json::to_writer_pretty(&mut stdout, result)?;
        writeln!(stdout)?;
    } else {
        write!(stdout, "{}", render(result))?;
    }
    Ok(())
}

/// Takes the run's interval histograms every `period`: prints interim lines (if asked) and
/// appends them to the HdrHistogram log (if asked). Each line is flushed as it is written, so
/// what was printed survives a Ctrl-C; the last, partial interval is taken at the end.
struct Reporter {
    done: Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<std::io::Result<()>>,
}

impl Reporter {
    fn start(
        control: Arc<RunControl>,
        period: Duration,
        print: bool,
        json: bool,
        log: Option<std::fs::File>,
    ) -> Reporter {
        use std::sync::atomic::Ordering;
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&done);
        let thread = std::thread::spawn(move || -> std::io::Result<()> {
            let base = Instant::now();
            let mut log = log.map(std::io::BufWriter::new);
            if let Some(out) = &mut log {
                let comment = format!("Logged with tcptail bench {}", env!("CARGO_PKG_VERSION"));
                tcptail_bench::interval::write_log_header(
                    out,
                    std::time::SystemTime::now(),
                    &comment,
                )?;
                out.flush()?;
            }
            let mut writer = tcptail_bench::interval::LogWriter::new();
            let mut started = false;
            let mut next = base + period;
            loop {
                let last = flag.load(Ordering::Relaxed);
                if !last {
                    let now = Instant::now();
                    if now < next {
                        std::thread::sleep((next - now).min(Duration::from_millis(20)));
                        continue;
                    }
                    next += period;
                }
                let Some(recorder) = control.intervals() else { return Ok(()) };
                for interval in recorder.take() {
                    // Nothing is printed for the warm-up, before the first measured sample.
                    started |= !interval.latency.is_empty();
                    if !started {
                        continue;
                    }
                    let from = interval.start.saturating_duration_since(base);
                    if print {
                        print_interval(&interval, from, json)?;
                    }
                    if let Some(out) = &mut log {
                        writer.write(out, &interval, from)?;
                        out.flush()?;
                    }
                }
                if last {
                    return Ok(());
                }
            }
        });
        Reporter { done, thread }
    }

    fn finish(self) -> std::io::Result<()> {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap_or_else(|_| Err(std::io::Error::other("reporter panicked")))
    }
}

/// One interim line: human on stdout, or a JSON object (`{"interval": {...}}`).
fn print_interval(
    interval: &tcptail_bench::interval::Interval,
    from: Duration,
    json: bool,
) -> std::io::Result<()> {
    let secs = interval.end.saturating_duration_since(interval.start).as_secs_f64();
    let count = interval.latency.len();
    let tps = if secs > 0.0 { count as f64 / secs } else { 0.0 };
    let summary = interval.latency.summary();
    let mut out = std::io::stdout().lock();
    if json {
        let line = serde_json::json!({ "interval": {
            "start_s": from.as_secs_f64(),
            "end_s": from.as_secs_f64() + secs,
            "tag": interval.tag,
            "requests": count,
            "transactions_per_second": tps,
            "latency_us": summary,
        }});
        writeln!(out, "{line}")?;
    } else {
        let us = |f: fn(&tcptail_bench::stats::LatencySummary) -> f64| {
            summary.as_ref().map_or("-".to_string(), |s| format!("{:.1}", f(s)))
        };
        writeln!(
            out,
            "[{:7.2} s - {:7.2} s]{} {count} requests, {tps:.0}/s, p50 {} µs, p99 {} µs, max {} µs",
            from.as_secs_f64(),
            from.as_secs_f64() + secs,
            interval.tag.as_deref().map(|t| format!(" {t}:")).unwrap_or_default(),
            us(|s| s.p50),
            us(|s| s.p99),
            us(|s| s.max),
        )?;
    }
    out.flush()
}

fn write_samples(path: &PathBuf, samples: &[report::SampleRecord]) -> Result<()> {
    let file =
        std::fs::File::create(path).with_context(|| format!("--samples {}", path.display()))?;
    report::write_samples_csv(samples, std::io::BufWriter::new(file))
        .with_context(|| format!("writing {}", path.display()))
}

/// Interrupted runs print their partial result and exit 130, like a shell would.
fn exit_code(interrupted: bool) -> ExitCode {
    if interrupted { ExitCode::from(130) } else { ExitCode::SUCCESS }
}

fn expected_requests(config: &BenchConfig, opts: &MeasureArgs) -> Option<(u64, Duration)> {
    // A matrix splits the measured part over rounds, so each row measures the full amount.
    let rows = opts.matrix.as_ref().map_or(1, |m| m.combinations().len()) as u32;
    match config.stop {
        StopAfter::Count(n) => Some((n * rows as u64, Duration::ZERO)),
        StopAfter::Duration(d) => Some((0, d * rows)),
    }
}

/// A progress bar on a terminal (hidden otherwise), fed from the run's counter.
struct Progress {
    done: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Progress {
    fn start(control: Arc<RunControl>, expected: Option<(u64, Duration)>) -> Progress {
        use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
        let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = Arc::clone(&done);
        let thread = std::thread::spawn(move || {
            let (count, duration) = expected.unwrap_or((0, Duration::ZERO));
            let by_count = count > 0;
            let len = if by_count { count } else { duration.as_millis() as u64 };
            let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
            let template = if by_count {
                "{bar:40} {pos}/{len} requests ({msg})"
            } else {
                "{bar:40} {elapsed}/{duration} ({msg})"
            };
            if let Ok(style) = ProgressStyle::with_template(template) {
                bar.set_style(style);
            }
            let start = Instant::now();
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let completed = control.completed();
                bar.set_position(if by_count {
                    completed
                } else {
                    (start.elapsed().as_millis() as u64).min(len)
                });
                bar.set_message(format!("{completed} done"));
                std::thread::sleep(Duration::from_millis(100));
            }
            bar.finish_and_clear();
        });
        Progress { done, thread: Some(thread) }
    }

    fn finish(mut self) {
        self.done.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
