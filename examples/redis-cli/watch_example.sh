#!/usr/bin/env bash
# Watching and controlling a lock from redis-cli: an operator's view of
# orders:42. A watcher hears every change (redislock.notify), the operator
# asks a holder to let go (LOCK.ASK), revokes a stuck one behind a fence
# (LOCK.REVOKE ... FENCE) and resizes a semaphore (LOCK.RESIZE).
#
# Needs a Redis with the module loaded (`make run` starts one on
# 127.0.0.1:6379). Server address: REDIS_URL, or REDIS_HOST / REDIS_PORT.
# It sets redislock.notify, a server-wide setting, while it runs (and puts
# the old value back), and uses the keys orders:42, orders:42:fence,
# orders:42:state and orders:pool (deleted at the end): run it against a
# server of its own. Checks its own output; prints `example OK` or exits
# non-zero.
set -euo pipefail
# Owner lengths count bytes, and so does ${var:offset:length} in the C locale.
export LC_ALL=C

if [ -n "${REDIS_URL:-}" ]; then
  server=(-u "$REDIS_URL")
else
  server=(-h "${REDIS_HOST:-127.0.0.1}" -p "${REDIS_PORT:-6379}")
fi
# Every call is its own connection. With stdout not a terminal, redis-cli
# prints bare replies, one per line: an integer as digits, nil as an empty
# line, an error as its text.
cli() { redis-cli "${server[@]}" "$@"; }

fail() { echo "example FAILED: $*" >&2; exit 1; }

pong=$(cli PING 2>&1) || true
[ "$pong" = PONG ] || fail "cannot reach Redis (${pong:-no reply}); is \`make run\` running?"

key=orders:42 pool=orders:pool fence=orders:42:fence state=orders:42:state
# A lock announces its changes on __redislock@DB__:KEY.
db=$(cli CLIENT INFO | sed -n 's/.* db=\([0-9]*\) .*/\1/p')
channel() { echo "__redislock@${db}__:$1"; }

mapfile -t notify < <(cli CONFIG GET redislock.notify)
[ ${#notify[@]} -eq 2 ] || fail "this server has no redislock.notify: is the module loaded?"
old_notify=${notify[1]}
tmp=$(mktemp -d)
cleanup() {
  local children
  children=$(jobs -p)
  [ -z "$children" ] || kill $children 2>/dev/null || true
  cli CONFIG SET redislock.notify "$old_notify" >/dev/null
  cli DEL "$key" "$pool" "$fence" "$state" >/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
# Announce every change of the orders:* locks on their channels.
[ "$(cli CONFIG SET redislock.notify 'orders:*')" = OK ] || fail "CONFIG SET redislock.notify failed"

# An announcement is `KIND TOKEN OWNER-LENGTH OWNER VALUE`. The owner is
# OWNER-LENGTH bytes and may hold spaces, so it is cut by its length, not
# split on spaces; VALUE is the rest. Sets kind, token, owner and value.
parse() {
  local rest=$1 length
  kind=${rest%% *} rest=${rest#* }
  token=${rest%% *} rest=${rest#* }
  length=${rest%% *} rest=${rest#* }
  owner=${rest:0:length} value=${rest:length+1}
}

# A subscription is in place once the server counts it (PUBSUB NUMSUB):
# pub/sub keeps nothing, so a change made before that would go unheard.
subscribers() { cli PUBSUB NUMSUB "$1" | sed -n 2p; }
await_subscribers() { # channel count
  for _ in $(seq 100); do
    [ "$(subscribers "$1")" = "$2" ] && return
    sleep 0.05
  done
  fail "$1 never had $2 subscriber(s)"
}

# A LOCK.INFO field: the reply is field, value, ... one per line.
info_field() { # key field
  cli LOCK.INFO "$1" | awk -v f="$2" 'prev == f && !found { print; found = 1 } { prev = $0 }'
}
await_waiters() { # key count
  for _ in $(seq 100); do
    [ "$(info_field "$1" waiters)" = "$2" ] && return
    sleep 0.05
  done
  fail "$1 never had $2 waiter(s)"
}

# The watcher: a background redis-cli SUBSCRIBE writing to a file, three
# lines a message ("message", the channel, the announcement) after one
# confirmation a channel.
# (Others may listen too: count from theirs.)
listening=$(subscribers "$(channel "$key")") listening_pool=$(subscribers "$(channel "$pool")")
redis-cli "${server[@]}" SUBSCRIBE "$(channel "$key")" "$(channel "$pool")" >"$tmp/watcher" &
await_subscribers "$(channel "$key")" $((listening + 1))
await_subscribers "$(channel "$pool")" $((listening_pool + 1))
echo "watcher subscribed to $(channel "$key") and $(channel "$pool")"

heard=() # what the watcher heard, in order: key|kind|token|owner|value
hear() { # count: awaits the watcher's next COUNT announcements
  local first=$(( (2 + ${#heard[@]}) * 3 + 1 )) last=$(( (2 + ${#heard[@]} + $1) * 3 )) type ch message
  for _ in $(seq 100); do
    (( $(wc -l <"$tmp/watcher") >= last )) && break
    sleep 0.05
  done
  (( $(wc -l <"$tmp/watcher") >= last )) || fail "the watcher heard ${heard[*]}, then nothing more"
  while IFS= read -r type && IFS= read -r ch && IFS= read -r message; do
    parse "$message"
    echo "  watcher: ${ch#*:}: $kind $token '$owner' '$value'"
    heard+=("${ch#*:}|$kind|$token|$owner|$value")
  done < <(sed -n "${first},${last}p" "$tmp/watcher")
}

token_1=$(cli LOCK.ACQUIRE "$key" worker-1 30000)
[[ $token_1 =~ ^[0-9]+$ ]] || fail "worker-1's ACQUIRE answered '$token_1', not a token"
echo "worker-1 acquired $key with token $token_1"
hear 1

# worker-1 listens on its lock's channel while it holds (its own redis-cli
# SUBSCRIBE, read through a FIFO). An ask carries the token of the hold it
# is meant for: one with an older token was for an earlier hold. On an ask
# for this hold, it finishes up and lets go.
worker_1_listens() { # token
  local type ch message
  while IFS= read -r type && IFS= read -r ch && IFS= read -r message; do
    [ "$type" = message ] || continue
    parse "$message"
    if [ "$kind" = ask ] && [ "$token" = "$1" ]; then
      echo "  worker-1 was asked to let go ('$value') and releases"
      cli LOCK.RELEASE "$key" worker-1 >/dev/null
      return
    fi
  done
}
mkfifo "$tmp/worker-1"
redis-cli "${server[@]}" SUBSCRIBE "$(channel "$key")" >"$tmp/worker-1" &
worker_1_listens "$token_1" <"$tmp/worker-1" &
await_subscribers "$(channel "$key")" $((listening + 2))

# worker-2 waits in line: a WAIT blocks its connection, so it is a
# background redis-cli whose reply lands in a file.
redis-cli "${server[@]}" LOCK.ACQUIRE "$key" worker-2 30000 WAIT 15000 >"$tmp/worker-2" &
waiter=$!
await_waiters "$key" 1
echo "worker-2 waits in line"

[ "$(cli LOCK.ASK "$key" MESSAGE deploy)" = 1 ] || fail "LOCK.ASK did not ask 1 holder"
wait "$waiter" || fail "worker-2's redis-cli failed"
token_2=$(<"$tmp/worker-2")
[[ $token_2 =~ ^[0-9]+$ ]] && (( token_2 > token_1 )) \
  || fail "worker-2 was granted '$token_2', expected a token above $token_1"
echo "operator asked worker-1 to let go; worker-2 was granted $key with token $token_2"
hear 3

# worker-2 hangs while it holds: the operator takes the lock back and
# raises the fence, so worker-2's late writes are refused.
mapfile -t revoke < <(cli LOCK.REVOKE "$key" FENCE "$fence") # T, then the holds revoked
revoke_token=${revoke[0]:-} revoked=${revoke[1]:-}
[[ $revoke_token =~ ^[0-9]+$ ]] && [ "$revoked" = 1 ] && (( revoke_token > token_2 )) \
  || fail "LOCK.REVOKE answered [$revoke_token, $revoked], expected [T > $token_2, 1]"
echo "operator revoked worker-2's hold: token $revoke_token"
hear 1
refusal=$(cli LOCK.FENCED "$fence" "$token_2" SET "$state" x 2>&1) || true
[[ $refusal == "FENCED older token"* ]] || fail "worker-2's write with its revoked token answered '$refusal'"
echo "worker-2's late write was refused: $refusal"
written=$(cli LOCK.FENCED "$fence" "$revoke_token" SET "$state" revoked)
[ "$written" = OK ] || fail "a write with token $revoke_token answered '$written'"
echo "a write with token $revoke_token passes the fence"

# A semaphore of one permit, held, and a second request waiting; the
# operator makes room for two. Owners may hold spaces.
permit_1=$(cli LOCK.ACQUIRE "$pool" "packer 1" 30000 SHARED LIMIT 1)
[[ $permit_1 =~ ^[0-9]+$ ]] || fail "packer 1's ACQUIRE answered '$permit_1'"
hear 1
redis-cli "${server[@]}" LOCK.ACQUIRE "$pool" "packer 2" 30000 SHARED LIMIT 1 WAIT 15000 >"$tmp/packer-2" &
waiter=$!
await_waiters "$pool" 1
echo "packer 1 holds $pool (LIMIT 1) with token $permit_1; packer 2 waits in line"
[ "$(cli LOCK.RESIZE "$pool" 2)" = 1 ] || fail "LOCK.RESIZE did not grant 1 waiter"
wait "$waiter" || fail "packer 2's redis-cli failed"
permit_2=$(<"$tmp/packer-2")
[[ $permit_2 =~ ^[0-9]+$ ]] && (( permit_2 > permit_1 )) || fail "packer 2 was granted '$permit_2'"
echo "operator resized $pool to 2: packer 2 was granted it with token $permit_2"
hear 2

[ "$(cli LOCK.RELEASE "$pool" "packer 1")" = 1 ] || fail "packer 1's RELEASE failed"
[ "$(cli LOCK.RELEASE "$pool" "packer 2")" = 1 ] || fail "packer 2's RELEASE failed"
echo "both packers released"
hear 2

# Everything the watcher heard, in order: kinds, tokens, owners, values.
expected=(
  "$key|grant|$token_1|worker-1|"
  "$key|ask|$token_1|worker-1|deploy"
  "$key|release|$token_1|worker-1|"
  "$key|handoff|$token_2|worker-2|"
  "$key|revoke|$revoke_token|worker-2|"
  "$pool|grant|$permit_1|packer 1|"
  "$pool|resize|0||2"
  "$pool|handoff|$permit_2|packer 2|"
  "$pool|release|$permit_1|packer 1|"
  "$pool|release|$permit_2|packer 2|"
)
[ "$(printf '%s\n' "${heard[@]}")" = "$(printf '%s\n' "${expected[@]}")" ] \
  || fail "the watcher heard: ${heard[*]}; expected: ${expected[*]}"
echo "the watcher heard the ${#heard[@]} changes in order"

echo "example OK"
