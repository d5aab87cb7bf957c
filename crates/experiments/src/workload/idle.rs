//! The `idle-restart` workload: a warmed-up connection goes quiet, then sends a burst; how
//! long the burst takes to arrive shows whether the kernel forgot the congestion window during
//! the pause (`net.ipv4.tcp_slow_start_after_idle`, seed 000 failure mode 6).
//!
//! Per burst, on one connection from the client (sender) to the server (receiver):
//!
//! 1. warm-up: `warmup_bytes` sent back to back, so the congestion window grows; the sender
//!    waits until the receiver has read them all and every byte is acknowledged, then reads
//!    `tcpi_snd_cwnd` (`cwnd_before_pkts`);
//! 2. idle for `idle` (the kernel restarts the window after one RTO of silence when the
//!    sysctl is 1);
//! 3. burst: `burst` bytes written at once; the sender stamps the start, writes the first
//!    64 KB, reads `tcpi_snd_cwnd` again before any ACK can have returned
//!    (`cwnd_after_pkts`: the window the burst starts with), writes the rest; the receiver
//!    stamps the moment it has read the last byte. Both stamps come from this process's
//!    monotonic clock, so `burst_ms` is the completion time as the receiver sees it.
//!
//! | key | values | default |
//! |---|---|---|
//! | `cc` | `cubic`, `bbr`, `reno` | `cubic` |
//! | `warmup_bytes` | bytes sent before each idle period | `4MB` |
//! | `idle` | pause before each burst | `2s` |
//! | `burst` | burst size | `256KB` |
//! | `bursts` | bursts per round (1..=100) | 3 |
//! | path keys | `path = "emulated"` (required), `rate`, `rtt`, `buffer`, `sysctl` (set `net.ipv4.tcp_slow_start_after_idle` here) | |
//!
//! Metrics (medians over the round's bursts): `burst_ms`, `burst_max_ms`, `cwnd_before_pkts`,
//! `cwnd_after_pkts`, and `burst_floor_ms` = the burst's transmission time at the shaped rate
//! plus the one-way delay (half the RTT: `burst_ms` ends when the receiver has the last byte,
//! not when its ACK is back), the least any window could achieve. Series: `burst_ms` (CDF
//! over bursts).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tcptail_report::Series;
use tcptail_units::BitRate;

use crate::params::{ParamError, Params};
use crate::path::PathPlan;
use crate::round::{Measurement, RoundContext, RunError};
use crate::workload::flows::{self, percentile};
use crate::workload::{VariantPlan, Workload};

/// The `idle-restart` engine.
pub struct IdleRestart;

/// Bytes written before the "after idle" window is read: well under any window, so the read
/// happens microseconds after the first segment left.
const FIRST_WRITE: usize = 64 * 1024;

#[derive(Debug)]
struct Plan {
    path: PathPlan,
    cc: String,
    warmup_bytes: usize,
    idle: Duration,
    burst: usize,
    bursts: usize,
}

impl Workload for IdleRestart {
    fn name(&self) -> &'static str {
        "idle-restart"
    }

    fn plan(&self, params: &Params) -> Result<Box<dyn VariantPlan>, ParamError> {
        let cc = flows::cc_param(params)?;
        let warmup_bytes = params.bytes("warmup_bytes")?.unwrap_or(4_000_000);
        let idle = params.duration("idle")?.unwrap_or(Duration::from_secs(2));
        let burst = params.bytes("burst")?.unwrap_or(256_000);
        let bursts = params.uint("bursts", 100)?.unwrap_or(3);
        if !(64_000..=1 << 30).contains(&warmup_bytes) {
            return Err(ParamError::new("warmup_bytes", "between 64KB and 1GiB"));
        }
        if idle < Duration::from_millis(300) || idle > Duration::from_secs(120) {
            // The kernel restarts the window only after one RTO (at least 200 ms) of silence.
            return Err(ParamError::new("idle", "between 300ms (above the minimum RTO) and 120s"));
        }
        if !(FIRST_WRITE as u64..=64 << 20).contains(&burst) {
            return Err(ParamError::new("burst", "between 64KiB and 64MiB"));
        }
        if bursts == 0 {
            return Err(ParamError::new("bursts", "at least one burst"));
        }
        let path = PathPlan::emulated_from_params(params, "idle-restart")?;
        Ok(Box::new(Plan {
            path,
            cc,
            warmup_bytes: warmup_bytes as usize,
            idle,
            burst: burst as usize,
            bursts: bursts as usize,
        }))
    }
}

/// One burst's figures.
#[derive(Debug, Clone, Copy)]
struct BurstRecord {
    burst_ms: f64,
    cwnd_before: u32,
    cwnd_after: u32,
}

/// Reads, for each burst, the warm-up then the burst, reporting when each was complete.
fn receive(
    mut s: TcpStream,
    warmup: usize,
    burst: usize,
    bursts: usize,
    done: &mpsc::Sender<Instant>,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; warmup.max(burst)];
    for _ in 0..bursts {
        for len in [warmup, burst] {
            s.read_exact(&mut buf[..len])?;
            if done.send(Instant::now()).is_err() {
                return Ok(());
            }
        }
    }
    Ok(())
}

impl Plan {
    fn bursts(
        &self,
        sender: &mut TcpStream,
        done: &mpsc::Receiver<Instant>,
        ctx: &RoundContext<'_>,
    ) -> Result<Vec<BurstRecord>, RunError> {
        let data = vec![0xa5u8; self.warmup_bytes.max(self.burst)];
        let wait = |what: &str| {
            done.recv_timeout(Duration::from_secs(60))
                .map_err(|e| RunError::failed(format!("wait for the receiver ({what})"), e))
        };
        let io = |what: &'static str| move |e: std::io::Error| RunError::io(what, e);
        let mut out = Vec::with_capacity(self.bursts);
        for i in 0..self.bursts {
            if (ctx.stop_requested)() {
                return Err(RunError::Interrupted);
            }
            sender.write_all(&data[..self.warmup_bytes]).map_err(io("send the warm-up"))?;
            wait("warm-up")?;
            // Every byte acknowledged: the window now is what the idle period starts from.
            let deadline = Instant::now() + Duration::from_secs(5);
            let mut info = flows::tcp_info(sender)?;
            while info.unacked_segs > 0 && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(1));
                info = flows::tcp_info(sender)?;
            }
            let cwnd_before = info.snd_cwnd_segs;
            std::thread::sleep(self.idle);
            let start = Instant::now();
            sender.write_all(&data[..FIRST_WRITE]).map_err(io("send the burst"))?;
            let cwnd_after = flows::tcp_info(sender)?.snd_cwnd_segs;
            sender.write_all(&data[FIRST_WRITE..self.burst]).map_err(io("send the burst"))?;
            let complete = wait("burst")?;
            out.push(BurstRecord {
                burst_ms: complete.saturating_duration_since(start).as_secs_f64() * 1e3,
                cwnd_before,
                cwnd_after,
            });
            (ctx.progress)((i + 1) as f64 / self.bursts as f64);
        }
        Ok(out)
    }
}

/// The least time a burst of `bytes` can take from the first write to the receiver reading
/// its last byte: its transmission at `rate` plus the one-way delay, half of `rtt`.
fn burst_floor(rate: BitRate, bytes: usize, rtt: Duration) -> Duration {
    rate.transmission_time(bytes as u64) + rtt / 2
}

impl VariantPlan for Plan {
    fn metrics(&self) -> Vec<String> {
        let mut names = vec!["burst_ms", "burst_max_ms", "cwnd_before_pkts", "cwnd_after_pkts"];
        if self.path.rate().is_some() {
            names.push("burst_floor_ms");
        }
        names.into_iter().map(str::to_owned).collect()
    }

    fn run(&self, ctx: &RoundContext<'_>) -> Result<Measurement, RunError> {
        let (records, lateness) = self.path.round(ctx, |live| {
            let listener = flows::listen(live)?;
            let (mut client, server) = flows::connect(live, &listener, Some(&self.cc), true)?;
            let (tx, rx) = mpsc::channel();
            let (warmup, burst, bursts) = (self.warmup_bytes, self.burst, self.bursts);
            let unblock = server.try_clone().map_err(|e| RunError::io("clone the receiver", e))?;
            let receiver = std::thread::spawn(move || receive(server, warmup, burst, bursts, &tx));
            let records = self.bursts(&mut client, &rx, ctx);
            // Unblocks the receiver when the round ended early.
            let _ = unblock.shutdown(std::net::Shutdown::Both);
            let received = receiver.join();
            let records = records?;
            received
                .map_err(|_| RunError::panicked("receiver", "panicked"))?
                .map_err(|e| RunError::io("receive the bursts", e))?;
            Ok::<_, RunError>(records)
        })?;
        let sorted = |f: &dyn Fn(&BurstRecord) -> f64| {
            let mut v: Vec<f64> = records.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            v
        };
        let mut times = sorted(&|r| r.burst_ms);
        let mut m = Measurement { lateness, ..Measurement::default() };
        m.metric("burst_ms", percentile(&times, 0.5))
            .metric("burst_max_ms", percentile(&times, 1.0))
            .metric("cwnd_before_pkts", percentile(&sorted(&|r| f64::from(r.cwnd_before)), 0.5))
            .metric("cwnd_after_pkts", percentile(&sorted(&|r| f64::from(r.cwnd_after)), 0.5));
        if let Some(rate) = self.path.rate() {
            let floor = burst_floor(rate, self.burst, self.path.rtt());
            m.metric("burst_floor_ms", floor.as_secs_f64() * 1e3);
        }
        m.series.push(Series::cdf("burst_ms", &mut times));
        Ok(m)
    }

    fn planned(&self) -> Duration {
        // Per burst: the warm-up bytes, the idle time, the burst, a few round trips between.
        let send = |bytes: usize| {
            self.path.rate().map_or(Duration::ZERO, |r| r.transmission_time(bytes as u64))
        };
        let each = send(self.warmup_bytes) + self.idle + send(self.burst) + self.path.rtt() * 4;
        each * u32::try_from(self.bursts).unwrap_or(u32::MAX)
    }

    fn describe(&self) -> String {
        format!(
            "{}; {} connection: {} KB warm-up, {:.1} s idle, {} KB burst, {} bursts per round",
            self.path.describe(),
            self.cc,
            self.warmup_bytes / 1000,
            self.idle.as_secs_f64(),
            self.burst / 1000,
            self.bursts
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workload::{self, test_support};

    fn params(pairs: &[(&str, toml::Value)]) -> Params {
        test_support::emulated("100mbit", "10ms", pairs)
    }

    #[test]
    fn bad_parameters_are_named() {
        let err = |p: Params| workload::plan(&IdleRestart, &p).err().expect("refused");
        assert_eq!(err(params(&[("idle", "100ms".into())])).key, "idle");
        assert_eq!(err(params(&[("burst", "1KB".into())])).key, "burst");
        assert_eq!(err(params(&[("bursts", 0.into())])).key, "bursts");
        assert_eq!(err(params(&[("warmup_bytes", "1KB".into())])).key, "warmup_bytes");
        assert_eq!(err(params(&[("cc", "vegas".into())])).key, "cc");
        assert_eq!(err(params(&[("pause", "2s".into())])).key, "pause");
        assert_eq!(err(Params::from_pairs([("idle", toml::Value::from("2s"))])).key, "path");
        assert!(workload::plan(&IdleRestart, &params(&[])).is_ok());
    }

    #[test]
    fn the_floor_is_the_transmission_plus_the_one_way_delay() {
        // 256 KB at 100 Mbit/s: 20.97 ms on the wire, then 5 ms to the receiver. Full-mode
        // bursts with a warmed window took 26.3 ms: a floor with a whole RTT (31 ms) was above them.
        let floor = burst_floor(BitRate(100_000_000), 256 * 1024, Duration::from_millis(10));
        assert_eq!(floor, Duration::from_nanos(20_971_520 + 5_000_000));
    }

    /// One short round with the kernel default (slow start after idle): the burst completes
    /// no faster than its floor and the window restarts (needs root, /dev/net/tun and
    /// iproute2: fails with the reason otherwise).
    #[test]
    fn a_burst_after_idle_is_timed() {
        let plan = workload::plan(
            &IdleRestart,
            &params(&[("idle", "500ms".into()), ("bursts", 2.into())]),
        )
        .unwrap();
        let m = test_support::run_once(plan.as_ref(), 11);
        let get = |k: &str| m.metrics[k];
        assert!(get("burst_ms") > 0.0, "{m:?}");
        assert!(get("burst_ms") >= get("burst_floor_ms") * 0.95, "{m:?}");
        assert!(get("burst_ms") < 1000.0, "{m:?}");
        assert!(get("cwnd_before_pkts") > 10.0, "{m:?}");
        assert!(m.lateness.is_some());
    }
}
