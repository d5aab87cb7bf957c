"""The README's tour of the tcptail Python package, runnable on its own against a loopback echo
server it starts itself: ``python python/examples/quickstart.py``.

It is also what ``scripts/test-python`` type-checks with ``mypy --strict`` (so the package's
hints cover every call here) and runs (so the calls work).
"""

from __future__ import annotations

import asyncio
import datetime
import socket
import threading
from typing import Optional

import tcptail


def echo_server() -> socket.socket:
    """A listener on 127.0.0.1 that echoes each connection in a thread until it closes."""
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=echo, args=(conn,), daemon=True).start()

    def echo(conn: socket.socket) -> None:
        with conn:
            try:
                while data := conn.recv(65536):
                    conn.sendall(data)
            except OSError:  # the client closed with echoes unread: nothing left to do
                pass

    threading.Thread(target=serve, daemon=True).start()
    return listener


def blocking(host: str, port: int) -> None:
    """Profiles, verification, QUICKACK re-arm, tcp_info and the blocking senders."""
    sock: tcptail.Socket = tcptail.connect(host, port, "trading", congestion="cubic", strict=True)
    with sock:
        report: Optional[tcptail.ApplyReport] = sock.report
        assert report is not None and report.is_clean(), str(report)
        for row in report:
            print(row.describe())
        sock.sendall(b"ping")
        data: bytes = sock.recv(4)  # re-arms TCP_QUICKACK (the profile's policy is "rearm")
        assert data == b"ping"
        info: tcptail.TcpInfo = tcptail.tcp_info(sock)
        rtt: datetime.timedelta = info.rtt
        print(f"state {info.state}, rtt {rtt}, cwnd {info.snd_cwnd_segs} segments")
        bbr: Optional[tcptail.BbrInfo] = tcptail.bbr_info(sock)
        print(f"congestion control {tcptail.congestion_control(sock)}, BBR info {bbr}")

        out = tcptail.FreshSender(sock, threshold=0.010, max_age=datetime.timedelta(milliseconds=20))
        out.offer(b"EURUSD 1.0841", key="EURUSD")
        replaced: bool = out.offer(b"EURUSD 1.0842", key="EURUSD")  # conflates the unsent one
        assert replaced
        written: int = out.pump()
        stats: tcptail.FreshSenderStats = out.stats()
        print(f"fresh sender: {written} written, {stats.merged} merged, {stats.dropped_stale} stale")
        assert tcptail.recv(sock, 64, quickack="rearm") == b"EURUSD 1.0842"

    with socket.create_connection((host, port)) as plain:
        applied: tcptail.ApplyReport = tcptail.apply(plain, "kernel-default", nodelay=True)
        sender = tcptail.BoundedSender(plain, mode="threshold", threshold="5ms")
        sender.sendall(b"x" * 1000)
        sender_stats: tcptail.SenderStats = sender.stats()
        print(f"{applied.profile}: bounded sender wrote {sender_stats.bytes_written} bytes")


async def with_asyncio(host: str, port: int) -> None:
    """The asyncio writer: ``await send`` returns once the queue drained within the bound."""
    sock = tcptail.connect(host, port, "trading")
    writer = tcptail.BoundedWriter(sock, threshold=0.010, max_age=0.050)
    await writer.send(b"tick 1", key="tick")
    stats: tcptail.FreshSenderStats = writer.stats()
    print(f"asyncio writer: {stats.messages_sent} sent, waited {writer.waits} times")
    sock.close()


def main() -> None:
    listener = echo_server()
    host, port = listener.getsockname()[:2]
    blocking(host, port)
    asyncio.run(with_asyncio(host, port))
    listener.close()


if __name__ == "__main__":
    main()
