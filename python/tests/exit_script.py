"""A short client that exits right after using redislock, for
test_exit.py: `python exit_script.py SCENARIO RESOURCE URL...`.

Scenarios: async (AsyncRedlock: async with, try_lock/release), sync
(Redlock), async-guard-held / sync-guard-held (exits with a kept lock
never released), async-pending (exits while an acquisition waits),
async-release-cancelled / sync-guard-dropped (exits right after asking
for a release: the lock must be gone from the servers after).

And exits while a daemon thread waits inside a blocking call:
observe-daemon (iterating `Election.observe()`, the follower of
docs/python.md), lock-wait-daemon (`lock(..., wait=...)` behind a lock
held), campaign-daemon (`Election.campaign()` behind a leader), and
blocked-daemons (all three at once: calls that overlap hand their work to
the runtime's thread instead of driving it). Each waits until the servers
show the thread waiting (subscribed, in line) before it exits, and each
blocked call must end at the exit, raising SystemExit into its thread
(checked by an atexit hook that runs after redislock's).
"""

import asyncio
import atexit
import sys
import threading
import time
from urllib.parse import urlparse

# Every wait for the servers to show a thread waiting gives up after this.
PATIENCE = 20.0
# How long the exit waits for the blocked calls to end, in all.
EXIT_PATIENCE = 5.0
# (what, Event): set when the daemon thread's call raised SystemExit.
LEFT = []


def check_left():
    """Each daemon thread's blocked call ended at the exit. Registered
    before redislock is imported, so it runs after redislock's hook."""
    deadline = time.monotonic() + EXIT_PATIENCE
    for what, left in LEFT:
        if not left.wait(max(0.0, deadline - time.monotonic())):
            print(f"{what}: still inside its call at the exit", file=sys.stderr)


atexit.register(check_left)

import redislock  # noqa: E402 (after check_left's registration)
import redis_servers  # noqa: E402


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


def ports(urls):
    return [urlparse(u).port for u in urls]


def wait_on_servers(urls, condition, what):
    """Polls the servers until `condition(port)` holds on one: the daemon
    thread is inside its call (a state only the call makes; a line is kept
    by one server)."""
    deadline = time.monotonic() + PATIENCE
    while not any(condition(p) for p in ports(urls)):
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting until {what}")
        time.sleep(0.01)


def waiters_in_line(port, key):
    """Places in the line of `key` on one server (0: none)."""
    reply = redis_servers.call(port, "LOCK.INFO", f"redlock:line:{key}")
    if reply is None:
        return 0
    info = dict(zip(reply[0::2], reply[1::2]))
    return 1 + int(info[b"waiters"])


def in_daemon(what, target):
    """Runs `target` in a daemon thread, which the exit must end with
    SystemExit (any other exception is printed: a failure)."""
    left = threading.Event()

    def run():
        try:
            target()
        except SystemExit:
            left.set()

    LEFT.append((what, left))
    threading.Thread(target=run, daemon=True).start()


def start_observer(urls, resource):
    """A daemon thread iterating `observe()`; returns once it is subscribed
    (nobody leads: it waits in its first step)."""
    election = redislock.Election(redislock.Redlock(urls, release_on_disconnect=True), resource, "observer")

    def follow():
        for leader in election.observe():
            print(f"unexpected leader {leader}", file=sys.stderr)

    in_daemon("observe()", follow)
    channel = f"__redislock@0__:redlock:election:{resource}"
    wait_on_servers(urls, lambda p: int(redis_servers.call(p, "PUBSUB", "NUMSUB", channel)[1]) > 0, "the observer subscribed")


def start_lock_waiter(urls, resource):
    """A daemon thread waiting in line for `resource`, held here; returns
    once it is in line. The holder is kept alive until the exit."""
    rl = redislock.Redlock(urls)
    globals()["holder"] = rl.try_lock(resource, ttl=30.0)

    def wait():
        with rl.lock(resource, ttl=5.0, wait=60.0):
            print("unexpectedly acquired", file=sys.stderr)

    in_daemon("lock(..., wait=60)", wait)
    wait_on_servers(urls, lambda p: waiters_in_line(p, resource) > 0, "the waiter is in line")


def start_candidate(urls, resource):
    """A daemon thread campaigning behind this process's leadership;
    returns once it is in the election's line."""
    rl = redislock.Redlock(urls, release_on_disconnect=True)
    globals()["leadership"] = redislock.Election(rl, resource, "leader", ttl=30.0).campaign()
    candidate = redislock.Election(rl, resource, "candidate", ttl=30.0)

    def campaign():
        candidate.campaign()
        print("unexpectedly led", file=sys.stderr)

    in_daemon("campaign()", campaign)
    key = f"redlock:election:{resource}"
    wait_on_servers(urls, lambda p: waiters_in_line(p, key) > 0, "the candidate is in line")


def run_blocked_daemons(urls, resource):
    start_observer(urls, resource + ":observed")
    start_lock_waiter(urls, resource + ":locked")
    start_candidate(urls, resource + ":elected")


DAEMONS = {
    "observe-daemon": start_observer,
    "lock-wait-daemon": start_lock_waiter,
    "campaign-daemon": start_candidate,
    "blocked-daemons": run_blocked_daemons,
}


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
    elif scenario in DAEMONS:
        DAEMONS[scenario](urls, resource)
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")


if __name__ == "__main__":
    main()
