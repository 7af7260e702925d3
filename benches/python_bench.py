"""Lock/release cycles per second from Python: the redislock package (the
Rust quorum client through PyO3) against Pottery's Redlock (pure Python,
redis-py, SET NX PX and Lua), on the same five local servers.

    python benches/python_bench.py [--seconds S] [--rounds N]

Run it through benches/python.sh, which makes the virtualenv. It starts five
redis-server processes with the redislock module (Pottery's commands work
on any Redis, module or not) on free ports of 127.0.0.1 and stops them by
PID at the end (python/tests/redis_servers.py, the tests' launcher).

Scenarios, each a fixed time per measurement:
  1 thread      one thread acquiring and releasing its own key
  32 threads    32 threads, each on a key of its own: client throughput
  32 on 1 key   32 threads contending for one key: blocking acquisition

redislock: one Redlock shared by all threads; try_lock + release for own
keys, and `with rl.lock(key, ttl, wait=...)` (the resource's FIFO line, a
guard) when contending. Pottery: one Redlock object per thread and key,
acquire() + release(), its context manager when contending. The two take
turns within every round (interleaved), and each figure is the median of
the rounds.

The Rust client (`redlock bench --phases uncontended`, 1 and 32 workers,
target/release/redlock) runs once in every round too, on the same servers,
so that the Python/Rust ratio of the uncontended scenarios is made of
figures measured side by side: the median of the rounds' ratios (the
machine's load moves single figures by a factor of two; a ratio within a
round much less). Issue 44's target, Python with one thread at least 0.85
times the Rust client, is printed with it.
"""

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import redis
from pottery import Redlock as PotteryRedlock

import redislock

ROOT = Path(__file__).resolve().parent.parent
# The Python launcher of the tests (python/tests/redis_servers.py).
sys.path.insert(0, str(ROOT / "python" / "tests"))
import redis_servers  # noqa: E402

TTL = 10.0


def run_threads(n, cycle_factory, seconds):
    """n threads run their cycle until time is up: (cycles per second,
    attempts refused). A cycle returns False when its acquisition was
    refused (then nothing was released), which does not count as a cycle."""
    stop = threading.Event()
    counts = [0] * n
    refused = [0] * n
    errors = []
    ready = threading.Barrier(n + 1)

    def worker(i):
        cycle = cycle_factory(i)
        ready.wait()
        try:
            while not stop.is_set():
                if cycle() is False:
                    refused[i] += 1
                else:
                    counts[i] += 1
        except BaseException as e:
            errors.append(e)
            stop.set()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    ready.wait()
    started = time.monotonic()
    time.sleep(seconds)
    stop.set()
    for t in threads:
        t.join()
    elapsed = time.monotonic() - started
    if errors:
        raise errors[0]
    return sum(counts) / elapsed, sum(refused)


def ours(rl, prefix, contended):
    def factory(i):
        key = f"{prefix}:one" if contended else f"{prefix}:{i}"
        if contended:
            def cycle():
                with rl.lock(key, ttl=TTL, wait=60.0):
                    pass
        else:
            def cycle():
                try:
                    lock = rl.try_lock(key, ttl=TTL)
                except redislock.NotAcquired:
                    # Nobody else uses the key; see "refused" in the report.
                    return False
                lock.release()
        return cycle
    return factory


def pottery(masters, prefix, contended):
    def factory(i):
        key = f"{prefix}:one" if contended else f"{prefix}:{i}"
        lock = PotteryRedlock(key=key, masters=masters, auto_release_time=TTL)
        if contended:
            def cycle():
                with lock:
                    pass
        else:
            def cycle():
                if not lock.acquire(blocking=False):
                    return False
                lock.release()
        return cycle
    return factory


def rust_client(ports, seconds):
    """The Rust client's uncontended cycles per second on the same servers
    (`redlock bench --json --phases uncontended`), by this file's scenario
    names; empty when it is not built or failed."""
    binary = ROOT / "target" / "release" / "redlock"
    if not binary.is_file():
        return {}
    servers = ",".join(f"redis://127.0.0.1:{p}" for p in ports)
    out = subprocess.run(
        [str(binary), "bench", "--json", "--servers", servers, "--phases", "uncontended",
         "--duration", f"{max(seconds, 1):g}s", "--workers", "32"],
        capture_output=True, text=True, timeout=600,
    )
    if out.returncode != 0:
        print(f"redlock bench failed ({out.returncode}): {out.stderr.strip()}", file=sys.stderr)
        return {}
    figures = {}
    for phase in json.loads(out.stdout)["phases"]:
        if phase["name"].startswith("uncontended: module"):
            figures["1 thread" if phase["workers"] == 1 else "32 threads"] = phase["cycles_per_sec"]
    return figures


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="length of one measurement")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    workdir = tempfile.mkdtemp(prefix="python-bench-")
    servers = redis_servers.Servers()
    try:
        try:
            servers = redis_servers.start_servers(5, workdir, unix_socket=False)
        except redis_servers.StartError as e:
            sys.exit(str(e))
        ports = [s.port for s in servers]
        rl = redislock.Redlock([f"redis://127.0.0.1:{p}" for p in ports])
        masters = {redis.Redis(host="127.0.0.1", port=p, socket_timeout=1, max_connections=64) for p in ports}
        scenarios = [("1 thread", 1, False), ("32 threads", 32, False), ("32 on 1 key", 32, True)]
        results = {(s, impl): [] for s, *_ in scenarios for impl in ("redislock", "pottery")}
        refusals = {key: 0 for key in results}
        rust = {name: [] for name, *_ in scenarios}
        per_round = {name: [] for name, *_ in scenarios}
        for r in range(args.rounds):
            for name, threads, contended in scenarios:
                # Alternate who goes first, so neither always runs on a warmer machine.
                order = [("redislock", ours, rl), ("pottery", pottery, masters)]
                if r % 2:
                    order.reverse()
                for impl, make, handle in order:
                    prefix = f"bench:{impl}:{uuid.uuid4().hex[:8]}"
                    rate, refused = run_threads(threads, make(handle, prefix, contended), args.seconds)
                    results[(name, impl)].append(rate)
                    refusals[(name, impl)] += refused
                    note = f" ({refused} attempts refused)" if refused else ""
                    print(f"round {r + 1}: {name:12} {impl:9} {rate:9.0f} cycles/s{note}", flush=True)
            # The Rust client in the same round, for Python/Rust side by side.
            for name, rate in rust_client(ports, args.seconds).items():
                if not rate:
                    continue
                rust[name].append(rate)
                per_round[name].append(results[(name, "redislock")][-1] / rate)
                print(f"round {r + 1}: {name:12} {'Rust':9} {rate:9.0f} cycles/s (Python/Rust {per_round[name][-1]:.2f})", flush=True)

        print()
        print(f"lock/release cycles per second, median of {args.rounds} x {args.seconds:g} s, 5 servers on 127.0.0.1")
        print(f"{'scenario':14}{'redislock':>12}{'pottery':>12}{'ratio':>9}{'Rust client':>14}{'Python/Rust':>13}")
        for name, *_ in scenarios:
            a = statistics.median(results[(name, "redislock")])
            b = statistics.median(results[(name, "pottery")])
            ratio = f"{a / b:.1f}x" if b else "-"
            rust_cells = f"{'-':>14}{'-':>13}"
            if rust[name]:
                rust_cells = f"{statistics.median(rust[name]):14.0f}{statistics.median(per_round[name]):12.2f}x"
            print(f"{name:14}{a:12.0f}{b:12.0f}{ratio:>9}{rust_cells}")
        if per_round["1 thread"]:
            print("Rust client: `redlock bench --phases uncontended` in every round, on the same servers;")
            print("Python/Rust: the median of the rounds' ratios (32 on 1 key: no Rust scenario alike).")
            one = statistics.median(per_round["1 thread"])
            verdict = "met" if one >= 0.85 else "not met"
            print(f"target of issue 44: Python, 1 thread >= 0.85x the Rust client: {one:.2f} ({verdict})")
        else:
            print("Rust client: target/release/redlock not found or failed; run `make build`.")
        if any(refusals.values()):
            print("attempts refused on keys nobody else held (all rounds): " + ", ".join(
                f"{name} {impl} {n}" for (name, impl), n in refusals.items() if n))
    finally:
        servers.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
