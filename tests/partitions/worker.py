"""A client of the partition harness, run inside a client's network
namespace (`ip netns exec NS python worker.py CONFIG-JSON`). It holds locks
through the `redislock` package (one `Redlock` handle per process, shared by
its threads, as docs/client.md advises) and through `redlock run`
processes, writes to the fenced resource, and reports on stdout as JSON
lines; the harness sends commands on stdin, one JSON object a line.

Every time is `time.monotonic()`: CLOCK_MONOTONIC, one clock for every
process of the machine whatever its network namespace, so the harness
compares holds of all clients.

Commands (`op`):
  hold      {id, res, ttl, wait, kind, limit, write}: a kept lock (guard),
            held until `release`; events attempt, granted, wrote, lost, failed
  release   {id}: events releasing, released, then the hold's record
  write     {id, value}: a fenced write with that hold's token (also after
            the lock was lost: the fence must refuse it); event wrote
  loop      {id, res, kind, ttl, wait, hold_ms: [lo, hi], stop, shared_ratio,
            limit}: acquire, write, hold, release until the stop file exists
  cli_hold  {id, res, ttl, wait, go | hold_ms, on_lost, shared, limit}: one
            `redlock run` whose command is hold.py, its events forwarded
  cli_loop  like loop, each hold a `redlock run`
  endpoint  {}: starts this worker's `redlock serve` (see below), or starts
            it again on the port it had; events endpoint {pid, port}, then
            endpoint_exit {pid, code} when it ends (the harness kills it)
  serve_loop {id, res, ttl, wait, hold_ms: [lo, hi], stop, late_ratio,
            overstay_ratio, session}: like loop, exclusive, through the
            endpoint only; a write at the grant and one at the end of the
            hold
  exit

`redlock serve`: a worker may reach the quorum only through an endpoint of
its own, a `redlock serve` process in its network namespace (the sidecar
deployment: a fault on the worker's link cuts the endpoint off from the
servers too), started with the servers and settings the library handle
would use (--request-timeout, --connect-timeout, --retry-count,
--retry-delay), listening on a free port of 127.0.0.1. Its loops speak
RESP to it (resp.py), one connection per loop, as a Go or PHP program
would: `LOCK.ACQUIRE res owner ttl WAIT wait` (the reply is the quorum's
fencing token; the owner is new for every request, as Redlock's random
value), a fenced write with that token, a hold, `LOCK.RELEASE`.
Such a client hears of no loss: its hold is valid until `sent` + ttl -
drift (sent: when the acquisition went out, before its wait; the servers
start the lease no earlier; drift as the quorum client's, 1 % of the ttl
plus 2 ms), and it writes and holds only until then; `released` is the
start of the release or that end, whichever came first (lost when the
end came first). With `overstay_ratio`, that share of the holds is a job
that would run ttl + 0.5 s: it stops at the end of its validity (a client
that did not would overlap the next holder, granted once the lease ends
on a quorum). A `wait` of at most half the ttl leaves every grant most
of its validity; a grant whose reply came after it (a very slow machine)
is held for no time, never written with. A connection that breaks (the
endpoint was killed) fails the request it carried, and the loop connects
again, every 100 ms, until the endpoint is back. With `session`, the holds are
`SESSION` holds: the endpoint keeps them extended while the connection
lives and closes it when an extension fails, so such a hold has no
deadline of its own and ends (lost) when the loop sees its connection
close, which it watches throughout the hold. With `late_ratio`, that
share of the holds writes once more with its token 100-600 ms after the
release (late: another holder has most likely written since, and the
fence must refuse it; harness.check flags a late write accepted after a
newer token's write) before its record.

Every hold ends with a `hold` record: client, resource, kind, key, token,
sent (the request went out), granted (the grant's reply arrived, or the
command under `redlock run` started), released (the release started, the
command ended, or the lost signal fired, whichever came first), lost,
writes. Kinds: exclusive, shared (a reader of a read-write lock), permit.
"""

import collections
import json
import os
import random
import re
import select
import socket
import subprocess
import sys
import threading
import time
import traceback

import resp

HERE = os.path.dirname(os.path.abspath(__file__))
HOLD_PY = os.path.join(HERE, "hold.py")

_out = threading.Lock()
NAME = "?"

# The quorum client's drift for a lease of `ttl` seconds
# (client/src/quorum.rs: 1 % of it plus 2 ms).
def drift(ttl):
    return ttl * 0.01 + 0.002



def emit(ev, **fields):
    fields["ev"] = ev
    fields["w"] = NAME
    fields.setdefault("t", time.monotonic())
    line = json.dumps(fields)
    with _out:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


class Hold:
    """One acquisition, from the request to its release."""

    def __init__(self, hid, res, kind):
        self.id = hid
        self.res = res
        self.kind = kind
        self.key = res
        self.token = None
        self.owner = None
        self.sent = None
        self.granted = None
        self.lost_t = None
        self.release_t = None
        self.end_t = None
        self.lock = None
        self.writes = []
        self.lost_event = threading.Event()

    def on_lost(self):
        # Called once, from a thread of redislock's runtime.
        self.lost_t = time.monotonic()
        self.lost_event.set()
        emit("lost", id=self.id, res=self.res, t=self.lost_t)

    def record(self):
        ends = [t for t in (self.release_t, self.lost_t, self.end_t) if t is not None]
        emit(
            "hold",
            id=self.id,
            res=self.res,
            kind=self.kind,
            key=self.key,
            token=self.token,
            owner=self.owner,
            sent=self.sent,
            granted=self.granted,
            released=min(ends) if ends else None,
            lost=self.lost_t is not None,
            lost_t=self.lost_t,
            writes=self.writes,
        )


class Worker:
    def __init__(self, cfg):
        self.cfg = cfg
        self.servers = cfg["servers"]
        host, port = cfg["fence"].rsplit(":", 1)
        self.fence_addr = (host, int(port))
        self.fence_prefix = cfg.get("fence_prefix", "fence:")
        self.local = threading.local()
        self.holds = {}
        self._rl = None
        self._rl_lock = threading.Lock()
        self.endpoint_port = None

    @property
    def rl(self):
        with self._rl_lock:
            if self._rl is None:
                import redislock

                s = self.cfg.get("settings", {})
                self._rl = redislock.Redlock(
                    self.servers,
                    request_timeout=s.get("request_timeout", 0.05),
                    connect_timeout=s.get("connect_timeout", 0.2),
                    retry_count=s.get("retry_count", 3),
                    retry_delay=tuple(s.get("retry_delay", (0.1, 0.2))),
                )
            return self._rl

    # The fenced resource: one connection per thread.
    def fenced_write(self, key, token, value):
        for attempt in (0, 1):
            conn = getattr(self.local, "fence", None)
            try:
                if conn is None:
                    conn = self.local.fence = resp.Conn(self.fence_addr)
                return resp.fenced_write(conn, self.fence_prefix + key, token, value)
            except (OSError, ConnectionError):
                self.local.fence = None
                if attempt:
                    raise

    def write(self, h, value=None, late=False):
        sent = time.monotonic()
        accepted = self.fenced_write(h.key, h.token, value or f"{NAME}/{h.id}")
        t = time.monotonic()
        h.writes.append({"sent": sent, "t": t, "accepted": accepted, "late": late, "lost_before": h.lost_t is not None})
        emit("wrote", id=h.id, res=h.res, accepted=accepted, late=late, t=t)
        return accepted

    # --- the library -----------------------------------------------------

    def acquire(self, h, ttl, wait, kind, limit):
        import redislock

        h.sent = time.monotonic()
        emit("attempt", id=h.id, res=h.res, kind=kind, t=h.sent)
        try:
            lock = self.rl.guard(h.res, ttl, wait, shared=(kind == "shared"), limit=limit, on_lost=h.on_lost)
        except redislock.NotAcquired as e:  # anything else is an error of the scenario
            emit("failed", id=h.id, res=h.res, kind=kind, error=type(e).__name__, why=getattr(e, "kind", None),
                 message=str(e), sent=h.sent)
            return False
        h.granted = time.monotonic()
        h.lock, h.token, h.key, h.owner = lock, lock.token, lock.key, lock.owner
        emit("granted", id=h.id, res=h.res, kind=kind, token=h.token, key=h.key, owner=h.owner, t=h.granted,
             sent=h.sent)
        return True

    def release(self, h):
        import redislock

        h.release_t = time.monotonic()
        emit("releasing", id=h.id, res=h.res, t=h.release_t)
        try:
            h.lock.release()
            ok, error = True, None
        except redislock.LockLost:
            ok, error = False, "LockLost"
        except redislock.RedlockError as e:
            ok, error = False, f"{type(e).__name__}: {e}"
        emit("released", id=h.id, res=h.res, ok=ok, error=error)
        h.record()

    def op_hold(self, c):
        h = Hold(c["id"], c["res"], c.get("kind", "exclusive"))
        self.holds[h.id] = h
        if self.acquire(h, c["ttl"], c.get("wait"), h.kind, c.get("limit")) and c.get("write", True):
            self.write(h)

    def op_release(self, c):
        self.release(self.holds[c["id"]])

    def op_write(self, c):
        h = self.holds[c["id"]]
        self.write(h, c.get("value"), late=c.get("late", False))

    def op_loop(self, c):
        lo, hi = c.get("hold_ms", (50, 200))
        n = failed = 0
        while not os.path.exists(c["stop"]):
            kind = self.pick_kind(c)
            h = Hold(f"{c['id']}.{n + failed}", c["res"], kind)
            if not self.acquire(h, c["ttl"], c.get("wait"), kind, c.get("limit")):
                failed += 1
                continue
            if kind != "shared" and not h.lost_event.is_set():
                self.write(h)
            # Hold, and stop at once when the lock is lost.
            h.lost_event.wait(max(0.0, h.granted + random.uniform(lo, hi) / 1000.0 - time.monotonic()))
            self.release(h)
            n += 1
        emit("loop_done", id=c["id"], res=c["res"], holds=n, failed=failed)

    @staticmethod
    def pick_kind(c):
        kind = c.get("kind", "exclusive")
        if kind == "rw":
            return "shared" if random.random() < c.get("shared_ratio", 0.6) else "exclusive"
        return kind

    # --- redlock serve ---------------------------------------------------

    def settings_args(self):
        """The library handle's settings as the `redlock` command's options."""
        s = self.cfg.get("settings", {})
        lo, hi = s.get("retry_delay", (0.1, 0.2))
        return ["--request-timeout", f"{int(s.get('request_timeout', 0.05) * 1000)}ms",
                "--connect-timeout", f"{int(s.get('connect_timeout', 0.2) * 1000)}ms",
                "--retry-count", str(s.get("retry_count", 3)),
                "--retry-delay", f"{int(lo * 1000)}ms..{int(hi * 1000)}ms"]

    def op_endpoint(self, c):
        # This thread waits for the endpoint: the death signal (setpriv)
        # follows the thread that started it.
        listen = f"127.0.0.1:{self.endpoint_port or 0}"
        argv = ["setpriv", "--pdeathsig", "KILL", "--", self.cfg["redlock"], "serve", "--servers",
                ",".join(self.servers), *self.settings_args(), "--listen", listen]
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        tail = collections.deque(maxlen=20)
        port = None
        for raw in p.stderr:
            line = raw.decode(errors="replace").strip()
            tail.append(line)
            m = re.search(r"listening on 127\.0\.0\.1:(\d+)$", line)
            if m:
                port = int(m.group(1))
                break
        if port is None:
            code = p.wait()
            emit("error", id=c.get("id"), message=f"redlock serve exited {code} before listening: {list(tail)}")
            return
        self.endpoint_port = port
        emit("endpoint", pid=p.pid, port=port)
        for raw in p.stderr:
            tail.append(raw.decode(errors="replace").strip())
        code = p.wait()
        emit("endpoint_exit", pid=p.pid, code=code, stderr=list(tail)[-5:])

    def serve_call(self, *args, timeout):
        """A command on this thread's connection to the endpoint (made anew
        after one broke); a broken connection raises ConnectionError or
        OSError and is dropped."""
        conn = getattr(self.local, "serve", None)
        try:
            if conn is None:
                if self.endpoint_port is None:
                    raise ConnectionError("no endpoint yet")
                conn = self.local.serve = resp.Conn(("127.0.0.1", self.endpoint_port))
            conn.sock.settimeout(timeout)
            return conn.call(*args)
        except (OSError, ConnectionError):
            if conn is not None:
                conn.close()
            self.local.serve = None
            raise

    def op_serve_loop(self, c):
        lo, hi = c.get("hold_ms", (50, 200))
        ttl, wait = c["ttl"], c["wait"]
        n = failed = 0
        while not os.path.exists(c["stop"]):
            h = Hold(f"{c['id']}.{n + failed}", c["res"], "exclusive")
            # An owner per request, as Redlock prescribes: under one owner,
            # asking again after a release that reached no quorum (a
            # flapping link) is a refresh of the hold that still stands,
            # its token kept, one hold to the servers but two to the
            # checker (a token not above the one released before).
            owner = h.owner = f"{NAME}-{h.id}"
            h.sent = time.monotonic()
            emit("attempt", id=h.id, res=h.res, kind=h.kind, t=h.sent, serve=True)
            session = ["SESSION"] if c.get("session") else []
            try:
                token = self.serve_call("LOCK.ACQUIRE", h.res, owner, int(ttl * 1000), "WAIT", int(wait * 1000),
                                        *session, timeout=wait + 10)
            except (OSError, ConnectionError, resp.RespError) as e:
                emit("failed", id=h.id, res=h.res, kind=h.kind, error=type(e).__name__, message=str(e), sent=h.sent,
                     serve=True)
                failed += 1
                if not isinstance(e, resp.RespError):
                    time.sleep(0.1)  # the endpoint is down: connect again soon
                continue
            if token is None:
                emit("failed", id=h.id, res=h.res, kind=h.kind, error="nil", sent=h.sent, serve=True)
                failed += 1
                continue
            h.granted = time.monotonic()
            h.token = int(token)
            conn = self.local.serve
            # A SESSION hold stands while its connection does: the endpoint
            # extends it, and closes the connection when an extension
            # fails (or when it dies): no deadline of its own.
            valid_until = float("inf") if session else h.sent + ttl - drift(ttl)
            emit("granted", id=h.id, res=h.res, kind=h.kind, token=h.token, key=h.key, owner=owner, t=h.granted,
                 sent=h.sent, valid_until=None if session else valid_until, serve=True, session=bool(session))

            def holding(timeout=0.0):
                """Waits up to `timeout`; False once the hold may be lost."""
                if session and h.lost_t is None and closed(conn, timeout):
                    h.lost_t = time.monotonic()
                    self.local.serve = None
                    conn.close()
                    emit("lost", id=h.id, res=h.res, t=h.lost_t, serve=True)
                elif not session:
                    time.sleep(timeout)
                return h.lost_t is None and time.monotonic() < valid_until

            if holding():
                self.write(h)
            # An overstaying job would run past the lease: it stops at the
            # hold's validity, and its last write is made only before then.
            hold = ttl + 0.5 if random.random() < c.get("overstay_ratio", 0.0) else random.uniform(lo, hi) / 1000.0
            end = min(h.granted + hold, valid_until)
            if holding(max(0.0, end - time.monotonic())):
                self.write(h)
            h.release_t = time.monotonic()
            if h.lost_t is None and h.release_t > valid_until:
                h.lost_t = max(valid_until, h.granted)
                emit("lost", id=h.id, res=h.res, t=h.lost_t, serve=True)
            emit("releasing", id=h.id, res=h.res, t=h.release_t)
            try:
                ok, error = self.serve_call("LOCK.RELEASE", h.res, owner, timeout=10) == 1, None
            except (OSError, ConnectionError, resp.RespError) as e:
                ok, error = False, f"{type(e).__name__}: {e}"
            emit("released", id=h.id, res=h.res, ok=ok, error=error)
            if random.random() < c.get("late_ratio", 0.0):
                time.sleep(random.uniform(0.1, 0.6))
                self.write(h, late=True)
            h.record()
            n += 1
        emit("loop_done", id=c["id"], res=c["res"], holds=n, failed=failed)

    # --- redlock run -----------------------------------------------------

    def cli_args(self, c, kind):
        if c.get("elect"):
            # `redlock elect NAME`: a campaign (no deadline), the leader's
            # command stopped the moment leadership is lost.
            a = [self.cfg["redlock"], "elect", c["res"], "--value", c.get("value", NAME), "--servers", ",".join(self.servers)]
        else:
            a = [self.cfg["redlock"], "run", c["res"], "--servers", ",".join(self.servers)]
        s = self.cfg.get("settings", {})
        a += ["--request-timeout", f"{int(s.get('request_timeout', 0.05) * 1000)}ms"]
        a += ["--connect-timeout", f"{int(s.get('connect_timeout', 0.2) * 1000)}ms"]
        a += ["--ttl", f"{int(c['ttl'] * 1000)}ms"]
        if c.get("elect"):
            return a
        if c.get("wait") is not None:
            a += ["--wait", f"{int(c['wait'] * 1000)}ms"]
        if kind == "shared":
            a += ["--shared"]
        if kind == "permit":
            a += ["--limit", str(c["limit"])]
        a += ["--on-lost", c.get("on_lost", "kill")]
        return a

    def cli_once(self, c, hid, kind, hold_ms=None):
        """One `redlock run`; returns (hold or None, exit code)."""
        h = Hold(hid, c["res"], kind)
        cmd = [sys.executable, HOLD_PY, "--fence", "%s:%d" % self.fence_addr, "--fence-prefix", self.fence_prefix,
               "--name", f"{NAME}/{hid}"]
        if kind == "shared":
            cmd.append("--no-write")
        if c.get("go"):
            cmd += ["--go", c["go"], "--go-timeout", str(c.get("go_timeout", 30))]
        else:
            cmd += ["--hold-ms", str(hold_ms if hold_ms is not None else c.get("hold_ms", 100))]
        h.sent = time.monotonic()
        emit("attempt", id=hid, res=h.res, kind=kind, t=h.sent, cli=True)
        # The child dies with this thread's process (setpriv): it waits
        # for the child, so it outlives it.
        p = subprocess.Popen(["setpriv", "--pdeathsig", "KILL", "--"] + self.cli_args(c, kind) + ["--"] + cmd,
                             stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        err, warned = [], []

        def read_stderr():
            # Line by line, each timed as it arrives: `redlock run`'s own
            # loss warning is its lost signal. It is written just before
            # SIGTERM or SIGKILL is sent; after SIGKILL (the hold's end
            # reached with no loss declared, or the grace over before the
            # command's handler ran) the command says nothing, and the
            # hold must not be counted on to the moment `redlock run`
            # exits: that is after its release round, which frees the
            # lock for the next holder while timeouts to unreachable
            # servers still run (up to the connect timeout).
            for raw in p.stderr:
                if not warned and b"LOCK LOST" in raw:
                    warned.append(time.monotonic())
                err.append(raw)

        t_err = threading.Thread(target=read_stderr, daemon=True)
        t_err.start()
        started = False
        for raw in p.stdout:
            line = raw.decode(errors="replace").strip()
            if not line.startswith("{"):
                continue
            try:
                e = json.loads(line)
            except ValueError:
                continue
            ev = e.pop("ev")
            t = e.get("t")
            if ev == "cmd_start":
                started = True
                h.granted, h.token, h.key, h.owner = t, e["token"], e["key"], e.get("owner")
                emit("granted", id=hid, res=h.res, kind=kind, token=h.token, key=h.key, owner=h.owner, t=t, sent=h.sent,
                     cli=True)
            elif ev in ("wrote", "late_write"):
                h.writes.append({"t": t, "accepted": e["accepted"], "late": ev == "late_write",
                                 "lost_before": h.lost_t is not None})
                emit("wrote", id=hid, res=h.res, accepted=e["accepted"], late=ev == "late_write", t=t, cli=True)
            elif ev == "term":
                h.lost_t = t
                emit("lost", id=hid, res=h.res, t=t, cli=True)
            elif ev == "cmd_end":
                h.end_t = t
            else:
                emit("cmd_" + ev, id=hid, **e)
        code = p.wait()
        exited = time.monotonic()
        t_err.join(5)
        stderr = b"".join(err).decode(errors="replace").strip()
        if started and h.end_t is None:
            h.end_t = exited  # killed without saying so
        if started and code == 76 and h.lost_t is None:
            # Lost, and the command was not told: it ran on without the lock.
            emit("lost_untold", id=hid, res=h.res, t=exited)
        if started and warned and (h.lost_t is None or warned[0] < h.lost_t):
            h.lost_t = warned[0]
            emit("lost", id=hid, res=h.res, t=h.lost_t, cli=True, warned=True)
        emit("cli_exit", id=hid, res=h.res, code=code, stderr=stderr[-600:], sent=h.sent, started=started)
        # Not started: not acquired (75), or acquired and lost before the
        # command said it started (76: a flapping link can take a lock
        # away at any moment).
        expected = (0, 76, 143) if started else (75, 76)
        if c.get("check_exit", True) and code not in expected:
            emit("error", id=hid, message=f"redlock run exited {code}: {stderr[-600:]}")
        if started:
            h.record()
        return (h if started else None), code

    def op_cli_hold(self, c):
        self.cli_once(c, c["id"], c.get("kind", "exclusive"))

    def op_cli_loop(self, c):
        lo, hi = c.get("hold_ms", (50, 200))
        n = failed = 0
        while not os.path.exists(c["stop"]):
            kind = self.pick_kind(c)
            h, code = self.cli_once(c, f"{c['id']}.{n + failed}", kind, hold_ms=int(random.uniform(lo, hi)))
            if h is None:
                failed += 1
            else:
                n += 1
        emit("loop_done", id=c["id"], res=c["res"], holds=n, failed=failed)


def closed(conn, timeout):
    """True when `conn`'s peer closes it within `timeout` seconds (the
    endpoint sends nothing unasked: anything readable is its end)."""
    try:
        ready, _, _ = select.select([conn.sock], [], [], timeout)
        return bool(ready) and conn.sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def serve(w):
    threads = []

    def run(fn, c):
        try:
            fn(c)
        except Exception:  # reported, never silent
            emit("error", id=c.get("id"), op=c.get("op"), message=traceback.format_exc())

    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        c = json.loads(line)
        op = c["op"]
        if op == "exit":
            break
        fn = getattr(w, "op_" + op, None)
        if fn is None:
            emit("error", op=op, message=f"unknown op {op!r}")
            continue
        if op in ("release", "write"):
            run(fn, c)  # in order with what follows
        else:
            t = threading.Thread(target=run, args=(fn, c), daemon=True)
            t.start()
            threads.append(t)
    emit("bye")


def main():
    global NAME
    cfg = json.loads(sys.argv[1])
    NAME = cfg["name"]
    w = Worker(cfg)
    if cfg.get("preload", True) and cfg.get("library", True):
        w.rl  # import and build the handle before reporting ready
    emit("ready", pid=os.getpid())
    serve(w)
    # Ends without waiting for daemon threads (the harness ends holds first).
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
