#!/usr/bin/env python3
"""redislock from redis-py's asyncio client (redis.asyncio): acquire, wait
in line, extend, release, fence a write with the token, and read an error
reply.

Needs a Redis with the module loaded (`make run` starts one on
127.0.0.1:6379). Server address: REDIS_URL, or REDIS_HOST / REDIS_PORT.
Checks its own output; prints `example OK` or exits non-zero.
"""

import asyncio
import os
import sys
import uuid

import redis
import redis.asyncio as aioredis


def connect():
    # decode_responses: owners and LOCK.INFO's field names come back as str.
    # socket_timeout: a WAIT blocks for up to its timeout; redis-py 8's
    # default socket timeout (5 s) would cut a longer wait short.
    options = {"decode_responses": True, "socket_timeout": 60}
    url = os.environ.get("REDIS_URL")
    if url:
        return aioredis.Redis.from_url(url, **options)
    host = os.environ.get("REDIS_HOST", "127.0.0.1")
    port = int(os.environ.get("REDIS_PORT", "6379"))
    return aioredis.Redis(host=host, port=port, **options)


def expect(ok, what):
    if not ok:
        sys.exit(f"example FAILED: {what}")


async def lock_info(r, key):
    # A map in RESP3 (redis-py 8's default), a flat [field, value, ...] list
    # in RESP2 (earlier redis-py); nil when nobody holds.
    reply = await r.execute_command("LOCK.INFO", key)
    if reply is None or isinstance(reply, dict):
        return reply
    return dict(zip(reply[::2], reply[1::2]))


class FencedStore:
    """The resource the lock protects. It remembers the highest token it
    has seen and refuses writes with a lower one: a holder that lost its
    lock (paused, partitioned, lease expired) can no longer overwrite the
    work of the holder after it."""

    def __init__(self):
        self.highest = 0
        self.value = None

    def write(self, token, value):
        if token < self.highest:
            return False
        self.highest, self.value = token, value
        return True


async def demo(a, b):
    key = f"example:python-async:{uuid.uuid4().hex[:8]}"
    store = FencedStore()

    token_a = await a.execute_command("LOCK.ACQUIRE", key, "worker-a", 10000)
    expect(isinstance(token_a, int), f"worker-a's ACQUIRE answered {token_a!r}, not a token")
    print(f"worker-a acquired {key} with token {token_a}")

    # Without WAIT, a held lock answers nil at once, like SET NX.
    expect(await b.execute_command("LOCK.ACQUIRE", key, "worker-b", 10000) is None,
           "worker-b got a lock that worker-a holds")
    print("worker-b without WAIT: nil (worker-a holds it)")

    expect(store.write(token_a, "written by worker-a"), "storage refused the holder's write")
    print(f"storage accepted worker-a's write with token {token_a}")

    # The WAIT blocks on the server; as a task, it waits while worker-a works.
    waiter = asyncio.create_task(
        b.execute_command("LOCK.ACQUIRE", key, "worker-b", 10000, "WAIT", 15000))
    deadline = asyncio.get_running_loop().time() + 5
    while ((await lock_info(a, key)) or {}).get("waiters") != 1:
        expect(not waiter.done(), "worker-b's WAIT ended while worker-a held the lock")
        expect(asyncio.get_running_loop().time() < deadline,
               "worker-b never showed up in LOCK.INFO's waiters")
        await asyncio.sleep(0.01)
    print("worker-b waits in line (LOCK.INFO waiters: 1)")

    expect(await a.execute_command("LOCK.EXTEND", key, "worker-a", 30000) == 1,
           "EXTEND by the holder failed")
    pttl = (await lock_info(a, key))["pttl"]
    expect(pttl > 10000, f"lease left after EXTEND is {pttl} ms, expected above 10000")
    print(f"worker-a extended its lease: {pttl} ms left")

    expect(not waiter.done(), "worker-b's WAIT returned while worker-a still held the lock")
    expect(await a.execute_command("LOCK.RELEASE", key, "worker-a") == 1, "RELEASE by the holder failed")
    token_b = await asyncio.wait_for(waiter, 5)
    expect(isinstance(token_b, int) and token_b > token_a,
           f"worker-b was granted {token_b!r} after the release, expected a token above {token_a}")
    print(f"worker-a released; worker-b was granted the lock with token {token_b}")

    expect(store.write(token_b, "written by worker-b"), "storage refused the new holder's write")
    print(f"storage accepted worker-b's write with token {token_b}")
    # worker-a's write arrives late (a GC pause, a slow network): refused.
    expect(not store.write(token_a, "late write by worker-a"), "storage accepted a stale token")
    expect(store.value == "written by worker-b", f"storage holds {store.value!r}")
    print(f"storage refused worker-a's late write: token {token_a} < {store.highest}")

    # A former holder's EXTEND and RELEASE answer 0: it learns it lost the lock.
    expect(await a.execute_command("LOCK.EXTEND", key, "worker-a", 10000) == 0, "a non-holder extended")
    expect(await b.execute_command("LOCK.RELEASE", key, "worker-b") == 1, "worker-b's RELEASE failed")
    print("worker-a's EXTEND answered 0; worker-b released")

    try:
        await a.execute_command("LOCK.ACQUIRE", key, "worker-a", 0)
        expect(False, "ACQUIRE with ttl 0 did not fail")
    except redis.ResponseError as e:
        # redis-py strips the leading error code: "ERR " is not in str(e).
        expect(str(e) == "ttl must be a positive integer (milliseconds)", f"unexpected error {e}")
        print(f"ACQUIRE with ttl 0: ERR {e}")

    print("example OK")


async def main():
    # Two connections, two workers: a blocked WAIT occupies its connection.
    a, b = connect(), connect()
    try:
        await demo(a, b)
    finally:
        await a.aclose()
        await b.aclose()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except redis.ConnectionError as e:
        sys.exit(f"example FAILED: cannot reach Redis ({e}); is `make run` running?")
    except redis.RedisError as e:
        # An unexpected error reply, such as "unknown command" without the module.
        sys.exit(f"example FAILED: {e}")
