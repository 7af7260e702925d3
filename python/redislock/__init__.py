"""Distributed locks over independent Redis servers (Redlock), with fencing
tokens from the redislock module.

The algorithm is the Rust crate ``redlock``'s, bound with PyO3:

    import redislock

    rl = redislock.Redlock(["redis://127.0.0.1:7001", "redis://127.0.0.1:7002",
                            "redis://127.0.0.1:7003"])
    with rl.lock("orders:42", ttl=10.0, wait=5.0) as lock:
        write(fencing_token=lock.token)

``AsyncRedlock`` offers the same with awaitables, for asyncio. ``Election``
(and ``AsyncElection``) elect a leader among candidates (docs/election.md);
``Group`` (and ``AsyncGroup``) list the members that joined with a value.
Times are seconds as floats. Errors derive from ``RedlockError``.
"""

from ._errors import ConfigError, LockLost, LockReleased, NotAcquired, QuorumUnreachable, RedlockError
from ._redislock import (
    METRICS_CONTENT_TYPE,
    AskRequest,
    Asked,
    Asks,
    AsyncAsks,
    AsyncCampaign,
    AsyncElection,
    AsyncGroup,
    AsyncLeadership,
    AsyncLock,
    AsyncLockRequest,
    AsyncMembership,
    AsyncObserver,
    AsyncRedlock,
    AsyncWatch,
    Change,
    Election,
    Group,
    Leader,
    Leadership,
    Lock,
    LockRequest,
    Member,
    Membership,
    Observer,
    Redlock,
    Resized,
    _Client,  # the base class of Redlock and AsyncRedlock: found here, not exported
    _ElectionState,  # the base class of Election and AsyncElection: found here, not exported
    _GroupState,  # the base class of Group and AsyncGroup: found here, not exported
    _LeadershipState,  # the base class of Leadership and AsyncLeadership: found here, not exported
    _LockState,  # the base class of Lock and AsyncLock: found here, not exported
    _MembershipState,  # the base class of Membership and AsyncMembership: found here, not exported
    __version__,
)

__all__ = [
    "METRICS_CONTENT_TYPE",
    "AskRequest",
    "Asked",
    "Asks",
    "AsyncAsks",
    "AsyncCampaign",
    "AsyncElection",
    "AsyncGroup",
    "AsyncLeadership",
    "AsyncLock",
    "AsyncLockRequest",
    "AsyncMembership",
    "AsyncObserver",
    "AsyncRedlock",
    "AsyncWatch",
    "Change",
    "ConfigError",
    "Election",
    "Group",
    "Leader",
    "Leadership",
    "Lock",
    "LockLost",
    "LockReleased",
    "LockRequest",
    "Member",
    "Membership",
    "NotAcquired",
    "Observer",
    "QuorumUnreachable",
    "Redlock",
    "Resized",
    "RedlockError",
    "__version__",
]
