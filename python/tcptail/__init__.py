"""tcptail: TCP tail latency from Python, over the same Rust library as the ``tcptail`` binary.

- :func:`connect` returns a :class:`Socket` (a standard :class:`socket.socket` subclass) with a
  profile applied *before* connecting and verified with ``getsockopt``; :func:`apply` does the
  same for a socket the program made itself. Both give an :class:`ApplyReport` (requested vs
  actual per option: applied, capped, not available, unsupported, ...) and, with
  ``strict=True``, raise :class:`ProfileMismatch` naming every option not as requested.
- :func:`recv` (and :meth:`Socket.recv`) re-arm ``TCP_QUICKACK`` after each receive;
  :func:`tcp_info` returns a :class:`TcpInfo` whose field names carry their units;
  :func:`bbr_info` returns BBR's model and phase.
- :class:`BoundedSender` and :class:`FreshSender` keep the delay of unsent data in the socket
  under a bound (with conflation and drop-stale in ``FreshSender``) for blocking code;
  :class:`BoundedWriter` does it for :mod:`asyncio`.

Errors: :class:`TcptailError` is the base of tcptail's own errors (:class:`ProfileError`,
:class:`ProfileMismatch`); the kernel's errors stay :class:`OSError` (``EAGAIN`` is
:class:`BlockingIOError`); a bad profile override is a :class:`TypeError` or
:class:`ValueError` naming it.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import select
import socket
from typing import Any, Dict, Iterator, Mapping, Optional, Sequence, Tuple, Union

from . import _native
from ._native import ProfileError, Profile, TcptailError

__all__ = [
    "ApplyReport",
    "BbrInfo",
    "BoundedSender",
    "BoundedWriter",
    "Estimate",
    "FreshSender",
    "FreshSenderStats",
    "OptionReport",
    "Profile",
    "ProfileError",
    "ProfileMismatch",
    "SenderStats",
    "Socket",
    "TcpInfo",
    "TcptailError",
    "apply",
    "bbr_info",
    "congestion_control",
    "connect",
    "recv",
    "tcp_info",
]

ProfileLike = Union[str, Profile]


# --------------------------------------------------------------------------- apply reports


@dataclasses.dataclass(frozen=True)
class OptionReport:
    """One socket option: what was requested, what ``getsockopt`` reads back, the verdict.

    ``outcome`` is ``"applied"``, ``"capped"``, ``"not-available"``, ``"not-allowed"``,
    ``"unsupported"``, ``"failed"`` or ``"mismatch"``; ``detail`` holds the outcome's data
    (``limit_name``/``limit`` for a cap, ``available``, ``allowed``, ``error``).
    """

    option: str
    requested: str
    actual: Optional[str]
    outcome: str
    detail: Mapping[str, Any]
    note: Optional[str]

    @property
    def ok(self) -> bool:
        """True when the option was applied exactly as requested."""
        return self.outcome == "applied"

    def describe(self) -> str:
        """One line: ``SO_SNDBUF: requested 16MiB, actual 8MiB: capped (net.core.wmem_max ...)``."""
        text = f"{self.option}: requested {self.requested}, actual {self.actual or '?'}: {self.outcome}"
        if self.outcome == "capped":
            text += f" by {self.detail.get('limit_name')} = {self.detail.get('limit')}"
        elif self.outcome == "failed":
            text += f" ({self.detail.get('error')})"
        elif self.outcome == "not-available":
            text += f" (available: {', '.join(self.detail.get('available', []))})"
        elif self.outcome == "not-allowed":
            text += f" (allowed: {', '.join(self.detail.get('allowed', []))})"
        return text

    @classmethod
    def _from_dict(cls, d: Mapping[str, Any]) -> "OptionReport":
        outcome = dict(d["outcome"])
        kind = outcome.pop("kind")
        return cls(d["option"], d["requested"], d.get("actual"), kind, outcome, d.get("note"))


@dataclasses.dataclass(frozen=True)
class ApplyReport:
    """Requested vs actual for every option a profile set on one socket."""

    profile: str
    options: Tuple[OptionReport, ...]

    def is_clean(self) -> bool:
        """True when every option was applied exactly as requested."""
        return all(o.ok for o in self.options)

    def problems(self) -> Tuple[OptionReport, ...]:
        """The options not applied exactly as requested."""
        return tuple(o for o in self.options if not o.ok)

    def option(self, name: str) -> Optional[OptionReport]:
        """The row for a socket option (``"SO_RCVBUF"``), or ``None`` if the profile did not set it."""
        return next((o for o in self.options if o.option == name), None)

    def __iter__(self) -> Iterator[OptionReport]:
        return iter(self.options)

    def __str__(self) -> str:
        lines = [f"profile {self.profile}:"]
        lines += [f"  {o.describe()}" for o in self.options]
        return "\n".join(lines)

    @classmethod
    def _from_dict(cls, d: Mapping[str, Any]) -> "ApplyReport":
        return cls(d["profile"], tuple(OptionReport._from_dict(o) for o in d["options"]))


class ProfileMismatch(TcptailError):
    """``strict=True`` and some options were not applied as requested.

    ``report`` is the full :class:`ApplyReport`; ``options`` names the options at fault.
    """

    def __init__(self, report: ApplyReport) -> None:
        self.report = report
        self.options: Tuple[str, ...] = tuple(o.option for o in report.problems())
        details = "; ".join(o.describe() for o in report.problems())
        super().__init__(f"profile '{report.profile}' not applied as requested: {details}")


# --------------------------------------------------------------------------- profiles


def _profile(profile: ProfileLike, overrides: Mapping[str, Any]) -> Profile:
    if isinstance(profile, Profile):
        p = profile
    elif isinstance(profile, str):
        p = Profile.load(profile)
    else:
        raise TypeError(f"`profile` must be a name, a path or a tcptail.Profile, got {type(profile).__name__}")
    return p.with_overrides(**overrides) if overrides else p


def apply(sock: Any, profile: ProfileLike = "trading", *, strict: bool = False, **overrides: Any) -> ApplyReport:
    """Applies ``profile`` to ``sock`` (any socket object with ``fileno()``) and verifies it.

    Apply before ``connect``/``listen`` where it matters (buffer sizes fix the window scale in
    the SYN). ``overrides`` replace profile fields (``congestion="bbr"``, ``nodelay=True``,
    ``quickack="rearm"``, ``send_buffer="4MiB"``, ...). With ``strict=True`` raises
    :class:`ProfileMismatch` unless every option was applied exactly.
    """
    p = _profile(profile, overrides)
    report = ApplyReport._from_dict(_native.apply_profile(sock, p))
    if isinstance(sock, Socket):
        sock.profile, sock.report = p, report
    if strict and not report.is_clean():
        raise ProfileMismatch(report)
    return report


class Socket(socket.socket):
    """A :class:`socket.socket` that remembers its profile and re-arms ``TCP_QUICKACK`` in
    :meth:`recv`/:meth:`recv_into` when the profile's policy is ``"rearm"``.

    ``report`` is the :class:`ApplyReport` of the last :func:`apply` (``None`` before).
    """

    profile: Optional[Profile]
    report: Optional[ApplyReport]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.profile = None
        self.report = None

    @property
    def quickack(self) -> str:
        """The QUICKACK policy :meth:`recv` follows (``"off"`` until a profile is applied)."""
        return self.profile.quickack if self.profile is not None else "off"

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        """Receives at most ``bufsize`` bytes, as :meth:`socket.socket.recv`, then re-arms
        ``TCP_QUICKACK`` when the profile's policy is ``"rearm"`` (see :func:`recv`). With
        ``flags`` it is the plain :meth:`socket.socket.recv`, without a re-arm."""
        if flags:
            return super().recv(bufsize, flags)
        return recv(self, bufsize, quickack=self.quickack)

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        """Receives into ``buffer`` (at most ``nbytes``, default its length) and returns the
        count, re-arming ``TCP_QUICKACK`` as :meth:`recv` does; with ``flags``, the plain
        :meth:`socket.socket.recv_into`."""
        if flags:
            return super().recv_into(buffer, nbytes, flags)
        view = memoryview(buffer).cast("B")
        data = recv(self, nbytes or len(view), quickack=self.quickack)
        view[: len(data)] = data
        return len(data)

    def tcp_info(self) -> "TcpInfo":
        """:func:`tcp_info` of this socket."""
        return tcp_info(self)


def connect(
    host: str,
    port: int,
    profile: ProfileLike = "trading",
    *,
    strict: bool = False,
    timeout: Optional[float] = None,
    **overrides: Any,
) -> Socket:
    """Connects to ``host:port`` with ``profile`` applied before the SYN and verified.

    Returns a :class:`Socket` whose ``report`` is the :class:`ApplyReport`. With ``strict=True``
    raises :class:`ProfileMismatch` (before connecting) unless every option was applied
    exactly. ``timeout`` is the connect timeout and stays set on the socket, as with
    :func:`socket.create_connection`.
    """
    p = _profile(profile, overrides)
    last: Optional[OSError] = None
    for family, kind, proto, _, address in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        sock = Socket(family, kind, proto)
        try:
            apply(sock, p, strict=strict)
            sock.settimeout(timeout)
            sock.connect(address)
            return sock
        except OSError as e:
            sock.close()
            last = e
        except BaseException:
            sock.close()
            raise
    raise last if last is not None else OSError(f"getaddrinfo returned nothing for {host}:{port}")


# --------------------------------------------------------------------------- receive, info


def recv(sock: Any, n: int, *, quickack: str = "rearm", flags: int = 0) -> bytes:
    """Receives at most ``n`` bytes, then sets ``TCP_QUICKACK`` again when ``quickack`` is
    ``"rearm"`` and bytes arrived (the kernel clears it on its own). Honours the socket's
    timeout (:class:`TimeoutError`) and non-blocking mode (:class:`BlockingIOError`); the GIL is
    released while waiting. Returns ``b""`` at end of stream.
    """
    if flags and flags != socket.MSG_DONTWAIT:
        raise ValueError("`flags`: only socket.MSG_DONTWAIT is supported")
    timeout = sock.gettimeout() if hasattr(sock, "gettimeout") else None
    if timeout is not None and timeout > 0 and not flags:
        ready, _, _ = select.select([sock], [], [], timeout)
        if not ready:
            raise TimeoutError("timed out")
    return _native.recv(sock, n, quickack, bool(flags))


class TcpInfo:
    """``struct tcp_info`` as read from the kernel. Field names carry their unit: ``_us``
    microseconds, ``_ms`` milliseconds, ``_bytes``, ``_segs`` segments, ``_bytes_per_sec``.
    Fields this kernel does not return are ``None``. ``len`` is the bytes the kernel returned.

    Convenience: :attr:`rtt`, :attr:`min_rtt`, :attr:`send_queue_delay` as
    :class:`datetime.timedelta`; :meth:`as_dict` for everything.
    """

    __slots__ = ("_fields",)

    # The fields (read through __getattr__; annotated for type checkers).
    len: int
    state: str
    ca_state: str
    retransmits: int
    probes: int
    backoff: int
    options: int
    snd_wscale: int
    rcv_wscale: int
    delivery_rate_app_limited: Optional[bool]
    fastopen_client_fail: Optional[int]
    rto_us: int
    ato_us: int
    snd_mss_bytes: int
    rcv_mss_bytes: int
    unacked_segs: int
    sacked_segs: int
    lost_segs: int
    retrans_segs: int
    fackets_segs: int
    last_data_sent_ms: int
    last_ack_sent_ms: int
    last_data_recv_ms: int
    last_ack_recv_ms: int
    pmtu_bytes: int
    rcv_ssthresh_bytes: int
    rtt_us: int
    rttvar_us: int
    snd_ssthresh_segs: int
    snd_cwnd_segs: int
    advmss_bytes: int
    reordering_segs: int
    rcv_rtt_us: int
    rcv_space_bytes: int
    total_retrans_segs: int
    pacing_rate_bytes_per_sec: Optional[int]
    max_pacing_rate_bytes_per_sec: Optional[int]
    bytes_acked: Optional[int]
    bytes_received: Optional[int]
    segs_out: Optional[int]
    segs_in: Optional[int]
    notsent_bytes: Optional[int]
    min_rtt_us: Optional[int]
    data_segs_in: Optional[int]
    data_segs_out: Optional[int]
    delivery_rate_bytes_per_sec: Optional[int]
    busy_time_us: Optional[int]
    rwnd_limited_us: Optional[int]
    sndbuf_limited_us: Optional[int]
    delivered_segs: Optional[int]
    delivered_ce_segs: Optional[int]
    bytes_sent: Optional[int]
    bytes_retrans: Optional[int]
    dsack_dups: Optional[int]
    reord_seen: Optional[int]
    rcv_ooo_segs: Optional[int]
    snd_wnd_bytes: Optional[int]
    rcv_wnd_bytes: Optional[int]
    rehashes: Optional[int]
    total_rto: Optional[int]
    total_rto_recoveries: Optional[int]
    total_rto_time_ms: Optional[int]
    received_ce_segs: Optional[int]
    delivered_e1_bytes: Optional[int]
    delivered_e0_bytes: Optional[int]
    delivered_ce_bytes: Optional[int]
    received_e1_bytes: Optional[int]
    received_e0_bytes: Optional[int]
    received_ce_bytes: Optional[int]
    accecn_fail_mode: Optional[int]
    accecn_opt_seen: Optional[int]

    def __init__(self, fields: Mapping[str, Any]) -> None:
        fields = dict(fields)
        for key in ("state", "ca_state"):
            value = fields.get(key)
            if isinstance(value, dict):  # {"unknown": n}
                fields[key] = f"unknown({next(iter(value.values()))})"
        object.__setattr__(self, "_fields", fields)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._fields[name]
        except KeyError:
            raise AttributeError(f"TcpInfo has no field {name!r}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("TcpInfo is read-only")

    def __dir__(self) -> Sequence[str]:
        return sorted(set(super().__dir__()) | set(self._fields))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TcpInfo) and other._fields == self._fields

    def __repr__(self) -> str:
        return (
            f"TcpInfo(state={self.state!r}, rtt_us={self.rtt_us}, snd_cwnd_segs={self.snd_cwnd_segs}, "
            f"notsent_bytes={self.notsent_bytes}, ...)"
        )

    def as_dict(self) -> Dict[str, Any]:
        """Every field, as a new dict."""
        return dict(self._fields)

    @property
    def rtt(self) -> datetime.timedelta:
        """The smoothed RTT."""
        return datetime.timedelta(microseconds=self.rtt_us)

    @property
    def min_rtt(self) -> Optional[datetime.timedelta]:
        """The minimum RTT seen (``None`` before Linux 4.6)."""
        us = self.min_rtt_us
        return None if us is None else datetime.timedelta(microseconds=us)

    @property
    def send_queue_delay(self) -> Optional[datetime.timedelta]:
        """Estimated wait of the unsent bytes: ``notsent / rate`` (``None`` without a rate)."""
        delay: Optional[datetime.timedelta] = self._fields.get("send_queue_delay")
        return delay


def tcp_info(sock: Any) -> TcpInfo:
    """Reads ``TCP_INFO`` (length-aware) from ``sock``."""
    return TcpInfo(_native.tcp_info(sock))


@dataclasses.dataclass(frozen=True)
class BbrInfo:
    """BBR's model: bandwidth estimate, min RTT, gains as ratios and the phase they imply
    (``startup``, ``drain``, ``probe-bw-up``, ``probe-bw-down``, ``probe-bw-cruise``,
    ``probe-rtt``, ``unknown``)."""

    bw_bytes_per_sec: int
    min_rtt_us: Optional[int]
    pacing_gain: float
    cwnd_gain: float
    phase: str

    @property
    def min_rtt(self) -> Optional[datetime.timedelta]:
        """The min RTT, ``None`` before the first sample."""
        return None if self.min_rtt_us is None else datetime.timedelta(microseconds=self.min_rtt_us)


def bbr_info(sock: Any) -> Optional[BbrInfo]:
    """BBR's ``tcp_bbr_info`` for ``sock``, or ``None`` when it does not use BBR."""
    d = _native.bbr_info(sock)
    return None if d is None else BbrInfo(**d)


def congestion_control(sock: Any) -> str:
    """The congestion control ``sock`` uses, read back with ``getsockopt(TCP_CONGESTION)``."""
    return _native.congestion_control(sock)


# --------------------------------------------------------------------------- bounded senders


@dataclasses.dataclass(frozen=True)
class Estimate:
    """A send-queue delay estimate: ``notsent_bytes / rate_bytes_per_sec``."""

    delay: datetime.timedelta
    notsent_bytes: int
    rate_bytes_per_sec: int
    rate_source: str


@dataclasses.dataclass(frozen=True)
class SenderStats:
    """What a bounded sender did so far."""

    bytes_written: int
    writes: int
    time_blocked: datetime.timedelta
    waits: int
    would_block: int
    kernel_refusals: int
    info_reads: int
    lowat_sets: int
    lowat: Optional[int]
    lowat_unsupported: bool
    estimate: Optional[Estimate]

    @classmethod
    def _from_dict(cls, d: Mapping[str, Any]) -> "SenderStats":
        d = dict(d)
        d["estimate"] = None if d["estimate"] is None else Estimate(**d["estimate"])
        return cls(**d)


@dataclasses.dataclass(frozen=True)
class FreshSenderStats:
    """A :class:`FreshSender`'s counters: the socket side and the queue side."""

    sender: SenderStats
    pushed: int
    merged: int
    dropped_stale: int
    popped: int
    queued: int
    messages_sent: int
    pending: int

    @classmethod
    def _from_dict(cls, d: Mapping[str, Any]) -> "FreshSenderStats":
        d = dict(d)
        d["sender"] = SenderStats._from_dict(d["sender"])
        return cls(**d)


Seconds = Union[float, int, str, datetime.timedelta]


class BoundedSender:
    """Keeps the delay of unsent data in ``sock``'s send buffer under a bound.

    ``mode``: ``"threshold"`` (wait while ``notsent / rate`` exceeds ``threshold``, default
    10 ms), ``"adaptive-lowat"`` (``TCP_NOTSENT_LOWAT`` kept at ``threshold x rate``),
    ``"static-lowat"`` (``lowat`` bytes) or ``"none"``. On a blocking socket :meth:`send`
    waits (GIL released); on a non-blocking one it raises :class:`BlockingIOError` and
    :attr:`retry_after` says when to retry. The socket is borrowed, never closed.
    """

    def __init__(
        self,
        sock: socket.socket,
        *,
        mode: str = "threshold",
        threshold: Optional[Seconds] = None,
        lowat: Optional[int] = None,
        max_wait: Optional[Seconds] = None,
    ) -> None:
        self._inner = _native.BoundedSender(sock, mode=mode, threshold=threshold, lowat=lowat, max_wait=max_wait)
        self._sock = sock

    @property
    def socket(self) -> socket.socket:
        """The wrapped socket."""
        return self._sock

    def send(self, data: bytes) -> int:
        """Waits for the bound, writes once; returns the bytes written."""
        return self._inner.send(data)

    def sendall(self, data: bytes) -> None:
        """Waits for the bound once, then writes all of ``data``."""
        self._inner.send_all(data)

    def ready(self) -> None:
        """Returns once a write may go; :class:`BlockingIOError` on a non-blocking socket."""
        self._inner.ready()

    @property
    def retry_after(self) -> Optional[datetime.timedelta]:
        """After :class:`BlockingIOError` in threshold mode: when to retry."""
        return self._inner.retry_after

    def stats(self) -> SenderStats:
        """Counters and the latest estimate."""
        return SenderStats._from_dict(self._inner.stats())


Key = Union[int, str, bytes, None]


class FreshSender:
    """A conflating, drop-stale queue in front of a :class:`BoundedSender`.

    :meth:`offer` queues a message by key (a newer message for the same key replaces an unsent
    one; ``None`` never conflates); :meth:`pump` writes while the bound admits. Messages older
    than ``max_age`` are dropped instead of sent. A message is written whole once started.
    """

    def __init__(
        self,
        sock: socket.socket,
        *,
        mode: str = "threshold",
        threshold: Optional[Seconds] = None,
        lowat: Optional[int] = None,
        max_wait: Optional[Seconds] = None,
        conflate: bool = True,
        max_age: Optional[Seconds] = None,
    ) -> None:
        self._inner = _native.FreshSender(
            sock, mode=mode, threshold=threshold, lowat=lowat, max_wait=max_wait, conflate=conflate, max_age=max_age
        )
        self._sock = sock

    @property
    def socket(self) -> socket.socket:
        """The wrapped socket."""
        return self._sock

    def offer(self, data: bytes, key: Key = None) -> bool:
        """Queues ``data``; ``True`` when it replaced an unsent message for ``key``."""
        return self._inner.offer(data, key)

    def pump(self) -> int:
        """Writes queued messages while the bound admits; returns how many were completed."""
        return self._inner.pump()

    def send(self, data: bytes, key: Key = None) -> int:
        """:meth:`offer` then :meth:`pump`."""
        return self._inner.send(data, key)

    @property
    def pending(self) -> int:
        """Messages not yet fully written."""
        return self._inner.pending

    @property
    def retry_after(self) -> Optional[datetime.timedelta]:
        """After :meth:`pump` stopped on the threshold: when to try again (``None``: when writable)."""
        return self._inner.retry_after

    def stats(self) -> FreshSenderStats:
        """Counters of the socket side and the queue side."""
        return FreshSenderStats._from_dict(self._inner.stats())


class BoundedWriter:
    """The :class:`FreshSender` for :mod:`asyncio`: ``await writer.send(data, key)`` returns
    once everything queued has been written (or merged, or dropped as stale) within the bound.

    The socket is switched to non-blocking mode. While the bound holds writes back the writer
    sleeps for the governor's ``retry_after`` (threshold mode) or waits for writability with
    ``loop.add_writer`` (LOWAT modes, and when the kernel's buffer is full). Several tasks may
    :meth:`offer`/:meth:`send` concurrently; one drains at a time.
    """

    def __init__(self, sock: socket.socket, **options: Any) -> None:
        sock.setblocking(False)
        self._sock = sock
        self._sender = FreshSender(sock, **options)
        self._lock = asyncio.Lock()
        self._waits = 0

    @property
    def waits(self) -> int:
        """How often :meth:`drain` waited because a write could not go: a sleep for the
        governor's ``retry_after`` (threshold mode, also counted in ``stats().sender.waits``)
        or a wait for writability (the kernel withholding it under ``TCP_NOTSENT_LOWAT`` in the
        LOWAT modes, or a full send buffer)."""
        return self._waits

    @property
    def sender(self) -> FreshSender:
        """The underlying :class:`FreshSender`."""
        return self._sender

    def offer(self, data: bytes, key: Key = None) -> bool:
        """Queues ``data`` without waiting; ``True`` when it replaced an unsent message."""
        return self._sender.offer(data, key)

    async def send(self, data: bytes, key: Key = None) -> None:
        """Queues ``data`` and waits until the queue has drained within the bound."""
        self._sender.offer(data, key)
        await self.drain()

    async def drain(self) -> None:
        """Waits until every queued message is written, merged or dropped."""
        async with self._lock:
            while True:
                self._sender.pump()
                if self._sender.pending == 0:
                    return
                retry = self._sender.retry_after
                self._waits += 1
                if retry is not None:
                    await asyncio.sleep(retry.total_seconds())
                else:
                    await self._writable()

    async def _writable(self) -> None:
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        fd = self._sock.fileno()

        def writable() -> None:
            if not fut.done():
                fut.set_result(None)

        loop.add_writer(fd, writable)
        try:
            # Bounded: the governor re-reads tcp_info at least every max_wait anyway.
            await asyncio.wait_for(fut, timeout=0.05)
        except asyncio.TimeoutError:
            pass
        finally:
            loop.remove_writer(fd)

    def stats(self) -> FreshSenderStats:
        """The sender's counters."""
        return self._sender.stats()
