//! `tcptail audit` and `tcptail tune`: flags turned into a loaded profile and a host view
//! before anything is read; the work lives in `tcptail_audit`.
//!
//! Exit codes: `audit` exits 0 without FAILs, 1 with FAILs, 2 on an error (bad profile,
//! unreadable root), so CI and configuration management can act on it. `tune` exits 0 on
//! success and 1 on an error (after rolling back what it applied). Neither changes anything
//! unless `tune --apply` or `tune --revert` is given.

use std::io::Write;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::{Args, ValueEnum};
use tcptail_audit::checks::render_table;
use tcptail_audit::profile::Scope;
use tcptail_audit::profile::{self, HostProfile};
use tcptail_audit::tune::{self, Plan};
use tcptail_audit::verify::{self, Lab};
use tcptail_audit::{HostView, Snapshot, emit};
use tcptail_audit::{cc, revert};
use tcptail_bench::client as bench_client;
use tcptail_bench::config::BenchConfig;
use tcptail_bench::run::RunControl;
use tcptail_bench::server::{RunningServer, Server, ServerConfig};
use tcptail_bench::stats::LatencySummary;
use tcptail_lab::{LivePath, PathShape};
use tcptail_netns::addr::SERVER_ADDR;
use tcptail_netns::{ensure_root, signal};

use crate::NextStep;

const AUDIT_AFTER_HELP: &str = "\
Profiles: baseline (default: known-bad settings, failure modes, and the host's read-list
reported without recommendations), trading-latency, bulk-throughput, or a path to a TOML file
with `extends = \"trading-latency\"`.

Inside a container or a child network namespace, host-scope settings are N/A (\"host scope:
not changeable here\", with the value when it can be read), never WARN or FAIL.

Exit codes: 0 no FAIL, 1 at least one FAIL, 2 error.";

/// Check this host against a profile: one row per check (OK / WARN / FAIL / N/A).
#[derive(Debug, Args)]
#[command(after_help = AUDIT_AFTER_HELP)]
pub struct AuditArgs {
    /// Built-in profile name or path to a profile TOML file.
    #[arg(long, default_value = "baseline")]
    profile: String,
    /// Print the report as JSON.
    #[arg(long)]
    json: bool,
    /// Read a fake root tree (proc/sys, sys, etc) instead of `/`; runs no commands.
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
}

/// What `tune --emit` prints.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum EmitFormat {
    /// The plain sysctl.d file.
    Sysctl,
    /// An Ansible task list that deploys, loads and verifies it.
    Ansible,
}

const TUNE_AFTER_HELP: &str = "\
Without --apply this is a dry run: it prints the sysctl.d file it would write (one rationale
comment per key), the diff against the current values and what the kernel changes by itself.

--apply takes a lock (one tune at a time: a second one is refused with the holder's pid; the
lock of a tune that died is taken over), refuses when a sysctl file applied later at boot sets
one of the keys to another value, checks the default congestion control against
tcp_available_congestion_control (and an installed module tcp_NAME) rather than by a trial
write, tries the other per-namespace keys in a throwaway network namespace, saves the previous
values and writes /etc/sysctl.d/99-tcptail-NAME.conf durably (temp file, fsync, rename, fsync
of the directory), then applies and re-reads every value. A failure half-way rolls back (a
value that cannot be restored is named and the saved values are kept for --revert).

Setting a default congestion control that tcp_allowed_congestion_control lacks (cubic where it
is \"reno bbr\") works on the host, and the kernel then adds it to that list; revert restores
the list. In a container or child network namespace such a default is skipped with the
reason, as host-scope keys are (the kernel answers EPERM there).

--revert restores the saved values and removes the file. A key changed since tune applied it is
not overwritten: the revert is refused, naming each such key with both values, unless --force.
A key still at its previous value (an apply that was killed part-way) is left as it is.

--emit ansible takes the values from the profile, not from this host: bounds are resolved on
each fleet host.

Examples:
  tcptail tune --profile trading-latency
  tcptail tune --profile trading-latency --emit ansible > tcptail.yml
  tcptail tune --profile ./desk.toml --apply
  tcptail tune --revert --profile desk
  tcptail tune --revert --force";

/// Show, apply or revert the sysctl changes a profile implies.
#[derive(Debug, Args)]
#[command(after_help = TUNE_AFTER_HELP)]
pub struct TuneArgs {
    /// Built-in profile name or path to a profile TOML file.
    #[arg(long, required_unless_present = "revert")]
    profile: Option<String>,
    /// Apply: validate, write the sysctl.d file, set and verify the values.
    #[arg(long, conflicts_with_all = ["revert", "emit"])]
    apply: bool,
    /// Restore the values saved by --apply and remove the file (all profiles without
    /// --profile).
    #[arg(long, conflicts_with = "emit")]
    revert: bool,
    /// With --revert: restore the saved values even over keys changed since the apply.
    #[arg(long, requires = "revert")]
    force: bool,
    /// Print the change in another form instead of the dry run.
    #[arg(long, value_enum, value_name = "FORMAT")]
    emit: Option<EmitFormat>,
    /// Fake root tree for /proc/sys (and, unless --config-root, for /etc and the saved
    /// state); no namespace validation.
    #[arg(long, value_name = "DIR")]
    root: Option<PathBuf>,
    /// Where etc/sysctl.d and var/lib/tcptail live (default: the root).
    #[arg(long, value_name = "DIR")]
    config_root: Option<PathBuf>,
    /// Measure each per-namespace change with `tcptail bench client ARGS` in a lab namespace
    /// pair and keep only those that improve --percentile beyond run-to-run noise (needs
    /// root; the host is not changed).
    #[arg(
        long,
        value_name = "BENCH ARGS",
        allow_hyphen_values = true,
        conflicts_with_all = ["apply", "revert", "emit"]
    )]
    verify_with: Option<String>,
    /// The percentile --verify-with judges: p50, p90, p95, p99, p999.
    #[arg(long, default_value = "p99", value_parser = ["p50", "p90", "p95", "p99", "p999"])]
    percentile: String,
    /// Benchmark runs before and after each change (--verify-with).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=50))]
    runs: u32,
}

/// `tcptail audit`: errors are reported here with exit code 2.
pub fn run_audit(args: AuditArgs) -> Result<ExitCode> {
    match audit(&args) {
        Ok(code) => Ok(code),
        Err(err) if crate::is_broken_pipe(&err) => Ok(ExitCode::SUCCESS),
        Err(err) => {
            eprintln!("error: {}", crate::error_line(&err));
            Ok(ExitCode::from(2))
        }
    }
}

/// A library error with `context` in front and its next step, if it has one, at the end.
fn tune_error(err: tcptail_audit::Error, context: String) -> anyhow::Error {
    let next = err.next_step();
    let err = anyhow::Error::new(err).context(context);
    match next {
        Some(step) => err.context(NextStep(step)),
        None => err,
    }
}

fn view(root: Option<&Path>) -> Result<HostView> {
    match root {
        None => Ok(HostView::live()),
        Some(dir) if dir.is_dir() => Ok(HostView::at(dir)),
        Some(dir) => bail!("--root {}: not a directory", dir.display()),
    }
}

fn load(name: &str) -> Result<HostProfile> {
    profile::load(name).with_context(|| format!("loading profile {name:?}"))
}

fn snapshot(view: &HostView, p: &HostProfile) -> Snapshot {
    let keys = p.settings.iter().map(|s| s.key.as_str());
    Snapshot::collect(view, keys.chain(p.known_bad.iter().map(|k| k.key.as_str())))
}

fn audit(args: &AuditArgs) -> Result<ExitCode> {
    let p = load(&args.profile)?;
    let view = view(args.root.as_deref())?;
    if !view.path("proc/sys").is_dir() {
        bail!("{}: no proc/sys to audit", view.path("proc/sys").display());
    }
    let report = tcptail_audit::audit(&p, &snapshot(&view, &p));
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
    } else {
        out.write_all(render_table(&report).as_bytes())?;
    }
    out.flush()?;
    Ok(ExitCode::from(report.exit_code()))
}

/// `tcptail tune`.
pub fn run_tune(args: TuneArgs) -> Result<ExitCode> {
    let view = view(args.root.as_deref())?;
    let config_root = args
        .config_root
        .clone()
        .or_else(|| args.root.clone())
        .unwrap_or_else(|| PathBuf::from("/"));
    if args.revert {
        return revert(&view, &config_root, args.profile.as_deref(), args.force);
    }
    let name = args.profile.as_deref().expect("clap requires --profile without --revert");
    let p = load(name)?;
    if let Some(bench_args) = &args.verify_with {
        return verify_with(&p, bench_args, &args.percentile, args.runs as usize);
    }
    let plan = tune::plan(&p, &snapshot(&view, &p));
    let mut out = std::io::stdout().lock();
    match args.emit {
        Some(EmitFormat::Sysctl) => out.write_all(emit::sysctl(&plan).as_bytes())?,
        Some(EmitFormat::Ansible) => out.write_all(emit::ansible(&p).as_bytes())?,
        None if args.apply => apply(&plan, &view, &config_root, args.root.is_none(), &mut out)?,
        None => dry_run(&plan, &view, &config_root, &mut out)?,
    }
    out.flush()?;
    Ok(ExitCode::SUCCESS)
}

fn dry_run(plan: &Plan, view: &HostView, config_root: &Path, out: &mut impl Write) -> Result<()> {
    let path = tune::conf_path(config_root, &plan.profile);
    writeln!(out, "# dry run: nothing written. Would write {}:", path.display())?;
    out.write_all(tune::render_file(plan).as_bytes())?;
    writeln!(out, "\n# diff against current values ({} change(s)):", plan.changes().count())?;
    out.write_all(plan.diff().as_bytes())?;
    for o in tune::overridden_by(config_root, plan) {
        writeln!(out, "# conflict: {o} is applied later at boot and wins; --apply refuses")?;
    }
    let writes = plan.changes().map(|e| (e.key.as_str(), e.value.as_str()));
    if let Err(e) = cc::check(writes, &cc::Facts::read(view)) {
        writeln!(out, "# --apply refuses: {e}")?;
    }
    writeln!(out, "\n# apply with: tcptail tune --profile {} --apply", plan.profile)?;
    Ok(())
}

fn apply(
    plan: &Plan,
    view: &HostView,
    config_root: &Path,
    in_netns: bool,
    out: &mut impl Write,
) -> Result<()> {
    let validate = |p: &Plan| tune::validate_in_netns(p);
    let validator: Option<tune::Validator<'_>> = if in_netns { Some(&validate) } else { None };
    let applied = tune::apply(plan, view, config_root, validator)
        .map_err(|e| tune_error(e, format!("applying profile {}", plan.profile)))?;
    if let Some(pid) = applied.took_over_lock {
        eprintln!("note: took over the tune lock left by pid {pid}, which is no longer running");
    }
    writeln!(
        out,
        "applied {} change(s) from profile {}, verified by re-reading /proc/sys",
        applied.changed.len(),
        plan.profile
    )?;
    for (key, before, after) in &applied.changed {
        writeln!(out, "  {key}: {before} -> {after}")?;
    }
    for s in &applied.side_effects {
        writeln!(out, "  {}: {} -> {} (by the kernel: {})", s.key, s.before, s.after, s.why)?;
    }
    for (key, why) in &plan.skipped {
        writeln!(out, "  skipped {key}: {why}")?;
    }
    writeln!(out, "wrote {}", applied.file.display())?;
    writeln!(out, "previous values saved in {}", applied.state.display())?;
    Ok(())
}

fn revert(
    view: &HostView,
    config_root: &Path,
    profile: Option<&str>,
    force: bool,
) -> Result<ExitCode> {
    let names = match profile {
        Some(p) => vec![profile_name(p)?],
        None => tune::applied_profiles(config_root),
    };
    if names.is_empty() {
        return Err(tcptail_audit::Error::NoState { profile: None }.into());
    }
    let mut out = std::io::stdout().lock();
    for name in names {
        let done = revert::revert(view, config_root, &name, force).map_err(|e| match e {
            e @ tcptail_audit::Error::NoState { .. } => e.into(),
            e => tune_error(e, format!("reverting profile {name}")),
        })?;
        if let Some(pid) = done.took_over_lock {
            eprintln!(
                "note: took over the tune lock left by pid {pid}, which is no longer running"
            );
        }
        writeln!(out, "reverted profile {name}: {} value(s) restored", done.restored.len())?;
        for (key, value) in &done.restored {
            let forced = done.forced.iter().find(|(k, _)| k == key);
            match forced {
                Some((_, was)) => writeln!(out, "  {key} = {value} (forced over {was})")?,
                None => writeln!(out, "  {key} = {value}")?,
            }
        }
        for (key, value) in &done.unchanged {
            writeln!(out, "  {key} = {value} (already the previous value)")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// The name a `--profile` argument was applied under (a file's `name`, or the built-in name).
fn profile_name(arg: &str) -> Result<String> {
    if arg.contains('/') || arg.ends_with(".toml") {
        Ok(load(arg)?.name)
    } else {
        Ok(arg.to_owned())
    }
}

/// The lab `--verify-with` measures in: a veth pair ([`LivePath`]), the bench library's server
/// in the server namespace, and one run of the bench library's client per measurement.
struct BenchLab {
    // Dropped in this order: the server stops before its namespace goes.
    _server: RunningServer,
    live: LivePath,
    config: BenchConfig,
    percentile: String,
}

const LAB_PORT: u16 = 7878;

/// The `--percentile` of a run's latency summary (µs).
fn percentile_of(s: &LatencySummary, percentile: &str) -> Option<f64> {
    match percentile {
        "p50" => Some(s.p50),
        "p90" => Some(s.p90),
        "p95" => Some(s.p95),
        "p99" => Some(s.p99),
        "p999" => Some(s.p999),
        _ => None,
    }
}

impl Lab for BenchLab {
    fn set(&mut self, key: &str, value: &str) -> Result<(), tcptail_audit::Error> {
        self.live.client().set_sysctl(key, value)?;
        self.live.server().set_sysctl(key, value)?;
        Ok(())
    }

    fn measure(&mut self) -> Result<f64, tcptail_audit::Error> {
        let control = RunControl::new();
        let done = AtomicBool::new(false);
        let result = std::thread::scope(|s| {
            // A termination signal stops the bench loops promptly.
            s.spawn(|| {
                while !done.load(Ordering::Relaxed) {
                    if signal::shutdown_requested() {
                        control.stop();
                    }
                    std::thread::sleep(Duration::from_millis(50));
                }
            });
            let r = self.live.client().run(|| bench_client::run(&self.config, &control));
            done.store(true, Ordering::Relaxed);
            r
        })?
        .map_err(|e| measure_err(format!("bench client: {e}")))?;
        if signal::shutdown_requested() {
            return Err(measure_err("interrupted by a signal".to_owned()));
        }
        let summary = result
            .latency_us
            .ok_or_else(|| measure_err("the bench run completed no request".to_owned()))?;
        percentile_of(&summary, &self.percentile)
            .ok_or_else(|| measure_err(format!("no percentile {}", self.percentile)))
    }
}

fn measure_err(message: String) -> tcptail_audit::Error {
    tcptail_audit::Error::Measure { message }
}

fn verify_with(
    p: &HostProfile,
    bench_args: &str,
    percentile: &str,
    runs: usize,
) -> Result<ExitCode> {
    let listen = SocketAddr::from((SERVER_ADDR, LAB_PORT));
    let flags: Vec<String> = bench_args.split_whitespace().map(str::to_owned).collect();
    // Checked before anything is built: a bad flag is a usage error, not a failed run.
    let config = crate::bench::client_config(listen, &flags)
        .with_context(|| format!("--verify-with \"{bench_args}\""))?;
    ensure_root()?;
    signal::install(signal::DEFAULT_GRACE)?;
    let live = LivePath::builder(PathShape::Veth).roles("client", "router", "server").start()?;
    // The plan against the lab's own (fresh namespace) values; host-scope keys are skipped.
    let profile = p.clone();
    let plan = live.client().run(move || {
        let view = HostView::at("/");
        tune::plan(&profile, &snapshot(&view, &profile))
    })?;
    // The lab's own server, reachable only from its namespace pair: it grants whatever the
    // verifying client asks for.
    let server = Server::spawn_trusting_in(live.server(), ServerConfig::new(listen))
        .with_context(|| format!("the lab's bench server on {listen}"))?;
    let mut lab = BenchLab { _server: server, live, config, percentile: percentile.to_owned() };
    eprintln!(
        "verifying {} per-namespace change(s) of {} in a lab namespace pair: {runs} run(s) \
         of `tcptail bench client {bench_args}` before and after each",
        plan.changes().filter(|e| e.scope == Scope::Netns).count(),
        plan.profile
    );
    let mut progress = |t: &verify::Trial| {
        let verdict = if t.kept { "kept" } else { "reverted" };
        eprintln!("  {} {} -> {}: {verdict}", t.key, t.from, t.to);
    };
    let trials = verify::verify_each(&plan, &mut lab, runs, &mut progress)?;
    let mut out = std::io::stdout().lock();
    out.write_all(verify::render(&trials, percentile).as_bytes())?;
    let kept: Vec<&verify::Trial> = trials.iter().filter(|t| t.kept).collect();
    writeln!(
        out,
        "\n# {} of {} change(s) kept; the host was not changed.",
        kept.len(),
        trials.len()
    )?;
    for (key, why) in &plan.skipped {
        writeln!(out, "# not measured: {key} ({why})")?;
    }
    for t in kept {
        writeln!(out, "{} = {}", t.key, t.to)?;
    }
    out.flush()?;
    drop(lab);
    Ok(ExitCode::SUCCESS)
}
