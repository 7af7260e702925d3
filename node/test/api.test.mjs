// The API on five real servers: acquire, extend, release, tokens, the
// properties, `await using`'s dispose, CommonJS and ESM, and the errors.
import assert from 'node:assert/strict';
import { createRequire } from 'node:module';
import { after, before, test } from 'node:test';

import * as esm from 'redislock';
import { ConfigError, Lock, LockLostError, LockReleasedError, NotAcquiredError, QuorumUnreachableError, Redlock, RedlockError } from 'redislock';

import { ROOMY, resourceName, startServers } from './support/servers.mjs';

const require = createRequire(import.meta.url);
let cluster;
let redlock;

before(async () => {
  cluster = await startServers(5);
  redlock = new Redlock(cluster.urls, ROOMY);
});
after(async () => {
  await cluster?.stop();
});

test('CommonJS and ESM give the same classes', () => {
  const cjs = require('redislock');
  assert.equal(cjs.Redlock, Redlock);
  assert.equal(esm.default.Redlock, Redlock);
  for (const name of ['Redlock', 'Lock', 'RedlockError', 'NotAcquiredError', 'QuorumUnreachableError', 'LockLostError', 'ConfigError']) {
    assert.equal(typeof cjs[name], 'function', name);
    assert.equal(esm[name], cjs[name], name);
  }
});

test('quorum and servers', () => {
  assert.equal(redlock.quorum, 3);
  assert.deepEqual(redlock.servers, cluster.servers.map((s) => s.name));
  assert.equal(new Redlock(cluster.urls, { quorum: 5 }).quorum, 5);
  assert.equal(new Redlock(cluster.urls[0]).quorum, 1);
});

test('acquire, extend and release: held on every server, with one fencing token', async () => {
  const resource = resourceName('basic');
  const lock = await redlock.acquire(resource, 10_000);
  assert.ok(lock instanceof Lock);
  assert.equal(lock.resource, resource);
  assert.equal(lock.key, resource);
  assert.equal(typeof lock.token, 'bigint');
  assert.match(lock.owner, /^[0-9a-f]{40}$/);
  assert.equal(lock.ttl, 10_000);
  assert.ok(lock.validity > 9_000 && lock.validity <= 10_000, `validity ${lock.validity}`);
  assert.ok(lock.expiration > Date.now() + 9_000);
  assert.equal(lock.shared, false);
  assert.equal(lock.lost, false);
  assert.equal(lock.released, false);
  assert.equal(lock.kept, false);
  assert.equal(lock.outcomes.length, 5);
  assert.ok(lock.outcomes.every((o) => o.kind === 'granted'), JSON.stringify(lock.outcomes));
  for (const server of cluster.servers) {
    const info = await server.lockInfo(resource);
    assert.equal(info.owner, lock.owner);
    assert.equal(info.token, lock.token);
  }

  assert.equal(await lock.extend(30_000), lock);
  assert.equal(lock.ttl, 30_000);
  assert.ok(lock.validity > 29_000);
  const pttl = (await cluster.servers[0].lockInfo(resource)).pttl;
  assert.ok(pttl > 29_000n, `pttl ${pttl}`);

  const released = await lock.release();
  assert.equal(released.released, 5);
  assert.equal(lock.released, true);
  assert.equal(lock.validity, 0);
  assert.deepEqual(await cluster.holders(resource), []);
  await assert.rejects(lock.release(), LockReleasedError);
  await assert.rejects(lock.extend(1000), LockReleasedError);

  // A later holder's token is larger.
  const again = await redlock.acquire(resource, 10_000);
  assert.ok(again.token > lock.token, `${again.token} > ${lock.token}`);
  await again.release();
});

test('a held lock is not acquired again: NotAcquiredError with each server\'s outcome', async () => {
  const resource = resourceName('held');
  const lock = await redlock.acquire(resource, 10_000);
  const other = new Redlock(cluster.urls, ROOMY);
  const err = await other.acquire(resource, 10_000).then(
    () => assert.fail('acquired a held lock'),
    (e) => e,
  );
  assert.ok(err instanceof NotAcquiredError);
  assert.ok(err instanceof RedlockError);
  assert.ok(!(err instanceof QuorumUnreachableError));
  assert.equal(err.code, 'ERR_REDLOCK_NOT_ACQUIRED');
  assert.equal(err.reason, 'held');
  assert.equal(err.resource, resource);
  assert.equal(err.attempts, 1);
  assert.equal(err.outcomes.length, 5);
  assert.deepEqual(err.outcomes.map((o) => o.server), cluster.servers.map((s) => s.name));
  assert.ok(err.outcomes.every((o) => o.kind === 'refused'), JSON.stringify(err.outcomes));
  // With retries: still refused, after retryCount + 1 attempts.
  const retried = await new Redlock(cluster.urls, { ...ROOMY, retryCount: 2, retryDelay: 10, retryJitter: 5 })
    .acquire(resource, 1000, { retry: true })
    .then(() => assert.fail('acquired a held lock'), (e) => e);
  assert.ok(retried instanceof NotAcquiredError);
  assert.equal(retried.attempts, 3);
  // Waiting gives up at its deadline.
  const started = Date.now();
  await assert.rejects(other.acquire(resource, 1000, { wait: 300 }), NotAcquiredError);
  assert.ok(Date.now() - started >= 250, `gave up after ${Date.now() - started} ms`);
  await lock.release();
});

test('no quorum reachable: QuorumUnreachableError naming each server', async () => {
  // Ports nobody listens on: one of ours, stopped, would do too.
  const dead = new Redlock(['redis://127.0.0.1:1', 'redis://127.0.0.1:2', 'redis://127.0.0.1:3']);
  const err = await dead.acquire(resourceName('unreachable'), 1000).then(() => assert.fail('acquired'), (e) => e);
  assert.ok(err instanceof QuorumUnreachableError);
  assert.ok(err instanceof NotAcquiredError);
  assert.equal(err.code, 'ERR_REDLOCK_QUORUM_UNREACHABLE');
  assert.equal(err.reason, 'no_quorum');
  assert.deepEqual(err.outcomes.map((o) => o.kind), ['connection_refused', 'connection_refused', 'connection_refused']);
});

test('reenter: another hold of the same acquisition; the last release frees the lock', async () => {
  const resource = resourceName('reenter');
  const lock = await redlock.acquire(resource, 10_000);
  const again = lock.reenter();
  assert.ok(again instanceof Lock);
  assert.equal(lock.holds, 2);
  assert.equal(again.holds, 2);
  assert.equal(again.token, lock.token);
  assert.equal(again.owner, lock.owner);
  // Reentrancy belongs to the holder, not the handle: a new acquisition
  // through the same Redlock is another owner, refused.
  await assert.rejects(redlock.acquire(resource, 10_000), NotAcquiredError);

  await lock.release();
  assert.equal(lock.released, true);
  assert.equal(again.released, false);
  assert.equal(again.holds, 1);
  assert.equal((await cluster.holders(resource)).length, 5);
  await assert.rejects(lock.release(), LockReleasedError);
  assert.throws(() => lock.reenter(), LockReleasedError);
  await again.extend(10_000); // the holds share the lock's state
  await again.release();
  assert.deepEqual(await cluster.holders(resource), []);

  // A kept lock: the re-entered hold is kept too, and its release leaves
  // the lock held (and extended) until the last one.
  const kept = await redlock.acquire(resource, 600, { keep: true });
  const inner = kept.reenter();
  assert.equal(inner.kept, true);
  assert.equal(inner.holds, 2);
  await inner.release();
  await new Promise((resolve) => setTimeout(resolve, 900)); // past the first ttl
  assert.equal(kept.lost, false);
  assert.equal((await cluster.holders(resource)).length, 5);
  await kept.release();
  assert.deepEqual(await cluster.holders(resource), []);

  // A routine of `using` may re-enter its lock: using ends once the
  // routine's own holds are released.
  const value = await redlock.using(resource, 5_000, async (_signal, held) => {
    const nested = held.reenter();
    await nested.release();
    return held.holds;
  });
  assert.equal(value, 1);
  assert.deepEqual(await cluster.holders(resource), []);
});

test('Symbol.asyncDispose releases the lock (await using)', async () => {
  const resource = resourceName('dispose');
  assert.equal(typeof Symbol.asyncDispose, 'symbol');
  const lock = await redlock.acquire(resource, 10_000);
  assert.equal(typeof lock[Symbol.asyncDispose], 'function');
  assert.equal((await cluster.holders(resource)).length, 5);
  await lock[Symbol.asyncDispose]();
  assert.equal(lock.released, true);
  assert.deepEqual(await cluster.holders(resource), []);
  await lock[Symbol.asyncDispose](); // released already: nothing to do
});

test('a kept lock outlives its ttl; a plain one expires and is lost', async () => {
  const kept = await redlock.acquire(resourceName('kept'), 500, { keep: true });
  const plain = await redlock.acquire(resourceName('plain'), 500);
  assert.equal(kept.kept, true);
  // Past the ttl: the plain lock's validity is over (its own clock, no event to await).
  await new Promise((resolve) => setTimeout(resolve, 900));
  assert.equal(kept.lost, false);
  assert.ok(kept.validity > 0);
  assert.equal((await cluster.holders(kept.resource)).length, 5);
  assert.equal(plain.lost, true);
  assert.equal(plain.validity, 0);
  await assert.rejects(plain.extend(1000), LockLostError);
  await kept.release();
  assert.deepEqual(await cluster.holders(kept.resource), []);
});

test('the servers refuse a ttl over their max-ttl: ConfigError naming it', async () => {
  const err = await redlock.acquire(resourceName('max-ttl'), 3_600_001).then(() => assert.fail('acquired'), (e) => e);
  assert.ok(err instanceof ConfigError);
  assert.equal(err.code, 'ERR_REDLOCK_CONFIG');
  assert.equal(err.reason, 'max_ttl');
});

test('a permit is a lock of its own key; shared holds go together', async () => {
  const sem = resourceName('permits');
  const a = await redlock.acquire(sem, 10_000, { limit: 2 });
  const b = await redlock.acquire(sem, 10_000, { limit: 2 });
  assert.equal(a.resource, sem);
  assert.match(a.key, new RegExp(`^${sem}:permit:[01]$`));
  assert.notEqual(a.key, b.key);
  await assert.rejects(redlock.acquire(sem, 10_000, { limit: 2 }), NotAcquiredError);
  await a.release();
  const c = await redlock.acquire(sem, 10_000, { limit: 2 });
  await Promise.all([b.release(), c.release()]);

  const rw = resourceName('rw');
  const r1 = await redlock.acquire(rw, 10_000, { shared: true });
  const r2 = await redlock.acquire(rw, 10_000, { shared: true });
  assert.equal(r1.shared, true);
  assert.notEqual(r1.token, r2.token);
  await assert.rejects(redlock.acquire(rw, 10_000), NotAcquiredError);
  await Promise.all([r1.release(), r2.release()]);
  const w = await redlock.acquire(rw, 10_000);
  await assert.rejects(redlock.acquire(rw, 10_000, { shared: true }), NotAcquiredError);
  await w.release();
});

test('using resolves to the routine\'s value, with a kept lock, released after', async () => {
  const resource = resourceName('using');
  const value = await redlock.using(resource, 5_000, async (signal, lock) => {
    assert.ok(signal instanceof AbortSignal);
    assert.equal(signal.aborted, false);
    assert.equal(lock.kept, true);
    // Granted by a quorum at least (a late grant is counted out).
    assert.ok((await cluster.holders(resource)).length >= redlock.quorum);
    return 42;
  });
  assert.equal(value, 42);
  assert.deepEqual(await cluster.holdersAfterRelease(resource), []);
  // With options.
  assert.equal(await redlock.using(resource, 5_000, { wait: 1000, shared: true }, async (_signal, lock) => lock.shared), true);
  // A routine may release the lock itself.
  assert.ok((await redlock.using(resource, 5_000, async (_signal, lock) => (await lock.release()).released)) >= redlock.quorum);
  assert.deepEqual(await cluster.holdersAfterRelease(resource), []);
});

test('bad arguments throw TypeError or ConfigError naming them; the process goes on', async () => {
  const urls = cluster.urls;
  const config = (fn, name) => assert.throws(fn, (e) => e instanceof ConfigError && e.code === 'ERR_REDLOCK_CONFIG' && e.message.includes(name), name);
  const type = (fn, name) => assert.throws(fn, (e) => e instanceof TypeError && e.message.includes(name), name);
  config(() => new Redlock([]), 'no servers');
  type(() => new Redlock(), 'urls');
  type(() => new Redlock(42), 'urls');
  type(() => new Redlock([1, 2]), 'urls');
  config(() => new Redlock(['ftp://127.0.0.1:7001']), 'scheme');
  config(() => new Redlock(['redis://127.0.0.1:99999']), 'port');
  config(() => new Redlock(['redis://']), 'redis://');
  config(() => new Redlock([urls[0], urls[0]]), 'same server');
  config(() => new Redlock(urls, { quorum: 0 }), 'options.quorum');
  config(() => new Redlock(urls, { quorum: 6 }), 'options.quorum');
  config(() => new Redlock(urls, { quorum: 2.5 }), 'options.quorum');
  config(() => new Redlock(urls, { retryCount: -1 }), 'options.retryCount');
  config(() => new Redlock(urls, { retryDelay: -1 }), 'options.retryDelay');
  config(() => new Redlock(urls, { retryJitter: NaN }), 'options.retryJitter');
  config(() => new Redlock(urls, { requestTimeout: 0 }), 'options.requestTimeout');
  config(() => new Redlock(urls, { connectTimeout: Infinity }), 'options.connectTimeout');
  config(() => new Redlock(urls, { driftFactor: -0.1 }), 'options.driftFactor');
  config(() => new Redlock(urls, { extendFraction: 1 }), 'options.extendFraction');
  config(() => new Redlock(urls, { mode: 'lua' }), 'options.mode');
  type(() => new Redlock(urls, { retryCount: '3' }), 'options.retryCount');
  type(() => new Redlock(urls, { retryDelayMs: 3 }), 'options.retryDelayMs');
  type(() => new Redlock(urls, 5), 'options');

  const rejectsWith = async (promise, cls, name) => {
    await assert.rejects(promise, (e) => e instanceof cls && e.message.includes(name), name);
  };
  const r = resourceName('bad-args');
  await rejectsWith(redlock.acquire(42, 1000), TypeError, 'resource');
  await rejectsWith(redlock.acquire(r, [1000]), TypeError, 'ttl');
  await rejectsWith(redlock.acquire(r, '1000'), ConfigError, 'ttl');
  await rejectsWith(redlock.acquire(r), TypeError, 'ttl');
  for (const ttl of [-1, 0, 0.5, NaN, Infinity, -Infinity, 1e300]) await rejectsWith(redlock.acquire(r, ttl), ConfigError, 'ttl');
  await rejectsWith(redlock.acquire(r, 1000, { wait: -5 }), ConfigError, 'options.wait');
  await rejectsWith(redlock.acquire(r, 1000, { wait: NaN }), ConfigError, 'options.wait');
  await rejectsWith(redlock.acquire(r, 1000, { wait: {} }), TypeError, 'options.wait');
  await rejectsWith(redlock.acquire(r, 1000, { wait: '5' }), ConfigError, 'options.wait');
  for (const limit of [0, -1, 1.5, 1025, NaN]) await rejectsWith(redlock.acquire(r, 1000, { limit }), ConfigError, 'options.limit');
  await rejectsWith(redlock.acquire(r, 1000, { shared: true, limit: 2 }), ConfigError, 'options.shared');
  await rejectsWith(redlock.acquire(r, 1000, { shared: 'yes' }), TypeError, 'options.shared');
  await rejectsWith(redlock.acquire(r, 1000, { signal: 'stop' }), TypeError, 'options.signal');
  await rejectsWith(redlock.acquire(r, 1000, { tries: 3 }), TypeError, 'options.tries');
  await rejectsWith(redlock.acquire(r, 1000, []), TypeError, 'options');
  await rejectsWith(redlock.using(r, 1000), TypeError, 'using(');
  await rejectsWith(redlock.using(r, 1000, {}), TypeError, 'routine');
  await rejectsWith(redlock.using(r, 1000, { keep: false }, async () => {}), TypeError, 'options.keep');
  await rejectsWith(redlock.using(r, -1, async () => {}), ConfigError, 'ttl');
  assert.throws(() => new Lock(), TypeError);

  const lock = await redlock.acquire(r, 5_000);
  await rejectsWith(lock.extend(-1), ConfigError, 'ttl');
  await rejectsWith(lock.extend([1000]), TypeError, 'ttl');
  // None of that took anything, and the process is fine.
  await lock.release();
  assert.deepEqual(await cluster.holders(r), []);
  const after = await redlock.acquire(r, 1000);
  await after.release();
});

test('Unix socket members count like TCP ones; a socket and the TCP address of one server are one server', async () => {
  const bySocket = new Redlock(cluster.servers.map((s) => s.socketUrl), ROOMY);
  const resource = resourceName('socket');
  const lock = await bySocket.acquire(resource, 5_000, { wait: 5_000 });
  for (const s of cluster.servers) assert.equal((await s.lockInfo(resource))?.owner, lock.owner);
  await lock.release();
  assert.deepEqual(await cluster.holders(resource), []);
  await bySocket.settle();
  const mixed = new Redlock([cluster.servers[0].socketUrl, cluster.servers[0].url, cluster.servers[1].url], ROOMY);
  await assert.rejects(mixed.acquire(resource, 5_000), (e) => e instanceof ConfigError && /are the same server/.test(e.message));
});

test('one string of several URLs says to pass an array', () => {
  const urls = cluster.urls.slice(0, 3);
  const array = `[${urls.map((u) => JSON.stringify(u)).join(', ')}]`;
  for (const joined of [urls.join(','), urls.join(', '), urls.join(' '), urls.join(';')]) {
    assert.throws(
      () => new Redlock(joined),
      (e) => e instanceof ConfigError && e.message.includes(`naming 3 servers (${JSON.stringify(joined)}): pass an array, ${array}`) && !e.message.includes('port'),
      joined,
    );
  }
  // Inside an array, an entry naming two servers is refused as such.
  assert.throws(
    () => new Redlock([`${urls[0]},${urls[1]}`, urls[2]]),
    (e) => e instanceof ConfigError && e.message.includes('names 2 servers in one entry') && !e.message.includes('port'),
  );
  // One URL as a string stays one server.
  assert.equal(new Redlock(urls[0]).quorum, 1);
  assert.equal(new Redlock(urls).quorum, 2);
});

test('a missing argument is named as missing', async () => {
  const missing = (e, name) => e instanceof TypeError && e.code === 'ERR_INVALID_ARG_TYPE' && e.message.startsWith(`${name} is missing: it must be `) && !e.message.includes('undefined');
  assert.throws(() => new Redlock(), (e) => missing(e, 'urls'));
  await assert.rejects(redlock.acquire(), (e) => missing(e, 'resource'));
  await assert.rejects(redlock.acquire('r'), (e) => missing(e, 'ttl'));
  await assert.rejects(redlock.using('r', 1000), (e) => missing(e, 'routine') && e.message.includes('using(resource, ttl, [options,] routine)') && !e.message.includes('number 0'));
  await assert.rejects(redlock.using('r', 1000, {}, async () => {}, 5), (e) => e instanceof TypeError && e.message.includes('at most 4 arguments, not 5'));
  await assert.rejects(redlock.using('r'), (e) => missing(e, 'routine'));
});
