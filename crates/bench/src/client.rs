//! The benchmark client: a run over one or more connections.
//!
//! Given a checked [`BenchConfig`] (see [`crate::config`]), [`run`] opens
//! the connections (profile applied and verified before `connect`), performs the handshake that
//! makes the server apply the same profile and pin itself, warms up, then measures in closed
//! loop (back to back) or open loop (at a fixed rate, latency from each request's intended send
//! time). [`RunControl`] lets another thread stop a run early (Ctrl-C: the partial result is
//! still returned) and watch its progress.
//!
//! Invariants: nothing is measured before every connection has finished its warm-up; a result
//! always says what was asked (rate, placement, profile) next to what happened; a request that
//! never got an answer is counted ([`RawRun::unanswered`]) and kept in the percentiles as a
//! lower bound, never dropped (see [`crate::connection`]).

use std::sync::{Arc, Barrier, OnceLock};
use std::time::Instant;

use crate::attribution;
use crate::config::{BenchConfig, Engine, Load, TxMode};
use crate::connection::{self, STOP_GRACE};
use crate::context::{
    ConnectionPlacement, ContextProbe, RunContext, common_value, describe_placement,
};
use crate::report::{BenchResult, RateReport};
use crate::run::{BenchError, Combine, RawRun, RunControl};
use crate::watchdog::{Closer, Watchdog};

/// Runs the benchmark and returns its raw measurements.
pub fn run_raw(config: &BenchConfig, control: &RunControl) -> Result<RawRun, BenchError> {
    config.validate()?;
    let n = config.connections;
    let uring = matches!(config.engine, Engine::IoUring { .. });
    let barrier = Arc::new(Barrier::new(config.thread_count()));
    let start: Arc<OnceLock<Instant>> = Arc::new(OnceLock::new());
    // Blocking receives (closed loop without spinning) wait without a kernel timer; the
    // watchdog enforces their response timeout and the stop grace (see `watchdog`).
    // The io_uring engine's closed-loop waits have no timer either.
    let blocking = uring
        || (!config.spin
            && matches!(config.load, Load::Closed)
            && config.one_thread_per_connection());
    let tick = Watchdog::tick_for(config.response_timeout, connection::POLL_SLICE);
    let watchdog = Watchdog::new(tick);
    let sampler = config.tcp_info_interval.map(|_| crate::tcp_sampler::Sampler::default());
    let sampler_ref = sampler.as_ref();
    let outcomes: Vec<Result<RawRun, BenchError>> = std::thread::scope(|scope| {
        if let (Some(sampler), Some(period)) = (sampler_ref, config.tcp_info_interval) {
            let start = &*start;
            std::thread::Builder::new()
                .name("tcptail-tcp-info".into())
                .spawn_scoped(scope, move || sampler.run(period, start))
                .expect("spawning the tcp_info sampler");
        }
        let _closer = Closer(&watchdog);
        if blocking {
            std::thread::Builder::new()
                .name("tcptail-watchdog".into())
                .spawn_scoped(scope, || watchdog.run(&|| control.stopped(), STOP_GRACE))
                .expect("spawning the watchdog thread");
        }
        let threads = config.thread_count();
        let per_connection = !uring && config.one_thread_per_connection();
        let handles: Vec<_> = (0..threads)
            .map(|thread| {
                let barrier = Arc::clone(&barrier);
                let start = Arc::clone(&start);
                let watchdog = &watchdog;
                std::thread::Builder::new()
                    .name(format!("tcptail-client-{thread}"))
                    .spawn_scoped(scope, move || {
                        let shared = connection::Shared {
                            control,
                            barrier: &barrier,
                            start: &start,
                            watchdog,
                            sampler: sampler_ref,
                        };
                        let indices: Vec<usize> = (thread..n).step_by(threads).collect();
                        if uring {
                            crate::engine::uring::client::run_thread(config, &indices, &shared)
                        } else if per_connection {
                            connection::run_connection(config, thread, &shared)
                        } else {
                            connection::event_loop::run_thread(config, &indices, &shared)
                        }
                    })
                    .expect("spawning a client thread")
            })
            .collect();
        let outcomes =
            handles.into_iter().map(|h| h.join().expect("client thread panicked")).collect();
        if let Some(sampler) = sampler_ref {
            sampler.finish();
        }
        outcomes
    });
    let mut raw = RawRun::default();
    for outcome in outcomes {
        raw.absorb(outcome?, Combine::Parallel);
    }
    raw.samples.sort_by_key(|s| s.intended_ns);
    if let (Some(sampler), Some(period)) = (sampler, config.tcp_info_interval) {
        raw.tcp_info = sampler.into_samples();
        // The sampler runs until every thread is done, which includes asking the server for
        // its stats: what it read after the measured part (and its last period) is not the
        // run's.
        let end = (raw.elapsed + period).as_nanos() as u64;
        raw.tcp_info.retain(|s| s.t_ns <= end);
    }
    raw.interrupted = control.stopped();
    Ok(raw)
}

/// Runs the benchmark and summarises it with its context.
pub fn run(config: &BenchConfig, control: &RunControl) -> Result<BenchResult, BenchError> {
    let probe = ContextProbe::start();
    let raw = run_raw(config, control)?;
    Ok(summarise(config, &raw, &probe))
}

/// Turns raw measurements into the reported result.
pub fn summarise(config: &BenchConfig, raw: &RawRun, probe: &ContextProbe) -> BenchResult {
    let mut context = probe.finish();
    let mut warnings = raw.warnings.clone();
    place(config, raw, &mut context, &mut warnings);
    let (server, unavailable) = crate::server_stats::summarise(&raw.connections);
    warnings.extend(unavailable);
    let open_crr = matches!(config.load, Load::Open { .. }) && config.mode == TxMode::Crr;
    if open_crr {
        warnings.extend(raw.crr.warnings(config.connections));
    }
    let first = raw.connections.first();
    let attribution = if config.attribute && !raw.attributed.is_empty() {
        Some(attribution::attribute(
            &raw.attributed,
            raw.latency.quantile_nanos(0.99),
            tcptail_units::stats::median(&raw.snapshot_costs_ns).unwrap_or(0.0),
        ))
    } else if !raw.tcp_info.is_empty() {
        // Without per-request snapshots, the --tcp-info-interval timeline stands in: each
        // request with the samples of its connection just before and just after it.
        let timeline = crate::tcp_sampler::timeline_attribution(&raw.samples, &raw.tcp_info);
        (!timeline.is_empty())
            .then(|| attribution::attribute(&timeline, raw.latency.quantile_nanos(0.99), 0.0))
    } else {
        None
    };
    let secs = raw.elapsed.as_secs_f64();
    let open = matches!(config.load, Load::Open { .. });
    BenchResult {
        mode: if open { "open".into() } else { "closed".into() },
        run_config: config.clone(),
        latency_us: raw.latency.summary(),
        latency_us_ci: raw.latency.percentile_intervals(),
        service_us: open.then(|| raw.service.summary()).flatten(),
        send_lateness_us: open.then(|| raw.send_lateness.summary()).flatten(),
        connect_us: raw.connect.summary(),
        histogram: raw.latency.buckets(10),
        requests: raw.requests,
        sent: raw.sent,
        unanswered: raw.unanswered,
        duration_seconds: secs,
        transactions_per_second: if secs > 0.0 { raw.requests as f64 / secs } else { 0.0 },
        rate_per_second: match config.load {
            Load::Closed => None,
            Load::Open { rate, .. } => {
                Some(RateReport { asked: rate, achieved: raw.achieved_rate })
            }
        },
        crr: open_crr.then_some(raw.crr),
        attribution,
        client_apply: first.map(|c| c.client_apply.clone()),
        server_apply: first.map(|c| c.welcome.apply.clone()),
        server,
        context,
        interrupted: raw.interrupted,
        tcp_info: raw.tcp_info.clone(),
        warnings,
    }
}

/// Fills in where each connection's ends ran, the congestion control each socket had, and the
/// server's kernel; warns about a server that could not pin itself where asked.
fn place(config: &BenchConfig, raw: &RawRun, context: &mut RunContext, warnings: &mut Vec<String>) {
    let conns = &raw.connections;
    context.connections = conns
        .iter()
        .map(|c| ConnectionPlacement {
            client_cpus_seen: c.client_cpus_seen.clone(),
            server_cpu: c.welcome.server_cpu,
            server_cpu_requested: c.welcome.requested_cpu,
            server_pin_error: c.welcome.pinned.clone(),
            server_spin: c.welcome.spin,
            congestion_client: c.congestion.clone(),
            congestion_server: c.welcome.congestion.clone(),
        })
        .collect();
    let distinct = |cpus: &mut Vec<usize>| {
        cpus.sort_unstable();
        cpus.dedup();
    };
    let mut client_seen: Vec<usize> =
        conns.iter().flat_map(|c| c.client_cpus_seen.iter().copied()).collect();
    distinct(&mut client_seen);
    let mut server_seen: Vec<usize> = conns.iter().filter_map(|c| c.welcome.server_cpu).collect();
    distinct(&mut server_seen);
    context.client_cpu_pinned = config.client_cpu;
    context.client_cpus_seen = client_seen.clone();
    context.server_cpu = match server_seen.as_slice() {
        [one] if conns.iter().all(|c| c.welcome.server_cpu.is_some()) => Some(*one),
        _ => None,
    };
    context.server_cpus_seen = server_seen.clone();
    // The server may pin itself by its own default (`bench server --cpu`), unasked.
    let server_pinned = !conns.is_empty()
        && conns.iter().all(|c| c.welcome.requested_cpu.is_some() && c.welcome.pinned.is_none());
    context.placement = describe_placement(
        &client_seen,
        &server_seen,
        config.client_cpu.is_some() && server_pinned,
    );
    context.congestion_client = common_value(conns.iter().map(|c| c.congestion.as_deref()));
    context.congestion_server = common_value(conns.iter().map(|c| c.welcome.congestion.as_deref()));
    context.server_kernel = common_value(conns.iter().map(|c| Some(c.welcome.kernel.as_str())));
    // The server's policy refused part of the Hello (the table of server profile problems
    // says why); the numbers were measured without it.
    let refused: Vec<String> = conns
        .first()
        .map(|c| &c.welcome.apply.options[..])
        .unwrap_or_default()
        .iter()
        .filter(|o| o.outcome.is_policy_refusal())
        .map(|o| format!("{} {}", o.option, o.requested))
        .collect();
    if !refused.is_empty() {
        warnings.push(format!(
            "the server refused {}: refused: server policy (it must be started with --allow)",
            refused.join(", ")
        ));
    }
    for (i, c) in conns.iter().enumerate() {
        if let Some(error) = &c.welcome.pinned {
            warnings.push(format!(
                "connection {i}: the server did not run where asked: {error} (it ran on {})",
                c.welcome.server_cpu.map_or("an unknown CPU".into(), |cpu| format!("CPU {cpu}"))
            ));
        }
    }
    if let Some(wanted) = &config.profile.congestion {
        for (side, cc) in
            [("client", &context.congestion_client), ("server", &context.congestion_server)]
        {
            if cc.as_deref() != Some(wanted.as_str()) {
                warnings.push(format!(
                    "congestion control {wanted} was asked for, but the {side} socket runs {}",
                    cc.as_deref().unwrap_or("an unknown one")
                ));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::ConnectionOutcome;
    use crate::wire::Welcome;
    use tcptail_sock::{ApplyReport, Profile};

    fn outcome(client_cpu: usize, server_cpu: usize, cc: (&str, &str)) -> ConnectionOutcome {
        let apply = ApplyReport { profile: "test".into(), options: Vec::new() };
        ConnectionOutcome {
            client_apply: apply.clone(),
            welcome: Welcome {
                apply,
                congestion: Some(cc.1.into()),
                server_cpu: Some(server_cpu),
                requested_cpu: Some(server_cpu),
                pinned: None,
                spin: false,
                kernel: "6.18.0-server".into(),
                version: "test".into(),
                idle_timeout_seconds: None,
                stats_version: None,
            },
            congestion: Some(cc.0.into()),
            client_cpus_seen: vec![client_cpu],
            index: 0,
            server_stats: Default::default(),
        }
    }

    fn config() -> BenchConfig {
        let profile = Profile { congestion: Some("bbr".into()), ..Profile::default() };
        let mut c = BenchConfig::new("127.0.0.1:9".parse().unwrap(), profile);
        c.connections = 2;
        c.client_cpu = Some(0);
        c.server_cpu = Some(1);
        c
    }

    #[test]
    fn every_connection_keeps_its_own_placement_and_problems_become_warnings() {
        let mut failed = outcome(0, 0, ("bbr", "cubic"));
        failed.welcome.requested_cpu = Some(1);
        failed.welcome.pinned = Some("pinning to CPU 1 failed: Invalid argument".into());
        let raw = RawRun {
            connections: vec![outcome(0, 1, ("bbr", "bbr")), failed],
            ..RawRun::default()
        };
        let result = summarise(&config(), &raw, &ContextProbe::start());
        let ctx = &result.context;
        assert_eq!(ctx.connections.len(), 2);
        assert_eq!(ctx.connections[1].server_cpu, Some(0));
        assert_eq!(ctx.connections[1].server_cpu_requested, Some(1));
        assert!(ctx.connections[1].server_pin_error.is_some());
        // The connections disagree: no single server CPU, both listed, no "same CPU" claim.
        assert_eq!((ctx.server_cpu, ctx.server_cpus_seen.clone()), (None, vec![0, 1]));
        // One server thread failed to pin, so the placement is not what was asked.
        assert_eq!(ctx.placement, "unpinned (client seen on [0], server on [0, 1])");
        assert_eq!(ctx.congestion_server.as_deref(), Some("bbr,cubic"));
        assert_eq!(ctx.congestion_client.as_deref(), Some("bbr"));
        assert_eq!(ctx.server_kernel.as_deref(), Some("6.18.0-server"));
        let warnings = result.warnings.join("\n");
        assert!(
            warnings.contains("connection 1: the server did not run where asked"),
            "{warnings}"
        );
        assert!(warnings.contains("it ran on CPU 0"), "{warnings}");
        assert!(warnings.contains("the server socket runs bbr,cubic"), "{warnings}");
        assert!(!warnings.contains("client socket"), "{warnings}");
    }

    #[test]
    fn agreeing_connections_report_one_placement() {
        let raw = RawRun {
            connections: vec![outcome(1, 1, ("bbr", "bbr")), outcome(1, 1, ("bbr", "bbr"))],
            ..RawRun::default()
        };
        let mut c = config();
        c.client_cpu = Some(1);
        let result = summarise(&c, &raw, &ContextProbe::start());
        assert_eq!(result.context.server_cpu, Some(1));
        assert_eq!(result.context.placement, "same CPU (1)");
        assert!(result.warnings.is_empty(), "{:?}", result.warnings);
    }
}
