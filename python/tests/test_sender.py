"""The bounded-delay senders over real loopback sockets."""

from __future__ import annotations

import datetime
import socket
import time

import pytest

import tcptail


def wait_for(cond, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.01)
    return False


@pytest.mark.parametrize("mode", ["threshold", "adaptive-lowat", "none"])
def test_bounded_sender_keeps_working_and_reports_stats(sink_server, mode):
    with socket.create_connection(sink_server.address) as sock:
        sender = tcptail.BoundedSender(sock, mode=mode, threshold=0.005)
        total = 0
        for i in range(2000):
            msg = bytes([i % 256]) * 1000
            sender.sendall(msg)
            total += len(msg)
        stats = sender.stats()
        assert isinstance(stats, tcptail.SenderStats)
        assert stats.bytes_written == total
        assert stats.writes >= 2000
        assert isinstance(stats.time_blocked, datetime.timedelta)
        if mode == "threshold":
            assert stats.info_reads > 0
            assert stats.estimate is not None
            assert stats.estimate.rate_bytes_per_sec > 0
            assert isinstance(stats.estimate.delay, datetime.timedelta)
        if mode == "adaptive-lowat":
            assert stats.lowat is not None and stats.lowat_sets >= 1
        assert sender.send(b"tail") == 4
        assert sender.socket is sock
    assert wait_for(lambda: len(sink_server.received) == total + 4)


def test_non_blocking_would_block_surfaces_as_blocking_io_error(stalled_server):
    with socket.create_connection(stalled_server.address) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        sock.setblocking(False)
        sender = tcptail.BoundedSender(sock, mode="threshold", threshold="1ms")
        chunk = b"x" * 16384
        with pytest.raises(BlockingIOError):
            for _ in range(10_000):
                sender.send(chunk)
        stats = sender.stats()
        assert stats.bytes_written > 0
        # Every WouldBlock is counted, whether the governor held the write back (retry_after
        # says when) or the kernel's buffer was full (EAGAIN from the write itself).
        assert stats.would_block >= 1 and stats.waits >= stats.would_block
        if sender.retry_after is not None:
            assert sender.retry_after > datetime.timedelta(0)


def test_static_lowat_needs_a_size_and_bad_modes_are_named(sink_server):
    with socket.create_connection(sink_server.address) as sock:
        with pytest.raises(ValueError, match="lowat"):
            tcptail.BoundedSender(sock, mode="static-lowat")
        with pytest.raises(ValueError, match="mode"):
            tcptail.BoundedSender(sock, mode="fast")
        with pytest.raises(ValueError, match="threshold"):
            tcptail.BoundedSender(sock, threshold="soon")
        sender = tcptail.BoundedSender(sock, mode="static-lowat", lowat=16384)
        assert sock.getsockopt(socket.IPPROTO_TCP, 25) == 16384  # TCP_NOTSENT_LOWAT


def test_sender_on_a_closed_socket_is_an_os_error(sink_server):
    sock = socket.create_connection(sink_server.address)
    sender = tcptail.BoundedSender(sock)
    sock.close()
    with pytest.raises(OSError):
        sender.send(b"x")


def test_fresh_sender_conflates_by_key(sink_server):
    with socket.create_connection(sink_server.address) as sock:
        sender = tcptail.FreshSender(sock, threshold=0.01)
        assert sender.offer(b"price=1", key="EURUSD") is False
        for i in range(2, 101):
            assert sender.offer(b"price=%d" % i, key="EURUSD") is True
        sender.offer(b"other", key=7)
        sender.offer(b"a")
        sender.offer(b"b")  # key None never conflates
        assert sender.pending == 4
        assert sender.pump() == 4
        stats = sender.stats()
        assert isinstance(stats, tcptail.FreshSenderStats)
        assert (stats.pushed, stats.merged, stats.messages_sent, stats.pending) == (103, 99, 4, 0)
    assert wait_for(lambda: bytes(sink_server.received) == b"price=100otherab")


def test_fresh_sender_drops_stale(sink_server):
    with socket.create_connection(sink_server.address) as sock:
        sender = tcptail.FreshSender(sock, max_age=datetime.timedelta(milliseconds=5))
        sender.offer(b"old", key=1)
        time.sleep(0.02)
        sender.send(b"new", key=2)
        stats = sender.stats()
        assert stats.dropped_stale == 1
        assert stats.messages_sent == 1
    assert wait_for(lambda: bytes(sink_server.received) == b"new")


def test_fresh_sender_rejects_bad_keys(sink_server):
    with socket.create_connection(sink_server.address) as sock:
        sender = tcptail.FreshSender(sock)
        with pytest.raises(TypeError, match="key"):
            sender.offer(b"x", key=1.5)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="data"):
            sender.offer("text")  # type: ignore[arg-type]
