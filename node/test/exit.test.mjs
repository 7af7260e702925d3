// A process that ends while calls are pending (issue 55): an observer
// waiting for a change, a wait in line behind a held lock, a campaign
// behind a leader, and all three at once, in child processes
// (support/exiting.mjs), in the main thread or a worker's. With
// `process.exit()` the process ends at once, with the status it was
// given, however busy the runtime's threads are; with the calls ended
// (return(), aborts), nothing keeps it alive and it ends by itself.
// Neither may crash, abort or hang. Each is a race with the runtime's
// threads at the exit: several runs of each. These servers are this
// file's own.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { after, before, test } from 'node:test';

import { lineLength, resourceName, startServers } from './support/servers.mjs';

const SCRIPT = new URL('./support/exiting.mjs', import.meta.url).pathname;
const RUNS = 5;
// A child that has not ended this long after it was told to is killed:
// a hang, reported as such.
const EXIT_MS = 15_000;
// Every wait for the servers to show the calls pending gives up after this.
const PATIENCE_MS = 20_000;

let cluster;

before(async () => {
  cluster = await startServers(5);
});
after(async () => {
  await cluster?.stop();
});

async function until(condition, what) {
  const deadline = Date.now() + PATIENCE_MS;
  while (!(await condition())) {
    assert.ok(Date.now() < deadline, `timed out waiting until ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

const subscribed = async (channel) => {
  for (const server of cluster.servers) {
    const [, count] = await server.call('PUBSUB', 'NUMSUB', channel);
    if (count > 0n) return true;
  }
  return false;
};

/** Until the servers show `what`'s calls of `resource` pending. */
async function untilPending(what, resource) {
  if (what === 'observe' || what === 'all') {
    await until(() => subscribed(`__redislock@0__:redlock:election:${resource}:observed`), 'the observer subscribed');
  }
  if (what === 'lock' || what === 'all') {
    await until(async () => (await lineLength(cluster, `${resource}:locked`)) > 0, 'the lock wait is in line');
  }
  if (what === 'campaign' || what === 'all') {
    await until(async () => (await lineLength(cluster, `redlock:election:${resource}:elected`)) > 0, 'the campaign is in line');
  }
}

/** One child, ended `how` with `what` pending: its exit code, signal and stderr. */
async function endWithPending(how, what) {
  const resource = resourceName(`exit-${how}-${what}`);
  const child = spawn(process.execPath, [SCRIPT, how, what, resource, ...cluster.urls], { stdio: ['pipe', 'pipe', 'pipe'] });
  const exited = once(child, 'exit');
  let [out, err] = ['', ''];
  child.stdout.setEncoding('utf8').on('data', (chunk) => (out += chunk));
  child.stderr.setEncoding('utf8').on('data', (chunk) => (err += chunk));
  try {
    await until(() => out.includes('pending') || child.exitCode !== null || child.signalCode !== null, 'the child started its calls');
    assert.ok(out.includes('pending'), `the child ended before its calls were pending: ${err}`);
    await untilPending(what, resource);
    child.stdin.write('end\n');
    const hung = setTimeout(() => child.kill('SIGKILL'), EXIT_MS);
    const [code, signal] = await exited;
    clearTimeout(hung);
    return { code, signal, err };
  } finally {
    child.kill('SIGKILL');
  }
}

const ENDINGS = {
  exit: ['process.exit(3)', 3],
  worker: ['process.exit(3) from the main thread', 3],
  natural: ['a natural exit once they are ended', 0],
};
for (const [how, [ending, status]] of Object.entries(ENDINGS)) {
  for (const what of ['observe', 'lock', 'campaign', 'all']) {
    const where = how === 'worker' ? ' in a worker thread' : '';
    const pending = { observe: 'an observer', lock: 'a lock wait', campaign: 'a campaign', all: 'an observer, a lock wait and a campaign' }[what];
    test(`${ending} with ${pending} pending${where}: exit status ${status}, no crash, no hang`, { timeout: 120_000 }, async () => {
      for (let run = 1; run <= RUNS; run += 1) {
        const { code, signal, err } = await endWithPending(how, what);
        const where = `run ${run} of ${RUNS}`;
        assert.equal(signal, null, `${where}: ended by ${signal}${signal === 'SIGKILL' ? ` (still running ${EXIT_MS} ms after it was told to end)` : ''}; stderr: ${err}`);
        assert.equal(code, status, `${where}: exit status ${code}; stderr: ${err}`);
        assert.equal(err, '', `${where}: stderr`);
      }
    });
  }
}
