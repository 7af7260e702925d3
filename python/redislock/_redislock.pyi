"""Type stubs of the native module; the docstrings are on the objects (help())."""

import os
from datetime import timedelta
from types import TracebackType
from typing import Any, AsyncIterator, Awaitable, Callable, Dict, Iterator, List, Literal, Optional, Sequence, Tuple, Type, TypedDict, Union

__version__: str
# The Content-Type of metrics_text(): "text/plain; version=0.0.4; charset=utf-8".
METRICS_CONTENT_TYPE: str

# One resource, or several locked all or nothing (each named once); a
# name of the stubs only.
_Resource = Union[str, List[str], Tuple[str, ...]]

# A duration: a number of seconds, a timedelta, or a string with its unit
# ("500ms", "10s", "2m"); a bare number above the argument's ceiling
# (docs/python.md, Durations) raises ValueError naming the unit.
_Duration = Union[float, timedelta, str]

# The base class of Lock and AsyncLock, with their properties; not made directly.
class _LockState:
    @property
    def resource(self) -> str: ...
    @property
    def resources(self) -> List[str]: ...
    @property
    def key(self) -> str: ...
    @property
    def owner(self) -> str: ...
    @property
    def token(self) -> Optional[int]: ...
    @property
    def ttl(self) -> float: ...
    @property
    def validity(self) -> float: ...
    @property
    def lost(self) -> bool: ...
    @property
    def loss_cause(self) -> Optional[str]: ...
    @property
    def released(self) -> bool: ...
    @property
    def shared(self) -> bool: ...
    @property
    def kept(self) -> bool: ...
    @property
    def holds(self) -> int: ...
    @property
    def outcomes(self) -> List[Tuple[str, str]]: ...
    # ["LOCK.FENCED", register, "<token>", *command], for the data
    # server's client: data.execute_command(*lock.fenced("reg", "SET", "k", "v")).
    def fenced(self, register: str, *command: Any) -> List[Any]: ...
    # ["LOCK.GUARD", key, owner, "<token>", command, *args].
    def guarded(self, command: Any, *args: Any) -> List[Any]: ...

# What Redlock.metrics() returns (docs/python.md, Metrics; times in seconds);
# names of the stubs only.
class _MetricsHistogram(TypedDict):
    # (upper bound in seconds, observations at most that long): cumulative,
    # smallest bound first, without +Inf (whose count is `count`).
    buckets: List[Tuple[float, int]]
    count: int
    sum: float

class _MetricsServer(TypedDict):
    index: int  # its place in the server list, from 0
    address: str
    round_trip: _MetricsHistogram
    # timeout, connection_refused, dns_failure, connect_timeout, unreachable,
    # auth_failed, tls_failed, module_missing, error
    errors: Dict[str, int]
    identity_refusals: int
    quarantines: int

class _Metrics(TypedDict):
    # kind (exclusive, shared, permits, set) -> outcome (granted, refused,
    # timed_out, error, cancelled) -> wait times; `count`: acquisitions.
    acquisitions: Dict[str, Dict[str, _MetricsHistogram]]
    holds: Dict[str, _MetricsHistogram]  # hold times by kind
    held: int
    waiting: int
    extensions_ok: int
    extensions_failed: int
    lost: Dict[str, int]  # expired, refused, unreachable, revoked
    servers: List[_MetricsServer]
    leading: int
    term: int
    leader_changes: int

# The base class of Redlock and AsyncRedlock: the client, its servers and
# settings (each keyword left out is the Rust client's default, shown
# here); not made directly.
class _Client:
    def __init__(
        self,
        servers: Union[str, Sequence[str]],
        *,
        quorum: Optional[int] = None,
        request_timeout: _Duration = 0.05,
        connect_timeout: _Duration = 0.2,
        retry_count: int = 3,
        retry_delay: Tuple[_Duration, _Duration] = (0.1, 0.2),
        drift_factor: float = 0.01,
        extend_fraction: float = 1 / 3,
        mode: Literal["module", "script"] = "module",
        release_on_disconnect: bool = False,
        lock_delay: Optional[_Duration] = None,
        ssl_ca_certs: Optional[Union[str, os.PathLike[str]]] = None,
        ssl_certfile: Optional[Union[str, os.PathLike[str]]] = None,
        ssl_keyfile: Optional[Union[str, os.PathLike[str]]] = None,
        ssl_cert_reqs: Optional[Union[Literal["required", "none"], int]] = None,
    ) -> None: ...
    @property
    def servers(self) -> List[str]: ...
    @property
    def quorum(self) -> int: ...
    # The client's counts now, as a dict (acquisitions, holds, held, servers, ...).
    def metrics(self) -> _Metrics: ...
    # The same in Prometheus's text format (0.0.4), served with METRICS_CONTENT_TYPE.
    def metrics_text(self) -> str: ...

class Redlock(_Client):
    def asyncio(self) -> AsyncRedlock: ...
    def ask(self, resource: str, message: Optional[str] = None) -> Asked: ...
    def resize(self, resource: str, limit: int) -> Resized: ...
    def try_lock(
        self, resource: _Resource, ttl: _Duration, *, shared: bool = False, limit: Optional[int] = None, permits: Optional[int] = None
    ) -> Lock: ...
    def lock(
        self,
        resource: _Resource,
        ttl: _Duration,
        wait: Optional[_Duration] = None,
        *,
        shared: bool = False,
        limit: Optional[int] = None,
        permits: Optional[int] = None,
        on_lost: Optional[Callable[[], object]] = None,
    ) -> LockRequest: ...
    def guard(
        self,
        resource: _Resource,
        ttl: _Duration,
        wait: Optional[_Duration] = None,
        *,
        shared: bool = False,
        limit: Optional[int] = None,
        permits: Optional[int] = None,
        on_lost: Optional[Callable[[], object]] = None,
    ) -> Lock: ...

class Lock(_LockState):
    def extend(self, ttl: Optional[_Duration] = None) -> None: ...
    def release(self) -> None: ...
    def reenter(self) -> Lock: ...
    def asks(self) -> Asks: ...
    def __enter__(self) -> Lock: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

class LockRequest:
    def __enter__(self) -> Lock: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

class AsyncRedlock(_Client):
    def try_lock(
        self, resource: _Resource, ttl: _Duration, *, shared: bool = False, limit: Optional[int] = None, permits: Optional[int] = None
    ) -> Awaitable[AsyncLock]: ...
    def lock(
        self,
        resource: _Resource,
        ttl: _Duration,
        wait: Optional[_Duration] = None,
        *,
        shared: bool = False,
        limit: Optional[int] = None,
        permits: Optional[int] = None,
        on_lost: Optional[Callable[[], object]] = None,
    ) -> AsyncLockRequest: ...
    def guard(
        self,
        resource: _Resource,
        ttl: _Duration,
        wait: Optional[_Duration] = None,
        *,
        shared: bool = False,
        limit: Optional[int] = None,
        permits: Optional[int] = None,
        on_lost: Optional[Callable[[], object]] = None,
    ) -> Awaitable[AsyncLock]: ...
    def watch(self, resource: str) -> AsyncWatch: ...
    def ask(self, resource: str, message: Optional[str] = None) -> Awaitable[Asked]: ...
    def resize(self, resource: str, limit: int) -> Awaitable[Resized]: ...

class Change:
    @property
    def kind(self) -> str: ...
    @property
    def token(self) -> int: ...
    @property
    def owner(self) -> str: ...
    @property
    def value(self) -> Optional[str]: ...

class AsyncWatch(AsyncIterator[Change]): ...

class AsyncLock(_LockState):
    def extend(self, ttl: Optional[_Duration] = None) -> Awaitable[None]: ...
    def release(self) -> Awaitable[None]: ...
    def reenter(self) -> AsyncLock: ...
    def asks(self) -> AsyncAsks: ...
    def __aenter__(self) -> Awaitable[AsyncLock]: ...
    def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Awaitable[bool]: ...

class AsyncLockRequest:
    def __aenter__(self) -> Awaitable[AsyncLock]: ...
    def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Awaitable[bool]: ...

class Asked:
    @property
    def answered(self) -> int: ...
    @property
    def holders(self) -> int: ...
    @property
    def outcomes(self) -> List[Tuple[str, str]]: ...

class Resized:
    @property
    def held(self) -> bool: ...
    @property
    def resized(self) -> int: ...
    @property
    def outcomes(self) -> List[Tuple[str, str]]: ...

class AskRequest:
    @property
    def resource(self) -> str: ...
    @property
    def message(self) -> Optional[str]: ...

class Asks(Iterator[AskRequest]): ...
class AsyncAsks(AsyncIterator[AskRequest]): ...

class Leader:
    def __init__(self, value: str, term: int) -> None: ...
    @property
    def value(self) -> str: ...
    @property
    def term(self) -> int: ...

# The base class of Election and AsyncElection, with their properties; not made directly.
class _ElectionState:
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> str: ...
    @property
    def ttl(self) -> float: ...
    @property
    def lock_delay(self) -> float: ...

class Election(_ElectionState):
    def __init__(
        self, redlock: Redlock, name: str, value: str, ttl: Optional[_Duration] = None, observe_interval: Optional[_Duration] = None
    ) -> None: ...
    def campaign(self, timeout: Optional[_Duration] = None, *, on_lost: Optional[Callable[[], object]] = None) -> Leadership: ...
    def leader(self) -> Optional[Leader]: ...
    def observe(self) -> Observer: ...

class AsyncElection(_ElectionState):
    def __init__(
        self, redlock: AsyncRedlock, name: str, value: str, ttl: Optional[_Duration] = None, observe_interval: Optional[_Duration] = None
    ) -> None: ...
    def campaign(self, timeout: Optional[_Duration] = None, *, on_lost: Optional[Callable[[], object]] = None) -> AsyncCampaign: ...
    def leader(self) -> Awaitable[Optional[Leader]]: ...
    def observe(self) -> AsyncObserver: ...

class AsyncCampaign(Awaitable[AsyncLeadership]):
    def __aenter__(self) -> Awaitable[AsyncLeadership]: ...
    def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Awaitable[bool]: ...

# The base class of Leadership and AsyncLeadership, with their properties; not made directly.
class _LeadershipState:
    @property
    def name(self) -> str: ...
    @property
    def term(self) -> int: ...
    @property
    def value(self) -> str: ...
    @property
    def lost(self) -> bool: ...
    @property
    def resigned(self) -> bool: ...

class Leadership(_LeadershipState):
    def proclaim(self, value: str) -> None: ...
    def resign(self) -> None: ...
    def __enter__(self) -> Leadership: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

class AsyncLeadership(_LeadershipState):
    def proclaim(self, value: str) -> Awaitable[None]: ...
    def resign(self) -> Awaitable[None]: ...
    def __aenter__(self) -> Awaitable[AsyncLeadership]: ...
    def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Awaitable[bool]: ...

# Iterators of Leader that never end by themselves.
class Observer(Iterator[Leader]): ...
class AsyncObserver(AsyncIterator[Leader]): ...

class Member:
    @property
    def owner(self) -> str: ...
    @property
    def token(self) -> int: ...
    @property
    def value(self) -> str: ...

# The base class of Group and AsyncGroup, with their properties; not made directly.
class _GroupState:
    @property
    def name(self) -> str: ...
    @property
    def resource(self) -> str: ...
    @property
    def ttl(self) -> float: ...

class Group(_GroupState):
    def __init__(self, redlock: Redlock, name: str, ttl: Optional[_Duration] = None) -> None: ...
    def join(self, value: str, timeout: Optional[_Duration] = None) -> Membership: ...
    def members(self) -> List[Member]: ...

class AsyncGroup(_GroupState):
    def __init__(self, redlock: AsyncRedlock, name: str, ttl: Optional[_Duration] = None) -> None: ...
    def join(self, value: str, timeout: Optional[_Duration] = None) -> Awaitable[AsyncMembership]: ...
    def members(self) -> Awaitable[List[Member]]: ...

# The base class of Membership and AsyncMembership, with their properties; not made directly.
class _MembershipState:
    @property
    def group(self) -> str: ...
    @property
    def token(self) -> int: ...
    @property
    def owner(self) -> str: ...
    @property
    def value(self) -> str: ...
    @property
    def lost(self) -> bool: ...
    @property
    def left(self) -> bool: ...

class Membership(_MembershipState):
    def proclaim(self, value: str) -> None: ...
    # Leaves; raises LockLost after leaving a lost membership (as
    # Leadership.resign does), LockReleased when it left already.
    def leave(self) -> None: ...
    def __enter__(self) -> Membership: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

class AsyncMembership(_MembershipState):
    def proclaim(self, value: str) -> Awaitable[None]: ...
    def leave(self) -> Awaitable[None]: ...
    def __aenter__(self) -> Awaitable[AsyncMembership]: ...
    def __aexit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> Awaitable[bool]: ...
