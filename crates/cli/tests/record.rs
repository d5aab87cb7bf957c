//! `tcptail record` on real loopback connections, then `record show` (listing, timeline,
//! `--around`, `--csv`) and `top --replay` on what it wrote, and on damaged files.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{Guard, finish, run, spawn, tcptail, text, wait_for_stderr};
use tcptail_diag::record::fields::field_index;
use tcptail_diag::record::{Event, Replay, Tracked};

/// A loopback listener and `tcptail record` of it, polling.
struct Recording {
    listener: TcpListener,
    port: u16,
    /// Holds the recording file.
    dir: tempfile::TempDir,
    file: PathBuf,
    recorder: Guard,
}

/// Starts `tcptail record --out FILE --interval 10ms --duration DURATION EXTRA... PORT_FLAG
/// PORT` on a fresh listener's port (`--port`, `--dport`, ...) and waits until it polls (and
/// listens for closes).
fn start_recording(port_flag: &str, duration: &str, extra: &[&str]) -> Recording {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rec");
    let port_s = port.to_string();
    let mut args = vec!["record", "--out", file.to_str().unwrap(), "--interval", "10ms"];
    args.extend(["--duration", duration]);
    args.extend(extra);
    args.extend([port_flag, &port_s]);
    let mut recorder = spawn(&args);
    wait_for_stderr(&mut recorder, "tcptail record: polling every");
    Recording { listener, port, dir, file, recorder }
}

/// Waits (up to 30 s) until the recording at `file`, read while the recorder writes it, holds
/// a record of a connection `wanted` accepts: evidence that the recorder polled it, where a
/// sleep would guess. A block the recorder is still writing ends a read; the next one
/// starts over.
fn wait_until_recorded(file: &Path, what: &str, wanted: impl Fn(&Tracked) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(mut replay) = Replay::open(file) {
            while let Some(Ok(e)) = replay.next_event() {
                if let Event::Full { cookie, .. } | Event::Change { cookie, .. } = e
                    && replay.get(cookie).is_some_and(&wanted)
                {
                    return;
                }
            }
        }
        assert!(Instant::now() < deadline, "no record of {what} within 30 s");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A recorded connection's `bytes_acked`.
fn acked(t: &Tracked) -> u64 {
    t.values.get(field_index("bytes_acked").unwrap()).unwrap_or(0)
}

/// Ctrl-C to the recorder: it stops, writing what it holds.
fn interrupt(recorder: &Guard) {
    let pid = recorder.pid.to_string();
    assert!(std::process::Command::new("kill").args(["-INT", &pid]).status().unwrap().success());
}

#[test]
fn records_a_transfer_and_shows_its_timeline_and_csv() {
    // The recording runs until Ctrl-C, so a slow host cannot end it before the transfer.
    let Recording { listener, port, dir: _dir, file, recorder } =
        start_recording("--dport", "300s", &["--block-every", "100ms"]);
    let mut client = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let (mut server, _) = listener.accept().unwrap();
    let local = client.local_addr().unwrap();
    let reader = std::thread::spawn(move || {
        let mut sink = Vec::new();
        server.read_to_end(&mut sink).unwrap();
        sink.len()
    });
    // Each write waits until the recording shows it acknowledged, so every write is seen by
    // a later poll than the one before it: at least 19 polls with a change.
    let ours = |t: &Tracked| t.id.local == local;
    for i in 1..=20u64 {
        client.write_all(&[0u8; 100_000]).unwrap();
        wait_until_recorded(&file, "the write acknowledged", |t| {
            ours(t) && acked(t) >= i * 100_000
        });
    }
    interrupt(&recorder);
    let done = finish(recorder, Duration::from_secs(30));
    drop(client);
    assert_eq!(reader.join().unwrap(), 2_000_000);
    assert!(done.status.success(), "{}", done.stderr);
    assert!(done.stderr.contains("polls in"), "{}", done.stderr);
    // The default source polls only the tracked connections: what follows (show, top
    // --replay) reads a recording that path made.
    assert!(done.stderr.contains("(tracked connections)"), "{}", done.stderr);

    let f = file.to_str().unwrap();
    let list = tcptail(&["record", "show", f]);
    assert!(list.status.success(), "{}", text(&list.stderr));
    let list = text(&list.stdout);
    assert_eq!(list.lines().count(), 2, "header and the one selected connection:\n{list}");
    assert!(list.contains(&local.to_string()), "{list}");

    let conn = local.to_string();
    let timeline = tcptail(&["record", "show", f, "--conn", &conn]);
    let timeline = text(&timeline.stdout);
    let lines: Vec<&str> = timeline.lines().collect();
    assert!(lines[0].contains(" open ") && lines[0].contains("rtt_us="), "{timeline}");
    let changes = lines.iter().filter(|l| l.contains(" change ")).count();
    assert!(changes >= 10, "the transfer changed the connection on most polls:\n{timeline}");
    assert!(lines.iter().any(|l| l.contains("bytes_acked=")), "{timeline}");

    let csv = tcptail(&["record", "show", f, "--conn", &conn, "--csv"]);
    assert!(csv.status.success());
    let csv = text(&csv.stdout);
    let mut rows = csv.lines();
    let header: Vec<&str> = rows.next().unwrap().split(',').collect();
    let acked_col = header.iter().position(|h| *h == "bytes_acked").unwrap();
    let acked: Vec<u64> =
        rows.map(|r| r.split(',').nth(acked_col).unwrap().parse().unwrap()).collect();
    assert_eq!(acked.len(), lines.len(), "one CSV row per timeline line");
    assert!(acked.windows(2).all(|w| w[0] <= w[1]), "{acked:?}");
    assert!(*acked.last().unwrap() > 1_000_000, "{acked:?}");

    // A narrow window around the time of a line in the middle shows that part of the
    // timeline only.
    let middle = lines[lines.len() / 2].split(' ').next().unwrap();
    let around = tcptail(&[
        "record",
        "show",
        f,
        "--conn",
        &format!(":{}", local.port()),
        "--around",
        middle,
        "--window",
        "5ms",
    ]);
    assert!(around.status.success(), "{}", text(&around.stderr));
    let part = text(&around.stdout).lines().count();
    assert!(part >= 1 && part < lines.len(), "{part} of {} lines", lines.len());

    // `top` replays the recording: at its end the connection is there with what was recorded
    // last; at its start (before the connection opened) nothing is.
    let top = tcptail(&["top", "--replay", f, "--once", "--json", "--dport", &port.to_string()]);
    assert!(top.status.success(), "{}", text(&top.stderr));
    let conns: serde_json::Value = serde_json::from_slice(&top.stdout).unwrap();
    let conns = conns.as_array().unwrap();
    assert_eq!(conns.len(), 1, "{conns:?}");
    assert_eq!(conns[0]["local"], local.to_string());
    assert_eq!(conns[0]["info"]["bytes_acked"], *acked.last().unwrap());
    let top = tcptail(&["top", "--replay", f, "--once", "--json", "--at", "+0ms"]);
    assert_eq!(text(&top.stdout).trim(), "[]");
    // Played back (not a terminal): frames until the end of the recording, then exit 0.
    let play = tcptail(&["top", "--replay", f, "--interval-ms", "50", "--speed", "10"]);
    assert!(play.status.success(), "{}", text(&play.stderr));
    let frames = text(&play.stdout);
    assert!(frames.matches("replaying ").count() >= 2, "{frames}");
    assert!(frames.contains("(end of the recording)"), "{frames}");
}

#[test]
fn damaged_recordings_are_one_error_naming_the_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let garbage = dir.path().join("garbage");
    std::fs::write(&garbage, b"this is not a recording at all").unwrap();
    let out = tcptail(&["record", "show", garbage.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(garbage.to_str().unwrap()) && err.contains("at byte 0"), "{err}");

    // A real recording cut short: what was read is printed, then one error with the offset.
    let file = dir.path().join("rec");
    let done = run(
        &[
            "record",
            "--out",
            file.to_str().unwrap(),
            "--interval",
            "10ms",
            "--duration",
            "300ms",
            "--block-every",
            "0ms",
            "--all-states",
        ],
        Duration::from_secs(30),
    );
    assert!(done.status.success(), "{}", done.stderr);
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() - 3]).unwrap();
    let out = tcptail(&["record", "show", file.to_str().unwrap(), "--csv"]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("block cut short") && err.contains("at byte"), "{err}");
    assert!(text(&out.stdout).lines().count() > 1, "records before the cut are printed");
}

#[test]
fn a_sweep_shorter_than_the_interval_is_one_error_naming_both() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rec");
    let f = file.to_str().unwrap();
    let out = tcptail(&["record", "--out", f, "--interval", "100ms", "--sweep", "10ms"]);
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.matches("--sweep 10ms is shorter than --interval 100ms").count(), 1, "{err}");
    assert!(!file.exists(), "nothing is recorded: {err}");
}

#[test]
fn bad_flags_are_usage_errors() {
    for args in
        [&["record"][..], &["record", "--out", "/tmp/x", "--interval", "10"], &["record", "show"]]
    {
        let out = tcptail(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stderr));
    }
    let out = tcptail(&["top", "--replay", "/tmp/x", "--netns", "n"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let out = tcptail(&["top", "--at", "+1s"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let out = tcptail(&["record", "show", "/nonexistent/rec", "--conn", "nohost"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("--conn"), "{}", text(&out.stderr));
}

#[test]
fn closes_are_summarised_once_per_end_and_exported() {
    // Until Ctrl-C; the recording is read as it is written to see when both ends were polled.
    let Recording { listener, port, dir: _dir, file, recorder } =
        start_recording("--port", "300s", &["--block-every", "0ms"]);
    let mut client = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let (mut server, _) = listener.accept().unwrap();
    client.write_all(&[1u8; 300_000]).unwrap();
    let mut got = vec![0u8; 300_000];
    server.read_exact(&mut got).unwrap();
    let local: SocketAddr = client.local_addr().unwrap();
    wait_until_recorded(&file, "the client's end", |t| t.id.local == local);
    wait_until_recorded(&file, "the server's end", |t| t.id.remote == local);
    // Both ends close (the server reads the client's FIN first), then Ctrl-C at once: the
    // recorder must still summarise both from the kernel's notifications before it exits.
    drop(client);
    assert_eq!(server.read(&mut [0u8; 16]).unwrap(), 0, "the client's FIN");
    drop(server);
    interrupt(&recorder);
    let done = finish(recorder, Duration::from_secs(30));
    assert!(done.status.success(), "{}", done.stderr);
    assert!(done.stderr.contains("2 closes summarised"), "{}", done.stderr);

    let f = file.to_str().unwrap();
    let closed = tcptail(&["record", "show", f, "--closed"]);
    let closed = text(&closed.stdout);
    assert_eq!(closed.lines().count(), 2, "one summary per end:\n{closed}");
    assert!(closed.contains("seen=destroyed") && closed.contains("bytes_acked="), "{closed}");
    let csv = text(&tcptail(&["record", "show", f, "--closed", "--csv"]).stdout);
    let rows: Vec<&str> = csv.lines().collect();
    assert_eq!(rows.len(), 3, "{csv}");
    let header: Vec<&str> = rows[0].split(',').collect();
    let acked = header.iter().position(|h| *h == "bytes_acked").unwrap();
    let sent: Vec<u64> =
        rows[1..].iter().map(|r| r.split(',').nth(acked).unwrap().parse().unwrap()).collect();
    assert!(sent.iter().any(|&b| b >= 300_000), "the client's end acknowledged it all: {csv}");
    let list = text(&tcptail(&["record", "show", f]).stdout);
    assert_eq!(list.matches(" closed").count(), 2, "{list}");
}
