//! `--tcp-info-interval`: every connection's `tcp_info` (and BBR's state) read on a fixed
//! period during the measured part, on the same clock as the requests (nanoseconds since the
//! run's start, like [`crate::report::SampleRecord::intended_ns`]), so a slow request can be
//! read beside its connection's cwnd, RTT, retransmissions and pacing rate at that moment.
//!
//! One sampler thread per run holds a duplicate of each connection's descriptor (so a
//! connection that ends never leaves it reading a closed or reused descriptor) and reads them
//! all each period; the measuring threads do nothing per request for it. The samples also
//! feed the attribution ([`timeline_attribution`]): each kept request gets the last sample
//! of its connection before it was sent and the first after it was answered.

use std::net::TcpStream;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::attribution::{AttributedSample, KernelSnapshot};
use crate::report::SampleRecord;
use crate::sys;

/// One reading of one connection's kernel state.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TcpInfoSample {
    /// Nanoseconds since the run's measured start.
    pub t_ns: u64,
    /// Connection index.
    pub connection: usize,
    /// The state attribution reads (cwnd, unacked, RTO, srtt, CA state, retransmissions,
    /// pacing rate, unsent bytes, BBR phase and pacing gain).
    #[serde(flatten)]
    pub state: KernelSnapshot,
    /// RTT variance, µs.
    pub rttvar_us: u32,
    /// Lost segments (current estimate).
    pub lost: u32,
    /// Retransmitted segments not yet acknowledged.
    pub retrans: u32,
    /// Delivery rate, bytes/s.
    pub delivery_rate: Option<u64>,
    /// Smallest RTT seen, µs.
    pub min_rtt_us: Option<u32>,
    /// BBR's bandwidth estimate, bytes/s.
    pub bbr_bw: Option<u64>,
    /// BBR's min RTT, µs.
    pub bbr_min_rtt_us: Option<u32>,
    /// BBR's cwnd gain x256.
    pub bbr_cwnd_gain: Option<u32>,
}

/// The connections a sampler reads and what it read.
#[derive(Debug, Default)]
pub(crate) struct Sampler {
    conns: Mutex<Vec<(usize, TcpStream, bool)>>,
    samples: Mutex<Vec<TcpInfoSample>>,
    done: AtomicBool,
}

impl Sampler {
    /// Adds connection `index` (a duplicate of its descriptor).
    pub(crate) fn watch(&self, index: usize, stream: &TcpStream, is_bbr: bool) {
        if let Ok(dup) = stream.try_clone() {
            self.conns.lock().unwrap_or_else(PoisonError::into_inner).push((index, dup, is_bbr));
        }
    }

    /// Ends [`Sampler::run`].
    pub(crate) fn finish(&self) {
        self.done.store(true, Ordering::Relaxed);
    }

    /// Samples every `period` from the run's start (once it is set) until [`Sampler::finish`].
    pub(crate) fn run(&self, period: Duration, start: &OnceLock<Instant>) {
        while start.get().is_none() {
            if self.done.load(Ordering::Relaxed) {
                return;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let start = *start.get().expect("checked");
        let mut next = start;
        while !self.done.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now < next {
                std::thread::sleep((next - now).min(Duration::from_millis(50)));
                continue;
            }
            next += period;
            let conns = self.conns.lock().unwrap_or_else(PoisonError::into_inner);
            let mut taken = Vec::with_capacity(conns.len());
            for (index, stream, is_bbr) in conns.iter() {
                if let Some(s) = read(*index, stream, *is_bbr, start) {
                    taken.push(s);
                }
            }
            drop(conns);
            self.samples.lock().unwrap_or_else(PoisonError::into_inner).extend(taken);
        }
    }

    /// The samples, oldest first.
    pub(crate) fn into_samples(self) -> Vec<TcpInfoSample> {
        let mut s = self.samples.into_inner().unwrap_or_else(PoisonError::into_inner);
        s.sort_by_key(|s| (s.t_ns, s.connection));
        s
    }
}

fn read(index: usize, stream: &TcpStream, is_bbr: bool, start: Instant) -> Option<TcpInfoSample> {
    let fd = stream.as_fd();
    let at = Instant::now();
    let info = tcptail_sock::tcp_info::tcp_info(fd).ok()?;
    let bbr = if is_bbr { tcptail_sock::cc_info::bbr_info(fd).ok().flatten() } else { None };
    let queued = sys::send_queue_bytes(fd).ok();
    Some(TcpInfoSample {
        t_ns: at.saturating_duration_since(start).as_nanos() as u64,
        connection: index,
        state: KernelSnapshot::from_kernel(&info, bbr.as_ref(), queued),
        rttvar_us: info.rttvar_us,
        lost: info.lost_segs,
        retrans: info.retrans_segs,
        delivery_rate: info.delivery_rate_bytes_per_sec,
        min_rtt_us: info.min_rtt_us,
        bbr_bw: bbr.map(|b| b.bw_bytes_per_sec),
        bbr_min_rtt_us: bbr.map(|b| b.min_rtt_us),
        bbr_cwnd_gain: bbr.map(|b| b.cwnd_gain),
    })
}

/// Attribution inputs from the timeline: for each answered request in `requests`, the last
/// sample of its connection at or before its intended send time and the first at or after its
/// answer. Requests with no sample on either side are left out.
pub fn timeline_attribution(
    requests: &[SampleRecord],
    samples: &[TcpInfoSample],
) -> Vec<AttributedSample> {
    let mut by_conn: std::collections::BTreeMap<usize, Vec<&TcpInfoSample>> =
        std::collections::BTreeMap::new();
    for s in samples {
        by_conn.entry(s.connection).or_default().push(s);
    }
    requests
        .iter()
        .filter(|r| r.answered)
        .filter_map(|r| {
            let timeline = by_conn.get(&r.connection)?;
            let done = r.intended_ns + r.latency_ns;
            let after_idx = timeline.partition_point(|s| s.t_ns < done);
            let before_idx = timeline.partition_point(|s| s.t_ns <= r.intended_ns);
            let before = timeline.get(before_idx.checked_sub(1)?)?;
            let after = timeline.get(after_idx)?;
            let sent_late = r.latency_ns.saturating_sub(r.service_ns.unwrap_or(r.latency_ns));
            Some(AttributedSample {
                latency_ns: r.latency_ns,
                send_late_ns: sent_late,
                before: before.state,
                after: after.state,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(t_ns: u64, connection: usize, cwnd: u32) -> TcpInfoSample {
        TcpInfoSample {
            t_ns,
            connection,
            state: KernelSnapshot { cwnd, ..KernelSnapshot::default() },
            rttvar_us: 0,
            lost: 0,
            retrans: 0,
            delivery_rate: None,
            min_rtt_us: None,
            bbr_bw: None,
            bbr_min_rtt_us: None,
            bbr_cwnd_gain: None,
        }
    }

    #[test]
    fn each_request_gets_its_connections_samples_around_it() {
        let samples = [sample(0, 0, 10), sample(0, 1, 99), sample(100, 0, 20), sample(200, 0, 30)];
        let req = |intended_ns, connection, latency_ns, answered| SampleRecord {
            intended_ns,
            connection,
            seq: 0,
            latency_ns,
            service_ns: Some(latency_ns),
            answered,
        };
        let out = timeline_attribution(
            &[req(50, 0, 60, true), req(150, 0, 100, true), req(10, 0, 5, false)],
            &samples,
        );
        // 50..110: before = t 0 (cwnd 10), after = t 200 (cwnd 30); 150..250: nothing after.
        assert_eq!(out.len(), 1);
        assert_eq!((out[0].before.cwnd, out[0].after.cwnd, out[0].latency_ns), (10, 30, 60));
    }
}
