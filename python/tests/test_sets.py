"""Several resources in one lock (a list or tuple, all or nothing, one
token, released together) and several permits of a semaphore in one hold
(`permits=`), through five real servers."""

import asyncio
import threading
import time

import pytest

from redislock import NotAcquired, Redlock


def test_a_list_is_taken_all_or_nothing_with_one_token(servers, resource):
    a, b = f"{resource}:a", f"{resource}:b"
    rl = Redlock(servers.urls)
    earlier = rl.try_lock(a, ttl=10.0)
    earlier.release()
    other = rl.try_lock(b, ttl=10.0)

    with pytest.raises(NotAcquired) as caught:
        rl.try_lock([a, b], ttl=10.0)
    assert caught.value.resource == f"{a}, {b}"
    # A refused list takes nothing: its free member stays free everywhere.
    assert servers.holders(a) == []
    with pytest.raises(NotAcquired):
        with rl.lock((a, b), ttl=10.0, wait=0.3):
            pass
    assert servers.holders(a) == []
    other.release()

    with rl.lock([a, b], ttl=10.0, wait=5.0) as lock:
        assert lock.resources == [a, b]
        assert lock.resource == f"{a}, {b}"
        assert lock.token > max(earlier.token, other.token)
        held = {name: servers.holders(name) for name in (a, b)}
        assert len(held[a]) >= 3 and held[a] == held[b], "both members on the same servers"
        for name in (a, b):
            assert {s.lock_info(name)["owner"] for s in held[name]} == {lock.owner}
        with pytest.raises(NotAcquired):
            rl.try_lock(a, ttl=10.0)
    # Released together.
    assert servers.holders(a) == servers.holders(b) == []


def test_a_tuple_and_the_async_client_take_a_list_too(servers, resource):
    a, b = f"{resource}:a", f"{resource}:b"
    rl = Redlock(servers.urls)
    with rl.guard((a, b), ttl=10.0) as lock:
        assert lock.kept and lock.resources == [a, b]
        assert len(servers.holders(b)) >= 3
    assert servers.holders(a) == servers.holders(b) == []

    async def run():
        arl = rl.asyncio()
        lock = await arl.try_lock([b, a], ttl=10.0)
        assert lock.resources == [b, a]
        with pytest.raises(NotAcquired):
            await arl.try_lock(a, ttl=10.0)
        await lock.release()
        async with arl.lock([a, b], ttl=10.0, wait=5.0, shared=True) as shared:
            assert shared.shared and shared.resources == [a, b]
            also = await arl.guard([a, b], ttl=10.0, shared=True)
            await also.release()

    asyncio.run(run())
    assert servers.holders(a) == servers.holders(b) == []


def test_several_permits_in_one_hold(servers, resource):
    rl = Redlock(servers.urls)
    three = rl.try_lock(resource, ttl=10.0, limit=5, permits=3)
    assert three.resource == resource and three.resources == [resource]
    with pytest.raises(NotAcquired):
        rl.try_lock(resource, ttl=10.0, limit=5, permits=3)
    two = rl.guard(resource, ttl=10.0, limit=5, permits=2)
    with pytest.raises(NotAcquired):
        rl.try_lock(resource, ttl=10.0, limit=5)
    three.release()
    one = rl.try_lock(resource, ttl=10.0, limit=5, permits=1)
    assert one.token > three.token
    one.release()
    two.release()
    assert all(servers.holders(f"{resource}:permit:{i}") == [] for i in range(5))


@pytest.mark.parametrize(
    "resources, kwargs",
    [
        (["x", "x"], {}),
        ([], {}),
        (["x", "y"], {"limit": 2}),
        ("x", {"permits": 2}),
        ("x", {"limit": 5, "permits": 6}),
        ("x", {"limit": 5, "permits": 0}),
    ],
)
def test_bad_lists_and_permits_raise_value_errors(servers, resource, resources, kwargs):
    names = [f"{resource}:{n}" for n in resources] if isinstance(resources, list) else f"{resource}:{resources}"
    rl = Redlock(servers.urls)
    with pytest.raises(ValueError):
        rl.try_lock(names, ttl=1.0, **kwargs)
    with pytest.raises(ValueError):
        rl.lock(names, ttl=1.0, wait=1.0, **kwargs)
    with pytest.raises(ValueError):
        asyncio.run(rl.asyncio().guard(names, ttl=1.0, **kwargs))
    assert servers.holders(f"{resource}:x") == []


def test_other_resource_types_raise_type_errors(servers, resource):
    rl = Redlock(servers.urls)
    for bad in ({resource}, [resource, 1], b"bytes", None, 7):
        with pytest.raises(TypeError, match="resource"):
            rl.try_lock(bad, ttl=1.0)
    with pytest.raises(TypeError):
        rl.try_lock(resource, ttl=1.0, limit=5, permits="2")


def test_a_ring_of_three_shares_three_resources_without_overlap(servers, resource):
    """Three threads, each locking two of three resources in a ring (the
    dining philosophers, three of them): no resource is held by two at
    once, and every thread gets its turn."""
    forks = [f"{resource}:fork{i}" for i in range(3)]
    rl = Redlock(servers.urls)
    holds = []  # (fork, granted, released, token, who); list.append is atomic
    errors = []
    meals = [0, 0, 0]
    start = threading.Barrier(3)
    end = []

    def philosopher(i):
        try:
            if start.wait() == 0:
                end.append(time.monotonic() + 2.0)
            start.wait()
            # About 2 s, and at least one meal each however slow the
            # machine: a philosopher never served fails by its wait.
            while meals[i] == 0 or time.monotonic() < end[0]:
                mine = [forks[i], forks[(i + 1) % 3]]
                with rl.lock(mine, ttl=10.0, wait=60.0) as lock:
                    granted = time.monotonic()
                    time.sleep(0.005)  # eating: long enough for an overlap to show
                    released = time.monotonic()
                    for fork in mine:
                        holds.append((fork, granted, released, lock.token, i))
                meals[i] += 1
        except BaseException as e:  # reported below, with the thread's number
            errors.append((i, e))

    threads = [threading.Thread(target=philosopher, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a philosopher is still waiting"
    assert errors == [], f"no wait timed out: {errors}"
    assert all(m > 0 for m in meals), f"every philosopher eats: {meals}"
    for fork in forks:
        history = sorted((h for h in holds if h[0] == fork), key=lambda h: h[1])
        for before, after in zip(history, history[1:]):
            assert before[2] <= after[1], f"{fork} held by {before[4]} and {after[4]} at once"
            assert before[3] < after[3], f"{fork}'s tokens grow in grant order"
        assert servers.holders(fork) == []
