#!/usr/bin/env bash
# Five independent module-equipped masters for the Redlock client, each with
# its data, pid file and log under $RUN_DIR/<port>.
#
#   scripts/redlock-servers.sh up     start them; return once every one
#                                     answers PING and has finished loading,
#                                     and say which refuse grants, how long
#   scripts/redlock-servers.sh down   stop them cleanly: wait out a load in
#                                     progress, SIGTERM, wait for the exit,
#                                     and say whether the next start skips
#                                     the restart quarantine
#
# Environment: REDLOCK_PORTS (default "7001 7002 7003 7004 7005"), RUN_DIR
# (default .run), REDISLOCK_MODULE (default target/release/libredislock.so),
# REDLOCK_SERVER_ARGS (extra redis-server arguments, e.g.
# "--redislock.quarantine 2000").
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
ports=${REDLOCK_PORTS:-7001 7002 7003 7004 7005}
run_dir=${RUN_DIR:-.run}
case $run_dir in /*) ;; *) run_dir=$root/$run_dir ;; esac
module=${REDISLOCK_MODULE:-$root/target/release/libredislock.so}
# How long a server may take to load its data or to stop.
patience=${REDLOCK_PATIENCE_S:-120}

say() { echo "redislock: $*"; }

# The server's answer to PING, or nothing when it does not answer.
ping() { redis-cli -h 127.0.0.1 -p "$1" ping 2>/dev/null | head -n 1 || true; }

# A field of INFO <section>, or nothing.
info() {
  redis-cli -h 127.0.0.1 -p "$1" info "$2" 2>/dev/null | tr -d '\r' | sed -n "s/^$3://p" || true
}

alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

up() {
  [ -f "$module" ] || { say "$module is missing: run 'make build' first" >&2; exit 1; }
  local p dir
  for p in $ports; do
    dir=$run_dir/$p
    mkdir -p "$dir"
    if alive "$dir/redis.pid"; then
      say "127.0.0.1:$p already running (pid $(cat "$dir/redis.pid"))"
      continue
    fi
    # shellcheck disable=SC2086 # REDLOCK_SERVER_ARGS is a list of words
    redis-server "$root/redlock.conf" --loadmodule "$module" \
      --port "$p" --dir "$dir" --daemonize yes \
      --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" ${REDLOCK_SERVER_ARGS:-}
  done

  # Ready means: answers PING with PONG (not LOADING) and has no load running.
  local deadline=$((SECONDS + patience)) waiting
  while :; do
    waiting=()
    for p in $ports; do
      if [ "$(ping "$p")" != PONG ] || [ "$(info "$p" persistence loading)" != 0 ]; then waiting+=("$p"); fi
    done
    [ ${#waiting[@]} -eq 0 ] && break
    if [ $SECONDS -ge $deadline ]; then
      for p in "${waiting[@]}"; do say "127.0.0.1:$p not ready after ${patience} s; log: $run_dir/$p/redis.log" >&2; done
      exit 1
    fi
    sleep 0.1
  done

  # A server that could not bind its port exits; whoever answers there
  # instead is not ours.
  for p in $ports; do
    if [ "$(info "$p" server process_id)" != "$(cat "$run_dir/$p/redis.pid" 2>/dev/null)" ]; then
      say "127.0.0.1:$p answers, but not as the server started here (port taken?); log: $run_dir/$p/redis.log" >&2
      exit 1
    fi
  done

  local quarantined=0 left longest=0
  for p in $ports; do
    left=$(info "$p" redislock redislock_quarantine_ms_left)
    left=${left:-0}
    if [ "$left" -gt 0 ]; then
      quarantined=$((quarantined + 1))
      [ "$left" -gt "$longest" ] && longest=$left
      say "127.0.0.1:$p ready; refuses grants for $(( (left + 999) / 1000 )) s more (restart quarantine)"
    else
      say "127.0.0.1:$p ready"
    fi
  done
  if [ "$quarantined" -gt 0 ]; then
    say "$quarantined of $(wc -w <<<"$ports") servers refuse grants (TRYAGAIN) for up to $(( (longest + 999) / 1000 )) s:"
    say "  a server that did not start from a clean shutdown's data may have granted, before"
    say "  it lost them, locks a client still holds, so it waits until they would have run out"
    say "  (redislock.quarantine in redlock.conf). 'redlock status' counts down; 'redlock acquire"
    say "  RESOURCE --ttl 10s --wait 70s' waits it out. 'make redlock-down' stops them cleanly,"
    say "  so the next 'make redlock-up' skips it."
  fi
}

down() {
  local p dir pid deadline stopping=()
  for p in $ports; do
    dir=$run_dir/$p
    if ! alive "$dir/redis.pid"; then
      rm -f "$dir/redis.pid"
      continue
    fi
    pid=$(cat "$dir/redis.pid")
    # SIGTERM during a load exits without saving or a clean-shutdown record:
    # let the load finish first.
    deadline=$((SECONDS + patience))
    while [ "$(info "$p" persistence loading)" != 0 ] && kill -0 "$pid" 2>/dev/null; do
      if [ $SECONDS -ge $deadline ]; then
        say "127.0.0.1:$p still loading after ${patience} s; stopping it anyway" >&2
        break
      fi
      sleep 0.1
    done
    kill "$pid" 2>/dev/null || true
    stopping+=("$p:$pid")
  done
  local entry
  for entry in "${stopping[@]}"; do
    p=${entry%%:*} pid=${entry#*:} dir=$run_dir/${entry%%:*}
    deadline=$((SECONDS + patience))
    while kill -0 "$pid" 2>/dev/null; do
      if [ $SECONDS -ge $deadline ]; then
        say "127.0.0.1:$p (pid $pid) did not exit within ${patience} s" >&2
        exit 1
      fi
      sleep 0.05
    done
    rm -f "$dir/redis.pid"
    if [ -f "$dir/redislock-clean-shutdown" ]; then
      say "stopped 127.0.0.1:$p cleanly (its next start skips the restart quarantine)"
    else
      say "stopped 127.0.0.1:$p without a clean-shutdown record: its next start quarantines (see its log)"
    fi
  done
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
