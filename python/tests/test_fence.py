"""The fence enforced where the data lives: `Lock.fenced` and
`Lock.guarded` give the argument list of LOCK.FENCED and LOCK.GUARD for
the caller's own client of the data server (redis-py's
``execute_command(*args)``; here the tests' RESP client, `call`), built
from the hold's own token."""

import pytest

import redis_servers
from redis_servers import RespError
from redislock import ConfigError, LockReleased, Redlock


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A Redis of its own with the module: the data server, apart from
    the five that hold the locks."""
    try:
        started = redis_servers.start_servers(1, tmp_path_factory.mktemp("data"))
    except redis_servers.StartError as e:
        pytest.fail(str(e))
    try:
        yield started[0]
    finally:
        started.stop()


def test_the_lists_carry_the_holds_token_and_the_arguments_as_given(servers, resource):
    rl = Redlock(servers.urls)
    with rl.try_lock(resource, ttl=10.0) as lock:
        token = str(lock.token)
        assert lock.fenced("reg", "SET", "k", "v") == ["LOCK.FENCED", "reg", token, "SET", "k", "v"]
        assert lock.fenced("reg") == ["LOCK.FENCED", "reg", token]
        value = b"\x00\xff"
        fenced = lock.fenced("reg", "INCRBY", b"n", 5, value)
        assert fenced[3:] == ["INCRBY", b"n", 5, value]
        assert lock.guarded("SET", "k", "v") == ["LOCK.GUARD", resource, lock.owner, token, "SET", "k", "v"]
        assert lock.guarded("PING") == ["LOCK.GUARD", resource, lock.owner, token, "PING"]
        with pytest.raises(TypeError):
            lock.guarded()


def test_a_guarded_write_lands_on_a_server_of_the_lock(servers, resource):
    rl = Redlock(servers.urls)
    key = f"{resource}:data"
    with rl.try_lock(resource, ttl=10.0) as lock:
        assert servers[0].call(*lock.guarded("SET", key, "v1")) == "OK"
        assert servers[0].call("GET", key) == b"v1"
    with pytest.raises(LockReleased):
        lock.guarded("SET", key, "v2")


def test_holds_whose_token_cannot_fence_raise_config_error(servers, resource):
    with Redlock(servers.urls).try_lock(resource, ttl=10.0, shared=True) as reader:
        with pytest.raises(ConfigError, match="shared hold"):
            reader.fenced("reg", "SET", "k", "v")
        assert reader.guarded("GET", "k")[:4] == ["LOCK.GUARD", resource, reader.owner, str(reader.token)]
    with Redlock(servers.urls, mode="script").try_lock(f"{resource}:script", ttl=10.0) as plain:
        with pytest.raises(ConfigError, match="no fencing token"):
            plain.fenced("reg", "SET", "k", "v")
        with pytest.raises(ConfigError, match="no fencing token"):
            plain.guarded("SET", "k", "v")


def test_fenced_writes_on_a_data_server_of_their_own_refuse_an_older_holder(servers, data, resource):
    rl = Redlock(servers.urls)
    register, log = f"{resource}:fence", f"{resource}:log"
    first = rl.try_lock(resource, ttl=10.0)
    assert data.call(*first.fenced(register, "RPUSH", log, "a1")) == 1
    late = first.fenced(register, "RPUSH", log, "a-late")  # built while it holds
    first.release()
    with rl.try_lock(resource, ttl=10.0) as second:
        assert second.token > first.token
        assert data.call(*second.fenced(register)) == second.token  # only raises the register
        for _ in range(5):
            with pytest.raises(RespError, match=f"FENCED older token: .* has accepted token {second.token}, not {first.token}"):
                data.call(*late)
        assert data.call(*second.fenced(register, "RPUSH", log, "b1")) == 2
    assert data.call("LRANGE", log, 0, -1) == [b"a1", b"b1"]
    assert data.call("LOCK.FENCEINFO", register) == second.token
