// rediss:// servers: TLS with a private CA and client certificates (Node's
// `tls` option shape: PEM strings or Buffers), a wrong certificate named,
// rejectUnauthorized: false, and the option's checks.
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';

import { ConfigError, Redlock } from 'redislock';

import { ROOMY, makeCerts, resourceName, startServers } from './support/servers.mjs';

let certs;
let cluster;

before(async () => {
  certs = makeCerts();
  cluster = await startServers(5, { certs });
});
after(async () => {
  await cluster?.stop();
});

const tlsOptions = (ca = 'ca.crt') => ({ ca: certs.pem(ca), cert: certs.pem('client.crt').toString(), key: certs.pem('client.key') });

test('acquire, using and release over TLS with a private CA and a client certificate', async () => {
  assert.ok(cluster.urls.every((u) => u.startsWith('rediss://')));
  const redlock = new Redlock(cluster.urls, { ...ROOMY, tls: tlsOptions() });
  const resource = resourceName('tls');
  const lock = await redlock.acquire(resource, 10_000);
  for (const server of cluster.servers) assert.equal((await server.lockInfo(resource)).owner, lock.owner);
  await lock.release();
  assert.deepEqual(await cluster.holders(resource), []);

  const value = await redlock.using(resource, 2_000, { wait: 5_000 }, async (signal, held) => {
    assert.equal(signal.aborted, false);
    await held.extend(20_000);
    for (const server of cluster.servers) assert.ok(Number((await server.lockInfo(resource)).pttl) > 2_000);
    return 'done';
  });
  assert.equal(value, 'done');
  assert.deepEqual(await cluster.holdersAfterRelease(resource), []);
});

test('an unknown CA is named; rejectUnauthorized: false takes it', async () => {
  const resource = resourceName('tls-ca');
  const wrong = new Redlock(cluster.urls, { ...ROOMY, retryCount: 0, tls: tlsOptions('other-ca.crt') });
  await assert.rejects(wrong.acquire(resource, 10_000), (e) => {
    assert.ok(e instanceof ConfigError, `${e}`);
    assert.equal(e.reason, 'tls_failed');
    assert.match(e.message, /not signed by a CA this client trusts/);
    assert.ok(e.outcomes.every((o) => o.kind === 'tls_failed'), JSON.stringify(e.outcomes));
    return true;
  });
  const unchecked = new Redlock(cluster.urls, { ...ROOMY, tls: { ...tlsOptions('other-ca.crt'), rejectUnauthorized: false } });
  const lock = await unchecked.acquire(resource, 10_000);
  await lock.release();
});

test('the tls option is checked', () => {
  assert.throws(() => new Redlock(cluster.urls, { tls: { ca: 42 } }), { name: 'TypeError', message: /options\.tls\.ca must be a PEM string or Buffer/ });
  assert.throws(() => new Redlock(cluster.urls, { tls: { servername: 'x' } }), { name: 'TypeError', message: /options\.tls\.servername is not an option/ });
  assert.throws(() => new Redlock(cluster.urls, { tls: { ca: 'not a certificate' } }), (e) => e instanceof ConfigError && /no certificate/.test(e.message));
  // An ioredis habit: `tls: {}` on a redis:// URL would silently send plain text.
  assert.throws(() => new Redlock(['redis://127.0.0.1:6390'], { tls: {} }), (e) => e instanceof ConfigError && /no server URL is rediss:\/\//.test(e.message));
});
