//! The web configuration file, in the format of node_exporter's `--web.config.file` (the
//! Prometheus exporter-toolkit): TLS and basic-auth users.
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt     # PEM, the leaf first; relative to this file's directory
//!   key_file: server.key      # PEM (PKCS#8, PKCS#1 or SEC1)
//!   min_version: TLS12        # or TLS13 (default TLS12)
//! basic_auth_users:
//!   prometheus: $2y$10$...    # bcrypt hash (htpasswd -nB, or `python3 -c 'import bcrypt...'`)
//! ```
//!
//! An empty file serves plain HTTP without authentication. Keys exporter-toolkit knows but
//! tcptail does not implement (client certificates, cipher suites, extra headers) are refused by
//! name rather than silently ignored: a security setting that is not applied must not look as
//! if it were. Every error names the file and the key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use base64::Engine;
use rustls::ServerConfig;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;

/// A checked web configuration: TLS material loaded, password hashes parsed.
#[derive(Clone, Default)]
pub struct WebConfig {
    /// TLS server configuration, when `tls_server_config` is given.
    pub tls: Option<Arc<ServerConfig>>,
    /// Users allowed in by basic auth, when `basic_auth_users` is given.
    pub users: Option<Arc<BasicAuth>>,
}

impl std::fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebConfig")
            .field("tls", &self.tls.is_some())
            .field("users", &self.users.as_ref().map(|u| u.hashes.len()))
            .finish()
    }
}

/// A web configuration file that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("web config {}: {}{message}", file.display(), key.as_ref().map_or(String::new(), |k| format!("{k}: ")))]
pub struct WebConfigError {
    /// The file.
    pub file: PathBuf,
    /// The key at fault (`tls_server_config.cert_file`), when one is.
    pub key: Option<String>,
    /// What is wrong, with the next step where there is one.
    pub message: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    tls_server_config: Option<RawTls>,
    basic_auth_users: Option<BTreeMap<String, String>>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert_file: Option<String>,
    key_file: Option<String>,
    min_version: Option<String>,
}

impl WebConfig {
    /// Reads and checks the file: YAML syntax, known keys, readable certificate and key that
    /// belong together, bcrypt hashes.
    pub fn load(path: &Path) -> Result<WebConfig, WebConfigError> {
        let err = |key: Option<&str>, message: String| WebConfigError {
            file: path.to_owned(),
            key: key.map(str::to_owned),
            message,
        };
        let text =
            std::fs::read_to_string(path).map_err(|e| err(None, format!("cannot read: {e}")))?;
        let raw: RawConfig = if text.trim().is_empty() {
            RawConfig::default()
        } else {
            serde_yaml_ng::from_str::<Option<RawConfig>>(&text)
                .map_err(|e| err(None, yaml_message(&e)))?
                .unwrap_or_default()
        };
        let dir = path.parent().unwrap_or(Path::new("."));
        let tls = match raw.tls_server_config {
            Some(tls) => Some(Arc::new(load_tls(dir, &tls).map_err(|(k, m)| err(Some(&k), m))?)),
            None => None,
        };
        let users = match raw.basic_auth_users {
            Some(users) => {
                Some(Arc::new(BasicAuth::new(users).map_err(|(k, m)| err(Some(&k), m))?))
            }
            None => None,
        };
        Ok(WebConfig { tls, users })
    }
}

/// serde_yaml's message, which already says the key path and the line.
fn yaml_message(e: &serde_yaml_ng::Error) -> String {
    let text = e.to_string();
    if text.contains("unknown field") {
        format!(
            "{text} (tcptail implements cert_file, key_file and min_version of \
             tls_server_config, and basic_auth_users)"
        )
    } else {
        text
    }
}

fn load_tls(dir: &Path, raw: &RawTls) -> Result<ServerConfig, (String, String)> {
    let key = |k: &str| format!("tls_server_config.{k}");
    let file = |name: &str, value: &Option<String>| -> Result<PathBuf, (String, String)> {
        let value = value.as_deref().filter(|v| !v.is_empty()).ok_or_else(|| {
            (key(name), "missing: tls_server_config needs both cert_file and key_file".to_owned())
        })?;
        Ok(dir.join(value))
    };
    let cert_path = file("cert_file", &raw.cert_file)?;
    let key_path = file("key_file", &raw.key_file)?;
    let read = |name: &str, p: &Path| {
        std::fs::read(p).map_err(|e| (key(name), format!("cannot read {}: {e}", p.display())))
    };
    let cert_pem = read("cert_file", &cert_path)?;
    let key_pem = read("key_file", &key_path)?;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<_, _>>()
        .map_err(|e| (key("cert_file"), format!("{}: not PEM: {e}", cert_path.display())))?;
    if certs.is_empty() {
        return Err((key("cert_file"), format!("no CERTIFICATE in {}", cert_path.display())));
    }
    let private = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
        (key("key_file"), format!("no usable private key in {}: {e}", key_path.display()))
    })?;
    let versions: &[&rustls::SupportedProtocolVersion] = match raw.min_version.as_deref() {
        None | Some("TLS12") => &[&rustls::version::TLS13, &rustls::version::TLS12],
        Some("TLS13") => &[&rustls::version::TLS13],
        Some(other) => {
            return Err((key("min_version"), format!("{other:?} is not TLS12 or TLS13")));
        }
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .map_err(|e| (key("min_version"), e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, private)
        .map_err(|e| {
            (
                "tls_server_config".to_owned(),
                format!(
                    "{} and {} are not a usable certificate and key: {e}",
                    cert_path.display(),
                    key_path.display()
                ),
            )
        })?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Basic-auth users and their bcrypt hashes.
pub struct BasicAuth {
    hashes: BTreeMap<String, String>,
    /// `Authorization` values that passed a bcrypt check, newest last (a scraper sends the
    /// same one every time, so it pays bcrypt once, not at every scrape).
    verified: Mutex<Vec<Vec<u8>>>,
}

/// Verified `Authorization` values remembered at most.
const VERIFIED_KEPT: usize = 16;

impl BasicAuth {
    fn new(hashes: BTreeMap<String, String>) -> Result<BasicAuth, (String, String)> {
        if hashes.is_empty() {
            return Err((
                "basic_auth_users".to_owned(),
                "no users: list at least one, or remove the key to turn authentication off"
                    .to_owned(),
            ));
        }
        for (user, hash) in &hashes {
            let key = format!("basic_auth_users.{user}");
            if user.is_empty() || user.contains(':') {
                return Err((key, "a user name must be non-empty and without ':'".to_owned()));
            }
            if hash.parse::<bcrypt::HashParts>().is_err() {
                return Err((
                    key,
                    "not a bcrypt hash (expected $2y$<cost>$..., e.g. from `htpasswd -nBC 10 USER`)"
                        .to_owned(),
                ));
            }
        }
        Ok(BasicAuth { hashes, verified: Mutex::new(Vec::new()) })
    }

    /// Whether this exact `Authorization` value passed [`BasicAuth::allows`] before: a cheap
    /// check (no bcrypt), comparing in constant time per remembered value.
    pub fn verified_before(&self, authorization: Option<&[u8]>) -> bool {
        let Some(value) = authorization else { return false };
        let verified = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
        verified.iter().fold(false, |hit, known| hit | constant_time_eq(known, value))
    }

    /// Whether an `Authorization` header names a user with the right password. Costs one bcrypt
    /// verification whether or not the user exists, so the time does not tell which users do.
    pub fn allows(&self, authorization: Option<&[u8]>) -> bool {
        let allowed = self.check(authorization);
        if let (true, Some(value)) = (allowed, authorization) {
            let mut verified = self.verified.lock().unwrap_or_else(PoisonError::into_inner);
            if !verified.iter().any(|v| v == value) {
                if verified.len() == VERIFIED_KEPT {
                    verified.remove(0);
                }
                verified.push(value.to_vec());
            }
        }
        allowed
    }

    fn check(&self, authorization: Option<&[u8]>) -> bool {
        let credentials = authorization
            .and_then(|h| h.strip_prefix(b"Basic "))
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b.trim_ascii()).ok())
            .and_then(|b| String::from_utf8(b).ok());
        let Some((user, password)) = credentials.as_deref().and_then(|c| c.split_once(':')) else {
            return false;
        };
        match self.hashes.get(user) {
            Some(hash) => bcrypt::verify(password, hash).unwrap_or(false),
            None => {
                // Same cost as a known user; the answer is no either way.
                let any = self.hashes.values().next().map_or("", String::as_str);
                let _ = bcrypt::verify(password, any);
                false
            }
        }
    }
}

/// Equality whose time depends on the lengths only, not on where the bytes differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
