"""The blocking API against five real servers: acquire, extend, release,
tokens, reentrancy, shared holds, permits."""

import asyncio
import threading
import time

import pytest

import redislock
from redislock import LockLost, NotAcquired, QuorumUnreachable, Redlock


def test_acquire_extend_release_and_tokens(servers, resource):
    rl = Redlock(servers.urls)
    first = rl.try_lock(resource, ttl=10.0)
    assert isinstance(first.token, int)
    assert first.resource == first.key == resource
    assert len(first.owner) == 40
    assert 0 < first.validity <= 10.0
    assert not first.lost and not first.kept and not first.shared
    assert first.ttl == 10.0
    assert len(first.outcomes) == 5
    # Every server granted and agrees on owner and token (after the write-back).
    infos = [s.lock_info(resource) for s in servers]
    assert all(i is not None and i["owner"] == first.owner and i["token"] == first.token for i in infos)

    first.extend(30.0)
    assert 10.0 < first.validity <= 30.0
    assert first.ttl == 30.0
    assert all(s.lock_info(resource)["pttl"] > 10_000 for s in servers)

    first.release()
    assert first.released and first.validity == 0
    assert servers.holders(resource) == []

    tokens = [first.token]
    for _ in range(3):
        lock = rl.try_lock(resource, ttl=10.0)
        tokens.append(lock.token)
        lock.release()
    assert tokens == sorted(set(tokens)), tokens
    assert servers.holders(resource) == []


def test_with_try_lock_releases_at_exit(servers, resource):
    rl = Redlock(servers.urls)
    with rl.try_lock(resource, ttl=10.0) as lock:
        assert len(servers.holders(resource)) == 5
    assert lock.released
    assert servers.holders(resource) == []


def test_lock_context_manager_keeps_and_releases(servers, resource):
    rl = Redlock(servers.urls)
    with rl.lock(resource, ttl=10.0, wait=5.0) as lock:
        assert lock.kept
        assert servers.holders(resource) == list(servers)
        lock.extend(10.0)
        lock.extend(1.0)  # shorter than before: the guard's ttl from now on
        assert lock.ttl == 1.0 and 0 < lock.validity <= 1.0
    assert lock.released
    assert servers.holders(resource) == []


def test_guard_keeps_the_lock_past_its_ttl(servers, resource):
    rl = Redlock(servers.urls, extend_fraction=0.25)
    lock = rl.guard(resource, ttl=1.0)
    try:
        # Time passing is the subject here: leases' worth.
        time.sleep(2.5)
        assert not lock.lost
        assert lock.validity > 0
        assert {i["owner"] for i in (s.lock_info(resource) for s in servers.holders(resource))} == {lock.owner}
        assert len(servers.holders(resource)) >= 3
    finally:
        lock.release()
    assert servers.holders(resource) == []


def test_not_acquired_while_held_names_every_server(servers, resource):
    rl = Redlock(servers.urls)
    holder = rl.try_lock(resource, ttl=10.0)
    try:
        with pytest.raises(NotAcquired) as caught:
            rl.try_lock(resource, ttl=10.0)
        e = caught.value
        assert not isinstance(e, QuorumUnreachable)
        assert e.resource == resource and e.attempts == 1 and e.kind == "held"
        assert e.reason == "held by another owner"
        assert sorted(server for server, _ in e.outcomes) == sorted(s.name for s in servers)
        assert all(outcome == "refused" for _, outcome in e.outcomes)
        assert resource in str(e)

        # Waiting for it runs out too, at the deadline: the head of the
        # line waits on the servers themselves for the whole of it.
        started = time.monotonic()
        with pytest.raises(NotAcquired) as caught:
            with rl.lock(resource, ttl=5.0, wait=0.3):
                pass
        assert time.monotonic() - started >= 0.28
        assert caught.value.attempts >= 1
        assert caught.value.kind == "held"
    finally:
        holder.release()


def test_waiter_gets_the_lock_when_released(servers, resource):
    rl = Redlock(servers.urls)
    holder = rl.try_lock(resource, ttl=10.0)
    got = []
    waiting = threading.Event()

    def wait_for_it():
        waiting.set()
        with rl.lock(resource, ttl=5.0, wait=30.0) as lock:
            got.append(lock.token)

    t = threading.Thread(target=wait_for_it)
    t.start()
    waiting.wait(5)
    holder.release()
    t.join(30)
    assert not t.is_alive()
    assert got and got[0] > holder.token


def test_reentrancy_releases_on_the_last_release(servers, resource):
    rl = Redlock(servers.urls)
    lock = rl.try_lock(resource, ttl=10.0)
    again = lock.reenter()
    assert lock.holds == again.holds == 2
    assert again.token == lock.token and again.owner == lock.owner
    # Reentrancy belongs to the holder, not the handle: a new acquisition
    # through the same Redlock is another owner, refused.
    with pytest.raises(NotAcquired):
        rl.try_lock(resource, ttl=10.0)

    lock.release()
    assert lock.released and not again.released
    assert again.holds == 1
    assert len(servers.holders(resource)) == 5
    with pytest.raises(redislock.LockReleased):
        lock.release()
    again.extend(10.0)  # the copies share the lock's state
    again.release()
    assert servers.holders(resource) == []


def test_reentrancy_of_a_kept_lock(servers, resource):
    rl = Redlock(servers.urls)
    with rl.lock(resource, ttl=10.0) as lock:
        inner = lock.reenter()
        assert inner.kept and inner.holds == 2
        inner.release()
        assert len(servers.holders(resource)) == 5
    assert servers.holders(resource) == []


def test_shared_holders_exclude_an_exclusive_one(servers, resource):
    rl = Redlock(servers.urls)
    reader1 = rl.try_lock(resource, ttl=10.0, shared=True)
    with rl.lock(resource, ttl=10.0, shared=True) as reader2:
        assert reader1.shared and reader2.shared
        assert reader1.owner != reader2.owner
        with pytest.raises(NotAcquired) as caught:
            rl.try_lock(resource, ttl=10.0)
        assert caught.value.kind == "held"
        reader1.release()
        with pytest.raises(NotAcquired):
            rl.try_lock(resource, ttl=10.0)
    writer = rl.try_lock(resource, ttl=10.0)
    with pytest.raises(NotAcquired):
        rl.try_lock(resource, ttl=10.0, shared=True)
    writer.release()


def test_semaphore_grants_limit_permits(servers, resource):
    rl = Redlock(servers.urls)
    a = rl.try_lock(resource, ttl=10.0, limit=2)
    b = rl.guard(resource, ttl=10.0, limit=2)
    assert a.resource == b.resource == resource
    assert {a.key, b.key} == {f"{resource}:permit:0", f"{resource}:permit:1"}
    with pytest.raises(NotAcquired) as caught:
        rl.try_lock(resource, ttl=10.0, limit=2)
    assert caught.value.resource == resource
    a.release()
    c = rl.try_lock(resource, ttl=10.0, limit=2)
    assert c.key == a.key
    assert c.token > a.token
    b.release()
    c.release()
    assert servers.holders(a.key) == servers.holders(b.key) == []


def test_script_mode_works_without_tokens(servers, resource):
    rl = Redlock(servers.urls, mode="script")
    with rl.try_lock(resource, ttl=10.0) as lock:
        assert lock.token is None
        assert servers[0].call("GET", resource).decode() == lock.owner
    assert servers[0].call("EXISTS", resource) == 0


def test_quorum_unreachable_when_three_of_five_are_down(own_servers, resource):
    rl = Redlock(own_servers.urls)
    lost = threading.Event()
    guard = rl.guard(resource, ttl=1.0, on_lost=lost.set)
    for s in own_servers[:3]:
        s.kill()
    # The guard's next extension reaches only two servers.
    assert lost.wait(10), "the guard did not report the loss"
    assert guard.lost and guard.validity == 0
    with pytest.raises(LockLost):
        guard.release()

    with pytest.raises(QuorumUnreachable) as caught:
        rl.try_lock(resource + ":other", ttl=5.0)
    e = caught.value
    assert isinstance(e, NotAcquired) and e.kind == "no_quorum"
    outcomes = dict(e.outcomes)
    assert len(outcomes) == 5
    assert [outcomes[s.name] for s in own_servers[:3]] == ["connection refused"] * 3
    assert all(outcomes[s.name].startswith("granted") for s in own_servers[3:])

    with pytest.raises(QuorumUnreachable):
        with rl.lock(resource + ":other", ttl=5.0, wait=0.5):
            pass


@pytest.mark.parametrize(
    "kwargs",
    [
        {"ttl": -1.0},
        {"ttl": 0.0},
        {"ttl": 0.0004},
        {"ttl": float("nan")},
        {"ttl": float("inf")},
        {"ttl": 1e300},
        {"ttl": 1.0, "shared": True, "limit": 2},
        {"ttl": 1.0, "limit": -1},
        {"ttl": 1.0, "limit": 0},
        {"ttl": 1.0, "limit": 100_000},
    ],
)
def test_bad_arguments_raise_value_errors(servers, resource, kwargs):
    rl = Redlock(servers.urls)
    with pytest.raises(ValueError):
        rl.try_lock(resource, **kwargs)
    with pytest.raises(ValueError):
        rl.guard(resource, **kwargs)
    assert servers.holders(resource) == []


def test_bad_wait_and_extend_arguments(servers, resource):
    rl = Redlock(servers.urls)
    for wait in (-1.0, float("nan")):
        with pytest.raises(ValueError):
            rl.lock(resource, ttl=1.0, wait=wait)
    with rl.try_lock(resource, ttl=5.0) as lock:
        for ttl in (-1.0, 0.0, float("nan")):
            with pytest.raises(ValueError):
                lock.extend(ttl)
    with pytest.raises(TypeError, match="argument 'ttl'"):
        rl.try_lock(resource, ttl=["10"])
    with pytest.raises(ValueError, match="time unit needed"):
        rl.try_lock(resource, ttl="10")


@pytest.mark.parametrize(
    "servers_arg, kwargs",
    [
        ([], {}),
        (["127.0.0.1:port"], {}),
        (["http://127.0.0.1:7001"], {}),
        (["redis://127.0.0.1:99999"], {}),
        ([f"redis://127.0.0.1:{p}" for p in (7001, 7002, 7003)], {"quorum": 4}),
        ([f"redis://127.0.0.1:{p}" for p in (7001, 7002, 7003)], {"quorum": 0}),
        (["redis://127.0.0.1:7001"] * 3, {}),
        (["redis://127.0.0.1:7001/0", "redis://127.0.0.1:7001/1", "redis://127.0.0.1:7002"], {}),
        (["redis://127.0.0.1:7001"], {"retry_delay": (0.3, 0.1)}),
    ],
)
def test_config_errors(servers_arg, kwargs):
    with pytest.raises(redislock.ConfigError) as caught:
        Redlock(servers_arg, **kwargs)
    assert isinstance(caught.value, ValueError)
    assert isinstance(caught.value, redislock.RedlockError)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"quorum": -1},
        {"request_timeout": 0.0},
        {"connect_timeout": -1.0},
        {"retry_count": -1},
        {"retry_delay": (-0.1, 0.1)},
        {"drift_factor": float("nan")},
        {"extend_fraction": 1.5},
        {"extend_fraction": 0.0},
        {"mode": "lua"},
    ],
)
def test_bad_settings_raise_value_errors(kwargs):
    with pytest.raises(ValueError):
        Redlock(["redis://127.0.0.1:7001"], **kwargs)
    with pytest.raises(ValueError):
        redislock.AsyncRedlock(["redis://127.0.0.1:7001"], **kwargs)


def test_servers_are_a_list_of_urls_or_one_url():
    one = Redlock("redis://127.0.0.1:7001")
    assert one.servers == ["127.0.0.1:7001"] and one.quorum == 1
    assert redislock.AsyncRedlock("redis://127.0.0.1:7001").quorum == 1
    with pytest.raises(TypeError, match="list of URLs"):
        Redlock([7001])
    with pytest.raises(TypeError, match="list of URLs"):
        Redlock(7001)
    # A cluster's seed list is one server, in one string.
    assert Redlock("redis+cluster://127.0.0.1:7001,127.0.0.1:7002").quorum == 1


def test_one_string_naming_several_servers_says_pass_a_list():
    urls = ["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"]
    fix = r'pass a list, \["redis://127.0.0.1:7001", "redis://127.0.0.1:7002", "redis://127.0.0.1:7003"\]'
    for joined in (",".join(urls), ", ".join(urls), " ".join(urls), ";".join(urls)):
        for cls in (Redlock, redislock.AsyncRedlock):
            with pytest.raises(redislock.ConfigError, match=fix) as caught:
                cls(joined)
            assert "port" not in str(caught.value), str(caught.value)
    # Inside a list, an entry naming two servers is refused as such.
    with pytest.raises(redislock.ConfigError, match="names 2 servers in one entry") as caught:
        Redlock([urls[0] + "," + urls[1], urls[2]])
    assert "port" not in str(caught.value), str(caught.value)
    assert Redlock(urls).quorum == 2


def test_a_hold_released_twice_raises_lock_released(servers, resource):
    rl = Redlock(servers.urls)
    lock = rl.try_lock(resource, ttl=10.0)
    lock.release()
    with pytest.raises(redislock.LockReleased, match="released already") as caught:
        lock.release()
    assert isinstance(caught.value, redislock.RedlockError)
    assert caught.value.resource == resource
    with pytest.raises(redislock.LockReleased):
        lock.extend(5.0)
    with rl.lock(resource, ttl=10.0) as kept:
        kept.release()
        with pytest.raises(redislock.LockReleased):
            kept.release()
    # The block's end does not release it again, nor raise.
    assert servers.holders(resource) == []

    async def twice():
        alock = await rl.asyncio().try_lock(resource, ttl=10.0)
        await alock.release()
        with pytest.raises(redislock.LockReleased):
            await alock.release()

    asyncio.run(twice())
    assert servers.holders(resource) == []


def test_a_zero_ttl_says_more_than_zero(servers, resource):
    rl = Redlock(servers.urls)
    for ttl in (0.0, -1.0):
        with pytest.raises(ValueError, match="> 0"):
            rl.try_lock(resource, ttl=ttl)


def test_an_alias_of_a_listed_server_is_a_config_error(servers, resource):
    a = servers[0]
    alias = a.url.replace("127.0.0.1", "localhost")
    rl = Redlock([a.url, alias, servers[1].url])
    with pytest.raises(redislock.ConfigError, match="same server") as caught:
        rl.try_lock(resource, ttl=5.0)
    assert not isinstance(caught.value, NotAcquired)
    with pytest.raises(redislock.ConfigError):
        with rl.lock(resource, ttl=5.0, wait=1.0):
            pass
    assert servers.holders(resource) == []


def test_a_ttl_over_max_ttl_is_a_config_error_not_an_outage(own_servers, resource):
    for s in own_servers:
        s.call("CONFIG", "SET", "redislock.max-ttl", "60000")
    rl = Redlock(own_servers.urls)
    with pytest.raises(redislock.ConfigError, match=r"redislock\.max-ttl \(60000 ms\)") as caught:
        rl.try_lock(resource, ttl=120.0)
    assert not isinstance(caught.value, QuorumUnreachable)
    # Refused at once, not retried for the whole wait.
    started = time.monotonic()
    with pytest.raises(redislock.ConfigError):
        with rl.lock(resource, ttl=120.0, wait=20.0):
            pass
    assert time.monotonic() - started < 10
    # An extension over it changes nothing: the lock is not lost.
    with rl.lock(resource, ttl=5.0, wait=5.0) as lock:
        with pytest.raises(redislock.ConfigError):
            lock.extend(120.0)
        assert not lock.lost and lock.ttl == 5.0
    assert own_servers.holders(resource) == []


def test_extend_inside_a_lock_block_is_the_new_ttl(servers, resource):
    rl = Redlock(servers.urls)
    with rl.lock(resource, ttl=10.0, wait=5.0) as lock:
        lock.extend(30.0)
        assert lock.ttl == 30.0 and lock.validity > 29
        # Past the guard's extensions at the old ttl (every 3.3 s), which
        # would have cut the lease back to 10 s.
        time.sleep(12)
        assert not lock.lost
        assert lock.validity > 15, lock.validity
        for s in servers:
            assert s.call("PTTL", resource) > 15_000, s.name
        # Shorter is allowed too; the guard keeps it at the new ttl.
        lock.extend(5.0)
        assert lock.ttl == 5.0 and lock.validity <= 5.0
        for s in servers:
            assert s.call("PTTL", resource) <= 5_000, s.name
    assert servers.holders(resource) == []


def test_unix_socket_members(servers, resource):
    """Servers given by their Unix sockets count like TCP ones; a socket
    and the TCP address of one server are one server, refused as listed
    twice (both are identified by run_id)."""
    rl = Redlock([s.socket_url for s in servers])
    with rl.lock(resource, ttl=5.0, wait=5.0) as lock:
        assert all(s.lock_info(resource)["owner"] == lock.owner for s in servers)
    assert servers.holders(resource) == []
    mixed = Redlock([servers[0].socket_url, servers[0].url, servers[1].url])
    with pytest.raises(redislock.ConfigError, match="are the same server"):
        mixed.try_lock(resource, ttl=5.0)


def test_resize_shrinks_a_held_semaphore_and_says_when_nobody_holds_it(servers, resource):
    rl = Redlock(servers.urls)
    free = rl.resize(resource, 2)
    assert free.held is False
    held = [rl.try_lock(resource, ttl=10.0, limit=3) for _ in range(3)]
    shrunk = rl.resize(resource, 1)
    assert shrunk.held is True
    assert shrunk.resized == len(servers.urls)
    assert len(shrunk.outcomes) == len(servers.urls)
    # Three hold, two above the new limit: nobody new, whatever limit asked.
    for limit in (3, 1):
        with pytest.raises(NotAcquired):
            rl.try_lock(resource, ttl=10.0, limit=limit)
    for lock in held:
        lock.release()
    with pytest.raises(ValueError):
        rl.resize(resource, 0)


def test_async_resize_grows_a_held_semaphore(servers, resource):
    async def main():
        rl = redislock.AsyncRedlock(servers.urls)
        first = await rl.try_lock(resource, ttl=10.0, limit=1)
        grown = await rl.resize(resource, 2)
        assert grown.held is True
        # A client still asking under the old limit learns the new one.
        second = await rl.try_lock(resource, ttl=10.0, limit=1)
        assert {first.key, second.key} == {f"{resource}:permit:0", f"{resource}:permit:1"}
        with pytest.raises(NotAcquired):
            await rl.try_lock(resource, ttl=10.0, limit=1)
        await first.release()
        await second.release()

    asyncio.run(main())
