//! I/O engines beside the default blocking one ([`crate::config::Engine`]): what they share
//! is here, each engine is a child module.
//!
//! - [`uring`]: io_uring for the TCP client and server (multishot receive into provided
//!   buffers, sends on the ring, optional SQPOLL).
//!
//! An engine takes over after the handshake, which every engine does the same way
//! (`crate::connection::connect` on the client, `crate::server::serve` on the server), so
//! the Hello/Welcome negotiation and the server's policy do not depend on the engine.

use crate::wire::{FrameParser, HEADER_LEN, Header, WireError};

pub mod uring;

/// Splits a byte stream delivered in arbitrary chunks (a receive buffer each) into frames:
/// a [`FrameParser`] plus the few bytes of a header cut between two chunks.
#[derive(Debug, Clone)]
pub(crate) struct Splitter {
    parser: FrameParser,
    carry: [u8; HEADER_LEN],
    carried: usize,
}

impl Splitter {
    pub(crate) fn new(parser: FrameParser) -> Splitter {
        Splitter { parser, carry: [0; HEADER_LEN], carried: 0 }
    }

    /// Feeds one chunk; `on_frame` gets the header of every frame the chunk completes, in
    /// order. A frame that breaks the protocol ends the feeding with its error.
    pub(crate) fn feed<E: From<WireError>>(
        &mut self,
        mut chunk: &[u8],
        mut on_frame: impl FnMut(Header) -> Result<(), E>,
    ) -> Result<(), E> {
        while !chunk.is_empty() {
            if self.carried > 0 {
                let take = (HEADER_LEN - self.carried).min(chunk.len());
                self.carry[self.carried..self.carried + take].copy_from_slice(&chunk[..take]);
                self.carried += take;
                chunk = &chunk[take..];
                if self.carried < HEADER_LEN {
                    return Ok(());
                }
                self.carried = 0;
                let (_, header) = self.parser.advance(&self.carry)?;
                if let Some(header) = header {
                    on_frame(header)?;
                }
                continue;
            }
            let (used, header) = self.parser.advance(chunk)?;
            if used == 0 && header.is_none() {
                // Less than a header, at a frame boundary: keep it for the next chunk.
                self.carry[..chunk.len()].copy_from_slice(chunk);
                self.carried = chunk.len();
                return Ok(());
            }
            chunk = &chunk[used..];
            if let Some(header) = header {
                on_frame(header)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{FrameKind, encode_response};
    use proptest::prelude::*;

    fn stream(lens: &[u32]) -> Vec<u8> {
        let mut out = Vec::new();
        for (seq, &len) in lens.iter().enumerate() {
            let mut frame = vec![0u8; len as usize];
            encode_response(&mut frame, seq as u64);
            out.extend_from_slice(&frame);
        }
        out
    }

    proptest! {
        /// However a stream of frames is cut into chunks, the same frames come out in order.
        #[test]
        fn any_chunking_yields_every_frame_once(
            lens in prop::collection::vec(24u32..300, 1..20),
            cuts in prop::collection::vec(1usize..97, 1..50),
        ) {
            let bytes = stream(&lens);
            let mut splitter = Splitter::new(FrameParser::new(FrameKind::Response, 300));
            let mut seen = Vec::new();
            let (mut at, mut i) = (0, 0);
            while at < bytes.len() {
                let n = cuts[i % cuts.len()].min(bytes.len() - at);
                splitter
                    .feed::<WireError>(&bytes[at..at + n], |h| {
                        seen.push((h.seq, h.frame_len));
                        Ok(())
                    })
                    .unwrap();
                at += n;
                i += 1;
            }
            let want: Vec<(u64, u32)> =
                lens.iter().enumerate().map(|(s, &l)| (s as u64, l)).collect();
            prop_assert_eq!(seen, want);
        }
    }

    #[test]
    fn a_bad_header_is_an_error() {
        let mut splitter = Splitter::new(FrameParser::new(FrameKind::Response, 64));
        let mut bytes = stream(&[64]);
        bytes[0] = b'X';
        let err = splitter.feed::<WireError>(&bytes, |_| Ok(())).unwrap_err();
        assert!(matches!(err, WireError::BadMagic { .. }), "{err}");
    }
}
