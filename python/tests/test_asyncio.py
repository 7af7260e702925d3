"""The asyncio API. Each test runs its own event loop (asyncio.run), so the
suite needs no pytest plugin."""

import asyncio
import threading
import time

import pytest

from redislock import AsyncRedlock, LockLost, NotAcquired, QuorumUnreachable, Redlock


def test_try_lock_extend_release(servers, resource):
    async def main():
        rl = AsyncRedlock(servers.urls)
        lock = await rl.try_lock(resource, ttl=10.0)
        assert isinstance(lock.token, int) and not lock.kept
        await lock.extend(20.0)
        assert 10.0 < lock.validity <= 20.0
        with pytest.raises(NotAcquired) as caught:
            await rl.try_lock(resource, ttl=10.0)
        assert caught.value.kind == "held" and len(caught.value.outcomes) == 5
        await lock.release()
        assert lock.released
        again = await rl.try_lock(resource, ttl=10.0)
        assert again.token > lock.token
        async with again:
            pass
        assert again.released

    asyncio.run(main())
    assert servers.holders(resource) == []


def test_async_with_lock_keeps_and_releases(servers, resource):
    async def main():
        rl = AsyncRedlock(servers.urls, extend_fraction=0.25)
        # A lease of 3 s, extended every 0.75 s: room for a late extension
        # on a loaded machine (1 s, every 0.25 s, was lost there once).
        async with rl.lock(resource, ttl=3.0, wait=5.0) as lock:
            assert lock.kept
            # Outlive the lease: the guard extends it meanwhile.
            await asyncio.sleep(4.0)
            assert not lock.lost and lock.validity > 0
            assert len(servers.holders(resource)) >= 3
            inner = lock.reenter()
            await inner.release()
            await lock.extend()
        assert lock.released

    asyncio.run(main())
    assert servers.holders(resource) == []


def test_shared_and_permits(servers, resource):
    async def main():
        rl = AsyncRedlock(servers.urls)
        r1 = await rl.try_lock(resource, ttl=10.0, shared=True)
        r2 = await rl.guard(resource, ttl=10.0, shared=True)
        with pytest.raises(NotAcquired):
            await rl.try_lock(resource, ttl=10.0)
        await r1.release()
        await r2.release()
        permits = [await rl.try_lock(resource + ":sem", ttl=10.0, limit=2) for _ in range(2)]
        with pytest.raises(NotAcquired):
            await rl.try_lock(resource + ":sem", ttl=10.0, limit=2)
        for p in permits:
            await p.release()
        with pytest.raises(ValueError):
            await rl.try_lock(resource, ttl=10.0, shared=True, limit=2)

    asyncio.run(main())


def test_lost_guard_raises_at_exit(servers, resource):
    async def main():
        rl = AsyncRedlock(servers.urls)
        lost = threading.Event()
        with pytest.raises(LockLost):
            async with rl.lock(resource, ttl=1.0, on_lost=lost.set) as lock:
                for s in servers[:3]:
                    s.call("DEL", resource)
                thief = await rl.try_lock(resource, ttl=10.0)
                # Waited for off the loop: the loop itself must stay free.
                assert await asyncio.get_running_loop().run_in_executor(None, lost.wait, 10)
                assert lock.lost
        await thief.release()

    asyncio.run(main())


def test_the_event_loop_runs_while_waiting(servers, resource):
    holder = Redlock(servers.urls).try_lock(resource, ttl=10.0)

    async def main():
        rl = AsyncRedlock(servers.urls)
        ticks = 0
        waiting = True

        async def ticker():
            nonlocal ticks
            while waiting:
                ticks += 1
                await asyncio.sleep(0.01)

        t = asyncio.create_task(ticker())
        started = time.monotonic()
        with pytest.raises(NotAcquired):
            await rl.guard(resource, ttl=5.0, wait=1.0)
        elapsed = time.monotonic() - started
        waiting = False
        await t
        return ticks, elapsed

    try:
        ticks, elapsed = asyncio.run(main())
    finally:
        holder.release()
    # A blocked loop would tick once or twice; a free one about every 10 ms
    # of the wait (fewer on a loaded machine, never close to none).
    assert ticks >= max(5, elapsed / 0.01 / 10), (ticks, elapsed)


def test_cancelled_waiter_leaves_nothing_held(servers, resource):
    """A task cancelled while its acquisition is under way: the acquisition
    finishes on the runtime, and what it acquired is released at once
    instead of staying held for its ttl."""
    holder = Redlock(servers.urls).try_lock(resource, ttl=10.0)

    async def main():
        rl = AsyncRedlock(servers.urls)
        waiter = asyncio.ensure_future(rl.guard(resource, ttl=60.0, wait=30.0))
        await asyncio.sleep(0.2)  # let it get in line; its fate is the same either way
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter

    try:
        asyncio.run(main())
    finally:
        holder.release()
    # The abandoned acquisition now gets the lock and gives it back; a ttl
    # of 60 s left behind would make this wait run out.
    with Redlock(servers.urls).lock(resource, ttl=5.0, wait=20.0) as lock:
        assert lock.token > holder.token


def test_quorum_unreachable(own_servers, resource):
    for s in own_servers[:3]:
        s.kill()

    async def main():
        rl = AsyncRedlock(own_servers.urls)
        with pytest.raises(QuorumUnreachable):
            await rl.try_lock(resource, ttl=5.0)
        with pytest.raises(QuorumUnreachable):
            async with rl.lock(resource, ttl=5.0, wait=0.3):
                pass

    asyncio.run(main())


def test_bad_arguments_raise_at_the_call(servers, resource):
    rl = AsyncRedlock(servers.urls)
    # Raised before any awaitable exists (so no event loop is needed).
    with pytest.raises(ValueError):
        rl.try_lock(resource, ttl=-1.0)
    with pytest.raises(ValueError):
        rl.lock(resource, ttl=1.0, wait=-1.0)
    with pytest.raises(ValueError):
        rl.guard(resource, ttl=1.0, shared=True, limit=1)


def test_async_extend_is_the_guards_new_ttl(servers, resource):
    async def main():
        rl = AsyncRedlock(servers.urls)
        async with rl.lock(resource, ttl=2.0, wait=5.0) as lock:
            await lock.extend(8.0)
            assert lock.ttl == 8.0 and lock.validity > 7
            # Past two of the guard's extensions at the old ttl (every
            # 0.67 s), which would have cut the lease back to 2 s.
            await asyncio.sleep(3)
            assert not lock.lost and lock.validity > 4, lock.validity
            return [s.call("PTTL", resource) for s in servers]

    pttls = asyncio.run(main())
    assert all(p > 4_000 for p in pttls), pttls
    assert servers.holders(resource) == []
