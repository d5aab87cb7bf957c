"""Type stubs for ``tcptail._native``, the PyO3 extension (private: use ``tcptail``)."""

import datetime
from typing import Any, Optional, Union, final

__all__ = [
    "TcptailError",
    "ProfileError",
    "Profile",
    "apply_profile",
    "recv",
    "tcp_info",
    "bbr_info",
    "congestion_control",
    "BoundedSender",
    "FreshSender",
]

_Seconds = Union[float, int, str, datetime.timedelta]

class TcptailError(Exception):
    """Base class of every error tcptail raises itself (OS errors stay OSError)."""

class ProfileError(TcptailError):
    """A profile could not be loaded: unknown built-in name, unreadable or invalid TOML file."""

@final
class Profile:
    """A socket profile (congestion control, NODELAY, QUICKACK policy, buffers, keepalive, ...)."""

    @staticmethod
    def load(name_or_path: str) -> Profile:
        """A built-in profile (``trading``, ``throughput``, ``kernel-default``) or a TOML file.

        Raises :class:`ProfileError` naming the profile, file, line and key at fault."""
    @staticmethod
    def builtin_names() -> list[str]: ...
    def with_overrides(
        self,
        *,
        name: str = ...,
        congestion: Optional[str] = ...,
        nodelay: Optional[bool] = ...,
        quickack: Optional[str] = ...,
        bdp: Optional[str] = ...,
        send_buffer: Union[int, str, None] = ...,
        receive_buffer: Union[int, str, None] = ...,
        keepalive: Union[tuple[_Seconds, _Seconds, int], dict[str, Any], None] = ...,
        user_timeout: Optional[_Seconds] = ...,
        reuse_address: Optional[bool] = ...,
        reuse_port: Optional[bool] = ...,
        busy_poll: Optional[_Seconds] = ...,
        notsent_lowat: Union[int, str, None] = ...,
        priority: Optional[int] = ...,
    ) -> Profile:
        """A copy with fields replaced (``None`` unsets). ``TypeError``/``ValueError`` name the
        option at fault."""
    @property
    def name(self) -> str: ...
    @property
    def quickack(self) -> str: ...
    def to_dict(self) -> dict[str, Any]: ...
    def advisories(self) -> list[tuple[str, str]]: ...

def apply_profile(sock: Any, profile: Union[str, Profile]) -> dict[str, Any]: ...
def recv(sock: Any, n: int, quickack: str = "rearm", dontwait: bool = False) -> bytes: ...
def tcp_info(sock: Any) -> dict[str, Any]: ...
def bbr_info(sock: Any) -> Optional[dict[str, Any]]: ...
def congestion_control(sock: Any) -> str: ...

@final
class BoundedSender:
    """Keeps the delay of unsent data in a socket's send buffer under a bound."""

    def __new__(
        cls,
        sock: Any,
        *,
        mode: str = "threshold",
        threshold: Optional[_Seconds] = None,
        lowat: Optional[int] = None,
        max_wait: Optional[_Seconds] = None,
    ) -> BoundedSender: ...
    def send(self, data: bytes) -> int: ...
    def send_all(self, data: bytes) -> None: ...
    def ready(self) -> None: ...
    @property
    def retry_after(self) -> Optional[datetime.timedelta]: ...
    @property
    def socket(self) -> Any: ...
    def stats(self) -> dict[str, Any]: ...

@final
class FreshSender:
    """A freshness queue (conflation by key, drop-stale) in front of a BoundedSender."""

    def __new__(
        cls,
        sock: Any,
        *,
        mode: str = "threshold",
        threshold: Optional[_Seconds] = None,
        lowat: Optional[int] = None,
        max_wait: Optional[_Seconds] = None,
        conflate: bool = True,
        max_age: Optional[_Seconds] = None,
    ) -> FreshSender: ...
    def offer(self, data: bytes, key: Union[int, str, bytes, None] = None) -> bool: ...
    def pump(self) -> int: ...
    def send(self, data: bytes, key: Union[int, str, bytes, None] = None) -> int: ...
    @property
    def pending(self) -> int: ...
    @property
    def retry_after(self) -> Optional[datetime.timedelta]: ...
    @property
    def socket(self) -> Any: ...
    def stats(self) -> dict[str, Any]: ...
