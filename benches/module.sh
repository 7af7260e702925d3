#!/usr/bin/env bash
# benches/module.sh -- throughput of the redislock commands against stock Redis
# equivalents, measured with redis-benchmark on a private redis-server.
#
#   bash benches/module.sh
#
# Pairs (each run once without pipelining, -P 1, and once with -P 16; 50 clients):
#   ACQUIRE  LOCK.ACQUIRE k owner 30000   vs  SET k owner NX PX 30000
#   RELEASE  LOCK.RELEASE k owner         vs  EVALSHA <compare-and-delete> 1 k owner
#   EXTEND   LOCK.EXTEND  k owner 30000   vs  EVALSHA <compare-and-pexpire> 1 k owner 30000
#
# ACQUIRE runs twice per round: on the server without persistence (as every
# other pair), and on a second server with the module and the persistence of
# redlock.conf, the deployment Redlock users run: appendonly yes, appendfsync
# everysec (its AOF lives in this script's temporary directory, removed at the
# end). Both ratios are printed side by side. RDB snapshots are off on both.
#
# Environment:
#   REDISLOCK_MODULE  module to load (default: <repo>/target/release/libredislock.so)
#   BENCH_N1          requests per run at -P 1  (default 250000)
#   BENCH_N16         requests per run at -P 16 (default 1500000)
#   BENCH_AOF_N1      requests per ACQUIRE run with AOF at -P 1  (default: BENCH_N1)
#   BENCH_AOF_N16     requests per ACQUIRE run with AOF at -P 16 (default 500000)
#   BENCH_ROUNDS      rounds per pair/pipeline, module and baseline interleaved (default 3)
#   BENCH_TIMEOUT     seconds before one redis-benchmark run is considered hung (default 600)
#
# Progress goes to stderr, the header and the result tables to stdout.
# Exit status: 0 when every run completed (whether targets were met or missed),
# non-zero on a real failure (server not starting, error replies, hung run, ...).

set -Eeuo pipefail

# ---------------------------------------------------------------- settings
SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd -- "$SCRIPT_DIR/.." && pwd)
MODULE=${REDISLOCK_MODULE:-$REPO_ROOT/target/release/libredislock.so}
N1=${BENCH_N1:-250000}
N16=${BENCH_N16:-1500000}
AOF_N1=${BENCH_AOF_N1:-$N1}
AOF_N16=${BENCH_AOF_N16:-500000}
ROUNDS=${BENCH_ROUNDS:-3}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-600}

CLIENTS=50
ACQ_KEYSPACE=100000000          # -r for ACQUIRE: far larger than any request count
OWNER=bench-owner-00000001      # 20 bytes, the same in every run
TTL=30000                       # ttl-ms used by the measured commands
POP_TTL=300000                  # lease of pre-populated keys: cannot expire during a run
LUA_RELEASE="if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end"
LUA_EXTEND="if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('pexpire',KEYS[1],ARGV[2]) else return 0 end"

TMPD=""
BENCH_PID=""
# Two servers, both with the module: "plain" (no persistence; every pair) and
# "aof" (appendonly yes, appendfsync everysec; ACQUIRE only). rcli, bench_run
# and the helpers act on the current one, chosen by use_server.
declare -A SRV_PID=() SRV_PORT=() SRV_LOG=()
SERVER=""       # name of the current server
SERVER_PID=""
PORT=""
LOG=""

log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
    printf '\nbenches/module.sh: FAILED: %s\n' "$*" >&2
    exit 1
}

# ---------------------------------------------------------------- cleanup
stop_pid() { # pid of a redis-server this script started: SIGTERM, SIGKILL after 10 s
    local pid=$1 i
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        printf 'benches/module.sh: redis-server %s ignored SIGTERM, sending SIGKILL\n' "$pid" >&2
        kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}
cleanup() {
    local rc=$?
    trap - EXIT INT TERM HUP ERR
    if [[ -n $BENCH_PID ]] && kill -0 "$BENCH_PID" 2>/dev/null; then
        kill -TERM "$BENCH_PID" 2>/dev/null || true
        wait "$BENCH_PID" 2>/dev/null || true
    fi
    local pid
    for pid in "${SRV_PID[@]}"; do stop_pid "$pid"; done
    if ((rc != 0 && rc != 130 && rc != 143)) && [[ -n $LOG && -s $LOG ]]; then
        printf -- '--- last lines of the redis-server log (%s server, %s) ---\n' "${SERVER:-?}" "$LOG" >&2
        tail -n 25 "$LOG" >&2 || true
        printf -- '---\n' >&2
    fi
    if [[ -n $TMPD && -d $TMPD ]]; then
        rm -rf -- "$TMPD"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'printf "\nbenches/module.sh: interrupted\n" >&2; exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
trap 'printf "benches/module.sh: command failed (line %s): %s\n" "$LINENO" "$BASH_COMMAND" >&2' ERR

# ---------------------------------------------------------------- checks
for tool in redis-server redis-cli redis-benchmark awk timeout; do
    command -v "$tool" >/dev/null 2>&1 || die "required tool '$tool' not found on PATH"
done
for v in N1 N16 AOF_N1 AOF_N16 ROUNDS BENCH_TIMEOUT; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer (got '${!v}')"
done
((N1 <= 99999999 && N16 <= 99999999 && AOF_N1 <= 99999999 && AOF_N16 <= 99999999)) || die "request counts must stay below 10^8 (key names have 12 digits, ACQUIRE key space is 10^8)"
((${#OWNER} == 20)) || die "internal: owner must be 20 bytes"

[[ $MODULE == /* ]] || MODULE=$PWD/$MODULE
if [[ ! -f $MODULE ]]; then
    die "module not found: $MODULE
  Build it with 'cargo build --release' in $REPO_ROOT, or point REDISLOCK_MODULE at the .so."
fi
[[ -r $MODULE ]] || die "module not readable: $MODULE"

TMPD=$(mktemp -d "${TMPDIR:-/tmp}/redislock-bench.XXXXXX")

# ---------------------------------------------------------------- server
rcli() { redis-cli -h 127.0.0.1 -p "$PORT" "$@"; }

free_port() {
    if command -v python3 >/dev/null 2>&1; then
        python3 -c 'import socket
s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()' && return 0
    fi
    local p _
    for _ in $(seq 1 100); do
        p=$((20000 + RANDOM % 40000))
        if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            echo "$p"
            return 0
        fi
    done
    return 1
}

use_server() { # name: make it the server rcli, bench_run and the helpers talk to
    [[ -n ${SRV_PID[$1]:-} ]] || die "internal: no server named '$1'"
    SERVER=$1 SERVER_PID=${SRV_PID[$1]} PORT=${SRV_PORT[$1]} LOG=${SRV_LOG[$1]}
}

# start_server NAME DIR persistence-args...: a redis-server with the module,
# working directory (and AOF, if any) DIR, log DIR/redis.log; becomes current.
start_server() {
    local name=$1 dir=$2
    shift 2
    local attempt i pid_seen
    mkdir -p -- "$dir"
    SERVER=$name
    LOG=$dir/redis.log
    for attempt in 1 2 3 4 5; do
        PORT=$(free_port) || die "could not find a free local port"
        : >"$LOG"
        redis-server --port "$PORT" --bind 127.0.0.1 --protected-mode yes \
            --save "" "$@" --daemonize no \
            --dir "$dir" --logfile "$LOG" \
            --loadmodule "$MODULE" </dev/null >/dev/null 2>&1 &
        SERVER_PID=$!
        SRV_PID[$name]=$SERVER_PID SRV_PORT[$name]=$PORT SRV_LOG[$name]=$LOG
        for ((i = 0; i < 150; i++)); do
            kill -0 "$SERVER_PID" 2>/dev/null || break
            # Make sure the server answering is ours, not someone else's on a clashing port.
            pid_seen=$(rcli INFO server 2>/dev/null | tr -d '\r' | awk -F: '$1=="process_id"{print $2}') || true
            [[ $pid_seen == "$SERVER_PID" ]] && return 0
            sleep 0.1
        done
        if kill -0 "$SERVER_PID" 2>/dev/null; then
            die "redis-server ($name, pid $SERVER_PID) did not answer on 127.0.0.1:$PORT within 15 s"
        fi
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=""
        SRV_PID[$name]=""
        if grep -qi 'address already in use' "$LOG"; then
            log "port $PORT was taken meanwhile, retrying with another port"
            continue
        fi
        if grep -qi 'module' "$LOG"; then
            die "redis-server exited at startup, apparently while loading the module $MODULE (log below)"
        fi
        die "redis-server exited at startup (log below)"
    done
    die "could not start redis-server: 5 port clashes in a row"
}

# ---------------------------------------------------------------- helpers
info_field() { # section field
    rcli INFO "$1" | tr -d '\r' | awk -F: -v k="$2" '$1==k{v=$2} END{print (v==""?0:v)}'
}
total_errors() { info_field stats total_error_replies; }
cmd_calls() { # lowercase command name -> calls so far
    rcli INFO commandstats | tr -d '\r' | awk -v k="cmdstat_$1:" '
        index($0, k) == 1 {
            sub(/^[^:]*:/, ""); n = split($0, a, ",")
            for (i = 1; i <= n; i++) { split(a[i], kv, "="); if (kv[1] == "calls") v = kv[2] }
        }
        END { print (v == "" ? 0 : v) }'
}
dbsize() { rcli DBSIZE | tr -d '\r'; }
# flush: FLUSHALL SYNC on the current server; on the AOF server also rewrite the
# AOF (to an empty base), so that every run starts from the same small file and
# none inherits the previous run's growth or its automatic rewrite.
flush() {
    local r
    r=$(rcli FLUSHALL SYNC | tr -d '\r')
    [[ $r == OK ]] || die "FLUSHALL SYNC replied '$r' ($SERVER server)"
    if [[ $(info_field persistence aof_enabled) == 1 ]]; then
        aof_rewrite
    fi
}
aof_rewrite() { # BGREWRITEAOF on the current server and wait for it to finish
    local r i st
    wait_aof_idle
    r=$(rcli BGREWRITEAOF | tr -d '\r')
    [[ $r == *started* || $r == *scheduled* ]] || die "BGREWRITEAOF replied '$r' ($SERVER server)"
    wait_aof_idle
    st=$(info_field persistence aof_last_bgrewrite_status)
    [[ $st == ok ]] || die "AOF rewrite failed (aof_last_bgrewrite_status: $st, $SERVER server)"
}
wait_aof_idle() { # until no AOF rewrite runs or is scheduled (at most 120 s)
    local i st
    for ((i = 0; i < 1200; i++)); do
        st=$(rcli INFO persistence | tr -d '\r')
        if [[ $st == *$'\naof_rewrite_in_progress:0\n'* && $st == *$'\naof_rewrite_scheduled:0\n'* ]]; then
            return 0
        fi
        sleep 0.1
    done
    die "an AOF rewrite was still running after 120 s ($SERVER server)"
}
now() { date +%s.%N; }
fmt_rate() { awk -v x="$1" 'BEGIN{printf "%.0f", x}'; }
pct() { awk -v a="$1" -v b="$2" 'BEGIN{ if (b > 0) printf "%.1f%%", 100*a/b; else printf "n/a" }'; }

expect() { # description, expected (regex), actual
    [[ $3 =~ $2 ]] || die "sanity check failed: $1: expected /$2/, got '$3'"
}

# populate VARIANT COUNT: FLUSHALL, then create keys lock:000000000000 .. lock:<COUNT-1>
# held by $OWNER, exactly the names redis-benchmark generates for -r COUNT.
#   module: LOCK.ACQUIRE key owner POP_TTL       script: SET key owner NX PX POP_TTL
populate() {
    local variant=$1 count=$2 out n
    flush
    awk -v n="$count" -v owner="$OWNER" -v ttl="$POP_TTL" -v variant="$variant" 'BEGIN {
        ol = length(owner); tl = length(ttl)
        if (variant == "module") {
            pre  = "*4\r\n$12\r\nLOCK.ACQUIRE\r\n$17\r\n"
            post = "\r\n$" ol "\r\n" owner "\r\n$" tl "\r\n" ttl "\r\n"
        } else {
            pre  = "*6\r\n$3\r\nSET\r\n$17\r\n"
            post = "\r\n$" ol "\r\n" owner "\r\n$2\r\nNX\r\n$2\r\nPX\r\n$" tl "\r\n" ttl "\r\n"
        }
        for (i = 0; i < n; i++) printf "%slock:%012d%s", pre, i, post
    }' | rcli --pipe >"$TMPD/pipe.out" 2>&1 || { cat "$TMPD/pipe.out" >&2; die "redis-cli --pipe failed while populating ($variant)"; }
    out=$(tr -d '\r' <"$TMPD/pipe.out" | grep -E '^errors: ' | tail -n 1)
    [[ $out == "errors: 0, replies: $count" ]] || { cat "$TMPD/pipe.out" >&2; die "populating $count keys ($variant) reported '$out'"; }
    n=$(dbsize)
    ((n == count)) || die "populating ($variant): DBSIZE is $n, expected $count"
}

# parse_rps FILE: the rps column of redis-benchmark --csv output (located via the header).
parse_rps() {
    awk -F'","' '
        NR == 1 && /rps/ {
            for (i = 1; i <= NF; i++) { f = $i; gsub(/"/, "", f); if (f == "rps") fromend = NF - i }
            next
        }
        {
            if (fromend == "") fromend = 6
            if (NF <= fromend) next
            v = $(NF - fromend); gsub(/"/, "", v)
            if (v ~ /^[0-9]+(\.[0-9]+)?$/) rps = v
        }
        END { if (rps != "") print rps }' "$1"
}

# bench_run N KEYSPACE PIPELINE CMDSTAT_NAME -- command args...
# Sets RUN_RPS, RUN_CALLS, RUN_SECS. Dies on error replies, short runs, bad output.
bench_run() {
    local n=$1 r=$2 p=$3 cmdname=$4
    shift 5
    local errs0 errs1 calls0 calls1 rc=0 t0 t1 rps
    errs0=$(total_errors)
    calls0=$(cmd_calls "$cmdname")
    t0=$(now)
    timeout "$BENCH_TIMEOUT" redis-benchmark -h 127.0.0.1 -p "$PORT" -c "$CLIENTS" -n "$n" -r "$r" -P "$p" --csv "$@" \
        >"$TMPD/bench.out" 2>"$TMPD/bench.err" </dev/null &
    BENCH_PID=$!
    wait "$BENCH_PID" || rc=$?
    BENCH_PID=""
    t1=$(now)
    kill -0 "$SERVER_PID" 2>/dev/null || die "redis-server died during: $*"
    errs1=$(total_errors)
    calls1=$(cmd_calls "$cmdname")
    if ((errs1 > errs0)); then
        {
            printf '\n!!! %d ERROR REPLIES during: %s (-P %s)\n' "$((errs1 - errs0))" "$*" "$p"
            rcli INFO errorstats | tr -d '\r'
            rcli INFO commandstats | tr -d '\r' | grep -F "cmdstat_$cmdname:" || true
            head -c 2000 "$TMPD/bench.err"
        } >&2
        die "the server replied with errors during '$1' (-P $p); the throughput would be meaningless"
    fi
    if ((rc == 124)); then die "redis-benchmark timed out after ${BENCH_TIMEOUT}s: $*"; fi
    if ((rc != 0)); then
        cat "$TMPD/bench.out" "$TMPD/bench.err" >&2
        die "redis-benchmark exited with status $rc: $*"
    fi
    RUN_CALLS=$((calls1 - calls0))
    if ((RUN_CALLS < n)); then
        cat "$TMPD/bench.out" "$TMPD/bench.err" >&2
        die "only $RUN_CALLS of $n '$cmdname' commands reached the server: $*"
    fi
    rps=$(parse_rps "$TMPD/bench.out")
    if [[ -z $rps ]]; then
        cat "$TMPD/bench.out" "$TMPD/bench.err" >&2
        die "could not parse ops/s from redis-benchmark --csv output: $*"
    fi
    RUN_RPS=$rps
    RUN_SECS=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')
}

median() { # numbers...
    printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{ if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2 }'
}

# ---------------------------------------------------------------- start
log "starting redis-server with $MODULE, no persistence"
start_server plain "$TMPD" --appendonly no
log "redis-server (no persistence) pid $SERVER_PID on 127.0.0.1:$PORT (dir $TMPD)"
log "starting redis-server with $MODULE, appendonly yes, appendfsync everysec"
start_server aof "$TMPD/aof" --appendonly yes --appendfsync everysec
log "redis-server (AOF everysec) pid $SERVER_PID on 127.0.0.1:$PORT (dir $TMPD/aof)"
expect "aof server: appendonly" '^appendonly yes$' "$(rcli CONFIG GET appendonly | tr -d '\r' | paste -sd' ')"
expect "aof server: appendfsync" '^appendfsync everysec$' "$(rcli CONFIG GET appendfsync | tr -d '\r' | paste -sd' ')"
expect "aof server: aof_enabled" '^1$' "$(info_field persistence aof_enabled)"
expect "aof server: AOF directory" "^dir $TMPD/aof\$" "$(rcli CONFIG GET dir | tr -d '\r' | paste -sd' ')"
AOF_FS=$(df -PT -- "$TMPD/aof" 2>/dev/null | awk 'NR==2{print $2 " on " $1}') || true
use_server plain

SERVER_VERSION=$(rcli INFO server | tr -d '\r' | awk -F: '$1=="redis_version"{print $2}')
CPU_MODEL=$(awk -F': *' '/^model name/{print $2; exit}' /proc/cpuinfo 2>/dev/null || true)

# ---------------------------------------------------------------- sanity
log "sanity checks"
use_server aof
flush
e0=$(total_errors)
expect "LOCK.ACQUIRE on a free key (AOF server)" '^\(integer\) [0-9]+$' "$(rcli --no-raw LOCK.ACQUIRE bench:sanity "$OWNER" "$TTL")"
expect "SET NX PX on a free key (AOF server)" '^OK$' "$(rcli SET bench:sanity2 "$OWNER" NX PX "$TTL" | tr -d '\r')"
e1=$(total_errors)
((e1 == e0)) || die "sanity checks on the AOF server produced $((e1 - e0)) error replies"
flush
use_server plain
flush
SHA_RELEASE=$(rcli SCRIPT LOAD "$LUA_RELEASE" | tr -d '\r')
SHA_EXTEND=$(rcli SCRIPT LOAD "$LUA_EXTEND" | tr -d '\r')
expect "SCRIPT LOAD (release script)" '^[0-9a-f]{40}$' "$SHA_RELEASE"
expect "SCRIPT LOAD (extend script)" '^[0-9a-f]{40}$' "$SHA_EXTEND"

e0=$(total_errors)
expect "LOCK.ACQUIRE on a free key" '^\(integer\) [0-9]+$' "$(rcli --no-raw LOCK.ACQUIRE bench:sanity "$OWNER" "$TTL")"
expect "LOCK.ACQUIRE by another owner" '^\(nil\)$' "$(rcli --no-raw LOCK.ACQUIRE bench:sanity other-owner "$TTL")"
expect "LOCK.ACQUIRE re-grant by the holder" '^\(integer\) [0-9]+$' "$(rcli --no-raw LOCK.ACQUIRE bench:sanity "$OWNER" "$TTL")"
expect "LOCK.EXTEND by the holder" '^\(integer\) 1$' "$(rcli --no-raw LOCK.EXTEND bench:sanity "$OWNER" "$TTL")"
expect "LOCK.EXTEND by another owner" '^\(integer\) 0$' "$(rcli --no-raw LOCK.EXTEND bench:sanity other-owner "$TTL")"
expect "LOCK.RELEASE by another owner" '^\(integer\) 0$' "$(rcli --no-raw LOCK.RELEASE bench:sanity other-owner)"
expect "LOCK.RELEASE by the holder" '^\(integer\) 1$' "$(rcli --no-raw LOCK.RELEASE bench:sanity "$OWNER")"
expect "LOCK.RELEASE of a free key" '^\(integer\) 0$' "$(rcli --no-raw LOCK.RELEASE bench:sanity "$OWNER")"
expect "key gone after LOCK.RELEASE" '^0$' "$(rcli EXISTS bench:sanity | tr -d '\r')"
expect "SET NX PX on a free key" '^OK$' "$(rcli SET bench:sanity "$OWNER" NX PX "$TTL" | tr -d '\r')"
expect "EVALSHA compare-and-pexpire" '^\(integer\) 1$' "$(rcli --no-raw EVALSHA "$SHA_EXTEND" 1 bench:sanity "$OWNER" "$TTL")"
expect "EVALSHA compare-and-delete" '^\(integer\) 1$' "$(rcli --no-raw EVALSHA "$SHA_RELEASE" 1 bench:sanity "$OWNER")"
e1=$(total_errors)
((e1 == e0)) || die "sanity checks produced $((e1 - e0)) error replies"
flush

# ---------------------------------------------------------------- header
LOAD1=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo 0)
if awk -v l="$LOAD1" 'BEGIN{exit !(l > 1.0)}'; then
    log "WARNING: 1-minute load average is $LOAD1 before the benchmark; other work on this machine will distort the numbers"
fi
cat <<EOF
== redislock module benchmark ==
date:         $(date -u '+%Y-%m-%d %H:%M:%S UTC')
redis-server: $SERVER_VERSION ($(redis-server --version | tr -d '\r'))
bench tool:   $(redis-benchmark --version 2>&1 | head -n 1)
CPUs:         $(nproc) (${CPU_MODEL:-unknown model}), load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo n/a)
module:       $MODULE ($(stat -c '%s bytes, built %y' "$MODULE" 2>/dev/null | cut -d. -f1))
setup:        $CLIENTS clients, requests per run: $N1 at -P 1, $N16 at -P 16; $ROUNDS round(s) (module/baseline interleaved), median ops/s
persistence:  none (RDB and AOF off); ACQUIRE also with appendonly yes, appendfsync everysec,
              $AOF_N1 requests at -P 1, $AOF_N16 at -P 16; AOF in $TMPD/aof (${AOF_FS:-unknown filesystem})
owner:        $OWNER (${#OWNER} bytes), ttl ${TTL} ms

EOF

# ---------------------------------------------------------------- runs
declare -A MOD_RPS BASE_RPS MOD_FRAC BASE_FRAC

declare -A AOF_BPR AOF_REWRITES AOF_DELAYED

# one_run PAIR PIPELINE VARIANT N -> appends to MOD_RPS/BASE_RPS, MOD_FRAC/BASE_FRAC
# PAIR ACQUIRE_AOF is ACQUIRE on the AOF server (and also records AOF bytes per
# request, automatic rewrites and delayed fsyncs during the run).
one_run() {
    local pair=$1 p=$2 variant=$3 n=$4 frac after cmdpair=$1 aof0 rw0 df0 aofnote=""
    if [[ $pair == ACQUIRE_AOF ]]; then
        use_server aof
        cmdpair=ACQUIRE
    else
        use_server plain
    fi
    if [[ $SERVER == aof ]]; then
        flush
        aof0=$(info_field persistence aof_current_size)
        rw0=$(info_field persistence aof_rewrites)
        df0=$(info_field persistence aof_delayed_fsync)
    fi
    case $cmdpair/$variant in
    ACQUIRE/module)
        [[ $SERVER == aof ]] || flush
        bench_run "$n" "$ACQ_KEYSPACE" "$p" lock.acquire -- LOCK.ACQUIRE 'lock:__rand_int__' "$OWNER" "$TTL"
        after=$(dbsize); frac=$(pct "$after" "$RUN_CALLS") ;;
    ACQUIRE/baseline)
        [[ $SERVER == aof ]] || flush
        bench_run "$n" "$ACQ_KEYSPACE" "$p" set -- SET 'lock:__rand_int__' "$OWNER" NX PX "$TTL"
        after=$(dbsize); frac=$(pct "$after" "$RUN_CALLS") ;;
    RELEASE/module)
        populate module "$n"
        bench_run "$n" "$n" "$p" lock.release -- LOCK.RELEASE 'lock:__rand_int__' "$OWNER"
        after=$(dbsize); frac=$(pct "$((n - after))" "$RUN_CALLS") ;;
    RELEASE/baseline)
        populate script "$n"
        bench_run "$n" "$n" "$p" evalsha -- EVALSHA "$SHA_RELEASE" 1 'lock:__rand_int__' "$OWNER"
        after=$(dbsize); frac=$(pct "$((n - after))" "$RUN_CALLS") ;;
    EXTEND/module)
        populate module "$n"
        bench_run "$n" "$n" "$p" lock.extend -- LOCK.EXTEND 'lock:__rand_int__' "$OWNER" "$TTL"
        after=$(dbsize)
        ((after == n)) || die "EXTEND (module): $((n - after)) of $n locks vanished during the run"
        frac=100.0% ;;
    EXTEND/baseline)
        populate script "$n"
        bench_run "$n" "$n" "$p" evalsha -- EVALSHA "$SHA_EXTEND" 1 'lock:__rand_int__' "$OWNER" "$TTL"
        after=$(dbsize)
        ((after == n)) || die "EXTEND (script): $((n - after)) of $n keys vanished during the run"
        frac=100.0% ;;
    esac
    if [[ $SERVER == aof ]]; then
        local st bpr
        st=$(info_field persistence aof_last_write_status)
        [[ $st == ok ]] || die "AOF write failed during ACQUIRE ($variant, -P $p): aof_last_write_status $st"
        wait_aof_idle  # an automatic rewrite started by the run has finished: aof_current_size is settled
        bpr=$(awk -v a="$aof0" -v b="$(info_field persistence aof_current_size)" -v n="$RUN_CALLS" 'BEGIN{printf "%.0f", (b-a)/n}')
        AOF_BPR[$p/$variant]+="$bpr "
        AOF_REWRITES[$p/$variant]=$((${AOF_REWRITES[$p/$variant]:-0} + $(info_field persistence aof_rewrites) - rw0))
        AOF_DELAYED[$p/$variant]=$((${AOF_DELAYED[$p/$variant]:-0} + $(info_field persistence aof_delayed_fsync) - df0))
        aofnote=", AOF $bpr B/request"
    fi
    if [[ $variant == module ]]; then
        MOD_RPS[$pair/$p]+="$RUN_RPS "
        MOD_FRAC[$pair/$p]+="$frac "
    else
        BASE_RPS[$pair/$p]+="$RUN_RPS "
        BASE_FRAC[$pair/$p]+="$frac "
    fi
    local what
    case $cmdpair in
    ACQUIRE) what="new keys: $frac of requests$aofnote" ;;
    RELEASE) what="released a held lock: $frac of requests" ;;
    *) what="on a held lock: $frac of requests" ;;
    esac
    log "$(printf '%-11s -P %-2s %-8s %10s ops/s  (%s s, %s calls, %s)' "$pair" "$p" "$variant" \
        "$(fmt_rate "$RUN_RPS")" "$RUN_SECS" "$RUN_CALLS" "$what")"
}

PAIRS=(ACQUIRE RELEASE EXTEND)
PIPES=(1 16)
for pair in "${PAIRS[@]}"; do
    for p in "${PIPES[@]}"; do
        if ((p == 1)); then n=$N1; else n=$N16; fi
        for ((round = 1; round <= ROUNDS; round++)); do
            log "$pair -P $p round $round/$ROUNDS ($n requests)"
            one_run "$pair" "$p" module "$n"
            one_run "$pair" "$p" baseline "$n"
            if [[ $pair == ACQUIRE ]]; then
                if ((p == 1)); then an=$AOF_N1; else an=$AOF_N16; fi
                log "$pair -P $p round $round/$ROUNDS with AOF everysec ($an requests)"
                one_run ACQUIRE_AOF "$p" module "$an"
                one_run ACQUIRE_AOF "$p" baseline "$an"
            fi
        done
    done
done
use_server aof
flush
use_server plain
flush

# ---------------------------------------------------------------- table
target_for() { # pair pipeline
    if (($2 == 1)); then echo 1.00; elif [[ $1 == ACQUIRE ]]; then echo 0.95; else echo 2.00; fi
}
baseline_name() {
    case $1 in
    ACQUIRE) echo "SET NX PX" ;;
    RELEASE) echo "EVALSHA cmp+del" ;;
    EXTEND) echo "EVALSHA cmp+pexpire" ;;
    esac
}

printf 'Throughput, ops/s (median of %d run(s) each; ratio = module/baseline)\n' "$ROUNDS"
printf '%-8s %-4s %-20s %12s %12s %7s %8s %6s\n' pair pipe 'baseline command' module baseline ratio target result
printf '%-8s %-4s %-20s %12s %12s %7s %8s %6s\n' -------- ---- -------------------- ------------ ------------ ------- -------- ------
MISSES=0
for pair in "${PAIRS[@]}"; do
    for p in "${PIPES[@]}"; do
        # shellcheck disable=SC2086
        m=$(median ${MOD_RPS[$pair/$p]})
        # shellcheck disable=SC2086
        b=$(median ${BASE_RPS[$pair/$p]})
        ratio=$(awk -v m="$m" -v b="$b" 'BEGIN{printf "%.4f", m/b}')
        t=$(target_for "$pair" "$p")
        if awk -v r="$ratio" -v t="$t" 'BEGIN{exit !(r >= t)}'; then res=PASS; else res=MISS; MISSES=$((MISSES + 1)); fi
        printf '%-8s P%-3s %-20s %12s %12s %7s %8s %6s\n' "$pair" "$p" "$(baseline_name "$pair")" \
            "$(fmt_rate "$m")" "$(fmt_rate "$b")" "$(awk -v r="$ratio" 'BEGIN{printf "%.2f", r}')" ">=$t" "$res"
    done
done
echo
echo "Per-run ops/s (module | baseline), in run order:"
for pair in "${PAIRS[@]}"; do
    for p in "${PIPES[@]}"; do
        printf '  %-8s P%-3s module: %s| baseline: %s\n' "$pair" "$p" \
            "$(for x in ${MOD_RPS[$pair/$p]}; do printf '%s ' "$(fmt_rate "$x")"; done)" \
            "$(for x in ${BASE_RPS[$pair/$p]}; do printf '%s ' "$(fmt_rate "$x")"; done)"
    done
done
echo
echo "Notes:"
echo "  ACQUIRE: FLUSHALL before every run, keys lock:<random of $ACQ_KEYSPACE>; share of requests that created a new key:"
for p in "${PIPES[@]}"; do
    printf '    P%-3s module: %s| baseline: %s\n' "$p" "${MOD_FRAC[ACQUIRE/$p]}" "${BASE_FRAC[ACQUIRE/$p]}"
done
echo "  RELEASE: R = request count keys pre-populated (module: LOCK.ACQUIRE, baseline: SET NX PX), -r R;"
echo "    expected share of requests that release a held lock ~ 1-1/e = 63.2% (the rest find it already released)."
echo "    measured share:"
for p in "${PIPES[@]}"; do
    printf '    P%-3s module: %s| baseline: %s\n' "$p" "${MOD_FRAC[RELEASE/$p]}" "${BASE_FRAC[RELEASE/$p]}"
done
echo "  EXTEND: same population as RELEASE; every request hits a held lock (DBSIZE checked unchanged after each run)."
echo "  Error replies (INFO stats total_error_replies) and executed command counts (INFO commandstats) were checked after every run."
echo "  Targets: every pair >=1.00x at -P 1; at -P 16 ACQUIRE >=0.95x, RELEASE and EXTEND >=2.00x. PASS/MISS uses the unrounded ratio."
echo

# ---------------------------------------------------------------- persistence table
printf 'ACQUIRE vs SET NX PX, without and with AOF (ops/s, median of %d run(s) each; ratio = module/baseline)\n' "$ROUNDS"
printf '%-15s %-4s %9s %12s %12s %7s %16s\n' persistence pipe requests module baseline ratio 'AOF B/req m|b'
printf '%-15s %-4s %9s %12s %12s %7s %16s\n' --------------- ---- --------- ------------ ------------ ------- ----------------
for p in "${PIPES[@]}"; do
    for key in ACQUIRE ACQUIRE_AOF; do
        # shellcheck disable=SC2086
        m=$(median ${MOD_RPS[$key/$p]})
        # shellcheck disable=SC2086
        b=$(median ${BASE_RPS[$key/$p]})
        if [[ $key == ACQUIRE ]]; then
            label="no persistence"; bytes=-
            if ((p == 1)); then n=$N1; else n=$N16; fi
        else
            label="AOF everysec"
            if ((p == 1)); then n=$AOF_N1; else n=$AOF_N16; fi
            # shellcheck disable=SC2086
            bytes="$(median ${AOF_BPR[$p/module]}) | $(median ${AOF_BPR[$p/baseline]})"
        fi
        printf '%-15s P%-3s %9s %12s %12s %7s %16s\n' "$label" "$p" "$n" "$(fmt_rate "$m")" "$(fmt_rate "$b")" \
            "$(awk -v m="$m" -v b="$b" 'BEGIN{printf "%.2f", m/b}')" "$bytes"
    done
done
echo
echo "Per-run ops/s with AOF everysec (module | baseline), in run order:"
for p in "${PIPES[@]}"; do
    printf '  ACQUIRE  P%-3s module: %s| baseline: %s\n' "$p" \
        "$(for x in ${MOD_RPS[ACQUIRE_AOF/$p]}; do printf '%s ' "$(fmt_rate "$x")"; done)" \
        "$(for x in ${BASE_RPS[ACQUIRE_AOF/$p]}; do printf '%s ' "$(fmt_rate "$x")"; done)"
done
echo
echo "Notes:"
echo "  AOF everysec: a second redis-server with the module, --appendonly yes --appendfsync everysec (redlock.conf's"
echo "    persistence; RDB snapshots off, like the server without persistence), AOF on ${AOF_FS:-unknown filesystem}."
echo "    Its runs interleave with the others (each round: module, baseline without AOF, then module, baseline with AOF)."
echo "    FLUSHALL and BGREWRITEAOF before every run, so each starts from an empty AOF."
echo "  AOF B/req: growth of aof_current_size per request (median): what each grant costs the AOF."
for p in "${PIPES[@]}"; do
    printf '  P%-3s automatic AOF rewrites during the runs: module %s, baseline %s; delayed fsyncs (aof_delayed_fsync): module %s, baseline %s\n' \
        "$p" "${AOF_REWRITES[$p/module]}" "${AOF_REWRITES[$p/baseline]}" "${AOF_DELAYED[$p/module]}" "${AOF_DELAYED[$p/baseline]}"
done
echo

# ---------------------------------------------------------------- memory
log "memory usage"
flush
MEMKEY=lock:000000000000
expect "LOCK.ACQUIRE for MEMORY USAGE" '^\(integer\) [0-9]+$' "$(rcli --no-raw LOCK.ACQUIRE "$MEMKEY" "$OWNER" "$TTL")"
MEM_LOCK=$(rcli MEMORY USAGE "$MEMKEY" SAMPLES 0 | tr -d '\r')
rcli DEL "$MEMKEY" >/dev/null
expect "SET for MEMORY USAGE" '^OK$' "$(rcli SET "$MEMKEY" "$OWNER" PX "$TTL" | tr -d '\r')"
MEM_STR=$(rcli MEMORY USAGE "$MEMKEY" SAMPLES 0 | tr -d '\r')
expect "MEMORY USAGE (lock)" '^[0-9]+$' "$MEM_LOCK"
expect "MEMORY USAGE (string)" '^[0-9]+$' "$MEM_STR"
flush
echo "Memory (MEMORY USAGE $MEMKEY, owner/value of ${#OWNER} bytes, ttl ${TTL} ms):"
printf '  %-44s %6s bytes\n' "lock (LOCK.ACQUIRE)" "$MEM_LOCK"
printf '  %-44s %6s bytes\n' "plain string (SET k <owner> PX $TTL)" "$MEM_STR"
printf '  %-44s %+6d bytes\n' "difference (lock - string)" "$((MEM_LOCK - MEM_STR))"
echo "  (a module value's size comes from the module's mem_usage callback; expiry entries are not counted by MEMORY USAGE)"

if ((MISSES > 0)); then
    log "done: $MISSES target(s) missed (benchmark result, not a failure)"
else
    log "done: all targets met"
fi
exit 0
