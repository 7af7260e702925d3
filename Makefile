# redislock: build, run, test, benchmark.
SHELL := /bin/bash
MODULE := target/release/libredislock.so
RUN_DIR := .run
REDLOCK_PORTS := 7001 7002 7003 7004 7005

.PHONY: all deps build run test test-all bench redlock-up redlock-down clean

all: build

# Servers beyond Debian's redis-server (7.0) that `make test` also runs the
# module's suite against; `make test-all` adds the rest (scripts/install-servers.sh).
TEST_SERVERS := valkey-8.1
ALL_SERVERS := valkey-8.1 valkey-9.1 redis-8.2
VALKEY := $(CURDIR)/.servers/valkey-8.1/redis-server
TEST_ENV := REDISLOCK_MODULE=$(CURDIR)/$(MODULE) REDISLOCK_VALKEY=$(VALKEY)

deps:
	@scripts/install-deps.sh
	@scripts/install-servers.sh $(TEST_SERVERS)

build: deps
	cargo build --release --workspace

$(MODULE): build

# One Redis with the module, in the foreground; Ctrl-C stops it.
run: build
	@echo "redislock: Redis on 127.0.0.1:6379 with the module; try: redis-cli LOCK.ACQUIRE demo me 10000"
	@echo "redislock: press Ctrl-C to stop"
	redis-server redis.conf

# Module and client suites on Redis 7.0, then the module's suite on each of
# TEST_SERVERS (REDISLOCK_SERVER picks the server binary the tests start).
test: build
	$(TEST_ENV) cargo test --release --workspace --no-fail-fast
	@for s in $(TEST_SERVERS); do \
	  echo "redislock: module suite on $$s"; \
	  $(TEST_ENV) REDISLOCK_SERVER=$(CURDIR)/.servers/$$s/redis-server cargo test --release -p redislock --no-fail-fast || exit 1; \
	done

test-all: build
	@scripts/install-servers.sh $(ALL_SERVERS)
	$(MAKE) test TEST_SERVERS="$(ALL_SERVERS)"

# Throughput against SET NX PX and the Lua scripts (redis-benchmark), then
# contended waiting against the polling loop (benches/contended.rs), then
# ACQUIRE/RELEASE on a 3-master Redis Cluster (benches/cluster.sh).
bench: build
	REDISLOCK_MODULE=$(CURDIR)/$(MODULE) bash benches/module.sh
	REDISLOCK_MODULE=$(CURDIR)/$(MODULE) cargo bench --bench contended
	REDISLOCK_MODULE=$(CURDIR)/$(MODULE) bash benches/cluster.sh

# Five independent module-equipped masters on 127.0.0.1:7001-7005 for the
# Redlock quorum client; state and logs under .run/<port>.
redlock-up: build
	@for p in $(REDLOCK_PORTS); do \
	  mkdir -p $(RUN_DIR)/$$p; \
	  redis-server redlock.conf --loadmodule $(CURDIR)/$(MODULE) \
	    --port $$p --dir $(CURDIR)/$(RUN_DIR)/$$p --daemonize yes \
	    --pidfile $(CURDIR)/$(RUN_DIR)/$$p/redis.pid --logfile $(CURDIR)/$(RUN_DIR)/$$p/redis.log \
	  && echo "redislock: started 127.0.0.1:$$p"; \
	done
	@echo "redislock: note: a server that did not load data from a clean shutdown refuses grants"
	@echo "redislock:   (TRYAGAIN restart quarantine) for redislock.quarantine = 60 s (redlock.conf):"
	@echo "redislock:   it may have granted, before it lost them, locks a client still holds."
	@echo "redislock:   Fresh servers wait it out once; 'make redlock-down' stops them cleanly, so the"
	@echo "redislock:   next 'make redlock-up' skips it. 'redlock status <resource>' shows the time left."

redlock-down:
	@for p in $(REDLOCK_PORTS); do \
	  f=$(RUN_DIR)/$$p/redis.pid; \
	  if [ -f $$f ] && kill $$(cat $$f) 2>/dev/null; then echo "redislock: stopped 127.0.0.1:$$p"; fi; \
	  rm -f $$f; \
	done

clean:
	cargo clean
	rm -rf $(RUN_DIR)
