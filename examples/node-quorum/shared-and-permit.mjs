// Shared locks and permits across the quorum.
// - A read-write lock: readers (`shared: true`) hold together, a writer
//   alone; waiting in one line, a reader never passes a writer ahead of it.
// - A semaphore: `limit: n` takes one of n permits; at most n holders.
//
//   node shared-and-permit.mjs
import { Redlock } from 'redislock';

import { servers } from './servers.mjs';

const redlock = new Redlock(servers);
const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Three readers and a writer on one read-write lock.
let readers = 0;
const log = [];
const reader = (name) =>
  redlock.using('catalog', 5_000, { wait: 90_000, shared: true }, async (_signal, lock) => {
    readers += 1;
    log.push(`${name} reads beside ${readers - 1} other reader(s) (token ${lock.token})`);
    await pause(100);
    readers -= 1;
  });
const writer = (name) =>
  redlock.using('catalog', 5_000, { wait: 90_000 }, async (_signal, lock) => {
    log.push(`${name} writes alone: ${readers} reader(s) inside (token ${lock.token})`);
    await pause(50);
  });
// Started 20 ms apart, so that they join the line in this order.
const started = [];
for (const start of [() => reader('reader 1'), () => reader('reader 2'), () => writer('writer'), () => reader('reader 3')]) {
  started.push(start());
  await pause(20);
}
await Promise.all(started);
console.log(log.join('\n'));

// Six jobs, a pool of two permits.
let inside = 0;
let most = 0;
const job = (i) =>
  redlock.using('api-pool', 5_000, { wait: 90_000, limit: 2 }, async (_signal, permit) => {
    inside += 1;
    most = Math.max(most, inside);
    console.log(`job ${i} holds ${permit.key} (${inside} of 2 permits taken)`);
    await pause(100);
    inside -= 1;
  });
await Promise.all([1, 2, 3, 4, 5, 6].map(job));
console.log(`at most ${most} jobs held a permit at once`);
await redlock.settle();
