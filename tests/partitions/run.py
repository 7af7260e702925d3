#!/usr/bin/env python3
"""Runs the partition scenarios (tests/partitions/scenarios.py) and prints
one `partitions |` line per table row, then `partitions: N passed, M
failed`. Where network namespaces cannot be made (not root, no iproute2,
`ip netns add` refused) it prints one line, `partitions: skipped: <why>`,
and exits 0.

    tests/partitions/run.py [--only NAME ...] [--list] [--flap-seconds S] [--json FILE] [--keep-logs]

Run it with the Python of target/python-venv (scripts/test-partitions.sh
does), which has the `redislock` package. Everything it creates (network
namespaces with their links and nftables rules, processes) is removed at
the end, also when a scenario fails and on SIGTERM, SIGINT and SIGHUP; a
namespace left over fails the run. Logs of servers and workers stay in
/tmp/redlock-partitions-<run>-* when something failed.
"""

import argparse
import json
import shutil
import signal
import sys
import time
import traceback

import harness
import scenarios


class Interrupted(BaseException):
    pass


def on_signal(signum, frame):
    raise Interrupted(signal.Signals(signum).name)


def seconds(x):
    return "-" if x is None else f"{x:.3f} s"


def format_row(r):
    return (f"partitions | {r['scenario']} | holds {r['holds']} | overlaps {r['overlaps']} | "
            f"over limit {r['over_limit']} | token inversions {r['inversions']} | "
            f"stale writes refused {r['stale_refused']} | lost signal {seconds(r.get('lost_signal'))} | "
            f"next grant {seconds(r.get('next_grant'))}" + (f" | {r['note']}" if r.get("note") else ""))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", default=[], help="run only this scenario (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the scenarios")
    ap.add_argument("--flap-seconds", type=float, default=30.0, help="how long the link flaps in `flapping`")
    ap.add_argument("--json", help="write the table rows to this file")
    ap.add_argument("--keep-logs", action="store_true", help="keep the logs and event files also after a pass")
    args = ap.parse_args()
    names = [n for n, _ in scenarios.SCENARIOS]
    if args.list:
        print("\n".join(names))
        return 0
    unknown = [n for n in args.only if n not in names]
    if unknown:
        ap.error(f"unknown scenario {', '.join(unknown)}; one of {', '.join(names)}")
    try:
        harness.preflight()
    except harness.Skip as e:
        print(f"partitions: skipped: {e}")
        return 0
    except RuntimeError as e:
        print(f"partitions: cannot run: {e}")
        print("partitions: 0 passed, 1 failed")
        return 1

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    run = None
    passed = failed = 0
    rows = []
    interrupted = None
    started = time.monotonic()
    try:
        stale = harness.sweep_stale()
        if stale:
            print(f"partitions: removed {len(stale)} namespaces left by a run that was killed: {' '.join(stale)}")
        run = harness.Run()
        print(f"partitions: run {run.rid}: namespaces {run.prefix}*, logs in {run.tmp}", flush=True)
        for name, fn in scenarios.SCENARIOS:
            if args.only and name not in args.only:
                continue
            t = time.monotonic()
            print(f"partitions: {name} ...", flush=True)
            try:
                got = fn(run, args.flap_seconds) if name == "flapping" else fn(run)
                left = run.leftovers()
                if left:
                    raise harness.ScenarioFailed(f"namespaces left after the scenario: {' '.join(left)}")
                for r in got:
                    print(format_row(r), flush=True)
                rows += got
                passed += 1
                print(f"partitions: {name} ok in {time.monotonic() - t:.1f} s", flush=True)
            except Exception as e:
                failed += 1
                if isinstance(e, harness.ScenarioFailed):
                    print(f"partitions: {name} FAILED in {time.monotonic() - t:.1f} s: {e}", flush=True)
                else:
                    print(f"partitions: {name} FAILED in {time.monotonic() - t:.1f} s:\n{traceback.format_exc()}",
                          flush=True)
    except Interrupted as e:
        interrupted = str(e)
        print(f"partitions: interrupted by {interrupted}: cleaning up", flush=True)
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        if run is not None:
            left = run.cleanup()
            if left:
                failed += 1
                print(f"partitions: cleanup FAILED: namespaces left: {' '.join(left)}")
            else:
                print(f"partitions: cleanup: no namespace of run {run.rid} left")
            if failed or interrupted or args.keep_logs:
                print(f"partitions: logs kept in {run.tmp}")
            else:
                shutil.rmtree(run.tmp, ignore_errors=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    if interrupted:
        print(f"partitions: {passed} passed, {failed + 1} failed (interrupted by {interrupted})")
        return 128 + int(getattr(signal, interrupted))
    print(f"partitions: {passed} passed, {failed} failed in {time.monotonic() - started:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
