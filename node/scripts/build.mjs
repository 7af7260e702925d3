#!/usr/bin/env node
// Builds the native addon from the Rust crate in node/ (cargo, the
// workspace's `node-addon` profile) and copies it to node/redislock.node, which lib/native.js
// loads. Needs Rust (cargo) and a checkout of the repository: the crate
// depends on the quorum client in ../client.
//
//   npm run build            (from node/; or npm --prefix <checkout>/node run build)
//   node scripts/build.mjs --zig --out FILE
//                            (make dist: built by cargo-zigbuild against
//                            glibc 2.28, copied to FILE instead)
//
// CARGO_TARGET_DIR defaults to the workspace's, <checkout>/target. Quick when nothing
// changed: cargo checks, and the copy is skipped when the addon is the same.
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, statSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const here = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const checkout = path.dirname(here);
let options;
try {
  ({ values: options } = parseArgs({ options: { zig: { type: 'boolean' }, out: { type: 'string' } } }));
} catch (e) {
  console.error(`redislock: ${e.message}; usage: node scripts/build.mjs [--zig] [--out FILE]`);
  process.exit(2);
}
if (!existsSync(path.join(checkout, 'client', 'Cargo.toml'))) {
  console.error(`redislock: ${checkout}/client is missing: build from a checkout of the repository`);
  process.exit(1);
}
const targetDir = process.env.CARGO_TARGET_DIR || path.join(checkout, 'target');
const profile = 'node-addon';
const cargo = process.env.CARGO || 'cargo';
// --zig: for linux-x64-gnu with glibc 2.28 symbols at most (the npm
// tarball of `make dist`), linked by zig; cargo-zigbuild must be on PATH.
const zigTarget = 'x86_64-unknown-linux-gnu';
const args = options.zig
  ? ['zigbuild', '--profile', profile, '--target', `${zigTarget}.2.28`]
  : ['build', '--profile', profile];
const outDir = options.zig ? path.join(targetDir, zigTarget, profile) : path.join(targetDir, profile);
const names = { linux: 'libredislock_node.so', darwin: 'libredislock_node.dylib', win32: 'redislock_node.dll' };
const name = names[process.platform] ?? 'libredislock_node.so';
const from = path.join(outDir, name);
// Say what the silence is about: a first build compiles the whole client.
const fresh = !existsSync(from);
console.log(
  `redislock: compiling the Rust addon (cargo ${args[0]}, profile ${profile})` +
    (fresh ? ': about 3 minutes on 2 cores the first time' : ': seconds when nothing changed'),
);
const started = Date.now();
const built = spawnSync(cargo, [...args, '--manifest-path', path.join(here, 'Cargo.toml')], {
  stdio: 'inherit',
  env: { ...process.env, CARGO_TARGET_DIR: targetDir },
});
if (built.error) {
  console.error(`redislock: could not run ${cargo} (${built.error.message}): install Rust (https://rustup.rs)`);
  process.exit(1);
}
if (built.status !== 0) process.exit(built.status ?? 1);
const seconds = Math.round((Date.now() - started) / 1000);
if (seconds >= 10) console.log(`redislock: compiled in ${seconds} s`);

const to = options.out ? path.resolve(options.out) : path.join(here, 'redislock.node');
const same = existsSync(to) && statSync(to).size === statSync(from).size && readFileSync(to).equals(readFileSync(from));
if (!same) {
  copyFileSync(from, to);
  console.log(`redislock: built ${path.relative(process.cwd(), to) || to}`);
}
