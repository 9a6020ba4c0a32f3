#!/usr/bin/env bash
# Benchmark the ratelimit module: `make bench` runs this after `make build`.
# Builds nothing: target/release/libvalkey_ratelimit.so (or $RL_MODULE) must
# exist. Starts its own valkey-server ($VALKEY_SERVER or what
# scripts/valkey-server.sh finds) on a free loopback port and stops it at the
# end. Needs redis-benchmark (apt-get install redis-tools).
#
#   scripts/bench.sh                 # full run, ~3-5 min on 2 cores
#   BENCH_QUICK=1 scripts/bench.sh   # ~30 s smoke run
#
# The Markdown report goes to stdout and to
# bench/results-YYYY-MM-DD-valkey-<version>[-quick].md; progress to stderr.
# More knobs: see the top of bench/bench.py and bench/README.md.
set -euo pipefail

REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODULE="${RL_MODULE:-$REPO/target/release/libvalkey_ratelimit.so}"
if [[ ! -f "$MODULE" ]]; then
    echo "bench.sh: $MODULE not found: run \`make build\` (or set RL_MODULE)" >&2
    exit 1
fi
if ! command -v "${REDIS_BENCHMARK:-redis-benchmark}" >/dev/null; then
    echo "bench.sh: redis-benchmark not found: apt-get install redis-tools" >&2
    exit 1
fi
# Resolve the server once here so an install failure stops before any run.
VALKEY_SERVER="$("$REPO/scripts/valkey-server.sh")"
export VALKEY_SERVER RL_MODULE="$MODULE"
exec python3 "$REPO/bench/bench.py" "$@"
