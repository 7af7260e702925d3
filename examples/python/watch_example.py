#!/usr/bin/env python3
"""Watching and controlling a lock from redis-py (sync): an operator's view
of orders:42. A watcher hears every change (redislock.notify), the operator
asks a holder to let go (LOCK.ASK), revokes a stuck one behind a fence
(LOCK.REVOKE ... FENCE) and resizes a semaphore (LOCK.RESIZE).

Needs a Redis with the module loaded (`make run` starts one on
127.0.0.1:6379). Server address: REDIS_URL, or REDIS_HOST / REDIS_PORT.
It sets redislock.notify, a server-wide setting, while it runs (and puts
the old value back), and uses the keys orders:42, orders:42:fence,
orders:42:state and orders:pool (deleted at the end): run it against a
server of its own. Checks its own output; prints `example OK` or exits
non-zero.
"""

import os
import sys
import threading
import time
from typing import NamedTuple

import redis

KEY, POOL = "orders:42", "orders:pool"
FENCE, STATE = "orders:42:fence", "orders:42:state"


def connect(decode_responses=True):
    # socket_timeout: a WAIT blocks for up to its timeout; redis-py 8's
    # default socket timeout (5 s) would cut a longer wait short.
    options = {"decode_responses": decode_responses, "socket_timeout": 60}
    url = os.environ.get("REDIS_URL")
    if url:
        return redis.Redis.from_url(url, **options)
    host = os.environ.get("REDIS_HOST", "127.0.0.1")
    port = int(os.environ.get("REDIS_PORT", "6379"))
    return redis.Redis(host=host, port=port, **options)


def expect(ok, what):
    if not ok:
        sys.exit(f"example FAILED: {what}")


def channel(client, key):
    # A lock announces its changes on __redislock@DB__:KEY.
    return f"__redislock@{client.connection_pool.connection_kwargs.get('db', 0)}__:{key}"


class Announcement(NamedTuple):
    key: str
    kind: str
    token: int
    owner: str
    value: str


def parse(message):
    """`KIND TOKEN OWNER-LENGTH OWNER VALUE`, as bytes: the owner is
    OWNER-LENGTH bytes and may hold spaces, so it is cut by its length, not
    split on spaces; VALUE is the rest."""
    channel_name, data = message["channel"], message["data"]
    kind, token, length, rest = data.split(b" ", 3)
    n = int(length)
    key = channel_name.split(b":", 1)[1].decode()
    return Announcement(key, kind.decode(), int(token), rest[:n].decode(), rest[n + 1:].decode())


def subscribe(pubsub, *channels, **handlers):
    """Subscribes and returns once the server confirmed every channel: pub/sub
    keeps nothing, so a change made before that would go unheard."""
    pubsub.subscribe(*channels, **handlers)
    confirmed, deadline = 0, time.monotonic() + 5
    while confirmed < len(channels) + len(handlers):
        message = pubsub.get_message(timeout=max(0.0, deadline - time.monotonic()))
        expect(message is not None, "the server never confirmed a subscription")
        confirmed += message["type"] == "subscribe"


def hear(watcher, count):
    """The watcher's next `count` announcements, in the order the server made them."""
    heard, deadline = [], time.monotonic() + 5
    while len(heard) < count:
        message = watcher.get_message(timeout=max(0.0, deadline - time.monotonic()))
        expect(message is not None, f"the watcher heard {heard}, then nothing more")
        if message["type"] == "message":
            heard.append(parse(message))
    for a in heard:
        print(f"  watcher: {a.key}: {a.kind} {a.token} {a.owner!r} {a.value!r}")
    return heard


def in_background(client, *command):
    """Sends a blocking command (LOCK.ACQUIRE ... WAIT) from a thread: it holds
    its connection until it is answered. Returns a function that awaits the reply."""
    reply = {}
    thread = threading.Thread(daemon=True, target=lambda: reply.update(value=client.execute_command(*command)))
    thread.start()

    def result():
        thread.join(5)
        expect("value" in reply, f"{' '.join(map(str, command))} got no reply")
        return reply["value"]
    return result


def await_waiters(client, key, count):
    deadline = time.monotonic() + 5
    while True:
        reply = client.execute_command("LOCK.INFO", key) or {}
        # A map in RESP3 (redis-py 8's default), a flat list in RESP2.
        info = reply if isinstance(reply, dict) else dict(zip(reply[::2], reply[1::2]))
        if info.get("waiters") == count:
            return
        expect(time.monotonic() < deadline, f"{key} never had {count} waiter(s)")
        time.sleep(0.01)


def story(operator):
    heard = []  # what the watcher heard, in order
    # The watcher reads bytes: OWNER-LENGTH counts bytes.
    watcher = connect(decode_responses=False).pubsub()
    subscribe(watcher, channel(operator, KEY), channel(operator, POOL))
    print(f"watcher subscribed to {channel(operator, KEY)} and {channel(operator, POOL)}")

    worker_1, worker_2 = connect(), connect()
    token_1 = worker_1.execute_command("LOCK.ACQUIRE", KEY, "worker-1", 30000)
    expect(isinstance(token_1, int), f"worker-1's ACQUIRE answered {token_1!r}, not a token")
    print(f"worker-1 acquired {KEY} with token {token_1}")
    heard += hear(watcher, 1)

    # worker-1 listens on its lock's channel while it holds. An ask carries
    # the token of the hold it is meant for: one with an older token was for
    # an earlier hold. On an ask for this hold, it finishes up and lets go.
    def on_announcement(message):
        a = parse(message)
        if a.kind == "ask" and a.token == token_1:
            print(f"  worker-1 was asked to let go ({a.value!r}) and releases")
            worker_1.execute_command("LOCK.RELEASE", KEY, "worker-1")
    listener = connect(decode_responses=False).pubsub()
    subscribe(listener, **{channel(operator, KEY): on_announcement})
    listening = listener.run_in_thread(sleep_time=0.01, daemon=True)

    granted_2 = in_background(worker_2, "LOCK.ACQUIRE", KEY, "worker-2", 30000, "WAIT", 15000)
    await_waiters(operator, KEY, 1)
    print("worker-2 waits in line")

    asked = operator.execute_command("LOCK.ASK", KEY, "MESSAGE", "deploy")
    expect(asked == 1, f"LOCK.ASK asked {asked!r} holders, not 1")
    token_2 = granted_2()
    expect(isinstance(token_2, int) and token_2 > token_1,
           f"worker-2 was granted {token_2!r}, expected a token above {token_1}")
    print(f"operator asked worker-1 to let go; worker-2 was granted {KEY} with token {token_2}")
    heard += hear(watcher, 3)
    listening.stop()

    # worker-2 hangs while it holds: the operator takes the lock back and
    # raises the fence, so worker-2's late writes are refused.
    revoke_token, revoked = operator.execute_command("LOCK.REVOKE", KEY, "FENCE", FENCE)
    expect(revoked == 1 and revoke_token > token_2,
           f"LOCK.REVOKE answered [{revoke_token}, {revoked}], expected [T > {token_2}, 1]")
    print(f"operator revoked worker-2's hold: token {revoke_token}")
    heard += hear(watcher, 1)
    try:
        worker_2.execute_command("LOCK.FENCED", FENCE, token_2, "SET", STATE, "x")
        expect(False, "worker-2's write with its revoked token went through")
    except redis.ResponseError as e:
        expect(str(e).startswith("FENCED older token"), f"unexpected error {e}")
        print(f"worker-2's late write was refused: {e}")
    reply = operator.execute_command("LOCK.FENCED", FENCE, revoke_token, "SET", STATE, "revoked")
    expect(reply == "OK", f"a write with token {revoke_token} answered {reply!r}")
    print(f"a write with token {revoke_token} passes the fence")

    # A semaphore of one permit, held, and a second request waiting; the
    # operator makes room for two. Owners may hold spaces.
    packer_1, packer_2 = connect(), connect()
    permit_1 = packer_1.execute_command("LOCK.ACQUIRE", POOL, "packer 1", 30000, "SHARED", "LIMIT", 1)
    expect(isinstance(permit_1, int), f"packer 1's ACQUIRE answered {permit_1!r}")
    heard += hear(watcher, 1)
    granted_permit_2 = in_background(
        packer_2, "LOCK.ACQUIRE", POOL, "packer 2", 30000, "SHARED", "LIMIT", 1, "WAIT", 15000)
    await_waiters(operator, POOL, 1)
    print(f"packer 1 holds {POOL} (LIMIT 1) with token {permit_1}; packer 2 waits in line")
    resized = operator.execute_command("LOCK.RESIZE", POOL, 2)
    expect(resized == 1, f"LOCK.RESIZE granted {resized!r} waiters, not 1")
    permit_2 = granted_permit_2()
    expect(isinstance(permit_2, int) and permit_2 > permit_1, f"packer 2 was granted {permit_2!r}")
    print(f"operator resized {POOL} to 2: packer 2 was granted it with token {permit_2}")
    heard += hear(watcher, 2)

    for packer, owner in ((packer_1, "packer 1"), (packer_2, "packer 2")):
        expect(packer.execute_command("LOCK.RELEASE", POOL, owner) == 1, f"{owner}'s RELEASE failed")
    print("both packers released")
    heard += hear(watcher, 2)

    # Everything the watcher heard, in order: kinds, tokens, owners, values.
    expected = [
        Announcement(KEY, "grant", token_1, "worker-1", ""),
        Announcement(KEY, "ask", token_1, "worker-1", "deploy"),
        Announcement(KEY, "release", token_1, "worker-1", ""),
        Announcement(KEY, "handoff", token_2, "worker-2", ""),
        Announcement(KEY, "revoke", revoke_token, "worker-2", ""),
        Announcement(POOL, "grant", permit_1, "packer 1", ""),
        Announcement(POOL, "resize", 0, "", "2"),
        Announcement(POOL, "handoff", permit_2, "packer 2", ""),
        Announcement(POOL, "release", permit_1, "packer 1", ""),
        Announcement(POOL, "release", permit_2, "packer 2", ""),
    ]
    expect(heard == expected, f"the watcher heard {heard}, expected {expected}")
    print(f"the watcher heard the {len(heard)} changes in order")


def main():
    operator = connect()
    old_notify = operator.config_get("redislock.notify").get("redislock.notify")
    expect(old_notify is not None, "this server has no redislock.notify: is the module loaded?")
    # Announce every change of the orders:* locks on their channels.
    operator.config_set("redislock.notify", "orders:*")
    try:
        story(operator)
    finally:
        operator.config_set("redislock.notify", old_notify)
        operator.delete(KEY, POOL, FENCE, STATE)
    print("example OK")


if __name__ == "__main__":
    try:
        main()
    except redis.ConnectionError as e:
        sys.exit(f"example FAILED: cannot reach Redis ({e}); is `make run` running?")
    except redis.RedisError as e:
        # An unexpected error reply, such as "unknown command" without the module.
        sys.exit(f"example FAILED: {e}")
