"""tcp_info and BBR info read from real loopback connections."""

from __future__ import annotations

import datetime
import socket

import pytest

import tcptail


def exchange(sock: socket.socket, n: int = 20) -> int:
    sent = 0
    for i in range(n):
        msg = b"x" * (100 + i)
        sock.sendall(msg)
        got = b""
        while len(got) < len(msg):
            got += sock.recv(len(msg) - len(got))
        sent += len(msg)
    return sent


def test_tcp_info_fields_have_sane_values_and_units(echo_server):
    with tcptail.connect(*echo_server.address) as sock:
        sent = exchange(sock)
        info = tcptail.tcp_info(sock)
    assert isinstance(info, tcptail.TcpInfo)
    assert info.len >= 104
    assert info.state == "established"
    assert info.ca_state == "open"
    # Loopback: RTT well under a second, MTU 65536, MSS up to 65483.
    assert 0 < info.rtt_us < 1_000_000
    assert isinstance(info.rtt, datetime.timedelta)
    assert info.rtt == datetime.timedelta(microseconds=info.rtt_us)
    assert 0 < info.snd_mss_bytes <= 65535
    assert 1280 <= info.pmtu_bytes <= 65536
    assert info.snd_cwnd_segs >= 1
    assert info.rto_us >= 200_000  # the kernel's minimum RTO
    assert info.bytes_acked is not None and info.bytes_acked >= sent
    assert info.bytes_received == sent
    assert info.segs_out is not None and info.segs_out >= 20
    assert info.notsent_bytes == 0
    assert info.min_rtt is not None and info.min_rtt <= info.rtt + datetime.timedelta(milliseconds=5)
    assert info.delivery_rate_bytes_per_sec is not None
    assert info.as_dict()["rtt_us"] == info.rtt_us
    assert "rtt_us" in dir(info)
    with pytest.raises(AttributeError):
        info.no_such_field
    with pytest.raises(AttributeError):
        info.rtt_us = 1
    assert "established" in repr(info)


def test_tcp_info_on_unconnected_and_closed_sockets():
    with socket.socket() as sock:
        assert tcptail.tcp_info(sock).state == "close"
    sock = socket.socket()
    sock.close()
    with pytest.raises(OSError):
        tcptail.tcp_info(sock)


def test_tcp_info_accepts_a_file_descriptor(echo_server):
    with tcptail.connect(*echo_server.address) as sock:
        assert tcptail.tcp_info(sock.fileno()).state == "established"


def test_bbr_info_is_none_without_bbr(echo_server):
    # reno, not the trading profile's cubic nor the host's default: reno is built into every
    # kernel and allowed in every namespace, so this holds on any host.
    with tcptail.connect(*echo_server.address, congestion="reno", strict=True) as sock:
        assert tcptail.congestion_control(sock) == "reno"
        assert tcptail.bbr_info(sock) is None


def test_bbr_info_with_bbr(echo_server):
    with open("/proc/sys/net/ipv4/tcp_available_congestion_control") as f:
        if "bbr" not in f.read().split():
            pytest.skip("bbr is not loaded on this host (and loading it would change the host)")
    with tcptail.connect(*echo_server.address, congestion="bbr", strict=True) as sock:
        exchange(sock, 50)
        bbr = tcptail.bbr_info(sock)
    assert isinstance(bbr, tcptail.BbrInfo)
    assert bbr.bw_bytes_per_sec > 0
    assert bbr.min_rtt_us is not None and bbr.min_rtt_us < 1_000_000
    assert bbr.min_rtt == datetime.timedelta(microseconds=bbr.min_rtt_us)
    assert bbr.pacing_gain > 0 and bbr.cwnd_gain > 0
    assert bbr.phase in {"startup", "drain", "probe-bw-up", "probe-bw-down", "probe-bw-cruise", "probe-rtt", "unknown"}
