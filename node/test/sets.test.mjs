// Several resources in one lock (node-redlock's array form: all or
// nothing, one token, released together) and several permits of a
// semaphore in one hold (`{ permits }`), on five real servers.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';

import { ConfigError, NotAcquiredError, Redlock } from 'redislock';

import { ROOMY, resourceName, startServers } from './support/servers.mjs';

let cluster;
let redlock;

before(async () => {
  cluster = await startServers(5);
  redlock = new Redlock(cluster.urls, ROOMY);
});
after(async () => {
  await cluster?.stop();
});

test('an array is taken all or nothing, with one token, and released together', async () => {
  const a = resourceName('set-a');
  const b = resourceName('set-b');
  const earlier = await redlock.acquire(a, 10_000);
  await earlier.release();
  const other = await redlock.acquire(b, 10_000);

  const refused = await redlock.acquire([a, b], 10_000).then(() => assert.fail('acquired with b held'), (e) => e);
  assert.ok(refused instanceof NotAcquiredError);
  assert.equal(refused.resource, `${a}, ${b}`);
  // A refused set takes nothing: its free member stays free everywhere.
  assert.deepEqual(await cluster.holders(a), []);
  await assert.rejects(redlock.acquire([a, b], 10_000, { wait: 300 }), NotAcquiredError);
  assert.deepEqual(await cluster.holders(a), []);
  await other.release();

  const names = [a, b];
  const lock = await redlock.acquire(names, 10_000, { wait: 5_000 });
  names.push('changed later');
  assert.deepEqual(lock.resources, [a, b]);
  assert.equal(lock.resource, `${a}, ${b}`);
  assert.ok(lock.token > earlier.token && lock.token > other.token, `token ${lock.token}`);
  const heldA = (await cluster.holders(a)).map((s) => s.name);
  const heldB = (await cluster.holders(b)).map((s) => s.name);
  assert.ok(heldA.length >= 3, `a held on ${heldA}`);
  assert.deepEqual(heldA, heldB, 'both members on the same servers');
  for (const server of cluster.servers.filter((s) => heldA.includes(s.name))) {
    assert.equal((await server.lockInfo(a)).owner, lock.owner);
    assert.equal((await server.lockInfo(b)).owner, lock.owner);
  }
  await assert.rejects(redlock.acquire(b, 10_000), NotAcquiredError);
  await lock.extend(20_000);
  await lock.release();
  assert.deepEqual(await cluster.holders(a), []);
  assert.deepEqual(await cluster.holders(b), []);

  // using() takes the array form too, and releases the whole set.
  const value = await redlock.using([b, a], 10_000, async (signal, held) => {
    assert.deepEqual(held.resources, [b, a]);
    assert.equal((await cluster.holders(a)).length >= 3, true);
    return 'done';
  });
  assert.equal(value, 'done');
  assert.deepEqual(await cluster.holders(a), []);
  assert.deepEqual(await cluster.holders(b), []);
});

test('several permits in one hold: 3 + 3 of 5 refused, 3 + 2 granted', async () => {
  const sem = resourceName('permits');
  const three = await redlock.acquire(sem, 10_000, { limit: 5, permits: 3 });
  assert.equal(three.resource, sem);
  assert.deepEqual(three.resources, [sem]);
  await assert.rejects(redlock.acquire(sem, 10_000, { limit: 5, permits: 3 }), NotAcquiredError);
  const two = await redlock.acquire(sem, 10_000, { limit: 5, permits: 2, keep: true });
  await assert.rejects(redlock.acquire(sem, 10_000, { limit: 5 }), NotAcquiredError);
  await three.release();
  const again = await redlock.using(sem, 10_000, { limit: 5, permits: 3 }, async (signal, lock) => lock.token);
  assert.ok(again > three.token);
  await two.release();
  for (let i = 0; i < 5; i += 1) assert.deepEqual(await cluster.holders(`${sem}:permit:${i}`), []);
});

test('bad arrays and permits are refused before any server is asked', async () => {
  const rejectsWith = async (promise, cls, name) => {
    await assert.rejects(promise, (e) => e instanceof cls && e.message.includes(name), name);
  };
  const r = resourceName('bad-sets');
  await rejectsWith(redlock.acquire([r, r], 1000), ConfigError, 'named twice');
  await rejectsWith(redlock.acquire([], 1000), ConfigError, 'no resource');
  await rejectsWith(redlock.acquire([r, 7], 1000), TypeError, 'resource');
  await rejectsWith(redlock.acquire(new Set([r]), 1000), TypeError, 'resource');
  await rejectsWith(redlock.acquire([r, `${r}:b`], 1000, { limit: 2 }), ConfigError, 'one semaphore');
  await rejectsWith(redlock.acquire(r, 1000, { permits: 2 }), ConfigError, 'options.permits');
  for (const permits of [0, 6, 1.5, NaN]) await rejectsWith(redlock.acquire(r, 1000, { limit: 5, permits }), ConfigError, 'options.permits');
  await rejectsWith(redlock.acquire(r, 1000, { limit: 5, permits: '2' }), TypeError, 'options.permits');
  await rejectsWith(redlock.using([r, r], 1000, async () => {}), ConfigError, 'named twice');
  assert.deepEqual(await cluster.holders(r), []);
});

test('a ring of three contenders, each locking two of three resources: none held twice, all served', { timeout: 120_000 }, async (t) => {
  const forks = [0, 1, 2].map((i) => resourceName(`fork${i}`));
  const holds = []; // { fork, granted, released, token, who }
  const meals = [0, 0, 0];
  const end = performance.now() + 2_000;
  const philosopher = async (i) => {
    const mine = [forks[i], forks[(i + 1) % 3]];
    // About 2 s, and at least one meal each however slow the machine: a
    // contender never served fails by its wait.
    while (meals[i] === 0 || performance.now() < end) {
      await redlock.using(mine, 10_000, { wait: 60_000 }, async (signal, lock) => {
        const granted = performance.now();
        await sleep(5); // eating: long enough for an overlap to show
        const released = performance.now();
        for (const fork of mine) holds.push({ fork, granted, released, token: lock.token, who: i });
      });
      meals[i] += 1;
    }
  };
  await Promise.all([0, 1, 2].map(philosopher));
  assert.ok(meals.every((m) => m > 0), `every contender is served: ${meals}`);
  t.diagnostic(`meals ${meals}`);
  for (const fork of forks) {
    const history = holds.filter((h) => h.fork === fork).sort((x, y) => x.granted - y.granted);
    for (let k = 1; k < history.length; k += 1) {
      const [before, next] = [history[k - 1], history[k]];
      assert.ok(before.released <= next.granted, `${fork} held by ${before.who} and ${next.who} at once`);
      assert.ok(before.token < next.token, `${fork}'s tokens grow in grant order`);
    }
    assert.deepEqual(await cluster.holders(fork), []);
  }
});
