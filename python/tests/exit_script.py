"""A short client that exits right after using redislock, for
test_exit.py: `python exit_script.py SCENARIO RESOURCE URL...`.

Scenarios: async (AsyncRedlock: async with, try_lock/release), sync
(Redlock), async-guard-held / sync-guard-held (exits with a kept lock
never released), async-pending (exits while an acquisition waits),
async-release-cancelled / sync-guard-dropped (exits right after asking
for a release: the lock must be gone from the servers after).
"""

import asyncio
import sys

import redislock


async def run_async(urls, resource):
    rl = redislock.AsyncRedlock(urls)
    async with rl.lock(resource, ttl=5.0, wait=5.0) as lock:
        assert lock.token
    for _ in range(3):
        lock = await rl.try_lock(resource, ttl=5.0)
        await lock.release()


async def run_async_guard_held(urls, resource):
    rl = redislock.AsyncRedlock(urls)
    lock = await rl.guard(resource, ttl=5.0, on_lost=lambda: None)
    await rl.try_lock(resource + ":plain", ttl=5.0)
    globals()["kept"] = lock  # alive until the interpreter's teardown


async def run_async_pending(urls, resource):
    rl = redislock.AsyncRedlock(urls)
    holder = await rl.try_lock(resource, ttl=1.0)
    waiter = asyncio.ensure_future(rl.guard(resource, ttl=5.0, wait=10.0))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    globals()["kept"] = (holder, waiter)
    # asyncio.run cancels the waiting task; the acquisition goes on.


async def run_async_release_cancelled(urls, resource):
    rl = redislock.AsyncRedlock(urls)
    lock = await rl.guard(resource, ttl=30.0)
    plain = await rl.try_lock(resource + ":plain", ttl=30.0)
    for release in (lock.release(), plain.release()):
        release.cancel()  # the release goes on, and the exit waits for it


def run_sync(urls, resource):
    rl = redislock.Redlock(urls)
    with rl.lock(resource, ttl=5.0, wait=5.0) as lock:
        assert lock.token
    for _ in range(3):
        rl.try_lock(resource, ttl=5.0).release()


def run_sync_guard_held(urls, resource):
    rl = redislock.Redlock(urls)
    globals()["kept"] = rl.guard(resource, ttl=5.0, on_lost=lambda: None)


def run_sync_guard_dropped(urls, resource):
    rl = redislock.Redlock(urls)
    lock = rl.guard(resource, ttl=30.0)
    del lock  # released in the background; the exit waits for it


def main():
    scenario, resource, urls = sys.argv[1], sys.argv[2], sys.argv[3:]
    if scenario == "async":
        asyncio.run(run_async(urls, resource))
    elif scenario == "async-guard-held":
        asyncio.run(run_async_guard_held(urls, resource))
    elif scenario == "async-pending":
        asyncio.run(run_async_pending(urls, resource))
    elif scenario == "async-release-cancelled":
        asyncio.run(run_async_release_cancelled(urls, resource))
    elif scenario == "sync-guard-dropped":
        run_sync_guard_dropped(urls, resource)
    elif scenario == "sync":
        run_sync(urls, resource)
    elif scenario == "sync-guard-held":
        run_sync_guard_held(urls, resource)
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")


if __name__ == "__main__":
    main()
