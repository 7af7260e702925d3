#!/usr/bin/env bash
# The body of `make dist`: what would be published, built into dist/ for
# x86_64 Linux with glibc 2.28 or later and no OpenSSL:
#
#   redislock-V-cp39-abi3-manylinux_2_28_x86_64.whl   the Python package
#   redislock-V-linux-x64-gnu.tgz          the npm package, addon inside
#   redislock-V-x86_64-linux-gnu.tar.gz    the module, `redlock`, a sample
#                                          redis.conf, LICENSE, INSTALL
#   redislock_V_amd64.deb                  the same for Debian and Ubuntu
#                                          (where dpkg-deb is)
#   SHA256SUMS
#
# V is the workspace version (scripts/versions.sh, which must agree with
# node/package.json). Everything is linked by zig against glibc 2.28
# (cargo-zigbuild, maturin --zig; scripts/dist-tools.txt, installed into
# target/dist-tools when missing), so it runs on older distributions than
# the build machine's. scripts/test-dist.sh tests the result.
#
# Build output goes to target/x86_64-unknown-linux-gnu/ (beside, not over,
# `make build`'s target/release; CARGO_TARGET_DIR moves it); staging to
# target/dist-stage.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
dist=$root/dist
stage=$root/target/dist-stage
tools=$root/target/dist-tools
triple=x86_64-unknown-linux-gnu
glibc=2.28
export PIP_DISABLE_PIP_VERSION_CHECK=1

say() { echo "dist: $*"; }
die() { echo "dist: $*" >&2; exit 1; }
started=$SECONDS
# step NAME [NOTE]: times the steps; the first build of each is the slow one.
step_started=$SECONDS step_name=
step() {
  [ -n "$step_name" ] && say "$step_name: $((SECONDS - step_started)) s"
  step_name=$1 step_started=$SECONDS
  [ -n "$step_name" ] && say "$step_name${2:+ ($2)}"
  return 0
}

command -v cargo >/dev/null || die "cargo is missing: install Rust (rustup)"
command -v node >/dev/null && command -v npm >/dev/null || die "node and npm are missing: install Node.js 20 or later"
version=$(scripts/versions.sh check) || die "the versions disagree (above)"
# The time stamps inside the release tarball: the last commit's. Not
# exported: C-compiling build scripts rerun when SOURCE_DATE_EPOCH changes,
# and then nearly everything would be compiled again after each commit.
epoch=$(git log -1 --format=%ct 2>/dev/null || date +%s)
say "redislock $version for $triple, glibc $glibc or later"

# The build tools, into their own virtualenv; again only when
# scripts/dist-tools.txt changed.
step "tools" "scripts/dist-tools.txt into ${tools#"$root"/}, when missing"
wanted=$(sha256sum scripts/dist-tools.txt | cut -d' ' -f1)
if [ "$(cat "$tools/.installed" 2>/dev/null)" != "$wanted" ]; then
  [ -x "$tools/bin/python" ] || "${PYTHON:-python3}" -m venv "$tools"
  "$tools/bin/pip" install -q -r scripts/dist-tools.txt
  echo "$wanted" >"$tools/.installed"
fi
export PATH=$tools/bin:$PATH

# bindgen (the redis-module crate's build script) parses C headers with
# the system's libclang, which does not understand the include flags
# cargo-zigbuild gives it for zig's headers, and then finds no
# <sys/types.h>. Given first, these name zig's glibc headers (the ones
# the C code is compiled against) and libclang's own builtin headers.
zig_lib=$("$tools/bin/python" -c 'import ziglang, os; print(os.path.join(os.path.dirname(ziglang.__file__), "lib"))')
clang_include=$(ls -d /usr/lib/llvm-*/lib/clang/*/include 2>/dev/null | sort -V | tail -n 1)
[ -n "$clang_include" ] || die "libclang's headers are missing: apt-get install libclang-dev (scripts/install-deps.sh)"
bindgen_args="-isystem $clang_include"
for dir in x86-linux-gnu generic-glibc x86-linux-any any-linux-any; do
  bindgen_args+=" -isystem $zig_lib/libc/include/$dir"
done
# (bindgen reads the variable named with the target's hyphens first, a
# name bash cannot export.)
zig_env() { env "BINDGEN_EXTRA_CLANG_ARGS_$triple=$bindgen_args" "$@"; }

# The module and `redlock`: the release profile (whole-program LTO, the
# module aborts on a panic), as `make build` makes them.
step "the module and redlock" "cargo zigbuild --release; about 2.5 min on 2 idle cores the first time"
zig_env cargo zigbuild --release -p redislock -p redlock --target "$triple.$glibc"
built=${CARGO_TARGET_DIR:-$root/target}/$triple/release

# The wheel: python/pyproject.toml's profile (unwinding), one abi3 wheel
# for CPython 3.9 and later.
step "the wheel" "maturin --zig; about 1.5 min on 2 idle cores the first time"
rm -rf "$stage/wheel"
# The wheel's time stamps: a constant (1980-01-01, the oldest a zip file
# holds), for the same reason.
SOURCE_DATE_EPOCH=315532800 zig_env maturin build --zig --compatibility "manylinux_${glibc/./_}" --target "$triple" \
  --manifest-path python/Cargo.toml --out "$stage/wheel"
wheels=("$stage"/wheel/redislock-"$version"-*.whl)
[ ${#wheels[@]} -eq 1 ] && [ -f "${wheels[0]}" ] || die "expected one wheel of $version in $stage/wheel"
wheel=${wheels[0]}
auditwheel show "$wheel" | tee "$stage/auditwheel.txt"
grep -q "manylinux_${glibc/./_}_x86_64" "$stage/auditwheel.txt" \
  || die "auditwheel does not find $(basename "$wheel") manylinux_${glibc/./_} compatible"

# The npm package: node/ as `npm pack` packs it, with the addon built for
# glibc 2.28 inside and no install or build script (nothing runs at
# install); os/cpu/libc tell npm where the addon runs.
step "the Node addon" "cargo zigbuild, profile node-addon; about 1.5 min on 2 idle cores the first time"
rm -rf "$stage/npm" && mkdir -p "$stage/npm/package"
pkg=$stage/npm/package
zig_env node node/scripts/build.mjs --zig --out "$pkg/redislock.node"
STAGE=$pkg node -e '
  const fs = require("fs"), path = require("path");
  const pkg = JSON.parse(fs.readFileSync("node/package.json", "utf8"));
  for (const entry of pkg.files) {
    if (entry.startsWith("scripts/") || entry === "redislock.node") continue;
    fs.cpSync(path.join("node", entry), path.join(process.env.STAGE, entry), { recursive: true });
  }
  fs.copyFileSync("node/README.md", path.join(process.env.STAGE, "README.md"));
  fs.copyFileSync("LICENSE", path.join(process.env.STAGE, "LICENSE"));
  delete pkg.scripts;
  delete pkg.devDependencies;
  pkg.files = pkg.files.filter((f) => !f.startsWith("scripts/"));
  Object.assign(pkg, { os: ["linux"], cpu: ["x64"], libc: ["glibc"] });
  fs.writeFileSync(path.join(process.env.STAGE, "package.json"), JSON.stringify(pkg, null, 2) + "\n");'
(cd "$pkg" && npm pack --silent --pack-destination "$stage/npm" >/dev/null)
[ -f "$stage/npm/redislock-$version.tgz" ] || die "npm pack made no redislock-$version.tgz"

# The release tarball, the same bytes for the same inputs: sorted names,
# root-owned, every time stamp the last commit's.
step "packing"
rel=redislock-$version-x86_64-linux-gnu
rm -rf "${stage:?}/$rel" && mkdir -p "$stage/$rel"
install -m 755 "$built/libredislock.so" "$built/redlock" "$stage/$rel/"
install -m 644 LICENSE packaging/redis.conf "$stage/$rel/"
IFS=. read -r major minor patch <<<"$version"
sed -e "s/@VERSION@/$version/" -e "s/@MODULE_VER@/$((major * 10000 + minor * 100 + patch))/" \
  packaging/INSTALL >"$stage/$rel/INSTALL"

# The .deb (dpkg-deb, root-owned files): the module where Debian's
# packaged Redis modules go, /usr/lib/redis/modules, `redlock` on PATH;
# Debian's /etc/redis/redis.conf loads nothing by itself, so the package
# says the loadmodule line in its description and its doc directory.
deb=
if command -v dpkg-deb >/dev/null; then
  deb_root=$stage/deb
  rm -rf "$deb_root" && mkdir -p "$deb_root/DEBIAN"
  install -D -m 755 "$built/libredislock.so" "$deb_root/usr/lib/redis/modules/libredislock.so"
  install -D -m 755 "$built/redlock" "$deb_root/usr/bin/redlock"
  install -D -m 644 LICENSE "$deb_root/usr/share/doc/redislock/copyright"
  install -D -m 644 packaging/redis.conf "$deb_root/usr/share/doc/redislock/redis.conf.example"
  sed -i 's|/usr/local/lib/redislock/libredislock.so|/usr/lib/redis/modules/libredislock.so|' \
    "$deb_root/usr/share/doc/redislock/redis.conf.example"
  cat >"$deb_root/DEBIAN/control" <<CONTROL
Package: redislock
Version: $version
Architecture: amd64
Maintainer: the redislock authors <redislock@localhost>
Depends: libc6 (>= 2.28)
Suggests: redis-server (>= 5:7.0) | valkey-server
Section: database
Priority: optional
Installed-Size: $(du -sk "$deb_root/usr" | cut -f1)
Description: native distributed locks for Redis: a module with fencing tokens
 The redislock Redis module (LOCK.ACQUIRE, LOCK.RELEASE, LOCK.EXTEND,
 LOCK.INFO: fencing tokens, fair waiting, shared locks and semaphores) and
 redlock, the Redlock quorum client. Load the module with the line
 "loadmodule /usr/lib/redis/modules/libredislock.so" in
 /etc/redis/redis.conf (Redis 7.0 or later, or Valkey).
CONTROL
  find "$deb_root" -exec touch -h -d "@$epoch" {} +
  deb=redislock_${version}_amd64.deb
  SOURCE_DATE_EPOCH=$epoch dpkg-deb --root-owner-group -Zgzip --build "$deb_root" "$stage/$deb" >/dev/null
else
  say "no dpkg-deb here: no .deb"
fi

rm -rf "$dist" && mkdir -p "$dist"
tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" \
  -C "$stage" -cf - "$rel" | gzip -n >"$dist/$rel.tar.gz"
cp "$wheel" "$dist/"
cp "$stage/npm/redislock-$version.tgz" "$dist/redislock-$version-linux-x64-gnu.tgz"
[ -z "$deb" ] || cp "$stage/$deb" "$dist/"
(cd "$dist" && sha256sum -- *.whl *.tgz *.tar.gz ${deb:+"$deb"} >SHA256SUMS)
# What dist/ was built from, for `scripts/test-dist.sh --current`.
scripts/test-dist.sh --source-id >"$stage/source-id"
step ""

say "built in $((SECONDS - started)) s:"
(cd "$dist" && ls -l -- * | awk '{ printf "dist:   %-50s %9d bytes\n", $NF, $5 }')
