//! Validation tests: every rejection names its field.

use std::time::Duration;

use tcptail_units::{Bdp, BitRate, ByteSize};

use super::*;

fn base() -> DirectionSpec {
    DirectionSpec {
        rate: Rate::Constant(BitRate(30_000_000)),
        delay: Duration::from_millis(5),
        jitter: None,
        loss: None,
        queue: QueueSpec {
            limit: QueueLimit::Bytes(ByteSize(375_000)),
            discipline: Discipline::Fifo,
        },
        ecn_blackhole: None,
        reorder: None,
    }
}

fn field_of(spec: DirectionSpec) -> String {
    spec.validate().unwrap_err().field
}

#[test]
fn a_sane_spec_validates() {
    base().validate().unwrap();
    let mut s = base();
    s.queue.discipline = Discipline::codel();
    s.jitter = Some(Jitter::Uniform { max: Duration::from_millis(5) });
    s.loss = Some(LossModel::gilbert(0.01, 4.0));
    s.validate().unwrap();
}

#[test]
fn zero_rate_is_rejected() {
    let mut s = base();
    s.rate = Rate::Constant(BitRate(0));
    assert_eq!(s.validate().unwrap_err().to_string(), "invalid rate: must be greater than zero");
}

#[test]
fn loss_above_100_percent_is_rejected() {
    let mut s = base();
    s.loss = Some(LossModel::Bernoulli { p: 1.5 });
    let e = s.validate().unwrap_err();
    assert_eq!(e.field, "loss.p");
    assert!(e.problem.contains("150%"), "{e}");
    s.loss = Some(LossModel::Bernoulli { p: f64::NAN });
    assert_eq!(field_of(s), "loss.p");
}

#[test]
fn gilbert_parameters_are_checked() {
    let mut s = base();
    s.loss = Some(LossModel::GilbertElliott { p: 0.1, r: 0.0, h: 0.0, k: 1.0 });
    assert_eq!(field_of(s.clone()), "loss.r");
    s.loss = Some(LossModel::GilbertElliott { p: 0.1, r: 0.5, h: -0.1, k: 1.0 });
    assert_eq!(field_of(s.clone()), "loss.h");
    s.loss = Some(LossModel::GilbertElliott { p: 0.1, r: 0.5, h: 0.0, k: 2.0 });
    assert_eq!(field_of(s), "loss.k");
}

#[test]
fn zero_size_queues_are_rejected() {
    for limit in [
        QueueLimit::Bytes(ByteSize(0)),
        QueueLimit::Packets(0),
        QueueLimit::Time(Duration::ZERO),
        QueueLimit::Bytes(ByteSize(1000)),
    ] {
        let mut s = base();
        s.queue.limit = limit;
        assert_eq!(field_of(s), "queue.limit", "{limit:?}");
    }
}

#[test]
fn jitter_larger_than_delay_is_rejected() {
    let mut s = base();
    s.jitter = Some(Jitter::Uniform { max: Duration::from_millis(6) });
    let e = s.validate().unwrap_err();
    assert_eq!(e.field, "jitter");
    assert!(e.problem.contains("6ms") && e.problem.contains("5ms"), "{e}");
    s.jitter = Some(Jitter::Normal { sigma: Duration::from_millis(2) });
    assert_eq!(field_of(s), "jitter");
}

#[test]
fn absurd_durations_are_rejected() {
    let mut s = base();
    s.delay = Duration::from_secs(7200);
    assert_eq!(field_of(s), "delay");
}

#[test]
fn codel_target_must_be_below_interval() {
    let mut s = base();
    s.queue.discipline = Discipline::Codel {
        target: Duration::from_millis(100),
        interval: Duration::from_millis(100),
        ecn: false,
    };
    assert_eq!(field_of(s.clone()), "queue.codel.target");
    s.queue.discipline = Discipline::Codel {
        target: Duration::ZERO,
        interval: Duration::from_millis(100),
        ecn: false,
    };
    assert_eq!(field_of(s), "queue.codel.target");
}

#[test]
fn path_errors_name_the_direction() {
    let mut down = base();
    down.rate = Rate::Constant(BitRate(0));
    let path = PathSpec { up: base(), down };
    assert_eq!(
        path.validate().unwrap_err().to_string(),
        "invalid down.rate: must be greater than zero"
    );
}

#[test]
fn bdp_sizing() {
    let bdp = Bdp { rate: BitRate(30_000_000), rtt: Duration::from_millis(10) };
    assert_eq!(QueueLimit::from_bdp(bdp, 1.0), QueueLimit::Bytes(ByteSize(37_500)));
    assert_eq!(QueueLimit::from_bdp(bdp, 10.0), QueueLimit::Bytes(ByteSize(375_000)));
    let tiny = Bdp { rate: BitRate(1_000_000), rtt: Duration::from_millis(1) };
    assert_eq!(QueueLimit::from_bdp(tiny, 1.0), QueueLimit::Bytes(ByteSize(MIN_BDP_QUEUE_BYTES)));
    assert_eq!(
        QueueLimit::from_bdp(bdp, f64::NAN),
        QueueLimit::Bytes(ByteSize(MIN_BDP_QUEUE_BYTES))
    );
    assert_eq!(QueueSpec::default_for(bdp).discipline, Discipline::Fifo);
}

#[test]
fn gilbert_helper_hits_rate_and_burst() {
    let LossModel::GilbertElliott { p, r, h, k } = LossModel::gilbert(0.02, 5.0) else {
        unreachable!()
    };
    assert!((r - 0.2).abs() < 1e-12);
    assert!((p / (p + r) - 0.02).abs() < 1e-12);
    assert_eq!((h, k), (0.0, 1.0));
}

#[test]
fn display_is_one_line() {
    let mut s = base();
    s.queue.discipline = Discipline::codel();
    assert_eq!(
        s.to_string(),
        "rate=30mbit delay=5ms queue=codel [target=5ms, interval=100ms, bytes=375000]"
    );
}

#[test]
fn fq_codel_settings_are_checked() {
    let mut s = base();
    s.queue.discipline = Discipline::fq_codel();
    s.validate().unwrap();
    let with = |quantum, flows| Discipline::FqCodel {
        target: Duration::from_millis(5),
        interval: Duration::from_millis(100),
        quantum,
        flows,
        ecn: true,
    };
    s.queue.discipline = with(100, 1024);
    assert_eq!(field_of(s.clone()), "queue.codel.quantum");
    s.queue.discipline = with(1514, 0);
    assert_eq!(field_of(s.clone()), "queue.codel.flows");
    s.queue.discipline = with(1514, 70_000);
    assert_eq!(field_of(s.clone()), "queue.codel.flows");
    s.queue.discipline = Discipline::FqCodel {
        target: Duration::from_millis(200),
        interval: Duration::from_millis(100),
        quantum: 1514,
        flows: 1024,
        ecn: false,
    };
    assert_eq!(field_of(s), "queue.codel.target");
}

#[test]
fn reorder_is_checked() {
    let mut s = base();
    s.reorder = Some(Reorder { p: 0.01, gap: Duration::from_millis(2) });
    s.validate().unwrap();
    s.reorder = Some(Reorder { p: 1.5, gap: Duration::from_millis(2) });
    assert_eq!(field_of(s.clone()), "reorder.p");
    s.reorder = Some(Reorder { p: 0.01, gap: Duration::ZERO });
    assert_eq!(field_of(s.clone()), "reorder.gap");
    s.reorder = Some(Reorder { p: 0.01, gap: Duration::from_secs(7200) });
    assert_eq!(field_of(s), "reorder.gap");
}

#[test]
fn heavy_tailed_jitter_only_needs_room_below_the_delay() {
    // Pareto goes 2/3 sigma below and 4 sigma above: 5 ms of delay allows sigma up to 7.5 ms.
    let mut s = base();
    s.jitter = Some(Jitter::Pareto { sigma: Duration::from_millis(7) });
    s.validate().unwrap();
    s.jitter = Some(Jitter::Pareto { sigma: Duration::from_millis(8) });
    let e = s.validate().unwrap_err();
    assert_eq!(e.field, "jitter");
    assert!(e.problem.contains("downwards with pareto jitter"), "{e}");
    // paretonormal reaches 1.5 sigma below.
    s.jitter = Some(Jitter::ParetoNormal { sigma: Duration::from_millis(3) });
    s.validate().unwrap();
    s.jitter = Some(Jitter::ParetoNormal { sigma: Duration::from_millis(4) });
    assert_eq!(field_of(s), "jitter");
}

#[test]
fn the_new_options_show_in_the_summary_line() {
    let mut s = base();
    s.queue.discipline = "fq_codel,ecn".parse().unwrap();
    s.reorder = Some(Reorder { p: 0.01, gap: Duration::from_millis(2) });
    s.ecn_blackhole = Some(EcnBlackhole::Syn);
    s.jitter = Some(Jitter::Pareto { sigma: Duration::from_millis(1) });
    let line = s.to_string();
    for part in [
        "jitter=pareto(sigma=1ms)",
        "fq_codel [target=5ms, interval=100ms, quantum=1514, flows=1024, ecn, bytes=375000]",
        "reorder=1%,gap=2ms",
        "ecn-blackhole=syn",
    ] {
        assert!(line.contains(part), "{part} not in {line}");
    }
}
