"""Loopback servers for the tcptail tests: real sockets on 127.0.0.1, served by threads."""

from __future__ import annotations

import socket
import threading
from typing import Callable, Iterator, Optional, Tuple

import pytest

import tcptail


class Server:
    """A listener on 127.0.0.1 whose connections are handled by `handler` in threads."""

    def __init__(self, handler: Callable[[socket.socket], object]) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.address: Tuple[str, int] = self.listener.getsockname()
        self.handler = handler
        self.stop = threading.Event()
        self.connections: list[socket.socket] = []
        self.received = bytearray()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except (socket.timeout, OSError):
                continue
            self.connections.append(conn)
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        try:
            self.handler(conn)
        except OSError:
            pass

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.listener.close()
        for c in self.connections:
            c.close()


def echo(conn: socket.socket) -> None:
    while data := conn.recv(65536):
        conn.sendall(data)
    conn.shutdown(socket.SHUT_WR)


@pytest.fixture
def echo_server() -> Iterator[Server]:
    server = Server(echo)
    yield server
    server.close()


@pytest.fixture
def sink_server() -> Iterator[Server]:
    """Reads and counts everything it is sent."""
    holder: dict = {}

    def sink(conn: socket.socket) -> None:
        while data := conn.recv(1 << 20):
            holder["server"].received += data

    server = Server(sink)
    holder["server"] = server
    yield server
    server.close()


@pytest.fixture
def stalled_server() -> Iterator[Server]:
    """Accepts and never reads, so the client's buffers fill up."""
    server = Server(lambda conn: server.stop.wait())
    yield server
    server.close()


def read_sysctl(name: str) -> str:
    with open("/proc/sys/" + name.replace(".", "/")) as f:
        return f.read().strip()


def row(report: Optional[tcptail.ApplyReport], option: str) -> tcptail.OptionReport:
    """The report's row for `option`, failing the test when the report or the row is missing."""
    assert report is not None, "no apply report"
    found = report.option(option)
    assert found is not None, f"no {option} row in {report}"
    return found
