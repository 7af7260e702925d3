#!/usr/bin/env bash
# The dist suite: what `make dist` wrote to dist/, installed and used the
# way a user without Rust would, against five real redis-servers that load
# the release tarball's module.
#
#   make dist && scripts/test-dist.sh      (or: make test-dist)
#
# Every install and every client runs in an environment with no Rust
# toolchain: `env -i PATH=/usr/bin:/bin` with a HOME of its own (checked:
# no cargo, no rustc there). Checks:
#   - SHA256SUMS matches the files;
#   - the release tarball holds libredislock.so (0755), redlock, redis.conf,
#     LICENSE and INSTALL; its redis.conf starts a server with the module;
#     five redis-servers (127.0.0.1, free ports,
#     scripts/redlock-servers.sh, stopped by PID on exit) load its module,
#     and its `redlock` takes and releases a quorum lock on them;
#   - the .deb (where make dist made one) unpacks the module and redlock
#     where Debian's packages put them, and its module loads;
#   - a fresh venv installs the wheel with `pip install --no-index` (no
#     compiling, within a minute) and takes a quorum lock;
#   - a fresh npm project installs the npm tarball offline (no install
#     script, the addon inside) and takes a quorum lock;
#   - each binary (module, redlock, the wheel's extension, the addon) asks
#     for glibc 2.28 at most (objdump -T) and links no OpenSSL (ldd);
#   - the wheel, the npm package, MODULE LIST and `redlock --version` all
#     say the workspace version (Cargo.toml).
# The last line is `dist: N passed, M failed`; without dist/ artifacts of
# the workspace version, or without redis-server, python3 or node, it says
# `dist: skipped: <why>` and exits 0.
#
#   scripts/test-dist.sh --current    (make test) the same, but skipped
#                                     unless dist/ was built from the
#                                     sources as they are now
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
glibc_max=2.28

say() { echo "dist: $*"; }
skip() {
  say "skipped: $*"
  exit 0
}

# The sources as they are: the commit, and a digest of uncommitted changes
# to tracked files.
source_id() {
  local changes
  changes=$(git status --porcelain --untracked-files=no 2>/dev/null)
  if [ -n "$changes" ]; then
    echo "$(git rev-parse HEAD) with changes $(git diff HEAD | sha256sum | cut -c1-16)"
  else
    git rev-parse HEAD
  fi
}
case "${1:-}" in
  --source-id) source_id; exit 0 ;;
  --current)
    built_from=$(cat target/dist-stage/source-id 2>/dev/null || true)
    if [ "$built_from" != "$(source_id)" ]; then
      skip "dist/ was not built from the sources as they are now: 'make test-dist' builds and tests it"
    fi
    ;;
  "") ;;
  *) echo "usage: scripts/test-dist.sh [--current]" >&2; exit 2 ;;
esac

version=$(scripts/versions.sh)
IFS=. read -r major minor patch <<<"$version"
module_ver=$((major * 10000 + minor * 100 + patch))
wheel=$(ls dist/redislock-"$version"-*.whl 2>/dev/null | head -n 1 || true)
npm_tgz=dist/redislock-$version-linux-x64-gnu.tgz
release=redislock-$version-x86_64-linux-gnu
release_tgz=dist/$release.tar.gz
if [ -z "$wheel" ] || [ ! -f "$npm_tgz" ] || [ ! -f "$release_tgz" ] || [ ! -f dist/SHA256SUMS ]; then
  skip "no dist/ artifacts of $version: run 'make dist' (or 'make test-dist')"
fi
for tool in redis-server redis-cli python3 node npm objdump ldd; do
  command -v "$tool" >/dev/null || skip "$tool is missing"
done

passed=0 failed=0 failures=()
pass() {
  say "ok: $1"
  passed=$((passed + 1))
}
fail() {
  say "FAILED: $1${2:+ ($2)}"
  failed=$((failed + 1))
  failures+=("$1")
}
# check NAME COMMAND...: passes when COMMAND exits 0; its output indented.
check() {
  local name=$1 out
  shift
  if out=$("$@" 2>&1); then
    [ -z "$out" ] || sed 's/^/    /' <<<"$out"
    pass "$name"
  else
    sed 's/^/    /' <<<"$out"
    fail "$name"
  fi
}

tmp=$(mktemp -d)
servers_dir=$tmp/servers
ports=
stop_servers() {
  if [ -n "$ports" ]; then
    REDLOCK_PORTS=$ports RUN_DIR=$servers_dir scripts/redlock-servers.sh down >/dev/null 2>&1 || true
  fi
}
# stop_pidfile FILE: stops the server by its PID and waits for its exit,
# while its directory is still there to save into (a Redis whose
# shutdown save fails refuses to exit): SIGKILL after 10 s.
stop_pidfile() {
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 0
  kill "$pid" 2>/dev/null || return 0
  for _ in $(seq 200); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.05
  done
  kill -9 "$pid" 2>/dev/null || true
}
cleanup() {
  stop_servers
  stop_pidfile "$tmp/sample/redis.pid"
  stop_pidfile "$tmp/deb-server/redis.pid"
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The user's environment: no Rust, no cargo or rustup variables, a HOME
# (pip's and npm's caches) of its own.
mkdir -p "$tmp/home"
clean() {
  env -i PATH=/usr/bin:/bin HOME="$tmp/home" LANG=C.UTF-8 TMPDIR="$tmp" \
    PIP_DISABLE_PIP_VERSION_CHECK=1 npm_config_update_notifier=false "$@"
}
no_toolchain() {
  local found
  found=$(clean sh -c 'command -v cargo rustc rustup' || true)
  [ -z "$found" ] || { echo "found: $found"; return 1; }
}
check "no cargo, rustc or rustup in the test environment (env -i PATH=/usr/bin:/bin)" no_toolchain
check "SHA256SUMS matches dist/" sh -c 'cd dist && sha256sum -c --quiet SHA256SUMS'

# The release tarball.
mkdir -p "$tmp/release"
tar -xzf "$release_tgz" -C "$tmp/release"
rel=$tmp/release/$release
contents() {
  local f missing=()
  for f in libredislock.so redlock redis.conf LICENSE INSTALL; do
    [ -f "$rel/$f" ] || missing+=("$f")
  done
  [ ${#missing[@]} -eq 0 ] || { echo "missing: ${missing[*]}"; return 1; }
  tar -tvzf "$release_tgz" | awk '$NF ~ /\/(libredislock\.so|redlock)$/ && $1 != "-rwxr-xr-x" { print "not 0755: " $0; bad = 1 } END { exit bad }'
  grep -q '^loadmodule .*/libredislock\.so$' "$rel/redis.conf" || { echo "redis.conf has no loadmodule line"; return 1; }
}
check "the release tarball holds libredislock.so and redlock (0755), redis.conf with loadmodule, LICENSE, INSTALL" contents

# Five servers with the tarball's module on free ports (a port taken
# meanwhile makes scripts/redlock-servers.sh fail: then again, elsewhere).
free_ports() {
  python3 -c '
import socket
socks = [socket.socket() for _ in range(5)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))'
}
started=
for attempt in 1 2 3; do
  ports=$(free_ports)
  if REDLOCK_PORTS=$ports RUN_DIR=$servers_dir REDISLOCK_MODULE=$rel/libredislock.so \
    REDLOCK_SERVER_ARGS="--redislock.quarantine 0" \
    scripts/redlock-servers.sh up >"$tmp/up.log" 2>&1; then
    started=1
    break
  fi
  cat "$tmp/up.log"
  stop_servers
done
if [ -z "$started" ]; then
  fail "five redis-servers load the tarball's module" "they did not start; see above"
  echo "dist: $passed passed, $failed failed"
  exit 1
fi
urls=$(for p in $ports; do printf 'redis://127.0.0.1:%s,' "$p"; done)
urls=${urls%,}
say "redis-server $(redis-server --version | grep -o 'v=[^ ]*') with $release/libredislock.so on 127.0.0.1 ports $ports"

module_list_ver() {
  local p line vers=()
  for p in $ports; do
    line=$(redis-cli -h 127.0.0.1 -p "$p" MODULE LIST | tr '\n' ' ')
    case $line in *"name redislock ver $module_ver "*) vers+=("$p") ;; *) echo "127.0.0.1:$p: MODULE LIST says: $line"; return 1 ;; esac
  done
  echo "MODULE LIST on all 5: name redislock ver $module_ver"
}
check "the tarball's module loads into redis-server, MODULE LIST ver $module_ver ($version)" module_list_ver

# one_server DIR ARGS...: a redis-server in DIR (daemonized, its PID in
# DIR/redis.pid) on a free port, with ARGS; takes a lock on it.
one_server() {
  local dir=$1 port
  shift
  mkdir -p "$dir"
  port=$(free_ports | cut -d' ' -f1)
  echo "$port" >"$dir/port"
  (cd "$dir" && redis-server "$@" --port "$port" --bind 127.0.0.1 --daemonize yes \
    --pidfile "$dir/redis.pid" --logfile "$dir/redis.log") || return 1
  for _ in $(seq 100); do
    [ "$(redis-cli -p "$port" PING 2>/dev/null)" = PONG ] && break
    sleep 0.05
  done
  redis-cli -p "$port" LOCK.ACQUIRE dist:one me 10000 | grep -Eq '^[1-9][0-9]*$' \
    || { tail -n 5 "$dir/redis.log"; return 1; }
  echo "redis-server $*: LOCK.ACQUIRE granted"
}

# The sample redis.conf, its loadmodule line pointed at the unpacked
# module, starts a server (its own port, in a directory of its own).
sample_conf() {
  mkdir -p "$tmp/sample"
  sed "s|^loadmodule .*|loadmodule $rel/libredislock.so|" "$rel/redis.conf" >"$tmp/sample/redis.conf"
  one_server "$tmp/sample" "$tmp/sample/redis.conf"
}
check "the sample redis.conf (loadmodule pointed at the unpacked module) starts a server with the module" sample_conf

# INSTALL's check lines (the indented `redis-cli`/`redlock` lines after
# "Check:"), run in order as a reader types them, against that server
# (port 6379 replaced by its port; a trailing "(what it prints)" dropped):
# each must exit 0, and `redis-cli` must not print an error.
install_check_lines() {
  local port line out n=0
  local status
  port=$(cat "$tmp/sample/port" 2>/dev/null)
  [ -n "$port" ] || { echo "the sample server's port is unknown"; return 1; }
  while IFS= read -r line; do
    line=$(sed -E 's/[[:space:]]{2,}\(.*\)$//; s/^[[:space:]]+//' <<<"$line")
    line=${line//127.0.0.1:6379/127.0.0.1:$port}
    case $line in redis-cli*) line="redis-cli -p $port${line#redis-cli}" ;; esac
    n=$((n + 1))
    echo "\$ $line"
    out=$(cd "$rel" && PATH="$rel:$PATH" bash -c "$line" 2>&1)
    status=$?
    [ "$status" -eq 0 ] || { echo "$out"; echo "exited $status"; return 1; }
    echo "$out"
    case $out in *ERR*|*WRONGTYPE*|*"(error)"*) echo "an error"; return 1 ;; esac
  done < <(awk '/Check:$/ { f = 1; next } f && /^[^[:space:]]/ && n { exit } f && /^[[:space:]]+(redis-cli|redlock) / { print; n++ }' "$rel/INSTALL")
  [ "$n" -ge 3 ] || { echo "INSTALL has $n check lines"; return 1; }
}
check "INSTALL's check lines pass when run in order" install_check_lines
stop_pidfile "$tmp/sample/redis.pid"

# The .deb, when make dist made one (where dpkg-deb is): unpacked, not
# installed (that would change this machine).
deb=dist/redislock_${version}_amd64.deb
debian_package() {
  local depends
  depends=$(dpkg-deb -f "$deb" Depends)
  echo "Depends: $depends"
  [ "$depends" = "libc6 (>= $glibc_max)" ] || return 1
  dpkg-deb -x "$deb" "$tmp/deb"
  [ -x "$tmp/deb/usr/bin/redlock" ] || { echo "no /usr/bin/redlock"; return 1; }
  dpkg-deb -c "$deb" | grep -E '^-rwxr-xr-x root/root .* \./usr/lib/redis/modules/libredislock\.so$' \
    || { echo "no ./usr/lib/redis/modules/libredislock.so, 0755, root's"; return 1; }
  one_server "$tmp/deb-server" --loadmodule "$tmp/deb/usr/lib/redis/modules/libredislock.so" --save "" --appendonly no
}
deb_version() {
  local found
  found=$(dpkg-deb -f "$deb" Version)
  echo "$found"
  [ "$found" = "$version" ]
}
if [ -f "$deb" ] && command -v dpkg-deb >/dev/null; then
  check "the .deb puts the module (0755) in /usr/lib/redis/modules, redlock in /usr/bin; its module loads" debian_package
  stop_pidfile "$tmp/deb-server/redis.pid"
  check "the .deb says $version" deb_version
else
  say "no .deb in dist/ (make dist makes one where dpkg-deb is): not tested"
fi

redlock_cli() {
  local out owner
  out=$(clean "$rel/redlock" --servers "$urls" acquire dist:redlock --ttl 10s) || { echo "$out"; return 1; }
  echo "$out"
  grep -Eq '^token: [1-9][0-9]*$' <<<"$out" || { echo "no token"; return 1; }
  owner=$(sed -n 's/^owner: //p' <<<"$out")
  out=$(clean "$rel/redlock" --servers "$urls" release dist:redlock "$owner") || { echo "$out"; return 1; }
  echo "$out"
  grep -q '^released: 5$' <<<"$out"
}
check "the tarball's redlock takes and releases a quorum lock" redlock_cli
redlock_version() {
  local out
  out=$(clean "$rel/redlock" --version)
  echo "$out"
  [ "$out" = "redlock $version" ]
}
check "redlock --version says $version" redlock_version

# The wheel, into a fresh venv, without an index (nothing to fetch, nothing
# to build).
python=$(python3 -c 'import os, sys; print(os.path.realpath(sys.executable))')
wheel_tags() {
  local name
  name=$(basename "$wheel")
  echo "$name"
  [[ $name == redislock-"$version"-cp39-abi3-manylinux_2_28_x86_64.whl ]] \
    || [[ $name == redislock-"$version"-cp39-abi3-manylinux2014_x86_64.manylinux_2_17_x86_64.whl ]]
}
check "the wheel is one abi3 manylinux x86_64 wheel of $version" wheel_tags
wheel_install() {
  local t0=$SECONDS
  clean "$python" -m venv "$tmp/venv" || return 1
  clean "$tmp/venv/bin/pip" install --no-index --only-binary=:all: "$root/$wheel" || return 1
  echo "installed in $((SECONDS - t0)) s (with the venv)"
  [ $((SECONDS - t0)) -le 60 ]
}
check "a fresh venv installs the wheel with pip install --no-index, in seconds" wheel_install
python_lock() {
  clean "$tmp/venv/bin/python" - "$urls" "$version" <<'EOF'
import sys
import redislock

urls, version = sys.argv[1].split(","), sys.argv[2]
assert redislock.__version__ == version, f"redislock.__version__ is {redislock.__version__}, not {version}"
rl = redislock.Redlock(urls)
with rl.lock("dist:python", ttl=10.0, wait=5.0) as lock:
    assert lock.token > 0 and not lock.lost
    print(f"held dist:python on a quorum of {len(urls)}: token {lock.token}")
print("released")
EOF
}
check "the wheel takes a quorum lock (redislock.Redlock(...).lock)" python_lock
wheel_version() {
  clean "$tmp/venv/bin/python" -c 'import importlib.metadata as m, redislock; print(m.version("redislock"), redislock.__version__)' \
    | tee /dev/stderr | grep -qx "$version $version"
}
check "the wheel says $version (metadata and redislock.__version__)" wheel_version

# The npm package, into a fresh project, offline.
npm_package() {
  tar -xOzf "$npm_tgz" package/package.json | node -e '
    const pkg = JSON.parse(require("fs").readFileSync(0, "utf8"));
    const scripts = Object.keys(pkg.scripts || {}).filter((s) => /install|prepare/.test(s));
    if (scripts.length) { console.log(`install-time scripts: ${scripts}`); process.exit(1); }
    if (Object.keys(pkg.dependencies || {}).length) { console.log("runtime dependencies: an offline install would fail"); process.exit(1); }'
  tar -tzf "$npm_tgz" | grep -x package/redislock.node >/dev/null || { echo "no package/redislock.node"; return 1; }
}
check "the npm tarball carries redislock.node and no install script" npm_package
npm_install() {
  local t0=$SECONDS
  mkdir -p "$tmp/app"
  (cd "$tmp/app" && echo '{ "name": "dist-test", "version": "1.0.0", "private": true }' >package.json \
    && clean npm install --offline --no-audit --no-fund "$root/$npm_tgz") || return 1
  echo "installed in $((SECONDS - t0)) s"
  [ -f "$tmp/app/node_modules/redislock/redislock.node" ]
}
check "a fresh npm project installs the tarball offline" npm_install
node_lock() {
  (cd "$tmp/app" && clean node - "$urls" <<'EOF'
const { Redlock } = require('redislock');
(async () => {
  const urls = process.argv[2].split(',');
  const redlock = new Redlock(urls);
  const lock = await redlock.acquire('dist:node', 10000);
  if (!(lock.token > 0n)) throw new Error(`token ${lock.token}`);
  console.log(`held dist:node on a quorum of ${urls.length}: token ${lock.token}`);
  const { released } = await lock.release();
  console.log(`released on ${released}`);
  if (released !== urls.length) process.exit(1);
})().catch((e) => { console.error(e); process.exit(1); });
EOF
  )
}
check "the npm package takes a quorum lock (new Redlock(...).acquire)" node_lock
npm_version() {
  local found
  found=$(node -p 'require(process.argv[1]).version' "$tmp/app/node_modules/redislock/package.json")
  echo "$found"
  [ "$found" = "$version" ]
}
check "the npm package says $version" npm_version

# Every shipped binary: glibc symbols up to 2.28, no OpenSSL.
extension=$(ls "$tmp"/venv/lib/python*/site-packages/redislock/_redislock*.so 2>/dev/null | head -n 1 || true)
binaries=(
  "module:$rel/libredislock.so"
  "redlock:$rel/redlock"
  "wheel extension:${extension:-missing (the wheel did not install)}"
  "node addon:$tmp/app/node_modules/redislock/redislock.node"
)
glibc_ok() {
  local file=$1 max
  [ -f "$file" ] || { echo "$file is missing"; return 1; }
  max=$(objdump -T "$file" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1)
  echo "needs glibc $max"
  [ "$(printf '%s\n%s\n' "$max" "$glibc_max" | sort -V | tail -n 1)" = "$glibc_max" ]
}
no_openssl() {
  local file=$1 libs
  [ -f "$file" ] || { echo "$file is missing"; return 1; }
  libs=$(ldd "$file" | awk '{ print $1 }' | tr '\n' ' ')
  echo "links: $libs"
  ! grep -Eq 'libssl|libcrypto' <<<"$libs"
}
for entry in "${binaries[@]}"; do
  check "${entry%%:*}: glibc $glibc_max at most" glibc_ok "${entry#*:}"
  check "${entry%%:*}: no OpenSSL" no_openssl "${entry#*:}"
done

echo
if [ ${#failures[@]} -gt 0 ]; then
  list=$(printf '%s; ' "${failures[@]}")
  say "failed: ${list%; }"
fi
echo "dist: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
