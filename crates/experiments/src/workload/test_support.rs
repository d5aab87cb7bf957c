//! What the engines' tests share: parameters over an emulated path, and one real round.

use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use toml::Value;

use crate::params::Params;
use crate::round::{Measurement, RoundContext, RunError};
use crate::workload::VariantPlan;

/// Parameters for an emulated path of `rate` and `rtt`, then `pairs` (which may override).
pub(crate) fn emulated(rate: &str, rtt: &str, pairs: &[(&str, Value)]) -> Params {
    let mut all =
        vec![("path", Value::from("emulated")), ("rate", rate.into()), ("rtt", rtt.into())];
    all.extend(pairs.iter().cloned());
    Params::from_pairs(all)
}

/// Runs one round of `plan` with `seed` in a scratch directory. A real round needs root,
/// network namespaces, veth or TUN and tc: without them it fails with the reason.
pub(crate) fn run_once(plan: &dyn VariantPlan, seed: u64) -> Measurement {
    run_round(plan, seed).expect("a real round needs root, namespaces, veth/TUN and tc")
}

/// [`run_once`], returning the round's error instead of failing on it.
pub(crate) fn run_round(plan: &dyn VariantPlan, seed: u64) -> Result<Measurement, RunError> {
    run_reporting(plan, seed, &|_| {})
}

/// One round of `plan` in a scratch directory, its progress reports going to `progress`.
fn run_reporting(
    plan: &dyn VariantPlan,
    seed: u64,
    progress: &(dyn Fn(f64) + Sync),
) -> Result<Measurement, RunError> {
    let dir = tempfile::tempdir().expect("scratch directory");
    let ctx = RoundContext {
        round: 0,
        seed,
        scratch: dir.path(),
        stop_requested: &|| false,
        progress,
        path_events: &Mutex::default(),
        placement: &Mutex::default(),
    };
    plan.run(&ctx)
}

/// A round run with the emulator's per-packet log of the up link (client to server) and the
/// wall-clock time of each sample the workload reported through its progress callback: what
/// a test needs to hold a round's goodput to what the link carried in the same window, not
/// to this host's speed.
pub(crate) struct LoggedRound {
    pub m: Measurement,
    /// The emulator's start (its virtual time zero), wall-clock ms since the Unix epoch.
    pub init_ms: f64,
    /// Each departure from the up link: wall-clock ms since the Unix epoch (the log's
    /// virtual time from its init timestamp), IP packet bytes.
    pub departures: Vec<(f64, u64)>,
    /// Each progress report: wall-clock ms, fraction of the sending time done.
    pub progress: Vec<(f64, f64)>,
}

/// IP + TCP header bytes of a data packet (timestamps on): payload = packet - this.
pub(crate) const HEADERS: u64 = 52;

fn wall_ms(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH).expect("after 1970").as_secs_f64() * 1e3
}

/// [`run_once`], writing the emulator's logs and recording the progress reports.
pub(crate) fn run_logged(plan: &dyn VariantPlan, seed: u64) -> LoggedRound {
    let logs = tempfile::tempdir().expect("log directory");
    crate::path::TEST_LOG_DIR.with(|d| *d.borrow_mut() = Some(logs.path().to_owned()));
    let progress = Mutex::new(Vec::new());
    let record = |f: f64| progress.lock().unwrap().push((wall_ms(SystemTime::now()), f));
    let m = run_reporting(plan, seed, &record);
    crate::path::TEST_LOG_DIR.with(|d| *d.borrow_mut() = None);
    let m = m.expect("a real round needs root, namespaces, veth/TUN and tc");
    let log = std::fs::read_to_string(logs.path().join("up.log")).expect("up.log");
    let init: f64 = log
        .lines()
        .find_map(|l| l.strip_prefix("# init timestamp: "))
        .and_then(|v| v.parse().ok())
        .expect("init timestamp in up.log");
    let departures = log
        .lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            (f.len() >= 3 && f[1] == "-")
                .then(|| Some((f[0].parse::<f64>().ok()?, f[2].parse().ok()?)))
        })
        .flatten()
        .map(|(t, len)| (init + t, len))
        .collect();
    LoggedRound { m, init_ms: init, departures, progress: progress.into_inner().unwrap() }
}

impl LoggedRound {
    /// Wall-clock ms of the first progress report at or after `fraction` of the sending time.
    pub fn wall_at(&self, fraction: f64) -> f64 {
        self.progress
            .iter()
            .find(|&&(_, f)| f >= fraction - 1e-9)
            .unwrap_or_else(|| panic!("no progress report at {fraction}: {:?}", self.progress))
            .0
    }

    /// Payload bytes (each packet less [`HEADERS`]) the up link delivered by wall-clock ms `t`.
    pub fn carried_by(&self, t: f64) -> f64 {
        let n = self.departures.partition_point(|&(d, _)| d <= t);
        self.departures[..n].iter().map(|&(_, len)| len.saturating_sub(HEADERS) as f64).sum()
    }

    /// The goodput the link's own deliveries give over the samples between `from` and `to`
    /// (fractions of the sending time), computed as the workloads compute theirs
    /// ([`crate::workload::flows::goodput_between`]): the bytes delivered from the first of
    /// those samples to the last over the time between them, Mbit/s.
    pub fn link_goodput_mbps(&self, from: f64, to: f64) -> f64 {
        self.link_goodput_where(|_, f| f >= from - 1e-9 && f <= to + 1e-9)
    }

    /// [`LoggedRound::link_goodput_mbps`] over the samples `keep` accepts by their wall-clock
    /// ms and fraction.
    pub fn link_goodput_where(&self, keep: impl Fn(f64, f64) -> bool) -> f64 {
        let mut kept = self.progress.iter().filter(|&&(t, f)| keep(t, f)).map(|&(t, _)| t);
        let Some(first) = kept.next() else { return f64::NAN };
        match kept.next_back() {
            Some(last) if last > first => {
                (self.carried_by(last) - self.carried_by(first)) * 8.0 / (last - first) / 1e3
            }
            _ => f64::NAN,
        }
    }

    /// Wall-clock ms of the up link's first and last departure of a data packet (at least
    /// 200 bytes: not a handshake, a pure ACK or a FIN).
    pub fn data_span_ms(&self) -> (f64, f64) {
        let mut data = self.departures.iter().filter(|&&(_, len)| len >= 200).map(|&(t, _)| t);
        let first = data.next().expect("the link carried data");
        (first, data.next_back().unwrap_or(first))
    }

    /// The up link's output over its busiest `bin_ms` (virtual time, whole bins), Mbit/s:
    /// while its queue kept it busy the link ran at this rate, whatever the host did.
    pub fn busiest_mbps(&self, bin_ms: f64) -> f64 {
        let Some(&(start, _)) = self.departures.first() else { return 0.0 };
        let mut bins: Vec<u64> = Vec::new();
        for &(t, len) in &self.departures {
            let i = ((t - start) / bin_ms) as usize;
            if bins.len() <= i {
                bins.resize(i + 1, 0);
            }
            bins[i] += len;
        }
        bins.pop(); // the last bin is cut short by the end
        bins.iter().map(|&b| b as f64 * 8.0 / (bin_ms / 1e3) / 1e6).fold(0.0, f64::max)
    }
}
