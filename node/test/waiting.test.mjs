// Waiting: release after a routine that throws, and an AbortSignal that
// ends a wait and takes the waiter out of the line.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { NotAcquiredError, Redlock } from 'redislock';

import { ROOMY, resourceName, startServers, untilQueued } from './support/servers.mjs';

let cluster;
let redlock;

before(async () => {
  cluster = await startServers(5);
  redlock = new Redlock(cluster.urls, ROOMY);
});
after(async () => {
  await cluster?.stop();
});

test('a routine that throws: its error goes on and the lock is released at once', async () => {
  const resource = resourceName('throws');
  const boom = new Error('boom');
  await assert.rejects(
    redlock.using(resource, 30_000, async () => {
      throw boom;
    }),
    (e) => e === boom,
  );
  assert.deepEqual(await cluster.holdersAfterRelease(resource), []);
  // One attempt, no wait: free right away (not after the 30 s lease).
  const next = await redlock.acquire(resource, 1_000);
  await next.release();
});

test('an abort ends the wait: the promise rejects with the reason, and the waiter leaves the line', { timeout: 20_000 }, async () => {
  const resource = resourceName('abort');
  const holder = await redlock.acquire(resource, 30_000);
  const controller = new AbortController();
  // First in line, with a long wait and lease: if it stayed in line it
  // would take the lock at the release and hold it for 30 s.
  const first = redlock.acquire(resource, 30_000, { wait: 30_000, signal: controller.signal });
  await untilQueued(cluster, resource, 1);
  // Second in line, behind it.
  const second = redlock.acquire(resource, 5_000, { wait: 8_000 });
  await untilQueued(cluster, resource, 2);
  const reason = new Error('gave up');
  controller.abort(reason);
  await assert.rejects(first, (e) => e === reason);
  await holder.release();
  const lock = await second;
  assert.ok(lock.token > holder.token);
  await lock.release();
  assert.deepEqual(await cluster.holdersAfterRelease(resource), []);
});

test('an AbortSignal aborted before the call rejects at once; a wait with no abort still works', async () => {
  const resource = resourceName('pre-aborted');
  await assert.rejects(redlock.acquire(resource, 1_000, { wait: 1_000, signal: AbortSignal.abort() }), { name: 'AbortError' });
  assert.deepEqual(await cluster.holders(resource), []);
  const lock = await redlock.acquire(resource, 1_000, { wait: 1_000, signal: new AbortController().signal });
  await lock.release();
});

test('using waits in line for a held lock, and an abort ends that wait too', { timeout: 20_000 }, async () => {
  const resource = resourceName('using-wait');
  const holder = await redlock.acquire(resource, 30_000);
  const controller = new AbortController();
  let ran = false;
  const waiting = redlock.using(resource, 1_000, { signal: controller.signal }, async () => {
    ran = true;
  });
  await untilQueued(cluster, resource, 1);
  controller.abort();
  await assert.rejects(waiting, { name: 'AbortError' });
  assert.equal(ran, false);
  // A timed wait while it is still held gives up with NotAcquiredError.
  await assert.rejects(redlock.using(resource, 1_000, { wait: 200 }, async () => {}), NotAcquiredError);
  await holder.release();
  assert.equal(await redlock.using(resource, 1_000, async () => 'ran'), 'ran');
});
