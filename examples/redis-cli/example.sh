#!/usr/bin/env bash
# redislock from redis-cli: acquire, wait in line, extend, release, fence a
# write with the token, and read an error reply.
#
# Needs a Redis with the module loaded (`make run` starts one on
# 127.0.0.1:6379). Server address: REDIS_URL, or REDIS_HOST / REDIS_PORT.
# Checks its own output; prints `example OK` or exits non-zero.
set -euo pipefail

if [ -n "${REDIS_URL:-}" ]; then
  server=(-u "$REDIS_URL")
else
  server=(-h "${REDIS_HOST:-127.0.0.1}" -p "${REDIS_PORT:-6379}")
fi
# Every call is its own connection. With stdout not a terminal, redis-cli
# prints bare replies: an integer as digits, nil as an empty line, an
# error as its text ("ERR ...").
cli() { redis-cli "${server[@]}" "$@"; }

fail() { echo "example FAILED: $*" >&2; exit 1; }

# A LOCK.INFO field: the reply is field, value, ... one per line.
info_field() { cli LOCK.INFO "$key" | awk -v f="$1" 'prev == f && !found { print; found = 1 } { prev = $0 }'; }

# The resource the lock protects. It remembers the highest token it has
# seen and refuses writes with a lower one: a holder that lost its lock
# (paused, partitioned, lease expired) can no longer overwrite the work of
# the holder after it. Tokens fit bash's signed 64-bit arithmetic.
highest=0 stored=
fenced_write() { # token value
  (( $1 >= highest )) || return 1
  highest=$1 stored=$2
}

pong=$(cli PING 2>&1) || true
[ "$pong" = PONG ] || fail "cannot reach Redis (${pong:-no reply}); is \`make run\` running?"

key=example:redis-cli:$RANDOM$RANDOM
tmp=$(mktemp -d)
waiter=
trap '[ -z "$waiter" ] || kill "$waiter" 2>/dev/null; rm -rf "$tmp"' EXIT

token_a=$(cli LOCK.ACQUIRE "$key" worker-a 10000)
[[ $token_a =~ ^[0-9]+$ ]] || fail "worker-a's ACQUIRE answered '$token_a', not a token"
echo "worker-a acquired $key with token $token_a"

# Without WAIT, a held lock answers nil at once, like SET NX.
reply=$(cli LOCK.ACQUIRE "$key" worker-b 10000)
[ -z "$reply" ] || fail "worker-b got a lock that worker-a holds: '$reply'"
echo "worker-b without WAIT: nil (worker-a holds it)"

fenced_write "$token_a" "written by worker-a" || fail "storage refused the holder's write"
echo "storage accepted worker-a's write with token $token_a"

# With WAIT the call blocks on the server: a second redis-cli, in the
# background, waits in line; its reply lands in a file.
redis-cli "${server[@]}" LOCK.ACQUIRE "$key" worker-b 10000 WAIT 15000 >"$tmp/granted" &
waiter=$!
for _ in $(seq 100); do
  [ "$(info_field waiters)" = 1 ] && break
  kill -0 "$waiter" 2>/dev/null || fail "worker-b's WAIT ended while worker-a held the lock"
  sleep 0.05
done
[ "$(info_field waiters)" = 1 ] || fail "worker-b never showed up in LOCK.INFO's waiters"
echo "worker-b waits in line (LOCK.INFO waiters: 1)"

[ "$(cli LOCK.EXTEND "$key" worker-a 30000)" = 1 ] || fail "EXTEND by the holder failed"
pttl=$(info_field pttl)
(( pttl > 10000 )) || fail "lease left after EXTEND is $pttl ms, expected above 10000"
echo "worker-a extended its lease: $pttl ms left"

kill -0 "$waiter" 2>/dev/null || fail "worker-b's WAIT returned while worker-a still held the lock"
[ "$(cli LOCK.RELEASE "$key" worker-a)" = 1 ] || fail "RELEASE by the holder failed"
wait "$waiter" || fail "worker-b's redis-cli failed"
waiter=
token_b=$(<"$tmp/granted")
[[ $token_b =~ ^[0-9]+$ ]] && (( token_b > token_a )) \
  || fail "worker-b was granted '$token_b' after the release, expected a token above $token_a"
echo "worker-a released; worker-b was granted the lock with token $token_b"

fenced_write "$token_b" "written by worker-b" || fail "storage refused the new holder's write"
echo "storage accepted worker-b's write with token $token_b"
# worker-a's write arrives late (a paused process, a slow network): refused.
if fenced_write "$token_a" "late write by worker-a"; then fail "storage accepted a stale token"; fi
[ "$stored" = "written by worker-b" ] || fail "storage holds '$stored'"
echo "storage refused worker-a's late write: token $token_a < $highest"

# A former holder's EXTEND and RELEASE answer 0: it learns it lost the lock.
[ "$(cli LOCK.EXTEND "$key" worker-a 10000)" = 0 ] || fail "a non-holder extended"
[ "$(cli LOCK.RELEASE "$key" worker-b)" = 1 ] || fail "worker-b's RELEASE failed"
echo "worker-a's EXTEND answered 0; worker-b released"

# Some redis-cli versions also exit non-zero after an error reply.
error=$(cli LOCK.ACQUIRE "$key" worker-a 0 2>&1) || true
[ "$error" = "ERR ttl must be a positive integer (milliseconds)" ] || fail "unexpected reply '$error'"
echo "ACQUIRE with ttl 0: $error"

echo "example OK"
