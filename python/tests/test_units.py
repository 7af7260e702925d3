"""Durations carry their unit (issue 56): a bare number is seconds, a
datetime.timedelta or a duration string ("10s", "500ms", the CLI's) says
its own; a bare number implausible in seconds is refused naming the unit
and the fix; host:port is redis://host:port, as for the CLI and Node; a
TypeError names its argument."""

from datetime import timedelta

import pytest

import redislock
from redislock import Redlock

URL = "redis://127.0.0.1:7001"


def test_a_timeout_meant_in_milliseconds_is_refused_naming_the_unit():
    fix = r"request_timeout=50 is in seconds \(50 s\).*for 50 ms write 0\.05, timedelta\(milliseconds=50\) or '50ms'"
    for cls in (Redlock, redislock.AsyncRedlock):
        with pytest.raises(ValueError, match=fix):
            cls([URL], request_timeout=50)
    with pytest.raises(ValueError, match=r"connect_timeout=200 is in seconds \(200 s\)"):
        Redlock([URL], connect_timeout=200)
    with pytest.raises(ValueError, match=r"lock_delay=5000 is in seconds"):
        Redlock([URL], release_on_disconnect=True, lock_delay=5000)
    # Within the bounds, and the same durations with their unit: taken.
    Redlock([URL], request_timeout=10, connect_timeout=0.2)
    Redlock([URL], request_timeout=timedelta(seconds=50), connect_timeout="20s")


def test_a_ttl_or_wait_meant_in_milliseconds_is_refused_naming_the_unit(servers, resource):
    rl = Redlock(servers.urls)
    with pytest.raises(ValueError, match=r"ttl=30000 is in seconds \(30000 s\).*for 30000 ms write 30, "):
        rl.try_lock(resource, ttl=30000)
    with pytest.raises(ValueError, match=r"ttl=10000 is in seconds"):
        rl.guard(resource, ttl=10000)
    with pytest.raises(ValueError, match=r"wait=5000 is in seconds"):
        rl.lock(resource, ttl=10, wait=5000)
    with rl.try_lock(resource, ttl=5) as lock:
        with pytest.raises(ValueError, match=r"ttl=20000 is in seconds"):
            lock.extend(20000)
        assert lock.ttl == 5.0
    assert servers.holders(resource) == []


def test_durations_as_timedelta_or_strings(servers, resource):
    rl = Redlock(
        servers.urls,
        request_timeout=timedelta(milliseconds=500),
        connect_timeout="1s",
        retry_delay=("100ms", timedelta(milliseconds=200)),
    )
    with rl.try_lock(resource, ttl=timedelta(seconds=5)) as lock:
        assert lock.ttl == 5.0 and len(servers.holders(resource)) == 5
        lock.extend("7s")
        assert lock.ttl == 7.0
        lock.extend(timedelta(milliseconds=7500))
        assert lock.ttl == 7.5
    with rl.lock(resource, ttl="2500ms", wait=timedelta(seconds=1)) as lock:
        assert lock.ttl == 2.5
    # A lease over an hour is taken when written with its unit: here the
    # servers' default max-ttl (1 h) refuses it, not the client.
    with pytest.raises(redislock.ConfigError, match=r"max-ttl"):
        rl.try_lock(resource, ttl=timedelta(hours=2))
    with pytest.raises(redislock.ConfigError, match=r"max-ttl"):
        rl.try_lock(resource, ttl="2h")
    with pytest.raises(ValueError, match=r"ttl: \"abc\" is not a duration"):
        rl.try_lock(resource, ttl="abc")
    with pytest.raises(ValueError, match=r"must not be negative"):
        rl.try_lock(resource, ttl=timedelta(seconds=-1))
    election = redislock.Election(Redlock([URL], release_on_disconnect=True), "e", "v", ttl="10s")
    assert election.ttl == 10.0
    assert servers.holders(resource) == []


def test_host_port_without_a_scheme_is_a_redis_url(servers, resource):
    bare = [url[len("redis://"):] for url in servers.urls]
    rl = Redlock(bare)
    assert rl.servers == Redlock(servers.urls).servers
    with rl.try_lock(resource, ttl=5):
        assert len(servers.holders(resource)) == 5
    assert redislock.AsyncRedlock(bare[0]).quorum == 1
    # Refused with the words of the same entry with its scheme.
    for entry in ("127.0.0.1:port", "127.0.0.1:99999"):
        with pytest.raises(redislock.ConfigError) as bare_error:
            Redlock([entry])
        with pytest.raises(redislock.ConfigError) as url_error:
            Redlock(["redis://" + entry])
        words = str(url_error.value).split(entry + ": ", 1)[1]
        assert "port" in words and str(bare_error.value).endswith(f"{entry}: {words}"), (bare_error.value, url_error.value)


def test_type_errors_name_the_argument(servers, resource):
    rl = Redlock(servers.urls)
    expected = "must be a number of seconds, a datetime.timedelta or a duration string"
    with pytest.raises(TypeError, match=rf"try_lock\(\) argument 'ttl' {expected}.*not list \[10\]"):
        rl.try_lock(resource, ttl=[10])
    with pytest.raises(TypeError, match=rf"guard\(\) argument 'ttl' {expected}.*not bool True"):
        rl.guard(resource, ttl=True)
    with pytest.raises(TypeError, match=rf"lock\(\) argument 'wait' {expected}"):
        rl.lock(resource, ttl=10, wait=object())
    with pytest.raises(TypeError, match=rf"Redlock\(\) argument 'request_timeout' {expected}"):
        Redlock([URL], request_timeout=b"50ms")
    with pytest.raises(TypeError, match=rf"Redlock\(\) argument 'retry_delay' {expected}"):
        Redlock([URL], retry_delay=([0.1], 0.2))
    with rl.try_lock(resource, ttl=5) as lock:
        with pytest.raises(TypeError, match=rf"extend\(\) argument 'ttl' {expected}"):
            lock.extend([5])
    assert servers.holders(resource) == []
