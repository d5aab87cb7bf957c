//! What the exporter tests share: `tcptail exporter` started on an ephemeral loopback port
//! (killed on drop), and a raw HTTP/1.1 GET that returns status, headers and body.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// A child process killed (and reaped) on drop.
pub struct Killed(pub Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A running exporter.
pub struct Exporter {
    child: Killed,
    /// The address it listens on.
    pub addr: SocketAddr,
}

impl Exporter {
    /// Starts `tcptail exporter --listen 127.0.0.1:0 EXTRA...`; ready when it prints its
    /// address.
    pub fn start(extra: &[&str]) -> Exporter {
        let mut child = Command::new(super::bin())
            .args(["exporter", "--listen", "127.0.0.1:0"])
            .args(extra)
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tcptail exporter");
        let mut line = String::new();
        BufReader::new(child.stderr.take().expect("piped")).read_line(&mut line).unwrap();
        let addr = super::printed_address(&line);
        Exporter { child: Killed(child), addr }
    }

    /// Resident memory from /proc, in bytes.
    pub fn rss(&self) -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.child.0.id())).unwrap();
        let kib: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no VmRSS in {status}"));
        kib * 1024
    }
}

/// An HTTP reply: the status (0 when the server closed before a complete header), the
/// headers (lower-cased names) and the body bytes.
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    /// The value of header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The body as text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// `GET PATH` on a fresh connection (`Connection: close`), with `extra_headers` (each ending
/// in `\r\n`), read to the end.
pub fn get(addr: SocketAddr, path: &str, extra_headers: &str) -> Reply {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{extra_headers}\r\n")
        .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    parse_reply(&raw)
}

/// Parses a raw HTTP/1.x reply.
pub fn parse_reply(raw: &[u8]) -> Reply {
    let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Reply { status: 0, headers: Vec::new(), body: Vec::new() };
    };
    let head = String::from_utf8_lossy(&raw[..end]).into_owned();
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split(' ').nth(1)?.parse().ok()).unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Reply { status, headers, body: raw[end + 4..].to_vec() }
}
