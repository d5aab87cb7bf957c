//! A write deadline on one connection: a response must be written within the write timeout
//! from its first byte, so a client that reads slowly (or not at all) loses its own connection
//! and holds nothing longer than that.
//!
//! The deadline is armed by the first write after the client last sent something and disarmed
//! when the client sends again (HTTP/1 without pipelining: a new request means the previous
//! response is complete). Time spent computing a response is not counted; only the writing.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::{Instant, Sleep};

/// An I/O object whose writes fail with [`io::ErrorKind::TimedOut`] once a response has taken
/// longer than the timeout to write.
pub(super) struct TimedIo<S> {
    inner: S,
    timeout: Duration,
    deadline: Pin<Box<Sleep>>,
    armed: bool,
}

impl<S> TimedIo<S> {
    pub(super) fn new(inner: S, timeout: Duration) -> TimedIo<S> {
        TimedIo { inner, timeout, deadline: Box::pin(tokio::time::sleep(timeout)), armed: false }
    }

    fn arm(&mut self) {
        if !self.armed {
            self.armed = true;
            self.deadline.as_mut().reset(Instant::now() + self.timeout);
        }
    }

    /// Called when the inner write is pending: an error once the deadline has passed
    /// (registering the waker for it otherwise).
    fn pending_or_expired<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        if self.armed && self.deadline.as_mut().poll(cx).is_ready() {
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client did not read the response within the write timeout",
            )));
        }
        Poll::Pending
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for TimedIo<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.armed = false;
        }
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for TimedIo<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.arm();
        match Pin::new(&mut self.inner).poll_write(cx, buf) {
            Poll::Pending => self.pending_or_expired(cx),
            done => done,
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.arm();
        match Pin::new(&mut self.inner).poll_write_vectored(cx, bufs) {
            Poll::Pending => self.pending_or_expired(cx),
            done => done,
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.inner).poll_flush(cx) {
            Poll::Pending => self.pending_or_expired(cx),
            done => done,
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.arm();
        match Pin::new(&mut self.inner).poll_shutdown(cx) {
            Poll::Pending => self.pending_or_expired(cx),
            done => done,
        }
    }
}
