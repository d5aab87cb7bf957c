//! What the congestion control says about a connection: BBR's `struct tcp_bbr_info` parsed
//! from raw bytes, and BBR's state machine phase inferred from its gains.
//!
//! The same bytes come from `getsockopt(TCP_CC_INFO)` ([`bbr_info`], [`cc_info`]) and from a
//! sock_diag dump's `INET_DIAG_BBRINFO` attribute, so the parser takes a byte slice.
//!
//! `struct tcp_bbr_info` (`include/uapi/linux/inet_diag.h`, 20 bytes, native endianness):
//!
//! | offset | field             | meaning                                    |
//! |-------:|-------------------|--------------------------------------------|
//! | 0      | `bbr_bw_lo`       | low 32 bits of the bandwidth estimate, B/s |
//! | 4      | `bbr_bw_hi`       | high 32 bits                               |
//! | 8      | `bbr_min_rtt`     | windowed min RTT, µs (`u32::MAX`: none yet)|
//! | 12     | `bbr_pacing_gain` | pacing gain, ×256 fixed point              |
//! | 16     | `bbr_cwnd_gain`   | cwnd gain, ×256 fixed point                |
//!
//! BBR does not export its state; [`BbrInfo::phase`] infers it from the gain pair that
//! `bbr_update_gains()` in `net/ipv4/tcp_bbr.c` sets for each state. Mainline BBR (v1, the one
//! in Linux 6.18): STARTUP 739/739 (`BBR_UNIT * 2885 / 1000 + 1`), DRAIN 88/739
//! (`BBR_UNIT * 1000 / 2885`), PROBE_BW pacing 320 (up), 192 (down) or 256 (cruise) with cwnd
//! gain 512, PROBE_RTT 256/256. Google's BBRv3 (out of tree): STARTUP pacing 710, PROBE_BW down
//! 232 (0.91), PROBE_RTT cwnd gain 128; those are recognised too. In PROBE_BW, v1 uses pacing
//! gain 256 while it believes it is policed (`lt_use_bw`), which reads as cruise.
//!
//! Parsing never panics and never allocates; it reads bytes with `from_ne_bytes`. Nothing here
//! touches a socket except the re-exported `sys` functions.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

pub use crate::sys::info::{bbr_info, cc_info, cc_info_raw};

/// BBR's path model, as exported in `struct tcp_bbr_info`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct BbrInfo {
    /// Bandwidth estimate in bytes per second (`bbr_bw_hi << 32 | bbr_bw_lo`).
    pub bw_bytes_per_sec: u64,
    /// Windowed minimum RTT in microseconds; `u32::MAX` until the first RTT sample (see
    /// [`BbrInfo::min_rtt`]).
    pub min_rtt_us: u32,
    /// Pacing gain in ×256 fixed point (256 = 1.0); see [`BbrInfo::pacing_gain_ratio`].
    pub pacing_gain: u32,
    /// Congestion-window gain in ×256 fixed point (512 = 2.0); see [`BbrInfo::cwnd_gain_ratio`].
    pub cwnd_gain: u32,
}

impl BbrInfo {
    /// Size of `struct tcp_bbr_info` in bytes.
    pub const LEN: usize = 20;

    /// The fixed-point unit of the gains (`BBR_UNIT`, 1.0).
    pub const GAIN_UNIT: u32 = 256;

    /// Parses `struct tcp_bbr_info`; `None` when `bytes` is shorter than [`BbrInfo::LEN`]
    /// (which is what a non-BBR socket returns). Bytes past the struct are ignored.
    pub fn parse(bytes: &[u8]) -> Option<BbrInfo> {
        let word = |off: usize| -> Option<u32> {
            Some(u32::from_ne_bytes(bytes.get(off..off + 4)?.try_into().ok()?))
        };
        let (lo, hi) = (word(0)?, word(4)?);
        Some(BbrInfo {
            bw_bytes_per_sec: u64::from(hi) << 32 | u64::from(lo),
            min_rtt_us: word(8)?,
            pacing_gain: word(12)?,
            cwnd_gain: word(16)?,
        })
    }

    /// The pacing gain as a ratio (1.0 paces at the bandwidth estimate).
    pub fn pacing_gain_ratio(&self) -> f64 {
        f64::from(self.pacing_gain) / f64::from(Self::GAIN_UNIT)
    }

    /// The congestion-window gain as a ratio (cwnd = ratio × estimated BDP).
    pub fn cwnd_gain_ratio(&self) -> f64 {
        f64::from(self.cwnd_gain) / f64::from(Self::GAIN_UNIT)
    }

    /// The minimum RTT, or `None` before BBR has seen an RTT sample (`min_rtt_us == u32::MAX`).
    pub fn min_rtt(&self) -> Option<Duration> {
        (self.min_rtt_us != u32::MAX).then(|| Duration::from_micros(u64::from(self.min_rtt_us)))
    }

    /// BBR's state, inferred from the gain pair (see the module docs for the values).
    ///
    /// Each known gain is matched within ±2 of the kernel's value to absorb rounding in other
    /// builds; any other pair is [`BbrPhase::Unknown`].
    pub fn phase(&self) -> BbrPhase {
        let near = |value: u32, target: u32| value.abs_diff(target) <= 2;
        let (p, c) = (self.pacing_gain, self.cwnd_gain);
        if near(p, 739) || near(p, 710) {
            BbrPhase::Startup
        } else if near(p, 88) {
            BbrPhase::Drain
        } else if near(p, 320) {
            BbrPhase::ProbeBwUp
        } else if near(p, 192) || near(p, 232) {
            BbrPhase::ProbeBwDown
        } else if near(p, 256) && c >= 384 {
            BbrPhase::ProbeBwCruise
        } else if near(p, 256) && c <= 320 {
            BbrPhase::ProbeRtt
        } else {
            BbrPhase::Unknown
        }
    }
}

/// BBR's state machine phase, as far as it can be told from the exported gains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BbrPhase {
    /// STARTUP: doubling the sending rate each round trip to find the bandwidth.
    Startup,
    /// DRAIN: pacing below the estimate to empty the queue STARTUP built.
    Drain,
    /// PROBE_BW, probing up (pacing gain 1.25): may add a queue on purpose.
    ProbeBwUp,
    /// PROBE_BW, probing down (pacing gain 0.75, or 0.91 in BBRv3): draining that queue.
    ProbeBwDown,
    /// PROBE_BW, cruising at the estimate (pacing gain 1.0, cwnd gain 2.0).
    ProbeBwCruise,
    /// PROBE_RTT: cwnd cut to about four packets for ≥ 200 ms to re-measure the min RTT.
    ProbeRtt,
    /// A gain pair no known BBR version uses.
    Unknown,
}

impl BbrPhase {
    /// The phase's name, as serialized: `startup`, `drain`, `probe-bw-up`, `probe-bw-down`,
    /// `probe-bw-cruise`, `probe-rtt`, `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            BbrPhase::Startup => "startup",
            BbrPhase::Drain => "drain",
            BbrPhase::ProbeBwUp => "probe-bw-up",
            BbrPhase::ProbeBwDown => "probe-bw-down",
            BbrPhase::ProbeBwCruise => "probe-bw-cruise",
            BbrPhase::ProbeRtt => "probe-rtt",
            BbrPhase::Unknown => "unknown",
        }
    }
}

impl fmt::Display for BbrPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A connection's congestion control: its name and, for BBR, its model.
///
/// Keyed by the algorithm's name (`TCP_CONGESTION`, or sock_diag's `INET_DIAG_CONG`) rather
/// than guessed from the info's length. Serialized with an `algorithm` tag:
/// `{"algorithm": "bbr", "bw_bytes_per_sec": ...}` or `{"algorithm": "other", "name": "cubic"}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "algorithm", rename_all = "kebab-case")]
pub enum CcInfo {
    /// BBR, with the model it exported.
    Bbr(BbrInfo),
    /// Any other algorithm (CUBIC, Reno, DCTCP, ...), or BBR whose info could not be parsed.
    /// Its own info, if any, is not interpreted.
    Other {
        /// The algorithm's name as the kernel reports it.
        name: String,
    },
}

impl CcInfo {
    /// Builds a `CcInfo` from the algorithm's name and its raw `TCP_CC_INFO` bytes.
    pub fn from_parts(name: &str, info: &[u8]) -> CcInfo {
        match BbrInfo::parse(info) {
            Some(bbr) if name == "bbr" => CcInfo::Bbr(bbr),
            _ => CcInfo::Other { name: name.to_owned() },
        }
    }

    /// The algorithm's name (`bbr` for [`CcInfo::Bbr`]).
    pub fn name(&self) -> &str {
        match self {
            CcInfo::Bbr(_) => "bbr",
            CcInfo::Other { name } => name,
        }
    }

    /// BBR's model, if the algorithm is BBR.
    pub fn bbr(&self) -> Option<&BbrInfo> {
        match self {
            CcInfo::Bbr(bbr) => Some(bbr),
            CcInfo::Other { .. } => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(bw_lo: u32, bw_hi: u32, min_rtt: u32, pacing: u32, cwnd: u32) -> Vec<u8> {
        [bw_lo, bw_hi, min_rtt, pacing, cwnd].iter().flat_map(|w| w.to_ne_bytes()).collect()
    }

    #[test]
    fn parses_all_fields_and_joins_bandwidth_halves() {
        let info = BbrInfo::parse(&raw(0x8000_0001, 2, 15, 739, 739)).unwrap();
        assert_eq!(info.bw_bytes_per_sec, 0x2_8000_0001);
        assert_eq!(info.min_rtt_us, 15);
        assert_eq!((info.pacing_gain, info.cwnd_gain), (739, 739));
        assert!((info.pacing_gain_ratio() - 2.886_718_75).abs() < 1e-9);
        assert_eq!(info.cwnd_gain_ratio(), 739.0 / 256.0);
        assert_eq!(info.min_rtt(), Some(Duration::from_micros(15)));
    }

    #[test]
    fn short_input_is_none_and_extra_bytes_are_ignored() {
        let bytes = raw(1, 0, 2, 256, 512);
        for len in 0..BbrInfo::LEN {
            assert_eq!(BbrInfo::parse(&bytes[..len]), None, "len {len}");
        }
        let mut longer = bytes.clone();
        longer.extend_from_slice(&[0xff; 12]);
        assert_eq!(BbrInfo::parse(&longer), BbrInfo::parse(&bytes));
    }

    /// `struct tcp_bbr_info` captured on Linux 6.18 after a 1 MiB loopback transfer (see
    /// `capture_fixtures` in tests/info_live.rs).
    #[test]
    fn fixture_from_linux_6_18() {
        let bytes = include_bytes!("../tests/fixtures/tcp_bbr_info_6.18.bin");
        let info = BbrInfo::parse(bytes).unwrap();
        assert!(info.bw_bytes_per_sec > 1_000_000, "{info:?}");
        assert!(info.min_rtt().is_some_and(|rtt| rtt < Duration::from_millis(10)), "{info:?}");
        assert_ne!(info.phase(), BbrPhase::Unknown, "{info:?}");
    }

    #[test]
    fn no_rtt_sample_yet_is_none() {
        let info = BbrInfo::parse(&raw(0, 0, u32::MAX, 739, 739)).unwrap();
        assert_eq!(info.min_rtt(), None);
    }

    /// The gain pairs `bbr_update_gains()` sets, computed the way tcp_bbr.c computes them.
    #[test]
    fn phase_from_kernel_gain_pairs() {
        const UNIT: u32 = 256;
        let high_gain = UNIT * 2885 / 1000 + 1;
        let drain_gain = UNIT * 1000 / 2885;
        assert_eq!((high_gain, drain_gain), (739, 88));
        let cases = [
            (high_gain, high_gain, BbrPhase::Startup),
            (drain_gain, high_gain, BbrPhase::Drain),
            (UNIT * 5 / 4, UNIT * 2, BbrPhase::ProbeBwUp),
            (UNIT * 3 / 4, UNIT * 2, BbrPhase::ProbeBwDown),
            (UNIT, UNIT * 2, BbrPhase::ProbeBwCruise),
            (UNIT, UNIT, BbrPhase::ProbeRtt),
            // BBRv3 (google/bbr v3 branch).
            (UNIT * 277 / 100 + 1, UNIT * 2, BbrPhase::Startup),
            (UNIT * 91 / 100, UNIT * 2, BbrPhase::ProbeBwDown),
            (UNIT * 5 / 4, UNIT * 2 + UNIT / 4, BbrPhase::ProbeBwUp),
            (UNIT, UNIT / 2, BbrPhase::ProbeRtt),
            // Rounding tolerance, and pairs no BBR uses.
            (738, 738, BbrPhase::Startup),
            (740, 739, BbrPhase::Startup),
            (500, 512, BbrPhase::Unknown),
            (0, 0, BbrPhase::Unknown),
            (UNIT, 352, BbrPhase::Unknown),
            (u32::MAX, u32::MAX, BbrPhase::Unknown),
        ];
        for (pacing, cwnd, phase) in cases {
            let info = BbrInfo { pacing_gain: pacing, cwnd_gain: cwnd, ..BbrInfo::default() };
            assert_eq!(info.phase(), phase, "pacing {pacing} cwnd {cwnd}");
        }
    }

    #[test]
    fn phase_names_are_kebab_case_for_display() {
        assert_eq!(BbrPhase::ProbeBwUp.to_string(), "probe-bw-up");
        assert_eq!(BbrPhase::ProbeRtt.as_str(), "probe-rtt");
        assert_eq!(BbrPhase::Startup.to_string(), "startup");
    }

    #[test]
    fn cc_info_is_keyed_by_name() {
        let bytes = raw(10, 0, 20, 256, 512);
        let bbr = CcInfo::from_parts("bbr", &bytes);
        assert_eq!(bbr.name(), "bbr");
        assert_eq!(bbr.bbr().map(BbrInfo::phase), Some(BbrPhase::ProbeBwCruise));
        // A 20-byte blob under another name is not taken for BBR.
        let other = CcInfo::from_parts("bbr3", &bytes);
        assert_eq!(other, CcInfo::Other { name: "bbr3".into() });
        // BBR whose info is missing degrades to its name.
        assert_eq!(CcInfo::from_parts("bbr", &[]), CcInfo::Other { name: "bbr".into() });
        assert_eq!(CcInfo::from_parts("cubic", &[]).bbr(), None);
    }

    proptest::proptest! {
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..64)) {
            let parsed = BbrInfo::parse(&bytes);
            proptest::prop_assert_eq!(parsed.is_some(), bytes.len() >= BbrInfo::LEN);
            if let Some(info) = parsed {
                let _ = (info.phase(), info.min_rtt(), info.pacing_gain_ratio());
            }
        }
    }
}
