//! The properties the fuzz targets in `fuzz/` check, here so that `cargo fuzz` and the replay
//! of the checked-in seeds and crash regressions in the ordinary `cargo test`
//! (`crates/cli/tests/fuzz_regressions.rs`) run the same code. Compiled only with the
//! `fuzzing` feature (the fuzz crate and that test turn it on).
//!
//! Each function takes the fuzzer's bytes and panics when a property fails.

use crate::wire::{self, FrameKind, FrameParser, HEADER_LEN, Header};

/// `fuzz_targets/wire_header.rs`: the bench wire protocol's readers (the header decoder, the
/// blocking frame reader, the handshake readers and the StatsReply reader over arbitrary
/// bytes, and the sans-IO request parser, StatsRequests allowed or not, fed in arbitrary
/// chunks) never panic; whatever the decoder accepts re-encodes to the same bytes; a
/// StatsReply the reader accepts is valid and reads back the same after re-encoding; the
/// parser never claims more bytes than it was given and returns only the kinds it expects.
pub fn wire_header(data: &[u8]) {
    if let Some(bytes) = data.first_chunk::<HEADER_LEN>()
        && let Ok(header) = Header::decode(bytes)
    {
        let mut again = [0u8; HEADER_LEN];
        header.encode(&mut again);
        assert_eq!(&again, bytes, "accepted header does not re-encode canonically");
        assert!(header.validate().is_ok());
    }

    let _ = wire::read_frame(&mut &data[..], &mut Vec::new());
    let _ = wire::read_hello(&mut &data[..]);
    let _ = wire::read_welcome(&mut &data[..]);
    stats_reply(data);

    // First byte: chunk size (its low bit: StatsRequests allowed); next four: the promised
    // request length.
    let Some((&chunk, rest)) = data.split_first() else { return };
    let Some((promised, stream)) = rest.split_first_chunk::<4>() else { return };
    let stats = chunk & 1 == 1;
    let mut parser = FrameParser::new(FrameKind::Request, u32::from_be_bytes(*promised));
    if stats {
        parser = parser.with_stats_requests();
    }
    let step = usize::from(chunk).max(1);
    let (mut fed, mut consumed) = (0, 0);
    while fed < stream.len() {
        fed = (fed + step).min(stream.len());
        loop {
            match parser.advance(&stream[consumed..fed]) {
                Ok((used, frame)) => {
                    assert!(used <= fed - consumed);
                    consumed += used;
                    if let Some(header) = frame {
                        let allowed = header.kind == FrameKind::Request
                            || (stats && header.kind == FrameKind::StatsRequest);
                        assert!(allowed, "the parser returned a {} frame", header.kind);
                    } else {
                        break;
                    }
                }
                Err(_) => return,
            }
        }
    }
}

/// The client's StatsReply reader over `data` (its first byte: how many late Responses may
/// come first): what it accepts is valid, and re-encoded it reads back the same.
fn stats_reply(data: &[u8]) {
    let Some((&outstanding, frames)) = data.split_first() else { return };
    let Ok(stats) = wire::read_stats_reply(&mut &frames[..], u64::from(outstanding)) else {
        return;
    };
    assert!(stats.validate().is_ok(), "an accepted StatsReply is valid");
    let frame = wire::stats_reply_frame(&stats).expect("an accepted StatsReply re-encodes");
    let again = wire::read_stats_reply(&mut &frame[..], 0).expect("a re-encoded reply reads");
    // JSON floats may move by an ulp through a round trip; everything else is exact.
    let close =
        (again.window_seconds - stats.window_seconds).abs() <= stats.window_seconds.abs() * 1e-15;
    assert!(close, "{} != {}", again.window_seconds, stats.window_seconds);
    let same_window = wire::ServerStats { window_seconds: stats.window_seconds, ..again };
    assert_eq!(same_window, stats);
}
