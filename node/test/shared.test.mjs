// Shared holds of a read-write lock and permits of a semaphore, many
// routines on one Redlock through `using`: every hold is counted while it
// lasts, so a writer beside anyone, or more permit holders than the
// limit, is seen. And the counts must reach what is allowed (several
// readers at once, `limit` permit holders at once): a read-write lock
// that excluded readers, or a semaphore of one, would fail too.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { Redlock } from 'redislock';

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

const pause = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs `loop(i)` in `n` routines until `ms` passed. */
async function during(ms, n, loop) {
  const end = Date.now() + ms;
  await Promise.all(
    Array.from({ length: n }, async (_, i) => {
      while (Date.now() < end) await loop(i);
    }),
  );
}

test('readers hold together, a writer alone; writers are not starved', { timeout: 60_000 }, async () => {
  const resource = resourceName('rw');
  const READERS = 6;
  const WRITERS = 2;
  let readers = 0;
  let writers = 0;
  let mostReaders = 0;
  let violations = 0;
  const grants = { reader: 0, writer: 0 };
  await during(1_500, READERS + WRITERS, async (i) => {
    const shared = i < READERS;
    await redlock.using(resource, 5_000, { wait: 20_000, shared }, async (signal, lock) => {
      assert.equal(lock.shared, shared);
      if (shared) {
        readers += 1;
        mostReaders = Math.max(mostReaders, readers);
        if (writers > 0) violations += 1;
      } else {
        writers += 1;
        if (writers > 1 || readers > 0) violations += 1;
      }
      grants[shared ? 'reader' : 'writer'] += 1;
      await pause(5);
      if (shared) readers -= 1;
      else writers -= 1;
    });
  });
  assert.equal(violations, 0, 'a writer held beside another holder');
  assert.ok(mostReaders >= 2, `readers never held together (most at once: ${mostReaders})`);
  assert.ok(grants.writer >= 2 && grants.reader >= READERS, JSON.stringify(grants));
  assert.deepEqual(await cluster.holdersAfterRelease(resource), []);
});

test('permits: never more holders than the limit, and the limit is reached', { timeout: 60_000 }, async () => {
  const resource = resourceName('semaphore');
  const LIMIT = 2;
  const ROUTINES = 6;
  let inside = 0;
  let most = 0;
  let over = 0;
  const perRoutine = Array(ROUTINES).fill(0);
  const lastToken = new Map();
  let tokenBackwards = 0;
  await during(1_500, ROUTINES, async (i) => {
    await redlock.using(resource, 5_000, { wait: 20_000, limit: LIMIT }, async (signal, lock) => {
      inside += 1;
      most = Math.max(most, inside);
      if (inside > LIMIT) over += 1;
      assert.match(lock.key, new RegExp(`:permit:[0-${LIMIT - 1}]$`));
      // Each permit's holders are ordered by its tokens.
      if (lastToken.has(lock.key) && !(lock.token > lastToken.get(lock.key))) tokenBackwards += 1;
      lastToken.set(lock.key, lock.token);
      perRoutine[i] += 1;
      await pause(10);
      inside -= 1;
    });
  });
  assert.equal(over, 0, `more than ${LIMIT} held permits at once (most: ${most})`);
  assert.equal(most, LIMIT, `never ${LIMIT} holders at once`);
  assert.equal(tokenBackwards, 0, 'a permit\'s token went backwards');
  assert.ok(perRoutine.every((n) => n > 0), `a routine got no permit: ${perRoutine}`);
  for (let slot = 0; slot < LIMIT; slot++) assert.deepEqual(await cluster.holdersAfterRelease(`${resource}:permit:${slot}`), []);
});

test('resize: a held semaphore shrinks and grows, and a free one is not resized', { timeout: 60_000 }, async () => {
  const { ConfigError, NotAcquiredError } = await import('redislock');
  const resource = resourceName('resized');
  assert.deepEqual(await redlock.resize(resource, 2), { held: false, resized: 0 });
  const held = [];
  for (let i = 0; i < 3; i += 1) held.push(await redlock.acquire(resource, 10_000, { limit: 3 }));
  const shrunk = await redlock.resize(resource, 1);
  assert.equal(shrunk.held, true);
  assert.equal(shrunk.resized, cluster.urls.length);
  // Three hold, two above the new limit: nobody new, whatever limit asked.
  for (const limit of [3, 1]) {
    await assert.rejects(redlock.acquire(resource, 10_000, { limit }), NotAcquiredError);
  }
  const grown = await redlock.resize(resource, 4);
  assert.equal(grown.held, true);
  // Asked under the old limit 3, the fourth permit is found under the new one.
  const fourth = await redlock.acquire(resource, 10_000, { limit: 3 });
  assert.equal(fourth.key, `${resource}:permit:3`);
  for (const lock of [...held, fourth]) await lock.release();
  await assert.rejects(() => redlock.resize(resource, 0), ConfigError);
  await assert.rejects(() => redlock.resize(resource, 2.5), ConfigError);
});
