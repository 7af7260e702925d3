"""Real redis-server processes with the redislock module, for the tests.

Each server listens on 127.0.0.1 only, on a port the OS had free, with no
persistence and a temporary directory of its own (TLS-only with `tls`:
certificates made by scripts/test-certs.sh, see the `certs` fixture). Free
ports are found by
binding port 0 and letting go, so another process can take one first: a
server counts as started only when it answers PING and `INFO server` names
the PID we spawned. Servers are stopped by that PID, also when a test fails.

$REDISLOCK_MODULE: the module (default ../target/release/libredislock.so
from python/); $REDISLOCK_SERVER: the server binary (default redis-server).
"""

import os
import shutil
import socket
import ssl
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest

PYTHON_DIR = Path(__file__).resolve().parent.parent
MODULE = Path(os.environ.get("REDISLOCK_MODULE") or PYTHON_DIR.parent / "target" / "release" / "libredislock.so")
SERVER = os.environ.get("REDISLOCK_SERVER") or "redis-server"
CERTS_SCRIPT = PYTHON_DIR.parent / "scripts" / "test-certs.sh"
READY_DEADLINE = 10.0
# Every direct command gives up after this: a wedged server fails the test
# instead of hanging it.
DIRECT_TIMEOUT = 5.0


class RespError(Exception):
    """An error reply."""


def _read_reply(f):
    line = f.readline()
    if not line.endswith(b"\r\n"):
        raise ConnectionError("connection closed mid-reply")
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        return RespError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)
        return data[:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [_read_reply(f) for _ in range(n)]
    raise ConnectionError(f"unexpected reply {line!r}")


def _tls_context(tls):
    """The tests' own TLS: the test client certificate, no certificate
    checks (a server's certificate may be one made to fail them)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.load_cert_chain(tls["client_cert"], tls["client_key"])
    return context


def call(port, *args, tls=None):
    """One command to 127.0.0.1:port over a new connection (TLS with
    `tls`); error replies raise RespError."""
    with socket.create_connection(("127.0.0.1", port), timeout=DIRECT_TIMEOUT) as raw:
        s = _tls_context(tls).wrap_socket(raw) if tls else raw
        parts = [b"*%d\r\n" % len(args)]
        for a in args:
            a = a if isinstance(a, bytes) else str(a).encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
        s.sendall(b"".join(parts))
        with s.makefile("rb") as f:
            reply = _read_reply(f)
    if isinstance(reply, RespError):
        raise reply
    return reply


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One redis-server with the module, started on a free port. With
    `tls` (a dict: cert, key, ca, client_cert, client_key), TLS only,
    asking clients for a certificate by `ca`."""

    def __init__(self, workdir, binary=None, tls=None):
        self.dir = tempfile.mkdtemp(prefix="redis-", dir=workdir)
        self.binary = binary or SERVER
        self.tls = tls
        self.proc = None
        self.port = None
        for _ in range(20):
            if self._start(_free_port()):
                return
        raise RuntimeError(f"could not start {self.binary} (see the logs in {self.dir})")

    def _start(self, port):
        log = open(os.path.join(self.dir, "server.log"), "ab")
        try:
            if self.tls:
                listen = ["--port", "0", "--tls-port", str(port), "--tls-cert-file", self.tls["cert"],
                          "--tls-key-file", self.tls["key"], "--tls-ca-cert-file", self.tls["ca"],
                          "--tls-auth-clients", "yes"]
            else:
                listen = ["--port", str(port)]
            proc = subprocess.Popen(
                [self.binary, *listen, "--bind", "127.0.0.1", "--dir", self.dir,
                 "--unixsocket", self.socket, "--unixsocketperm", "700",
                 "--save", "", "--appendonly", "no", "--loadmodule", str(MODULE)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )
        finally:
            log.close()
        deadline = time.monotonic() + READY_DEADLINE
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                return False  # e.g. the port was taken meanwhile
            try:
                info = call(port, "INFO", "server", tls=self.tls).decode()
            except (OSError, RespError):
                time.sleep(0.02)
                continue
            if f"process_id:{proc.pid}\r\n" in info:
                self.proc, self.port = proc, port
                return True
            break  # someone else's server on that port
        proc.kill()
        proc.wait()
        return False

    @property
    def url(self):
        return f"{'rediss' if self.tls else 'redis'}://127.0.0.1:{self.port}"

    @property
    def socket(self):
        """The path of its Unix socket (it listens on both)."""
        return os.path.join(self.dir, "redis.sock")

    @property
    def socket_url(self):
        return f"unix://{self.socket}"

    @property
    def name(self):
        return f"127.0.0.1:{self.port}"

    def call(self, *args):
        return call(self.port, *args, tls=self.tls)

    def lock_info(self, key):
        """LOCK.INFO as a dict (None: not held here)."""
        reply = self.call("LOCK.INFO", key)
        if reply is None:
            return None
        fields = {}
        for k, v in zip(reply[0::2], reply[1::2]):
            fields[k.decode()] = v.decode() if isinstance(v, bytes) else v
        return fields

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


class Servers(list):
    """Five servers (a list of Server) and their URLs."""

    @property
    def urls(self):
        return [s.url for s in self]

    def holders(self, key):
        """The servers on which `key` is held now."""
        return [s for s in self if s.proc.poll() is None and s.lock_info(key) is not None]

    def stop(self):
        for s in self:
            s.kill()


def _servers(n, workdir, binary=None, tls=None):
    binary = binary or SERVER
    if not MODULE.is_file():
        pytest.fail(f"redislock module not found at {MODULE}: run `make build`, or set REDISLOCK_MODULE")
    if shutil.which(binary) is None and not os.path.isfile(binary):
        pytest.fail(f"{binary} not found: install redis-server, or set REDISLOCK_SERVER")
    started = Servers()
    try:
        for _ in range(n):
            started.append(Server(workdir, binary, tls))
    except BaseException:
        started.stop()
        raise
    return started


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
