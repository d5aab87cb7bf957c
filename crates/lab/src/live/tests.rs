//! Live paths on real namespaces (needs root, iproute2 and /dev/net/tun; CI runs as root and a
//! missing privilege fails with the reason).

use std::time::Duration;

use tcptail_emu::{DirectionSpec, QueueSpec};
use tcptail_netns::netns;

use super::*;

fn exists(name: &str) -> bool {
    netns::list().expect("list namespaces").iter().any(|n| n == name)
}

fn emulated(mbit: u64, rtt_ms: u64) -> PathSpec {
    let rate = BitRate(mbit * 1_000_000);
    let queue =
        QueueSpec::default_for(tcptail_units::Bdp { rate, rtt: Duration::from_millis(rtt_ms) });
    PathSpec::symmetric(DirectionSpec::constant(rate, Duration::from_millis(rtt_ms / 2), queue))
}

/// The client reaches the server through the path: a TCP connection from the client namespace.
fn connects(live: &LivePath) -> bool {
    let server = live.server().run(|| std::net::TcpListener::bind((SERVER_ADDR, 0)));
    let listener = server.expect("enter the server namespace").expect("bind");
    let addr = listener.local_addr().expect("address");
    let connected = live
        .client()
        .run(move || std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).is_ok());
    connected.expect("enter the client namespace")
}

#[test]
fn an_emulated_path_sizes_buffers_measures_itself_and_goes_away() {
    // 1 Gbit/s x 40 ms: 5 MB in flight plus one BDP of queue, above the default 4 MB wmem max.
    let live = LivePath::builder(PathShape::Emulated(emulated(1000, 40)))
        .roles("lpc", "lpr", "lps")
        .emulator(EmulatorOptions { seed: 3, ..EmulatorOptions::default() })
        .sysctls([("net.ipv4.tcp_slow_start_after_idle", "0")])
        .start()
        .expect("start an emulated path (root?)");
    let names = [live.client().name().to_owned(), live.server().name().to_owned()];
    assert!(names.iter().all(|n| exists(n)), "{names:?}");
    assert!(live.router().is_none());
    let buffers = live.tcp_buffers().expect("sized for the path");
    assert!(buffers.wanted_max_bytes > 4_194_304, "{buffers:?}");
    let wmem = live.client().sysctl("net.ipv4.tcp_wmem").expect("read tcp_wmem");
    assert!(wmem.ends_with(&buffers.wanted_max_bytes.to_string()), "{wmem}");
    let idle = live.server().sysctl("net.ipv4.tcp_slow_start_after_idle").expect("read");
    assert_eq!(idle.trim(), "0");
    assert!(connects(&live));

    let stopped = live.stop();
    stopped.teardown.expect("teardown");
    let report = stopped.emulator.expect("the emulator's self-measurement");
    assert!(report.up.forwarded.packets > 0, "the connection crossed the emulator: {report:?}");
    assert!(names.iter().all(|n| !exists(n)), "{names:?} removed");
}

#[test]
fn a_veth_path_has_no_emulator_and_drop_removes_it() {
    let mut live = LivePath::builder(PathShape::Veth)
        .roles("lvc", "lvr", "lvs")
        .start()
        .expect("start a veth path (root?)");
    assert!(live.tcp_buffers().is_none() && live.qdiscs().is_empty());
    assert!(live.stop_emulator().is_none());
    assert!(connects(&live));
    let mut sleeper = live.server_command("sleep");
    sleeper.arg("30");
    live.processes().spawn("sleeper", sleeper, tcptail_netns::Group::Own).expect("spawn");
    let names = [live.client().name().to_owned(), live.server().name().to_owned()];
    drop(live);
    assert!(names.iter().all(|n| !exists(n)), "{names:?} removed on drop");
}

#[test]
fn a_tbf_path_shapes_on_the_router() {
    let live =
        LivePath::builder(PathShape::Tbf { rate: BitRate(100_000_000), buffer_bytes: 125_000 })
            .roles("ltc", "ltr", "lts")
            .start()
            .expect("start a tbf path (root?)");
    let router = live.router().expect("a router");
    let qdiscs = router.exec("tc", ["qdisc", "show"]).expect("tc qdisc show");
    assert!(qdiscs.contains("tbf"), "{qdiscs}");
    assert!(live.tcp_buffers().is_none(), "no RTT to size buffers from");
    assert!(connects(&live));
    let stopped = live.stop();
    assert!(stopped.emulator.is_none());
    stopped.teardown.expect("teardown");
}

#[test]
fn roles_are_checked_before_anything_is_built() {
    let err = LivePath::builder(PathShape::Veth).roles("bad role", "r", "s").start().unwrap_err();
    assert!(err.to_string().contains("bad role"), "{err}");
}
