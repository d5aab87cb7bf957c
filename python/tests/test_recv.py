"""recv re-arms TCP_QUICKACK; timeouts, non-blocking sockets and end of stream."""

from __future__ import annotations

import select
import socket
import time

import pytest

import tcptail

TCP_QUICKACK = 12


def quickack(sock: socket.socket) -> int:
    return sock.getsockopt(socket.IPPROTO_TCP, TCP_QUICKACK)


@pytest.fixture
def pair():
    """(tcptail socket with the trading profile, plain peer) on loopback."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        sock = tcptail.connect(*listener.getsockname())
        peer, _ = listener.accept()
    yield sock, peer
    sock.close()
    peer.close()


def interactive_then_send(sock: socket.socket, peer: socket.socket, msg: bytes) -> None:
    """Puts `sock` into delayed-ACK pingpong mode the way a service gets there (it replies
    right after a receive), then the peer sends `msg` and we wait until it is readable."""
    peer.sendall(b"request")
    assert socket.socket.recv(sock, 7, socket.MSG_WAITALL) == b"request"  # plain, no re-arm
    sock.sendall(b"reply!!")
    assert peer.recv(7, socket.MSG_WAITALL) == b"reply!!"
    peer.sendall(msg)
    select.select([sock], [], [], 5)


def attempt(sock, peer, policy: str) -> "int | None":
    """TCP_QUICKACK right after one receive with `policy`, or None when the socket was not in
    pingpong mode before it (the delayed-ACK timer fired meanwhile: the attempt proves nothing)."""
    interactive_then_send(sock, peer, b"tick")
    if quickack(sock) != 0:
        tcptail.recv(sock, 4, quickack="off")
        return None
    assert tcptail.recv(sock, 4, quickack=policy) == b"tick"
    return quickack(sock)


def first_clean(sock, peer, policy: str) -> int:
    for _ in range(50):
        got = attempt(sock, peer, policy)
        if got is not None:
            return got
    pytest.fail("the socket never entered pingpong mode (TCP_QUICKACK never read 0)")


def test_recv_rearms_quickack(pair):
    assert first_clean(pair[0], pair[1], "rearm") == 1


def test_recv_without_rearm_leaves_it_cleared(pair):
    assert first_clean(pair[0], pair[1], "off") == 0


def test_socket_recv_follows_the_profile(pair):
    sock, peer = pair
    assert sock.quickack == "rearm"
    for _ in range(50):
        interactive_then_send(sock, peer, b"tick")
        if quickack(sock) == 0:
            break
        sock.recv(4)
    else:
        pytest.fail("never in pingpong mode")
    buf = bytearray(8)
    assert sock.recv_into(buf) == 4 and buf[:4] == b"tick"
    assert quickack(sock) == 1
    interactive_then_send(sock, peer, b"tock")
    assert sock.recv(4) == b"tock"
    assert quickack(sock) == 1


def test_recv_non_blocking_raises_blocking_io_error(echo_server):
    with tcptail.connect(*echo_server.address) as sock:
        sock.setblocking(False)
        with pytest.raises(BlockingIOError):
            tcptail.recv(sock, 10)
        with pytest.raises(BlockingIOError):
            sock.recv(10)


def test_recv_dontwait_on_blocking_socket(echo_server):
    with tcptail.connect(*echo_server.address) as sock:
        with pytest.raises(BlockingIOError):
            tcptail.recv(sock, 10, flags=socket.MSG_DONTWAIT)


def test_recv_honours_the_socket_timeout(echo_server):
    with tcptail.connect(*echo_server.address, timeout=0.05) as sock:
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            sock.recv(10)
        assert time.monotonic() - start < 1.0


def test_recv_end_of_stream(echo_server):
    with tcptail.connect(*echo_server.address) as sock:
        sock.shutdown(socket.SHUT_WR)
        assert sock.recv(10) == b""


def test_recv_bad_policy_names_it(echo_server):
    with tcptail.connect(*echo_server.address) as sock:
        with pytest.raises(ValueError, match="quickack"):
            tcptail.recv(sock, 1, quickack="sometimes")
