"""The exceptions of the redislock package.

Defined in Python so that ConfigError can also be a ValueError; the native
module raises them with positional arguments (message first), so every
class accepts its attributes positionally too.
"""

from typing import List, Optional, Sequence, Tuple

Outcomes = List[Tuple[str, str]]


class RedlockError(Exception):
    """Base class of the errors of redislock (a server's unexpected reply too)."""

    __module__ = "redislock"

    def __reduce__(self):
        # Keep the attributes across pickling (multiprocessing, logging queues).
        return (type(self), self.args, self.__dict__)


class NotAcquired(RedlockError):
    """No quorum granted the lock within the attempts or the wait allowed.

    Attributes: ``resource``; ``attempts``; ``reason`` (why the last attempt
    got no quorum, as text) and ``kind`` (the same as a stable name:
    ``held``, ``quarantine``, ``no_quorum``, ``no_validity``); ``outcomes``,
    each server's answer to the last attempt as ``(server, outcome)``.
    """

    __module__ = "redislock"

    def __init__(
        self,
        message: str,
        resource: str = "",
        attempts: int = 0,
        reason: str = "",
        kind: str = "",
        outcomes: Sequence[Tuple[str, str]] = (),
    ) -> None:
        super().__init__(message)
        self.resource = resource
        self.attempts = attempts
        self.reason = reason
        self.kind = kind
        self.outcomes: Outcomes = list(outcomes)


class QuorumUnreachable(NotAcquired):
    """Fewer servers than a quorum answered at all (down, timed out, or
    erring), so nothing was decided about the lock: unlike a plain
    NotAcquired, it is not known to be held. A subclass of NotAcquired, so
    ``except NotAcquired`` covers both; catch this one first to tell them
    apart. ``kind`` is ``no_quorum``.
    """

    __module__ = "redislock"


class LockLost(RedlockError):
    """The lock is lost: an extension reached no quorum, or its validity ran
    out. Another client may hold it now, with a larger fencing token.

    Attributes: ``resource``; ``outcomes``, each server's answer to the
    failed extension as ``(server, outcome)`` (empty when no request was
    made).
    """

    __module__ = "redislock"

    def __init__(self, message: str, resource: str = "", outcomes: Optional[Sequence[Tuple[str, str]]] = None) -> None:
        super().__init__(message)
        self.resource = resource
        self.outcomes: Outcomes = list(outcomes or ())


class ConfigError(RedlockError, ValueError):
    """A configuration the client refuses: a bad server URL, an impossible
    quorum, a semaphore limit out of range, one server listed twice (by
    spelling, or found to be one server by its run_id). Also a request the
    servers refuse as configured, named by its cause: a ttl over their
    redislock.max-ttl, an owner over max-owner-len, WRONGTYPE, NOPERM or
    failed authentication, READONLY, no module. Also a ValueError, like the
    errors of bad arguments."""

    __module__ = "redislock"


class LockReleased(RedlockError, RuntimeError):
    """This hold was released already: a second ``release()``, or an
    ``extend()`` after the release. Nothing was sent to the servers (as
    Node's ``LockReleasedError``). Also a RuntimeError, which it was before
    it had a class of its own.

    Attributes: ``resource``.
    """

    __module__ = "redislock"

    def __init__(self, message: str, resource: str = "") -> None:
        super().__init__(message)
        self.resource = resource
