"""Locks bound to the process's connections (`release_on_disconnect`): a
holder killed with SIGKILL frees its lock at once, not when its ttl runs
out; without it, the lock waits for its ttl."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

import redislock

HOLDER = textwrap.dedent(
    """
    import sys, time, redislock
    urls, resource, session = sys.argv[1].split(","), sys.argv[2], sys.argv[3] == "1"
    rl = redislock.Redlock(urls, request_timeout=1.0, connect_timeout=1.0, release_on_disconnect=session)
    lock = rl.guard(resource, ttl=30.0)
    print("held", flush=True)
    time.sleep(60)
    """
)


@pytest.mark.parametrize("session", [True, False])
def test_a_killed_holder_frees_its_lock_only_with_release_on_disconnect(servers, resource, session):
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, ",".join(servers.urls), resource, "1" if session else "0"],
        stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True,
    )
    try:
        assert proc.stdout.readline().strip() == "held"
        killed = time.monotonic()
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        rl = redislock.Redlock(servers.urls, request_timeout=1.0, connect_timeout=1.0)
        if session:
            with rl.lock(resource, ttl=5.0, wait=5.0):
                took = time.monotonic() - killed
            assert took < 2.0, f"granted {took:.2f} s after the kill, with 30 s of ttl left"
        else:
            with pytest.raises(redislock.NotAcquired):
                rl.lock(resource, ttl=5.0, wait=2.0).__enter__()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_session_settings_are_checked():
    with pytest.raises(redislock.ConfigError, match="release_on_disconnect needs the redislock module"):
        redislock.Redlock(["redis://127.0.0.1:1"], mode="script", release_on_disconnect=True)
    with pytest.raises(redislock.ConfigError, match="lock_delay needs release_on_disconnect"):
        redislock.Redlock(["redis://127.0.0.1:1"], lock_delay=0.5)
    with pytest.raises(ValueError):
        redislock.Redlock(["redis://127.0.0.1:1"], release_on_disconnect=True, lock_delay=-1.0)
