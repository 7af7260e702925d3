// releaseOnDisconnect: a process holding a 30 s lock is killed with
// SIGKILL; with the option its lock is free at once, without it the lock
// waits for its ttl. These servers are this file's own.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { after, before, test } from 'node:test';

import { ConfigError, NotAcquiredError, Redlock } from 'redislock';

import { ROOMY, resourceName, startServers } from './support/servers.mjs';

let cluster;

before(async () => {
  cluster = await startServers(5);
});
after(async () => {
  await cluster?.stop();
});

// Holds `resource` for 30 s (session '1': bound to its connections with
// no lock-delay; '0': not bound; 'default': bound, the default lock-delay,
// a 1.5 s ttl), prints "held", then sleeps.
const HOLDER = `
import { Redlock } from 'redislock';
const [resource, session, ...urls] = process.argv.slice(1);
// A process killed -9 writes nothing more: no lock-delay needed (the
// default, longer than an extension interval, is for live holders).
const options = {
  '1': { releaseOnDisconnect: true, lockDelay: 0, requestTimeout: 1000 },
  '0': { requestTimeout: 1000 },
  default: { releaseOnDisconnect: true, requestTimeout: 100 },
}[session];
const redlock = new Redlock(urls, { connectTimeout: 2000, ...options });
await redlock.acquire(resource, session === 'default' ? 1500 : 30000, { keep: true });
process.stdout.write('held\\n');
setInterval(() => {}, 1000);
`;

async function killedHolder(resource, session) {
  const mode = session === 'default' ? 'default' : session ? '1' : '0';
  const child = spawn(process.execPath, ['--input-type=module', '-e', HOLDER, resource, mode, ...cluster.urls], {
    stdio: ['ignore', 'pipe', 'inherit'],
    cwd: new URL('.', import.meta.url),
  });
  let out = '';
  child.stdout.setEncoding('utf8');
  while (!out.includes('held')) {
    const [chunk] = await once(child.stdout, 'data');
    out += chunk;
  }
  const killed = Date.now();
  child.kill('SIGKILL');
  await once(child, 'exit');
  return killed;
}

for (const session of [true, false]) {
  test(`a holder killed -9 ${session ? 'frees its lock at once with' : 'keeps it to its ttl without'} releaseOnDisconnect`, { timeout: 30_000 }, async () => {
    const resource = resourceName(session ? 'session' : 'plain');
    const killed = await killedHolder(resource, session);
    const redlock = new Redlock(cluster.urls, ROOMY);
    if (session) {
      const lock = await redlock.acquire(resource, 5_000, { wait: 5_000 });
      const took = Date.now() - killed;
      assert.ok(took < 2_000, `granted ${took} ms after the kill, with 30 s of ttl left`);
      await lock.release();
    } else {
      await assert.rejects(redlock.acquire(resource, 5_000, { wait: 1_500 }), NotAcquiredError);
    }
    await redlock.settle();
  });
}

// The default lock-delay of a 1.5 s session hold (request timeout 100 ms):
// an extension interval plus a request timeout plus the drift, 617 ms, so
// a live holder whose connection is reset learns of the loss first.
test('the default lockDelay outlasts an extension interval', { timeout: 30_000 }, async () => {
  const resource = resourceName('default-delay');
  const killed = await killedHolder(resource, 'default');
  const redlock = new Redlock(cluster.urls, ROOMY);
  const lock = await redlock.acquire(resource, 5_000, { wait: 5_000 });
  const took = Date.now() - killed;
  assert.ok(took >= 600, `granted ${took} ms after the kill, inside the 617 ms default lock-delay`);
  assert.ok(took < 1_500, `granted ${took} ms after the kill: only when the lease ran out`);
  await lock.release();
  await redlock.settle();
});

test('session options are checked', () => {
  assert.throws(() => new Redlock(cluster.urls, { releaseOnDisconnect: true, mode: 'script' }), ConfigError);
  assert.throws(() => new Redlock(cluster.urls, { lockDelay: 100 }), ConfigError);
  assert.throws(() => new Redlock(cluster.urls, { releaseOnDisconnect: true, lockDelay: -1 }), ConfigError);
  assert.throws(() => new Redlock(cluster.urls, { releaseOnDisconnect: 'yes' }), TypeError);
});
