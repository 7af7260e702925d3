"""A minimal RESP2 client (stdlib only) for the partition harness: the
harness's own commands to the servers, and the fenced writes of the
workers and of the commands `redlock run` starts.

The fenced resource is a hash in a Redis with the module, written only
through the module's own fence: `LOCK.FENCED <key>:register token EVAL
FENCED_WRITE ...` runs the write only when its token is at least every
token the register accepted (issue 58), so a holder that lost its lock
writes nothing once a newer holder wrote.
"""

import socket

# KEYS[1] the resource, ARGV[1] the writer's fencing token, ARGV[2] the
# value: what an accepted write does (LOCK.FENCED refuses the others).
FENCED_WRITE = """
redis.call('HSET', KEYS[1], 'token', ARGV[1], 'value', ARGV[2])
redis.call('HINCRBY', KEYS[1], 'accepted', 1)
return 1
"""


class RespError(Exception):
    """An error reply."""


def encode(args):
    parts = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(parts)


def read_reply(f):
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
        if len(data) != n + 2:
            raise ConnectionError("connection closed mid-reply")
        return data[:-2]
    if kind == b"*":
        n = int(rest)
        return None if n < 0 else [read_reply(f) for _ in range(n)]
    raise ConnectionError(f"unexpected reply {line!r}")


class Conn:
    """One connection; `sock` may come from another network namespace
    (see harness.socket_in)."""

    def __init__(self, addr, timeout=5.0, sock=None):
        self.addr = addr
        self.sock = sock or socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(addr)
        except BaseException:
            self.sock.close()
            raise
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.f = self.sock.makefile("rb")

    def call(self, *args):
        """One command; an error reply raises RespError."""
        self.sock.sendall(encode(args))
        reply = read_reply(self.f)
        if isinstance(reply, RespError):
            raise reply
        return reply

    def close(self):
        try:
            self.f.close()
        finally:
            self.sock.close()


def fenced_write(conn, key, token, value):
    """True when the resource accepted the write, False when the token
    register refused it as stale (`FENCED older token`)."""
    try:
        reply = conn.call("LOCK.FENCED", key + ":register", token, "EVAL", FENCED_WRITE, 1, key, token, value)
    except RespError as e:
        if not str(e).startswith("FENCED older token"):
            raise
        conn.call("HINCRBY", key, "refused", 1)
        return False
    if reply != 1:
        raise RespError(f"fenced write replied {reply!r}")
    return True


def pairs(reply):
    """A flat [k, v, k, v] reply as a dict of str → str|int|list."""
    out = {}
    for k, v in zip(reply[0::2], reply[1::2]):
        out[k.decode() if isinstance(k, bytes) else str(k)] = v.decode() if isinstance(v, bytes) else v
    return out
