// The lost signal: a majority of the servers killed (SIGKILL, by PID)
// while a routine holds the lock (these servers are this file's own), and
// a kept lock revoked, lost with that cause.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { after, before, test } from 'node:test';

import { LockLostError, Redlock } from 'redislock';

import { ROOMY, call, resourceName, startServers } from './support/servers.mjs';

let cluster;

before(async () => {
  cluster = await startServers(5);
});
after(async () => {
  await cluster?.stop();
});

test('a majority killed mid-hold: signal aborts with LockLostError, using rejects with it', { timeout: 30_000 }, async () => {
  const redlock = new Redlock(cluster.urls, ROOMY);
  const resource = resourceName('lost');
  const TTL = 1_500;
  let killedAt;
  let abortedAfter;
  let seen;
  const err = await redlock
    .using(resource, TTL, async (signal, lock) => {
      assert.equal(signal.aborted, false);
      // Held past a few extensions first: the guard keeps it.
      await new Promise((resolve) => setTimeout(resolve, TTL));
      assert.equal(signal.aborted, false);
      assert.equal(lock.lost, false);
      killedAt = Date.now();
      await Promise.all(cluster.servers.slice(0, 3).map((s) => s.kill()));
      // No timer: the abort event itself (the test's timeout fails it),
      // unless it came already, while the kills were awaited.
      if (!signal.aborted) await once(signal, 'abort');
      abortedAfter = Date.now() - killedAt;
      seen = signal.reason;
      assert.equal(lock.lost, true);
      assert.equal(lock.validity, 0);
      return 'finished anyway';
    })
    .then(
      () => assert.fail('using resolved although the lock was lost'),
      (e) => e,
    );
  assert.ok(seen instanceof LockLostError, `signal.reason: ${seen}`);
  assert.equal(seen.code, 'ERR_REDLOCK_LOCK_LOST');
  assert.equal(seen.resource, resource);
  assert.equal(err, seen);
  // Lost at the next extension, before the lease could have run out.
  assert.ok(abortedAfter < TTL, `signal aborted ${abortedAfter} ms after the kill`);
});

test('a kept lock revoked on every server is lost as revoked', { timeout: 30_000 }, async (t) => {
  // Servers of its own: the test above killed a majority of the file's.
  const own = await startServers(5);
  t.after(() => own.stop());
  const redlock = new Redlock(own.urls, ROOMY);
  const resource = resourceName('revoked');
  const lock = await redlock.acquire(resource, 1_500, { keep: true });
  assert.equal(lock.lossCause, null);
  // LOCK.REVOKE on every server, as `redlock revoke` sends it: the next
  // extension is answered REVOKED.
  for (const server of own.servers) {
    const [token, ended] = await call(server.port, 'LOCK.REVOKE', resource);
    assert.ok(BigInt(token) > lock.token, `${token} after ${lock.token}`);
    assert.equal(Number(ended), 1);
  }
  const deadline = Date.now() + 10_000;
  while (!lock.lost && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 20));
  assert.equal(lock.lost, true);
  assert.equal(lock.lossCause, 'revoked');
  assert.equal(redlock.metrics().lost.revoked, 1);
});
