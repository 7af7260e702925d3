#!/usr/bin/env bash
# Makes the virtualenv VENV (if missing) and installs the Python package
# (python/, built by maturin from the redlock crate) into it, again only
# when its sources (python/, client/, glob/, the Cargo files) changed since the
# last install. Used by scripts/test-python.sh and benches/python.sh.
#
#   scripts/python-venv.sh VENV          (PYTHON: default python3, 3.9+)
set -uo pipefail
cd "$(dirname "$0")/.."
venv=${1:?usage: scripts/python-venv.sh VENV}
stamp=$venv/.redislock-sources
export PIP_DISABLE_PIP_VERSION_CHECK=1

if [ ! -x "$venv/bin/python" ]; then
  echo "redislock: creating the virtualenv $venv"
  "${PYTHON:-python3}" -m venv "$venv" || exit 1
fi

# Everything the installed package is built from.
hash=$({ find python/src python/redislock client/src glob/src -type f -print0 | sort -z | xargs -0 sha256sum
         sha256sum python/Cargo.toml python/pyproject.toml client/Cargo.toml glob/Cargo.toml Cargo.toml Cargo.lock
       } | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$hash" ] || ! "$venv/bin/python" -c "import redislock._redislock" 2>/dev/null; then
  echo "redislock: building and installing python/ into $venv (maturin, cargo profile 'tests'; pip is quiet meanwhile: about 3 minutes on 2 cores the first time)"
  started=$(date +%s)
  rm -f "$stamp"
  "$venv/bin/pip" install -q --force-reinstall --no-deps ./python || exit 1
  echo "$hash" >"$stamp"
  echo "redislock: installed in $(( $(date +%s) - started )) s"
fi
