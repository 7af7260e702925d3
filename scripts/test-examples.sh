#!/usr/bin/env bash
# Runs every example under examples/ against a redis-server of its own with
# the module loaded; an example passes when it exits 0 and its last line is
# `example OK` (each checks its own results).
#
#   make build && scripts/test-examples.sh
#
# The module: target/release/libredislock.so, or REDISLOCK_MODULE. The
# server: redis-server from PATH (Debian's 7.0) on a free port, in a
# temporary directory, without persistence; stopped on exit.
# Toolchains: the Python examples run in a venv at target/examples-venv
# (created and given examples/python/requirements.txt once), the node one
# after `npm install` in examples/node, the redis-cli one with redis-cli
# from PATH. An example whose toolchain is missing is skipped, not failed.
# Each run is limited to EXAMPLE_TIMEOUT seconds (60).
#
# The last line is `examples: N passed, M failed`; skipped and failed
# examples are named on the lines before it. Exits 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
module=${REDISLOCK_MODULE:-$root/target/release/libredislock.so}
timeout_s=${EXAMPLE_TIMEOUT:-60}
venv=$root/target/examples-venv

if [ ! -f "$module" ]; then
  echo "examples: $module is missing: run 'make build' first" >&2
  exit 1
fi
# Absolute: the server runs in its own directory.
module=$(realpath "$module")
if ! command -v redis-server >/dev/null; then
  echo "examples: redis-server is not on PATH (apt-get install redis-server)" >&2
  exit 1
fi

tmp=$(mktemp -d)
server_pid=
cleanup() {
  if [ -n "$server_pid" ]; then
    kill "$server_pid" 2>/dev/null
    wait "$server_pid" 2>/dev/null
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
# The EXIT trap runs on Ctrl-C or a kill too, so the server never outlives us.
trap 'exit 130' INT
trap 'exit 143' TERM

# PING over bash's /dev/tcp: needs no redis-cli (which some examples skip without).
answers_ping() {
  ( exec 3<>"/dev/tcp/127.0.0.1/$1" && printf 'PING\r\n' >&3 && read -r -t 2 reply <&3 \
    && [ "$reply" = $'+PONG\r' ] ) 2>/dev/null
}

# A random port in 20000-29999 (below the ephemeral range) that nobody
# listens on; should another process take it first, the server fails to
# bind and exits, and the next attempt picks another port.
for _ in 1 2 3 4 5; do
  port=$(( 20000 + RANDOM % 10000 ))
  ( exec 3<>"/dev/tcp/127.0.0.1/$port" ) 2>/dev/null && continue
  (cd "$tmp" && exec redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no \
    --dir "$tmp" --logfile "$tmp/redis.log" --loadmodule "$module") &
  server_pid=$!
  for _ in $(seq 100); do
    answers_ping "$port" && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.05
  done
  answers_ping "$port" && break
  kill "$server_pid" 2>/dev/null
  wait "$server_pid" 2>/dev/null
  server_pid=
done
if [ -z "$server_pid" ]; then
  echo "examples: redis-server with $module did not start; its log:" >&2
  tail -n 20 "$tmp/redis.log" >&2
  exit 1
fi
echo "examples: redis-server $(redis-server --version | grep -o 'v=[^ ]*') with the module on 127.0.0.1:$port"

passed=0 failed=0 skipped=() failures=()

skip() { # name reason
  echo "examples: $1: skipped ($2)"
  skipped+=("$1 ($2)")
}

fail() { # name reason
  echo "examples: $1: FAILED ($2)"
  failed=$((failed + 1))
  failures+=("$1 ($2)")
}

# run NAME DIR COMMAND...: runs the example in DIR against our server, its
# output indented; a caller's REDIS_URL must not send it elsewhere.
run() {
  local name=$1 dir=$2 out=$tmp/$1.out status started=$SECONDS
  shift 2
  echo "examples: $name: $*"
  (cd "$dir" && env -u REDIS_URL REDIS_HOST=127.0.0.1 REDIS_PORT="$port" \
    timeout --kill-after=5 "$timeout_s" "$@") 2>&1 | tee "$out" | sed 's/^/    /'
  status=${PIPESTATUS[0]}
  if [ "$status" -eq 124 ] || [ "$status" -eq 137 ]; then
    fail "$name" "timed out after $timeout_s s"
  elif [ "$status" -ne 0 ]; then
    fail "$name" "exit status $status"
  elif [ "$(tail -n 1 "$out")" != "example OK" ]; then
    fail "$name" "exit status 0, but the last line is not 'example OK'"
  else
    echo "examples: $name: ok in $((SECONDS - started)) s"
    passed=$((passed + 1))
  fi
}

# redis-cli
if command -v redis-cli >/dev/null; then
  run redis-cli examples/redis-cli bash example.sh
else
  skip redis-cli "redis-cli not found: apt-get install redis-tools"
fi

# Python: a venv of its own, so the system's Python stays untouched; pip
# runs again only when requirements.txt changed since the last install.
python_setup() {
  command -v python3 >/dev/null || { echo "skip:python3 not found"; return; }
  if [ ! -x "$venv/bin/python" ]; then
    if ! python3 -m venv "$venv" >"$tmp/venv.log" 2>&1; then
      rm -rf "$venv"
      echo "skip:python3 -m venv failed: apt-get install python3-venv"
      return
    fi
  fi
  local requirements=examples/python/requirements.txt stamp=$venv/.examples-installed
  if [ ! -f "$stamp" ] || [ "$requirements" -nt "$stamp" ]; then
    if ! "$venv/bin/pip" install --quiet -r "$requirements" >"$tmp/pip.log" 2>&1; then
      echo "fail:pip install -r $requirements failed: $(tail -n 1 "$tmp/pip.log")"
      return
    fi
    touch "$stamp"
  fi
  echo ready
}
python_state=$(python_setup)
for example in sync async philosophers; do
  case $python_state in
    ready) run "python-$example" examples/python "$venv/bin/python" "${example}_example.py" ;;
    skip:*) skip "python-$example" "${python_state#skip:}" ;;
    fail:*) fail "python-$example" "${python_state#fail:}" ;;
  esac
done

# Node: ioredis into examples/node/node_modules, again only when
# package.json or package-lock.json changed since the last install.
node_setup() {
  command -v node >/dev/null && command -v npm >/dev/null || { echo "skip:node or npm not found"; return; }
  node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 18 ? 0 : 1)' \
    || { echo "skip:node $(node --version) is older than 18"; return; }
  local dir=examples/node stamp=examples/node/node_modules/.package-lock.json
  if [ ! -f "$stamp" ] || [ "$dir/package.json" -nt "$stamp" ] || [ "$dir/package-lock.json" -nt "$stamp" ]; then
    if ! (cd "$dir" && npm install --no-audit --no-fund) >"$tmp/npm.log" 2>&1; then
      echo "fail:npm install failed: $(tail -n 1 "$tmp/npm.log")"
      return
    fi
  fi
  echo ready
}
node_state=$(node_setup)
case $node_state in
  ready) run node examples/node node example.js ;;
  skip:*) skip node "${node_state#skip:}" ;;
  fail:*) fail node "${node_state#fail:}" ;;
esac

list() { local out; printf -v out '%s; ' "$@"; echo "${out%; }"; }
echo
[ ${#skipped[@]} -eq 0 ] || echo "examples: skipped: $(list "${skipped[@]}")"
[ ${#failures[@]} -eq 0 ] || echo "examples: failed: $(list "${failures[@]}")"
echo "examples: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
