#!/usr/bin/env bash
# The lint gate of `make test`: rustfmt (rustfmt.toml) and clippy with
# warnings as errors, on every crate and target of the workspace; and
# node/package.json's version is the workspace's (scripts/versions.sh); and
# the layers import one way, with the FFI at the edge and files short
# enough to read (scripts/lint-layers.py, after its self-test shows that
# it finds the cycles of its fixtures).
#
#   scripts/lint.sh
set -uo pipefail
cd "$(dirname "$0")/.."
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
  echo "lint: rustfmt or clippy is missing: rustup component add rustfmt clippy" >&2
  echo "lint: 0 passed, 1 failed"
  exit 1
fi
passed=0 failed=0
if cargo fmt --all --check >/dev/null; then
  passed=$((passed + 1))
else
  cargo fmt --all --check 2>&1 | head -40
  echo "lint: formatting differs from rustfmt.toml: run 'cargo fmt --all'" >&2
  failed=$((failed + 1))
fi
# With the client's `tracing` feature, as scripts/test.sh builds the tests
# (the same features: nothing is checked twice).
if cargo clippy --workspace --all-targets --profile tests --features redlock/tracing -- -D warnings; then
  passed=$((passed + 1))
else
  echo "lint: clippy found warnings (denied)" >&2
  failed=$((failed + 1))
fi
if scripts/versions.sh check >/dev/null; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
fi
if python3 scripts/lint-layers.py --self-test; then
  passed=$((passed + 1))
else
  echo "lint: the layering check misses the cycles of its own fixtures (scripts/lint-layers.py --self-test)" >&2
  failed=$((failed + 1))
fi
if python3 scripts/lint-layers.py; then
  passed=$((passed + 1))
else
  echo "lint: the layering differs from docs/architecture.md (scripts/lint-layers.py)" >&2
  failed=$((failed + 1))
fi
echo "lint: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
