//! Scrape cost against `ss -tin`, over the same established loopback connections, in one run,
//! and where the scrape's time goes.
//!
//! For each size N (connections; both ends live here, so 2N sockets) every repetition measures,
//! interleaved so that a busy machine slows all of them alike, the CPU time (user + system,
//! `getrusage`: the kernel's dump work is charged to the caller) of:
//!
//! - **ss**: `ss -tin state established` (child CPU time), output read and discarded: the
//!   reference;
//! - **scrape**: one exporter scrape as deployed: a selector that matches a fixed 100 sockets
//!   (their per-connection series, under the default cap) and aggregates for all the others;
//! - its parts: **dump**, the same sock_diag request received and walked message by message
//!   without parsing (what a C client pays at least: the kernel's work and the copies);
//!   **parse**, the replies of one such dump (captured beforehand) parsed as the scrape
//!   parses them (`tcp_info` in full for the selected sockets, the aggregates' few fields for
//!   the others); **encode**, those fed to the collector and rendered as text;
//! - **full**: a scrape that exports every socket with all its series (no cap; the worst case,
//!   to show the encoder's cost per series), and the allocations its encoding made;
//! - **2 walks**: the dump as one `SOCK_DIAG_BY_FAMILY` request per family instead of the
//!   scrape's one `TCPDIAG_GETSOCK`/`AF_UNSPEC` request (the kernel walks its table twice);
//! - **filtered**: a kernel-filtered scrape (`--no-aggregates`) of the same fixed 100 sockets:
//!   flat as N grows if its cost followed the matches (the kernel still walks every socket);
//!   the `bpf iterator` line gives the same scrape with the filter run in the iterator's
//!   program beside it.
//! - **bpf iterator**: the scrape as the exporter's `auto` source runs it (the BPF socket
//!   iterator, brief records for the sockets no selector matches), split into the iteration
//!   (records read unconverted), itself split into the walk (a minimal program writing cookie
//!   and state: the floor of any iterator dump) and reading the sockets' fields, and user
//!   space's share (records converted, aggregated and rendered); beside it the same scrape
//!   with a full record for every socket. Each ratio's spread over the repetitions is printed
//!   (each repetition against its own `ss -tin`).
//!
//! `BENCH_EXPORTER_SCRAPE_ONLY=1` skips the recorder; `BENCH_EXPORTER_PROFILE=bpf|sock-diag`
//! only scrapes in a loop for 8 s per size (for `perf record`).
//! - **kernel**: where the dump's kernel time goes ([`kernel_split`]): the same walk with a
//!   filter that rejects every socket (the walk alone), then answered with the socket header
//!   alone, then with `tcp_info`, the congestion-control name, BBR's model and socket memory
//!   added in turn; each step's CPU per socket returned. The header alone is the floor of any
//!   sock_diag client that reads these sockets.
//!
//! Then the flight recorder (`tcptail record`) as deployed, for [`RECORD_FOR`] at 100 ms and at
//! 10 ms, recording one end of every connection (the server ends: N sockets, as a server with
//! N connections has; the kernel still walks all 2N) and both ends: the CPU it used, per poll
//! against one `ss -tin`, and what `ss -tin` would cost run as often. Target: at most 5 % of
//! one core at 100 ms for one end of 10,000 connections. Beside it, the recorder's request
//! dumped without parsing (the kernel's share), and for one end at 100 ms the same kernel split
//! as a share of a core beside the BPF iterator's bare walk (its floor: it visits every socket
//! whatever the filter) and the floor of a poll that visits only tracked sockets ([`tracked`]),
//! back to back and polled every 100 ms, beside the kernel's share of `tcptail record`'s own
//! tracked poll (its change witness read, nothing converted), and of its dirty poll with
//! nothing marked. The tracked recorder's line adds its two kinds of polls: the dirty poll
//! (only the connections the kernel marked changed) and the sweep (every tracked connection,
//! every [`tcptail_diag::record::DEFAULT_SWEEP_EVERY`]), each per poll against `ss -tin` and
//! as a share of a core, and their average, measured after its start (the first sweep marks
//! every connection for a second read; the polls until none is marked are reported apart). The CPU percentage is of the wall time, so on a
//! machine too busy to run the recorder on time it understates; the CPU per poll does not.
//!
//! Each figure is the median over `REPEAT` repetitions; the machine's load average is printed
//! before and after each size. Connections are spread over holder processes (`HOLDER_FDS`
//! descriptors each, under `ulimit -n`) and over 8 listener addresses (127.0.0.1-8) so
//! ephemeral ports never run out. Run by `scripts/bench-exporter` inside a private network
//! namespace: `bench_exporter 1000 10000 30000`.

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tcptail_diag::bpf::IterDumper;
use tcptail_diag::bpf::tracked::TrackedDumper;
use tcptail_diag::filter::{Filter, Side};
use tcptail_diag::metrics::{self, Format, Scrape, State};
use tcptail_diag::record::{Recorder, RecorderOptions, RecorderStats, RunStats};
use tcptail_diag::selector::Selectors;
use tcptail_diag::source::{Brief, Dump, SocketSource};
use tcptail_diag::sys::{NetlinkSocket, children_cpu_time, process_cpu_time};
use tcptail_diag::wire::{self, Attrs};
use tcptail_diag::{DumpRequest, Dumper};
use tcptail_sock::tcp_info::TcpInfo;
use tcptail_units::stats;

#[global_allocator]
static ALLOC: alloc::Counting = alloc::Counting;

/// The counting allocator: the only unsafe code of the benchmark.
mod alloc {
    #![allow(unsafe_code)]

    use std::alloc::{GlobalAlloc, Layout, System};
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    static CURRENT: AtomicUsize = AtomicUsize::new(0);
    static PEAK: AtomicUsize = AtomicUsize::new(0);
    static CALLS: AtomicUsize = AtomicUsize::new(0);

    /// Forwards to the system allocator, counting live bytes and their peak.
    pub struct Counting;

    fn grew(by: usize) {
        CALLS.fetch_add(1, Relaxed);
        let now = CURRENT.fetch_add(by, Relaxed) + by;
        PEAK.fetch_max(now, Relaxed);
    }

    // SAFETY: every call is forwarded unchanged to `System`, which upholds GlobalAlloc's
    // contract; the counters are plain atomics and never affect the allocation.
    unsafe impl GlobalAlloc for Counting {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: same layout, same contract as the caller's.
            let p = unsafe { System.alloc(layout) };
            if !p.is_null() {
                grew(layout.size());
            }
            p
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: `ptr` was allocated by `System` with `layout` (via `alloc`/`realloc`).
            unsafe { System.dealloc(ptr, layout) };
            CURRENT.fetch_sub(layout.size(), Relaxed);
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            // SAFETY: forwarded with the caller's guarantees about `ptr`, `layout`, `new_size`.
            let p = unsafe { System.realloc(ptr, layout, new_size) };
            if !p.is_null() {
                CURRENT.fetch_sub(layout.size(), Relaxed);
                grew(new_size);
            }
            p
        }
    }

    /// Restarts peak tracking from the bytes live now; returns them.
    pub fn reset_peak() -> usize {
        let now = CURRENT.load(Relaxed);
        PEAK.store(now, Relaxed);
        now
    }

    /// The peak of live bytes since [`reset_peak`].
    pub fn peak() -> usize {
        PEAK.load(Relaxed)
    }

    /// Allocations and reallocations so far.
    pub fn calls() -> usize {
        CALLS.load(Relaxed)
    }
}

const REPEAT: usize = 7;
/// The server ends of the held connections listen on ports from here (below the ephemeral
/// range their client ends use), so a port filter selects one end of every connection.
const SERVER_PORTS: u16 = 20_000;
/// How long each recorder measurement polls.
const RECORD_FOR: Duration = Duration::from_secs(4);
/// The target: the recorder uses at most this much of one core at 100 ms.
const RECORD_TARGET_PERCENT: f64 = 5.0;
/// Sockets the selector matches, whatever the total.
const MATCHED: usize = 100;
/// Listener addresses (127.0.0.1 ..= 127.0.0.LISTENERS).
const LISTENERS: u8 = 8;
/// Descriptors a holder uses at most (two per connection), under a 20,000 `ulimit -n`.
const HOLDER_FDS: usize = 18_000;
/// The target: a scrape costs at most this fraction of `ss -tin`.
const TARGET_RATIO: f64 = 0.15;

/// CPU seconds `f` takes (this process).
fn cpu<T>(f: impl FnOnce() -> T) -> (f64, T) {
    let before = process_cpu_time();
    let out = f();
    ((process_cpu_time() - before).as_secs_f64(), out)
}

/// Opens `n` connections to `listeners` round-robin and keeps both ends.
fn open(listeners: &[TcpListener], n: usize, into: &mut Vec<(TcpStream, TcpStream)>) {
    for k in 0..n {
        let l = &listeners[k % listeners.len()];
        let c = TcpStream::connect(l.local_addr().expect("bound")).expect("connect");
        let (s, _) = l.accept().expect("accept");
        into.push((c, s));
    }
}

/// Listeners of holder `holder` on 127.0.0.1-8, at ports [`SERVER_PORTS`]` + 8 * holder + i`:
/// below the ephemeral range, so that the server ends of the connections are one port range.
fn listeners(holder: u16) -> Vec<TcpListener> {
    (1..=LISTENERS)
        .map(|i| {
            let port = SERVER_PORTS + u16::from(LISTENERS) * holder + u16::from(i);
            TcpListener::bind((Ipv4Addr::new(127, 0, 0, i), port)).expect("bind 127.0.0.x")
        })
        .collect()
}

/// Holder mode: open N connections, say "ready", keep them until stdin closes.
fn hold(n: usize, holder: u16) {
    let mut conns = Vec::new();
    open(&listeners(holder), n, &mut conns);
    println!("ready");
    let mut sink = String::new();
    let _ = std::io::stdin().read_line(&mut sink);
}

fn spawn_holder(exe: &std::path::Path, n: usize, holder: usize) -> std::process::Child {
    let mut child = Command::new(exe)
        .args(["--hold", &n.to_string(), &holder.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn holder");
    let mut line = String::new();
    let out = child.stdout.take().expect("piped");
    std::io::BufRead::read_line(&mut std::io::BufReader::new(out), &mut line).expect("holder");
    assert_eq!(line.trim(), "ready", "holder failed to open {n} connections");
    child
}

/// CPU seconds of one `ss -tin state established`, and the bytes it printed.
fn ss_once() -> (f64, usize) {
    let before = children_cpu_time();
    let mut child = Command::new("ss")
        .args(["-tin", "state", "established"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("run ss");
    let mut out = child.stdout.take().expect("piped");
    let bytes = std::io::copy(&mut out, &mut std::io::sink()).expect("read ss") as usize;
    child.wait().expect("wait ss");
    ((children_cpu_time() - before).as_secs_f64(), bytes)
}

/// Sends `request` and receives its replies, walking the netlink headers only (no parsing):
/// the floor any sock_diag client pays. Returns the messages received.
fn raw_dump(sock: &NetlinkSocket, request: &[u8], buf: &mut [u8]) -> usize {
    sock.send(request).expect("send");
    let mut messages = 0;
    loop {
        let n = sock.recv(buf).expect("recv");
        let mut pos = 0;
        while pos + 16 <= n {
            let len = u32::from_ne_bytes(buf[pos..pos + 4].try_into().expect("4 bytes")) as usize;
            let kind = u16::from_ne_bytes([buf[pos + 4], buf[pos + 5]]);
            match kind {
                3 => return messages,
                2 => panic!("the kernel answered the dump with an error"),
                _ => messages += 1,
            }
            pos += len.max(16).next_multiple_of(4);
        }
    }
}

/// What each part of a dump costs the kernel: the same walk of its tables (`states`, the
/// filter `code`) answered with less and less. Rows: a filter that rejects every socket (the
/// walk alone), the socket header alone, then with `tcp_info`, the congestion-control name,
/// BBR's model and socket memory added in turn. Median CPU seconds of `REPEAT` interleaved
/// rounds, and the sockets each returned.
fn kernel_split(
    raw: &NetlinkSocket,
    buf: &mut [u8],
    seq: &mut u32,
    states: u32,
    code: Option<&[u8]>,
) -> Vec<(&'static str, f64, usize)> {
    let reject_all = Filter::Or(Vec::new()).bytecode().expect("an empty Or has bytecode");
    let info = Attrs { info: true, ..Attrs::NONE };
    let cong = Attrs { cong: true, ..info };
    let bbr = Attrs { cc_info: true, ..cong };
    let steps: [(&str, Attrs, Option<&[u8]>); 6] = [
        ("walk", Attrs::NONE, Some(&reject_all)),
        ("header", Attrs::NONE, code),
        ("+info", info, code),
        ("+cong", cong, code),
        ("+bbr", bbr, code),
        ("+skmem", Attrs::ALL, code),
    ];
    let mut times = vec![Vec::new(); steps.len()];
    let mut counts = vec![0; steps.len()];
    for _ in 0..REPEAT {
        for (i, (_, attrs, code)) in steps.iter().enumerate() {
            *seq += 1;
            let r = wire::dump_request_any_family(states, *attrs, *seq, *code);
            let (t, n) = cpu(|| raw_dump(raw, &r, buf));
            times[i].push(t);
            counts[i] = n;
        }
    }
    steps
        .iter()
        .zip(times)
        .zip(counts)
        .map(|((&(name, _, _), t), n)| (name, stats::median(&t).expect("repetitions"), n))
        .collect()
}

/// One line of [`kernel_split`]: each row's CPU ms and what it adds per socket returned.
fn split_line(split: &[(&str, f64, usize)]) -> String {
    let returned = split.last().map_or(1, |r| r.2).max(1) as f64;
    let mut line = String::new();
    let mut before = 0.0;
    for &(name, t, _) in split {
        let added_us = (t - before) * 1e6 / returned;
        line.push_str(&format!("{name} {:.2} ms ({added_us:+.3} us/socket); ", t * 1e3));
        before = t;
    }
    line.trim_end_matches("; ").to_owned()
}

/// How the tracked recorder's start settled: CPU seconds and polls.
#[derive(Debug, Clone, Copy, Default)]
struct Settled {
    cpu: f64,
    polls: u32,
}

/// The flight recorder as `tcptail record` runs it: polls `req` every `interval` for
/// [`RECORD_FOR`] into a file; its run, its totals, the live-table entries, the file size and
/// (tracked) how its start settled.
fn record(
    req: &DumpRequest,
    interval: Duration,
    mut dumper: impl Dump,
    tracked: Option<TrackedDumper>,
) -> (RunStats, RecorderStats, (usize, usize), u64, Settled) {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("rec");
    let options = RecorderOptions { interval, ..RecorderOptions::default() };
    let mut rec = Recorder::create(&path, options).expect("create the recording");
    // The first poll writes every connection's full record: measure the steady state after it.
    // The tracked poll's first sweep also marks every connection it wrote for a second read;
    // the dirty polls after it read them and trim the marks (a trim skips some where it resumes
    // after a full buffer, so it takes a few polls): its start is measured apart.
    let stop = |end: Instant| move || Instant::now() >= end;
    let mut settled = Settled::default();
    let run = match tracked {
        Some(mut t) => {
            (settled.cpu, settled.polls) = cpu(|| {
                let mut polls = 0;
                loop {
                    rec.poll_tracked(&mut t).expect("poll");
                    polls += 1;
                    if polls >= 100 || t.marked().expect("marked connections").is_empty() {
                        break polls;
                    }
                }
            });
            let end = Instant::now() + RECORD_FOR;
            rec.run_tracked(&mut t, stop(end), |e| panic!("poll failed: {e}"))
        }
        None => {
            rec.poll(&mut dumper, req).expect("first poll");
            let end = Instant::now() + RECORD_FOR;
            rec.run(&mut dumper, req, stop(end), |e| panic!("dump failed: {e}"))
        }
    }
    .expect("record");
    let live = (rec.live(), rec.table_bytes());
    let stats = rec.finish().expect("finish the recording");
    let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
    (run, stats, live, bytes, settled)
}

fn selectors(toml: &str) -> Selectors {
    Selectors::from_toml(toml, std::path::Path::new("bench")).expect("selectors")
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// A socket as a scrape parses it (unboxed, as the scrape holds it: a box per socket would
/// add an allocation the scrape does not make to the parse column).
#[allow(clippy::large_enum_variant)]
enum Parsed<'a> {
    /// Selected: `tcp_info` decoded in full.
    Full(tcptail_diag::Socket<'a>),
    /// Aggregated: the aggregates' fields.
    Brief(Brief<'a>),
}

/// Medians (CPU seconds) of one size, by column.
#[derive(Default)]
struct Samples {
    ss: Vec<f64>,
    scrape: Vec<f64>,
    dump: Vec<f64>,
    parse: Vec<f64>,
    encode: Vec<f64>,
    full: Vec<f64>,
    two_walks: Vec<f64>,
    filtered: Vec<f64>,
    bpf_scrape: Vec<f64>,
    bpf_dump: Vec<f64>,
    bpf_convert: Vec<f64>,
    bpf_minimal: Vec<f64>,
    bpf_full: Vec<f64>,
    bpf_filtered: Vec<f64>,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--hold") {
        return hold(args[1].parse().expect("count"), args[2].parse().expect("holder"));
    }
    let sizes: Vec<usize> = args.iter().map(|a| a.parse().expect("sizes are integers")).collect();
    let selected = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = selected.local_addr().expect("bound").port();
    // The fixed matched set: MATCHED client sockets whose remote port is `port`.
    let mut mine = Vec::new();
    open(std::slice::from_ref(&selected), MATCHED, &mut mine);
    let exe = std::env::current_exe().expect("own path");
    let mut holders = Vec::new();
    let mut held = MATCHED;
    let mut dumper = Dumper::new().expect("sock_diag");
    let mut iter = match IterDumper::new() {
        Ok(d) => Some(d),
        Err(e) => {
            eprintln!("no BPF iterator columns: {e}");
            None
        }
    };
    let raw = NetlinkSocket::open().expect("sock_diag");
    let mut buf = vec![0u8; 32 * 1024];
    let mut seq = 1_000_000u32;
    let svc = selectors(&format!("[[selector]]\nname = \"svc\"\nremote_ports = [\"{port}\"]\n"));
    // The scrape's own request (aggregates: every socket), restricted to established sockets
    // so that it reads the same sockets as `ss -tin state established`.
    let request = DumpRequest { states: wire::ESTABLISHED, ..metrics::dump_request(&svc, true) };
    let filtered_request = metrics::dump_request(&svc, false);
    let mut filtered_at_first = None;
    println!(
        "{:>6} {:>7} | {:>7} {:>7} {:>7} {:>7} {:>7} | {:>7} {:>8} | {:>6} {:>6} {:>6} | {:>8} {:>6} | {:>6}",
        "conns",
        "sockets",
        "ss -tin",
        "scrape",
        "dump",
        "parse",
        "encode",
        "full",
        "2 walks",
        "scrape",
        "dump",
        "2 walks",
        "filt 100",
        "vs 1st",
        "allocs"
    );
    println!(
        "{:>6} {:>7} | {:^39} | {:^16} | {:^20} | {:^15} | {:>6}",
        "",
        "",
        "CPU us per socket (median)",
        "us per socket",
        "ratio to ss -tin",
        "CPU us, ratio",
        "encode"
    );
    for n in sizes {
        assert!(n >= MATCHED, "sizes start at {MATCHED} connections");
        let t = Instant::now();
        while held < n {
            let k = (n - held).min(HOLDER_FDS / 2);
            holders.push(spawn_holder(&exe, k, holders.len()));
            held += k;
        }
        let setup = t.elapsed();
        if let Ok(source) = std::env::var("BENCH_EXPORTER_PROFILE") {
            // Scrapes in a loop for `perf record` (no measurement): `bpf` or `sock-diag`.
            let end = Instant::now() + Duration::from_secs(8);
            let mut scrapes = 0;
            while Instant::now() < end {
                let mut scrape = Scrape::new(&svc);
                match (source.as_str(), iter.as_mut()) {
                    ("bpf", Some(iter)) => scrape.dump(iter, &request).map(drop).expect("dump"),
                    _ => scrape.dump(&mut dumper, &request).map(drop).expect("dump"),
                }
                let text = scrape.render(&mut State::default(), Format::Prometheus, Duration::ZERO);
                std::hint::black_box(text);
                scrapes += 1;
            }
            eprintln!("{scrapes} {source} scrapes of {n} connections");
            continue;
        }
        let load_before = load();
        let everything = selectors(&format!(
            "max_connections = {}\n[[selector]]\nname = \"all\"\nremote_addrs = [\"127.0.0.0/8\"]\n",
            4 * n
        ));
        let mut m = Samples::default();
        let (mut sockets, mut series, mut ss_bytes, mut encode_allocs) = (0, 0, 0, 0);
        let mut peak_scrape = 0;
        for _ in 0..REPEAT {
            let (t, bytes) = ss_once();
            m.ss.push(t);
            ss_bytes = bytes;

            let (t, seen) = cpu(|| {
                let base = alloc::reset_peak();
                let mut scrape = Scrape::new(&svc);
                scrape.dump(&mut dumper, &request).expect("dump");
                let seen = scrape.sockets_seen;
                let text = scrape.render(&mut State::default(), Format::Prometheus, Duration::ZERO);
                peak_scrape = alloc::peak() - base;
                assert!(text.contains("selector=\"svc\""));
                seen
            });
            m.scrape.push(t);
            sockets = seen;

            // The scrape's request (one walk, same attributes), not parsed.
            seq += 1;
            let one = wire::dump_request_any_family(wire::ESTABLISHED, request.attrs, seq, None);
            let (t, got) = cpu(|| raw_dump(&raw, &one, &mut buf));
            assert_eq!(got as u64, sockets, "the raw dump sees the scrape's sockets");
            m.dump.push(t);

            let captured = dumper.capture(&request).expect("capture");
            // As the dump parses: each socket message once, in place.
            let parse_all = || {
                captured
                    .iter()
                    .flat_map(|batch| wire::raw_frames(batch))
                    .filter_map(|f| f.ok().filter(wire::RawFrame::is_socket))
                    .filter_map(|f| wire::parse_socket(f.payload).ok())
            };
            // As the scrape parses them: `tcp_info` in full for the selected sockets, the
            // aggregates' fields alone for the others (Dump::dump_for_scrape of sock_diag).
            let selected = svc.filter().expect("a selector");
            let parse_for_scrape = || {
                captured
                    .iter()
                    .flat_map(|batch| wire::raw_frames(batch))
                    .filter_map(|f| f.ok().filter(wire::RawFrame::is_socket))
                    .filter_map(|f| wire::parse_socket_with(f.payload, false).ok())
                    .map(|s| {
                        if selected.matches(&s.id) {
                            let info = TcpInfo::parse(s.info_raw).ok();
                            Parsed::Full(tcptail_diag::Socket { info, ..s })
                        } else {
                            let info = TcpInfo::parse_delay_inputs(s.info_raw).ok();
                            Parsed::Brief(Brief { state: s.state, cong: s.cong, info })
                        }
                    })
            };
            let (t, ()) = cpu(|| {
                parse_for_scrape().for_each(|s| {
                    std::hint::black_box(&s);
                })
            });
            m.parse.push(t);
            let for_scrape: Vec<_> = parse_for_scrape().collect();
            let (t, ()) = cpu(|| {
                let mut scrape = Scrape::new(&svc);
                for s in &for_scrape {
                    match s {
                        Parsed::Full(s) => scrape.add(s),
                        Parsed::Brief(b) => scrape.add_brief(b),
                    }
                }
                let _ = scrape.render(&mut State::default(), Format::Prometheus, Duration::ZERO);
            });
            drop(for_scrape);
            m.encode.push(t);
            let parsed: Vec<_> = parse_all().collect();
            // Encoding every parsed socket with all its series: allocations counted.
            let (t, (lines, allocs)) = cpu(|| {
                let calls = alloc::calls();
                let mut scrape = Scrape::new(&everything);
                for s in &parsed {
                    scrape.add(s);
                }
                let text = scrape.render(&mut State::default(), Format::Prometheus, Duration::ZERO);
                let allocs = alloc::calls() - calls;
                (text.lines().filter(|l| l.contains("conn=\"")).count(), allocs)
            });
            drop(parsed);
            m.full.push(t);
            series = lines;
            encode_allocs = allocs;

            let per_family: Vec<Vec<u8>> = [libc::AF_INET as u8, libc::AF_INET6 as u8]
                .iter()
                .map(|&f| {
                    seq += 1;
                    wire::dump_request_for(f, wire::ESTABLISHED, request.attrs, seq, None)
                })
                .collect();
            let (t, got) =
                cpu(|| per_family.iter().map(|r| raw_dump(&raw, r, &mut buf)).sum::<usize>());
            assert_eq!(got as u64, sockets, "two walks see the same sockets");
            m.two_walks.push(t);

            let (t, matched) = cpu(|| {
                let mut scrape = Scrape::new(&svc);
                dumper.dump(&filtered_request, |s| scrape.add(s)).expect("dump");
                let seen = scrape.sockets_seen;
                let _ = scrape.render(&mut State::default(), Format::Prometheus, Duration::ZERO);
                seen
            });
            assert_eq!(matched, MATCHED as u64, "the filter matches the fixed set");
            m.filtered.push(t);

            // The same scrape from the BPF socket iterator, and its parts: the records read
            // unconverted, then converted to sockets (encode is the same as sock_diag's: the
            // same sockets reach the same collector).
            if let Some(iter) = iter.as_mut() {
                let (t, seen) = cpu(|| {
                    let mut scrape = Scrape::new(&svc);
                    scrape.dump(iter, &request).expect("bpf dump");
                    let seen = scrape.sockets_seen;
                    let text =
                        scrape.render(&mut State::default(), Format::Prometheus, Duration::ZERO);
                    assert!(text.contains("selector=\"svc\""));
                    seen
                });
                assert_eq!(seen, sockets, "the iterator sees the scrape's sockets");
                m.bpf_scrape.push(t);
                // Its parts: the iteration the scrape reads (brief records for the sockets
                // no selector matches), unconverted; then those records converted,
                // aggregated and rendered (user space's share).
                let selected = svc.filter();
                let mut records = Vec::new();
                let (t, got) = cpu(|| {
                    iter.read_scrape_records(&request, selected.as_ref(), &mut records)
                        .expect("bpf read")
                });
                assert_eq!(got, sockets, "the raw iteration sees the scrape's sockets");
                m.bpf_dump.push(t);
                let (t, ()) = cpu(|| {
                    let mut scrape = Scrape::new(&svc);
                    iter.scrape_records(&records, &request, selected.as_ref(), &mut scrape);
                    assert_eq!(scrape.sockets_seen, sockets, "every record converted");
                    let text =
                        scrape.render(&mut State::default(), Format::Prometheus, Duration::ZERO);
                    std::hint::black_box(text);
                });
                m.bpf_convert.push(t);
                let (t, got) = cpu(|| iter.read_minimal(request.states).expect("minimal"));
                assert_eq!(got, sockets, "the minimal iteration sees the scrape's sockets");
                m.bpf_minimal.push(t);
                // The same scrape with a full record for every socket (as before brief ones).
                let (t, ()) = cpu(|| {
                    let mut scrape = Scrape::new(&svc);
                    iter.dump(&request, |s| scrape.add(s)).expect("bpf dump");
                    let text =
                        scrape.render(&mut State::default(), Format::Prometheus, Duration::ZERO);
                    std::hint::black_box(text);
                });
                m.bpf_full.push(t);
                // The kernel-filtered scrape, filtered inside the iterator's program.
                let (t, matched) = cpu(|| {
                    let mut scrape = Scrape::new(&svc);
                    iter.dump(&filtered_request, |s| scrape.add(s)).expect("bpf dump");
                    let seen = scrape.sockets_seen;
                    let _ =
                        scrape.render(&mut State::default(), Format::Prometheus, Duration::ZERO);
                    seen
                });
                assert_eq!(matched, MATCHED as u64, "the program's filter matches the fixed set");
                m.bpf_filtered.push(t);
            }
        }
        let median = |v: &[f64]| stats::median(v).expect("at least one repetition");
        let per = |v: &[f64]| median(v) * 1e6 / sockets.max(1) as f64;
        let (ss, scrape, dump, two) = (per(&m.ss), per(&m.scrape), per(&m.dump), per(&m.two_walks));
        let filtered_us = median(&m.filtered) * 1e6;
        let first = *filtered_at_first.get_or_insert(filtered_us);
        println!(
            "{n:>6} {sockets:>7} | {ss:>7.3} {scrape:>7.3} {dump:>7.3} {:>7.3} {:>7.3} | \
             {:>7.3} {two:>8.3} | {:>6.3} {:>6.3} {:>6.3} | {filtered_us:>8.0} {:>6.2} | {:>6}",
            per(&m.parse),
            per(&m.encode),
            per(&m.full),
            scrape / ss,
            dump / ss,
            two / ss,
            filtered_us / first.max(1e-9),
            encode_allocs,
        );
        eprintln!(
            "  [{n}: load {load_before} -> {}; setup {:.1} s; sock_diag scrape {:.1} ms vs ss \
             {:.1} ms: {:.3}x, target <= {TARGET_RATIO}x {}; full scrape {series} series at {:.0} ns \
             each, {encode_allocs} allocations to encode them; scrape peak {} KiB allocated; \
             ss printed {} KiB]",
            load(),
            setup.as_secs_f64(),
            median(&m.scrape) * 1e3,
            median(&m.ss) * 1e3,
            scrape / ss,
            if scrape / ss <= TARGET_RATIO { "met" } else { "MISSED" },
            median(&m.full) * 1e9 / series.max(1) as f64,
            peak_scrape / 1024,
            ss_bytes / 1024,
        );
        // Per repetition (each measured beside its own ss -tin): the spread of the ratio.
        let spread = |v: &[f64]| {
            let r: Vec<f64> = v.iter().zip(&m.ss).map(|(t, s)| t / s).collect();
            let lo = r.iter().copied().fold(f64::INFINITY, f64::min);
            let hi = r.iter().copied().fold(0.0, f64::max);
            format!("{lo:.3}-{hi:.3}")
        };
        println!(
            "  sock_diag scrape {:.3}x ss -tin (repetitions {}) = dump {:.3}x + parse {:.3}x + \
             encode {:.3}x",
            scrape / ss,
            spread(&m.scrape),
            dump / ss,
            per(&m.parse) / ss,
            per(&m.encode) / ss,
        );
        if iter.is_some() {
            let bpf = per(&m.bpf_scrape);
            let walk = per(&m.bpf_minimal);
            let read = per(&m.bpf_dump);
            println!(
                "  bpf iterator (the exporter's auto source): scrape {bpf:.3} us/socket = \
                 {:.3}x ss -tin (repetitions {}; target <= {TARGET_RATIO}x {}) = iteration \
                 {:.3}x [the walk, a minimal program (cookie, state): {:.3}x; reading the \
                 fields, brief and full records: +{:.3}x] + convert, aggregate and encode \
                 {:.3}x; {:.1} ms vs ss {:.1} ms; with a full record for every socket \
                 {:.3}x; filtered scrape of the {MATCHED} (filter in the program) {:.0} us, \
                 sock_diag's {filtered_us:.0} us",
                bpf / ss,
                spread(&m.bpf_scrape),
                if bpf / ss <= TARGET_RATIO { "met" } else { "MISSED" },
                read / ss,
                walk / ss,
                (read - walk) / ss,
                per(&m.bpf_convert) / ss,
                median(&m.bpf_scrape) * 1e3,
                median(&m.ss) * 1e3,
                per(&m.bpf_full) / ss,
                median(&m.bpf_filtered) * 1e6,
            );
        }
        // Where the kernel's share goes, for the scrape's sockets.
        let split = kernel_split(&raw, &mut buf, &mut seq, wire::ESTABLISHED, None);
        let ss_s = median(&m.ss);
        let header_ratio = split[1].1 / ss_s;
        println!(
            "  kernel, every socket: {}; the scrape asks up to +bbr: {:.3}x ss -tin, the \
             header alone {header_ratio:.3}x{}",
            split_line(&split),
            split[4].1 / ss_s,
            if header_ratio > TARGET_RATIO {
                format!(" (above {TARGET_RATIO}x: no sock_diag client reaches the target here)")
            } else {
                String::new()
            },
        );
        if std::env::var_os("BENCH_EXPORTER_SCRAPE_ONLY").is_some() {
            continue;
        }
        // The flight recorder over the same sockets, beside ss -tin's cost per run.
        let ss_ms = median(&m.ss) * 1e3;
        let server_ends = DumpRequest {
            filter: Some(Filter::Port {
                side: Side::Local,
                lo: SERVER_PORTS,
                hi: SERVER_PORTS + 999,
            }),
            states: wire::ESTABLISHED,
            ..DumpRequest::default()
        };
        let every_socket = DumpRequest { states: wire::ESTABLISHED, ..DumpRequest::default() };
        let sources: &[&str] =
            if iter.is_some() { &["sock-diag", "bpf", "tracked"] } else { &["sock-diag"] };
        for interval in [Duration::from_millis(100), Duration::from_millis(10)] {
            for (what, req, source) in [("one end", &server_ends), ("both ends", &every_socket)]
                .into_iter()
                .flat_map(|(w, r)| sources.iter().map(move |s| (w, r, *s)))
            {
                let code = req.filter.as_ref().and_then(Filter::bytecode);
                let floor: Vec<f64> = (0..5)
                    .map(|_| {
                        seq += 1;
                        let r = wire::dump_request_any_family(
                            req.states,
                            req.attrs,
                            seq,
                            code.as_deref(),
                        );
                        cpu(|| raw_dump(&raw, &r, &mut buf)).0
                    })
                    .collect();
                let floor_ms = median(&floor) * 1e3;
                if interval == Duration::from_millis(100)
                    && what == "one end"
                    && source == "sock-diag"
                {
                    let split = kernel_split(&raw, &mut buf, &mut seq, req.states, code.as_deref());
                    let per_100ms = |t: f64| t / 0.1 * 100.0;
                    let headers = per_100ms(split[1].1);
                    // The iterator walks every socket whatever the filter: its bare walk (the
                    // minimal program, measured above) is the floor of a poll through it.
                    let iter_walk = if m.bpf_minimal.is_empty() {
                        String::new()
                    } else {
                        let walk = per_100ms(median(&m.bpf_minimal));
                        format!("; the BPF iterator's bare walk of every socket {walk:.1} %")
                    };
                    let floor = if iter_walk.is_empty() {
                        headers
                    } else {
                        headers.min(per_100ms(median(&m.bpf_minimal)))
                    };
                    if iter.is_some() {
                        let (t, n) = tracked::track(SERVER_PORTS, SERVER_PORTS + 999, &mut buf);
                        let times = |link: &std::os::fd::OwnedFd, buf: &mut Vec<u8>, pause| {
                            let v: Vec<f64> = (0..REPEAT)
                                .map(|_| {
                                    std::thread::sleep(pause);
                                    cpu(|| tracked::drain(link, buf)).0
                                })
                                .collect();
                            median(&v)
                        };
                        let (bare, counters) = (
                            times(&t.bare, &mut buf, Duration::ZERO),
                            times(&t.counters, &mut buf, Duration::ZERO),
                        );
                        let paced = Duration::from_millis(100);
                        let (bare_paced, counters_paced) =
                            (times(&t.bare, &mut buf, paced), times(&t.counters, &mut buf, paced));
                        println!(
                            "  the same floors polled every 100 ms (caches as the recorder finds \
                             them): walk {:.2} ms = {:.1} %, with ten counters {:.2} ms = {:.1} %",
                            bare_paced * 1e3,
                            per_100ms(bare_paced),
                            counters_paced * 1e3,
                            per_100ms(counters_paced),
                        );
                        // The tracked poll's kernel share: the witness of every socket read,
                        // the records written, none converted.
                        let mut poll =
                            TrackedDumper::new(req, None).expect("the tracked-sockets poll");
                        let settled = (0..10).any(|_| poll.read_poll().expect("poll").1 == 0);
                        let mut full = Vec::new();
                        // Back to back (caches warm, as the floors above), then 100 ms apart
                        // (as the recorder polls: other work evicts the sockets meanwhile).
                        let mut kernel = |pause: Duration| -> f64 {
                            let v: Vec<f64> = (0..REPEAT)
                                .map(|_| {
                                    std::thread::sleep(pause);
                                    let (t, (_, f)) = cpu(|| poll.read_poll().expect("poll"));
                                    full.push(f);
                                    t
                                })
                                .collect();
                            median(&v)
                        };
                        let (warm, paced) =
                            (kernel(Duration::ZERO), kernel(Duration::from_millis(100)));
                        println!(
                            "  tcptail record's tracked poll, kernel only (witness read, records \
                             written, not converted): back to back {:.2} ms = {:.1} % of a core at \
                             100 ms; polled every 100 ms {:.2} ms = {:.1} %; full records per poll \
                             {:?}{}",
                            warm * 1e3,
                            per_100ms(warm),
                            paced * 1e3,
                            per_100ms(paced),
                            full,
                            if settled { "" } else { " (never settled)" },
                        );
                        // The dirty poll's kernel share with nothing marked (idle connections):
                        // the dirty walk and the trim over an empty map.
                        let quiet = (0..10).any(|_| {
                            poll.poll_dirty(|_| {}).expect("dirty poll");
                            poll.marked().expect("marked sockets").is_empty()
                        });
                        let idle: Vec<f64> = (0..REPEAT)
                            .map(|_| {
                                std::thread::sleep(Duration::from_millis(100));
                                cpu(|| poll.poll_dirty(|_| {}).expect("dirty poll")).0
                            })
                            .collect();
                        let idle = median(&idle);
                        println!(
                            "  tcptail record's dirty poll with nothing marked (the dirty walk and \
                             the trim over an empty map), polled every 100 ms: {:.3} ms = {:.2} % \
                             of a core{}",
                            idle * 1e3,
                            per_100ms(idle),
                            if quiet { "" } else { " (never quiet)" },
                        );
                        println!(
                            "  a poll of tracked sockets only (socket-storage iterator; the floor \
                             of tcptail record's tracked poll, without its user space), one end ({n} sockets): \
                             walk {:.2} ms = {:.1} % of a core at 100 ms, with ten counters \
                             compared in BPF {:.2} ms = {:.1} %",
                            bare * 1e3,
                            per_100ms(bare),
                            counters * 1e3,
                            per_100ms(counters),
                        );
                    }
                    println!(
                        "  kernel, one end: {}; at 100 ms the walk alone is {:.1} % of a core, \
                         with headers {headers:.1} %, as recorded {:.1} %{iter_walk}{}",
                        split_line(&split),
                        per_100ms(split[0].1),
                        per_100ms(split[5].1),
                        if floor > RECORD_TARGET_PERCENT {
                            format!(
                                " (above {RECORD_TARGET_PERCENT} %: no poll that walks the \
                                 socket table reaches the target here)"
                            )
                        } else {
                            String::new()
                        },
                    );
                }
                let (run, stats, live, bytes, settled) = if source == "bpf" {
                    let d = IterDumper::new().expect("bpf iterator");
                    record(req, interval, SocketSource::Bpf(Box::new(d)), None)
                } else if source == "tracked" {
                    let t = TrackedDumper::new(req, None).expect("the tracked-sockets poll");
                    record(req, interval, Dumper::new().expect("sock_diag"), Some(t))
                } else {
                    record(req, interval, Dumper::new().expect("sock_diag"), None)
                };
                let per_poll_ms = run.cpu.as_secs_f64() * 1e3 / run.polls.max(1) as f64;
                let ss_percent = ss_ms / (interval.as_secs_f64() * 1e3) * 100.0;
                // The tracked poll's two kinds of polls, each as a share of a core were every
                // poll of that kind.
                let kinds = if source == "tracked" {
                    let dirty_polls = run.polls.saturating_sub(run.sweeps).max(1) as f64;
                    let dirty_ms = (run.cpu - run.sweep_cpu).as_secs_f64() * 1e3 / dirty_polls;
                    let sweep_ms = run.sweep_cpu.as_secs_f64() * 1e3 / run.sweeps.max(1) as f64;
                    let of_core = |ms: f64| ms / (interval.as_secs_f64() * 1e3) * 100.0;
                    format!(
                        "\n      dirty poll {dirty_ms:.3} ms ({:.4}x ss -tin, {:.2} % of a core), sweep \
                         every {:?} {sweep_ms:.2} ms ({:.3}x ss -tin), {} sweeps in {} polls; \
                         average per poll with the sweeps {per_poll_ms:.3} ms ({:.4}x ss -tin, \
                         {:.2} % of a core); its start (the first sweep and the polls until no \
                         connection is marked) {:.1} ms in {} polls",
                        dirty_ms / ss_ms,
                        of_core(dirty_ms),
                        tcptail_diag::record::DEFAULT_SWEEP_EVERY,
                        sweep_ms / ss_ms,
                        run.sweeps,
                        run.polls,
                        per_poll_ms / ss_ms,
                        of_core(per_poll_ms),
                        settled.cpu * 1e3,
                        settled.polls,
                    )
                } else {
                    String::new()
                };
                let verdict = if interval == Duration::from_millis(100) && what == "one end" {
                    let met = run.cpu_percent() <= RECORD_TARGET_PERCENT;
                    format!(
                        "; target <= {RECORD_TARGET_PERCENT} % {}",
                        if met { "met" } else { "MISSED" }
                    )
                } else {
                    String::new()
                };
                println!(
                    "  record every {:>3} ms, {what:<9} {source:<9} ({:>6} sockets): CPU {:>6.2} % of a core \
                     ({per_poll_ms:.2} ms per poll = {:.3}x one ss -tin, its request unparsed \
                     {floor_ms:.2} ms; ss -tin as often: \
                     {ss_percent:.0} %); {} polls, {} late; {} table entries ({} KiB); {} \
                     KiB written{verdict}{kinds}",
                    interval.as_millis(),
                    live.0,
                    run.cpu_percent(),
                    per_poll_ms / ss_ms,
                    stats.polls,
                    run.late,
                    live.0,
                    live.1 / 1024,
                    bytes / 1024,
                );
            }
        }
    }
    println!(
        "scrape = dump + parse + encode: the exporter's scrape ({MATCHED} selected sockets with \
         their own series, aggregates for the rest); dump = the same sock_diag request without \
         parsing (the floor); full = every socket exported, all series; 2 walks = the dump as one \
         request per family; filt 100 = kernel-filtered scrape of the {MATCHED} (flat = \
         proportional to matches); allocs = allocations made encoding the full scrape. Target: \
         scrape <= {TARGET_RATIO}x ss -tin."
    );
    for mut h in holders {
        drop(h.stdin.take());
        let _ = h.wait();
    }
    drop(mine);
}

/// A poll that visits only the sockets it tracks, measured as a floor (not how `tcptail record`
/// polls today): an `iter/tcp` walk gives every socket of the server ports a socket-storage
/// entry once, then each poll walks the storage map's iterator (`iter/bpf_sk_storage_map`,
/// no socket lock, no other socket visited) writing cookie and a changed flag per socket —
/// bare, or with ten `tcp_sock` counters compared in the program against the stored copy
/// (what an in-kernel change detection reads at least).
mod tracked {
    use std::os::fd::OwnedFd;

    use tcptail_bpf::asm::{Asm, Cond, R0, R1, R2, R3, R4, R6, R7, R8, R9, R10, Size};
    use tcptail_bpf::{Map, ProgLoad};
    use tcptail_diag::bpf::btf::Btf;
    use tcptail_diag::bpf::program::emit_seq_write;

    const GET_SOCKET_COOKIE: i32 = 46;
    const SK_STORAGE_GET: i32 = 107;
    const SKC_TO_TCP_SOCK: i32 = 137;
    /// The counters compared (`tcp_sock` members).
    const COUNTERS: [&str; 10] = [
        "bytes_acked",
        "bytes_received",
        "segs_in",
        "segs_out",
        "snd_cwnd",
        "srtt_us",
        "total_retrans",
        "snd_nxt",
        "rcv_nxt",
        "lost_out",
    ];

    /// The storage map and the two poll programs' links.
    pub struct Tracked {
        pub bare: OwnedFd,
        pub counters: OwnedFd,
        _map: Map,
    }

    fn load(btf: &Btf, insns: &[u64], func: &str) -> OwnedFd {
        tcptail_bpf::prog_load(&ProgLoad {
            prog_type: tcptail_bpf::PROG_TYPE_TRACING,
            insns,
            license: c"Dual MIT/GPL",
            name: "tcptail_tracked",
            expected_attach_type: tcptail_bpf::TRACE_ITER,
            attach_btf_id: btf.func_id(func).expect("iterator target"),
        })
        .unwrap_or_else(|e| panic!("loading the {func} program: {e}"))
    }

    /// Bytes one iteration of `link` writes.
    pub fn drain(link: &OwnedFd, buf: &mut [u8]) -> usize {
        let iter = tcptail_bpf::iter_create(link).expect("iterator");
        let mut bytes = 0;
        loop {
            match tcptail_bpf::read(&iter, buf).expect("read the iterator") {
                0 => return bytes,
                n => bytes += n,
            }
        }
    }

    /// Tracks the established sockets with a local port in `lo..=hi`; the sockets tracked.
    pub fn track(lo: u16, hi: u16, buf: &mut [u8]) -> (Tracked, usize) {
        let btf = Btf::parse(&std::fs::read("/sys/kernel/btf/vmlinux").expect("kernel BTF"))
            .expect("kernel BTF");
        let off = |s: &str, m: &str| btf.member(s, m).expect("member").byte_offset() as i16;
        let map = Map::create_sk_storage(8 * COUNTERS.len() as u32).expect("socket storage");
        let mut a = Asm::default();
        let out = a.label();
        a.load(Size::DW, R7, R1, 8); // ctx->sk_common
        a.jump_if(Cond::Eq, R7, 0, out);
        a.load(Size::B, R2, R7, off("sock_common", "skc_state"));
        a.jump_if(Cond::Ne, R2, 1, out);
        a.load(Size::H, R2, R7, off("sock_common", "skc_num"));
        a.add_imm(R2, -i32::from(lo));
        a.jump_if(Cond::Gt, R2, i32::from(hi - lo), out);
        a.mov(R1, R7);
        a.call(SKC_TO_TCP_SOCK);
        a.jump_if(Cond::Eq, R0, 0, out);
        a.mov(R2, R0);
        a.load_map_fd(R1, map.raw_fd());
        a.mov_imm(R3, 0);
        a.mov_imm(R4, 1); // BPF_SK_STORAGE_GET_F_CREATE
        a.call(SK_STORAGE_GET);
        a.bind(out);
        a.mov_imm(R0, 0);
        a.exit();
        let prog = load(&btf, &a.finish().expect("assembled"), "bpf_iter_tcp");
        let link = tcptail_bpf::link_create(&prog, 0, tcptail_bpf::TRACE_ITER, 0).expect("link");
        drain(&link, buf);
        let poll = |counters: bool| {
            let mut a = Asm::default();
            let out = a.label();
            a.mov(R6, R1);
            a.load(Size::DW, R7, R6, 16); // ctx->sk
            a.jump_if(Cond::Eq, R7, 0, out);
            a.load(Size::DW, R9, R6, 24); // ctx->value
            a.jump_if(Cond::Eq, R9, 0, out);
            a.mov(R1, R7);
            a.call(GET_SOCKET_COOKIE);
            a.store(Size::DW, R10, -16, R0);
            a.store_imm(Size::DW, R10, -8, 0);
            if counters {
                a.mov(R1, R7);
                a.call(SKC_TO_TCP_SOCK);
                a.jump_if(Cond::Eq, R0, 0, out);
                a.mov(R8, R0);
                a.mov_imm(R3, 0);
                for (i, name) in COUNTERS.iter().enumerate() {
                    let m = btf.member("tcp_sock", name).expect("counter");
                    let same = a.label();
                    a.load(Size::of(m.size.min(8)).expect("size"), R2, R8, m.byte_offset() as i16);
                    a.load(Size::DW, R4, R9, (i * 8) as i16);
                    a.jump_if_reg(Cond::Eq, R2, R4, same);
                    a.mov_imm(R3, 1);
                    a.store(Size::DW, R9, (i * 8) as i16, R2);
                    a.bind(same);
                }
                a.store(Size::DW, R10, -8, R3);
            }
            emit_seq_write(&mut a, -16, 16);
            a.bind(out);
            a.mov_imm(R0, 0);
            a.exit();
            let prog = load(&btf, &a.finish().expect("assembled"), "bpf_iter_bpf_sk_storage_map");
            tcptail_bpf::link_create_map_iter(&prog, &map).expect("link the storage iterator")
        };
        let tracked = Tracked { bare: poll(false), counters: poll(true), _map: map };
        let n = drain(&tracked.bare, buf) / 16;
        (tracked, n)
    }
}
