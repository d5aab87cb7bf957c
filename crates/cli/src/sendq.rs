//! `tcptail sendq`: the send-queue experiment (SIGCOMM '24 poster) on an emulated path; the
//! work lives in `tcptail_experiments::workload::sendq::experiment`.
//!
//! Writes `sendq.json` (every variant's numbers and chunk records, every round),
//! `ecdf-start-CC.svg` and `ecdf-schedule-CC.svg` (the poster's Figure 3, latency from send
//! start and from the chunk's scheduled time) and, with a sweep, `sweep.svg` (its Figure 4)
//! into `--out`. Prints a table (medians over rounds) and every target of the issue with the
//! value it asks for beside the value measured; a target below the path's physical floor is
//! marked `OUT OF REACH` with the floor's numbers. Exit codes: 0 when the run completed
//! (targets are reported, not enforced, unless `--check`), 1 when it failed or `--check` found
//! a failed target that is within reach, 2 for bad usage.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, Result, bail};
use clap::Args;
use tcptail_experiments::workload::sendq::experiment::{
    self, Cc, RateResults, SendqConfig, SendqReport, plot,
};
use tcptail_units::{BitRate, HumanDuration};

#[derive(Debug, Args)]
pub struct SendqArgs {
    /// Directory for sendq.json and the SVG plots (created if missing).
    #[arg(long, default_value = "sendq-results")]
    out: PathBuf,
    /// Every variant (no control, never-blocking buffer, static LOWAT 16/64 KB, threshold and
    /// adaptive LOWAT at 5/10/20/30 ms, each with and without freshness, CUBIC and BBR) and the
    /// 10-50 Mbit/s sweep; without it, the CI subset (both baselines, threshold and adaptive
    /// 10 ms with and without freshness, CUBIC and BBR: about a minute).
    #[arg(long)]
    full: bool,
    /// Chunks per variant and round.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(10..=100_000))]
    chunks: u32,
    /// Rounds per variant (figures are medians over rounds).
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    rounds: u32,
    /// Bottleneck rate.
    #[arg(long, default_value = "30mbit")]
    rate: BitRate,
    /// Base round-trip time.
    #[arg(long, default_value = "10ms")]
    rtt: HumanDuration,
    /// Exit 1 when a target fails that is within the path's physical reach.
    #[arg(long)]
    check: bool,
}

impl SendqArgs {
    fn config(&self) -> Result<SendqConfig> {
        let mut config = if self.full { SendqConfig::full() } else { SendqConfig::quick() };
        config.chunks = usize::try_from(self.chunks)?;
        config.rounds = usize::try_from(self.rounds)?;
        config.rate = self.rate;
        config.rtt = self.rtt.0;
        config.validate()?;
        Ok(config)
    }
}

pub fn run(args: SendqArgs) -> Result<ExitCode> {
    let config = match args.config() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e:#}");
            return Ok(ExitCode::from(2));
        }
    };
    std::fs::create_dir_all(&args.out)
        .with_context(|| format!("create the output directory {}", args.out.display()))?;
    let report = experiment::run(&config, &mut |line| eprintln!("running {line}"))
        .context("the sendq experiment (needs root, iproute2 and /dev/net/tun)")?;
    write_outputs(&args, &report)?;
    print_table(&report);
    let mut failed = 0;
    for cc in [Cc::Cubic, Cc::Bbr] {
        for t in report.targets(cc) {
            let verdict = match (t.pass, &t.out_of_reach) {
                (true, _) => "PASS",
                (false, Some(_)) => "OUT OF REACH",
                (false, None) => "FAIL",
            };
            println!("{verdict} {}: target {}, measured {}", t.name, t.target, t.measured);
            match &t.out_of_reach {
                Some(why) if !t.pass => println!("    {why}"),
                _ if !t.pass => failed += 1,
                _ => {}
            }
        }
    }
    println!("results in {}", args.out.display());
    if args.check && failed > 0 {
        bail!("{failed} target(s) failed");
    }
    Ok(ExitCode::SUCCESS)
}

fn write_outputs(args: &SendqArgs, report: &SendqReport) -> Result<()> {
    let write = |name: &str, text: String| -> Result<()> {
        let path = args.out.join(name);
        std::fs::write(&path, text).with_context(|| format!("write {}", path.display()))
    };
    write("sendq.json", serde_json::to_string_pretty(report)?)?;
    // Per congestion control: the send-start ECDF of the variants without freshness (the
    // poster's Figure 3), and the from-schedule ECDF of the no-control baselines beside every
    // variant with freshness (what the application's data actually experiences).
    for cc in [Cc::Cubic, Cc::Bbr] {
        let of_cc = || report.main.variants.iter().filter(move |v| v.variant.cc == cc);
        let plain: Vec<_> = of_cc().filter(|v| !v.variant.fresh).cloned().collect();
        let fresh: Vec<_> = of_cc()
            .filter(|v| v.variant.fresh || v.name.ends_with("/no-control"))
            .cloned()
            .collect();
        if plain.is_empty() && fresh.is_empty() {
            continue;
        }
        let rate = report.config.rate.0 / 1_000_000;
        let name = cc.name();
        write(
            &format!("ecdf-start-{name}.svg"),
            plot::ecdf_svg(
                &format!("{name}, {rate} Mbit/s: latency from send start"),
                &plain,
                |v| v.from_start_samples(),
            ),
        )?;
        write(
            &format!("ecdf-schedule-{name}.svg"),
            plot::ecdf_svg(
                &format!("{name}, {rate} Mbit/s: latency from schedule, with freshness"),
                &fresh,
                |v| v.from_schedule_samples(),
            ),
        )?;
    }
    if !report.sweep.is_empty() {
        // The main rate is a point of the sweep too, for the variants the sweep runs.
        let swept = |name: &str| report.config.sweep_variants.iter().any(|v| v.name == name);
        let main = RateResults {
            variants: report.main.variants.iter().filter(|v| swept(&v.name)).cloned().collect(),
            ..report.main.clone()
        };
        let mut rates: Vec<RateResults> =
            std::iter::once(main).chain(report.sweep.iter().cloned()).collect();
        rates.sort_by_key(|r| r.rate_bps);
        write("sweep.svg", plot::sweep_svg("median latency against bandwidth", &rates))?;
    }
    Ok(())
}

fn print_table(report: &SendqReport) {
    println!(
        "medians over {} round(s); start50 range = min-max of the per-round medians",
        report.config.rounds
    );
    println!(
        "{:<40} {:>8} {:>13} {:>8} {:>8} | {:>8} {:>8} | {:>7} {:>6} {:>6}",
        "variant",
        "start50",
        "start50 range",
        "start99",
        "startmax",
        "sched50",
        "sched99",
        "Mbit/s",
        "m+d",
        "queue"
    );
    for r in std::iter::once(&report.main).chain(&report.sweep) {
        for v in &r.variants {
            println!(
                "{:<40} {:>8.1} {:>13} {:>8.1} {:>8.1} | {:>8.1} {:>8.1} | {:>7.2} {:>6.2} {:>6.1}",
                format!("{}@{}M", v.name, r.rate_bps / 1_000_000),
                v.from_start_ms.p50,
                format!("{:.1}-{:.1}", v.from_start_p50_spread.min, v.from_start_p50_spread.max),
                v.from_start_ms.p99,
                v.from_start_ms.max,
                v.from_schedule_ms.p50,
                v.from_schedule_ms.p99,
                v.goodput_mbps,
                v.fraction_merged_or_dropped,
                v.standing_queue_ms()
            );
        }
        if let Some(flag) = &r.emulator_lateness_flag {
            println!("warning: emulator at {} Mbit/s: {flag}", r.rate_bps / 1_000_000);
        }
    }
}
