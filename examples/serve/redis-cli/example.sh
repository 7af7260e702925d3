#!/usr/bin/env bash
# The quorum from redis-cli, through `redlock serve`: acquire, write through
# the fence with the token (LOCK.FENCED on the data server), wait in line,
# extend, release.
#
# Needs `redlock serve` (REDLOCK_SERVE_HOST / REDLOCK_SERVE_PORT, default
# 127.0.0.1:7379) and a Redis with the module for the data (DATA_HOST /
# DATA_PORT, default 127.0.0.1:6379); see ../README.md.
# Checks its own output; prints `example OK` or exits non-zero.
set -euo pipefail

endpoint=(-h "${REDLOCK_SERVE_HOST:-127.0.0.1}" -p "${REDLOCK_SERVE_PORT:-7379}")
data=(-h "${DATA_HOST:-127.0.0.1}" -p "${DATA_PORT:-6379}")
# Every call is its own connection. With stdout not a terminal, redis-cli
# prints bare replies: an integer as digits, nil as an empty line, an
# error as its text ("ERR ...").
lock() { redis-cli "${endpoint[@]}" "$@"; }
store() { redis-cli "${data[@]}" "$@"; }

fail() { echo "example FAILED: $*" >&2; exit 1; }

# A LOCK.INFO field: the reply is field, value, ... one per line.
info_field() { lock LOCK.INFO "$key" | awk -v f="$1" 'prev == f && !found { print; found = 1 } { prev = $0 }'; }

pong=$(lock PING 2>&1) || true
[ "$pong" = PONG ] || fail "cannot reach redlock serve (${pong:-no reply}); is it running?"
pong=$(store PING 2>&1) || true
[ "$pong" = PONG ] || fail "cannot reach the data server (${pong:-no reply}); is \`make run\` running?"

key=example:serve:redis-cli:$RANDOM$RANDOM
fence=$key:fence data_key=$key:data
tmp=$(mktemp -d)
waiter=
trap '[ -z "$waiter" ] || kill "$waiter" 2>/dev/null; rm -rf "$tmp"' EXIT

token_a=$(lock LOCK.ACQUIRE "$key" worker-a 10000)
[[ $token_a =~ ^[0-9]+$ ]] || fail "worker-a's ACQUIRE answered '$token_a', not a token"
echo "worker-a acquired $key through the quorum with token $token_a"

reply=$(lock LOCK.ACQUIRE "$key" worker-b 10000)
[ -z "$reply" ] || fail "worker-b got a lock that worker-a holds: '$reply'"
echo "worker-b without WAIT: nil (worker-a holds it)"

# The write runs on the data server only if the token is at least every
# token the register has accepted.
reply=$(store LOCK.FENCED "$fence" "$token_a" SET "$data_key" "written by worker-a")
[ "$reply" = OK ] || fail "worker-a's fenced write answered '$reply'"
echo "worker-a wrote through the fence with token $token_a"

# With WAIT the call blocks: a second redis-cli, in the background, waits
# in line; its reply lands in a file.
redis-cli "${endpoint[@]}" LOCK.ACQUIRE "$key" worker-b 10000 WAIT 15000 >"$tmp/granted" &
waiter=$!
for _ in $(seq 100); do
  [ "$(info_field waiters)" = 1 ] && break
  kill -0 "$waiter" 2>/dev/null || fail "worker-b's WAIT ended while worker-a held the lock"
  sleep 0.05
done
[ "$(info_field waiters)" = 1 ] || fail "worker-b never showed up in LOCK.INFO's waiters"
echo "worker-b waits in line (LOCK.INFO waiters: 1)"

[ "$(lock LOCK.EXTEND "$key" worker-a 30000)" = 1 ] || fail "EXTEND by the holder failed"
pttl=$(info_field pttl)
(( pttl > 10000 )) || fail "lease left after EXTEND is $pttl ms, expected above 10000"
echo "worker-a extended its lease: $pttl ms left"

kill -0 "$waiter" 2>/dev/null || fail "worker-b's WAIT returned while worker-a still held the lock"
[ "$(lock LOCK.RELEASE "$key" worker-a)" = 1 ] || fail "RELEASE by the holder failed"
wait "$waiter" || fail "worker-b's redis-cli failed"
waiter=
token_b=$(<"$tmp/granted")
[[ $token_b =~ ^[0-9]+$ ]] && (( token_b > token_a )) \
  || fail "worker-b was granted '$token_b' after the release, expected a token above $token_a"
echo "worker-a released; worker-b was granted the lock with token $token_b"

reply=$(store LOCK.FENCED "$fence" "$token_b" SET "$data_key" "written by worker-b")
[ "$reply" = OK ] || fail "worker-b's fenced write answered '$reply'"
echo "worker-b wrote through the fence with token $token_b"
# worker-a's write arrives late (a paused process, a slow network): the
# data server refuses it, and runs nothing.
reply=$(store LOCK.FENCED "$fence" "$token_a" SET "$data_key" "late write by worker-a" 2>&1) || true
[[ $reply == "FENCED older token"* ]] || fail "worker-a's late write answered '$reply'"
[ "$(store GET "$data_key")" = "written by worker-b" ] || fail "the data is '$(store GET "$data_key")'"
echo "worker-a's late write was refused: $reply"

# A former holder's EXTEND answers 0: it learns it lost the lock.
[ "$(lock LOCK.EXTEND "$key" worker-a 10000)" = 0 ] || fail "a non-holder extended"
[ "$(lock LOCK.RELEASE "$key" worker-b)" = 1 ] || fail "worker-b's RELEASE failed"
echo "worker-a's EXTEND answered 0; worker-b released"

store DEL "$fence" "$data_key" >/dev/null
echo "example OK"
