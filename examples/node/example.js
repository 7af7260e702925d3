// redislock from ioredis: acquire, wait in line, extend, release, fence a
// write with the token, and read an error reply.
//
// Needs a Redis with the module loaded (`make run` starts one on
// 127.0.0.1:6379). Server address: REDIS_URL, or REDIS_HOST / REDIS_PORT.
// Checks its own output; prints `example OK` or exits non-zero.

import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import Redis, { ReplyError } from "ioredis";

// ioredis reports connection failures as "error" events; the last one
// explains a failed command ("Connection is closed.").
let connectionError = null;

function connect() {
  const options = {
    // Tokens go up to 2^63-1, past what a JS number holds exactly (2^53):
    // take integer replies as strings and compare them as BigInt.
    stringNumbers: true,
    // Fail at once when no server answers, rather than retrying forever.
    retryStrategy: () => null,
    lazyConnect: true,
  };
  const url = process.env.REDIS_URL;
  const host = process.env.REDIS_HOST ?? "127.0.0.1";
  const port = Number(process.env.REDIS_PORT ?? 6379);
  const redis = url ? new Redis(url, options) : new Redis({ host, port, ...options });
  redis.on("error", (e) => { connectionError = e; });
  return redis;
}

function expect(ok, what) {
  if (!ok) throw new Error(what);
}

// LOCK.INFO answers a flat [field, value, ...] array (RESP2, which ioredis
// speaks), or null when nobody holds.
async function lockInfo(redis, key) {
  const reply = await redis.call("LOCK.INFO", key);
  if (reply === null) return null;
  const info = {};
  for (let i = 0; i < reply.length; i += 2) info[reply[i]] = reply[i + 1];
  return info;
}

// The resource the lock protects. It remembers the highest token it has
// seen and refuses writes with a lower one: a holder that lost its lock
// (paused, partitioned, lease expired) can no longer overwrite the work of
// the holder after it.
class FencedStore {
  highest = 0n;
  value = null;

  write(token, value) {
    if (token < this.highest) return false;
    this.highest = token;
    this.value = value;
    return true;
  }
}

async function demo(a, b) {
  const key = `example:node:${randomBytes(4).toString("hex")}`;
  const store = new FencedStore();

  const reply = await a.call("LOCK.ACQUIRE", key, "worker-a", 10000);
  expect(reply !== null, "worker-a's ACQUIRE answered nil on a free key");
  const tokenA = BigInt(reply);
  console.log(`worker-a acquired ${key} with token ${tokenA}`);

  // Without WAIT, a held lock answers nil at once, like SET NX.
  expect((await b.call("LOCK.ACQUIRE", key, "worker-b", 10000)) === null,
    "worker-b got a lock that worker-a holds");
  console.log("worker-b without WAIT: nil (worker-a holds it)");

  expect(store.write(tokenA, "written by worker-a"), "storage refused the holder's write");
  console.log(`storage accepted worker-a's write with token ${tokenA}`);

  // The WAIT blocks on the server; its promise settles once worker-b is granted.
  let settled = false;
  const waiting = b.call("LOCK.ACQUIRE", key, "worker-b", 10000, "WAIT", 15000)
    .finally(() => { settled = true; });
  const deadline = Date.now() + 5000;
  while (Number((await lockInfo(a, key))?.waiters ?? 0) !== 1) {
    expect(!settled, "worker-b's WAIT ended while worker-a held the lock");
    expect(Date.now() < deadline, "worker-b never showed up in LOCK.INFO's waiters");
    await sleep(10);
  }
  console.log("worker-b waits in line (LOCK.INFO waiters: 1)");

  expect((await a.call("LOCK.EXTEND", key, "worker-a", 30000)) === "1", "EXTEND by the holder failed");
  const pttl = Number((await lockInfo(a, key)).pttl);
  expect(pttl > 10000, `lease left after EXTEND is ${pttl} ms, expected above 10000`);
  console.log(`worker-a extended its lease: ${pttl} ms left`);

  expect(!settled, "worker-b's WAIT returned while worker-a still held the lock");
  expect((await a.call("LOCK.RELEASE", key, "worker-a")) === "1", "RELEASE by the holder failed");
  const granted = await waiting;
  expect(granted !== null && BigInt(granted) > tokenA,
    `worker-b was granted ${granted} after the release, expected a token above ${tokenA}`);
  const tokenB = BigInt(granted);
  console.log(`worker-a released; worker-b was granted the lock with token ${tokenB}`);

  expect(store.write(tokenB, "written by worker-b"), "storage refused the new holder's write");
  console.log(`storage accepted worker-b's write with token ${tokenB}`);
  // worker-a's write arrives late (a GC pause, a slow network): refused.
  expect(!store.write(tokenA, "late write by worker-a"), "storage accepted a stale token");
  expect(store.value === "written by worker-b", `storage holds ${store.value}`);
  console.log(`storage refused worker-a's late write: token ${tokenA} < ${store.highest}`);

  // A former holder's EXTEND and RELEASE answer 0: it learns it lost the lock.
  expect((await a.call("LOCK.EXTEND", key, "worker-a", 10000)) === "0", "a non-holder extended");
  expect((await b.call("LOCK.RELEASE", key, "worker-b")) === "1", "worker-b's RELEASE failed");
  console.log("worker-a's EXTEND answered 0; worker-b released");

  const error = await a.call("LOCK.ACQUIRE", key, "worker-a", 0).then(() => null, (e) => e);
  expect(error instanceof ReplyError, `ACQUIRE with ttl 0 did not fail with an error reply: ${error}`);
  expect(error.message === "ERR ttl must be a positive integer (milliseconds)",
    `unexpected error ${error.message}`);
  console.log(`ACQUIRE with ttl 0: ${error.message}`);

  console.log("example OK");
}

// Two connections, two workers: a blocked WAIT occupies its connection.
const a = connect();
const b = connect();
try {
  await Promise.all([a.connect(), b.connect()]);
  await demo(a, b);
} catch (e) {
  const cause = connectionError ? ` (${connectionError.message}; is \`make run\` running?)` : "";
  console.error(`example FAILED: ${e.message}${cause}`);
  process.exitCode = 1;
} finally {
  a.disconnect();
  b.disconnect();
}
