#!/usr/bin/env python3
"""The dining philosophers with redislock and redis-py: five philosophers
around a table, a fork between each two, each needing both forks beside
it to eat. Each takes its two forks with one command,

    LOCK.MACQUIRE 2 fork:i fork:i+1 owner ttl-ms WAIT timeout-ms

which the server grants whole or not at all, in arrival order across
both forks' lines: nobody holds one fork while waiting for the other,
so the table cannot deadlock, and nobody is passed over, so nobody
starves. Each fork checks the fencing token of every meal (a fork used
with a token lower than the last one it saw, or by two philosophers at
once, fails the example).

Needs a Redis with the module loaded (`make run` starts one on
127.0.0.1:6379). Server address: REDIS_URL, or REDIS_HOST / REDIS_PORT.
Checks its own output; prints `example OK` or exits non-zero.
"""

import os
import sys
import threading
import time
import uuid

import redis

PHILOSOPHERS = 5
DINNER_SECONDS = 2.0
TTL_MS = 5000
WAIT_MS = 10000


def connect():
    # socket_timeout above the WAIT: a blocked MACQUIRE holds its reply
    # for up to WAIT_MS.
    options = {"decode_responses": True, "socket_timeout": 60}
    url = os.environ.get("REDIS_URL")
    if url:
        return redis.Redis.from_url(url, **options)
    host = os.environ.get("REDIS_HOST", "127.0.0.1")
    port = int(os.environ.get("REDIS_PORT", "6379"))
    return redis.Redis(host=host, port=port, **options)


class Fork:
    """A fork on the table: refuses a second user, and a token lower than
    the last it saw (a philosopher whose lease ran out)."""

    def __init__(self):
        self.guard = threading.Lock()
        self.user = None
        self.last_token = 0
        self.problems = []

    def pick_up(self, who, token):
        with self.guard:
            if self.user is not None:
                self.problems.append(f"{who} took a fork {self.user} holds")
            if token <= self.last_token:
                self.problems.append(f"{who} used token {token} after {self.last_token}")
            self.user, self.last_token = who, token

    def put_down(self, who):
        with self.guard:
            if self.user == who:
                self.user = None


def philosopher(i, forks, names, meals, timeouts, stop):
    r = connect()  # one connection each: a blocked WAIT holds its own
    left, right = i, (i + 1) % PHILOSOPHERS
    keys = [names[left], names[right]]
    who = f"philosopher {i}"
    while not stop.is_set():
        owner = uuid.uuid4().hex
        token = r.execute_command("LOCK.MACQUIRE", 2, *keys, owner, TTL_MS, "WAIT", WAIT_MS)
        if token is None:
            timeouts[i] += 1
            continue
        for f in (left, right):
            forks[f].pick_up(who, token)
        time.sleep(0.002)  # eat
        for f in (left, right):
            forks[f].put_down(who)
        released = r.execute_command("LOCK.MRELEASE", 2, *keys, owner)
        if released != 2:
            forks[left].problems.append(f"{who} released {released} of 2 forks")
        meals[i] += 1


def main():
    r = connect()
    names = [f"example:fork:{uuid.uuid4().hex[:8]}:{n}" for n in range(PHILOSOPHERS)]
    forks = [Fork() for _ in range(PHILOSOPHERS)]
    meals, timeouts = [0] * PHILOSOPHERS, [0] * PHILOSOPHERS
    stop = threading.Event()
    table = [
        threading.Thread(target=philosopher, args=(i, forks, names, meals, timeouts, stop))
        for i in range(PHILOSOPHERS)
    ]
    for t in table:
        t.start()
    time.sleep(DINNER_SECONDS)
    stop.set()
    for t in table:
        t.join()
    print(f"meals: {meals}")
    problems = [p for f in forks for p in f.problems]
    if problems:
        sys.exit(f"example FAILED: {problems[0]} ({len(problems)} problems)")
    if sum(timeouts):
        sys.exit(f"example FAILED: waits timed out: {timeouts}")
    if min(meals) == 0 or min(meals) * 4 < max(meals):
        sys.exit(f"example FAILED: someone starved: {meals}")
    # Every fork is free again.
    if any(r.exists(n) for n in names):
        sys.exit("example FAILED: a fork is still held after dinner")
    print("example OK")


if __name__ == "__main__":
    main()
