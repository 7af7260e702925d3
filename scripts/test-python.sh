#!/usr/bin/env bash
# The Python package's suite: builds and installs python/ (the PyO3 binding
# of the redlock crate, through maturin) into a virtualenv, then runs pytest
# on python/tests against real redis-server processes it starts itself.
#
#   scripts/test-python.sh [PYTEST ARGS...]     (after `make build`)
#
# The virtualenv is target/python-venv (scripts/python-venv.sh: made on the
# first run, the package reinstalled only when its sources changed); pytest
# and prometheus_client are installed once. Exits with pytest's
# status, and fails when no test ran (pytest's exit status 5).
#
# Environment: PYTHON (default python3, 3.9 or later), REDISLOCK_MODULE
# (default target/release/libredislock.so), REDISLOCK_SERVER (default
# redis-server from PATH).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv=$root/target/python-venv
export REDISLOCK_MODULE=${REDISLOCK_MODULE:-$root/target/release/libredislock.so}
export PIP_DISABLE_PIP_VERSION_CHECK=1
# No __pycache__ or .pytest_cache left in the source tree.
export PYTHONDONTWRITEBYTECODE=1

say() { echo "redislock: $*"; }

if [ ! -f "$REDISLOCK_MODULE" ]; then
  say "$REDISLOCK_MODULE is missing: run 'make build' first" >&2
  exit 1
fi

scripts/python-venv.sh "$venv" || exit 1
# prometheus_client: for the docs' collector (test_metrics.py); a user's
# choice, not a dependency of the package.
if ! "$venv/bin/python" -c "import pytest, prometheus_client" 2>/dev/null; then
  "$venv/bin/pip" install -q pytest prometheus_client || exit 1
fi

"$venv/bin/pytest" -q -p no:cacheprovider python/tests "$@"
status=$?
if [ "$status" -eq 5 ]; then
  say "pytest collected no tests" >&2
  exit 1
fi
exit "$status"
