// Worker threads: each has a Node environment of its own, and the package
// settles each environment's Promises through a queue of that
// environment's (node/src/settle.rs). These servers are this file's own.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { after, before, test } from 'node:test';
import { Worker } from 'node:worker_threads';

import { Redlock } from 'redislock';

import { ROOMY, resourceName, startServers, untilQueued } from './support/servers.mjs';

let cluster;

before(async () => {
  cluster = await startServers(5);
});
after(async () => {
  await cluster?.stop();
});

const thread = (data) => new Worker(new URL('./support/thread.mjs', import.meta.url), { workerData: { urls: cluster.urls, options: ROOMY, ...data } });

test('threads lock at once, each settled on its own thread, and each ends by itself', { timeout: 60_000 }, async () => {
  const redlock = new Redlock(cluster.urls, ROOMY);
  const COUNT = 50;
  const threads = [0, 1].map(() => thread({ resource: resourceName('thread'), task: 'cycles', count: COUNT }));
  const made = threads.map((t) => once(t, 'message'));
  // Exit events come only if nothing keeps a thread's event loop alive
  // once its calls are settled (the test's timeout fails it otherwise).
  const exited = threads.map((t) => once(t, 'exit'));
  const mine = resourceName('main');
  for (let i = 0; i < COUNT; i += 1) await (await redlock.acquire(mine, 10_000)).release();
  assert.deepEqual((await Promise.all(made)).map(([n]) => n), [COUNT, COUNT]);
  assert.deepEqual((await Promise.all(exited)).map(([code]) => code), [0, 0]);
  await redlock.settle();
});

test('a thread ended while its wait is pending: the process lives on, and the grant it was due is released', { timeout: 60_000 }, async () => {
  const redlock = new Redlock(cluster.urls, ROOMY);
  const resource = resourceName('ended');
  const held = await redlock.acquire(resource, 30_000);
  const waiter = thread({ resource, task: 'wait' });
  const messages = [];
  waiter.on('message', (m) => messages.push(m));
  // Its wait is in the resource's line: polled, not assumed.
  await untilQueued(cluster, resource, 1);
  await waiter.terminate();
  // The wait goes on in the runtime, and is granted now: its Promise went
  // with the thread, so the grant (a 30 s lease) must be released, not
  // settled into a freed environment.
  await held.release();
  const started = Date.now();
  const again = await redlock.acquire(resource, 10_000, { wait: 10_000 });
  assert.ok(Date.now() - started < 5_000, `the grant due to the ended thread kept the lock ${Date.now() - started} ms`);
  await again.release();
  assert.deepEqual(messages, ['asking']);
  await redlock.settle();
});
