//! The `tuning-ladder` workload: closed-loop request/response (netperf `TCP_RR` style) on one
//! rung of the seed's tuning ladder per variant, one short run per round, so that the
//! runner's spread over rounds *is* the run-to-run jitter the seed is about.
//!
//! | `rung =` | what it sets |
//! |---|---|
//! | `baseline` | nothing: both ends free to run anywhere |
//! | `split-cpus` | client and server pinned to different CPUs (the seed's "CPU affinity"; each end keeps a CPU of its own as the seed's two machines did) |
//! | `same-cpu` | client and server pinned to the same CPU |
//! | `irq-affinity` | the seed's Benchmark 3: `same-cpu` with the path device's IRQ pinned there too; decided per round from the host: a device with no interrupt line (veth, TUN) makes it not applicable, and a real one would mean changing the host's IRQ affinity, which tcptail never does |
//! | `isolcpus` | the seed's Benchmark 4: `same-cpu` on a CPU isolated from the scheduler (`isolcpus=`); not applicable when `/sys/devices/system/cpu/isolated` is empty |
//! | `busy-poll` | `same-cpu` plus `SO_BUSY_POLL` (`busy_poll`, default 50 µs) at both ends |
//! | `spin` | application polling: non-blocking sockets spun on at both ends, one CPU each |
//! | `io-uring` | `same-cpu` with the bench's io_uring engine at both ends (seed 001: "io_uring ... may upend the traditional BSD socket API"): multishot receive into provided buffers, a send and the wait for the answer in one system call |
//! | `udp` | `same-cpu`, a UDP request/response over kernel UDP sockets (the reference for the AF_XDP rungs) |
//! | `udp-spin` | `udp` busy-polling non-blocking sockets, one CPU each |
//! | `af-xdp` | `same-cpu`, the same UDP request/response over AF_XDP sockets in copy mode behind an XDP program that redirects the bench's port and passes everything else to the kernel (seed 001's proposal), sleeping in `poll()` |
//! | `af-xdp-spin` | `af-xdp` busy-polling the rings (`SO_BUSY_POLL` drives the veth's NAPI), one CPU each |
//!
//! Other keys: the path keys ([`crate::path`], default veth), `size` (frames, default 64 B),
//! `duration` (default 1 s: one "run"), `warmup` (default 200 ms), `cpu` (the server's CPU).
//! Metrics per run: `min_us`, `mean_us`, `p50_us`, `p95_us`, `p99_us`, `p999_us`, `max_us`,
//! `tx_per_s`, `samples_count`; the AF_XDP rungs add `kicks_per_request`, `kick_p50_us` and
//! `kick_p99_us` (the transmit side's `sendto()` calls). Series: `latency_us`.
//! The datagram rungs (`udp*`, `af-xdp*`) run on the plain veth path only.
//!
//! A rung this host cannot take returns [`RunError::NotApplicable`] with what was found, so
//! the report shows it as a row with the reason instead of measuring the same thing twice.

use std::time::Duration;

use tcptail_bench::config::{Engine, Load};
use tcptail_bench::xdp::DatagramEngine;
use tcptail_sock::Profile;

use super::rr::durations;
use super::rr::placement::Placement;
use super::rr::round::RoundSpec;
use crate::params::{ParamError, Params, required};
use crate::path::PathPlan;
use crate::round::{Measurement, RoundContext, RunError};
use crate::workload::{VariantPlan, Workload};

/// The rungs, in ladder order.
pub const RUNGS: [&str; 12] = [
    "baseline",
    "split-cpus",
    "same-cpu",
    "irq-affinity",
    "isolcpus",
    "busy-poll",
    "spin",
    "io-uring",
    "udp",
    "udp-spin",
    "af-xdp",
    "af-xdp-spin",
];

mod datagram;

/// The metrics every run of every rung produces.
const METRICS: [&str; 9] = [
    "min_us",
    "mean_us",
    "p50_us",
    "p95_us",
    "p99_us",
    "p999_us",
    "max_us",
    "tx_per_s",
    "samples_count",
];

/// Where the kernel lists the CPUs isolated from the scheduler (`isolcpus=`).
const ISOLATED_CPUS: &str = "/sys/devices/system/cpu/isolated";

/// The `tuning-ladder` engine.
pub struct TuningLadder;

/// A checked rung.
struct Plan {
    rung: String,
    spec: RoundSpec,
}

impl Workload for TuningLadder {
    fn name(&self) -> &'static str {
        "tuning-ladder"
    }

    fn plan(&self, params: &Params) -> Result<Box<dyn VariantPlan>, ParamError> {
        let path = PathPlan::from_params(params)?;
        let rung = required("rung", params.choice("rung", &RUNGS)?)?;
        let busy_poll = params.duration("busy_poll")?;
        if busy_poll.is_some() && rung != "busy-poll" {
            return Err(ParamError::new("busy_poll", "only on rung = \"busy-poll\""));
        }
        let (duration, warmup) =
            durations(params, Duration::from_secs(1), Duration::from_millis(200))?;
        let (request_len, reply_len) = super::rr::frame_sizes(params, 64)?;
        let placement_kind = match rung.as_str() {
            "baseline" => "free",
            // Pinned where the host allows; `run` moves it to an isolated CPU, if any.
            "split-cpus" | "spin" | "udp-spin" | "af-xdp-spin" => "split",
            _ => "same-cpu",
        };
        // `placement` is the rung's business here: reading it only to refuse it keeps a
        // stray `placement` key from being silently overridden.
        if params.has("placement") {
            return Err(ParamError::new("placement", "set by `rung` in this workload"));
        }
        let cpu = params.uint("cpu", 4095)?.map(|c| c as usize);
        let placement = Placement::resolve(placement_kind, cpu)?;
        let mut profile = Profile::named(format!("ladder-{rung}"));
        profile.nodelay = Some(true);
        if rung == "busy-poll" {
            profile.busy_poll = Some(busy_poll.unwrap_or(Duration::from_micros(50)));
            profile.validate().map_err(|e| ParamError::new("busy_poll", e.reason))?;
        }
        let spec = RoundSpec {
            path,
            profile,
            load: Load::Closed,
            duration,
            warmup,
            request_len,
            reply_len,
            placement,
            spin: rung == "spin",
            competing_flows: 0,
            engine: if rung == "io-uring" {
                Engine::IoUring { sqpoll: false }
            } else {
                Engine::Default
            },
        };
        Ok(Box::new(Plan { rung, spec }))
    }
}

impl VariantPlan for Plan {
    fn run(&self, ctx: &RoundContext<'_>) -> Result<Measurement, RunError> {
        let mut spec = self.spec.clone();
        match self.rung.as_str() {
            "isolcpus" => {
                let cpu = isolated_cpu(&read_isolated()?)?;
                spec.placement = Placement::SameCpu(cpu);
            }
            "irq-affinity" => {
                let reason = self.spec.path.round(ctx, |live| {
                    let interrupts = std::fs::read_to_string("/proc/interrupts")
                        .map_err(|e| RunError::failed("read /proc/interrupts", e))?;
                    let links = live
                        .client()
                        .exec("ip", ["-d", "-j", "link", "show"])
                        .map_err(|e| RunError::failed("ip -d link show", e))?;
                    Ok(no_irq_reason(&links, &interrupts))
                })?;
                return Err(RunError::NotApplicable(reason.0));
            }
            "udp" | "udp-spin" | "af-xdp" | "af-xdp-spin" => {
                let (engine, spin) = self.datagram().expect("a datagram rung");
                return datagram::measure(&spec, engine, spin, ctx);
            }
            _ => {}
        }
        let mut m = spec.measure(ctx)?;
        // Keep what the ladder compares: the shared round code's retransmission and BBR
        // phase counters (the namespace default may be BBR) say nothing on an unshaped veth.
        m.metrics.retain(|k, _| !["retrans", "slow_", "all_"].iter().any(|p| k.starts_with(p)));
        if self.rung == "busy-poll" {
            m.notes.push(
                "SO_BUSY_POLL polls the NIC queue (NAPI) a socket's packets arrived on; a veth \
                 pair delivers through the per-CPU backlog and gives sockets no NAPI id, so \
                 the option is accepted but has nothing to poll: compare with same-cpu"
                    .into(),
            );
        }
        Ok(m)
    }

    fn metrics(&self) -> Vec<String> {
        let mut names = METRICS.map(str::to_owned).to_vec();
        if let Some((DatagramEngine::AfXdp, _)) = self.datagram() {
            names.extend(datagram::XDP_METRICS.map(str::to_owned));
        }
        names
    }

    fn planned(&self) -> Duration {
        self.spec.warmup + self.spec.duration
    }

    fn describe(&self) -> String {
        let s = &self.spec;
        let mut d = format!(
            "{}; closed loop, {} B requests; rung {}: {}",
            s.path.describe(),
            s.request_len,
            self.rung,
            s.placement.describe()
        );
        if let Some(bp) = s.profile.busy_poll {
            d.push_str(&format!(", SO_BUSY_POLL {} µs", bp.as_micros()));
        }
        if s.spin {
            d.push_str(", both ends spin on non-blocking sockets");
        }
        if let Engine::IoUring { .. } = s.engine {
            d.push_str(", io_uring engine at both ends");
        }
        if let Some((engine, spin)) = self.datagram() {
            d = format!(
                "{}; closed-loop UDP request/response, {} B datagrams over {}; rung {}: {}{}",
                s.path.describe(),
                s.request_len,
                engine.name(),
                self.rung,
                s.placement.describe(),
                if spin { ", both ends busy-poll" } else { "" }
            );
        }
        match self.rung.as_str() {
            "isolcpus" => d.push_str(" (moved to an isolated CPU, if the host has one)"),
            "irq-affinity" => d.push_str(", and the path device's IRQ on that CPU"),
            _ => {}
        }
        d
    }
}

impl Plan {
    /// The datagram rungs' engine and whether they busy-poll.
    fn datagram(&self) -> Option<(DatagramEngine, bool)> {
        match self.rung.as_str() {
            "udp" => Some((DatagramEngine::KernelUdp, false)),
            "udp-spin" => Some((DatagramEngine::KernelUdp, true)),
            "af-xdp" => Some((DatagramEngine::AfXdp, false)),
            "af-xdp-spin" => Some((DatagramEngine::AfXdp, true)),
            _ => None,
        }
    }
}

fn read_isolated() -> Result<String, RunError> {
    std::fs::read_to_string(ISOLATED_CPUS)
        .map_err(|e| RunError::failed(format!("read {ISOLATED_CPUS}"), e))
}

/// The first CPU in the kernel's isolated list (`1`, `2-3,6`), or why the rung cannot run.
fn isolated_cpu(list: &str) -> Result<usize, RunError> {
    let list = list.trim();
    if list.is_empty() {
        return Err(RunError::NotApplicable(format!(
            "no CPU is isolated on this host ({ISOLATED_CPUS} is empty): isolcpus= is a kernel \
             boot parameter, and on a {}-CPU machine isolating one leaves the rest for \
             everything else",
            std::thread::available_parallelism().map_or(0, usize::from)
        )));
    }
    let first = list.split([',', '-']).next().unwrap_or_default();
    first.trim().parse().map_err(|_| {
        RunError::failed(format!("read {ISOLATED_CPUS}"), format!("`{list}` is not a CPU list"))
    })
}

/// Why the IRQ rung cannot run, from the client namespace's links (`ip -d -j link show`) and
/// `/proc/interrupts`: the path's devices are software devices with no interrupt line, or (on
/// a path over real hardware) pinning their IRQ would change the host, which the lab never
/// does.
fn no_irq_reason(links_json: &str, interrupts: &str) -> String {
    let links: Vec<serde_json::Value> = serde_json::from_str(links_json).unwrap_or_default();
    let devices: Vec<(String, String)> = links
        .iter()
        .filter_map(|l| {
            let name = l.get("ifname")?.as_str()?;
            (name != "lo").then(|| {
                let kind = l
                    .pointer("/linkinfo/info_kind")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or("a device without a kind (tun)");
                (name.to_owned(), kind.to_owned())
            })
        })
        .collect();
    let with_irq: Vec<&str> = devices
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| {
            interrupts.lines().any(|l| l.split_whitespace().any(|w| w.trim_end_matches(':') == *n))
        })
        .collect();
    let named: Vec<String> = devices.iter().map(|(n, k)| format!("{n} ({k})")).collect();
    if with_irq.is_empty() {
        format!(
            "the path's device{} {} {} no interrupt line in /proc/interrupts: a software device \
             raises no IRQ (its packets are processed in softirq on the sending CPU), so there \
             is none to pin",
            if named.len() == 1 { "" } else { "s" },
            if named.is_empty() { "(none found)".to_owned() } else { named.join(", ") },
            if named.len() == 1 { "has" } else { "have" },
        )
    } else {
        format!(
            "{} {} an IRQ, but pinning it would change the host's IRQ affinity, which the lab \
             never does",
            with_irq.join(", "),
            if with_irq.len() == 1 { "has" } else { "have" }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload;
    use crate::workload::rr::tests::assert_sane;
    use crate::workload::test_support::run_round;

    fn params(pairs: &[(&str, toml::Value)]) -> Params {
        Params::from_pairs(pairs.iter().cloned())
    }

    fn refused(pairs: &[(&str, toml::Value)]) -> ParamError {
        workload::plan(&TuningLadder, &params(pairs)).err().expect("refused")
    }

    #[test]
    fn bad_parameters_are_named_by_key() {
        assert_eq!(refused(&[]).key, "rung");
        assert_eq!(refused(&[("rung", "isolated".into())]).key, "rung");
        let bp = [("rung", "spin".into()), ("busy_poll", "50us".into())];
        assert_eq!(refused(&bp).key, "busy_poll");
        let bp = [("rung", "busy-poll".into()), ("busy_poll", "1h".into())];
        assert_eq!(refused(&bp).key, "busy_poll");
        assert_eq!(refused(&[("rung", "baseline".into()), ("cpu", 0.into())]).key, "cpu");
        assert_eq!(refused(&[("rung", "same-cpu".into()), ("cpu", 4000.into())]).key, "cpu");
        let pl = [("rung", "same-cpu".into()), ("placement", "free".into())];
        assert_eq!(refused(&pl).key, "placement");
        assert_eq!(refused(&[("rung", "spin".into()), ("duration", "1ms".into())]).key, "duration");
        assert_eq!(refused(&[("rung", "spin".into()), ("spin", true.into())]).key, "spin");
    }

    #[test]
    fn rungs_set_what_they_name() {
        let d = |rung: &str| {
            workload::plan(&TuningLadder, &params(&[("rung", rung.into())])).unwrap().describe()
        };
        assert!(d("baseline").contains("not pinned"));
        assert!(d("same-cpu").contains("same CPU"));
        assert!(d("busy-poll").contains("SO_BUSY_POLL 50 µs"));
        assert!(d("spin").contains("spin"));
        assert!(d("io-uring").contains("io_uring engine at both ends"));
        assert!(d("af-xdp").contains("over AF_XDP"));
        assert!(d("udp-spin").contains("kernel UDP") && d("udp-spin").contains("busy-poll"));
    }

    #[test]
    fn isolated_cpu_lists() {
        assert_eq!(isolated_cpu("1\n").unwrap(), 1);
        assert_eq!(isolated_cpu("2-3,6").unwrap(), 2);
        let empty = isolated_cpu("\n").unwrap_err().to_string();
        assert!(empty.starts_with("not applicable here: no CPU is isolated"), "{empty}");
        assert!(matches!(isolated_cpu("x"), Err(RunError::Failed { .. })));
    }

    #[test]
    fn irq_reason_from_links_and_interrupts() {
        let links =
            r#"[{"ifname":"lo"},{"ifname":"tcptail-veth","linkinfo":{"info_kind":"veth"}}]"#;
        let interrupts =
            "           CPU0       CPU1\n 24:   1 2  PCI-MSI 49152-edge  virtio0-input.0\n";
        let r = no_irq_reason(links, interrupts);
        assert!(
            r.starts_with("the path's device tcptail-veth (veth) has no interrupt line"),
            "{r}"
        );
        let nic = " 30:   5 5  PCI-MSI  eth9\n";
        let r = no_irq_reason(r#"[{"ifname":"eth9","linkinfo":{"info_kind":"x"}}]"#, nic);
        assert!(r.starts_with("eth9 has an IRQ, but pinning it would change the host"), "{r}");
    }

    /// On this host: isolcpus is not applicable exactly when no CPU is isolated, and the IRQ
    /// rung finds no interrupt line on a veth.
    #[test]
    fn host_checked_rungs_say_why_they_cannot_run() {
        let plan = |rung: &str| {
            let p = params(&[
                ("rung", rung.into()),
                ("duration", "200ms".into()),
                ("warmup", "50ms".into()),
            ]);
            workload::plan(&TuningLadder, &p).unwrap()
        };
        let isolated = std::fs::read_to_string(ISOLATED_CPUS).unwrap();
        let outcome = run_round(plan("isolcpus").as_ref(), 3);
        match outcome {
            Err(RunError::NotApplicable(why)) => {
                assert!(isolated.trim().is_empty(), "{why}");
                assert!(why.contains(ISOLATED_CPUS), "{why}");
            }
            Ok(m) => {
                assert!(!isolated.trim().is_empty(), "ran without an isolated CPU");
                assert_sane(&m);
            }
            Err(e) => panic!("isolcpus: {e}"),
        }
        match run_round(plan("irq-affinity").as_ref(), 3) {
            Err(RunError::NotApplicable(why)) => {
                assert!(why.contains("tcptail-veth (veth) has no interrupt line"), "{why}")
            }
            other => panic!("irq-affinity on veth: {:?}", other.map(|m| m.metrics)),
        }
    }

    /// One short run of every rung the host can take on a real veth pair.
    #[test]
    fn every_rung_runs_on_veth() {
        for rung in RUNGS.into_iter().filter(|r| !["irq-affinity", "isolcpus"].contains(r)) {
            let p = params(&[
                ("rung", rung.into()),
                ("duration", "200ms".into()),
                ("warmup", "50ms".into()),
            ]);
            let plan = workload::plan(&TuningLadder, &p).unwrap();
            let m = match run_round(plan.as_ref(), 3) {
                Err(RunError::NotApplicable(why)) if rung.starts_with("af-xdp") => {
                    // Only a kernel without AF_XDP gets here; the reason says so.
                    assert!(why.contains("AF_XDP"), "{why}");
                    eprintln!("SKIPPED rung {rung}: {why}");
                    continue;
                }
                other => other.unwrap_or_else(|e| panic!("{rung}: {e}")),
            };
            assert!(m.metrics["min_us"] <= m.metrics["mean_us"], "{rung}: {:?}", m.metrics);
            if m.metrics["tx_per_s"] == 0.0 {
                // A loaded CI host once starved a datagram rung's server past the response
                // timeout for the whole 200 ms: nothing answered, which the round must then
                // say, with the lost request kept in the percentiles.
                let note = m.notes.iter().find(|n| n.contains(" answered, ")).expect("count note");
                assert!(note.contains(" 0 answered, ") && !note.contains(" 0 lost"), "{note}");
                assert!(m.metrics["samples_count"] > 0.0, "{rung}: {:?}", m.metrics);
                eprintln!("rung {rung}: nothing answered in 200 ms on this host: {note}");
                continue;
            }
            // A p50 may be not measurable on a loaded host (too few samples in 200 ms).
            eprintln!("rung {rung}: p50 {:?} µs", m.metrics.get("p50_us"));
            if rung.starts_with("af-xdp") {
                // The seed's point: a kick per request and one per response.
                let kicks = m.metrics["kicks_per_request"];
                assert!((1.9..=2.1).contains(&kicks), "{rung}: {kicks} kicks per request");
                assert!(m.metrics.contains_key("kick_p50_us"), "{:?}", m.metrics);
            }
            assert_sane(&m);
        }
    }
}
