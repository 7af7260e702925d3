// Redlock.ask and Lock.asks (issue 61): a holder hears each ask for its
// own hold once although five servers announce it, with its message; the
// asks end with the hold; a holder that lets go on an ask lets a waiter
// in. These servers are this file's own.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { Redlock } from 'redislock';

import { ROOMY, resourceName, startServers, untilQueued } from './support/servers.mjs';

let cluster;
let redlock;
let asker;

before(async () => {
  cluster = await startServers(5);
  redlock = new Redlock(cluster.urls, ROOMY);
  asker = new Redlock(cluster.urls, ROOMY);
});
after(async () => {
  await cluster?.stop();
});

/**
 * Until every server has `n` subscribers on `resource`'s channel: asks
 * made from then on reach the holders reading them. Polled, never assumed
 * after a sleep.
 */
async function untilSubscribed(resource, n) {
  const channel = `__redislock@0__:${resource}`;
  for (;;) {
    const counts = await Promise.all(cluster.servers.map((s) => s.call('PUBSUB', 'NUMSUB', channel)));
    if (counts.every((c) => Number(c[1]) >= n)) return;
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

test('a holder hears each ask once, with its message, and its asks end when it releases', { timeout: 60_000 }, async () => {
  const resource = resourceName('asked');
  const lock = await redlock.acquire(resource, 30_000);
  const asks = lock.asks();
  // The first read subscribes.
  const first = asks.next();
  await untilSubscribed(resource, 1);

  const asked = await asker.ask(resource, 'deploy at 10:00');
  assert.deepEqual(asked, { asked: 1, answered: 5 });
  assert.deepEqual(await first, { value: { resource, message: 'deploy at 10:00' }, done: false });
  // Five servers announced it: the next item is the next ask, not another
  // server's copy of the first.
  await asker.ask(resource);
  assert.deepEqual(await asks.next(), { value: { resource, message: null }, done: false }, 'the second ask, without a message');
  await asker.ask(resource, 'third');
  assert.deepEqual(await asks.next(), { value: { resource, message: 'third' }, done: false });
  assert.equal(lock.lost, false, 'an ask changes nothing');
  assert.equal(lock.released, false, 'an ask releases nothing');

  await lock.release();
  assert.deepEqual(await asks.next(), { value: undefined, done: true }, 'released, the asks end');
});

test('a holder that lets go on an ask lets a waiter in', { timeout: 60_000 }, async () => {
  const resource = resourceName('handed');
  const holder = await redlock.acquire(resource, 30_000, { keep: true });
  const heard = [];
  const letting = (async () => {
    for await (const ask of holder.asks()) {
      heard.push(ask);
      await holder.release();
    }
  })();
  await untilSubscribed(resource, 1);
  const waiting = asker.acquire(resource, 30_000, { wait: Infinity });
  await untilQueued(cluster, resource, 1);
  assert.deepEqual(await asker.ask(resource, 'my turn'), { asked: 1, answered: 5 });
  const waiter = await waiting;
  // The loop ends by itself: the release ended the asks.
  await letting;
  assert.deepEqual(heard, [{ resource, message: 'my turn' }]);
  assert.equal(holder.released, true);
  assert.ok(waiter.token > holder.token, 'the waiter holds it now, with a larger token');
  await waiter.release();
});

test('an ask of a free lock asks nobody; asks of a released lock end at once', { timeout: 60_000 }, async () => {
  const resource = resourceName('free');
  assert.deepEqual(await asker.ask(resource, 'anyone?'), { asked: 0, answered: 5 });
  const lock = await redlock.acquire(resource, 30_000);
  await lock.release();
  assert.deepEqual(await lock.asks().next(), { value: undefined, done: true });
});

test('ask checks its arguments', async () => {
  await assert.rejects(asker.ask(42), { name: 'TypeError', message: /resource/ });
  await assert.rejects(asker.ask('x', 5), { name: 'TypeError', message: /message/ });
});
