#!/usr/bin/env bash
# The workspace version (Cargo.toml's [workspace.package]) is the one
# version of everything shipped: the module (MODULE LIST), `redlock`, the
# Python wheel (maturin reads the crate's). npm cannot read it, so
# node/package.json and node/package-lock.json repeat it; this keeps them
# in step.
#
#   scripts/versions.sh            prints the workspace version
#   scripts/versions.sh check      and fails unless node/ says the same
#   scripts/versions.sh set X.Y.Z  writes X.Y.Z into Cargo.toml and node/
#                                  (Cargo.lock follows at the next build)
set -euo pipefail
cd "$(dirname "$0")/.."

say() { echo "redislock: $*" >&2; }

workspace_version() {
  awk '/^\[/ { section = $0 } section == "[workspace.package]" && /^version *=/ {
         gsub(/^version *= *"|" *$/, ""); print; exit }' Cargo.toml
}

# The version field(s) of node/'s package files: package.json's, and the
# lock file's own (top level and packages[""]).
node_versions() {
  node -e '
    const fs = require("fs");
    const pkg = JSON.parse(fs.readFileSync("node/package.json", "utf8"));
    const lock = JSON.parse(fs.readFileSync("node/package-lock.json", "utf8"));
    console.log(`node/package.json ${pkg.version}`);
    console.log(`node/package-lock.json ${lock.version}`);
    console.log(`node/package-lock.json(packages[""]) ${(lock.packages || {})[""]?.version}`);'
}

version=$(workspace_version)
if [ -z "$version" ]; then
  say "Cargo.toml has no [workspace.package] version"
  exit 1
fi

case "${1:-}" in
  "") echo "$version" ;;
  check)
    bad=0
    while read -r file found; do
      if [ "$found" != "$version" ]; then
        say "$file says version $found, the workspace (Cargo.toml) $version: run scripts/versions.sh set $version"
        bad=1
      fi
    done < <(node_versions)
    [ "$bad" -eq 0 ] && echo "$version"
    exit "$bad"
    ;;
  set)
    new=${2:-}
    if ! [[ $new =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
      say "usage: scripts/versions.sh set X.Y.Z (MODULE LIST encodes major*10000+minor*100+patch)"
      exit 2
    fi
    sed -i "/^\[workspace.package\]/,/^\[/ s/^version *= *\"[^\"]*\"/version = \"$new\"/" Cargo.toml
    NEW=$new node -e '
      const fs = require("fs");
      for (const file of ["node/package.json", "node/package-lock.json"]) {
        const data = JSON.parse(fs.readFileSync(file, "utf8"));
        data.version = process.env.NEW;
        if (data.packages && data.packages[""]) data.packages[""].version = process.env.NEW;
        fs.writeFileSync(file, JSON.stringify(data, null, 2) + "\n");
      }'
    say "version $new in Cargo.toml, node/package.json and node/package-lock.json"
    ;;
  *) say "usage: scripts/versions.sh [check | set X.Y.Z]"; exit 2 ;;
esac
