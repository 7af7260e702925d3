"""The release request (issue 61): `Redlock.ask` / `AsyncRedlock.ask` ask
every holder of a lock to let go, and the holder hears each ask once
through its lock's `asks()` (an async iterator on `AsyncLock`, an iterator
on `Lock`), although all five real servers announce it; the holder lets
go and a waiter gets the lock."""

import asyncio
import queue
import threading
import time

from redislock import Asked, AskRequest, AsyncRedlock, Redlock

# Every wait for an event gives up after this (a failure, not a hang).
PATIENCE = 10.0


def subscribed(servers, resource):
    """Whether the holder's asks listen on the lock's channel on every server."""
    channel = f"__redislock@0__:{resource}"
    return all(int(s.call("PUBSUB", "NUMSUB", channel)[1]) == 1 for s in servers)


def test_an_async_holder_hears_each_ask_once_and_lets_a_waiter_in(servers, resource):
    async def main():
        rl = AsyncRedlock(servers.urls)
        holder = await rl.guard(resource, ttl=10.0)
        asks = holder.asks()
        assert asks.__aiter__() is asks
        heard = asyncio.Queue()

        async def listening():
            async for ask in asks:
                await heard.put(ask)

        task = asyncio.create_task(listening())
        deadline = time.monotonic() + PATIENCE
        while not subscribed(servers, resource):
            assert time.monotonic() < deadline, "the asks did not subscribe on every server"
            await asyncio.sleep(0.01)

        asked = await rl.ask(resource, "deploy at 10:00")
        assert isinstance(asked, Asked)
        assert (asked.answered, asked.holders) == (5, 1)
        assert len(asked.outcomes) == 5
        first = await asyncio.wait_for(heard.get(), PATIENCE)
        assert (first.resource, first.message) == (resource, "deploy at 10:00")
        assert isinstance(first, AskRequest)
        # Five servers announced the first ask: the next item heard is the
        # second ask, not another server's copy of the first.
        await rl.ask(resource)
        second = await asyncio.wait_for(heard.get(), PATIENCE)
        assert (second.resource, second.message) == (resource, None)
        await rl.ask(resource, "third")
        third = await asyncio.wait_for(heard.get(), PATIENCE)
        assert third.message == "third"
        assert not holder.lost, "an ask changes nothing"

        # The holder lets go: a waiter gets the lock, and the asks end.
        waiter = asyncio.ensure_future(rl.guard(resource, ttl=10.0, wait=PATIENCE))
        await holder.release()
        after = await asyncio.wait_for(waiter, PATIENCE)
        assert after.token > holder.token
        await asyncio.wait_for(task, PATIENCE)
        assert heard.empty(), "nothing heard twice"
        await after.release()

        nobody = await rl.ask(resource + ":free")
        assert (nobody.answered, nobody.holders) == (5, 0)

    asyncio.run(main())


def test_a_blocking_holder_hears_each_ask_once_until_released(servers, resource):
    rl = Redlock(servers.urls)
    holder = rl.guard(resource, ttl=10.0)
    asks = holder.asks()
    assert iter(asks) is asks
    heard = queue.Queue()
    ended = threading.Event()

    def listening():
        for ask in asks:
            heard.put(ask)
        ended.set()

    threading.Thread(target=listening, daemon=True).start()
    deadline = time.monotonic() + PATIENCE
    while not subscribed(servers, resource):
        assert time.monotonic() < deadline, "the asks did not subscribe on every server"
        time.sleep(0.01)

    asked = rl.ask(resource, "first")
    assert (asked.answered, asked.holders) == (5, 1)
    assert heard.get(timeout=PATIENCE).message == "first"
    rl.ask(resource, message="second")
    assert heard.get(timeout=PATIENCE).message == "second"
    holder.release()
    assert ended.wait(PATIENCE), "the asks end once the lock is released"
    assert heard.empty(), "nothing heard twice"


def test_a_plain_lock_hears_asks_too(servers, resource):
    # try_lock's lock is a plain hold, without a guard behind it: its
    # asks come from the hold itself, and end at its release.
    rl = Redlock(servers.urls)
    holder = rl.try_lock(resource, ttl=10.0)
    assert not holder.kept
    asks = holder.asks()
    heard = queue.Queue()
    ended = threading.Event()

    def listening():
        for ask in asks:
            heard.put(ask)
        ended.set()

    threading.Thread(target=listening, daemon=True).start()
    deadline = time.monotonic() + PATIENCE
    while not subscribed(servers, resource):
        assert time.monotonic() < deadline, "the asks did not subscribe on every server"
        time.sleep(0.01)
    assert rl.ask(resource, "plain").holders == 1
    assert heard.get(timeout=PATIENCE).message == "plain"
    holder.release()
    assert ended.wait(PATIENCE), "the asks end once the lock is released"
