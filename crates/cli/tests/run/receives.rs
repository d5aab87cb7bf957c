//! QUICKACK re-armed after every receive path a program may take: Python's `recv`, `read`,
//! `recvfrom` and `recvmsg`, and a C program compiled with `-O2 -D_FORTIFY_SOURCE=2`, whose
//! receives become glibc's `__recv_chk`, `__recvfrom_chk` and `__read_chk`, plus `readv` and
//! `recvmmsg`. `getsockopt(TCP_QUICKACK)` reads 1 while the socket is out of delayed-ACK
//! (pingpong) mode; sending right after receiving puts it back in, so only a re-arm after
//! each receive keeps it reading 1 right after the receive. Each check is paired with a run
//! whose profile does not re-arm, which must fall short.

use std::io::{Read, Write};
use std::net::TcpListener;
use std::process::Command;

use crate::{PROFILE, need, output, profile_dir, run_cmd, text};

/// A profile that sets NODELAY only: no re-arm, the control for [`PROFILE`]'s `rearm`.
const NO_REARM: &str = "nodelay = true\n";

const QUICKACK: &str = r#"
import os, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
calls = [lambda: s.recv(1), lambda: os.read(s.fileno(), 1),
         lambda: s.recvfrom(1)[0], lambda: s.recvmsg(1)[0]]
on = 0
for i in range(40):
    s.sendall(b"p")
    assert calls[i % 4]() == b"p"
    on += s.getsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK)
print(on)
"#;

/// Echoes every byte back until the peer closes.
fn echo_server() -> (u16, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let handle = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mut b = [0u8; 1];
        while s.read(&mut b).unwrap_or(0) == 1 {
            s.write_all(&b).unwrap();
        }
    });
    (port, handle)
}

/// Runs the program `command(port)` names against an echo server, under `profile`; returns
/// its stdout.
fn run_against_echo(profile: &str, command: impl FnOnce(&str) -> Vec<String>) -> String {
    let (_dir, path) = profile_dir(profile);
    let (port, server) = echo_server();
    let args = command(&port.to_string());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = output(run_cmd(&path, false, &args));
    server.join().unwrap();
    assert!(out.status.success(), "{args:?} failed: {}", text(&out.stderr));
    text(&out.stdout)
}

#[test]
fn quickack_is_rearmed_after_every_kind_of_receive() {
    need("python3");
    let count = |profile| -> u32 {
        let command =
            |port: &str| vec!["python3".into(), "-c".into(), QUICKACK.into(), port.into()];
        run_against_echo(profile, command).trim().parse().unwrap()
    };
    assert_eq!(count(PROFILE), 40, "recv/read/recvfrom/recvmsg must all re-arm");
    let off = count(NO_REARM);
    assert!(off < 40, "without re-arm QUICKACK should drop back to delayed ACKs ({off}/40)");
}

const RECEIVE_PATHS_C: &str = include_str!("receive_paths.c");
/// The paths `receive_paths.c` exercises, each of which must be an import of the binary (so
/// that the compiler did turn recv/recvfrom/read into their fortified forms).
const PATHS: [&str; 5] = ["__recv_chk", "__recvfrom_chk", "__read_chk", "readv", "recvmmsg"];
const ROUNDS: u32 = 20;

/// `NAME COUNT` and `errno NAME KEPT` lines of `receive_paths` as (key, value).
fn parse_counts(stdout: &str) -> Vec<(String, u32)> {
    stdout
        .lines()
        .map(|l| {
            let (key, value) = l.rsplit_once(' ').unwrap_or_else(|| panic!("line {l:?}"));
            (key.to_string(), value.parse().unwrap_or_else(|_| panic!("line {l:?}")))
        })
        .collect()
}

/// `readv` in an `nm -D` line `                 U readv@GLIBC_2.2.5`.
fn imported_name(nm_line: &str) -> Option<&str> {
    nm_line.split_whitespace().last()?.split('@').next()
}

#[test]
fn fortified_c_receives_rearm_and_keep_errno() {
    need("gcc");
    need("nm");
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("receive_paths.c");
    let binary = dir.path().join("receive_paths");
    std::fs::write(&source, RECEIVE_PATHS_C).unwrap();
    let cc = Command::new("gcc")
        .args(["-O2", "-D_FORTIFY_SOURCE=2", "-Wall", "-Werror", "-o"])
        .arg(&binary)
        .arg(&source)
        .output()
        .expect("run gcc");
    assert!(cc.status.success(), "gcc failed: {}", text(&cc.stderr));
    let nm = Command::new("nm").args(["-D", "--undefined-only"]).arg(&binary).output().unwrap();
    let imports = text(&nm.stdout);
    for path in PATHS {
        assert!(
            imports.lines().any(|l| imported_name(l) == Some(path)),
            "the compiled program does not call {path}; imports:\n{imports}"
        );
    }

    let binary = binary.to_str().unwrap();
    let command = |port: &str| vec![binary.to_string(), port.to_string(), ROUNDS.to_string()];
    let rearmed = parse_counts(&run_against_echo(PROFILE, command));
    let expected: Vec<(String, u32)> = PATHS
        .iter()
        .map(|p| (p.to_string(), ROUNDS))
        .chain([("errno __read_chk".into(), 1), ("errno readv".into(), 1)])
        .collect();
    assert_eq!(rearmed, expected, "every path re-arms after each receive, and errno is kept");

    let plain = parse_counts(&run_against_echo(NO_REARM, command));
    let total: u32 = plain.iter().filter(|(k, _)| !k.starts_with("errno")).map(|(_, v)| v).sum();
    assert!(
        total < ROUNDS * PATHS.len() as u32,
        "without re-arm QUICKACK should drop back to delayed ACKs: {plain:?}"
    );
}
