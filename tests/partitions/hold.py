"""The command the harness runs under `redlock run`: it uses the lock the
way a job would, and reports on stdout (JSON lines, times on the system's
CLOCK_MONOTONIC, comparable across processes and namespaces):

    {"ev": "cmd_start", "t", "token", "key", "owner"}   started with the lock
    {"ev": "wrote", "t", "accepted"}                    its fenced write
    {"ev": "term", "t"}                                 SIGTERM from redlock run (lock lost)
    {"ev": "late_write", "t", "accepted"}               --go: the write after the go file
    {"ev": "cmd_end", "t"}

A plain job (--hold-ms) writes once, holds, and stops at SIGTERM. With
--go it is a job that ignores the loss: after SIGTERM it keeps waiting for
the go file, then writes again with its old token (the fence must refuse
it), then exits.

    hold.py --fence HOST:PORT --fence-prefix P --name NAME [--no-write] (--hold-ms MS | --go FILE)

The fenced key is P followed by the lock's key (the permit's, with
--limit): each permit orders its own holders. A reader of a read-write
lock (--no-write) writes nothing: readers hold together.
"""

import argparse
import json
import os
import signal
import sys
import time

import resp


def emit(ev, **fields):
    fields.update(ev=ev, t=fields.get("t", time.monotonic()))
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


class Stop(Exception):
    pass


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--fence", required=True)
    p.add_argument("--fence-prefix", required=True)
    p.add_argument("--no-write", action="store_true")
    p.add_argument("--name", required=True)
    p.add_argument("--hold-ms", type=float, default=0.0)
    p.add_argument("--go", default=None)
    p.add_argument("--go-timeout", type=float, default=30.0)
    a = p.parse_args()
    started = time.monotonic()

    def on_term(signum, frame):
        emit("term")
        if a.go is None:
            raise Stop()

    signal.signal(signal.SIGTERM, on_term)
    fence = None
    try:
        token = int(os.environ["REDLOCK_TOKEN"])
        # `redlock elect` names its election; its lock is redlock:election:NAME.
        election = os.environ.get("REDLOCK_ELECTION")
        key = os.environ.get("REDLOCK_PERMIT") or os.environ.get("REDLOCK_RESOURCE") or f"redlock:election:{election}"
        emit("cmd_start", t=started, token=token, key=key, owner=os.environ.get("REDLOCK_OWNER"))
        host, port = a.fence.rsplit(":", 1)
        fence = resp.Conn((host, int(port)))
        fence_key = a.fence_prefix + key
        if not a.no_write:
            emit("wrote", accepted=resp.fenced_write(fence, fence_key, token, a.name))
        if a.go is None:
            time.sleep(max(a.hold_ms, 0) / 1000.0)
        else:
            # A job that does not stop when told: it waits for the go file
            # and writes with the token it started with.
            deadline = time.monotonic() + a.go_timeout
            while not os.path.exists(a.go):
                if time.monotonic() > deadline:
                    emit("error", message=f"no go file {a.go} within {a.go_timeout} s")
                    return 3
                time.sleep(0.01)
            emit("late_write", accepted=resp.fenced_write(fence, fence_key, token, a.name + " (late)"))
    except Stop:
        emit("cmd_end")
        return 143
    finally:
        if fence is not None:
            fence.close()
    emit("cmd_end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
