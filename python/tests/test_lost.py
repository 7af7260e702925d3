"""Losing a lock: a holder paused past its lease, a guard whose lock is
taken from under it."""

import sys
import threading
import time

import pytest

from redislock import LockLost, Redlock


def test_paused_holder_loses_to_a_larger_token(servers, resource):
    rl = Redlock(servers.urls)
    other = Redlock(servers.urls)
    paused = rl.try_lock(resource, ttl=0.5)
    # The pause is what is tested (a GC pause, a stopped VM): wall time
    # beyond the lease, with nothing to wait for.
    time.sleep(0.8)
    assert paused.lost
    assert paused.validity == 0
    newer = other.guard(resource, ttl=10.0, wait=10.0)
    try:
        assert newer.token > paused.token
        with pytest.raises(LockLost) as caught:
            paused.extend()
        assert caught.value.resource == resource
        with pytest.raises(LockLost):
            paused.release()
        # The late release did not touch the new holder's lock.
        assert len(servers.holders(resource)) == 5
        assert all(s.lock_info(resource)["owner"] == newer.owner for s in servers)
    finally:
        newer.release()


def steal(servers, resource, thief):
    """Ends the lock on a majority (DEL), as an operator or a failover
    would, and lets `thief` take it there."""
    for s in servers[:3]:
        assert s.call("DEL", resource) == 1
    return thief.try_lock(resource, ttl=10.0)


def test_extension_of_a_stolen_lock_fails(servers, resource):
    rl = Redlock(servers.urls)
    lock = rl.try_lock(resource, ttl=10.0)
    thief = steal(servers, resource, Redlock(servers.urls))
    try:
        assert thief.token > lock.token
        with pytest.raises(LockLost) as caught:
            lock.extend()
        outcomes = dict(caught.value.outcomes)
        assert sorted(outcomes.values()) == ["ok", "ok", "refused", "refused", "refused"]
        assert lock.lost and lock.validity == 0
        with pytest.raises(LockLost):
            lock.release()
    finally:
        thief.release()


def test_guard_reports_a_stolen_lock_and_raises_at_exit(servers, resource):
    lost = threading.Event()
    ttl = 1.5
    rl = Redlock(servers.urls)
    with pytest.raises(LockLost):
        with rl.lock(resource, ttl=ttl, on_lost=lost.set) as lock:
            assert not lock.lost
            thief = steal(servers, resource, Redlock(servers.urls))
            assert thief.token > lock.token
            # The next extension, at most ttl/3 away, reaches two servers only.
            assert lost.wait(ttl + 10), "on_lost was not called"
            assert lock.lost
            assert lock.validity == 0
            with pytest.raises(LockLost):
                lock.extend()
    try:
        # Leaving the block released nothing of the thief's.
        assert [s.lock_info(resource)["owner"] for s in servers[:3]] == [thief.owner] * 3
    finally:
        thief.release()


def test_body_exception_wins_over_lock_lost(servers, resource):
    rl = Redlock(servers.urls)
    lost = threading.Event()
    with pytest.raises(KeyError):
        with rl.lock(resource, ttl=1.0, on_lost=lost.set):
            thief = steal(servers, resource, Redlock(servers.urls))
            assert lost.wait(10)
            raise KeyError("from the block")
    thief.release()


def test_on_lost_exceptions_do_not_break_the_guard(servers, resource, monkeypatch):
    # Nobody can catch the callback's exception: it goes to
    # sys.unraisablehook, as Python does with such errors.
    reported = []
    hook_called = threading.Event()

    def hook(unraisable):
        reported.append(unraisable.exc_value)
        hook_called.set()

    monkeypatch.setattr(sys, "unraisablehook", hook)

    def on_lost():
        raise RuntimeError("a broken callback")

    rl = Redlock(servers.urls)
    lock = rl.guard(resource, ttl=1.0, on_lost=on_lost)
    thief = steal(servers, resource, Redlock(servers.urls))
    assert hook_called.wait(10)
    assert [str(e) for e in reported] == ["a broken callback"]
    assert lock.lost
    with pytest.raises(LockLost):
        lock.release()
    thief.release()


def test_an_on_lost_callback_may_lock_again(servers, resource):
    # The callback runs on a thread of the runtime's blocking pool, inside
    # the runtime's context, while the binding's own thread drives it: a
    # blocking call from there must still be served.
    took = []
    done = threading.Event()
    rl = Redlock(servers.urls)

    def on_lost():
        try:
            again = rl.try_lock(resource + ":after", ttl=5.0)
            took.append(again.token is not None)
            again.release()
        except BaseException as e:  # noqa: BLE001 -- reported by the assertion
            took.append(e)
        done.set()

    lock = rl.guard(resource, ttl=1.0, on_lost=on_lost)
    thief = steal(servers, resource, Redlock(servers.urls))
    try:
        assert done.wait(10)
        assert took == [True]
        assert lock.lost
    finally:
        thief.release()


def test_a_revoked_guard_is_lost_as_revoked(servers, resource):
    # LOCK.REVOKE on every server, as `redlock revoke` sends it: the next
    # extension is answered REVOKED, and the lock says why it was lost.
    lost = threading.Event()
    rl = Redlock(servers.urls)
    lock = rl.guard(resource, ttl=1.5, on_lost=lost.set)
    assert lock.loss_cause is None
    for s in servers:
        token, ended = s.call("LOCK.REVOKE", resource)
        assert token > lock.token and ended == 1
    assert lost.wait(10), "on_lost was not called"
    assert lock.lost and lock.loss_cause == "revoked"
    assert rl.metrics()["lost"]["revoked"] == 1
    with pytest.raises(LockLost):
        lock.release()


def test_a_stolen_plain_lock_is_lost_as_refused(servers, resource):
    rl = Redlock(servers.urls)
    lock = rl.try_lock(resource, ttl=10.0)
    thief = steal(servers, resource, Redlock(servers.urls))
    try:
        with pytest.raises(LockLost):
            lock.extend()
        assert lock.loss_cause == "refused"
    finally:
        thief.release()
