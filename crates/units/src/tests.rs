use super::*;
use proptest::prelude::*;

#[test]
fn sizes_decimal_and_binary() {
    assert_eq!("1500".parse::<ByteSize>().unwrap(), ByteSize(1500));
    assert_eq!("375KB".parse::<ByteSize>().unwrap(), ByteSize(375_000));
    assert_eq!("64KiB".parse::<ByteSize>().unwrap(), ByteSize(65_536));
    assert_eq!("4MiB".parse::<ByteSize>().unwrap(), ByteSize(4 << 20));
    assert_eq!("1.5MB".parse::<ByteSize>().unwrap(), ByteSize(1_500_000));
    assert_eq!("16 kb".parse::<ByteSize>().unwrap(), ByteSize(16_000));
}

#[test]
fn size_errors_name_the_problem() {
    let e = "10parsecs".parse::<ByteSize>().unwrap_err();
    assert!(e.to_string().contains("unknown unit 'parsecs'"), "{e}");
    let e = "-5KB".parse::<ByteSize>().unwrap_err();
    assert!(e.to_string().contains("negative"), "{e}");
    assert!("".parse::<ByteSize>().is_err());
    assert!("KB".parse::<ByteSize>().is_err());
}

#[test]
fn rates_are_bits() {
    assert_eq!("30mbit".parse::<BitRate>().unwrap(), BitRate(30_000_000));
    assert_eq!("30Mbit/s".parse::<BitRate>().unwrap(), BitRate(30_000_000));
    assert_eq!("10gbit".parse::<BitRate>().unwrap(), BitRate(10_000_000_000));
    assert_eq!("128kbit".parse::<BitRate>().unwrap(), BitRate(128_000));
    assert_eq!("100mbps".parse::<BitRate>().unwrap(), BitRate(100_000_000));
    let e = "30".parse::<BitRate>().unwrap_err();
    assert!(e.to_string().contains("missing unit"), "{e}");
    assert!("30furlongs".parse::<BitRate>().is_err());
}

#[test]
fn transmission_time_exact() {
    // 1500 bytes at 30 Mbit/s = 400 µs.
    assert_eq!(BitRate(30_000_000).transmission_time(1500), Duration::from_micros(400));
    assert_eq!(BitRate(0).transmission_time(1), Duration::MAX);
}

#[test]
fn durations() {
    assert_eq!(parse_duration("10ms").unwrap(), Duration::from_millis(10));
    assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
    assert_eq!(parse_duration("250us").unwrap(), Duration::from_micros(250));
    assert_eq!(parse_duration("250µs").unwrap(), Duration::from_micros(250));
    assert_eq!(parse_duration("2min").unwrap(), Duration::from_secs(120));
    assert!(parse_duration("10").unwrap_err().to_string().contains("missing unit"));
    assert!(parse_duration("-1ms").unwrap_err().to_string().contains("negative"));
    assert!(parse_duration("10 fortnights").is_err());
    assert_eq!(HumanDuration(Duration::from_millis(10)).to_string(), "10ms");
}

#[test]
fn percent_bounds() {
    assert_eq!("1%".parse::<Percent>().unwrap().fraction(), 0.01);
    assert_eq!("100%".parse::<Percent>().unwrap().fraction(), 1.0);
    assert!("101%".parse::<Percent>().unwrap_err().to_string().contains("at most 100%"));
    assert!("1".parse::<Percent>().is_err());
    assert!("-1%".parse::<Percent>().is_err());
}

#[test]
fn message_rates() {
    assert_eq!("1000/s".parse::<MessageRate>().unwrap().as_per_second(), 1000.0);
    assert_eq!("2k/s".parse::<MessageRate>().unwrap().as_per_second(), 2000.0);
    assert_eq!("5/ms".parse::<MessageRate>().unwrap().as_per_second(), 5000.0);
    assert_eq!("250".parse::<MessageRate>().unwrap().as_per_second(), 250.0);
    assert!("0/s".parse::<MessageRate>().is_err());
    assert!("10/fortnight".parse::<MessageRate>().is_err());
    assert_eq!("1000/s".parse::<MessageRate>().unwrap().interval(), Duration::from_millis(1));
}

#[test]
fn bdp_products() {
    let bdp: Bdp = "10gbit x 1ms".parse().unwrap();
    assert_eq!(bdp.bytes(), ByteSize(1_250_000));
    let bdp: Bdp = "1gbit*500us".parse().unwrap();
    assert_eq!(bdp.bytes(), ByteSize(62_500));
    let bdp: Bdp = "30mbit × 10ms".parse().unwrap();
    assert_eq!(bdp.bytes(), ByteSize(37_500));
    assert!("10gbit".parse::<Bdp>().is_err());
    assert!("10gbit x".parse::<Bdp>().is_err());
}

#[test]
fn serde_accepts_numbers_and_text() {
    #[derive(Deserialize)]
    struct T {
        a: ByteSize,
        b: ByteSize,
        r: BitRate,
    }
    let t: T = serde_json::from_str(r#"{"a": 4096, "b": "4MiB", "r": "30mbit"}"#).unwrap();
    assert_eq!(t.a, ByteSize(4096));
    assert_eq!(t.b, ByteSize(4 << 20));
    assert_eq!(t.r, BitRate(30_000_000));
}

proptest! {
    #[test]
    fn size_parser_never_panics(s in "\\PC{0,16}") {
        let _ = s.parse::<ByteSize>();
        let _ = s.parse::<BitRate>();
        let _ = parse_duration(&s);
        let _ = s.parse::<Percent>();
        let _ = s.parse::<MessageRate>();
        let _ = s.parse::<Bdp>();
    }

    #[test]
    fn size_round_trips_through_display(n in 0u64..(1 << 40)) {
        let shown = ByteSize(n).to_string();
        prop_assert_eq!(shown.parse::<ByteSize>().unwrap(), ByteSize(n));
    }

    #[test]
    fn duration_round_trips_through_display(ns in 0u64..(1u64 << 50)) {
        let d = Duration::from_nanos(ns);
        let shown = HumanDuration(d).to_string();
        prop_assert_eq!(parse_duration(&shown).unwrap(), d);
    }

    #[test]
    fn bdp_is_rate_times_rtt(mbit in 1u64..100_000, us in 1u64..1_000_000) {
        let bdp = Bdp { rate: BitRate(mbit * 1_000_000), rtt: Duration::from_micros(us) };
        let exact = (mbit as u128 * 1_000_000 * us as u128).div_ceil(8_000_000);
        prop_assert_eq!(bdp.bytes().0 as u128, exact);
    }
}
