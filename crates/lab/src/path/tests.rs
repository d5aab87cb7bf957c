//! Flag syntax and [`PathFlags::check`]: defaults, asymmetry, and errors that name the flag.

use std::io::Write;
use std::time::Duration;

use tcptail_emu::{
    BufferSize, Discipline, EcnBlackhole, Jitter, LossModel, QueueLimit, Rate, Reorder,
};
use tcptail_units::{BitRate, ByteSize};

use super::*;

fn flags(rate: &str, rtt: &str) -> PathFlags {
    PathFlags {
        rate: Some(rate.parse().unwrap()),
        rtt: Some(tcptail_units::parse_duration(rtt).unwrap()),
        command: vec!["true".into()],
        ..PathFlags::default()
    }
}

fn err(f: &PathFlags) -> String {
    let e = f.check().expect_err("must fail");
    assert!(e.is_usage(), "{e:?}");
    e.to_string()
}

#[test]
fn symmetric_path_with_default_buffer_of_one_bdp() {
    let spec = flags("30mbit", "10ms").check().unwrap();
    let path = spec.path().unwrap();
    for d in [&path.up, &path.down] {
        assert_eq!(d.rate, Rate::Constant(BitRate(30_000_000)));
        assert_eq!(d.delay, Duration::from_millis(5));
        assert_eq!(d.queue.limit, QueueLimit::Bytes(ByteSize(37_500)));
        assert_eq!(d.queue.discipline, Discipline::Fifo);
        assert_eq!(d.loss, None);
    }
    assert_eq!(spec.rtt(), Duration::from_millis(10));
    assert_eq!(spec.emulator(), EmulatorKind::Builtin);
    assert_eq!(spec.lateness_bound(), crate::emulator::EmulatorOptions::default().lateness_bound);
    assert_eq!(spec.out_dir(), None, "a private directory is made at start");
    assert!(spec.server().is_none());
}

#[test]
fn per_direction_flags_override_both() {
    let f = PathFlags {
        rate_down: Some("100mbit".parse().unwrap()),
        delay_up: Some(Duration::from_millis(20)),
        loss_up: Some("ge:1%,burst=4".parse().unwrap()),
        loss: Some("0.5%".parse().unwrap()),
        buffer: Some("250pkt".parse().unwrap()),
        buffer_down: Some("2bdp".parse().unwrap()),
        jitter: Some("1ms".parse().unwrap()),
        queue: Some("codel".parse().unwrap()),
        server_cmd: Some("iperf3 -s -1".into()),
        server_ready: Some("5201".parse().unwrap()),
        seed: Some(7),
        ..flags("10mbit", "10ms")
    };
    let spec = f.check().unwrap();
    let p = spec.path().unwrap();
    assert_eq!(p.up.rate, Rate::Constant(BitRate(10_000_000)));
    assert_eq!(p.down.rate, Rate::Constant(BitRate(100_000_000)));
    assert_eq!((p.up.delay, p.down.delay), (Duration::from_millis(20), Duration::from_millis(5)));
    assert!(
        matches!(p.up.loss, Some(LossModel::GilbertElliott { h, k, .. }) if h == 0.0 && k == 1.0)
    );
    assert_eq!(p.down.loss, Some(LossModel::Bernoulli { p: 0.005 }));
    assert_eq!(p.up.queue.limit, QueueLimit::Packets(250));
    // 2 x 100 Mbit/s x 25 ms RTT.
    assert_eq!(p.down.queue.limit, QueueLimit::Bytes(ByteSize(625_000)));
    assert_eq!(p.up.jitter, Some(Jitter::Uniform { max: Duration::from_millis(1) }));
    assert_eq!(p.down.queue.discipline, Discipline::codel());
    assert_eq!(spec.seed(), 7);
    assert_eq!(spec.server().unwrap().ready, Readiness::Port(5201));
}

#[test]
fn lab_value_syntax() {
    // The path's values (buffer, loss, queue, jitter) are tested where they parse, in emu.
    assert_eq!("auto".parse::<ReadyArg>().unwrap(), ReadyArg::Auto);
    assert_eq!("500ms".parse::<ReadyArg>().unwrap(), ReadyArg::After(Duration::from_millis(500)));
    assert!("0".parse::<ReadyArg>().is_err() && "70000".parse::<ReadyArg>().is_err());
    assert_eq!("NETEM".parse::<EmulatorKind>().unwrap(), EmulatorKind::Netem);
    assert!("tc".parse::<EmulatorKind>().is_err());
}

#[test]
fn errors_name_the_flag() {
    let zero = PathFlags { rate: Some(BitRate(0)), ..flags("1mbit", "10ms") };
    assert_eq!(err(&zero), "--rate: must be greater than zero");
    let zero_up = PathFlags { rate_up: Some(BitRate(0)), ..flags("1mbit", "10ms") };
    assert!(err(&zero_up).starts_with("--rate-up:"));
    let no_rate = PathFlags { rate: None, ..flags("1mbit", "10ms") };
    assert!(err(&no_rate).starts_with("--rate: the path needs a rate"));
    let jitter = PathFlags { jitter: Some("6ms".parse().unwrap()), ..flags("1mbit", "10ms") };
    let msg = err(&jitter);
    assert!(msg.starts_with("--jitter: up direction: can move the delay by up to 6ms"), "{msg}");
    let jitter_down = PathFlags {
        jitter_down: Some("1ms".parse().unwrap()),
        delay_down: Some(Duration::ZERO),
        ..flags("1mbit", "10ms")
    };
    assert!(err(&jitter_down).starts_with("--jitter-down: down direction"));
    let tiny =
        PathFlags { buffer_up: Some(BufferSize::Bytes(ByteSize(100))), ..flags("1mbit", "1ms") };
    assert!(err(&tiny).starts_with("--buffer-up: up direction"));
    let both = PathFlags { delay: Some(Duration::from_millis(1)), ..flags("1mbit", "10ms") };
    assert!(err(&both).starts_with("--rtt:"));
    let none = PathFlags { emulator: EmulatorKind::None, ..flags("1mbit", "10ms") };
    assert!(err(&none).starts_with("--rate: --emulator none is a plain veth"));
    let netem = PathFlags {
        emulator: EmulatorKind::Netem,
        queue: Some(Discipline::codel()),
        ..flags("1mbit", "10ms")
    };
    assert!(err(&netem).starts_with("--queue: CoDel"));
    let ready = PathFlags { server_ready: Some(ReadyArg::Port(1)), ..flags("1mbit", "10ms") };
    assert_eq!(err(&ready), "--server-ready: needs --server-cmd");
    let missing =
        PathFlags { command: vec!["no-such-program-xyz".into()], ..flags("1mbit", "1ms") };
    assert_eq!(err(&missing), "COMMAND: `no-such-program-xyz` was not found on PATH");
    let empty = PathFlags { command: vec![], ..flags("1mbit", "1ms") };
    assert!(err(&empty).starts_with("COMMAND: missing"));
}

#[test]
fn plain_veth_needs_no_path() {
    let f = PathFlags {
        emulator: EmulatorKind::None,
        command: vec!["true".into()],
        ..PathFlags::default()
    };
    let spec = f.check().unwrap();
    assert!(spec.path().is_none());
    assert_eq!(spec.rtt(), Duration::ZERO);
}

#[test]
fn trace_errors_name_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("up.trace");
    std::fs::write(&good, "1\n2\n3\n").unwrap();
    let bad = dir.path().join("down.trace");
    let mut f = std::fs::File::create(&bad).unwrap();
    writeln!(f, "1\n2\nthree\n4").unwrap();
    let both =
        PathFlags { rate: None, trace: vec![good.clone(), bad.clone()], ..flags("1mbit", "10ms") };
    let msg = err(&both);
    assert!(msg.contains("down.trace") && msg.contains("line 3"), "{msg}");
    assert!(msg.starts_with("--trace: trace file"), "{msg}");

    let missing = dir.path().join("nope.trace");
    let msg = err(&PathFlags { rate: None, trace: vec![missing], ..flags("1mbit", "10ms") });
    assert!(msg.contains("nope.trace") && msg.contains("cannot read"), "{msg}");

    let ok = PathFlags { rate: None, trace: vec![good.clone()], ..flags("1mbit", "10ms") };
    let spec = ok.check().unwrap();
    // Three 1504-byte opportunities every 3 ms.
    assert_eq!(spec.path().unwrap().down.rate.mean(), BitRate(12_032_000));

    let conflict = PathFlags { trace: vec![good], ..flags("1mbit", "10ms") };
    assert!(err(&conflict).contains("--trace and --rate both set"));
}

#[test]
fn trace_messages_strip_the_emu_prefix() {
    let e = tcptail_emu::DeliveryTrace::parse("1\nx\n", "t.trace").unwrap_err();
    let lab = LabError::trace("--trace", "t.trace".into(), &e);
    assert_eq!(
        lab.to_string(),
        "--trace: trace file t.trace line 2: 'x' is not a timestamp (expected whole milliseconds)"
    );
}

#[test]
fn a_trace_one_way_and_a_constant_rate_the_other() {
    let dir = tempfile::tempdir().unwrap();
    // Two opportunities per ms: 2 x 1504 B x 8 / 1 ms = 24.064 Mbit/s.
    let two = dir.path().join("two.trace");
    std::fs::write(&two, "1\n1\n").unwrap();
    let one = dir.path().join("one.trace");
    std::fs::write(&one, "1\n").unwrap();
    let rates = |f: PathFlags| {
        let spec = f.check().unwrap_or_else(|e| panic!("{e}"));
        let p = spec.path().unwrap().clone();
        (p.up.rate, p.down.rate)
    };
    let base = PathFlags { rate: None, ..flags("1mbit", "10ms") };
    let trace_rate = |bps| Rate::Constant(BitRate(bps));

    // --trace-down with --rate-up; and with the shared --rate.
    for f in [
        PathFlags {
            trace_down: Some(two.clone()),
            rate_up: Some(BitRate(5_000_000)),
            ..base.clone()
        },
        PathFlags { trace_down: Some(two.clone()), rate: Some(BitRate(5_000_000)), ..base.clone() },
    ] {
        let (up, down) = rates(f);
        assert_eq!(up, trace_rate(5_000_000));
        assert!(matches!(down, Rate::Trace(_)), "{down:?}");
        assert_eq!(down.mean(), BitRate(24_064_000));
    }
    // --trace-up with --rate-down.
    let (up, down) = rates(PathFlags {
        trace_up: Some(one.clone()),
        rate_down: Some(BitRate(50_000_000)),
        ..base.clone()
    });
    assert_eq!((up.mean(), down), (BitRate(12_032_000), trace_rate(50_000_000)));
    // The spelling: --trace UP,DOWN.
    let (up, down) = rates(PathFlags { trace: vec![one.clone(), two.clone()], ..base.clone() });
    assert_eq!((up.mean(), down.mean()), (BitRate(12_032_000), BitRate(24_064_000)));
    // A shared --trace with one direction's own rate.
    let (up, down) = rates(PathFlags {
        trace: vec![two.clone()],
        rate_up: Some(BitRate(3_000_000)),
        ..base.clone()
    });
    assert_eq!((up, down.mean()), (trace_rate(3_000_000), BitRate(24_064_000)));
    // A shared --trace with --trace-down for the other direction.
    let (up, down) = rates(PathFlags {
        trace: vec![one.clone()],
        trace_down: Some(two.clone()),
        ..base.clone()
    });
    assert_eq!((up.mean(), down.mean()), (BitRate(12_032_000), BitRate(24_064_000)));
}

#[test]
fn conflicting_or_unused_rate_flags_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let t = dir.path().join("t.trace");
    std::fs::write(&t, "1\n").unwrap();
    let base = PathFlags { rate: None, ..flags("1mbit", "10ms") };
    let both_up =
        PathFlags { trace_up: Some(t.clone()), rate_up: Some(BitRate(1_000_000)), ..base.clone() };
    assert_eq!(
        err(&both_up),
        "--rate-up: --trace-up and --rate-up both set the up (client to server) rate; give one"
    );
    let listed_and_own = PathFlags {
        trace: vec![t.clone(), t.clone()],
        trace_down: Some(t.clone()),
        ..base.clone()
    };
    assert!(err(&listed_and_own).starts_with("--trace-down: --trace UP,DOWN already gives"));
    let unused_rate = PathFlags {
        trace_up: Some(t.clone()),
        trace_down: Some(t.clone()),
        rate: Some(BitRate(1_000_000)),
        ..base.clone()
    };
    assert!(err(&unused_rate).starts_with("--rate: each direction already has its own"));
    let unused_trace = PathFlags {
        trace: vec![t.clone()],
        rate_up: Some(BitRate(1_000_000)),
        rate_down: Some(BitRate(1_000_000)),
        ..base.clone()
    };
    assert!(err(&unused_trace).starts_with("--trace: each direction already has its own"));
    let only_one_way = PathFlags { trace_up: Some(t.clone()), ..base.clone() };
    assert!(err(&only_one_way).starts_with("--rate: the path needs a rate"));
    let netem = PathFlags {
        emulator: EmulatorKind::Netem,
        trace_down: Some(t.clone()),
        rate_up: Some(BitRate(1_000_000)),
        ..base.clone()
    };
    assert!(err(&netem).starts_with("--trace-down: netem cannot replay"));
    let none = PathFlags {
        emulator: EmulatorKind::None,
        trace_down: Some(t.clone()),
        ..PathFlags { command: vec!["true".into()], ..PathFlags::default() }
    };
    assert!(err(&none).starts_with("--trace-down: --emulator none is a plain veth"));
    // A bad file given by --trace-up is named with that flag.
    let bad = dir.path().join("bad.trace");
    std::fs::write(&bad, "1\nx\n").unwrap();
    let msg = err(&PathFlags {
        trace_up: Some(bad),
        rate_down: Some(BitRate(1_000_000)),
        ..base.clone()
    });
    assert!(msg.starts_with("--trace-up: trace file") && msg.contains("line 2"), "{msg}");
}

#[test]
fn aqm_reorder_and_ecn_blackhole_flags() {
    let fq = PathFlags {
        queue: Some("fq_codel,ecn".parse().unwrap()),
        reorder: Some("1%,gap=2ms".parse().unwrap()),
        reorder_down: Some("5%,gap=1ms".parse().unwrap()),
        ecn_blackhole: Some(EcnBlackhole::Syn),
        jitter: Some("pareto:1ms".parse().unwrap()),
        ..flags("50mbit", "20ms")
    };
    let path = fq.check().unwrap().path().unwrap().clone();
    for d in [&path.up, &path.down] {
        // fq_codel without --buffer keeps Linux's limit, not one BDP.
        assert_eq!(d.queue.limit, QueueLimit::Packets(10_240));
        assert!(d.queue.discipline.ecn());
        assert_eq!(d.ecn_blackhole, Some(EcnBlackhole::Syn));
        assert_eq!(d.jitter, Some(Jitter::Pareto { sigma: Duration::from_millis(1) }));
    }
    assert_eq!(path.up.reorder, Some(Reorder { p: 0.01, gap: Duration::from_millis(2) }));
    assert_eq!(path.down.reorder, Some(Reorder { p: 0.05, gap: Duration::from_millis(1) }));
    let buffered = PathFlags { buffer: Some(BufferSize::Bdp(2.0)), ..fq.clone() };
    let path = buffered.check().unwrap().path().unwrap().clone();
    assert_eq!(path.up.queue.limit, QueueLimit::Bytes(ByteSize(250_000)));
    // Errors name the flag.
    let bad_quantum = PathFlags {
        queue: Some("fq_codel:quantum=10".parse().unwrap()),
        ..flags("50mbit", "20ms")
    };
    assert!(
        err(&bad_quantum).starts_with("--queue: up direction: 10 bytes"),
        "{}",
        err(&bad_quantum)
    );
    let bad_reorder = PathFlags {
        reorder_up: Some(Reorder { p: 0.01, gap: Duration::from_secs(7200) }),
        ..flags("50mbit", "20ms")
    };
    assert!(err(&bad_reorder).starts_with("--reorder-up: up direction"), "{}", err(&bad_reorder));
    for (netem, flag) in [
        (PathFlags { reorder: fq.reorder, ..flags("1mbit", "10ms") }, "--reorder"),
        (
            PathFlags { ecn_blackhole: Some(EcnBlackhole::Data), ..flags("1mbit", "10ms") },
            "--ecn-blackhole",
        ),
        (PathFlags { queue: fq.queue, ..flags("1mbit", "10ms") }, "--queue"),
    ] {
        let netem = PathFlags { emulator: EmulatorKind::Netem, ..netem };
        let msg = err(&netem);
        assert!(msg.starts_with(flag) && msg.contains("--emulator builtin"), "{msg}");
        let none = PathFlags { emulator: EmulatorKind::None, rate: None, rtt: None, ..netem };
        assert!(err(&none).starts_with(flag), "{}", err(&none));
    }
}

#[test]
fn events_are_checked_against_both_directions() {
    let ev = |s: &str| s.parse::<tcptail_emu::PathEvent>().unwrap();
    let ok = PathFlags {
        events: vec![ev("1s:blackhole"), ev("2s:restore"), ev("3s:delay=+50ms")],
        ..flags("50mbit", "20ms")
    };
    let spec = ok.check().unwrap();
    assert_eq!(spec.events.len(), 3);
    let below = PathFlags { events: vec![ev("1s:delay=-15ms")], ..flags("50mbit", "20ms") };
    let msg = err(&below);
    assert!(msg.starts_with("--event: 1s:delay=-15ms: up direction: takes the delay"), "{msg}");
    let netem = PathFlags { emulator: EmulatorKind::Netem, ..ok };
    assert!(err(&netem).starts_with("--event"), "{}", err(&netem));
}

#[test]
fn the_thread_layout_defaults_to_one_thread_and_needs_the_builtin_emulator() {
    use crate::emulator::Threads;
    assert_eq!(flags("30mbit", "10ms").check().unwrap().threads(), Threads::Single);
    let split = PathFlags { threads: Some(Threads::Split), ..flags("30mbit", "10ms") };
    assert_eq!(split.check().unwrap().threads(), Threads::Split);
    let netem = PathFlags { emulator: EmulatorKind::Netem, ..split.clone() };
    let e = err(&netem);
    assert!(e.starts_with("--threads: split: only the built-in emulator"), "{e}");
    assert!(e.contains("(not netem)"), "{e}");
    let none = PathFlags { emulator: EmulatorKind::None, rate: None, rtt: None, ..split };
    assert!(err(&none).contains("use --emulator builtin (not none)"));
}

#[test]
fn placement_flags_are_checked_before_anything_is_made() {
    use crate::placement::{CpuChoice, PlacementRequest};
    let placed = |emulator_cpu, steer, endpoints_apart| PathFlags {
        placement: PlacementRequest { emulator_cpu, steer, endpoints_apart },
        ..flags("1gbit", "10ms")
    };
    let e = err(&placed(None, true, false));
    assert!(e.starts_with("--steer: needs --emulator-cpu"), "{e}");
    let e = err(&placed(None, false, true));
    assert!(e.starts_with("--endpoints-apart: needs --emulator-cpu"), "{e}");
    // No machine has CPU 100000 online.
    let e = err(&placed(Some(CpuChoice::Index(100_000)), true, false));
    assert!(e.starts_with("--emulator-cpu: "), "{e}");
    assert!(e.contains("CPU 100000 is not usable") || e.contains("one usable CPU"), "{e}");
    let netem =
        PathFlags { emulator: EmulatorKind::Netem, ..placed(Some(CpuChoice::Last), true, false) };
    let e = err(&netem);
    assert!(e.starts_with("--emulator-cpu: only the built-in emulator"), "{e}");
    assert!(flags("1gbit", "10ms").check().unwrap().placement().is_none(), "nothing asked");
}
