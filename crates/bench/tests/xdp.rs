//! The AF_XDP engine end to end on a veth pair between two throwaway namespaces (created and
//! removed by the test): AF_XDP and kernel UDP request/response, busy-polling and not, the
//! transmit kicks counted, and the XDP program passing everything else to the kernel (a TCP
//! connection and ARP work while it is attached). Needs root, as CI runs; where the kernel
//! has no AF_XDP the test says so and passes.

use std::net::{SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use tcptail_bench::xdp::{
    DatagramConfig, DatagramEngine, DatagramError, Endpoint, PairPlacement, PairRun, run_pair,
};
use tcptail_netns::addr::{CLIENT_ADDR, SERVER_ADDR, VETH_IF};
use tcptail_netns::{Cleanup, Topology};

const SERVER_PORT: u16 = 9100;
const CLIENT_PORT: u16 = 9101;

fn config() -> DatagramConfig {
    DatagramConfig {
        request_len: 64,
        reply_len: 64,
        warmup: Duration::from_millis(50),
        duration: Duration::from_millis(300),
        response_timeout: Duration::from_millis(200),
    }
}

/// One run of `engine` on the topology's veth pair, endpoints opened in their namespaces.
fn run(topo: &Topology, engine: DatagramEngine, spin: bool) -> Result<PairRun, DatagramError> {
    let server_at = SocketAddrV4::new(SERVER_ADDR, SERVER_PORT);
    let client_at = SocketAddrV4::new(CLIENT_ADDR, CLIENT_PORT);
    let server = topo
        .server()
        .run(|| Endpoint::open(engine, VETH_IF, server_at, client_at, spin))
        .expect("entering the server namespace")?;
    let client = topo
        .client()
        .run(|| Endpoint::open(engine, VETH_IF, client_at, server_at, spin))
        .expect("entering the client namespace")?;
    // Two spinning threads must not share a CPU (each would wait for the other's time slice).
    let allowed = tcptail_bench::sys::allowed_cpus().expect("CPU affinity");
    let placement = match (spin, allowed.first(), allowed.last()) {
        (true, Some(&a), Some(&b)) if a != b => {
            PairPlacement { client_cpu: Some(a), server_cpu: Some(b) }
        }
        _ => PairPlacement::default(),
    };
    run_pair(server, client, &config(), placement, &AtomicBool::new(false))
}

#[test]
fn af_xdp_and_kernel_udp_answer_on_the_same_veth_pair() {
    let cleanup = Cleanup::new();
    let topo = Topology::veth_pair("xdpc", "xdps").build(&cleanup).expect("a veth pair");
    for spin in [false, true] {
        let udp = run(&topo, DatagramEngine::KernelUdp, spin).expect("kernel UDP runs");
        let least = if spin { 5 } else { 50 };
        assert!(udp.client.requests >= least, "kernel UDP answered {}", udp.client.requests);
        assert_eq!(udp.client.client_kicks, 0, "kernel UDP has no kicks");
        let xdp = match run(&topo, DatagramEngine::AfXdp, spin) {
            Err(DatagramError::Unavailable(why))
                if why.contains("built without") || why.contains("Address family") =>
            {
                eprintln!("SKIPPED the AF_XDP half: {why}");
                return;
            }
            other => other.expect("AF_XDP runs"),
        };
        let c = &xdp.client;
        // Two spinning threads on a shared two-CPU machine may get little of it: some answers.
        let least = if spin { 5 } else { 50 };
        assert!(c.requests >= least, "AF_XDP answered {} (lost {})", c.requests, c.lost);
        assert_eq!(c.latency.len(), c.requests + c.lost);
        // The seed's point: every transmit took a sendto() at both ends.
        assert_eq!(c.client_kicks, c.requests + c.lost, "one kick per request");
        assert!(xdp.server_kicks >= c.requests, "one kick per response");
        assert_eq!(xdp.server_kicks, xdp.server_frames);
        assert!(!c.kick_ns.is_empty());
        eprintln!(
            "spin {spin}: kernel UDP p50 {} µs, AF_XDP p50 {} µs ({} requests, {} lost, kick \
             p50 {} µs)",
            udp.client.latency.quantile_nanos(0.5) / 1000,
            c.latency.quantile_nanos(0.5) / 1000,
            c.requests,
            c.lost,
            c.kick_ns.quantile_nanos(0.5) / 1000
        );
    }
    // With the program attached at both ends, everything else still reaches the kernel: TCP
    // (after ARP) between the same namespaces.
    let server_at = SocketAddrV4::new(SERVER_ADDR, 9200);
    let client_at = SocketAddrV4::new(CLIENT_ADDR, CLIENT_PORT);
    let engine = DatagramEngine::AfXdp;
    let endpoints = (
        topo.server().run(|| Endpoint::open(engine, VETH_IF, server_at, client_at, false)).unwrap(),
        topo.client().run(|| Endpoint::open(engine, VETH_IF, client_at, server_at, false)).unwrap(),
    );
    let (server, client) = endpoints;
    let (_server, _client) = (server.expect("server reopens"), client.expect("client reopens"));
    let listener = topo.server().run(|| TcpListener::bind(server_at)).unwrap().unwrap();
    let stream = topo
        .client()
        .run(|| TcpStream::connect_timeout(&server_at.into(), Duration::from_secs(5)))
        .unwrap();
    assert!(stream.is_ok(), "TCP passes the XDP program: {stream:?}");
    drop(listener);
    topo.teardown().expect("teardown");
}

#[test]
fn sizes_beyond_one_datagram_are_refused_by_name() {
    let mut c = config();
    c.reply_len = 9000;
    let err = c.validate().unwrap_err().to_string();
    assert!(
        err.starts_with("response size 9000: a datagram request/response carries 24 to 1472"),
        "{err}"
    );
}
