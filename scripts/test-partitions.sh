#!/usr/bin/env bash
# The partition suite (tests/partitions, issue 33): real network partitions
# between five module servers and their clients, made of network
# namespaces, veth pairs, a bridge, `ip link set ... down` and nftables
# rules; clients are `redlock run` processes, the Python package's
# handles and RESP clients of a `redlock serve` of their own, writing to a
# fenced resource. Prints one `partitions |` line per
# scenario's table row and `partitions: N passed, M failed` last.
#
#   scripts/test-partitions.sh [--only NAME ...] [--list] [--flap-seconds S]
#                                           (after `make build`, as root)
#
# Needs root (namespaces); without it, or without iproute2, or where
# `ip netns add` is refused, it prints `partitions: skipped: <why>` and
# exits 0. The Python package comes from target/python-venv
# (scripts/python-venv.sh: made or updated when its sources changed).
#
# Environment: REDISLOCK_MODULE (default target/release/libredislock.so),
# REDLOCK_BIN (default target/release/redlock), REDISLOCK_SERVER (default
# redis-server from PATH).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv=$root/target/python-venv
export REDISLOCK_MODULE=${REDISLOCK_MODULE:-$root/target/release/libredislock.so}
export REDLOCK_BIN=${REDLOCK_BIN:-$root/target/release/redlock}
export PIP_DISABLE_PIP_VERSION_CHECK=1
# No __pycache__ left in the source tree.
export PYTHONDONTWRITEBYTECODE=1

# Before building anything: where namespaces cannot be made, say so once.
if [ "$(id -u)" -ne 0 ]; then
  echo "partitions: skipped: not root (network namespaces need CAP_NET_ADMIN and CAP_SYS_ADMIN)"
  exit 0
fi
if ! command -v ip >/dev/null; then
  echo "partitions: skipped: no ip (iproute2; scripts/install-deps.sh installs it)"
  exit 0
fi
for f in "$REDISLOCK_MODULE" "$REDLOCK_BIN"; do
  if [ ! -f "$f" ]; then
    echo "redislock: $f is missing: run 'make build' first" >&2
    echo "partitions: 0 passed, 1 failed"
    exit 1
  fi
done

scripts/python-venv.sh "$venv" || { echo "partitions: 0 passed, 1 failed"; exit 1; }
exec "$venv/bin/python" tests/partitions/run.py "$@"
