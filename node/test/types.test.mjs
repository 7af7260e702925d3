// index.d.ts against the real package: it declares exactly the runtime
// exports, and a typed example of the whole API compiles (tsc --noEmit,
// TypeScript from the dev dependencies).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(import.meta.url);

test('index.d.ts declares exactly the runtime exports, CommonJS and ESM', async () => {
  const dts = fs.readFileSync(path.join(root, 'index.d.ts'), 'utf8');
  const declared = [...dts.matchAll(/^export (?:declare )?(?:class|const|function) (\w+)/gm)].map((m) => m[1]).sort();
  const cjs = Object.keys(require('redislock')).sort();
  const esm = Object.keys(await import('redislock')).filter((k) => k !== 'default').sort();
  assert.deepEqual(declared, cjs);
  assert.deepEqual(esm, cjs);
  // Each error class's declared code is its runtime code.
  const mod = require('redislock');
  let checked = 0;
  for (const block of dts.split(/^export class /m).slice(1)) {
    const name = block.match(/^(\w+)/)[1];
    const code = block.match(/^ {2}readonly code: '([A-Z_]+)'/m)?.[1];
    if (!code) continue;
    assert.equal(mod[name].code, code, name);
    assert.equal(new mod[name]('m').code, code, name);
    checked += 1;
  }
  assert.equal(checked, 5);
});

test('a typed example of the API compiles (tsc --noEmit)', { timeout: 60_000 }, async () => {
  const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc');
  assert.ok(fs.existsSync(tsc), 'typescript is not installed: npm install in node/');
  const run = promisify(execFile);
  await run(process.execPath, [tsc, '-p', path.join(root, 'test', 'types')], { cwd: root }).catch((e) => {
    assert.fail(`tsc failed:\n${e.stdout}${e.stderr}`);
  });
});
