//! Tests for the `struct tcp_info` parser: a synthetic buffer built at the header's offsets
//! (cross-checked against `libc::tcp_info`), every truncation length, a fixture captured on
//! Linux 6.18, and property tests.

use std::time::Duration;

use proptest::prelude::*;

use super::*;

/// Every whole-byte field: (name as in [`values`], offset, size), from `include/uapi/linux/tcp.h`.
const LAYOUT: &[(&str, usize, usize)] = &[
    ("state", 0, 1),
    ("ca_state", 1, 1),
    ("retransmits", 2, 1),
    ("probes", 3, 1),
    ("backoff", 4, 1),
    ("options", 5, 1),
    ("rto_us", 8, 4),
    ("ato_us", 12, 4),
    ("snd_mss_bytes", 16, 4),
    ("rcv_mss_bytes", 20, 4),
    ("unacked_segs", 24, 4),
    ("sacked_segs", 28, 4),
    ("lost_segs", 32, 4),
    ("retrans_segs", 36, 4),
    ("fackets_segs", 40, 4),
    ("last_data_sent_ms", 44, 4),
    ("last_ack_sent_ms", 48, 4),
    ("last_data_recv_ms", 52, 4),
    ("last_ack_recv_ms", 56, 4),
    ("pmtu_bytes", 60, 4),
    ("rcv_ssthresh_bytes", 64, 4),
    ("rtt_us", 68, 4),
    ("rttvar_us", 72, 4),
    ("snd_ssthresh_segs", 76, 4),
    ("snd_cwnd_segs", 80, 4),
    ("advmss_bytes", 84, 4),
    ("reordering_segs", 88, 4),
    ("rcv_rtt_us", 92, 4),
    ("rcv_space_bytes", 96, 4),
    ("total_retrans_segs", 100, 4),
    ("pacing_rate_bytes_per_sec", 104, 8),
    ("max_pacing_rate_bytes_per_sec", 112, 8),
    ("bytes_acked", 120, 8),
    ("bytes_received", 128, 8),
    ("segs_out", 136, 4),
    ("segs_in", 140, 4),
    ("notsent_bytes", 144, 4),
    ("min_rtt_us", 148, 4),
    ("data_segs_in", 152, 4),
    ("data_segs_out", 156, 4),
    ("delivery_rate_bytes_per_sec", 160, 8),
    ("busy_time_us", 168, 8),
    ("rwnd_limited_us", 176, 8),
    ("sndbuf_limited_us", 184, 8),
    ("delivered_segs", 192, 4),
    ("delivered_ce_segs", 196, 4),
    ("bytes_sent", 200, 8),
    ("bytes_retrans", 208, 8),
    ("dsack_dups", 216, 4),
    ("reord_seen", 220, 4),
    ("rcv_ooo_segs", 224, 4),
    ("snd_wnd_bytes", 228, 4),
    ("rcv_wnd_bytes", 232, 4),
    ("rehashes", 236, 4),
    ("total_rto", 240, 2),
    ("total_rto_recoveries", 242, 2),
    ("total_rto_time_ms", 244, 4),
    ("received_ce_segs", 248, 4),
    ("delivered_e1_bytes", 252, 4),
    ("delivered_e0_bytes", 256, 4),
    ("delivered_ce_bytes", 260, 4),
    ("received_e1_bytes", 264, 4),
    ("received_e0_bytes", 268, 4),
    ("received_ce_bytes", 272, 4),
    ("accecn_fail_mode", 276, 2),
    ("accecn_opt_seen", 278, 2),
];

/// Every field of a parsed `TcpInfo` by name, base-struct fields as `Some`.
fn values(t: &TcpInfo) -> Vec<(&'static str, Option<u64>)> {
    let b = |v: u32| Some(u64::from(v));
    let o32 = |v: Option<u32>| v.map(u64::from);
    let o16 = |v: Option<u16>| v.map(u64::from);
    vec![
        ("state", Some(u64::from(t.state.raw()))),
        ("ca_state", Some(u64::from(t.ca_state.raw()))),
        ("retransmits", Some(u64::from(t.retransmits))),
        ("probes", Some(u64::from(t.probes))),
        ("backoff", Some(u64::from(t.backoff))),
        ("options", Some(u64::from(t.options.0))),
        ("snd_wscale", Some(u64::from(t.snd_wscale))),
        ("rcv_wscale", Some(u64::from(t.rcv_wscale))),
        ("delivery_rate_app_limited", t.delivery_rate_app_limited.map(u64::from)),
        ("fastopen_client_fail", t.fastopen_client_fail.map(u64::from)),
        ("rto_us", b(t.rto_us)),
        ("ato_us", b(t.ato_us)),
        ("snd_mss_bytes", b(t.snd_mss_bytes)),
        ("rcv_mss_bytes", b(t.rcv_mss_bytes)),
        ("unacked_segs", b(t.unacked_segs)),
        ("sacked_segs", b(t.sacked_segs)),
        ("lost_segs", b(t.lost_segs)),
        ("retrans_segs", b(t.retrans_segs)),
        ("fackets_segs", b(t.fackets_segs)),
        ("last_data_sent_ms", b(t.last_data_sent_ms)),
        ("last_ack_sent_ms", b(t.last_ack_sent_ms)),
        ("last_data_recv_ms", b(t.last_data_recv_ms)),
        ("last_ack_recv_ms", b(t.last_ack_recv_ms)),
        ("pmtu_bytes", b(t.pmtu_bytes)),
        ("rcv_ssthresh_bytes", b(t.rcv_ssthresh_bytes)),
        ("rtt_us", b(t.rtt_us)),
        ("rttvar_us", b(t.rttvar_us)),
        ("snd_ssthresh_segs", b(t.snd_ssthresh_segs)),
        ("snd_cwnd_segs", b(t.snd_cwnd_segs)),
        ("advmss_bytes", b(t.advmss_bytes)),
        ("reordering_segs", b(t.reordering_segs)),
        ("rcv_rtt_us", b(t.rcv_rtt_us)),
        ("rcv_space_bytes", b(t.rcv_space_bytes)),
        ("total_retrans_segs", b(t.total_retrans_segs)),
        ("pacing_rate_bytes_per_sec", t.pacing_rate_bytes_per_sec),
        ("max_pacing_rate_bytes_per_sec", t.max_pacing_rate_bytes_per_sec),
        ("bytes_acked", t.bytes_acked),
        ("bytes_received", t.bytes_received),
        ("segs_out", o32(t.segs_out)),
        ("segs_in", o32(t.segs_in)),
        ("notsent_bytes", o32(t.notsent_bytes)),
        ("min_rtt_us", o32(t.min_rtt_us)),
        ("data_segs_in", o32(t.data_segs_in)),
        ("data_segs_out", o32(t.data_segs_out)),
        ("delivery_rate_bytes_per_sec", t.delivery_rate_bytes_per_sec),
        ("busy_time_us", t.busy_time_us),
        ("rwnd_limited_us", t.rwnd_limited_us),
        ("sndbuf_limited_us", t.sndbuf_limited_us),
        ("delivered_segs", o32(t.delivered_segs)),
        ("delivered_ce_segs", o32(t.delivered_ce_segs)),
        ("bytes_sent", t.bytes_sent),
        ("bytes_retrans", t.bytes_retrans),
        ("dsack_dups", o32(t.dsack_dups)),
        ("reord_seen", o32(t.reord_seen)),
        ("rcv_ooo_segs", o32(t.rcv_ooo_segs)),
        ("snd_wnd_bytes", o32(t.snd_wnd_bytes)),
        ("rcv_wnd_bytes", o32(t.rcv_wnd_bytes)),
        ("rehashes", o32(t.rehashes)),
        ("total_rto", o16(t.total_rto)),
        ("total_rto_recoveries", o16(t.total_rto_recoveries)),
        ("total_rto_time_ms", o32(t.total_rto_time_ms)),
        ("received_ce_segs", o32(t.received_ce_segs)),
        ("delivered_e1_bytes", o32(t.delivered_e1_bytes)),
        ("delivered_e0_bytes", o32(t.delivered_e0_bytes)),
        ("delivered_ce_bytes", o32(t.delivered_ce_bytes)),
        ("received_e1_bytes", o32(t.received_e1_bytes)),
        ("received_e0_bytes", o32(t.received_e0_bytes)),
        ("received_ce_bytes", o32(t.received_ce_bytes)),
        ("accecn_fail_mode", o16(t.accecn_fail_mode)),
        ("accecn_opt_seen", o16(t.accecn_opt_seen)),
    ]
}

fn value(t: &TcpInfo, name: &str) -> Option<u64> {
    values(t).into_iter().find(|(n, _)| *n == name).unwrap_or_else(|| panic!("no field {name}")).1
}

fn put(buf: &mut [u8], off: usize, size: usize, v: u64) {
    let bytes = match size {
        1 => vec![u8::try_from(v).unwrap()],
        2 => u16::try_from(v).unwrap().to_ne_bytes().to_vec(),
        4 => u32::try_from(v).unwrap().to_ne_bytes().to_vec(),
        8 => v.to_ne_bytes().to_vec(),
        _ => unreachable!(),
    };
    buf[off..off + size].copy_from_slice(&bytes);
}

/// A distinct, size-appropriate value per field, so a misplaced read cannot go unnoticed.
fn synthetic_value(index: usize, size: usize) -> u64 {
    let i = index as u64 + 1;
    match size {
        1 => i,
        2 => 0x0100 + i,
        4 => 0x0101_0000 + i,
        _ => 0x0102_0304_0000_0000 + i,
    }
}

fn synthetic() -> Vec<u8> {
    let mut buf = vec![0u8; TcpInfo::KNOWN_LEN];
    for (index, &(_, off, size)) in LAYOUT.iter().enumerate() {
        put(&mut buf, off, size, synthetic_value(index, size));
    }
    // snd_wscale 7, rcv_wscale 14; app-limited set, fastopen_client_fail 2.
    let (wscale, flags) =
        if cfg!(target_endian = "little") { (0xe7, 0b101) } else { (0x7e, 0b1100_0000) };
    buf[6] = wscale;
    buf[7] = flags;
    buf
}

#[test]
fn layout_covers_every_byte_once() {
    let mut covered = vec![0u8; TcpInfo::KNOWN_LEN];
    for &(_, off, size) in LAYOUT {
        assert_eq!(off % size, 0, "field at {off} is naturally aligned");
        covered[off..off + size].iter_mut().for_each(|c| *c += 1);
    }
    covered[6] += 1; // wscale nibbles
    covered[7] += 1; // app_limited / fastopen_client_fail bits
    assert!(covered.iter().all(|&c| c == 1), "{covered:?}");
}

/// The header's offsets as `libc` (glibc target) lays them out, field by field.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn layout_matches_libc_tcp_info() {
    use std::mem::{offset_of, size_of};
    macro_rules! libc_offsets {
        ($($name:literal => $field:ident),* $(,)?) => {
            [$(($name, offset_of!(libc::tcp_info, $field))),*]
        };
    }
    assert_eq!(size_of::<libc::tcp_info>(), TcpInfo::KNOWN_LEN);
    let libc = libc_offsets! {
        "state" => tcpi_state, "ca_state" => tcpi_ca_state, "retransmits" => tcpi_retransmits,
        "probes" => tcpi_probes, "backoff" => tcpi_backoff, "options" => tcpi_options,
        "rto_us" => tcpi_rto, "ato_us" => tcpi_ato, "snd_mss_bytes" => tcpi_snd_mss,
        "rcv_mss_bytes" => tcpi_rcv_mss, "unacked_segs" => tcpi_unacked,
        "sacked_segs" => tcpi_sacked, "lost_segs" => tcpi_lost, "retrans_segs" => tcpi_retrans,
        "fackets_segs" => tcpi_fackets, "last_data_sent_ms" => tcpi_last_data_sent,
        "last_ack_sent_ms" => tcpi_last_ack_sent, "last_data_recv_ms" => tcpi_last_data_recv,
        "last_ack_recv_ms" => tcpi_last_ack_recv, "pmtu_bytes" => tcpi_pmtu,
        "rcv_ssthresh_bytes" => tcpi_rcv_ssthresh, "rtt_us" => tcpi_rtt,
        "rttvar_us" => tcpi_rttvar, "snd_ssthresh_segs" => tcpi_snd_ssthresh,
        "snd_cwnd_segs" => tcpi_snd_cwnd, "advmss_bytes" => tcpi_advmss,
        "reordering_segs" => tcpi_reordering, "rcv_rtt_us" => tcpi_rcv_rtt,
        "rcv_space_bytes" => tcpi_rcv_space, "total_retrans_segs" => tcpi_total_retrans,
        "pacing_rate_bytes_per_sec" => tcpi_pacing_rate,
        "max_pacing_rate_bytes_per_sec" => tcpi_max_pacing_rate,
        "bytes_acked" => tcpi_bytes_acked, "bytes_received" => tcpi_bytes_received,
        "segs_out" => tcpi_segs_out, "segs_in" => tcpi_segs_in,
        "notsent_bytes" => tcpi_notsent_bytes, "min_rtt_us" => tcpi_min_rtt,
        "data_segs_in" => tcpi_data_segs_in, "data_segs_out" => tcpi_data_segs_out,
        "delivery_rate_bytes_per_sec" => tcpi_delivery_rate, "busy_time_us" => tcpi_busy_time,
        "rwnd_limited_us" => tcpi_rwnd_limited, "sndbuf_limited_us" => tcpi_sndbuf_limited,
        "delivered_segs" => tcpi_delivered, "delivered_ce_segs" => tcpi_delivered_ce,
        "bytes_sent" => tcpi_bytes_sent, "bytes_retrans" => tcpi_bytes_retrans,
        "dsack_dups" => tcpi_dsack_dups, "reord_seen" => tcpi_reord_seen,
        "rcv_ooo_segs" => tcpi_rcv_ooopack, "snd_wnd_bytes" => tcpi_snd_wnd,
        "rcv_wnd_bytes" => tcpi_rcv_wnd, "rehashes" => tcpi_rehash,
        "total_rto" => tcpi_total_rto, "total_rto_recoveries" => tcpi_total_rto_recoveries,
        "total_rto_time_ms" => tcpi_total_rto_time, "received_ce_segs" => tcpi_received_ce,
        "delivered_e1_bytes" => tcpi_delivered_e1_bytes,
        "delivered_e0_bytes" => tcpi_delivered_e0_bytes,
        "delivered_ce_bytes" => tcpi_delivered_ce_bytes,
        "received_e1_bytes" => tcpi_received_e1_bytes,
        "received_e0_bytes" => tcpi_received_e0_bytes,
        "received_ce_bytes" => tcpi_received_ce_bytes,
        "accecn_fail_mode" => tcpi_accecn_fail_mode, "accecn_opt_seen" => tcpi_accecn_opt_seen,
    };
    assert_eq!(libc.len(), LAYOUT.len());
    for ((name, libc_off), &(layout_name, off, _)) in libc.iter().zip(LAYOUT) {
        assert_eq!((*name, *libc_off), (layout_name, off));
    }
    // libc has no member for byte 7 (the app-limited / Fast Open bitfield byte): it is the
    // padding between the wscale byte and tcpi_rto.
    assert_eq!(offset_of!(libc::tcp_info, tcpi_snd_rcv_wscale), 6);
}

#[test]
fn synthetic_buffer_parses_field_by_field() {
    let info = TcpInfo::parse(&synthetic()).unwrap();
    assert_eq!(info.len, TcpInfo::KNOWN_LEN);
    for (index, &(name, _, size)) in LAYOUT.iter().enumerate() {
        assert_eq!(value(&info, name), Some(synthetic_value(index, size)), "{name}");
    }
    assert_eq!((info.snd_wscale, info.rcv_wscale), (7, 14));
    assert_eq!(info.delivery_rate_app_limited(), Some(true));
    assert_eq!(info.fastopen_client_fail, Some(2));
    assert_eq!((info.state, info.ca_state), (TcpState::Established, CaState::Cwr));
}

#[test]
fn base_struct_is_required() {
    let buf = synthetic();
    for len in 0..TcpInfo::BASE_LEN {
        let err = TcpInfo::parse(&buf[..len]).unwrap_err();
        assert_eq!(err, TcpInfoError::TooShort { len, min: TcpInfo::BASE_LEN });
        assert!(err.to_string().contains(&format!("{len} bytes")), "{err}");
    }
    let base = TcpInfo::parse(&buf[..TcpInfo::BASE_LEN]).unwrap();
    assert!(values(&base).iter().skip(10).take(24).all(|(_, v)| v.is_some()));
    assert_eq!(base.pacing_rate_bytes_per_sec, None);
    assert_eq!(base.delivery_rate_app_limited(), None, "the bit means nothing before 4.9");
    assert_eq!(base.fastopen_client_fail, None);
}

/// Every length from 0 to 300: no panic, and a field, once present, stays present with the
/// same value as the input grows. Past 280 nothing changes but `len`.
#[test]
fn every_length_parses_or_errors_and_fields_only_grow() {
    let mut buf = synthetic();
    buf.extend_from_slice(&[0xee; 20]);
    let full = values(&TcpInfo::parse(&buf).unwrap());
    let mut previous: Option<Vec<(&str, Option<u64>)>> = None;
    for len in 0..=300 {
        let Ok(info) = TcpInfo::parse(&buf[..len]) else {
            assert!(len < TcpInfo::BASE_LEN);
            continue;
        };
        assert_eq!(info.len, len);
        let now = values(&info);
        for ((name, v), (_, full_v)) in now.iter().zip(&full) {
            assert!(v.is_none() || v == full_v, "{name} at {len}");
        }
        if let Some(prev) = &previous {
            for ((name, before), (_, after)) in prev.iter().zip(&now) {
                assert!(before.is_none() || before == after, "{name} vanished at {len}");
            }
        }
        let present = now.iter().filter(|(_, v)| v.is_some()).count();
        if len >= TcpInfo::KNOWN_LEN {
            assert_eq!(present, full.len(), "all fields at {len}");
        }
        previous = Some(now);
    }
}

#[test]
fn tail_fields_appear_at_their_kernel_lengths() {
    let buf = synthetic();
    let at = |len: usize| TcpInfo::parse(&buf[..len]).unwrap();
    assert_eq!(at(119).pacing_rate_bytes_per_sec.map(|_| ()), Some(()));
    assert_eq!(at(119).max_pacing_rate_bytes_per_sec, None);
    assert!(at(167).delivery_rate_app_limited.is_none());
    assert!(at(168).delivery_rate_app_limited.is_some());
    assert!(at(231).fastopen_client_fail.is_none() && at(232).fastopen_client_fail.is_some());
    // The 6.7 struct (248 bytes): RTO totals present, 6.18's AccECN counters absent.
    let v6_7 = at(248);
    assert!(v6_7.total_rto_time_ms.is_some() && v6_7.received_ce_segs.is_none());
    assert!(at(279).accecn_fail_mode.is_some() && at(279).accecn_opt_seen.is_none());
}

/// `struct tcp_info` captured from a loopback BBR connection on this machine's Linux 6.18 after
/// a 1 MiB transfer (see `capture_fixtures` in tests/info_live.rs).
#[test]
fn fixture_from_linux_6_18() {
    let bytes = include_bytes!("../../tests/fixtures/tcp_info_6.18_established.bin");
    assert_eq!(bytes.len(), 280);
    let info = TcpInfo::parse(bytes).unwrap();
    assert_eq!(info.state, TcpState::Established);
    assert_eq!(info.state.to_string(), "ESTABLISHED");
    assert_eq!(info.ca_state, CaState::Open);
    assert!(info.snd_mss_bytes > 0 && info.rtt_us > 0 && info.snd_cwnd_segs > 0, "{info:?}");
    assert!(info.options.contains(TcpiOptions::TIMESTAMPS | TcpiOptions::SACK));
    assert!(info.options.contains(TcpiOptions::WSCALE));
    assert_eq!(info.bytes_acked, Some((1 << 20) + 1), "1 MiB plus the SYN");
    assert_eq!(info.bytes_sent, Some(1 << 20));
    assert_eq!((info.notsent_bytes, info.unacked_segs), (Some(0), 0));
    assert!(info.pacing_rate_bytes_per_sec.unwrap() > 0);
    assert!(info.delivery_rate_bytes_per_sec.unwrap() > 0);
    assert!(info.min_rtt_us.unwrap() > 0);
    assert_eq!(info.total_rto, Some(0));
    assert!(info.accecn_opt_seen.is_some());
    assert_eq!(info.send_queue_delay_estimate(), Some(Duration::ZERO));
}

fn with_rates(notsent: u32, delivery: u64, app_limited: bool, pacing: u64) -> TcpInfo {
    TcpInfo {
        notsent_bytes: Some(notsent),
        delivery_rate_bytes_per_sec: Some(delivery),
        delivery_rate_app_limited: Some(app_limited),
        pacing_rate_bytes_per_sec: Some(pacing),
        snd_cwnd_segs: 10,
        snd_mss_bytes: 1000,
        rtt_us: 1000, // cwnd / srtt = 10 MB/s
        ..TcpInfo::default()
    }
}

#[test]
fn send_queue_delay_uses_delivery_rate_unless_app_limited() {
    let d = with_rates(50_000, 1_000_000, false, 5_000_000).send_queue_delay().unwrap();
    assert_eq!((d.rate_source, d.rate_bytes_per_sec), (RateSource::DeliveryRate, 1_000_000));
    assert_eq!(d.delay, Duration::from_millis(50));
    assert_eq!(d.cwnd_per_srtt_bytes_per_sec, Some(10_000_000));

    let d = with_rates(50_000, 1_000_000, true, 5_000_000).send_queue_delay().unwrap();
    assert_eq!((d.rate_source, d.delay), (RateSource::PacingRate, Duration::from_millis(10)));

    let d = with_rates(50_000, 1_000_000, true, 50_000_000).send_queue_delay().unwrap();
    assert_eq!((d.rate_source, d.delay), (RateSource::CwndPerSrtt, Duration::from_millis(5)));

    // Unpaced (u64::MAX) and a zero delivery rate leave cwnd / srtt.
    let d = with_rates(50_000, 0, false, u64::MAX).send_queue_delay().unwrap();
    assert_eq!((d.rate_source, d.pacing_rate_bytes_per_sec), (RateSource::CwndPerSrtt, None));
}

#[test]
fn send_queue_delay_needs_notsent_and_a_rate() {
    assert_eq!(TcpInfo::default().send_queue_delay(), None, "notsent absent");
    let no_rate = TcpInfo { notsent_bytes: Some(100), ..TcpInfo::default() };
    assert_eq!(no_rate.send_queue_delay_estimate(), None);
    let empty = with_rates(0, 1_000_000, false, 0);
    assert_eq!(empty.send_queue_delay_estimate(), Some(Duration::ZERO));
    let huge = TcpInfo {
        notsent_bytes: Some(u32::MAX),
        pacing_rate_bytes_per_sec: Some(1),
        ..TcpInfo::default()
    };
    assert_eq!(huge.send_queue_delay_estimate(), Some(Duration::from_secs(u64::from(u32::MAX))));
}

#[test]
fn state_names_round_trip() {
    for raw in 0..=255u8 {
        let state = TcpState::from_raw(raw);
        assert_eq!(state.raw(), raw);
        assert_eq!(matches!(state, TcpState::Unknown(_)), !(1..=13).contains(&raw));
        let ca = CaState::from_raw(raw);
        assert_eq!(ca.raw(), raw);
    }
    assert_eq!(TcpState::from_raw(1), TcpState::Established);
    assert_eq!(TcpState::from_raw(10).name(), "LISTEN");
    assert_eq!(TcpState::from_raw(200).to_string(), "UNKNOWN(200)");
    let ca_names: Vec<_> = (0..5).map(|r| CaState::from_raw(r).name()).collect();
    assert_eq!(ca_names, ["Open", "Disorder", "CWR", "Recovery", "Loss"]);
    assert_eq!(CaState::from_raw(9).to_string(), "Unknown(9)");
}

/// Arbitrary bytes, shorter and longer than the struct.
fn arbitrary_bytes() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..=320)
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in arbitrary_bytes()) {
        match TcpInfo::parse(&bytes) {
            Ok(info) => {
                prop_assert!(bytes.len() >= TcpInfo::BASE_LEN);
                let _ = (info.send_queue_delay(), info.state.to_string(), info.rtt());
            }
            Err(TcpInfoError::TooShort { len, .. }) => prop_assert_eq!(len, bytes.len()),
        }
    }

    #[test]
    fn delay_inputs_parse_as_the_whole_struct(bytes in arbitrary_bytes()) {
        match (TcpInfo::parse(&bytes), TcpInfo::parse_delay_inputs(&bytes)) {
            (Ok(full), Ok(inputs)) => {
                prop_assert_eq!(inputs.state, full.state);
                prop_assert_eq!(inputs.rtt_us, full.rtt_us);
                prop_assert_eq!(inputs.send_queue_delay(), full.send_queue_delay());
            }
            (full, inputs) => prop_assert_eq!(full, inputs),
        }
    }

    #[test]
    fn truncation_only_removes_fields(bytes in arbitrary_bytes(), cut in 0usize..=320) {
        let cut = cut.min(bytes.len());
        if let (Ok(full), Ok(short)) = (TcpInfo::parse(&bytes), TcpInfo::parse(&bytes[..cut])) {
            for ((name, f), (_, s)) in values(&full).iter().zip(&values(&short)) {
                prop_assert!(s.is_none() || s == f, "{} changed when cut to {}", name, cut);
            }
        }
    }
}
