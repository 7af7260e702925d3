// A child process of exit.test.mjs that ends while calls are pending:
//
//   node exiting.mjs HOW WHAT RESOURCE URL...
//
// WHAT: the calls left pending: 'observe' (an election's observer waiting
// for a change: nobody leads), 'lock' (a wait in line for RESOURCE, held
// here), 'campaign' (a campaign behind this process's leadership), or
// 'all' of them. Prints "pending" once they are started; the test then
// waits until the servers show them (subscribed, in line) and writes a
// line to stdin. HOW it ends then: 'exit', `process.exit(3)` with the calls
// pending; 'worker', the same with the calls pending in a worker thread
// (an environment of its own, torn down by the exit); 'natural', the
// calls ended (the observer's `return()`, the waits aborted, the lock
// released, the leadership resigned) and stdin closed: nothing is left to
// keep the event loop alive, so the process must end by itself.
//
// The options are exit.test.mjs's: importing the servers' support here
// would install its exit and signal handlers in this process too.
import { Worker, isMainThread, parentPort } from 'node:worker_threads';

import { Election, Redlock } from 'redislock';

const [how, what, resource, ...urls] = process.argv.slice(2);
const ROOMY = { requestTimeout: 1_000, connectTimeout: 2_000 };
const BOUND = { ...ROOMY, releaseOnDisconnect: true };
const endings = [];

async function observe() {
  const changes = new Election(new Redlock(urls, BOUND), `${resource}:observed`, 'observer').observe();
  const next = changes.next();
  endings.push(async () => {
    await changes.return();
    await next;
  });
}

async function lock() {
  const redlock = new Redlock(urls, ROOMY);
  const held = await redlock.acquire(`${resource}:locked`, 30_000);
  const abort = new AbortController();
  const waiting = redlock.acquire(`${resource}:locked`, 5_000, { wait: 60_000, signal: abort.signal });
  endings.push(async () => {
    abort.abort();
    await waiting.catch(() => {});
    await held.release();
    await redlock.settle();
  });
}

async function campaign() {
  const redlock = new Redlock(urls, BOUND);
  const name = `${resource}:elected`;
  const lead = await new Election(redlock, name, 'leader', { ttl: 30_000 }).campaign();
  const abort = new AbortController();
  const waiting = new Election(redlock, name, 'candidate', { ttl: 30_000 }).campaign({ signal: abort.signal });
  endings.push(async () => {
    abort.abort();
    await waiting.catch(() => {});
    await lead.resign();
    await redlock.settle();
  });
}

const starts = { observe, lock, campaign };
if (how === 'worker' && isMainThread) {
  const worker = new Worker(new URL(import.meta.url), { argv: process.argv.slice(2) });
  await new Promise((resolve) => worker.once('message', resolve));
} else {
  for (const start of what === 'all' ? Object.values(starts) : [starts[what]]) await start();
}
if (!isMainThread) {
  parentPort.postMessage('pending');
  // Ended by the main thread's process.exit.
  await new Promise(() => {});
}
process.stdout.write('pending\n');
process.stdin.once('data', async () => {
  if (how === 'exit' || how === 'worker') process.exit(3);
  process.stdin.destroy();
  await Promise.all(endings.map((end) => end()));
});
