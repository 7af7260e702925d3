"""The package's surface: exports, docstrings, stubs, exception classes,
the GIL released while waiting."""

import ast
import os
import pickle
import signal
import threading
import time
from pathlib import Path

import pytest

import redislock
from redislock import Redlock

CLASSES = [
    "_Client", "Redlock", "Lock", "LockRequest", "AsyncRedlock", "AsyncLock", "AsyncLockRequest", "_LockState",
    "Election", "AsyncElection", "AsyncCampaign", "Leadership", "AsyncLeadership", "Leader", "Observer", "AsyncObserver",
    "_ElectionState", "_LeadershipState",
]
ERRORS = ["RedlockError", "NotAcquired", "QuorumUnreachable", "LockLost", "ConfigError", "LockReleased"]


def public_members(cls):
    return [name for name in vars(cls) if not name.startswith("_") or name in ("__enter__", "__aenter__")]


@pytest.mark.parametrize("name", CLASSES + ERRORS)
def test_every_public_class_and_member_is_documented(name):
    cls = getattr(redislock, name)
    assert cls.__module__ == "redislock"
    assert (cls.__doc__ or "").strip(), name
    for member in public_members(cls):
        assert (getattr(cls, member).__doc__ or "").strip(), f"{name}.{member}"


def test_the_shared_properties_are_documented_on_both_lock_classes():
    for cls in (redislock.Lock, redislock.AsyncLock):
        assert issubclass(cls, redislock._LockState)
        for name in public_members(redislock._LockState):
            assert (getattr(cls, name).__doc__ or "").strip(), f"{cls.__name__}.{name}"


def test_stubs_name_what_the_module_has():
    stubs = ast.parse((Path(redislock.__file__).parent / "_redislock.pyi").read_text())
    for node in stubs.body:
        # The TypedDicts of metrics() are types of the stubs only.
        if isinstance(node, ast.ClassDef) and not any(getattr(b, "id", None) == "TypedDict" for b in node.bases):
            runtime = getattr(redislock, node.name)
            stubbed = {n.name for n in node.body if isinstance(n, ast.FunctionDef) and n.name != "__init__"}
            public = {m for m in public_members(runtime)} | {m for m in ("__exit__", "__aexit__") if hasattr(runtime, m)}
            assert stubbed == public, node.name
    assert (Path(redislock.__file__).parent / "py.typed").is_file()


def test_the_stubs_state_the_rust_clients_defaults():
    """The defaults are written once, in the Rust client's Settings; the
    stubs state them for readers and type checkers, and must agree."""
    stubs = ast.parse((Path(redislock.__file__).parent / "_redislock.pyi").read_text())
    client = next(n for n in stubs.body if isinstance(n, ast.ClassDef) and n.name == "_Client")
    init = next(n for n in client.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    stated = {
        arg.arg: eval(compile(ast.Expression(default), "_redislock.pyi", "eval"))
        for arg, default in zip(init.args.kwonlyargs, init.args.kw_defaults)
    }
    defaults = redislock._redislock._DEFAULTS
    assert set(defaults) <= set(stated)
    for name, value in defaults.items():
        assert stated[name] == pytest.approx(value) if isinstance(value, float) else stated[name] == value, name


def test_exception_hierarchy():
    assert issubclass(redislock.QuorumUnreachable, redislock.NotAcquired)
    assert issubclass(redislock.ConfigError, ValueError)
    assert issubclass(redislock.LockReleased, RuntimeError)
    assert set(ERRORS) <= set(redislock.__all__)
    for name in ERRORS:
        assert issubclass(getattr(redislock, name), redislock.RedlockError)
    e = redislock.NotAcquired("m", "r", 2, "held by another owner", "held", [("a:1", "refused")])
    copy = pickle.loads(pickle.dumps(e))
    assert (str(copy), copy.resource, copy.attempts, copy.kind, copy.outcomes) == ("m", "r", 2, "held", [("a:1", "refused")])
    copy = pickle.loads(pickle.dumps(redislock.LockReleased("m", "r")))
    assert (type(copy), str(copy), copy.resource) == (redislock.LockReleased, "m", "r")


def test_the_gil_is_released_while_waiting(servers, resource):
    rl = Redlock(servers.urls)
    holder = rl.try_lock(resource, ttl=10.0)
    done = threading.Event()
    spins = 0

    def wait_in_vain():
        try:
            with pytest.raises(redislock.NotAcquired):
                with rl.lock(resource, ttl=5.0, wait=1.0):
                    pass
        finally:
            done.set()

    t = threading.Thread(target=wait_in_vain)
    t.start()
    # Pure Python work meanwhile: with the GIL held by the waiter, it would
    # only run in the waiter's own GIL switch intervals.
    while not done.is_set():
        spins += 1
    t.join()
    holder.release()
    assert spins > 100_000


def test_ctrl_c_interrupts_a_blocking_wait_and_leaves_nothing_held(servers, resource):
    rl = Redlock(servers.urls)
    holder = rl.try_lock(resource, ttl=30.0)
    # A real SIGINT, as Ctrl-C sends. Python turns it into KeyboardInterrupt
    # only with its own handler installed, which it does at startup only
    # when SIGINT is not ignored: in a job that a script (a non-interactive
    # shell) starts in the background, `make test &` or `nohup make test &`,
    # and on some CI runners it is, and then neither Ctrl-C nor
    # _thread.interrupt_main() interrupts anything. So the test installs the
    # handler an interactive program has, for its own duration.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    done = threading.Event()

    def ctrl_c_once_in_line():
        # The blocked call is at the head of the line: waiting on the lock
        # itself on every server.
        deadline = time.monotonic() + 20.0
        while not all((s.lock_info(resource) or {}).get("waiters") == 1 for s in servers):
            if done.is_set() or time.monotonic() > deadline:
                return
            time.sleep(0.005)
        os.kill(os.getpid(), signal.SIGINT)

    sender = threading.Thread(target=ctrl_c_once_in_line)
    sender.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            try:
                rl.guard(resource, ttl=60.0, wait=30.0)
            finally:
                done.set()
        # Interrupted while it waited, not on its return: the holder still
        # holds the lock everywhere.
        assert [(s.lock_info(resource) or {}).get("owner") for s in servers] == [holder.owner] * len(servers)
    finally:
        sender.join()
        signal.signal(signal.SIGINT, previous)
        holder.release()
    # The interrupted acquisition goes on on the runtime; what it gets is
    # released at once, not left for its 60 s ttl.
    with rl.lock(resource, ttl=5.0, wait=20.0) as lock:
        assert lock.token > holder.token


def test_a_child_forked_after_use_is_refused(servers, resource):
    rl = Redlock(servers.urls)
    rl.try_lock(resource, ttl=5.0).release()
    pid = os.fork()
    if pid == 0:
        # The child: no runtime threads here; every call must say so, not hang.
        code = 1
        try:
            Redlock(servers.urls).try_lock(resource, ttl=5.0)
        except RuntimeError as e:
            code = 0 if "fork" in str(e) else 2
        except BaseException:
            code = 3
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
