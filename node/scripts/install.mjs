#!/usr/bin/env node
// npm's install step of the package: nothing when the addon is there (a
// tarball made by `npm pack` after a build carries it); in a checkout of
// the repository without it (`npm install <checkout>/node`), builds it
// (scripts/build.mjs, needs Rust).
import { existsSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
if (!existsSync(path.join(here, 'redislock.node'))) {
  if (!existsSync(path.join(here, '..', 'client', 'Cargo.toml'))) {
    console.error('redislock: the native addon redislock.node is missing, and this is no checkout of the repository to build it from');
    process.exit(1);
  }
  await import('./build.mjs');
}
