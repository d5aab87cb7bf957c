//! Scrape cost against `ss -tin`: opens N established loopback connections (both ends in this
//! process), then measures, side by side, the CPU time of one full exporter scrape (dump +
//! parse + aggregate + render), a dump with parse only, a kernel-filtered scrape matching 1% of
//! the connections, and `ss -tin state established` over the same sockets.
//!
//! Run by `scripts/bench-exporter` inside a private network namespace (so only the benchmark's
//! sockets exist): `bench_exporter 1000 10000 30000`. Prints one JSON line per size.

use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tcptail_diag::metrics::{Format, Scrape, Totals};
use tcptail_diag::selector::Selectors;
use tcptail_diag::sys::{children_cpu_time, peak_rss_kib, process_cpu_time};
use tcptail_diag::{DumpRequest, Dumper, wire};

const LISTENERS: usize = 8;
const REPEAT: u32 = 5;
/// Connections per holder process (two descriptors each, under a 20,000-descriptor limit).
const PER_HOLDER: usize = 9000;

fn best<T>(mut f: impl FnMut() -> T) -> (Duration, T) {
    let mut best = Duration::MAX;
    let mut last = None;
    for _ in 0..REPEAT {
        let before = process_cpu_time();
        let v = f();
        best = best.min(process_cpu_time() - before);
        last = Some(v);
    }
    (best, last.expect("REPEAT > 0"))
}

/// Opens `n` connections to `listeners` round-robin and keeps both ends.
fn open(listeners: &[TcpListener], n: usize, into: &mut Vec<(TcpStream, TcpStream)>) {
    for k in 0..n {
        let l = &listeners[k % listeners.len()];
        let c = TcpStream::connect(l.local_addr().unwrap()).expect("connect");
        let (s, _) = l.accept().expect("accept");
        into.push((c, s));
    }
}

/// Holder mode: open N connections, say "ready", keep them until stdin closes.
fn hold(n: usize) {
    let listeners: Vec<TcpListener> =
        (0..LISTENERS).map(|_| TcpListener::bind("127.0.0.1:0").expect("bind")).collect();
    let mut conns = Vec::new();
    open(&listeners, n, &mut conns);
    println!("ready");
    let mut sink = String::new();
    let _ = std::io::stdin().read_line(&mut sink);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("--hold") {
        return hold(args[1].parse().expect("count"));
    }
    let sizes: Vec<usize> = args.iter().map(|a| a.parse().expect("sizes are integers")).collect();
    // 1% of the connections go to this process's own listener: the filtered scrape selects
    // them by remote port. The rest live in holder processes.
    let selected = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = selected.local_addr().unwrap().port();
    let mut mine: Vec<(TcpStream, TcpStream)> = Vec::new();
    let mut holders: Vec<std::process::Child> = Vec::new();
    let mut held = 0usize;
    let mut dumper = Dumper::new().expect("sock_diag");
    let exe = std::env::current_exe().expect("own path");
    for n in sizes {
        let t = Instant::now();
        let want_mine = n / 100;
        open(std::slice::from_ref(&selected), want_mine - mine.len().min(want_mine), &mut mine);
        while held + mine.len() < n {
            let k = (n - mine.len() - held).min(PER_HOLDER);
            let mut child = Command::new(&exe)
                .args(["--hold", &k.to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("spawn holder");
            let mut line = String::new();
            std::io::BufRead::read_line(
                &mut std::io::BufReader::new(child.stdout.take().unwrap()),
                &mut line,
            )
            .expect("holder ready");
            assert_eq!(line.trim(), "ready", "holder failed");
            holders.push(child);
            held += k;
        }
        let setup = t.elapsed();
        let all = DumpRequest {
            states: wire::ESTABLISHED,
            ipv6: std::env::var_os("V4ONLY").is_none(),
            ..DumpRequest::default()
        };
        let none = Selectors::default();
        let (scrape_cpu, (sockets, bytes)) = best(|| {
            let mut scrape = Scrape::new(&none);
            let stats = dumper.dump(&all, |s| scrape.add(s)).expect("dump");
            let text = scrape.render(&mut Totals::default(), Format::Prometheus, Duration::ZERO);
            (stats.sockets, text.len())
        });
        let (parse_cpu, _) = best(|| {
            let mut n = 0u64;
            dumper.dump(&all, |s| n += u64::from(s.info.is_some())).expect("dump");
            n
        });
        let toml = format!(
            "max_connections = 100000\n[[selector]]\nname = \"one-percent\"\nremote_ports = [\"{port}\"]\n"
        );
        let sel = Selectors::from_toml(&toml, std::path::Path::new("bench")).expect("selectors");
        let filtered = tcptail_diag::metrics::dump_request(&sel, false);
        let (filtered_cpu, filtered_n) = best(|| {
            let mut scrape = Scrape::new(&sel);
            dumper.dump(&filtered, |s| scrape.add(s)).expect("dump");
            let n = scrape.sockets_seen;
            let _ = scrape.render(&mut Totals::default(), Format::Prometheus, Duration::ZERO);
            n
        });
        // Peak RSS of this process before `ss` runs (its output is streamed, not kept).
        let rss = peak_rss_kib();
        let mut ss_best = Duration::MAX;
        let mut ss_bytes = 0;
        for _ in 0..REPEAT {
            let before = children_cpu_time();
            let mut child = Command::new("ss")
                .args(["-tin", "state", "established"])
                .stdout(Stdio::piped())
                .spawn()
                .expect("run ss");
            let mut out = child.stdout.take().expect("piped");
            let mut chunk = vec![0u8; 64 * 1024];
            ss_bytes = 0;
            loop {
                match std::io::Read::read(&mut out, &mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(k) => ss_bytes += k,
                }
            }
            child.wait().expect("wait ss");
            ss_best = ss_best.min(children_cpu_time() - before);
        }
        let per = |d: Duration, n: u64| d.as_secs_f64() * 1e6 / n.max(1) as f64;
        println!(
            "{{\"connections\":{n},\"sockets\":{sockets},\"setup_s\":{:.2},\
             \"scrape_cpu_ms\":{:.2},\"scrape_us_per_socket\":{:.3},\
             \"dump_parse_cpu_ms\":{:.2},\"dump_parse_us_per_socket\":{:.3},\
             \"ss_cpu_ms\":{:.2},\"ss_us_per_socket\":{:.3},\"ss_output_bytes\":{ss_bytes},\
             \"filtered_matched\":{filtered_n},\"filtered_scrape_cpu_ms\":{:.3},\
             \"render_bytes\":{bytes},\"peak_rss_kib\":{}}}",
            setup.as_secs_f64(),
            scrape_cpu.as_secs_f64() * 1e3,
            per(scrape_cpu, sockets),
            parse_cpu.as_secs_f64() * 1e3,
            per(parse_cpu, sockets),
            ss_best.as_secs_f64() * 1e3,
            per(ss_best, sockets),
            filtered_cpu.as_secs_f64() * 1e3,
            rss,
        );
    }
    for mut h in holders {
        drop(h.stdin.take());
        let _ = h.wait();
    }
}
