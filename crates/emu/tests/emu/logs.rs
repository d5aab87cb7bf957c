//! Mahimahi log format and the JSON statistics.

use std::time::Duration;

use tcptail_emu::{
    DeliveryTrace, Direction, LogHeader, MahimahiLog, Nanos, Packet, QueueLimit, Rate, Stats,
};

use crate::util::{Lateness, cbr, constant, drive};

fn play<O: tcptail_emu::Observer>(dir: &mut Direction<u64, O>) {
    for (id, at_us, len) in [(0u64, 500u64, 500u32), (1, 600, 1500), (2, 2200, 1504)] {
        let _ = dir.enqueue(Nanos::from_micros(at_us), Packet { id, len, payload: id });
        while dir.poll_release(Nanos::from_micros(at_us)).is_some() {}
    }
    while dir.poll_release(Nanos::from_millis(4)).is_some() {}
    dir.advance(Nanos::from_millis(4));
}

fn trace_dir() -> (tcptail_emu::DirectionSpec, LogHeader) {
    let mut spec = constant(1);
    spec.rate = Rate::Trace(DeliveryTrace::parse("1\n", "test.trace").unwrap());
    spec.queue.limit = QueueLimit::Packets(1);
    let mut header = LogHeader::for_direction("uplink", &spec);
    header.log_name = "up.log".into();
    header.command_line = Some("tcptail lab".into());
    header.init_timestamp_ms = 1_700_000_000_000;
    (spec, header)
}

#[test]
fn mahimahi_log_lines_match_mm_link() {
    let (spec, header) = trace_dir();
    let log = MahimahiLog::new(Vec::new(), &header).unwrap();
    let mut dir = Direction::<u64>::new(spec, 1).with_observer(log);
    play(&mut dir);
    let text = String::from_utf8(dir.into_observer().finish().unwrap()).unwrap();
    assert_eq!(
        text,
        "# mahimahi mm-link (uplink) [test.trace] > up.log\n\
         # command line: tcptail lab\n\
         # queue: droptail [packets=1]\n\
         # init timestamp: 1700000000000\n\
         # base timestamp: 0\n\
         0 + 500\n\
         0 + 1500\n\
         0 d 1 1500\n\
         1 - 500 1\n\
         1 # 1504\n\
         2 # 1504\n\
         2 + 1504\n\
         3 - 1504 1\n\
         3 # 1504\n\
         4 # 1504\n"
    );
}

#[test]
fn drop_lines_can_be_left_out_for_mm_throughput_graph() {
    let (spec, header) = trace_dir();
    let log = MahimahiLog::new(Vec::new(), &header).unwrap().without_drop_lines();
    let mut dir = Direction::<u64>::new(spec, 1).with_observer(log);
    play(&mut dir);
    let text = String::from_utf8(dir.into_observer().finish().unwrap()).unwrap();
    assert!(!text.contains(" d "));
    assert!(text.contains("0 + 1500\n1 - 500 1\n"));
}

#[test]
fn log_times_count_from_the_origin_and_delays_use_rounded_times() {
    let spec = constant(12_000_000);
    let mut header = LogHeader::for_direction("downlink", &spec);
    header.origin = Nanos::from_millis(1000);
    header.base = Nanos::from_millis(1002);
    let mut dir = Direction::<u64>::new(spec, 1)
        .with_observer(MahimahiLog::new(Vec::new(), &header).unwrap());
    // 1500 B at 12 Mbit/s = 1 ms: arrives 1000.9 ms, leaves 1001.9 ms.
    drive(&mut dir, &[(Nanos::from_micros(1_000_900), 1500)], Lateness::None, Nanos::MAX);
    let text = String::from_utf8(dir.into_observer().finish().unwrap()).unwrap();
    assert!(text.starts_with("# mahimahi mm-link (downlink) [constant 12mbit] > -\n"), "{text}");
    assert!(text.contains("# base timestamp: 2\n0 + 1500\n1 - 1500 1\n"), "{text}");
}

#[test]
fn a_failing_writer_keeps_the_first_error() {
    /// Accepts `.0` more bytes, then fails.
    #[derive(Debug)]
    struct FailAfter(usize);
    impl std::io::Write for FailAfter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.0 < buf.len() {
                return Err(std::io::Error::other("disk full"));
            }
            self.0 -= buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let spec = constant(12_000_000);
    let header = LogHeader::for_direction("x", &spec);
    assert!(MahimahiLog::new(FailAfter(10), &header).is_err());
    let log = MahimahiLog::new(FailAfter(200), &header).unwrap();
    let mut dir = Direction::<u64>::new(spec, 1).with_observer(log);
    drive(
        &mut dir,
        &cbr(Nanos::ZERO, Duration::from_millis(1), 50, 1500),
        Lateness::None,
        Nanos::MAX,
    );
    assert!(dir.observer().error().is_some());
    assert_eq!(dir.into_observer().finish().unwrap_err().to_string(), "disk full");
}

#[test]
fn stats_serialise_to_json() {
    let mut spec = constant(30_000_000);
    spec.queue.limit = QueueLimit::Packets(10);
    let stats = Stats::new(Duration::from_millis(10), Nanos::ZERO);
    let mut dir = Direction::<u64>::new(spec, 1).with_observer(stats);
    drive(
        &mut dir,
        &cbr(Nanos::ZERO, Duration::from_micros(200), 100, 1500),
        Lateness::None,
        Nanos::MAX,
    );
    let json = serde_json::to_value(dir.observer()).unwrap();
    assert_eq!(json["arrivals"]["packets"], 100);
    let out = json["departures"]["packets"].as_u64().unwrap();
    let full = json["drops"]["queue_full"]["packets"].as_u64().unwrap();
    assert_eq!(out + full, 100);
    assert!(full > 0);
    assert_eq!(json["drops"]["codel"]["packets"], 0);
    assert!(json["opportunities"].is_null());
    // Queue delay is capped by 10 packets x 400 us.
    let max = json["queue_delay_ms"]["max"].as_f64().unwrap();
    assert!(max > 3.9 && max < 4.01, "{max}");
    assert_eq!(json["throughput"]["bin_ms"], 10.0);
    let out_mbps = json["throughput"]["out_mbps"].as_array().unwrap();
    // Saturated bins carry exactly 30 Mbit/s (25 packets per 10 ms).
    assert_eq!(out_mbps[1].as_f64().unwrap(), 30.0);
    assert!(json["throughput"]["capacity_mbps"].is_null());
}
