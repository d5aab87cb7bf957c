//! Response frames reassembled from the byte stream, without keeping their payloads.
//!
//! Sans-allocation after construction: one receive buffer (4 KiB to 256 KiB, from the
//! response size) reused for the whole connection. A header is validated before its length
//! is used; an Error frame from the server becomes a protocol error carrying its reason.

use std::io;
use std::os::fd::BorrowedFd;

use tcptail_sock::QuickAck;

use super::LoopError;
use crate::wire::{self, FrameKind, Header};

/// Reassembles response frames from the byte stream without keeping their payloads.
pub(crate) struct ResponseReader {
    buf: Vec<u8>,
    start: usize,
    end: usize,
    current: Option<Header>,
    remaining: usize,
    error_text: Vec<u8>,
    welcomes: bool,
}

impl ResponseReader {
    pub(crate) fn new(reply_len: usize) -> ResponseReader {
        ResponseReader {
            buf: vec![0u8; reply_len.clamp(4096, 256 * 1024)],
            start: 0,
            end: 0,
            current: None,
            remaining: 0,
            error_text: Vec::new(),
            welcomes: false,
        }
    }

    /// Returns the next complete response header, or `None` if the socket has nothing more
    /// right now (non-blocking sockets only; a blocking socket waits inside `recv`).
    pub(super) fn next(
        &mut self,
        fd: BorrowedFd<'_>,
        policy: QuickAck,
    ) -> Result<Option<Header>, LoopError> {
        loop {
            if let Some(header) = self.take_frame()? {
                return Ok(Some(header));
            }
            if !self.recv_some(fd, policy)? {
                return Ok(None);
            }
        }
    }

    /// Lets Welcome frames through as well ([`super::TxMode::Crr`]: a Hello is sent on every
    /// new connection, its Welcome skipped before the response).
    pub(crate) fn accept_welcomes(&mut self) {
        self.welcomes = true;
    }

    /// Forgets everything buffered (a connection replaced by a new one).
    pub(crate) fn reset(&mut self) {
        (self.start, self.end, self.current, self.remaining) = (0, 0, None, 0);
        self.error_text.clear();
    }

    /// One `recv` into the free part of the buffer; false if the socket had nothing
    /// (non-blocking sockets). Protocol error on end-of-file.
    pub(super) fn recv_some(
        &mut self,
        fd: BorrowedFd<'_>,
        policy: QuickAck,
    ) -> Result<bool, LoopError> {
        loop {
            let space = self.space();
            match tcptail_sock::recv::recv_with_policy(fd, space, policy) {
                Ok(0) => {
                    return Err(LoopError::Closed);
                }
                Ok(n) => {
                    self.commit(n);
                    return Ok(true);
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// The free end of the receive buffer, for any engine's receive to fill; then
    /// [`ResponseReader::commit`] the bytes it wrote.
    pub(crate) fn space(&mut self) -> &mut [u8] {
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        } else if self.buf.len() - self.end < wire::HEADER_LEN {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        &mut self.buf[self.end..]
    }

    /// Takes `n` bytes written into [`ResponseReader::space`].
    pub(crate) fn commit(&mut self, n: usize) {
        self.end = (self.end + n).min(self.buf.len());
    }

    /// The next complete response frame among the bytes already received, if there is one.
    /// Sans-IO; an Error frame from the server is a protocol error carrying its reason.
    pub(crate) fn take_frame(&mut self) -> Result<Option<Header>, LoopError> {
        loop {
            if self.current.is_none() && self.end - self.start >= wire::HEADER_LEN {
                let bytes: &[u8; wire::HEADER_LEN] =
                    self.buf[self.start..self.start + wire::HEADER_LEN].try_into().expect("len");
                let header = Header::decode(bytes)
                    .map_err(|e| LoopError::Protocol(format!("bad response header: {e}")))?;
                let welcome = self.welcomes && header.kind == FrameKind::Welcome;
                if !welcome && !matches!(header.kind, FrameKind::Response | FrameKind::Error) {
                    return Err(LoopError::Protocol(format!(
                        "server sent a {:?} frame where a response was expected",
                        header.kind
                    )));
                }
                self.start += wire::HEADER_LEN;
                self.remaining = header.frame_len as usize - wire::HEADER_LEN;
                self.current = Some(header);
            }
            let Some(header) = self.current else { return Ok(None) };
            let take = self.remaining.min(self.end - self.start);
            if header.kind == FrameKind::Error && self.error_text.len() < 4096 {
                self.error_text.extend_from_slice(&self.buf[self.start..self.start + take]);
            }
            self.start += take;
            self.remaining -= take;
            if self.remaining > 0 {
                return Ok(None);
            }
            self.current = None;
            match header.kind {
                FrameKind::Error => {
                    let text = String::from_utf8_lossy(&self.error_text).into_owned();
                    return Err(LoopError::Protocol(format!("server refused: {text}")));
                }
                FrameKind::Welcome => continue,
                _ => return Ok(Some(header)),
            }
        }
    }
}
