//! `tcptail lab run` and `tcptail lab report`: the experiments that test the seeds' claims,
//! and re-rendering a run's report from its results.json. The work lives in
//! `tcptail_experiments` (files, engines, runner) and `tcptail_report` (schema, HTML).
//!
//! Exit codes: 0 when every experiment ran (whatever the verdicts), 1 when a variant-round
//! failed or the results could not be written, 2 for a bad command line, experiment file or
//! `--out` directory (nothing ran), 128 + signal when interrupted (what finished is kept).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tcptail_experiments::round::RunError;
use tcptail_experiments::runner::{self, Observer, Prepared, RunOptions};
use tcptail_experiments::spec::{Experiment, RunMode};
use tcptail_netns::{ensure_root, signal};
use tcptail_report::{ExperimentResult, Results};

const RUN_AFTER_HELP: &str = "\
EXPERIMENT is a built-in name (see --list) or a path to an experiment file (TOML, the same
format as the built-ins in the repository's experiments/ directory). Without one, every
built-in runs, in the listed order.

Modes: --smoke runs seconds per experiment (CI's end-to-end check), --quick (the default) runs
all built-ins in about 10 minutes on a 2-core machine, --full is for real evaluations.

Variants are interleaved over rounds (each round starts one variant later), every figure is
a median over rounds with its min-max spread, and each experiment's verdict comes from the
rule in its file. results.json and index.html are rewritten after every experiment, so
Ctrl-C keeps what finished; every namespace, link and process is removed either way.

Examples:
  tcptail lab run                         # all built-ins, quick mode
  tcptail lab run nagle-delack loss --full --out eval
  tcptail lab run my-experiment.toml --rounds 5
  tcptail lab report eval                 # re-render eval/index.html from eval/results.json";

#[derive(Debug, Args)]
#[command(after_help = RUN_AFTER_HELP)]
pub struct RunArgs {
    /// Built-in experiment names or experiment files (default: every built-in).
    #[arg(value_name = "EXPERIMENT")]
    experiments: Vec<String>,
    /// Seconds per experiment: checks that everything runs, not what it shows.
    #[arg(long, conflicts_with_all = ["quick", "full"])]
    smoke: bool,
    /// Minutes for the whole set (the default).
    #[arg(long, conflicts_with = "full")]
    quick: bool,
    /// Every variant, more rounds, longer measurements.
    #[arg(long)]
    full: bool,
    /// Output directory for results.json, index.html and per-round files (default:
    /// tcptail-lab-YYYYMMDD-HHMMSS): created 0700 if missing; an existing one must be yours
    /// and empty.
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    /// Write into an existing --out directory that already holds files (it must still be a
    /// directory you own).
    #[arg(long)]
    force: bool,
    /// Rounds per experiment, instead of the mode's.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1000))]
    rounds: Option<u16>,
    /// Seed for every random draw (loss); the same seed repeats the same draws.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// List the experiments with their variants and rounds per mode, then exit.
    #[arg(long)]
    list: bool,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A `tcptail lab run` output directory (holding results.json).
    #[arg(value_name = "DIR")]
    dir: PathBuf,
}

impl RunArgs {
    fn mode(&self) -> RunMode {
        if self.smoke {
            RunMode::Smoke
        } else if self.full {
            RunMode::Full
        } else {
            RunMode::Quick
        }
    }

    /// The experiments named on the command line (every built-in when none).
    fn experiments(&self) -> Result<Vec<Experiment>, String> {
        if self.experiments.is_empty() {
            return Ok(Experiment::builtins());
        }
        let mut out: Vec<Experiment> = Vec::new();
        for arg in &self.experiments {
            let experiment = if arg.contains('/') || arg.ends_with(".toml") {
                Experiment::load(Path::new(arg)).map_err(|e| e.to_string())?
            } else {
                Experiment::builtin(arg).ok_or_else(|| {
                    let names: Vec<String> =
                        Experiment::builtins().into_iter().map(|e| e.name).collect();
                    format!(
                        "no built-in experiment `{arg}` (built-ins: {}; a file path must \
                         contain '/' or end in .toml)",
                        names.join(", ")
                    )
                })?
            };
            if out.iter().any(|e| e.name == experiment.name) {
                return Err(format!("experiment `{}` named twice", experiment.name));
            }
            out.push(experiment);
        }
        Ok(out)
    }
}

pub fn run(args: RunArgs) -> Result<ExitCode> {
    let mode = args.mode();
    let prepared = match args.experiments().and_then(|list| {
        list.into_iter()
            .map(|e| {
                Prepared::new(e, mode, args.rounds.map(usize::from)).map_err(|e| e.to_string())
            })
            .collect::<Result<Vec<_>, _>>()
    }) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    if args.list {
        print_list(&prepared, mode);
        return Ok(ExitCode::SUCCESS);
    }
    ensure_root()?;
    crate::lab::clean_dead_runs();
    // Rounds check for a stop at least every few hundred milliseconds; the grace covers a
    // round's teardown and the final write of the results.
    signal::install(Duration::from_secs(15))?;
    let out = args.out.clone().unwrap_or_else(default_out_dir);
    if let Err(e) = tcptail_report::files::prepare_out_dir(&out, args.force) {
        eprintln!("error: --out {e}");
        return Ok(ExitCode::from(2));
    }
    let options = RunOptions {
        mode,
        out: out.clone(),
        seed: args.seed,
        command: std::env::args().collect::<Vec<_>>().join(" "),
        environment: tcptail_experiments::environment::probe(),
        tcp_memory: tcptail_netns::tcp_memory::read_host,
    };
    let steps: usize = prepared.iter().map(Prepared::steps).sum();
    let planned: Duration = prepared.iter().map(Prepared::estimate).sum();
    eprintln!(
        "tcptail lab run: {} experiment(s), {steps} variant-rounds, {mode} mode, planned {}; \
         results in {}",
        prepared.len(),
        human_duration(planned),
        out.display()
    );
    if prepared.len() > 1 {
        for p in &prepared {
            eprintln!("  {:<16} {}", p.experiment.name, human_duration(p.estimate()));
        }
    }
    let observer = Progress::new(prepared.len());
    let results = runner::run(&prepared, &options, &observer, &signal::shutdown_requested)
        .context("writing the results")?;
    observer.finish();
    print_summary(&results, &out);
    if results.run.interrupted {
        return Ok(ExitCode::from(u8::try_from(signal::exit_code().unwrap_or(130)).unwrap_or(130)));
    }
    let failed = results.experiments.iter().any(|e| e.error.is_some());
    Ok(if failed { ExitCode::from(1) } else { ExitCode::SUCCESS })
}

pub fn report(args: ReportArgs) -> Result<ExitCode> {
    let path = args.dir.join(tcptail_report::results::RESULTS_FILE);
    let results = match Results::read(&path) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: {e}");
            return Ok(ExitCode::from(2));
        }
    };
    runner::write(&results, &args.dir).context("writing the report")?;
    println!("{}", args.dir.join(tcptail_report::results::REPORT_FILE).display());
    Ok(ExitCode::SUCCESS)
}

fn print_list(prepared: &[Prepared], mode: RunMode) {
    println!(
        "{:<16} {:>8} {:>6} {:>9}  {:<17} title",
        "experiment", "variants", "rounds", "planned", "workload"
    );
    for p in prepared {
        let e = &p.experiment;
        println!(
            "{:<16} {:>8} {:>6} {:>9}  {:<17} {}",
            e.name,
            p.variant_names().len(),
            p.rounds(),
            human_duration(p.estimate()),
            e.workload,
            e.title
        );
    }
    let total: Duration = prepared.iter().map(Prepared::estimate).sum();
    println!(
        "({mode} mode, planned {} in all: the rounds' own time plus {} ms of path setup per \
         variant-round, more on a loaded machine; --smoke, --quick and --full change variants \
         and rounds)",
        human_duration(total),
        runner::SETUP_PER_ROUND.as_millis()
    );
}

fn print_summary(results: &Results, out: &Path) {
    println!();
    println!("{:<14} {:<15} {:>8}  reason", "experiment", "verdict", "time");
    for e in &results.experiments {
        println!(
            "{:<14} {:<15} {:>7.0}s  {}",
            e.name,
            e.verdict.as_str(),
            e.duration_s,
            e.verdict_reason
        );
        if let Some(error) = &e.error {
            println!("{:<14} error: {error}", "");
        }
    }
    if results.run.interrupted {
        println!("interrupted: the results above are what finished");
    }
    if let Some(l) = &results.environment.emulator_lateness
        && l.flagged_paths > 0
    {
        println!(
            "warning: the emulator ran late on {} of {} paths (worst p99 {:.0} µs, bound {:.0} µs)",
            l.flagged_paths, l.paths, l.worst_p99_us, l.bound_us
        );
    }
    println!(
        "report: {}  ({:.0} s)",
        out.join(tcptail_report::results::REPORT_FILE).display(),
        results.run.duration_s
    );
}

/// A planned duration for a person, one word (a column of `--list`): `45s`, `14min`,
/// `2h05min`.
fn human_duration(d: Duration) -> String {
    let s = d.as_secs_f64().round() as u64;
    let minutes = (s + 30) / 60;
    match s {
        0..=99 => format!("{s}s"),
        100..=5969 => format!("{minutes}min"),
        _ => format!("{}h{:02}min", minutes / 60, minutes % 60),
    }
}

fn default_out_dir() -> PathBuf {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    PathBuf::from(format!("tcptail-lab-{}", compact_utc(secs)))
}

/// `YYYYMMDD-HHMMSS` in UTC.
fn compact_utc(unix_s: u64) -> String {
    tcptail_report::html::iso_utc(unix_s.max(1))
        .chars()
        .filter_map(|c| match c {
            '-' | ':' | 'Z' => None,
            'T' => Some('-'),
            c => Some(c),
        })
        .collect()
}

/// Progress on stderr: a bar per experiment on a terminal, a line per variant-round otherwise.
struct Progress {
    experiments: usize,
    state: Mutex<State>,
    terminal: bool,
}

struct State {
    bar: Option<ProgressBar>,
    steps_done: usize,
    experiment_started: Instant,
    name: String,
}

/// Bar positions per variant-round, so progress within a round moves the bar too.
const STEP: u64 = 1000;

impl Progress {
    fn new(experiments: usize) -> Progress {
        Progress {
            experiments,
            state: Mutex::new(State {
                bar: None,
                steps_done: 0,
                experiment_started: Instant::now(),
                name: String::new(),
            }),
            terminal: std::io::stderr().is_terminal(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn finish(&self) {
        if let Some(bar) = self.state().bar.take() {
            bar.finish_and_clear();
        }
    }
}

impl Observer for Progress {
    fn experiment_started(&self, index: usize, prepared: &Prepared) {
        let mut state = self.state();
        if let Some(bar) = state.bar.take() {
            bar.finish_and_clear();
        }
        state.steps_done = 0;
        state.experiment_started = Instant::now();
        state.name = prepared.experiment.name.clone();
        let header = format!("[{}/{}] {}", index + 1, self.experiments, prepared.experiment.name);
        if self.terminal {
            let bar = ProgressBar::with_draw_target(
                Some(prepared.steps() as u64 * STEP),
                ProgressDrawTarget::stderr(),
            );
            let template = "{prefix:.bold} [{bar:30}] {percent:>3}% {elapsed:>4} {msg}";
            if let Ok(style) = ProgressStyle::with_template(template) {
                bar.set_style(style.progress_chars("=> "));
            }
            bar.set_prefix(header);
            bar.enable_steady_tick(Duration::from_millis(200));
            state.bar = Some(bar);
        } else {
            eprintln!("{header}: {} variant-rounds", prepared.steps());
        }
    }

    fn step_started(&self, variant: &str, round: usize, rounds: usize) {
        let state = self.state();
        let message = format!("{variant} round {}/{rounds}", round + 1);
        match &state.bar {
            Some(bar) => {
                bar.set_position(state.steps_done as u64 * STEP);
                bar.set_message(message);
            }
            None => eprintln!("  {} {message}", state.name),
        }
    }

    fn step_progress(&self, fraction: f64) {
        let state = self.state();
        if let Some(bar) = &state.bar {
            let within = (fraction.clamp(0.0, 1.0) * STEP as f64) as u64;
            bar.set_position(state.steps_done as u64 * STEP + within);
        }
    }

    fn step_finished(&self, variant: &str, round: usize, error: Option<&RunError>) {
        let mut state = self.state();
        state.steps_done += 1;
        if let Some(bar) = &state.bar {
            bar.set_position(state.steps_done as u64 * STEP);
        }
        if let Some(e) = error {
            let line = format!("  {} {variant} round {}: {e}", state.name, round + 1);
            match &state.bar {
                Some(bar) => bar.println(line),
                None => eprintln!("{line}"),
            }
        }
    }

    fn experiment_finished(&self, result: &ExperimentResult) {
        let mut state = self.state();
        if let Some(bar) = state.bar.take() {
            bar.finish_and_clear();
        }
        eprintln!(
            "{}: {} ({:.0} s)",
            result.name,
            result.verdict.as_str(),
            state.experiment_started.elapsed().as_secs_f64()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn planned_durations_read_as_seconds_minutes_or_hours() {
        let d = |s: u64| human_duration(Duration::from_secs(s));
        assert_eq!(d(45), "45s");
        assert_eq!(d(99), "99s");
        assert_eq!(d(100), "2min");
        assert_eq!(d(870), "15min");
        assert_eq!(d(5969), "99min");
        assert_eq!(d(5970), "1h40min");
        assert_eq!(d(7199), "2h00min");
        assert_eq!(d(7530), "2h06min");
    }

    #[test]
    fn output_directories_are_named_by_utc_time() {
        assert_eq!(compact_utc(1_795_437_296), "20261123-123456");
        assert_eq!(compact_utc(1_709_251_199), "20240229-235959");
    }
}
