#!/usr/bin/env bash
# Python lock/release throughput: the redislock package against Pottery's
# Redlock (benches/python_bench.py), in a virtualenv of its own,
# target/python-bench-venv, with the package (built by maturin from python/,
# reinstalled when its sources changed), pottery and redis-py.
#
#   benches/python.sh [--seconds S] [--rounds N]     (after `make build`)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv=$root/target/python-bench-venv
export REDISLOCK_MODULE=${REDISLOCK_MODULE:-$root/target/release/libredislock.so}

if [ ! -f "$REDISLOCK_MODULE" ]; then
  echo "redislock: $REDISLOCK_MODULE is missing: run 'make build' first" >&2
  exit 1
fi
scripts/python-venv.sh "$venv"
"$venv/bin/python" -c "import pottery, redis" 2>/dev/null || "$venv/bin/pip" install -q pottery redis

exec "$venv/bin/python" benches/python_bench.py "$@"
