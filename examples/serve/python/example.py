#!/usr/bin/env python3
"""The quorum from redis-py, through `redlock serve`: acquire, write
through the fence with the token (LOCK.FENCED on the data server), wait in
line, extend, release.

Needs `redlock serve` (REDLOCK_SERVE_HOST / REDLOCK_SERVE_PORT, default
127.0.0.1:7379) and a Redis with the module for the data (DATA_HOST /
DATA_PORT, default 127.0.0.1:6379); see ../README.md.
Checks its own output; prints `example OK` or exits non-zero.
"""

import os
import sys
import threading
import time
import uuid

import redis


def connect(prefix, default_port):
    # decode_responses: owners, field names and values come back as str.
    # socket_timeout: a WAIT blocks for up to its timeout; redis-py 8's
    # default socket timeout (5 s) would cut a longer wait short.
    return redis.Redis(
        host=os.environ.get(f"{prefix}_HOST", "127.0.0.1"),
        port=int(os.environ.get(f"{prefix}_PORT", default_port)),
        decode_responses=True,
        socket_timeout=60,
    )


def expect(ok, what):
    if not ok:
        sys.exit(f"example FAILED: {what}")


def lock_info(r, key):
    # A map in RESP3 (redis-py 8's default), a flat [field, value, ...] list
    # in RESP2 (earlier redis-py); nil when nobody holds.
    reply = r.execute_command("LOCK.INFO", key)
    if reply is None or isinstance(reply, dict):
        return reply
    return dict(zip(reply[::2], reply[1::2]))


def main():
    # Two workers, a connection each to the endpoint (a blocked WAIT
    # occupies its connection), and the data server.
    a, b = connect("REDLOCK_SERVE", 7379), connect("REDLOCK_SERVE", 7379)
    data = connect("DATA", 6379)
    key = f"example:serve:python:{uuid.uuid4().hex[:8]}"
    fence, data_key = f"{key}:fence", f"{key}:data"

    token_a = a.execute_command("LOCK.ACQUIRE", key, "worker-a", 10000)
    expect(isinstance(token_a, int), f"worker-a's ACQUIRE answered {token_a!r}, not a token")
    print(f"worker-a acquired {key} through the quorum with token {token_a}")

    expect(b.execute_command("LOCK.ACQUIRE", key, "worker-b", 10000) is None,
           "worker-b got a lock that worker-a holds")
    print("worker-b without WAIT: nil (worker-a holds it)")

    # The write runs on the data server only if the token is at least every
    # token the register has accepted.
    reply = data.execute_command("LOCK.FENCED", fence, token_a, "SET", data_key, "written by worker-a")
    expect(reply == "OK", f"worker-a's fenced write answered {reply!r}")
    print(f"worker-a wrote through the fence with token {token_a}")

    # With WAIT the call blocks, so it runs in a thread (a daemon: a failed
    # check below exits without waiting for it).
    granted = {}
    waiter = threading.Thread(daemon=True, target=lambda: granted.update(token=b.execute_command(
        "LOCK.ACQUIRE", key, "worker-b", 10000, "WAIT", 15000)))
    waiter.start()
    deadline = time.monotonic() + 5
    while (lock_info(a, key) or {}).get("waiters") != 1:
        expect(time.monotonic() < deadline, "worker-b never showed up in LOCK.INFO's waiters")
        time.sleep(0.01)
    print("worker-b waits in line (LOCK.INFO waiters: 1)")

    expect(a.execute_command("LOCK.EXTEND", key, "worker-a", 30000) == 1, "EXTEND by the holder failed")
    pttl = lock_info(a, key)["pttl"]
    expect(pttl > 10000, f"lease left after EXTEND is {pttl} ms, expected above 10000")
    print(f"worker-a extended its lease: {pttl} ms left")

    expect(waiter.is_alive(), "worker-b's WAIT returned while worker-a still held the lock")
    expect(a.execute_command("LOCK.RELEASE", key, "worker-a") == 1, "RELEASE by the holder failed")
    waiter.join(5)
    token_b = granted.get("token")
    expect(isinstance(token_b, int) and token_b > token_a,
           f"worker-b was granted {token_b!r} after the release, expected a token above {token_a}")
    print(f"worker-a released; worker-b was granted the lock with token {token_b}")

    reply = data.execute_command("LOCK.FENCED", fence, token_b, "SET", data_key, "written by worker-b")
    expect(reply == "OK", f"worker-b's fenced write answered {reply!r}")
    print(f"worker-b wrote through the fence with token {token_b}")
    # worker-a's write arrives late (a GC pause, a slow network): the data
    # server refuses it, and runs nothing.
    try:
        data.execute_command("LOCK.FENCED", fence, token_a, "SET", data_key, "late write by worker-a")
        expect(False, "the data server took worker-a's late write")
    except redis.ResponseError as e:
        # redis-py drops the error codes it knows (ERR); FENCED it keeps.
        expect(str(e).startswith("FENCED older token"), f"worker-a's late write answered {e}")
        print(f"worker-a's late write was refused: {e}")
    expect(data.get(data_key) == "written by worker-b", f"the data is {data.get(data_key)!r}")

    # A former holder's EXTEND answers 0: it learns it lost the lock.
    expect(a.execute_command("LOCK.EXTEND", key, "worker-a", 10000) == 0, "a non-holder extended")
    expect(b.execute_command("LOCK.RELEASE", key, "worker-b") == 1, "worker-b's RELEASE failed")
    print("worker-a's EXTEND answered 0; worker-b released")

    data.delete(fence, data_key)
    print("example OK")


if __name__ == "__main__":
    try:
        main()
    except redis.ConnectionError as e:
        sys.exit(f"example FAILED: cannot reach redlock serve or the data server ({e})")
    except redis.RedisError as e:
        sys.exit(f"example FAILED: {e}")
