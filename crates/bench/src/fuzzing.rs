//! The properties the fuzz targets in `fuzz/` check, here so that `cargo fuzz` and the replay
//! of the checked-in seeds and crash regressions in the ordinary `cargo test`
//! (`crates/cli/tests/fuzz_regressions.rs`) run the same code. Compiled only with the
//! `fuzzing` feature (the fuzz crate and that test turn it on).
//!
//! Each function takes the fuzzer's bytes and panics when a property fails.

use crate::wire::{self, FrameKind, FrameParser, HEADER_LEN, Header};

/// `fuzz_targets/wire_header.rs`: the bench wire protocol's readers (the header decoder, the
/// blocking frame reader and the handshake readers over arbitrary bytes, and the sans-IO
/// request parser fed in arbitrary chunks) never panic; whatever the decoder accepts
/// re-encodes to the same bytes; the parser never claims more bytes than it was given.
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

    // First byte: chunk size; next four: the promised request length.
    let Some((&chunk, rest)) = data.split_first() else { return };
    let Some((promised, stream)) = rest.split_first_chunk::<4>() else { return };
    let mut parser = FrameParser::new(FrameKind::Request, u32::from_be_bytes(*promised));
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
                        assert_eq!(header.kind, FrameKind::Request);
                    } else {
                        break;
                    }
                }
                Err(_) => return,
            }
        }
    }
}
