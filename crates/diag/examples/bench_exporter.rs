//! Scrape cost against `ss -tin`, over the same established loopback connections, in one run.
//!
//! For each size N (connections; both ends live here, so 2N sockets) it measures the CPU time
//! (user + system, `getrusage`; the kernel's dump work is charged to the caller) of:
//!
//! - **full**: one exporter scrape with a selector matching every socket and the cap raised
//!   to all of them, so every socket gets its per-connection series (the worst case);
//! - **aggregates**: one scrape without selectors (per-group counts and histograms only);
//! - **dump v2** / **dump v1**: the dump and parse alone, with the inet_diag v2 per-family
//!   requests the exporter sends, and with the older one-walk `TCPDIAG_GETSOCK`/`AF_UNSPEC`
//!   request for comparison;
//! - **filtered**: a kernel-filtered scrape (`--no-aggregates`) whose selector matches a FIXED
//!   100 sockets whatever N is: its cost would stay flat as N grows if it were proportional to
//!   the matches; the kernel still walks its whole established table (once per request), so
//!   it is also measured with one v1 `AF_UNSPEC` request (one walk instead of two);
//! - **ss**: `ss -tin state established` (child CPU time), output read and discarded.
//!
//! Memory is counted by a counting allocator: the peak bytes allocated during the full scrape
//! (dump buffer, exported connections, rendered text) per exported series, and the same for the
//! aggregates-only scrape (which should not grow with N).
//!
//! Each figure is the median of `REPEAT` runs. Connections are spread over holder processes
//! (`HOLDER_FDS` descriptors each, under `ulimit -n`) and over 8 listener addresses
//! (127.0.0.1-8) so ephemeral ports never run out. Run by `scripts/bench-exporter` inside a
//! private network namespace: `bench_exporter 1000 10000 30000`.

use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tcptail_diag::metrics::{Format, Scrape, State};
use tcptail_diag::selector::Selectors;
use tcptail_diag::sys::{children_cpu_time, process_cpu_time};
use tcptail_diag::{DumpRequest, Dumper, wire};

#[global_allocator]
static ALLOC: sys::Counting = sys::Counting;

/// The counting allocator: the only unsafe code of the benchmark.
mod sys {
    #![allow(unsafe_code)]

    use std::alloc::{GlobalAlloc, Layout, System};
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    static CURRENT: AtomicUsize = AtomicUsize::new(0);
    static PEAK: AtomicUsize = AtomicUsize::new(0);

    /// Forwards to the system allocator, counting live bytes and their peak.
    pub struct Counting;

    fn grew(by: usize) {
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
}

const REPEAT: usize = 5;
/// Sockets the filtered scrape matches, whatever the total.
const MATCHED: usize = 100;
/// Listener addresses (127.0.0.1 ..= 127.0.0.LISTENERS).
const LISTENERS: u8 = 8;
/// Descriptors a holder uses at most (two per connection), under a 20,000 `ulimit -n`.
const HOLDER_FDS: usize = 18_000;
/// The target of the issue: CPU per socket for one scrape.
const TARGET_US_PER_SOCKET: f64 = 1.5;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median CPU time of `f` over `REPEAT` runs, and its last result.
fn cpu<T>(mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut times = Vec::new();
    let mut last = None;
    for _ in 0..REPEAT {
        let before = process_cpu_time();
        last = Some(f());
        times.push((process_cpu_time() - before).as_secs_f64());
    }
    (Duration::from_secs_f64(median(times)), last.expect("REPEAT > 0"))
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

fn listeners() -> Vec<TcpListener> {
    (1..=LISTENERS)
        .map(|i| TcpListener::bind((Ipv4Addr::new(127, 0, 0, i), 0)).expect("bind 127.0.0.x"))
        .collect()
}

/// Holder mode: open N connections, say "ready", keep them until stdin closes.
fn hold(n: usize) {
    let mut conns = Vec::new();
    open(&listeners(), n, &mut conns);
    println!("ready");
    let mut sink = String::new();
    let _ = std::io::stdin().read_line(&mut sink);
}

fn spawn_holder(exe: &std::path::Path, n: usize) -> std::process::Child {
    let mut child = Command::new(exe)
        .args(["--hold", &n.to_string()])
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

fn ss_cpu() -> (Duration, usize) {
    let mut times = Vec::new();
    let mut bytes = 0;
    for _ in 0..REPEAT {
        let before = children_cpu_time();
        let mut child = Command::new("ss")
            .args(["-tin", "state", "established"])
            .stdout(Stdio::piped())
            .spawn()
            .expect("run ss");
        let mut out = child.stdout.take().expect("piped");
        bytes = std::io::copy(&mut out, &mut std::io::sink()).expect("read ss") as usize;
        child.wait().expect("wait ss");
        times.push((children_cpu_time() - before).as_secs_f64());
    }
    (Duration::from_secs_f64(median(times)), bytes)
}

fn selectors(toml: &str) -> Selectors {
    Selectors::from_toml(toml, std::path::Path::new("bench")).expect("selectors")
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--hold") {
        return hold(args[1].parse().expect("count"));
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
    let established = DumpRequest { states: wire::ESTABLISHED, ..DumpRequest::default() };
    let mut filtered_at_first = None;
    println!(
        "{:>6} {:>7} | {:>8} {:>8} {:>8} {:>8} {:>8} | {:>6} {:>6} | {:>9} {:>8} | {:>8} {:>8}",
        "conns",
        "sockets",
        "full",
        "aggr",
        "dump v2",
        "dump v1",
        "ss -tin",
        "full/ss",
        "v1/v2",
        "filt 100",
        "vs first",
        "B/series",
        "aggr KiB"
    );
    println!(
        "{:>6} {:>7} | {:^44} | {:>13} | {:>9} {:>8} | {:>17}",
        "", "", "CPU us per socket (median of 5)", "ratios", "CPU us", "ratio", "peak allocated"
    );
    for n in sizes {
        assert!(n >= MATCHED, "sizes start at {MATCHED} connections");
        let t = Instant::now();
        while held < n {
            let k = (n - held).min(HOLDER_FDS / 2);
            holders.push(spawn_holder(&exe, k));
            held += k;
        }
        let setup = t.elapsed();

        let all = selectors(&format!(
            "max_connections = {}\n[[selector]]\nname = \"all\"\nremote_addrs = [\"127.0.0.0/8\"]\n",
            4 * n
        ));
        let mut alloc_full = 0;
        let (full, (sockets, series)) = cpu(|| {
            let base = sys::reset_peak();
            let mut scrape = Scrape::new(&all);
            let stats = dumper.dump(&established, |s| scrape.add(s)).expect("dump");
            let text = scrape.render(&mut State::default(), Format::Prometheus, Duration::ZERO);
            alloc_full = sys::peak() - base;
            let series = text.lines().filter(|l| l.contains("conn=\"")).count();
            (stats.sockets, series)
        });
        let none = Selectors::default();
        let mut alloc_aggr = 0;
        let (aggr, _) = cpu(|| {
            let base = sys::reset_peak();
            let mut scrape = Scrape::new(&none);
            dumper.dump(&established, |s| scrape.add(s)).expect("dump");
            let text = scrape.render(&mut State::default(), Format::Prometheus, Duration::ZERO);
            alloc_aggr = sys::peak() - base;
            text.len()
        });
        let (v2, v2_sockets) = cpu(|| {
            let mut k = 0u64;
            dumper.dump(&established, |s| k += u64::from(s.info.is_some())).expect("dump");
            k
        });
        let (v1, v1_sockets) = cpu(|| {
            let mut k = 0u64;
            let request = |seq| wire::dump_request_any_family(wire::ESTABLISHED, seq, None);
            dumper.dump_raw(request, &mut |s| k += u64::from(s.info.is_some())).expect("v1 dump");
            k
        });
        assert_eq!(v1_sockets, v2_sockets, "v1 and v2 dumps see the same sockets");
        let one = selectors(&format!(
            "max_connections = 1000\n[[selector]]\nname = \"fixed\"\nremote_ports = [\"{port}\"]\n"
        ));
        let filtered_request = tcptail_diag::metrics::dump_request(&one, false);
        let (filtered, matched) = cpu(|| {
            let mut scrape = Scrape::new(&one);
            dumper.dump(&filtered_request, |s| scrape.add(s)).expect("dump");
            let seen = scrape.sockets_seen;
            let _ = scrape.render(&mut State::default(), Format::Prometheus, Duration::ZERO);
            seen
        });
        assert_eq!(matched, MATCHED as u64, "the filter matches the fixed set");
        // The same filtered scrape with one v1 AF_UNSPEC request: one walk of the kernel's
        // tables instead of one per family.
        let code = filtered_request.filter.as_ref().and_then(tcptail_diag::Filter::bytecode);
        let (filtered_v1, matched_v1) = cpu(|| {
            let mut scrape = Scrape::new(&one);
            let request =
                |seq| wire::dump_request_any_family(wire::ALL_STATES, seq, code.as_deref());
            dumper.dump_raw(request, &mut |s| scrape.add(s)).expect("v1 dump");
            let seen = scrape.sockets_seen;
            let _ = scrape.render(&mut State::default(), Format::Prometheus, Duration::ZERO);
            seen
        });
        assert_eq!(matched_v1, MATCHED as u64);
        let (ss, ss_bytes) = ss_cpu();

        let per = |d: Duration| d.as_secs_f64() * 1e6 / sockets.max(1) as f64;
        let filtered_us = filtered.as_secs_f64() * 1e6;
        let first = *filtered_at_first.get_or_insert(filtered_us);
        println!(
            "{n:>6} {sockets:>7} | {:>8.3} {:>8.3} {:>8.3} {:>8.3} {:>8.3} | {:>6.2} {:>6.2} | \
             {:>9.1} {:>8.2} | {:>8.0} {:>8.1}",
            per(full),
            per(aggr),
            per(v2),
            per(v1),
            per(ss),
            per(full) / per(ss).max(1e-9),
            per(v1) / per(v2).max(1e-9),
            filtered_us,
            filtered_us / first.max(1e-9),
            alloc_full as f64 / series.max(1) as f64,
            alloc_aggr as f64 / 1024.0,
        );
        eprintln!(
            "  [{n}: setup {:.1} s; {series} per-connection series exported; ss printed {} KiB; \
             filtered with one v1 request {:.1} us; target {TARGET_US_PER_SOCKET} us/socket: \
             full {}, aggregates {}]",
            setup.as_secs_f64(),
            ss_bytes / 1024,
            filtered_v1.as_secs_f64() * 1e6,
            if per(full) <= TARGET_US_PER_SOCKET { "met" } else { "MISSED" },
            if per(aggr) <= TARGET_US_PER_SOCKET { "met" } else { "MISSED" },
        );
    }
    println!(
        "full = every socket exported with its per-connection series; aggr = aggregates only; \
         filt 100 = kernel-filtered scrape of a fixed {MATCHED} matched sockets (flat = \
         proportional to matches); B/series = peak bytes allocated by the full scrape per \
         exported series; target <= {TARGET_US_PER_SOCKET} us CPU per socket."
    );
    for mut h in holders {
        drop(h.stdin.take());
        let _ = h.wait();
    }
    drop(mine);
}
