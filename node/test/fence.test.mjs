// The fence enforced where the data lives: `lock.fenced` and
// `lock.guarded` give the argument array of LOCK.FENCED and LOCK.GUARD for
// the caller's own client of the data server (ioredis `call(...)`,
// node-redis `sendCommand([...])`; here the tests' RESP client), built
// from the hold's own token.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { ConfigError, LockReleasedError, Redlock } from 'redislock';

import { ROOMY, resourceName, startServers } from './support/servers.mjs';

let cluster;
let redlock;
/** A server of its own for the data, apart from the five of the locks. */
let data;

before(async () => {
  cluster = await startServers(6);
  data = cluster.servers[5];
  redlock = new Redlock(cluster.urls.slice(0, 5), ROOMY);
});
after(async () => {
  await cluster?.stop();
});

test('the arrays carry the lock\'s token and the arguments as given', async () => {
  const resource = resourceName('fence-words');
  const lock = await redlock.acquire(resource, 10_000);
  const token = String(lock.token);
  assert.deepEqual(lock.fenced('reg', 'SET', 'k', 'v'), ['LOCK.FENCED', 'reg', token, 'SET', 'k', 'v']);
  assert.deepEqual(lock.fenced('reg'), ['LOCK.FENCED', 'reg', token]);
  const value = Uint8Array.of(0, 255);
  const fenced = lock.fenced('reg', 'INCRBY', 'n', 5, value);
  assert.deepEqual(fenced.slice(3), ['INCRBY', 'n', 5, value]);
  assert.equal(fenced[6], value, 'passed on as the same object');
  assert.deepEqual(lock.guarded('SET', 'k', 'v'), ['LOCK.GUARD', resource, lock.owner, token, 'SET', 'k', 'v']);
  assert.throws(() => lock.guarded(), (e) => e instanceof TypeError && e.code === 'ERR_INVALID_ARG_TYPE' && /command/.test(e.message));
  assert.throws(() => lock.fenced(7, 'SET', 'k', 'v'), (e) => e instanceof TypeError && /register/.test(e.message));
  await lock.release();
});

test('a guarded write lands on a server of the lock; a released lock builds none', async () => {
  const resource = resourceName('fence-guard');
  const key = `${resource}:data`;
  const lock = await redlock.acquire(resource, 10_000);
  assert.equal(await cluster.servers[0].call(...lock.guarded('SET', key, 'v1')), 'OK');
  assert.equal(String(await cluster.servers[0].call('GET', key)), 'v1');
  await lock.release();
  assert.throws(() => lock.guarded('SET', key, 'v2'), LockReleasedError);
  assert.throws(() => lock.fenced('reg', 'SET', key, 'v2'), LockReleasedError);
});

test('locks whose token cannot fence throw ConfigError', async () => {
  const resource = resourceName('fence-kinds');
  const reader = await redlock.acquire(resource, 10_000, { shared: true });
  assert.throws(() => reader.fenced('reg', 'SET', 'k', 'v'), (e) => e instanceof ConfigError && /shared hold/.test(e.message));
  assert.deepEqual(reader.guarded('GET', 'k').slice(0, 4), ['LOCK.GUARD', resource, reader.owner, String(reader.token)]);
  const plain = new Redlock(cluster.urls, { ...ROOMY, mode: 'script' });
  await reader.release();
  const unfenced = await plain.acquire(resourceName('fence-script'), 10_000);
  assert.throws(() => unfenced.fenced('reg', 'SET', 'k', 'v'), (e) => e instanceof ConfigError && /no fencing token/.test(e.message));
  assert.throws(() => unfenced.guarded('SET', 'k', 'v'), (e) => e instanceof ConfigError && /no fencing token/.test(e.message));
  await unfenced.release();
});

test('fenced writes on a data server of their own refuse an older holder', async () => {
  const resource = resourceName('fence-data');
  const [register, log] = [`${resource}:fence`, `${resource}:log`];
  const first = await redlock.acquire(resource, 10_000);
  assert.equal(await data.call(...first.fenced(register, 'RPUSH', log, 'a1')), 1n);
  const late = first.fenced(register, 'RPUSH', log, 'a-late'); // built while it holds
  await first.release();
  const second = await redlock.acquire(resource, 10_000);
  assert.ok(second.token > first.token);
  assert.equal(await data.call(...second.fenced(register)), second.token, 'only raises the register');
  const older = `FENCED older token: register ${register} has accepted token ${second.token}, not ${first.token}`;
  for (let i = 0; i < 5; i += 1) {
    await assert.rejects(data.call(...late), (e) => e.message === older);
  }
  assert.equal(await data.call(...second.fenced(register, 'RPUSH', log, 'b1')), 2n);
  await second.release();
  assert.deepEqual((await data.call('LRANGE', log, 0, -1)).map(String), ['a1', 'b1']);
});
