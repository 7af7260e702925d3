"""Threads and asyncio tasks on one Redlock (the tasks through its
`asyncio()` view, the same client), all at once on one resource: no two
holds overlap, and tokens grow in the order the holds were granted."""

import asyncio
import threading
import time

from redislock import AsyncRedlock, Redlock

THREADS = 8
TASKS = 8
ROUNDS = 6
TTL = 10.0
# Far more than the whole run needs: every waiter gets its turn in line.
WAIT = 120.0


def test_threads_and_tasks_never_hold_at_once(servers, resource):
    rl = Redlock(servers.urls)
    arl = rl.asyncio()
    assert isinstance(arl, AsyncRedlock)
    holds = []  # (granted, released, token, who); list.append is atomic
    errors = []
    start = threading.Barrier(THREADS + 1)

    def hold(lock, who):
        granted = time.monotonic()
        # Some work inside the hold, long enough for an overlap to show.
        time.sleep(0.002)
        holds.append((granted, time.monotonic(), lock.token, who))

    def thread_worker(i):
        try:
            start.wait()
            for _ in range(ROUNDS):
                with rl.lock(resource, ttl=TTL, wait=WAIT) as lock:
                    hold(lock, f"thread {i}")
        except BaseException as e:  # reported below, with the thread's name
            errors.append((f"thread {i}", e))

    async def task_worker(i):
        for _ in range(ROUNDS):
            async with arl.lock(resource, ttl=TTL, wait=WAIT) as lock:
                granted = time.monotonic()
                await asyncio.sleep(0.002)
                holds.append((granted, time.monotonic(), lock.token, f"task {i}"))

    async def all_tasks():
        results = await asyncio.gather(*(task_worker(i) for i in range(TASKS)), return_exceptions=True)
        errors.extend((f"task {i}", r) for i, r in enumerate(results) if isinstance(r, BaseException))

    def loop_thread():
        try:
            start.wait()
            asyncio.run(all_tasks())
        except BaseException as e:
            errors.append(("event loop", e))

    workers = [threading.Thread(target=thread_worker, args=(i,)) for i in range(THREADS)]
    workers.append(threading.Thread(target=loop_thread))
    for w in workers:
        w.start()
    for w in workers:
        w.join(WAIT + 30)
    assert not any(w.is_alive() for w in workers), "workers still running"
    assert errors == []

    assert len(holds) == (THREADS + TASKS) * ROUNDS
    assert {who.split()[0] for *_, who in holds} == {"thread", "task"}
    holds.sort()
    for (_, released, token, who), (granted, _, next_token, next_who) in zip(holds, holds[1:]):
        assert released <= granted, f"{who} still held the lock when {next_who} got it"
        assert next_token > token, f"token {next_token} ({next_who}) after {token} ({who})"
    assert servers.holders(resource) == []
