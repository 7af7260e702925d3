#!/usr/bin/env bash
# benches/family.sh -- taking a shared hold or a permit with the module
# against exclusive ACQUIRE and against the common Lua sorted-set semaphore,
# measured with redis-benchmark on a private redis-server.
#
#   bash benches/family.sh
#
# Rows (each at -P 1 and -P 16, 50 clients, fresh random keys):
#   exclusive  LOCK.ACQUIRE x:<rand> owner 30000
#   shared     LOCK.ACQUIRE r:<rand> owner 30000 SHARED          (a new read-write group per key)
#   permit     LOCK.ACQUIRE s:<rand> owner 30000 SHARED LIMIT 4  (a new semaphore per key)
#   lua        EVALSHA <sorted-set acquire> 1 z:<rand> owner 4 30000
#
# The Lua script is the pattern semaphore libraries use: drop holders whose
# score (expiry) has passed, and add the owner with its expiry as score if
# fewer than `limit` hold. Fresh keys on both sides: each request is a
# grant, the work a permit costs when one is free. Every request must be
# granted; an error reply or a refusal fails the run.
#
# Rounds interleave the four rows (BENCH_ROUNDS, default 3); the table gives
# the median requests/s of each and the ratios. Machines are shared and
# noisy: read the ratios, not the absolute figures.
#
# Environment: REDISLOCK_MODULE, BENCH_N1 (default 200000), BENCH_N16
# (default 1000000), BENCH_ROUNDS (default 3).

set -Eeuo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd -- "$SCRIPT_DIR/.." && pwd)
MODULE=${REDISLOCK_MODULE:-$REPO_ROOT/target/release/libredislock.so}
N1=${BENCH_N1:-200000}
N16=${BENCH_N16:-1000000}
ROUNDS=${BENCH_ROUNDS:-3}
CLIENTS=50
KEYSPACE=100000000
LUA_ACQUIRE="local t = redis.call('TIME') local now = t[1] * 1000 + math.floor(t[2] / 1000) redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now) if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[2]) then redis.call('ZADD', KEYS[1], now + tonumber(ARGV[3]), ARGV[1]) redis.call('PEXPIRE', KEYS[1], ARGV[3]) return 1 end return 0"

die() {
    printf 'benches/family.sh: FAILED: %s\n' "$*" >&2
    exit 1
}
log() { printf '[family %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

for tool in redis-server redis-cli redis-benchmark awk python3; do
    command -v "$tool" >/dev/null 2>&1 || die "required tool '$tool' not found on PATH"
done
for v in N1 N16 ROUNDS; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer (got '${!v}')"
done
[[ -f $MODULE ]] || die "module not found: $MODULE (cargo build --release, or set REDISLOCK_MODULE)"

TMPD=$(mktemp -d "${TMPDIR:-/tmp}/redislock-family.XXXXXX")
SERVER_PID=""
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [[ -n $SERVER_PID ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    if ((rc != 0)) && [[ -s $TMPD/redis.log ]]; then
        tail -n 20 "$TMPD/redis.log" >&2 || true
    fi
    rm -rf -- "$TMPD"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

PORT=$(python3 -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
redis-server --port "$PORT" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
    --dir "$TMPD" --logfile "$TMPD/redis.log" --loadmodule "$MODULE" </dev/null >/dev/null 2>&1 &
SERVER_PID=$!
rcli() { redis-cli -h 127.0.0.1 -p "$PORT" "$@"; }
for ((i = 0; i < 150; i++)); do
    seen=$(rcli INFO server 2>/dev/null | tr -d '\r' | awk -F: '$1=="process_id"{print $2}') || true
    [[ $seen == "$SERVER_PID" ]] && break
    kill -0 "$SERVER_PID" 2>/dev/null || die "redis-server exited at startup"
    sleep 0.1
done
[[ ${seen:-} == "$SERVER_PID" ]] || die "redis-server did not answer on 127.0.0.1:$PORT"
SHA=$(rcli SCRIPT LOAD "$LUA_ACQUIRE" | tr -d '\r')
[[ $SHA =~ ^[0-9a-f]{40}$ ]] || die "SCRIPT LOAD answered '$SHA'"

errors() { rcli INFO stats | tr -d '\r' | awk -F: '$1=="total_error_replies"{print $2+0}'; }
refused() { rcli INFO redislock | tr -d '\r' | awk -F: '$1=="redislock_acquire_refused_held"{print $2+0}'; }

# row name -> the command redis-benchmark sends
declare -A CMD=(
    [exclusive]="LOCK.ACQUIRE x:__rand_int__ owner 30000"
    [shared]="LOCK.ACQUIRE r:__rand_int__ owner 30000 SHARED"
    [permit]="LOCK.ACQUIRE s:__rand_int__ owner 30000 SHARED LIMIT 4"
    [lua]="EVALSHA $SHA 1 z:__rand_int__ owner 4 30000"
)
ROWS=(exclusive shared permit lua)

run() { # row pipeline requests -> requests/s
    local row=$1 p=$2 n=$3 before refused_before out rps
    before=$(errors) refused_before=$(refused)
    # shellcheck disable=SC2086 # the command is split into its words on purpose
    out=$(redis-benchmark -h 127.0.0.1 -p "$PORT" -c "$CLIENTS" -P "$p" -n "$n" -r "$KEYSPACE" --csv ${CMD[$row]} 2>&1) ||
        die "redis-benchmark $row -P $p: $out"
    rps=$(printf '%s\n' "$out" | awk -F'","' 'NR>1 || /rps/ {next} {print $2}' | tr -d '"' | tail -n 1)
    [[ -z $rps ]] && rps=$(printf '%s\n' "$out" | tr -d '"' | awk -F, '$2 ~ /^[0-9.]+$/ {v=$2} END {print v}')
    [[ $rps =~ ^[0-9.]+$ ]] || die "no requests/s in redis-benchmark's output for $row: $out"
    (($(errors) == before)) || die "$row -P $p: error replies during the run"
    # A refusal is cheaper than a grant: none may hide in the rate.
    (($(refused) == refused_before)) || die "$row -P $p: the module refused requests during the run"
    printf '%s' "$rps"
}

median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }

declare -A RESULT=()
for p in 1 16; do
    n=$N1
    ((p == 16)) && n=$N16
    declare -A SAMPLES=()
    for ((round = 1; round <= ROUNDS; round++)); do
        for row in "${ROWS[@]}"; do
            log "-P $p round $round/$ROUNDS: $row"
            SAMPLES[$row]+="$(run "$row" "$p" "$n") "
            rcli FLUSHALL >/dev/null
        done
    done
    for row in "${ROWS[@]}"; do
        # shellcheck disable=SC2086
        RESULT[$row,$p]=$(median ${SAMPLES[$row]})
    done
    unset SAMPLES
done

printf '\nredislock lock family: requests/s (median of %s interleaved rounds, %s clients)\n\n' "$ROUNDS" "$CLIENTS"
printf '%-10s %14s %14s\n' row "-P 1" "-P 16"
for row in "${ROWS[@]}"; do
    printf '%-10s %14.0f %14.0f\n' "$row" "${RESULT[$row,1]}" "${RESULT[$row,16]}"
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", (b > 0 ? a / b : 0)}'; }
printf '\n%-28s %8s %8s\n' ratio "-P 1" "-P 16"
printf '%-28s %8s %8s   (target >= 2 at -P 16)\n' "permit / Lua semaphore" "$(ratio "${RESULT[permit,1]}" "${RESULT[lua,1]}")" "$(ratio "${RESULT[permit,16]}" "${RESULT[lua,16]}")"
printf '%-28s %8s %8s\n' "shared / exclusive" "$(ratio "${RESULT[shared,1]}" "${RESULT[exclusive,1]}")" "$(ratio "${RESULT[shared,16]}" "${RESULT[exclusive,16]}")"
printf '%-28s %8s %8s\n' "permit / exclusive" "$(ratio "${RESULT[permit,1]}" "${RESULT[exclusive,1]}")" "$(ratio "${RESULT[permit,16]}" "${RESULT[exclusive,16]}")"
