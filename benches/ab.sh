#!/usr/bin/env bash
# benches/ab.sh -- the module against an earlier build of itself, interleaved:
# two private redis-servers, one loading each .so, and the same
# redis-benchmark runs against each in turn, round after round, so that a
# noisy machine weighs on both alike. Prints the median requests/s of each
# command on each build and their ratio (new / old).
#
#   bash benches/ab.sh OLD.so [NEW.so]     (NEW defaults to target/release/libredislock.so)
#
# Environment: AB_ROUNDS (default 5), AB_N (requests per run, default 200000),
# AB_PIPELINE (default 16), AB_KEYS (random key space, default 100000).
# What a refactoring that changes no behaviour should show: ratios near 1.00
# (within the spread the rounds print).

set -Eeuo pipefail
SCRIPT_DIR=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd -- "$SCRIPT_DIR/.." && pwd)
OLD=${1:?usage: benches/ab.sh OLD.so [NEW.so]}
NEW=${2:-$REPO_ROOT/target/release/libredislock.so}
ROUNDS=${AB_ROUNDS:-5}
N=${AB_N:-200000}
P=${AB_PIPELINE:-16}
KEYS=${AB_KEYS:-100000}

for so in "$OLD" "$NEW"; do
  [ -f "$so" ] || { echo "ab: no module at $so" >&2; exit 2; }
done
command -v redis-benchmark >/dev/null || { echo "ab: redis-benchmark not found (apt install redis-tools)" >&2; exit 2; }

TMP=$(mktemp -d)
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$TMP"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# start NAME SO: a server loading SO, its port left in PORT. Not called
# in a subshell ($(...)), so that PIDS keeps its pid for the cleanup.
start() {
  local name=$1 so=$2
  PORT=$(free_port)
  mkdir -p "$TMP/$name"
  redis-server --port "$PORT" --bind 127.0.0.1 --dir "$TMP/$name" --save '' --appendonly no \
    --loadmodule "$so" --logfile "$TMP/$name/log" >/dev/null 2>&1 &
  PIDS+=($!)
  for _ in $(seq 100); do
    redis-cli -p "$PORT" ping >/dev/null 2>&1 && return
    sleep 0.05
  done
  echo "ab: the $name server did not start (log: $TMP/$name/log)" >&2
  exit 1
}

start old "$OLD"
OLD_PORT=$PORT
start new "$NEW"
NEW_PORT=$PORT

# Each workload: a label and the command redis-benchmark repeats
# (__rand_int__ picks a key in AB_KEYS).
WORKLOADS=(
  "ACQUIRE|LOCK.ACQUIRE ab:__rand_int__ owner 30000"
  "EXTEND|LOCK.EXTEND ab:__rand_int__ owner 30000"
  "RELEASE|LOCK.RELEASE ab:__rand_int__ owner"
  "INFO|LOCK.INFO ab:__rand_int__"
)

rps() { # rps PORT COMMAND... -> requests per second
  local port=$1
  shift
  redis-benchmark -p "$port" -n "$N" -c 50 -P "$P" -r "$KEYS" -q "$@" 2>/dev/null |
    tr '\r' '\n' | awk '/requests per second/ { for (i = 1; i <= NF; i++) if ($i ~ /^[0-9.]+$/) v = $i } END { print v }'
}

median() { sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

printf 'ab: old %s\nab: new %s\nab: %s rounds of %s requests, -P %s, 50 clients, %s keys\n' "$OLD" "$NEW" "$ROUNDS" "$N" "$P" "$KEYS"
# A round runs every workload in order on one build, then on the other
# (which goes first alternates): ACQUIRE fills the keys that EXTEND
# extends and RELEASE frees, as a lock's life goes.
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) -eq 1 ]; then order="old new"; else order="new old"; fi
  for build in $order; do
    port=$OLD_PORT
    [ "$build" = new ] && port=$NEW_PORT
    redis-cli -p "$port" flushall >/dev/null
    for w in "${WORKLOADS[@]}"; do
      label=${w%%|*}
      read -r -a cmd <<<"${w#*|}"
      rps "$port" "${cmd[@]}" >>"$TMP/$build.$label"
    done
  done
  echo "ab: round $r of $ROUNDS done" >&2
done
printf '%-8s %14s %14s %7s   %s\n' command "old req/s" "new req/s" new/old "ratio per round"
for w in "${WORKLOADS[@]}"; do
  label=${w%%|*}
  mo=$(median <"$TMP/old.$label")
  mn=$(median <"$TMP/new.$label")
  rounds=$(paste -d' ' "$TMP/new.$label" "$TMP/old.$label" | awk '{ printf " %.2f", ($2 > 0) ? $1 / $2 : 0 }')
  printf '%-8s %14.0f %14.0f %7.2f  %s\n' "$label" "$mo" "$mn" "$(awk -v a="$mn" -v b="$mo" 'BEGIN { print (b > 0) ? a / b : 0 }')" "$rounds"
done
