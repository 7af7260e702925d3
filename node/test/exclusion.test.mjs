// Exclusion through `using`: 16 async routines on one Redlock in this
// process, then 4 processes. Each hold goes through a fenced resource that
// records it: no two holds overlap, and tokens increase in hold order.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

import { Redlock } from 'redislock';

import { FencedFiles } from './support/fenced.mjs';
import { ROOMY, resourceName, startServers } from './support/servers.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
let cluster;
let dir;

before(async () => {
  cluster = await startServers(5);
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'redislock-node-fenced-'));
});
after(async () => {
  await cluster?.stop();
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

const strictlyIncreasing = (tokens) => tokens.every((t, i) => i === 0 || t > tokens[i - 1]);

test('16 concurrent routines on one Redlock exclude each other', { timeout: 60_000 }, async () => {
  const redlock = new Redlock(cluster.urls, ROOMY);
  const resource = resourceName('in-process');
  const ROUTINES = 16;
  const ROUNDS = 8;
  let inside = 0;
  let most = 0;
  const tokens = [];
  const counter = { value: 0 };
  const routine = async () => {
    for (let i = 0; i < ROUNDS; i++) {
      await redlock.using(resource, 5_000, { wait: 30_000 }, async (signal, lock) => {
        inside += 1;
        most = Math.max(most, inside);
        tokens.push(lock.token);
        // A read-modify-write across an await: lost updates if two are inside.
        const seen = counter.value;
        await new Promise((resolve) => setTimeout(resolve, 1));
        counter.value = seen + 1;
        assert.equal(signal.aborted, false);
        inside -= 1;
      });
    }
  };
  await Promise.all(Array.from({ length: ROUTINES }, routine));
  assert.equal(most, 1, 'two routines held the lock at once');
  assert.equal(counter.value, ROUTINES * ROUNDS);
  assert.equal(tokens.length, ROUTINES * ROUNDS);
  assert.ok(strictlyIncreasing(tokens), 'tokens did not increase in hold order');
  assert.deepEqual(await cluster.holdersAfterRelease(resource), []);
});

test('4 processes exclude each other: a fenced counter records every hold', { timeout: 90_000 }, async () => {
  const resource = resourceName('processes');
  const fenced = new FencedFiles(dir).init();
  const PROCESSES = 4;
  const ROUNDS = 15;
  const run = promisify(execFile);
  const workers = Array.from({ length: PROCESSES }, () =>
    run(process.execPath, [path.join(here, 'support', 'worker.mjs'), dir, resource, String(ROUNDS), ...cluster.urls], { timeout: 80_000 }),
  );
  const reports = (await Promise.all(workers)).map(({ stdout }) => JSON.parse(stdout.trim()));
  assert.deepEqual(
    reports.map((r) => r.holds),
    Array(PROCESSES).fill(ROUNDS),
  );
  assert.equal(reports.reduce((n, r) => n + r.overlaps, 0), 0, 'a hold found another one inside');
  assert.equal(fenced.count(), PROCESSES * ROUNDS, 'increments were lost: holds overlapped');
  const tokens = fenced.tokenLog();
  assert.equal(tokens.length, PROCESSES * ROUNDS);
  assert.ok(strictlyIncreasing(tokens), 'tokens did not increase in hold order');
  assert.deepEqual(await cluster.holdersAfterRelease(resource), []);
});
