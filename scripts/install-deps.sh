#!/usr/bin/env bash
# Installs what building and testing redislock needs, only where missing:
# redis-server and redis-tools (the server, redis-cli, redis-benchmark) and
# libclang with its headers (the redis-module crate generates its bindings
# with bindgen at build time; libclang alone lacks stddef.h), faketime
# (clock-skew fault tests run a server under libfaketime), iproute2 and
# nftables (the partition suite cuts links and drops packets between
# network namespaces), openssl (the TLS tests make their own CA and
# certificates, scripts/test-certs.sh), and binutils (objdump, with which
# the dist suite reads the glibc versions a binary asks for), and
# prometheus (its promtool checks the text of `redlock --metrics` and the
# alert rules and dashboard of docs/, and the CLI tests start its server on
# a port of their own; the package's system-wide server is not started),
# and prometheus-redis-exporter (the CLI tests run it with
# docs/prometheus/redislock-info.lua; its system-wide service is not
# started either). What only
# `make dist` builds with (zig, cargo-zigbuild, maturin, auditwheel) comes
# from PyPI into target/dist-tools: scripts/dist.sh installs it.
#
# With --examples, instead: the toolchains of examples/serve/ beyond
# python3, node and redis-cli (Go with redigo, PHP with phpredis, Ruby with
# redis-rb, Perl with Redis.pm; about 370 MB installed, most of it Go),
# which scripts/test-examples.sh installs when it can, rather than every
# build.
set -euo pipefail

wanted=(redis-server redis-tools libclang-dev faketime iproute2 nftables openssl binutils prometheus prometheus-redis-exporter)
if [ "${1:-}" = --examples ]; then
  wanted=(golang-go golang-github-gomodule-redigo-dev php-cli php-redis ruby-redis libredis-perl)
fi
missing=()
for pkg in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null; then
  echo "install-deps: missing ${missing[*]} and no apt-get here; install them by hand" >&2
  exit 1
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install-deps: installing ${missing[*]}" >&2
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The package starts a system-wide server on 6379; our tests use their own.
if [ -d /run/systemd/system ]; then $sudo systemctl disable --now redis-server >/dev/null 2>&1 || true; fi
# The same for prometheus's server and the exporter: the tests start their own.
if [ -d /run/systemd/system ]; then
  $sudo systemctl disable --now prometheus prometheus-redis-exporter >/dev/null 2>&1 || true
fi
