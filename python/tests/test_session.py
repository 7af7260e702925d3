"""Locks bound to the process's connections (`release_on_disconnect`): a
holder killed with SIGKILL frees its lock at once, not when its ttl runs
out; without it, the lock waits for its ttl."""

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import redislock

HOLDER = textwrap.dedent(
    """
    import sys, time, redislock
    urls, resource, session = sys.argv[1].split(","), sys.argv[2], sys.argv[3] == "1"
    delay = None if sys.argv[4] == "default" else float(sys.argv[4])
    ttl, timeout = float(sys.argv[5]), float(sys.argv[6])
    rl = redislock.Redlock(urls, request_timeout=timeout, connect_timeout=1.0, release_on_disconnect=session, lock_delay=delay)
    lock = rl.guard(resource, ttl=ttl)
    print("held", flush=True)
    time.sleep(60)
    """
)

# Trials per timing: their median is asserted, so a few trials slowed by
# a busy machine do not decide.
TRIALS = 5

# The waiter's ttl: its lease on each server starts at that server's grant,
# so PEXPIRETIME less this is when it was granted there.
WAITER_TTL_MS = 5000


def _kill_to_grant(servers, resource, session, delay, patience, ttl=30.0, request_timeout=1.0):
    """A Python process holds `resource` for `ttl` (30 s), a waiter waits
    at the head of the line, the holder is killed with SIGKILL: seconds
    from the kill (the wall clock, just before it) to the waiter's grant by
    a majority (the third of the five servers' grants, each read from the
    waiter's lease there: the servers' clock, this machine's wall clock
    too), or None when none came within `patience`. The test's own threads
    waking up are not in it. `delay` None: the holder's default
    lock-delay."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, ",".join(servers.urls), resource, "1" if session else "0",
         "default" if delay is None else str(delay), str(ttl), str(request_timeout)],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )
    granted = {}
    try:
        assert proc.stdout.readline().strip() == "held"
        rl = redislock.Redlock(servers.urls, request_timeout=1.0, connect_timeout=1.0)

        def wait():
            try:
                with rl.lock(resource, ttl=WAITER_TTL_MS / 1000, wait=patience + 5.0) as lock:
                    grants = sorted(
                        s.call("PEXPIRETIME", resource) - WAITER_TTL_MS
                        for s in servers
                        if (s.lock_info(resource) or {}).get("owner") == lock.owner
                    )
                    assert len(grants) >= 3, f"the waiter holds {len(grants)} of 5 servers"
                    granted["at"] = grants[2] / 1000
            except redislock.NotAcquired:
                pass

        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        # At the head of the line: waiting on the lock itself on every server.
        deadline = time.monotonic() + 10.0
        while not all((s.lock_info(resource) or {}).get("waiters") == 1 for s in servers):
            assert time.monotonic() < deadline, "the waiter never reached the head of the line"
            time.sleep(0.005)
        killed = time.time()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        waiter.join(timeout=patience)
        return granted["at"] - killed if "at" in granted else None
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.parametrize("server", ["redis", "valkey"])
@pytest.mark.parametrize("delay", [0.0, 0.3])
def test_a_killed_holder_hands_its_lock_to_the_waiter_within_the_delay(request, resource, delay, server):
    servers = request.getfixturevalue("servers" if server == "redis" else "valkey_servers")
    times = []
    for i in range(TRIALS):
        took = _kill_to_grant(servers, f"{resource}-{i}", True, delay, 5.0)
        assert took is not None, f"the killed holder's lock was not freed (lock_delay {delay} s)"
        times.append(took)
    times.sort()
    print(f"{server}, lock_delay {delay} s: kill to majority grant {times} s (servers' clock)")
    # Order: no grant before the kill plus the delay (1 ms for the clocks'
    # rounding). Promptness, as the median of five: the servers reading the
    # killed process's EOF and handing over (a few ms idle) plus waiting
    # for a CPU on a loaded machine (tens of ms). The bound, the delay plus
    # 250 ms, needs three of five trials that late; a hold not bound to its
    # connection waits for its 30 s lease (no grant: the assert above), a
    # lock-delay ended by a poll once a second is late by 500 ms on average.
    assert times[TRIALS // 2] <= delay + 0.25, f"granted {times} s after the kill; the median beyond the lock-delay plus 250 ms"
    assert times[0] >= delay - 0.001, f"granted inside the lock-delay: {times}"


def test_the_default_lock_delay_outlasts_an_extension_interval(servers, resource):
    """Without lock_delay, a session hold of 1.5 s (request timeout 0.1 s)
    is kept an extension interval plus a request timeout plus the drift
    (0.617 s) after its connection closes, so a live holder whose
    connection is reset learns of the loss first; still well inside the
    lease."""
    took = _kill_to_grant(servers, resource, True, None, 5.0, ttl=1.5, request_timeout=0.1)
    assert took is not None, "the killed holder's lock was not freed"
    assert took >= 0.6, f"granted {took:.3f} s after the kill: the default lock-delay is 0.617 s"
    assert took < 1.5, f"granted {took:.3f} s after the kill: only when the 1.5 s lease ran out"


def test_without_release_on_disconnect_a_killed_holder_keeps_its_lock(servers, resource):
    assert _kill_to_grant(servers, resource, False, None, 3.0) is None, "without release_on_disconnect the lock waits for its ttl"


def test_session_settings_are_checked():
    with pytest.raises(redislock.ConfigError, match="release_on_disconnect needs the redislock module"):
        redislock.Redlock(["redis://127.0.0.1:1"], mode="script", release_on_disconnect=True)
    with pytest.raises(redislock.ConfigError, match="lock_delay needs release_on_disconnect"):
        redislock.Redlock(["redis://127.0.0.1:1"], lock_delay=0.5)
    with pytest.raises(ValueError):
        redislock.Redlock(["redis://127.0.0.1:1"], release_on_disconnect=True, lock_delay=-1.0)
