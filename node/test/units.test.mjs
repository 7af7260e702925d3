// Durations carry their unit (issue 56): a bare number is milliseconds, a
// string ('10s', '500ms': the CLI's, parsed by the Rust crate) says its
// own; a bare number too small to be meant in milliseconds is a
// RangeError (ERR_OUT_OF_RANGE) naming the unit and the fix; host:port is
// redis://host:port, as for the CLI and Python; each error code is the one
// docs/node.md gives, and the lockDelay default the one it states.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { after, before, test } from 'node:test';

import { ConfigError, Election, Redlock } from 'redislock';

import { ROOMY, resourceName, startServers } from './support/servers.mjs';

const docs = readFileSync(new URL('../../docs/node.md', import.meta.url), 'utf8');
let cluster;
let redlock;

before(async () => {
  cluster = await startServers(5);
  redlock = new Redlock(cluster.urls, ROOMY);
});
after(async () => {
  await cluster?.stop();
});

const outOfRange = (pattern) => (e) => e instanceof RangeError && e.code === 'ERR_OUT_OF_RANGE' && pattern.test(e.message);

test('a bare number meant in seconds is refused naming the unit and the fix', async () => {
  const r = resourceName('seconds');
  await assert.rejects(redlock.acquire(r, 10), outOfRange(/^ttl 10 is in milliseconds \(10 ms\).*: for 10 s write 10000 or '10s'/));
  await assert.rejects(redlock.acquire(r, 10_000, { wait: 5 }), outOfRange(/^options\.wait 5 is in milliseconds \(5 ms\)/));
  await assert.rejects(redlock.using(r, 30, async () => assert.fail('ran')), outOfRange(/^ttl 30 is in milliseconds/));
  assert.throws(
    () => new Redlock(cluster.urls, { requestTimeout: 5 }),
    outOfRange(/^options\.requestTimeout 5 is in milliseconds \(5 ms\).*: for 5 s write 5000 or '5s'/),
  );
  assert.throws(() => new Redlock(cluster.urls, { connectTimeout: 2 }), outOfRange(/^options\.connectTimeout 2 is in milliseconds/));
  assert.throws(() => new Redlock(cluster.urls, { releaseOnDisconnect: true, lockDelay: 5 }), outOfRange(/^options\.lockDelay 5 is in milliseconds/));
  assert.throws(
    () => new Election(new Redlock(cluster.urls, { releaseOnDisconnect: true }), 'e', 'v', { ttl: 10 }),
    outOfRange(/^ttl 10 is in milliseconds/),
  );
  const lock = await redlock.acquire(r, 5_000);
  await assert.rejects(lock.extend(20), outOfRange(/^ttl 20 is in milliseconds/));
  assert.equal(lock.ttl, 5_000);
  await lock.release();
  // 0 is no slip of units: one round, no wait.
  const once = await redlock.acquire(r, 1_000, { wait: 0 });
  await once.release();
  assert.deepEqual(await cluster.holders(r), []);
  await redlock.settle();
});

test('durations as strings with their unit', async () => {
  const r = resourceName('strings');
  const client = new Redlock(cluster.urls, { requestTimeout: '1s', connectTimeout: '2s', retryDelay: '150ms', retryJitter: '50ms' });
  const lock = await client.acquire(r, '10s', { wait: '5s' });
  assert.equal(lock.ttl, 10_000);
  assert.equal((await cluster.holders(r)).length, 5);
  await lock.extend('1m');
  assert.equal(lock.ttl, 60_000);
  await lock.release();
  await assert.rejects(
    client.acquire(r, 'ten seconds'),
    (e) => e instanceof ConfigError && e.code === 'ERR_REDLOCK_CONFIG' && e.message.startsWith('ttl: "ten seconds" is not a duration'),
  );
  const election = new Election(new Redlock(cluster.urls, { releaseOnDisconnect: true }), 'e', 'v', { ttl: '30s', observeInterval: '200ms' });
  assert.equal(election.ttl, 30_000);
  assert.deepEqual(await cluster.holders(r), []);
  await client.settle();
});

test('host:port without a scheme is redis://host:port', async () => {
  const bare = cluster.urls.map((u) => u.slice('redis://'.length));
  assert.ok(bare.every((b) => !b.includes('://')));
  const client = new Redlock(bare, ROOMY);
  assert.deepEqual(client.servers, redlock.servers);
  const r = resourceName('bare');
  const lock = await client.acquire(r, 5_000);
  assert.equal((await cluster.holders(r)).length, 5);
  await lock.release();
  await client.settle();
  // Refused with the words of the same entry with its scheme.
  const thrown = (fn) => {
    try {
      fn();
    } catch (e) {
      return e;
    }
    return assert.fail('accepted');
  };
  for (const entry of ['127.0.0.1:port', '127.0.0.1:99999']) {
    const [bareError, urlError] = [thrown(() => new Redlock([entry])), thrown(() => new Redlock([`redis://${entry}`]))];
    assert.ok(bareError instanceof ConfigError && urlError instanceof ConfigError);
    const words = urlError.message.split(`${entry}: `).at(-1);
    assert.ok(words.includes('port') && bareError.message.endsWith(`${entry}: ${words}`), `${bareError.message} | ${urlError.message}`);
  }
});

test('each error code is the one docs/node.md gives', async () => {
  const r = resourceName('codes');
  // The case each documented code is thrown in.
  const cases = {
    ERR_INVALID_ARG_TYPE: [TypeError, () => redlock.acquire(r, [1_000])],
    ERR_INVALID_ARG_VALUE: [TypeError, () => redlock.acquire(r, 1_000, { tries: 3 })],
    ERR_OUT_OF_RANGE: [RangeError, () => redlock.acquire(r, 10)],
    ERR_REDLOCK_CONFIG: [ConfigError, () => redlock.acquire(r, -1)],
  };
  const rows = [...docs.matchAll(/^\| `(\w+)`[^|]*\| `(ERR_[A-Z_]+)` \|/gm)].map((m) => [m[1], m[2]]);
  for (const [code, [cls, call]] of Object.entries(cases)) {
    const row = rows.find(([, c]) => c === code);
    assert.ok(row, `docs/node.md has no row for ${code}`);
    assert.equal(row[0], cls.name, `docs/node.md: ${code} is a ${row[0]}`);
    await assert.rejects(call(), (e) => e instanceof cls && e.code === code, code);
  }
  assert.throws(() => new Redlock(cluster.urls, { retryDelayMs: 3 }), (e) => e instanceof TypeError && e.code === 'ERR_INVALID_ARG_VALUE');
  assert.deepEqual(await cluster.holders(r), []);
});

test('the lockDelay default is the one docs/node.md states', () => {
  const stated = docs.replace(/\s+/g, ' ').match(/\(([\d,]+) ms for a 30 s ttl with the default options\)/);
  assert.ok(stated, 'docs/node.md states no lockDelay for a 30 s ttl');
  const election = new Election(new Redlock(cluster.urls, { releaseOnDisconnect: true }), 'delay', 'v', { ttl: 30_000 });
  assert.equal(Math.round(election.lockDelay), Number(stated[1].replaceAll(',', '')));
  assert.ok(election.lockDelay > 10_000, 'not 0: the safe default');
});
