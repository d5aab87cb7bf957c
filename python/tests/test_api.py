"""The public API's contract: every public name documented, every error naming the option at
fault (profile, congestion control, buffer size, sender settings)."""

from __future__ import annotations

import inspect
import socket
from typing import Any, Iterator, Tuple

import pytest

import tcptail
from conftest import read_sysctl, row


def public_members() -> Iterator[Tuple[str, Any]]:
    """Every public name of the package and every public method/property of its classes."""
    for name in tcptail.__all__:
        obj = getattr(tcptail, name)
        yield name, obj
        if inspect.isclass(obj):
            for member_name, member in vars(obj).items():
                if member_name.startswith("_"):
                    continue
                if isinstance(member, (staticmethod, classmethod)):
                    member = member.__func__
                elif isinstance(member, property):
                    member = member.fget
                yield f"{name}.{member_name}", member


def test_all_names_exist():
    assert sorted(tcptail.__all__) == sorted(set(tcptail.__all__))
    for name in tcptail.__all__:
        assert hasattr(tcptail, name), name


def test_every_public_function_and_class_has_a_docstring():
    names = dict(public_members())
    # The walk reaches the Rust-defined class and the subclass methods too.
    assert {"Profile.load", "Profile.with_overrides", "Socket.recv", "BoundedWriter.drain"} <= set(names)
    missing = [name for name, obj in names.items() if not (getattr(obj, "__doc__", None) or "").strip()]
    assert missing == [], f"public names without a docstring: {missing}"


def test_unknown_profile_names_it_and_the_choices():
    with pytest.raises(tcptail.ProfileError) as info:
        tcptail.connect("127.0.0.1", 9, profile="tradng")
    message = str(info.value)
    assert "tradng" in message
    for builtin in tcptail.Profile.builtin_names():
        assert builtin in message, message


def test_bad_congestion_control_names_the_option():
    # A malformed name never reaches the kernel: ValueError naming `congestion`.
    with pytest.raises(ValueError, match=r"^`congestion`: 'CUBIC'.*did you mean 'cubic'"):
        tcptail.connect("127.0.0.1", 9, congestion="CUBIC")
    with pytest.raises(TypeError, match=r"^`congestion`: expected a name"):
        tcptail.connect("127.0.0.1", 9, congestion=5)


def test_unloaded_congestion_control_under_strict_names_tcp_congestion():
    # A well-formed name the kernel does not have: the kernel refuses it, strict raises. (As
    # root the kernel looks for a module tcp_<name>; none exists by this name, nothing loads.)
    with socket.socket() as sock:
        with pytest.raises(tcptail.ProfileMismatch) as info:
            tcptail.apply(sock, "trading", congestion="tcptailnocc", strict=True)
    err = info.value
    assert err.options == ("TCP_CONGESTION",)
    refused = row(err.report, "TCP_CONGESTION")
    assert refused.outcome == "not-available"
    # What this host has loaded, whatever it is (not a guess such as cubic).
    loaded = read_sysctl("net.ipv4.tcp_available_congestion_control").split()
    assert sorted(refused.detail["available"]) == sorted(loaded)
    assert str(err).startswith("profile 'trading' not applied as requested: TCP_CONGESTION: requested tcptailnocc")


def test_capped_buffer_under_strict_names_the_option_and_the_limit():
    wmem_max = int(read_sysctl("net.core.wmem_max"))
    # Twice the host's limit is capped on any host (SO_SNDBUF, not SO_SNDBUFFORCE).
    with socket.socket() as sock:
        with pytest.raises(tcptail.ProfileMismatch) as info:
            tcptail.apply(sock, "kernel-default", strict=True, send_buffer=2 * wmem_max)
    err = info.value
    assert err.options == ("SO_SNDBUF",)
    assert "SO_SNDBUF" in str(err) and f"net.core.wmem_max = {wmem_max}" in str(err)
    detail = row(err.report, "SO_SNDBUF").detail
    assert (detail["limit_name"], detail["limit"]) == ("net.core.wmem_max", wmem_max)
    assert "raise net.core.wmem_max" in detail["note"]


@pytest.mark.parametrize(
    ("make", "error", "option"),
    [
        (lambda s: tcptail.BoundedSender(s, mode="fast"), ValueError, "`mode`"),
        (lambda s: tcptail.BoundedSender(s, threshold="soon"), ValueError, "`threshold`"),
        (lambda s: tcptail.BoundedSender(s, mode="static-lowat"), ValueError, "`lowat`"),
        (lambda s: tcptail.FreshSender(s, max_age="soon"), ValueError, "`max_age`"),
        (lambda s: tcptail.FreshSender(s, max_wait=-1), ValueError, "`max_wait`"),
        (lambda s: tcptail.BoundedWriter(s, mode="fast"), ValueError, "`mode`"),
        (lambda s: tcptail.recv(s, 1, quickack="sometimes"), ValueError, "`quickack`"),
        (lambda s: tcptail.recv(s, 1, flags=socket.MSG_PEEK), ValueError, "`flags`"),
        (lambda s: tcptail.apply(s, "trading", no_delay=True), TypeError, "`no_delay`"),
        (lambda s: tcptail.apply(s, 42), TypeError, "`profile` must be"),  # type: ignore[arg-type]
    ],
)
def test_sender_and_receive_errors_name_the_option(make, error, option):
    with socket.socket() as sock:
        with pytest.raises(error) as info:
            make(sock)
    assert option in str(info.value)
