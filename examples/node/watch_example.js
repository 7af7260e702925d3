// Watching and controlling a lock from ioredis: an operator's view of
// orders:42. A watcher hears every change (redislock.notify), the operator
// asks a holder to let go (LOCK.ASK), revokes a stuck one behind a fence
// (LOCK.REVOKE ... FENCE) and resizes a semaphore (LOCK.RESIZE).
//
// Needs a Redis with the module loaded (`make run` starts one on
// 127.0.0.1:6379). Server address: REDIS_URL, or REDIS_HOST / REDIS_PORT.
// It sets redislock.notify, a server-wide setting, while it runs (and puts
// the old value back), and uses the keys orders:42, orders:42:fence,
// orders:42:state and orders:pool (deleted at the end): run it against a
// server of its own. Checks its own output; prints `example OK` or exits
// non-zero.

import { on } from "node:events";
import { setTimeout as sleep } from "node:timers/promises";
import { inspect, isDeepStrictEqual } from "node:util";
import Redis, { ReplyError } from "ioredis";

const KEY = "orders:42";
const POOL = "orders:pool";
const FENCE = "orders:42:fence";
const STATE = "orders:42:state";

// ioredis reports connection failures as "error" events; the last one
// explains a failed command ("Connection is closed.").
let connectionError = null;
const connections = [];

function connect() {
  const options = {
    // Tokens go up to 2^63-1, past what a JS number holds exactly (2^53):
    // take integer replies as strings and compare them as BigInt.
    stringNumbers: true,
    // Fail at once when no server answers, rather than retrying forever.
    retryStrategy: () => null,
  };
  const url = process.env.REDIS_URL;
  const host = process.env.REDIS_HOST ?? "127.0.0.1";
  const port = Number(process.env.REDIS_PORT ?? 6379);
  const redis = url ? new Redis(url, options) : new Redis({ host, port, ...options });
  redis.on("error", (e) => { connectionError = e; });
  connections.push(redis);
  return redis;
}

function expect(ok, what) {
  if (!ok) throw new Error(what);
}

// Rejects after `ms` (without keeping the process alive): nothing here
// waits for ever.
async function within(ms, what, promise) {
  const late = sleep(ms, null, { ref: false }).then(() => { throw new Error(what); });
  return Promise.race([promise, late]);
}

// A lock announces its changes on __redislock@DB__:KEY.
const channel = (redis, key) => `__redislock@${redis.options.db ?? 0}__:${key}`;

// `KIND TOKEN OWNER-LENGTH OWNER VALUE`, as bytes: the owner is OWNER-LENGTH
// bytes and may hold spaces, so it is cut by its length, not split on
// spaces; VALUE is the rest.
function parse(channelName, message) {
  const fields = [];
  let at = 0;
  for (let i = 0; i < 3; i++) {
    const space = message.indexOf(" ", at);
    fields.push(message.subarray(at, space).toString());
    at = space + 1;
  }
  const [kind, token, length] = fields;
  const ownerEnd = at + Number(length);
  return {
    key: channelName.toString().split(":").slice(1).join(":"),
    kind,
    token: BigInt(token),
    owner: message.subarray(at, ownerEnd).toString(),
    value: message.subarray(ownerEnd + 1).toString(),
  };
}

async function waitersAre(redis, key, count) {
  const deadline = Date.now() + 5000;
  for (;;) {
    // LOCK.INFO: a flat [field, value, ...] array (RESP2, which ioredis speaks).
    const info = (await redis.call("LOCK.INFO", key)) ?? [];
    const at = info.indexOf("waiters");
    if (at >= 0 && Number(info[at + 1]) === count) return;
    expect(Date.now() < deadline, `${key} never had ${count} waiter(s)`);
    await sleep(10);
  }
}

async function story(operator) {
  // The watcher reads bytes ("messageBuffer"): OWNER-LENGTH counts bytes.
  // events.on queues every message from here on, to be read in order.
  const watcher = connect();
  const announcements = on(watcher, "messageBuffer");
  const heard = [];
  async function hear(count) {
    for (let i = 0; i < count; i++) {
      const next = await within(5000, `the watcher heard ${inspect(heard)}, then nothing more`,
        announcements.next());
      const a = parse(...next.value);
      console.log(`  watcher: ${a.key}: ${a.kind} ${a.token} '${a.owner}' '${a.value}'`);
      heard.push(a);
    }
  }
  // subscribe() resolves once the server confirmed each channel: pub/sub
  // keeps nothing, so a change made before that would go unheard.
  await watcher.subscribe(channel(operator, KEY), channel(operator, POOL));
  console.log(`watcher subscribed to ${channel(operator, KEY)} and ${channel(operator, POOL)}`);

  const worker1 = connect();
  const worker2 = connect();
  const reply1 = await worker1.call("LOCK.ACQUIRE", KEY, "worker-1", 30000);
  expect(reply1 !== null, "worker-1's ACQUIRE answered nil");
  const token1 = BigInt(reply1);
  console.log(`worker-1 acquired ${KEY} with token ${token1}`);
  await hear(1);

  // worker-1 listens on its lock's channel while it holds. An ask carries
  // the token of the hold it is meant for: one with an older token was for
  // an earlier hold. On an ask for this hold, it finishes up and lets go.
  const listener = connect();
  listener.on("messageBuffer", (channelName, message) => {
    const a = parse(channelName, message);
    if (a.kind === "ask" && a.token === token1) {
      console.log(`  worker-1 was asked to let go ('${a.value}') and releases`);
      worker1.call("LOCK.RELEASE", KEY, "worker-1")
        .catch((e) => console.error(`worker-1's RELEASE failed: ${e.message}`));
    }
  });
  await listener.subscribe(channel(operator, KEY));

  const granted2 = worker2.call("LOCK.ACQUIRE", KEY, "worker-2", 30000, "WAIT", 15000);
  await waitersAre(operator, KEY, 1);
  console.log("worker-2 waits in line");

  const asked = await operator.call("LOCK.ASK", KEY, "MESSAGE", "deploy");
  expect(asked === "1", `LOCK.ASK asked ${asked} holders, not 1`);
  const reply2 = await within(5000, "worker-2 was never granted the lock", granted2);
  expect(reply2 !== null && BigInt(reply2) > token1,
    `worker-2 was granted ${reply2}, expected a token above ${token1}`);
  const token2 = BigInt(reply2);
  console.log(`operator asked worker-1 to let go; worker-2 was granted ${KEY} with token ${token2}`);
  await hear(3);
  listener.disconnect();

  // worker-2 hangs while it holds: the operator takes the lock back and
  // raises the fence, so worker-2's late writes are refused.
  const [revokeReply, revoked] = await operator.call("LOCK.REVOKE", KEY, "FENCE", FENCE);
  const revokeToken = BigInt(revokeReply);
  expect(revoked === "1" && revokeToken > token2,
    `LOCK.REVOKE answered [${revokeReply}, ${revoked}], expected [T > ${token2}, 1]`);
  console.log(`operator revoked worker-2's hold: token ${revokeToken}`);
  await hear(1);
  const refusal = await worker2.call("LOCK.FENCED", FENCE, token2, "SET", STATE, "x")
    .then(() => null, (e) => e);
  expect(refusal instanceof ReplyError && refusal.message.startsWith("FENCED older token"),
    `worker-2's write with its revoked token answered ${refusal?.message ?? "OK"}`);
  console.log(`worker-2's late write was refused: ${refusal.message}`);
  const written = await operator.call("LOCK.FENCED", FENCE, revokeToken, "SET", STATE, "revoked");
  expect(written === "OK", `a write with token ${revokeToken} answered ${written}`);
  console.log(`a write with token ${revokeToken} passes the fence`);

  // A semaphore of one permit, held, and a second request waiting; the
  // operator makes room for two. Owners may hold spaces.
  const packer1 = connect();
  const packer2 = connect();
  const permitReply1 = await packer1.call("LOCK.ACQUIRE", POOL, "packer 1", 30000, "SHARED", "LIMIT", 1);
  expect(permitReply1 !== null, "packer 1's ACQUIRE answered nil");
  const permit1 = BigInt(permitReply1);
  await hear(1);
  const grantedPermit2 = packer2.call("LOCK.ACQUIRE", POOL, "packer 2", 30000, "SHARED", "LIMIT", 1,
    "WAIT", 15000);
  await waitersAre(operator, POOL, 1);
  console.log(`packer 1 holds ${POOL} (LIMIT 1) with token ${permit1}; packer 2 waits in line`);
  const resized = await operator.call("LOCK.RESIZE", POOL, 2);
  expect(resized === "1", `LOCK.RESIZE granted ${resized} waiters, not 1`);
  const permitReply2 = await within(5000, "packer 2 was never granted a permit", grantedPermit2);
  expect(permitReply2 !== null && BigInt(permitReply2) > permit1, `packer 2 was granted ${permitReply2}`);
  const permit2 = BigInt(permitReply2);
  console.log(`operator resized ${POOL} to 2: packer 2 was granted it with token ${permit2}`);
  await hear(2);

  expect((await packer1.call("LOCK.RELEASE", POOL, "packer 1")) === "1", "packer 1's RELEASE failed");
  expect((await packer2.call("LOCK.RELEASE", POOL, "packer 2")) === "1", "packer 2's RELEASE failed");
  console.log("both packers released");
  await hear(2);

  // Everything the watcher heard, in order: kinds, tokens, owners, values.
  const said = (key, kind, token, owner, value = "") => ({ key, kind, token, owner, value });
  const expected = [
    said(KEY, "grant", token1, "worker-1"),
    said(KEY, "ask", token1, "worker-1", "deploy"),
    said(KEY, "release", token1, "worker-1"),
    said(KEY, "handoff", token2, "worker-2"),
    said(KEY, "revoke", revokeToken, "worker-2"),
    said(POOL, "grant", permit1, "packer 1"),
    said(POOL, "resize", 0n, "", "2"),
    said(POOL, "handoff", permit2, "packer 2"),
    said(POOL, "release", permit1, "packer 1"),
    said(POOL, "release", permit2, "packer 2"),
  ];
  expect(isDeepStrictEqual(heard, expected),
    `the watcher heard ${inspect(heard)}, expected ${inspect(expected)}`);
  console.log(`the watcher heard the ${heard.length} changes in order`);
}

const operator = connect();
try {
  const [, oldNotify] = await operator.config("GET", "redislock.notify");
  expect(oldNotify !== undefined, "this server has no redislock.notify: is the module loaded?");
  // Announce every change of the orders:* locks on their channels.
  await operator.config("SET", "redislock.notify", "orders:*");
  try {
    await story(operator);
  } finally {
    await operator.config("SET", "redislock.notify", oldNotify);
    await operator.del(KEY, POOL, FENCE, STATE);
  }
  console.log("example OK");
} catch (e) {
  const cause = connectionError ? ` (${connectionError.message}; is \`make run\` running?)` : "";
  console.error(`example FAILED: ${e.message}${cause}`);
  process.exitCode = 1;
} finally {
  // Not twice: a second disconnect() waits 2 s for a close already past.
  for (const redis of connections) if (redis.status !== "end") redis.disconnect();
}
