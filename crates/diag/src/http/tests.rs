use std::io::{Read, Write};
use std::path::Path;

use super::*;

#[test]
fn gzip_is_accepted_only_with_a_positive_quality() {
    assert!(accepts_gzip(Some("gzip")));
    assert!(accepts_gzip(Some("deflate, GZIP;q=0.5")));
    assert!(accepts_gzip(Some("x-gzip")));
    assert!(accepts_gzip(Some("*")));
    assert!(!accepts_gzip(Some("gzip;q=0")));
    assert!(!accepts_gzip(Some("gzip; q=0.0, *")));
    assert!(accepts_gzip(Some("*;q=0, gzip")));
    assert!(!accepts_gzip(Some("identity")));
    assert!(!accepts_gzip(Some("")));
    assert!(!accepts_gzip(None));
}

#[test]
fn gzip_round_trips() {
    let body = "tcptail_sockets{state=\"ESTABLISHED\"} 1\n".repeat(1000);
    let packed = gzip(body.as_bytes());
    assert!(packed.len() < body.len() / 10, "{} of {}", packed.len(), body.len());
    let mut out = String::new();
    flate2::read::GzDecoder::new(&packed[..]).read_to_string(&mut out).unwrap();
    assert_eq!(out, body);
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let p = dir.join(name);
    std::fs::File::create(&p).unwrap().write_all(text.as_bytes()).unwrap();
    p
}

fn load_err(text: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let p = write(dir.path(), "web.yml", text);
    let e = WebConfig::load(&p).unwrap_err();
    let line = e.to_string();
    assert!(line.starts_with(&format!("web config {}: ", p.display())), "{line}");
    line
}

#[test]
fn empty_web_config_is_plain_http() {
    let dir = tempfile::tempdir().unwrap();
    let c = WebConfig::load(&write(dir.path(), "web.yml", "# nothing\n")).unwrap();
    assert!(c.tls.is_none() && c.users.is_none());
    let c = WebConfig::load(&write(dir.path(), "web2.yml", "")).unwrap();
    assert!(c.tls.is_none() && c.users.is_none());
}

#[test]
fn bad_web_configs_name_file_and_key() {
    let e = load_err("tls_server_config:\n  cert_file: nope.crt\n  key_file: nope.key\n");
    assert!(e.contains("tls_server_config.cert_file: cannot read"), "{e}");
    assert!(e.contains("nope.crt"), "{e}");
    let e = load_err("tls_server_config:\n  cert_file: a.crt\n");
    assert!(e.contains("tls_server_config.key_file: missing"), "{e}");
    let e = load_err("tls_server_config:\n  client_ca_file: ca.crt\n");
    assert!(e.contains("unknown field `client_ca_file`"), "{e}");
    assert!(e.contains("tls_server_config"), "{e}");
    let e = load_err("basic_auth_users:\n  alice: plaintext\n");
    assert!(e.contains("basic_auth_users.alice: not a bcrypt hash"), "{e}");
    let e = load_err("basic_auth_users: {}\n");
    assert!(e.contains("basic_auth_users: no users"), "{e}");
    let e = load_err("basic_auth_user:\n  alice: x\n");
    assert!(e.contains("unknown field `basic_auth_user`"), "{e}");
    let e = load_err("tls_server_config: [\n");
    assert!(e.contains("line"), "{e}");
    let missing = WebConfig::load(Path::new("/nonexistent/web.yml")).unwrap_err().to_string();
    assert!(missing.contains("/nonexistent/web.yml: cannot read"), "{missing}");
}

#[test]
fn tls_files_are_read_beside_the_config_and_must_match() {
    let dir = tempfile::tempdir().unwrap();
    let cert = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    let other = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()]).unwrap();
    write(dir.path(), "s.crt", &cert.cert.pem());
    write(dir.path(), "s.key", &cert.signing_key.serialize_pem());
    write(dir.path(), "o.key", &other.signing_key.serialize_pem());
    let ok =
        write(dir.path(), "web.yml", "tls_server_config:\n  cert_file: s.crt\n  key_file: s.key\n");
    assert!(WebConfig::load(&ok).unwrap().tls.is_some());
    let wrong =
        write(dir.path(), "w.yml", "tls_server_config:\n  cert_file: s.crt\n  key_file: o.key\n");
    let e = WebConfig::load(&wrong).unwrap_err().to_string();
    assert!(e.contains("tls_server_config: ") && e.contains("not a usable certificate"), "{e}");
    let swapped =
        write(dir.path(), "x.yml", "tls_server_config:\n  cert_file: s.key\n  key_file: s.key\n");
    let e = WebConfig::load(&swapped).unwrap_err().to_string();
    assert!(e.contains("tls_server_config.cert_file: no CERTIFICATE"), "{e}");
    let version = write(
        dir.path(),
        "v.yml",
        "tls_server_config:\n  cert_file: s.crt\n  key_file: s.key\n  min_version: TLS10\n",
    );
    let e = WebConfig::load(&version).unwrap_err().to_string();
    assert!(e.contains("tls_server_config.min_version: \"TLS10\""), "{e}");
}

#[test]
fn basic_auth_checks_user_and_password() {
    let dir = tempfile::tempdir().unwrap();
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    let p = write(dir.path(), "web.yml", &format!("basic_auth_users:\n  prom: '{hash}'\n"));
    let users = WebConfig::load(&p).unwrap().users.unwrap();
    let header = |c: &str| format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(c));
    use base64::Engine;
    assert!(!users.verified_before(Some(header("prom:s3cret").as_bytes())));
    assert!(users.allows(Some(header("prom:s3cret").as_bytes())));
    assert!(users.verified_before(Some(header("prom:s3cret").as_bytes())));
    assert!(!users.verified_before(Some(header("prom:s3cres").as_bytes())));
    assert!(!users.allows(Some(header("prom:wrong").as_bytes())));
    assert!(!users.allows(Some(header("eve:s3cret").as_bytes())));
    assert!(!users.allows(Some(b"Basic !!!")));
    assert!(!users.allows(Some(b"Bearer x")));
    assert!(!users.allows(None));
    assert!(!users.verified_before(Some(header("prom:wrong").as_bytes())));
    assert!(!users.verified_before(None));
}

#[test]
fn at_the_limit_the_oldest_unanswered_connection_makes_room() {
    let limits = Limits { max_connections: 3, ..Limits::default() };
    let mut slots = Slots::default();
    let a = slots.admit(limits).unwrap();
    let b = slots.admit(limits).unwrap();
    let c = slots.admit(limits).unwrap();
    a.answering.store(true, Ordering::Release);
    let d = slots.admit(limits).unwrap();
    // `a` is being answered, so `b` (the oldest idle one) was closed.
    assert_eq!(slots.open.keys().copied().collect::<Vec<_>>(), vec![a.id, c.id, d.id]);
    let closed = b.close.notified();
    tokio::pin!(closed);
    assert!(futures_ready(closed.as_mut()));
    for s in [&c, &d] {
        s.answering.store(true, Ordering::Release);
    }
    assert!(slots.admit(limits).is_none(), "every connection is being answered");
    assert_eq!(slots.open.len(), 3);
}

/// Whether a future is ready on its first poll.
fn futures_ready<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> bool {
    let waker = std::task::Waker::noop();
    f.poll(&mut std::task::Context::from_waker(waker)).is_ready()
}

#[test]
fn limits_are_checked() {
    assert!(Limits::default().validate().is_ok());
    assert!(Limits { max_connections: 0, ..Limits::default() }.validate().is_err());
    assert!(Limits { write_timeout: Duration::ZERO, ..Limits::default() }.validate().is_err());
    assert!(Limits { max_header_bytes: 10, ..Limits::default() }.validate().is_err());
}
