//! Selector-file errors, the cardinality cap, aggregates and exposition validity.

use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::path::Path;
use std::time::Duration;

use tcptail_diag::metrics::{Format, Scrape, State, series_of};
use tcptail_diag::selector::{SelectorError, Selectors};
use tcptail_diag::{Connection, SockId, Socket};
use tcptail_sock::cc_info::BbrInfo;
use tcptail_sock::tcp_info::TcpInfo;

fn sels(text: &str) -> Result<Selectors, SelectorError> {
    Selectors::from_toml(text, Path::new("sel.toml"))
}

fn sock(dport: u16, dst: [u8; 4], cookie: u64, notsent: u32) -> Socket<'static> {
    let mut raw = [0u8; 280];
    raw[0] = 1; // ESTABLISHED
    raw[16..20].copy_from_slice(&1448u32.to_ne_bytes()); // snd_mss
    raw[68..72].copy_from_slice(&2000u32.to_ne_bytes()); // rtt 2 ms
    raw[80..84].copy_from_slice(&10u32.to_ne_bytes()); // cwnd
    raw[104..112].copy_from_slice(&1_000_000u64.to_ne_bytes()); // pacing 1 MB/s
    raw[144..148].copy_from_slice(&notsent.to_ne_bytes());
    Socket {
        family: 2,
        state: 1,
        timer: 0,
        retrans: 0,
        id: SockId {
            sport: 40000 + cookie as u16,
            dport,
            src: IpAddr::from([127, 0, 0, 1]),
            dst: IpAddr::from(dst),
            ifindex: 0,
            cookie,
        },
        expires_ms: 0,
        rqueue: 0,
        wqueue: notsent,
        uid: 0,
        inode: 0,
        info: Some(TcpInfo::parse(&raw).unwrap()),
        info_raw: &[],
        cong: Some("cubic"),
        bbr: None,
        skmem: None,
    }
}

const FILE: &str = r#"
max_connections = 2
[[selector]]
name = "api"
remote_ports = ["443", "8000-8100"]
remote_addrs = ["10.0.0.0/8"]
"#;

#[test]
fn selector_file_errors_name_the_problem() {
    let cases = [
        ("[[selector]]\nname = \"a b\"\nremote_ports=[\"1\"]", "must be non-empty"),
        ("[[selector]]\nname = \"a\"", "has no rules"),
        ("[[selector]]\nname=\"a\"\nremote_ports=[\"70000\"]", "bad port \"70000\""),
        ("[[selector]]\nname=\"a\"\nremote_ports=[\"9-3\"]", "bad port"),
        ("[[selector]]\nname=\"a\"\nremote_addrs=[\"10.0.0.0/33\"]", "bad address"),
        (
            "[[selector]]\nname=\"a\"\nlocal_ports=[\"1\"]\n[[selector]]\nname=\"a\"\nlocal_ports=[\"2\"]",
            "used twice",
        ),
        ("[[selector]]\nname=\"a\"\nremote_port=[\"1\"]", "unknown field"),
        ("max_connections = 0", "at least 1"),
        ("[[selector]\n", "line 1"),
    ];
    for (text, want) in cases {
        let err = sels(text).unwrap_err().to_string();
        assert!(err.contains(want), "{text:?}: {err}");
    }
    let err = Selectors::load(Path::new("/nonexistent/sel.toml")).unwrap_err();
    assert!(err.to_string().contains("/nonexistent/sel.toml"));
}

#[test]
fn selectors_classify_and_filter() {
    let s = sels(FILE).unwrap();
    assert_eq!(s.max_connections, 2);
    let hit = sock(443, [10, 1, 2, 3], 1, 0);
    let wrong_addr = sock(443, [192, 168, 0, 1], 2, 0);
    let range = sock(8050, [10, 0, 0, 1], 3, 0);
    assert_eq!(s.classify(&hit.id), Some(0));
    assert_eq!(s.classify(&wrong_addr.id), None);
    assert_eq!(s.classify(&range.id), Some(0));
    assert!(s.filter().unwrap().bytecode().is_some());
}

#[test]
fn cap_bounds_series_and_counts_the_rest() {
    let s = sels(FILE).unwrap();
    let mut totals = State::default();
    let mut scrape = Scrape::new(&s);
    for cookie in 0..5 {
        scrape.add(&sock(443, [10, 0, 0, 1], cookie, 1000));
    }
    scrape.add(&sock(22, [192, 168, 1, 1], 99, 0));
    let text = scrape.render(&mut totals, Format::Prometheus, Duration::from_millis(1));
    let rtt_series: Vec<_> =
        text.lines().filter(|l| l.starts_with("tcptail_connection_rtt_seconds{")).collect();
    assert_eq!(rtt_series.len(), 2, "{text}");
    assert!(rtt_series[0].contains(r#"selector="api",peer="10.0.0.1",conn="0""#));
    assert!(rtt_series[1].contains(r#"conn="1""#));
    assert!(rtt_series[0].ends_with(" 0.002"));
    assert!(text.contains("tcptail_connections_unexported_total 3\n"));
    assert!(text.contains(r#"tcptail_sockets{group="api",state="ESTABLISHED",cc="cubic"} 3"#));
    assert!(text.contains(r#"tcptail_sockets{group="other",state="ESTABLISHED",cc="cubic"} 1"#));
    assert!(text.contains(r#"tcptail_rtt_seconds_bucket{group="api",le="0.0025"} 3"#));
    assert!(text.contains("tcptail_sockets_seen 6\n"));
    // 1000 unsent bytes at min(pacing 1 MB/s, cwnd*mss/srtt 7.24 MB/s) = 1 ms
    assert!(text.contains(r#"tcptail_connection_send_queue_delay_seconds{selector="api",peer="10.0.0.1",conn="0"} 0.001"#), "{text}");
    // never an ephemeral port in a label
    assert!(!text.contains("4000"));
    // counters accumulate across scrapes
    let mut scrape = Scrape::new(&s);
    for cookie in 0..3 {
        scrape.add(&sock(443, [10, 0, 0, 1], cookie, 0));
    }
    let text = scrape.render(&mut totals, Format::Prometheus, Duration::ZERO);
    assert!(text.contains("tcptail_connections_unexported_total 4\n"));
    assert!(text.contains("tcptail_scrapes_total 2\n"));
}

/// A strict-enough OpenMetrics / Prometheus text checker: families declared once with TYPE,
/// samples contiguous under their family with valid names and suffixes, no duplicate series,
/// numeric values, `# EOF` last for OpenMetrics.
fn check_exposition(text: &str, om: bool) {
    let mut families = HashSet::new();
    let mut series = HashSet::new();
    let mut current: Option<(String, String)> = None;
    let lines: Vec<&str> = text.lines().collect();
    if om {
        assert_eq!(lines.last(), Some(&"# EOF"));
    }
    for line in &lines[..lines.len() - usize::from(om)] {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, ty) = rest.split_once(' ').unwrap();
            assert!(families.insert(name.to_owned()), "family {name} declared twice");
            current = Some((name.to_owned(), ty.to_owned()));
            continue;
        }
        if line.starts_with("# HELP ") {
            continue;
        }
        let (name_labels, value) = line.rsplit_once(' ').unwrap();
        value.parse::<f64>().unwrap_or_else(|_| panic!("bad value in {line}"));
        let name = name_labels.split('{').next().unwrap();
        assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "{name}");
        let (fam, ty) = current.as_ref().expect("sample before TYPE");
        let suffixes: &[&str] = match (ty.as_str(), om) {
            ("counter", true) => &["_total"],
            ("info", _) => &["_info"],
            ("histogram", _) => &["_bucket", "_sum", "_count"],
            ("gaugehistogram", _) => &["_bucket", "_gsum", "_gcount"],
            _ => &[""],
        };
        assert!(
            suffixes.iter().any(|s| name == format!("{fam}{s}")),
            "{name} not in family {fam} ({ty})"
        );
        assert!(series.insert(name_labels.to_owned()), "duplicate series {name_labels}");
    }
}

#[test]
fn exposition_is_valid_in_both_formats() {
    let s = sels(FILE).unwrap();
    for (format, om) in [(Format::Prometheus, false), (Format::OpenMetrics, true)] {
        let mut totals = State::default();
        let mut scrape = Scrape::new(&s);
        for cookie in 0..4 {
            scrape.add(&sock(443, [10, 0, 0, cookie as u8 % 2], cookie, 5000));
        }
        scrape.add(&sock(22, [192, 168, 1, 1], 99, 0));
        let text = scrape.render(&mut totals, format, Duration::from_micros(300));
        check_exposition(&text, om);
        if om {
            assert!(text.contains("# TYPE tcptail_connection_congestion info"));
            assert!(text.contains("tcptail_connection_retransmitted_segments_total{"));
            assert!(text.contains("# TYPE tcptail_rtt_seconds gaugehistogram"));
        } else {
            assert!(
                text.contains("# TYPE tcptail_connection_retransmitted_segments_total counter")
            );
        }
    }
}

/// `sock` with `retrans` retransmitted segments (the socket's counter) and a chosen peer.
fn with_retrans(cookie: u64, retrans: u32) -> Socket<'static> {
    let mut s = sock(443, [10, 0, 0, 1], cookie, 0);
    s.info.as_mut().unwrap().total_retrans_segs = retrans;
    s
}

/// `conn` label -> retransmitted-segments counter of one rendered scrape.
fn retrans_by_conn(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| l.starts_with("tcptail_connection_retransmitted_segments_total{"))
        .map(|l| {
            let conn = l.split("conn=\"").nth(1).unwrap().split('"').next().unwrap().to_owned();
            (conn, l.rsplit(' ').next().unwrap().parse().unwrap())
        })
        .collect()
}

fn scrape_once(s: &Selectors, state: &mut State, socks: &[Socket<'_>]) -> String {
    let mut scrape = Scrape::new(s);
    for x in socks {
        scrape.add(x);
    }
    scrape.render(state, Format::Prometheus, Duration::ZERO)
}

#[test]
fn a_conn_label_stays_with_its_socket_when_an_older_one_closes() {
    let s = sels(&FILE.replace("max_connections = 2", "max_connections = 10")).unwrap();
    let mut state = State::default();
    // Older sockets have sent more: cookie c has 1000 - 100 c retransmits (+1 per scrape).
    let at = |cookie: u64, scrape: u32| with_retrans(cookie, 1000 - 100 * cookie as u32 + scrape);
    let first = retrans_by_conn(&scrape_once(&s, &mut state, &[at(3, 0), at(1, 0), at(2, 0)]));
    assert_eq!(first.len(), 3);
    assert_eq!(first["0"], 900.0, "slots go oldest first: {first:?}");
    // The oldest socket closes; a new one arrives.
    let second = retrans_by_conn(&scrape_once(&s, &mut state, &[at(4, 1), at(2, 1), at(3, 1)]));
    for conn in ["1", "2"] {
        assert_eq!(second[conn], first[conn] + 1.0, "conn {conn} kept its socket: {second:?}");
    }
    // The freed slot went to the newcomer: a new socket, not an older one's counters.
    assert_eq!(second["0"], 601.0);
    assert_eq!(state.slots.len(), 3);
}

#[test]
fn the_cap_admits_the_oldest_sockets_whatever_the_dump_order() {
    let s = sels(FILE).unwrap();
    let mut state = State::default();
    let all: Vec<Socket<'_>> = (1..=5).rev().map(|c| with_retrans(c, c as u32)).collect();
    let text = scrape_once(&s, &mut state, &all);
    let first = retrans_by_conn(&text);
    let mut values: Vec<f64> = first.values().copied().collect();
    values.sort_by(f64::total_cmp);
    assert_eq!(values, [1.0, 2.0], "cookies 1 and 2 are the oldest: {text}");
    assert!(text.contains("tcptail_connections_unexported_total 3\n"));
    // Cookie 1 closes: cookie 3 is admitted, cookie 2 keeps its label.
    let rest: Vec<Socket<'_>> = (2..=5).rev().map(|c| with_retrans(c, c as u32)).collect();
    let second = retrans_by_conn(&scrape_once(&s, &mut state, &rest));
    let conn_of =
        |m: &HashMap<String, f64>, v: f64| m.iter().find(|(_, x)| **x == v).unwrap().0.clone();
    assert_eq!(conn_of(&second, 2.0), conn_of(&first, 2.0));
    assert!(second.values().any(|v| *v == 3.0));
}

#[test]
fn dropped_series_are_counted_exactly_per_connection() {
    let s = sels(&FILE.replace("max_connections = 2", "max_connections = 1")).unwrap();
    let cubic = sock(443, [10, 0, 0, 1], 1, 1000);
    let mut bbr = sock(443, [10, 0, 0, 2], 2, 1000);
    bbr.cong = Some("bbr");
    bbr.bbr = Some(BbrInfo {
        bw_bytes_per_sec: 1_000_000,
        min_rtt_us: 900,
        pacing_gain: 739,
        cwnd_gain: 739,
    });
    // The series each one produces when it is exported, counted in the rendered text.
    let rendered = |x: &Socket<'_>| -> u64 {
        let text = scrape_once(&s, &mut State::default(), std::slice::from_ref(x));
        text.lines().filter(|l| l.contains("conn=\"0\"")).count() as u64
    };
    let (n_cubic, n_bbr) = (rendered(&cubic), rendered(&bbr));
    assert_eq!(n_cubic, series_of(&Connection::from_socket(&cubic)));
    assert_eq!(n_bbr, series_of(&Connection::from_socket(&bbr)));
    assert!(n_bbr > n_cubic, "BBR sockets have more series ({n_bbr} vs {n_cubic})");
    assert!(n_bbr <= 31, "{n_bbr}");
    // Cap 1: the newer BBR socket is left out, and exactly its series are counted as dropped.
    let mut state = State::default();
    let text = scrape_once(&s, &mut state, &[bbr.clone(), cubic.clone()]);
    assert!(text.contains(&format!("tcptail_series_dropped_total {n_bbr}\n")), "{text}");
    assert_eq!(state.totals.series_dropped, n_bbr);
    let mut no_info = sock(443, [10, 0, 0, 3], 3, 0);
    no_info.info = None;
    let _ = scrape_once(&s, &mut state, &[cubic, no_info.clone()]);
    assert_eq!(state.totals.series_dropped, n_bbr + series_of(&Connection::from_socket(&no_info)));
    assert_eq!(series_of(&Connection::from_socket(&no_info)), 3, "queues and congestion info");
}

#[test]
fn label_values_are_escaped() {
    assert_eq!(tcptail_diag::metrics::escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}
