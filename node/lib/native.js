'use strict';
// Loads the addon built from the Rust crate (node/src) by `npm run build`.
const path = require('node:path');

const file = path.join(__dirname, '..', 'redislock.node');
let native;
try {
  native = require(file);
} catch (e) {
  const err = new Error(
    `redislock: the native addon ${file} could not be loaded (${e.message}). ` +
      'The addon of the tarball `make dist` writes runs on Linux x86_64 with glibc 2.28 or later; ' +
      'elsewhere, build it from a checkout of the repository with `npm --prefix <checkout>/node run build` ' +
      '(needs Rust), or install a package tarball made by `npm pack` after that build.',
  );
  err.code = 'ERR_REDLOCK_NATIVE';
  err.cause = e;
  throw err;
}
module.exports = native;
