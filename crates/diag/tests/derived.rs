//! Derived values: limited-time fractions, BBR phase, send-queue delay fall-backs, prefixes.

use tcptail_diag::metrics::Format;
use tcptail_diag::{Derived, Prefix};
use tcptail_sock::cc_info::{BbrInfo, BbrPhase};
use tcptail_sock::tcp_info::{RateSource, TcpInfo};

fn info(busy: u64, rwnd: u64, sndbuf: u64) -> TcpInfo {
    let mut raw = [0u8; 280];
    raw[16..20].copy_from_slice(&1000u32.to_ne_bytes()); // mss
    raw[68..72].copy_from_slice(&10_000u32.to_ne_bytes()); // srtt 10 ms
    raw[80..84].copy_from_slice(&10u32.to_ne_bytes()); // cwnd -> 1 MB/s
    raw[104..112].copy_from_slice(&u64::MAX.to_ne_bytes()); // unpaced
    raw[144..148].copy_from_slice(&50_000u32.to_ne_bytes()); // notsent
    raw[160..168].copy_from_slice(&500_000u64.to_ne_bytes()); // delivery 500 kB/s
    raw[7] = 1; // app-limited
    raw[168..176].copy_from_slice(&busy.to_ne_bytes());
    raw[176..184].copy_from_slice(&rwnd.to_ne_bytes());
    raw[184..192].copy_from_slice(&sndbuf.to_ne_bytes());
    TcpInfo::parse(&raw).unwrap()
}

#[test]
fn limited_fractions_of_busy_time() {
    let d = Derived::compute(Some(&info(1_000_000, 250_000, 100_000)), None);
    assert_eq!(d.rwnd_limited_fraction, Some(0.25));
    assert_eq!(d.sndbuf_limited_fraction, Some(0.1));
    assert!((d.busy_unlimited_fraction.unwrap() - 0.65).abs() < 1e-9);
    let idle = Derived::compute(Some(&info(0, 0, 0)), None);
    assert_eq!(idle.rwnd_limited_fraction, None, "no busy time: no fraction");
    let old = TcpInfo::parse(&[0u8; 160]).unwrap();
    assert_eq!(Derived::compute(Some(&old), None).rwnd_limited_fraction, None, "pre-4.10");
}

#[test]
fn queue_delay_falls_back_when_delivery_rate_is_app_limited() {
    let d = Derived::compute(Some(&info(1, 0, 0)), None).send_queue_delay.unwrap();
    // app-limited delivery rate skipped, unpaced: cwnd*mss/srtt = 10*1000/0.01 = 1 MB/s
    assert_eq!(d.rate_source, RateSource::CwndPerSrtt);
    assert_eq!(d.rate_bytes_per_sec, 1_000_000);
    assert_eq!(d.delay.as_micros(), 50_000);
}

#[test]
fn bbr_phase_from_gains() {
    let bbr = BbrInfo { bw_bytes_per_sec: 1, min_rtt_us: 10, pacing_gain: 320, cwnd_gain: 512 };
    let d = Derived::compute(None, Some(&bbr));
    assert_eq!(d.bbr_phase, Some(BbrPhase::ProbeBwUp));
}

#[test]
fn prefixes_and_v4_mapped() {
    let p = Prefix { addr: "10.1.0.0".parse().unwrap(), len: 12 };
    assert!(p.contains("10.15.255.1".parse().unwrap()));
    assert!(!p.contains("10.16.0.1".parse().unwrap()));
    assert!(p.contains("::ffff:10.1.2.3".parse().unwrap()));
    let p6 = Prefix { addr: "2001:db8::".parse().unwrap(), len: 32 };
    assert!(p6.contains("2001:db8:1::1".parse().unwrap()));
    assert!(!p6.contains("10.1.2.3".parse().unwrap()));
    let any = Prefix { addr: "0.0.0.0".parse().unwrap(), len: 0 };
    assert!(any.contains("192.0.2.1".parse().unwrap()));
}

#[test]
fn format_from_accept_header() {
    let prom = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";
    assert_eq!(Format::from_accept(Some(prom)), Format::OpenMetrics);
    assert_eq!(Format::from_accept(Some("text/plain")), Format::Prometheus);
    assert_eq!(Format::from_accept(None), Format::Prometheus);
}
