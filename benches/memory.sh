#!/usr/bin/env bash
# benches/memory.sh -- what a held lock costs in memory, against the same
# key written by SET NX PX, measured through INFO's used_memory on a private
# redis-server (no persistence).
#
#   bash benches/memory.sh
#
# For each owner length (20 bytes, as benches/module.sh uses, and 40, the
# hex owner the quorum client and the bindings send), the server is filled
# with BENCH_MEMORY_KEYS keys named k:0000000000 (12 bytes) once by
# LOCK.ACQUIRE and once by SET NX PX, both with a 300 s lease, and the
# growth of used_memory is divided by the key count; FLUSHALL between. The
# growth includes everything the server spends per key: the keyspace and
# expires entries, the key name, the value object and the module's own
# allocation.
#
# Environment:
#   REDISLOCK_MODULE    module to load (default: <repo>/target/release/libredislock.so)
#   BENCH_MEMORY_OLD    another build of the module to measure in the same run
#                       (before/after a change); optional
#   BENCH_MEMORY_KEYS   keys per fill (default 1000000, at least 100000)
#
# Prints one line per module and owner length:
#   memory per held lock: X B vs SET NX PX Y B, ratio R (owner N B, K keys)

set -Eeuo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd -- "$SCRIPT_DIR/.." && pwd)
MODULE=${REDISLOCK_MODULE:-$REPO_ROOT/target/release/libredislock.so}
OLD=${BENCH_MEMORY_OLD:-}
KEYS=${BENCH_MEMORY_KEYS:-1000000}
TTL=300000

TMPD=""
SERVER_PID=""
PORT=""

log() { printf '[memory %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
    printf '\nbenches/memory.sh: FAILED: %s\n' "$*" >&2
    exit 1
}

stop_server() {
    local i
    [[ -n $SERVER_PID ]] && kill -0 "$SERVER_PID" 2>/dev/null || return 0
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.1
    done
    kill -0 "$SERVER_PID" 2>/dev/null && kill -KILL "$SERVER_PID" 2>/dev/null
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
}
cleanup() {
    local rc=$?
    trap - EXIT
    stop_server
    [[ -n $TMPD && -d $TMPD ]] && rm -rf -- "$TMPD"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for tool in redis-server redis-cli awk python3; do
    command -v "$tool" >/dev/null 2>&1 || die "required tool '$tool' not found on PATH"
done
[[ $KEYS =~ ^[1-9][0-9]*$ ]] && ((KEYS >= 100000 && KEYS <= 9999999999)) || die "BENCH_MEMORY_KEYS must be 100000 or more (got '$KEYS')"
for m in "$MODULE" ${OLD:+"$OLD"}; do
    [[ -r $m ]] || die "module not readable: $m (build it with 'cargo build --release -p redislock')"
done

TMPD=$(mktemp -d "${TMPDIR:-/tmp}/redislock-memory.XXXXXX")
rcli() { redis-cli -h 127.0.0.1 -p "$PORT" "$@"; }

start_server() { # module
    local i
    PORT=$(python3 -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
    redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --enable-debug-command local --daemonize no \
        --dir "$TMPD" --logfile "$TMPD/redis.log" --loadmodule "$1" </dev/null >/dev/null 2>&1 &
    SERVER_PID=$!
    for ((i = 0; i < 150; i++)); do
        [[ $(rcli PING 2>/dev/null) == PONG ]] && return 0
        kill -0 "$SERVER_PID" 2>/dev/null || break
        sleep 0.1
    done
    tail -n 20 "$TMPD/redis.log" >&2 || true
    die "redis-server with $1 did not start"
}

used_memory() { rcli INFO memory | tr -d '\r' | awk -F: '$1=="used_memory"{print $2}'; }

# The keyspace and expires tables grow by rehashing step by step; wait
# until no rehash is under way (DEBUG HTSTATS shows one table per dict).
settled_memory() {
    local i
    for ((i = 0; i < 600; i++)); do
        if ! rcli DEBUG HTSTATS 0 | tr -d '\r' | grep -q 'Rehashing target'; then
            used_memory
            return 0
        fi
        sleep 0.1
    done
    die "the keyspace was still rehashing after 60 s"
}

# fill COMMAND OWNER: KEYS commands as RESP through redis-cli --pipe.
fill() {
    local cmd=$1 owner=$2 out
    out=$(awk -v n="$KEYS" -v cmd="$cmd" -v owner="$owner" -v ttl="$TTL" 'BEGIN {
        for (i = 0; i < n; i++) {
            key = sprintf("k:%010d", i)
            if (cmd == "lock")
                printf "*4\r\n$12\r\nLOCK.ACQUIRE\r\n$12\r\n%s\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", key, length(owner), owner, length(ttl), ttl
            else
                printf "*6\r\n$3\r\nSET\r\n$12\r\n%s\r\n$%d\r\n%s\r\n$2\r\nNX\r\n$2\r\nPX\r\n$%d\r\n%s\r\n", key, length(owner), owner, length(ttl), ttl
        }
    }' | rcli --pipe 2>&1)
    grep -q "errors: 0, replies: $KEYS" <<<"$out" || die "filling with $cmd failed: $out"
    [[ $(rcli DBSIZE | tr -d '\r') == "$KEYS" ]] || die "expected $KEYS keys after filling with $cmd"
}

per_key() { # command owner -> bytes per key (one decimal)
    local before after
    rcli FLUSHALL SYNC >/dev/null
    before=$(settled_memory)
    fill "$1" "$2"
    after=$(settled_memory)
    rcli FLUSHALL SYNC >/dev/null
    awk -v a="$after" -v b="$before" -v n="$KEYS" 'BEGIN { printf "%.1f", (a - b) / n }'
}

measure() { # label module
    local owner lock set
    start_server "$2"
    rcli CONFIG SET activedefrag no >/dev/null 2>&1 || true
    for owner in bench-owner-00000001 5f0c3a9e4b7d21f86a0e9c3d7b1f4a2e6c8d0b13; do
        log "$1: $KEYS locks and $KEYS strings, owner of ${#owner} bytes"
        lock=$(per_key lock "$owner")
        set=$(per_key set "$owner")
        awk -v l="$lock" -v s="$set" -v o="${#owner}" -v n="$KEYS" -v label="${1:+$1: }" \
            'BEGIN { printf "%smemory per held lock: %s B vs SET NX PX %s B, ratio %.2f (owner %d B, %d keys)\n", label, l, s, l / s, o, n }'
    done
    stop_server
}

redis-server --version | awk '{print "server:", $3, $5}'
if [[ -n $OLD ]]; then
    measure old "$OLD"
    measure new "$MODULE"
else
    measure "" "$MODULE"
fi
