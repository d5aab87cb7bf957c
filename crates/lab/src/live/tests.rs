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

/// `Cpus_allowed_list` of a task's status file.
fn allowed_cpus(status: &str) -> Vec<usize> {
    let line = status.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:"));
    crate::placement::parse_cpu_list(line.expect("Cpus_allowed_list")).expect("a CPU list")
}

#[test]
fn a_placed_path_pins_the_emulator_steers_receive_confines_commands_and_goes_away() {
    use crate::placement::{CpuChoice, PlacementRequest};
    let request = PlacementRequest {
        emulator_cpu: Some(CpuChoice::Last),
        steer: true,
        endpoints_apart: true,
    };
    let placement = request
        .resolve()
        .expect("this test needs a machine with at least two usable CPUs")
        .expect("a placement was asked");
    let cpu = placement.emulator_cpu;
    let others: Vec<usize> = placement.usable_cpus.iter().copied().filter(|&c| c != cpu).collect();
    assert_eq!((&placement.receive_cpus, &placement.endpoint_cpus), (&others, &others));
    let live = LivePath::builder(PathShape::Emulated(emulated(100, 4)))
        .roles("lqc", "lqr", "lqs")
        .placement(Some(placement.clone()))
        .start()
        .expect("start a placed emulated path (root?)");
    assert_eq!(live.placement(), Some(&placement));
    let names = [live.client().name().to_owned(), live.server().name().to_owned()];

    // Every emulator thread may run on the named CPU only.
    let tids = live.emulator_thread_ids();
    assert!(!tids.is_empty());
    for tid in &tids {
        let status = std::fs::read_to_string(format!("/proc/self/task/{tid}/status"))
            .expect("the emulator thread's status");
        assert_eq!(allowed_cpus(&status), vec![cpu], "thread {tid}");
    }
    // Both TUN devices steer their receive processing to the other CPUs, read back inside
    // the namespaces.
    let mask = others.iter().fold(0u64, |m, c| m | 1 << c);
    for ns in [live.client(), live.server()] {
        let out = ns
            .exec("sh", ["-c", "cat /sys/class/net/tcptail-tun/queues/rx-*/rps_cpus"])
            .expect("read rps_cpus");
        let masks: Vec<u64> = out
            .lines()
            .map(|l| u64::from_str_radix(&l.trim().replace(',', ""), 16).expect("a hex mask"))
            .collect();
        assert!(!masks.is_empty() && masks.iter().all(|&m| m == mask), "{}: {out}", ns.name());
    }
    // The lab's commands run on the other CPUs, and still reach each other.
    for mut cmd in [live.client_command("cat"), live.server_command("cat")] {
        let out = cmd.arg("/proc/self/status").output().expect("run cat in the namespace");
        assert!(out.status.success(), "{out:?}");
        assert_eq!(allowed_cpus(&String::from_utf8_lossy(&out.stdout)), others);
    }
    // A thread of this process confined as an experiment's endpoints are, and given back.
    std::thread::spawn(move || {
        let mine = || std::fs::read_to_string("/proc/thread-self/status").expect("status");
        let before = allowed_cpus(&mine());
        {
            let _confined = placement.confine_current_thread().expect("confine");
            assert_eq!(allowed_cpus(&mine()), others);
        }
        assert_eq!(allowed_cpus(&mine()), before);
    })
    .join()
    .expect("the confined thread");
    assert!(connects(&live));

    let stopped = live.stop();
    stopped.teardown.expect("teardown");
    let report = stopped.emulator.expect("the emulator's self-measurement");
    assert!(report.cpu_affinity.is_applied(), "{:?}", report.cpu_affinity);
    assert!(names.iter().all(|n| !exists(n)), "{names:?} removed");
    for tid in tids {
        assert!(
            !std::path::Path::new(&format!("/proc/self/task/{tid}")).exists(),
            "emulator thread {tid} ended"
        );
    }
}
