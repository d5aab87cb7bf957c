"""BoundedWriter: the bounded-delay sender for asyncio."""

from __future__ import annotations

import asyncio
import socket

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
