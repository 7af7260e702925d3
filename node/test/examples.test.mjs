// The package's examples (examples/node-quorum) run as a user runs them:
// from a project whose node_modules/redislock is this package, against
// five servers.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import { startServers } from './support/servers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const packageDir = path.resolve(here, '..');
const examples = path.resolve(packageDir, '..', 'examples', 'node-quorum');
const run = promisify(execFile);
let cluster;
let project;

before(async () => {
  cluster = await startServers(5);
  // A user's project: the examples, and the package linked as npm links a file: dependency.
  project = fs.mkdtempSync(path.join(os.tmpdir(), 'redislock-node-examples-'));
  for (const file of fs.readdirSync(examples)) {
    if (file.endsWith('.mjs') || file === 'package.json') fs.copyFileSync(path.join(examples, file), path.join(project, file));
  }
  fs.mkdirSync(path.join(project, 'node_modules'));
  fs.symlinkSync(packageDir, path.join(project, 'node_modules', 'redislock'), 'dir');
});
after(async () => {
  await cluster?.stop();
  if (project) fs.rmSync(project, { recursive: true, force: true });
});

const example = (file) =>
  run(process.execPath, [file], { cwd: project, timeout: 60_000, env: { ...process.env, REDLOCK_SERVERS: cluster.urls.join(',') } });

test('using.mjs: held past its ttl, then released', { timeout: 60_000 }, async () => {
  const { stdout } = await example('using.mjs');
  assert.match(stdout, /holding orders:42: token \d+/);
  assert.match(stdout, /after 3000 ms: still held/);
  assert.match(stdout, /work done: 5 steps/);
  assert.deepEqual(await cluster.holdersAfterRelease('orders:42'), []);
});

test('fenced-write.mjs: the late write is refused', { timeout: 60_000 }, async () => {
  const { stdout } = await example('fenced-write.mjs');
  assert.match(stdout, /A wakes up: lost = true/);
  assert.match(stdout, /A's late write: refused: token \d+ is not above \d+/);
  assert.match(stdout, /store: written by B/);
  assert.match(stdout, /A's release: LockLostError \(ERR_REDLOCK_LOCK_LOST\)/);
});

test('shared-and-permit.mjs: readers together, the writer alone, two permits', { timeout: 60_000 }, async () => {
  const { stdout } = await example('shared-and-permit.mjs');
  assert.match(stdout, /reads beside [12] other reader/);
  assert.match(stdout, /writer writes alone: 0 reader\(s\) inside/);
  assert.match(stdout, /at most 2 jobs held a permit at once/);
});
