"""`AsyncRedlock.watch` (issue 61): a lock's changes as a quorum of five
real servers announced them, as an async iterator of `Change`, each once
and in order."""

import asyncio

from redislock import AsyncRedlock, Change


def test_watch_yields_each_change_once_in_order(own_servers, resource):
    for s in own_servers:
        s.call("CONFIG", "SET", "redislock.notify", "test_watch*")
    channel = f"__redislock@0__:{resource}"

    async def main():
        rl = AsyncRedlock(own_servers.urls)
        changes = rl.watch(resource)
        assert changes.__aiter__() is changes
        seen = asyncio.Queue()

        async def watching():
            async for change in changes:
                await seen.put(change)

        task = asyncio.create_task(watching())
        for _ in range(1000):
            if all(int(s.call("PUBSUB", "NUMSUB", channel)[1]) == 1 for s in own_servers):
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError("the watch did not subscribe on every server")

        first = await rl.guard(resource, ttl=10.0)
        await first.release()
        second = await rl.guard(resource, ttl=10.0)
        got = [await asyncio.wait_for(seen.get(), 10) for _ in range(3)]
        assert [(c.kind, c.token, c.owner) for c in got] == [
            ("grant", first.token, first.owner),
            ("release", first.token, first.owner),
            ("grant", second.token, second.owner),
        ]
        assert all(isinstance(c, Change) and c.value is None for c in got)
        assert seen.empty(), "nothing twice"
        await second.release()
        task.cancel()

    asyncio.run(main())
