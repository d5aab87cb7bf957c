//! Content negotiation for compression: gzip when the client's `Accept-Encoding` allows it
//! (Prometheus always asks), identity otherwise.

use std::io::Write;

use flate2::Compression;
use flate2::write::GzEncoder;

/// Whether an `Accept-Encoding` value accepts gzip: `gzip` (or `x-gzip`, or `*`) listed with a
/// quality above zero. `gzip;q=0` refuses it, and a `*;q=0` does not override an explicit
/// `gzip`.
pub fn accepts_gzip(accept_encoding: Option<&str>) -> bool {
    let Some(value) = accept_encoding else { return false };
    let mut star = None;
    for item in value.split(',') {
        let mut parts = item.split(';');
        let coding = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let quality = parts
            .filter_map(|p| {
                let (k, v) = p.split_once('=')?;
                (k.trim().eq_ignore_ascii_case("q")).then(|| v.trim().parse::<f32>().ok())?
            })
            .next()
            .unwrap_or(1.0);
        match coding.as_str() {
            "gzip" | "x-gzip" => return quality > 0.0,
            "*" => star = Some(quality > 0.0),
            _ => {}
        }
    }
    star.unwrap_or(false)
}

/// Compresses a body with gzip at a fast level: exposition text shrinks about tenfold at a
/// fraction of the cost of the default level.
pub fn gzip(body: &[u8]) -> Vec<u8> {
    let mut encoder = GzEncoder::new(Vec::with_capacity(body.len() / 8 + 64), Compression::fast());
    // Writing into a Vec cannot fail.
    encoder.write_all(body).expect("gzip into memory");
    encoder.finish().expect("gzip into memory")
}
