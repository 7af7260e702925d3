#!/usr/bin/env bash
# benches/node.sh -- the Node.js package (node/, the Rust client bound with
# napi-rs) against node-redlock 5.0.0-beta.2 on the same five module
# servers: uncontended acquire/release cycles with 1 and 32 callers, of a
# set of two resources (the array form) with 1 caller, and
# 16 contenders on one lock with a 1 ms hold, and one caller through
# proxies of 0.25 ms one way (node/bench/run.mjs prints medians of
# interleaved rounds, the ratios and issue 44's targets).
#
#   bash benches/node.sh          (make bench-node; part of make bench)
#
# Environment: REDISLOCK_MODULE (default target/release/libredislock.so),
# BENCH_SECONDS, BENCH_ROUNDS (see node/bench/run.mjs).
set -euo pipefail
cd "$(dirname "$0")/.."
export REDISLOCK_MODULE=${REDISLOCK_MODULE:-$PWD/target/release/libredislock.so}
command -v node >/dev/null || { echo "benches/node.sh: node is missing: install Node.js 20 or later" >&2; exit 1; }
npm --prefix node run build
if [ ! -d node/bench/node_modules/redlock ]; then
  (cd node/bench && npm install --no-audit --no-fund --loglevel=error)
fi
# The delaying proxies of the 0.25 ms scenario (client/benches/delay_proxy.rs).
BENCH_PROXY=$(cargo bench -q -p redlock --bench delay_proxy --no-run --message-format=json \
  | sed -n 's/.*"executable":"\([^"]*delay_proxy[^"]*\)".*/\1/p' | tail -1)
export BENCH_PROXY
cd node/bench
node run.mjs
