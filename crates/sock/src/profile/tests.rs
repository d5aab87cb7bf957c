use super::*;

#[test]
fn builtin_names_all_resolve_and_validate() {
    assert_eq!(Profile::builtin_names(), &["trading", "throughput", "kernel-default"]);
    for name in Profile::builtin_names() {
        let p = Profile::builtin(name).expect(name);
        assert_eq!(&p.name, name);
        p.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
    }
    assert_eq!(Profile::builtin("vegas"), None);
}

#[test]
fn trading_is_the_seeds_socket() {
    let p = Profile::builtin("trading").unwrap();
    assert_eq!(p.congestion.as_deref(), Some("cubic"));
    assert_eq!(p.nodelay, Some(true));
    assert_eq!(p.quickack, QuickAck::Rearm);
    let k = p.keepalive.unwrap();
    assert_eq!((k.idle, k.interval, k.count), (Duration::from_secs(10), Duration::from_secs(3), 3));
    // 10 Gbit/s x 1 ms = 10^7 bits = 1.25 MB, the seed's co-location example.
    for b in [p.send_buffer.unwrap(), p.receive_buffer.unwrap()] {
        assert!(matches!(b, BufferSize::Bdp(_)));
        assert_eq!(b.bytes(), ByteSize(1_250_000));
        assert_eq!(b.to_string(), "1250000B (10gbit x 1ms)");
    }
}

#[test]
fn throughput_and_kernel_default() {
    let p = Profile::builtin("throughput").unwrap();
    assert_eq!(p.congestion.as_deref(), Some("bbr"));
    assert_eq!(p.send_buffer, Some(BufferSize::Bytes(ByteSize(16 << 20))));
    assert_eq!(p.receive_buffer, Some(BufferSize::Bytes(ByteSize(16 << 20))));
    assert_eq!(Profile::builtin("kernel-default").unwrap(), Profile::named("kernel-default"));
}

fn invalid_key(p: &Profile) -> (&'static str, String) {
    let e = p.validate().unwrap_err();
    (e.key, e.reason)
}

#[test]
fn keepalive_checks_match_the_kernels_units() {
    let base =
        Keepalive { idle: Duration::from_secs(10), interval: Duration::from_secs(3), count: 3 };
    let with = |k: Keepalive| Profile { keepalive: Some(k), ..Profile::named("t") };
    let (key, reason) = invalid_key(&with(Keepalive { count: 0, ..base }));
    assert_eq!(key, "keepalive.count");
    assert!(reason.contains("at least 1"), "{reason}");
    let (key, reason) = invalid_key(&with(Keepalive { count: 128, ..base }));
    assert_eq!(key, "keepalive.count");
    assert!(reason.contains("127"), "{reason}");
    let (key, reason) = invalid_key(&with(Keepalive { idle: Duration::from_millis(500), ..base }));
    assert_eq!(key, "keepalive.idle");
    assert!(reason.contains("500ms is less than a second"), "{reason}");
    let (key, reason) =
        invalid_key(&with(Keepalive { interval: Duration::from_millis(1500), ..base }));
    assert_eq!(key, "keepalive.interval");
    assert!(reason.contains("whole number of seconds"), "{reason}");
    let (key, _) = invalid_key(&with(Keepalive { idle: Duration::from_secs(40_000), ..base }));
    assert_eq!(key, "keepalive.idle");
    assert_eq!(keepalive_values(&base), Ok((10, 3, 3)));
}

#[test]
fn congestion_names_must_be_plausible() {
    assert!(check_congestion("cubic").is_ok());
    assert!(check_congestion("bbr").is_ok());
    assert!(check_congestion("tcp_bpf_2").is_ok());
    let e = check_congestion("CUBIC").unwrap_err();
    assert!(e.reason.contains("did you mean 'cubic'"), "{e}");
    let e = check_congestion("cu bic").unwrap_err();
    assert!(e.reason.contains("not a congestion control name"), "{e}");
    assert!(check_congestion("").is_err());
    assert!(check_congestion("0cubic").is_err());
    let e = check_congestion("averyveryverylongname").unwrap_err();
    assert!(e.reason.contains("15-byte"), "{e}");
}

#[test]
fn durations_must_fit_the_option_unit() {
    assert_eq!(user_timeout_ms(Duration::from_secs(5)), Ok(5000));
    assert_eq!(user_timeout_ms(Duration::ZERO), Ok(0));
    let e = user_timeout_ms(Duration::from_micros(500)).unwrap_err();
    assert!(e.reason.contains("whole number of milliseconds"), "{e}");
    assert_eq!(busy_poll_us(Duration::from_micros(50)), Ok(50));
    assert!(busy_poll_us(Duration::from_nanos(1500)).is_err());
    assert!(busy_poll_us(Duration::from_secs(3000)).is_err());
}

#[test]
fn sizes_must_fit_setsockopt() {
    let huge = BufferSize::Bdp("1000gbit x 1s".parse().unwrap());
    let e = buffer_bytes("send_buffer", &huge).unwrap_err();
    assert!(e.reason.contains("more than setsockopt can take"), "{e}");
    assert_eq!(buffer_bytes("send_buffer", &BufferSize::Bytes(ByteSize(4096))), Ok(4096));
    assert!(notsent_lowat_bytes(ByteSize(1 << 33)).is_err());
    assert_eq!(notsent_lowat_bytes(ByteSize(16384)), Ok(16384));
}

#[test]
fn advisories_flag_priority_and_once() {
    let p = Profile { priority: Some(7), quickack: QuickAck::Once, ..Profile::named("t") };
    let keys: Vec<_> = p.advisories().iter().map(|a| a.key).collect();
    assert_eq!(keys, ["priority", "quickack"]);
    assert!(p.advisories()[0].to_string().starts_with("priority: SO_PRIORITY above 6"));
    let p = Profile { priority: Some(6), ..Profile::named("t") };
    assert!(p.advisories().is_empty());
    let trading = Profile::builtin("trading").unwrap();
    assert_eq!(trading.advisories().len(), 1, "buffers turn off autotuning");
}

#[test]
fn buffer_size_serde_accepts_every_spelling() {
    #[derive(Deserialize, Serialize, PartialEq, Debug)]
    struct W {
        b: BufferSize,
    }
    let de = |s: &str| toml::from_str::<W>(s).map(|w| w.b);
    assert_eq!(de("b = 4194304").unwrap(), BufferSize::Bytes(ByteSize(4 << 20)));
    assert_eq!(de("b = \"4MiB\"").unwrap(), BufferSize::Bytes(ByteSize(4 << 20)));
    assert_eq!(de("b = { bytes = 100 }").unwrap(), BufferSize::Bytes(ByteSize(100)));
    let bdp = de("b = { bdp = \"10gbit x 1ms\" }").unwrap();
    assert_eq!(bdp.bytes(), ByteSize(1_250_000));
    assert!(de("b = { bdp = \"10gbit\" }").is_err());
    assert!(de("b = { bogus = 1 }").is_err());
    assert!(de("b = true").is_err());
    for b in [BufferSize::Bytes(ByteSize(123)), bdp] {
        let text = toml::to_string(&W { b }).unwrap();
        assert_eq!(de(&text).unwrap(), b, "{text}");
    }
}

#[test]
fn profiles_round_trip_through_serde() {
    let full = Profile {
        user_timeout: Some(Duration::from_secs(5)),
        reuse_address: Some(true),
        reuse_port: Some(false),
        busy_poll: Some(Duration::from_micros(50)),
        notsent_lowat: Some(ByteSize(16384)),
        priority: Some(6),
        ..Profile::builtin("trading").unwrap()
    };
    for p in [full, Profile::builtin("throughput").unwrap(), Profile::named("kernel-default")] {
        let text = toml::to_string(&p).unwrap();
        assert_eq!(toml::from_str::<Profile>(&text).unwrap(), p, "{text}");
    }
}
