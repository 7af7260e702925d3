#!/usr/bin/env bash
# The Node.js package's suite: builds node/ (the napi-rs binding of the
# redlock crate: cargo, then the addon copied to node/redislock.node) and
# runs node/test with Node's own test runner against real redis-server
# processes the tests start themselves (five per test file).
#
#   scripts/test-node.sh [TEST FILE...]     (after `make build`)
#
# TypeScript (the only dev dependency, for the declarations' check) is
# installed into node/node_modules when missing. Quick when nothing
# changed: cargo only checks, npm is not run. Ends with the line
# `node: N passed, M failed` and exits non-zero on a failure, or when no
# test ran.
#
# Environment: REDISLOCK_MODULE (default target/release/libredislock.so),
# REDISLOCK_SERVER (default redis-server from PATH).
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export REDISLOCK_MODULE=${REDISLOCK_MODULE:-$root/target/release/libredislock.so}

logs=$root/target/test-logs
mkdir -p "$logs"
tap=$logs/node.tap

say() { echo "redislock: $*"; }
fail() {
  say "$*" >&2
  echo "node: 0 passed, 1 failed"
  exit 1
}

command -v node >/dev/null || fail "node is missing: install Node.js 20 or later"
[ -f "$REDISLOCK_MODULE" ] || fail "$REDISLOCK_MODULE is missing: run 'make build' first"
if [ ! -x node/node_modules/.bin/tsc ]; then
  (cd node && npm install --no-audit --no-fund --loglevel=error) || fail "npm install in node/ failed"
fi
nice -n 10 node node/scripts/build.mjs || fail "building the addon failed"

if [ "$#" -eq 0 ]; then
  set -- node/test/*.test.mjs
fi
# The spec reporter for people, TAP for the counts. The runner itself is
# bounded too: a test that hangs fails by its own timeout, and a file
# whose process does not end by itself exits (support/servers.mjs).
(cd node && timeout 600 node --test \
  --test-reporter=spec --test-reporter-destination=stdout \
  --test-reporter=tap --test-reporter-destination="$tap" \
  "${@/#node\//}")
status=$?
count() { grep -E "^# $1 [0-9]+$" "$tap" | tail -n 1 | grep -Eo '[0-9]+$'; }
passed=$(count pass) failed=$(count fail) cancelled=$(count cancelled)
passed=${passed:-0} failed=$(( ${failed:-0} + ${cancelled:-0} ))
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
  failed=1 # the runner failed without a failed test (a file that crashed)
fi
if [ "$passed" -eq 0 ] && [ "$failed" -eq 0 ]; then
  say "no test ran" >&2
  failed=1
fi
echo "node: $passed passed, $failed failed"
[ "$status" -eq 0 ] && [ "$failed" -eq 0 ]
