#!/usr/bin/env node
// Builds the native addon from the Rust crate in node/ (cargo, the
// workspace's `node-addon` profile) and copies it to node/redislock.node, which lib/native.js
// loads. Needs Rust (cargo) and a checkout of the repository: the crate
// depends on the quorum client in ../client.
//
//   npm run build            (from node/; or npm --prefix <checkout>/node run build)
//
// CARGO_TARGET_DIR defaults to the workspace's, <checkout>/target. Quick when nothing
// changed: cargo checks, and the copy is skipped when the addon is the same.
import { spawnSync } from 'node:child_process';
import { copyFileSync, existsSync, statSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const checkout = path.dirname(here);
if (!existsSync(path.join(checkout, 'client', 'Cargo.toml'))) {
  console.error(`redislock: ${checkout}/client is missing: build from a checkout of the repository`);
  process.exit(1);
}
const targetDir = process.env.CARGO_TARGET_DIR || path.join(checkout, 'target');
const profile = 'node-addon';
const cargo = process.env.CARGO || 'cargo';
const built = spawnSync(cargo, ['build', '--profile', profile, '--manifest-path', path.join(here, 'Cargo.toml')], {
  stdio: 'inherit',
  env: { ...process.env, CARGO_TARGET_DIR: targetDir },
});
if (built.error) {
  console.error(`redislock: could not run ${cargo} (${built.error.message}): install Rust (https://rustup.rs)`);
  process.exit(1);
}
if (built.status !== 0) process.exit(built.status ?? 1);

const names = { linux: 'libredislock_node.so', darwin: 'libredislock_node.dylib', win32: 'redislock_node.dll' };
const name = names[process.platform] ?? 'libredislock_node.so';
const from = path.join(targetDir, profile, name);
const to = path.join(here, 'redislock.node');
const same = existsSync(to) && statSync(to).size === statSync(from).size && readFileSync(to).equals(readFileSync(from));
if (!same) {
  copyFileSync(from, to);
  console.log(`redislock: built ${path.relative(process.cwd(), to) || to}`);
}
