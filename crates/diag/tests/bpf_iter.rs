//! The BPF socket iterator against sock_diag, over real connections in a throwaway network
//! namespace: the same sockets (cookies, 4-tuples, states) and, socket by socket, the same
//! header, congestion control, BBR info, socket memory and `struct tcp_info` bytes (ages
//! within a few jiffies: the two dumps run a moment apart).

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use socket2::{Domain, Socket as Sock2, Type};
use tcptail_diag::bpf::IterDumper;
use tcptail_diag::wire::{self, Attrs};
use tcptail_diag::{DumpRequest, Dumper, Socket};
use tcptail_netns::{Cleanup, Netns};

/// What is compared of one socket: everything the dump gives.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    family: u8,
    state: u8,
    timer: u8,
    retrans: u8,
    id: tcptail_diag::SockId,
    expires_ms: u32,
    rqueue: u32,
    wqueue: u32,
    uid: u32,
    inode: u32,
    cong: Option<String>,
    bbr: Option<tcptail_sock::cc_info::BbrInfo>,
    skmem: Option<wire::SkMemInfo>,
    info: Vec<u8>,
}

fn seen(s: &Socket<'_>) -> Seen {
    Seen {
        family: s.family,
        state: s.state,
        timer: s.timer,
        retrans: s.retrans,
        id: s.id,
        expires_ms: s.expires_ms,
        rqueue: s.rqueue,
        wqueue: s.wqueue,
        uid: s.uid,
        inode: s.inode,
        cong: s.cong.map(str::to_owned),
        bbr: s.bbr,
        skmem: s.skmem,
        info: s.info_raw.to_vec(),
    }
}

fn connect(target: SocketAddr, cc: &str) -> TcpStream {
    let s = Sock2::new(Domain::for_address(target), Type::STREAM, None).unwrap();
    s.set_tcp_congestion(cc.as_bytes()).expect("set congestion control");
    s.connect(&target.into()).expect("connect");
    s.into()
}

/// `tcp_info` offsets of the four ages (milliseconds since an event).
const AGES: [usize; 4] = [44, 48, 52, 56];

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
}

#[test]
fn iterator_matches_sock_diag_socket_by_socket() {
    tcptail_netns::ensure_root().expect("the iterator test needs root (CI runs it as root)");
    let cleanup = Cleanup::new();
    let ns = Netns::create(&cleanup, "bpfiter").unwrap();
    ns.ip(["link", "set", "lo", "up"]).unwrap();
    // Connections of each congestion control and both families, data moved both ways, and a
    // client that closed first (FIN_WAIT2 / CLOSE_WAIT pair).
    let held = ns
        .run(|| {
            let v4 = TcpListener::bind("127.0.0.1:0").unwrap();
            let v6 = TcpListener::bind("[::1]:0").unwrap();
            let mut held = Vec::new();
            for (listener, cc) in [(&v4, "bbr"), (&v4, "cubic"), (&v6, "reno"), (&v6, "bbr")] {
                let mut client = connect(listener.local_addr().unwrap(), cc);
                let (mut server, _) = listener.accept().unwrap();
                client.write_all(&[1u8; 300_000]).unwrap();
                let mut got = vec![0u8; 300_000];
                server.read_exact(&mut got).unwrap();
                server.write_all(&[2u8; 5_000]).unwrap();
                held.push((client, server));
            }
            // Unread bytes in a receive queue.
            held[1].0.write_all(&[3u8; 7_000]).unwrap();
            let (closing, server) = {
                let c = connect(v4.local_addr().unwrap(), "cubic");
                let (s, _) = v4.accept().unwrap();
                (c, s)
            };
            drop(closing);
            (v4, v6, held, server)
        })
        .unwrap();
    // Let delayed ACKs and the closing handshake settle, so both dumps see the same state.
    std::thread::sleep(Duration::from_millis(300));

    let mut iter = IterDumper::in_netns(ns.name()).expect("the BPF socket iterator on this host");
    let mut diag = Dumper::in_netns(ns.name()).unwrap();
    // Every attribute, then what a scrape asks (no socket memory) and single attributes: the
    // program reads only the fields each needs.
    let scrape_attrs = tcptail_diag::metrics::SCRAPE_ATTRS;
    let only = |f: fn(&mut Attrs)| {
        let mut a = Attrs::NONE;
        f(&mut a);
        a
    };
    let mut from_iter = HashMap::new();
    for attrs in [
        Attrs::ALL,
        scrape_attrs,
        only(|a| a.info = true),
        only(|a| a.cong = true),
        only(|a| a.cc_info = true),
        only(|a| a.skmem = true),
    ] {
        let req = DumpRequest { states: wire::ALL_STATES, attrs, ..DumpRequest::default() };
        from_iter.clear();
        let started = Instant::now();
        iter.dump_undecoded(&req, |s| {
            from_iter.insert(s.id.cookie, seen(s));
        })
        .unwrap();
        let mut from_diag = HashMap::new();
        diag.dump_undecoded(&req, |s| {
            from_diag.insert(s.id.cookie, seen(s));
        })
        .unwrap();
        // Ages and timers move on between the two dumps: by the time that passed, plus a jiffy
        // of rounding on either side (4 ms at the lowest common HZ, 100).
        let slack = started.elapsed().as_millis() as u32 + 2 * 10;

        let mut cookies: Vec<_> = from_diag.keys().copied().collect();
        cookies.sort();
        let mut iter_cookies: Vec<_> = from_iter.keys().copied().collect();
        iter_cookies.sort();
        assert_eq!(iter_cookies, cookies, "the same sockets");
        // 2 listeners + 4 pairs + the closing pair.
        assert_eq!(cookies.len(), 2 + 8 + 2, "{from_diag:#?}");
        for cookie in cookies {
            let (mut a, mut b) = (from_iter[&cookie].clone(), from_diag[&cookie].clone());
            assert_eq!(a.info.len(), b.info.len(), "tcp_info length of {:?}", b.id);
            for at in AGES {
                if a.info.len() >= at + 4 {
                    let (x, y) = (u32_at(&a.info, at), u32_at(&b.info, at));
                    assert!(x.abs_diff(y) <= slack, "age at {at} of {:?}: {x} vs {y}", b.id);
                    a.info[at..at + 4].fill(0);
                    b.info[at..at + 4].fill(0);
                }
            }
            let (x, y) = (a.expires_ms, b.expires_ms);
            assert!(x.abs_diff(y) <= slack, "timer of {:?}: {x} vs {y}", b.id);
            (a.expires_ms, b.expires_ms) = (0, 0);
            assert_eq!(a, b, "socket {:?} with {attrs:?}", b.id);
        }
        if attrs == Attrs::ALL {
            assert!(from_iter.values().any(|s| s.bbr.is_some()));
        }
    }
    // The last round asked for socket memory alone.
    assert!(from_iter.values().all(|s| s.info.is_empty() && s.bbr.is_none() && s.cong.is_none()));
    assert!(from_iter.values().any(|s| s.skmem.is_some()));
    let req = DumpRequest { states: wire::ALL_STATES, ..DumpRequest::default() };
    from_iter.clear();
    iter.dump_undecoded(&req, |s| {
        from_iter.insert(s.id.cookie, seen(s));
    })
    .unwrap();
    assert!(from_iter.values().any(|s| s.bbr.is_some() && s.family == libc::AF_INET6 as u8));
    assert!(from_iter.values().any(|s| s.rqueue == 7_000));
    assert!(from_iter.values().any(|s| s.timer == 3 && s.state == 5), "a FIN_WAIT2 timewait");
    // Every socket this process holds has its descriptor's inode (sock_diag's equal it too,
    // compared above).
    let (v4, v6, pairs, server) = &held;
    let streams = pairs.iter().flat_map(|(c, s)| [c, s]).chain([server]);
    let fds: Vec<i32> = [v4.as_raw_fd(), v6.as_raw_fd()]
        .into_iter()
        .chain(streams.map(|s| s.as_raw_fd()))
        .collect();
    for fd in fds {
        let link = std::fs::read_link(format!("/proc/self/fd/{fd}")).unwrap();
        let link = link.to_string_lossy();
        let ino: u32 = link
            .strip_prefix("socket:[")
            .and_then(|l| l.strip_suffix(']'))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("descriptor {fd} is {link}"));
        assert!(
            from_iter.values().any(|s| s.inode == ino),
            "inode {ino} of descriptor {fd} in the iterator's dump"
        );
    }

    // Only established sockets, only IPv4, and the header alone when asked.
    let req = DumpRequest {
        states: wire::ESTABLISHED,
        ipv6: false,
        attrs: Attrs::NONE,
        ..DumpRequest::default()
    };
    let mut n = 0;
    iter.dump(&req, |s| {
        n += 1;
        assert_eq!(s.state, 1);
        assert!(s.id.src.is_ipv4());
        assert!(s.info.is_none() && s.cong.is_none() && s.skmem.is_none());
    })
    .unwrap();
    assert_eq!(n, 4);
    drop(held);
    ns.delete().unwrap();
}

#[test]
fn filtered_iterator_dumps_equal_filtered_sock_diag_dumps() {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    use tcptail_diag::filter::{Filter, Prefix, Side};
    use tcptail_diag::source::Dump;

    tcptail_netns::ensure_root().expect("the iterator test needs root (CI runs it as root)");
    let cleanup = Cleanup::new();
    let ns = Netns::create(&cleanup, "bpffilt").unwrap();
    ns.ip(["link", "set", "lo", "up"]).unwrap();
    // IPv4 on two addresses and two listeners, IPv6, and IPv4 clients of a dual-stack IPv6
    // listener (IPv4-mapped addresses on its side).
    let held = ns
        .run(|| {
            let a = TcpListener::bind("127.0.0.1:0").unwrap();
            let b = TcpListener::bind("127.0.0.2:0").unwrap();
            let v6 = TcpListener::bind("[::1]:0").unwrap();
            let dual = Sock2::new(Domain::IPV6, Type::STREAM, None).unwrap();
            dual.set_only_v6(false).unwrap();
            dual.bind(&"[::]:0".parse::<SocketAddr>().unwrap().into()).unwrap();
            dual.listen(16).unwrap();
            let dual: TcpListener = dual.into();
            let dual_v4: SocketAddr =
                (Ipv4Addr::new(127, 0, 0, 3), dual.local_addr().unwrap().port()).into();
            let mut held = Vec::new();
            for (listener, target, n) in [
                (&a, a.local_addr().unwrap(), 3),
                (&b, b.local_addr().unwrap(), 2),
                (&v6, v6.local_addr().unwrap(), 2),
                (&dual, dual_v4, 2),
            ] {
                for _ in 0..n {
                    let client = TcpStream::connect(target).unwrap();
                    let (server, _) = listener.accept().unwrap();
                    held.push((client, server));
                }
            }
            (a, b, v6, dual, held)
        })
        .unwrap();
    let (a, b, dual) = (&held.0, &held.1, &held.3);
    let port = |l: &TcpListener| l.local_addr().unwrap().port();
    let (pa, pb, pdual) = (port(a), port(b), port(dual));
    let v4 = |o: [u8; 4], len| Prefix { addr: IpAddr::V4(Ipv4Addr::from(o)), len };
    let local = |lo, hi| Filter::Port { side: Side::Local, lo, hi };
    let remote = |lo, hi| Filter::Port { side: Side::Remote, lo, hi };
    let filters = [
        local(pa, pa),
        remote(pb, pb),
        Filter::Or(vec![local(pa, pa), remote(pa, pa)]),
        Filter::And(vec![remote(1024, 65535), local(pb.min(pdual), pb.max(pdual))]),
        Filter::Addr { side: Side::Local, prefix: v4([127, 0, 0, 2], 32) },
        // 127.0.0.2 and .3 (the mapped ones on the dual-stack side included).
        Filter::Addr { side: Side::Local, prefix: v4([127, 0, 0, 2], 31) },
        Filter::Addr { side: Side::Remote, prefix: v4([127, 0, 0, 0], 8) },
        Filter::Addr {
            side: Side::Remote,
            prefix: Prefix { addr: IpAddr::V6(Ipv6Addr::LOCALHOST), len: 128 },
        },
        Filter::And(vec![
            Filter::Addr { side: Side::Local, prefix: v4([127, 0, 0, 3], 32) },
            local(pdual, pdual),
        ]),
        Filter::Or(vec![]),
        Filter::And(vec![]),
        local(5, 4),
    ];
    let mut iter = IterDumper::in_netns(ns.name()).expect("the BPF socket iterator on this host");
    let mut diag = Dumper::in_netns(ns.name()).unwrap();
    let ids = |source: &mut dyn Dump, req: &DumpRequest| {
        let mut ids = Vec::new();
        source
            .dump_with(req, false, &mut |s| {
                ids.push((s.id.cookie, s.id.src, s.id.sport, s.id.dst, s.id.dport))
            })
            .unwrap();
        ids.sort();
        ids
    };
    // Every socket once, unfiltered: what each filter must pick out.
    let everything = DumpRequest { states: wire::ALL_STATES, ..DumpRequest::default() };
    let mut all = Vec::new();
    iter.dump(&everything, |s| all.push(s.id)).unwrap();
    assert_eq!(all.len(), 4 + 2 * 9, "4 listeners and 9 pairs");
    for filter in filters {
        for (ipv4, ipv6) in [(true, true), (true, false), (false, true)] {
            let req = DumpRequest {
                states: wire::ALL_STATES,
                ipv4,
                ipv6,
                filter: Some(filter.clone()),
                ..DumpRequest::default()
            };
            let (from_iter, from_diag) = (ids(&mut iter, &req), ids(&mut diag, &req));
            assert_eq!(from_iter, from_diag, "{filter:?}, ipv4 {ipv4} ipv6 {ipv6}");
            let by_family = |id: &&tcptail_diag::SockId| {
                if id.src.is_ipv6() { ipv6 } else { ipv4 }
            };
            let expected = all.iter().filter(by_family).filter(|id| filter.matches(id)).count();
            assert_eq!(from_iter.len(), expected, "{filter:?}, ipv4 {ipv4} ipv6 {ipv6}");
        }
    }
    drop(held);
    ns.delete().unwrap();
}

#[test]
fn brief_scrapes_render_what_full_scrapes_render() {
    use tcptail_diag::metrics::{self, Format, Scrape, State};
    use tcptail_diag::selector::Selectors;
    use tcptail_diag::source::Dump;

    tcptail_netns::ensure_root().expect("the iterator test needs root (CI runs it as root)");
    let cleanup = Cleanup::new();
    let ns = Netns::create(&cleanup, "bpfbrief").unwrap();
    ns.ip(["link", "set", "lo", "up"]).unwrap();
    // Listeners on IPv4 and IPv6; connections with three congestion controls; one whose
    // receiver never reads (bytes not yet sent: a send-queue delay); closed pairs (TIME_WAIT
    // on one side).
    let held = ns
        .run(|| {
            let a = TcpListener::bind("127.0.0.1:0").unwrap();
            let b = TcpListener::bind("127.0.0.2:0").unwrap();
            let v6 = TcpListener::bind("[::1]:0").unwrap();
            let mut held = Vec::new();
            for (listener, cc, n) in
                [(&a, "bbr", 3), (&a, "reno", 2), (&b, "cubic", 2), (&v6, "bbr", 2)]
            {
                for _ in 0..n {
                    let client = connect(listener.local_addr().unwrap(), cc);
                    let (server, _) = listener.accept().unwrap();
                    held.push((client, server));
                }
            }
            let mut stuck = &held[0].0;
            stuck.set_nonblocking(true).unwrap();
            let chunk = vec![7u8; 64 * 1024];
            while stuck.write(&chunk).is_ok() {}
            for _ in 0..2 {
                let client = connect(b.local_addr().unwrap(), "reno");
                let (server, _) = b.accept().unwrap();
                drop(client);
                let mut server = server;
                let _ = server.read(&mut [0u8; 16]);
                drop(server);
            }
            (a, b, v6, held)
        })
        .unwrap();
    let port = |l: &TcpListener| l.local_addr().unwrap().port();
    let (pa, pb) = (port(&held.0), port(&held.1));
    let mut iter = IterDumper::in_netns(ns.name()).expect("the BPF socket iterator on this host");
    let mut diag = Dumper::in_netns(ns.name()).unwrap();
    let text = |source: &mut dyn Dump, selectors: &Selectors, req: &DumpRequest, brief: bool| {
        let mut scrape = Scrape::new(selectors);
        if brief {
            scrape.dump(source, req).unwrap();
        } else {
            source.dump_with(req, true, &mut |s| scrape.add(s)).unwrap();
        }
        let text = scrape.render(&mut State::default(), Format::Prometheus, Duration::ZERO);
        assert!(text.contains("tcptail_send_queue_delay_seconds_bucket"), "{text}");
        // The exported connections' values come from full records either way, and the
        // stuck one's ages and timers move between dumps: their series are compared by
        // name and labels.
        text.lines()
            .map(|l| match l.rsplit_once(' ') {
                Some((series, _)) if l.starts_with("tcptail_connection_") => series.to_owned(),
                _ => l.to_owned(),
            })
            .collect::<Vec<_>>()
    };
    let differ = |a: &[String], b: &[String]| {
        a.iter()
            .zip(b)
            .filter(|(x, y)| x != y)
            .map(|(x, y)| format!("{x}\n  vs {y}\n"))
            .collect::<String>()
    };
    for toml in [
        format!("[[selector]]\nname = \"a\"\nremote_ports = [\"{pa}\"]\n"),
        format!(
            "[[selector]]\nname = \"a\"\nlocal_ports = [\"{pa}\"]\n[[selector]]\nname = \
             \"b\"\nremote_addrs = [\"127.0.0.2/32\"]\n"
        ),
        format!("max_connections = 1\n[[selector]]\nname = \"b\"\nremote_ports = [\"{pb}\"]\n"),
        "[[selector]]\nname = \"v6\"\nremote_addrs = [\"::1/128\"]\n".to_owned(),
    ] {
        let selectors = Selectors::from_toml(&toml, std::path::Path::new("test")).unwrap();
        for (ipv4, ipv6) in [(true, true), (true, false), (false, true)] {
            let req = DumpRequest {
                states: wire::ALL_STATES,
                ipv4,
                ipv6,
                ..metrics::dump_request(&selectors, true)
            };
            // The iterator did send the unselected sockets briefly.
            struct Count(usize, usize);
            impl tcptail_diag::source::ScrapeSink for Count {
                fn socket(&mut self, _: &Socket<'_>) {
                    self.0 += 1;
                }
                fn brief(&mut self, _: &tcptail_diag::source::Brief<'_>) {
                    self.1 += 1;
                }
            }
            let mut count = Count(0, 0);
            iter.dump_for_scrape(&req, selectors.filter().as_ref(), &mut count).unwrap();
            assert!(count.1 > 0, "no brief records");
            // The stuck connection's RTT still moves while its window closes (zero-window
            // probes, backing off): three dumps in a row that agree are what is asked for.
            let at = format!("{toml}, ipv4 {ipv4} ipv6 {ipv6}");
            for attempt in 1.. {
                let brief = text(&mut iter, &selectors, &req, true);
                let full = text(&mut iter, &selectors, &req, false);
                let diag_brief = text(&mut diag, &selectors, &req, true);
                let diag = text(&mut diag, &selectors, &req, false);
                assert_eq!(diag_brief.len(), diag.len());
                assert!(brief.len() > 100 && brief.len() == full.len());
                assert_eq!(brief.len(), diag.len());
                if brief == full && brief == diag && diag_brief == diag {
                    break;
                }
                assert!(
                    attempt < 100,
                    "{at}: brief vs full records:\n{}\nbrief vs sock_diag:\n{}\nsock_diag \
                     brief vs full:\n{}",
                    differ(&brief, &full),
                    differ(&brief, &diag),
                    differ(&diag_brief, &diag)
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    drop(held);
    ns.delete().unwrap();
}
