//! Fuzzes the bench wire protocol's readers: the header decoder, the blocking frame reader and
//! the handshake readers over arbitrary bytes, and the sans-IO request parser fed in arbitrary
//! chunks. None may panic; whatever the decoder accepts must re-encode to the same bytes; the
//! parser must never claim more bytes than it was given.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tcptail_bench::wire::{self, FrameKind, FrameParser, HEADER_LEN, Header};

fuzz_target!(|data: &[u8]| {
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
});
