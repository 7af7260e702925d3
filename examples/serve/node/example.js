// The quorum from ioredis, through `redlock serve`: acquire, write through
// the fence with the token (LOCK.FENCED on the data server), wait in line,
// extend, release.
//
// Needs `redlock serve` (REDLOCK_SERVE_HOST / REDLOCK_SERVE_PORT, default
// 127.0.0.1:7379) and a Redis with the module for the data (DATA_HOST /
// DATA_PORT, default 127.0.0.1:6379); see ../README.md.
// Checks its own output; prints `example OK` or exits non-zero.

import { randomBytes } from "node:crypto";
import { setTimeout as sleep } from "node:timers/promises";
import Redis, { ReplyError } from "ioredis";

// ioredis reports connection failures as "error" events; the last one
// explains a failed command ("Connection is closed.").
let connectionError = null;

function connect(prefix, defaultPort) {
  const redis = new Redis({
    host: process.env[`${prefix}_HOST`] ?? "127.0.0.1",
    port: Number(process.env[`${prefix}_PORT`] ?? defaultPort),
    // Tokens go up to 2^63-1, past what a JS number holds exactly (2^53):
    // take integer replies as strings and compare them as BigInt.
    stringNumbers: true,
    // Fail at once when nothing answers, rather than retrying forever.
    retryStrategy: () => null,
    lazyConnect: true,
  });
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

async function demo(a, b, data) {
  const key = `example:serve:node:${randomBytes(4).toString("hex")}`;
  const fence = `${key}:fence`;
  const dataKey = `${key}:data`;

  const reply = await a.call("LOCK.ACQUIRE", key, "worker-a", 10000);
  expect(reply !== null, "worker-a's ACQUIRE answered nil on a free key");
  const tokenA = BigInt(reply);
  console.log(`worker-a acquired ${key} through the quorum with token ${tokenA}`);

  expect((await b.call("LOCK.ACQUIRE", key, "worker-b", 10000)) === null,
    "worker-b got a lock that worker-a holds");
  console.log("worker-b without WAIT: nil (worker-a holds it)");

  // The write runs on the data server only if the token is at least every
  // token the register has accepted.
  let written = await data.call("LOCK.FENCED", fence, tokenA, "SET", dataKey, "written by worker-a");
  expect(written === "OK", `worker-a's fenced write answered ${written}`);
  console.log(`worker-a wrote through the fence with token ${tokenA}`);

  // The WAIT blocks; its promise settles once worker-b is granted.
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

  written = await data.call("LOCK.FENCED", fence, tokenB, "SET", dataKey, "written by worker-b");
  expect(written === "OK", `worker-b's fenced write answered ${written}`);
  console.log(`worker-b wrote through the fence with token ${tokenB}`);
  // worker-a's write arrives late (a GC pause, a slow network): the data
  // server refuses it, and runs nothing.
  const late = await data.call("LOCK.FENCED", fence, tokenA, "SET", dataKey, "late write by worker-a")
    .then(() => null, (e) => e);
  expect(late instanceof ReplyError && late.message.startsWith("FENCED older token"),
    `worker-a's late write answered ${late?.message ?? "no error"}`);
  const stored = await data.get(dataKey);
  expect(stored === "written by worker-b", `the data is ${stored}`);
  console.log(`worker-a's late write was refused: ${late.message}`);

  // A former holder's EXTEND answers 0: it learns it lost the lock.
  expect((await a.call("LOCK.EXTEND", key, "worker-a", 10000)) === "0", "a non-holder extended");
  expect((await b.call("LOCK.RELEASE", key, "worker-b")) === "1", "worker-b's RELEASE failed");
  console.log("worker-a's EXTEND answered 0; worker-b released");

  await data.del(fence, dataKey);
  console.log("example OK");
}

// Two workers, a connection each to the endpoint (a blocked WAIT occupies
// its connection), and the data server.
const a = connect("REDLOCK_SERVE", 7379);
const b = connect("REDLOCK_SERVE", 7379);
const data = connect("DATA", 6379);
try {
  await Promise.all([a.connect(), b.connect(), data.connect()]);
  await demo(a, b, data);
} catch (e) {
  const cause = connectionError ? ` (${connectionError.message}; are redlock serve and the data server running?)` : "";
  console.error(`example FAILED: ${e.message}${cause}`);
  process.exitCode = 1;
} finally {
  a.disconnect();
  b.disconnect();
  data.disconnect();
}
