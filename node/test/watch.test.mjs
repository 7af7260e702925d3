// Redlock.watch (issue 61): a lock's changes as a quorum of servers
// announced them, through the crate's stream, each once and in order.
// These servers are this file's own.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { Redlock } from 'redislock';

import { ROOMY, call, resourceName, startServers } from './support/servers.mjs';

let cluster;
let redlock;

before(async () => {
  cluster = await startServers(5);
  for (const s of cluster.servers) await call(s.port, 'CONFIG', 'SET', 'redislock.notify', 'node-test:watched:*');
  redlock = new Redlock(cluster.urls, ROOMY);
});
after(async () => {
  await cluster?.stop();
});

test('watch yields each grant and release once, in order, with the lock\'s token, and stops when the loop ends', { timeout: 60_000 }, async () => {
  const resource = resourceName('watched:job');
  const seen = [];
  let wake = () => {};
  const loop = (async () => {
    for await (const change of redlock.watch(resource)) {
      seen.push(change);
      wake();
      if (seen.length === 4) break;
    }
  })();
  const saw = async (n) => {
    while (seen.length < n) await new Promise((resolve) => { wake = resolve; });
  };
  // The watch subscribes first: a hold taken before it is read, not missed.
  const first = await redlock.acquire(resource, 30_000);
  await saw(1);
  await first.release();
  await saw(2);
  const second = await redlock.acquire(resource, 30_000);
  await saw(3);
  await second.release();
  await loop;
  assert.deepEqual(seen.map((c) => c.kind), ['grant', 'release', 'grant', 'release']);
  assert.equal(seen[0].token, first.token, 'the grant carries the lock\'s token');
  assert.equal(seen[1].token, first.token);
  assert.equal(seen[2].token, second.token);
  assert.ok(second.token > first.token, 'tokens rise');
  assert.equal(seen[0].owner, seen[1].owner, 'an end names its grant\'s hold');
  assert.notEqual(seen[0].owner, seen[2].owner, 'each acquisition is a hold of its own');
  for (const c of seen) assert.equal(typeof c.token, 'bigint');
});

test('watch checks its argument', () => {
  assert.throws(() => redlock.watch(42), /resource/);
});
