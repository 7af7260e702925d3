# redislock: build, run, test, benchmark.
SHELL := /bin/bash
MODULE := target/release/libredislock.so
RUN_DIR ?= .run
RUN_PORT ?= 6379
REDLOCK_PORTS ?= 7001 7002 7003 7004 7005
# make install: the `redlock` program goes where `cargo install` puts
# programs (on PATH wherever Rust is set up), the module under PREFIX.
PREFIX ?= $(HOME)/.local
BINDIR ?= $(or $(CARGO_HOME),$(HOME)/.cargo)/bin
MODULEDIR ?= $(PREFIX)/lib/redislock

.PHONY: all deps build wheel node dist run install uninstall test test-dist test-all lint bench bench-fence bench-node bench-rtt bench-memory bench-ab bench-serve bench-metrics redlock-up redlock-down clean

all: build

# Servers beyond Debian's redis-server (7.0) that `make test` also runs the
# module's suite against; `make test-all` adds the rest (scripts/install-servers.sh).
TEST_SERVERS := valkey-8.1
ALL_SERVERS := valkey-8.1 valkey-9.1 redis-8.2

deps:
	@scripts/install-deps.sh
	@scripts/install-servers.sh $(TEST_SERVERS)

# The Python binding (python/) is built by maturin, with its own profile:
# `make wheel`, or `pip install ./python`; the Node.js one (node/) by its
# own script: `make node`, or `npm install ./node`.
build: deps
	cargo build --release --workspace --exclude redislock-python --exclude redislock-node

# A wheel of the Python package in target/wheels (pip fetches maturin).
wheel: build
	@echo "redislock: compiling the Python extension (maturin, quiet): about 3 minutes on 2 cores the first time, several times that beside other builds"
	python3 -m pip wheel --no-deps --wheel-dir target/wheels ./python

# What would be published, into dist/: the manylinux wheel, the npm
# tarball with the addon inside, the release tarball (module, redlock,
# sample redis.conf), SHA256SUMS; linked by zig against glibc 2.28
# (scripts/dist.sh; its tools go into target/dist-tools).
dist:
	@scripts/install-deps.sh
	@scripts/dist.sh

# The Node.js package in node/: the addon built into node/redislock.node,
# ready for `npm install <checkout>/node` (or `npm pack` in node/).
node:
	npm --prefix node run build

$(MODULE): build

# One Redis with the module, in the foreground; Ctrl-C stops it. Its data
# (RDB, AOF, the clean-shutdown record) goes to .run/6379 (RUN_PORT, RUN_DIR).
run: build
	@mkdir -p $(RUN_DIR)/$(RUN_PORT)
	@echo "redislock: Redis on 127.0.0.1:$(RUN_PORT) with the module, data in $(RUN_DIR)/$(RUN_PORT); try: redis-cli LOCK.ACQUIRE demo me 10000"
	@echo "redislock: press Ctrl-C to stop"
	redis-server redis.conf --loadmodule $(CURDIR)/$(MODULE) --port $(RUN_PORT) --dir $(abspath $(RUN_DIR))/$(RUN_PORT)

# `redlock` into BINDIR, the module into MODULEDIR. The module is
# executable (0755), like any shared library: Redis 7.0+ and Valkey refuse
# to load a module file without execute permission.
install: build
	install -D -m 755 target/release/redlock $(BINDIR)/redlock
	install -D -m 755 $(MODULE) $(MODULEDIR)/libredislock.so
	@echo "redislock: installed $(BINDIR)/redlock and $(MODULEDIR)/libredislock.so"
	@echo "redislock: load it with: loadmodule $(MODULEDIR)/libredislock.so"
	@case ":$$PATH:" in *":$(BINDIR):"*) ;; *) echo "redislock: note: $(BINDIR) is not on PATH; add it, e.g. export PATH=\"$(BINDIR):\$$PATH\"";; esac

uninstall:
	rm -f $(BINDIR)/redlock $(MODULEDIR)/libredislock.so
	-rmdir $(MODULEDIR) 2>/dev/null

# Module and client suites (and the client's doc tests) on Redis 7.0, the
# module's suite on each of TEST_SERVERS, node, README's quick start,
# python, partitions, examples, lint and docs; every suite runs, then a
# summary (scripts/test.sh).
test: build
	@scripts/test.sh $(TEST_SERVERS)

# dist/ brought up to date, then the dist suite: installed and used where
# no Rust toolchain is (scripts/test-dist.sh; `make test` runs it only when
# dist/ was built from the sources as they are). .ci/run runs it after
# `make test`: from a clean clone it adds about 6 minutes of building on
# 2 cores (measured on 2026-11-29: 336 s, with 9 s for its tools from
# PyPI; 651 s on busier cores), and 10 s of tests.
test-dist: dist
	@scripts/test-dist.sh

# rustfmt and clippy -D warnings alone (make test runs them too).
lint:
	@scripts/lint.sh

test-all: build
	@scripts/install-servers.sh $(ALL_SERVERS)
	@scripts/test.sh $(ALL_SERVERS)

# Throughput against SET NX PX and the Lua scripts (redis-benchmark), then the
# fence's commands against SET, GET and a Lua fenced write (benches/fence.sh), then the
# memory a held lock costs against the same SET NX PX key (benches/memory.sh), shared
# holds and permits against exclusive ACQUIRE and a Lua sorted-set semaphore, then
# contended waiting against the polling loop (benches/contended.rs), one
# server's line of 11,000 against as many BLPOPs and LOCK.TOP over 10^4 waited
# keys (benches/line.rs), the quorum client against rslock on five servers (client/benches/quorum.rs),
# `redlock serve` against the Rust client (client/benches/serve.rs), then
# ACQUIRE/RELEASE on a 3-master Redis Cluster (benches/cluster.sh), then
# the Python package against Pottery's Redlock on five servers (benches/python.sh),
# the Node.js package against node-redlock on five servers (benches/node.sh).
# (`make bench-rtt`, apart: the quorum client against rslock through 0-0.5 ms proxies.)
bench: build
	REDISLOCK_MODULE=$(CURDIR)/$(MODULE) bash benches/module.sh
	REDISLOCK_MODULE=$(CURDIR)/$(MODULE) bash benches/fence.sh
	REDISLOCK_MODULE=$(CURDIR)/$(MODULE) bash benches/memory.sh
	REDISLOCK_MODULE=$(CURDIR)/$(MODULE) bash benches/family.sh
	REDISLOCK_MODULE=$(CURDIR)/$(MODULE) cargo bench --bench contended
	REDISLOCK_MODULE=$(CURDIR)/$(MODULE) cargo bench --bench line
	REDISLOCK_MODULE=$(CURDIR)/$(MODULE) cargo bench -p redlock --bench quorum
	REDISLOCK_MODULE=$(CURDIR)/$(MODULE) cargo bench -p redlock --bench serve
	REDISLOCK_MODULE=$(CURDIR)/$(MODULE) cargo bench -p redlock --bench metrics
	REDISLOCK_MODULE=$(CURDIR)/$(MODULE) bash benches/cluster.sh
	REDISLOCK_MODULE=$(CURDIR)/$(MODULE) bash benches/python.sh
	REDISLOCK_MODULE=$(CURDIR)/$(MODULE) bash benches/node.sh

# `redlock serve` against the Rust client it runs, on five servers
# (client/benches/serve.rs): 32 workers and 1, 16 contenders on one key,
# and redis-benchmark through the endpoint.
bench-serve: build
	REDISLOCK_MODULE=$(CURDIR)/$(MODULE) cargo bench -p redlock --bench serve

# What the client's metrics cost: one handle counting, one not, side by
# side (client/benches/metrics.rs).
bench-metrics: build
	REDISLOCK_MODULE=$(CURDIR)/$(MODULE) cargo bench -p redlock --bench metrics

# The store-side fence alone (benches/fence.sh): LOCK.GUARD, LOCK.FENCED and
# the Lua fenced write against SET, LOCK.CHECK against GET.
bench-fence: build
	REDISLOCK_MODULE=$(CURDIR)/$(MODULE) bash benches/fence.sh

# The Node.js package against node-redlock alone (benches/node.sh).
bench-node: build
	REDISLOCK_MODULE=$(CURDIR)/$(MODULE) bash benches/node.sh

# `redlock bench` beside rslock 0.10 through delaying proxies (0, 0.1, 0.25,
# 0.5 ms one way), 1, 4 and 16 contenders, exact 1 ms hold; about 5 min
# (client/benches/rtt.rs; BENCH_SECONDS, BENCH_ROUNDS, BENCH_DELAYS).
bench-rtt: build
	REDISLOCK_MODULE=$(CURDIR)/$(MODULE) cargo bench -p redlock --bench rtt

# Memory per held lock against SET NX PX, 10^6 keys (benches/memory.sh);
# `make bench-memory OLD=path/to/old/libredislock.so` measures both in one run.
bench-memory: build
	REDISLOCK_MODULE=$(CURDIR)/$(MODULE) BENCH_MEMORY_OLD="$(OLD)" bash benches/memory.sh

# This build's module against an earlier one, interleaved on two private
# servers: `make bench-ab OLD=path/to/old/libredislock.so` (benches/ab.sh).
bench-ab: build
	bash benches/ab.sh "$(OLD)" $(CURDIR)/$(MODULE)

# Five independent module-equipped masters on 127.0.0.1:7001-7005 for the
# Redlock quorum client; state and logs under .run/<port>. Up returns when
# all answer and have loaded their data; down stops them cleanly.
redlock-up: build
	@REDLOCK_PORTS="$(REDLOCK_PORTS)" RUN_DIR=$(RUN_DIR) scripts/redlock-servers.sh up

redlock-down:
	@REDLOCK_PORTS="$(REDLOCK_PORTS)" RUN_DIR=$(RUN_DIR) scripts/redlock-servers.sh down

clean:
	cargo clean
	rm -rf $(RUN_DIR) dist
