"""rediss:// servers: TLS with a private CA and client certificates
(redis-py's argument names), a wrong certificate named, insecure."""

import asyncio

import pytest

from redislock import AsyncRedlock, ConfigError, Redlock

# Time is not the subject: a loaded machine must not turn a healthy
# server into a timeout.
ROOMY = {"request_timeout": 1.0, "connect_timeout": 2.0}


def tls_args(certs, ca="ca.crt"):
    # Paths as pathlib.Path (os.PathLike) and as str.
    return {"ssl_ca_certs": certs / ca, "ssl_certfile": str(certs / "client.crt"), "ssl_keyfile": certs / "client.key"}


def test_lock_guard_and_release_over_tls(tls_servers, certs, resource):
    rl = Redlock(tls_servers.urls, **tls_args(certs), **ROOMY)
    with rl.lock(resource, ttl=10.0, wait=5.0) as lock:
        infos = [s.lock_info(resource) for s in tls_servers]
        assert all(i is not None and i["owner"] == lock.owner for i in infos), infos
    assert tls_servers.holders(resource) == []

    kept = rl.guard(resource, ttl=2.0)
    kept.extend(20.0)
    assert all(s.lock_info(resource)["pttl"] > 2_000 for s in tls_servers)
    kept.release()
    assert tls_servers.holders(resource) == []


def test_asyncio_over_tls(tls_servers, certs, resource):
    async def main():
        rl = AsyncRedlock(tls_servers.urls, **tls_args(certs), **ROOMY)
        async with rl.lock(resource, ttl=10.0, wait=5.0) as lock:
            assert lock.kept
            assert len(tls_servers.holders(resource)) == 5

    asyncio.run(main())
    assert tls_servers.holders(resource) == []


def test_an_unknown_ca_is_named_and_insecure_takes_it(tls_servers, certs, resource):
    rl = Redlock(tls_servers.urls, **tls_args(certs, ca="other-ca.crt"), retry_count=0, **ROOMY)
    with pytest.raises(ConfigError) as caught:
        rl.try_lock(resource, ttl=10.0)
    assert "not signed by a CA this client trusts" in str(caught.value)
    assert tls_servers.holders(resource) == []

    unchecked = Redlock(tls_servers.urls, **tls_args(certs, ca="other-ca.crt"), ssl_cert_reqs="none", **ROOMY)
    unchecked.try_lock(resource, ttl=10.0).release()


def test_tls_arguments_are_checked(certs, servers):
    missing = certs / "missing.crt"
    with pytest.raises(ConfigError, match="missing.crt.*cannot read"):
        Redlock(["rediss://127.0.0.1:6390"], ssl_ca_certs=missing)
    with pytest.raises(ValueError, match="ssl_cert_reqs"):
        Redlock(["rediss://127.0.0.1:6390"], ssl_cert_reqs="optional")
    with pytest.raises(ConfigError, match="no server is rediss://"):
        Redlock(servers.urls, **tls_args(certs))
