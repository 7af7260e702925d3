#!/usr/bin/env bash
# The body of `make test`: every suite runs even when an earlier one fails,
# then one summary line per suite and a total; exits non-zero if any failed.
#
#   scripts/test.sh SERVER...      (e.g. valkey-8.1; Redis 7.0 always runs)
#
# Suites (lint and docs first, before the test programs are built):
#   lint         rustfmt and clippy -D warnings on the workspace
#                (scripts/lint.sh)
#   docs         README.md and the book in docs/: links and anchors
#                resolve, README stays short (scripts/check-docs.py)
#   redis-7.0    module and client suites (cargo test) on Debian's redis-server,
#                and the client's doc tests (README's and the book's Rust
#                examples, client/src/doctests.rs)
#   <server>     the module's suite on each named server (.servers/<server>):
#                the module's test programs the build above made, run again
#   quickstart   README's quick start, run as written, then the module it
#                installed loaded into real servers (scripts/quickstart.py)
#   python       the Python package (python/, PyO3) and its pytest suite
#                (scripts/test-python.sh; its own virtualenv in target/)
#   partitions   real network partitions (namespaces, veths, nftables)
#                under servers and clients (scripts/test-partitions.sh;
#                needs root: elsewhere it says it was skipped)
#   node         the Node.js package (node/, napi-rs) and its node:test suite
#                (scripts/test-node.sh)
#   examples     examples/ (redis-py, redis-cli, ioredis) on one server, and
#                examples/serve/ (those and Go, PHP, Ruby, Perl) through
#                `redlock serve` over five (scripts/test-examples.sh; a
#                missing toolchain is installed if it can be, else skipped)
#   dist         dist/ (make dist) installed and used without Rust
#                (scripts/test-dist.sh); skipped unless dist/ was built
#                from the sources as they are: `make test-dist` (which
#                .ci/run runs after this) builds it and runs the suite
#
# The test binaries build with the `tests` profile (release optimisation
# without whole-program LTO); the servers load the release module that
# `make build` made, the one users run. Output of each suite goes to the
# terminal and to target/test-logs/<suite>.log.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
module=$root/target/release/libredislock.so
logs=$root/target/test-logs
mkdir -p "$logs"
export REDISLOCK_MODULE=$module
export REDISLOCK_VALKEY=$root/.servers/valkey-8.1/redis-server

if [ ! -f "$module" ]; then
  echo "redislock: $module is missing: run 'make build' first" >&2
  exit 1
fi

# run_tests PROGRAM...: runs each test program as `cargo test` would (from
# the workspace root), all of them even when one fails; fails if any did.
run_tests() {
  local status=0 program
  for program in "$@"; do
    echo "     Running ${program#"$root"/}"
    "$program" || status=1
  done
  return "$status"
}

names=() results=() passed_total=0 failed_total=0 any_failed=0

# run_suite NAME COMMAND...: runs it, tees its log, records counts and time.
run_suite() {
  local name=$1; shift
  local log=$logs/$name.log started status passed failed
  echo "redislock: suite $name: $*"
  started=$(date +%s)
  "$@" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  # cargo's "test result: ok. 12 passed; 0 failed; ..." lines, the quick
  # start's and the examples' own "quickstart: N passed, M failed", and
  # pytest's closing "1 failed, 69 passed in 11.3s" (with -q, no border).
  # A suite that could not run here says "<name>: skipped: <why>".
  local pytest_line
  pytest_line=$(grep -E '^=* *[0-9]+ (passed|failed)[^;]* in [0-9.]+s' "$log" | tail -n 1)
  passed=$( { grep -Eo '(test result: [A-Za-z]+\. |quickstart: |examples: |node: |partitions: |lint: |docs: |dist: )[0-9]+ passed' "$log"
    grep -Eo '[0-9]+ passed' <<<"$pytest_line"; } | grep -Eo '[0-9]+ passed' | grep -Eo '[0-9]+' | awk '{ n += $1 } END { print n + 0 }')
  failed=$( { grep -Eo '(test result: [A-Za-z]+\. [0-9]+ passed; |quickstart: [0-9]+ passed, |examples: [0-9]+ passed, |node: [0-9]+ passed, |partitions: [0-9]+ passed, |lint: [0-9]+ passed, |docs: [0-9]+ passed, |dist: [0-9]+ passed, )[0-9]+ failed' "$log"
    grep -Eo '[0-9]+ failed' <<<"$pytest_line"; } | grep -Eo '[0-9]+ failed' | awk '{ n += $1 } END { print n + 0 }')
  passed=${passed:-0} failed=${failed:-0}
  local verdict=ok skipped
  skipped=$(grep -E "^$name: skipped: " "$log" | tail -n 1)
  if [ "$status" -eq 0 ] && [ "$passed" -eq 0 ] && [ "$failed" -eq 0 ] && [ -n "$skipped" ]; then
    verdict="skipped (${skipped#"$name: skipped: "})"
  fi
  if [ "$status" -ne 0 ]; then
    verdict=FAILED any_failed=1
    # A crashed test binary prints no result line: count it as one failure.
    [ "$failed" -eq 0 ] && failed=1
  fi
  passed_total=$((passed_total + passed)) failed_total=$((failed_total + failed))
  names+=("$name")
  results+=("$verdict: $passed passed, $failed failed in $(( $(date +%s) - started )) s (log: ${log#"$root"/})")
}

# lint and docs first: they need no test program (clippy checks the
# workspace on its own), so a formatting, layering or link mistake shows
# in a minute, not after the suites; the suites still all run.
tests_started=$(date +%s)
run_suite lint scripts/lint.sh
run_suite docs python3 scripts/check-docs.py

# Then every test program is compiled before the other suites run, so that
# their times are test times (doc tests are compiled as they run, in
# redis-7.0). cargo's JSON messages name each test program it built (kept
# for the servers' suites below); its diagnostics go to the log as usual.
# The client's `tracing` feature is on for the tests: its spans have a
# test of their own (client/tests/traces/main.rs), and its example is
# built. The same features in every cargo command here, so nothing is
# compiled twice.
features="--features redlock/tracing"
build_started=$(date +%s)
if ! cargo test --profile tests --workspace $features --no-run --message-format=json-render-diagnostics \
  >"$logs/build.json" 2>"$logs/build.log"; then
  cat "$logs/build.log"
  echo "redislock: building the tests failed (log: $logs/build.log)" >&2
  exit 1
fi
build_secs=$(( $(date +%s) - build_started ))

# The module's test programs (its unit tests and tests/*/main.rs), as that
# build made them. The servers' suites run these files: `cargo test -p
# redislock` would resolve the workspace's shared dependencies (redis,
# syn, ...) with fewer features than `--workspace` does, and so compile
# them and every module test program a second time.
mapfile -t module_tests < <(python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"] \
            and m["manifest_path"] == sys.argv[1] + "/Cargo.toml":
        print(m["executable"])' "$root" <"$logs/build.json")
if [ "${#module_tests[@]}" -eq 0 ]; then
  echo "redislock: the build named no test program of the module (log: $logs/build.json)" >&2
  exit 1
fi

run_suite redis-7.0 cargo test --profile tests --workspace $features --no-fail-fast
for server in "$@"; do
  binary=$root/.servers/$server/redis-server
  if [ ! -x "$binary" ]; then
    names+=("$server") results+=("FAILED: $binary is missing (scripts/install-servers.sh $server)")
    any_failed=1 failed_total=$((failed_total + 1))
    continue
  fi
  REDISLOCK_SERVER=$binary run_suite "$server" run_tests "${module_tests[@]}"
done
# The Node package's suite builds its addon, which the quick start's
# `make node` then finds built.
run_suite node scripts/test-node.sh
run_suite quickstart python3 scripts/quickstart.py
run_suite python scripts/test-python.sh
run_suite partitions scripts/test-partitions.sh
run_suite examples scripts/test-examples.sh
run_suite dist scripts/test-dist.sh --current
tests_secs=$(( $(date +%s) - tests_started - build_secs ))

echo
echo "redislock: test summary (building the tests took $build_secs s, running them $tests_secs s)"
for i in "${!names[@]}"; do
  printf 'redislock:   %-11s %s\n' "${names[$i]}" "${results[$i]}"
done
echo "total: $passed_total passed, $failed_total failed"
# What failed, from each failed suite's log, after the summary: CI keeps
# only the end of what a run prints, and a suite's log stays on the
# machine that ran it.
for i in "${!names[@]}"; do
  case ${results[$i]} in FAILED*) ;; *) continue ;; esac
  log=$logs/${names[$i]}.log
  [ -f "$log" ] || continue
  echo "redislock: what failed in ${names[$i]}:"
  grep -E -- 'panicked at|^---- |^failures:|FAILED|FAIL|[Ff]ailed:|ScenarioFailed|^not ok|Error:|error\[|assert' "$log" \
    | grep -Ev ' 0 failed|^test result: ok' | tail -n 40 | cut -c1-400 | sed 's/^/    /'
done
exit "$any_failed"
