//! [`FrameParser`]: the sans-IO splitter the server's request loop runs every received byte
//! through. It validates each header as it completes (kind, the Hello's length limits) and
//! counts payload bytes instead of buffering them.

use super::{FrameKind, HEADER_LEN, Header, MAX_FRAME_LEN, WireError};

/// Splits a byte stream into frames of one expected kind without buffering their payloads:
/// payload bytes are counted and skipped. Sans-IO: the caller owns the receive buffer and
/// feeds it to [`FrameParser::advance`].
#[derive(Debug, Clone)]
pub struct FrameParser {
    expected: FrameKind,
    max_frame_len: u32,
    max_reply_len: u32,
    /// Whether a StatsRequest may come between the expected frames.
    stats: bool,
    pending: Option<Header>,
    remaining: usize,
}

impl FrameParser {
    /// A parser for frames of kind `expected` no longer than `max_frame_len`; a Request may
    /// ask for any valid `reply_len` until [`FrameParser::with_max_reply_len`] bounds it.
    pub fn new(expected: FrameKind, max_frame_len: u32) -> FrameParser {
        FrameParser {
            expected,
            max_frame_len,
            max_reply_len: MAX_FRAME_LEN,
            stats: false,
            pending: None,
            remaining: 0,
        }
    }

    /// Requests asking for a `reply_len` above `max_reply_len` (the Hello's) are refused.
    pub fn with_max_reply_len(self, max_reply_len: u32) -> FrameParser {
        FrameParser { max_reply_len, ..self }
    }

    /// StatsRequests (bare headers) are accepted between the expected frames and returned
    /// like them; the caller tells them apart by [`Header::kind`].
    pub fn with_stats_requests(self) -> FrameParser {
        FrameParser { stats: true, ..self }
    }

    /// True when no frame is partly consumed.
    pub fn is_idle(&self) -> bool {
        self.pending.is_none()
    }

    /// Consumes bytes from the front of `input` and returns how many, plus the header of the
    /// frame that they completed, if any. Call again with the unconsumed rest until it returns
    /// `None`; what is left then is less than a header and must be fed again with more bytes.
    ///
    /// On error nothing is consumed, so the offending header is still at the front of `input`
    /// (a client that receives an Error frame where it expected a Response can read its
    /// reason from there).
    pub fn advance(&mut self, input: &[u8]) -> Result<(usize, Option<Header>), WireError> {
        let mut used = 0;
        if self.pending.is_none() {
            let Some(bytes) = input.first_chunk::<HEADER_LEN>() else {
                return Ok((0, None));
            };
            let header = Header::decode(bytes)?;
            let stats = self.stats && header.kind == FrameKind::StatsRequest;
            if header.kind != self.expected && !stats {
                return Err(WireError::UnexpectedKind {
                    found: header.kind,
                    expected: self.expected,
                });
            }
            if header.frame_len > self.max_frame_len {
                return Err(WireError::LargerThanPromised {
                    kind: header.kind,
                    len: header.frame_len,
                    promised: self.max_frame_len,
                });
            }
            if header.kind == FrameKind::Request && header.reply_len > self.max_reply_len {
                return Err(WireError::ReplyLargerThanNegotiated {
                    reply_len: header.reply_len,
                    negotiated: self.max_reply_len,
                });
            }
            used = HEADER_LEN;
            self.pending = Some(header);
            self.remaining = header.payload_len();
        }
        let skip = self.remaining.min(input.len() - used);
        used += skip;
        self.remaining -= skip;
        if self.remaining == 0 { Ok((used, self.pending.take())) } else { Ok((used, None)) }
    }
}
