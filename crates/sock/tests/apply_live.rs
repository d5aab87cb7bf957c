//! Profiles applied to real loopback sockets on this kernel and read back.
//!
//! These need root (CAP_NET_ADMIN, to choose a congestion control outside
//! `tcp_allowed_congestion_control`) and a host whose socket-buffer caps are below 16 MiB;
//! when that is not so they fail and say why, rather than pass vacuously. The not-allowed
//! cases drop capabilities in a dedicated thread with the raw `capset` system call, which
//! (unlike `setresuid` through glibc) changes only the calling thread's credentials.
//!
//! The allocation check uses a counting global allocator, which is why this file allows
//! `unsafe_code`: a `GlobalAlloc` impl and two raw system calls, each with a SAFETY comment.

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::io::{self, Write};
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::time::Duration;

use socket2::{Domain, SockRef, Socket, Type};
use tcptail_sock::apply::{
    allowed_congestion_controls, available_congestion_controls, congestion_control,
};
use tcptail_sock::recv::{RecvFlags, recv_with_policy_flags};
use tcptail_sock::{ApplyReport, OptionOutcome, Profile, QuickAck, apply_profile};
use tcptail_units::ByteSize;

fn sysctl(name: &str) -> String {
    let path = format!("/proc/sys/{}", name.replace('.', "/"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}")).trim().to_string()
}

fn require_cap_net_admin() {
    let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
    let eff = status.lines().find_map(|l| l.strip_prefix("CapEff:")).unwrap().trim();
    let eff = u64::from_str_radix(eff, 16).unwrap();
    assert!(eff & (1 << CAP_NET_ADMIN) != 0, "this test needs CAP_NET_ADMIN (run as root)");
}

fn tcp_socket() -> Socket {
    Socket::new(Domain::IPV4, Type::STREAM, None).unwrap()
}

fn connected_pair() -> (TcpStream, TcpStream) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (server, _) = listener.accept().unwrap();
    (client, server)
}

fn row<'r>(report: &'r ApplyReport, option: &str) -> &'r tcptail_sock::OptionReport {
    report.option(option).unwrap_or_else(|| panic!("no {option} row in\n{report}"))
}

#[test]
fn trading_applies_and_reads_back() {
    require_cap_net_admin();
    let (_client, server) = connected_pair();
    let report = apply_profile(server.as_fd(), &Profile::builtin("trading").unwrap());
    assert!(report.is_clean(), "{report}");
    let options: Vec<&str> = report.options.iter().map(|o| o.option.as_str()).collect();
    assert_eq!(
        options,
        [
            "TCP_CONGESTION",
            "TCP_NODELAY",
            "TCP_QUICKACK",
            "SO_SNDBUF",
            "SO_RCVBUF",
            "SO_KEEPALIVE",
            "TCP_KEEPIDLE",
            "TCP_KEEPINTVL",
            "TCP_KEEPCNT"
        ]
    );
    assert_eq!(row(&report, "TCP_CONGESTION").actual.as_deref(), Some("cubic"));
    assert_eq!(congestion_control(server.as_fd()).unwrap(), "cubic");
    assert_eq!(row(&report, "TCP_NODELAY").actual.as_deref(), Some("on"));
    assert!(server.nodelay().unwrap());
    assert_eq!(row(&report, "SO_KEEPALIVE").actual.as_deref(), Some("on"));
    assert_eq!(row(&report, "TCP_KEEPIDLE").actual.as_deref(), Some("10s"));
    assert_eq!(row(&report, "TCP_KEEPINTVL").actual.as_deref(), Some("3s"));
    assert_eq!(row(&report, "TCP_KEEPCNT").actual.as_deref(), Some("3"));
    let sock = SockRef::from(&server);
    assert_eq!(sock.tcp_keepalive_time().unwrap(), Duration::from_secs(10));
    // 10gbit x 1ms = 1,250,000 bytes requested, stored doubled.
    for option in ["SO_SNDBUF", "SO_RCVBUF"] {
        let r = row(&report, option);
        assert_eq!(r.requested, "1250000B (10gbit x 1ms)");
        assert_eq!(r.actual.as_deref(), Some("2500000B"));
        assert!(r.note.as_deref().unwrap().contains("turns off the kernel's buffer autotuning"));
    }
    assert_eq!(sock.recv_buffer_size().unwrap(), 2_500_000);
    let quickack = row(&report, "TCP_QUICKACK");
    assert_eq!(quickack.requested, "on (rearm)");
    assert!(quickack.note.as_deref().unwrap().contains("current state"), "{report}");
}

#[test]
fn throughput_buffers_are_capped_by_the_core_limits() {
    let wmem_max: u64 = sysctl("net.core.wmem_max").parse().unwrap();
    let rmem_max: u64 = sysctl("net.core.rmem_max").parse().unwrap();
    assert!(
        wmem_max < 16 << 20 && rmem_max < 16 << 20,
        "this test needs net.core.wmem_max/rmem_max below 16 MiB (they are {wmem_max}/{rmem_max})"
    );
    let socket = tcp_socket();
    let report = apply_profile(socket.as_fd(), &Profile::builtin("throughput").unwrap());
    for (option, limit_name, limit) in
        [("SO_SNDBUF", "net.core.wmem_max", wmem_max), ("SO_RCVBUF", "net.core.rmem_max", rmem_max)]
    {
        let r = row(&report, option);
        assert_eq!(r.requested, "16MiB");
        assert_eq!(r.actual, Some(ByteSize(2 * limit).to_string()));
        match &r.outcome {
            OptionOutcome::Capped { limit_name: name, limit: l, note } => {
                assert_eq!((name.as_str(), *l), (limit_name, limit), "{report}");
                assert!(note.contains(&format!("raise {limit_name}")), "{note}");
            }
            other => panic!("{option}: expected capped, got {other:?}\n{report}"),
        }
    }
    assert_eq!(report.problems().count(), 2, "{report}");
    let text = report.to_string();
    assert!(text.contains(&format!("capped at net.core.wmem_max = {wmem_max}")), "{text}");
}

#[test]
fn a_congestion_control_that_is_not_loaded_is_not_available() {
    let available = available_congestion_controls();
    assert!(!available.is_empty());
    assert!(!available.iter().any(|c| c == "nosuchcc"));
    let socket = tcp_socket();
    let before = congestion_control(socket.as_fd()).unwrap();
    let profile = Profile { congestion: Some("nosuchcc".into()), ..Profile::named("t") };
    let report = apply_profile(socket.as_fd(), &profile);
    let r = row(&report, "TCP_CONGESTION");
    assert_eq!(r.outcome, OptionOutcome::NotAvailable { available }, "{report}");
    assert_eq!(r.actual.as_deref(), Some(before.as_str()), "the socket keeps its algorithm");
}

#[test]
fn cubic_is_not_allowed_without_cap_net_admin() {
    require_cap_net_admin();
    let allowed = allowed_congestion_controls();
    assert!(
        !allowed.iter().any(|c| c == "cubic")
            && available_congestion_controls().contains(&"cubic".into()),
        "this test needs cubic loaded but outside \
         net.ipv4.tcp_allowed_congestion_control ({allowed:?})"
    );
    let report = in_thread_without(&[CAP_NET_ADMIN], || {
        let socket = tcp_socket();
        let profile = Profile { congestion: Some("cubic".into()), ..Profile::named("t") };
        apply_profile(socket.as_fd(), &profile)
    });
    let r = row(&report, "TCP_CONGESTION");
    assert_eq!(r.outcome, OptionOutcome::NotAllowed { allowed: allowed.clone() }, "{report}");
    let shown = format!("not allowed (allowed: {})", allowed.join(", "));
    assert!(report.to_string().contains(&shown), "{report}");
    // The same thread with the capability may: the difference is the capability alone.
    let socket = tcp_socket();
    let ok = apply_profile(
        socket.as_fd(),
        &Profile { congestion: Some("cubic".into()), ..Profile::named("t") },
    );
    assert!(ok.is_clean(), "{ok}");
}

#[test]
fn high_priority_is_not_allowed_without_capabilities() {
    require_cap_net_admin();
    let profile = Profile {
        priority: Some(7),
        busy_poll: Some(Duration::from_micros(50)),
        ..Profile::named("t")
    };
    let report = in_thread_without(&[CAP_NET_ADMIN, CAP_NET_RAW], || {
        apply_profile(tcp_socket().as_fd(), &profile)
    });
    let r = row(&report, "SO_PRIORITY");
    let zero_to_six: Vec<String> = (0..=6).map(|n| n.to_string()).collect();
    assert_eq!(r.outcome, OptionOutcome::NotAllowed { allowed: zero_to_six }, "{report}");
    // Linux 6.18 lets an unprivileged process raise SO_BUSY_POLL.
    assert_eq!(row(&report, "SO_BUSY_POLL").outcome, OptionOutcome::Applied, "{report}");
    let root = apply_profile(tcp_socket().as_fd(), &profile);
    assert!(root.is_clean(), "{root}");
}

#[test]
fn every_other_option_reads_back() {
    let profile = Profile {
        nodelay: Some(false),
        quickack: QuickAck::Once,
        user_timeout: Some(Duration::from_secs(5)),
        reuse_address: Some(true),
        reuse_port: Some(true),
        busy_poll: Some(Duration::from_micros(50)),
        notsent_lowat: Some(ByteSize(16 << 10)),
        priority: Some(6),
        ..Profile::named("misc")
    };
    let socket = tcp_socket();
    let report = apply_profile(socket.as_fd(), &profile);
    assert!(report.is_clean(), "{report}");
    let actual = |o| row(&report, o).actual.clone().unwrap();
    assert_eq!(actual("TCP_NODELAY"), "off");
    assert_eq!(actual("TCP_USER_TIMEOUT"), "5s");
    assert_eq!(actual("SO_REUSEADDR"), "on");
    assert_eq!(actual("SO_REUSEPORT"), "on");
    assert_eq!(actual("SO_BUSY_POLL"), "50us");
    assert_eq!(actual("TCP_NOTSENT_LOWAT"), "16KiB");
    assert_eq!(actual("SO_PRIORITY"), "6");
    assert_eq!(row(&report, "TCP_QUICKACK").requested, "on (once)");
    assert_eq!(SockRef::from(&socket).tcp_notsent_lowat().unwrap(), 16384);
}

#[test]
fn kernel_default_touches_nothing() {
    let socket = tcp_socket();
    let before = congestion_control(socket.as_fd()).unwrap();
    let report = apply_profile(socket.as_fd(), &Profile::builtin("kernel-default").unwrap());
    assert!(report.options.is_empty() && report.is_clean());
    assert_eq!(congestion_control(socket.as_fd()).unwrap(), before);
    assert_eq!(before, sysctl("net.ipv4.tcp_congestion_control"));
}

#[test]
fn tcp_options_on_a_udp_socket_degrade_to_unsupported() {
    let udp = Socket::new(Domain::IPV4, Type::DGRAM, None).unwrap();
    let profile = Profile {
        congestion: Some("reno".into()),
        nodelay: Some(true),
        reuse_address: Some(true),
        ..Profile::named("udp")
    };
    let report = apply_profile(udp.as_fd(), &profile);
    assert_eq!(row(&report, "TCP_CONGESTION").outcome, OptionOutcome::Unsupported, "{report}");
    assert_eq!(row(&report, "TCP_NODELAY").outcome, OptionOutcome::Unsupported, "{report}");
    assert_eq!(row(&report, "SO_REUSEADDR").outcome, OptionOutcome::Applied, "{report}");
}

#[test]
fn invalid_values_never_reach_the_kernel() {
    let socket = tcp_socket();
    let before = SockRef::from(&socket).tcp_keepalive_retries().unwrap();
    let profile = Profile {
        congestion: Some("Not A Name".into()),
        keepalive: Some(tcptail_sock::Keepalive {
            idle: Duration::from_secs(10),
            interval: Duration::from_secs(3),
            count: 0,
        }),
        ..Profile::named("bad")
    };
    let report = apply_profile(socket.as_fd(), &profile);
    let cc = row(&report, "TCP_CONGESTION");
    assert!(
        matches!(&cc.outcome, OptionOutcome::Failed { error } if error.starts_with("not applied"))
    );
    let cnt = row(&report, "TCP_KEEPCNT");
    assert!(
        matches!(&cnt.outcome, OptionOutcome::Failed { error } if error.contains("at least 1"))
    );
    assert!(report.option("SO_KEEPALIVE").is_none(), "keepalive left alone:\n{report}");
    assert!(!SockRef::from(&socket).keepalive().unwrap());
    assert_eq!(SockRef::from(&socket).tcp_keepalive_retries().unwrap(), before);
}

#[test]
fn spin_receive_does_not_allocate() {
    let (mut client, server) = connected_pair();
    let mut buf = [0u8; 64];
    let fd = server.as_fd();
    let (allocs, result) = count_allocations(|| {
        let mut would_block = 0;
        for _ in 0..1000 {
            match recv_with_policy_flags(fd, &mut buf, QuickAck::Rearm, RecvFlags::DONT_WAIT) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => would_block += 1,
                other => return Err(format!("{other:?}")),
            }
        }
        Ok(would_block)
    });
    assert_eq!(result, Ok(1000));
    assert_eq!(allocs, 0, "the spin path allocated");
    client.write_all(b"data").unwrap();
    server.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    server.peek(&mut buf[..1]).unwrap();
    let (allocs, n) = count_allocations(|| {
        recv_with_policy_flags(fd, &mut buf, QuickAck::Rearm, RecvFlags::DONT_WAIT).unwrap()
    });
    assert_eq!((allocs, n), (0, 4));
}

// ---- capabilities, per thread ----

const CAP_NET_ADMIN: u32 = 12;
const CAP_NET_RAW: u32 = 13;
const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Runs `f` in a new thread that has first dropped `caps` from its effective and permitted
/// sets. Only that thread loses them: the raw `capset` system call acts on the caller alone.
fn in_thread_without<T: Send>(caps: &[u32], f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            drop_capabilities(caps).expect("capset");
            let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
            let eff = status.lines().find_map(|l| l.strip_prefix("CapEff:")).unwrap().trim();
            let eff = u64::from_str_radix(eff, 16).unwrap();
            for &cap in caps {
                assert_eq!(eff & (1 << cap), 0, "capability {cap} still effective");
            }
            f()
        })
        .join()
        .unwrap()
    })
}

fn drop_capabilities(caps: &[u32]) -> io::Result<()> {
    let mut header = CapHeader { version: LINUX_CAPABILITY_VERSION_3, pid: 0 };
    let mut data = [CapData::default(); 2];
    // SAFETY: capget writes one header and two `CapData` (the v3 layout, matching the
    // version we pass) into memory we own for the duration of the call.
    let rc = unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    for &cap in caps {
        let (word, bit) = ((cap / 32) as usize, 1u32 << (cap % 32));
        data[word].effective &= !bit;
        data[word].permitted &= !bit;
    }
    // SAFETY: capset reads the same header and two `CapData` from memory we own; pid 0 means
    // the calling thread, and removing capabilities is always permitted.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

// ---- allocation counting ----

struct CountingAllocator;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every method forwards to `System` with the caller's arguments unchanged; the
// counter is a const-initialised thread-local `Cell`, which never allocates.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: forwarded unchanged; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` via `alloc` above, with this `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: forwarded unchanged; `ptr` came from this allocator.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: CountingAllocator = CountingAllocator;

/// Allocations made by this thread while `f` runs.
fn count_allocations<T>(f: impl FnOnce() -> T) -> (u64, T) {
    let before = ALLOCATIONS.with(Cell::get);
    let out = f();
    (ALLOCATIONS.with(Cell::get) - before, out)
}
