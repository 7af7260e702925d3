#!/usr/bin/env bash
# Runs every example under examples/ against servers of its own with the
# module loaded; an example passes when it exits 0 and its last line is
# `example OK` (each checks its own results).
#
#   make build && scripts/test-examples.sh
#
# The module: target/release/libredislock.so, or REDISLOCK_MODULE. The
# servers: redis-server from PATH (Debian's 7.0) on free ports, in a
# temporary directory, without persistence: one for the examples of one
# server; for examples/serve/, five behind target/release/redlock serve
# (itself on a free port) and a sixth, the data server. All are stopped on
# exit, by their process ids. The examples run one at a time: the watch
# examples set redislock.notify, server-wide, on the first server while
# they run.
# Toolchains: the Python examples run in a venv at target/examples-venv
# (created and given examples/python/requirements.txt once), the node ones
# after `npm install` in their directory, the redis-cli ones with redis-cli
# from PATH; Go (redigo), PHP (phpredis), Ruby (redis-rb) and Perl
# (Redis.pm) with Debian's packages, installed when missing if apt-get can
# run without asking (scripts/install-deps.sh --examples). An example whose
# toolchain is missing is skipped, not failed. Each run is limited to
# EXAMPLE_TIMEOUT seconds (60).
#
# The last line is `examples: N passed, M failed`; skipped and failed
# examples are named on the lines before it. Exits 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
module=${REDISLOCK_MODULE:-$root/target/release/libredislock.so}
redlock=$root/target/release/redlock
timeout_s=${EXAMPLE_TIMEOUT:-60}
venv=$root/target/examples-venv

for built in "$module" "$redlock"; do
  if [ ! -f "$built" ]; then
    echo "examples: $built is missing: run 'make build' first" >&2
    exit 1
  fi
done
# Absolute: the server runs in its own directory.
module=$(realpath "$module")
if ! command -v redis-server >/dev/null; then
  echo "examples: redis-server is not on PATH (apt-get install redis-server)" >&2
  exit 1
fi

tmp=$(mktemp -d)
pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null; done
  rm -rf "$tmp"
}
trap cleanup EXIT
# The EXIT trap runs on Ctrl-C or a kill too, so no server outlives us.
trap 'exit 130' INT
trap 'exit 143' TERM

# PING over bash's /dev/tcp: needs no redis-cli (which some examples skip without).
answers_ping() {
  ( exec 3<>"/dev/tcp/127.0.0.1/$1" && printf 'PING\r\n' >&3 && read -r -t 2 reply <&3 \
    && [ "$reply" = $'+PONG\r' ] ) 2>/dev/null
}

# start_server NAME: a redis-server with the module, in $tmp/NAME, its port
# left in $server_port. A random port in 20000-29999 (below the ephemeral
# range) that nobody listens on; should another process take it first, the
# server fails to bind and exits, and the next attempt picks another port.
start_server() {
  local name=$1 dir=$tmp/$1 pid
  mkdir -p "$dir"
  for _ in 1 2 3 4 5; do
    server_port=$(( 20000 + RANDOM % 10000 ))
    ( exec 3<>"/dev/tcp/127.0.0.1/$server_port" ) 2>/dev/null && continue
    (cd "$dir" && exec redis-server --port "$server_port" --bind 127.0.0.1 --save "" --appendonly no \
      --dir "$dir" --logfile "$dir/redis.log" --loadmodule "$module") &
    pid=$!
    pids+=("$pid")
    for _ in $(seq 100); do
      answers_ping "$server_port" && return 0
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.05
    done
    kill "$pid" 2>/dev/null
    wait "$pid" 2>/dev/null
    unset 'pids[-1]'
  done
  echo "examples: redis-server with $module did not start; its log:" >&2
  tail -n 20 "$dir/redis.log" >&2
  exit 1
}

start_server single
port=$server_port
echo "examples: redis-server $(redis-server --version | grep -o 'v=[^ ]*') with the module on 127.0.0.1:$port"

# For examples/serve/: five servers with the module behind `redlock serve`,
# and a sixth, the data server, where the examples write through LOCK.FENCED.
quorum=()
for n in 1 2 3 4 5; do
  start_server "quorum-$n"
  quorum+=("redis://127.0.0.1:$server_port")
done
start_server data
data_port=$server_port
# Port 0: the endpoint takes a free port and names it on stderr once it
# listens. Timeouts of a second, not the defaults' 50 ms and 200 ms: this
# runs beside builds on small machines, where a late reply would turn a
# grant into a nil and fail an example for nothing.
serve_urls=$(IFS=,; echo "${quorum[*]}")
: >"$tmp/serve.log"
"$redlock" --servers "$serve_urls" --request-timeout 1s --connect-timeout 1s \
  serve --listen 127.0.0.1:0 2>"$tmp/serve.log" &
pids+=("$!")
serve_port=
for _ in $(seq 200); do
  serve_port=$(sed -n 's/.*listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$tmp/serve.log")
  [ -n "$serve_port" ] && break
  kill -0 "${pids[-1]}" 2>/dev/null || break
  sleep 0.05
done
if [ -z "$serve_port" ]; then
  echo "examples: redlock serve did not start; its output:" >&2
  tail -n 20 "$tmp/serve.log" >&2
  exit 1
fi
echo "examples: redlock serve on 127.0.0.1:$serve_port over five servers with the module; data server on 127.0.0.1:$data_port"

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

# run NAME DIR COMMAND...: runs the example in DIR against our servers, its
# output indented; a caller's REDIS_URL must not send it elsewhere.
run() {
  local name=$1 dir=$2 out=$tmp/$1.out status started=$SECONDS
  shift 2
  echo "examples: $name: $*"
  (cd "$dir" && env -u REDIS_URL REDIS_HOST=127.0.0.1 REDIS_PORT="$port" \
    REDLOCK_SERVE_HOST=127.0.0.1 REDLOCK_SERVE_PORT="$serve_port" DATA_HOST=127.0.0.1 DATA_PORT="$data_port" \
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
  run redis-cli-watch examples/redis-cli bash watch_example.sh
else
  skip redis-cli "redis-cli not found: apt-get install redis-tools"
  skip redis-cli-watch "redis-cli not found: apt-get install redis-tools"
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
for example in sync async philosophers watch; do
  case $python_state in
    ready) run "python-$example" examples/python "$venv/bin/python" "${example}_example.py" ;;
    skip:*) skip "python-$example" "${python_state#skip:}" ;;
    fail:*) fail "python-$example" "${python_state#fail:}" ;;
  esac
done

# Node: ioredis into DIR/node_modules, again only when package.json or
# package-lock.json changed since the last install.
node_setup() { # dir
  command -v node >/dev/null && command -v npm >/dev/null || { echo "skip:node or npm not found"; return; }
  node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 18 ? 0 : 1)' \
    || { echo "skip:node $(node --version) is older than 18"; return; }
  local dir=$1 stamp=$1/node_modules/.package-lock.json
  if [ ! -f "$stamp" ] || [ "$dir/package.json" -nt "$stamp" ] || [ "$dir/package-lock.json" -nt "$stamp" ]; then
    if ! (cd "$dir" && npm install --no-audit --no-fund) >"$tmp/npm.log" 2>&1; then
      echo "fail:npm install in $dir failed: $(tail -n 1 "$tmp/npm.log")"
      return
    fi
  fi
  echo ready
}
node_state=$(node_setup examples/node)
case $node_state in
  ready)
    run node examples/node node example.js
    run node-watch examples/node node watch_example.js
    ;;
  skip:*) skip node "${node_state#skip:}"; skip node-watch "${node_state#skip:}" ;;
  fail:*) fail node "${node_state#fail:}"; fail node-watch "${node_state#fail:}" ;;
esac

# examples/serve/: the quorum through `redlock serve`, from redis-cli,
# redis-py and ioredis as above, and from Go (redigo), PHP (phpredis), Ruby
# (redis-rb) and Perl (Redis.pm), whose Debian packages are installed here
# when missing (scripts/install-deps.sh --examples) if apt-get can run
# without asking: as root (as CI runs) or with sudo that needs no password.
gocode=/usr/share/gocode
go_ready() { command -v go >/dev/null && [ -d "$gocode/src/github.com/gomodule/redigo/redis" ]; }
php_ready() { command -v php >/dev/null && php -r 'exit(extension_loaded("redis") ? 0 : 1);' 2>/dev/null; }
ruby_ready() { command -v ruby >/dev/null && ruby -e 'require "redis"' 2>/dev/null; }
perl_ready() { command -v perl >/dev/null && perl -MRedis -e 1 2>/dev/null; }
install_note=
if ! go_ready || ! php_ready || ! ruby_ready || ! perl_ready; then
  if ! command -v apt-get >/dev/null; then
    install_note="no apt-get here to install it with"
  elif [ "$(id -u)" -ne 0 ] && ! sudo -n true 2>/dev/null; then
    install_note="sudo scripts/install-deps.sh --examples installs it"
  else
    started=$SECONDS
    if scripts/install-deps.sh --examples >"$tmp/install.log" 2>&1; then
      echo "examples: installed the toolchains of examples/serve/ in $((SECONDS - started)) s"
    else
      install_note="scripts/install-deps.sh --examples failed: $(tail -n 1 "$tmp/install.log")"
    fi
  fi
fi
# serve_example NAME READY WHAT-IS-MISSING COMMAND...: runs examples/serve/NAME
# if READY (a function) says its toolchain is there, else skips it.
serve_example() {
  local name=$1 ready=$2 missing=$3
  shift 3
  if "$ready"; then
    run "serve-$name" "examples/serve/$name" "$@"
  else
    skip "serve-$name" "$missing${install_note:+; $install_note}"
  fi
}

if command -v redis-cli >/dev/null; then
  run serve-redis-cli examples/serve/redis-cli bash example.sh
else
  skip serve-redis-cli "redis-cli not found: apt-get install redis-tools"
fi
case $python_state in
  ready) run serve-python examples/serve/python "$venv/bin/python" example.py ;;
  skip:*) skip serve-python "${python_state#skip:}" ;;
  fail:*) fail serve-python "${python_state#fail:}" ;;
esac
node_state=$(node_setup examples/serve/node)
case $node_state in
  ready) run serve-node examples/serve/node node example.js ;;
  skip:*) skip serve-node "${node_state#skip:}" ;;
  fail:*) fail serve-node "${node_state#fail:}" ;;
esac
# Go in GOPATH mode, on the redigo of Debian's package: offline, no module
# proxy; its build cache under target/.
serve_example go go_ready "go or redigo not found: apt-get install golang-go golang-github-gomodule-redigo-dev" \
  env GO111MODULE=off GOPATH="$gocode" GOFLAGS= GOPROXY=off GOCACHE="$root/target/examples-go-cache" \
  go run example.go
serve_example php php_ready "php or phpredis not found: apt-get install php-cli php-redis" php example.php
serve_example ruby ruby_ready "ruby or redis-rb not found: apt-get install ruby-redis" ruby example.rb
serve_example perl perl_ready "perl or Redis.pm not found: apt-get install libredis-perl" perl example.pl

list() { local out; printf -v out '%s; ' "$@"; echo "${out%; }"; }
echo
[ ${#skipped[@]} -eq 0 ] || echo "examples: skipped: $(list "${skipped[@]}")"
[ ${#failures[@]} -eq 0 ] || echo "examples: failed: $(list "${failures[@]}")"
echo "examples: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
