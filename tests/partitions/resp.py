"""A minimal RESP2 client (stdlib only) for the partition harness: the
harness's own commands to the servers, and the fenced writes of the
workers and of the commands `redlock run` starts.

The fenced resource is a hash in a plain Redis, written only through
FENCED_WRITE, which refuses a token not above the last one accepted (the
recipe of docs/safety.md, as client/tests/common/fence.rs writes it).
"""

import socket

# KEYS[1] the resource, ARGV[1] the writer's fencing token, ARGV[2] the
# value. 1 accepted, 0 refused (stale). Tokens are Unix microseconds,
# exact in Lua's doubles.
FENCED_WRITE = """
local last = tonumber(redis.call('HGET', KEYS[1], 'token') or '-1')
local token = tonumber(ARGV[1])
if token == nil or token <= last then
  redis.call('HINCRBY', KEYS[1], 'refused', 1)
  return 0
end
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
    """True when the resource accepted the write, False when it refused
    it as stale."""
    reply = conn.call("EVAL", FENCED_WRITE, 1, key, token, value)
    if reply not in (0, 1):
        raise RespError(f"fenced write replied {reply!r}")
    return reply == 1


def pairs(reply):
    """A flat [k, v, k, v] reply as a dict of str → str|int|list."""
    out = {}
    for k, v in zip(reply[0::2], reply[1::2]):
        out[k.decode() if isinstance(k, bytes) else str(k)] = v.decode() if isinstance(v, bytes) else v
    return out
