#!/usr/bin/env bash
# benches/fence.sh -- throughput of the store-side fence (issue 58) against a
# plain write and against the Lua script users write today, measured with
# redis-benchmark on a private redis-server.
#
#   bash benches/fence.sh
#
# Commands (each run without pipelining, -P 1, and with -P 16; 50 clients):
#   SET     SET fence:<rand> <value>                              the plain write
#   GUARD   LOCK.GUARD fence:lock <owner> <token> SET fence:<rand> <value>
#   FENCED  LOCK.FENCED fence:register <token> SET fence:<rand> <value>
#   LUA     EVALSHA <fenced write> 2 fence:token fence:<rand> <token> <value>
#             (the script users write today: compare the token with the
#              highest one stored in a key, refuse an older one, store a
#              newer one, then SET: what LOCK.FENCED does)
#   GET     GET fence:token                                       the plain read
#   CHECK   LOCK.CHECK fence:lock <owner> <token>
#   FLOOR   FLOOR.CALL SET fence:<rand> <value>
#   BARE    FLOOR.CALLBARE SET fence:<rand> <value>
#   AFTER3  FLOOR.AFTER3 fence:lock <owner> <token> SET fence:<rand> <value>
#   AFTER2  FLOOR.AFTER2 fence:register <token> SET fence:<rand> <value>
#   READ    FLOOR.READ fence:lock <owner> <token>
#             (benches/fence_floor.c, built with cc into the temporary
#              directory and loaded beside the module: the same SET through
#              RM_Call with no check at all, with LOCK.GUARD's flags vCSME!0
#              and with v! alone; the same again after the arguments
#              LOCK.GUARD and LOCK.FENCED take before their command, read and
#              ignored; and a module command that only opens LOCK.CHECK's
#              key and answers 1, given LOCK.CHECK's arguments: what RM_Call,
#              the longer request and a module command cost, out of the
#              module's reach; skipped without cc or with BENCH_FLOOR=0)
# Ratios: GUARD, FENCED, LUA, FLOOR, BARE, AFTER3 and AFTER2 against SET;
# CHECK and READ against GET; GUARD against AFTER3 and FENCED against
# AFTER2 (what the fence adds to the same request with no check), CHECK
# against READ (what the check adds to a module's read of the same
# request).
# Two tables: ops/s, and the server's CPU per request (its main thread's
# time on a CPU during the run, /proc/PID/schedstat, divided by the
# requests), which other work on a shared machine moves far less than
# ops/s; its ratio is baseline CPU / command CPU, the ops/s ratio of a
# server bound by its CPU.
# Every write goes to the same key space (fence:<12 digits>, -r
# BENCH_KEYSPACE, filled before the first run so that every run
# overwrites) with the same value; besides, GUARD, FENCED and LUA each read
# one hot key (the lock, the register, the token key), as GET, CHECK and
# READ do. The lock is taken once with a one-hour lease and held for the
# whole run; its token is the token of every fenced command.
#
# Environment:
#   REDISLOCK_MODULE  module to load (default: <repo>/target/release/libredislock.so)
#   BENCH_N1          requests per run at -P 1  (default 100000)
#   BENCH_N16         requests per run at -P 16 (default 500000)
#   BENCH_KEYSPACE    keys the writes go to (default 100000; 1: one hot key)
#   BENCH_ROUNDS      rounds, the commands interleaved in each (default 5)
#   BENCH_TIMEOUT     seconds before one redis-benchmark run is considered hung (default 600)
#   BENCH_FLOOR       0: skip FLOOR, BARE, AFTER3, AFTER2 and READ (default 1: run them when cc is found)
#
# Progress goes to stderr, the header and the result tables to stdout.
# Exit status: 0 when every run completed (whether targets were met or missed),
# non-zero on a real failure (server not starting, error replies, a refused
# fence, hung run, ...).

set -Eeuo pipefail

# ---------------------------------------------------------------- settings
SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd -- "$SCRIPT_DIR/.." && pwd)
MODULE=${REDISLOCK_MODULE:-$REPO_ROOT/target/release/libredislock.so}
N1=${BENCH_N1:-100000}
N16=${BENCH_N16:-500000}
KEYSPACE=${BENCH_KEYSPACE:-100000}
ROUNDS=${BENCH_ROUNDS:-5}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-600}
FLOOR=${BENCH_FLOOR:-1}

CLIENTS=50
OWNER=bench-owner-00000001      # 20 bytes
VALUE=fenced-value-0123456789abcdef-xy    # 32 bytes, every write
LEASE=3600000                   # one hour (redislock.max-ttl by default): longer than the run
LOCK=fence:lock
REGISTER=fence:register
TOKEN_KEY=fence:token
LUA_FENCED="local t = tonumber(ARGV[1])
local h = tonumber(redis.call('get', KEYS[1]) or '0')
if t < h then return redis.error_reply('FENCED older token') end
if t > h then redis.call('set', KEYS[1], ARGV[1]) end
return redis.call('set', KEYS[2], ARGV[2])"

TMPD=""
BENCH_PID=""
SERVER_PID=""
PORT=""
LOG=""

log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() {
    printf '\nbenches/fence.sh: FAILED: %s\n' "$*" >&2
    exit 1
}

# ---------------------------------------------------------------- cleanup
stop_pid() { # pid of the redis-server this script started: SIGTERM, SIGKILL after 10 s
    local pid=$1 i
    [[ -n $pid ]] && kill -0 "$pid" 2>/dev/null || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        printf 'benches/fence.sh: redis-server %s ignored SIGTERM, sending SIGKILL\n' "$pid" >&2
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
    stop_pid "$SERVER_PID"
    if ((rc != 0 && rc != 130 && rc != 143)) && [[ -n $LOG && -s $LOG ]]; then
        printf -- '--- last lines of the redis-server log (%s) ---\n' "$LOG" >&2
        tail -n 25 "$LOG" >&2 || true
        printf -- '---\n' >&2
    fi
    if [[ -n $TMPD && -d $TMPD ]]; then
        rm -rf -- "$TMPD"
    fi
    exit "$rc"
}
trap cleanup EXIT
trap 'printf "\nbenches/fence.sh: interrupted\n" >&2; exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
trap 'printf "benches/fence.sh: command failed (line %s): %s\n" "$LINENO" "$BASH_COMMAND" >&2' ERR

# ---------------------------------------------------------------- checks
for tool in redis-server redis-cli redis-benchmark awk timeout; do
    command -v "$tool" >/dev/null 2>&1 || die "required tool '$tool' not found on PATH"
done
for v in N1 N16 KEYSPACE ROUNDS BENCH_TIMEOUT; do
    [[ ${!v} =~ ^[1-9][0-9]*$ ]] || die "$v must be a positive integer (got '${!v}')"
done
((KEYSPACE <= 100000000)) || die "BENCH_KEYSPACE must be at most 10^8"
((${#VALUE} == 32)) || die "internal: the value must be 32 bytes"

[[ $MODULE == /* ]] || MODULE=$PWD/$MODULE
if [[ ! -f $MODULE ]]; then
    die "module not found: $MODULE
  Build it with 'cargo build --release -p redislock' in $REPO_ROOT, or point REDISLOCK_MODULE at the .so."
fi
[[ -r $MODULE ]] || die "module not readable: $MODULE"

TMPD=$(mktemp -d "${TMPDIR:-/tmp}/redislock-bench-fence.XXXXXX")

FLOOR_SO=""
if [[ $FLOOR != 0 ]]; then
    if command -v cc >/dev/null 2>&1; then
        FLOOR_SO=$TMPD/fence_floor.so
        cc -O2 -fPIC -shared -o "$FLOOR_SO" "$SCRIPT_DIR/fence_floor.c" || die "could not build benches/fence_floor.c"
    else
        log "no cc on PATH: FLOOR, BARE, AFTER3, AFTER2 and READ (RM_Call and a module's read without a check) are skipped"
    fi
fi

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

start_server() { # a redis-server with the module, no persistence, in $TMPD
    local attempt i pid_seen
    LOG=$TMPD/redis.log
    for attempt in 1 2 3 4 5; do
        PORT=$(free_port) || die "could not find a free local port"
        : >"$LOG"
        redis-server --port "$PORT" --bind 127.0.0.1 --protected-mode yes \
            --save "" --appendonly no --daemonize no \
            --dir "$TMPD" --logfile "$LOG" \
            --loadmodule "$MODULE" ${FLOOR_SO:+--loadmodule "$FLOOR_SO"} </dev/null >/dev/null 2>&1 &
        SERVER_PID=$!
        for ((i = 0; i < 150; i++)); do
            kill -0 "$SERVER_PID" 2>/dev/null || break
            # Make sure the server answering is ours, not someone else's on a clashing port.
            pid_seen=$(rcli INFO server 2>/dev/null | tr -d '\r' | awk -F: '$1=="process_id"{print $2}') || true
            [[ $pid_seen == "$SERVER_PID" ]] && return 0
            sleep 0.1
        done
        if kill -0 "$SERVER_PID" 2>/dev/null; then
            die "redis-server (pid $SERVER_PID) did not answer on 127.0.0.1:$PORT within 15 s"
        fi
        wait "$SERVER_PID" 2>/dev/null || true
        SERVER_PID=""
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
now() { date +%s.%N; }
server_cpu_ns() { # the server's main thread's time on a CPU so far, ns
    local t
    read -r t _ <"/proc/$SERVER_PID/schedstat" || die "cannot read /proc/$SERVER_PID/schedstat"
    echo "$t"
}
fmt_rate() { awk -v x="$1" 'BEGIN{printf "%.0f", x}'; }
expect() { # description, expected (regex), actual
    [[ $3 =~ $2 ]] || die "sanity check failed: $1: expected /$2/, got '$3'"
}

# fill: fence:000000000000 .. fence:<KEYSPACE-1>, the names redis-benchmark
# generates for -r KEYSPACE, so that every measured write overwrites a key.
fill() {
    local out
    awk -v n="$KEYSPACE" -v value="$VALUE" 'BEGIN {
        pre = "*3\r\n$3\r\nSET\r\n$18\r\n"; post = "\r\n$" length(value) "\r\n" value "\r\n"
        for (i = 0; i < n; i++) printf "%sfence:%012d%s", pre, i, post
    }' | rcli --pipe >"$TMPD/pipe.out" 2>&1 || { cat "$TMPD/pipe.out" >&2; die "redis-cli --pipe failed while filling the key space"; }
    out=$(tr -d '\r' <"$TMPD/pipe.out" | grep -E '^errors: ' | tail -n 1)
    [[ $out == "errors: 0, replies: $KEYSPACE" ]] || { cat "$TMPD/pipe.out" >&2; die "filling $KEYSPACE keys reported '$out'"; }
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

# bench_run N PIPELINE CMDSTAT_NAME INNER -- command args...
# Runs redis-benchmark; INNER is the command each request must have run
# inside (set for the writes, - for none): its calls must grow by N too, so
# a fence that refused (or a script that skipped the write) is caught.
# Sets RUN_RPS, RUN_SECS, RUN_CPU_US (server CPU per request, µs). Dies on
# error replies, short runs, bad output.
bench_run() {
    local n=$1 p=$2 cmdname=$3 inner=$4
    shift 5
    local errs0 errs1 calls0 calls1 inner0 inner1 rc=0 t0 t1 rps cpu0 cpu1
    errs0=$(total_errors)
    calls0=$(cmd_calls "$cmdname")
    inner0=$([[ $inner == - ]] && echo 0 || cmd_calls "$inner")
    t0=$(now)
    cpu0=$(server_cpu_ns)
    timeout "$BENCH_TIMEOUT" redis-benchmark -h 127.0.0.1 -p "$PORT" -c "$CLIENTS" -n "$n" -r "$KEYSPACE" -P "$p" --csv "$@" \
        >"$TMPD/bench.out" 2>"$TMPD/bench.err" </dev/null &
    BENCH_PID=$!
    wait "$BENCH_PID" || rc=$?
    BENCH_PID=""
    kill -0 "$SERVER_PID" 2>/dev/null || die "redis-server died during: $*"
    cpu1=$(server_cpu_ns)
    t1=$(now)
    errs1=$(total_errors)
    calls1=$(cmd_calls "$cmdname")
    inner1=$([[ $inner == - ]] && echo "$n" || cmd_calls "$inner")
    if ((errs1 > errs0)); then
        {
            printf '\n!!! %d ERROR REPLIES during: %s (-P %s)\n' "$((errs1 - errs0))" "$*" "$p"
            rcli INFO errorstats | tr -d '\r'
            head -c 2000 "$TMPD/bench.err"
        } >&2
        die "the server replied with errors during '$1' (-P $p); the throughput would be meaningless"
    fi
    if ((rc == 124)); then die "redis-benchmark timed out after ${BENCH_TIMEOUT}s: $*"; fi
    if ((rc != 0)); then
        cat "$TMPD/bench.out" "$TMPD/bench.err" >&2
        die "redis-benchmark exited with status $rc: $*"
    fi
    if ((calls1 - calls0 < n)); then
        cat "$TMPD/bench.out" "$TMPD/bench.err" >&2
        die "only $((calls1 - calls0)) of $n '$cmdname' commands reached the server: $*"
    fi
    if ((inner1 - inner0 < n)); then
        die "'$cmdname' ran its '$inner' only $((inner1 - inner0)) times in $n requests: $*"
    fi
    rps=$(parse_rps "$TMPD/bench.out")
    if [[ -z $rps ]]; then
        cat "$TMPD/bench.out" "$TMPD/bench.err" >&2
        die "could not parse ops/s from redis-benchmark --csv output: $*"
    fi
    RUN_RPS=$rps
    RUN_SECS=$(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}')
    RUN_CPU_US=$(awk -v a="$cpu0" -v b="$cpu1" -v n="$n" 'BEGIN{printf "%.4f", (b-a)/n/1000}')
}

median() { # numbers...
    printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END{ if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2 }'
}

# ---------------------------------------------------------------- start
log "starting redis-server with $MODULE, no persistence"
start_server
log "redis-server pid $SERVER_PID on 127.0.0.1:$PORT (dir $TMPD)"
SERVER_VERSION=$(rcli INFO server | tr -d '\r' | awk -F: '$1=="redis_version"{print $2}')
CPU_MODEL=$(awk -F': *' '/^model name/{print $2; exit}' /proc/cpuinfo 2>/dev/null || true)

# ---------------------------------------------------------------- setup and sanity
log "taking the lock, filling $KEYSPACE keys, sanity checks"
TOKEN=$(rcli LOCK.ACQUIRE "$LOCK" "$OWNER" "$LEASE" | tr -d '\r')
expect "LOCK.ACQUIRE of the bench lock" '^[1-9][0-9]*$' "$TOKEN"
SHA_FENCED=$(rcli SCRIPT LOAD "$LUA_FENCED" | tr -d '\r')
expect "SCRIPT LOAD (fenced write)" '^[0-9a-f]{40}$' "$SHA_FENCED"
fill
e0=$(total_errors)
K=fence:000000000000
expect "LOCK.CHECK by the holder" '^\(integer\) 1$' "$(rcli --no-raw LOCK.CHECK "$LOCK" "$OWNER" "$TOKEN")"
expect "LOCK.GUARD SET by the holder" '^OK$' "$(rcli LOCK.GUARD "$LOCK" "$OWNER" "$TOKEN" SET "$K" "$VALUE" | tr -d '\r')"
expect "LOCK.FENCED SET under the token" '^OK$' "$(rcli LOCK.FENCED "$REGISTER" "$TOKEN" SET "$K" "$VALUE" | tr -d '\r')"
expect "LOCK.FENCEINFO after it" "^\\(integer\\) $TOKEN\$" "$(rcli --no-raw LOCK.FENCEINFO "$REGISTER")"
expect "EVALSHA fenced write, first token" '^OK$' "$(rcli EVALSHA "$SHA_FENCED" 2 "$TOKEN_KEY" "$K" "$TOKEN" "$VALUE" | tr -d '\r')"
expect "EVALSHA fenced write, same token" '^OK$' "$(rcli EVALSHA "$SHA_FENCED" 2 "$TOKEN_KEY" "$K" "$TOKEN" "$VALUE" | tr -d '\r')"
expect "GET of the token key" "^$TOKEN\$" "$(rcli GET "$TOKEN_KEY" | tr -d '\r')"
e1=$(total_errors)
((e1 == e0)) || die "sanity checks produced $((e1 - e0)) error replies"
# The fences must refuse what they are there to refuse (each refusal is one
# error reply; the error count is read again before the first run).
OLDER=$((TOKEN - 1))
expect "LOCK.CHECK under another token" '^FENCED' "$(rcli LOCK.CHECK "$LOCK" "$OWNER" "$OLDER" 2>&1 | tr -d '\r')"
expect "LOCK.GUARD under another token" '^FENCED' "$(rcli LOCK.GUARD "$LOCK" "$OWNER" "$OLDER" SET "$K" x 2>&1 | tr -d '\r')"
expect "LOCK.FENCED under an older token" '^FENCED older token' "$(rcli LOCK.FENCED "$REGISTER" "$OLDER" SET "$K" x 2>&1 | tr -d '\r')"
expect "EVALSHA fenced write, older token" 'FENCED older token' "$(rcli EVALSHA "$SHA_FENCED" 2 "$TOKEN_KEY" "$K" "$OLDER" x 2>&1 | tr -d '\r')"
expect "value after the refused writes" "^$VALUE\$" "$(rcli GET "$K" | tr -d '\r')"
if [[ -n $FLOOR_SO ]]; then
    expect "FLOOR.CALL SET" '^OK$' "$(rcli FLOOR.CALL SET "$K" "$VALUE" | tr -d '\r')"
    expect "FLOOR.CALLBARE SET" '^OK$' "$(rcli FLOOR.CALLBARE SET "$K" "$VALUE" | tr -d '\r')"
    expect "FLOOR.AFTER3 SET" '^OK$' "$(rcli FLOOR.AFTER3 "$LOCK" "$OWNER" "$TOKEN" SET "$K" "$VALUE" | tr -d '\r')"
    expect "FLOOR.AFTER2 SET" '^OK$' "$(rcli FLOOR.AFTER2 "$REGISTER" "$TOKEN" SET "$K" "$VALUE" | tr -d '\r')"
    expect "FLOOR.READ" '^\(integer\) 1$' "$(rcli --no-raw FLOOR.READ "$LOCK" "$OWNER" "$TOKEN")"
fi

# ---------------------------------------------------------------- header
LOAD1=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo 0)
if awk -v l="$LOAD1" 'BEGIN{exit !(l > 1.0)}'; then
    log "WARNING: 1-minute load average is $LOAD1 before the benchmark; other work on this machine will distort the numbers"
fi
cat <<EOF
== redislock fence benchmark (issue 58) ==
date:         $(date -u '+%Y-%m-%d %H:%M:%S UTC')
redis-server: $SERVER_VERSION ($(redis-server --version | tr -d '\r'))
bench tool:   $(redis-benchmark --version 2>&1 | head -n 1)
CPUs:         $(nproc) (${CPU_MODEL:-unknown model}), load average $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo n/a)
module:       $MODULE ($(stat -c '%s bytes, built %y' "$MODULE" 2>/dev/null | cut -d. -f1))
setup:        $CLIENTS clients, requests per run: $N1 at -P 1, $N16 at -P 16; $ROUNDS round(s), the commands
              interleaved in each; median ops/s; no persistence
floor:        ${FLOOR_SO:-none (FLOOR, BARE, AFTER3, AFTER2 and READ skipped)}
writes:       SET to fence:<one of $KEYSPACE keys> (all present), a ${#VALUE}-byte value; lock token $TOKEN

EOF

# ---------------------------------------------------------------- runs
VARIANTS=(SET GUARD FENCED LUA GET CHECK)
[[ -z $FLOOR_SO ]] || VARIANTS+=(FLOOR BARE AFTER3 AFTER2 READ)
PIPES=(1 16)
declare -A RPS=() CPU=()

one_run() { # variant pipeline n
    local v=$1 p=$2 n=$3
    case $v in
    SET) bench_run "$n" "$p" set - -- SET 'fence:__rand_int__' "$VALUE" ;;
    GUARD) bench_run "$n" "$p" lock.guard set -- LOCK.GUARD "$LOCK" "$OWNER" "$TOKEN" SET 'fence:__rand_int__' "$VALUE" ;;
    FENCED) bench_run "$n" "$p" lock.fenced set -- LOCK.FENCED "$REGISTER" "$TOKEN" SET 'fence:__rand_int__' "$VALUE" ;;
    LUA) bench_run "$n" "$p" evalsha set -- EVALSHA "$SHA_FENCED" 2 "$TOKEN_KEY" 'fence:__rand_int__' "$TOKEN" "$VALUE" ;;
    GET) bench_run "$n" "$p" get - -- GET "$TOKEN_KEY" ;;
    CHECK) bench_run "$n" "$p" lock.check - -- LOCK.CHECK "$LOCK" "$OWNER" "$TOKEN" ;;
    FLOOR) bench_run "$n" "$p" floor.call set -- FLOOR.CALL SET 'fence:__rand_int__' "$VALUE" ;;
    BARE) bench_run "$n" "$p" floor.callbare set -- FLOOR.CALLBARE SET 'fence:__rand_int__' "$VALUE" ;;
    AFTER3) bench_run "$n" "$p" floor.after3 set -- FLOOR.AFTER3 "$LOCK" "$OWNER" "$TOKEN" SET 'fence:__rand_int__' "$VALUE" ;;
    AFTER2) bench_run "$n" "$p" floor.after2 set -- FLOOR.AFTER2 "$REGISTER" "$TOKEN" SET 'fence:__rand_int__' "$VALUE" ;;
    READ) bench_run "$n" "$p" floor.read - -- FLOOR.READ "$LOCK" "$OWNER" "$TOKEN" ;;
    esac
    RPS[$v/$p]+="$RUN_RPS "
    CPU[$v/$p]+="$RUN_CPU_US "
    log "$(printf '%-7s -P %-2s %10s ops/s  %7.3f µs server CPU/request  (%s s)' "$v" "$p" "$(fmt_rate "$RUN_RPS")" "$RUN_CPU_US" "$RUN_SECS")"
}

for p in "${PIPES[@]}"; do
    if ((p == 1)); then n=$N1; else n=$N16; fi
    for ((round = 1; round <= ROUNDS; round++)); do
        log "-P $p round $round/$ROUNDS ($n requests per command)"
        for v in "${VARIANTS[@]}"; do one_run "$v" "$p" "$n"; done
    done
done

# The lock was held, and the register kept its token, the whole time.
expect "LOCK.CHECK after the runs" '^\(integer\) 1$' "$(rcli --no-raw LOCK.CHECK "$LOCK" "$OWNER" "$TOKEN")"
expect "LOCK.FENCEINFO after the runs" "^\\(integer\\) $TOKEN\$" "$(rcli --no-raw LOCK.FENCEINFO "$REGISTER")"
expect "the token key after the runs" "^$TOKEN\$" "$(rcli GET "$TOKEN_KEY" | tr -d '\r')"

# ---------------------------------------------------------------- tables
baseline_of() { # variant [baseline]: the baseline given, or the variant's own
    if [[ -n ${2:-} ]]; then echo "$2"; else case $1 in CHECK | READ) echo GET ;; *) echo SET ;; esac; fi
}
target_for() { # variant pipeline -> target ratio, or - where the issue sets none
    if (($2 != 16)); then echo -; else
        case $1 in GUARD | FENCED) echo 0.75 ;; CHECK) echo 0.90 ;; *) echo - ;; esac
    fi
}
# round_ratios variant pipeline [baseline]: the ratio of each round (against its own baseline run)
round_ratios() {
    local -a a b
    local i
    read -r -a a <<<"${RPS[$1/$2]}"
    read -r -a b <<<"${RPS[$(baseline_of "$1" "${3:-}")/$2]}"
    for i in "${!a[@]}"; do awk -v m="${a[$i]}" -v b="${b[$i]}" 'BEGIN{printf "%.2f ", m/b}'; done
}
# cpu_round_ratios variant pipeline [baseline]: baseline CPU / command CPU in each round
cpu_round_ratios() {
    local -a a b
    local i
    read -r -a a <<<"${CPU[$1/$2]}"
    read -r -a b <<<"${CPU[$(baseline_of "$1" "${3:-}")/$2]}"
    for i in "${!a[@]}"; do awk -v m="${a[$i]}" -v b="${b[$i]}" 'BEGIN{printf "%.2f ", (m > 0 ? b/m : 0)}'; done
}
# round_median variant pipeline [baseline]: the median of the rounds' ratios
round_median() {
    # shellcheck disable=SC2046
    awk -v r="$(median $(round_ratios "$@"))" 'BEGIN{printf "%.2f", r}'
}

printf 'Throughput, ops/s (median of %d run(s) each; ratio = median/median of the baseline;\n' "$ROUNDS"
printf '%s\n' "rounds: the median of the rounds' own ratios, each from runs seconds apart)"
printf '%-4s %-8s %-8s %12s %12s %6s %6s %7s %6s  %s\n' pipe command baseline ops/s baseline ratio rounds target result 'per-round ratios'
printf '%-4s %-8s %-8s %12s %12s %6s %6s %7s %6s  %s\n' ---- -------- -------- ------------ ------------ ------ ------ ------- ------ ----------------
MISSES=0
ROWS=("GUARD" "FENCED" "LUA" "CHECK")
[[ -z $FLOOR_SO ]] || ROWS+=("FLOOR" "BARE" "AFTER3" "AFTER2" "READ" "GUARD AFTER3" "FENCED AFTER2" "CHECK READ")
for p in "${PIPES[@]}"; do
    for row in "${ROWS[@]}"; do
        read -r v given <<<"$row"
        base=$(baseline_of "$v" "$given")
        # shellcheck disable=SC2086
        m=$(median ${RPS[$v/$p]})
        # shellcheck disable=SC2086
        b=$(median ${RPS[$base/$p]})
        ratio=$(awk -v m="$m" -v b="$b" 'BEGIN{printf "%.4f", m/b}')
        t=-
        [[ -n $given ]] || t=$(target_for "$v" "$p")
        if [[ $t == - ]]; then
            res=-
        elif awk -v r="$ratio" -v t="$t" 'BEGIN{exit !(r >= t)}'; then
            res=PASS
        else
            res=MISS
            MISSES=$((MISSES + 1))
        fi
        printf 'P%-3s %-8s %-8s %12s %12s %6s %6s %7s %6s  %s\n' "$p" "$v" "$base" "$(fmt_rate "$m")" "$(fmt_rate "$b")" \
            "$(awk -v r="$ratio" 'BEGIN{printf "%.2f", r}')" "$(round_median "$v" "$p" "$given")" "$([[ $t == - ]] && echo - || echo ">=$t")" "$res" "$(round_ratios "$v" "$p" "$given")"
    done
done
echo
echo "Per-run ops/s, in run order:"
for p in "${PIPES[@]}"; do
    for v in "${VARIANTS[@]}"; do
        # shellcheck disable=SC2086
        printf '  P%-3s %-7s %s\n' "$p" "$v" "$(for x in ${RPS[$v/$p]}; do printf '%s ' "$(fmt_rate "$x")"; done)"
    done
done
echo
printf 'Server CPU per request, µs (main thread, /proc/PID/schedstat; median of %d run(s) each;\n' "$ROUNDS"
printf '%s\n' "ratio = baseline CPU / command CPU, as ops/s would be on a server bound by its own CPU)"
printf '%-4s %-8s %-8s %9s %9s %6s %6s %7s %6s  %s\n' pipe command baseline 'µs/req' baseline ratio rounds target result 'per-round ratios'
printf '%-4s %-8s %-8s %9s %9s %6s %6s %7s %6s  %s\n' ---- -------- -------- --------- --------- ------ ------ ------- ------ ----------------
for p in "${PIPES[@]}"; do
    for row in "${ROWS[@]}"; do
        read -r v given <<<"$row"
        base=$(baseline_of "$v" "$given")
        # shellcheck disable=SC2086
        m=$(median ${CPU[$v/$p]})
        # shellcheck disable=SC2086
        b=$(median ${CPU[$base/$p]})
        ratio=$(awk -v m="$m" -v b="$b" 'BEGIN{printf "%.4f", (m > 0 ? b/m : 0)}')
        t=-
        [[ -n $given ]] || t=$(target_for "$v" "$p")
        if [[ $t == - ]]; then
            res=-
        elif awk -v r="$ratio" -v t="$t" 'BEGIN{exit !(r >= t)}'; then
            res=PASS
        else
            res=MISS
        fi
        rr=$(cpu_round_ratios "$v" "$p" "$given")
        # shellcheck disable=SC2086
        printf 'P%-3s %-8s %-8s %9.3f %9.3f %6s %6s %7s %6s  %s\n' "$p" "$v" "$base" "$m" "$b" \
            "$(awk -v r="$ratio" 'BEGIN{printf "%.2f", r}')" "$(awk -v r="$(median $rr)" 'BEGIN{printf "%.2f", r}')" \
            "$([[ $t == - ]] && echo - || echo ">=$t")" "$res" "$rr"
    done
done
echo
echo "Per-run server CPU per request (µs), in run order:"
for p in "${PIPES[@]}"; do
    for v in "${VARIANTS[@]}"; do
        printf '  P%-3s %-7s %s\n' "$p" "$v" "${CPU[$v/$p]}"
    done
done
echo
echo "Notes:"
echo "  GUARD: LOCK.GUARD $LOCK <owner> <token> SET fence:<rand> <value>, the lock held all along (one-hour lease)."
echo "  FENCED: LOCK.FENCED $REGISTER <token> SET fence:<rand> <value>, the register at the same token all along."
echo "  LUA: EVALSHA of the script below, 2 keys ($TOKEN_KEY, fence:<rand>), args <token> <value>:"
printf '%s\n' "$LUA_FENCED" | sed 's/^/        /'
echo "  CHECK: LOCK.CHECK $LOCK <owner> <token> against GET $TOKEN_KEY (one hot key each)."
if [[ -n $FLOOR_SO ]]; then
    echo "  FLOOR, BARE: the same SET through RM_Call from a module command that checks nothing (benches/fence_floor.c),"
    echo "    with LOCK.GUARD's flags vCSME!0 (FLOOR) and with v! alone (BARE): FLOOR/SET is as far as a command running"
    echo "    SET through RM_Call can go on this server."
    echo "  AFTER3, AFTER2: FLOOR after LOCK.GUARD's (lock, owner, token) and LOCK.FENCED's (register, token) arguments,"
    echo "    ignored: AFTER3/SET and AFTER2/SET are as far as those requests can go with no check at all;"
    echo "    GUARD/AFTER3 and FENCED/AFTER2 are what the fence itself costs."
    echo "  READ: FLOOR.READ $LOCK <owner> <token>, a module command that opens the lock's key and answers 1: READ/GET"
    echo "    is as far as a module command given LOCK.CHECK's arguments can go; CHECK/READ is what the check costs."
fi
echo "  Every write ran its SET once per request (INFO commandstats); error replies (INFO stats) were"
echo "  checked after every run: a refused fence fails the benchmark."
echo "  Targets (issue 58), at -P 16: GUARD and FENCED >=0.75x SET, CHECK >=0.90x GET; PASS/MISS uses the unrounded ratio"
echo "  of medians (MISS is counted from the ops/s table only)."
echo "  Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo n/a)"

if ((MISSES > 0)); then
    log "done: $MISSES target(s) missed (benchmark result, not a failure)"
else
    log "done: all targets met"
fi
exit 0
