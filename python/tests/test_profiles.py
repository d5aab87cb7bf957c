"""connect/apply: profiles applied before connect and verified, strict mode, errors."""

from __future__ import annotations

import socket
import time

import pytest

import tcptail
from conftest import Server, read_sysctl, row

TCP_CONGESTION = getattr(socket, "TCP_CONGESTION", 13)


def congestion(sock: socket.socket) -> str:
    return sock.getsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, 16).split(b"\0", 1)[0].decode()


def test_connect_trading_gives_cubic_and_nodelay(echo_server):
    with tcptail.connect(*echo_server.address) as sock:
        assert isinstance(sock, socket.socket)
        assert isinstance(sock, tcptail.Socket)
        # Read back by Python itself, not by tcptail.
        assert congestion(sock) == "cubic"
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 10
        report = sock.report
        assert report is not None and report.profile == "trading"
        assert row(report, "TCP_CONGESTION").ok
        assert row(report, "TCP_CONGESTION").actual == "cubic"
        assert row(report, "TCP_NODELAY").ok
        assert sock.quickack == "rearm"
        sock.sendall(b"ping")
        assert sock.recv(4) == b"ping"


def test_connect_overrides_map_onto_profile_fields(echo_server):
    with tcptail.connect(*echo_server.address, congestion="reno", nodelay=False, quickack="off") as sock:
        assert congestion(sock) == "reno"
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 0
        assert sock.quickack == "off"
        assert sock.report is not None and sock.report.option("TCP_QUICKACK") is None


def test_report_shows_capped_buffers():
    wmem_max = int(read_sysctl("net.core.wmem_max"))
    rmem_max = int(read_sysctl("net.core.rmem_max"))
    # Twice the host's limits: capped on any host.
    with socket.socket() as sock:
        report = tcptail.apply(sock, "kernel-default", send_buffer=2 * wmem_max, receive_buffer=2 * rmem_max)
    assert not report.is_clean()
    snd, rcv = row(report, "SO_SNDBUF"), row(report, "SO_RCVBUF")
    assert snd.outcome == "capped" and rcv.outcome == "capped"
    assert snd.detail["limit_name"] == "net.core.wmem_max"
    assert snd.detail["limit"] == wmem_max
    assert rcv.detail["limit_name"] == "net.core.rmem_max"
    assert rcv.detail["limit"] == rmem_max
    assert {o.option for o in report.problems()} == {"SO_SNDBUF", "SO_RCVBUF"}
    assert "capped" in str(report)


def test_strict_connect_raises_before_connecting(echo_server: Server) -> None:
    rmem_max = int(read_sysctl("net.core.rmem_max"))
    with pytest.raises(tcptail.ProfileMismatch, match="SO_RCVBUF"):
        tcptail.connect(*echo_server.address, "trading", strict=True, receive_buffer=2 * rmem_max)
    time.sleep(0.3)  # longer than the server's accept poll
    assert echo_server.connections == [], "strict connect reached the server"


def test_strict_clean_profile_passes(echo_server: Server) -> None:
    with tcptail.connect(*echo_server.address, "trading", strict=True) as sock:
        assert sock.report is not None and sock.report.is_clean()


def test_unknown_profile_raises_naming_it():
    with pytest.raises(tcptail.ProfileError, match="no-such-profile") as info:
        tcptail.Profile.load("no-such-profile")
    assert isinstance(info.value, tcptail.TcptailError)
    with pytest.raises(tcptail.ProfileError, match="tradng"):
        tcptail.connect("127.0.0.1", 9, profile="tradng")


def test_profile_file_errors_name_file_and_key(tmp_path):
    path = tmp_path / "exchange.toml"
    path.write_text('extends = "trading"\nkeepalive = { idle = "30s", interval = "3s", count = 0 }\n')
    with pytest.raises(tcptail.ProfileError, match=r"exchange.toml:2:.*keepalive.count"):
        tcptail.Profile.load(str(path))
    path.write_text('extends = "trading"\nnodelay = false\n')
    profile = tcptail.Profile.load(str(path))
    assert profile.name == "exchange"
    assert profile.to_dict()["nodelay"] is False


def test_unknown_override_raises_type_error_naming_it():
    with socket.socket() as sock:
        with pytest.raises(TypeError, match="no_delay"):
            tcptail.apply(sock, "trading", no_delay=True)


@pytest.mark.parametrize(
    ("overrides", "error", "name"),
    [
        ({"keepalive": (10, 3, 0)}, ValueError, "keepalive.count"),
        ({"keepalive": {"idle": 1.5, "interval": 3, "count": 3}}, ValueError, "keepalive.idle"),
        ({"congestion": "CUBIC"}, ValueError, "congestion"),
        ({"quickack": "always"}, ValueError, "quickack"),
        ({"send_buffer": "lots"}, ValueError, "send_buffer"),
        ({"send_buffer": -1}, ValueError, "send_buffer"),
        ({"nodelay": 1}, TypeError, "nodelay"),
        ({"user_timeout": "soon"}, ValueError, "user_timeout"),
    ],
)
def test_bad_override_values_name_the_option(overrides, error, name):
    with pytest.raises(error, match=name):
        tcptail.Profile.load("trading").with_overrides(**overrides)


def test_override_units_and_profile_objects():
    p = tcptail.Profile.load("kernel-default").with_overrides(
        name="mine",
        send_buffer="256KiB",
        receive_buffer="10mbit x 20ms",
        keepalive={"idle": "30s", "interval": 5, "count": 4},
        user_timeout=2.5,
        notsent_lowat=16384,
    )
    d = p.to_dict()
    assert d["name"] == "mine"
    assert d["send_buffer"] == 256 * 1024
    assert d["receive_buffer"] == {"bdp": "10mbit x 20ms"}
    assert d["keepalive"] == {"idle": "30s", "interval": "5s", "count": 4}
    with socket.socket() as sock:
        report = tcptail.apply(sock, p)
        assert report.profile == "mine"
        assert row(report, "SO_SNDBUF").ok, str(report)
        assert row(report, "TCP_USER_TIMEOUT").ok
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 2500
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 4
        assert row(report, "TCP_NOTSENT_LOWAT").actual is not None


def test_closed_socket_is_an_os_error():
    sock = socket.socket()
    sock.close()
    with pytest.raises(OSError, match="closed"):
        tcptail.apply(sock, "trading")
