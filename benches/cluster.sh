#!/usr/bin/env bash
# benches/cluster.sh -- the redislock commands against their stock Redis
# equivalents on a 3-master Redis Cluster (module on every node), measured
# with `redis-benchmark --cluster`.
#
#   bash benches/cluster.sh
#
# Pairs (50 clients, -P 1; keys carry redis-benchmark's {tag}, which it
# rewrites per client to a hash tag its node serves):
#   ACQUIRE  LOCK.ACQUIRE lock:{tag}:<rand> owner 30000   vs  SET lock:{tag}:<rand> owner NX PX 30000
#   RELEASE  LOCK.RELEASE held:{tag}:<rand> owner         vs  EVALSHA <compare-and-delete> 1 held:{tag}:<rand> owner
# RELEASE runs on a key space first filled by the matching ACQUIRE/SET pass;
# the share of releases that found the owner's lock ("hits") is printed,
# since a miss costs less than a hit.
#
# Environment:
#   REDISLOCK_MODULE  module to load (default: <repo>/target/release/libredislock.so)
#   BENCH_CLUSTER_N   requests per run (default 200000)
#   BENCH_ROUNDS      rounds per pair, module and baseline interleaved (default 3)

set -Eeuo pipefail

SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd -- "$SCRIPT_DIR/.." && pwd)
MODULE=${REDISLOCK_MODULE:-$REPO_ROOT/target/release/libredislock.so}
N=${BENCH_CLUSTER_N:-200000}
ROUNDS=${BENCH_ROUNDS:-3}
CLIENTS=50
KEYS=$N                 # RELEASE key space: filled by the populate pass
OWNER=bench-owner-00000001
LUA_RELEASE="if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end"

TMPD=$(mktemp -d "${TMPDIR:-/tmp}/redislock-cluster-bench.XXXXXX")
PIDS=()
PORTS=()

log() { printf '[cluster-bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { printf '\nbenches/cluster.sh: FAILED: %s\n' "$*" >&2; exit 1; }

cleanup() {
    local rc=$? pid
    trap - EXIT INT TERM
    for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    rm -rf -- "$TMPD"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for tool in redis-server redis-cli redis-benchmark awk; do
    command -v "$tool" >/dev/null 2>&1 || die "required tool '$tool' not found on PATH"
done
[[ -f $MODULE ]] || die "module not found: $MODULE (run 'make build')"
[[ $N =~ ^[1-9][0-9]*$ && $ROUNDS =~ ^[1-9][0-9]*$ ]] || die "BENCH_CLUSTER_N and BENCH_ROUNDS must be positive integers"

# A node port with its bus port (+10000) free, below the ephemeral range.
pick_port() {
    local p
    for _ in $(seq 1 200); do
        p=$((12000 + RANDOM % 8000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null && ! (exec 3<>"/dev/tcp/127.0.0.1/$((p + 10000))") 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

start_node() {
    local port dir pid i seen
    for _ in 1 2 3 4 5; do
        port=$(pick_port) || die "no free port"
        dir=$TMPD/$port
        mkdir -p "$dir"
        redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --daemonize no \
            --dir "$dir" --logfile "$dir/redis.log" --cluster-enabled yes --cluster-config-file nodes.conf \
            --loadmodule "$MODULE" </dev/null >/dev/null 2>&1 &
        pid=$!
        for ((i = 0; i < 100; i++)); do
            kill -0 "$pid" 2>/dev/null || break
            seen=$(redis-cli -p "$port" INFO server 2>/dev/null | tr -d '\r' | awk -F: '$1=="process_id"{print $2}') || true
            if [[ $seen == "$pid" ]]; then
                PIDS+=("$pid")
                PORTS+=("$port")
                return 0
            fi
            sleep 0.1
        done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    die "a cluster node did not start"
}

log "starting 3 masters with the module"
for _ in 1 2 3; do start_node; done
redis-cli --cluster create $(printf '127.0.0.1:%s ' "${PORTS[@]}") --cluster-replicas 0 --cluster-yes >"$TMPD/create.log" 2>&1 \
    || { cat "$TMPD/create.log" >&2; die "redis-cli --cluster create"; }
for port in "${PORTS[@]}"; do
    for ((i = 0; i < 200; i++)); do
        redis-cli -p "$port" CLUSTER INFO | tr -d '\r' | grep -q '^cluster_state:ok' && break
        sleep 0.1
    done
done

each_node() { local port; for port in "${PORTS[@]}"; do redis-cli -p "$port" "$@" >/dev/null; done; }
dbsize() { local port total=0; for port in "${PORTS[@]}"; do total=$((total + $(redis-cli -p "$port" DBSIZE | tr -d '\r'))); done; echo "$total"; }

# ops/s of one redis-benchmark --cluster run.
run() { # requests keyspace command...
    local n=$1 r=$2
    shift 2
    redis-benchmark --cluster -h 127.0.0.1 -p "${PORTS[0]}" -c "$CLIENTS" -n "$n" -r "$r" -q "$@" 2>&1 \
        | tr '\r' '\n' | awk '/requests per second/ { for (i = 1; i <= NF; i++) if ($i == "requests") v = $(i - 1) } END { if (v == "") exit 1; print v }'
}

median() { printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

SHA=$(redis-cli -p "${PORTS[0]}" SCRIPT LOAD "$LUA_RELEASE" | tr -d '\r')
each_node SCRIPT LOAD "$LUA_RELEASE"

declare -A RPS HITS
for ((round = 1; round <= ROUNDS; round++)); do
    for kind in module baseline; do
        each_node FLUSHALL
        if [[ $kind == module ]]; then
            RPS[acquire/$kind]+=" $(run "$N" 100000000 LOCK.ACQUIRE 'lock:{tag}:__rand_int__' "$OWNER" 30000)"
            run $((KEYS * 3)) "$KEYS" LOCK.ACQUIRE 'held:{tag}:__rand_int__' "$OWNER" 300000 >/dev/null
            before=$(dbsize)
            RPS[release/$kind]+=" $(run "$N" "$KEYS" LOCK.RELEASE 'held:{tag}:__rand_int__' "$OWNER")"
        else
            RPS[acquire/$kind]+=" $(run "$N" 100000000 SET 'lock:{tag}:__rand_int__' "$OWNER" NX PX 30000)"
            run $((KEYS * 3)) "$KEYS" SET 'held:{tag}:__rand_int__' "$OWNER" NX PX 300000 >/dev/null
            before=$(dbsize)
            RPS[release/$kind]+=" $(run "$N" "$KEYS" EVALSHA "$SHA" 1 'held:{tag}:__rand_int__' "$OWNER")"
        fi
        # Keys released = hits (the ACQUIRE pass's keys are all still there).
        HITS[$kind]+=" $(awk -v b="$before" -v a="$(dbsize)" -v n="$N" 'BEGIN { printf "%.1f", 100 * (b - a) / n }')"
        log "round $round $kind done"
    done
done

printf '\nRedis Cluster, 3 masters, redis-benchmark --cluster, %d clients, -P 1, %d requests per run; median of %d round(s)\n' "$CLIENTS" "$N" "$ROUNDS"
printf '%-8s %-28s %12s %12s %7s\n' pair 'baseline command' module baseline ratio
for pair in acquire release; do
    m=$(median ${RPS[$pair/module]})
    b=$(median ${RPS[$pair/baseline]})
    base=$([[ $pair == acquire ]] && echo 'SET NX PX' || echo 'EVALSHA compare-and-delete')
    printf '%-8s %-28s %12.0f %12.0f %7.2f\n' "${pair^^}" "$base" "$m" "$b" "$(awk -v m="$m" -v b="$b" 'BEGIN { print m / b }')"
done
printf 'RELEASE hits (releases that found the lock), %% of requests: module%s, baseline%s\n' "${HITS[module]}" "${HITS[baseline]}"
