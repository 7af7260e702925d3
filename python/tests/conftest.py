"""Fixtures of real redis-server processes with the redislock module, from
the one Python launcher (redis_servers.py, shared with benches/python_bench.py):
see there for how servers start and stop. Certificates for the TLS tests
are made by scripts/test-certs.sh (the `certs` fixture).
"""

import os
import subprocess
import uuid

import pytest

import redis_servers
from redis_servers import ROOT

CERTS_SCRIPT = ROOT / "scripts" / "test-certs.sh"


def _servers(n, workdir, binary=None, tls=None):
    try:
        return redis_servers.start_servers(n, workdir, binary, tls)
    except redis_servers.StartError as e:
        pytest.fail(str(e))


@pytest.fixture(scope="session")
def servers(tmp_path_factory):
    """Five servers shared by the tests that leave them as they found them
    (each test uses resources of its own, see `resource`)."""
    started = _servers(5, tmp_path_factory.mktemp("shared"))
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="session")
def valkey_servers(tmp_path_factory):
    """Five Valkey 8.1 servers ($REDISLOCK_VALKEY, which `make test` sets;
    the test is skipped, saying so, without it)."""
    binary = os.environ.get("REDISLOCK_VALKEY")
    if not binary or not os.path.isfile(binary):
        pytest.skip("Valkey 8.1 not found: set REDISLOCK_VALKEY (make test does)")
    started = _servers(5, tmp_path_factory.mktemp("valkey"), binary)
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def own_servers(tmp_path):
    """Five servers for one test, which may kill them."""
    started = _servers(5, tmp_path)
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="session")
def certs(tmp_path_factory):
    """The directory of the TLS tests' certificates (scripts/test-certs.sh:
    ca.crt, server.crt, client.crt, other-ca.crt, ... with their keys)."""
    directory = tmp_path_factory.mktemp("certs")
    made = subprocess.run(["bash", str(CERTS_SCRIPT), str(directory)], capture_output=True, text=True)
    if made.returncode != 0:
        pytest.fail(f"scripts/test-certs.sh failed (needs openssl):\n{made.stderr}")
    return directory


@pytest.fixture(scope="session")
def tls_servers(certs, tmp_path_factory):
    """Five TLS-only servers with the test CA's server certificate, asking
    clients for a certificate by the test CA."""
    tls = {
        "cert": str(certs / "server.crt"), "key": str(certs / "server.key"), "ca": str(certs / "ca.crt"),
        "client_cert": str(certs / "client.crt"), "client_key": str(certs / "client.key"),
    }
    started = _servers(5, tmp_path_factory.mktemp("tls"), tls=tls)
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture
def resource(request):
    """A resource name no other test uses."""
    return f"{request.node.name}:{uuid.uuid4().hex[:8]}"
