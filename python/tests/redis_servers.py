"""The one launcher of real redis-server processes for the Python code:
the pytest suite (conftest.py) and benches/python_bench.py. Standard
library only.

Each server listens on 127.0.0.1 only, on a port the OS had free, with no
persistence and a temporary directory of its own, the redislock module
loaded (TLS-only with `tls`: certificates made by scripts/test-certs.sh).
Free ports are found by binding port 0 and letting go, so another process
can take one first: a server counts as started only when `INFO server`
names the PID we spawned. Servers are stopped by that PID.

$REDISLOCK_MODULE: the module (default target/release/libredislock.so of
the workspace); $REDISLOCK_SERVER: the server binary (default redis-server).
"""

import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
MODULE = Path(os.environ.get("REDISLOCK_MODULE") or ROOT / "target" / "release" / "libredislock.so")
SERVER = os.environ.get("REDISLOCK_SERVER") or "redis-server"
READY_DEADLINE = 10.0
# Every direct command gives up after this: a wedged server fails the test
# instead of hanging it.
DIRECT_TIMEOUT = 5.0

# The one RESP reader of the Python tests: the partition suite's client,
# standard library only.
sys.path.insert(0, str(ROOT / "tests" / "partitions"))
from resp import RespError, encode, read_reply  # noqa: E402


def tls_context(tls):
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
        s = tls_context(tls).wrap_socket(raw) if tls else raw
        s.sendall(encode(args))
        with s.makefile("rb") as f:
            reply = read_reply(f)
    if isinstance(reply, RespError):
        raise reply
    return reply


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """One redis-server with the module, started on a free port. With
    `tls` (a dict: cert, key, ca, client_cert, client_key), TLS only,
    asking clients for a certificate by `ca`."""

    def __init__(self, workdir, binary=None, tls=None, unix_socket=True):
        self.dir = tempfile.mkdtemp(prefix="redis-", dir=workdir)
        self.binary = binary or SERVER
        self.tls = tls
        self.unix_socket = unix_socket
        self.proc = None
        self.port = None
        for _ in range(20):
            if self._start(free_port()):
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
            if self.unix_socket:
                listen += ["--unixsocket", self.socket, "--unixsocketperm", "700"]
            proc = subprocess.Popen(
                [self.binary, *listen, "--bind", "127.0.0.1", "--dir", self.dir,
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
        """The path of its Unix socket (with `unix_socket`, it listens on both)."""
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


class StartError(RuntimeError):
    """The module or the server binary is missing."""


def start_servers(n, workdir, binary=None, tls=None, unix_socket=True):
    """`n` servers (a Servers), all stopped again if one cannot start."""
    binary = binary or SERVER
    if not MODULE.is_file():
        raise StartError(f"redislock module not found at {MODULE}: run `make build`, or set REDISLOCK_MODULE")
    if shutil.which(binary) is None and not os.path.isfile(binary):
        raise StartError(f"{binary} not found: install redis-server, or set REDISLOCK_SERVER")
    started = Servers()
    try:
        for _ in range(n):
            started.append(Server(workdir, binary, tls, unix_socket))
    except BaseException:
        started.stop()
        raise
    return started
