"""BoundedWriter: the bounded-delay sender for asyncio."""

from __future__ import annotations

import asyncio
import socket
import time

import tcptail


async def run_writer(mode: str) -> None:
    received = bytearray()
    done = asyncio.Event()
    expected = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1 << 16):
            received.extend(data)
            if len(received) >= expected:
                done.set()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    host, port = server.sockets[0].getsockname()[:2]
    sock = tcptail.connect(host, port, "trading")
    out = tcptail.BoundedWriter(sock, mode=mode, threshold=0.002)
    assert not sock.getblocking()

    # Many concurrent producers, each awaiting the bound.
    async def produce(n: int) -> None:
        for i in range(200):
            await out.send(b"%03d:" % n + b"x" * 4000)

    expected = 10 * 200 * 4004
    await asyncio.wait_for(asyncio.gather(*(produce(n) for n in range(10))), 30)
    await asyncio.wait_for(done.wait(), 30)
    stats = out.stats()
    assert stats.messages_sent == 2000
    assert stats.pending == 0
    assert stats.sender.bytes_written == expected
    assert len(received) == expected

    # Conflation: offers without awaiting, then one drain: only the last value per key goes.
    received.clear()
    done.clear()
    expected = 2 * 5
    for i in range(100):
        out.offer(b"k1=%02d" % (i % 100), key="k1")
        out.offer(b"k2=%02d" % (i % 100), key="k2")
    await asyncio.wait_for(out.drain(), 10)
    await asyncio.wait_for(done.wait(), 10)
    assert bytes(received) == b"k1=99k2=99"
    assert out.stats().merged == 198
    sock.close()
    server.close()
    await server.wait_closed()


def test_bounded_writer_threshold():
    asyncio.run(run_writer("threshold"))


def test_bounded_writer_adaptive_lowat():
    asyncio.run(run_writer("adaptive-lowat"))


MESSAGE_SIZE = 1000


def message(seq: int) -> bytes:
    body = b"%06d|" % seq
    return body + b"x" * (MESSAGE_SIZE - len(body) - 1) + b"\n"


async def run_slow_reader(mode: str) -> None:
    """A reader far slower than the writer: the bound must hold writes back (``waits``), and
    messages that aged past ``max_age`` while held back must be dropped, counted, and never
    reach the reader, while every message written arrives whole and in order."""
    received = bytearray()
    reader_done = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # About 400 KB/s: 2 KB every 5 ms.
        while data := await reader.read(2048):
            received.extend(data)
            await asyncio.sleep(0.005)
        writer.close()
        reader_done.set()

    # A small receive buffer on the listener, inherited by the accepted socket, so the
    # reader's window stays small and the unsent data piles up in the writer's socket.
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    server = await asyncio.start_server(handle, sock=listener)
    host, port = listener.getsockname()[:2]
    sock = tcptail.connect(host, port, "kernel-default")
    # A bound of 2 us: on loopback the governor's rate (cwnd / srtt, pacing or delivery rate)
    # can read 15 GB/s even while the reader's window holds the flow to ~400 KB/s, so a
    # millisecond bound (or a LOWAT of 2 x bound x rate) would admit the whole burst into the
    # socket; 2 us x 15 GB/s is 30 kB, which the slow reader leaves unsent within milliseconds.
    # max_age from the reader's pace, not the host's speed: 600 kB take the reader about
    # 1.5 s, so messages held back for a fifth of that must go stale, while offering them all
    # (milliseconds, tens on a loaded host) stays far inside it. A 20 ms max_age let a loaded
    # host age out all but the first few messages before any write could wait.
    max_age = 0.3
    out = tcptail.BoundedWriter(sock, mode=mode, threshold="2us", max_age=max_age, conflate=False)

    total = 600  # 600 kB: about 1.5 s at the reader's pace, five times max_age
    offering = time.monotonic()
    for seq in range(total):
        out.offer(message(seq))  # key None: never conflated
    offered_in = time.monotonic() - offering
    assert offered_in < max_age / 2, f"offering {total} messages took {offered_in:.3f} s"
    await asyncio.wait_for(out.drain(), 30)
    stats = out.stats()
    sock.close()
    await asyncio.wait_for(reader_done.wait(), 30)
    server.close()
    await server.wait_closed()

    # The bound held writes back: the governor itself in threshold mode; the kernel (POLLOUT
    # withheld while notsent >= TCP_NOTSENT_LOWAT) in adaptive-lowat mode, which only the
    # writer's own count sees.
    assert out.waits > 0, f"the writer never waited: {stats}"
    if mode == "threshold":
        assert stats.sender.waits > 0, f"the governor never held a write back: {stats}"
    else:
        assert stats.sender.lowat is not None and stats.sender.lowat_sets > 0, stats
    assert stats.dropped_stale > 0, f"nothing went stale behind a slow reader: {stats}"
    assert stats.merged == 0 and stats.pending == 0
    assert stats.pushed == total
    assert stats.messages_sent + stats.dropped_stale == total, stats
    assert stats.sender.bytes_written == stats.messages_sent * MESSAGE_SIZE
    # What arrived: whole messages, in order, exactly the ones counted as sent.
    assert len(received) == stats.messages_sent * MESSAGE_SIZE
    seqs = [int(received[i : i + 6]) for i in range(0, len(received), MESSAGE_SIZE)]
    assert all(received[i + MESSAGE_SIZE - 1] == ord("\n") for i in range(0, len(received), MESSAGE_SIZE))
    assert seqs == sorted(set(seqs)), "messages arrived out of order or twice"
    assert received[: MESSAGE_SIZE] == message(seqs[0])


def test_bounded_writer_slow_reader_threshold():
    asyncio.run(run_slow_reader("threshold"))


def test_bounded_writer_slow_reader_adaptive_lowat():
    asyncio.run(run_slow_reader("adaptive-lowat"))
